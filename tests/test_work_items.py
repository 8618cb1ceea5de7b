"""Batch work people state in items: images from a diffusion preset, hours of audio for
Whisper. The preset knows a measured time per item on a named GPU; other GPUs take it scaled
by their tensor throughput; ``tflop_per_item`` overrides it."""

from __future__ import annotations

from typing import Any

import pytest

from selector.catalog import load_catalog, load_gpus
from selector.presets import arch_from_preset
from selector.select import plan
from selector.sizing import GIB, Shape, fit, requirements
from selector.spec import SpecError, parse_spec
from tests.test_sizing import instance

GPUS = load_gpus()


def batch(model: dict[str, Any], work: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "items", "task": "batch", "model": model, "work": work, **extra}


def hours(spec: dict[str, Any], gpu: str, n: int = 1) -> float:
    result = fit(requirements(parse_spec(spec)), instance(gpu, n))
    assert isinstance(result, Shape), result
    assert result.job_hours is not None
    return result.job_hours


def test_images_take_the_measured_time_on_the_reference_gpu() -> None:
    sdxl = arch_from_preset("sdxl-base-1.0").item
    assert sdxl is not None and sdxl.gpu == "A100-80GB" and sdxl.unit == "image"
    spec = batch({"preset": "sdxl-base-1.0"}, {"items": "200k"})
    assert hours(spec, "A100-80GB") == pytest.approx(200_000 * sdxl.seconds / 3600)
    # four GPUs share the items
    assert hours(spec, "A100-80GB", 4) == pytest.approx(200_000 * sdxl.seconds / 3600 / 4)


def test_other_gpus_scale_by_tensor_throughput_and_bandwidth() -> None:
    """Diffusion: √(TFLOPS ratio × bandwidth ratio), not TFLOPS alone (CogVideoX-5B bf16 ran
    242.5 s on A100 and 112.4 s on H100, 2.16×, where the TFLOPS say 3.17×)."""
    spec = batch({"preset": "sdxl-base-1.0"}, {"items": 1000})
    a100, l4 = GPUS["A100-80GB"], GPUS["L4"]
    flops = a100.tflops_at("bf16") / l4.tflops_at("bf16")  # type: ignore[operator]
    ratio = (flops * a100.bandwidth_gbps / l4.bandwidth_gbps) ** 0.5
    assert hours(spec, "L4") == pytest.approx(hours(spec, "A100-80GB") * ratio)
    assert hours(spec, "H100") < hours(spec, "A100-80GB")


def test_int4_diffusion_takes_its_own_slowdown_compiled_or_not() -> None:
    """int4 weight-only Flux ran 109 s against bf16's 12 s (torchao and Quanto; GGUF Q4_1 23 s, the
    Hugging Face quantization blog): int4 is timed 109/12 slower than bf16, not int8's 1.30, and
    torch.compile, which cannot fuse those kernels, gains it nothing; int8 and nf4 keep theirs."""
    from selector.sizing.requirements import INT4_WEIGHT_ONLY_SLOWDOWN, WEIGHT_ONLY_SLOWDOWN

    assert pytest.approx(109 / 12) == INT4_WEIGHT_ONLY_SLOWDOWN

    def flux(precision: str, compile: bool = False) -> float:
        spec = batch({"preset": "flux.1-dev"}, {"items": 1000, "compile": compile}, precision=precision)
        return hours(spec, "H100")

    assert flux("int4") == pytest.approx(flux("bf16") * INT4_WEIGHT_ONLY_SLOWDOWN)
    assert flux("int4", compile=True) == pytest.approx(flux("int4"))
    assert flux("int8") == pytest.approx(flux("bf16") * WEIGHT_ONLY_SLOWDOWN)
    assert flux("int8", compile=True) < flux("int8")
    int4 = requirements(parse_spec(batch({"preset": "flux.1-dev"}, {"items": 10}, precision="int4")))
    note = next(t.formula for t in int4.terms if t.name == "work on the reference GPU")
    assert "9.08 int4 weight-only" in note and "the slowest, as the backend is not known" in note


def test_tflop_per_item_overrides_the_measurement() -> None:
    spec = batch({"preset": "sdxl-base-1.0"}, {"items": 1000, "tflop_per_item": 100})
    h100 = GPUS["H100"].tflops_at("bf16")
    assert h100 is not None
    assert hours(spec, "H100") == pytest.approx(1000 * 100 / (h100 * 0.4) / 3600)


def test_hours_of_audio_for_whisper() -> None:
    """On its A100, with enough windows at once that the batch floor does not bind (64), the
    reference run's measured time per audio-second."""
    whisper = arch_from_preset("whisper-large-v3")
    assert whisper.kind == "audio" and whisper.item is not None
    spec = batch({"preset": "whisper-large-v3"}, {"audio": "1000h", "batch": 64}, precision="fp16")
    expected = 1000 * 3600 * whisper.item.seconds / 3600
    assert hours(spec, "A100-80GB") == pytest.approx(expected)
    req = requirements(parse_spec(spec))
    assert any(t.name == "work on the reference GPU" and "audio-seconds" in t.formula for t in req.terms)


def test_fewer_windows_at_once_take_the_batch_floor_on_any_gpu() -> None:
    """Distil-Whisper's eager A100 runs: 0.1372 s per audio-second at one window, falling as
    batch^-0.66 (0.0549 at 4, 0.0213 at 16); its T4 batch-1 run was no slower, so the floor is not
    scaled by the GPU. A job takes the larger of the floor and the reference scaled to its GPU."""
    from selector.sizing.audio_terms import AUDIO_BATCH1_SECONDS, AUDIO_BATCH_EXPONENT, batch_floor

    assert pytest.approx(0.1372) == AUDIO_BATCH1_SECONDS and pytest.approx(0.66) == AUDIO_BATCH_EXPONENT
    assert batch_floor(4)[0] == pytest.approx(0.1372 / 4**0.66)

    def per_second(gpu: str, windows: int, precision: str = "fp16") -> float:
        spec = batch({"preset": "whisper-large-v3"}, {"audio": "1h", "batch": windows}, precision=precision)
        return hours(spec, gpu)  # one hour of audio: hours of work = seconds per audio-second

    assert per_second("A100-80GB", 1) == pytest.approx(0.1372)
    assert per_second("T4", 1) == pytest.approx(0.1372)  # overhead-bound: the GPU does not matter
    assert per_second("A100-80GB", 4) == pytest.approx(0.1372 / 4**0.66)
    t4_reference = per_second("T4", 24)
    assert per_second("T4", 16) == pytest.approx(t4_reference)  # the T4 itself binds at 16
    assert t4_reference > batch_floor(16)[0]
    # at the reference's own 24 windows the (eager) floor binds over its FlashAttention-2 run
    assert per_second("A100-80GB", 24) == pytest.approx(batch_floor(24)[0])
    assert per_second("A100-80GB", 96) == pytest.approx(per_second("A100-80GB", 64))  # no gain past it
    req = requirements(parse_spec(batch({"preset": "whisper-large-v3"}, {"audio": "1h"})))
    note = next(t.formula for t in req.terms if t.name == "work on the reference GPU")
    assert "no faster than 0.137 s per audio-second at work.batch 1 on any GPU" in note
    # quantised weights slow the floor too; fp32's slowdown is its matmuls', not the step overhead's
    int8 = batch({"preset": "whisper-large-v3"}, {"audio": "1h", "batch": 1}, precision="int8")
    assert hours(int8, "A100-80GB") == pytest.approx(0.1372 * 1.30, rel=0.01)
    # the floor is per GPU: eight A100s share the audio
    spec8 = batch({"preset": "whisper-large-v3"}, {"audio": "8h", "batch": 1})
    assert hours(spec8, "A100-80GB", 8) == pytest.approx(0.1372)


def test_fp32_whisper_runs_its_matmuls_without_tf32() -> None:
    """PyTorch leaves TF32 off for fp32 matmuls: fp32 Whisper is timed 16x its 16-bit reference (the
    A100's BF16 tensor over FP32 rate), not refused on a GPU without a TF32 rate (a T4)."""
    from selector.sizing.diffusion_terms import FP32_MATMUL_SLOWDOWN

    def per_second(gpu: str, precision: str, windows: int = 24) -> float:
        spec = batch({"preset": "whisper-large-v3"}, {"audio": "1h", "batch": windows}, precision=precision)
        return hours(spec, gpu)

    a100_fp16 = per_second("A100-80GB", "fp16", 64)
    assert per_second("A100-80GB", "fp32", 64) == pytest.approx(a100_fp16 * FP32_MATMUL_SLOWDOWN)
    assert per_second("T4", "fp32", 8) == pytest.approx(per_second("T4", "fp16", 8) * FP32_MATMUL_SLOWDOWN)


def test_whisper_is_sized_as_an_encoder_decoder_from_its_config() -> None:
    whisper = arch_from_preset("whisper-large-v3")
    assert (whisper.encoder_layers, whisper.layers, whisper.hidden) == (32, 32, 1280)
    assert (whisper.encoder_positions, whisper.context) == (1500, 448)
    assert whisper.params / 1e9 == pytest.approx(1.55, rel=0.01)  # model card: 1550 M
    req = requirements(parse_spec(batch({"preset": "whisper-large-v3"}, {"audio": "10h", "batch": 24})))
    kv = 2 * 32 * 1280 * 2 * (448 + 1500) * 24  # decoder self- and cross-attention caches
    terms = {t.name: t.value for t in req.terms}
    assert terms["decoder kv cache"] == pytest.approx(kv / GIB)
    assert req.replicated_bytes > whisper.params * 2 + kv


def test_a_measured_pipeline_memory_beats_the_rule_of_thumb() -> None:
    flux = arch_from_preset("flux.1-dev")
    assert flux.item is not None and flux.item.memory_mb
    req = requirements(parse_spec(batch({"preset": "flux.1-dev"}, {"items": 100})))
    assert req.replicated_bytes == pytest.approx(flux.item.memory_mb * 1e6)
    assert req.replicated_bytes > flux.params * 2 * 1.2


def test_an_image_batch_plans_on_the_embedded_catalog() -> None:
    spec = batch(
        {"preset": "flux.1-dev"},
        {"items": "20k"},
        fault_tolerance="stateless",
        teardown={"ttl": "12h"},
    )
    result = plan(parse_spec(spec), load_catalog())
    assert result.choice is not None and result.choice.shape.job_hours is not None
    assert result.choice.shape.job_hours <= 12


@pytest.mark.parametrize(
    ("model", "work", "message"),
    [
        ({"kind": "diffusion", "params_b": 2}, {"items": 10}, "has no measured cost per item"),
        ({"preset": "sdxl-base-1.0"}, {"audio": "10h"}, "work.audio (hours of audio) is for audio models"),
        ({"preset": "sdxl-base-1.0"}, {"items": 10, "audio": "1h"}, "give work.items or work.audio"),
        ({"preset": "sdxl-base-1.0"}, {}, "give work.items or work.audio"),
    ],
)
def test_work_problems_name_the_field(model: dict[str, Any], work: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(batch(model, work))
    assert any(message in str(p) for p in caught.value.problems), caught.value.problems
