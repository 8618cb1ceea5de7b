"""The embedded catalog and the facts files: sourced, dated, complete, and checked on load."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from typing import Any

import pytest

from selector.catalog import CatalogError, catalog_from_doc, gpu_by_alias, load_catalog, load_gpus
from selector.datafile import load_json
from selector.presets import preset_entry, preset_names
from selector.rates import load_rates
from tests.conftest import MINI_CATALOG, ROOT

SNAPSHOT = load_catalog()

AWS_FAMILIES = [
    "g4dn.",
    "g5.",
    "g6.",
    "g6e.",
    "p3.",
    "p3dn.",
    "p4d.",
    "p4de.",
    "p5.",
    "p5e.",
    "p5en.",
    "p6-b200.",
]
GCP_FAMILIES = [
    "g2-standard-",
    "a2-highgpu-",
    "a2-ultragpu-",
    "a2-megagpu-",
    "a3-highgpu-1g",
    "a3-highgpu-2g",
    "a3-highgpu-4g",
    "a3-highgpu-8g",
    "a3-megagpu-8g",
    "a3-ultragpu-8g",
    "n1-standard-",
]


def test_snapshot_regenerates_from_its_source_tables() -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/build_snapshot.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_offer_names_a_source_and_a_date() -> None:
    assert SNAPSHOT.offers and re.fullmatch(r"\d{4}-\d{2}-\d{2}", SNAPSHOT.as_of)
    for offer in SNAPSHOT.offers:
        assert offer.source in SNAPSHOT.sources, offer.key
        assert re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", offer.as_of), offer.key
        assert offer.confidence in ("high", "low")
        assert offer.hourly_usd > 0
        if offer.hourly_usd_range:
            lo, hi = offer.hourly_usd_range
            assert lo <= hi == offer.hourly_usd
    for source in SNAPSHOT.sources.values():
        assert source.get("url") and source.get("retrieved")


def test_snapshot_covers_the_required_families_and_regions() -> None:
    names = {(it.cloud, it.name) for it in SNAPSHOT.instance_types}
    for prefix in AWS_FAMILIES:
        assert any(c == "aws" and n.startswith(prefix) for c, n in names), prefix
    for prefix in GCP_FAMILIES:
        assert any(c == "gcp" and n.startswith(prefix) for c, n in names), prefix
    assert ("aws", "p5.4xlarge") in names
    priced = {(o.cloud, o.region) for o in SNAPSHOT.offers}
    assert ("aws", "us-east-1") in priced
    assert len({r for c, r in priced if c == "gcp"}) >= 2
    t4 = [it for it in SNAPSHOT.instance_types if it.attached_accelerator == "nvidia-tesla-t4"]
    assert t4 and all(it.machine_type.startswith("n1-") for it in t4)


def test_us_east_1_prices_match_the_reference_facts() -> None:
    """gpu-cloud-facts.md §2: p5.48xlarge $55.04 and g6e.xlarge $1.861 on-demand in us-east-1."""

    def price(name: str) -> float:
        return next(
            o.hourly_usd
            for o in SNAPSHOT.offers
            if o.instance.name == name and o.region == "us-east-1" and o.market == "on-demand"
        )

    assert price("p5.48xlarge") == 55.04
    assert price("g6e.xlarge") == 1.861


def test_gpu_facts_are_sourced_and_consistent() -> None:
    gpus = load_gpus()
    for gpu in gpus.values():
        assert gpu.memory_mib > 0 and gpu.bandwidth_gbps > 0 and gpu.source
        assert gpu.fp8 == (gpu.compute_capability >= (8, 9)) or gpu.name == "A10G"
    assert gpus["H100"].nvlink_gbps == 900 and gpus["L40S"].nvlink_gbps is None
    assert gpu_by_alias(gpus, "nvidia-l4") is gpus["L4"]
    assert gpu_by_alias(gpus, "NVIDIA H200") is gpus["H200"]
    assert gpu_by_alias(gpus, "unknown") is None


def test_presets_have_sources() -> None:
    required = {
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "mixtral-8x7b",
        "llama-65b",
        "sdxl-base-1.0",
    }
    assert required <= set(preset_names())
    for name in preset_names():
        assert preset_entry(name)["source_ref"]["url"].startswith("https://")


def test_rates_are_loaded_per_cloud() -> None:
    rates = load_rates()
    assert set(rates) == {"aws", "gcp"}
    assert rates["aws"].block_usd_per_gb_month == 0.08
    assert "egress_internet" in rates["gcp"].low_confidence


def _mini() -> dict[str, Any]:
    return load_json(MINI_CATALOG)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d["instance_types"][0].update(gpu="Z9000"), "not in the GPU facts table"),
        (lambda d: d["offers"][0].update(instance_type="nope.large"), "is not declared"),
        (lambda d: d["offers"].append(copy.deepcopy(d["offers"][0])), "duplicate offer"),
        (lambda d: d["offers"][0].update(market="reserved"), "market 'reserved'"),
        (lambda d: d["offers"][0].update(hourly_usd=0), "must be positive"),
        (lambda d: d["instance_types"][0].update(node_interconnect="carrier-pigeon"), "node_interconnect"),
        (lambda d: d["spot_interruption"][0].update(bucket="sometimes"), "bucket"),
    ],
)
def test_loader_rejects_bad_catalogs(mutate: Any, message: str) -> None:
    doc = _mini()
    mutate(doc)
    with pytest.raises(CatalogError, match=message):
        catalog_from_doc(doc, "bad.json")


def test_missing_and_unreadable_catalog_files(tmp_path: Any) -> None:
    with pytest.raises(CatalogError, match="no such catalog file"):
        load_catalog(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CatalogError, match="not a readable catalog"):
        load_catalog(broken)
