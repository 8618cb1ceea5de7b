"""A fake EC2 for the Capacity Block calls moto 5.2.5 lacks (``DescribeCapacityBlockOfferings``,
``PurchaseCapacityBlock``): requests are checked against botocore's model (types, required
members, ranges, enums, as ``tests.contracts.aws_model`` checks every request) and against the
rules the service applies beyond it, each with its source; answers come in botocore's output
shape from an inventory a test sets. Used as the ``client_for`` of ``catalog.capacity_blocks``
and by the Pulumi mocks for ``aws.ec2.get_capacity_block_offering``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

from tests.contracts.aws_model import problems

DURATION_RULE = (
    "CapacityDurationHours: 'You must specify the duration in 1-day increments up 14 days, and in "
    "7-day increments up to 182 days' (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/"
    "API_DescribeCapacityBlockOfferings.html)"
)
COUNT_RULE = "InstanceCount: 'Each Capacity Block can have up to 64 instances' (ec2-capacity-blocks.html)"
LEAD_RULE = "a Capacity Block starts 'up to eight weeks in the future' (ec2-capacity-blocks.html)"


class InvalidRequest(Exception):
    """What EC2 answers with ``InvalidParameterValue``; the message names the rule."""


def duration_problem(hours: int) -> str | None:
    days, rest = divmod(int(hours), 24)
    if rest or days < 1 or days > 182 or (days > 14 and days % 7):
        return f"{hours} h: {DURATION_RULE}"
    return None


@dataclass(frozen=True)
class Offering:
    instance_type: str
    region: str
    availability_zone: str
    instance_count: int
    start: datetime
    hours: int
    upfront_fee: float
    offering_id: str

    def as_api(self) -> dict[str, Any]:
        return {
            "CapacityBlockOfferingId": self.offering_id,
            "InstanceType": self.instance_type,
            "AvailabilityZone": self.availability_zone,
            "InstanceCount": self.instance_count,
            "StartDate": self.start,
            "EndDate": self.start + timedelta(hours=self.hours),
            "CapacityBlockDurationHours": self.hours,
            "CapacityBlockDurationMinutes": 0,
            "UpfrontFee": f"{self.upfront_fee:.2f}",
            "CurrencyCode": "USD",
            "Tenancy": "default",
        }


@dataclass
class FakeEc2Capacity:
    """One region's Capacity Block market: the offerings it has, the requests it was sent."""

    region: str
    offerings: list[Offering] = field(default_factory=list)
    now: datetime = datetime(2026, 12, 4, tzinfo=UTC)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    purchased: list[str] = field(default_factory=list)
    page_size: int | None = None  # answer at most this many per page (NextToken after)

    def _check(self, operation: str, params: dict[str, Any]) -> None:
        self.requests.append((operation, dict(params)))
        found = problems("ec2", operation, params)
        if found:
            raise InvalidRequest("; ".join(found))

    def describe_capacity_block_offerings(self, **params: Any) -> dict[str, Any]:
        self._check("DescribeCapacityBlockOfferings", params)
        duration = duration_problem(params["CapacityDurationHours"])
        if duration:
            raise InvalidRequest(duration)
        count = params.get("InstanceCount", 1)
        if not 1 <= count <= 64:
            raise InvalidRequest(f"{count}: {COUNT_RULE}")
        start_after = params.get("StartDateRange")
        if start_after is not None and start_after > self.now + timedelta(weeks=8):
            raise InvalidRequest(f"StartDateRange {start_after}: {LEAD_RULE}")
        latest_end = params.get("EndDateRange")
        matches = [
            o
            for o in self.offerings
            if o.instance_type == params.get("InstanceType")
            and o.instance_count == count
            and o.hours == params["CapacityDurationHours"]
            # botocore 1.44.8 DescribeCapacityBlockOfferingsRequest: StartDateRange "The earliest
            # start date", EndDateRange "The latest end date for the Capacity Block offering".
            and (start_after is None or o.start >= start_after)
            and (latest_end is None or o.start + timedelta(hours=o.hours) <= latest_end)
        ]
        first = int(params.get("NextToken") or 0)
        size = min(self.page_size or len(matches) or 1, params.get("MaxResults") or 1000)
        page = matches[first : first + size]
        answer: dict[str, Any] = {"CapacityBlockOfferings": [o.as_api() for o in page]}
        if first + size < len(matches):
            answer["NextToken"] = str(first + size)
        return answer

    def purchase_capacity_block(self, **params: Any) -> dict[str, Any]:
        self._check("PurchaseCapacityBlock", params)
        offering = next(
            (o for o in self.offerings if o.offering_id == params["CapacityBlockOfferingId"]), None
        )
        if offering is None:
            raise InvalidRequest(f"unknown offering {params['CapacityBlockOfferingId']}")
        self.purchased.append(offering.offering_id)
        return {
            "CapacityReservation": {
                "CapacityReservationId": f"cr-{len(self.purchased):017x}",
                "InstanceType": offering.instance_type,
                "AvailabilityZone": offering.availability_zone,
                "TotalInstanceCount": offering.instance_count,
                "State": "scheduled",
                "ReservationType": "capacity-block",
                "InstanceMatchCriteria": "targeted",
            }
        }


def clients(*markets: FakeEc2Capacity) -> Any:
    """``client_for(region)`` over fake markets (a region without one raises, as a refused call)."""
    by_region = {m.region: m for m in markets}

    def client_for(region: str) -> FakeEc2Capacity:
        if region not in by_region:
            raise InvalidRequest(f"UnauthorizedOperation in {region} (no fake market)")
        return by_region[region]

    return client_for


def first_block(earliest: datetime, hours: int) -> tuple[datetime, datetime]:
    """The first block of a window: it starts at 11:30 UTC on or after ``earliest``."""
    start = datetime.combine(earliest.date(), time(11, 30), tzinfo=UTC)
    if start < earliest:
        start += timedelta(days=1)
    return start, start + timedelta(hours=hours)


def invoke_answer(args: dict[str, Any], region: str, fee: float, now: datetime) -> dict[str, Any]:
    """``aws:ec2/getCapacityBlockOffering`` (the provider's DescribeCapacityBlockOfferings): the
    request checked as the fake checks it, and answered with the first block of the window (a
    start at 11:30 UTC on or after ``startDateRange`` that ends by ``endDateRange``, the latest
    END date) at ``fee``; a window starting before ``now`` or holding no block is refused (the
    data source fails when AWS returns no offering)."""
    hours = int(args["capacityDurationHours"])
    duration = duration_problem(hours)
    if duration:
        raise InvalidRequest(duration)
    if not 1 <= int(args["instanceCount"]) <= 64:
        raise InvalidRequest(COUNT_RULE)
    earliest = datetime.fromisoformat(str(args["startDateRange"]).replace("Z", "+00:00"))
    latest_end = datetime.fromisoformat(str(args["endDateRange"]).replace("Z", "+00:00"))
    if earliest < now:
        raise InvalidRequest(f"startDateRange {earliest.isoformat()} is before now ({now.isoformat()})")
    if earliest > now + timedelta(weeks=8):
        raise InvalidRequest(f"startDateRange {earliest.isoformat()}: {LEAD_RULE}")
    _start, end = first_block(earliest, hours)
    if end > latest_end:
        raise InvalidRequest(f"no Capacity Block offering of {hours} h ends by {latest_end.isoformat()}")
    return {
        **args,
        "capacityBlockOfferingId": "cb-0123456789abcdef0",
        "availabilityZone": f"{region}a",
        "currencyCode": "USD",
        "tenancy": "default",
        "upfrontFee": f"{fee:.2f}",
    }
