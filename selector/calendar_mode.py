"""GCP future reservations in calendar mode as capacity offers (``capacity.calendar``).

Google reserves GPU VMs "at your specified date and time, and for a duration of up to 90 days"
(https://cloud.google.com/compute/docs/instances/future-reservations-calendar-mode-overview),
"up to 80 GPU VMs ... in a single request"
(https://cloud.google.com/compute/docs/instances/create-future-reservations-calendar-mode), and
"the delivered reservations will [be] delivered at specified start time and terminated at
specified end time along with terminating the VMs running on it" (compute.v1 discovery
document rev. 20261106, ``FutureReservation.reservationMode`` CALENDAR). The window here is
whole days from ``capacity.start_after`` 00:00 UTC covering the job's hours (a gpufit choice:
the overview's "period between 1 and 90 days" in an older copy).

Price: no per-type calendar-mode price could be sourced. Google says only that "the price for
this reservation is different from on-demand"
(https://cloud.google.com/python/docs/reference/google-cloud-compute-v1beta/latest/google.cloud.compute_v1beta.types.Reservation.ReservationMode)
and that calendar mode, like flex-start, gives "a discount up to 53%"
(https://docs.cloud.google.com/ai-hypercomputer/docs/consumption-models). So the plan counts
the most it can cost, marked ESTIMATE: the on-demand rate for every reserved VM for the whole
window (a reservation holds its capacity, used or not, until its end), as a Capacity Block is
counted. The request cannot be withdrawn once Google approves it ("After you create and submit a
request, you can't cancel, delete, or modify your request", an older copy of the create page):
committed money, created only with ``gpufit:createCalendarReservation: true``.
"""

from __future__ import annotations

import fnmatch
import math
from datetime import UTC, date, datetime, time, timedelta

from selector.capacity import CAPACITY_FILTER, CapacityTerms
from selector.catalog import Catalog, InstanceType, Offer
from selector.consumption import row_for
from selector.sizing import Rejection, Shape
from selector.spec import WorkloadSpec

CALENDAR_MAX_DAYS = 90
CALENDAR_MAX_VMS = 80
CALENDAR_LOOKAHEAD_DAYS = 60
"""Future availability is shown "For GPU or H4D VMs, up to 60 days in advance" (overview): a
window starting later cannot be checked, and is not offered."""
CALENDAR_SLACK_HOURS = 11 / 60
"""The group is resized a minute after the start and torn down 10 minutes before the end
(``selector.capacity.DEADLINE_MARGIN``): the window covers the job's hours and these."""
SOURCE = "https://docs.cloud.google.com/ai-hypercomputer/docs/consumption-models"
AS_OF = "2026-12-04"
BASIS = (
    "ESTIMATE, an upper bound: on-demand rate for the whole window, the most it can cost (no calendar-mode "
    "price found; Google quotes a discount up to 53%)"
)
"""Ranked at this bound, a calendar offer rarely wins on cost under ``calendar: allow``;
``prefer`` ranks it before the catalog's offers whenever it runs the job
(``selector.capacity_plan.capacity_preference``)."""
CONFIRM_KEY = "gpufit:createCalendarReservation"


def calendar_days(hours: float) -> int | None:
    """Whole days covering ``hours`` (at least 1), None past 90."""
    days = max(1, math.ceil(hours / 24.0 - 1e-9))
    return days if days <= CALENDAR_MAX_DAYS else None


def calendar_offers(
    spec: WorkloadSpec,
    it: InstanceType,
    shape: Shape,
    hours: float,
    catalog: Catalog,
    regions: tuple[str, ...],
    today: date | None,
) -> tuple[list[Offer], list[Rejection]]:
    """Calendar-mode offers of a GCP type (one per region with an on-demand price), or why not."""
    if it.cloud != "gcp":
        return [], []
    row = row_for("gcp", it.name)
    if row is None or row.status("calendar-reservation") != "yes":
        return [], []
    start_day = spec.capacity.start_after
    assert start_day is not None  # the spec requires it with calendar
    days = calendar_days(hours + CALENDAR_SLACK_HOURS)
    if days is None:
        return [], [
            Rejection(CAPACITY_FILTER, f"a {hours:,.0f} h job is longer than a 90-day calendar reservation")
        ]
    if shape.instances > CALENDAR_MAX_VMS:
        return [], [Rejection(CAPACITY_FILTER, f"{shape.instances} VMs: a calendar request holds at most 80")]
    if today is not None and not today < start_day <= today + timedelta(days=CALENDAR_LOOKAHEAD_DAYS):
        return [], [
            Rejection(
                CAPACITY_FILTER,
                f"capacity.start_after {start_day}: a calendar reservation starts at 00:00 UTC of a day "
                f"after today and at most {CALENDAR_LOOKAHEAD_DAYS} days ahead (GPU availability is shown "
                "that far)",
            )
        ]
    start = datetime.combine(start_day, time(0), tzinfo=UTC)
    end = start + timedelta(days=days)
    offers = []
    for (cloud, name, region), price in sorted(catalog.on_demand_prices.items()):
        if (cloud, name) != ("gcp", it.name) or (
            regions and not any(fnmatch.fnmatchcase(region, r) for r in regions)
        ):
            continue
        upfront = price * shape.instances * days * 24.0
        note = f"on-demand ${price:,.4f}/h × {shape.instances} VM(s) × {days * 24} h ({BASIS})"
        terms = CapacityTerms(
            kind="calendar-reservation",
            estimate=True,
            source=SOURCE,
            as_of=AS_OF,
            note=note,
            start=start,
            end=end,
            days=days,
            block_instances=shape.instances,
            upfront_usd=upfront,
            rate_usd=price,
            start_after=start_day,
            rate_basis=BASIS,
        )
        offers.append(
            Offer(
                instance=it,
                region=region,
                zone=None,
                market="calendar-reservation",
                hourly_usd=price,
                source=SOURCE,
                as_of=AS_OF,
                confidence="low",
                notes=note,
                capacity=terms,
            )
        )
    if not offers:
        return [], [
            Rejection(CAPACITY_FILTER, f"{it.name} has no on-demand price to bound a calendar reservation")
        ]
    return offers, []
