"""``fit(req, instance)``: whether, and how, one instance type runs a workload: tensor-parallel
degree, shards, nodes, replicas, per-GPU memory, tokens/s and job hours, or the named filter
that rejects it and why."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from selector.catalog import GpuSpec, InstanceType, sourced_only
from selector.sizing.diffusion_terms import DIFFUSION_SPEEDUP_EXPONENT, cap_note, diffusion_gpu_scale
from selector.sizing.engine_memory import sglang_static_fraction
from selector.sizing.gpu_memory import per_gpu_gib, per_gpu_steady_bytes
from selector.sizing.host_memory import host_memory_rejection, host_memory_terms
from selector.sizing.sharded_memory import (
    beyond_shard_formula_note,
    beyond_shard_refusal_note,
    replica_gib,
    unshardable_note,
)
from selector.sizing.speed import decode_speed, training_mfu
from selector.sizing.terms import GIB, Requirements, Term
from selector.sizing.training import EAGER_TRAINING_SLOWDOWN, FP8_TRAINING_SPEEDUP, ONE_GPU_ONLY, one_gpu_only

USABLE_MEMORY_FRACTION = 0.90
"""vLLM's ``gpu_memory_utilization`` (default 0.9, which gpufit renders): the engine's budget for
weights, the profiled activation peak, its non-torch increase (CUDA graphs, NCCL buffers) and
the KV cache, ``requested_memory = total × gpu_memory_utilization``, ``available KV = requested −
non_kv_cache_memory`` (vllm-project/vllm vllm/v1/worker/gpu_worker.py
``determine_available_memory``). The CUDA context is in the init snapshot the budget is measured
from, so it sits in the other 10 %, not inside the budget: a served plan (weights + KV +
``inference.RUNTIME_RESERVE_GIB``) may fill 0.9 × memory, no context subtracted again."""

CUDA_CONTEXT_GIB = 0.75
"""Memory the CUDA context and kernels take on each GPU before any tensor: ~700-800 MiB as
reported by PyTorch maintainers (discuss.pytorch.org/t/high-gpu-memory-overhead/81330). Counted
where no engine budget holds it: training and engine-less pipelines (diffusers, custom)."""

ALLOCATOR_HEADROOM_FRACTION = 0.10
"""Share of a GPU a PyTorch job without an engine budget keeps free (training, diffusers
pipelines, and a server gpufit does not launch, ``serving.engine: none``), on top of the CUDA
context: gpufit's long-standing 10 % (the share vLLM's default ``gpu_memory_utilization`` 0.9
leaves out). Published fine-tuning peaks are the caching allocator's ``max_memory_allocated``
(torchtune's "Peak Memory Active"); reserved memory runs above it by fragmentation (PyTorch
docs, CUDA semantics, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"), and no
reserved-versus-allocated measurement was found that would justify less. These jobs get no
looser budget than a served model: 0.9 × memory − the context."""

WIRED_NODE_INTERCONNECTS = frozenset({"efa"})
"""Node interconnects whose wiring gpufit provisions: EFA (one interface per EFA-capable
network card on the Deep Learning AMI, which ships the EFA software and NCCL's OFI plugin).
GCP's GPUDirect fabrics are not wired yet, so a replica is never spread over GCP machines.
Each needs networks and software gpufit does not set up (Google's Cluster Toolkit blueprints,
github.com/GoogleCloudPlatform/cluster-toolkit, examples/machine-learning): GPUDirect-TCPX
(a3-highgpu-8g) four extra gVNIC VPCs, the receive-datapath-manager container and the TCPX
NCCL plugin, on Container-Optimized OS or an image Google supplies; GPUDirect-TCPXO
(a3-megagpu-8g) eight extra VPCs, a DKMS module and udev rule on an Ubuntu accelerator image,
the RxDM container and NCCL plugin; GPUDirect RDMA (a3-ultragpu-8g, a4-highgpu-8g) a
zone-bound RoCE network profile with eight MRDMA subnets
(https://cloud.google.com/vpc/docs/rdma-network-profiles) and Google's gIB NCCL plugin, which
a startup script can install on stock Ubuntu. Without them the nodes would exchange gradients
over one gVNIC at a fraction of the bandwidth a multi-node plan's speed assumes."""

INTERCONNECT_NAMES = {
    "gpudirect-tcpx": "GPUDirect-TCPX",
    "gpudirect-tcpxo": "GPUDirect-TCPXO",
    "gpudirect-rdma": "GPUDirect RDMA",
}


def joins_nodes(it: InstanceType) -> bool:
    """Whether gpufit can join several of these machines into one replica."""
    return it.node_interconnect in WIRED_NODE_INTERCONNECTS


def _unjoined(nodes: int, it: InstanceType) -> str:
    if it.node_interconnect is None:
        return f"; {nodes} such nodes would hold it, but it lacks EFA/GPUDirect to join them"
    fabric = INTERCONNECT_NAMES.get(it.node_interconnect, it.node_interconnect)
    return (
        f"; {nodes} such nodes would hold it, joined by {fabric}, which gpufit does not wire "
        "(its NICs, VPCs and NCCL plugin; see README, Multi-node)"
    )


ENGINE_BUDGETS = frozenset({"vllm", "sglang"})
"""Engines that budget GPU memory themselves (vLLM's ``gpu_memory_utilization``, SGLang's
``--mem-fraction-static``)."""

ONE_GPU_KINDS = frozenset({"diffusion", "audio"})
"""Model kinds a replica runs on one GPU (many replicas per instance, never tensor parallel)."""


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
    concurrency: int = 0  # batch generation: the concurrency chosen for this type (0: the spec's)


def compute_name(precision: str) -> str:
    """The tensor-core format a job in ``precision`` computes in (see ``GpuSpec.tflops_at``)."""
    return {"fp8": "FP8", "fp16": "FP16", "fp32": "TF32"}.get(precision, "BF16/FP16")


def estimate_note(gpu: GpuSpec) -> str:
    """`` (TFLOPS estimated: …)`` when the GPU's throughput is an estimate, not a sourced figure."""
    return f" (TFLOPS estimated: {gpu.estimate_source}; low confidence)" if gpu.estimated else ""


def usable_gib(gpu: GpuSpec, req: Requirements | None = None) -> float:
    """Memory a job may plan to use on one GPU. A served model under vLLM or SGLang (and with no
    ``req``): the engine's budget, ``USABLE_MEMORY_FRACTION`` × memory (its own reserve is in the
    plan). Training, engine-less pipelines and ``engine: none`` servers: memory less the allocator's
    headroom (``ALLOCATOR_HEADROOM_FRACTION``) and the CUDA context."""
    if req is None or (not req.is_training and req.engine in ENGINE_BUDGETS):
        return gpu.memory_gib * USABLE_MEMORY_FRACTION
    return gpu.memory_gib * (1.0 - ALLOCATOR_HEADROOM_FRACTION) - CUDA_CONTEXT_GIB


def usable_note(gpu: GpuSpec, req: Requirements) -> str:
    """How ``usable_gib`` was reached, for ``--explain``."""
    if not req.is_training and req.engine in ENGINE_BUDGETS:
        return (
            f"usable {usable_gib(gpu, req):.1f} GiB = {gpu.memory_gib:.1f} × {USABLE_MEMORY_FRACTION} "
            "(the engine's gpu_memory_utilization budget, CUDA context outside it: vLLM gpu_worker.py)"
        )
    return (
        f"usable {usable_gib(gpu, req):.1f} GiB = {gpu.memory_gib:.1f} × {1 - ALLOCATOR_HEADROOM_FRACTION:g} "
        f"− {CUDA_CONTEXT_GIB} CUDA context "
        f"(allocator headroom {ALLOCATOR_HEADROOM_FRACTION:.0%}, no engine budget)"
    )


def serving_usable_gib(req: Requirements, gpu: GpuSpec, tp: int) -> float:
    """What a serving replica may fill on each GPU: ``usable_gib``; under SGLang, whose static
    pool (weights + KV cache) is ``--mem-fraction-static`` of the GPU with the rest kept for
    activations and CUDA graphs, no more than that pool plus gpufit's activation workspace
    (``engine_memory.sglang_static_fraction``)."""
    usable = usable_gib(gpu, req)
    if req.engine != "sglang" or req.is_training:
        return usable
    arch = req.arch
    fraction = sglang_static_fraction(gpu.memory_mib, tp, req.concurrency, arch.is_mla, arch.is_multimodal)
    return min(usable, fraction * gpu.memory_gib + req.activation_bytes / tp / GIB)


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


def within_ttl(work_hours: float, setup_hours: float, ttl_hours: float) -> int | None:
    """How many machines the work must be split over for setup + work to end within the ttl:
    every machine sets itself up (boot, image, weights: ``selector.setup_time``) before its
    share of the work starts, so the work fits into ``ttl − setup``, not into the ttl. None
    when the setup alone takes the whole ttl. ``select.plan`` then checks the offer's hours
    (setup + work, spot rework included) against the ttl again."""
    if work_hours + setup_hours <= ttl_hours:
        return 1
    room = ttl_hours - setup_hours
    return math.ceil(work_hours / room) if room > 0 else None


def _over_ttl(needs: str, setup_hours: float, ttl_hours: float, work_hours: float) -> Rejection:
    setup = f" + {setup_hours:.1f} h setup" if setup_hours else ""
    return Rejection(
        "deadline",
        f"{needs}{setup}, over the {ttl_hours:g} h ttl",
        gap=(work_hours + setup_hours) / ttl_hours - 1.0,
    )


def fit(req: Requirements, it: InstanceType, setup_hours: float = 0.0) -> Shape | Rejection:
    """Decide how the workload runs on instance type ``it``, or why it cannot. With
    ``require_sourced``, a GPU's estimated throughputs count as unknown. ``setup_hours``: a
    job's setup on ``it`` (``selector.cost.instance_setup_hours``), which runs inside the ttl
    before the first step, so the ttl scale-out (``within_ttl``) fits the work into what is left."""
    if req.require_sourced and it.gpu.estimated:
        it = replace(it, gpu=sourced_only(it.gpu))
    gpu = it.gpu
    rejection = _precision_rejection(req, gpu)
    if rejection:
        return rejection
    if req.is_training:
        return _fit_training(req, it, setup_hours)
    return _fit_serving(req, it, setup_hours)


def fit_serving_at(req: Requirements, it: InstanceType, tp: int) -> Shape | Rejection:
    """How a served model runs on ``it`` at tensor parallelism ``tp`` on one node, or why it
    cannot: a fleet's fallback must run the launch the plan rendered, whose TP is the choice's
    (``selector.fallbacks``), even where a smaller TP would fit this type."""
    if req.require_sourced and it.gpu.estimated:
        it = replace(it, gpu=sourced_only(it.gpu))
    rejection = _precision_rejection(req, it.gpu)
    if rejection:
        return rejection
    heads = req.arch.heads
    if req.is_training or tp > it.gpu_count or (heads and heads % tp):
        return Rejection("vram", f"{it.name} cannot run a replica at TP {tp}")
    if per_gpu_gib(req, tp, req.arch.kv_split_heads) > serving_usable_gib(req, it.gpu, tp):
        return _vram_rejection(req, it, f" at TP {tp}")
    if tp > 1 and not it.nvlink and not req.allow_pcie_parallel:
        return Rejection("nvlink", f"TP {tp} needs NVLink/NVSwitch; {it.name} is PCIe only")
    return serving_shape(req, it, tp, 1)


def _vram_rejection(req: Requirements, it: InstanceType, why: str = "") -> Rejection:
    """Memory does not fit one instance: what one replica needs, what each GPU would hold with
    the instance's GPUs sharing it, and what the instance has. ``gap`` is measured on one node."""
    n = it.gpu_count
    kv_heads = req.arch.kv_split_heads if not req.is_training else 0
    shards = 1 if req.arch.kind in ONE_GPU_KINDS else n
    need = per_gpu_gib(req, shards, kv_heads)
    link = "NVLink" if it.nvlink else "PCIe"
    usable = serving_usable_gib(req, it.gpu, shards) if not req.is_training else usable_gib(it.gpu, req)
    detail = beyond_shard_refusal_note(req, shards)
    replica = replica_gib(req, shards) if req.is_training else req.vram_gib_per_replica
    if req.load_bytes and need * GIB > per_gpu_steady_bytes(req, shards, kv_heads):
        detail = (
            f" while loading: {req.load_bytes / GIB:.1f} GiB as the 16-bit checkpoint is quantised to FP8"
        )
    return Rejection(
        "vram",
        f"needs {replica:.1f} GiB per replica ({need:.1f} GiB per GPU over {shards} "
        f"GPU{'s' if shards > 1 else ''}{detail}){why}; {it.name} has {n}×{usable:.1f} GiB usable "
        f"{it.gpu.name} over {link}",
        gap=need / usable - 1.0,
    )


def _fit_serving(req: Requirements, it: InstanceType, setup_hours: float = 0.0) -> Shape | Rejection:
    gpu, n = it.gpu, it.gpu_count
    heads = req.arch.heads
    if req.arch.kind in ONE_GPU_KINDS:
        degrees = [1]
    else:
        degrees = [t for t in _powers_of_two(n) if not heads or heads % t == 0]
    slow: Rejection | None = None
    for t in degrees:
        if per_gpu_gib(req, t, req.arch.kv_split_heads) > serving_usable_gib(req, gpu, t):
            continue
        if t > 1 and not it.nvlink and not req.allow_pcie_parallel:
            return Rejection(
                "nvlink",
                f"needs tensor parallelism over {t} GPUs with NVLink/NVSwitch; {it.name} has "
                f"{n}×{gpu.name} over PCIe (set placement.allow_pcie_tensor_parallel to accept it)",
            )
        shape_or_slow = serving_shape(req, it, t, 1, setup_hours)
        if isinstance(shape_or_slow, Shape):
            return shape_or_slow
        slow = shape_or_slow
    if slow is not None:
        return slow
    if req.arch.kind in ONE_GPU_KINDS:
        return _vram_rejection(req, it, f" ({req.arch.kind} models run on one GPU)")
    if req.engine in ("vllm", "sglang"):
        return _vram_rejection(
            req, it, f"; gpufit launches each {req.engine} replica on one node (no pipeline stages)"
        )
    # Beyond one node: tensor parallel inside the node, pipeline stages across nodes.
    top = degrees[-1] if degrees else 1
    for nodes in range(2, req.max_nodes + 1):
        if per_gpu_gib(req, top * nodes, req.arch.kv_split_heads) <= serving_usable_gib(req, gpu, top):
            if not joins_nodes(it):
                return _vram_rejection(req, it, _unjoined(nodes, it))
            if top > 1 and not it.nvlink and not req.allow_pcie_parallel:
                return Rejection("nvlink", f"needs NVLink inside each node; {it.name} is PCIe only")
            return serving_shape(req, it, top, nodes, setup_hours)
    return _vram_rejection(req, it, f", more than {req.max_nodes} nodes (placement.max_nodes) hold")


def serving_shape(
    req: Requirements, it: InstanceType, tp: int, nodes: int, setup_hours: float = 0.0
) -> Shape | Rejection:
    gpu, n = it.gpu, it.gpu_count
    gpus = tp * nodes
    note = usable_note(gpu, req)
    if req.engine == "sglang" and not req.is_training:
        fraction = sglang_static_fraction(
            gpu.memory_mib, tp, req.concurrency, req.arch.is_mla, req.arch.is_multimodal
        )
        note += (
            f"; SGLang's static pool {fraction:g} × {gpu.memory_gib:.1f} GiB holds the weights and KV cache"
            + (" and the linear-attention state" if req.state_bytes else "")
            + " "
            "(its own reserve for activations and CUDA graphs)"
        )
    terms: list[Term] = [
        Term("tensor parallel", tp, "GPUs", "smallest power of two whose shard fits usable memory"),
        Term(
            "per-GPU memory",
            per_gpu_gib(req, gpus, req.arch.kv_split_heads),
            "GiB",
            f"(sharded ÷ {gpus} + kv ÷ min({gpus}, {req.arch.kv_split_heads or gpus}"
            + (" kv heads" if not req.arch.is_mla else ": MLA's latent whole on each")
            + ")"
            + (f" + state ÷ {gpus}" if req.state_bytes else "")
            + " + replicated"
            + (
                f" + {req.runtime_reserve_tp_bytes / GIB:g} GiB NCCL buffers at TP ≥ 2"
                if gpus > 1 and req.runtime_reserve_tp_bytes
                else ""
            )
            + (", or the load peak ÷ GPUs when larger" if req.load_bytes else "")
            + f"); {note}",
        ),
    ]
    per_stream = per_replica = job_hours = None
    if req.bytes_per_decode_step > 0:
        # Pipeline stages run one after another for a token, so nodes add no bandwidth per stream.
        step, bound = decode_speed(req, gpu, tp, nvlink=it.nvlink or tp == 1)
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
        compute = req.work_compute_precision or req.precision
        tflops = gpu.tflops_at(compute)
        if tflops is None:
            return Rejection(
                "speed", f"no sourced {compute} throughput for {gpu.name} to scale the measured work"
            )
        scale_to = req.work_ref_tflops / tflops
        how = f"{req.work_ref_tflops:g} ÷ {tflops:g} TFLOPS"
        same_format = gpu.tflops_at("bf16")  # the reference run is 16-bit (requirements._work)
        if req.work_ref_bandwidth_gbps and same_format:
            # GPU to GPU in the reference's format, then the format change on the target GPU
            compute_ratio = req.work_ref_tflops / same_format
            bandwidth_ratio = req.work_ref_bandwidth_gbps / gpu.bandwidth_gbps
            gpu_scale = diffusion_gpu_scale(compute_ratio, bandwidth_ratio)
            scale_to = gpu_scale * same_format / tflops
            blend = (
                f"√({req.work_ref_tflops:g} ÷ {same_format:g} TFLOPS × {req.work_ref_bandwidth_gbps:g} ÷ "
                f"{gpu.bandwidth_gbps:g} GB/s)"
            )
            if (
                gpu_scale > max(compute_ratio, math.sqrt(compute_ratio * bandwidth_ratio))
                and compute_ratio < 1
            ):
                denoiser = req.arch.item.denoiser if req.arch.item else ""
                blend = (
                    f"{gpu_scale:.3g} = ({req.work_ref_tflops:g} ÷ {same_format:g} TFLOPS)^"
                    f"{DIFFUSION_SPEEDUP_EXPONENT:.2f} (not {blend}: SDXL measured A100 → H100 1.48×, "
                    f"Stability's SDXL TensorRT card{cap_note(denoiser)})"
                )
            elif gpu_scale > math.sqrt(compute_ratio * bandwidth_ratio):
                blend = f"{gpu_scale:.3g}, the TFLOPS ratio (not {blend}: no faster than compute allows)"
            how = f"{blend} (GPU scaling, estimate) × {same_format:g} ÷ {tflops:g} TFLOPS"
        if req.work_floor_seconds > req.work_ref_gpu_seconds * scale_to:  # audio's batch floor binds
            scale_to = req.work_floor_seconds / req.work_ref_gpu_seconds
            how = f"{scale_to:.3g}, the batch floor over the reference (any GPU)"
        job_hours = req.work_ref_gpu_seconds * scale_to / (n * instances) / 3600.0
        terms.append(
            Term(
                "batch hours",
                job_hours,
                "h",
                f"reference GPU-hours × {how} ÷ {n * instances} GPUs{estimate_note(gpu)}",
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
    if job_hours is not None and req.deadline_hours is not None:
        scale = within_ttl(job_hours, setup_hours, req.deadline_hours)
        if scale is None or instances * scale > req.max_nodes:
            return _over_ttl(f"needs {job_hours:.1f} h", setup_hours, req.deadline_hours, job_hours)
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


def training_tflops(req: Requirements, gpu: GpuSpec) -> float | None:
    """The dense tensor TFLOPS a training job runs at on ``gpu``: its precision's, FP8 as BF16 ×
    ``FP8_TRAINING_SPEEDUP``; None without a sourced figure."""
    tflops = gpu.tflops_at(req.precision)
    if req.precision == "fp8" and tflops is not None:
        bf16 = gpu.tflops_at("bf16")
        tflops = bf16 * FP8_TRAINING_SPEEDUP if bf16 is not None else None
    return tflops


def training_hours(req: Requirements, gpu: GpuSpec, gpus: int, tflops: float) -> float:
    """Hours ``req``'s training compute takes on ``gpus`` × ``gpu`` at ``tflops`` each and the
    training utilisation (``training_mfu``), eager runs ``EAGER_TRAINING_SLOWDOWN`` slower."""
    hours = req.train_flops / (gpus * tflops * 1e12 * training_mfu(req, gpu)) / 3600.0
    return hours * (EAGER_TRAINING_SLOWDOWN if req.eager_training else 1.0)


def training_shards(req: Requirements, gpu: GpuSpec, gpus: int) -> int:
    """How many ways a training job on ``gpus`` GPUs splits its weights, gradients and optimiser
    state: 1 (each GPU holds the whole job, as DDP) when one GPU holds it, else all of them
    (ZeRO-3/FSDP); all of them always under ``training.sharding: full``."""
    if req.shard_training or per_gpu_gib(req, 1, 0) > usable_gib(gpu, req):
        return gpus
    return 1


def _fit_training(req: Requirements, it: InstanceType, setup_hours: float = 0.0) -> Shape | Rejection:
    gpu, n = it.gpu, it.gpu_count
    usable = usable_gib(gpu, req)
    tflops = training_tflops(req, gpu)
    if tflops is None:
        return Rejection(
            "speed", f"no sourced {compute_name(req.precision)} tensor throughput for {gpu.name}"
        )
    host = host_memory_rejection(req, it, USABLE_MEMORY_FRACTION)
    if host is not None:
        return Rejection("host-memory", host)
    late: Rejection | None = None  # a node count that held it but missed the deadline
    if n > 1 and one_gpu_only(req):  # the framework runs it on one GPU: a larger node's others idle
        return Rejection("framework", f"{ONE_GPU_ONLY}; {it.name} has {n} GPUs")
    for nodes in range(1, (1 if one_gpu_only(req) else req.max_nodes) + 1):
        gpus = n * nodes
        shards = training_shards(req, gpu, gpus)
        if per_gpu_gib(req, shards, 0) > usable:
            continue
        if nodes > 1 and not joins_nodes(it):
            return _vram_rejection(req, it, _unjoined(nodes, it))
        if shards > 1 and n > 1 and not it.nvlink and not req.allow_pcie_parallel:
            return Rejection(
                "nvlink",
                f"needs the model sharded over {gpus} GPUs with NVLink; "
                f"{it.name} is PCIe only (set placement.allow_pcie_tensor_parallel)",
            )
        mfu = training_mfu(req, gpu)
        hours = training_hours(req, gpu, gpus, tflops)
        if req.deadline_hours is not None and within_ttl(hours, setup_hours, req.deadline_hours) != 1:
            needs = f"needs {hours:.1f} h on {gpus}×{gpu.name}"
            late = _over_ttl(needs, setup_hours, req.deadline_hours, hours)
            if not joins_nodes(it) or nodes == req.max_nodes:
                return late
            continue
        terms: tuple[Term, ...] = (
            Term(
                "shards",
                shards,
                "GPUs",
                "ZeRO-3/FSDP over all GPUs (training.sharding full, or DeepSpeed ZeRO-3)"
                if req.shard_training and shards > 1
                else "1 if the job fits one GPU, else ZeRO-3/FSDP over all GPUs",
            ),
            Term(
                "per-GPU memory",
                per_gpu_gib(req, shards, 0),
                "GiB",
                f"sharded ÷ {shards} + replicated"
                + beyond_shard_formula_note(req, shards)
                + f"; {usable_note(gpu, req)}",
            ),
            Term(
                "training hours",
                hours,
                "h",
                f"compute ÷ ({gpus} GPUs × {tflops:g} TFLOPS"
                + (
                    f" (BF16 × {FP8_TRAINING_SPEEDUP:g}, FP8 training: NeMo docs)"
                    if req.precision == "fp8"
                    else ""
                )
                + f" × {mfu:g} MFU, {gpu.arch}"
                + f"{', MoE' if req.arch.is_moe and not req.mfu_tuned else ''}){estimate_note(gpu)}"
                + (
                    f" × {EAGER_TRAINING_SLOWDOWN:.2f} eager kernels (torchtune)"
                    if req.eager_training
                    else ""
                ),
            ),
        )
        terms += host_memory_terms(req, it)
        return Shape(
            tensor_parallel=1,
            gpus_per_replica=gpus,
            nodes_per_replica=nodes,
            replicas_per_instance=1,
            replicas=1,
            instances=nodes,
            vram_gib_per_gpu=per_gpu_gib(req, shards, 0),
            vram_gib_per_replica=replica_gib(req, shards),
            needs_nvlink=shards > 1 and n > 1,
            needs_node_interconnect=nodes > 1,
            tokens_per_s_per_stream=None,
            tokens_per_s_per_replica=None,
            job_hours=hours,
            terms=terms,
        )
    beyond = f"; {ONE_GPU_ONLY}" if one_gpu_only(req) else unshardable_note(req, usable)
    beyond = beyond or f", more than {req.max_nodes} nodes (placement.max_nodes) hold"
    return late or _vram_rejection(req, it, beyond)
