"""The refresh's merge and orchestration, with stand-in fetchers: never worse than before."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from catalog.refresh import FetchResult, merge, refresh, with_az_ids
from cloudapi.calls import AuthError
from selector.catalog import SNAPSHOT_FILE, catalog_from_doc, load_catalog

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PREVIOUS = json.loads(SNAPSHOT_FILE.read_text())


class Stub:
    def __init__(self, cloud: str, result: FetchResult | None = None, error: Exception | None = None) -> None:
        self.cloud, self.result, self.error = cloud, result, error

    def fetch(self, regions: Any, pool: Any, progress: Any) -> FetchResult:
        if self.error:
            raise self.error
        assert self.result is not None
        return self.result


def _gcp_offers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in doc["offers"] if o["cloud"] == "gcp"]


def test_a_cloud_wide_failure_keeps_every_previous_region_stale() -> None:
    result = FetchResult(cloud="gcp", regions_failed={"*": "billing: 503 after 5 attempts"})
    doc, stale = merge(PREVIOUS, [result], NOW)
    assert len(_gcp_offers(doc)) == len(_gcp_offers(PREVIOUS))
    assert all(o["stale"] for o in _gcp_offers(doc))
    assert {k for k in stale if k.startswith("gcp:")} == {f"gcp:{o['region']}" for o in _gcp_offers(PREVIOUS)}


def test_refreshed_types_keep_specs_the_api_does_not_report() -> None:
    before = next(t for t in PREVIOUS["instance_types"] if t["name"] == "a3-highgpu-8g")
    fresh = {**before, "local_nvme_gb": None, "vcpus": 208}
    offer = {
        "cloud": "gcp",
        "instance_type": "a3-highgpu-8g",
        "region": "us-east4",
        "zone": None,
        "market": "spot",
        "hourly_usd": 20.0,
        "source": "X",
        "as_of": "2026-12-02",
    }
    result = FetchResult(cloud="gcp", instance_types=[fresh], offers=[offer], regions_ok={"us-east4"})
    doc, _ = merge(PREVIOUS, [result], NOW)
    merged = next(t for t in doc["instance_types"] if t["name"] == "a3-highgpu-8g")
    assert merged["local_nvme_gb"] == before["local_nvme_gb"] and merged["local_nvme_gb"] is not None
    east4 = [o for o in _gcp_offers(doc) if o["region"] == "us-east4"]
    assert east4 == [offer]  # a refreshed region holds exactly what was fetched
    others = [o for o in _gcp_offers(doc) if o["region"] != "us-east4"]
    assert others and not any(o.get("stale") for o in others)  # not refreshed, not failed: untouched


def test_one_cloud_without_permission_does_not_stop_the_other() -> None:
    offer = {
        "cloud": "aws",
        "instance_type": "g6e.xlarge",
        "region": "us-east-1",
        "zone": None,
        "market": "on-demand",
        "hourly_usd": 1.9,
        "source": "X",
        "as_of": "2026-12-02",
    }
    spec = next(t for t in PREVIOUS["instance_types"] if t["name"] == "g6e.xlarge")
    aws = Stub(
        "aws", FetchResult(cloud="aws", instance_types=[spec], offers=[offer], regions_ok={"us-east-1"})
    )
    gcp = Stub("gcp", error=AuthError("gcp: PermissionDenied: compute.machineTypes.list"))
    report = refresh([aws, gcp], load_catalog(), PREVIOUS, now=NOW)
    assert report.useful and report.auth_errors == ["gcp: PermissionDenied: compute.machineTypes.list"]
    assert _gcp_offers(report.doc) == _gcp_offers(PREVIOUS)
    east1 = [o for o in report.doc["offers"] if o["cloud"] == "aws" and o["region"] == "us-east-1"]
    assert east1 == [offer]


def test_the_collector_is_paused_only_while_refreshing_and_survivors_join_the_oldest_generation() -> None:
    import gc

    from catalog.refresh import CollectorPause

    collector_paused = CollectorPause()  # a process's first pause
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with collector_paused():
        assert not gc.isenabled()
        survivors = [[i] for i in range(5000)]  # made while paused, alive after
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert any(o is survivors[0] for o in gc.get_objects(generation=2))  # filed with the oldest
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a fetch failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a collector paused by the caller stays paused
    finally:
        gc.enable()


def test_only_a_processs_first_pause_files_survivors_and_never_thaws_the_callers_frozen_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    from catalog.refresh import CollectorPause

    freezes: list[int] = []
    freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), freeze())[1])
    collector_paused = CollectorPause()
    with collector_paused():
        pass
    with collector_paused():
        pass
    assert freezes == [1]  # later pauses resume plainly: their garbage counts towards full collections
    freeze()  # the caller's own
    try:
        fresh = CollectorPause()
        with fresh():
            pass
        assert gc.get_freeze_count() > 0 and freezes == [1]  # not filed, not thawed
    finally:
        gc.unfreeze()


def test_pauses_nest_and_the_last_one_out_resumes_the_collector() -> None:
    import gc

    from catalog.refresh import CollectorPause

    collector_paused = CollectorPause()
    outer, inner = collector_paused(), collector_paused()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # refreshes in two threads need not end in order
    assert not gc.isenabled()
    inner.__exit__(None, None, None)
    assert gc.isenabled()


def _aws_offer(region: str, zone: str | None, market: str, usd: float, **extra: Any) -> dict[str, Any]:
    return {
        "cloud": "aws",
        "instance_type": "g5.xlarge",
        "region": region,
        "zone": zone,
        "market": market,
        "hourly_usd": usd,
        "source": "AWS_SPOT_HISTORY",
        "as_of": "2026-11-01",
        **extra,
    }


def test_previous_offers_keyed_by_zone_names_are_brought_to_az_ids_or_left_out() -> None:
    """An older refresh wrote AWS zones by name. Kept now, they are translated with this
    refresh's names → IDs where it learnt them, and left out where it did not (a failed
    region): the merged catalog never mixes names and AZ IDs."""
    spec = next(t for t in PREVIOUS["instance_types"] if t["name"] == "g5.xlarge")
    previous = {
        **PREVIOUS,
        "instance_types": [spec],
        "offers": [
            _aws_offer("us-east-1", "us-east-1a", "spot", 0.45),  # names, as the old refresh wrote
            _aws_offer("us-east-1", None, "on-demand", 1.0),
            _aws_offer("us-west-2", "us-west-2a", "spot", 0.5),
            _aws_offer("us-west-2", "usw2-az1", "spot", 0.51, zones=["usw2-az1"]),
            _aws_offer("us-west-2", None, "on-demand", 1.1, zones=["us-west-2a", "us-west-2b"]),
            _aws_offer("us-west-2", None, "on-demand", 1.1, zones=["usw2-az1"]),
        ],
    }
    fresh = _aws_offer("us-east-1", None, "on-demand", 1.01, zones=["use1-az1", "use1-az6"])
    result = FetchResult(
        cloud="aws",
        instance_types=[spec],
        offers=[fresh],
        regions_ok={"us-east-1"},
        regions_failed={"us-west-2": "ReadTimeoutError"},
        kept={("us-east-1", "g5.xlarge", "spot"): "DescribeSpotPriceHistory: 503"},  # spot failed
        zone_ids={"us-east-1": {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1"}},
    )
    doc, stale = merge(previous, [result], NOW)
    aws = {(o["region"], o["zone"], o["market"], tuple(o.get("zones", ()))): o for o in doc["offers"]}
    assert set(aws) == {
        ("us-east-1", "use1-az6", "spot", ("use1-az6",)),  # translated
        ("us-east-1", None, "on-demand", ("use1-az1", "use1-az6")),  # fresh
        ("us-west-2", "usw2-az1", "spot", ("usw2-az1",)),  # already an AZ ID: kept
        ("us-west-2", None, "on-demand", ("usw2-az1",)),
    }
    assert aws[("us-east-1", "use1-az6", "spot", ("use1-az6",))]["stale"] is True
    assert doc["refresh"]["dropped_zone_names"] == {"aws:us-west-2": 2}
    assert set(stale) == {"aws:us-east-1", "aws:us-west-2"}
    catalog_from_doc(doc, "merged", load_catalog().gpus)  # it loads

    report = refresh([Stub("aws", result)], load_catalog(), previous, now=NOW)
    assert any("left out 2 previous offers keyed by zone names" in line for line in report.lines())


def test_with_az_ids_translates_a_zone_and_a_zone_list() -> None:
    ids = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1"}
    spot = _aws_offer("us-east-1", "us-east-1a", "spot", 0.4)
    assert with_az_ids(spot, ids) == {**spot, "zone": "use1-az6", "zones": ["use1-az6"]}
    listed = _aws_offer("us-east-1", None, "on-demand", 1.0, zones=["us-east-1a", "us-east-1b"])
    assert with_az_ids(listed, ids) == {**listed, "zones": ["use1-az1", "use1-az6"]}
    by_id = _aws_offer("us-east-1", "use1-az2", "spot", 0.4, zones=["use1-az2"])
    assert with_az_ids(by_id, None) is by_id  # nothing to translate
    assert with_az_ids(_aws_offer("us-east-1", "us-east-1c", "spot", 0.4), ids) is None  # unknown name
    assert with_az_ids(_aws_offer("us-west-2", None, "on-demand", 1.0), None) == _aws_offer(
        "us-west-2", None, "on-demand", 1.0
    )  # no zone data at all
    local = _aws_offer("us-west-2", "usw2-lax1-az1", "spot", 0.4, zones=["usw2-lax1-az1"])
    assert with_az_ids(local, None) is local  # a Local Zone's AZ ID
