"""GPU facts: what each GPU model can do, from ``data/gpus.yaml`` (every figure sourced; an
estimate only fills a gap and is marked)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema

GPUS_FILE = Path(__file__).parent / "data" / "gpus.yaml"


class CatalogError(ValueError):
    """A catalog or facts file that cannot be used, with the reason."""


def required(entry: dict[str, Any], key: str, where: str) -> Any:
    """``entry[key]``, or a CatalogError naming ``where`` and the missing key."""
    if key not in entry:
        raise CatalogError(f"{where}: missing {key!r}")
    return entry[key]


def optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model's facts. Throughputs are dense TFLOP/s; None means none or not sourced."""

    name: str
    aliases: tuple[str, ...]
    memory_mib: int
    memory_type: str
    bandwidth_gbps: float
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    int8_tops: float | None
    nvlink_gbps: float | None
    arch: str
    compute_capability: tuple[int, int]
    source: str
    confidence: str = "high"
    notes: str = ""
    estimated: tuple[str, ...] = ()  # throughput fields that are estimates, not sourced figures
    estimate_source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def fp8(self) -> bool:
        """FP8 tensor cores exist from compute capability 8.9 (Ada) upward."""
        return self.fp8_tflops is not None

    @property
    def bf16(self) -> bool:
        """BF16 tensor cores exist from compute capability 8.0 (Ampere) upward."""
        return self.compute_capability >= (8, 0)

    def tflops_at(self, precision: str) -> float | None:
        """Dense tensor throughput a job computing in ``precision`` can reach.

        Weight-only quantised formats (int4, nf4) and int8 weights compute in 16 bit; fp32
        training runs on TF32 tensor cores at half the BF16 rate (A100 156 vs 312, H100 SXM
        494.5 vs 989 TFLOP/s, NVIDIA datasheets). That assumes the job turns TF32 on for its
        matmuls (e.g. the HF Trainer's ``--tf32``): PyTorch leaves it off by default, and plain FP32
        is 8× slower again on an A100 (19.5 TFLOP/s). An open point (issue 24, round 6 review);
        diffusion, where the default was measured, takes ``requirements.FP32_SLOWDOWN``.
        """
        sixteen = self.bf16_tflops if self.bf16_tflops is not None else self.fp16_tflops
        if precision == "fp8":
            return self.fp8_tflops
        if precision == "fp16":
            return self.fp16_tflops
        if precision == "fp32":
            return self.bf16_tflops / 2 if self.bf16_tflops is not None else None
        return sixteen


def _parse_gpu(entry: dict[str, Any], where: str) -> GpuSpec:
    cc = str(required(entry, "compute_capability", where)).split(".")
    estimates = dict(entry.get("estimates") or {})
    for key in estimates:
        if entry.get(key) is not None:
            raise CatalogError(f"{where}: {key} is sourced; an estimate may only fill a gap")

    def figure(key: str) -> float | None:
        return optional_float(entry.get(key) if entry.get(key) is not None else estimates.get(key))

    return GpuSpec(
        name=str(required(entry, "name", where)),
        aliases=tuple(str(a) for a in entry.get("aliases", [])),
        memory_mib=int(required(entry, "memory_mib", where)),
        memory_type=str(entry.get("memory_type", "")),
        bandwidth_gbps=float(required(entry, "bandwidth_gbps", where)),
        bf16_tflops=figure("bf16_tflops"),
        fp16_tflops=figure("fp16_tflops"),
        fp8_tflops=figure("fp8_tflops"),
        int8_tops=figure("int8_tops"),
        nvlink_gbps=optional_float(entry.get("nvlink_gbps")),
        arch=str(entry.get("arch", "")),
        compute_capability=(int(cc[0]), int(cc[1]) if len(cc) > 1 else 0),
        source=str(required(entry, "source", where)),
        confidence=str(entry.get("confidence", "high")),
        notes=str(entry.get("notes", "")),
        estimated=tuple(sorted(estimates)),
        estimate_source=str(entry.get("estimate_source", "")),
    )


def sourced_only(gpu: GpuSpec) -> GpuSpec:
    """``gpu`` with its estimated throughputs removed (``placement.require_sourced``)."""
    if not gpu.estimated:
        return gpu
    cleared: dict[str, Any] = dict.fromkeys(gpu.estimated)
    return replace(gpu, **cleared, estimated=())


@lru_cache(maxsize=4)
def load_gpus(path: Path = GPUS_FILE) -> dict[str, GpuSpec]:
    """GPU facts by canonical name."""
    doc = load_yaml(path)
    try:
        require_schema(doc, path, 1)
    except ValueError as err:
        raise CatalogError(str(err)) from None
    gpus: dict[str, GpuSpec] = {}
    for i, entry in enumerate(doc.get("gpus", [])):
        spec = _parse_gpu(entry, f"{path}: gpus[{i}]")
        if spec.source not in doc.get("sources", {}):
            raise CatalogError(f"{path}: gpu {spec.name} names unknown source {spec.source!r}")
        gpus[spec.name] = spec
    return gpus


def gpu_by_alias(gpus: dict[str, GpuSpec], name: str) -> GpuSpec | None:
    """Resolve a cloud API's GPU name (``nvidia-l4``, ``NVIDIA H200``) to its facts."""
    lowered = name.lower()
    for spec in gpus.values():
        if lowered == spec.name.lower() or lowered in (a.lower() for a in spec.aliases):
            return spec
    return None
