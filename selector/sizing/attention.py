"""Per-sequence state of the attention kinds that are not a plain KV cache: a hybrid model's
linear-attention layers (a fixed-size state per sequence, whatever its length) and DeepSeek
Sparse Attention's indexer keys (one small key per token and layer, beside the MLA latent)."""

from __future__ import annotations

from selector.model_arch import ModelArch

LINEAR_STATE_BYTES = 4.0
"""The recurrent state is held in float32: SGLang reads ``mamba_ssm_dtype`` from the config and
keeps float32 without it (``--mamba-ssm-dtype``, sglang 0.5.23); vLLM 0.34 keeps it in the
model's dtype unless ``--mamba-ssm-cache-dtype`` says otherwise, half this. The larger figure
is the one that does not under-provision."""
LINEAR_CONV_BYTES = 2.0
"""The convolution state is kept in the model's dtype (16 bit) by both engines."""


def linear_state_bytes_per_sequence(arch: ModelArch) -> float:
    """State a sequence keeps in a hybrid model's Gated DeltaNet layers (Yang, Kautz,
    Hatamizadeh, "Gated Delta Networks", arXiv 2412.06464; Qwen3-Next model card), per layer:
    the recurrent state, value heads × key width × value width (× 4 B), and the short
    convolution's last kernel − 1 inputs over q, k and v, (2 × key heads × key width + value
    heads × value width) × (kernel − 1) (× 2 B); the shapes vLLM 0.34 allocates
    (``MambaStateShapeCalculator.gated_delta_net_state_shape``). Independent of the context."""
    if not arch.linear_layers:
        return 0.0
    recurrent = arch.linear_value_heads * arch.linear_key_dim * arch.linear_value_dim * LINEAR_STATE_BYTES
    conv_width = (
        2 * arch.linear_key_heads * arch.linear_key_dim + arch.linear_value_heads * arch.linear_value_dim
    )
    conv = conv_width * max(arch.linear_conv_kernel - 1, 0) * LINEAR_CONV_BYTES
    return arch.linear_layers * (recurrent + conv)


INDEXER_QUANT_BLOCK = 128
"""DeepSeek-V3.2's indexer caches its keys in FP8 with one float32 scale per 128 values
(vllm 0.34 ``vllm/model_executor/models/deepseek_v2.py`` Indexer: head_dim + head_dim ÷ 128 × 4
bytes, uint8)."""


def indexer_bytes_per_token_layer(arch: ModelArch) -> float:
    """The lightning indexer's cached key per token and layer (DeepSeek-AI, "DeepSeek-V3.2-Exp:
    Boosting Long-Context Efficiency with DeepSeek Sparse Attention", 2025): index_head_dim FP8
    values plus their scales; 132 B for index_head_dim 128, whatever the KV cache's precision."""
    if not arch.index_head_dim:
        return 0.0
    return arch.index_head_dim + arch.index_head_dim / INDEXER_QUANT_BLOCK * 4.0
