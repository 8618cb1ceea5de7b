#!/usr/bin/env python3
"""Build the embedded price/instance snapshot ``selector/data/catalog.json``.

The snapshot is generated, never edited by hand: every figure lives in the human-readable
CSV tables under ``selector/data/snapshot_src/``, each row naming its source key (resolved in
``sources.csv``) and, for prices, the date the price was observed (``as_of``).

Tables
  meta.csv                     snapshot ``as_of`` and ``source`` (no clock is read)
  sources.csv                  source key -> title, url, retrieved
  aws_instance_types.csv       AWS instance specs
  aws_offers.csv               AWS prices: one row per instance type, region, zone (AZ ID, e.g.
                               ``use1-az2``) and market as a catalog lists them, or one
                               region-wide row (zone empty) where a source has no zone data
  gcp_machine_types.csv        GCP accelerator-optimized machine types (A2, A3, A4, G2)
                               and the catalog accelerator row that prices their GPUs
  gcp_n1_hosts.csv             N1 host shapes used with attached GPUs
  gcp_n1_limits.csv            max vCPUs / memory of an N1 host per attached T4/V100 count
  gcp_n1_combos.csv            the N1 + GPU combinations shipped (checked against the limits)
  gcp_host_prices.csv          GCP host-VM prices per region and market, with the zones listing them
  gcp_accelerator_prices.csv   GCP accelerator prices per region, market and GPU count, with zones
  spot_interruption.csv        AWS Spot Instance Advisor buckets

Offers and zones. An offer is one instance type, region, market and price. Where every zone a
source lists for a region and market carries the same price, the offer is region-level:
``"zone": null`` and ``"zones"`` the sorted zones listing it. Where the price differs by zone
(AWS spot), there is one offer per zone: ``"zone": "<zone>"``, ``"zones": ["<zone>"]``. A
region-wide row without zone data gives ``"zones": []`` (unknown) and may carry a ``lo``/``hi``
range across zones (``hourly_usd`` is the high end). AWS zones are AZ IDs, GCP zones names
(``us-central1-a``).

Rows marked ``superseded`` or ``suspect`` stay in the tables for the record and are
never priced; each must say why in notes. A GCP offer is host price + accelerator price, and
exists only where both rows exist for the region and market, both have status ``ok``, and at
least one zone lists both (the offer's zones are those). An on-demand accelerator row below
SUSPECT_RATIO x the highest on-demand price the table holds for the same accelerator and count
(about half price, the pattern gpu-cloud-facts.md flags for us-central1 H100 and A100-80GB) must
be marked ``suspect``. So must an AWS spot row at EC2's spot floor, 10 % of the region's
on-demand price (SPOT_FLOOR_RATIO).

Usage
  uv run python scripts/build_snapshot.py           # regenerate catalog.json
  uv run python scripts/build_snapshot.py --check   # fail if catalog.json is out of date

The build fails loudly (exit status 1, every problem listed) when a table breaks a rule:
unknown source key, offer for an undeclared instance type, duplicate offer key (cloud, type,
region, zone, market), duplicate zone row or zone listed twice, malformed zone (an AWS AZ ID
whose prefix disagrees with its region's other AZs, a GCP zone not of its region), a type,
region and market priced both per zone and region-wide, non-positive price, GPU name outside the
canonical list, bad market/confidence/bucket/status, an unflagged about-half-price GPU row, N1
combination beyond GCP's vCPU/memory limits, malformed date.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "selector" / "data" / "snapshot_src"
OUT = ROOT / "selector" / "data" / "catalog.json"

SCHEMA_VERSION = 1
CANONICAL_GPUS = (
    "B200",
    "H200",
    "H100",
    "A100-80GB",
    "A100-40GB",
    "L40S",
    "L4",
    "A10G",
    "T4",
    "V100-16GB",
    "V100-32GB",
)
CLOUDS = ("aws", "gcp")
MARKETS = ("on-demand", "spot")
CONFIDENCE = ("high", "low")
BUCKETS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
INTERCONNECTS = ("efa", "gpudirect-tcpx", "gpudirect-tcpxo", "gpudirect-rdma")
STATUSES = ("ok", "suspect")  # GCP price rows
OFFER_STATUSES = ("ok", "superseded", "suspect")  # AWS offer rows
AWS_ZONE_RE = re.compile(r"^([a-z]+[0-9]+)-az[0-9]+$")  # an AZ ID: use1-az2
SUSPECT_RATIO = 0.55  # an on-demand GPU row under this share of the table's highest is "suspect"
SPOT_FLOOR_RATIO = 0.1
"""EC2's spot price floor: 10 % of the on-demand price. A spot row at the floor is a market
nobody bids in (p5en at a tenth of on-demand): such a price rarely comes with capacity, so
the row must be marked ``suspect`` and is never priced."""
DATE_RE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
PRICE_DIGITS = 5  # the GCP catalog quotes 5 decimals; sums are rounded back to that


class BuildError(Exception):
    pass


class Problems:
    """Collects every rule violation so one run reports them all."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            listing = "\n  ".join(self.items)
            raise BuildError(f"{len(self.items)} problem(s) in the snapshot sources:\n  {listing}")


# ---------------------------------------------------------------- reading the tables


def read_table(name: str) -> list[dict[str, str]]:
    path = SRC / name
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for i, row in enumerate(rows):
        row["__where__"] = f"{name}:{i + 2}"  # header is line 1
        for key, value in list(row.items()):
            if key is None:
                raise BuildError(f"{name}:{i + 2}: more fields than the header declares")
            if value is None:
                raise BuildError(f"{name}:{i + 2}: fewer fields than the header declares")
            row[key] = value.strip()
    return rows


def opt(value: str) -> str | None:
    return value if value != "" else None


def num(value: str, where: str, problems: Problems, *, allow_empty: bool = False) -> float | None:
    if value == "":
        if not allow_empty:
            problems.add(where, "missing number")
        return None
    try:
        return float(value)
    except ValueError:
        problems.add(where, f"not a number: {value!r}")
        return None


def as_int(value: str, where: str, problems: Problems) -> int:
    try:
        return int(value)
    except ValueError:
        problems.add(where, f"not an integer: {value!r}")
        return 0


def as_bool(value: str, where: str, problems: Problems) -> bool:
    if value not in ("true", "false"):
        problems.add(where, f"expected true/false, got {value!r}")
    return value == "true"


def compact(number: float) -> float | int:
    """JSON-friendly number: integers without a trailing .0."""
    return int(number) if float(number).is_integer() else number


# ---------------------------------------------------------------- building


def build_sources(problems: Problems) -> dict[str, dict[str, str]]:
    sources: dict[str, dict[str, str]] = {}
    for row in read_table("sources.csv"):
        where, key = row["__where__"], row["key"]
        if not key:
            problems.add(where, "empty source key")
            continue
        if key in sources:
            problems.add(where, f"duplicate source key {key!r}")
        if not DATE_RE.match(row["retrieved"]):
            problems.add(where, f"retrieved {row['retrieved']!r} is not YYYY-MM[-DD]")
        for field in ("title", "url"):
            if not row[field]:
                problems.add(where, f"empty {field}")
        sources[key] = {"title": row["title"], "url": row["url"], "retrieved": row["retrieved"]}
    return sources


def instance_entry(
    row: dict[str, str], cloud: str, name: str, machine_type: str, problems: Problems
) -> dict[str, Any]:
    where = row["__where__"]
    interconnect = opt(row.get("node_interconnect", ""))
    entry: dict[str, Any] = {
        "cloud": cloud,
        "name": name,
        "machine_type": machine_type,
        "gpu": row["gpu"],
        "gpu_count": as_int(row["gpu_count"], where, problems),
        "attached_accelerator": opt(row.get("attached_accelerator", "")),
        "vcpus": as_int(row["vcpus"], where, problems),
        "memory_gib": compact(num(row["memory_gib"], where, problems) or 0),
        "local_nvme_gb": None,
        "network_gbps": None,
        "nvlink": as_bool(row["nvlink"], where, problems),
        "node_interconnect": interconnect,
        "source": row["source"],
        "confidence": row["confidence"],
    }
    for field in ("local_nvme_gb", "network_gbps"):
        value = num(row.get(field, ""), where, problems, allow_empty=True)
        entry[field] = None if value is None else compact(value)
    if row.get("notes"):
        entry["notes"] = row["notes"]
    return entry


def price_offer(
    cloud: str,
    name: str,
    region: str,
    zone: str | None,
    zones: list[str],
    market: str,
    row: dict[str, str],
    where: str,
) -> dict[str, Any]:
    offer: dict[str, Any] = {
        "cloud": cloud,
        "instance_type": name,
        "region": region,
        "zone": zone,
        "zones": zones,
        "market": market,
        "source": row["source"],
        "as_of": row["as_of"],
        "confidence": row["confidence"],
        "__where__": where,
    }
    return offer


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
    on_demand = {
        (r["instance_type"], r["region"]): float(r["price_usd"])
        for r in table
        if r["market"] == "on-demand" and r["status"] == "ok" and r["price_usd"]
    }
    for row in table:
        where, zone = row["__where__"], row["zone"]
        if row["status"] not in OFFER_STATUSES:
            problems.add(where, f"status {row['status']!r}, expected one of {OFFER_STATUSES}")
            continue
        if row["status"] in ("superseded", "suspect"):
            if not row["notes"]:
                problems.add(where, f"a {row['status']} row must say why in notes")
            continue
        if row["market"] == "spot" and row["price_usd"]:
            od = on_demand.get((row["instance_type"], row["region"]))
            spot = num(row["price_usd"], where, problems)
            if od is not None and spot is not None and spot <= od * SPOT_FLOOR_RATIO + 1e-9:
                problems.add(
                    where,
                    f"spot {spot:g} is at EC2's floor (10 % of on-demand {od:g}): mark it suspect",
                )
                continue
        key = (row["instance_type"], row["region"], row["market"])
        lo = num(row["price_lo_usd"], where, problems, allow_empty=True)
        hi = num(row["price_hi_usd"], where, problems, allow_empty=True)
        price = num(row["price_usd"], where, problems, allow_empty=True)
        if zone:
            match = AWS_ZONE_RE.match(zone)
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
            if notes:
                offer["notes"] = "; ".join(notes)
            offers.append(offer)
            continue
        for row, price in group:
            zone = row["zone"]
            offer = price_offer("aws", name, region, zone, [zone], market, row, row["__where__"])
            offer["hourly_usd"] = price
            if row["notes"]:
                offer["notes"] = row["notes"]
            offers.append(offer)
    return types, offers


def build_gcp(problems: Problems) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    types: list[dict[str, Any]] = []
    pricing: dict[str, tuple[str, str, int]] = {}  # instance name -> (host, accelerator, count)

    for row in read_table("gcp_machine_types.csv"):
        entry = instance_entry(row, "gcp", row["name"], row["name"], problems)
        types.append(entry)
        pricing[row["name"]] = (
            row["name"],
            row["price_accelerator"],
            as_int(row["price_accelerator_count"], row["__where__"], problems),
        )

    hosts = {row["machine_type"]: row for row in read_table("gcp_n1_hosts.csv")}
    limits = {
        (row["accelerator"], as_int(row["count"], row["__where__"], problems)): row
        for row in read_table("gcp_n1_limits.csv")
    }
    for row in read_table("gcp_n1_combos.csv"):
        where = row["__where__"]
        host = hosts.get(row["host"])
        count = as_int(row["count"], where, problems)
        if host is None:
            problems.add(where, f"host {row['host']!r} is not in gcp_n1_hosts.csv")
            continue
        limit = limits.get((row["accelerator"], count))
        if limit is None:
            problems.add(where, f"no N1 limit row for {count} x {row['accelerator']}")
            continue
        vcpus = as_int(host["vcpus"], host["__where__"], problems)
        memory = num(host["memory_gib"], host["__where__"], problems) or 0
        max_vcpus = as_int(limit["max_vcpus"], limit["__where__"], problems)
        max_memory = num(limit["max_memory_gib"], limit["__where__"], problems) or 0
        if vcpus > max_vcpus or memory > max_memory:
            problems.add(
                where,
                f"{row['host']} ({vcpus} vCPU, {memory} GiB) exceeds GCP's limit for {count} x "
                f"{row['accelerator']} ({max_vcpus} vCPU, {max_memory} GiB, {limit['source']})",
            )
        short = row["accelerator"].lower()
        name = f"{row['host']}+{short}x{count}"
        note = (
            f"N1 host with {count} attached {row['attached_accelerator']}; within GCP's limit of "
            f"{max_vcpus} vCPUs / {compact(max_memory)} GiB for this GPU count ({limit['source']})"
        )
        if row["notes"]:
            note = f"{note}; {row['notes']}"
        entry = {
            "cloud": "gcp",
            "name": name,
            "machine_type": row["host"],
            "gpu": row["gpu"],
            "gpu_count": count,
            "attached_accelerator": row["attached_accelerator"],
            "vcpus": vcpus,
            "memory_gib": compact(memory),
            "local_nvme_gb": None,
            "network_gbps": None,
            "nvlink": False,
            "node_interconnect": None,
            "source": host["source"],
            "confidence": "high",
            "notes": note,
        }
        types.append(entry)
        pricing[name] = (row["host"], row["accelerator"], count)

    host_prices: dict[tuple[str, str, str], dict[str, str]] = {}
    for row in read_table("gcp_host_prices.csv"):
        key = (row["machine_type"], row["region"], row["market"])
        if key in host_prices:
            problems.add(row["__where__"], f"duplicate host price row {key}")
        host_prices[key] = row
    accel_prices: dict[tuple[str, int, str, str], dict[str, str]] = {}
    for row in read_table("gcp_accelerator_prices.csv"):
        key = (
            row["accelerator"],
            as_int(row["count"], row["__where__"], problems),
            row["region"],
            row["market"],
        )
        if key in accel_prices:
            problems.add(row["__where__"], f"duplicate accelerator price row {key}")
        accel_prices[key] = row
    zones_of: dict[str, list[str]] = {}
    for table in (host_prices, accel_prices):
        for row in table.values():
            where = row["__where__"]
            if row["status"] not in STATUSES:
                problems.add(where, f"status {row['status']!r}, expected one of {STATUSES}")
            if row["market"] not in MARKETS:
                problems.add(where, f"market {row['market']!r}")
            value = num(row["hourly_usd"], where, problems)
            if value is not None and not value > 0:
                problems.add(where, "price must be positive")
            if row["status"] == "suspect" and not row["notes"]:
                problems.add(where, "a suspect row must say why in notes")
            zones_of[where] = gcp_zones(row, problems)
    check_half_price_rows(accel_prices, problems)

    offers: list[dict[str, Any]] = []
    regions = sorted({region for (_, region, _) in host_prices})
    for name, (host, accel, count) in sorted(pricing.items()):
        for region in regions:
            for market in MARKETS:
                h = host_prices.get((host, region, market))
                a = accel_prices.get((accel, count, region, market))
                if h is None or a is None or h["status"] != "ok" or a["status"] != "ok":
                    continue
                if h["source"] != a["source"] or h["as_of"] != a["as_of"]:
                    problems.add(
                        a["__where__"], "host and accelerator rows of one offer must share source and as_of"
                    )
                zones = sorted(set(zones_of[h["__where__"]]) & set(zones_of[a["__where__"]]))
                if not zones:
                    continue  # no zone lists both the host shape and the GPUs
                offer = price_offer(
                    "gcp",
                    name,
                    region,
                    None,
                    zones,
                    market,
                    {**a, "confidence": "high"},
                    f"{h['__where__']} + {a['__where__']}",
                )
                offer["hourly_usd"] = round(float(h["hourly_usd"]) + float(a["hourly_usd"]), PRICE_DIGITS)
                offer["notes"] = f"host {host} {h['hourly_usd']} + {count} x {accel} {a['hourly_usd']}"
                offers.append(offer)
    return types, offers


def gcp_zones(row: dict[str, str], problems: Problems) -> list[str]:
    """A GCP price row's ``zones``: zone names of the row's region, each once."""
    where, region = row["__where__"], row["region"]
    zones = row["zones"].split()
    if not zones:
        problems.add(where, "no zones: list the zones the catalog gives this price for")
    for zone in zones:
        if not re.fullmatch(re.escape(region) + r"-[a-z]", zone):
            problems.add(where, f"zone {zone!r} is not a zone of {region}")
    if len(set(zones)) != len(zones):
        problems.add(where, f"a zone listed twice in {row['zones']!r}")
    return zones


def check_half_price_rows(
    accel_prices: dict[tuple[str, int, str, str], dict[str, str]], problems: Problems
) -> None:
    """An on-demand GPU row under SUSPECT_RATIO x the highest on-demand price the table holds for
    the same accelerator and count must be marked suspect (it is about half price)."""
    top: dict[tuple[str, int], float] = {}
    for (accel, count, _, market), row in accel_prices.items():
        value = num(row["hourly_usd"], row["__where__"], Problems())
        if market == "on-demand" and value is not None:
            top[(accel, count)] = max(top.get((accel, count), 0.0), value)
    for (accel, count, region, market), row in accel_prices.items():
        value = num(row["hourly_usd"], row["__where__"], Problems())
        if market != "on-demand" or value is None or row["status"] != "ok":
            continue
        if value < SUSPECT_RATIO * top[(accel, count)]:
            problems.add(
                row["__where__"],
                f"{count} x {accel} in {region} at {value} is under {SUSPECT_RATIO} x the table's highest "
                f"({top[(accel, count)]}): mark it suspect or source it",
            )


def build_interruptions(problems: Problems) -> list[dict[str, Any]]:
    out = []
    for row in read_table("spot_interruption.csv"):
        where = row["__where__"]
        if row["bucket"] not in BUCKETS:
            problems.add(where, f"bucket {row['bucket']!r}, expected one of {BUCKETS}")
        out.append(
            {
                "cloud": row["cloud"],
                "region": row["region"],
                "instance_type": row["instance_type"],
                "bucket": row["bucket"],
                "source": row["source"],
                "as_of": row["as_of"],
                "__where__": where,
            }
        )
    return out


# ---------------------------------------------------------------- validation


def validate(doc: dict[str, Any], problems: Problems) -> None:
    sources = doc["sources"]
    declared: set[tuple[str, str]] = set()
    for entry in doc["instance_types"]:
        where = f"instance {entry['cloud']}/{entry['name']}"
        key = (entry["cloud"], entry["name"])
        if key in declared:
            problems.add(where, "declared twice")
        declared.add(key)
        if entry["cloud"] not in CLOUDS:
            problems.add(where, f"cloud {entry['cloud']!r}")
        if entry["gpu"] not in CANONICAL_GPUS:
            problems.add(where, f"GPU {entry['gpu']!r} is not a canonical name {CANONICAL_GPUS}")
        if entry["gpu_count"] < 1:
            problems.add(where, "gpu_count must be at least 1")
        if entry["vcpus"] < 1 or not entry["memory_gib"] > 0:
            problems.add(where, "vcpus and memory_gib must be positive")
        if entry["source"] not in sources:
            problems.add(where, f"unknown source key {entry['source']!r}")
        if entry["confidence"] not in CONFIDENCE:
            problems.add(where, f"confidence {entry['confidence']!r}")
        if entry["confidence"] == "low" and not entry.get("notes"):
            problems.add(where, "low confidence needs a note saying why")
        if entry["node_interconnect"] is not None and entry["node_interconnect"] not in INTERCONNECTS:
            problems.add(where, f"node_interconnect {entry['node_interconnect']!r}")
        if entry["cloud"] == "gcp" and entry["attached_accelerator"] is not None:
            if entry["machine_type"] == entry["name"]:
                problems.add(where, "an N1 + GPU type needs a name distinct from its machine_type")
        elif entry["machine_type"] != entry["name"]:
            problems.add(where, "machine_type differs from name without an attached accelerator")
        for field in ("local_nvme_gb", "network_gbps"):
            value = entry[field]
            if value is not None and value < 0:
                problems.add(where, f"{field} negative")

    seen: set[tuple[str, str, str, str | None, str]] = set()
    for offer in doc["offers"]:
        where = offer.get("__where__", "offer")
        key = (offer["cloud"], offer["instance_type"], offer["region"], offer["zone"], offer["market"])
        if (offer["cloud"], offer["instance_type"]) not in declared:
            problems.add(
                where, f"offer for undeclared instance type {offer['cloud']}/{offer['instance_type']}"
            )
        if key in seen:
            problems.add(where, f"duplicate offer {key}")
        seen.add(key)
        if offer["market"] not in MARKETS:
            problems.add(where, f"market {offer['market']!r}")
        if not offer["hourly_usd"] > 0:
            problems.add(where, f"hourly_usd {offer['hourly_usd']} is not positive")
        zones = offer["zones"]
        if len(set(zones)) != len(zones) or zones != sorted(zones):
            problems.add(where, f"zones {zones} must be sorted, each once")
        if offer["zone"] is not None and zones != [offer["zone"]]:
            problems.add(where, f"a zone-specific offer lists zones [{offer['zone']!r}], not {zones}")
        spread = offer.get("hourly_usd_range")
        if spread is not None:
            if not (0 < spread[0] <= spread[1]) or offer["hourly_usd"] != spread[1]:
                problems.add(where, f"hourly_usd_range {spread} must be [lo, hi] with hourly_usd == hi")
            if offer["zone"] is not None:
                problems.add(where, "a range across zones needs zone null")
        if offer["source"] not in sources:
            problems.add(where, f"unknown source key {offer['source']!r}")
        if not DATE_RE.match(offer["as_of"]):
            problems.add(where, f"as_of {offer['as_of']!r} is not YYYY-MM[-DD]")
        if offer["confidence"] not in CONFIDENCE:
            problems.add(where, f"confidence {offer['confidence']!r}")
        if offer["confidence"] == "low" and not offer.get("notes"):
            problems.add(where, "low confidence needs a note saying why")

    seen_int: set[tuple[str, str, str]] = set()
    for entry in doc["spot_interruption"]:
        where = entry.get("__where__", "spot_interruption")
        key = (entry["cloud"], entry["region"], entry["instance_type"])
        if key in seen_int:
            problems.add(where, f"duplicate interruption row {key}")
        seen_int.add(key)
        if (entry["cloud"], entry["instance_type"]) not in declared:
            problems.add(where, f"interruption row for undeclared instance type {key}")
        if entry["source"] not in sources:
            problems.add(where, f"unknown source key {entry['source']!r}")
        if not DATE_RE.match(entry["as_of"]):
            problems.add(where, f"as_of {entry['as_of']!r}")

    if not DATE_RE.match(doc["as_of"]):
        problems.add("meta.csv", f"as_of {doc['as_of']!r} is not YYYY-MM[-DD]")


def strip_private(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if not k.startswith("__")} for item in items]


def build() -> dict[str, Any]:
    problems = Problems()
    meta = {row["field"]: row["value"] for row in read_table("meta.csv")}
    sources = build_sources(problems)
    aws_types, aws_offers = build_aws(problems)
    gcp_types, gcp_offers = build_gcp(problems)
    interruptions = build_interruptions(problems)

    types = sorted(aws_types + gcp_types, key=lambda e: (e["cloud"], e["name"]))
    offers = sorted(
        aws_offers + gcp_offers,
        key=lambda o: (o["cloud"], o["instance_type"], o["region"], o["zone"] or "", o["market"]),
    )
    interruptions.sort(key=lambda e: (e["cloud"], e["region"], e["instance_type"]))
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "as_of": meta.get("as_of", ""),
        "source": meta.get("source", "embedded snapshot"),
        "sources": sources,
        "instance_types": types,
        "offers": offers,
        "spot_interruption": interruptions,
    }
    validate(doc, problems)
    problems.raise_if_any()
    doc["offers"] = strip_private(offers)
    doc["spot_interruption"] = strip_private(interruptions)
    return doc


def render(doc: dict[str, Any]) -> str:
    """The document as JSON with one instance type, offer, source or interruption row per line
    (top-level keys as ``"key": value``): line diffs stay readable and there is little
    whitespace for ``gpufit`` to parse."""

    def one(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    lines = ["{"]
    keys = sorted(doc)
    for i, key in enumerate(keys):
        value, end = doc[key], ("," if i < len(keys) - 1 else "")
        if isinstance(value, list) and value:
            lines.append(f"{one(key)}: [")
            lines.extend(one(v) + ("," if j < len(value) - 1 else "") for j, v in enumerate(value))
            lines.append("]" + end)
        elif isinstance(value, dict) and value:
            lines.append(f"{one(key)}: {{")
            names = sorted(value)
            lines.extend(
                f"{one(name)}:{one(value[name])}" + ("," if j < len(names) - 1 else "")
                for j, name in enumerate(names)
            )
            lines.append("}" + end)
        else:
            lines.append(f"{one(key)}: {one(value)}{end}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def check_with_loader(doc: dict[str, Any]) -> str:
    """Load the document with the selector's own loader when it is importable."""
    sys.path.insert(0, str(ROOT))
    try:
        from selector.catalog import catalog_from_doc  # type: ignore[import-not-found]
    except ImportError as err:
        return f"selector.catalog not importable ({err}); loader check skipped"
    catalog = catalog_from_doc(json.loads(render(doc)), str(OUT))
    n_types, n_offers = len(catalog.instance_types), len(catalog.offers)
    return f"selector.catalog loads it: {n_types} instance types, {n_offers} offers"


def summary(doc: dict[str, Any]) -> str:
    lines = []
    for cloud in CLOUDS:
        offers = [o for o in doc["offers"] if o["cloud"] == cloud]
        n_types = sum(1 for t in doc["instance_types"] if t["cloud"] == cloud)
        priced = len({o["instance_type"] for o in offers})
        regions = {o["region"] for o in offers}
        zones = {z for o in offers for z in o["zones"]}
        per_zone = sum(1 for o in offers if o["zone"] is not None)
        lines.append(
            f"{cloud}: {n_types} instance types ({priced} priced), {len(offers)} offers "
            f"({per_zone} zone-specific), {len(regions)} regions, {len(zones)} zones"
        )
        for market in MARKETS:
            in_market = [o for o in offers if o["market"] == market]
            n_regions = len({o["region"] for o in in_market})
            lines.append(f"  {market:<9} {len(in_market)} offers in {n_regions} regions")
    low = sum(1 for o in doc["offers"] if o["confidence"] == "low")
    n_offers, n_int = len(doc["offers"]), len(doc["spot_interruption"])
    lines.append(f"offers: {n_offers} ({low} low confidence); spot_interruption rows: {n_int}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if catalog.json differs from a fresh build"
    )
    parser.add_argument("--no-loader", action="store_true", help="skip the selector.catalog load check")
    args = parser.parse_args(argv)
    try:
        doc = build()
        loader = "" if args.no_loader else check_with_loader(doc)
    except BuildError as err:
        print(f"build_snapshot: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # selector.catalog.CatalogError is a ValueError
        print(f"build_snapshot: selector.catalog rejects the snapshot: {err}", file=sys.stderr)
        return 1
    text = render(doc)
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(
                f"build_snapshot: {OUT.relative_to(ROOT)} is out of date; rerun scripts/build_snapshot.py",
                file=sys.stderr,
            )
            return 1
        print(f"{OUT.relative_to(ROOT)} is up to date")
    else:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")
    print(summary(doc))
    if loader:
        print(loader)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
