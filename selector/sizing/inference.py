"""What one serving (or batch inference) replica needs: weights, KV cache, activation
workspace, bytes and FLOPs per decode step, the bandwidth for the token rate; and an
encoder-decoder speech model's state."""

from __future__ import annotations

from dataclasses import replace

from selector.model_arch import ModelArch
from selector.sizing.memory import decode_weight_bytes, image_kv_bytes, kv_bytes_per_token, kv_cache_bytes
from selector.sizing.terms import BYTES_PER_PARAM, GIB, Requirements, Term
from selector.spec import WorkloadSpec

PREFILL_CHUNK_TOKENS = 2048
"""Tokens a serving engine prefills in one forward pass (chunked prefill); sizes the
activation workspace. A gpufit default, not a measured figure."""


def _kv_precision_bytes(spec: WorkloadSpec) -> float:
    """KV cache precision: as declared, else 4 bytes for fp32 models and 2 (bf16) otherwise,
    which is what serving engines do unless told to quantise the cache."""
    declared = spec.serving.kv_cache_precision if spec.serving else None
    if declared:
        return BYTES_PER_PARAM[declared]
    return 4.0 if spec.precision == "fp32" else 2.0


AUDIO_ACTIVATION_FACTOR = 4
"""Encoder activations of one 30-second window held at once: about four hidden-width tensors
per position (residual stream, attention output, the MLP's input and output), the inference
counterpart of Korthikanti et al.'s per-layer terms with nothing kept for a backward pass.
A gpufit estimate, not a measured figure."""


def audio_state_bytes(spec: WorkloadSpec, arch: ModelArch, terms: list[Term]) -> float:
    """An encoder-decoder speech model's memory beyond its weights, per batch of windows:
    the decoder's KV cache over its own tokens (self-attention, ``context`` = 448 for Whisper)
    and over the encoder's states (cross-attention, 1500 positions for a 30 s window: Radford
    et al. 2022, §2.2), 2 × layers × hidden × bytes per cached position, plus the encoder's
    activations for the window."""
    batch = spec.work.batch if spec.work is not None else 1
    kvb = _kv_precision_bytes(spec)
    positions = arch.context + arch.encoder_positions
    kv = 2.0 * arch.layers * arch.hidden * kvb * positions * batch
    acts = AUDIO_ACTIVATION_FACTOR * arch.encoder_positions * arch.hidden * 2.0 * batch
    terms.append(
        Term(
            "decoder kv cache",
            kv / GIB,
            "GiB",
            f"2 × {arch.layers} layers × {arch.hidden} × {kvb:g} B × ({arch.context} text + "
            f"{arch.encoder_positions} audio positions) × {batch} windows",
        )
    )
    terms.append(
        Term(
            "encoder activations",
            acts / GIB,
            "GiB",
            f"{AUDIO_ACTIVATION_FACTOR} × {arch.encoder_positions} positions × {arch.hidden} × 2 B × {batch}",
        )
    )
    return kv + acts


def serving_requirements(
    spec: WorkloadSpec,
    arch: ModelArch,
    wbytes: float,
    eff: float,
    terms: list[Term],
    common: Requirements,
) -> Requirements:
    serving = spec.serving
    assert serving is not None
    batch = serving.concurrency
    kvb = _kv_precision_bytes(spec)
    weights = arch.params * wbytes
    per_token = kv_bytes_per_token(arch, kvb)
    kv = kv_cache_bytes(arch, kvb, serving.context_tokens, batch)
    image_tokens = serving.images_per_request * (serving.image_tokens or arch.image_tokens)
    if image_tokens:
        kv += image_kv_bytes(arch, kvb, serving.context_tokens, image_tokens, batch)
    chunk = min(PREFILL_CHUNK_TOKENS, serving.context_tokens * batch)
    activations = chunk * (4 * arch.hidden + 3 * arch.ffn) * 2.0 + batch * arch.vocab * 4.0
    step_weights, step_formula = decode_weight_bytes(arch, wbytes, batch)
    step_bytes = step_weights + kv
    step_flops = 2.0 * (arch.params_active - arch.vision_params) * batch
    rate = serving.tokens_per_s_per_stream
    min_bw = step_bytes * rate / eff / 1e9 if rate else 0.0
    if arch.vision_params:
        terms.append(
            Term(
                "vision encoder (in the weights)",
                arch.vision_params * wbytes / GIB,
                "GiB",
                f"{arch.vision_params:.3g} params × {wbytes:g} B; read at prefill only",
            )
        )
    terms += [
        Term("weights", weights / GIB, "GiB", f"{arch.params:.4g} params × {wbytes:g} B ({spec.precision})"),
        Term(
            "kv cache per token",
            per_token / 1024,
            "KiB",
            (
                f"{arch.layers} layers × (kv_lora_rank {arch.kv_lora_rank} + rope {arch.qk_rope_head_dim}) "
                f"× {kvb:g} B (multi-head latent attention)"
                if arch.is_mla
                else f"2 × {arch.layers} layers × {arch.kv_heads} kv_heads × {arch.head_dim} head_dim "
                f"× {kvb:g} B"
            ),
        ),
        Term(
            "kv cache",
            kv / GIB,
            "GiB",
            f"per token × {serving.context_tokens} context × {batch} concurrent"
            + (
                f"; {min(arch.window_layers, arch.layers)} sliding-window layers keep "
                f"min(context, {arch.sliding_window})"
                if arch.sliding_window and arch.window_layers
                else ""
            )
            + (
                f"; + {serving.images_per_request} images × {image_tokens // serving.images_per_request} "
                "tokens each"
                + (f" in {arch.image_token_layers} cross-attention layers" if arch.image_token_layers else "")
                if image_tokens
                else ""
            ),
        ),
        Term(
            "activation workspace",
            activations / GIB,
            "GiB",
            f"{chunk} prefill tokens × (4·hidden + 3·ffn) × 2 B + {batch} × vocab × 4 B logits",
        ),
        Term("bytes read per decode step", step_bytes / 1e9, "GB", f"{step_formula} + kv cache"),
        Term(
            "flops per decode step",
            step_flops / 1e12,
            "TFLOP",
            f"2 × {arch.params_active - arch.vision_params:.4g} active params × {batch} sequences",
        ),
    ]
    if rate:
        terms.append(
            Term(
                "bandwidth for the token rate",
                min_bw,
                "GB/s",
                f"bytes per step × {rate:g} tokens/s ÷ {eff:g} efficiency",
            )
        )
    return replace(
        common,
        sharded_bytes=weights + activations,
        kv_bytes=kv,
        replicated_bytes=0.0,
        host_bytes=0.0,
        bytes_per_decode_step=step_bytes,
        flops_per_decode_step=step_flops,
        min_bandwidth_gbps=min_bw,
        train_flops=0.0,
        terms=tuple(terms),
        concurrency=batch,
        tokens_per_s_per_stream=rate,
        tokens_per_s_total=serving.tokens_per_s_total,
        batch_tokens=serving.tokens,
        work_tflop=None,
    )
