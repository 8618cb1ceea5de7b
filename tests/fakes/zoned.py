"""The embedded catalog snapshot reshaped with zones, as a per-zone catalog has them: some
offers split into one offer per zone at their own prices, the region-level rest given the
zones that offer them. Test plumbing: the prices are the snapshot's, scaled."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from selector.catalog import SNAPSHOT_FILE, Catalog, catalog_from_doc

OfferKey = tuple[str, str, str, str]
"""(cloud, instance type, region, market)"""


def zoned_doc(
    split: dict[OfferKey, dict[str, float]] | None = None,
    zones: dict[str, list[str]] | None = None,
    only: dict[OfferKey, list[str]] | None = None,
) -> dict[str, Any]:
    """The snapshot document with each offer of ``split`` replaced by one offer per zone (its
    price times that zone's factor), each offer of ``only`` listing its own zones, and every
    other offer of a region in ``zones`` listing those zones."""
    doc = copy.deepcopy(json.loads(SNAPSHOT_FILE.read_text()))
    split, zones, only = split or {}, zones or {}, only or {}
    offers: list[dict[str, Any]] = []
    for offer in doc["offers"]:
        key = (offer["cloud"], offer["instance_type"], offer["region"], offer["market"])
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
