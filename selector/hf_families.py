"""The 2025-2026 model families' config.json shapes that the generic reader in
``selector.hf_config`` does not cover: hybrid linear attention (Qwen3-Next), DeepSeek-V3.2's
sparse-attention indexer, Gemma 3n's per-layer embeddings and shared KV cache, and weights
published quantised (gpt-oss MXFP4 experts, DeepSeek/Kimi FP8 blocks). Each function returns the
parameters and cache inputs its family adds; ``hf_config.arch_from_config`` folds them in.

Sources, per family:

- Qwen3-Next (Qwen team, "Qwen3-Next" model card and blog, 2025-09; transformers
  ``models/qwen3_next``): every ``full_attention_interval``-th layer is gated full attention
  (q_proj emits the query and an output gate: 2 × heads × head_dim), the others are Gated
  DeltaNet (Yang, Kautz, Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule",
  arXiv 2412.06464): in_proj_qkvz (2 × key + 2 × value widths), in_proj_ba (2 × value heads), a
  depthwise convolution over q, k, v of ``linear_conv_kernel_dim`` taps, out_proj; a fixed-size
  recurrent state per sequence instead of a KV cache.
- DeepSeek-V3.2 (DeepSeek-AI, "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with
  DeepSeek Sparse Attention", 2025): a lightning indexer per layer, wq_b (q_lora_rank ×
  index_n_heads × index_head_dim), wk (hidden × index_head_dim), weights_proj (hidden ×
  index_n_heads); it caches one key of ``index_head_dim`` per token and layer.
- Gemma 3n (Google, Gemma 3n model card and transformers ``models/gemma3n``): per-layer
  embeddings (vocab_size_per_layer_input × layers × hidden_size_per_layer_input) and their
  projection, AltUp (altup_num_inputs streams: 2 × (n − 1) hidden² projections, per layer a
  router hidden × n and n² + n³ coefficients), LAuReL (2 × hidden × laurel_rank per layer), a
  per-layer input gate and projection (2 × hidden × hidden_size_per_layer_input); the last
  ``num_kv_shared_layers`` layers reuse an earlier layer's KV cache.
- gpt-oss (OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025-08): MoE experts published in
  MXFP4 (4-bit E2M1 values with one 8-bit E8M0 scale per 32: 4.25 bits a parameter; OCP
  Microscaling Formats MX v1.0), attention, router and embeddings in BF16 (the config's
  ``modules_to_not_convert``); alternating 128-token sliding-window and full layers; a learned
  attention sink per head (one scalar each: no cache).
- FP8 block checkpoints (DeepSeek-V3 report arXiv 2412.19437 §3.3; Kimi K2): linear weights in
  FP8 E4M3 with one FP32 scale per 128 × 128 block, embeddings and output head in BF16.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MXFP4_BYTES_PER_PARAM = 4.25 / 8
"""MXFP4: 4-bit values plus one 8-bit shared scale per block of 32 (OCP MX v1.0)."""
FP8_BLOCK_BYTES_PER_PARAM = 1.0 + 4.0 / (128 * 128)
"""FP8 E4M3 weights with an FP32 scale per 128 × 128 block (DeepSeek-V3 report §3.3)."""
QUANTIZED_BYTES = {"mxfp4": MXFP4_BYTES_PER_PARAM, "fp8": FP8_BLOCK_BYTES_PER_PARAM}


def _get(cfg: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"config.json {key} is {value!r}, not a count")
    return value


@dataclass(frozen=True, slots=True)
class LinearAttention:
    """Gated DeltaNet layers of a hybrid model: how many, their widths, and their parameters."""

    layers: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    params_per_layer: int


def qwen3_next_linear(cfg: Mapping[str, Any], layers: int, hidden: int) -> LinearAttention:
    """Qwen3-Next's linear-attention layers (module docstring): all but every
    ``full_attention_interval``-th layer, or those ``layer_types`` names ``linear_attention``."""
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and kinds:
        count = sum(1 for kind in kinds if kind == "linear_attention")
    else:
        interval = _get(cfg, "full_attention_interval", 4) or 4
        count = layers - layers // interval
    kh, vh = _get(cfg, "linear_num_key_heads"), _get(cfg, "linear_num_value_heads")
    kd, vd = _get(cfg, "linear_key_head_dim"), _get(cfg, "linear_value_head_dim")
    kernel = _get(cfg, "linear_conv_kernel_dim", 4)
    key, value = kh * kd, vh * vd
    params = hidden * (2 * key + 2 * value) + hidden * 2 * vh + (2 * key + value) * kernel
    params += 2 * vh + value * hidden  # A_log, dt_bias; out_proj
    return LinearAttention(count, kh, vh, kd, vd, kernel, params)


def gated_attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """Qwen3-Next's gated full attention: q_proj carries the query and its output gate."""
    return hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + heads * head_dim * hidden


def dsa_indexer_params(cfg: Mapping[str, Any], hidden: int) -> tuple[int, int]:
    """(indexer parameters per layer, cached key width) of DeepSeek-V3.2's sparse attention."""
    heads, dim = _get(cfg, "index_n_heads"), _get(cfg, "index_head_dim")
    q_lora = _get(cfg, "q_lora_rank")
    return q_lora * heads * dim + hidden * dim + hidden * heads, dim


@dataclass(frozen=True, slots=True)
class Gemma3n:
    """Gemma 3n's additions: parameters outside the plain transformer layers, per-layer extras,
    the per-layer embedding tables (inside the first), and the layers sharing KV caches."""

    model_params: int
    per_layer_params: int
    per_layer_embeddings: int
    kv_shared_layers: int


def gemma3n(cfg: Mapping[str, Any], layers: int, hidden: int) -> Gemma3n:
    n = _get(cfg, "altup_num_inputs", 4)
    d_pl = _get(cfg, "hidden_size_per_layer_input", 256)
    vocab_pl = _get(cfg, "vocab_size_per_layer_input", 262_144)
    rank = _get(cfg, "laurel_rank", 64)
    embeddings = vocab_pl * layers * d_pl
    model = embeddings + hidden * layers * d_pl + 2 * (n - 1) * hidden * hidden
    per_layer = hidden * n + n * n + n**3 + 2 * hidden * rank + 2 * hidden * d_pl
    return Gemma3n(model, per_layer, embeddings, _get(cfg, "num_kv_shared_layers"))


_TIMM_SIZE = re.compile(r"_(\d+)m(?:_|$)")


def gemma3n_encoders(doc: Mapping[str, Any], text_hidden: int) -> tuple[int, int]:
    """(vision + audio encoder parameters, tokens per image) of a Gemma 3n config. The vision
    tower is a timm MobileNet-V5 named by its size (``mobilenetv5_300m_enc``: 300M) plus its
    embedder into the text width; the audio tower a USM-style Conformer (transformers
    ``Gemma3nAudioEncoder``): per block two macaron feed-forwards (2 × 8·h²), attention (4·h²)
    and a light convolution module (3·h²), 24·h² in all, plus its projection to the text width.
    An image is ``vision_soft_tokens_per_image`` tokens (256)."""
    params = 0
    vision, audio = doc.get("vision_config"), doc.get("audio_config")
    if isinstance(vision, Mapping):
        size = _TIMM_SIZE.search(str(vision.get("architecture", "mobilenetv5_300m_enc")))
        params += int(size.group(1)) * 1_000_000 if size else 0
        params += _get(vision, "hidden_size", 2048) * text_hidden
    if isinstance(audio, Mapping):
        h = _get(audio, "hidden_size", 1536)
        params += _get(audio, "conf_num_hidden_layers", 12) * 24 * h * h + h * text_hidden
    tokens = _get(doc, "vision_soft_tokens_per_image", 256) if isinstance(vision, Mapping) else 0
    return params, tokens


def gemma3n_ffn(cfg: Mapping[str, Any]) -> int:
    """Gemma 3n's MLP width (a list per layer in sliced MatFormer configs: their largest)."""
    value = cfg.get("intermediate_size", 16_384)
    if isinstance(value, list) and value:
        return max(int(v) for v in value)
    return int(value)


def _quantization_config(doc: Mapping[str, Any], text: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The checkpoint's ``quantization_config``: the config's own, else its text model's (where vLLM
    looks too), or None."""
    qc = doc.get("quantization_config") or text.get("quantization_config")
    return qc if isinstance(qc, Mapping) else None


INTEGER_WEIGHT_PRECISION = {4: "int4", 8: "int8"}
"""gpufit's precision of a checkpoint published with integer weights of that many bits."""


def published_integer_weights(doc: Mapping[str, Any], text: Mapping[str, Any]) -> tuple[str, str]:
    """(method, precision) of a checkpoint published with integer weights and 16-bit activations,
    which an engine serves as published, else ("", ""): AutoAWQ's and AutoGPTQ's configs
    (``quant_method`` awq or gptq, ``bits`` 4 or 8; vLLM's awq_marlin and gptq_marlin read ``bits``)
    and llm-compressor's weight-only ones (``quant_method`` compressed-tensors, every config group's
    ``weights`` an int of ``num_bits`` 4 or 8 and no ``input_activations``: W4A16, W8A16)."""
    qc = _quantization_config(doc, text)
    if qc is None:
        return "", ""
    method = str(qc.get("quant_method", "")).lower()
    if method in ("awq", "gptq"):
        bits = qc.get("bits", qc.get("w_bit"))
        precision = INTEGER_WEIGHT_PRECISION.get(bits) if isinstance(bits, int) else None
        return (method, precision) if precision else ("", "")
    groups = qc.get("config_groups")
    if method != "compressed-tensors" or not isinstance(groups, Mapping) or not groups:
        return "", ""
    found = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping) or group.get("input_activations") or weights.get("type") != "int":
            return "", ""
        bits = weights.get("num_bits")
        found.add(INTEGER_WEIGHT_PRECISION.get(bits) if isinstance(bits, int) else None)
    (precision,) = found if len(found) == 1 else (None,)
    return (method, precision) if precision else ("", "")


def quantized_format(doc: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    """The format the weights are published in, from ``quantization_config``: ``mxfp4``,
    ``fp8``, or "" (16-bit, or a format gpufit does not size differently)."""
    qc = _quantization_config(doc, text)
    if qc is None:
        return ""
    method = str(qc.get("quant_method", ""))
    return method if method in QUANTIZED_BYTES else ""
