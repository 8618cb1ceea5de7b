"""The cost model: billing granularity, spot rework, storage, egress tiers, data gravity."""

from __future__ import annotations

import math

import pytest

from selector.catalog import Catalog
from selector.cost import (
    ENGINE_IMAGE_ALLOWANCE_GB,
    OS_IMAGE_GB,
    cost_inputs,
    disk_parts,
    disk_size_gb,
    interruption_rate_per_hour,
    offer_cost,
    spot_overhead_factor,
)
from selector.rates import load_rates
from selector.sizing import Shape, fit, requirements
from tests.conftest import QLORA_65B, SERVE_70B, spec_of

RATES = load_rates()


def test_billing_per_second_with_a_minute_minimum() -> None:
    aws = RATES["aws"]
    assert aws.billed_hours(10 / 3600) == pytest.approx(60 / 3600)  # 10 s bills 60 s
    assert aws.billed_hours(2.5) == pytest.approx(2.5)
    assert aws.billed_hours((3600 + 0.4) / 3600) == pytest.approx(3601 / 3600)  # rounds up a second
    assert RATES["gcp"].billed_hours(0.0) == pytest.approx(1 / 60)


def test_aws_internet_egress_tiers() -> None:
    """$0.09/GB to 10 TB, $0.085 for the next 40 TB (gpu-cloud-facts.md §4)."""
    aws = RATES["aws"]
    assert aws.internet_egress_usd(500) == pytest.approx(45.0)
    assert aws.internet_egress_usd(20480) == pytest.approx(10240 * 0.09 + 10240 * 0.085)
    # the same volume spread over two months stays in the first tier
    assert aws.internet_egress_usd(20480, months=2) == pytest.approx(20480 * 0.09)


def test_gcp_egress_first_tier() -> None:
    assert RATES["gcp"].internet_egress_usd(100) == pytest.approx(12.0)


def test_interruption_rate_from_advisor_bucket() -> None:
    """'<5%' of instances interrupted a month → −ln(0.95)/730 per hour."""
    assert interruption_rate_per_hour("<5%") == pytest.approx(-math.log(0.95) / 730)
    assert interruption_rate_per_hour(None) == interruption_rate_per_hour(">20%")


def test_spot_overhead_formula() -> None:
    """spot price × (1 + rate × (interval/2 + restart)), as the issue specifies."""
    assert spot_overhead_factor(0.1, 0.5, 1 / 6) == pytest.approx(1 + 0.1 * (0.25 + 1 / 6))


def _candidate(catalog: Catalog, spec_dict: dict, name: str, market: str, region: str | None = None):  # type: ignore[no-untyped-def]
    spec = spec_of(spec_dict)
    req = requirements(spec)
    offer = next(
        o
        for o in catalog.offers
        if o.instance.name == name and o.market == market and (region is None or o.region == region)
    )
    shape = fit(req, offer.instance)
    assert isinstance(shape, Shape)
    return spec, req, offer, shape


def test_serving_cost_for_the_duration(mini_catalog: Catalog) -> None:
    spec, req, offer, shape = _candidate(mini_catalog, SERVE_70B, "p4de.24xlarge", "on-demand")
    inputs = cost_inputs(spec, req)
    cost = offer_cost(offer, shape, inputs, RATES)
    assert cost.hours == 720 and cost.compute_usd == pytest.approx(27.447 * 720)
    # OS image + the 16-bit checkpoint vLLM downloads + its container image allowance
    disk_gb = math.ceil((OS_IMAGE_GB + 70.6e9 * 2 / 1e9 + ENGINE_IMAGE_ALLOWANCE_GB) / 10) * 10
    assert inputs.disk_gb == disk_gb
    assert cost.disk_usd == pytest.approx(0.08 * disk_gb * 720 / 730)
    assert cost.egress_usd == pytest.approx(45.0)
    # vLLM's weights kept in the bucket for replacement machines: 70.6B × 2 B, for the run + 7 days
    assert inputs.bucket_gb == pytest.approx(70.6e9 * 2 / 1e9)
    assert cost.bucket_usd == pytest.approx(0.023 * 141.2 * (720 + 168) / 730)
    parts = cost.compute_usd + cost.disk_usd + cost.bucket_usd + cost.egress_usd
    assert cost.total_usd == pytest.approx(parts)


def test_no_weights_cache_without_a_model_server(mini_catalog: Catalog) -> None:
    slower = {**SERVE_70B["serving"], "tokens_per_s_per_stream": 10}  # eager per-layer latency assumed
    own_server = {**SERVE_70B, "serving": slower, "job": {"command": "my-server --port 8000"}}
    spec, req, _, _ = _candidate(mini_catalog, own_server, "p4de.24xlarge", "on-demand")
    assert spec.server_engine == "none" and cost_inputs(spec, req).bucket_gb == 0


def test_training_cost_per_job_with_spot_rework_and_data_gravity(mini_catalog: Catalog) -> None:
    # eager kernels (training.compile false, the default) take ~60 h on one L40S: a 96 h ttl keeps it
    relaxed = {**QLORA_65B, "teardown": {"ttl": "96h"}}
    spec, req, offer, shape = _candidate(mini_catalog, relaxed, "g6e.xlarge", "spot")
    inputs = cost_inputs(spec, req)
    cost = offer_cost(offer, shape, inputs, RATES)
    assert shape.job_hours is not None
    rate = interruption_rate_per_hour("5-10%")
    factor = 1 + rate * (0.5 / 2 + 1 / 6)
    assert cost.spot_factor == pytest.approx(factor)
    assert cost.setup_hours > 0
    assert cost.hours == pytest.approx((shape.job_hours + cost.setup_hours) * factor)
    assert 0 <= cost.billed_hours - cost.hours < 1 / 3600  # rounded up to the second
    assert cost.compute_usd == pytest.approx(1.21 * cost.billed_hours)
    assert cost.data_transfer_usd == 0  # dataset already in us-east-1 on AWS
    # checkpoint bucket: two adapter checkpoints kept for the job plus 7 days
    assert cost.bucket_usd == pytest.approx(0.023 * inputs.bucket_gb * (cost.hours + 168) / 730)
    _, _, gcp_offer, gcp_shape = _candidate(mini_catalog, QLORA_65B, "a3-highgpu-4g", "spot")
    moved = offer_cost(gcp_offer, gcp_shape, inputs, RATES)
    assert moved.data_transfer_usd == pytest.approx(5 * 0.09)  # 5 GB out of AWS to the internet


def test_cross_region_on_gcp_is_reported_unpriced(mini_catalog: Catalog) -> None:
    spec_dict = {**QLORA_65B, "data": {"cloud": "gcp", "region": "us-central1"}}
    spec, req, offer, shape = _candidate(mini_catalog, spec_dict, "a3-highgpu-4g", "spot")
    cost = offer_cost(offer, shape, cost_inputs(spec, req), RATES)
    assert cost.data_transfer_usd == 0 and any("no sourced price" in u for u in cost.unpriced)


def test_deepseek_r1_disk_and_bucket_hold_its_fp8_files_not_two_bytes_a_parameter() -> None:
    """Issue 24, defect 10: DeepSeek-R1 publishes FP8 weights, 688.6 GB of safetensors by the
    Hub's per-dtype counts (BF16 3.92e9 × 2 B + F8_E4M3 6.806e11 × 1 B + F32 4.16e7 × 4 B); the
    plan sized its download, disk and bucket as 671B × 2 B = 1,342 GB."""
    spec = spec_of(
        {
            "name": "r1",
            "task": "serve",
            "model": {"preset": "deepseek-r1"},
            "precision": "fp8",
            "serving": {"context_tokens": 8192, "concurrency": 8},
            "duration": "24h",
        }
    )
    req = requirements(spec)
    files = 3_918_786_560 * 2 + 680_571_043_840 + 41_555_600 * 4
    assert spec.arch().checkpoint_bytes == files == req.weights_file_bytes
    parts = {p.name: p.gb for p in disk_parts(spec, req)}
    assert parts["weights"] == pytest.approx(688.57, abs=0.01)
    assert cost_inputs(spec, req).bucket_gb == pytest.approx(688.57, abs=0.01)
    assert disk_size_gb(spec, req) == 820


@pytest.mark.parametrize("preset", ["deepseek-v3", "deepseek-v3.1", "deepseek-v3.2"])
def test_deepseek_v3_family_disk_holds_its_files_and_every_part(preset: str) -> None:
    """The V3 family publishes the same 671B main + 14B MTP FP8 files as R1, about 688.6 GB
    (deepseek-ai/DeepSeek-V3's card: "685B ... 671B of the Main Model weights and 14B of the
    MTP Module weights"); shape-based sizing gave 673 GB, and a disk (810 GB) below its own
    parts (100 + 688.6 + 30 GB)."""
    spec = spec_of(
        {
            "name": "v3",
            "task": "serve",
            "model": {"preset": preset},
            "precision": "fp8",
            "serving": {"context_tokens": 8192, "concurrency": 8},
            "duration": "24h",
        }
    )
    req = requirements(spec)
    parts = {p.name: p.gb for p in disk_parts(spec, req)}
    assert parts["weights"] >= 688.5
    assert cost_inputs(spec, req).bucket_gb >= 688.5
    assert disk_size_gb(spec, req) >= sum(parts.values())
