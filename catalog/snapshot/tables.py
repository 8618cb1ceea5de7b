"""The snapshot's source tables (CSV under ``selector/data/snapshot_src/``): where they are, the
values a row may hold, reading a table, and turning its rows into catalog entries, with every
rule violation collected in ``Problems``."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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
AWS_ZONE_RE = re.compile(r"([a-z]+[0-9]+)-az[0-9]+")  # an AZ ID: use1-az2
SUSPECT_RATIO = 0.55  # an on-demand GPU row under this share of the table's highest is "suspect"
DATE_RE = re.compile(r"\d{4}-\d{2}(-\d{2})?")
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
