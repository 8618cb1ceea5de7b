"""Zones in the catalog: what the loader makes of ``zone``/``zones``, what the embedded snapshot
holds, and the rules ``scripts/build_snapshot.py`` enforces on its zone tables."""

from __future__ import annotations

import copy
import csv
import dataclasses
import importlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from selector.catalog import (
    CatalogError,
    Offer,
    _checked_offer,
    _plain_offer,
    catalog_from_doc,
    load_catalog,
)
from selector.datafile import load_json
from tests.conftest import MINI_CATALOG, ROOT

SNAPSHOT = load_catalog()
AWS_AZ_ID = re.compile(r"^[a-z]+[0-9]+-az[0-9]+$")


def _mini_with(*offers: dict[str, Any]) -> dict[str, Any]:
    doc = load_json(MINI_CATALOG)
    doc["offers"].extend(copy.deepcopy(list(offers)))
    return doc


def _offer(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cloud": "aws",
        "instance_type": "g6.xlarge",
        "region": "us-west-2",
        "zone": None,
        "market": "spot",
        "hourly_usd": 0.5,
        "source": "TEST",
        "as_of": "2026-01-01",
        "confidence": "high",
    }
    base.update(fields)
    return base


def _find(catalog: Any, region: str, zone: str | None, market: str = "spot") -> Offer:
    return next(
        o
        for o in catalog.offers
        if o.instance.name == "g6.xlarge" and o.region == region and o.zone == zone and o.market == market
    )


# ------------------------------------------------------------------------------ the loader


def test_zones_are_parsed_and_default_to_unknown() -> None:
    catalog = catalog_from_doc(_mini_with(_offer(zones=["usw2-az1", "usw2-az2", "usw2-az3"])), "zones.json")
    offer = _find(catalog, "us-west-2", None)
    assert offer.zones == ("usw2-az1", "usw2-az2", "usw2-az3")
    # the fixture's own offers carry no zones: unknown
    assert all(o.zones == () for o in catalog.offers if o is not offer)


def test_a_per_zone_spot_offer_keeps_its_zone() -> None:
    catalog = catalog_from_doc(
        _mini_with(
            _offer(zone="usw2-az1", zones=["usw2-az1"], hourly_usd=0.41),
            _offer(zone="usw2-az2", zones=["usw2-az2"], hourly_usd=0.47),
            _offer(zone="usw2-az4", hourly_usd=0.52),  # zones absent: the zone itself
        ),
        "zones.json",
    )
    for zone, price in (("usw2-az1", 0.41), ("usw2-az2", 0.47), ("usw2-az4", 0.52)):
        offer = _find(catalog, "us-west-2", zone)
        assert (offer.zone, offer.zones, offer.hourly_usd) == (zone, (zone,), price)
        assert offer.key == ("aws", "g6.xlarge", "us-west-2", zone, "spot")


def test_a_region_level_offer_lists_its_zones_in_the_snapshot() -> None:
    p5 = next(
        o
        for o in SNAPSHOT.offers
        if o.instance.name == "p5.48xlarge" and o.region == "us-east-1" and o.market == "on-demand"
    )
    assert p5.zone is None and p5.hourly_usd == 55.04
    assert len(p5.zones) >= 2 and all(z.startswith("use1-az") for z in p5.zones)
    assert list(p5.zones) == sorted(p5.zones)
    gcp = [o for o in SNAPSHOT.offers if o.instance.cloud == "gcp"]
    assert gcp and all(o.zone is None and o.zones for o in gcp)
    assert all(z.startswith(o.region + "-") for o in gcp for z in o.zones)


def test_snapshot_zones_follow_the_agreed_semantics() -> None:
    by_group: dict[tuple[str, str, str, str], list[Offer]] = {}
    for o in SNAPSHOT.offers:
        assert o.zones, f"{o.key}: every snapshot offer lists the zones its source gives"
        assert len(set(o.zones)) == len(o.zones) and list(o.zones) == sorted(o.zones), o.key
        assert o.hourly_usd_range is None, o.key
        if o.instance.cloud == "aws":
            assert all(AWS_AZ_ID.match(z) for z in o.zones), o.key
        if o.zone is not None:
            assert o.zones == (o.zone,), o.key
        by_group.setdefault((o.instance.cloud, o.instance.name, o.region, o.market), []).append(o)
    per_zone = 0
    for key, group in by_group.items():
        if len(group) == 1:
            continue
        # several offers for one type, region and market: one per zone, each its own price
        assert all(o.zone is not None for o in group), key
        assert len({o.hourly_usd for o in group}) > 1, key
        per_zone += len(group)
    assert per_zone > 100
    spot_use1 = [
        o
        for o in SNAPSHOT.offers
        if o.instance.name == "p5.48xlarge" and o.region == "us-east-1" and o.market == "spot"
    ]
    assert spot_use1 and all(o.zone is None or AWS_AZ_ID.match(o.zone) for o in spot_use1)


def test_snapshot_covers_many_regions_and_zones() -> None:
    for cloud, regions, zones in (("aws", 20, 60), ("gcp", 25, 60)):
        offers = [o for o in SNAPSHOT.offers if o.instance.cloud == cloud]
        assert len({o.region for o in offers}) >= regions, cloud
        assert len({z for o in offers for z in o.zones}) >= zones, cloud
    assert any(o.zone is not None for o in SNAPSHOT.offers if o.market == "spot")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"zones": "usw2-az1"}, "zones must be a list"),
        ({"zones": ["usw2-az1", ""]}, "zones must be a list"),
        ({"zones": ["usw2-az1", 3]}, "zones must be a list"),
        ({"zones": ["usw2-az1", "usw2-az1"]}, "lists a zone twice"),
        ({"zone": "usw2-az1", "zones": ["usw2-az1", "usw2-az2"]}, "zone-specific offer"),
        ({"zone": "usw2-az1", "zones": ["usw2-az2"]}, "zone-specific offer"),
        ({"zone": "usw2-az1", "zones": []}, "zone-specific offer"),
        ({"zone": "usw2-az1", "hourly_usd_range": [0.4, 0.5]}, "hourly_usd_range spans zones"),
        ({"zone": ""}, "zone"),
    ],
)
def test_loader_rejects_bad_zones(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        catalog_from_doc(_mini_with(_offer(**fields)), "bad.json")


def test_one_offer_per_zone_but_not_twice() -> None:
    twice = _offer(zone="usw2-az1", zones=["usw2-az1"])
    with pytest.raises(CatalogError, match="duplicate offer"):
        catalog_from_doc(_mini_with(twice, twice), "bad.json")
    # the same type, region and market in two zones, and region-level, are three offers
    catalog_from_doc(_mini_with(twice, _offer(zone="usw2-az2"), _offer(zones=["usw2-az3"])), "ok.json")


def test_the_fast_path_builds_the_same_offers_as_the_checked_path() -> None:
    doc = load_json(ROOT / "selector" / "data" / "catalog.json")
    catalog = catalog_from_doc(doc, "snapshot.json")
    types = {(it.cloud, it.name): it for it in catalog.instance_types}
    buckets = {(e["cloud"], e["region"], e["instance_type"]): e["bucket"] for e in doc["spot_interruption"]}
    extra = [
        _offer(zones=["usw2-az1"], notes="n", stale=True),
        _offer(zone="usw2-az1", market="on-demand", hourly_usd=1),
        _offer(confidence="low"),
        _offer(unpriced="at EC2's spot floor"),
        _offer(zone="usw2-az1", market="spot"),
        _offer(zones=["usw2-az1", "usw2-az2"], market="spot"),
    ]
    # placement scores: a zone's own, and a region-level offer gets the best of its zones'
    scores = {
        ("aws", "us-west-2", "usw2-az1", "g6.xlarge"): 7,
        ("aws", "us-west-2", "usw2-az2", "g6.xlarge"): 3,
    }
    shared: dict[Any, Any] = {}
    for i, entry in enumerate(doc["offers"] + extra):
        fast = _plain_offer(entry, types, buckets, shared, scores)
        assert fast is not None, entry
        slow = _checked_offer(entry, types, buckets, f"offers[{i}]", scores)
        for f in dataclasses.fields(Offer):
            assert getattr(fast, f.name) == getattr(slow, f.name), (entry, f.name)
            assert type(getattr(fast, f.name)) is type(getattr(slow, f.name)), (entry, f.name)
        assert fast == slow and hash(fast.key) == hash(slow.key)
        if entry in extra[-2:]:
            assert fast.placement_score == 7
    assert len(catalog.offers) + len(catalog.unpriced) == len(doc["offers"])
    reasons = {e["unpriced"] for e in doc["offers"] if e.get("unpriced")}
    assert {o.unpriced for o in catalog.unpriced} == reasons
    # what the fast path declines goes to the checked path (and is accepted or explained there)
    assert _plain_offer(_offer(hourly_usd_range=[0.4, 0.5]), types, buckets, {}, {}) is None
    assert _plain_offer(_offer(hourly_usd=True), types, buckets, {}, {}) is None
    assert _plain_offer(_offer(zone="usw2-az1", zones=["usw2-az9"]), types, buckets, {}, {}) is None
    assert _plain_offer(_offer(unpriced=1), types, buckets, {}, {}) is None


# ------------------------------------------------------------------------------ the build


def _build_module() -> ModuleType:
    return importlib.import_module("catalog.snapshot")


@pytest.fixture
def tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    """The build script, reading a copy of the snapshot tables that a test may edit."""
    module = _build_module()
    src = tmp_path / "snapshot_src"
    shutil.copytree(module.SRC, src)
    monkeypatch.setattr("catalog.snapshot.tables.SRC", src)
    return module, src


def _edit(path: Path, change: Callable[[list[dict[str, str]]], None]) -> None:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    change(rows)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _first(rows: list[dict[str, str]], **match: str) -> dict[str, str]:
    return next(r for r in rows if all(r[k] == v for k, v in match.items()))


def test_the_copied_tables_build(tables: tuple[ModuleType, Path]) -> None:
    module, _ = tables
    doc = module.build()
    assert len(doc["offers"]) == len(SNAPSHOT.offers) + len(SNAPSHOT.unpriced)


def test_equal_zone_prices_make_one_region_offer_and_unequal_ones_one_per_zone(
    tables: tuple[ModuleType, Path],
) -> None:
    module, src = tables
    header = (
        "instance_type,region,zone,market,price_usd,price_lo_usd,price_hi_usd,"
        "source,as_of,confidence,status,notes"
    )
    rows = [
        "g6.xlarge,us-east-1,use1-az4,on-demand,0.8048,,,SC_AWS8,2025-06,high,ok,",
        "g6.xlarge,us-east-1,use1-az2,on-demand,0.8048,,,SC_AWS8,2025-06,high,ok,",
        "g6.xlarge,us-east-1,use1-az4,spot,0.31,,,SC_AWS8,2025-06,high,ok,",
        "g6.xlarge,us-east-1,use1-az2,spot,0.29,,,SC_AWS8,2025-06,high,ok,",
        "g6.xlarge,us-west-2,,spot,,0.2,0.3,SC_AWS8,2025-06,high,ok,",
    ]
    (src / "aws_offers.csv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    problems = module.Problems()
    _, offers = module.build_aws(problems)
    assert problems.items == []
    got = sorted(
        (
            o["region"],
            o["market"],
            o["zone"] or "",
            tuple(o["zones"]),
            o["hourly_usd"],
            o.get("hourly_usd_range"),
        )
        for o in offers
    )
    assert got == [
        ("us-east-1", "on-demand", "", ("use1-az2", "use1-az4"), 0.8048, None),
        ("us-east-1", "spot", "use1-az2", ("use1-az2",), 0.29, None),
        ("us-east-1", "spot", "use1-az4", ("use1-az4",), 0.31, None),
        ("us-west-2", "spot", "", (), 0.3, [0.2, 0.3]),  # a row without zone data keeps its range
    ]


def _aws_zone_row(rows: list[dict[str, str]]) -> dict[str, str]:
    return _first(rows, instance_type="p5.48xlarge", region="us-east-1", market="spot", status="ok")


@pytest.mark.parametrize(
    ("table", "change", "message"),
    [
        ("aws_offers.csv", lambda rows: _aws_zone_row(rows).update(zone="us-east-1a"), "is not an AZ ID"),
        ("aws_offers.csv", lambda rows: _aws_zone_row(rows).update(zone="usw2-az1"), "does not match"),
        ("aws_offers.csv", lambda rows: rows.append(dict(_aws_zone_row(rows))), "duplicate zone row"),
        (
            "aws_offers.csv",
            lambda rows: rows.append(dict(_aws_zone_row(rows), zone="", price_usd="9.9")),
            "priced both per zone and by the region-wide row",
        ),
        (
            "aws_offers.csv",
            lambda rows: _aws_zone_row(rows).update(price_lo_usd="1", price_hi_usd="2"),
            "not a lo/hi range",
        ),
        (
            "aws_offers.csv",
            lambda rows: _first(rows, status="superseded").update(notes=""),
            "superseded row must say why",
        ),
        (
            "gcp_host_prices.csv",
            lambda rows: _first(rows, region="us-central1").update(zones="us-central1-a us-east1-b"),
            "is not a zone of us-central1",
        ),
        (
            "gcp_host_prices.csv",
            lambda rows: _first(rows, region="us-central1").update(zones="us-central1-a us-central1-a"),
            "a zone listed twice",
        ),
        (
            "gcp_accelerator_prices.csv",
            lambda rows: _first(rows, region="us-central1").update(zones=""),
            "no zones",
        ),
        (
            "gcp_accelerator_prices.csv",
            lambda rows: _first(rows, status="suspect").update(status="ok"),
            "mark it suspect",
        ),
    ],
)
def test_the_build_rejects_bad_zone_rows(
    tables: tuple[ModuleType, Path],
    table: str,
    change: Callable[[list[dict[str, str]]], None],
    message: str,
) -> None:
    module, src = tables
    _edit(src / table, change)
    with pytest.raises(module.BuildError, match=message):
        module.build()
