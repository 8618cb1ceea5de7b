"""litgpt's own model code keeps different activations from a Hugging Face + PEFT layer
(selector/sizing/activations.py LITGPT_*, measured by scripts/measure_litgpt_saved_activations.py):
each line covers the cells measured on CUDA-corrected bytes, by at most a few tenths."""

from __future__ import annotations

import dataclasses

import pytest

from selector.model_arch import ModelArch
from selector.sizing.activations import saved_bytes_per_sbh

# (task, targets, dropout, kv heads of 16, ffn / hidden) -> measured bytes per s·b·h, CUDA-corrected,
# hidden 1024, 16 heads, LoRA rank 8 (rank 32 measured +0.09 on q-v), measured 2026-12-05 with
# scripts/measure_litgpt_saved_activations.py (torch 2.13.0, litgpt 0.4.13)
MEASURED = {
    ("finetune-lora", "q-v", True, 4, 3.5): 42.64,
    ("finetune-lora", "q-v", True, 8, 3.5): 43.14,
    ("finetune-lora", "q-v", True, 16, 2.6875): 43.27,
    ("finetune-lora", "q-v", True, 16, 3.5): 48.15,
    ("finetune-lora", "q-v", True, 1, 3.5): 42.51,
    ("finetune-lora", "q-v", False, 4, 3.5): 41.64,
    ("finetune-lora", "all-linear", True, 4, 3.5): 59.70,
    ("finetune-lora", "all-linear", True, 16, 2.6875): 56.38,
    ("finetune-lora", "all-linear", False, 4, 3.5): 50.20,
    ("finetune-qlora", "q-v", True, 4, 3.5): 55.64,
    ("finetune-qlora", "q-v", True, 16, 2.6875): 54.65,
    ("finetune-qlora", "q-v", False, 8, 3.5): 53.14,
    ("finetune-full", "q-v", False, 4, 3.5): 58.09,
    ("finetune-full", "q-v", False, 16, 2.6875): 55.59,
}

BASE = ModelArch(
    name="probe",
    kind="transformer",
    params=1e9,
    params_active=1e9,
    layers=24,
    hidden=1024,
    heads=16,
    kv_heads=4,
)


@pytest.mark.parametrize("cell", sorted(MEASURED), ids=str)
def test_each_litgpt_line_covers_its_measured_cells(cell: tuple[str, str, bool, int, float]) -> None:
    task, targets, dropout, kv, ffn = cell
    arch = dataclasses.replace(BASE, kv_heads=kv, ffn=int(ffn * 1024))
    value, formula = saved_bytes_per_sbh(arch, task, targets, dropout, "bf16", "litgpt")  # type: ignore[arg-type]
    assert MEASURED[cell] <= value <= MEASURED[cell] + 0.5, formula
    assert "measured, litgpt" in formula


def test_litgpt_keeps_more_than_the_hf_layer_where_it_expands_keys_and_values() -> None:
    """Llama-3-8B's shape (8 of 32 key/value heads, ffn 3.5h), QLoRA on q and v with dropout, litgpt's
    config_hub setting: 27.3 + 2·0.25 + 8·3.5 = 55.8 s·b·h a layer, where the HF + PEFT layer keeps
    22 + 4·0.25 + 8·3.5 = 51; a model without grouped-query attention adds 4 (the fused qkv output
    kept whole); fp32 adapters (bf16-mixed) and other frameworks keep the HF lines."""
    arch = dataclasses.replace(BASE, hidden=4096, heads=32, kv_heads=8, ffn=14336)
    litgpt, _ = saved_bytes_per_sbh(arch, "finetune-qlora", "q-v", True, "bf16", "litgpt")
    hf, _ = saved_bytes_per_sbh(arch, "finetune-qlora", "q-v", True, "bf16", None)
    assert litgpt == pytest.approx(55.8) and hf == pytest.approx(51.0)
    mha = dataclasses.replace(arch, kv_heads=32)
    assert saved_bytes_per_sbh(mha, "finetune-qlora", "q-v", True, "bf16", "litgpt")[0] == pytest.approx(
        27.3 + 2 + 28 + 4
    )
    fp32 = saved_bytes_per_sbh(arch, "finetune-lora", "q-v", True, "fp32", "litgpt")
    assert fp32 == saved_bytes_per_sbh(arch, "finetune-lora", "q-v", True, "fp32", None)
    torchtune = saved_bytes_per_sbh(arch, "finetune-lora", "q-v", True, "bf16", "torchtune")
    assert torchtune == saved_bytes_per_sbh(arch, "finetune-lora", "q-v", True, "bf16", None)


def test_one_key_value_head_keeps_four_over_the_heads() -> None:
    """With one key/value head litgpt keeps 4 ÷ heads more (0.25 of 16 measured): 0.5 for Gemma-2B's
    8 heads; none between one head and all of them."""
    gemma = dataclasses.replace(BASE, heads=8, kv_heads=1, ffn=int(3.5 * 1024))
    value, formula = saved_bytes_per_sbh(gemma, "finetune-lora", "q-v", True, "bf16", "litgpt")
    assert value == pytest.approx(21.3 + 2 * 1 / 8 + 6 * 3.5 + 0.5) and "+ 0.5 (fused qkv kept)" in formula
    grouped = dataclasses.replace(gemma, kv_heads=2)
    assert saved_bytes_per_sbh(grouped, "finetune-lora", "q-v", True, "bf16", "litgpt")[0] == pytest.approx(
        21.3 + 2 * 2 / 8 + 6 * 3.5
    )
