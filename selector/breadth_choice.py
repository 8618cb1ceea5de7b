"""A choice broad enough to find machines (issue 25: "every stateless or checkpointed plan should
have several fallbacks unless the user pinned a type").

The plan ranks offers by expected cost. When the cheapest one's fleet (its zone widened to the
region, ``fallbacks.spanning_offer``) has fewer than ``placement.min_fallbacks`` fallbacks, the
plan takes the cheapest other offer whose own fleet has them: the next ranked candidates in
order, and the broader region ``breadth.broader_region`` finds for the cheapest one's type, each
planned with its own engine build, base, budget, TTL and market rules. An on-demand or spot
fleet is one group; its fallbacks are the types the group may launch when the first has no
capacity (AWS "Auto Scaling groups with multiple instance types and purchase options":
https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-mixed-instances-groups.html),
so a fleet of one type waits for that one pool. The premium paid for the breadth is stated in
``gpufit plan`` and its JSON; ``placement.min_fallbacks: 0`` ranks by expected cost alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
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
from selector.fallbacks import VM_COUNTED_CLOUDS, multinode_note
from selector.sizing import Shape
from selector.spec import WorkloadSpec

BREADTH_CANDIDATES_TRIED = 12
"""How many ranked candidates after the cheapest (one per instance type and market, cheapest
first) a narrow plan tries for a fleet with ``placement.min_fallbacks`` fallbacks: a bound on the
plan's time (each try plans a fleet, stopping at the minimum)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BreadthChoice:
    """The cheapest offer, passed over for the choice because its fleet has fewer than
    ``min_fallbacks`` fallbacks; ``premium_usd``: what the choice costs more (expected)."""

    passed_over: Offer
    passed_over_instances: int
    passed_over_fallbacks: int
    fallbacks: int
    premium_usd: float
    min_fallbacks: int


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
    broader: tuple[T, int] | None = None,
) -> tuple[T, int] | None:
    """The cheapest by ``key`` (preference, expected cost) of ``ranked`` (the candidates after
    the cheapest, in rank order) and ``broader`` (the broader region's offer and its fallbacks,
    at least ``wanted``) whose fleet has ``wanted`` fallbacks; None when none has them.
    ``fleet_size`` plans a candidate's fleet: the candidate as planned (a zone's offer widened
    to its region costs the dearest zone's price, so more) and its fallbacks, counted up to
    ``wanted``. The walk stops at the first candidate ranked at or after the best found: a
    candidate's planned cost is its ranked one or, widened, at its region's dearest zone's price."""
    best = broader
    for candidate in ranked:
        if best is not None and key(candidate) >= key(best[0]):
            break
        planned, found = fleet_size(candidate)
        if found >= wanted and (best is None or key(planned) < key(best[0])):
            best = (planned, found)
    return best


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
        tail += f"; taken for placement.min_fallbacks {chosen_for_breadth.min_fallbacks}"
    else:
        tail += broader_text(broader)
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
    if offer.zone is not None:
        where = f"{offer.zone} (widening to {offer.region}'s zones found no more)"
    note = f"only {n} other type(s) run it in {where}, {offer.market}, within the budget and ttl"
    return note + tail
