"""Soft-capped attention (Gemma 2) runs eagerly in training and keeps each layer's scores, and Gemma
2's and 3's extra norms keep their inputs (selector/sizing/activations.py, measured on Hugging Face
Gemma2 and litgpt's Gemma-2-2b, 2026-12-05)."""

from __future__ import annotations

import dataclasses

import pytest

from selector.model_arch import ModelArch
from selector.presets import arch_from_preset
from selector.sizing import requirements
from selector.sizing.activations import eager_score_bytes_per_sbh, saved_bytes_per_sbh
from selector.sizing.terms import GIB
from selector.spec import SpecError, parse_spec

# Gemma-2-2B's shape, the measured one: hidden 2304, 8 heads, 4 key/value heads, ffn 9216
GEMMA2 = ModelArch(
    name="gemma2-probe",
    kind="transformer",
    params=2.6e9,
    params_active=2.6e9,
    layers=26,
    hidden=2304,
    heads=8,
    kv_heads=4,
    head_dim=256,
    ffn=9216,
    attention_softcap=True,
    post_norms=True,
    fp32_norms=True,
)

# measured per-layer bytes ÷ (s·b·h), CUDA-corrected, by (framework, task, s)
MEASURED = {
    ("hf", "finetune-lora", 256): 58.54,
    ("hf", "finetune-lora", 512): 65.62,
    ("hf", "finetune-lora", 1024): 79.83,
    ("hf", "finetune-full", 512): 89.37,
    ("hf", "finetune-full", 1024): 103.58,
    ("litgpt", "finetune-lora", 256): 58.25,
    ("litgpt", "finetune-lora", 512): 65.31,
    ("litgpt", "finetune-lora", 1024): 79.51,
    ("litgpt", "finetune-full", 512): 89.37,
    ("litgpt", "finetune-full", 1024): 103.58,
}


@pytest.mark.parametrize("cell", sorted(MEASURED), ids=str)
def test_gemma2_layers_cover_their_measured_cells(cell: tuple[str, str, int]) -> None:
    """LoRA on q and v with dropout (bf16 adapters) and a full fine-tune: the line, the two extra norms
    and 8 B per score element cover each measured cell, by at most a few s·b·h."""
    framework, task, s = cell
    dropout = task == "finetune-lora"
    line, formula = saved_bytes_per_sbh(GEMMA2, task, "q-v", dropout, "bf16", framework, eager=True)
    value = line + eager_score_bytes_per_sbh(GEMMA2, s, eager=True)
    assert MEASURED[cell] <= value <= MEASURED[cell] + 3.5, formula
    assert "post-attention and post-MLP norms" in formula


def test_the_scores_grow_with_the_sequence_and_vanish_without_softcapping() -> None:
    """8 B × heads × s ÷ hidden s·b·h a layer: 14.2 at 512 tokens for Gemma-2-2B's shape, 113.8 at
    4,096; a model without soft-capped logits (SDPA) keeps none, and without post norms nothing extra."""
    assert eager_score_bytes_per_sbh(GEMMA2, 512, eager=True) == pytest.approx(8 * 8 * 512 / 2304)
    assert eager_score_bytes_per_sbh(GEMMA2, 4096, eager=True) == pytest.approx(8 * 8 * 4096 / 2304)
    assert eager_score_bytes_per_sbh(GEMMA2, 4096, eager=False) == 0.0  # FlashAttention-2 soft-caps
    plain = dataclasses.replace(GEMMA2, attention_softcap=False, post_norms=False, fp32_norms=False)
    with_norms, _ = saved_bytes_per_sbh(GEMMA2, "finetune-lora", "q-v", True, "bf16", eager=True)
    without, _ = saved_bytes_per_sbh(plain, "finetune-lora", "q-v", True, "bf16")
    assert with_norms - without == pytest.approx(8 + 4 * (1 - 0.5))  # norms, and k and v at every head
    full_norms, _ = saved_bytes_per_sbh(GEMMA2, "finetune-full", "q-v", False, "bf16")
    full_plain, _ = saved_bytes_per_sbh(plain, "finetune-full", "q-v", False, "bf16")
    assert full_norms - full_plain == pytest.approx(16 + 4)  # two extra norms, fp32 pre-norm values


def test_gemma2_presets_carry_softcapping_and_post_norms() -> None:
    """From config.json: Gemma 2's attn_logit_softcapping and Gemma 2 and 3's extra norms; Llama has
    neither."""
    gemma2 = arch_from_preset("gemma-2-9b")
    assert gemma2.attention_softcap and gemma2.post_norms
    gemma3 = arch_from_preset("gemma-3-12b-it")
    assert gemma3.post_norms and gemma3.qk_norm and not gemma3.attention_softcap
    llama = arch_from_preset("llama-3.1-8b")
    assert not llama.attention_softcap and not llama.post_norms


def test_a_gemma2_fine_tune_plans_its_scores() -> None:
    """Gemma-2-9B LoRA at 8,192 tokens without recompute: the scores alone are 42 layers × 8 B × 16
    heads × 8,192² = 336 GiB, and the plan's activations carry them."""
    spec = {
        "name": "gemma",
        "task": "finetune-lora",
        "model": {"preset": "gemma-2-9b"},
        "precision": "bf16",
        "training": {"tokens": 1e8, "sequence_tokens": 8192, "activation_checkpointing": False},
    }
    req = requirements(parse_spec(spec))
    acts = next(t for t in req.terms if t.name == "activations")
    scores = 42 * 8 * 16 * 8192 * 8192 / GIB
    backward = 6.5 * 16 * 8192 * 8192 / GIB  # one layer's attention backward in flight
    assert "soft-capped eager attention scores" in acts.formula and "attention backward" in acts.formula
    spec["training"]["softcap_attention"] = "flash-attention-2"
    flash = next(t for t in requirements(parse_spec(spec)).terms if t.name == "activations")
    assert acts.value - flash.value == pytest.approx(scores + backward + 42 * 4 * 0.5 * 8192 * 3584 / GIB)
    assert "scores" not in flash.formula


def test_query_and_key_norms_keep_their_fp32_inputs() -> None:
    """Qwen 3's q_norm and k_norm keep each head's fp32 queries and keys (4 B an element) and, trained,
    their 16-bit normalised values (2 more): Qwen3-8B's 32 + 8 heads of 128 over hidden 4,096."""
    qwen3 = arch_from_preset("qwen3-8b")
    assert qwen3.qk_norm and not qwen3.post_norms
    plain = dataclasses.replace(qwen3, qk_norm=False)
    width = (32 + 8) * 128 / 4096
    for task, per in (("finetune-lora", 4.0), ("finetune-full", 6.0)):
        normed, formula = saved_bytes_per_sbh(qwen3, task, "q-v", False, "bf16")
        assert normed - saved_bytes_per_sbh(plain, task, "q-v", False, "bf16")[0] == pytest.approx(
            per * width
        )
        assert "query and key norms" in formula


def test_the_norm_flags_belong_to_an_explicit_architecture() -> None:
    """Beside a preset they would be ignored: a one-line spec error says where they come from."""
    spec = {"name": "gemma", "task": "finetune-lora", "precision": "bf16", "training": {"tokens": 1e8}}
    with pytest.raises(SpecError) as err:
        parse_spec({**spec, "model": {"preset": "gemma-2-9b", "attention_softcap": True}})
    assert any(
        "model.attention_softcap: for an explicit architecture only" in str(p) for p in err.value.problems
    )


def test_a_checkpointed_batch_keeps_one_layers_scores_and_one_backward() -> None:
    """Full recompute at micro batch 2: each of Gemma-2-9B's 42 layers keeps its input (2·s·b·h), one
    layer its full line with its scores, and one layer's attention backward adds 6.5 B per score
    element; all of it scales with the batch."""
    s, b, h, heads, layers = 4096, 2, 3584, 16, 42
    spec = {
        "name": "gemma",
        "task": "finetune-lora",
        "model": {"preset": "gemma-2-9b"},
        "precision": "bf16",
        "training": {"tokens": 1e8, "sequence_tokens": s, "micro_batch": b, "adapter_dtype": "bf16"},
    }
    acts = next(t for t in requirements(parse_spec(spec)).terms if t.name == "activations").value * GIB
    # LoRA with bf16 adapters on every linear layer, no dropout: 16 + 4·1 (eager: k, v at every head)
    # + 8·14336/3584, Gemma's two extra norms 8, the scores 8·16·4096/3584
    one_layer = 16 + 4 + 8 * 14336 / h + 8 + 8 * heads * s / h
    expected = layers * 2 * s * b * h + one_layer * s * b * h + 6.5 * heads * s * s * b
    assert acts == pytest.approx(expected)


def test_fp32_norms_keep_fp32_query_and_key_values_when_trained() -> None:
    """Gemma 3's and OLMo 2's norms multiply their weight in fp32: a trained query/key norm keeps 8 B
    per element (measured 8.06), and the two pre-norms 2 × 2 s·b·h more than Llama's."""
    arch = dataclasses.replace(GEMMA2, attention_softcap=False, post_norms=False, qk_norm=True)
    plain = dataclasses.replace(arch, qk_norm=False, fp32_norms=False)
    width = (8 + 4) * 256 / 2304
    trained, _ = saved_bytes_per_sbh(arch, "finetune-full", "q-v", False, "bf16")
    base, _ = saved_bytes_per_sbh(plain, "finetune-full", "q-v", False, "bf16")
    assert trained - base == pytest.approx(8 * width + 4)


def test_litgpt_cannot_run_soft_capped_attention_with_flash_attention() -> None:
    spec = {
        "name": "gemma",
        "task": "finetune-lora",
        "precision": "bf16",
        "model": {"preset": "gemma-2-9b"},
        "training": {"tokens": 1e8, "framework": "litgpt", "softcap_attention": "flash-attention-2"},
    }
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert any("litgpt runs soft-capped attention eagerly" in str(p) for p in err.value.problems)
