"""What a deployment's capacity option asks of the cloud: the reservation it targets, the
Capacity Block it buys (and the confirmation that purchase needs), the flex-start request's
run duration. Pure: read from the plan's choice (``selector.capacity``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from selector.capacity import (
    BLOCK_TERMINATION_LEAD,
    DEADLINE_MARGIN,
    FLEX_MAX_HOURS,
    FLEX_MIN_HOURS,
    CapacityTerms,
    latest_block_end,
)
from selector.catalog import Offer

PURCHASE_KEY = "gpufit:purchaseCapacityBlock"
CALENDAR_KEY = "gpufit:createCalendarReservation"
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"
"""GCP ``ReservationAffinity.key`` for a reservation named in ``values``: "To target a
SPECIFIC_RESERVATION by name, specify compute.googleapis.com/reservation-name as the key"
(https://cloud.google.com/compute/docs/reference/rest/v1/ReservationAffinity)."""
BLOCK_DEADLINE_LEAD = BLOCK_TERMINATION_LEAD + DEADLINE_MARGIN
"""A block's fleet is torn down this long before the block ends (``CapacityTerms.deadline``)."""
BLOCK_PRICE_TOLERANCE = 0.10
"""A block is bought only when the offering's fee is at most this much over the plan's
figure (prices change; the plan's may be a reference estimate): a gpufit choice."""
TAG_BLOCK_FEE = "gpufit:block-fee-usd"
TAG_BLOCK_HOURS = "gpufit:block-hours"
TAG_BLOCK_OFFERING = "gpufit:capacity-block-offering"
"""Tags of a Capacity Block bought: the most its upfront fee can be and its hours, which the
policy pack prices the block's machines from (``policy.blocks.block_backing``)."""


@dataclass(frozen=True, slots=True)
class CapacityTarget:
    """The capacity option of a deployment."""

    kind: str  # capacity-block | flex-start | reservation | calendar-reservation
    reservation_id: str | None = None  # an ODCR id, a resource group ARN, or a GCP reservation
    affinity: str = "specific"
    reserved: int = 0  # a reservation: the machines it holds (the rest run beside it with overflow)
    block_start: datetime | None = None
    block_end: datetime | None = None
    block_instances: int = 0
    block_hours: int = 0
    upfront_usd: float = 0.0
    offering_id: str | None = None
    estimate: bool = True
    start_after: date | None = None
    start_before: date | None = None
    run_hours: float = 0.0  # flex-start: how long its VMs run (the plan's lifetime, not the clock)
    overflow: bool = False  # a reservation: machines beyond it run on-demand beside it

    @property
    def resource_group(self) -> bool:
        return (self.reservation_id or "").startswith("arn:")


def capacity_target(offer: Offer) -> CapacityTarget | None:
    terms = offer.capacity
    if not isinstance(terms, CapacityTerms):
        return None
    if terms.kind in ("capacity-block", "calendar-reservation"):
        assert terms.start is not None and terms.end is not None
        return CapacityTarget(
            kind=terms.kind,
            block_start=terms.start,
            block_end=terms.end,
            block_instances=terms.block_instances,
            block_hours=round((terms.end - terms.start).total_seconds() / 3600),
            upfront_usd=terms.upfront_usd,
            offering_id=terms.offering_id,
            estimate=terms.estimate,
            start_after=terms.start_after,
            start_before=terms.start_before,
        )
    if terms.kind == "reservation":
        return CapacityTarget(
            kind=terms.kind,
            reservation_id=terms.reservation_id,
            affinity=terms.affinity,
            reserved=terms.reserved,
            overflow=terms.overflow,
        )
    return CapacityTarget(kind=terms.kind)


def overflow_machines(target: CapacityTarget | None, machines: int) -> int:
    """The machines of a fleet of ``machines`` beyond its reservation, launched on-demand beside
    it (``selector.capacity_overflow``); 0 when the reservation holds them all."""
    if target is None or target.kind != "reservation" or not target.overflow:
        return 0
    return max(machines - target.reserved, 0)


def purchase_refusal(target: CapacityTarget | None, confirmed: bool) -> str | None:
    """One line when the deployment would buy a Capacity Block without ``PURCHASE_KEY: true``
    (before anything is created); None otherwise."""
    if target is None or target.kind != "capacity-block" or confirmed:
        return None
    assert target.block_start is not None and target.block_end is not None
    estimate = " (reference price, an estimate)" if target.estimate else ""
    return (
        f"capacity block purchase not confirmed: {target.block_instances} instance(s) from "
        f"{target.block_start:%Y-%m-%d %H:%M} to {target.block_end:%Y-%m-%d %H:%M} UTC cost "
        f"${target.upfront_usd:,.2f} up front{estimate}, not refundable; set "
        f"`pulumi config set {PURCHASE_KEY} true` to buy it"
    )


def block_fee_ceiling(target: CapacityTarget) -> float:
    """The most the stack pays for its block: a locked offering's fee, else the plan's figure
    plus the tolerance a looked-up offering may exceed it by."""
    if target.offering_id is not None:
        return target.upfront_usd
    return target.upfront_usd * (1.0 + BLOCK_PRICE_TOLERANCE)


def block_tags(target: CapacityTarget) -> dict[str, str]:
    """The block's fee ceiling and hours, and a locked offering's id (how a later run finds the
    block bought: ``providers.aws.capacity.block_bought``)."""
    tags = {TAG_BLOCK_FEE: f"{block_fee_ceiling(target):.2f}", TAG_BLOCK_HOURS: str(target.block_hours)}
    if target.offering_id is not None:
        tags[TAG_BLOCK_OFFERING] = target.offering_id
    return tags


def calendar_refusal(target: CapacityTarget | None, confirmed: bool, now: datetime) -> str | None:
    """One line when the deployment would request a calendar-mode reservation without
    ``CALENDAR_KEY: true``, or one whose window has begun (Google reserves future windows; the
    group would wait for a start that is past); None otherwise. Before anything is created."""
    if target is None or target.kind != "calendar-reservation":
        return None
    assert target.block_start is not None and target.block_end is not None
    if target.block_start <= now:
        return (
            f"calendar reservation window starts {target.block_start:%Y-%m-%d %H:%M} UTC, which has passed: "
            "re-plan with a later capacity.start_after"
        )
    if confirmed:
        return None
    return (
        f"calendar reservation not confirmed: {target.block_instances} VM(s) from "
        f"{target.block_start:%Y-%m-%d %H:%M} to {target.block_end:%Y-%m-%d %H:%M} UTC cost up to "
        f"${target.upfront_usd:,.2f} (on-demand rate, an estimate), billed for the whole window and "
        f"not cancellable once Google approves it; set `pulumi config set {CALENDAR_KEY} true` to request it"
    )


def offering_window(target: CapacityTarget, now: datetime) -> tuple[datetime, datetime]:
    """``get_capacity_block_offering``'s (StartDateRange, EndDateRange) for the purchase: from
    the start window's first day, never before ``now`` (a block cannot be bought in the past),
    to the latest END of a block starting by its last day (EndDateRange is "The latest end
    date", botocore 1.44.8). Without ``capacity.start_before`` the plan wants the earliest
    block: its last start day is the planned start day, or the day after ``now`` once that
    day's 11:30 UTC start has passed (a gpufit choice: a day's slack, not eight weeks)."""
    assert target.block_start is not None
    earliest = now.astimezone(UTC)
    if target.start_after is not None:
        earliest = max(earliest, datetime.combine(target.start_after, time(0), tzinfo=UTC))
    last_day = target.start_before
    if last_day is None:
        last_day = max(target.block_start.date(), earliest.date() + timedelta(days=1))
    return earliest, latest_block_end(last_day, target.block_hours)


def flex_run_seconds(run_hours: float) -> int:
    """A flex-start resize request's run duration: the plan's lifetime of the machines
    (``deployment.translate.lifetime_hours``: the TTL, else the job's hours with slack), within
    the 600 to 604,800 s the API accepts (``ResizeRequestRequestedRunDurationArgs.seconds``).
    Taken from the plan, never from the clock: the Compute API cannot update a resize request
    (``regionInstanceGroupManagerResizeRequests`` has cancel, delete, get, insert and list only,
    compute.v1 discovery document), so a changed duration on a later ``pulumi up`` would
    replace it, and a new request raises the group's target size by its ``resizeBy`` again."""
    seconds = math.floor(run_hours * 3600)
    return int(min(max(seconds, FLEX_MIN_HOURS * 3600), FLEX_MAX_HOURS * 3600))


def block_wait_refusal(target: CapacityTarget | None, grouped: bool) -> str | None:
    """One line when a Capacity Block would be bought for plain instances (a replica spanning
    nodes), before anything is bought. EC2 launches into a Capacity Reservation only while it
    is active ("You can only launch an instance into a Capacity Reservation that ... Is in the
    active state", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-reservations-launch.html),
    and sells no block that has begun: plain instances, which cannot wait for the start the way
    a scaling group's scheduled action does, could never run in the block paid for."""
    if target is None or target.kind != "capacity-block" or grouped:
        return None
    assert target.block_start is not None
    return (
        f"capacity block from {target.block_start:%Y-%m-%d %H:%M} UTC not bought: a multi-node replica runs "
        "as plain instances, which EC2 launches into a block only once it is active, and an active block "
        "cannot be bought; plan it with capacity.blocks: no, or a reservation"
    )
