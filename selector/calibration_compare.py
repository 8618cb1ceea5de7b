"""How what a calibration row states of its run shapes the figure gpufit compares with it: the
Hugging Face transformers release a server ran (``transformers_spec``, ``single_cache``), and which
statistic of the inter-token gaps a decode row publishes (``compared_step_requirements``), and the
GPU count or GPU size a memory row states (``training_gib_on``, ``gpu_memory_needed_gib``).

The statistic: gpufit plans on the mean step (prefill interference included:
``speed.prefill_step_s``), the figure a mean TPOT or mean ITL measures. A source's median gap
(vLLM's benchmark pools every request's gaps and takes their median) is, where fewer than half
the gaps hold a prefill (``schedule.prefill_step_share``), a step without it: the calibration then
compares that step. Where half or more hold one, the median is a step that carries one, slower
than the mean: the calibration compares the step carrying a whole chunk (the prompts' prefill
scaled to every step). The plan itself keeps the mean."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from selector.catalog import GpuSpec
from selector.sizing.engine_memory import TRANSFORMERS_LAST_LOGIT_FROM, TRANSFORMERS_SINGLE_CACHE_FROM
from selector.sizing.fit import training_shards, usable_gib
from selector.sizing.gpu_memory import per_gpu_gib
from selector.sizing.schedule import engine_release_key, prefill_step_share
from selector.sizing.terms import Requirements

Statistic = Literal["mean", "median"]
STATISTICS: tuple[Statistic, ...] = ("mean", "median")
MEDIAN_PREFILL_SHARE = 0.5
"""Below this share of steps with prefill, the median gap is a step without it."""


def compared_step_requirements(req: Requirements, statistic: Statistic) -> Requirements:
    """``req`` as the published ``statistic`` measures it: unchanged for a mean; for a median, without
    the arriving prompts' prefill when less than ``MEDIAN_PREFILL_SHARE`` of the gaps hold one, else
    with it scaled so that every step carries it (share 1)."""
    share = prefill_step_share(req)
    if statistic == "mean" or share == 1.0:
        return req
    scale = 0.0 if share < MEDIAN_PREFILL_SHARE else 1.0 / share
    return replace(
        req,
        prefill_tokens_per_step=req.prefill_tokens_per_step * scale,
        prefill_flops_per_step=req.prefill_flops_per_step * scale,
        prefill_attention_flops_per_step=req.prefill_attention_flops_per_step * scale,
    )


def transformers_spec(spec: dict[str, Any], release: str) -> dict[str, Any]:
    """``spec`` with the ``serving.own_server`` a transformers ``release`` is: ``transformers-legacy``
    before ``TRANSFORMERS_LAST_LOGIT_FROM`` (every prompt position's logits and, before
    ``TRANSFORMERS_SINGLE_CACHE_FROM``, the KV cache twice), else ``transformers``."""
    legacy = engine_release_key(release) < engine_release_key(TRANSFORMERS_LAST_LOGIT_FROM)
    serving = {**spec.get("serving", {}), "own_server": "transformers-legacy" if legacy else "transformers"}
    return {**spec, "serving": serving}


def single_cache(req: Requirements, release: str) -> Requirements:
    """``req`` without the second KV cache a ``transformers-legacy`` release from
    ``TRANSFORMERS_SINGLE_CACHE_FROM`` (4.42-4.44) no longer holds."""
    if req.legacy_cache_bytes and engine_release_key(release) >= engine_release_key(
        TRANSFORMERS_SINGLE_CACHE_FROM
    ):
        return replace(req, kv_bytes=req.kv_bytes - req.legacy_cache_bytes, legacy_cache_bytes=0.0)
    return req


def training_gib_on(req: Requirements, gpu: GpuSpec, gpus: int) -> float:
    """Per-GPU memory of a training job on ``gpus`` GPUs by ``fit``'s own rule (the whole job on
    each GPU when it fits one, else sharded ZeRO-3/FSDP over all; always sharded under
    ``training.sharding: full``): what a source that ran it on that many GPUs measured."""
    return per_gpu_gib(req, training_shards(req, gpu, gpus), 0)


def gpu_memory_needed_gib(per_gpu_gib: float, req: Requirements, gpu: GpuSpec) -> float:
    """The GPU memory whose ``usable_gib`` holds ``per_gpu_gib`` (``usable_gib`` is linear in the
    GPU's memory: the inverse of its fraction and fixed reserve)."""
    fixed = usable_gib(replace(gpu, memory_mib=0), req)
    fraction = usable_gib(replace(gpu, memory_mib=1024), req) - fixed
    return (per_gpu_gib - fixed) / fraction
