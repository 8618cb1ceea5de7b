#!/usr/bin/env python3
"""Build the embedded price/instance snapshot ``selector/data/catalog.json``.

The snapshot is generated, never edited by hand: every figure lives in the human-readable
CSV tables under ``selector/data/snapshot_src/``, each row naming its source key (resolved in
``sources.csv``) and, for prices, the date the price was observed (``as_of``).

Tables
  meta.csv                     snapshot ``as_of`` and ``source`` (no clock is read)
  sources.csv                  source key -> title, url, retrieved
  aws_instance_types.csv       AWS instance specs
  aws_offers.csv               AWS offers; spot rows carry the min/max across AZs
  gcp_machine_types.csv        GCP accelerator-optimized machine types (A2, A3, A4, G2)
                               and the catalog accelerator row that prices their GPUs
  gcp_n1_hosts.csv             N1 host shapes used with attached GPUs
  gcp_n1_limits.csv            max vCPUs / memory of an N1 host per attached T4/V100 count
  gcp_n1_combos.csv            the N1 + GPU combinations shipped (checked against the limits)
  gcp_host_prices.csv          GCP host-VM prices per region and market
  gcp_accelerator_prices.csv   GCP accelerator prices per region, market and GPU count
  spot_interruption.csv        AWS Spot Instance Advisor buckets

A GCP offer is host price + accelerator price, and exists only when both rows exist for the
region and market and both have status ``ok`` (rows marked ``suspect`` are kept in the tables
for the record but never priced). A spot row without per-zone data becomes one region-level
offer (zone null) whose ``hourly_usd`` is the high end of ``hourly_usd_range``.

Usage
  uv run python scripts/build_snapshot.py           # regenerate catalog.json
  uv run python scripts/build_snapshot.py --check   # fail if catalog.json is out of date

The build fails loudly (exit status 1, every problem listed) when a table breaks a rule:
unknown source key, offer for an undeclared instance type, duplicate offer key, non-positive
price, GPU name outside the canonical list, bad market/confidence/bucket, N1 combination
beyond GCP's vCPU/memory limits, malformed date.
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
STATUSES = ("ok", "suspect")
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


def build_aws(problems: Problems) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    types = [
        instance_entry(row, "aws", row["name"], row["name"], problems)
        for row in read_table("aws_instance_types.csv")
    ]
    offers: list[dict[str, Any]] = []
    for row in read_table("aws_offers.csv"):
        where = row["__where__"]
        offer: dict[str, Any] = {
            "cloud": "aws",
            "instance_type": row["instance_type"],
            "region": row["region"],
            "zone": None,
            "market": row["market"],
            "source": row["source"],
            "as_of": row["as_of"],
            "confidence": row["confidence"],
        }
        lo = num(row["price_lo_usd"], where, problems, allow_empty=True)
        hi = num(row["price_hi_usd"], where, problems, allow_empty=True)
        price = num(row["price_usd"], where, problems, allow_empty=True)
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
        offer["__where__"] = where
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
    for table in (host_prices, accel_prices):
        for row in table.values():
            if row["status"] not in STATUSES:
                problems.add(row["__where__"], f"status {row['status']!r}, expected one of {STATUSES}")
            if row["market"] not in MARKETS:
                problems.add(row["__where__"], f"market {row['market']!r}")
            value = num(row["hourly_usd"], row["__where__"], problems)
            if value is not None and not value > 0:
                problems.add(row["__where__"], "price must be positive")
            if row["status"] == "suspect" and not row["notes"]:
                problems.add(row["__where__"], "a suspect row must say why in notes")

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
                host_usd = float(h["hourly_usd"])
                accel_usd = float(a["hourly_usd"])
                note = (
                    f"host {host} {h['hourly_usd']} + {count} x {accel} {a['hourly_usd']} "
                    f"({market}, catalog rows)"
                )
                if market == "spot":
                    note += "; same spot price in every zone the catalog lists for the region"
                offers.append(
                    {
                        "cloud": "gcp",
                        "instance_type": name,
                        "region": region,
                        "zone": None,
                        "market": market,
                        "hourly_usd": round(host_usd + accel_usd, PRICE_DIGITS),
                        "source": a["source"],
                        "as_of": a["as_of"],
                        "confidence": "high",
                        "notes": note,
                        "__where__": f"{h['__where__']} + {a['__where__']}",
                    }
                )
    return types, offers


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
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


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
        n_types = sum(1 for t in doc["instance_types"] if t["cloud"] == cloud)
        lines.append(f"{cloud}: {n_types} instance types")
        counts: dict[tuple[str, str], int] = {}
        for o in doc["offers"]:
            if o["cloud"] == cloud:
                counts[(o["region"], o["market"])] = counts.get((o["region"], o["market"]), 0) + 1
        for (region, market), n in sorted(counts.items()):
            lines.append(f"  {region:<12} {market:<9} {n}")
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
