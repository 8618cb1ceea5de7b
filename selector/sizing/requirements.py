"""``requirements(spec)``: what one replica of a workload needs, independent of the GPU, with
every term named for ``--explain``: custom and diffusion models here, serving and training in
their own modules."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from selector.catalog import load_gpus
from selector.model_arch import ModelArch
from selector.sizing.audio_terms import batch_floor, format_factor as audio_format_factor
from selector.sizing.diffusion_terms import FP32_MATMUL_SLOWDOWN, diffusion_terms, term_ratio
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


WEIGHT_ONLY_SLOWDOWN = term_ratio("weight_only_slowdown")
"""A weight-only quantised diffusion transformer runs slower than bf16, dequantising every weight
per step: diffusers-torchao README (sayakpaul/diffusers-torchao @9b9f238, Flux.1-Dev on H100,
batch 1, no compile) int8wo 8.551 s against bf16 6.573 s, 1.30× (data/diffusion_terms.yaml).
Taken for nf4 too (bitsandbytes NF4 Flux measured 1.00-1.09× bf16: Hugging Face's quantization blog
and PyTorch's torch.compile blog; errs slow), int4 having its own (``INT4_WEIGHT_ONLY_SLOWDOWN``),
and for other pipelines (ESTIMATE; on a
UNet it errs slow: torchao quantises only ``nn.Linear``, so its convolutions are not dequantised).
Written after the held-out int8wo row was seen (its source)."""

INT4_WEIGHT_ONLY_SLOWDOWN = term_ratio("int4_weight_only_slowdown")
"""An int4 weight-only diffusion transformer over bf16, eager or compiled: FLUX.1-dev on one H100, 50
steps (Hugging Face blog 'Exploring Quantization Backends in Diffusers', @0b53cb1): torchao
``int4_weight_only`` and Quanto INT4 109 s, GGUF Q4_1 23 s, against bf16's 12 s; the slowest, 9.1×, is
taken, as gpufit's int4 does not say which backend runs (torchao's int4 kernel, tinygemm, is built
for a handful of rows, not a denoiser's thousands of image tokens). torch.compile gains it little
(CogVideoX-5B int4wo on an A100 took 1,131 s eager and 1,068 s compiled, 1.06×, against bf16's 243
and 212 s, 1.15×: sayakpaul/diffusers-torchao README @9b9f238), so none is taken: an int4 pipeline
keeps its eager time under ``work.compile``. The batching gain (``BATCHED_IMAGE_TIME``, measured in
bf16) is applied to it too, unmeasured. Other pipelines take it as an ESTIMATE (on a UNet it errs
slow: the quantisers convert only linear layers). Read off issue 24's session-11 fresh set after its
int4 rows were seen at 0.15-0.70 under the int8 slowdown used before."""

WEIGHT_ONLY_COMPILED_SLOWDOWN = term_ratio("weight_only_compiled_slowdown")
"""Under torch.compile the weight-only dequantisation fuses into the matmuls and costs little:
Flux.1-Dev int8wo compiled 4.615 s against bf16 compiled 4.209 s at batch 1 (1.10×), 16.08 vs
15.948 s at batch 4 (1.01×) and 31.159 vs 31.685 s at batch 8 (0.98×) on one H100 (diffusers-torchao
README @9b9f238, Additional Results): the largest, batch 1's, is taken (errs slow). Taken for
nf4 and other transformer pipelines (ESTIMATE); a UNet pipeline keeps the eager
``WEIGHT_ONLY_SLOWDOWN`` (the fusion gain was measured on a transformer only)."""

FP32_SLOWDOWN = term_ratio("fp32_slowdown")
"""A diffusion pipeline in fp32 over its 16-bit run: the Hugging Face SDXL blog's unoptimized fp32
pipeline against fp16, one A100 40 GB, 4 images of 1024² per call, 25 steps: 72,200.5 ms against
14,800.9 ms, 4.88× (data/diffusion_terms.yaml). PyTorch leaves TF32 off for fp32 matmuls by
default (``torch.backends.cuda.matmul.allow_tf32``, False since 1.12), so fp32 is not timed at
gpus.yaml's TF32 rate (half of BF16, which promised it 2.4× too fast: issue 24's fresh set). A UNet
pipeline only: its convolutions keep TF32 (cuDNN's default); a transformer takes
``FP32_MATMUL_SLOWDOWN``."""

FP8_COMPILED_SPEEDUP = term_ratio("fp8_compiled_speedup")
"""Compiled fp8 (dynamic activation + weight quantisation fused into the matmuls) over compiled
bf16 for a diffusion transformer: Flux.1-Dev fp8dq 3.243 s against 4.209 s at batch 1 (1.30×),
11.919 vs 15.948 s at batch 4 (1.34×), 23.393 vs 31.685 s at batch 8 (1.35×) on one H100
(diffusers-torchao README @9b9f238): the smallest, batch 1's, is taken (errs slow). Other
transformer pipelines take it as an ESTIMATE; a UNet pipeline gains nothing (no measurement, and
torchao's ``quantize_`` converts only ``nn.Linear`` by default, ``filter_fn = _is_linear``,
pytorch/ao torchao/quantization/quant_api.py, so its convolutions stay 16-bit)."""


BATCHED_IMAGE_TIME = term_ratio("batched_image_time")
"""Time per image at ``work.batch`` ≥ 4 relative to batch 1: the denoiser's matmuls fill the GPU
better. Flux.1-Dev bf16 on one H100 (diffusers-torchao README @9b9f238, Additional Results) per
image: compiled batch 4 15.948 / 4 s against 4.209 s (0.947), batch 8 0.941; eager batch 4 0.944,
8 0.940, 16 0.928: the smallest gain, compiled batch 4's, is taken for every batch of 4 or more
(errs slow for Flux). Other transformer pipelines take it as an ESTIMATE; a UNet pipeline keeps
batch 1's time (no measurement). Batches of 2-3 keep batch 1's time (no measurement)."""
BATCHED_FROM = 4


FP8_EAGER_NOTE = "dynamic quantisation unfused: Flux fp8dq 8.622 s vs bf16 6.573 s eager, diffusers-torchao"
"""FP8 (dynamic, activations too) gains only under torch.compile, which fuses the quantisation
into the matmuls: eager Flux.1-Dev fp8dq took 8.622 s against bf16's 6.573 s on H100 (1.31×
slower, diffusers-torchao README @9b9f238), compiled 3.243 s against 4.209 s. Without ``work.compile``
gpufit times fp8 as a weight-only model (``WEIGHT_ONLY_SLOWDOWN``)."""

COMPILE_SPEEDUP = term_ratio("compile_speedup")
"""torch.compile's speed-up of a whole diffusion pipeline (``work.compile``) for a preset with no
measured gain of its own (``WorkItem.compile_speedup``): the smallest gain published for SDXL or
Flux, SDXL on an A100 80G SXM, fp16 + SDPA, 50 steps, 5.933 s → 5.246 s compiled, 1.13×
(fal-ai/stable-diffusion-benchmarks README @0490f69, torch 2.1). The same pipeline gained 1.30×
in the diffusers tutorial (3.31 → 2.54 s, UNet and VAE compiled, A100 at max clock) and Flux.1-Dev
1.51× (12.339 → 8.198 s, onnxruntime PR #22986): taking the smallest errs slow. SD 3.5 Large's own
ORT gain (1.56×) is held out as a check of this figure. Video gains about as little: CogVideoX-5B
bf16 on an A100 1.15× (243.3 → 212.0 s, diffusers-torchao README); no video preset exists."""


def carries_over(term: str, arch: ModelArch) -> str | None:
    """How a measured diffusion term (data/diffusion_terms.yaml) applies to ``arch``'s pipeline:
    "" on a preset it was measured on, "ESTIMATE" on another pipeline with the same denoiser
    (a transformer: Flux → SD 3.5 Large), None where no measurement carries (a UNet for a term
    measured on a transformer): no gain is then taken."""
    entry = diffusion_terms()[term]
    if arch.name in entry.measured_on:
        return ""
    item = arch.item
    if item is not None and item.denoiser and item.denoiser == entry.denoiser:
        return "ESTIMATE"
    return None


def compile_speedup(arch: ModelArch) -> tuple[float, str]:
    """torch.compile's gain on ``arch``'s pipeline and where it was measured: the preset's own gain,
    eager and compiled timed by the same script on the same GPU (Flux.1-Dev 12.339 / 8.198 s on an
    H100, onnxruntime PR #22986; SDXL 5.933 / 5.246 s on an A100, fal-ai's benchmarks, the smaller
    of its two published gains), else ``COMPILE_SPEEDUP``, the smallest of all (errs slow). A
    whole-pipeline gain: the denoiser compiled (and SDXL's VAE); no split by component is published."""
    item = arch.item
    if item is not None and item.compile_speedup:
        return item.compile_speedup, f"measured for this pipeline ({item.compile_source})"
    smallest = "the smallest published gain, SDXL's 5.933 → 5.246 s (fal-ai), is used (errs slow)"
    if item is not None and item.compile_held_out:
        return COMPILE_SPEEDUP, f"{item.compile_held_out}; {smallest}"
    return COMPILE_SPEEDUP, f"no gain measured for this pipeline: {smallest}"


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
        if arch.kind == "diffusion" and spec.work is not None and spec.work.batch > 1:
            total += _batch_memory(spec.work.batch, arch, terms)
        return replace(
            common,
            sharded_bytes=0.0,
            kv_bytes=0.0,
            replicated_bytes=total,
            bytes_per_decode_step=0.0,
            flops_per_decode_step=0.0,
            min_bandwidth_gbps=0.0,
            train_flops=0.0,
            **_work(spec, arch, terms),
            terms=tuple(terms),
        )
    return serving_requirements(spec, arch, wbytes, eff, terms, common)


UNMEASURED_ITEM_MEMORY_MB = 2591.0
"""ESTIMATE (errs heavy). GPU memory each further image of a batch adds for a diffusion preset with
no measurement of its own: Flux.1-Dev's measured increment at 1024² (2,591 MB, the batch-1
activations and VAE decode; diffusers-torchao README @9b9f238 on H100 measured 1.88-2.00 GiB per
added image at batch 4 and 8). Every diffusion preset renders 1024² by default, and most of the
increment is the VAE decode, which runs on the whole batch at once unless slicing is on: SDXL's
AutoencoderKL decoder has the same channel widths (128/256/512/512) as Flux's. Taken instead of
0.2 × weights, which gave SDXL ~1.3 GiB per image, below what the Flux measurement implies."""


def _batch_memory(batch: int, arch: ModelArch, terms: list[Term]) -> float:
    """GPU memory the further images of a diffusion batch add: the preset's measured increment
    per image (Flux.1-Dev: the batch-1 activations and VAE decode, 2,591 MB, diffusers-torchao
    on H100, where batch 4 and 8 measured 1.88-2.00 GiB per added image), else
    ``UNMEASURED_ITEM_MEMORY_MB`` (estimate)."""
    item = arch.item
    if item is not None and item.item_memory_mb:
        per_image = item.item_memory_mb * 1e6
        why = f"{item.item_memory_mb:g} MB measured per added image ({item.item_memory_source})"
    else:
        per_image = UNMEASURED_ITEM_MEMORY_MB * 1e6
        why = (
            f"{UNMEASURED_ITEM_MEMORY_MB:g} MB per added image (ESTIMATE, errs heavy: Flux.1-Dev's measured "
            "increment at the same 1024² output, mostly the VAE decode)"
        )
    extra = (batch - 1) * per_image
    terms.append(Term("batch activations", extra / GIB, "GiB", f"{batch - 1} more images × {why}"))
    return extra


def _format_factor(precision: str, compiled: bool, arch: ModelArch) -> tuple[float, str]:
    """A diffusion pipeline's time in ``precision`` relative to its 16-bit run, eager or compiled
    (diffusers-torchao's Flux.1-Dev measurements on one H100), and the ``--explain`` note. A gain
    measured on a transformer is not carried to a UNet (``carries_over``)."""
    if precision == "fp32":
        if carries_over("fp32_slowdown", arch) is None:
            return FP32_MATMUL_SLOWDOWN, (
                f" × {FP32_MATMUL_SLOWDOWN:.0f} fp32 (ESTIMATE: matmuls without TF32, A100 BF16 tensor "
                "÷ FP32 TFLOPS; no fp32 run of a transformer pipeline measured)"
            )
        return (
            FP32_SLOWDOWN,
            f" × {FP32_SLOWDOWN:.2f} fp32 (no TF32 for matmuls by default: HF SDXL blog, fp32 ÷ fp16)",
        )
    if precision == "int4":
        carry = carries_over("int4_weight_only_slowdown", arch)
        label = _est(carry) if carry is not None else "; ESTIMATE: Flux's, errs slow on a UNet"
        return INT4_WEIGHT_ONLY_SLOWDOWN, (
            f" × {INT4_WEIGHT_ONLY_SLOWDOWN:.2f} int4 weight-only (Flux: torchao int4_weight_only and Quanto "
            f"INT4 109 s, GGUF Q4_1 23 s, bf16 12 s; the slowest, as the backend is not known{label})"
            + ("; no torch.compile gain taken (int4wo 1.06× on CogVideoX)" if compiled else "")
        )
    if precision in WEIGHT_ONLY and compiled:
        carry = carries_over("weight_only_compiled_slowdown", arch)
        if carry is None:
            f = WEIGHT_ONLY_SLOWDOWN
            return (
                f,
                f" × {f:.2f} weight-only under torch.compile (ESTIMATE: the eager slowdown, Flux int8wo; "
                "the compiled fusion gain was measured on a transformer only, not carried to this pipeline)",
            )
        f = WEIGHT_ONLY_COMPILED_SLOWDOWN
        return (
            f,
            f" × {f:.2f} weight-only under torch.compile (dequantisation fused; Flux int8wo, "
            f"torchao{_est(carry)})",
        )
    if precision in WEIGHT_ONLY or (precision == "fp8" and not compiled):
        f = WEIGHT_ONLY_SLOWDOWN
        carry = carries_over("weight_only_slowdown", arch)
        label = _est(carry) if carry is not None else "; ESTIMATE: Flux's, errs slow on a UNet"
        if precision == "fp8":
            return f, f" × {f:.2f} fp8 without torch.compile ({FP8_EAGER_NOTE}{label})"
        return f, (
            f" × {f:.2f} weight-only dequantisation (diffusers-torchao int8wo{label}; bitsandbytes' "
            "LLM.int8 is not weight-only: 2.25× on Flux, not covered)"
            if precision == "int8"
            else f" × {f:.2f} weight-only dequantisation (diffusers-torchao int8wo{label})"
        )
    if precision == "fp8":
        carry = carries_over("fp8_compiled_speedup", arch)
        if carry is None:
            return (
                1.0,
                " × 1.00 fp8 under torch.compile (ESTIMATE: no gain taken; only a transformer's was "
                "measured, Flux fp8dq ÷ 1.30, and torchao quantises only nn.Linear, so this pipeline's "
                "convolutions stay 16-bit)",
            )
        f = FP8_COMPILED_SPEEDUP
        return (
            1 / f,
            f" ÷ {f:.2f} fp8 under torch.compile (Flux fp8dq vs bf16, both compiled, "
            f"diffusers-torchao{_est(carry)})",
        )
    return 1.0, ""


def _est(carry: str) -> str:
    return "; ESTIMATE: measured on Flux, a transformer too, not on this pipeline" if carry else ""


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
    ref_gpu = load_gpus()[item.gpu]
    ref_tflops = ref_gpu.tflops_at(item.precision) or 0.0
    per_item = item.seconds
    note = f"{item.seconds:g} s per {item.unit} measured on {item.gpu} ({item.setting}; {item.source})"
    if work.steps is not None and item.steps:
        per_item = item.seconds * work.steps / item.steps
        note += f" × {work.steps} ÷ {item.steps} denoising steps (time per step taken as fixed, {STEPS_NOTE})"
    if arch.kind == "diffusion":
        factor, why = _format_factor(spec.precision, work.compile, arch)
        per_item *= factor
        note += why
    floor = {}
    if arch.kind == "audio":
        factor, why = audio_format_factor(spec.precision)
        per_item *= factor
        per_second, floor_note = batch_floor(work.batch)
        note += f"{why}; {floor_note}"
        dequantise = factor if spec.precision not in ("fp32", "bf16", "fp16") else 1.0  # fp32: matmuls only
        floor = {"work_floor_seconds": count * per_second * dequantise}
    if arch.kind == "diffusion" and work.compile and spec.precision != "int4":
        gain, why = compile_speedup(arch)
        per_item /= gain
        note += f" ÷ {gain:.2f} torch.compile ({why})"
    batching = carries_over("batched_image_time", arch) if arch.kind == "diffusion" else None
    if arch.kind == "diffusion" and work.batch >= BATCHED_FROM and batching is not None:
        per_item *= BATCHED_IMAGE_TIME
        note += (
            f" × {BATCHED_IMAGE_TIME:.3f} per image at work.batch {work.batch} (Flux batch 4 compiled, "
            f"diffusers-torchao: the smallest measured batching gain{_est(batching)})"
        )
    elif arch.kind == "diffusion" and work.batch >= BATCHED_FROM:
        note += (
            f"; work.batch {work.batch}: time per image taken as at batch 1 (no batching gain measured for "
            "this pipeline; Flux's, a transformer's, is not carried over)"
        )
    elif arch.kind == "diffusion" and work.batch > 1:
        note += f"; work.batch {work.batch}: time per image taken as at batch 1 (no gain measured below 4)"
    seconds = count * per_item
    note = f"{count:.3g} {item.unit}s × " + note
    terms.append(Term("work on the reference GPU", seconds / 3600.0, "GPU-h", note))
    quantised = WEIGHT_ONLY | {"fp8", "fp32"}  # timed at the reference's 16-bit rate × their factor
    compute = item.precision if arch.kind in ("diffusion", "audio") and spec.precision in quantised else None
    return {
        "work_ref_gpu_seconds": seconds,
        "work_ref_tflops": ref_tflops,
        "work_ref_note": note,
        "work_compute_precision": compute,
        "work_ref_bandwidth_gbps": ref_gpu.bandwidth_gbps
        if arch.kind == "diffusion" and item.precision in ("bf16", "fp16")
        else 0.0,
        **floor,
    }
