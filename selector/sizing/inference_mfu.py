"""FLOPs utilisation of inference GEMMs: the decode step's (``decode_mfu``) and a prefill's
(``prefill_mfu``), each with the rows it was read off. ``speed.decode_speed`` applies them."""

from __future__ import annotations

from selector.sizing.terms import Requirements

DECODE_MFU = 0.25
"""FLOPs utilisation of the decode GEMMs where they turn compute-bound: skinny (batch × hidden)
GEMMs reach well under training MFU. Fitted to the large-batch decode rows: TensorRT-LLM v0.6.1
static batches of 60-112 (NVIDIA/TensorRT-LLM docs/source/performance.md @138f96d) and vLLM 0.13 at
concurrency 128 on H100/B200 (pytorch/ao quantization README @aa25287). It was fitted while the KV
read overlapped the GEMMs; timed as a phase after them (``speed.decode_speed``) the vLLM 0.13 rows
read 0.91-1.00 and TensorRT-LLM's batch 112 0.95, so they would allow more, but fresh rows at
100-192 sequences over-promise at 0.30 (TensorRT-LLM 0.7 Llama-2-70B fp8 on one H200 at batch 192:
0.96 → 1.11; SGLang 0.5.6 Llama-3.1-70B on 8 A100 at 100 streams: 1.02 → 1.12), so it stays (the
slow side). The same value holds at every batch: the drop to 0.10 above 256 sequences that one
TensorRT-LLM row (batch 480) had pinned while the KV read overlapped the GEMMs is gone (that row
reads 0.74, the seven fresh 384-1,024-sequence rows 0.48-0.84; 0.29-0.81 with the drop). Those rows
are all TensorRT-LLM's 2023 static batches and no vLLM or SGLang row decodes that many sequences,
so the higher utilisation wider GEMMs reach is not taken (errs slow)."""

PREFILL_MFU = 0.40
"""FLOPs utilisation of the prompt tokens a chunked-prefill step carries. vLLM 0.13 prefills
Llama-3.1-8B at ~0.5 MFU on H100 (pytorch/ao README @aa25287, 32 × 4096 tokens); NIM 1.8.0's
Llama-3.3-70B fp8 TP 2 on H100 reached its first token of a 5,000-token prompt in 546.7 ms at
concurrency 5 (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance), 0.33 MFU of the dense fp8
TFLOPS with queueing included. 0.40 is kept (between the two): the chunked-prefill schedule
(``prefill_step_s``) now stops the double counting the first fit had, so the MFU itself needs no
stretching."""


TRTLLM_PREFILL_MFU = 0.33
"""FLOPs utilisation of TensorRT-LLM v0.5-v0.6.1's prefill (the releases whose static-batch tables
the calibration rows quote), read off the same document's Low Latency table (NVIDIA/TensorRT-LLM
docs/source/performance.md @138f96d, v0.5, H100 FP8, batch 1, input 2048): LLaMA 7B TP 1 first
token in 36 ms (0.40 of 1,979 dense fp8 TFLOPS with gpufit's FLOP count) and LLaMA 70B TP 4 in
109 ms (0.33, its all-reduces included); the lower figure is taken, the slow side."""

NIM_PREFILL_MFU = 0.45
"""FLOPs utilisation of NIM 1.8.0's (TensorRT-LLM) prefill, read off NIM's own concurrency-1 figure
(docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, Llama-3.3-70b-instruct, 2 x H100 80G,
fp8 TP2, 5000 input tokens: TTFT 406.77 ms): 5,000 × 1.4766e11 FLOPs (2 × 70.55e9 parameters +
the prompt's causal attention, gpufit's own count) in 0.40677 s over 2 × 1,979 dense fp8 TFLOPS
is 0.459; the TTFT also holds a request's queueing and first decode step, so 0.45 is the slow
side of what the prefill itself reaches."""

GENERATION_PREFILL_MFU: dict[str, float] = {"tensorrt-llm": TRTLLM_PREFILL_MFU, "nim": NIM_PREFILL_MFU}
"""Prefill FLOPs utilisation of an engine generation in place of ``PREFILL_MFU``."""


def prefill_mfu(req: Requirements) -> float:
    """``PREFILL_MFU``, or the engine generation's own (``GENERATION_PREFILL_MFU``)."""
    return GENERATION_PREFILL_MFU.get(req.engine_generation, PREFILL_MFU)


INT8_WEIGHT_ONLY_DECODE_MFU = 0.12
"""FLOPs utilisation (of the 16-bit rate: ``GpuSpec.tflops_at``) of decode GEMMs on int8 weight-only
weights at large batch, which convert each weight tile to 16 bit inside the matmul. Read off the
one row that measures it, vLLM 0.13.0 with torchao int8 rowwise weights and bf16 activations on an
H100 at 128 sequences, 32 in / 2,048 out: 4,309.8 decode tok/s, 0.652× the same table's bf16 run
(pytorch/ao torchao/quantization README @aa25287, 2026-01-05; calibration row
``fresh-torchao-vllm0130-h100-llama31-8b-int8wo-decode``, fitted): the highest two-decimal value
at which that row reads no faster than 1.05 with the attention phase timed after the GEMMs
(``speed.decode_speed``): 1.02 at 0.12, 1.07 at 0.13 (0.07 while the KV read overlapped the
GEMMs). One row: an ESTIMATE that errs slow for int8 checkpoints an engine runs with int8 tensor
cores (W8A8)."""


def decode_mfu(precision: str = "bf16") -> float:
    """``DECODE_MFU`` for the decode GEMMs of any batch; int8 weight-only GEMMs at most
    ``INT8_WEIGHT_ONLY_DECODE_MFU``."""
    return min(DECODE_MFU, INT8_WEIGHT_ONLY_DECODE_MFU) if precision == "int8" else DECODE_MFU
