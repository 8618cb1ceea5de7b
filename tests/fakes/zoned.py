"""The embedded catalog snapshot reshaped with chosen zones, so a test decides which offers are
zone-specific and which zones the rest are known in.

The snapshot already has zones (AWS spot priced per AZ ID, every other offer region-level with
the zones listing it). So the snapshot is first made region-level throughout: each (cloud,
instance type, region, market) becomes one offer with no zone, the union of its zones and its
highest price. Then ``split`` makes some offers one offer per zone at their own prices, ``only``
gives some offers their own zones, and ``zones`` gives every other offer of a region those
zones. Test plumbing: the prices are the snapshot's, scaled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selector.catalog import SNAPSHOT_FILE, Catalog, catalog_from_doc

OfferKey = tuple[str, str, str, str]
"""(cloud, instance type, region, market)"""


def _key(offer: dict[str, Any]) -> OfferKey:
    return (offer["cloud"], offer["instance_type"], offer["region"], offer["market"])


def region_level_offers(offers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``offers`` with each (cloud, instance type, region, market) merged into one region-level
    offer (``zone`` None): the union of the group's zones (sorted), its highest price (and the
    rest of the fields of the offer that has it), in the order the groups first appear."""
    merged: dict[OfferKey, dict[str, Any]] = {}
    for offer in offers:
        zones = set(offer.get("zones") or ()) | ({offer["zone"]} if offer.get("zone") else set())
        key = _key(offer)
        seen = merged.get(key)
        if seen is not None:
            zones |= set(seen["zones"])
            if seen["hourly_usd"] >= offer["hourly_usd"]:
                offer = seen
        merged[key] = {**offer, "zone": None, "zones": sorted(zones)}
    return list(merged.values())


def zoned_doc(
    split: dict[OfferKey, dict[str, float]] | None = None,
    zones: dict[str, list[str]] | None = None,
    only: dict[OfferKey, list[str]] | None = None,
) -> dict[str, Any]:
    """The snapshot document made region-level (``region_level_offers``), then with each offer
    of ``split`` replaced by one offer per zone (its region-level price times that zone's
    factor), each offer of ``only`` listing its own zones, and every other offer of a region in
    ``zones`` listing those zones. Every key of ``split`` and ``only`` and every region of
    ``zones`` must be in the snapshot (a test that names an offer gone from it says so)."""
    doc: dict[str, Any] = json.loads(SNAPSHOT_FILE.read_text())
    doc["offers"] = [o for o in doc["offers"] if not o.get("unpriced")]  # priced offers only
    split, zones, only = split or {}, zones or {}, only or {}
    regional = region_level_offers(doc["offers"])
    known = {_key(offer) for offer in regional}
    missing = [repr(k) for k in (*split, *only) if k not in known]
    missing += [repr(r) for r in zones if r not in {k[2] for k in known}]
    if missing:
        raise KeyError(f"not in the catalog snapshot: {', '.join(missing)}")
    offers: list[dict[str, Any]] = []
    for offer in regional:
        key = _key(offer)
        if key in split:
            for zone, factor in split[key].items():
                offers.append(
                    {
                        **offer,
                        "zone": zone,
                        "zones": [zone],
                        "hourly_usd": round(offer["hourly_usd"] * factor, 4),
                        "hourly_usd_range": None,
                    }
                )
            continue
        if key in only:
            offer = {**offer, "zones": list(only[key])}
        elif offer["region"] in zones:
            offer = {**offer, "zones": list(zones[offer["region"]])}
        offers.append(offer)
    doc["offers"] = offers
    return doc


def zoned_catalog(
    split: dict[OfferKey, dict[str, float]] | None = None,
    zones: dict[str, list[str]] | None = None,
    only: dict[OfferKey, list[str]] | None = None,
) -> Catalog:
    return catalog_from_doc(zoned_doc(split, zones, only), "zoned snapshot")


def write_zoned(path: Path, **kwargs: Any) -> Path:
    """``zoned_doc(...)`` written to ``path`` (for ``gpufit:catalog`` or ``--catalog``)."""
    path.write_text(json.dumps(zoned_doc(**kwargs)))
    return path
