"""What a workload needs, and how one replica of it runs on a given GPU model and count.

Pure arithmetic, no I/O. ``requirements(spec)`` computes what does not depend on the GPU
(bytes of weights, KV cache, optimiser state, activations; FLOPs; bandwidth for the token
rate). ``fit(req, instance)`` then decides whether, and how, one instance type runs it:
tensor-parallel degree, shards, nodes, replicas, per-GPU memory, tokens/s and job hours, or
the named filter that rejects it and why. Every term is a ``Term`` that ``--explain`` prints.

Sources for the formulas are in each docstring; the shared reference is
``gpu-cloud-facts.md`` §6 (memory arithmetic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from selector.catalog import GpuSpec, InstanceType, load_gpus, sourced_only
from selector.presets import ModelArch
from selector.spec import TRAINING_TASKS, WorkloadSpec

GIB = 1024**3

BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "nf4": 4.13 / 8,
}
"""Bytes per weight. NF4 with double quantisation costs about 4.13 bits per parameter
(Dettmers et al. 2023, QLoRA, arXiv 2305.14314, §3)."""

USABLE_MEMORY_FRACTION = 0.90
"""Share of a GPU's memory a job may plan to fill. vLLM's default ``gpu_memory_utilization``
is 0.9; the rest is headroom for allocator fragmentation. Applied to training as well."""

CUDA_CONTEXT_GIB = 0.75
"""Memory the CUDA context and kernels take on each GPU before any tensor: ~700-800 MiB as
reported by PyTorch maintainers (discuss.pytorch.org/t/high-gpu-memory-overhead/81330)."""

DEFAULT_BANDWIDTH_EFFICIENCY = 0.6
"""Share of peak memory bandwidth a serving engine reaches while decoding (model bandwidth
utilisation). Databricks, 'LLM Inference Performance Engineering: Best Practices' (2023)
reports about 60% MBU on A100/H100. Override with ``tuning.bandwidth_efficiency``."""

TP_ALLREDUCE_LATENCY_S = 13e-6
"""Time one tensor-parallel all-reduce of a decode step takes, whatever its few KiB: 11-14 µs
on 2-8 A100s for vLLM's custom all-reduce of 512 B to 32 KiB (sglang PR #2688, 'Support
twoshot kernel'). Megatron tensor parallelism all-reduces twice per layer in the forward pass
(Shoeybi et al. 2019, arXiv 1909.08053, Figure 4), so a decode step over t > 1 GPUs waits
2 × layers × this beyond the bytes it reads; without it decode at TP 4-8 came out 1.4-3.5×
faster than gpt-fast measured (docs/calibration.md)."""

DEFAULT_MFU = 0.40
"""Model FLOPs utilisation. Llama 3 pre-training reached 38-43% BF16 MFU on H100
(Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 4). Override with ``tuning.mfu``."""

PREFILL_CHUNK_TOKENS = 2048
"""Tokens a serving engine prefills in one forward pass (chunked prefill); sizes the
activation workspace. A gpufit default, not a measured figure."""

ONE_GPU_KINDS = frozenset({"diffusion", "audio"})
"""Model kinds a replica runs on one GPU (many replicas per instance, never tensor parallel)."""

INFERENCE_OVERHEAD_FACTOR = 1.2
"""Rule of thumb for models the transformer arithmetic does not cover (diffusion):
memory ≈ 1.2 × weights (gpu-cloud-facts.md §6)."""

OPTIMIZER_BYTES: dict[str, float] = {"adamw": 12.0, "adamw-8bit": 6.0, "sgd": 8.0}
"""Optimiser state per trained parameter in mixed precision: AdamW fp32 master + momentum +
variance 12 B; 8-bit Adam 6 B; SGD with momentum 8 B (EleutherAI, 'Transformer Math 101')."""

KORTHIKANTI_BYTES_PER_TOKEN_HIDDEN = 34
"""Activation bytes per layer = s·b·h·(34 + 5·a·s/h) without recomputation (Korthikanti et
al., 'Reducing Activation Recomputation in Large Transformer Models', MLSys 2023, eq. 1).
gpufit assumes FlashAttention (Dao et al. 2022), which never stores the s×s attention scores,
so the 5·a·s/h term is dropped: s·b·h·34, the paper's selective-recomputation figure."""

FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN = 2
"""With full activation recomputation only each layer's input is kept: 2·s·b·h bytes per
layer (Korthikanti et al. 2023, §4), plus one layer's activations while it is recomputed."""

LOSS_BYTES_PER_LOGIT = 8
"""The loss upcasts logits to fp32 and keeps their gradient: 4 + 4 bytes per logit."""

TRAIN_FLOPS_PER_PARAM_TOKEN: dict[str, float] = {
    "finetune-full": 6.0,
    "pretrain": 6.0,
    "finetune-lora": 4.0,
    "finetune-qlora": 4.0,
}
"""Training compute C ≈ 6·P·D (Kaplan et al. 2020; 'Transformer Math 101'); a frozen base
skips the weight gradients, leaving ≈ 4·P·D for LoRA and QLoRA."""


@dataclass(frozen=True, slots=True)
class Term:
    """One line of the arithmetic: a named value with its unit and formula."""

    name: str
    value: float
    unit: str
    formula: str

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "unit": self.unit, "formula": self.formula}


@dataclass(frozen=True, slots=True)
class Requirements:
    """What the workload needs, independent of the GPU it lands on.

    Memory splits into what can be sharded across GPUs (weights, optimiser state), the KV
    cache (sharded by tensor parallelism up to the number of KV heads) and what every GPU
    holds whole (activations, adapters).
    """

    task: str
    precision: str
    arch: ModelArch
    needs_fp8: bool
    needs_bf16: bool
    bandwidth_efficiency: float
    mfu: float
    sharded_bytes: float = 0.0
    kv_bytes: float = 0.0
    replicated_bytes: float = 0.0
    host_bytes: float = 0.0
    bytes_per_decode_step: float = 0.0
    flops_per_decode_step: float = 0.0
    min_bandwidth_gbps: float = 0.0
    train_flops: float = 0.0
    terms: tuple[Term, ...] = ()
    concurrency: int = 1
    tokens_per_s_per_stream: float | None = None
    tokens_per_s_total: float | None = None
    batch_tokens: float | None = None
    work_tflop: float | None = None
    work_ref_gpu_seconds: float | None = None
    """Item work measured on a reference GPU: seconds of it for the whole job (items × the
    preset's seconds per item); ``work_ref_tflops`` is that GPU's throughput in the measured
    precision, so another GPU takes seconds × ref ÷ its own (tensor-throughput scaling)."""
    work_ref_tflops: float = 0.0
    work_ref_note: str = ""
    deadline_hours: float | None = None
    max_nodes: int = 16
    allow_pcie_parallel: bool = False
    min_gpu_bandwidth_gbps: float | None = None
    require_sourced: bool = False
    weights_file_bytes: float = 0.0
    checkpoint_bytes: float = 0.0

    @property
    def vram_gib_per_replica(self) -> float:
        return (self.sharded_bytes + self.kv_bytes + self.replicated_bytes) / GIB

    @property
    def is_training(self) -> bool:
        return self.task in TRAINING_TASKS


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
    """KV cache per token of context over all layers (as if every layer attended globally).

    Llama-3.1-8B at 16 bit: 2·32·8·128·2 = 128 KiB; Llama-3.1-70B: 320 KiB (gpu-cloud-facts.md
    §6); DeepSeek-V3 by MLA: 61·(512+64)·2 = 68.6 KiB."""
    return arch.layers * kv_bytes_per_token_layer(arch, kv_bytes)


def kv_cache_bytes(arch: ModelArch, kv_bytes: float, context: int, batch: int) -> float:
    """KV cache of ``batch`` sequences of ``context`` tokens: a sliding-window layer keeps at
    most ``sliding_window`` tokens (Mistral's and Gemma 2/3's local layers; Beltagy et al. 2020,
    Longformer, for the window), the others the whole context."""
    window_layers = min(arch.window_layers, arch.layers) if arch.sliding_window else 0
    tokens = (arch.layers - window_layers) * context + window_layers * min(context, arch.sliding_window)
    return kv_bytes_per_token_layer(arch, kv_bytes) * tokens * batch


def image_kv_bytes(arch: ModelArch, kv_bytes: float, context: int, image_tokens: int, batch: int) -> float:
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


def decode_weight_bytes(arch: ModelArch, weight_bytes: float, batch: int) -> tuple[float, str]:
    """Weight bytes one decode step streams from memory: all of a dense model's, the shared
    part and the experts the batch touches of a MoE model's; a vision encoder runs only when a
    prompt's images are encoded (prefill), so decoding never reads it."""
    if not arch.is_moe:
        if arch.vision_params:
            return (arch.params - arch.vision_params) * weight_bytes, "(params − vision encoder) × bytes"
        return arch.params * weight_bytes, "params × bytes"
    e, k = arch.experts, arch.experts_active
    per_expert = (arch.params - arch.params_active) / (e - k)
    shared = arch.params - arch.vision_params - e * per_expert
    touched = expected_experts_touched(arch, batch)
    return (shared + touched * per_expert) * weight_bytes, (
        f"(shared + {touched:.2f} experts touched of {e}) × bytes"
    )


def _kv_precision_bytes(spec: WorkloadSpec) -> float:
    """KV cache precision: as declared, else 4 bytes for fp32 models and 2 (bf16) otherwise,
    which is what serving engines do unless told to quantise the cache."""
    declared = spec.serving.kv_cache_precision if spec.serving else None
    if declared:
        return BYTES_PER_PARAM[declared]
    return 4.0 if spec.precision == "fp32" else 2.0


def requirements(spec: WorkloadSpec) -> Requirements:
    """The GPU-independent needs of ``spec`` with every term named for ``--explain``."""
    arch = spec.arch()
    eff = spec.tuning.bandwidth_efficiency or DEFAULT_BANDWIDTH_EFFICIENCY
    mfu = spec.tuning.mfu or DEFAULT_MFU
    wbytes = BYTES_PER_PARAM[spec.precision]
    terms: list[Term] = []
    needs_fp8 = spec.precision == "fp8" or (
        spec.serving is not None and spec.serving.kv_cache_precision == "fp8"
    )
    needs_bf16 = spec.precision == "bf16"
    common = Requirements(
        task=spec.task,
        precision=spec.precision,
        arch=arch,
        needs_fp8=needs_fp8,
        needs_bf16=needs_bf16,
        bandwidth_efficiency=eff,
        mfu=mfu,
        deadline_hours=spec.teardown.ttl if spec.teardown else None,
        max_nodes=spec.placement.max_nodes,
        allow_pcie_parallel=spec.placement.allow_pcie_tensor_parallel,
        require_sourced=spec.placement.require_sourced,
        weights_file_bytes=arch.checkpoint_bytes
        or arch.params * (2.0 if spec.precision == "nf4" else wbytes),
    )
    if spec.task in TRAINING_TASKS:
        return _training_requirements(spec, arch, wbytes, terms, common)
    if arch.kind == "custom":
        assert arch.vram_gib is not None
        terms.append(Term("vram (declared)", arch.vram_gib, "GiB", "model.vram_gib"))
        return replace(
            common,
            sharded_bytes=arch.vram_gib * GIB,
            kv_bytes=0.0,
            replicated_bytes=0.0,
            host_bytes=0.0,
            bytes_per_decode_step=0.0,
            flops_per_decode_step=0.0,
            min_bandwidth_gbps=0.0,
            train_flops=0.0,
            min_gpu_bandwidth_gbps=arch.min_bandwidth_gbps,
            **_work(spec, arch, terms),
            terms=tuple(terms),
        )
    if arch.kind in ("diffusion", "audio"):
        weights = arch.params * wbytes
        terms.append(Term("weights", weights / GIB, "GiB", f"{arch.params:.3g} params × {wbytes:g} B"))
        if arch.kind == "audio" and arch.layers:
            total = weights + _audio_state_bytes(spec, arch, terms)
        else:
            total = weights * INFERENCE_OVERHEAD_FACTOR
            terms.append(
                Term("runtime (rule of thumb)", total / GIB, "GiB", f"{INFERENCE_OVERHEAD_FACTOR} × weights")
            )
            item = arch.item
            if item is not None and item.memory_mb and item.memory_mb * 1e6 > total:
                # the measured pipeline (text encoders and VAE too) beats the rule of thumb
                total = item.memory_mb * 1e6
                terms.append(
                    Term(
                        "runtime (measured)",
                        total / GIB,
                        "GiB",
                        f"{item.memory_mb:g} MB peak on {item.gpu} ({item.setting}; {item.source})",
                    )
                )
        return replace(
            common,
            sharded_bytes=0.0,
            kv_bytes=0.0,
            replicated_bytes=total,
            host_bytes=0.0,
            bytes_per_decode_step=0.0,
            flops_per_decode_step=0.0,
            min_bandwidth_gbps=0.0,
            train_flops=0.0,
            **_work(spec, arch, terms),
            terms=tuple(terms),
        )
    return _serving_requirements(spec, arch, wbytes, eff, terms, common)


AUDIO_ACTIVATION_FACTOR = 4
"""Encoder activations of one 30-second window held at once: about four hidden-width tensors
per position (residual stream, attention output, the MLP's input and output), the inference
counterpart of Korthikanti et al.'s per-layer terms with nothing kept for a backward pass.
A gpufit estimate, not a measured figure."""


def _audio_state_bytes(spec: WorkloadSpec, arch: ModelArch, terms: list[Term]) -> float:
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


def _work(spec: WorkloadSpec, arch: ModelArch, terms: list[Term]) -> dict[str, Any]:
    """The batch work of a non-token job: TFLOP per item as stated, else the preset's measured
    seconds per item on its reference GPU (scaled to each GPU in ``fit``)."""
    work = spec.work
    if work is None:
        return {}
    count = work.item_count
    if work.tflop_per_item is not None:
        total = count * work.tflop_per_item
        terms.append(Term("work", total, "TFLOP", f"{count:.3g} items × {work.tflop_per_item:g} TFLOP"))
        return {"work_tflop": total}
    item = arch.item
    assert item is not None  # the spec requires tflop_per_item otherwise
    ref_tflops = load_gpus()[item.gpu].tflops_at(item.precision) or 0.0
    seconds = count * item.seconds
    note = (
        f"{count:.3g} {item.unit}s × {item.seconds:g} s per {item.unit} measured on {item.gpu} "
        f"({item.setting}; {item.source})"
    )
    terms.append(Term("work on the reference GPU", seconds / 3600.0, "GPU-h", note))
    return {"work_ref_gpu_seconds": seconds, "work_ref_tflops": ref_tflops, "work_ref_note": note}


def _serving_requirements(
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


def _training_requirements(
    spec: WorkloadSpec,
    arch: ModelArch,
    wbytes: float,
    terms: list[Term],
    common: Requirements,
) -> Requirements:
    training = spec.training
    assert training is not None
    s, b, h, layers = training.sequence_tokens, training.micro_batch, arch.hidden, arch.layers
    opt = OPTIMIZER_BYTES[training.optimizer]
    host = 0.0
    if spec.task in ("finetune-full", "pretrain"):
        if spec.precision == "fp32":
            per_param, formula = 4 + 4 + (opt - 4), f"4 weights + 4 grads + {opt - 4:g} optimiser (fp32)"
        else:
            per_param = wbytes + wbytes + opt
            formula = f"{wbytes:g} weights + {wbytes:g} grads + {opt:g} {training.optimizer} state"
        sharded = arch.params * per_param
        replicated_states = 0.0
        checkpoint = arch.params * (2 + opt)
        terms.append(
            Term(
                "weights + grads + optimiser",
                sharded / GIB,
                "GiB",
                f"{arch.params:.4g} params × {per_param:g} B ({formula})",
            )
        )
    else:
        adapters = lora_params(arch, training.lora_rank)
        sharded = arch.params * wbytes
        terms.append(
            Term(
                "frozen base weights",
                sharded / GIB,
                "GiB",
                f"{arch.params:.4g} params × {wbytes:.3g} B ({spec.precision})",
            )
        )
        terms.append(
            Term(
                "lora adapter params", adapters / 1e6, "M", f"rank {training.lora_rank} on every linear layer"
            )
        )
        replicated_states = adapters * (2 + 2)
        checkpoint = adapters * (2 + opt)
        terms.append(Term("adapter weights + grads", replicated_states / GIB, "GiB", "adapters × (2 + 2) B"))
        if spec.task == "finetune-qlora":
            host = adapters * 8
            terms.append(
                Term(
                    "paged optimiser state (host RAM)",
                    host / GIB,
                    "GiB",
                    "adapters × 8 B (fp32 Adam moments, paged to CPU memory)",
                )
            )
        else:
            replicated_states += adapters * opt
            terms.append(
                Term(
                    "adapter optimiser state",
                    adapters * opt / GIB,
                    "GiB",
                    f"adapters × {opt:g} B ({training.optimizer})",
                )
            )
    if training.activation_checkpointing:
        acts = layers * FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN * s * b * h
        acts += KORTHIKANTI_BYTES_PER_TOKEN_HIDDEN * s * b * h
        act_formula = f"{layers} layers × 2·s·b·h + one layer × 34·s·b·h (full recompute)"
    else:
        acts = layers * KORTHIKANTI_BYTES_PER_TOKEN_HIDDEN * s * b * h
        act_formula = f"{layers} layers × 34·s·b·h (FlashAttention, no recompute)"
    logits = s * b * arch.vocab * LOSS_BYTES_PER_LOGIT
    terms.append(Term("activations", acts / GIB, "GiB", f"{act_formula}; s={s}, b={b}, h={h}"))
    terms.append(Term("loss logits", logits / GIB, "GiB", f"s·b·vocab × {LOSS_BYTES_PER_LOGIT} B"))
    k = TRAIN_FLOPS_PER_PARAM_TOKEN[spec.task]
    flops = k * arch.params_active * training.tokens
    terms.append(
        Term(
            "checkpoint",
            checkpoint / 1e9,
            "GB",
            "trained weights (2 B) + optimiser state per trained parameter",
        )
    )
    terms.append(
        Term(
            "training compute",
            flops,
            "FLOP",
            f"{k:g} × {arch.params_active:.4g} params × {training.tokens:.3g} tokens",
        )
    )
    return replace(
        common,
        sharded_bytes=sharded,
        kv_bytes=0.0,
        replicated_bytes=replicated_states + acts + logits,
        host_bytes=host,
        bytes_per_decode_step=0.0,
        flops_per_decode_step=0.0,
        min_bandwidth_gbps=0.0,
        train_flops=flops,
        terms=tuple(terms),
        checkpoint_bytes=checkpoint,
    )


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an instance type (or offer) cannot serve: the filter's name and a sentence."""

    filter: str
    reason: str
    gap: float = 1.0
    """How far off it is (0 = just missed): relative shortfall for vram, speed, deadline."""


@dataclass(frozen=True, slots=True)
class Shape:
    """How the workload runs on one instance type."""

    tensor_parallel: int
    gpus_per_replica: int
    nodes_per_replica: int
    replicas_per_instance: int
    replicas: int
    instances: int
    vram_gib_per_gpu: float
    vram_gib_per_replica: float
    needs_nvlink: bool
    needs_node_interconnect: bool
    tokens_per_s_per_stream: float | None
    tokens_per_s_per_replica: float | None
    job_hours: float | None
    terms: tuple[Term, ...] = field(default=())


def compute_name(precision: str) -> str:
    """The tensor-core format a job in ``precision`` computes in (see ``GpuSpec.tflops_at``)."""
    return {"fp8": "FP8", "fp16": "FP16", "fp32": "TF32"}.get(precision, "BF16/FP16")


def estimate_note(gpu: GpuSpec) -> str:
    """`` (TFLOPS estimated: …)`` when the GPU's throughput is an estimate, not a sourced figure."""
    return f" (TFLOPS estimated: {gpu.estimate_source}; low confidence)" if gpu.estimated else ""


def usable_gib(gpu: GpuSpec) -> float:
    """Memory a job may plan to use on one GPU: the usable fraction minus the CUDA context."""
    return gpu.memory_gib * USABLE_MEMORY_FRACTION - CUDA_CONTEXT_GIB


def per_gpu_gib(req: Requirements, shards: int, kv_heads: int) -> float:
    """Memory on each GPU when the shardable part is split ``shards`` ways; the KV cache
    splits by tensor parallelism only up to the number of KV heads (beyond, heads replicate)."""
    kv_split = min(shards, kv_heads) if kv_heads else shards
    return (req.sharded_bytes / shards + req.kv_bytes / max(kv_split, 1) + req.replicated_bytes) / GIB


def _powers_of_two(limit: int) -> list[int]:
    out, t = [], 1
    while t <= limit:
        out.append(t)
        t *= 2
    return out


def _precision_rejection(req: Requirements, gpu: GpuSpec) -> Rejection | None:
    if req.needs_fp8 and not gpu.fp8:
        return Rejection(
            "fp8", f"needs FP8 tensor cores (compute capability ≥ 8.9); {gpu.name} is {gpu.arch}"
        )
    if req.needs_bf16 and not gpu.bf16:
        return Rejection(
            "precision",
            f"bf16 needs compute capability ≥ 8.0; {gpu.name} is "
            f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]} (use fp16)",
        )
    if req.min_gpu_bandwidth_gbps and gpu.bandwidth_gbps < req.min_gpu_bandwidth_gbps:
        return Rejection(
            "bandwidth",
            f"needs ≥ {req.min_gpu_bandwidth_gbps:g} GB/s per GPU; "
            f"{gpu.name} has {gpu.bandwidth_gbps:g} GB/s",
        )
    return None


def fit(req: Requirements, it: InstanceType) -> Shape | Rejection:
    """Decide how the workload runs on instance type ``it``, or why it cannot. With
    ``require_sourced``, a GPU's estimated throughputs count as unknown."""
    if req.require_sourced and it.gpu.estimated:
        it = replace(it, gpu=sourced_only(it.gpu))
    gpu = it.gpu
    rejection = _precision_rejection(req, gpu)
    if rejection:
        return rejection
    if req.is_training:
        return _fit_training(req, it)
    return _fit_serving(req, it)


def _vram_rejection(req: Requirements, it: InstanceType, why: str = "") -> Rejection:
    """Memory does not fit one instance: what one replica needs, what each GPU would hold with
    the instance's GPUs sharing it, and what the instance has. ``gap`` is measured on one node."""
    n = it.gpu_count
    kv_heads = req.arch.kv_split_heads if not req.is_training else 0
    shards = 1 if req.arch.kind in ONE_GPU_KINDS else n
    need = per_gpu_gib(req, shards, kv_heads)
    link = "NVLink" if it.nvlink else "PCIe"
    return Rejection(
        "vram",
        f"needs {req.vram_gib_per_replica:.1f} GiB per replica ({need:.1f} GiB per GPU over {shards} "
        f"GPU{'s' if shards > 1 else ''}){why}; {it.name} has {n}×{usable_gib(it.gpu):.1f} GiB usable "
        f"{it.gpu.name} over {link}",
        gap=need / usable_gib(it.gpu) - 1.0,
    )


def _decode_speed(req: Requirements, gpu: GpuSpec, gpus: int) -> tuple[float, str]:
    """Decode step time = max(bytes read ÷ (bandwidth × efficiency), flops ÷ (TFLOPS × MFU)),
    over the GPUs that share one replica's weights (memory-bound decode: gpu-cloud-facts.md §6),
    plus two all-reduces per layer when they are more than one (``TP_ALLREDUCE_LATENCY_S``)."""
    memory_s = req.bytes_per_decode_step / (gpus * gpu.bandwidth_gbps * 1e9 * req.bandwidth_efficiency)
    comm_s = 2 * req.arch.layers * TP_ALLREDUCE_LATENCY_S if gpus > 1 else 0.0
    comm = f" + {2 * req.arch.layers} all-reduces × {TP_ALLREDUCE_LATENCY_S * 1e6:g} µs" if comm_s else ""
    tflops = gpu.tflops_at(req.precision)
    if tflops is None:
        return memory_s + comm_s, f"memory-bound (no sourced TFLOPS for the compute floor){comm}"
    compute_s = req.flops_per_decode_step / (gpus * tflops * 1e12 * req.mfu)
    if compute_s > memory_s:
        return compute_s + comm_s, f"compute-bound{comm}"
    return memory_s + comm_s, f"memory-bound{comm}"


def _fit_serving(req: Requirements, it: InstanceType) -> Shape | Rejection:
    gpu, n = it.gpu, it.gpu_count
    usable = usable_gib(gpu)
    heads = req.arch.heads
    if req.arch.kind in ONE_GPU_KINDS:
        degrees = [1]
    else:
        degrees = [t for t in _powers_of_two(n) if not heads or heads % t == 0]
    slow: Rejection | None = None
    for t in degrees:
        if per_gpu_gib(req, t, req.arch.kv_split_heads) > usable:
            continue
        if t > 1 and not it.nvlink and not req.allow_pcie_parallel:
            return Rejection(
                "nvlink",
                f"needs tensor parallelism over {t} GPUs with NVLink/NVSwitch; {it.name} has "
                f"{n}×{gpu.name} over PCIe (set placement.allow_pcie_tensor_parallel to accept it)",
            )
        shape_or_slow = _serving_shape(req, it, t, 1)
        if isinstance(shape_or_slow, Shape):
            return shape_or_slow
        slow = shape_or_slow
    if slow is not None:
        return slow
    if req.arch.kind in ONE_GPU_KINDS:
        return _vram_rejection(req, it, f" ({req.arch.kind} models run on one GPU)")
    # Beyond one node: tensor parallel inside the node, pipeline stages across nodes.
    top = degrees[-1] if degrees else 1
    for nodes in range(2, req.max_nodes + 1):
        if per_gpu_gib(req, top * nodes, req.arch.kv_split_heads) <= usable:
            if it.node_interconnect is None:
                return _vram_rejection(
                    req, it, f"; {nodes} such nodes would hold it, but it lacks EFA/GPUDirect to join them"
                )
            if top > 1 and not it.nvlink and not req.allow_pcie_parallel:
                return Rejection("nvlink", f"needs NVLink inside each node; {it.name} is PCIe only")
            return _serving_shape(req, it, top, nodes)
    return _vram_rejection(req, it, f", more than {req.max_nodes} nodes (placement.max_nodes) hold")


def _serving_shape(req: Requirements, it: InstanceType, tp: int, nodes: int) -> Shape | Rejection:
    gpu, n = it.gpu, it.gpu_count
    gpus = tp * nodes
    terms: list[Term] = [
        Term("tensor parallel", tp, "GPUs", "smallest power of two whose shard fits usable memory"),
        Term(
            "per-GPU memory",
            per_gpu_gib(req, gpus, req.arch.kv_split_heads),
            "GiB",
            f"(sharded ÷ {gpus} + kv ÷ min({gpus}, kv_heads) + replicated); usable "
            f"{usable_gib(gpu):.1f} GiB = {gpu.memory_gib:.1f} × {USABLE_MEMORY_FRACTION} "
            f"− {CUDA_CONTEXT_GIB}",
        ),
    ]
    per_stream = per_replica = job_hours = None
    if req.bytes_per_decode_step > 0:
        # Pipeline stages run one after another for a token, so nodes add no bandwidth per stream.
        step, bound = _decode_speed(req, gpu, tp)
        per_stream = 1.0 / step
        per_replica = per_stream * req.concurrency
        terms.append(Term("decode step", step * 1e3, "ms", f"{bound} over {tp}×{gpu.bandwidth_gbps:g} GB/s"))
        terms.append(Term("tokens/s per stream", per_stream, "tok/s", "1 ÷ step"))
        terms.append(Term("tokens/s per replica", per_replica, "tok/s", f"per stream × {req.concurrency}"))
        if req.tokens_per_s_per_stream and per_stream < req.tokens_per_s_per_stream:
            return Rejection(
                "speed",
                f"needs {req.tokens_per_s_per_stream:g} tok/s per stream; {tp}×{gpu.name} decodes "
                f"{per_stream:.1f} tok/s ({req.bandwidth_efficiency:g} of {tp}×{gpu.bandwidth_gbps:g} GB/s)",
                gap=req.tokens_per_s_per_stream / per_stream - 1.0,
            )
    replicas_per_instance = n // tp if nodes == 1 else 1
    replicas = 1
    if req.tokens_per_s_total and per_replica:
        replicas = math.ceil(req.tokens_per_s_total / per_replica - 1e-9)
        terms.append(Term("replicas", replicas, "", f"⌈{req.tokens_per_s_total:g} ÷ {per_replica:.1f}⌉"))
    instances = math.ceil(replicas / replicas_per_instance) * nodes
    if req.batch_tokens and per_replica:
        fleet_rate = per_replica * max(replicas, replicas_per_instance * instances // nodes)
        job_hours = req.batch_tokens / fleet_rate / 3600.0
        terms.append(
            Term("batch hours", job_hours, "h", f"{req.batch_tokens:.3g} tokens ÷ {fleet_rate:.0f} tok/s")
        )
    elif req.work_ref_gpu_seconds:
        tflops = gpu.tflops_at(req.precision)
        if tflops is None:
            return Rejection(
                "speed", f"no sourced {req.precision} throughput for {gpu.name} to scale the measured work"
            )
        scale_to = req.work_ref_tflops / tflops
        job_hours = req.work_ref_gpu_seconds * scale_to / (n * instances) / 3600.0
        terms.append(
            Term(
                "batch hours",
                job_hours,
                "h",
                f"reference GPU-hours × {req.work_ref_tflops:g} ÷ {tflops:g} TFLOPS "
                f"÷ {n * instances} GPUs{estimate_note(gpu)}",
            )
        )
    elif req.work_tflop:
        tflops = gpu.tflops_at(req.precision)
        if tflops is None:
            return Rejection(
                "speed", f"no sourced {req.precision} throughput for {gpu.name} to time the work"
            )
        job_hours = req.work_tflop / (n * instances * tflops * req.mfu) / 3600.0
        terms.append(
            Term(
                "batch hours",
                job_hours,
                "h",
                f"work ÷ ({n * instances} GPUs × {tflops:g} TFLOPS × {req.mfu:g} MFU){estimate_note(gpu)}",
            )
        )
    if job_hours is not None and req.deadline_hours is not None and job_hours > req.deadline_hours:
        scale = math.ceil(job_hours / req.deadline_hours)
        if instances * scale > req.max_nodes:
            return Rejection(
                "deadline",
                f"needs {job_hours:.1f} h, over the {req.deadline_hours:g} h ttl",
                gap=job_hours / req.deadline_hours - 1.0,
            )
        instances *= scale
        job_hours /= scale
    return Shape(
        tensor_parallel=tp,
        gpus_per_replica=gpus,
        nodes_per_replica=nodes,
        replicas_per_instance=replicas_per_instance,
        replicas=n * instances if req.work_tflop or req.work_ref_gpu_seconds else max(replicas, 1),
        instances=instances,
        vram_gib_per_gpu=per_gpu_gib(req, gpus, req.arch.kv_split_heads),
        vram_gib_per_replica=req.vram_gib_per_replica,
        needs_nvlink=tp > 1,
        needs_node_interconnect=nodes > 1,
        tokens_per_s_per_stream=per_stream,
        tokens_per_s_per_replica=per_replica,
        job_hours=job_hours,
        terms=tuple(terms),
    )


def _fit_training(req: Requirements, it: InstanceType) -> Shape | Rejection:
    gpu, n = it.gpu, it.gpu_count
    usable = usable_gib(gpu)
    tflops = gpu.tflops_at(req.precision)
    if tflops is None:
        return Rejection(
            "speed", f"no sourced {compute_name(req.precision)} tensor throughput for {gpu.name}"
        )
    if req.host_bytes / GIB > it.memory_gib * USABLE_MEMORY_FRACTION:
        return Rejection(
            "host-memory",
            f"paged optimiser needs {req.host_bytes / GIB:.1f} GiB of host RAM; "
            f"{it.name} has {it.memory_gib:g} GiB",
        )
    for nodes in range(1, req.max_nodes + 1):
        gpus = n * nodes
        shards = 1 if per_gpu_gib(req, 1, 0) <= usable else gpus
        if per_gpu_gib(req, shards, 0) > usable:
            continue
        if nodes > 1 and it.node_interconnect is None:
            return _vram_rejection(
                req, it, f"; {nodes} such nodes would hold it, but it lacks EFA/GPUDirect to join them"
            )
        if shards > 1 and n > 1 and not it.nvlink and not req.allow_pcie_parallel:
            return Rejection(
                "nvlink",
                f"needs the model sharded over {gpus} GPUs with NVLink; "
                f"{it.name} is PCIe only (set placement.allow_pcie_tensor_parallel)",
            )
        hours = req.train_flops / (gpus * tflops * 1e12 * req.mfu) / 3600.0
        if req.deadline_hours is not None and hours > req.deadline_hours:
            if it.node_interconnect is None or nodes == req.max_nodes:
                return Rejection(
                    "deadline",
                    f"needs {hours:.1f} h on {gpus}×{gpu.name}, over the {req.deadline_hours:g} h ttl",
                    gap=hours / req.deadline_hours - 1.0,
                )
            continue
        terms = (
            Term("shards", shards, "GPUs", "1 if the job fits one GPU, else ZeRO-3/FSDP over all GPUs"),
            Term(
                "per-GPU memory",
                per_gpu_gib(req, shards, 0),
                "GiB",
                f"sharded ÷ {shards} + replicated; usable {usable:.1f} GiB",
            ),
            Term(
                "training hours",
                hours,
                "h",
                f"compute ÷ ({gpus} GPUs × {tflops:g} TFLOPS × {req.mfu:g} MFU){estimate_note(gpu)}",
            ),
        )
        return Shape(
            tensor_parallel=1,
            gpus_per_replica=gpus,
            nodes_per_replica=nodes,
            replicas_per_instance=1,
            replicas=1,
            instances=nodes,
            vram_gib_per_gpu=per_gpu_gib(req, shards, 0),
            vram_gib_per_replica=req.vram_gib_per_replica,
            needs_nvlink=shards > 1 and n > 1,
            needs_node_interconnect=nodes > 1,
            tokens_per_s_per_stream=None,
            tokens_per_s_per_replica=None,
            job_hours=hours,
            terms=terms,
        )
    return _vram_rejection(req, it, f", more than {req.max_nodes} nodes (placement.max_nodes) hold")
