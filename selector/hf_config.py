"""Sizing inputs from a Hugging Face ``config.json``: the architecture families people serve and
tune, mapped to a ``ModelArch`` (layers, widths, heads, experts, attention kind, windows) with
the parameter count computed from the shapes.

Parameters, per the transformers modelling code of each family: embeddings vocab × hidden
(and as much again for an untied output head); per layer attention q, k, v, o projections
(hidden × heads × head_dim, hidden × kv_heads × head_dim twice, heads × head_dim × hidden), or
for multi-head latent attention (DeepSeek-V2/V3) the low-rank q and kv projections; the gated
MLP's three matrices (3 × hidden × intermediate) per dense layer, per routed and shared expert
in a mixture-of-experts layer, plus the router (hidden × experts). Norms and biases are left
out (under 0.1 % of any of these models). Active parameters count the experts a token uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from selector.presets import ModelArch

DENSE_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3"})
MOE_FAMILIES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe"})
MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3"})
FAMILIES = DENSE_FAMILIES | MOE_FAMILIES | MLA_FAMILIES
NEEDED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")


class ConfigError(ValueError):
    """A config.json gpufit cannot size, with what is missing or unknown."""


def text_config(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a multimodal config (``text_config``), else the config."""
    inner = doc.get("text_config")
    return inner if isinstance(inner, Mapping) and inner.get("model_type") else doc


def _int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if value is None and default is None:
            raise ConfigError(f"config.json lacks {key!r}")
        raise ConfigError(f"config.json {key} is {value!r}, not a count")
    return value


def arch_from_config(doc: Mapping[str, Any], name: str) -> ModelArch:
    """The architecture of a config.json (multimodal: its text model). ConfigError names what
    is missing, or the family when gpufit does not know it."""
    cfg = text_config(doc)
    family = str(cfg.get("model_type", ""))
    if family not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise ConfigError(
            f"model_type {family!r} is not a family gpufit sizes ({known}); give the architecture "
            f"({', '.join(NEEDED)} ...) as model fields, or model.kind: custom with vram_gib and "
            "min_bandwidth_gbps"
        )
    hidden, layers = _int(cfg, "hidden_size"), _int(cfg, "num_hidden_layers")
    heads, vocab = _int(cfg, "num_attention_heads"), _int(cfg, "vocab_size")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    head_dim = _int(cfg, "head_dim", hidden // heads) if cfg.get("head_dim") is not None else hidden // heads
    ffn = _int(cfg, "intermediate_size")
    tied = bool(cfg.get("tie_word_embeddings", False))
    embeddings = vocab * hidden * (1 if tied else 2)

    kv_lora = qk_rope = 0
    if family in MLA_FAMILIES:
        q_lora = _int(cfg, "q_lora_rank", 0) if cfg.get("q_lora_rank") is not None else 0
        kv_lora, qk_rope = _int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim")
        nope, v_dim = _int(cfg, "qk_nope_head_dim"), _int(cfg, "v_head_dim")
        q_width = heads * (nope + qk_rope)
        q = hidden * q_lora + q_lora * q_width if q_lora else hidden * q_width
        attention = (
            q + hidden * (kv_lora + qk_rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        )
        head_dim = nope + qk_rope
    else:
        attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2

    experts = experts_active = 1
    dense_mlp = 3 * hidden * ffn
    total_mlp = active_mlp = layers * dense_mlp
    if family in MOE_FAMILIES or family in MLA_FAMILIES:
        experts = _int(
            cfg,
            "num_local_experts"
            if family == "mixtral"
            else "n_routed_experts"
            if family in MLA_FAMILIES
            else "num_experts",
        )
        experts_active = _int(cfg, "num_experts_per_tok")
        expert_ffn = ffn if family == "mixtral" else _int(cfg, "moe_intermediate_size")
        if family in MLA_FAMILIES:
            shared = _int(cfg, "n_shared_experts", 0) * 3 * hidden * expert_ffn
            dense_layers = _int(cfg, "first_k_dense_replace", 0)
        else:
            shared = (
                3 * hidden * _int(cfg, "shared_expert_intermediate_size", 0) if family == "qwen2_moe" else 0
            )
            dense_layers = len(cfg.get("mlp_only_layers") or [])
        moe_layers = layers - dense_layers
        routed = 3 * hidden * expert_ffn
        total_mlp = dense_layers * dense_mlp + moe_layers * (experts * routed + shared + hidden * experts)
        active_mlp = dense_layers * dense_mlp + moe_layers * (
            experts_active * routed + shared + hidden * experts
        )
    params = embeddings + layers * attention + total_mlp
    active = embeddings + layers * attention + active_mlp

    window = window_layers = 0
    if cfg.get("sliding_window") and (family not in ("qwen2", "qwen3") or cfg.get("use_sliding_window")):
        window = _int(cfg, "sliding_window")
        if family == "gemma2":
            window_layers = layers // 2  # local and global layers alternate
        elif family == "gemma3_text":
            pattern = _int(cfg, "sliding_window_pattern", 6)
            window_layers = layers - layers // pattern  # one global layer in every `pattern`
        else:
            window_layers = layers
    return ModelArch(
        name=name,
        kind="transformer",
        params=float(params),
        params_active=float(active),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        context=_int(cfg, "max_position_embeddings", 0) if cfg.get("max_position_embeddings") else 0,
        experts=experts,
        experts_active=experts_active,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=qk_rope,
        sliding_window=window,
        window_layers=window_layers,
        source=f"config.json ({family})",
    )
