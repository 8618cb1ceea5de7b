"""What training frameworks really do with memory (activation offloading, PEFT's k-bit
preparation or none, FP8 training) and the headroom a plan keeps (the engine's own budget, or the
CUDA context and allocator headroom where no engine budgets): each rule against its source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selector.calibration import calibration_instance, compute_rows, load_cases
from selector.catalog import load_gpus
from selector.sizing import Rejection, Requirements, fit, requirements, usable_gib
from selector.sizing.training import FP8_TRAINING_SPEEDUP, FP8_WEIGHT_COPY_BYTES
from selector.spec import parse_spec
from tests.conftest import ROOT

GPUS = load_gpus()


def _req(task: str, precision: str, **training: Any) -> Requirements:
    spec = {
        "name": "tt",
        "task": task,
        "model": {"preset": "llama-3.2-3b"},
        "precision": precision,
        "training": {"tokens": 1e9, "sequence_tokens": 4096, "micro_batch": 2, **training},
    }
    return requirements(parse_spec(spec))


def _term(req: Requirements, name: str) -> float:
    return next(t.value for t in req.terms if t.name == name)


def test_activation_offload_keeps_two_layers_on_the_gpu_and_the_rest_on_the_host() -> None:
    """torchtune's OffloadActivations moves each layer's saved activations to host memory."""
    on = _req("finetune-lora", "bf16", activation_offload=True)
    off = _req("finetune-lora", "bf16")
    layers, s, b, h = 28, 4096, 2, 3072
    assert _term(on, "activations") == pytest.approx((2 * 2 + 34) * s * b * h / 2**30)
    assert _term(off, "activations") == pytest.approx((layers * 2 + 34) * s * b * h / 2**30)
    assert on.host_bytes == pytest.approx((layers - 2) * 2 * s * b * h)
    assert off.host_bytes == 0.0


def test_kbit_preparation_none_keeps_16_bit_embeddings_and_the_optimiser_on_the_gpu() -> None:
    """PEFT casts unquantised params to fp32 and pages the optimiser; torchtune does neither."""
    peft = _req("finetune-qlora", "nf4")
    torchtune = _req("finetune-qlora", "nf4", kbit_preparation="none")
    assert "k-bit prep fp32 embeddings" in {t.name for t in peft.terms}
    assert _term(torchtune, "unquantised embeddings") == pytest.approx(
        _term(peft, "k-bit prep fp32 embeddings") * (2 - 0.516) / (4 - 0.516), rel=0.01
    )
    assert peft.host_bytes > 0 and torchtune.host_bytes == 0.0
    assert "adapter optimiser state" in {t.name for t in torchtune.terms}


def test_fp8_training_keeps_16_bit_weights_and_runs_1_2x_bf16() -> None:
    """Transformer Engine keeps the 16-bit weights plus FP8 copies; FP8 training runs ~1.2x BF16."""
    bf16 = _req("finetune-full", "bf16")
    fp8 = _req("finetune-full", "fp8")
    per_param = (fp8.sharded_bytes - bf16.sharded_bytes) / fp8.arch.params
    assert per_param == pytest.approx(FP8_WEIGHT_COPY_BYTES)
    it = calibration_instance(GPUS["H100"], 8)
    a, b = fit(bf16, it), fit(fp8, it)
    assert not isinstance(a, Rejection) and not isinstance(b, Rejection)
    assert a.job_hours is not None and b.job_hours is not None
    assert a.job_hours / b.job_hours == pytest.approx(FP8_TRAINING_SPEEDUP)


def test_serving_headroom_is_the_engines_budget_without_the_context_again() -> None:
    """vLLM fills gpu_memory_utilization × memory; its CUDA context is outside that budget."""
    h100 = GPUS["H100"]
    assert usable_gib(h100) == pytest.approx(h100.memory_gib * 0.9)
    train = _req("finetune-lora", "bf16")
    assert usable_gib(h100, train) == pytest.approx(h100.memory_gib * 0.95 - 0.75)


def test_settings_the_sources_ran_are_accepted() -> None:
    """No memory row a source ran (fine-tuning or serving peak) is refused by gpufit's memory plan,
    and a setting the source ran out of memory at is never accepted."""
    rows = compute_rows(load_cases(ROOT / "docs" / "calibration.yaml"))
    memory = [r for r in rows if r.case.kind == "memory_gib" and not r.case.excluded]
    assert [r.case.id for r in memory if r.refused] == []
    assert [r.case.id for r in memory if r.case.oom and r.accepted] == []
    unsloth = next(r for r in rows if r.case.id == "unsloth-hf-fa2-llama31-8b-qlora-maxctx-80gb")
    assert "over 2 GPUs" not in unsloth.detail  # it ran on one 80 GB GPU


def test_a_refused_setting_is_flagged(tmp_path: Path) -> None:
    """A per-GPU peak the source measured on one GPU that gpufit would spread over two is a refusal."""
    path = tmp_path / "cases.yaml"
    path.write_text(
        """schema_version: 1
cases:
  - id: refused-row
    kind: memory_gib
    measure: per_gpu
    model: {preset: llama-3.1-8b}
    gpu: L4
    gpus: 1
    task: finetune-full
    precision: bf16
    training: {tokens: 1e9}
    setting: s
    published: {value: 20, unit: GiB}
    source: {url: "https://example.org/x", title: t, locator: l}
""",
        encoding="utf-8",
    )
    (row,) = compute_rows(load_cases(path))
    assert row.refused and "which the source ran" in row.detail


def test_eager_training_is_timed_slower_than_compiled() -> None:
    """`training.compile: false` (eager PyTorch) takes 8,998 / 7,075 = 1.27x the compiled time
    (torchtune Llama-3.2-3B, A100, packed), the baseline gpufit's utilisation was fitted on."""
    it = calibration_instance(GPUS["A100-80GB"], 1)
    eager = fit(_req("finetune-full", "bf16", compile=False, optimizer="adamw-bf16"), it)
    compiled = fit(_req("finetune-full", "bf16", optimizer="adamw-bf16"), it)
    assert not isinstance(eager, Rejection) and not isinstance(compiled, Rejection)
    assert eager.job_hours is not None and compiled.job_hours is not None
    assert eager.job_hours / compiled.job_hours == pytest.approx(8998 / 7075)


def test_a_tied_head_is_one_embedding_matrix_in_the_kbit_cast() -> None:
    """Llama-3.2-3B ties its output head to the embeddings (tie_word_embeddings): PEFT upcasts one
    128,256 × 3,072 matrix, not two."""
    from selector.sizing.terms import BYTES_PER_PARAM

    peft = _req("finetune-qlora", "nf4")
    one = 128256 * 3072 * (4 - BYTES_PER_PARAM["nf4"]) / 2**30
    assert _term(peft, "k-bit prep fp32 embeddings") == pytest.approx(one)


def test_a_chunked_loss_needs_compile_to_save_its_memory() -> None:
    """torchtune's chunked cross-entropy keeps the bf16 logits and one fp32 chunk when compiled
    (3 B/logit); eager, autograd keeps every chunk's fp32 log-softmax (6 B/logit)."""
    compiled = _req("finetune-lora", "bf16", loss="chunked")
    eager = _req("finetune-lora", "bf16", loss="chunked", compile=False)
    logits = 4096 * 2 * 128256 / 2**30
    assert _term(compiled, "loss logits") == pytest.approx(logits * 3)
    assert _term(eager, "loss logits") == pytest.approx(logits * 6)
