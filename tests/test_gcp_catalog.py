"""The GCP catalog fetcher against a local fake of the Compute Engine and Cloud Billing REST APIs.

The real google-cloud-compute and google-cloud-billing clients talk HTTP to ``tests/gcp_fake.py``
on 127.0.0.1 (anonymous credentials, as with Google's emulators). No test sleeps: the fetcher's
``sleep`` records the waits instead. Prices are checked against arithmetic written out by hand.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from catalog.gcp import GcpCatalogFetcher
from catalog.gcp.machine_types import N1_LIMITS, SOURCE_COMPUTE
from catalog.gcp.prices import SOURCE_BILLING, family_keys, gpu_key, vm_family_key
from catalog.refresh import FetchResult, merge
from cloudapi.calls import AuthError, CallCounter
from cloudapi.gcp import check_endpoint
from gitops.lock import locked_catalog, make_lock, reviewed_difference
from selector.capacity import describe as describe_capacity
from selector.catalog import catalog_from_doc, load_gpus
from selector.select import plan
from selector.spec import parse_spec
from tests.gcp_fake import FakeGcp, accelerator_type, machine_type, sku

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "gpufit-test"
TODAY = date(2026, 12, 3)
REGIONS = {
    "asia-east1": ["asia-east1-a"],
    "europe-west4": ["europe-west4-a", "europe-west4-b"],
    "us-central1": ["us-central1-a", "us-central1-b", "us-central1-c"],
}
# SCHEMA.md's fields, with the optional notes
INSTANCE_KEYS = {
    *("cloud", "name", "machine_type", "gpu", "gpu_count", "attached_accelerator", "vcpus", "memory_gib"),
    *("local_nvme_gb", "network_gbps", "nvlink", "node_interconnect", "source", "confidence", "notes"),
}
OFFER_KEYS = {
    *("cloud", "instance_type", "region", "zone", "zones", "market", "hourly_usd"),
    *("source", "as_of", "confidence", "notes"),
}

US, EU, ASIA = ["us-central1"], ["europe-west4"], ["asia-east1"]
AMERICAS = ["us-central1", "us-east4"]  # a multi-region SKU, as "running in Americas" ones are
EMEA = ["europe-west4", "europe-west1"]


def world_machine_types() -> list[dict[str, Any]]:
    def mt(
        zone: str, name: str, cpus: int, memory_mb: int, gpu: str | None = None, n: int = 0, **kw: Any
    ) -> Any:
        return machine_type(PROJECT, zone, name, cpus, memory_mb, gpu, n, **kw)

    return [
        mt("us-central1-a", "a3-highgpu-8g", 208, 1916928, "nvidia-h100-80gb", 8),
        mt("us-central1-a", "a3-highgpu-2g", 52, 479232, "nvidia-h100-80gb", 2),
        mt("us-central1-a", "a3-megagpu-8g", 208, 1916928, "nvidia-h100-mega-80gb", 8),
        mt("us-central1-a", "a3-futuregpu-8g", 208, 1916928, "nvidia-h300-200gb", 8),  # GPU not in the facts
        mt("us-central1-a", "g2-standard-4", 4, 16384, "nvidia-l4", 1),
        mt("us-central1-a", "g2-standard-48", 48, 196608, "nvidia-l4", 4),
        mt("us-central1-a", "n1-standard-4", 4, 15360),
        mt("us-central1-a", "n1-standard-8", 8, 30720),
        mt("us-central1-a", "n1-standard-64", 64, 245760),
        mt("us-central1-a", "e2-standard-4", 4, 16384),  # not a GPU family: filtered out
        mt("us-central1-b", "a2-highgpu-1g", 12, 87040, "nvidia-tesla-a100", 1),
        mt("us-central1-b", "a2-highgpu-2g", 24, 174080, "nvidia-tesla-a100", 2),
        mt("us-central1-b", "a2-highgpu-4g", 48, 348160, "nvidia-tesla-a100", 4, deprecated="OBSOLETE"),
        mt("us-central1-b", "n1-standard-8", 8, 30720),
        mt("us-central1-b", "n1-standard-16", 16, 61440),
        mt("europe-west4-a", "a3-highgpu-8g", 208, 1916928, "nvidia-h100-80gb", 8),
        mt("europe-west4-a", "g2-standard-4", 4, 16384, "nvidia-l4", 1),
        mt("europe-west4-a", "n1-standard-8", 8, 30720),
        mt("europe-west4-b", "n1-standard-8", 8, 30720),
        mt("asia-east1-a", "g2-standard-4", 4, 16384, "nvidia-l4", 1),
        mt("asia-east1-a", "n1-standard-8", 8, 30720),
    ]


def world_accelerator_types() -> list[dict[str, Any]]:
    def at(zone: str, name: str, max_cards: int) -> dict[str, Any]:
        return accelerator_type(PROJECT, zone, name, max_cards)

    return [
        at("us-central1-a", "nvidia-h100-80gb", 8),
        at("us-central1-a", "nvidia-h100-mega-80gb", 8),
        at("us-central1-a", "nvidia-l4", 8),
        at("us-central1-a", "nvidia-tesla-t4", 4),
        at("us-central1-a", "nvidia-tesla-p4", 4),  # attachable, but no N1 limits known: reported
        at("us-central1-b", "nvidia-tesla-a100", 16),
        at("us-central1-b", "nvidia-tesla-t4", 4),
        at("us-central1-b", "nvidia-tesla-v100", 8),
        at("europe-west4-a", "nvidia-h100-80gb", 8),
        at("europe-west4-a", "nvidia-l4", 8),
        at("europe-west4-a", "nvidia-tesla-t4", 2),  # at most 2 T4 per VM in this zone
        at("asia-east1-a", "nvidia-l4", 8),
        at("asia-east1-a", "nvidia-tesla-t4", 4),
    ]


def world_skus() -> list[dict[str, Any]]:
    od, spot = "OnDemand", "Preemptible"
    return [
        sku("A3 Instance Core running in Americas", "CPU", od, AMERICAS, 0.035),
        sku("A3 Instance Ram running in Americas", "RAM", od, AMERICAS, 0.004, "GiBy.h"),
        sku("Spot Preemptible A3 Instance Core running in Americas", "CPU", spot, AMERICAS, 0.0105),
        sku("Spot Preemptible A3 Instance Ram running in Americas", "RAM", spot, AMERICAS, 0.0012, "GiBy.h"),
        sku("Commitment v1: A3 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", AMERICAS, 0.022),
        sku("Nvidia H100 80GB GPU running in Americas", "GPU", od, US, 9.8),
        sku("Nvidia H100 80GB Plus GPU running in Iowa", "GPU", od, US, 11.0),  # the A3 Mega GPU
        sku("G2 Instance Core running in Iowa", "CPU", od, US, 0.024),
        sku("G2 Instance Ram running in Iowa", "RAM", od, US, 0.0028, "GiBy.h"),
        sku("Nvidia L4 GPU running in Iowa", "GPU", od, US, 0.56),
        sku("Spot Preemptible G2 Instance Core running in Iowa", "CPU", spot, US, 0.0096),
        sku("Spot Preemptible G2 Instance Ram running in Iowa", "RAM", spot, US, 0.00112, "GiBy.h"),
        sku("Nvidia L4 GPU attached to Spot Preemptible VMs running in Iowa", "GPU", spot, US, 0.224),
        sku("N1 Predefined Instance Core running in Americas", "N1Standard", od, AMERICAS, 0.031611),
        sku("N1 Predefined Instance Ram running in Americas", "N1Standard", od, AMERICAS, 0.004237, "GiBy.h"),
        sku(
            "Spot Preemptible N1 Predefined Instance Core running in Americas",
            "N1Standard",
            spot,
            AMERICAS,
            0.00698,
        ),
        sku(
            "Spot Preemptible N1 Predefined Instance Ram running in Americas",
            "N1Standard",
            spot,
            AMERICAS,
            0.00094,
            "GiBy.h",
        ),
        sku("N1 Custom Instance Core running in Americas", "N1Standard", od, AMERICAS, 0.033174),  # skipped
        sku("Nvidia Tesla T4 GPU running in Americas", "GPU", od, AMERICAS, 0.35),
        sku(
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
            "GPU",
            spot,
            AMERICAS,
            0.14,
        ),
        sku("Nvidia Tesla V100 GPU running in Americas", "GPU", od, AMERICAS, 2.48),
        sku("A2 Instance Core running in Americas", "CPU", od, AMERICAS, 0.031611),
        sku("A2 Instance Ram running in Americas", "RAM", od, AMERICAS, 0.004237, "GiBy.h"),
        sku("Nvidia Tesla A100 GPU running in Americas", "GPU", od, AMERICAS, 2.933908),
        # flex-start (DWS Defined Duration), billed OnDemand; A2 only: A3 keeps the estimate
        sku("DWS Defined Duration A2 Core running in Americas", "CPU", od, AMERICAS, 0.01739),
        sku("DWS Defined Duration A2 Ram running in Americas", "RAM", od, AMERICAS, 0.00233, "GiBy.h"),
        sku(
            "Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs running in Americas",
            "GPU",
            od,
            AMERICAS,
            1.61365,
        ),
        sku(
            "Reserved Nvidia Tesla A100 GPU in Americas in Calendar Mode", "GPU", od, AMERICAS, 1.7
        ),  # skipped
        sku("E2 Instance Core running in Americas", "CPU", od, AMERICAS, 0.021811),  # a family not used
        sku("Storage PD Capacity", "PDStandard", od, US, 0.04, "GiBy.mo"),  # not a VM part
        sku("Nvidia Quantum Q1000 GPU running in Iowa", "GPU", od, US, 1.0),  # unknown GPU model
        sku("Z9 Hyper Cores running in Iowa", "CPU", od, US, 0.05),  # wording not recognised
        sku("A3 Instance Core running in Netherlands", "CPU", od, EU, 0.0385),
        sku("A3 Instance Ram running in Netherlands", "RAM", od, EU, 0.0044, "GiBy.h"),
        sku("Nvidia H100 80GB GPU running in Netherlands", "GPU", od, EU, 10.78),
        sku("G2 Instance Core running in Netherlands", "CPU", od, EU, 0.0264),
        sku("G2 Instance Ram running in Netherlands", "RAM", od, EU, 0.00308, "GiBy.h"),
        sku("Nvidia L4 GPU running in Netherlands", "GPU", od, EU, 0.616),
        sku("N1 Predefined Instance Core running in EMEA", "N1Standard", od, EMEA, 0.0348),
        sku("N1 Predefined Instance Ram running in EMEA", "N1Standard", od, EMEA, 0.00466, "GiBy.h"),
        sku("Nvidia Tesla T4 GPU running in Netherlands", "GPU", od, EU, 0.385),
        sku("G2 Instance Core running in Taiwan", "CPU", od, ASIA, 0.0265),
        sku("G2 Instance Ram running in Taiwan", "RAM", od, ASIA, 0.0031, "GiBy.h"),
        sku("Nvidia L4 GPU running in Taiwan", "GPU", od, ASIA, 0.62),
        sku("Nvidia Tesla T4 GPU running in Sydney", "GPU", od, ["australia-southeast1"], 0.39),  # not asked
        # last, so that only a listing that follows every page prices a3-highgpu-8g spot
        sku(
            "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas", "GPU", spot, US, 2.25
        ),
    ]


def world() -> FakeGcp:
    return FakeGcp(PROJECT, REGIONS, world_machine_types(), world_accelerator_types(), world_skus())


@pytest.fixture
def fake() -> Iterator[FakeGcp]:
    with world() as server:
        yield server


class Run:
    """One fetcher against the fake, with its waits and progress messages recorded."""

    def __init__(self, fake: FakeGcp, **kwargs: Any) -> None:
        self.sleeps: list[float] = []
        self.progress: list[str] = []
        self.counter = CallCounter()
        options: dict[str, Any] = {
            "project": PROJECT,
            "compute_endpoint": fake.url,
            "billing_endpoint": fake.url,
            "counter": self.counter,
            "sleep": self.sleeps.append,
            "today": lambda: TODAY,
        }
        options.update(kwargs)
        self.fetcher = GcpCatalogFetcher(**options)

    def fetch(self, regions: list[str] | None = None) -> FetchResult:
        with ThreadPoolExecutor(max_workers=4) as pool:
            return self.fetcher.fetch(regions, pool, self.progress.append)


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[Run, FetchResult, FakeGcp]]:
    """One fault-free fetch of every region, shared by the tests that only read its result."""
    with world() as server:
        run = Run(server)
        yield run, run.fetch(), server


@pytest.fixture
def result(base: tuple[Run, FetchResult, FakeGcp]) -> FetchResult:
    return base[1]


def offer(result: FetchResult, name: str, region: str, market: str) -> dict[str, Any] | None:
    found = [
        o for o in result.offers if (o["instance_type"], o["region"], o["market"]) == (name, region, market)
    ]
    assert len(found) <= 1
    return found[0] if found else None


def price(result: FetchResult, name: str, region: str, market: str) -> float:
    found = offer(result, name, region, market)
    assert found is not None, f"no {market} offer for {name} in {region}"
    return float(found["hourly_usd"])


def types_by_name(result: FetchResult) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in result.instance_types}


def notes(result: FetchResult) -> str:
    return "\n".join(result.notes)


# ---------------------------------------------------------------------- prices


def test_a3_highgpu_8g_priced_on_demand_and_spot_from_parts(result: FetchResult) -> None:
    # on-demand: 208 vCPU x 0.035 + 1872 GiB (1916928 MB / 1024) x 0.004 + 8 x H100 9.8
    #          = 7.28 + 7.488 + 78.4 = 93.168
    assert price(result, "a3-highgpu-8g", "us-central1", "on-demand") == pytest.approx(93.168, abs=1e-9)
    # spot: 208 x 0.0105 + 1872 x 0.0012 + 8 x 2.25 = 2.184 + 2.2464 + 18 = 22.4304
    assert price(result, "a3-highgpu-8g", "us-central1", "spot") == pytest.approx(22.4304, abs=1e-9)
    # europe-west4, on-demand only (no spot SKUs there): 208 x 0.0385 + 1872 x 0.0044 + 8 x 10.78
    #          = 8.008 + 8.2368 + 86.24 = 102.4848
    assert price(result, "a3-highgpu-8g", "europe-west4", "on-demand") == pytest.approx(102.4848, abs=1e-9)
    assert offer(result, "a3-highgpu-8g", "europe-west4", "spot") is None
    found = offer(result, "a3-highgpu-8g", "us-central1", "spot")
    assert found is not None
    assert set(found) == OFFER_KEYS
    assert (found["zone"], found["source"], found["as_of"], found["confidence"]) == (
        None, SOURCE_BILLING, "2026-12-03", "high",
    )  # fmt: skip
    assert SOURCE_BILLING in result.sources and result.sources[SOURCE_BILLING]["retrieved"] == "2026-12-03"


def test_other_families_priced_by_hand(result: FetchResult) -> None:
    # g2-standard-4: 4 x 0.024 + 16 x 0.0028 + 1 x L4 0.56 = 0.096 + 0.0448 + 0.56 = 0.7008
    assert price(result, "g2-standard-4", "us-central1", "on-demand") == pytest.approx(0.7008, abs=1e-9)
    # spot: 4 x 0.0096 + 16 x 0.00112 + 0.224 = 0.0384 + 0.01792 + 0.224 = 0.28032
    assert price(result, "g2-standard-4", "us-central1", "spot") == pytest.approx(0.28032, abs=1e-9)
    # g2-standard-48: 48 x 0.024 + 192 x 0.0028 + 4 x 0.56 = 1.152 + 0.5376 + 2.24 = 3.9296
    assert price(result, "g2-standard-48", "us-central1", "on-demand") == pytest.approx(3.9296, abs=1e-9)
    # a3-highgpu-2g: 52 x 0.035 + 468 x 0.004 + 2 x 9.8 = 1.82 + 1.872 + 19.6 = 23.292
    assert price(result, "a3-highgpu-2g", "us-central1", "on-demand") == pytest.approx(23.292, abs=1e-9)
    # a3-megagpu-8g, GPU billed as "H100 80GB Plus": 7.28 + 7.488 + 8 x 11.0 = 102.768
    assert price(result, "a3-megagpu-8g", "us-central1", "on-demand") == pytest.approx(102.768, abs=1e-9)
    # a2-highgpu-1g: 12 x 0.031611 + 85 x 0.004237 + 2.933908 = 0.379332 + 0.360145 + 2.933908 = 3.673385
    assert price(result, "a2-highgpu-1g", "us-central1", "on-demand") == pytest.approx(3.673385, abs=1e-5)
    # asia-east1 g2-standard-4: 4 x 0.0265 + 16 x 0.0031 + 0.62 = 0.106 + 0.0496 + 0.62 = 0.7756
    assert price(result, "g2-standard-4", "asia-east1", "on-demand") == pytest.approx(0.7756, abs=1e-9)


def test_a_machine_type_missing_any_part_is_unpriced_not_guessed(result: FetchResult) -> None:
    # no spot GPU SKU for the A3 Mega GPU, no spot SKUs at all for A2 and for europe-west4
    assert offer(result, "a3-megagpu-8g", "us-central1", "spot") is None
    assert offer(result, "a2-highgpu-1g", "us-central1", "spot") is None
    assert offer(result, "g2-standard-4", "europe-west4", "spot") is None
    assert "unpriced (a part had no SKU; never guessed)" in notes(result)
    # the commitment SKU (Commit1Yr) and the N1 custom core never enter a price
    assert price(result, "n1-standard-8+t4x1", "us-central1", "on-demand") == pytest.approx(0.73, abs=1e-9)


def test_conflicting_skus_leave_the_part_unpriced(fake: FakeGcp) -> None:
    fake.skus.insert(0, sku("G2 Instance Core running in Iowa", "CPU", "OnDemand", US, 0.03))
    result = Run(fake).fetch(["us-central1"])
    assert offer(result, "g2-standard-4", "us-central1", "on-demand") is None
    assert (
        "1 parts have conflicting SKUs at the same scope (left unpriced), e.g. core g2 us-central1"
        in notes(result)
    )
    assert offer(result, "g2-standard-4", "us-central1", "spot") is not None  # spot SKUs do not conflict


def test_a_region_specific_sku_wins_over_a_multi_region_one(fake: FakeGcp) -> None:
    fake.skus.append(sku("A3 Instance Core running in Iowa", "CPU", "OnDemand", US, 0.04))
    result = Run(fake).fetch(["us-central1"])
    # 208 x 0.04 + 1872 x 0.004 + 8 x 9.8 = 8.32 + 7.488 + 78.4 = 94.208
    assert price(result, "a3-highgpu-8g", "us-central1", "on-demand") == pytest.approx(94.208, abs=1e-9)


# ---------------------------------------------------------------------- instance types


def test_n1_combinations_respect_limits_zones_and_max_cards(result: FetchResult) -> None:
    names = {
        o["instance_type"]
        for o in result.offers
        if o["region"] == "us-central1" and o["instance_type"][:3] == "n1-"
    }
    t4 = {f"n1-standard-{h}+t4x{n}" for h in (4, 8, 16) for n in (1, 2, 4)} | {"n1-standard-64+t4x4"}
    # V100 only in us-central1-b, where the hosts are n1-standard-8 and -16; one V100 allows 12 vCPUs
    v100 = {f"n1-standard-8+v100x{n}" for n in (1, 2, 4, 8)} | {f"n1-standard-16+v100x{n}" for n in (2, 4, 8)}
    assert names == t4 | v100
    eu = {
        o["instance_type"]
        for o in result.offers
        if o["region"] == "europe-west4" and o["instance_type"][:3] == "n1-"
    }
    assert eu == {"n1-standard-8+t4x1", "n1-standard-8+t4x2"}  # maximumCardsPerInstance 2 there
    combo = types_by_name(result)["n1-standard-8+t4x1"]
    assert (combo["machine_type"], combo["attached_accelerator"], combo["gpu"], combo["gpu_count"]) == (
        "n1-standard-8", "nvidia-tesla-t4", "T4", 1,
    )  # fmt: skip
    assert (combo["vcpus"], combo["memory_gib"], combo["nvlink"], combo["node_interconnect"]) == (
        8,
        30,
        False,
        None,
    )
    assert "n1-standard-8" not in types_by_name(result)  # a bare host is not a GPU instance
    assert "nvidia-tesla-p4" in notes(result)  # attachable, but no vCPU/memory limits known


def test_offers_are_region_level_listing_the_zones_that_list_them(result: FetchResult) -> None:
    """SCHEMA.md: one region-level offer (GCP prices a region), ``zones`` the zones that list
    the machine type, or for an N1 combination both its host and its accelerator (enough cards)."""
    zones = {(o["instance_type"], o["region"], o["market"]): o["zones"] for o in result.offers}
    assert all(o["zone"] is None for o in result.offers)
    assert zones[("a3-highgpu-8g", "us-central1", "on-demand")] == ["us-central1-a"]
    assert zones[("a2-highgpu-1g", "us-central1", "on-demand")] == ["us-central1-b"]
    assert zones[("a3-highgpu-8g", "europe-west4", "on-demand")] == ["europe-west4-a"]
    # n1-standard-8 is in us-central1-a and -b, both with T4s: both
    assert zones[("n1-standard-8+t4x1", "us-central1", "on-demand")] == ["us-central1-a", "us-central1-b"]
    assert zones[("n1-standard-8+t4x1", "us-central1", "spot")] == ["us-central1-a", "us-central1-b"]
    # n1-standard-4 only in -a; n1-standard-16 only in -b; V100s only in -b
    assert zones[("n1-standard-4+t4x1", "us-central1", "on-demand")] == ["us-central1-a"]
    assert zones[("n1-standard-16+t4x1", "us-central1", "on-demand")] == ["us-central1-b"]
    assert zones[("n1-standard-8+v100x1", "us-central1", "on-demand")] == ["us-central1-b"]
    # europe-west4-b has the host but no T4s: not listed
    assert zones[("n1-standard-8+t4x1", "europe-west4", "on-demand")] == ["europe-west4-a"]


def test_n1_combinations_priced_by_hand(result: FetchResult) -> None:
    # n1-standard-8 + 1 T4: 8 x 0.031611 + 30 x 0.004237 + 0.35 = 0.252888 + 0.12711 + 0.35 = 0.729998 -> 0.73
    assert price(result, "n1-standard-8+t4x1", "us-central1", "on-demand") == pytest.approx(0.73, abs=1e-9)
    # spot: 8 x 0.00698 + 30 x 0.00094 + 0.14 = 0.05584 + 0.0282 + 0.14 = 0.22404
    assert price(result, "n1-standard-8+t4x1", "us-central1", "spot") == pytest.approx(0.22404, abs=1e-9)
    # 2 V100: 0.252888 + 0.12711 + 2 x 2.48 = 5.339998 -> 5.34
    assert price(result, "n1-standard-8+v100x2", "us-central1", "on-demand") == pytest.approx(5.34, abs=1e-9)
    # europe-west4, EMEA N1 SKUs: 8 x 0.0348 + 30 x 0.00466 + 2 x 0.385 = 0.2784 + 0.1398 + 0.77 = 1.1882
    assert price(result, "n1-standard-8+t4x2", "europe-west4", "on-demand") == pytest.approx(1.1882, abs=1e-9)


def test_instance_types_follow_the_schema(result: FetchResult) -> None:
    types = types_by_name(result)
    for entry in types.values():
        assert set(entry) == INSTANCE_KEYS, entry["name"]
        assert (entry["cloud"], entry["source"], entry["confidence"]) == ("gcp", SOURCE_COMPUTE, "high")
    expect = {  # name: (gpu, count, vcpus, memory_gib, nvlink, node_interconnect)
        "a3-highgpu-8g": ("H100", 8, 208, 1872, True, "gpudirect-tcpx"),
        "a3-highgpu-2g": ("H100", 2, 52, 468, True, None),  # GPUDirect claimed for the 8-GPU shape only
        "a3-megagpu-8g": ("H100", 8, 208, 1872, True, "gpudirect-tcpxo"),
        "a2-highgpu-1g": ("A100-40GB", 1, 12, 85, False, None),
        "a2-highgpu-2g": ("A100-40GB", 2, 24, 170, True, None),
        "g2-standard-48": ("L4", 4, 48, 192, False, None),
        "g2-standard-4": ("L4", 1, 4, 16, False, None),
    }
    for name, (gpu, count, vcpus, memory, nvlink, interconnect) in expect.items():
        entry = types[name]
        got = (entry["gpu"], entry["gpu_count"], entry["vcpus"], entry["memory_gib"], entry["nvlink"])
        assert got == (gpu, count, vcpus, memory, nvlink), name
        assert entry["node_interconnect"] == interconnect, name
        assert (entry["machine_type"], entry["attached_accelerator"]) == (name, None)
    assert "a2-highgpu-4g" not in types  # OBSOLETE
    assert "e2-standard-4" not in types


def test_gpu_missing_from_the_facts_table_is_reported_not_guessed(result: FetchResult) -> None:
    assert "a3-futuregpu-8g" not in types_by_name(result)
    assert all(o["instance_type"] != "a3-futuregpu-8g" for o in result.offers)
    assert "a3-futuregpu-8g (nvidia-h300-200gb)" in notes(result)


def test_result_loads_as_a_catalog(result: FetchResult) -> None:
    doc = {
        "schema_version": 1,
        "as_of": "2026-12-03",
        "source": "test",
        "sources": result.sources,
        "instance_types": result.instance_types,
        "offers": result.offers,
    }
    catalog = catalog_from_doc(doc, "gcp refresh")
    # The fake's a3-highgpu-2g on-demand price is a price Google lists for a type it does not
    # sell on demand: the loader drops it, saying so.
    not_sold = [
        o for o in result.offers if o["instance_type"] == "a3-highgpu-2g" and o["market"] == "on-demand"
    ]
    assert not_sold and len(catalog.offers) == len(result.offers) - len(not_sold) > 40
    assert catalog.not_sold == (
        "gcp a3-highgpu-2g is not sold on-demand (gcp.csv:7: "
        "https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines)",
    )
    assert {o.source for o in catalog.offers} <= set(result.sources)
    assert {t.source for t in catalog.instance_types} <= set(result.sources)
    assert {o.instance.name for o in catalog.offers} == {t.name for t in catalog.instance_types}
    assert result.regions_ok == set(REGIONS) and not result.regions_failed


def test_flex_start_rates_come_from_the_dws_skus_and_win_over_the_estimate(result: FetchResult) -> None:
    """a2-highgpu-1g: 12 vCPU x 0.01739 + 85 GiB x 0.00233 + 1 x A100 1.61365 = 2.0202;
    A3 has no DWS SKU in the fake billing catalog: no row, the CSV's estimate stands."""
    rows = {(f["instance_type"], f["region"]): f for f in result.flex_start or []}
    row = rows[("a2-highgpu-1g", "us-central1")]
    assert row["hourly_usd"] == pytest.approx(12 * 0.01739 + 85 * 0.00233 + 1.61365, abs=1e-5)
    assert (row["source"], row["as_of"], row["cloud"]) == (SOURCE_BILLING, "2026-12-03", "gcp")
    assert not any(name.startswith("a3-") for name, _ in rows)
    # the DWS and calendar-mode SKUs never price the on-demand offer
    assert price(result, "a2-highgpu-1g", "us-central1", "on-demand") == pytest.approx(
        12 * 0.031611 + 85 * 0.004237 + 2.933908, abs=1e-5
    )
    doc = {
        "schema_version": 1,
        "as_of": "2026-12-03",
        "source": "test",
        "sources": result.sources,
        "instance_types": result.instance_types,
        "offers": result.offers,
        "flex_start_prices": result.flex_start,
    }
    catalog = catalog_from_doc(doc, "gcp refresh")
    spec = parse_spec(
        {
            "name": "flex",
            "task": "batch",
            "model": {"preset": "qwen2.5-7b"},
            "precision": "bf16",
            "serving": {"context_tokens": 4096, "concurrency": 32, "tokens": 1.5e8},
            "teardown": {"ttl": "3d"},
            "placement": {"clouds": ["gcp"], "instance_types": ["a2-highgpu-1g"]},
            "capacity": {"flex_start": "require"},
            "job": {"command": "python gen.py --resume"},
        }
    )
    chosen = plan(spec, catalog, today=TODAY)
    assert chosen.choice is not None and chosen.choice.offer.market == "flex-start"
    assert chosen.choice.offer.hourly_usd == pytest.approx(row["hourly_usd"])
    assert chosen.choice.offer.confidence == "high"
    assert "DWS SKUs of the Cloud Billing Catalog" in describe_capacity(chosen.choice.offer, 1)
    # a lock of the plan keeps the billed price, so its replan is the reviewed choice
    lock = json.loads(json.dumps(make_lock(chosen, Path("flex.yaml"), datetime(2026, 12, 3, tzinfo=UTC))))
    replanned = plan(spec, locked_catalog(lock, load_gpus()), today=TODAY)
    assert reviewed_difference(lock, replanned) is None
    assert replanned.choice is not None and replanned.choice.offer.hourly_usd == pytest.approx(
        row["hourly_usd"]
    )
    without = catalog_from_doc({**doc, "flex_start_prices": []}, "gcp refresh")
    estimate = plan(spec, without, today=TODAY)
    assert estimate.choice is not None and estimate.choice.offer.confidence == "low"
    assert estimate.choice.offer.hourly_usd == pytest.approx(
        0.55 * price(result, "a2-highgpu-1g", "us-central1", "on-demand")
    )


def test_a_refresh_replaces_the_flex_rows_of_the_regions_it_refreshed_only() -> None:
    def row(region: str, usd: float) -> dict[str, Any]:
        return {"cloud": "gcp", "instance_type": "a2-highgpu-1g", "region": region, "hourly_usd": usd,
                "source": SOURCE_BILLING, "as_of": "2026-11-01", "notes": ""}  # fmt: skip

    previous = {"schema_version": 1, "flex_start_prices": [row("us-central1", 2.5), row("asia-east1", 2.6)]}
    fresh = FetchResult(cloud="gcp", regions_ok={"us-central1"}, flex_start=[row("us-central1", 2.02)])
    doc, _ = merge(previous, [fresh], datetime(2026, 12, 3, tzinfo=UTC))
    assert sorted((f["region"], f["hourly_usd"]) for f in doc["flex_start_prices"]) == [
        ("asia-east1", 2.6), ("us-central1", 2.02),
    ]  # fmt: skip


# ---------------------------------------------------------------------- billing SKUs


def test_unattributed_and_unknown_skus_are_reported(result: FetchResult) -> None:
    text = notes(result)
    assert "billing: 1 CPU/RAM/GPU SKUs not attributed (CPU 1)" in text
    assert "Z9 Hyper Cores running in Iowa" in text
    assert "1 GPU SKU models match no accelerator" in text and "Quantum Q1000" in text
    for quiet in ("Custom", "E2 Instance", "Commitment", "Storage PD", "Sydney"):
        assert quiet not in text, quiet


@pytest.mark.parametrize(
    ("billing", "accelerator"),
    [
        ("H100 80GB", "nvidia-h100-80gb"),
        ("H100 80GB Mega", "nvidia-h100-mega-80gb"),
        ("H100 Mega 80GB", "nvidia-h100-mega-80gb"),
        ("H100 80GB Plus", "nvidia-h100-mega-80gb"),
        ("H200 141GB", "nvidia-h200-141gb"),
        ("Tesla A100", "nvidia-tesla-a100"),
        ("A100 80GB", "nvidia-a100-80gb"),
        ("Tesla T4", "nvidia-tesla-t4"),
        ("L4", "nvidia-l4"),
        ("B200", "nvidia-b200"),
    ],
)
def test_billing_gpu_names_match_accelerator_types(billing: str, accelerator: str) -> None:
    assert gpu_key(billing) == gpu_key(accelerator)


def test_gpu_keys_keep_distinct_gpus_apart() -> None:
    keys = [
        gpu_key(a)
        for a in ("nvidia-tesla-a100", "nvidia-a100-80gb", "nvidia-h100-80gb", "nvidia-h100-mega-80gb")
    ]
    assert len(set(keys)) == 4
    assert gpu_key("Tesla T4 Virtual Workstation") != gpu_key("nvidia-tesla-t4")


def test_family_keys() -> None:
    assert vm_family_key("N1 Predefined") == "n1"
    assert vm_family_key("A3 Mega") == "a3mega"
    assert family_keys("a3-megagpu-8g") == ["a3mega", "a3megagpu", "a3"]
    assert family_keys("n1-standard-8") == ["n1standard", "n1"]


# ---------------------------------------------------------------------- pagination, retries, counting


def test_every_page_is_fetched_with_its_token_and_counted(base: tuple[Run, FetchResult, FakeGcp]) -> None:
    run, result, fake = base
    sku_pages = (len(fake.skus) + fake.skus_per_page - 1) // fake.skus_per_page
    tokens = [s.query.get("pageToken", "") for s in fake.requests("skus")]
    assert tokens == [""] + [f"skus-{fake.skus_per_page * i}" for i in range(1, sku_pages)]
    assert all(s.query["currencyCode"] == "USD" for s in fake.requests("skus"))
    assert [s.query.get("pageToken", "") for s in fake.requests("regions")] == ["", "regions-2"]
    # 6 zones in scope-pages of 2: three pages per region and listing
    for region in REGIONS:
        assert len(fake.requests("machineTypes", region)) == 3
        assert len(fake.requests("acceleratorTypes", region)) == 3
    assert result.calls == run.counter.count == len(fake.seen) == 2 + sku_pages + 2 * 3 * len(REGIONS)
    assert run.sleeps == []


def test_a_429_is_retried_with_backoff_and_counted(fake: FakeGcp) -> None:
    fake.fail("skus", 429, times=1)
    run = Run(fake)
    result = run.fetch(["us-central1"])
    statuses = [s.status for s in fake.requests("skus")]
    assert statuses[:2] == [429, 200] and statuses.count(429) == 1
    assert len(run.sleeps) == 1 and 0 <= run.sleeps[0] <= 0.5  # first full-jitter window
    assert result.calls == run.counter.count == len(fake.seen)
    assert price(result, "a3-highgpu-8g", "us-central1", "spot") == pytest.approx(22.4304, abs=1e-9)


def test_retry_after_is_honoured(fake: FakeGcp) -> None:
    fake.fail("machineTypes", 429, times=1, region="us-central1", headers={"Retry-After": "3"})
    run = Run(fake)
    run.fetch(["us-central1"])
    assert run.sleeps == [3.0]


def test_a_failed_page_is_retried_alone(fake: FakeGcp) -> None:
    fake.fail("skus", 503, times=1, page_token="skus-8")
    run = Run(fake)
    result = run.fetch(["us-central1"])
    tokens = [(s.query.get("pageToken", ""), s.status) for s in fake.requests("skus")]
    assert tokens[:5] == [("", 200), ("skus-4", 200), ("skus-8", 503), ("skus-8", 200), ("skus-12", 200)]
    assert len(run.sleeps) == 1 and not result.regions_failed


def test_a_region_that_keeps_failing_goes_to_regions_failed(fake: FakeGcp) -> None:
    fake.fail("machineTypes", 503, times=None, region="asia-east1")
    run = Run(fake, max_attempts=3)
    result = run.fetch()
    assert set(result.regions_failed) == {"asia-east1"}
    reason = result.regions_failed["asia-east1"]
    assert "503" in reason and "after 3 attempts" in reason and "machineTypes" in reason
    assert len(fake.requests("machineTypes", "asia-east1")) == 3
    assert len(run.sleeps) == 2
    assert result.regions_ok == {"us-central1", "europe-west4"}
    assert all(o["region"] != "asia-east1" for o in result.offers)
    assert result.calls == len(fake.seen)


def test_retries_stop_within_max_seconds(fake: FakeGcp) -> None:
    fake.fail("skus", 503, times=None)
    run = Run(fake, max_attempts=50, max_seconds=2.0)
    result = run.fetch(["us-central1", "europe-west4"])
    attempts = len(fake.requests("skus"))
    assert 2 <= attempts < 50
    assert sum(run.sleeps) <= 2.0
    assert set(result.regions_failed) == {"us-central1", "europe-west4"}
    assert all("billing SKUs unavailable" in why for why in result.regions_failed.values())
    assert result.offers == [] and result.regions_ok == set()


def test_an_unreadable_answer_fails_its_region_only(fake: FakeGcp) -> None:
    fake.fail("acceleratorTypes", 200, times=None, region="europe-west4", body="<html>proxy error</html>")
    result = Run(fake).fetch(["us-central1", "europe-west4"])
    assert set(result.regions_failed) == {"europe-west4"}
    assert "acceleratorTypes" in result.regions_failed["europe-west4"]
    assert len(fake.requests("acceleratorTypes", "europe-west4")) == 1  # not retried: not transient
    assert result.regions_ok == {"us-central1"}


def test_a_region_listing_that_keeps_failing_fails_everything_quietly(fake: FakeGcp) -> None:
    fake.fail("regions", 500, times=None)
    run = Run(fake, max_attempts=2)
    result = run.fetch()
    assert list(result.regions_failed) == ["*"] and "500" in result.regions_failed["*"]
    assert result.offers == [] and result.regions_ok == set()
    assert result.calls == len(fake.seen) == 2


def test_an_unreachable_zone_fails_its_region(fake: FakeGcp) -> None:
    fake.unreachable_zones.add("europe-west4-b")
    result = Run(fake).fetch(["us-central1", "europe-west4"])
    assert result.regions_failed == {"europe-west4": "zones unreachable: europe-west4-b"}
    assert all(o["region"] == "us-central1" for o in result.offers)


def test_a_rejected_filter_falls_back_to_filtering_here(fake: FakeGcp) -> None:
    fake.reject_filters = True
    result = Run(fake).fetch(["europe-west4"])
    assert "rejected the zone/name filter" in notes(result)
    assert price(result, "a3-highgpu-8g", "europe-west4", "on-demand") == pytest.approx(102.4848, abs=1e-9)
    assert {o["region"] for o in result.offers} == {"europe-west4"}
    assert not result.regions_failed


# ---------------------------------------------------------------------- authentication


def test_403_fails_fast_naming_the_permission(fake: FakeGcp) -> None:
    fake.fail("regions", 403, times=None)
    run = Run(fake)
    with pytest.raises(AuthError) as caught:
        run.fetch()
    message = str(caught.value)
    assert "compute.regions.list" in message and PROJECT in message and "\n" not in message
    assert run.counter.count == 1 and len(fake.seen) == 1 and run.sleeps == []


def test_403_on_billing_names_the_catalog_api(fake: FakeGcp) -> None:
    fake.fail("skus", 403, times=None)
    run = Run(fake)
    with pytest.raises(AuthError, match=r"services\.skus\.list") as caught:
        run.fetch(["us-central1"])
    assert "\n" not in str(caught.value)
    assert len(fake.requests("skus")) == 1 and run.sleeps == []


def test_401_asks_for_credentials(fake: FakeGcp) -> None:
    fake.fail("machineTypes", 401, times=None, region="us-central1")
    run = Run(fake)
    with pytest.raises(AuthError, match=r"credentials rejected.*compute\.machineTypes\.list.*gcloud auth"):
        run.fetch(["us-central1"])
    assert len(fake.requests("machineTypes")) == 1 and run.sleeps == []


def test_no_project_is_an_auth_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    with pytest.raises(AuthError, match=r"^no GCP project: set GOOGLE_CLOUD_PROJECT or pass --project$"):
        GcpCatalogFetcher(compute_endpoint="http://127.0.0.1:1", billing_endpoint="http://127.0.0.1:1")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    assert GcpCatalogFetcher(compute_endpoint="http://127.0.0.1:1").project == "from-env"


# ---------------------------------------------------------------------- endpoints, regions, progress


@pytest.mark.parametrize(
    "url", ["http://example.com", "http://10.0.0.5:8080", "http://compute.googleapis.com"]
)
def test_plain_http_is_refused_off_loopback(url: str) -> None:
    with pytest.raises(ValueError, match=r"plain http is allowed only for loopback"):
        GcpCatalogFetcher(project="p", compute_endpoint=url)
    with pytest.raises(ValueError, match=r"plain http is allowed only for loopback"):
        GcpCatalogFetcher(project="p", billing_endpoint=url)


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8080", True),
        ("http://127.9.8.7", True),
        ("http://[::1]:9000", True),
        ("http://localhost:8080", True),
        ("https://compute.googleapis.com", False),
        ("compute.googleapis.com", False),
    ],
)
def test_endpoints_allowed(url: str, loopback: bool) -> None:
    assert check_endpoint(url, "compute") == (url, loopback)


def test_endpoints_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFIT_GCP_COMPUTE_ENDPOINT", "http://example.org:8080")
    with pytest.raises(ValueError, match="compute endpoint"):
        GcpCatalogFetcher(project="p")
    monkeypatch.setenv("GPUFIT_GCP_COMPUTE_ENDPOINT", "")
    monkeypatch.setenv("GPUFIT_GCP_BILLING_ENDPOINT", "http://example.org:8080")
    with pytest.raises(ValueError, match="billing endpoint"):
        GcpCatalogFetcher(project="p")


def test_region_env_endpoint_used_end_to_end(fake: FakeGcp, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFIT_GCP_COMPUTE_ENDPOINT", fake.url)
    monkeypatch.setenv("GPUFIT_GCP_BILLING_ENDPOINT", fake.url)
    fetcher = GcpCatalogFetcher(project=PROJECT, sleep=lambda s: None)
    with ThreadPoolExecutor(2) as pool:
        result = fetcher.fetch(["asia-east1"], pool, lambda _: None)
    assert result.regions_ok == {"asia-east1"} and result.offers


def test_names_that_are_not_gcp_regions_are_ignored(fake: FakeGcp) -> None:
    result = Run(fake).fetch(["us-east-1", "asia-east1", "asia-east1"])
    assert result.regions_ok == {"asia-east1"}
    assert "ignored names that are not GCP regions: us-east-1" in notes(result)
    assert {s.region for s in fake.requests("machineTypes")} == {"asia-east1"}
    assert fake.requests("regions") == []


def test_an_unknown_region_is_noted_and_not_refreshed(fake: FakeGcp) -> None:
    result = Run(fake).fetch(["us-central9"])
    assert "no zones listed for us-central9" in notes(result)
    assert result.offers == [] and result.regions_ok == set() and result.regions_failed == {}


def test_a_region_without_gpu_machine_types_is_left_as_it_was(fake: FakeGcp) -> None:
    # an empty answer must not count as "refreshed": the merge would drop that region's offers
    fake.regions["me-central2"] = ["me-central2-a"]
    result = Run(fake).fetch(["me-central2", "asia-east1"])
    assert result.regions_ok == {"asia-east1"} and result.regions_failed == {}
    assert "no GPU or N1 machine types listed in me-central2" in notes(result)


def test_progress_names_each_step(base: tuple[Run, FetchResult, FakeGcp]) -> None:
    run = base[0]
    text = "\n".join(run.progress)
    assert run.progress[0] == "gcp: listing regions"
    for step in (
        "3 regions: listing",
        "billing:",
        "us-central1: machine and accelerator types listed",
        "pricing 3",
    ):
        assert step in text, step
    assert run.progress[-1].startswith("gcp: ") and "API calls" in run.progress[-1]


# ---------------------------------------------------------------------- facts and import weight


def test_n1_limits_match_the_snapshot_table() -> None:
    with (ROOT / "selector/data/snapshot_src/gcp_n1_limits.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    table: dict[str, dict[int, tuple[int, float]]] = {}
    for r in rows:
        limit = (int(r["max_vcpus"]), float(r["max_memory_gib"]))
        table.setdefault(f"nvidia-tesla-{r['accelerator'].lower()}", {})[int(r["count"])] = limit
    assert table == N1_LIMITS


def test_importing_the_module_does_not_import_google_clients() -> None:
    code = (
        "import sys, catalog.gcp; "
        "heavy = [m for m in ('google.cloud.compute_v1', 'google.cloud.billing_v1', 'tenacity') "
        "if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
