"""The kinds issue 24 names, each summarised on its own: the calibration's three canonical
kinds (``selector.calibration.KINDS``) mix figures the issue's bar judges separately.

``serving_speed_at_concurrency``
    decode rows run at concurrency ≥ 2 (NIM, TensorRT-LLM static batches, vLLM at 128).
``batch1_decode``
    decode rows at concurrency 1, every GPU; ``batch1_decode_h100_b200`` is the subset on
    H100/H200/B200, the line the issue names ("batch-1 decode on H100/B200").
``serving_memory`` / ``finetune_memory``
    memory rows of a serving task / of a training task (fine-tuning peak memory).
``training_gpu_hours`` / ``diffusion_seconds_per_image`` / ``audio_seconds_per_audio_second``
    as in ``selector.calibration`` (audio: the issue's "diffusion and audio").

A row's issue kind follows from what the case states (kind, task, concurrency, GPU): never from
its ratio, so a hidden set in the same format is grouped the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from selector.calibration import (
    HOLDOUT_BAND,
    SPLITS,
    Row,
    Split,
    compute_row,
    geometric_mean,
    split_of,
)
from selector.calibration_report import render_markdown
from selector.sizing.speed import engine_generation
from selector.spec import TRAINING_TASKS

IssueKind = Literal[
    "serving_speed_at_concurrency",
    "batch1_decode",
    "batch1_decode_h100_b200",
    "serving_memory",
    "finetune_memory",
    "training_gpu_hours",
    "diffusion_seconds_per_image",
    "audio_seconds_per_audio_second",
]
ISSUE_KINDS: tuple[IssueKind, ...] = get_args(IssueKind)
HOPPER_BLACKWELL = frozenset({"H100", "H200", "B200"})


def concurrency_of(row: Row) -> int:
    """The case's ``serving.concurrency`` (the spec's default, 1, when it states none)."""
    serving = row.case.spec.get("serving") or {}
    return int(serving.get("concurrency", 1))


def issue_kinds_of(row: Row) -> tuple[IssueKind, ...]:
    """The issue kinds a row counts in (a batch-1 H100/B200 row counts in both batch-1 lines)."""
    case = row.case
    if case.kind == "decode_tokens_per_s":
        if concurrency_of(row) >= 2:
            return ("serving_speed_at_concurrency",)
        if case.gpu in HOPPER_BLACKWELL:
            return ("batch1_decode", "batch1_decode_h100_b200")
        return ("batch1_decode",)
    if case.kind == "memory_gib":
        training = case.spec.get("task") in TRAINING_TASKS
        return ("finetune_memory",) if training else ("serving_memory",)
    if case.kind == "diffusion_seconds_per_image":
        return ("diffusion_seconds_per_image",)
    if case.kind == "audio_seconds_per_audio_second":
        return ("audio_seconds_per_audio_second",)
    return ("training_gpu_hours",)


@dataclass(frozen=True, slots=True)
class IssueKindSummary:
    kind: IssueKind
    split: Split
    count: int
    geomean: float
    low: float
    high: float
    under: int

    @property
    def in_band(self) -> bool:
        return HOLDOUT_BAND[0] <= self.geomean <= HOLDOUT_BAND[1]


def summarize_issue_kinds(rows: list[Row], split: Split) -> list[IssueKindSummary]:
    """Per issue kind with rows in ``split``: count, geometric mean and range of the ratios
    (out-of-memory bounds and excluded rows left out, as ``selector.calibration.summarize``),
    and the under-provisioning rows."""
    out: list[IssueKindSummary] = []
    counted = [r for r in rows if not r.case.excluded and r.case.split == split]
    for kind in ISSUE_KINDS:
        of_kind = [r for r in counted if kind in issue_kinds_of(r)]
        ratios = [r.ratio for r in of_kind if not r.case.oom]
        if ratios:
            under = sum(r.under_provisions for r in of_kind)
            out.append(
                IssueKindSummary(
                    kind, split, len(ratios), geometric_mean(ratios), min(ratios), max(ratios), under
                )
            )
    return out


def render_issue_kinds(rows: list[Row], splits: tuple[Split, ...]) -> list[str]:
    """The markdown lines of the per-issue-kind table (docs/calibration.md)."""
    lo, hi = HOLDOUT_BAND
    lines = [
        "",
        "### By the kinds issue 24 names",
        "",
        f"Decode rows split by concurrency (≥ 2: serving speed at concurrency; 1: batch-1 decode, "
        f"with the H100/H200/B200 rows also on their own line), memory rows by task. Issue band "
        f"{lo:g}–{hi:g} per kind; **out of band** marks a geometric mean outside it.",
        "",
        "| Issue kind | Split | Rows | Geometric mean | Range | Under-provisioning rows |",
        "|---|---|---|---|---|---|",
    ]
    for split in splits:
        for s in summarize_issue_kinds(rows, split):
            band = "" if s.in_band else " **out of band**"
            lines.append(
                f"| {s.kind} | {split} | {s.count} | {s.geomean:.2f}{band} "
                f"| {s.low:.2f}–{s.high:.2f} | {s.under} |"
            )
    return lines


def render_split_overrides(rows: list[Row]) -> list[str]:
    """The markdown lines listing the cases moved to the fitted split because a term of the model
    was taken from them (``Case.split_reason``), each with its hash split and reason."""
    moved = [r.case for r in rows if r.case.split_reason]
    lines = [
        "",
        f"Split overrides: {len(moved)} row(s) the hash holds out are fitted, because a term of the "
        "model was read off them (they cannot test it):",
        "",
    ]
    return lines + [f"- `{c.id}` (hash split {split_of(c.id)}): {c.split_reason}" for c in moved]


def old_engine_rows(rows: list[Row]) -> list[tuple[Row, Row]]:
    """Each row naming an older engine generation, with the same case timed as ``gpufit plan``
    times it (current-engine terms: the ``engine`` field dropped, nothing else changed)."""
    return [
        (r, compute_row(replace(r.case, engine=None)))
        for r in rows
        if r.case.engine is not None
        and not r.case.excluded
        and engine_generation(*r.case.engine) != "current"
    ]


def render_old_engine_rows(rows: list[Row]) -> list[str]:
    """The markdown lines of ``old_engine_rows``: what the engine terms change."""
    lines = [
        "",
        "### Older-engine rows under current-engine terms",
        "",
        "`gpufit plan` launches current engines only (vLLM and SGLang current releases), so it never "
        "applies the older-engine terms; these rows name an older engine, and here is each one's ratio "
        "under its engine's terms and under the current-engine terms a plan uses (> 1.10 there means "
        "the old engine was slower than today's model, not that a plan over-promises).",
        "",
        "| Case | Engine | Split | Ratio (its engine's terms) | Ratio (current-engine terms) |",
        "|---|---|---|---|---|",
    ]
    for own, current in old_engine_rows(rows):
        name, release = own.case.engine or ("", "")
        ratios = f"{own.ratio:.2f} | {current.ratio:.2f}"
        lines.append(f"| `{own.case.id}` | {name} {release} | {own.case.split} | {ratios} |")
    return lines


def render_document(rows: list[Row]) -> str:
    """docs/calibration.md in full: ``selector.calibration_report.render_markdown`` with the split overrides
    and the issue-kind table after the split summary (what scripts/calibration.py writes)."""
    extra = render_split_overrides(rows) + render_issue_kinds(rows, SPLITS) + render_old_engine_rows(rows)
    return render_markdown(rows, tuple(extra))
