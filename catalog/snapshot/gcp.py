"""The GCP part of the snapshot: accelerator-optimized machine types and N1 hosts with attached
GPUs, each offer priced as host + accelerator where both rows and a common zone exist."""

from __future__ import annotations

import re
from typing import Any

from catalog.snapshot.tables import (
    MARKETS,
    PRICE_DIGITS,
    STATUSES,
    SUSPECT_RATIO,
    Problems,
    as_int,
    compact,
    instance_entry,
    num,
    price_offer,
    read_table,
)


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
        accel_key = (
            row["accelerator"],
            as_int(row["count"], row["__where__"], problems),
            row["region"],
            row["market"],
        )
        if accel_key in accel_prices:
            problems.add(row["__where__"], f"duplicate accelerator price row {accel_key}")
        accel_prices[accel_key] = row
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
    for name, (host_type, accel, count) in sorted(pricing.items()):
        for region in regions:
            for market in MARKETS:
                h = host_prices.get((host_type, region, market))
                a = accel_prices.get((accel, count, region, market))
                if h is None or a is None:
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
                offer["notes"] = f"host {host_type} {h['hourly_usd']} + {count} x {accel} {a['hourly_usd']}"
                suspect = [r["notes"] for r in (h, a) if r["status"] == "suspect"]
                offer["__status__"] = "suspect" if suspect else "ok"
                if suspect:  # kept for the record, never priced
                    offer["unpriced"] = "; ".join(suspect)
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
