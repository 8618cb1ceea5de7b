"""A live Capacity Block offering as a lock keeps it (issue 26): the offering a plan chose with
``--capacity-blocks live`` (its id, Availability Zone, start, end, size and upfront fee), so that
the Pulumi program, which plans offline, re-plans to the same block and buys that very offering
(``PurchaseCapacityBlock`` takes a ``CapacityBlockOfferingId``, botocore 1.44.8), not whatever a
lookup finds at ``pulumi up``. An offering whose start has passed cannot be bought any more.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from selector.capacity import BlockQuote, CapacityTerms
from selector.catalog import Offer

LOCK_KEY = "capacity_block"


def locked_block(offer: Offer) -> dict[str, Any] | None:
    """The lock's record of ``offer``'s live offering; None for any other offer (a block priced
    from a reference rate is looked up when bought)."""
    terms = offer.capacity
    if not isinstance(terms, CapacityTerms) or terms.kind != "capacity-block" or terms.offering_id is None:
        return None
    assert terms.start is not None and terms.end is not None
    return {
        "offering_id": terms.offering_id,
        "instance_type": offer.instance.name,
        "region": offer.region,
        "availability_zone": terms.availability_zone,
        "start": terms.start.isoformat(),
        "end": terms.end.isoformat(),
        "instances": terms.block_instances,
        "upfront_usd": terms.upfront_usd,
        "source": terms.source,
        "as_of": terms.as_of,
    }


def locked_quotes(lock: dict[str, Any]) -> tuple[BlockQuote, ...] | None:
    """The lock's live offering as the quote the plan is re-made with; None when it has none
    (the plan then prices blocks from the reference rates, as when it was locked)."""
    entry = lock.get(LOCK_KEY)
    if not isinstance(entry, dict):
        return None
    start = datetime.fromisoformat(str(entry["start"]))
    end = datetime.fromisoformat(str(entry["end"]))
    count = int(entry["instances"])
    fee = float(entry["upfront_usd"])
    hours = (end - start).total_seconds() / 3600.0
    return (
        BlockQuote(
            instance_type=str(entry["instance_type"]),
            region=str(entry["region"]),
            rate_usd=fee / (count * hours),
            source=str(entry["source"]),
            as_of=str(entry["as_of"]),
            note=f"offering {entry['offering_id']} locked",
            offering_id=str(entry["offering_id"]),
            availability_zone=entry.get("availability_zone"),
            start=start,
            end=end,
            instance_count=count,
            upfront_usd=fee,
        ),
    )


def expired_offering(lock: dict[str, Any], now: datetime) -> str | None:
    """One line when the lock's offering has started (it can no longer be bought); None otherwise."""
    entry = lock.get(LOCK_KEY)
    if not isinstance(entry, dict):
        return None
    start = datetime.fromisoformat(str(entry["start"]))
    if start > now:
        return None
    return (
        f"the locked Capacity Block offering {entry['offering_id']} started at {start:%Y-%m-%d %H:%M} UTC "
        "and can no longer be bought: run `gpufit lock STACK --capacity-blocks live` and review the new block"
    )
