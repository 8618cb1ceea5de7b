"""Memory arithmetic of a model: the KV cache per token and per sequence (standard, multi-head
latent and sliding-window attention, image tokens), LoRA adapters, and the weight bytes a
mixture-of-experts decode step reads."""

from __future__ import annotations

from selector.model_arch import ModelArch
from selector.sizing.attention import indexer_bytes_per_token_layer


def kv_bytes_per_token_layer(arch: ModelArch, kv_bytes: float) -> float:
    """KV cache one layer keeps per token.

    Standard attention: 2 (K and V) × kv_heads × head_dim × bytes (vLLM paper, Kwon et al.,
    SOSP 2023). Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, §2.1.3 and Table 1):
    the compressed latent and the decoupled RoPE key, (d_c + d_h^R) × bytes, whatever the number
    of heads."""
    if arch.is_mla:
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_bytes
    return 2.0 * arch.kv_heads * arch.head_dim * kv_bytes


def kv_bytes_per_token(arch: ModelArch, kv_bytes: float) -> float:
    """KV cache per token of context over the layers that keep one (as if each attended
    globally), with DeepSeek-V3.2's indexer keys.

    Llama-3.1-8B at 16 bit: 2·32·8·128·2 = 128 KiB; Llama-3.1-70B: 320 KiB (gpu-cloud-facts.md
    §6); DeepSeek-V3 by MLA: 61·(512+64)·2 = 68.6 KiB; Qwen3-Next: only its 12 full-attention
    layers, 2·12·2·256·2 = 24 KiB."""
    indexer = arch.layers * indexer_bytes_per_token_layer(arch)
    return arch.kv_layers * kv_bytes_per_token_layer(arch, kv_bytes) + indexer


def kv_cache_bytes(arch: ModelArch, kv_bytes: float, context: float, batch: int) -> float:
    """KV cache of ``batch`` sequences of ``context`` tokens in the layers that keep one (not a
    hybrid model's linear-attention layers, not Gemma 3n's KV-sharing ones): a sliding-window
    layer keeps at most ``sliding_window`` tokens (Mistral's, Gemma 2/3's local layers, gpt-oss's
    alternate layers; Beltagy et al. 2020, Longformer, for the window), the others the whole
    context; DeepSeek-V3.2's indexer keeps a key per token in every layer."""
    window_layers = min(arch.window_layers, arch.kv_layers) if arch.sliding_window else 0
    tokens = (arch.kv_layers - window_layers) * context + window_layers * min(context, arch.sliding_window)
    indexer = indexer_bytes_per_token_layer(arch) * arch.layers * context
    return (kv_bytes_per_token_layer(arch, kv_bytes) * tokens + indexer) * batch


def image_kv_bytes(arch: ModelArch, kv_bytes: float, context: float, image_tokens: int, batch: int) -> float:
    """KV cache the images of ``batch`` sequences add. Models that put image tokens in the
    sequence (LLaVA, Qwen2-VL, Gemma 3) cache them like text, in every layer (a sliding-window
    layer still up to its window); mllama (Llama 3.2 Vision) attends to them only in its
    cross-attention layers (Meta, Llama 3.2 model card; transformers ``MllamaTextModel``)."""
    if arch.image_token_layers:
        return kv_bytes_per_token_layer(arch, kv_bytes) * image_tokens * arch.image_token_layers * batch
    return kv_cache_bytes(arch, kv_bytes, context + image_tokens, batch) - kv_cache_bytes(
        arch, kv_bytes, context, batch
    )


def lora_params(arch: ModelArch, rank: int) -> float:
    """LoRA adapter parameters on every linear layer (as QLoRA does, Dettmers et al. 2023 §4):
    each d_in×d_out projection gains r·(d_in + d_out). Per layer: q and o (h→h), k and v
    (h→kv_dim), gate and up (h→ffn), down (ffn→h); experts multiply the MLP part (Hu et al.
    2021, LoRA, §4)."""
    h, kv, f = arch.hidden, arch.kv_dim, arch.ffn
    attention = 2 * (h + h) + 2 * (h + kv)
    mlp = 3 * (h + f) * arch.experts
    return float(rank * arch.layers * (attention + mlp))


def expected_experts_touched(arch: ModelArch, batch: int) -> float:
    """Experts a decode step reads per layer when ``batch`` tokens each pick ``k`` of ``E``
    experts uniformly: E·(1 − (1 − k/E)^batch) (expectation of distinct picks)."""
    if not arch.is_moe:
        return 1.0
    e, k = arch.experts, arch.experts_active
    return e * (1.0 - (1.0 - k / e) ** batch)


def decode_weight_bytes(
    arch: ModelArch, weight_bytes: float, batch: int, expert_bytes: float | None = None
) -> tuple[float, str]:
    """Weight bytes one decode step streams from memory: all of a dense model's, the shared
    part and the experts the batch touches of a MoE model's (the experts at ``expert_bytes``
    when they are stored apart, as gpt-oss's MXFP4 ones); a vision encoder runs only when a
    prompt's images are encoded (prefill), so decoding never reads it."""
    if not arch.is_moe:
        if arch.vision_params:
            return (arch.params - arch.vision_params) * weight_bytes, "(params − vision encoder) × bytes"
        return arch.params * weight_bytes, "params × bytes"
    e, k = arch.experts, arch.experts_active
    per_expert = (arch.params - arch.params_active) / (e - k)
    shared = arch.params - arch.vision_params - e * per_expert
    touched = expected_experts_touched(arch, batch)
    if expert_bytes is not None:
        return shared * weight_bytes + touched * per_expert * expert_bytes, (
            f"shared × {weight_bytes:g} B + {touched:.2f} experts touched of {e} × {expert_bytes:g} B"
        )
    return (shared + touched * per_expert) * weight_bytes, (
        f"(shared + {touched:.2f} experts touched of {e}) × bytes"
    )
