"""No offer is rejected only because a figure is missing: the A10G, whose tensor throughput is
unpublished, plans on a conservative estimate from a sourced sibling, marked low confidence;
``placement.require_sourced`` restores the strict behaviour."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli.main import main
from selector.catalog import CatalogError, load_catalog, load_gpus, sourced_only
from selector.gpus import _parse_gpu
from selector.select import plan
from selector.spec import parse_spec

CATALOG = load_catalog()
G5_BATCH: dict[str, Any] = {
    "name": "sdxl-g5",
    "task": "batch",
    "model": {"preset": "sdxl-base-1.0"},
    "precision": "fp16",
    # batch 8 outgrows a 24 GB A10G once each further image adds its memory
    "work": {"items": 2e4, "tflop_per_item": 60, "batch": 1},
    "fault_tolerance": "stateless",
    "placement": {"clouds": ["aws"], "instance_types": ["g5.*"]},
}


def test_the_a10g_estimate_is_a_floor_from_its_sibling() -> None:
    a10g = load_gpus()["A10G"]
    assert a10g.estimated == ("bf16_tflops", "fp16_tflops")
    assert a10g.fp16_tflops == a10g.bf16_tflops == 31.24 and a10g.confidence == "low"
    assert "SYSRQ-A10" in a10g.estimate_source
    strict = sourced_only(a10g)
    assert strict.fp16_tflops is None and strict.bf16_tflops is None and not strict.estimated
    assert sourced_only(load_gpus()["H100"]) is load_gpus()["H100"]


def test_an_estimate_may_not_override_a_sourced_figure() -> None:
    entry = {
        "name": "X", "memory_mib": 1, "bandwidth_gbps": 1, "compute_capability": "8.0", "source": "DS",
        "bf16_tflops": 100, "estimates": {"bf16_tflops": 50},
    }  # fmt: skip
    with pytest.raises(CatalogError, match="bf16_tflops is sourced"):
        _parse_gpu(entry, "gpus[0]")


def test_a_batch_job_restricted_to_g5_plans_on_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    result = plan(parse_spec(G5_BATCH), CATALOG)
    assert result.status == "ok" and result.choice is not None
    assert result.choice.offer.instance.gpu.name == "A10G"
    hours = next(t for t in result.choice.shape.terms if t.name == "batch hours")
    assert "TFLOPS estimated" in hours.formula and "low confidence" in hours.formula
    assert result.choice.shape.job_hours is not None and result.choice.shape.job_hours > 0
    assert result.rejections.get("speed", 0) == 0


def test_the_estimate_shows_in_plan_and_offers(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "g5.yaml"
    spec.write_text(json.dumps(G5_BATCH))
    assert main(["plan", str(spec)]) == 0
    assert "(low-confidence figure)" in capsys.readouterr().out
    assert main(["offers", "--gpu", "A10G", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["confidence"] == "low" and r["gpu_figures_estimated"] for r in rows)


def test_require_sourced_restores_the_strict_behaviour() -> None:
    strict = {**G5_BATCH, "placement": {**G5_BATCH["placement"], "require_sourced": True}}
    result = plan(parse_spec(strict), CATALOG)
    assert result.status == "infeasible"
    assert "no sourced fp16 throughput for A10G" in result.rejection_examples["speed"]


def test_qlora_on_g5_plans_too() -> None:
    spec = {
        "name": "qlora-g5",
        "task": "finetune-qlora",
        "model": {"preset": "llama-2-7b"},
        "precision": "nf4",
        "training": {"tokens": "1e7", "sequence_tokens": 1024},
        "fault_tolerance": "checkpointed",
        "placement": {"clouds": ["aws"], "instance_types": ["g5.*"]},
    }
    result = plan(parse_spec(spec), CATALOG)
    assert result.choice is not None and result.choice.offer.instance.name.startswith("g5.")
