"""The KV cache by attention kind: multi-head latent attention (DeepSeek-V2/V3) caches the
latent, not per-head keys and values, and every tensor-parallel rank holds it whole;
sliding-window layers keep at most their window."""

from __future__ import annotations

from typing import Any

import pytest

from selector.catalog import load_catalog
from selector.select import plan
from selector.sizing import GIB, kv_bytes_per_token, kv_cache_bytes, requirements
from selector.spec import SpecError, parse_spec

DSV3: dict[str, Any] = {
    "name": "dsv3",
    "task": "serve",
    "model": {"preset": "deepseek-v3"},
    "precision": "fp8",
    "serving": {"context_tokens": 32768, "concurrency": 16},
}


def test_deepseek_v3_sizes_its_kv_cache_by_mla() -> None:
    req = requirements(parse_spec(DSV3))
    arch = req.arch
    assert arch.is_mla and (arch.kv_lora_rank, arch.qk_rope_head_dim) == (512, 64)
    per_token = kv_bytes_per_token(arch, 2.0)
    assert per_token == 61 * (512 + 64) * 2  # 70,272 B, not 2 × 61 × 128 heads × 128 × 2 B
    by_heads = 2 * 61 * 128 * 128 * 2
    assert by_heads / per_token > 50
    assert req.kv_bytes == pytest.approx(per_token * 32768 * 16)
    term = next(t for t in req.terms if t.name == "kv cache per token")
    assert "multi-head latent attention" in term.formula


def test_mla_latent_is_not_split_by_tensor_parallelism() -> None:
    result = plan(parse_spec(DSV3), load_catalog())
    assert result.choice is not None
    shape, req = result.choice.shape, result.requirements
    # every GPU holds its share of the weights and the whole latent cache (and NCCL buffers at TP ≥ 2)
    nccl = req.runtime_reserve_tp_bytes if shape.tensor_parallel > 1 else 0.0
    expected = (req.sharded_bytes / shape.tensor_parallel + req.kv_bytes + req.replicated_bytes + nccl) / GIB
    assert shape.vram_gib_per_gpu == pytest.approx(expected)


def test_an_explicit_mla_architecture_plans_like_the_preset() -> None:
    explicit = {
        **DSV3,
        "model": {
            "params_b": 671, "params_active_b": 37, "layers": 61, "hidden": 7168, "heads": 128,
            "head_dim": 128, "ffn": 18432, "vocab": 129280, "experts": 256, "experts_active": 8,
            "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        },
    }  # fmt: skip
    a, b = requirements(parse_spec(explicit)), requirements(parse_spec(DSV3))
    # the preset serves its FP8 checkpoint (embeddings and head in 16 bit); the explicit model
    # is quantised as it loads: the same MLA cache, weights within half a percent
    assert a.kv_bytes == b.kv_bytes and a.sharded_bytes == pytest.approx(b.sharded_bytes, rel=0.005)
    with pytest.raises(SpecError, match="needs both kv_lora_rank and qk_rope_head_dim"):
        parse_spec({**explicit, "model": {**explicit["model"], "qk_rope_head_dim": None}})


def test_sliding_window_layers_keep_at_most_their_window() -> None:
    base = {
        "name": "swa",
        "task": "serve",
        "model": {"params_b": 9, "layers": 42, "hidden": 3584, "heads": 16, "kv_heads": 8, "head_dim": 256},
        "serving": {"context_tokens": 8192, "concurrency": 4},
    }
    full = requirements(parse_spec(base)).kv_bytes
    half = requirements(
        parse_spec({**base, "model": {**base["model"], "sliding_window": 4096, "window_layers": 21}})
    )
    # 21 global layers keep 8192 tokens, 21 local ones 4096: three quarters of the full cache
    assert half.kv_bytes == pytest.approx(full * 0.75)
    arch = half.arch
    assert kv_cache_bytes(arch, 2.0, 2048, 1) == pytest.approx(
        kv_bytes_per_token(arch, 2.0) * 2048
    )  # under the window
    with pytest.raises(SpecError, match="window_layers needs sliding_window"):
        parse_spec({**base, "model": {**base["model"], "window_layers": 3}})
