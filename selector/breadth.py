"""Where a narrow fleet would be broad: the cheapest other region pricing the choice's type in
its market where the fleet has several fallbacks within the budget and TTL, and what taking it
costs more (expected).

A fleet is one group, and one group is regional (an Auto Scaling group's subnets, a MIG's
zones). A second group in another region would run at the same time as the first (nothing
moves capacity between two groups) and away from the stack's bucket, doubling the spend, so
gpufit does not build one: the plan names the broader region and its premium, and the user
chooses it with ``placement.regions``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from selector.catalog import Catalog, Offer

BROADER_REGIONS_TRIED = 3
"""How many other regions (the choice's type and market, cheapest first) a narrow fleet's plan
looks at for one where the fleet has several fallbacks."""


GCP_ONE_TYPE_NOTE = (
    "a gcp managed instance group keeps one instance template: it takes other machine types by "
    "instance flexibility only with the choice's GPUs in a series Google's code confirms "
    "(selector/data/gcp_instance_flexibility.yaml; placement.gcp_instance_flexibility: true takes "
    "any size of the series, unconfirmed), and only a batch, served or checkpointed job runs in "
    "several groups"
)
"""Why a served or trained GCP plan has no fallbacks (``selector.gcp_flexibility``)."""

MIN_FALLBACKS = 2
"""A stateless or checkpointed fleet should have several fallbacks (issue 25): below this, a
zone-specific spot choice is widened to its region's zones (``fallbacks.spanning_offer``)."""


@dataclass(frozen=True, slots=True)
class Late:
    """A fallback the deadline alone turned away: ``instances`` of ``instance_type`` in
    ``region`` that run the job in ``hours`` (its expected wait for capacity included)."""

    instance_type: str
    region: str
    instances: int
    hours: float


def late_of(late: Sequence[Late], region: str, fallbacks: Sequence[Any]) -> tuple[Late, ...]:
    """The types of ``region`` only the deadline kept out of the fleet (not among the
    ``fallbacks``, ``selector.fallbacks.Fallback``), the fastest offer of each, fastest first."""
    kept = {f.offer.instance.name for f in fallbacks}
    fastest: dict[str, Late] = {}
    for entry in late:
        best = fastest.get(entry.instance_type)
        if (
            entry.region == region
            and entry.instance_type not in kept
            and (best is None or entry.hours < best.hours)
        ):
            fastest[entry.instance_type] = entry
    return tuple(sorted(fastest.values(), key=lambda e: e.hours))


def deadline_text(late: Sequence[Late]) -> str:
    """``; the deadline limits it: p5en.48xlarge (2 instance(s)) takes 52.3 h, past the stack's deadline``."""
    if not late:
        return ""
    named = ", ".join(f"{e.instance_type} ({e.instances} instance(s)) takes {e.hours:,.1f} h" for e in late)
    return f"; the deadline limits it: {named}, past the stack's deadline"


@dataclass(frozen=True, slots=True)
class BroaderRegion:
    """The offer there (region-level when several zones price it), the fallbacks found (at
    least the minimum asked), and the expected cost above the choice's."""

    offer: Offer
    fallbacks: int
    premium_usd: float


def broader_region(
    choice: Offer,
    choice_expected_usd: float,
    catalog: Catalog,
    in_region: Callable[[Offer], tuple[Offer, float, int] | None],
    wanted: int,
    allowed: Callable[[str], bool] = lambda region: True,
) -> BroaderRegion | None:
    """The first of the ``BROADER_REGIONS_TRIED`` cheapest other regions pricing ``choice``'s
    type in its market where ``in_region`` (the plan's own fit, budget, TTL and fallback rules)
    finds ``wanted`` fallbacks, among the regions ``allowed`` (``placement.regions``);
    ``in_region`` answers (the offer planned there, its expected
    cost, the fallbacks) or None."""
    it, market = choice.instance, choice.market
    cheapest: dict[str, Offer] = {}
    for o in catalog.offers:
        if o.instance.name != it.name or o.instance.cloud != it.cloud or o.market != market or o.unpriced:
            continue
        if o.region == choice.region or not allowed(o.region):
            continue
        if o.region not in cheapest or o.hourly_usd < cheapest[o.region].hourly_usd:
            cheapest[o.region] = o
    for offer in sorted(cheapest.values(), key=lambda o: (o.hourly_usd, o.region))[:BROADER_REGIONS_TRIED]:
        found = in_region(offer)
        if found is not None and found[2] >= wanted:
            there, expected, n = found
            return BroaderRegion(there, n, expected - choice_expected_usd)
    return None


def broader_text(broader: BroaderRegion | None, wanted: int = MIN_FALLBACKS) -> str:
    """``; in us-east-1 it has 2+ fallbacks at $12.30 more (expected), not taken: ...``, or why
    none is named: no other region ``placement.regions`` allows, among the
    ``BROADER_REGIONS_TRIED`` cheapest pricing the type, gives ``wanted`` fallbacks (true, too,
    when placement.regions allows no other region)."""
    if broader is None:
        return (
            f"; no other region placement.regions allows, among the {BROADER_REGIONS_TRIED} cheapest "
            f"pricing it, gives {wanted} within the budget and ttl"
        )
    return (
        f"; in {broader.offer.region} it has {broader.fallbacks}+ fallbacks at "
        f"${broader.premium_usd:,.2f} more (expected), not taken: a fleet is one regional group "
        "and the plan ranks by expected cost (set placement.regions to choose it)"
    )
