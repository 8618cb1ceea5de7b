"""Capacity options beside on-demand and spot: EC2 Capacity Blocks for ML, GCP flex-start and
capacity the user already holds (``capacity`` in the spec).

Each becomes, per instance type the workload fits, an offer in its own market that ranks with
the catalog's on-demand and spot offers by expected cost (``selector.select``):

- **capacity-block**: a block of ``n`` instances for ``d`` days, paid up front for the whole
  block. ``d`` is the job's hours rounded up to the durations AWS sells ("You must specify the
  duration in 1-day increments up 14 days, and in 7-day increments up to 182 days",
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityBlockOfferings.html);
  ``n`` the shape's instances rounded up to the sizes AWS lists ("1, 2, 4, 8, 16, 32, or 64
  instances", the SDK's doc of ``InstanceCount``; whether other counts are sold is unconfirmed, so
  the dearer rounding is taken). The idle tail (hours and instances the job does not use) is paid
  and counted. A block starts "up to eight weeks in the future" and ends at 11:30 UTC
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html). Its price is a
  live offering (``DescribeCapacityBlockOfferings``, ``catalog.capacity_blocks``) or a reference
  rate per instance-hour from ``data/capacity/aws_capacity_blocks.csv`` (dated, an ESTIMATE).
- **flex-start**: a GCP MIG resize request (Dynamic Workload Scheduler): "Compute Engine keeps
  trying to create compute instances until resources become available", then they "run
  uninterrupted for up to seven days"
  (https://docs.cloud.google.com/compute/docs/instances/provisioning-models). Jobs of 10 minutes
  to 7 days; priced from the billing catalog's DWS SKUs when a refresh read them
  (``Catalog.flex_start_prices``), else as the type's on-demand price × a ratio per series from
  ``data/capacity/gcp_flex_start.csv`` (dated, ESTIMATE; on-demand itself where no discount
  figure can be checked, so flex-start never looks cheaper than it may be).
- **reservation**: an AWS On-Demand Capacity Reservation (or a resource group of them) or a GCP
  reservation the user holds. Its machines are already paid: marginal cost 0. A plan needing
  more machines than it holds runs the rest on-demand beside it with ``capacity.overflow``
  (``selector.capacity_overflow``: on AWS the group prefers the reservation,
  ``capacity-reservations-first``; on GCP one group, two versions: the reserved count from the
  reservation, the rest without), and is not offered on it otherwise. With
  ``capacity.overflow`` the catalog's other offers stay feasible; without it the reservation is
  the only feasible offer.
"""

from __future__ import annotations

import csv
import fnmatch
import math
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from pathlib import Path

from selector.capacity_overflow import overflow_refusal
from selector.catalog import Catalog, InstanceType, Offer
from selector.consumption import row_for
from selector.flex_rates import FlexQuote, flex_quote, flex_start_rates
from selector.obtainability import flex_queue_hours
from selector.sizing import Rejection, Shape
from selector.spec import WorkloadSpec

DATA_DIR = Path(__file__).parent / "data" / "capacity"
BLOCK_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
BLOCK_DAILY_UNTIL_DAYS = 14
BLOCK_WEEK_DAYS = 7
BLOCK_MAX_DAYS = 182
BLOCK_LEAD_DAYS = 56  # "up to eight weeks in the future"
BLOCK_END_UTC = time(11, 30)  # "Capacity Blocks end at 11:30AM Coordinated Universal Time (UTC)"
BLOCK_TERMINATION_LEAD = timedelta(minutes=30)
""""The termination process for instances running in a Capacity Block begins at 11:00AM
(UTC) on the final day of the reservation" (the Capacity Blocks user guide)."""
DEADLINE_MARGIN = timedelta(minutes=10)
"""gpufit's own deadline comes this much before AWS starts terminating, so the machine syncs
its outputs first (a gpufit choice)."""
FLEX_MIN_HOURS = 10 / 60
FLEX_MAX_HOURS = 7 * 24.0  # ResizeRequest requested_run_duration: 600 to 604,800 s
CAPACITY_FILTER = "capacity"


def block_days(hours: float) -> int | None:
    """The shortest block AWS sells that covers ``hours``: whole days up to 14, then multiples
    of 7 up to 182; None beyond."""
    days = max(1, math.ceil(hours / 24.0 - 1e-9))
    if days > BLOCK_DAILY_UNTIL_DAYS:
        days = math.ceil(days / BLOCK_WEEK_DAYS) * BLOCK_WEEK_DAYS
    return days if days <= BLOCK_MAX_DAYS else None


def block_instances(instances: int) -> int | None:
    """The smallest block size AWS lists that holds ``instances`` (None above 64)."""
    return next((n for n in BLOCK_COUNTS if n >= instances), None)


def latest_block_end(latest_start: date, duration_hours: int) -> datetime:
    """``DescribeCapacityBlockOfferings``' ``EndDateRange`` for blocks starting by the end of
    ``latest_start``: it bounds the END, not the start ("The latest end date for the Capacity
    Block offering", botocore 1.44.8 ``DescribeCapacityBlockOfferingsRequest``), so a block
    starting that day (at 11:30 UTC) ends ``duration_hours`` later, before midnight + duration."""
    return datetime.combine(latest_start + timedelta(days=1), time(0), tzinfo=UTC) + timedelta(
        hours=duration_hours
    )


def block_end(start: date, days: int) -> datetime:
    """A block starting on ``start`` for ``days`` ends at 11:30 UTC ``days`` later."""
    return datetime.combine(start + timedelta(days=days), BLOCK_END_UTC, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class BlockQuote:
    """A Capacity Block price: a reference rate (per instance-hour, an ESTIMATE) or a live
    offering (its id, AZ, dates, size and upfront fee)."""

    instance_type: str
    region: str  # "*": every Capacity Block region of the type without a row of its own
    rate_usd: float  # $ per instance-hour
    source: str
    as_of: str
    note: str
    offering_id: str | None = None
    availability_zone: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    instance_count: int | None = None
    upfront_usd: float | None = None

    @property
    def live(self) -> bool:
        return self.offering_id is not None


@dataclass(frozen=True, slots=True)
class BlockAsk:
    """One question to AWS: a type, a size and a duration, in a region and a start window."""

    instance_type: str
    region: str
    instance_count: int
    duration_hours: int
    start_after: date | None = None
    start_before: date | None = None


@dataclass(frozen=True, slots=True)
class CapacityTerms:
    """What a capacity offer commits to, for the plan's Capacity line and the provider."""

    kind: str  # capacity-block | flex-start | reservation
    estimate: bool
    source: str
    as_of: str
    note: str
    start: datetime | None = None  # a block's start (11:30 UTC of its first day for a reference)
    end: datetime | None = None
    days: int = 0
    block_instances: int = 0
    upfront_usd: float = 0.0
    rate_usd: float = 0.0
    offering_id: str | None = None
    availability_zone: str | None = None
    reservation_id: str | None = None
    reserved: int = 0
    affinity: str = "specific"
    overflow: bool = False
    start_after: date | None = None  # a block's start window (capacity.start_after/start_before)
    start_before: date | None = None
    rate_basis: str = ""  # flex-start: what its rate rests on (gcp_flex_start.csv ``basis``)

    @property
    def deadline(self) -> datetime | None:
        """When gpufit tears a block's fleet down: before AWS starts terminating its instances."""
        if self.end is None:
            return None
        # A calendar reservation's VMs are terminated "at specified end time" (compute.v1
        # FutureReservation.reservationMode): no lead before it, gpufit's margin only.
        lead = BLOCK_TERMINATION_LEAD if self.kind == "capacity-block" else timedelta(0)
        return self.end - lead - DEADLINE_MARGIN


def _csv(name: str) -> list[dict[str, str]]:
    with (DATA_DIR / name).open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


@lru_cache(maxsize=1)
def reference_blocks() -> tuple[BlockQuote, ...]:
    """The reference Capacity Block rates (``data/capacity/aws_capacity_blocks.csv``)."""
    quotes = []
    for i, raw in enumerate(_csv("aws_capacity_blocks.csv")):
        where = f"aws_capacity_blocks.csv:{i + 2}"
        rate = float(raw["instance_hourly_usd"])
        if not raw["source_url"].startswith("https://") or rate <= 0 or len(raw["as_of"]) != 10:
            raise ValueError(f"{where}: needs an https source, a positive rate and an as_of date")
        quotes.append(
            BlockQuote(
                raw["instance_type"], raw["region"], rate, raw["source_url"], raw["as_of"], raw["notes"]
            )
        )
    return tuple(quotes)


def reference_quote(instance_type: str, region: str) -> BlockQuote | None:
    """The region's own reference row, else the type's "most regions" row (``*``) when AWS
    sells the type as blocks in ``region`` (``data/consumption``)."""
    rows = [q for q in reference_blocks() if q.instance_type == instance_type]
    own = next((q for q in rows if q.region == region), None)
    if own is not None:
        return own
    consumption = row_for("aws", instance_type)
    if consumption is None or region not in consumption.capacity_block_regions:
        return None
    return next((replace(q, region=region) for q in rows if q.region == "*"), None)


def block_regions(instance_type: str) -> tuple[str, ...]:
    row = row_for("aws", instance_type)
    if row is None or row.status("capacity-block") == "no":
        return ()
    return row.capacity_block_regions


def _start(spec: WorkloadSpec, today: date | None) -> tuple[date, Rejection | None]:
    cap = spec.capacity
    start = cap.start_after or today or date.min
    if today is not None:
        start = max(start, today)
        latest = today + timedelta(days=BLOCK_LEAD_DAYS)
        if start > latest:
            return start, Rejection(
                CAPACITY_FILTER,
                f"capacity.start_after {cap.start_after} is more than 8 weeks ahead "
                f"(blocks start by {latest})",
            )
        if cap.start_before is not None and cap.start_before < today:
            return start, Rejection(CAPACITY_FILTER, f"capacity.start_before {cap.start_before} has passed")
    return start, None


def block_offers(
    spec: WorkloadSpec,
    it: InstanceType,
    shape: Shape,
    hours: float,
    regions: tuple[str, ...],
    today: date | None,
    live: tuple[BlockQuote, ...] | None = None,
) -> tuple[list[Offer], list[Rejection]]:
    """Capacity Block offers of ``it`` for the job (one per region), or why there are none.
    ``live``: offerings read from AWS (then reference rates are not used)."""
    if it.cloud != "aws":
        return [], []
    sold_in = block_regions(it.name)
    if not sold_in:
        return [], []
    rejections: list[Rejection] = []
    days = block_days(hours + (BLOCK_TERMINATION_LEAD + DEADLINE_MARGIN).total_seconds() / 3600.0)
    count = block_instances(shape.instances)
    if days is None:
        return [], [
            Rejection(CAPACITY_FILTER, f"a {hours:,.0f} h job is longer than a 182-day Capacity Block")
        ]
    if count is None:
        return [], [
            Rejection(CAPACITY_FILTER, f"{shape.instances} instances: a Capacity Block holds at most 64")
        ]
    start, late = _start(spec, today)
    if late is not None:
        return [], [late]
    offers: list[Offer] = []
    for region in sold_in:
        if regions and not any(fnmatch.fnmatchcase(region, r) for r in regions):
            continue
        if live is not None:
            quote = _best_offering(live, it.name, region, shape.instances, hours, spec)
        else:
            quote = reference_quote(it.name, region)
        if quote is None:
            continue
        offers.append(
            _block_offer(
                it,
                region,
                shape,
                quote,
                days,
                count,
                start,
                spec.capacity.start_after,
                spec.capacity.start_before,
            )
        )
    if not offers and live is not None:
        rejections.append(
            Rejection(
                CAPACITY_FILTER, f"no Capacity Block offering of {it.name} for the job's size and window"
            )
        )
    return offers, rejections


def _best_offering(
    live: tuple[BlockQuote, ...], name: str, region: str, instances: int, hours: float, spec: WorkloadSpec
) -> BlockQuote | None:
    window_end = spec.capacity.start_before
    fits = [
        q
        for q in live
        if q.instance_type == name
        and q.region == region
        and (q.instance_count or 0) >= instances
        and q.start is not None
        and q.end is not None
        and (q.end - q.start).total_seconds() / 3600.0 >= hours
        and (window_end is None or q.start.date() <= window_end)
        and (spec.capacity.start_after is None or q.start.date() >= spec.capacity.start_after)
    ]
    return min(fits, key=lambda q: (q.upfront_usd or math.inf, q.start), default=None)


def _block_offer(
    it: InstanceType,
    region: str,
    shape: Shape,
    quote: BlockQuote,
    days: int,
    count: int,
    start: date,
    start_after: date | None = None,
    start_before: date | None = None,
) -> Offer:
    if quote.live:
        assert quote.start is not None and quote.end is not None and quote.upfront_usd is not None
        block_hours = (quote.end - quote.start).total_seconds() / 3600.0
        upfront, count, begin, end = quote.upfront_usd, quote.instance_count or count, quote.start, quote.end
        days = math.ceil(block_hours / 24.0 - 1e-9)
        note = f"offering {quote.offering_id} in {quote.availability_zone} (a live quote)"
    else:
        block_hours = days * 24.0
        end = block_end(start, days)
        begin = end - timedelta(hours=block_hours)
        upfront = quote.rate_usd * count * block_hours
        note = f"reference rate ${quote.rate_usd:,.2f}/instance-h (ESTIMATE): {quote.note}"
    terms = CapacityTerms(
        kind="capacity-block",
        estimate=not quote.live,
        source=quote.source,
        as_of=quote.as_of,
        note=note,
        start=begin,
        end=end,
        days=days,
        block_instances=count,
        upfront_usd=upfront,
        rate_usd=upfront / (count * block_hours),
        offering_id=quote.offering_id,
        availability_zone=quote.availability_zone,
        start_after=start_after,
        start_before=start_before,
    )
    return Offer(
        instance=it,
        region=region,
        zone=None,
        market="capacity-block",
        hourly_usd=upfront / (block_hours * shape.instances),
        source=quote.source,
        as_of=quote.as_of,
        confidence="high" if quote.live else "low",
        notes=note,
        capacity=terms,
    )


def block_billed_hours(offer: Offer) -> float:
    """A block is paid for its whole duration (the idle tail included)."""
    terms = offer.capacity
    assert isinstance(terms, CapacityTerms) and terms.start is not None and terms.end is not None
    return (terms.end - terms.start).total_seconds() / 3600.0


def flex_start_offers(
    spec: WorkloadSpec, it: InstanceType, hours: float, catalog: Catalog, regions: tuple[str, ...]
) -> tuple[list[Offer], list[Rejection]]:
    """Flex-start offers of a GCP type (one per region with an on-demand price to scale)."""
    if it.cloud != "gcp":
        return [], []
    row = row_for("gcp", it.name)
    if row is None or row.status("flex-start") != "yes":
        return [], []
    if hours > FLEX_MAX_HOURS:
        return [], [
            Rejection(CAPACITY_FILTER, f"flex-start VMs run at most 7 days; the job expects {hours:,.1f} h")
        ]
    ttl = spec.teardown.ttl if spec.teardown is not None else None
    queue = flex_queue_hours()
    if ttl is not None and hours + queue > ttl:
        return [], [
            Rejection(
                CAPACITY_FILTER,
                f"flex-start: the job's {hours:,.1f} h plus an expected queue of {queue:,.1f} h (ESTIMATE) "
                f"exceed teardown.ttl {ttl:g} h: the deadline would cut the run",
            )
        ]
    rate = next((r for r in flex_start_rates() if fnmatch.fnmatchcase(it.name, r.series)), None)
    offers = []
    on_demand = {r: p for (c, n, r), p in catalog.on_demand_prices.items() if (c, n) == ("gcp", it.name)}
    billed = {r: p for (n, r), p in catalog.flex_start_prices.items() if n == it.name}
    for region in sorted(on_demand.keys() | billed.keys()):
        if regions and not any(fnmatch.fnmatchcase(region, r) for r in regions):
            continue
        # a type sold flex-start but not on demand (a3-highgpu-1g) is priced from its DWS SKUs only
        quote = flex_quote(billed.get(region), rate, on_demand.get(region))
        if quote is None:
            continue
        terms = _flex_terms(quote)
        offers.append(
            Offer(
                instance=it,
                region=region,
                zone=None,
                market="flex-start",
                hourly_usd=terms.rate_usd,
                source=terms.source,
                as_of=terms.as_of,
                confidence="low" if terms.estimate else "high",
                notes=terms.note,
                capacity=terms,
            )
        )
    if not offers and rate is None:
        return [], [Rejection(CAPACITY_FILTER, f"no flex-start rate for {it.name}")]
    if not offers:
        return [], [
            Rejection(CAPACITY_FILTER, f"{it.name} has no on-demand price to derive a flex-start rate from")
        ]
    return offers, []


def _flex_terms(quote: FlexQuote) -> CapacityTerms:
    return CapacityTerms(
        kind="flex-start",
        estimate=quote.estimate,
        source=quote.source,
        as_of=quote.as_of,
        note=quote.note,
        rate_usd=quote.hourly_usd,
        rate_basis=quote.basis,
    )


def reservation_offer(
    spec: WorkloadSpec, it: InstanceType, shape: Shape, catalog: Catalog
) -> tuple[Offer | None, tuple[int, float], Rejection | None]:
    """The reservation's offer for ``it`` (its reserved type), the machines it covers as
    (count, $0/h), or why it cannot run the workload."""
    held = spec.capacity.reservation
    assert held is not None
    if it.cloud != held.cloud or it.name != held.instance_type:
        return None, (0, 0.0), None
    covered = min(held.count, shape.instances)
    od = catalog.on_demand_prices.get((it.cloud, it.name, held.region))
    refused = overflow_refusal(spec, it.name, shape, od)  # issue 26: the rest on-demand beside it
    if refused is not None:
        return None, (0, 0.0), refused
    terms = CapacityTerms(
        kind="reservation",
        estimate=False,
        source="capacity.reservation",
        as_of="",
        note=f"reservation {held.id}: {held.count} × {it.name} already paid",
        reservation_id=held.id,
        reserved=held.count,
        affinity=held.affinity,
        overflow=spec.capacity.overflow,
    )
    offer = Offer(
        instance=it,
        region=held.region,
        zone=held.zone,
        market="reservation",
        hourly_usd=od if od is not None else 0.0,
        source="capacity.reservation",
        as_of=catalog.as_of,
        notes=terms.note,
        capacity=terms,
    )
    return offer, (covered, 0.0), None


def describe(offer: Offer, instances: int) -> str:
    """The Capacity line's head for a capacity offer (see ``cli.render.capacity_line``)."""
    terms = offer.capacity
    name = offer.instance.name
    if not isinstance(terms, CapacityTerms):
        return f"{offer.market} {name}"
    if terms.kind == "capacity-block":
        assert terms.start is not None and terms.end is not None
        price = "reference price, ESTIMATE" if terms.estimate else f"offering {terms.offering_id}"
        return (
            f"capacity block {terms.block_instances} × {name} from {terms.start:%Y-%m-%d %H:%M} UTC to "
            f"{terms.end:%Y-%m-%d %H:%M} UTC ({terms.days} d) at ${terms.upfront_usd:,.2f} up front "
            f"({price}, as of {terms.as_of}; committed money, not refundable; the purchase needs "
            "gpufit:purchaseCapacityBlock: true)"
        )
    if terms.kind == "calendar-reservation":
        assert terms.start is not None and terms.end is not None
        return (
            f"calendar reservation {terms.block_instances} × {name} from {terms.start:%Y-%m-%d %H:%M} UTC to "
            f"{terms.end:%Y-%m-%d %H:%M} UTC ({terms.days} d) at most ${terms.upfront_usd:,.2f} (an upper "
            "bound: the on-demand rate for the whole window; Google prices calendar mode below on-demand, "
            f"'a discount up to 53%', with no published rate; ESTIMATE, as of {terms.as_of}; committed once "
            "Google approves it; creating it needs gpufit:createCalendarReservation: true)"
        )
    if terms.kind == "flex-start":
        return (
            f"flex-start {name}: queued until capacity, then guaranteed for the run (at most 7 days; "
            f"rate {terms.rate_basis}, as of {terms.as_of})"
        )
    overflow = instances - min(terms.reserved, instances)
    extra = f", {overflow} more on-demand (capacity.overflow)" if overflow else ""
    return (
        f"reservation {terms.reservation_id} ({min(terms.reserved, instances)} × {name} already paid{extra})"
    )


def capacity_to_dict(offer: Offer, instances: int) -> dict[str, object]:
    """The plan's ``capacity`` in ``--json``: how the capacity is had, what it commits to."""
    terms = offer.capacity
    out: dict[str, object] = {"kind": offer.market, "summary": describe(offer, instances)}
    if not isinstance(terms, CapacityTerms):
        out["committed_usd"] = 0.0
        return out
    out.update(
        estimate=terms.estimate,
        source=terms.source,
        as_of=terms.as_of or None,
        note=terms.note,
        committed_usd=round(terms.upfront_usd, 2)
        if terms.kind in ("capacity-block", "calendar-reservation")
        else 0.0,
    )
    if terms.kind == "calendar-reservation":
        assert terms.start is not None and terms.end is not None
        out["calendar"] = {
            "start": terms.start.isoformat(),
            "end": terms.end.isoformat(),
            "days": terms.days,
            "instances": terms.block_instances,
            "at_most_usd": round(terms.upfront_usd, 2),
            "confirmation": "gpufit:createCalendarReservation: true",
        }
    if terms.kind == "capacity-block":
        assert terms.start is not None and terms.end is not None
        out["block"] = {
            "start": terms.start.isoformat(),
            "end": terms.end.isoformat(),
            "days": terms.days,
            "instances": terms.block_instances,
            "upfront_usd": round(terms.upfront_usd, 2),
            "rate_usd_per_instance_hour": round(terms.rate_usd, 4),
            "offering_id": terms.offering_id,
            "availability_zone": terms.availability_zone,
            "purchase_confirmation": "gpufit:purchaseCapacityBlock: true",
        }
    if terms.kind == "reservation":
        out["reservation"] = {
            "id": terms.reservation_id,
            "reserved": terms.reserved,
            "used": min(terms.reserved, instances),
            "overflow_on_demand": max(instances - terms.reserved, 0),
            "affinity": terms.affinity,
        }
    return out


def block_deadline(offer: Offer) -> datetime:
    """When gpufit tears a block's fleet down (``CapacityTerms.deadline``)."""
    terms = offer.capacity
    assert isinstance(terms, CapacityTerms) and terms.deadline is not None
    return terms.deadline
