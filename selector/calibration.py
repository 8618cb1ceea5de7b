"""Calibration: gpufit's estimates set against published measurements.

``docs/calibration.yaml`` lists cases: a model, a GPU and count, the setting a source measured
(precision, batch, context, tokens trained...), the figure it published, the unit and where the
figure is (URL, title and a short quote). ``compute_rows`` recomputes gpufit's figure for every
case through the real selector code (``parse_spec`` → ``requirements`` → ``fit`` on an
``InstanceType`` built for that GPU and count) and ``render_markdown`` writes the table that
``docs/calibration.md`` holds (``scripts/calibration.py`` writes it; a test keeps it true).

Three kinds of figure, each compared in one canonical quantity, ``ratio = gpufit ÷ published``:

``decode_tokens_per_s``
    tokens/s of one stream while decoding (a published per-token latency is turned into its
    inverse). Above 1: gpufit is optimistic. The published tensor-parallel degree is used when
    it is larger than the one ``fit`` picks by memory (the speed at that degree is the one
    ``fit`` itself computes for a shape of that degree).
``memory_gib``
    bytes: per GPU as ``fit`` places the job, or one term of ``requirements`` (weights, KV cache,
    KV cache per token). Above 1: gpufit reserves more than the source measured.
``training_gpu_hours``
    GPU-hours of the whole job (job hours × GPUs of the shape ``fit`` picks); a published
    training throughput in tokens/s is turned into GPU-hours for the case's tokens and GPUs.
    Above 1: gpufit is pessimistic.

Pure: the only I/O is reading the YAML file whose path ``load_cases`` is given.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from selector.calibration_compare import (
    STATISTICS,
    Statistic,
    compared_step_requirements,
    gpu_memory_needed_gib,
    single_cache,
    training_gib_on,
    transformers_spec,
)
from selector.calibration_units import (
    BYTES_PER_UNIT as BYTES_PER_UNIT,
    GPU_MEASURES as GPU_MEASURES,
    KIND_NOTES as KIND_NOTES,
    KIND_TITLES as KIND_TITLES,
    KINDS as KINDS,
    MEASURES as MEASURES,
    ROUND4_NOTE as ROUND4_NOTE,
    TERM_OF_MEASURE as TERM_OF_MEASURE,
    UNITS as UNITS,
    WORK_KINDS as WORK_KINDS,
    Kind as Kind,
    Measure as Measure,
    fresh_of,
    split_reason_of,
)
from selector.catalog import GpuSpec, InstanceType, load_gpus
from selector.datafile import load_yaml, require_schema
from selector.sizing import (
    GIB,
    Rejection,
    Requirements,
    Shape,
    fit,
    per_gpu_gib,
    requirements,
)
from selector.sizing.fit import serving_shape, serving_usable_gib, training_hours, training_tflops
from selector.sizing.fp8_path import W8A8_FP8_ENGINES
from selector.sizing.schedule import engine_release_key, kv_read_factor, static_batch
from selector.sizing.speed import (
    KNOWN_ENGINES,
    MOE_EXPERT_LATENCY_S,
    UNTIMED_BEFORE,
    engine_generation,
    moe_expert_latency_s,
    precision_bandwidth_efficiency,
)
from selector.spec import TRAINING_TASKS, parse_spec

RATIO_BAND: tuple[float, float] = (0.75, 1.33)
"""Each kind's geometric-mean ratio over all its rows must lie in this band (tests/test_calibration.py)."""

HOLDOUT_BAND: tuple[float, float] = (0.8, 1.25)  # issue 24's band for each kind's held-out rows

SCHEMA_VERSION = 1

Split = Literal["fitted", "held-out", "fresh"]
SPLITS: tuple[Split, ...] = ("fitted", "held-out", "fresh")
"""``fresh``: held out twice over, rows gathered after the model was frozen (``Case.gathered``)."""
HELD_OUT_SHARE = 3  # one case in 3 is held out by ``split_of``, unless a term was read off it

UNDER_PROVISION = 0.10
"""A row under-provisions when gpufit promises more than the source measured by more than
this: decode speed ratio > 1.1, memory ratio < 1 ÷ 1.1, training GPU-hours ratio < 1 ÷ 1.1,
or gpufit fits a setting the source ran out of memory at."""

Interconnect = Literal["nvlink", "pcie"]

LAUNCHED_ENGINES = ("vllm", "sglang")  # engines gpufit launches: a row naming one takes its rules

REFUSED = "gpufit's memory plan would not hold this setting, which the source ran"


def split_of(case_id: str) -> Split:
    """``held-out`` for one case id in ``HELD_OUT_SHARE`` (the first byte of its SHA-256), else
    ``fitted``: a stable split no edit of the model can move. A case a term of the model was taken
    from is fitted whatever its hash (``split: fitted`` with ``split_reason`` in the YAML)."""
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    return "held-out" if digest[0] % HELD_OUT_SHARE == 0 else "fitted"


class CalibrationError(ValueError):
    """A case that cannot be read or computed, with the case id and why."""


@dataclass(frozen=True, slots=True)
class Source:
    url: str
    title: str
    locator: str


@dataclass(frozen=True, slots=True)
class Case:
    """One published figure and the setting it was measured in."""

    id: str
    kind: Kind
    label: str
    gpu: str | None
    gpus: int
    setting: str
    spec: dict[str, Any]
    value: float
    unit: str
    source: Source
    measure: Measure | None = None
    tensor_parallel: int | None = None
    note: str = ""
    interconnect: Interconnect = "nvlink"
    oom: bool = False
    excluded: str = ""  # why a case is shown but left out of the summaries (empty: it counts)
    split_reason: str = ""  # why a case the hash holds out is fitted (a term was taken from it)
    engine: tuple[str, str] | None = None  # (name, release) the source ran, as it states them
    peak_bandwidth_gbps: float | None = None  # the source's own measured peak of its (capped) GPU
    gathered: str = ""  # a fresh case: when it was gathered, after the model was frozen at which commit
    statistic: Statistic = "mean"  # a decode row's published statistic of the inter-token gaps

    @property
    def split(self) -> Split:
        if self.gathered:
            return "fresh"
        return "fitted" if self.split_reason else split_of(self.id)


@dataclass(frozen=True, slots=True)
class Row:
    """A case with gpufit's figure: both in the published unit, and their ratio in the kind's
    canonical quantity (tokens/s, bytes, GPU-hours)."""

    case: Case
    gpufit: float
    ratio: float
    detail: str = ""
    accepted: bool = True  # False only for an out-of-memory case gpufit rightly rejects
    refused: bool = False  # gpufit's memory plan refuses the setting the source ran (false "does not fit")

    @property
    def under_provisions(self) -> bool:
        """gpufit promises more than the source measured (``UNDER_PROVISION``)."""
        if self.case.excluded:
            return False
        if self.case.oom:
            return self.accepted
        if self.case.kind == "decode_tokens_per_s":
            return self.ratio > 1.0 + UNDER_PROVISION
        return self.ratio < 1.0 / (1.0 + UNDER_PROVISION)


@dataclass(frozen=True, slots=True)
class KindSummary:
    kind: Kind
    count: int
    geomean: float
    low: float
    high: float
    under: int = 0

    @property
    def in_band(self) -> bool:
        return RATIO_BAND[0] <= self.geomean <= RATIO_BAND[1]


# --- reading the cases ------------------------------------------------------------------------


def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CalibrationError(f"{where}: {key} must be a non-empty string")
    return value


def _case(entry: Any, gpus_known: dict[str, GpuSpec], index: int) -> Case:
    if not isinstance(entry, dict):
        raise CalibrationError(f"case {index}: expected a mapping")
    where = f"case {entry.get('id', index)!s}"
    case_id = _text(entry, "id", where)
    kind = entry.get("kind")
    if kind not in KINDS:
        raise CalibrationError(f"{where}: kind must be one of {', '.join(KINDS)}")
    kind = cast(Kind, kind)
    model = entry.get("model")
    if not isinstance(model, dict):
        raise CalibrationError(f"{where}: model must be a mapping (a preset or an architecture)")
    label = entry.get("label") or model.get("preset")
    if not isinstance(label, str):
        raise CalibrationError(f"{where}: an explicit architecture needs a label")
    measure = entry.get("measure")
    if kind == "memory_gib":
        if measure not in MEASURES:
            raise CalibrationError(f"{where}: memory cases need measure: {', '.join(MEASURES)}")
    elif measure is not None:
        raise CalibrationError(f"{where}: measure is for memory cases")
    measure = cast("Measure | None", measure)
    gpu = entry.get("gpu")
    if gpu is None:
        if measure in (None, *GPU_MEASURES):
            raise CalibrationError(f"{where}: needs a gpu (only GPU-independent memory terms omit it)")
    elif not isinstance(gpu, str) or gpu not in gpus_known:
        raise CalibrationError(f"{where}: gpu {gpu!r} is not in selector/data/gpus.yaml")
    count = entry.get("gpus", 1)
    if not isinstance(count, int) or count < 1:
        raise CalibrationError(f"{where}: gpus must be a positive integer")
    tp = entry.get("tensor_parallel")
    tp_kind = kind == "decode_tokens_per_s" or measure in GPU_MEASURES
    if tp is not None and (not tp_kind or not isinstance(tp, int) or tp > count):
        raise CalibrationError(
            f"{where}: tensor_parallel is for decode and per-GPU memory cases, at most gpus"
        )
    interconnect = entry.get("interconnect", "nvlink")
    if interconnect not in ("nvlink", "pcie"):
        raise CalibrationError(f"{where}: interconnect must be nvlink or pcie")
    oom = entry.get("oom", False)
    excluded = entry.get("excluded", "")
    if not isinstance(excluded, str):
        raise CalibrationError(f"{where}: excluded must be the reason the case is left out")
    if not isinstance(oom, bool) or (oom and measure != "per_gpu"):
        raise CalibrationError(
            f"{where}: oom (true: the source ran out of memory) is for per-GPU memory cases"
        )
    split_reason = split_reason_of(entry)
    if split_reason is None:
        raise CalibrationError(
            f"{where}: split: fitted (the only override) needs split_reason, the term taken"
        )
    gathered = fresh_of(entry)
    if gathered is None:
        raise CalibrationError(
            f"{where}: split: fresh and gathered (when, after the model was frozen at which commit) "
            "come together"
        )
    engine = _engine(entry.get("engine"), where)
    peak = entry.get("peak_bandwidth_gbps")
    if peak is not None and (kind != "decode_tokens_per_s" or not isinstance(peak, int | float) or peak <= 0):
        raise CalibrationError(
            f"{where}: peak_bandwidth_gbps (the source's measured GB/s) is for decode cases"
        )
    published = entry.get("published")
    if not isinstance(published, dict) or not isinstance(published.get("value"), int | float):
        raise CalibrationError(f"{where}: published needs a numeric value and a unit")
    unit, statistic = published.get("unit"), published.get("statistic", "mean")
    if unit not in UNITS[kind]:
        raise CalibrationError(f"{where}: unit {unit!r}; {kind} takes {', '.join(UNITS[kind])}")
    if statistic not in STATISTICS or (statistic != "mean" and kind != "decode_tokens_per_s"):
        raise CalibrationError(
            f"{where}: published.statistic {statistic!r}; a decode case takes mean or median"
        )
    source = entry.get("source")
    if not isinstance(source, dict):
        raise CalibrationError(f"{where}: source must give url, title and locator")
    url = _text(source, "url", where)
    if not url.startswith("https://"):
        raise CalibrationError(f"{where}: source url must be https")
    task = _text(entry, "task", where)
    spec: dict[str, Any] = {"name": "calibration", "task": task, "model": model}
    for key in ("precision", "serving", "training", "work"):
        if key in entry:
            spec[key] = entry[key]
    if task in TRAINING_TASKS:
        spec["placement"] = {"max_nodes": 256}
    if interconnect == "pcie":
        spec["placement"] = {**spec.get("placement", {}), "allow_pcie_tensor_parallel": True}
    return Case(
        id=case_id,
        kind=kind,
        label=label,
        gpu=gpu,
        gpus=count,
        setting=_text(entry, "setting", where),
        spec=spec,
        value=float(published["value"]),
        unit=str(unit),
        source=Source(url, _text(source, "title", where), _text(source, "locator", where)),
        measure=measure,
        tensor_parallel=tp,
        note=str(entry.get("note", "")),
        interconnect=cast(Interconnect, interconnect),
        oom=oom,
        excluded=excluded,
        split_reason=split_reason,
        engine=engine,
        peak_bandwidth_gbps=None if peak is None else float(peak),
        gathered=gathered,
        statistic=cast(Statistic, statistic),
    )


def _engine(value: Any, where: str) -> tuple[str, str] | None:
    """A case's optional ``engine: {name, release}``: the serving engine and release the source
    states it ran (a decode case's speed then follows that release's generation,
    ``speed.engine_generation``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"name", "release"}:
        raise CalibrationError(f"{where}: engine must be {{name, release}} as the source states them")
    name, release = value["name"], value["release"]
    if not isinstance(name, str) or not isinstance(release, str) or not name or not release:
        raise CalibrationError(f"{where}: engine name and release must be non-empty strings")
    known = name.casefold()
    if known not in KNOWN_ENGINES:
        expected = ", ".join(KNOWN_ENGINES)
        raise CalibrationError(
            f"{where}: engine.name {name!r} is not a known engine (expected one of {expected})"
        )
    if known != "llama.cpp" and not release.lstrip("v")[:1].isdigit():
        raise CalibrationError(f"{where}: engine.release {release!r} names no version (leave engine out)")
    first = UNTIMED_BEFORE.get(known)
    if first and engine_release_key(release) < engine_release_key(first):
        raise CalibrationError(
            f"{where}: engine.release {release!r}: {known} before {first} has no sourced decode term"
        )
    return known, release


def load_cases(path: Path) -> list[Case]:
    """The cases of a calibration YAML file; CalibrationError naming the case that is wrong."""
    doc = load_yaml(path)
    require_schema(doc, path, SCHEMA_VERSION)
    entries = doc.get("cases")
    if not isinstance(entries, list) or not entries:
        raise CalibrationError(f"{path}: expected a non-empty list under cases")
    known = load_gpus()
    cases = [_case(entry, known, i) for i, entry in enumerate(entries)]
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise CalibrationError(f"{path}: case id {case.id!r} is written twice")
        seen.add(case.id)
    return cases


# --- gpufit's figure --------------------------------------------------------------------------


def calibration_instance(gpu: GpuSpec, count: int, interconnect: Interconnect = "nvlink") -> InstanceType:
    """An instance type of ``count`` × ``gpu`` joined by NVLink (or only PCIe, as a case states),
    with a node interconnect and ample host memory, so that only the GPU arithmetic decides (as
    tests/test_sizing.py does)."""
    return InstanceType(
        cloud="aws",
        name=f"calibration-{count}x{gpu.name}",
        machine_type="calibration",
        gpu=gpu,
        gpu_count=count,
        vcpus=8 * count,
        memory_gib=4096.0,
        nvlink=count > 1 and interconnect == "nvlink",
        node_interconnect="efa",
    )


def _shape(case: Case, req: Requirements, it: InstanceType) -> Shape:
    result = fit(req, it)
    if isinstance(result, Rejection):
        raise CalibrationError(f"case {case.id}: gpufit rejects {it.name}: {result.reason}")
    return result


def _term_bytes(case: Case, req: Requirements, measure: Measure) -> float:
    name, unit_bytes = TERM_OF_MEASURE[measure]
    for term in req.terms:
        if term.name == name:
            return term.value * unit_bytes
    raise CalibrationError(f"case {case.id}: requirements has no {name!r} term for this task")


def _at_published_tp(case: Case, req: Requirements, it: InstanceType) -> tuple[Shape, str]:
    """``fit``'s shape, or the shape at the published tensor-parallel degree when it differs. A
    served setting gpufit's memory plan would not hold is still timed and sized at the published
    degree (the source ran it; the detail says gpufit would not plan it)."""
    if not req.is_training:
        result = fit(req, it)
        if isinstance(result, Rejection) and result.filter == "vram":
            tp = case.tensor_parallel or case.gpus
            forced = serving_shape(req, it, tp, 1)
            if isinstance(forced, Rejection):
                raise CalibrationError(f"case {case.id}: {forced.reason}")
            return forced, f"TP {tp}; {REFUSED}"
    shape = _shape(case, req, it)
    tp = case.tensor_parallel or (case.gpus if case.kind == "decode_tokens_per_s" else shape.tensor_parallel)
    detail = ""
    if shape.tensor_parallel != tp:
        if per_gpu_gib(req, tp, req.arch.kv_split_heads) > serving_usable_gib(req, it.gpu, tp):
            raise CalibrationError(f"case {case.id}: gpufit says TP {tp} does not hold the model")
        forced = serving_shape(req, it, tp, 1)
        if isinstance(forced, Rejection):
            raise CalibrationError(f"case {case.id}: {forced.reason}")
        detail = f"TP {tp} as published; gpufit alone picks TP {shape.tensor_parallel}"
        shape = forced
    return shape, detail


def _decode(case: Case, req: Requirements, it: InstanceType) -> tuple[float, str]:
    shape, detail = _at_published_tp(case, req, it)
    if shape.tokens_per_s_per_stream is None:
        raise CalibrationError(f"case {case.id}: gpufit gives no decode speed")
    return shape.tokens_per_s_per_stream, detail


def _training(case: Case, req: Requirements, gpu: GpuSpec) -> tuple[float, str]:
    """GPU-hours of a training case: ``fit``'s, or, where gpufit's memory plan would not hold the
    setting the source ran, its compute at the published GPU count (the detail says so)."""
    result = fit(req, calibration_instance(gpu, case.gpus))
    if isinstance(result, Rejection) and result.filter == "vram":
        tflops = training_tflops(req, gpu)
        if tflops is None:
            raise CalibrationError(f"case {case.id}: no training TFLOPS for {gpu.name}")
        hours = training_hours(req, gpu, case.gpus, tflops)
        return hours * case.gpus, f"{case.gpus} GPUs × {hours:,.0f} h; {REFUSED}"
    shape = _shape(case, req, calibration_instance(gpu, case.gpus))
    if shape.job_hours is None:
        raise CalibrationError(f"case {case.id}: gpufit gives no training hours")
    hours = shape.job_hours
    return hours * shape.gpus_per_replica, f"{shape.gpus_per_replica} GPUs × {hours:,.0f} h"


def _oom_row(case: Case, req: Requirements, it: InstanceType) -> tuple[float, str, bool]:
    """A setting the source ran out of memory at: (what gpufit plans per GPU at the published
    degree, why, whether ``fit`` accepts it). Accepting it is an under-provisioning row."""
    kv_heads = 0 if req.is_training else req.arch.kv_split_heads
    per_gpu = per_gpu_gib(req, case.tensor_parallel or case.gpus, kv_heads) * GIB
    result = fit(req, it)
    if isinstance(result, Rejection):
        return per_gpu, f"rejected, as the source ran out of memory: {result.reason}", False
    if result.gpus_per_replica > case.gpus:
        return per_gpu, f"gpufit needs {result.gpus_per_replica} GPUs, not {case.gpus} (source OOM)", False
    return per_gpu, "gpufit fits it; the source ran out of memory", True


def _canonical(case: Case, value: float, training_tokens: float) -> float:
    """``value`` in the case's published unit → the kind's canonical quantity."""
    if case.kind == "decode_tokens_per_s":
        return 1000.0 / value if case.unit == "ms/token" else value
    if case.kind == "memory_gib":
        return value * BYTES_PER_UNIT[case.unit]
    if case.unit == "s/batch":
        return value / int((case.spec.get("work") or {}).get("batch", 1))
    if case.unit == "RTFx":
        return 1.0 / value
    if case.unit == "tokens/s":
        return training_tokens * case.gpus / value / 3600.0
    return value


def compute_row(case: Case) -> Row:
    """gpufit's figure for ``case``, in the published unit, and the canonical ratio."""
    transformers = case.engine[1] if case.engine and case.engine[0] == "transformers" else None
    doc = transformers_spec(case.spec, transformers) if transformers else case.spec
    spec = parse_spec(doc, source=f"calibration case {case.id}")
    req = requirements(spec)
    if transformers:
        req = single_cache(req, transformers)
    # a measurement that names no release is timed with the slow MoE expert latency
    req = replace(
        req, moe_expert_latency_s=moe_expert_latency_s(*case.engine) if case.engine else MOE_EXPERT_LATENCY_S
    )
    if case.engine is not None:
        req = replace(
            req,
            engine_generation=engine_generation(*case.engine),
            kv_read_factor=kv_read_factor(*case.engine, req.arch.heads, req.arch.kv_heads),
            static_batch=static_batch(*case.engine),
        )
        if case.engine[0] in LAUNCHED_ENGINES and not req.is_training and req.engine != "none":
            req = replace(req, engine=case.engine[0])  # the engine's own schedule and memory rules
    w8a8 = case.engine is not None and case.engine[0] in W8A8_FP8_ENGINES
    if req.precision == "fp8" and not w8a8 and not spec.tuning.bandwidth_efficiency:
        # fp8 runs as W8A8 only where the row names vLLM or SGLang (fp8_path.W8A8_FP8_ENGINES)
        req = replace(req, bandwidth_efficiency=precision_bandwidth_efficiency("fp8"))
    tokens = spec.training.tokens if spec.training else 0.0
    gpu = load_gpus()[case.gpu] if case.gpu else None
    detail = ""
    accepted = True
    if case.kind == "decode_tokens_per_s":
        assert gpu is not None
        if case.peak_bandwidth_gbps is not None:
            gpu = replace(gpu, bandwidth_gbps=case.peak_bandwidth_gbps)
        compared = compared_step_requirements(req, case.statistic)
        median_note = "median gap: a step without prefill" if compared is not req else ""
        req = compared
        canonical, detail = _decode(case, req, calibration_instance(gpu, case.gpus, case.interconnect))
        detail = "; ".join(part for part in (median_note, detail) if part)
        shown = 1000.0 / canonical if case.unit == "ms/token" else canonical
    elif case.kind == "memory_gib":
        assert case.measure is not None
        if case.measure in GPU_MEASURES:
            assert gpu is not None
            it = calibration_instance(gpu, case.gpus, case.interconnect)
            if case.oom:
                canonical, detail, accepted = _oom_row(case, req, it)
            elif req.is_training and isinstance(fit(req, it), Rejection):  # no node count holds it
                canonical = training_gib_on(req, it.gpu, case.gpus) * GIB
                detail = f"on {case.gpus} GPUs as published; {REFUSED}"
            else:
                shape, detail = _at_published_tp(case, req, it)
                canonical = shape.vram_gib_per_gpu * GIB
                if req.is_training and shape.gpus_per_replica != case.gpus:
                    canonical = training_gib_on(req, it.gpu, case.gpus) * GIB
                    detail = f"on {case.gpus} GPUs as published; gpufit plans {shape.gpus_per_replica}"
                    if shape.gpus_per_replica > case.gpus:
                        detail += f"; {REFUSED} on {case.gpus}"
                elif not detail and shape.gpus_per_replica > 1:
                    detail = f"over {shape.gpus_per_replica} GPUs"
                if case.measure == "gpu_needed":
                    canonical = gpu_memory_needed_gib(shape.vram_gib_per_gpu, req, gpu) * GIB
                    detail = f"plans {shape.vram_gib_per_gpu:.1f} GiB + headroom" + (
                        f"; {detail}" if detail else ""
                    )
        else:
            canonical = _term_bytes(case, req, case.measure)
        shown = canonical / BYTES_PER_UNIT[case.unit]
    elif case.kind in WORK_KINDS:
        assert gpu is not None and spec.work is not None
        shape = _shape(case, req, calibration_instance(gpu, case.gpus))
        if shape.job_hours is None:
            raise CalibrationError(f"case {case.id}: gpufit gives no time for the work")
        canonical = shape.job_hours * 3600.0 * shape.replicas / spec.work.item_count
        shown = canonical * (spec.work.batch if case.unit == "s/batch" else 1)
        shown = 1.0 / canonical if case.unit == "RTFx" else shown
        item = "image" if case.kind == "diffusion_seconds_per_image" else "audio second"
        detail = f"{canonical:.3g} s per {item}"
    else:
        assert gpu is not None
        canonical, detail = _training(case, req, gpu)
        shown = tokens * case.gpus / canonical / 3600.0 if case.unit == "tokens/s" else canonical
    ratio = canonical / _canonical(case, case.value, tokens)
    refused = REFUSED in detail and not case.oom
    return Row(case=case, gpufit=shown, ratio=ratio, detail=detail, accepted=accepted, refused=refused)


def compute_rows(cases: list[Case]) -> list[Row]:
    return [compute_row(case) for case in cases]


def geometric_mean(values: list[float]) -> float:
    if not values:
        raise ValueError("geometric mean of nothing")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: list[Row], split: Split | None = None) -> list[KindSummary]:
    """Per kind: count, geometric mean and range of the ratios (out-of-memory cases are bounds, count
    only as under-provisioning when fitted), under-provisioning rows; of ``split`` when given."""
    out: list[KindSummary] = []
    for kind in KINDS:
        of_kind = [
            r
            for r in rows
            if r.case.kind == kind and not r.case.excluded and (split is None or r.case.split == split)
        ]
        ratios = [r.ratio for r in of_kind if not r.case.oom]
        if ratios:
            under = sum(r.under_provisions for r in of_kind)
            out.append(
                KindSummary(kind, len(ratios), geometric_mean(ratios), min(ratios), max(ratios), under)
            )
    return out


# --- the markdown table -----------------------------------------------------------------------
