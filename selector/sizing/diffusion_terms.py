"""The diffusion timing terms of ``data/diffusion_terms.yaml``: each the ratio of two published
timings taken by one script on one GPU, with the calibration rows it was read off and compared
against, and the presets it was measured on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema
from selector.gpus import load_gpus

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "diffusion_terms.yaml"


@dataclass(frozen=True, slots=True)
class Timing:
    """One published timing: ``seconds`` for ``per`` images, quoted by calibration case ``row``
    (on ``gpu``, where the term compares GPUs)."""

    seconds: float
    per: int
    row: str
    gpu: str | None

    @property
    def per_image(self) -> float:
        return self.seconds / self.per


@dataclass(frozen=True, slots=True)
class DiffusionTerm:
    """``numerator`` ÷ ``denominator`` (per image), measured on ``measured_on`` (whose ``denoiser`` is
    a UNet or a transformer); ``consulted``:
    the other rows compared when the figure was chosen."""

    name: str
    numerator: Timing
    denominator: Timing
    consulted: tuple[str, ...]
    measured_on: tuple[str, ...]
    denoiser: str
    source: str

    @property
    def ratio(self) -> float:
        return self.numerator.per_image / self.denominator.per_image

    @property
    def rows(self) -> tuple[str, ...]:
        """Every calibration row the term was read off or compared against."""
        return (self.numerator.row, self.denominator.row, *self.consulted)


def _timing(entry: dict[str, Any]) -> Timing:
    return Timing(
        seconds=float(entry["seconds"]),
        per=int(entry.get("per", 1)),
        row=str(entry["row"]),
        gpu=str(entry["gpu"]) if entry.get("gpu") else None,
    )


@lru_cache(maxsize=1)
def diffusion_terms(path: Path = DATA_FILE) -> dict[str, DiffusionTerm]:
    """Every term of the data file by name; each names a source key of the file."""
    doc = load_yaml(path)
    require_schema(doc, path, 1)
    sources = doc["sources"]
    terms: dict[str, DiffusionTerm] = {}
    for name, entry in doc["terms"].items():
        if entry["source"] not in sources:
            raise ValueError(f"{path}: terms.{name}.source: {entry['source']!r} is not in sources")
        terms[name] = DiffusionTerm(
            name=name,
            numerator=_timing(entry["numerator"]),
            denominator=_timing(entry["denominator"]),
            consulted=tuple(str(r) for r in entry.get("consulted") or ()),
            measured_on=tuple(str(p) for p in entry["measured_on"]),
            denoiser=str(entry["denoiser"]),
            source=str(entry["source"]),
        )
    return terms


def term_ratio(name: str) -> float:
    """The named term's ratio (numerator ÷ denominator seconds per image)."""
    return diffusion_terms()[name].ratio


def speedup_exponent(tflops: dict[str, float]) -> float:
    """The exponent of the TFLOPS ratio a measured faster-GPU speed-up gives: ln(slower ÷ faster
    seconds) ÷ ln(faster ÷ slower dense 16-bit TFLOPS), the GPUs' TFLOPS from gpus.yaml."""
    term = diffusion_terms()["faster_gpu_speedup"]
    slow, fast = term.numerator, term.denominator
    assert slow.gpu is not None and fast.gpu is not None
    return math.log(slow.per_image / fast.per_image) / math.log(tflops[fast.gpu] / tflops[slow.gpu])


def _speedup_exponent() -> float:
    gpus = load_gpus()
    return speedup_exponent({name: gpu.tflops_at("bf16") or 0.0 for name, gpu in gpus.items()})


FP32_MATMUL_SLOWDOWN = 312.0 / 19.5
"""fp32 over 16-bit for a diffusion or speech pipeline with no fp32 measurement of its denoiser's kind (a
transformer: Flux, SD 3.5): nearly all its time is matmuls, which PyTorch runs without TF32 by
default, at the GPU's plain FP32 rate: the A100's 19.5 TFLOPS against 312 BF16 tensor TFLOPS (NVIDIA
A100 datasheet), 16×. The SDXL pair's 4.88× (``FP32_SLOWDOWN``) is lower because cuDNN keeps TF32 on
for the UNet's convolutions (``torch.backends.cudnn.allow_tf32`` defaults to True): not carried to a
transformer (review of round 6). An ESTIMATE on the slow side."""


DIFFUSION_SPEEDUP_EXPONENT = _speedup_exponent()
"""How far a faster GPU's extra compute speeds a diffusion pipeline: the promised speed-up is at
most (target ÷ reference dense 16-bit TFLOPS) to this power, 0.34. Read off the one published pair
of stock runs of a preset on two GPUs by one script (data/diffusion_terms.yaml, TFLOPS from
gpus.yaml): SDXL 1.0 base, 30 steps at 1024², 'Baseline (non-optimized)', A100 3,704 ms and H100
2,496 ms, 1.48× where the TFLOPS say 3.17× (stabilityai/stable-diffusion-xl-1.0-tensorrt model card
@0b077d8). The card names neither the H100 variant nor the format: the SXM part's 989 TFLOPS is
taken (a PCIe H100, 756, would give 0.45), the smaller exponent, which errs slow. Batch-1 UNet
steps are short and launch- and memory-bound, so compute alone buys little. Kept for every
pipeline only because it errs slow: transformer pipelines gained more from the same GPU pair
(Flux.1-Dev 15.65 → 7.11 s, 2.20×, varadrane1707/BenchmarkFlux README @35368df; CogVideoX-5B
2.16×, sayakpaul/diffusers-torchao README), so on a faster GPU a transformer pipeline is planned
slow (a B200 at 1.32× an H100 for Flux, where the TFLOPS say 2.27×). No held-out row tests the
cap: no calibration row runs a preset on a GPU faster than its reference."""


def diffusion_gpu_scale(compute_ratio: float, bandwidth_ratio: float) -> float:
    """ESTIMATE. A diffusion pipeline's time on another GPU relative to its measured reference, from
    the reference ÷ target dense 16-bit TFLOPS (``compute_ratio``) and memory bandwidth ratios: the
    geometric mean of the two, never faster than the measured speed-up per TFLOPS allows
    (``DIFFUSION_SPEEDUP_EXPONENT``: SDXL A100 → H100 measured 1.48×, where the blend said 2.28×
    and the TFLOPS 3.2×) nor than the TFLOPS alone. On a GPU with at least the reference's compute
    extra bandwidth alone buys nothing (an H200 against an H100, equal TFLOPS: same time). On a
    slower GPU the blend stays, slower than the TFLOPS alone say where bandwidth falls faster (L40S,
    L4); the SDXL card's A10 at 9,399 ms (2.54× the A100) sits under that blend."""
    blend = math.sqrt(compute_ratio * bandwidth_ratio)
    return max(blend, compute_ratio**DIFFUSION_SPEEDUP_EXPONENT) if compute_ratio <= 1.0 else blend


def cap_note(denoiser: str) -> str:
    """What ``--explain`` adds to the faster-GPU cap for a pipeline that is not a UNet like SDXL's."""
    if denoiser == "unet":
        return ""
    return (
        "; SDXL's UNet figure, kept because it errs slow for a transformer pipeline: Flux measured "
        "A100 → H100 2.20×, BenchmarkFlux"
    )
