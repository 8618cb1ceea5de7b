"""Sizing inputs from a Hugging Face ``config.json``: the architecture families people serve and
tune, mapped to a ``ModelArch`` (layers, widths, heads, experts, attention kind, windows, vision
encoder, encoder-decoder shape) with the parameter count computed from the shapes.

Parameters, per the transformers modelling code of each family: embeddings vocab × hidden
(and as much again for an untied output head); per layer attention q, k, v, o projections
(hidden × heads × head_dim, hidden × kv_heads × head_dim twice, heads × head_dim × hidden), or
for multi-head latent attention (DeepSeek-V2/V3) the low-rank q and kv projections; the gated
MLP's three matrices (3 × hidden × intermediate) per dense layer, per routed and shared expert
in a mixture-of-experts layer, plus the router (hidden × experts). Norms and biases are left
out (under 0.1 % of any of these models). Active parameters count the experts a token uses.

Multimodal configs (``text_config`` + ``vision_config``, or a vision_config beside top-level
text fields as in Qwen2-VL) add a vision transformer: per layer 4·h² attention and an MLP of
2·h·ffn (3·h·ffn when gated), the patch embedding (3 channels × patch² × h, × the temporal
patch for video-capable encoders) and a projector into the language model (h_vision · merge²
× h_text + h_text²). Image tokens per image come from the config where it states them
(``mm_tokens_per_image``, ``image_seq_length``), else (image_size / patch)² ÷ merge².

Whisper (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision",
§2.2): encoder layers 4·d² + 2·d·ffn, decoder layers 8·d² + 2·d·ffn (self- and cross-
attention), two convolutions of width 3 over the mel bins, tied token embeddings and learned
positions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from selector.hf_families import (
    dsa_indexer_params,
    gated_attention_params,
    gemma3n,
    gemma3n_encoders,
    gemma3n_ffn,
    published_integer_weights,
    quantized_format,
    qwen3_next_linear,
)
from selector.hf_validate import config_problems, limit, shown
from selector.model_arch import ModelArch

DENSE_FAMILIES = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
        "granite",
        "olmo2",
        "mllama_text_model",
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen2_vl_text",
        "qwen2_5_vl_text",
    }
)
MOE_FAMILIES = frozenset(
    {"mixtral", "qwen2_moe", "qwen3_moe", "llama4_text", "gpt_oss", "qwen3_next", "glm4_moe"}
)
MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"})
AUDIO_FAMILIES = frozenset({"whisper"})
FAMILIES = DENSE_FAMILIES | MOE_FAMILIES | MLA_FAMILIES | AUDIO_FAMILIES | {"gemma3n_text"}
LOCAL_EXPERT_FAMILIES = frozenset({"mixtral", "llama4_text", "gpt_oss"})
"""MoE families that name their experts ``num_local_experts`` and size them ``intermediate_size``."""
ROUTED_EXPERT_FAMILIES = MLA_FAMILIES | {"glm4_moe"}
"""DeepSeek-style MoE: ``n_routed_experts`` + ``n_shared_experts`` of ``moe_intermediate_size``,
the first ``first_k_dense_replace`` layers dense."""
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers Gemma3TextConfig.__init__ defaults (models/gemma3/configuration_gemma3.py):
    # published Gemma 3 configs leave these out and rely on them.
    "gemma3_text": {
        "vocab_size": 262_208,
        "head_dim": 256,
        "max_position_embeddings": 131_072,
        "tie_word_embeddings": True,
        "sliding_window_pattern": 6,
    },
}
"""Values a family's transformers config class supplies when config.json leaves them out."""
FAMILY_DEFAULTS["gemma3n_text"] = {
    # transformers Gemma3nTextConfig (models/gemma3n/configuration_gemma3n.py, 5.22): E4B's shapes
    "vocab_size": 262_400,
    "hidden_size": 2048,
    "intermediate_size": 16_384,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "max_position_embeddings": 32_768,
    "tie_word_embeddings": True,
    "sliding_window": 512,
    "num_kv_shared_layers": 15,
}

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


def _first_int(cfg: Mapping[str, Any], keys: tuple[str, ...], default: int | None = None) -> int:
    """The first of ``keys`` the vision config has (encoders name one width differently:
    ``hidden_size``, ``embed_dim``, ``width``)."""
    for key in keys:
        if cfg.get(key) is not None:
            try:
                return _int(cfg, key)
            except ConfigError as err:
                raise ConfigError(str(err).replace("config.json", "config.json vision_config")) from None
    if default is None:
        raise ConfigError(f"config.json vision_config lacks {keys[0]!r}")
    return default


def arch_from_config(doc: Mapping[str, Any], name: str) -> ModelArch:
    """The architecture of a config.json (multimodal: its text model plus the vision encoder).
    ConfigError names what is missing or out of range (one line per problem, ``selector.
    hf_validate``), or the family when gpufit does not know it; never another exception."""
    problems = config_problems(doc)
    if problems:
        raise ConfigError("\n".join(f"config.json: {p}" for p in problems))
    try:
        arch = _arch(doc, name)
    except ConfigError:
        raise
    except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, RecursionError) as err:
        # a combination the field table does not foresee: refused, never a traceback
        raise ConfigError(f"config.json: cannot be sized ({type(err).__name__}: {shown(str(err))})") from None
    most = limit("parameters")
    if not (math.isfinite(arch.params) and 0 < arch.params <= most):
        raise ConfigError(
            f"config.json: the shapes add up to {arch.params:.3g} parameters; expected a model of 1 "
            f"to {most:.0e} parameters"
        )
    return arch


def _arch(doc: Mapping[str, Any], name: str) -> ModelArch:
    if doc.get("model_type") in AUDIO_FAMILIES:
        return _whisper(doc, name)
    cfg = text_config(doc)
    family = str(cfg.get("model_type", ""))
    cfg = {**FAMILY_DEFAULTS.get(family, {}), **cfg}
    if family not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise ConfigError(
            f"model_type {family!r} is not a family gpufit sizes ({known}); give the architecture "
            f"({', '.join(NEEDED)} ...) as model fields, or model.kind: custom with vram_gib and "
            "min_bandwidth_gbps"
        )
    if family == "gemma3n_text" and isinstance(cfg.get("intermediate_size"), list):
        cfg = {**cfg, "intermediate_size": gemma3n_ffn(cfg)}
    hidden, layers = _int(cfg, "hidden_size"), _int(cfg, "num_hidden_layers")
    heads, vocab = _int(cfg, "num_attention_heads"), _int(cfg, "vocab_size")
    kv_heads = _int(cfg, "num_key_value_heads", heads) if cfg.get("num_key_value_heads") else heads
    head_dim = _int(cfg, "head_dim") if cfg.get("head_dim") is not None else hidden // heads
    ffn = _int(cfg, "intermediate_size")
    tied = bool(cfg.get("tie_word_embeddings", doc.get("tie_word_embeddings", False)))
    embeddings = vocab * hidden * (1 if tied else 2)

    kv_lora = qk_rope = index_dim = 0
    extra = extra_per_layer = 0  # parameters outside the plain layers, and per layer
    linear = None
    g3n = None
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
        if family == "deepseek_v32":
            extra_per_layer, index_dim = dsa_indexer_params(cfg, hidden)
    elif family == "qwen3_next":
        linear = qwen3_next_linear(cfg, layers, hidden)
        attention = gated_attention_params(hidden, heads, kv_heads, head_dim)
    else:
        attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    if family == "gemma3n_text":
        g3n = gemma3n(cfg, layers, hidden)
        # the published checkpoint keeps k and v projections in the KV-sharing layers too
        extra, extra_per_layer = g3n.model_params, g3n.per_layer_params

    experts = experts_active = 1
    dense_mlp = 3 * hidden * ffn
    total_mlp = active_mlp = layers * dense_mlp
    if family in MOE_FAMILIES or family in MLA_FAMILIES:
        experts = _int(
            cfg,
            "num_local_experts"
            if family in LOCAL_EXPERT_FAMILIES
            else "n_routed_experts"
            if family in ROUTED_EXPERT_FAMILIES
            else "num_experts",
        )
        experts_active = _int(cfg, "num_experts_per_tok")
        expert_ffn = ffn if family in LOCAL_EXPERT_FAMILIES else _int(cfg, "moe_intermediate_size")
        if family == "llama4_text":
            # Llama 4: MoE on every ``interleave_moe_layer_step``-th layer (or the listed
            # ``moe_layers``), each with one shared expert; dense layers use intermediate_size_mlp.
            shared = 3 * hidden * expert_ffn
            moe_listed = cfg.get("moe_layers")
            step = _int(cfg, "interleave_moe_layer_step", 1) or 1
            moe_count = len(moe_listed) if isinstance(moe_listed, list) else layers // step
            dense_layers = layers - moe_count
            dense_mlp = 3 * hidden * _int(cfg, "intermediate_size_mlp", ffn)
        elif family in ROUTED_EXPERT_FAMILIES:
            shared = _int(cfg, "n_shared_experts", 0) * 3 * hidden * expert_ffn
            dense_layers = _int(cfg, "first_k_dense_replace", 0)
        else:
            shared_ffn = (
                _int(cfg, "shared_expert_intermediate_size", 0)
                if family in ("qwen2_moe", "qwen3_next")
                else 0
            )
            shared = 3 * hidden * shared_ffn + (hidden if shared_ffn else 0)  # and its gate
            dense_layers = len(cfg.get("mlp_only_layers") or [])
        moe_layers = layers - dense_layers
        routed = 3 * hidden * expert_ffn
        total_mlp = dense_layers * dense_mlp + moe_layers * (experts * routed + shared + hidden * experts)
        active_mlp = dense_layers * dense_mlp + moe_layers * (
            experts_active * routed + shared + hidden * experts
        )
    full_layers = layers - (linear.layers if linear else 0)
    mixers = full_layers * attention + (linear.layers * linear.params_per_layer if linear else 0)
    base = embeddings + mixers + layers * extra_per_layer + extra
    params = base + total_mlp
    active = base + active_mlp
    fmt = quantized_format(doc, cfg)
    integer = published_integer_weights(doc, cfg)
    quantized = 0.0
    if fmt == "mxfp4":  # the experts only (modules_to_not_convert: attention, router, embeddings)
        quantized = float((total_mlp - (layers - dense_layers) * hidden * experts) if experts > 1 else 0)
    elif fmt == "fp8":
        quantized = float(params - embeddings)

    window, window_layers = _sliding_window(cfg, family, layers - (g3n.kv_shared_layers if g3n else 0))
    vision, image_tokens = gemma3n_encoders(doc, hidden) if g3n else _vision(doc, hidden)
    cross = cfg.get("cross_attention_layers")
    image_token_layers = len(cross) if family == "mllama_text_model" and isinstance(cross, list) else 0
    return ModelArch(
        name=name,
        kind="transformer",
        params=float(params + vision),
        params_active=float(active + vision),
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=ffn,
        vocab=vocab,
        embedding_params=float(embeddings),
        context=_int(cfg, "max_position_embeddings", 0) if cfg.get("max_position_embeddings") else 0,
        experts=experts,
        experts_active=experts_active,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=qk_rope,
        sliding_window=window,
        window_layers=window_layers,
        vision_params=float(vision),
        image_tokens=image_tokens,
        image_token_layers=image_token_layers,
        source=f"config.json ({family}{' + vision encoder' if vision else ''})",
        family=str(doc.get("model_type") or family),
        rope_theta=float(_rope_theta(cfg)),
        linear_layers=linear.layers if linear else 0,
        linear_key_heads=linear.key_heads if linear else 0,
        linear_value_heads=linear.value_heads if linear else 0,
        linear_key_dim=linear.key_dim if linear else 0,
        linear_value_dim=linear.value_dim if linear else 0,
        linear_conv_kernel=linear.conv_kernel if linear else 0,
        index_head_dim=index_dim,
        kv_shared_layers=g3n.kv_shared_layers if g3n else 0,
        per_layer_embedding_params=float(g3n.per_layer_embeddings) if g3n else 0.0,
        attention_softcap=bool(cfg.get("attn_logit_softcapping", 50.0 if family == "gemma2" else None)),
        post_norms=family.startswith(("gemma2", "gemma3")),
        qk_norm=family.startswith(QK_NORM_FAMILIES) or bool(cfg.get("use_qk_norm")),
        fp32_norms=family.startswith(FP32_NORM_FAMILIES),
        quantized_format=fmt,
        integer_method=integer[0],
        integer_precision=integer[1],
        quantized_params=quantized,
    )


def _rope_theta(cfg: Mapping[str, Any]) -> float:
    """The RoPE base: ``rope_theta``, or inside transformers 5's ``rope_parameters``."""
    value = cfg.get("rope_theta")
    if value is None and isinstance(cfg.get("rope_parameters"), Mapping):
        value = cfg["rope_parameters"].get("rope_theta")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


FP32_NORM_FAMILIES = ("gemma2", "gemma3", "olmo2", "qwen3_next")
"""model_type prefixes whose RMSNorm multiplies its weight in fp32 (Gemma's ``1 + weight``, OLMo 2's
``weight * x`` before the cast): a trained norm keeps an fp32 normalised value
(``activations.FP32_NORM_VALUE_BYTES``)."""

QK_NORM_FAMILIES = ("qwen3", "gemma3", "olmo2")
"""model_type prefixes whose attention normalises each head's queries and keys (q_norm, k_norm in
transformers' Qwen3Attention, Gemma3Attention, Olmo2Attention): sized in training
(``activations.QK_NORM_BYTES``)."""


def _sliding_window(cfg: Mapping[str, Any], family: str, layers: int) -> tuple[int, int]:
    """(window, layers that use it). ``layer_types`` lists each layer's attention where the
    config has it (transformers ≥ 4.53); else Gemma 2 alternates local and global layers,
    Gemma 3 has one global layer in every ``sliding_window_pattern``, Gemma 3n one in five, Qwen
    uses the window only with ``use_sliding_window``, and Mistral windows every layer. ``layers``
    counts the layers with a KV cache of their own (Gemma 3n's shared ones excluded)."""
    if not cfg.get("sliding_window"):
        return 0, 0
    if family.startswith(("qwen2", "qwen3")) and not cfg.get("use_sliding_window"):
        return 0, 0
    window = _int(cfg, "sliding_window")
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and kinds:
        return window, sum(1 for kind in kinds[:layers] if kind == "sliding_attention")
    if family == "gemma3n_text":  # transformers' default: every fifth layer global
        return window, sum(1 for i in range(layers) if (i + 1) % 5)
    if family == "gemma2":
        return window, layers // 2
    if family == "gemma3_text":
        pattern = _int(cfg, "sliding_window_pattern", 6)
        return window, layers - layers // pattern
    return window, layers


def _vision(doc: Mapping[str, Any], text_hidden: int) -> tuple[int, int]:
    """(vision encoder + projector parameters, tokens per image) of a multimodal config; (0, 0)
    for a text-only one. See the module docstring for the terms."""
    vision = doc.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0, 0
    layers = _first_int(vision, ("num_hidden_layers", "depth", "num_layers"))
    layers += _first_int(vision, ("num_global_layers",), 0)  # mllama's global encoder
    # Qwen2-VL names the ViT width embed_dim and its output width hidden_size
    hidden = _first_int(vision, ("embed_dim", "hidden_size", "width"))
    if vision.get("intermediate_size") is not None:
        ffn = _int(vision, "intermediate_size")
    else:
        ffn = int(float(vision.get("mlp_ratio", 4)) * hidden)
    gated = str(vision.get("hidden_act", "")) in ("silu", "swiglu")
    patch = _first_int(vision, ("patch_size",), 14)
    temporal = _first_int(vision, ("temporal_patch_size",), 1)
    channels = _first_int(vision, ("num_channels", "in_channels", "in_chans"), 3)
    # Mistral 3 states the patch merger's size beside vision_config, not in it
    outer_merge = doc.get("spatial_merge_size")
    merge = _first_int(vision, ("spatial_merge_size",), outer_merge if isinstance(outer_merge, int) else 1)
    shuffle = float(vision.get("pixel_shuffle_ratio") or 1.0)  # Llama 4: tokens × ratio²
    per_layer = 4 * hidden * hidden + (3 if gated else 2) * hidden * ffn
    params = layers * per_layer + channels * patch * patch * temporal * hidden
    params += hidden * merge * merge * text_hidden + text_hidden * text_hidden
    tokens = 0
    for key in ("mm_tokens_per_image", "image_seq_length"):
        if doc.get(key):
            tokens = _int(doc, key)
            break
    else:
        size = vision.get("image_size")
        if isinstance(size, int) and size > 0 and patch:
            tokens = int((size // patch) ** 2 // (merge * merge) * shuffle * shuffle)
            if doc.get("model_type") == "mllama":  # a class token per tile, up to max_num_tiles tiles
                tokens = (tokens + 1) * _first_int(vision, ("max_num_tiles",), 4)
    return params, tokens


def _whisper(doc: Mapping[str, Any], name: str) -> ModelArch:
    """An encoder-decoder speech model (module docstring); ``layers`` are the decoder's, whose
    KV cache grows with the text, and ``encoder_positions`` the cross-attended audio states."""
    d = _int(doc, "d_model")
    enc, dec = _int(doc, "encoder_layers"), _int(doc, "decoder_layers")
    enc_ffn, dec_ffn = _int(doc, "encoder_ffn_dim"), _int(doc, "decoder_ffn_dim")
    heads, vocab = _int(doc, "decoder_attention_heads"), _int(doc, "vocab_size")
    mels = _int(doc, "num_mel_bins")
    sources, targets = _int(doc, "max_source_positions"), _int(doc, "max_target_positions")
    params = (
        enc * (4 * d * d + 2 * d * enc_ffn)
        + dec * (8 * d * d + 2 * d * dec_ffn)
        + 3 * mels * d
        + 3 * d * d
        + vocab * d
        + (sources + targets) * d
    )
    return ModelArch(
        name=name,
        kind="audio",
        params=float(params),
        params_active=float(params),
        layers=dec,
        hidden=d,
        heads=heads,
        kv_heads=heads,
        head_dim=d // heads,
        ffn=dec_ffn,
        vocab=vocab,
        context=targets,
        encoder_layers=enc,
        encoder_positions=sources,
        source="config.json (whisper, encoder-decoder)",
    )
