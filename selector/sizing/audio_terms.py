"""Transcription time of an encoder-decoder speech model (Whisper) beyond its preset's measured run.

The preset's reference (``models.yaml`` ``whisper-large-v3`` ``item``) is one pipeline at one batch:
Transformers with FlashAttention-2 and 24 windows at once on an A100. A job that transcribes fewer
windows at once is not as fast: the decoder's step is bound by its per-step overhead, not by the
GPU, and every window of a batch waits for the batch's longest transcript. ``batch_floor`` sizes
that from the slowest Transformers runs measured (eager attention), not a physical limit: FlashAttention,
faster-whisper or TensorRT-LLM run faster, which gpufit cannot know from ``job.command``. The format
factors time fp32 and quantised weights.
"""

from __future__ import annotations

from selector.sizing.diffusion_terms import FP32_MATMUL_SLOWDOWN, term_ratio

WEIGHT_ONLY_SLOWDOWN = term_ratio("weight_only_slowdown")
"""``requirements.WEIGHT_ONLY_SLOWDOWN`` (Flux.1-Dev int8wo ÷ bf16, eager, diffusers-torchao)."""

AUDIO_BATCH1_SECONDS = 0.1372
"""Seconds per second of audio of Whisper large at one window at a time: the Distil-Whisper paper's
slowest batch-1 figure, large-v2 (large-v3's shapes) with Transformers' default eager attention,
fp16, greedy, on one A100 40GB: RTF 137.2 × 10⁻³ (Gandhi, von Platen and Rush, arXiv 2311.00430,
Appendix D.5, Table 24; its FlashAttention-2 run is 121.9). It times ``model.generate`` alone (log-mel
features already on the GPU), on short utterances each padded to a 30 s window: a floor for a
whole pipeline. Its T4 run is no slower (129.0): at one window the step is overhead-bound, not
GPU-bound, so the floor is not scaled by the GPU. Issue 24's session-13 audio rows (fitted)."""

AUDIO_BATCH_EXPONENT = 0.66
"""How the time per second of audio falls with the windows transcribed at once, t ∝ batch^−0.66:
the smallest exponent between the same table's eager A100 columns (batch 1 → 4: 137.2 → 54.9, 0.661;
4 → 16: 54.9 → 21.3, 0.683; 1 → 16: 0.672), two decimals, rounded down (the slow side). Less than
1 because every window of a batch runs as many decoder steps as its longest transcript."""


def batch_floor(batch: int) -> tuple[float, str]:
    """Seconds per second of audio gpufit takes for ``batch`` windows at once on any GPU: the slowest
    Transformers time measured at that batch (``AUDIO_BATCH1_SECONDS`` × batch^−``AUDIO_BATCH_EXPONENT``,
    extrapolated past the measured 16), not a physical limit; and the ``--explain`` note. The job
    takes the larger of this and the reference run scaled to the GPU (``fit``)."""
    floor = AUDIO_BATCH1_SECONDS * batch**-AUDIO_BATCH_EXPONENT
    return floor, (
        f"no faster than {floor:.3g} s per audio-second at work.batch {batch} on any GPU (the slowest "
        f"Transformers time measured: {AUDIO_BATCH1_SECONDS:g} s at one window, Distil-Whisper's eager A100 "
        f"batch-1 run, × batch^−{AUDIO_BATCH_EXPONENT:g}; the decoder's step is overhead-bound at small "
        "batches; FlashAttention-2, faster-whisper or TensorRT-LLM run faster; state work.batch)"
    )


def format_factor(precision: str) -> tuple[float, str]:
    """A speech model's time in ``precision`` relative to its 16-bit reference run, and the note:
    fp32 runs its matmuls without TF32 (PyTorch's default) at the plain FP32 rate
    (``FP32_MATMUL_SLOWDOWN``, 16×: an ESTIMATE on the slow side, no fp32 Whisper run on the
    reference GPU measured); quantised weights take the weight-only dequantisation slowdown measured
    on Flux (``WEIGHT_ONLY_SLOWDOWN``, an ESTIMATE: CTranslate2's int8 Whisper multiplies in int8
    and is faster)."""
    if precision == "fp32":
        return FP32_MATMUL_SLOWDOWN, (
            f" × {FP32_MATMUL_SLOWDOWN:.0f} fp32 (ESTIMATE: matmuls without TF32, A100 BF16 tensor ÷ "
            "FP32 TFLOPS)"
        )
    if precision in ("bf16", "fp16"):
        return 1.0, ""
    return WEIGHT_ONLY_SLOWDOWN, (
        f" × {WEIGHT_ONLY_SLOWDOWN:.2f} {precision} (ESTIMATE: weight-only dequantisation, measured on Flux)"
    )
