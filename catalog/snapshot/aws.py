"""The AWS part of the snapshot: instance types and offers from ``aws_instance_types.csv`` and
``aws_offers.csv``, per zone (AZ ID) or region-wide."""

from __future__ import annotations

from typing import Any

from catalog.snapshot.tables import (
    AWS_ZONE_RE,
    OFFER_STATUSES,
    Problems,
    instance_entry,
    num,
    price_offer,
    read_table,
)


def build_aws(problems: Problems) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    types = [
        instance_entry(row, "aws", row["name"], row["name"], problems)
        for row in read_table("aws_instance_types.csv")
    ]
    zoned: dict[tuple[str, str, str], list[tuple[dict[str, str], float]]] = {}
    regional: dict[tuple[str, str, str], dict[str, str]] = {}
    zone_rows: set[tuple[str, str, str, str]] = set()
    prefix_of_region: dict[str, str] = {}
    region_of_prefix: dict[str, str] = {}
    offers: list[dict[str, Any]] = []
    table = read_table("aws_offers.csv")
    for row in table:
        where, zone = row["__where__"], row["zone"]
        if row["status"] not in OFFER_STATUSES:
            problems.add(where, f"status {row['status']!r}, expected one of {OFFER_STATUSES}")
            continue
        if row["status"] in ("superseded", "suspect"):
            if not row["notes"]:
                problems.add(where, f"a {row['status']} row must say why in notes")
            if row["status"] == "suspect":
                offers.append(_suspect_offer(row, problems))
            continue
        key = (row["instance_type"], row["region"], row["market"])
        lo = num(row["price_lo_usd"], where, problems, allow_empty=True)
        hi = num(row["price_hi_usd"], where, problems, allow_empty=True)
        price = num(row["price_usd"], where, problems, allow_empty=True)
        if zone:
            match = AWS_ZONE_RE.fullmatch(zone)
            if match is None:
                problems.add(where, f"zone {zone!r} is not an AZ ID like use1-az2")
                continue
            prefix = match.group(1)
            if prefix_of_region.setdefault(row["region"], prefix) != prefix:
                problems.add(
                    where,
                    f"zone {zone!r} does not match {row['region']}'s other AZ IDs "
                    f"({prefix_of_region[row['region']]}-az...)",
                )
            if region_of_prefix.setdefault(prefix, row["region"]) != row["region"]:
                problems.add(where, f"zone {zone!r} is an AZ ID of {region_of_prefix[prefix]}")
            if (row["instance_type"], row["region"], zone, row["market"]) in zone_rows:
                problems.add(where, f"duplicate zone row {(row['instance_type'], zone, row['market'])}")
                continue
            zone_rows.add((row["instance_type"], row["region"], zone, row["market"]))
            if lo is not None or hi is not None:
                problems.add(where, "a zone row gives one price_usd, not a lo/hi range")
            if price is None:
                problems.add(where, "no price")
                continue
            zoned.setdefault(key, []).append((row, price))
            continue
        if key in regional:
            problems.add(where, f"duplicate region-wide row {key}")
            continue
        regional[key] = row
        offer = price_offer("aws", row["instance_type"], row["region"], None, [], row["market"], row, where)
        offer["__status__"] = "ok"
        if (lo is None) != (hi is None):
            problems.add(where, "price_lo_usd and price_hi_usd go together")
        if lo is not None and hi is not None:
            if price is not None:
                problems.add(where, "give either price_usd or a lo/hi range, not both")
            if lo > hi:
                problems.add(where, f"range low {lo} above high {hi}")
            offer["hourly_usd"] = hi
            if lo < hi:
                offer["hourly_usd_range"] = [lo, hi]
        elif price is not None:
            offer["hourly_usd"] = price
        else:
            problems.add(where, "no price")
            continue
        if row["notes"]:
            offer["notes"] = row["notes"]
        offers.append(offer)
    for key, group in zoned.items():
        name, region, market = key
        first = group[0][0]
        where = first["__where__"]
        if key in regional:
            other = regional[key]["__where__"]
            problems.add(where, f"{key} is priced both per zone and by the region-wide row {other}")
            continue
        for row, _ in group:
            for field in ("source", "as_of", "confidence"):
                if row[field] != first[field]:
                    problems.add(row["__where__"], f"zone rows of {key} disagree on {field}")
        notes = sorted({row["notes"] for row, _ in group if row["notes"]})
        if len({price for _, price in group}) == 1:
            zones = sorted(row["zone"] for row, _ in group)
            offer = price_offer("aws", name, region, None, zones, market, first, where)
            offer["hourly_usd"] = group[0][1]
            offer["__status__"] = "ok"
            if notes:
                offer["notes"] = "; ".join(notes)
            offers.append(offer)
            continue
        for row, price in group:
            zone = row["zone"]
            offer = price_offer("aws", name, region, zone, [zone], market, row, row["__where__"])
            offer["hourly_usd"] = price
            offer["__status__"] = "ok"
            if row["notes"]:
                offer["notes"] = row["notes"]
            offers.append(offer)
    return types, offers


def _suspect_offer(row: dict[str, str], problems: Problems) -> dict[str, Any]:
    """A ``suspect`` row as an offer kept for the record but never priced (its zone's own,
    even where other zones share its price: a judgement is per row), the notes its reason;
    the build's rules may give a more precise reason (``selector.price_rules``)."""
    zone = row["zone"] or None
    offer = price_offer(
        "aws", row["instance_type"], row["region"], zone, [zone] if zone else [], row["market"], row,
        row["__where__"],
    )
    offer["hourly_usd"] = num(row["price_usd"], row["__where__"], problems) or 0.0
    offer["unpriced"] = row["notes"]
    offer["__status__"] = "suspect"
    return offer
