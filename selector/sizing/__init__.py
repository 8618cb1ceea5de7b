"""What a workload needs, and how one replica of it runs on a given GPU model and count.

Pure arithmetic, no I/O. ``requirements(spec)`` computes what does not depend on the GPU
(bytes of weights, KV cache, optimiser state, activations; FLOPs; bandwidth for the token
rate). ``fit(req, instance)`` then decides whether, and how, one instance type runs it:
tensor-parallel degree, shards, nodes, replicas, per-GPU memory, tokens/s and job hours, or
the named filter that rejects it and why. Every term is a ``Term`` that ``--explain`` prints.

Sources for the formulas are in each docstring; the shared reference is
``gpu-cloud-facts.md`` §6 (memory arithmetic).

The package's parts: ``terms`` (``Term``, ``Requirements``), ``memory`` (KV cache, LoRA and
mixture-of-experts arithmetic), ``requirements``, ``inference`` and ``training`` (what one
replica needs), ``speed`` (the decode speed model) and ``fit`` (``Shape``, ``Rejection``,
``fit``).
"""

from selector.sizing.fit import (
    CUDA_CONTEXT_GIB,
    ONE_GPU_KINDS,
    USABLE_MEMORY_FRACTION,
    Rejection,
    Shape,
    compute_name,
    estimate_note,
    fit,
    fit_serving_at,
    training_shards,
    usable_gib,
)
from selector.sizing.gpu_memory import per_gpu_gib
from selector.sizing.inference import AUDIO_ACTIVATION_FACTOR, PREFILL_CHUNK_TOKENS
from selector.sizing.memory import (
    decode_weight_bytes,
    expected_experts_touched,
    image_kv_bytes,
    kv_bytes_per_token,
    kv_bytes_per_token_layer,
    kv_cache_bytes,
    lora_params,
)
from selector.sizing.requirements import INFERENCE_OVERHEAD_FACTOR, requirements
from selector.sizing.speed import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_MFU,
    TP_ALLREDUCE_LATENCY_S,
    decode_speed,
)
from selector.sizing.terms import BYTES_PER_PARAM, GIB, Requirements, Term
from selector.sizing.training import (
    FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN,
    LOSS_BYTES_PER_LOGIT,
    OPTIMIZER_BYTES,
    TRAIN_FLOPS_PER_PARAM_TOKEN,
)

__all__ = [
    "AUDIO_ACTIVATION_FACTOR",
    "BYTES_PER_PARAM",
    "CUDA_CONTEXT_GIB",
    "DEFAULT_BANDWIDTH_EFFICIENCY",
    "DEFAULT_MFU",
    "FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN",
    "GIB",
    "INFERENCE_OVERHEAD_FACTOR",
    "LOSS_BYTES_PER_LOGIT",
    "ONE_GPU_KINDS",
    "OPTIMIZER_BYTES",
    "PREFILL_CHUNK_TOKENS",
    "TP_ALLREDUCE_LATENCY_S",
    "TRAIN_FLOPS_PER_PARAM_TOKEN",
    "USABLE_MEMORY_FRACTION",
    "Rejection",
    "Requirements",
    "Shape",
    "Term",
    "compute_name",
    "decode_speed",
    "decode_weight_bytes",
    "estimate_note",
    "expected_experts_touched",
    "fit",
    "fit_serving_at",
    "image_kv_bytes",
    "kv_bytes_per_token",
    "kv_bytes_per_token_layer",
    "kv_cache_bytes",
    "lora_params",
    "per_gpu_gib",
    "requirements",
    "training_shards",
    "usable_gib",
]
