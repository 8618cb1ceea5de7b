"""How the planner takes up the capacity options (``selector.capacity``): which markets a
spec allows and in what order, the capacity offers of each instance type it fits, and the
closest capacity alternatives for a workload no plan could start (``gpufit up``)."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

from selector.calendar_mode import calendar_offers
from selector.capacity import (
    CAPACITY_FILTER,
    BlockAsk,
    BlockQuote,
    CapacityTerms,
    block_offers,
    flex_start_offers,
    reservation_offer,
)
from selector.catalog import CAPACITY_MARKETS, Catalog, InstanceType, Offer
from selector.cost import CostInputs
from selector.sizing import Rejection, Shape, fit, requirements
from selector.spec import WorkloadSpec

Reject = Callable[[Rejection, int, Offer | None], None]
MULTI_NODE_BLOCK = (
    "a multi-node replica runs as plain EC2 instances, which cannot wait for a Capacity Block to start "
    "(EC2 launches into it only once active) and no block is sold once begun: no block for it"
)
"""https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-launch.html ("You can
only launch an instance into a Capacity Reservation that ... Is in the active state")."""
MULTI_NODE_GCP = (
    "a multi-node replica runs as plain GCP VMs; gpufit takes {option} through the managed "
    "instance group only"
)


def capacity_preference(spec: WorkloadSpec, catalog_markets: dict[str, int | None]) -> dict[str, int | None]:
    """Every market's preference (None = not allowed; lower ranks first). A capacity option
    never pre-empts its machines, so any fault tolerance may use it. ``prefer`` ranks that
    option's offers before the catalog's (whatever their cost); ``require`` allows only it;
    ``allow`` ranks it with the others by expected cost. A reservation is always allowed."""
    cap = spec.capacity
    uses = {"capacity-block": cap.blocks, "flex-start": cap.flex_start, "calendar-reservation": cap.calendar}
    prefs: dict[str, int | None] = {}
    preferred = any(u == "prefer" for u in uses.values())
    required = any(u == "require" for u in uses.values())
    for market, pref in catalog_markets.items():
        prefs[market] = None if pref is None or required else pref + (1 if preferred else 0)
    for market, use in uses.items():
        prefs[market] = None if use == "no" or (required and use != "require") else 0
    prefs["reservation"] = 0 if cap.reservation is not None else None
    return prefs


@dataclass
class CapacityOptions:
    """The capacity offers of each instance type, for one plan."""

    spec: WorkloadSpec
    catalog: Catalog
    inputs: CostInputs
    today: date | None
    live_blocks: tuple[BlockQuote, ...] | None
    reserved_base: tuple[int, float] = (0, 0.0)
    reservation_refused: str | None = None  # why the reservation cannot run the workload
    _regions: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        self._regions = tuple(self.spec.placement.regions or ())
        if self.today is None:
            self.today = date.fromisoformat(self.catalog.as_of[:10]) if _is_date(self.catalog.as_of) else None

    def instance_types(self) -> tuple[tuple[InstanceType, tuple[Offer, ...]], ...]:
        """The catalog's types with their offers; with a capacity option, the types with no
        catalog offer too (a lock's catalog keeps a capacity choice's type without one)."""
        groups = self.catalog.by_instance_type
        cap = self.spec.capacity
        if cap.blocks == "no" and cap.flex_start == "no" and cap.calendar == "no" and cap.reservation is None:
            return groups
        have = {id(it) for it, _ in groups}
        return (*groups, *((it, ()) for it in self.catalog.instance_types if id(it) not in have))

    def offers_for(
        self, it: InstanceType, shape: Shape, allowed: tuple[Offer, ...], reject: Reject
    ) -> tuple[Offer, ...]:
        """``allowed`` (the catalog's offers of ``it``) with its capacity offers; catalog
        offers that the capacity section rules out are rejected here, with the reason."""
        cap = self.spec.capacity
        extra: list[Offer] = []
        hours = self.inputs.run_hours if self.inputs.run_hours is not None else (shape.job_hours or 0.0)
        if cap.blocks != "no" and shape.nodes_per_replica > 1:
            reject(Rejection(CAPACITY_FILTER, MULTI_NODE_BLOCK), 0, None)
        elif cap.blocks != "no":
            found, why = block_offers(
                self.spec, it, shape, hours, self._regions, self.today, self.live_blocks
            )
            extra += found
            for rejection in why:
                reject(rejection, 0, None)  # an option not offered: no catalog offer is counted
        plain_vms = it.cloud == "gcp" and shape.nodes_per_replica > 1
        if cap.flex_start != "no" and plain_vms:
            reject(Rejection(CAPACITY_FILTER, MULTI_NODE_GCP.format(option="flex-start")), 0, None)
        elif cap.flex_start != "no":
            found, why = flex_start_offers(self.spec, it, hours, self.catalog, self._regions)
            extra += found
            for rejection in why:
                reject(rejection, 0, None)  # an option not offered: no catalog offer is counted
        if cap.calendar != "no" and plain_vms:
            reject(
                Rejection(CAPACITY_FILTER, MULTI_NODE_GCP.format(option="a calendar reservation")), 0, None
            )
        elif cap.calendar != "no":
            found, why = calendar_offers(self.spec, it, shape, hours, self.catalog, self._regions, self.today)
            extra += found
            for rejection in why:
                reject(rejection, 0, None)
        held = cap.reservation
        if held is not None and plain_vms and held.cloud == "gcp" and held.instance_type == it.name:
            reject(Rejection(CAPACITY_FILTER, MULTI_NODE_GCP.format(option="a reservation")), 0, None)
        elif held is not None:
            offer, base, refused = reservation_offer(self.spec, it, shape, self.catalog)
            if refused is not None:
                reject(refused, 0, None)
                self.reservation_refused = refused.reason
            if offer is not None:
                self.reserved_base = base
                extra.append(offer)
        kept = allowed
        if held is not None and not cap.overflow:
            kept = ()
            if allowed:
                reject(
                    Rejection(
                        CAPACITY_FILTER,
                        f"capacity.reservation {held.id}: only its {held.count} × {held.instance_type} "
                        f"in {held.zone or held.region} run the plan (capacity.overflow: false)",
                    ),
                    len(allowed),
                    None,
                )
        elif "require" in (cap.blocks, cap.flex_start, cap.calendar) and allowed:
            option = (
                "blocks"
                if cap.blocks == "require"
                else "flex_start"
                if cap.flex_start == "require"
                else "calendar"
            )
            reject(Rejection(CAPACITY_FILTER, f"capacity.{option}: require"), len(allowed), None)
            kept = ()
        return (*kept, *extra) if extra else kept


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text[:10])
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class CapacityAlternative:
    """A capacity option that could run the workload: what, where, when and for how much."""

    kind: str  # capacity-block | flex-start
    cloud: str
    instance_type: str
    region: str
    instances: int
    total_usd: float  # a block: the upfront fee; flex-start: hourly × the job's hours
    hourly_usd: float
    estimate: bool
    start: str | None  # a block's start (ISO, UTC)
    end: str | None
    offering_id: str | None
    note: str

    def describe(self) -> str:
        when = f" from {self.start} to {self.end}" if self.start else ""
        est = " (ESTIMATE)" if self.estimate else ""
        money = "up front" if self.kind == "capacity-block" else "expected"
        return (
            f"{self.kind} {self.instances} × {self.cloud} {self.instance_type} in {self.region}{when}: "
            f"${self.total_usd:,.2f} {money}{est}"
        )


def capacity_alternatives(
    spec: WorkloadSpec,
    catalog: Catalog,
    today: date | None = None,
    live_blocks: tuple[BlockQuote, ...] | None = None,
    excluded: Callable[[Offer], bool] = lambda _o: False,
    limit: int = 5,
) -> list[CapacityAlternative]:
    """The closest Capacity Block and flex-start options for ``spec``, cheapest first, whatever
    ``spec.capacity`` allows (a failover that ran out of plans reports them; nothing is bought).
    ``excluded``: offers a caller has ruled out (a region that had no capacity)."""
    from selector.capacity import block_billed_hours
    from selector.cost import cost_inputs

    req = requirements(spec)
    inputs = cost_inputs(spec, req)
    opened = spec.model_copy(
        update={
            "capacity": spec.capacity.model_copy(
                update={"blocks": "allow", "flex_start": "allow" if spec.task != "serve" else "no"}
            )
        }
    )
    options = CapacityOptions(opened, catalog, inputs, today, live_blocks)
    found: list[CapacityAlternative] = []
    seen: set[tuple[str, str]] = set()
    for it, _offers in catalog.by_instance_type:
        if it.cloud not in spec.placement.clouds or (it.cloud, it.name) in seen:
            continue
        shape = fit(req, it)
        if isinstance(shape, Rejection):
            continue
        seen.add((it.cloud, it.name))
        hours = inputs.run_hours if inputs.run_hours is not None else (shape.job_hours or 0.0)
        extra = options.offers_for(it, shape, (), lambda *_a: None)
        for offer in extra:
            if offer.market not in CAPACITY_MARKETS or offer.market == "reservation" or excluded(offer):
                continue
            terms = offer.capacity
            assert isinstance(terms, CapacityTerms)
            billed = (
                block_billed_hours(offer)
                if offer.market in ("capacity-block", "calendar-reservation")
                else hours
            )
            found.append(
                CapacityAlternative(
                    kind=offer.market,
                    cloud=it.cloud,
                    instance_type=it.name,
                    region=offer.region,
                    instances=terms.block_instances or shape.instances,
                    total_usd=offer.hourly_usd * shape.instances * billed,
                    hourly_usd=offer.hourly_usd * shape.instances,
                    estimate=terms.estimate,
                    start=terms.start.isoformat() if terms.start else None,
                    end=terms.end.isoformat() if terms.end else None,
                    offering_id=terms.offering_id,
                    note=terms.note,
                )
            )
    found.sort(key=lambda a: (a.total_usd, a.cloud, a.instance_type, a.region))
    return found[:limit]


def block_asks(spec: WorkloadSpec, catalog: Catalog) -> list[BlockAsk]:
    """What to ask ``DescribeCapacityBlockOfferings`` for this workload: each AWS type sold as
    blocks that runs it, in each of its block regions the placement allows, at the block size
    and duration the job needs (``selector.capacity``)."""
    from selector.capacity import (
        BLOCK_TERMINATION_LEAD,
        DEADLINE_MARGIN,
        block_days,
        block_instances,
        block_regions,
    )
    from selector.cost import cost_inputs

    req = requirements(spec)
    inputs = cost_inputs(spec, req)
    margin = (BLOCK_TERMINATION_LEAD + DEADLINE_MARGIN).total_seconds() / 3600.0
    asks: list[BlockAsk] = []
    seen: set[str] = set()
    for it, _offers in catalog.by_instance_type:
        if it.cloud != "aws" or "aws" not in spec.placement.clouds or it.name in seen:
            continue
        seen.add(it.name)
        regions = block_regions(it.name)
        if not regions:
            continue
        shape = fit(req, it)
        if isinstance(shape, Rejection):
            continue
        hours = inputs.run_hours if inputs.run_hours is not None else (shape.job_hours or 0.0)
        days, count = block_days(hours + margin), block_instances(shape.instances)
        if days is None or count is None:
            continue
        for region in regions:
            if spec.placement.regions and not any(
                fnmatch.fnmatchcase(region, g) for g in spec.placement.regions
            ):
                continue
            asks.append(
                BlockAsk(
                    it.name, region, count, days * 24, spec.capacity.start_after, spec.capacity.start_before
                )
            )
    return asks
