"""The fleet's fallback list: same cloud, region and market as the choice, same shape of
replica, cheapest expected job first; shown by `gpufit plan`, pinned by locks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from providers.lock import locked_catalog, make_lock, read_lock, reviewed_difference
from selector.catalog import load_catalog
from selector.cost import cost_inputs, offer_cost
from selector.fallbacks import MAX_FALLBACKS, fleet_shape, fleet_units
from selector.rates import load_rates
from selector.select import Plan, plan
from selector.spec import load_spec, parse_spec
from tests.conftest import ROOT
from tests.pulumi_harness import stack_config

CATALOG = load_catalog()
NOW = "2026-12-02T12:00:00Z"


def stack_plan(stack: str, **changes: Any) -> Plan:
    if not changes:
        return plan(load_spec(ROOT / "stacks" / f"Pulumi.{stack}.yaml"), CATALOG)
    workload = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"]
    return plan(parse_spec({**workload, **changes}), CATALOG)


def test_fallbacks_share_region_market_and_replica_shape_in_cost_order() -> None:
    result = stack_plan("sdxl-batch")
    choice = result.choice
    assert choice is not None
    fallbacks = result.fallbacks
    assert 2 <= len(fallbacks) <= MAX_FALLBACKS
    for f in fallbacks:
        assert (f.offer.cloud, f.offer.region, f.offer.market) == (
            choice.offer.cloud,
            choice.offer.region,
            choice.offer.market,
        )
        assert f.shape.nodes_per_replica == 1 and f.shape.tensor_parallel == choice.shape.tensor_parallel
        assert f.shape.gpus_per_replica == choice.shape.gpus_per_replica
        assert f.offer.instance.name != choice.offer.instance.name
        # the whole fleet on this type: its replicas carry the choice's capacity
        assert f.shape.instances * f.weighted_capacity >= result.fleet_units
    assert len({f.offer.instance.name for f in fallbacks}) == len(fallbacks)
    totals = [f.cost.total_usd for f in fallbacks]
    assert totals == sorted(totals) and totals[0] >= choice.cost.total_usd


def test_a_fallback_holds_the_choices_replicas_and_costs_the_job_on_its_own_type() -> None:
    """Every machine of a group runs the same boot script with no replica index, so a fallback
    holds exactly the choice's replicas per instance: 8 one-GPU replicas on sdxl's g6e.48xlarge,
    so only other 8-GPU types, each costed for the whole job at its own speed."""
    result = stack_plan("sdxl-batch")
    choice = result.choice
    assert choice is not None and choice.shape.replicas_per_instance == 8
    rates = load_rates()
    inputs = cost_inputs(result.spec, result.requirements)
    for f in result.fallbacks:
        assert f.weighted_capacity == 8 and f.offer.instance.gpu_count == 8
        assert f.shape.instances == choice.shape.instances
        assert f.cost == offer_cost(f.offer, f.shape, inputs, rates)
    h200 = next(f for f in result.fallbacks if f.offer.instance.name == "p5e.48xlarge")
    assert h200.shape.job_hours is not None and choice.shape.job_hours is not None
    assert h200.shape.job_hours < choice.shape.job_hours  # faster GPUs: the job is shorter


def test_fleet_shape_scales_a_jobs_hours_with_its_instances() -> None:
    own = stack_plan("sdxl-batch").choice
    assert own is not None
    doubled = fleet_shape(own.shape, 2 * fleet_units(own.shape))
    assert doubled.instances == 2 * own.shape.instances
    assert doubled.job_hours == pytest.approx(own.shape.job_hours / 2)


def test_serving_fallbacks_reach_the_token_rate_with_the_choices_replicas() -> None:
    result = stack_plan("llama8b-fp8")
    assert result.choice is not None and result.fleet_units == result.choice.shape.replicas == 5
    for f in result.fallbacks:
        assert f.shape.replicas == 5
        assert f.shape.tokens_per_s_per_replica is not None
        assert f.shape.tokens_per_s_per_replica * 5 >= 4000 - 1e-6


def test_no_fallbacks_for_a_replica_spanning_nodes_and_placement_is_honoured() -> None:
    assert stack_plan("llama70b-full-ft").fallbacks == ()
    only = stack_plan("sdxl-batch", placement={"clouds": ["aws"], "instance_types": ["g6e.*", "g6.*"]})
    assert [f.offer.instance.name for f in only.fallbacks] == ["g6.48xlarge"]


def test_fallbacks_keep_to_the_budget() -> None:
    free = stack_plan("sdxl-batch")
    cap = sorted(f.cost.total_usd for f in free.fallbacks)[2]
    tight = stack_plan("sdxl-batch", budget={"max_total_usd": cap})
    assert tight.fallbacks and all(f.cost.total_usd <= cap for f in tight.fallbacks)
    assert len(tight.fallbacks) < len(free.fallbacks)


def test_gcp_fallbacks_attach_the_same_gpus() -> None:
    spec = {
        "name": "sdxl-gcp",
        "task": "batch",
        "model": {"preset": "sdxl-base-1.0"},
        "precision": "fp16",
        "work": {"items": 2e4, "tflop_per_item": 60, "batch": 8},
        "fault_tolerance": "stateless",
        "teardown": {"ttl": "12h"},
        "placement": {"clouds": ["gcp"]},
    }
    result = plan(parse_spec(spec), CATALOG)
    assert result.choice is not None
    attached = result.choice.offer.instance.attached_accelerator
    assert attached is not None and result.fallbacks
    for f in result.fallbacks:
        assert f.offer.instance.attached_accelerator == attached
        assert f.offer.instance.gpu_count == result.choice.offer.instance.gpu_count
        assert f.weighted_capacity == result.choice.shape.replicas_per_instance  # a MIG counts VMs


def test_plan_shows_and_exports_the_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")]) == 0
    fleet = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Fleet"))
    assert fleet.startswith(
        "Fleet     fallbacks: p5e.48xlarge us-east-2 spot $16.39/h, p5.48xlarge us-east-2 spot"
    )
    assert main(["plan", str(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml"), "--json"]) == 0
    choice = json.loads(capsys.readouterr().out)["choice"]
    expected = stack_plan("sdxl-batch")
    assert [f["instance_type"] for f in choice["fallbacks"]] == [
        f.offer.instance.name for f in expected.fallbacks
    ]
    first = choice["fallbacks"][0]
    assert {"instance_type", "market", "hourly_usd", "weighted_capacity"} <= set(first)
    assert (first["market"], first["weighted_capacity"]) == ("spot", 8)
    assert choice["fleet_units"] == 8 and choice["weighted_capacity"] == 8


def test_a_lock_pins_the_fallbacks_and_replans_them_exactly(tmp_path: Path) -> None:
    result = stack_plan("sdxl-batch")
    from datetime import UTC, datetime

    lock = make_lock(result, ROOT / "stacks" / "Pulumi.sdxl-batch.yaml", datetime(2026, 12, 2, tzinfo=UTC))
    assert [f["offer"]["instance_type"] for f in lock["fallbacks"]] == [
        f.offer.instance.name for f in result.fallbacks
    ]
    replanned = plan(result.spec, locked_catalog(lock, CATALOG.gpus))
    assert reviewed_difference(lock, replanned) is None
    changed = json.loads(json.dumps(lock))
    changed["fallbacks"][0]["weighted_capacity"] = 3  # as if sizing had changed since the review
    assert "fallbacks now plan as" in (reviewed_difference(changed, replanned) or "")


def test_lock_check_finds_a_changed_fallback_list_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.sdxl-batch.yaml").write_text((ROOT / "stacks" / "Pulumi.sdxl-batch.yaml").read_text())
    assert main(["lock", "sdxl-batch", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 0
    path = stacks / "sdxl-batch.lock.json"
    lock = read_lock(path)
    lock["fallbacks"].reverse()  # as if the review had seen another order
    path.write_text(json.dumps(lock))
    capsys.readouterr()
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 8
    out = capsys.readouterr().out
    assert "stale" in out and "fallbacks now plan as" in out
