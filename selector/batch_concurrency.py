"""Batch generation's concurrency, chosen per offer (issue 24, defect 8).

A ``task: batch`` job that generates ``serving.tokens`` pays for GPU-hours, not for a latency
per stream: the more sequences decode together, the more of each step's weight reads they share,
until the step turns compute-bound or the KV cache fills the GPUs. When the spec leaves
``serving.concurrency`` out, every instance type gets the concurrency that finishes the job in
the fewest instance-hours (its cost on that type), among powers of two up to
``MAX_BATCH_CONCURRENCY``, each sized and timed by the same ``requirements`` and ``fit`` as any
plan (so the KV cache of every resident sequence must fit, and a stated
``tokens_per_s_per_stream`` still holds). The model server is launched with it
(``--max-num-seqs`` for vLLM, ``--max-running-requests`` for SGLang).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from selector.catalog import InstanceType
from selector.sizing import Rejection, Requirements, Shape, Term, fit, requirements
from selector.spec import WorkloadSpec

MAX_BATCH_CONCURRENCY = 256
"""The largest concurrency tried: the top of the range (1-256) the speed model is calibrated
over (issue 24's published serving measurements), and vLLM's long-standing default
``max_num_seqs``; beyond it the decode model would extrapolate."""

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
        f"whose KV cache fits (concurrency: instance-hours {', '.join(tried)}); the engine runs with it",
    )
    return replace(shape, concurrency=c, terms=(*shape.terms, term))
