"""The whole snapshot: sources, both clouds, spot interruption buckets; the rules that span
tables; the document and its one-entry-per-line rendering; a summary."""

from __future__ import annotations

import json
from typing import Any

from catalog.snapshot.aws import build_aws
from catalog.snapshot.gcp import build_gcp
from catalog.snapshot.tables import (
    BUCKETS,
    CANONICAL_GPUS,
    CLOUDS,
    CONFIDENCE,
    DATE_RE,
    INTERCONNECTS,
    MARKETS,
    SCHEMA_VERSION,
    Problems,
    read_table,
)
from selector.price_rules import apply_to_doc

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
        if not DATE_RE.fullmatch(row["retrieved"]):
            problems.add(where, f"retrieved {row['retrieved']!r} is not YYYY-MM[-DD]")
        for field in ("title", "url"):
            if not row[field]:
                problems.add(where, f"empty {field}")
        sources[key] = {"title": row["title"], "url": row["url"], "retrieved": row["retrieved"]}
    return sources


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
        offer_key = (offer["cloud"], offer["instance_type"], offer["region"], offer["zone"], offer["market"])
        if (offer["cloud"], offer["instance_type"]) not in declared:
            problems.add(
                where, f"offer for undeclared instance type {offer['cloud']}/{offer['instance_type']}"
            )
        if offer_key in seen:
            problems.add(where, f"duplicate offer {offer_key}")
        seen.add(offer_key)
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
        if not DATE_RE.fullmatch(offer["as_of"]):
            problems.add(where, f"as_of {offer['as_of']!r} is not YYYY-MM[-DD]")
        if offer["confidence"] not in CONFIDENCE:
            problems.add(where, f"confidence {offer['confidence']!r}")
        if offer["confidence"] == "low" and not offer.get("notes"):
            problems.add(where, "low confidence needs a note saying why")

    seen_int: set[tuple[str, str, str]] = set()
    for entry in doc["spot_interruption"]:
        where = entry.get("__where__", "spot_interruption")
        row_key = (entry["cloud"], entry["region"], entry["instance_type"])
        if row_key in seen_int:
            problems.add(where, f"duplicate interruption row {row_key}")
        seen_int.add(row_key)
        if (entry["cloud"], entry["instance_type"]) not in declared:
            problems.add(where, f"interruption row for undeclared instance type {row_key}")
        if entry["source"] not in sources:
            problems.add(where, f"unknown source key {entry['source']!r}")
        if not DATE_RE.fullmatch(entry["as_of"]):
            problems.add(where, f"as_of {entry['as_of']!r}")

    if not DATE_RE.fullmatch(doc["as_of"]):
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
    before = {id(o): o for o in doc["offers"]}
    doc["rules"] = apply_to_doc(doc)
    kept = {o["__where__"] for o in doc["offers"]}
    doc["rules"]["not-sold-examples"] = sorted(
        {
            f"{o['cloud']} {o['instance_type']} {o['market']}"
            for o in before.values()
            if o["__where__"] not in kept
        }
    )
    for offer in doc["offers"]:
        if offer.get("unpriced") and offer.get("__status__") == "ok":
            problems.add(offer["__where__"], f"{offer['unpriced']}: mark the row suspect")
    validate(doc, problems)
    problems.raise_if_any()
    rules = doc.pop("rules")
    doc["offers"] = strip_private(doc["offers"])
    doc["spot_interruption"] = strip_private(interruptions)
    doc["__rules__"] = rules
    return doc


def render(doc: dict[str, Any]) -> str:
    """The document as JSON with one instance type, offer, source or interruption row per line
    (top-level keys as ``"key": value``): line diffs stay readable and there is little
    whitespace for ``gpufit`` to parse."""

    def one(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    lines = ["{"]
    keys = sorted(k for k in doc if not k.startswith("__"))
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
    unpriced = sum(1 for o in doc["offers"] if o.get("unpriced"))
    lines.append(
        f"offers: {n_offers} ({unpriced} kept but never priced, {low} low confidence); "
        f"spot_interruption rows: {n_int}"
    )
    rules = doc.get("__rules__")
    if rules:
        examples = rules.get("not-sold-examples", [])
        lines.append(
            f"price rules: {rules['not-sold']} offers dropped, their type not sold in their market"
            + (f" ({', '.join(examples)})" if examples else "")
            + f"; {rules['unconfirmed']} in a market no source confirms (low confidence)"
        )
        floor = sum(1 for o in doc["offers"] if "EC2's spot floor" in o.get("unpriced", ""))
        per_gpu = sum(1 for o in doc["offers"] if "floor $" in o.get("unpriced", ""))
        lines.append(
            f"unpriced: {floor} spot offers at EC2's floor, {per_gpu} under a per-GPU floor, "
            f"{unpriced - floor - per_gpu} marked suspect in the tables"
        )
    return "\n".join(lines)
