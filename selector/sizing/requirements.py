"""``requirements(spec)``: what one replica of a workload needs, independent of the GPU, with
every term named for ``--explain``: custom and diffusion models here, serving and training in
their own modules."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from selector.catalog import load_gpus
from selector.model_arch import ModelArch
from selector.sizing.inference import audio_state_bytes, serving_requirements
from selector.sizing.prefill import embed_requirements
from selector.sizing.speed import (
    DEFAULT_MFU,
    MOE_MFU_FACTOR,
    WORK_MFU,
    precision_bandwidth_efficiency,
)
from selector.sizing.terms import BYTES_PER_PARAM, GIB, Requirements, Term
from selector.sizing.training import training_requirements
from selector.spec import TRAINING_TASKS, WorkloadSpec

INFERENCE_OVERHEAD_FACTOR = 1.2
"""Rule of thumb for models the transformer arithmetic does not cover (diffusion):
memory ≈ 1.2 × weights (gpu-cloud-facts.md §6)."""


STEPS_NOTE = "text encoders and VAE decode counted per step: errs slow at fewer steps"
"""Denoising time scales with the step count (one transformer/UNet pass per step); the text
encoders and the VAE decode run once per image and are scaled with the steps here, which errs
slow below the measured run's steps. Flux-dev on H100, bf16, 1024²: 12.339 s at 50 steps (ORT
PR #22986) → 6.91 s at 28 steps against 6.573 s published by diffusers-torchao's README."""

WEIGHT_ONLY: frozenset[str] = frozenset({"int8", "int4", "nf4"})
"""gpufit's int8/int4/nf4 are weight-only: weights are dequantised and multiplied in 16-bit
(torchao ``int8_weight_only``: activations stay bf16), so compute-bound diffusion gains nothing
from the GPU's int8 tensor throughput (diffusers-torchao README, Flux-dev H100: int8wo 8.551 s vs
bf16 6.573 s without compile). The work is timed at the measured run's 16-bit throughput."""


def requirements(spec: WorkloadSpec) -> Requirements:
    """The GPU-independent needs of ``spec`` with every term named for ``--explain``."""
    arch = spec.arch()
    eff = spec.tuning.bandwidth_efficiency or precision_bandwidth_efficiency(spec.precision)
    training = spec.task in TRAINING_TASKS
    moe = MOE_MFU_FACTOR if arch.is_moe else 1.0
    mfu = spec.tuning.mfu or (DEFAULT_MFU * moe if training else WORK_MFU)
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
        mfu_tuned=spec.tuning.mfu is not None,
        deadline_hours=spec.teardown.ttl if spec.teardown else None,
        max_nodes=spec.placement.max_nodes,
        allow_pcie_parallel=spec.placement.allow_pcie_tensor_parallel,
        require_sourced=spec.placement.require_sourced,
        weights_file_bytes=arch.checkpoint_bytes
        or arch.params * (2.0 if spec.precision == "nf4" else wbytes),
    )
    if spec.task in TRAINING_TASKS:
        return training_requirements(spec, arch, wbytes, terms, common)
    if spec.task == "embed":
        return embed_requirements(spec, arch, wbytes, terms, common)
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
            total = weights + audio_state_bytes(spec, arch, terms)
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
    return serving_requirements(spec, arch, wbytes, eff, terms, common)


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
    per_item = item.seconds
    note = f"{item.seconds:g} s per {item.unit} measured on {item.gpu} ({item.setting}; {item.source})"
    if work.steps is not None and item.steps:
        per_item = item.seconds * work.steps / item.steps
        note += f" × {work.steps} ÷ {item.steps} denoising steps (time per step taken as fixed, {STEPS_NOTE})"
    seconds = count * per_item
    note = f"{count:.3g} {item.unit}s × " + note
    terms.append(Term("work on the reference GPU", seconds / 3600.0, "GPU-h", note))
    compute = item.precision if arch.kind == "diffusion" and spec.precision in WEIGHT_ONLY else None
    return {
        "work_ref_gpu_seconds": seconds,
        "work_ref_tflops": ref_tflops,
        "work_ref_note": note,
        "work_compute_precision": compute,
    }
