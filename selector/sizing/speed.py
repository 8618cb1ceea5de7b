"""The decode speed model: the bandwidth efficiency a serving engine reaches per precision, its
fixed per-layer latency, the tensor-parallel all-reduce latency by interconnect, the compute of
large batches and the prefill of arriving prompts, and the time of one decode step.

Every constant names the measurement it was fitted to; the fitted rows are those of
docs/calibration.yaml that ``selector.calibration.split_of`` does not hold out."""

from __future__ import annotations

from selector.catalog import GpuSpec
from selector.sizing.inference_mfu import decode_mfu, prefill_mfu
from selector.sizing.schedule import (
    SEPARATE_PREFILL_ENGINES,
    batch_layer_latency_s,
    engine_release_key,
    separate_prefill_s,
)
from selector.sizing.terms import Requirements

EFFICIENCY_MARGIN_RATIO = 1.05
"""The rule the bandwidth efficiencies are chosen by, stated before choosing them (round 5's
review): per precision, the highest value (two decimals) at which no fitted row of a current
engine (no ``engine`` stated, or a release ``engine_generation`` reads as ``current``) reads above
1.05 (gpufit ÷ published), half the 10 % over-promise tolerance kept as margin for measurements the
model was not fitted to (tests/test_calibration.py checks each value against it)."""

DEFAULT_BANDWIDTH_EFFICIENCY = 0.62
"""Share of peak memory bandwidth a current serving engine reaches while decoding 16-bit weights
(model bandwidth utilisation): an ESTIMATE on the fast side of the 0.6 gpufit used before round 5,
chosen by ``EFFICIENCY_MARGIN_RATIO``'s rule and bound by one row, SGLang 0.5.6 decoding
gpt-oss-120b on 8 B200 at 100 streams (``fresh-sglcb-gptoss120b-b200-tp8-sharegpt-c100``: 1.048
at 0.62, 1.051 at 0.63). That row is 16-bit only by its spec (served as published): 97 % of its
weight bytes are MXFP4 experts, which gpufit reads at this efficiency (it has no MXFP4 value of its
own), and its batch expert latency was read off it: a thin bound. Rows whose weights are 16-bit
would allow 0.65 (at 0.66 SGLang's GLM-4.6 8k/1k alone reads 1.051 and vLLM 0.23.0's Qwen2.5-0.5B
on an L4 at concurrency 32 1.050; the L4 row bound it until the KV read was timed after
compute-bound GEMMs, ``decode_speed``: 1.04 at 0.62 then, 1.02 now), so 0.62 errs slow for them. Today's
engines read more at batch 1: vLLM 0.23.0 decodes Llama-3.1-8B on an A100-40GB at ~75 tok/s, "roughly 77%
of the GPU's memory-bandwidth ceiling" (johnmusgrave.com/p/vllm-throughput-latency-sweep-on);
torchao's bf16 runs reach 1,419 GB/s of the A100's 2,039 (70%) and 1,905 of the H100's 3,350
(57%) (pytorch/ao torchao/quantization/README.md @c452495, 2025-09-08). The older engines have
terms of their own (vLLM V0 ``V0_STEP_OVERHEAD_S``, TGI < 2.0 ``TGI_V1_16BIT_EFFICIENCY``,
llama.cpp ``LLAMA_CPP_16BIT_EFFICIENCY``), which only calibration rows naming them take:
``gpufit plan`` launches current vLLM/SGLang releases. Round 5 first took 0.68, the highest value
at which no fitted row read above 1.10 (the same L4 row at 1.098, no margin). Override with
``tuning.bandwidth_efficiency``."""

PRECISION_BANDWIDTH_EFFICIENCY: dict[str, float] = {
    "fp32": DEFAULT_BANDWIDTH_EFFICIENCY,
    "bf16": DEFAULT_BANDWIDTH_EFFICIENCY,
    "fp16": DEFAULT_BANDWIDTH_EFFICIENCY,
    "int8": 0.53,
    "fp8": 0.38,
    "int4": 0.51,
    "nf4": 0.35,
}
"""Bandwidth efficiency of weight-only quantised decode kernels, which dequantise as they read
and reach a lower share of peak than 16-bit GEMVs. torchao's achieved GB/s at batch 1 (pytorch/ao
torchao/quantization/README.md @c452495, 2025-09-08): H100 int8 weight-only 1,495 GB/s (45%),
fp8 weight-only 1,340 (40%), int4 (tinygemm, group 64) 1,019 (30%); A100 int8 1,131-1,151 (56%),
int4 751-763 (37%). Those shares hold the fixed per-step time; with the 16-bit embeddings and
the per-layer latency counted apart the batch-1 rows fit about 0.55 for 8-bit and 0.42 for 4-bit
weights (0.50 and 0.38 before round 5). ``EFFICIENCY_MARGIN_RATIO``'s rule binds both 8-bit
values below that fit (ESTIMATES, each bound by one row): int8 0.53, bound by gpt-fast's int8
Mixtral-8x7B on one A100 (``gptfast-mixtral-int8-tp1``, 1.04 at 0.53; fitted since it stopped
round 5's int8 at 0.55, where it read 1.07), fp8 0.38, bound by torchao's fp8 dynamic-quant
Llama-3.1-8B with per-tensor scales on an H100 (``fresh-torchao-h100-llama31-8b-fp8dq-tensor``,
116.4 tok/s: 1.04 at 0.38, 1.06 at 0.39; a row of issue 24's fresh set, 2026-12-05, which read 1.39
at the 0.54 its per-row sibling ``torchao-h100-llama31-8b-fp8dq-row`` had bound: per-tensor dynamic
scaling of activations needs a reduction over each activation before its matmul and is the
slower path at batch 1, the same README's note). These are torchao's kernels: the fp8 checkpoints
vLLM and SGLang run take ``fp8_path.W8A8_FP8_EFFICIENCY``. int4 0.51, by the same rule (session 15):
bound by gpt-fast's int4 Llama-2-70B at TP 8 (``gptfast-llama2-70b-tp8-int4``, 1.040 at 0.51, 1.0501
at 0.52, just over; half of its step is fixed time, layer latencies and all-reduces, so the value
leans on those terms too), its weights counted with GPTQ/AWQ's group-128 scales and zeros
(``terms.BYTES_PER_PARAM``; gpt-fast's own layout, a bf16 scale and zero per group of 32, is 5 bits,
about 20 % more, so its rows reach more of peak than 0.51 says). Until then int4 kept its batch-1
fit, 0.42, because the fitted TGI 1.0.3 GPTQ row on an A10G read 1.13 at 0.45; that row names an
older engine, which the rule leaves out, and takes its generation's own figure
(``TGI_V1_INT4_EFFICIENCY``). vLLM, the engine gpufit launches by default, puts 0.51 near its edge,
not below it: its only int4 rows, 0.6.3 running Qwen2.5 GPTQ/AWQ checkpoints through its Marlin
kernels on an A100 (QwenLM/Qwen2.5 speed_benchmark.rst @2abc0f3), timed under today's terms (without
V0's 2.24 ms step, which today's engine dropped), read 0.86-1.03 at 0.51. Marlin's 'close to ideal
(4x) speedups up to batchsizes of 16-32 tokens' (IST-DASLab/marlin README @2f6d7c1) is a kernel
benchmark on an A10 with ECC off, not a model's decode. An ESTIMATE on Hopper and Blackwell, where
vLLM runs GPTQ through its Machete kernels and SGLang through Marlin, which its authors say is not
optimised for Hopper: no row measures either. The change was made after the held-out int4 rows had
been seen reading 0.52-0.81 (0.61-0.92 at 0.51). gpt-fast rows are timed at the 1,700 GB/s its
README measured on its 330 W A100s (``peak_bandwidth_gbps`` on those calibration rows). NF4 keeps
0.35 (bitsandbytes kernels are no faster than int4; no row measures them: an estimate that errs
slow)."""

STEP_OVERHEAD_S = 0.5e-3
"""Fixed time per decode step outside the layers (scheduling, sampling, detokenising, the
engine's Python loop), which caps small and fast models. An estimate on the safe side, added after
the first look at the held-out rows (docs/calibration.md): none of the fitted rows needs it, but a
held-out one does, vLLM 0.6.3 decoding Qwen2.5-3B on A100 at 127.6 tok/s where 36 layers of bytes
and launches take ~5.5 ms (QwenLM/Qwen2.5 docs speed_benchmark.rst @2abc0f3), ~2 ms a step.
vLLM's V1 engine (0.8+) moved scheduling off the GPU's critical path, so today's releases are
taken at 0.5 ms rather than 2; without it a small model on a B200 would be promised ~4 ms steps
that no measurement here confirms."""

LAYER_LATENCY_S = 20e-6
"""Fixed time per layer of a decode step beyond its bytes and FLOPs (kernel launches, norms,
rotary, sampling spread over the layers), for engines that replay CUDA graphs (vLLM, SGLang,
TensorRT-LLM, torch.compile): torchao's Llama-3-8B bf16 rows leave ~20-40 µs per layer (pytorch/ao
README @aa25287), taken at the low end. vLLM 0.6.3's Qwen2.5-3B on A100 (127.6 tok/s, 7.8 ms a
token against a 5.1 ms bandwidth floor, ~75 µs per layer over 36 layers; QwenLM/Qwen2.5 docs
speed_benchmark.rst @2abc0f3, a held-out row) is left to ``STEP_OVERHEAD_S``, which covers only
0.5 ms of its ~2 ms gap (the row stays ⚠ in docs/calibration.md)."""

EAGER_LAYER_LATENCY_S = 450e-6
"""Per-layer latency of an eager PyTorch decode loop (a user's own server, ``engine: none``): HF
transformers Qwen2.5-7B at 40.4 tok/s against vLLM's 84.3 on the same A100, ~0.45 ms per layer
over 28 layers (QwenLM/Qwen2.5 docs speed_benchmark.rst @2abc0f3). gpufit cannot see what a
custom server does, so it assumes the slow regime."""

EAGER_GAP_LAYERS = 32
EAGER_GAP_TOKENS = 100
EAGER_GAP_S = (1.05, 1.2)
"""vLLM PR #1440 'CUDA graph for Llama' (yunfeng-scale, 2023-10-20): Llama-2-7B (32 layers), no
tensor parallelism, batch 1, 5 input and 100 output tokens: "about 1.05s ... with CUDA graph ...
vs about 1.2s without CUDA graph" (GPU not stated). A serving engine of TGI 1.0.3's era (fused
attention and norm kernels, every kernel launched from Python each step), measured with and
without graphs on the same model: the independent source of ``NO_CUDA_GRAPH_LAYER_LATENCY_S``."""

NO_CUDA_GRAPH_LAYER_LATENCY_S = LAYER_LATENCY_S + (EAGER_GAP_S[1] - EAGER_GAP_S[0]) / (
    EAGER_GAP_TOKENS * EAGER_GAP_LAYERS
)
"""Per-layer latency of a serving engine release that decodes without CUDA graphs: the CUDA-graph
``LAYER_LATENCY_S`` plus the eager launch gap of ``EAGER_GAP_S`` (0.15 s over 100 tokens of 32
layers: 47 µs a layer), 67 µs. Hugging Face TGI before 2.0.0 decodes so: CUDA graphs became its
default only then (huggingface/text-generation-inference PR #1703 'Add cuda graphs sizes and make
it default', 2024-04-04; PR #1428 had added them as experimental). Sourced, not fitted: the fitted
TGI 1.0.3 rows (philschmid/text-generation-inference-tests results/sagemaker.csv; 6 fitted, 1 held
out) do not need it (0.77-1.06 at 20 µs), and the held-out TP 8 row (1.73 at 20 µs) had been seen
before any value was chosen, so it proves nothing for this term. Applies only to rows that state
such a release (``engine_generation``); the engines gpufit launches are pinned to current releases
(selector/engines.py)."""

V0_ROW_TOKENS_PER_S = 311.55
V0_ROW_BYTES = 0.98e9 + 0.025e9
V0_ROW_LAYERS = 24
V0_ROW_PEAK_BYTES_PER_S = 2039e9
"""vLLM 0.6.3 (V0 engine, CUDA graphs, ``enforce_eager=False``) decoding Qwen2.5-0.5B-Instruct in
bf16 at batch 1, 1 input and 2,048 output tokens, on one A100 80GB: 311.55 tokens/s (QwenLM/Qwen2.5
docs/source/benchmark/speed_benchmark.rst @010c37c, '0.5B (vLLM)' table; calibration row
``qwen25-05b-vllm-bf16-in1``). Its step reads 0.98 GB of weights (tied embeddings) and 0.025 GB of
KV cache (gpufit's own count at the mean context), over 24 layers, on the A100-80GB's 2,039 GB/s
(gpus.yaml)."""

V0_STEP_OVERHEAD_S = (
    1.0 / V0_ROW_TOKENS_PER_S - V0_ROW_BYTES / V0_ROW_PEAK_BYTES_PER_S - V0_ROW_LAYERS * LAYER_LATENCY_S
)
"""Fixed time per decode step of vLLM's V0 engine (releases before 0.8.0) outside the layers: the
scheduler, input preparation and output processing run on the CPU between forward passes and the
GPU waits for them. vLLM's own account: RFC #6854 'Multi-Step Scheduling' (2024-07-26) measured
'about 4ms of GPU bubble' incurred on every decode step (5-13 ms under load) before 0.6.0, and the
V1 blog (blog.vllm.ai/2025/01/27/v1-alpha-release.html) names the same CPU overhead as what V1
removed. The figure is read off the smallest model a V0 release was measured on (``V0_ROW_*``):
3.21 ms a token, less its bytes at the GPU's full peak bandwidth (0.49 ms) and 24 layers of
``LAYER_LATENCY_S`` (0.48 ms): 2.24 ms. Reading the bytes at peak rather than at any efficiency
leaves the most time to the overhead: the slow side for a V0 row. Only calibration rows that state
a release before 0.8.0 take it (``engine_generation``); gpufit launches current releases
(selector/engines.py), which keep ``STEP_OVERHEAD_S``."""

LLAMA_CPP_ROW_TOKENS_PER_S = 74.77
LLAMA_CPP_ROW_BYTES = 12.55 * 2**30
LLAMA_CPP_ROW_LAYERS = 32
LLAMA_CPP_ROW_PEAK_BYTES_PER_S = 1935e9
"""llama.cpp's own batch-1 decode figure for a 16-bit model on an A100: ``llama-bench`` on an
NVIDIA A100 80GB PCIe, 'llama 7B F16 | 12.55 GiB | 6.74 B | CUDA | 99 | 8192 | tg 128 |
74.77 ± 0.10' (ggml-org/llama.cpp PR #6017 'llama : add pipeline parallelism support',
ggerganov, 2024-03: his one-device llama-bench table, 'found 1 CUDA devices: NVIDIA A100 80GB
PCIe', row 'tg 128'; confirmed in the PR thread via the search tool, 2026-12-04); the A100 80GB
PCIe's 1,935 GB/s (NVIDIA A100 datasheet)."""

LLAMA_CPP_16BIT_EFFICIENCY = LLAMA_CPP_ROW_BYTES / (
    LLAMA_CPP_ROW_PEAK_BYTES_PER_S
    * (1.0 / LLAMA_CPP_ROW_TOKENS_PER_S - STEP_OVERHEAD_S - LLAMA_CPP_ROW_LAYERS * LAYER_LATENCY_S)
)
"""Share of peak bandwidth llama.cpp's CUDA backend reaches decoding 16-bit weights at batch 1: the
``LLAMA_CPP_ROW_*`` figure read through gpufit's own step (its bytes over 13.37 ms less
``STEP_OVERHEAD_S`` and 32 × ``LAYER_LATENCY_S``): 0.57. A cap, never a raise: quantised weights
keep their lower ``PRECISION_BANDWIDTH_EFFICIENCY``."""

TGI_V1_16BIT_EFFICIENCY = 0.6
"""Share of peak bandwidth the 2023 serving engines reached at batch 1 with 16-bit weights:
Databricks, 'LLM Inference Performance Engineering: Best Practices' (2023), about 60% model
bandwidth utilisation on A100/H100, measured in the era of TGI 1.0. It caps Hugging Face TGI
releases before 2.0 (the figure gpufit used for every engine until round 5)."""

TGI_V1_INT4_EFFICIENCY = 0.42
"""Share of peak bandwidth Hugging Face TGI before 2.0 reaches reading GPTQ int4 weights (its
exllama kernels, no CUDA graphs), in place of ``PRECISION_BANDWIDTH_EFFICIENCY``'s int4: the
margin rule applied to that generation's fitted int4 rows (philschmid/text-generation-inference-
tests results/sagemaker.csv: TGI 1.0.3 Llama-2-7B, 13B and 70B GPTQ on A10G), the highest two-decimal
value at which none reads above 1.05, bound by the 7B row on one A10G (20.68 ms a token: 1.041 at
0.42, 1.060 at 0.43). The source's own note: int4 only 1.5× faster than fp16 there."""

GENERATION_BANDWIDTH_CAP: dict[str, float] = {
    "no-cuda-graphs": TGI_V1_16BIT_EFFICIENCY,
    "llama.cpp": LLAMA_CPP_16BIT_EFFICIENCY,
}
"""Highest share of peak bandwidth an older engine generation reaches (applied as a cap on the
precision's efficiency; a generation absent here reads as today's engines do)."""

TRTLLM_FP8_EFFICIENCY = 0.83
"""Share of peak bandwidth TensorRT-LLM reaches reading FP8 weights (FP8 GEMMs on FP8 activations,
no dequantising kernel, unlike the weight-only kernels ``PRECISION_BANDWIDTH_EFFICIENCY`` holds).
Read off NIM 1.8.0's own concurrency-1 figure (docs.nvidia.com/nim/benchmarking/llm/1.0.0/
performance: Llama-3.3-70b-instruct, 2 x H100 80G, fp8 TP2, 5000 in / 500 out, ITL 18.58 ms; the
fitted row ``nim-llama33-70b-fp8-h100-tp2``), solved together with ``TRTLLM_KV_EFFICIENCY`` so both
rows come out at 1.00 through gpufit's own step: 0.839, taken at 0.83."""

TRTLLM_KV_EFFICIENCY = 0.78
"""Share of peak bandwidth TensorRT-LLM's generation-phase attention reaches reading the KV cache.
Read off TensorRT-LLM v0.5's L40S FP8 static batch (NVIDIA/TensorRT-LLM docs/source/performance.md
@138f96d: LLaMA 7B, batch 64, 128 in / 2048 out, 1,622 tok/s, engines built with
``--enable_fp8 --fp8_kv_cache``; the fitted row ``trtllm05-llama2-7b-l40s-fp8-b64``), whose step
is mostly the KV read: 0.7805, taken at 0.78. The held-out TensorRT-LLM v0.6.1 static batches
(H100 FP8 batch 112, A100 FP16 batch 60, same page) test both figures."""

GENERATION_PRECISION_EFFICIENCY: dict[str, dict[str, float]] = {
    "no-cuda-graphs": {"int4": TGI_V1_INT4_EFFICIENCY},
    "tensorrt-llm": {"fp8": TRTLLM_FP8_EFFICIENCY},
    "nim": {"fp8": TRTLLM_FP8_EFFICIENCY},
}
"""Weight bandwidth efficiency an engine generation reaches for a precision in place of
``PRECISION_BANDWIDTH_EFFICIENCY`` (each value read off a fitted row, named in its docstring)."""

GENERATION_KV_EFFICIENCY: dict[str, float] = {
    "tensorrt-llm": TRTLLM_KV_EFFICIENCY,
    "nim": TRTLLM_KV_EFFICIENCY,
}
"""KV-cache read efficiency of an engine generation in place of ``KV_BANDWIDTH_EFFICIENCY``."""

ENGINE_GENERATIONS: dict[str, tuple[str, str]] = {
    "tgi": ("2.0.0", "no-cuda-graphs"),
    "vllm": ("0.8.0", "v0-engine"),
    "llama.cpp": ("", "llama.cpp"),
    "tensorrt-llm": ("", "tensorrt-llm"),
    "nim": ("", "nim"),
}
"""Per engine: (the first release with today's decode path, the generation of releases before
it). TGI: CUDA graphs by default from 2.0.0 (PR #1703); its older generation takes
``NO_CUDA_GRAPH_LAYER_LATENCY_S``. vLLM: the V1 engine is the default from 0.8.0 (vllm-project/vllm
PR #13726, listed in the v0.8.0 release notes as turning V1 on by default); its V0 generation takes
``V0_STEP_OVERHEAD_S`` (0.8.x still fell back to V0 for features V1 lacked: a row stating such a
feature on 0.8.x would need its own term; none here does). SGLang: no older generation it can
time (``UNTIMED_BEFORE``). llama.cpp: every release (an empty first release) takes its own
``LLAMA_CPP_16BIT_EFFICIENCY``; the sources here do not state a build. TensorRT-LLM, and NIM whose
LLM profiles run it ('The NVIDIA TensorRT-LLM accelerated NIM backend', docs.nvidia.com/nim/
large-language-models/1.0.0/optimization.html), every release: ``TRTLLM_FP8_EFFICIENCY``,
``TRTLLM_KV_EFFICIENCY``; prefill ``TRTLLM_PREFILL_MFU`` (its 2023 releases) or
``NIM_PREFILL_MFU``. gpufit launches neither: these time the rows that state them. An entry
needs a source for its release boundary and a sourced term for its generation (a figure a source
publishes, or one read off a fitted row, never tuned to the rows' ratios): the ``engine`` field
of a calibration row is not a per-row correction."""


KNOWN_ENGINES: tuple[str, ...] = ("vllm", "sglang", "tgi", "llama.cpp", "tensorrt-llm", "nim", "transformers")
"""Engine names a calibration row may state (matched case-insensitively); any other name is an
error, never read as today's engine. ``transformers`` (Hugging Face ``generate``, a row with
``serving.engine: none``) decides only whether every prompt position's logits are held
(``engine_memory.PROMPT_LOGIT_BYTES``)."""

UNTIMED_BEFORE: dict[str, str] = {"sglang": "0.4.0"}
"""Per engine, the first release gpufit can time: SGLang before 0.4.0 ran its batch scheduler on
the CPU between GPU steps; 0.4.0 overlapped it with the GPU ('Zero-Overhead Batch Scheduler',
lmsys.org/blog/2024-12-04-sglang-v0-4/). No source states that older generation's per-step time,
so it has no ``ENGINE_GENERATIONS`` entry (a term would be invented): a calibration row naming an
SGLang release before 0.4.0 is an error rather than timed as today's engine. SGLang from 0.4.0,
which gpufit launches (selector/engines.py), takes the current terms."""


def engine_generation(name: str, release: str) -> str:
    """``current``, or the older generation (``ENGINE_GENERATIONS``) of ``name``'s ``release``
    (dotted numbers compared as such)."""
    first, older = ENGINE_GENERATIONS.get(name, ("", "current"))
    if not first:
        return older
    return older if engine_release_key(release) < engine_release_key(first) else "current"


MOE_EXPERT_LATENCY_S = 25e-6
"""Fixed time a mixture-of-experts layer adds per expert a token is routed to (router, top-k,
token permutation, one grouped-GEMM launch and combine per active expert), beyond its bytes, in
engine releases before ``FAST_MOE_FROM`` and wherever the release is not known (the slow side).
Fitted to gpt-fast's Mixtral-8x7B rows (top-2; bf16 TP 2-8 and int8 TP 2-4: pytorch-labs/gpt-fast
README @0f925b5) and to issue 24's measurement of a 61-layer top-8 MoE (DeepSeek-V3 class) on 8
GPUs decoding about 5× slower at batch 1 than bytes ÷ bandwidth plus all-reduces: 20 + 8 × 25 =
220 µs per layer there, 70 µs for Mixtral. vLLM 0.7.4 bears it out: DeepSeek-R1 on 8 H200 (TP 8,
3,200 in / 800-3,200 out, concurrency 4-128) reads 0.73-1.06 with it (dstackai/benchmarks
Deepseek-R1/raw_data/online_results.csv @7f37e66; issue 24's session-7 fresh set)."""

CURRENT_MOE_EXPERT_LATENCY_S = 9e-6
"""``MOE_EXPERT_LATENCY_S`` in the releases gpufit launches (from ``FAST_MOE_FROM``): SGLang
0.5.6.post1 decodes GLM-4.6 (BF16, 92 layers, top-8 of 160 experts and a shared one, GQA) on 8 B200
at TP 8 alone at 14.81-15.02 ms a token (sgl-project/sgl-cookbook GLM/GLM-4.6.md @ec650cf, 1k/1k,
1k/8k and 8k/1k, concurrency 1; issue 24's session-8 fresh set, fitted since). 9 µs is the smallest
whole µs at which none of those three rows reads faster than 1.05 (8 µs reads 1.09-1.10). Session 7
read 7 µs off SGLang's DeepSeek-R1-0528 on the same GPUs (9.16-9.29 ms, 61 layers, top-8, MLA),
which GLM-4.6 then over-promised (1.15-1.16): two models of the same class differ by a fifth in
their per-layer time, so the slower sets the value and DeepSeek-R1 now reads 0.93-0.94. Rows it
was not read off: SGLang 0.5.6 Qwen3-235B, gpt-oss-120b, Qwen3-Next and 0.5.8 Qwen3-Coder-Next
alone (0.56-0.78). SGLang 0.5.7's GLM-4.7-Flash on one B200 (explicit ``--attention-backend
triton``, MLA) decodes at a third to a half of the speed gpufit gives any value here (listed in
tests/test_calibration.py); gpufit has no preset for it. An ESTIMATE read on B200 alone: no batch-1
MoE row of a current engine on A100, L40S or A10G exists, and gpt-fast's Mixtral rows on A100 (a
decode loop gpufit does not launch, timed at the slow value) would read up to 1.11 at 7 µs: it
applies on Hopper and Blackwell only (``FAST_MOE_ARCHS``)."""

FAST_MOE_FROM: dict[str, str] = {"vllm": "0.15.1", "sglang": "0.5.6"}
"""Per engine, the first release a published row measures faster than ``MOE_EXPERT_LATENCY_S``
allows: SGLang 0.5.6 (the DeepSeek-R1 and GLM-4.6 rows above; GLM-4.6 binds
``CURRENT_MOE_EXPERT_LATENCY_S``);
vLLM 0.15.1, gpt-oss-120b on H100 at TP 2-8, concurrency 4-64 (SemiAnalysis InferenceX issue #828),
which reads 0.40-0.53 at 25 µs and 0.48-0.68 at 9 µs (0.48-0.72 at session 7's 7): below 1 at
both, so it shows vLLM left the slow value behind without pinning the new one (SGLang's value is
taken for vLLM too, an estimate).
vLLM 0.7.4's DeepSeek-R1 rows take the slow value (above); releases between are not measured, so
they take it too. gpufit launches later releases than both (``selector/data/engines.yaml``: vLLM
0.34.0, SGLang 0.5.23)."""


def moe_expert_latency_s(engine: str, release: str | None) -> float:
    """Per routed expert: ``CURRENT_MOE_EXPERT_LATENCY_S`` for a release of ``engine`` from
    ``FAST_MOE_FROM``, else ``MOE_EXPERT_LATENCY_S`` (an older release, another engine, or a
    measurement that names no release: the slow side)."""
    first = FAST_MOE_FROM.get(engine)
    if first is None or release is None or engine_release_key(release) < engine_release_key(first):
        return MOE_EXPERT_LATENCY_S
    return CURRENT_MOE_EXPERT_LATENCY_S


ALLREDUCE_LATENCY_S: dict[str, float] = {"nvlink": 20e-6, "pcie": 100e-6}
"""Time one tensor-parallel all-reduce of a decode step takes, whatever its few KiB, by the
GPUs' link. NVLink/NVSwitch: 11-14 µs on 2-8 A100s for vLLM's custom all-reduce of 512 B to
32 KiB (sglang PR #2688, 'Support twoshot kernel'). PCIe (no NVLink, e.g. 4×A10G g5.12xlarge):
fitted to TGI on 4×A10G, Llama-2-7B TP 4 at 16.8 ms/token against ~10.6 ms of bytes ÷ bandwidth,
~6 ms over 64 all-reduces (philschmid/text-generation-inference-tests results/sagemaker.csv).
Megatron tensor parallelism all-reduces twice per layer in the forward pass (Shoeybi et al. 2019,
arXiv 1909.08053, Figure 4)."""

TP_ALLREDUCE_LATENCY_S = ALLREDUCE_LATENCY_S["nvlink"]

DEFAULT_MFU = 0.32
"""Training model FLOPs utilisation (attention FLOPs counted, ``training.attention_flops``). Llama 3
pre-training reached 38-43% BF16 MFU on H100 at 16k GPUs (Dubey et al. 2024, Table 4), but the
frameworks a user runs reach less on one node: fitted to torchtitan Llama-3.1-8B FSDP on 8×H100
(pytorch/torchtitan benchmarks @820504e) and torchtune Llama-3.2-3B LoRA/QLoRA on A100 (pytorch/
torchtune README @1814feb), which 0.40 over-promised by 15-19%. Override with ``tuning.mfu``."""

TRAINING_MFU_BY_ARCH: dict[str, float] = {
    "Ampere": 0.60,
    "Hopper": 0.40,
    "Blackwell": 0.40,
}
"""Training FLOPs utilisation by GPU generation where the data differs from ``DEFAULT_MFU``, of
the FLOPs actually run: the model's plus, with activation checkpointing, the recomputed forward
pass (``training.RECOMPUTE_FLOPS_PER_PARAM_TOKEN``; llm-foundry's HFU, mosaicml/llm-foundry
scripts/train/benchmarking/README.md @4952183 "MFU and HFU"). Ampere 0.60: fitted to llm-foundry
MPT-7B/70B on A100-40/80GB (same README), the Llama 2 paper's A100 GPU-hours (arXiv 2307.09288,
Table 2), TinyLlama and torchtune Llama-3.2-3B/3.1-70B/405B on A100 (pytorch/torchtune README
@1814feb): fitted rows 0.99-1.21. Hopper 0.40: the Llama 3 paper's 38-43% BF16 MFU on H100
(Dubey et al. 2024, Table 4), checked on the fitted llm-foundry MPT-13B 32k row (31.7% MFU with
recomputation = 42% of FLOPs run; ratio 1.06) and torchtitan Llama-3.1-8B with its selective
checkpointing (1.16; 1.37 when it was sized as full recomputation). Blackwell takes Hopper's 0.40
(an estimate: no Blackwell training row); Ada keeps ``DEFAULT_MFU`` (an estimate: no fitted row;
errs slow)."""

WORK_MFU = 0.40
"""MFU of a batch job stated in TFLOP per item (``work.tflop_per_item``): the Llama 3 paper's
38-43% on H100 (Dubey et al. 2024, Table 4), the figure gpufit used before issue 24's training
fit, which no row here measures for such jobs. Override with ``tuning.mfu``."""

MOE_MFU_FACTOR = 0.5
"""Training MFU of a mixture-of-experts model relative to a dense one (all-to-all dispatch,
grouped GEMMs of a few tokens per expert): an estimate (issue 24's measurements list MoE MFU
among the error classes); it errs slow."""

KV_BANDWIDTH_EFFICIENCY = 0.5
"""Share of peak bandwidth the attention kernels reach reading the KV cache (paged attention),
whatever the weights' precision. Fitted to the concurrency-128 rows of vLLM 0.13 on H100 (Llama-3.1-8B
bf16 and FP8, 32 in / 2,048 out: pytorch/ao quantization README @aa25287), which 0.6 over-promised
by 10% (with the KV read timed after compute-bound GEMMs, ``decode_speed``, the five vLLM 0.13
rows at 128 sequences, H100 bf16, fp8 and int8 weight-only and B200 bf16 and fp8, read 1.01-1.10 at
0.6 and 0.91-1.02 at 0.5). TensorRT-LLM and NIM rows take their own (``TRTLLM_KV_EFFICIENCY``)."""


def prefill_step_s(
    req: Requirements, weights_s: float, gemm_s: float, flops_per_s: float, pass_s: tuple[float, float]
) -> float:
    """Mean time chunked prefill adds to a decode step (``weights_s``, ``gemm_s``: its GEMM phase's
    weight read and FLOPs, ``decode_speed``), the way vLLM's V1 scheduler builds a step
    (vllm/v1/core/sched/scheduler.py @00024d31, ``Scheduler.schedule``): the running sequences'
    decode tokens are scheduled first, then waiting prompts take what is left of the step's token
    budget (``max_num_batched_tokens``, ``inference.PREFILL_CHUNK_TOKENS``), and all of it runs as
    one forward pass, so the weights are read once for both. A prompt is prefilled in chunks of
    min(prompt, budget − concurrency) tokens; at steady state a fraction f = tokens per step ÷
    chunk of the steps carry one (every step when the prompts arrive faster). A carrying step takes
    max(weight read, decode GEMMs + chunk GEMMs at ``prefill_mfu``), the others max(weight read,
    decode GEMMs), each before the same attention phase; the mean over steps less the plain step
    is what prefill adds. SGLang's scheduler mixes a chunk with the decode batch the same way
    (``--chunked-prefill-size``: 2,048 below 35 GiB, 8,192 on A100/H100/H200, 16,384 on B200;
    sgl-project/sglang python/sglang/srt/server_args.py). Replaces the first fit's memory + every
    step's share of prefill compute, which counted the weight read twice. With the prompt length unknown (no
    chunk size, ``prefill_chunk_tokens`` 0) that additive bound, the slow extreme of the schedule,
    is kept: a NIM 5,000-in row stated without its prompt would otherwise be over-promised
    (tests/test_calibration.py). Only the chunk's GEMMs share the weight read: its attention to
    the prompt's prefix is a kernel of its own (vLLM's FlashAttention varlen pass over the chunk),
    run after the GEMMs, so a carrying step is at least the plain step plus that attention.

    SGLang (``SEPARATE_PREFILL_ENGINES``) does not mix them: a waiting prompt runs as a forward pass
    of its own and the running streams wait for it (``separate_prefill_s``)."""
    tokens = req.prefill_tokens_per_step
    if not tokens or not req.prefill_flops_per_step:
        return 0.0
    mfu = prefill_mfu(req)
    per_token_s = req.prefill_flops_per_step / tokens / (flops_per_s * mfu)
    attention_token_s = req.prefill_attention_flops_per_step / tokens / (flops_per_s * mfu)
    gemm_token_s = per_token_s - attention_token_s
    if req.engine in SEPARATE_PREFILL_ENGINES or req.static_batch:
        return separate_prefill_s(req, gemm_token_s, attention_token_s, pass_s)
    if not req.prefill_chunk_tokens:
        return tokens * per_token_s
    chunk = req.prefill_chunk_tokens
    share = min(1.0, tokens / chunk)
    carried = chunk if share < 1.0 else tokens
    plain = max(weights_s, gemm_s)
    carrying = max(weights_s, gemm_s + carried * gemm_token_s) + carried * attention_token_s
    return share * (carrying - plain)


def training_mfu(req: Requirements, gpu: GpuSpec) -> float:
    """The MFU a training job reaches on ``gpu``: ``tuning.mfu`` when set, else the GPU
    generation's (``TRAINING_MFU_BY_ARCH``, ``DEFAULT_MFU``) × ``MOE_MFU_FACTOR`` for MoE."""
    if req.mfu_tuned:
        return req.mfu
    base = TRAINING_MFU_BY_ARCH.get(gpu.arch, DEFAULT_MFU)
    return base * (MOE_MFU_FACTOR if req.arch.is_moe else 1.0)


def precision_bandwidth_efficiency(precision: str) -> float:
    """``PRECISION_BANDWIDTH_EFFICIENCY`` for a weight precision (16-bit for unknown ones)."""
    return PRECISION_BANDWIDTH_EFFICIENCY.get(precision, DEFAULT_BANDWIDTH_EFFICIENCY)


FAST_MOE_ARCHS: frozenset[str] = frozenset({"Hopper", "Blackwell"})
"""GPU generations ``CURRENT_MOE_EXPERT_LATENCY_S`` was measured on (SGLang on B200 and H200, vLLM
0.15.1 on H100). Elsewhere (A100, L40S, A10G, L4) no current-engine MoE row exists and gpt-fast's
Mixtral rows on A100 would over-promise at it (up to 1.11): ``MOE_EXPERT_LATENCY_S`` (the slow side)."""


def expert_latency_s(req: Requirements, gpu: GpuSpec) -> float:
    """Per routed expert: ``req.moe_expert_latency_s`` (``moe_expert_latency_s`` of the release) on
    ``FAST_MOE_ARCHS``, never below ``MOE_EXPERT_LATENCY_S`` on other GPUs."""
    if gpu.arch in FAST_MOE_ARCHS:
        return req.moe_expert_latency_s
    return max(req.moe_expert_latency_s, MOE_EXPERT_LATENCY_S)


def layer_latency_s(req: Requirements, gpu: GpuSpec) -> float:
    """Fixed per-layer latency of a decode step: ``LAYER_LATENCY_S`` (``EAGER_LAYER_LATENCY_S``
    without a CUDA-graph engine), plus ``expert_latency_s`` per routed expert of a
    mixture-of-experts layer."""
    base = EAGER_LAYER_LATENCY_S if req.engine == "none" else LAYER_LATENCY_S
    if req.engine_generation == "no-cuda-graphs":
        base = max(base, NO_CUDA_GRAPH_LAYER_LATENCY_S)
    return base + (expert_latency_s(req, gpu) * req.arch.experts_active if req.arch.is_moe else 0.0)


def weight_bandwidth_efficiency(req: Requirements) -> float:
    """The weights' bandwidth efficiency: the precision's (``req.bandwidth_efficiency``, or an
    engine generation's own figure for it, ``GENERATION_PRECISION_EFFICIENCY``), capped by an older
    generation's (``GENERATION_BANDWIDTH_CAP``)."""
    own = GENERATION_PRECISION_EFFICIENCY.get(req.engine_generation, {}).get(req.precision)
    eff = req.bandwidth_efficiency if own is None else own
    return min(eff, GENERATION_BANDWIDTH_CAP.get(req.engine_generation, 1.0))


def kv_bandwidth_efficiency(req: Requirements) -> float:
    """``KV_BANDWIDTH_EFFICIENCY``, or an engine generation's own (``GENERATION_KV_EFFICIENCY``)."""
    return GENERATION_KV_EFFICIENCY.get(req.engine_generation, KV_BANDWIDTH_EFFICIENCY)


def step_overhead_s(req: Requirements) -> float:
    """Fixed time per decode step outside the layers: ``V0_STEP_OVERHEAD_S`` for a vLLM release
    before the V1 engine, else ``STEP_OVERHEAD_S``."""
    return V0_STEP_OVERHEAD_S if req.engine_generation == "v0-engine" else STEP_OVERHEAD_S


def decode_speed(req: Requirements, gpu: GpuSpec, gpus: int, *, nvlink: bool = True) -> tuple[float, str]:
    """Decode step time over the GPUs that share one replica's weights, in two phases, as every
    layer runs its kernels one after another: the GEMMs, max(weight bytes ÷ (bandwidth ×
    efficiency), their FLOPs ÷ (TFLOPS × ``decode_mfu``)), then attention, max(KV-cache bytes ÷
    (bandwidth × ``kv_bandwidth_efficiency``), its FLOPs at the same MFU; the KV cache splits over
    the GPUs only as far as its heads do, as the engines and the memory plan hold it: MLA's latent
    sits whole on every rank, and with fewer KV heads than GPUs each rank reads one whole head's
    (``ModelArch.kv_split_heads``), while a hybrid model's recurrent state splits over all of them)
    (memory-bound decode:
    gpu-cloud-facts.md §6; a batch whose GEMMs turn compute-bound still reads its KV cache after
    them, which a single max over the step's bytes and FLOPs hid); plus what the chunked prefill of
    arriving prompts adds (``prefill_step_s``), layers × ``layer_latency_s`` and, over more than
    one GPU, two all-reduces per layer at the interconnect's latency (``ALLREDUCE_LATENCY_S``)."""
    weight_bytes = req.bytes_per_decode_step - req.kv_bytes_per_decode_step - req.state_bytes_per_decode_step
    bandwidth = gpus * gpu.bandwidth_gbps * 1e9
    weights_s = weight_bytes / (bandwidth * weight_bandwidth_efficiency(req))
    kv_bytes = req.kv_bytes_per_decode_step * req.kv_read_factor
    split = req.arch.kv_split_heads
    # MLA's latent, or fewer KV heads than GPUs: each GPU reads a whole head's cache (a query-head
    # read factor already counts each rank's own query heads, so it splits over all of them)
    kv_gpus = gpus if not split or req.kv_read_factor != 1.0 else min(gpus, split)
    state_s = req.state_bytes_per_decode_step / bandwidth  # a recurrent state splits by its own heads
    kv_s = (kv_bytes / (kv_gpus * gpu.bandwidth_gbps * 1e9) + state_s) / kv_bandwidth_efficiency(req)
    link = "nvlink" if nvlink else "pcie"
    allreduce = ALLREDUCE_LATENCY_S[link]
    comm_s = 2 * req.arch.layers * allreduce if gpus > 1 else 0.0
    per_layer_s = layer_latency_s(req, gpu)
    fixed_s = step_overhead_s(req) + req.arch.layers * (per_layer_s + batch_layer_latency_s(req))
    step_ms = step_overhead_s(req) * 1e3
    extra = f" + {step_ms:.3g} ms step + {req.arch.layers} layers × {per_layer_s * 1e6:g} µs"
    if batch_layer_latency_s(req):
        extra += f" (+ {batch_layer_latency_s(req) * 1e6:.3g} µs for the batch's experts and sequences)"
    if req.kv_read_factor != 1.0:
        extra += f" + kv cache read {req.kv_read_factor:g}× (once per query head)"
    elif kv_gpus < gpus:
        whole = "MLA's latent whole on each GPU" if req.arch.is_mla else f"split {kv_gpus} ways, not {gpus}"
        extra += f" + kv cache {whole}" + (f", recurrent state {gpus} ways" if state_s else "")
    if comm_s:
        extra += f" + {2 * req.arch.layers} all-reduces × {allreduce * 1e6:g} µs ({link})"
    tflops = gpu.tflops_at(req.precision)
    if tflops is None:
        step_s = weights_s + kv_s + fixed_s + comm_s
        return step_s, f"memory-bound (no sourced TFLOPS for the compute floor){extra}"
    mfu = decode_mfu(req.precision)
    flops_per_s = gpus * tflops * 1e12
    attention_flops = req.attention_flops_per_decode_step
    gemm_compute_s = (req.flops_per_decode_step - attention_flops) / (flops_per_s * mfu)
    attention_s = max(kv_s, attention_flops / (flops_per_s * mfu))
    prefill_s = prefill_step_s(req, weights_s, gemm_compute_s, flops_per_s, (weights_s, fixed_s + comm_s))
    if prefill_s and req.static_batch:
        extra += f" + prefill passes the streams wait for {prefill_s * 1e3:.2f} ms (one per static batch)"
    elif prefill_s and req.engine in SEPARATE_PREFILL_ENGINES:
        extra += (
            f" + prefill passes the streams wait for {prefill_s * 1e3:.2f} ms ({req.engine} runs them apart)"
        )
    elif prefill_s and req.prefill_chunk_tokens:
        extra += (
            f" + chunked prefill {prefill_s * 1e3:.2f} ms (chunks of {req.prefill_chunk_tokens:g} tokens "
            f"at {prefill_mfu(req):g} MFU, weights read once with the decode)"
        )
    elif prefill_s:
        extra += f" + arriving prompts' prefill {prefill_s * 1e3:.2f} ms (prompt unknown: added in full)"
    step_s = max(weights_s, gemm_compute_s) + attention_s + prefill_s + fixed_s + comm_s
    if gemm_compute_s > weights_s:
        return step_s, f"GEMMs compute-bound at {mfu:.3g} MFU, then attention's KV read{extra}"
    return step_s, f"memory-bound{extra}"
