"""Live EC2 Capacity Block offerings: ``DescribeCapacityBlockOfferings`` per region, read only
when asked (``gpufit plan --capacity-blocks live``, ``gpufit offers --capacity-blocks live``),
so that a plan stays offline and fast by default.

The request (botocore 1.44.8 ``DescribeCapacityBlockOfferingsRequest``): ``InstanceType``,
``InstanceCount``, ``StartDateRange``/``EndDateRange``, ``CapacityDurationHours`` (required; "in
1-day increments up 14 days, and in 7-day increments up to 182 days"), ``MaxResults`` 1-1000,
``NextToken``. Each ``CapacityBlockOffering`` names its id, type, AZ, count, start, end,
duration and ``UpfrontFee`` ("The total price to be paid up front") in ``CurrencyCode``
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityBlockOfferings.html).
The EC2 client is injected (``client_for(region)``): a boto3 client in the CLI, a botocore
``Stubber`` or ``tests.fakes`` in tests (moto 5.2.5 does not implement the call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time
from typing import Any

from selector.capacity import BlockAsk, BlockQuote, latest_block_end

OPERATION = "DescribeCapacityBlockOfferings"
SOURCE = f"https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_{OPERATION}.html"
MAX_RESULTS = 100


def _moment(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def quote_of(raw: dict[str, Any], region: str, today: date) -> BlockQuote | None:
    """A ``CapacityBlockOffering`` as a quote (None when it is not in USD or lacks a field)."""
    try:
        if raw.get("CurrencyCode", "USD") != "USD":
            return None
        fee = float(raw["UpfrontFee"])
        start, end = _moment(raw["StartDate"]), _moment(raw["EndDate"])
        count = int(raw["InstanceCount"])
        hours = (end - start).total_seconds() / 3600.0
        if fee <= 0 or count <= 0 or hours <= 0:
            return None
        return BlockQuote(
            instance_type=str(raw["InstanceType"]),
            region=region,
            rate_usd=fee / (count * hours),
            source=SOURCE,
            as_of=today.isoformat(),
            note=f"{OPERATION} in {region}",
            offering_id=str(raw["CapacityBlockOfferingId"]),
            availability_zone=raw.get("AvailabilityZone"),
            start=start,
            end=end,
            instance_count=count,
            upfront_usd=fee,
        )
    except (KeyError, TypeError, ValueError):
        return None


def block_offerings(
    asks: Iterable[BlockAsk], client_for: Callable[[str], Any], today: date
) -> tuple[tuple[BlockQuote, ...], list[str]]:
    """Every offering AWS returns for ``asks`` (all pages), and a note per ask that failed
    (a refused permission, an error): offerings are one input among others, never fatal."""
    quotes: list[BlockQuote] = []
    notes: list[str] = []
    for ask in asks:
        args: dict[str, Any] = {
            "InstanceType": ask.instance_type,
            "InstanceCount": ask.instance_count,
            "CapacityDurationHours": ask.duration_hours,
            "MaxResults": MAX_RESULTS,
        }
        if ask.start_after is not None:
            args["StartDateRange"] = datetime.combine(ask.start_after, time(0), tzinfo=UTC)
        if ask.start_before is not None:  # EndDateRange is the latest END date
            args["EndDateRange"] = latest_block_end(ask.start_before, ask.duration_hours)
        try:
            client = client_for(ask.region)
            token: str | None = None
            while True:
                page = client.describe_capacity_block_offerings(
                    **args, **({"NextToken": token} if token else {})
                )
                for raw in page.get("CapacityBlockOfferings", []):
                    quote = quote_of(raw, ask.region, today)
                    if quote is not None:
                        quotes.append(quote)
                token = page.get("NextToken")
                if not token:
                    break
        except Exception as err:  # one region's answer is not worth the plan
            notes.append(
                f"{OPERATION} {ask.instance_type} in {ask.region}: {type(err).__name__}: {err}"[:300]
            )
    return tuple(quotes), notes


def boto3_clients() -> Callable[[str], Any]:
    """EC2 clients from the default credential chain, one per region."""
    import boto3

    session = boto3.session.Session()
    made: dict[str, Any] = {}

    def client_for(region: str) -> Any:
        if region not in made:
            made[region] = session.client("ec2", region_name=region)
        return made[region]

    return client_for
