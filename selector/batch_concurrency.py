"""Batch generation's concurrency, chosen per offer (issue 24, defect 8).

A ``task: batch`` job that generates ``serving.tokens`` pays for GPU-hours, not for a latency
per stream: the more sequences decode together, the more of each step's weight reads they share,
until the step turns compute-bound or the KV cache fills the GPUs. When the spec leaves
``serving.concurrency`` out, every instance type gets the concurrency that finishes the job in
the fewest instance-hours (its cost on that type), among powers of two up to
``MAX_BATCH_CONCURRENCY``, each sized and timed by the same ``requirements`` and ``fit`` as any
plan (so the KV cache of every resident sequence must fit, and a stated
``tokens_per_s_per_stream`` still holds).

The engine runs with it: gpufit starts ``spec.batch_engine`` (vLLM by default) on 127.0.0.1
with ``--max-num-seqs`` (vLLM) or ``--max-running-requests`` (SGLang) = the chosen value for the
machine's own type, and ``job.command`` sends its prompts to ``GPUFIT_ENGINE_URL``
(``machine.serving.batch_engine_start``). With ``serving.engine: none`` the command runs its
own engine and gets the value as ``GPUFIT_MAX_NUM_SEQS``; the plan's speed assumes it passes it:
left to itself vLLM picks its default by usage context and GPU memory (``get_batch_defaults``
in vllm/engine/arg_utils.py, https://github.com/vllm-project/vllm/blob/v0.27.1/vllm/engine/arg_utils.py:
256 for the API server on GPUs under 70 GiB, 1024 on larger ones, as the vLLM 0.19 H100 log
cited for setup times shows: "Defaulting max_num_seqs to 1024 for OPENAI_API_SERVER usage
context").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from selector.catalog import InstanceType
from selector.engines import fp8_kv_cache_dtype
from selector.sizing import Rejection, Requirements, Shape, Term, fit, requirements
from selector.sizing.engine_memory import sglang_static_fraction
from selector.spec import WorkloadSpec

MAX_BATCH_CONCURRENCY = 256
"""The largest concurrency tried (the KV cache bounds it lower on small GPUs). A gpufit choice,
not a measured bound: see ``CALIBRATED_DECODE_CONCURRENCY``."""

CALIBRATED_DECODE_CONCURRENCY = 1024
"""The highest concurrency among the decode-speed rows of docs/calibration.yaml (gpt-fast at batch
1, and since issue 24's calibration vLLM, SGLang, NIM and TensorRT-LLM rows at 2 to 1,024 sequences;
tests/test_batch_concurrency.py keeps this equal to the file). A chosen concurrency above it times
decode where no published measurement checked the model, and large-batch decode is where it is
optimistic (issue 24, error class 3): the plan marks such a choice ESTIMATE."""

CONCURRENCY_STEPS = tuple(2**i for i in range(9))
"""Powers of two from 1 to ``MAX_BATCH_CONCURRENCY``."""

SAME_SPEED = 1.01
"""A larger concurrency must save more than 1 % of instance-hours to be preferred: past the
compute floor, more resident sequences only add KV memory and queueing."""


def chooses_concurrency(spec: WorkloadSpec) -> bool:
    """Whether gpufit picks the concurrency: a token-generating batch job whose spec does not
    set ``serving.concurrency``."""
    serving = spec.serving
    return (
        spec.task == "batch"
        and serving is not None
        and serving.tokens is not None
        and "concurrency" not in serving.model_fields_set
    )


def concurrency_requirements(spec: WorkloadSpec) -> tuple[tuple[int, Requirements], ...]:
    """The job's requirements at each candidate concurrency (KV cache, bytes and FLOPs per
    decode step all follow it)."""
    serving = spec.serving
    assert serving is not None
    out = []
    for c in CONCURRENCY_STEPS:
        variant = spec.model_copy(update={"serving": serving.model_copy(update={"concurrency": c})})
        out.append((c, requirements(variant)))
    return tuple(out)


def is_estimate(concurrency: int) -> bool:
    """Whether the decode speed at ``concurrency`` lies beyond the calibrated range."""
    return concurrency > CALIBRATED_DECODE_CONCURRENCY


def estimate_note(concurrency: int) -> str:
    if not is_estimate(concurrency):
        return ""
    return (
        f"; ESTIMATE: decode speed at {concurrency} sequences is beyond the calibrated "
        f"{CALIBRATED_DECODE_CONCURRENCY} (docs/calibration.yaml)"
    )


def _instance_hours(shape: Shape) -> float:
    return (shape.job_hours or 0.0) * shape.instances


def best_concurrency_fit(
    candidates: tuple[tuple[int, Requirements], ...],
    it: InstanceType,
    fit_one: Callable[[Requirements, InstanceType], Shape | Rejection] = fit,
) -> Shape | Rejection:
    """The shape on ``it`` at the concurrency that finishes the job in the fewest
    instance-hours (ties within ``SAME_SPEED`` go to the lower one), with the choice among the
    fit's terms; the lowest concurrency's rejection when none fits."""
    best: tuple[int, Shape] | None = None
    first: Rejection | None = None
    tried: list[str] = []
    for c, req in candidates:
        shape = fit_one(req, it)
        if isinstance(shape, Rejection):
            first = first or shape
            if shape.filter == "vram":
                break  # the KV cache of more sequences fits no better
            continue
        tried.append(f"{c}: {_instance_hours(shape):.3g}")
        if best is None or _instance_hours(shape) * SAME_SPEED < _instance_hours(best[1]):
            best = (c, shape)
    if best is None:
        assert first is not None
        return first
    c, shape = best
    term = Term(
        "batch concurrency",
        c,
        "sequences",
        f"fewest instance-hours among 1-{MAX_BATCH_CONCURRENCY} resident sequences per replica "
        f"whose KV cache fits (concurrency: instance-hours {', '.join(tried)}){estimate_note(c)}; "
        "the engine gpufit starts on 127.0.0.1 runs with it (--max-num-seqs, --max-running-requests); "
        "with serving.engine none, job.command's own engine must, from GPUFIT_MAX_NUM_SEQS",
    )
    return replace(shape, concurrency=c, terms=(*shape.terms, term))


def batch_launch_values(
    spec: WorkloadSpec, it: InstanceType, shape: Shape
) -> tuple[float | None, str | None]:
    """What the engine a token batch starts takes from the choice's machine on every machine of
    its fleet: one boot script renders the choice's launch (``deployment.translate.server_launch``)
    and ``machine.serving.BATCH_RUNTIME`` substitutes only TP, sequences (SGLang's state slots
    with them) and ports per type. So a
    fallback must need the same SGLang ``--mem-fraction-static`` (its static pool, sized per GPU,
    TP and sequences: ``engine_memory.sglang_static_fraction``) and the same fp8 KV cache dtype
    (``engines.fp8_kv_cache_dtype``, by compute capability); (None, None) for other plans."""
    engine = spec.decode_engine
    if spec.task != "batch" or engine == "none" or spec.serving is None:
        return None, None
    arch = spec.arch()
    seqs = shape.concurrency or spec.serving.concurrency
    fraction = (
        sglang_static_fraction(
            it.gpu.memory_mib, shape.tensor_parallel, seqs, arch.is_mla, arch.is_multimodal
        )
        if engine == "sglang"
        else None
    )
    kv = fp8_kv_cache_dtype(engine, it.gpu) if spec.serving.kv_cache_precision == "fp8" else None
    return fraction, kv
