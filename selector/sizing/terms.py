"""The vocabulary of the arithmetic: ``Term`` (one named line of it) and ``Requirements``
(what one replica needs, independent of the GPU it lands on), with bytes per precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from selector.model_arch import ModelArch
from selector.spec import TRAINING_TASKS

GIB = 1024**3


def held_names(*parts: tuple[str, float]) -> list[str]:
    """The names of the (name, bytes) parts that hold anything, in order: how a plan line or a
    refusal names only the memory that is there."""
    return [name for name, held in parts if held]


BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": (4 + 20 / 128) / 8,
    "nf4": 4.13 / 8,
}
"""Bytes per weight. int4 is GPTQ's and AWQ's files at their common group size of 128: four bits a
weight, and per group of 128 weights of an output channel a 16-bit scale and a 4-bit zero point
(vLLM's AWQ and GPTQ linear methods allocate ``qweight`` int32 packing eight weights, ``scales``
fp16 of (in ÷ group, out) and ``qzeros`` int32 packing eight zeros of (in ÷ group, out ÷ 8):
vllm/model_executor/layers/quantization/awq.py and gptq.py; AutoAWQ's documented config
``{"zero_point": True, "q_group_size": 128, "w_bit": 4}``): 4 + 20/128 = 4.156 bits, the larger of
the two common group-128 layouts (symmetric GPTQ under vLLM's Marlin and compressed-tensors W4A16
keep no zeros: 4.125). GPTQ's ``g_idx`` (one int32 per input channel) adds about 0.1 % and is left
out. Formats sharing the name carry more and are under-counted here: torchao's int4 weight-only
(group 128, bf16 scale and zero: 4.25 bits), gpt-fast's (group 32: 5), GGUF Q4_K_M (about 4.85).
The fitted vLLM 0.19 W4A16 Llama-3.1-8B weights row (compressed-tensors, symmetric) reads 0.99 with
the scales (0.97 at a flat 4 bits). NF4 with
double quantisation costs about 4.13 bits per parameter (Dettmers et al. 2023, QLoRA, arXiv
2305.14314, §3)."""


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
class ShardedWorkingSet:
    """What a sharded training job gathers and buffers beyond its shards, as bytes fixed by the model
    and the training settings (``sharded_memory.working_bytes`` reads them)."""

    library: Literal["fsdp", "deepspeed"]
    root_bytes: float  # FSDP's root unit (embeddings, output head) at the bytes it computes in
    layer_bytes: float  # one transformer block's parameters at the bytes it computes in
    unit_grad_bytes: float  # one block's unsharded gradient before its reduce-scatter (0: none)
    root_grad_bytes: float  # the root unit's unsharded gradient (0: its weights are frozen)
    root_reduce_bytes: float  # the root's fp32 reduce-scatter input at the end of backward (0: none)
    model_bytes: float  # every parameter at the bytes it computes in
    element_bytes: float  # bytes of one element DeepSpeed counts (the 16-bit storage of a 4-bit base)
    largest_param_numel: float  # the model's largest parameter, in elements (ZeRO-3's window overrun)
    largest_trained_numel: float  # the largest parameter the job trains, in elements (0: adapters only)
    trained_params: float  # parameters the optimiser steps
    comm_bytes: float  # ZeRO-3's communication and gradient dtype: 2 under 16-bit training, 4 under fp32


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
    state_bytes: float = 0.0  # a hybrid model's recurrent state: splits over every GPU, by its own heads
    replicated_bytes: float = 0.0
    accumulated_grad_bytes: float = 0.0  # whole gradients held unsharded under FSDP no_sync (training.py)
    frozen_grad_bytes: float = 0.0  # a sharded LoRA job's gradients of its frozen weights (training.py)
    paged_optimizer_bytes: float = 0.0  # one process's optimiser state paged to host RAM (PEFT k-bit prep)
    offloaded_activation_bytes: float = 0.0  # one process's activations offloaded to host RAM
    bytes_per_decode_step: float = 0.0
    flops_per_decode_step: float = 0.0
    attention_flops_per_decode_step: float = 0.0  # the decode step's attention over the KV cache (inside)
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
    work_compute_precision: str | None = None
    eager_training: bool = False  # training.compile false: eager PyTorch kernels (EAGER_TRAINING_SLOWDOWN)
    shard_training: bool = False  # training.sharding full: sharded over all GPUs even where one holds all
    work_ref_bandwidth_gbps: float = 0.0  # diffusion: the reference GPU's bandwidth (GPU scaling)
    work_floor_seconds: float = 0.0  # audio: the job's time on any GPU at work.batch (audio_terms)
    """The precision whose tensor throughput times the work on each GPU; None: the spec's. A
    weight-only quantised diffusion model still multiplies in 16-bit (``requirements``)."""
    deadline_hours: float | None = None
    max_nodes: int = 16
    allow_pcie_parallel: bool = False
    min_gpu_bandwidth_gbps: float | None = None
    require_sourced: bool = False
    weights_file_bytes: float = 0.0
    checkpoint_bytes: float = 0.0
    engine: str = "none"  # the model server gpufit launches (serve), whose memory rules apply
    load_bytes: float = 0.0  # shardable bytes at the peak of loading, before the KV cache exists
    activation_bytes: float = 0.0  # the serving activation workspace (inside sharded_bytes)
    mfu_tuned: bool = False  # tuning.mfu was set: it wins over the per-GPU-generation figure
    kv_bytes_per_decode_step: float = 0.0  # the KV-cache part of bytes_per_decode_step
    state_bytes_per_decode_step: float = 0.0  # the recurrent-state part of bytes_per_decode_step
    prefill_flops_per_step: float = 0.0  # arriving prompts' prefill carried by each decode step
    prefill_attention_flops_per_step: float = 0.0  # its attention to the prompts' prefixes (inside)
    prefill_chunk_tokens: float = 0.0  # prompt tokens one prefilling step carries (chunked prefill)
    prefill_tokens_per_step: float = 0.0  # mean prompt tokens per decode step (0: none)
    engine_generation: str = "current"  # the release era whose fixed latencies apply (speed.py)
    moe_expert_latency_s: float = 25e-6  # per routed expert (speed.moe_expert_latency_s); slow side
    legacy_cache_bytes: float = 0.0  # a second KV cache, transformers' tuple cache (inside kv_bytes)
    kv_read_factor: float = 1.0  # times a decode step reads the KV cache (schedule.kv_read_factor)
    static_batch: bool = False  # a calibration row's static batch: one prefill pass per batch (schedule.py)
    runtime_reserve_bytes: float = 0.0  # per GPU: the engine's non-torch memory (inside replicated)
    runtime_reserve_tp_bytes: float = 0.0  # per GPU, added at tensor parallelism ≥ 2 (NCCL buffers)
    framework: str = ""  # training.framework, for what it cannot run (training.one_gpu_only)
    sharded_working: ShardedWorkingSet | None = None  # a sharded job's gathered weights, ZeRO-3 buffers

    @property
    def vram_gib_per_replica(self) -> float:
        return (self.sharded_bytes + self.kv_bytes + self.state_bytes + self.replicated_bytes) / GIB

    @property
    def host_bytes(self) -> float:
        """Host RAM one training process keeps: its paged optimiser state and offloaded activations."""
        return self.paged_optimizer_bytes + self.offloaded_activation_bytes

    @property
    def is_training(self) -> bool:
        return self.task in TRAINING_TASKS
