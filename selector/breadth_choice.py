"""A choice broad enough to find machines (issue 25: "every stateless or checkpointed plan should
have several fallbacks unless the user pinned a type").

The plan ranks offers by expected cost. A plan is narrow when the cheapest offer's own fleet (in
its zone, for a zone's spot price) has fewer than ``placement.min_fallbacks`` fallbacks that count
(``breadth_of``: the choice's market, not "very low"; a spot endpoint's on-demand refuge groups
stay in the fleet uncounted). The one rule for a narrow plan: among the cheapest offer, its zone
widened to its region
(``fallbacks.spanning_offer``, priced at the region's dearest zone), the next ranked candidates
(at most ``BREADTH_CANDIDATES_TRIED``, of the cheapest's market preference, each planned with its
own engine build, base, budget, TTL and market rules, and widened the same way) and the broader
region ``breadth.broader_region`` finds for the cheapest one's type, the plan takes the cheapest
by (market preference, expected cost) whose fleet reaches ``placement.min_fallbacks``; when none
does, the cheapest among those of the cheapest's own market with the most fallbacks found (a
fleet still short of the minimum is not worth another market: spot work stays on spot). A
candidate whose obtainability is "very low" (the plan itself expects launching it to fail: an
unconfirmed spot sale, a capacity-block type; ``selector.obtainability.LEVELS``) is never taken
for breadth unless the cheapest offer is "very low" too: breadth must not trade a machine that
can be had for one that cannot. An on-demand or spot fleet is one group; its fallbacks are the
types the group may launch when the first has no capacity (AWS "Auto Scaling groups with
multiple instance types and purchase options":
https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-mixed-instances-groups.html),
so a fleet of one type waits for that one pool. Whenever the choice is not the cheapest offer as
ranked (a widened zone offer included), ``gpufit plan`` and its JSON say so with both offers'
fallbacks and obtainability and the premium (expected, incl. estimated wait);
``placement.min_fallbacks: 0`` ranks by expected cost alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from selector.breadth import (
    GCP_ONE_TYPE_NOTE,
    MIN_FALLBACKS,
    BroaderRegion,
    Late,
    broader_text,
    deadline_text,
)
from selector.catalog import CAPACITY_MARKETS, Offer
from selector.fallbacks import VM_COUNTED_CLOUDS, Fallback, RefugeGap, multinode_note
from selector.obtainability import LEVELS
from selector.sizing import Shape
from selector.spec import WorkloadSpec

BREADTH_CANDIDATES_TRIED = 12
"""How many ranked candidates after the cheapest (the best offer of each instance type and market
in each region, cheapest first) a narrow plan tries for a fleet with ``placement.min_fallbacks``
fallbacks: a bound on the plan's time (each try plans a whole fleet: a fleet cut at the minimum
could leave counted fallbacks behind uncounted ones)."""

T = TypeVar("T")

UNOBTAINABLE = LEVELS[-1]
"""The obtainability level at which the plan itself expects a launch to fail ("very low")."""


def breadth_allows(level: str | None, cheapest_level: str | None) -> bool:
    """Whether a candidate of obtainability ``level`` may be taken for breadth over a cheapest
    offer of ``cheapest_level``: not a "very low" one unless the cheapest is "very low" too."""
    return level != UNOBTAINABLE or cheapest_level == UNOBTAINABLE


def breadth_of(fleet: Sequence[Fallback], market: str, level: str | None) -> int:
    """How many of a fleet's fallbacks count toward ``placement.min_fallbacks``: those in the
    choice's ``market`` whose obtainability ``breadth_allows`` beside the choice's ``level``. A
    spot endpoint's on-demand refuge group (``selector.refuge``) stays in the fleet but is not
    counted: at several times the rate, and never moved back from, it is insurance against a
    spot drought, not breadth; nor is a fallback the plan expects not to launch."""
    return sum(
        1
        for f in fleet
        if f.offer.market == market
        and breadth_allows(f.cost.obtainability.level if f.cost.obtainability else None, level)
    )


@dataclass(slots=True)
class FleetAside:
    """What planning one fleet sets aside: the fallbacks only the deadline turned away
    (``late``) and the on-demand groups only the budget turned away (``gaps``). Each fleet the
    plan tries keeps its own, so only the chosen fleet's reach the plan."""

    late: list[Late] = field(default_factory=list)
    gaps: list[RefugeGap] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class BreadthChoice:
    """The cheapest offer as ranked (unwidened), passed over for the choice because its fleet
    has fewer than ``min_fallbacks`` fallbacks; ``premium_usd``: what the choice costs more
    (expected, incl. the estimated wait); both offers' obtainability levels."""

    passed_over: Offer
    passed_over_instances: int
    passed_over_fallbacks: int
    fallbacks: int
    premium_usd: float
    min_fallbacks: int
    passed_over_obtainability: str | None = None
    obtainability: str | None = None

    @property
    def reached(self) -> bool:
        """Whether the choice's fleet has ``min_fallbacks`` (else it has the most found)."""
        return self.fallbacks >= self.min_fallbacks


def wants_breadth(spec: WorkloadSpec, choice_market: str, fallbacks: int) -> bool:
    """Whether the plan looks past the cheapest offer for a broader fleet: a stateless or
    checkpointed workload (one that has fallbacks at all), no type pinned
    (``placement.instance_types``, the failover attempt pin ``placement.attempt``), a market
    whose fleet takes other types (a block or reservation holds machines of one type) and
    fewer fallbacks than ``placement.min_fallbacks``."""
    placement = spec.placement
    return (
        spec.fault_tolerance != "none"
        and placement.instance_types is None
        and placement.attempt is None
        and choice_market not in CAPACITY_MARKETS
        and fallbacks < placement.min_fallbacks
    )


def fallbacks_wanted(spec: WorkloadSpec) -> int:
    """Below this many fallbacks a plan widens a zone's offer to its region, names a broader
    region and explains the narrow fleet: ``placement.min_fallbacks``, at least ``MIN_FALLBACKS``
    (0 still widens and explains, it only ranks by expected cost alone)."""
    return max(spec.placement.min_fallbacks, MIN_FALLBACKS)


def broadest_first(
    ranked: Iterable[T],
    key: Callable[[T], tuple[float, float]],
    fleet_size: Callable[[T], tuple[T, int]],
    wanted: int,
    known: Iterable[tuple[T, int]] = (),
    short_ok: Callable[[T], bool] = lambda planned: True,
) -> tuple[T, int] | None:
    """The module's rule over ``known`` (planned offers and their fallbacks: the cheapest, its
    widening, the broader region) and ``ranked`` (the candidates after the cheapest, in rank
    order): the cheapest by ``key`` (preference, expected cost) whose fleet has ``wanted``
    fallbacks, else the cheapest of those ``short_ok`` admits (the cheapest's market) with the
    most; None when there are none.
    ``fleet_size`` plans a candidate's fleet: the candidate as planned (a zone's offer widened
    to its region costs the dearest zone's price, so more) and its fallbacks, counted up to
    ``wanted``. Once one has ``wanted``, the walk stops at the first candidate ranked at or after
    it: a candidate's planned cost is at least its ranked one."""
    pool = list(known)
    for candidate in ranked:
        found = [key(p) for p, n in pool if n >= wanted]
        if found and key(candidate) >= min(found):
            break
        pool.append(fleet_size(candidate))
    enough = [item for item in pool if item[1] >= wanted]
    if enough:
        return min(enough, key=lambda item: key(item[0]))
    short = [item for item in pool if short_ok(item[0])]
    if not short:
        return None
    most = max(n for _, n in short)
    return min((item for item in short if item[1] == most), key=lambda item: key(item[0]))


def breadth_note(
    spec: WorkloadSpec,
    offer: Offer,
    shape: Shape,
    fallbacks: int,
    late: Sequence[Late],
    broader: BroaderRegion | None,
    chosen_for_breadth: BreadthChoice | None,
) -> str | None:
    """Why a stateless or checkpointed fleet has fewer fallbacks than ``fallbacks_wanted``
    (``Plan.breadth_note``), or None when it has them or needs none."""
    if spec.fault_tolerance == "none" or fallbacks >= fallbacks_wanted(spec):
        return None
    if spec.placement.instance_types is not None:
        return "placement.instance_types pins the types"
    if offer.market in CAPACITY_MARKETS:
        return f"a {offer.market} holds machines of one type"
    n = fallbacks
    tail = deadline_text(late)
    if chosen_for_breadth is not None:
        tail += (
            f"; taken for placement.min_fallbacks {chosen_for_breadth.min_fallbacks}: no offer tried "
            "has that many, this is the cheapest with the most found"
        )
    else:
        tail += broader_text(broader, fallbacks_wanted(spec))
    if shape.nodes_per_replica > 1:
        return multinode_note(offer, n) + tail
    resumes = spec.task != "serve" and spec.fault_tolerance == "checkpointed"
    grouped = spec.task in ("batch", "serve") or resumes  # fallbacks in MIGs of their own
    if offer.cloud in VM_COUNTED_CLOUDS and n == 0 and not grouped:
        return GCP_ONE_TYPE_NOTE
    if offer.cloud in VM_COUNTED_CLOUDS:
        each = (
            "each VM running the replicas its GPUs hold"
            if spec.task == "batch"
            else "each VM of the choice's GPU count and at least its GPU memory, in a group of its own"
            if resumes
            else "each VM of at least the choice's GPU memory running its replicas (GPUs beyond them "
            "idle), in a group of its own behind the one backend service"
            if spec.task == "serve"
            else "each VM running the choice's replicas, a bigger one of its series with GPUs idle"
        )
        return (
            f"a {offer.cloud} managed instance group keeps one instance template and counts VMs: "
            f"only {n} other type(s) run it in {offer.region}, "
            f"{offer.market}, as {shape.instances} VM(s), {each}, within the budget and ttl"
        ) + tail
    where = offer.region
    if offer.zone is not None and spec.placement.min_fallbacks == 0:
        where = f"{offer.zone} (placement.min_fallbacks 0: not widened to {offer.region}'s zones)"
    elif offer.zone is not None:
        where = f"{offer.zone} (widening to {offer.region}'s zones found no more)"
    note = f"only {n} other type(s) run it in {where}, {offer.market}, within the budget and ttl"
    return note + tail
