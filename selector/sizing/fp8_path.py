"""The kernel path a serving engine runs fp8 weights on, and the bandwidth efficiency it reaches there
(issue 24, session 14)."""

from __future__ import annotations

from selector.sizing import speed

W8A8_FP8_ENGINES: frozenset[str] = frozenset({"vllm", "sglang"})
"""Engines that run an fp8 checkpoint as fp8 GEMMs on fp8 activations (W8A8) on the GPUs gpufit
places fp8 weights on (compute capability 8.9 and up: ``Requirements.needs_fp8`` refuses the others).
vLLM: "Ada Lovelace, Hopper, and Blackwell GPUs are supported for W8A8. Turing/Ampere GPUs are
supported for W8A16 (weight-only FP8) utilizing Marlin kernels" (docs.vllm.ai v0.32.0
features/quantization/llm_compressor/fp8/, which adds: "FP8 computation is supported on NVIDIA GPUs
with compute capability >= 8.9 ... FP8 models will run on compute capability >= 7.5 (Turing) as
weight-only W8A16, utilizing FP8 Marlin"). SGLang: sgl-kernel's ``fp8_scaled_mm`` after a per-token
activation quantisation kernel, Triton for block fp8 on sm89, DeepGEMM, CUTLASS or FlashInfer on sm90
and up; its Marlin fp8 only below sm89 (python/sglang/srt/layers/quantization/fp8.py, fp8_utils.py)."""

FP8_CHECKPOINT_MODES: frozenset[str] = frozenset({"checkpoint", "native"})
"""``ServedModel.fp8`` modes whose weights arrive in fp8: a published FP8 repo, or a repo whose own
weights are fp8 (DeepSeek-V3/R1's block fp8). ``online`` (16-bit weights the engine quantises as it
loads, with per-tensor weight scales and dynamic activation scales) keeps torchao generate.py's
``speed.PRECISION_BANDWIDTH_EFFICIENCY['fp8']`` (0.38): vLLM's fp8 documentation, in its section on
online dynamic quantisation, says "latency improvements are limited in this mode", and no published
row measures it."""

W8A8_PAIRS: tuple[tuple[str, str], ...] = (
    (
        "fresh7-gpustack-qwen3-8b-h100-sglang053p3-fp8-sharegpt-c4",
        "fresh7-gpustack-qwen3-8b-h100-sglang053p3-sharegpt-c4",
    ),
    (
        "fresh7-gpustack-qwen3-8b-h100-sglang053p3-fp8-triton-sharegpt-c4",
        "fresh7-gpustack-qwen3-8b-h100-sglang053p3-sharegpt-c4",
    ),
    (
        "fresh7-gpustack-qwen3-8b-h100-sglang053p3-fp8-flashinfer-sharegpt-c4",
        "fresh7-gpustack-qwen3-8b-h100-sglang053p3-sharegpt-c4",
    ),
    ("torchao-vllm-h100-llama31-8b-fp8-decode", "torchao-vllm-h100-llama31-8b-bf16-decode"),
)
"""The published pairs of an fp8 checkpoint and its 16-bit twin on vLLM or SGLang (same GPU, engine,
load and client) whose rows are not held out (docs/calibration.yaml; their rows are fitted since):
GPUStack's SGLang 0.5.3 Qwen3-8B on an H100 at 4 streams (three attention backends; 1.25-1.27x the
16-bit speed) and torchao's float8 rowwise Llama-3.1-8B checkpoint in vLLM 0.13.0 at 128 sequences
on an H100 (1.21x). The same vLLM run on a B200 (1.11x) is not one of them: its 16-bit row is held
out, so the pair tests the value instead (``W8A8_HELD_OUT_PAIR``)."""

W8A8_HELD_OUT_PAIR = (
    "fresh-torchao-vllm0130-b200-llama31-8b-fp8-decode",
    "torchao-vllm-b200-llama31-8b-bf16-decode",
)

W8A8_FP8_EFFICIENCY = 0.46
"""Share of peak bandwidth an fp8 checkpoint's weights are read at under ``W8A8_FP8_ENGINES``: the
highest two-decimal value at which gpufit's fp8 speed-up over the 16-bit twin exceeds no measured
pair's (``W8A8_PAIRS``; bound by SGLang's Triton-attention Qwen3-8B pair: 1.241x against 1.246x
measured, where 0.47 gives 1.263x, above it and the FlashInfer pair's 1.259x), so the gain gpufit
promises for fp8 is never above one measured; the held-out B200 pair reads 1.152x against 1.112x,
within ``EFFICIENCY_MARGIN_RATIO`` (1.096x until the KV read was timed after compute-bound GEMMs,
``speed.decode_speed``, which slowed its 16-bit twin at 128 sequences and not the fp8 run).
Below the 16-bit 0.62 though the GEMMs read 1-byte weights with no dequantising step: at a few
sequences the fp8 GEMMs reach a smaller share of peak, activation quantisation included: vLLM's
benchmarks/kernels/bench_fp8_gemm.py at batch 1 for Llama-3.1-8B's N=6144 K=4096 put fp8 with
per-channel weights and per-token activations at 4.06 TFLOP/s against bf16's 2.51 (1.6x; vllm-project/
vllm PR #17126) and, after the SM100 tuning, at 5.33 against 5.92 (0.9x; PR #19566); the pairs
measure the whole step. An ESTIMATE read after every ratio had been seen (session 14), on the slow
side of the pairs; above torchao generate.py's 0.38
(``speed.PRECISION_BANDWIDTH_EFFICIENCY['fp8']``), which a calibration row keeps where it names no
engine. Ada (L4, L40S) has no vLLM or SGLang fp8 row: the value is taken there too (an estimate)."""


def engine_bandwidth_efficiency(precision: str, engine: str, fp8_mode: str) -> float:
    """``speed.precision_bandwidth_efficiency``, or ``W8A8_FP8_EFFICIENCY`` for an fp8 checkpoint
    (``FP8_CHECKPOINT_MODES``) under an engine of ``W8A8_FP8_ENGINES``."""
    if precision == "fp8" and engine in W8A8_FP8_ENGINES and fp8_mode in FP8_CHECKPOINT_MODES:
        return W8A8_FP8_EFFICIENCY
    return speed.precision_bandwidth_efficiency(precision)
