"""How an engine schedules a decode step beyond its bytes and FLOPs (issue 24, round 6): SGLang's
prefill passes the running streams wait for, TensorRT-LLM's 2023 static batches and its
per-query-head KV reads before XQA, and the time a batch adds per layer for the MoE experts and
linear-attention sequences it touches. ``speed.decode_speed`` applies them; the terms read off a
calibration row name it (docs/calibration.yaml, split ``fitted``)."""

from __future__ import annotations

from selector.sizing.memory import expected_experts_touched
from selector.sizing.terms import Requirements


def engine_release_key(text: str) -> tuple[int, ...]:
    """A release's dotted numbers, compared as numbers ("0.10.0" after "0.8.0"; a part's leading
    digits count, so "0.7a" is 0.7; a leading "v", as in a tag "v0.6.1", is dropped)."""
    text = text.removeprefix("v")
    digits = (part[: len(part) - len(part.lstrip("0123456789"))] for part in text.split("."))
    return tuple(int(d) for d in digits if d)


def _before(release: str, first: str | None) -> bool:
    return first is not None and engine_release_key(release) < engine_release_key(first)


PER_QUERY_HEAD_KV_BEFORE: dict[str, str] = {"tensorrt-llm": "0.7"}
"""Per engine, the first release whose decode attention reads a grouped-query KV head once for its
group. TensorRT-LLM before 0.7 decoded GQA with its masked multi-head attention kernel, one thread
block per query head, each loading its KV head's whole cache (``dim3 grid{params.num_heads, ...}``
and ``hi_kv = hi / qhead_per_kv`` in cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/
decoderMaskedMultiheadAttentionLaunch.h and ...Template.h, v0.5.0 and v0.6.1); the XQA kernel for
GQA first appears in v0.7.0. gpufit takes the cache as read once per query head (``kv_read_factor``:
8 for Llama-2-70B's 64 heads on 8 KV heads), the slow extreme: sibling blocks may hit in L2. NVIDIA
measured the whole effect once, Llama-2-70B on one H200 at 128 in / 2,048 out, 1,227 tok/s/GPU
without XQA against 2,941 with it (docs/source/blogs/XQA-kernel.md, 2024-01-30): at 8 reads gpufit
reaches at most 1,085 there (12 % slow); about 5-6 reads would reproduce it, but then more fresh
TensorRT-LLM v0.5 Llama-2-70B rows over-promise, so the slow extreme is kept. The evidence for v0.6.1
is mixed: its release code has no XQA, and the page its rows cite (performance.md @138f96d) says
nothing of it, but a later revision of that page (@77d24b5), still quoting the v0.6.1 figures, sets
``export TRTLLM_ENABLE_XQA=1`` in its Llama-2-70B commands and says GQA kernels were 'enabled where
our tests displayed performance benefits'. Read once, the held-out v0.6.1 Llama-2-70B TP 2 row
over-promises (1.90); read 8 times it reads 0.79. gpufit launches neither engine; this times the
calibration rows that state such a release."""

STATIC_BATCH_BEFORE: dict[str, str] = {"tensorrt-llm": "0.8"}
"""Per engine, the first release whose published tables are not static batches: TensorRT-LLM's
2023 performance tables (v0.5-v0.7) ran ``gptSessionBenchmark``, which prefills a whole batch's
prompts in one context pass and then decodes them together (NVIDIA/TensorRT-LLM
docs/source/performance.md of those releases); the published throughput counts that pass. Later
tables use in-flight batching, which a row from them would be timed with (the current schedule)."""


def kv_read_factor(name: str, release: str, heads: int, kv_heads: int) -> float:
    """How many times a decode step of ``name`` ``release`` reads each KV head's cache: once per
    query head of its group before ``PER_QUERY_HEAD_KV_BEFORE``, else once."""
    if not kv_heads or not _before(release, PER_QUERY_HEAD_KV_BEFORE.get(name)):
        return 1.0
    return heads / kv_heads


def static_batch(name: str, release: str) -> bool:
    """Whether ``name`` ``release``'s published rows are static batches (``STATIC_BATCH_BEFORE``)."""
    return _before(release, STATIC_BATCH_BEFORE.get(name))


SEPARATE_PREFILL_ENGINES: frozenset[str] = frozenset({"sglang"})
"""Engines that run arriving prompts as forward passes of their own while the running streams wait.
SGLang's scheduler builds a prefill batch first and returns it alone ('# Run prefill first if
possible', ``Scheduler.get_next_batch_to_run``, sgl-project/sglang python/sglang/srt/managers/
scheduler.py); it mixes a chunk into the decode batch only with ``--enable-mixed-chunk``, default
False in the engine's own parser (selector/data/engine_flags/sglang-0.5.23.json), a flag gpufit
does not set (machine/serving.py). vLLM's V1 scheduler mixes them (``speed.prefill_step_s``)."""

SGLANG_PREFILL_BATCH_TOKENS = 2048
"""Most prompt tokens one SGLang prefill pass takes (``--chunked-prefill-size``: 2,048 below 35 GiB,
4,096 below 60 GiB, 8,192 on A100-80GB/H100/H200, 16,384 on B200; sgl-project/sglang
server_args.py): the smallest, so prompts need the most passes (the slow side on every GPU)."""


def separate_prefill_passes(req: Requirements) -> float:
    """Prefill passes a decode step waits for where prompts run apart (``separate_prefill_s``): one
    per arriving prompt while they come slower than a pass takes, then one per
    ``SGLANG_PREFILL_BATCH_TOKENS`` of them; the prompt unknown, the batches alone."""
    tokens = req.prefill_tokens_per_step
    batches = max(1.0, tokens / SGLANG_PREFILL_BATCH_TOKENS)
    return min(tokens / req.prefill_chunk_tokens, batches) if req.prefill_chunk_tokens else batches


def separate_prefill_s(
    req: Requirements, gemm_token_s: float, attention_token_s: float, pass_s: tuple[float, float]
) -> float:
    """Mean time per decode step that the running streams wait for prefill passes of their own
    (``SEPARATE_PREFILL_ENGINES``, or a static batch, ``Requirements.static_batch``). Prompts
    arrive at a = tokens per step ÷ prompt per step (a request ends and the next begins every
    ``output`` steps per stream); each pass carries one prompt while a < 1, and all that arrived,
    up to ``SGLANG_PREFILL_BATCH_TOKENS``, once they come faster: passes = min(a, max(1, tokens ÷
    batch tokens)); a static batch takes one pass for all its prompts. A pass takes the weights'
    read or its tokens' GEMMs, whichever is longer, plus their attention and the step's fixed time
    (``pass_s``: the weights' read, and the step overhead, layer latencies and all-reduces of a
    decode step). The prompt unknown, one pass a step (or more for more than a batch of tokens):
    the slow side."""
    tokens = req.prefill_tokens_per_step
    passes = separate_prefill_passes(req)
    if req.static_batch and req.prefill_chunk_tokens:
        passes = tokens / (req.prefill_chunk_tokens * req.concurrency)  # one pass per batch of prompts
    per_pass = tokens / passes
    weights_s, fixed_s = pass_s
    return passes * (max(weights_s, per_pass * gemm_token_s) + per_pass * attention_token_s + fixed_s)


def prefill_step_share(req: Requirements) -> float:
    """Share of the inter-token gaps a prompt's prefill lengthens, at most 1: under vLLM's mixed
    steps the share of steps that carry a chunk (``speed.prefill_step_s``: tokens per step ÷ chunk;
    every running stream's gap is that step); under SGLang's separate passes the passes per step
    ``separate_prefill_s`` counts (more than the gaps they lengthen, as a chunked prompt's passes
    run back to back: the slow side). A static batch's prefill is its time to first token, in no
    gap: 0. The prompt unknown, every gap (the slow side). A source's median gap is a step without
    prefill below one half (``selector.calibration_compare``)."""
    tokens = req.prefill_tokens_per_step
    if not tokens or req.static_batch:
        return 0.0
    if not req.prefill_chunk_tokens:
        return 1.0
    if req.engine in SEPARATE_PREFILL_ENGINES:
        return min(1.0, separate_prefill_passes(req))
    return min(1.0, tokens / req.prefill_chunk_tokens)


MOE_TOUCHED_EXPERT_LATENCY_S: dict[str, float] = {"sglang": 0.8e-6, "vllm": 1.9e-6}
"""Time a mixture-of-experts layer adds per expert a decode batch touches beyond one token's
(``expected_experts_touched``), by the engine's schedule: the grouped GEMM runs a tile for every
touched expert, however few tokens it gets, so a step of a hundred sequences costs far more than
its weight bytes. SGLang 0.5.6 on 8 B200 (TP 8) decodes gpt-oss-120b at 2.31 ms a token alone and
14.31 at concurrency 100 (ShareGPT, mean TPOT; sgl-project/sgl-cookbook OpenAI/GPT-OSS.md
@7b5bd9c, 2026-01-30; issue 24's fresh set, row ``fresh-sglcb-gptoss120b-b200-tp8-sharegpt-c100``,
fitted). SGLang: 0.8 µs, the smallest tenth of a µs at which that row, timed with SGLang's separate
prefill passes and ``speed.CURRENT_MOE_EXPERT_LATENCY_S``, reads no faster than 1.05 (1.048; 0.7
reads 1.10). vLLM mixes the prompts into its steps (``speed.prefill_step_s``): 1.9 µs, the value at
which the same row timed with vLLM's schedule (a release from ``speed.FAST_MOE_FROM``) reads no
faster than 1.05 (1.044; 1.8 reads 1.08), an ESTIMATE on the slow side (review of round 6, must-fix
1); vLLM 0.15.1's gpt-oss-120b rows at concurrency 4-64 on H100 (InferenceX issue #828) read below
1 with it, except the 1K/8K 64-stream row (1.03, fitted: below).
Any other engine takes the larger. Refitted in session 7 when the per-routed-expert latency of the
releases gpufit launches fell from 25 to 7 µs (they were 0.3 and 1.4 µs on top of 25; 0.9 and 2.0
at 7), and in session 8 when it rose to 9 µs (GLM-4.6's batch-1 rows); a release
still timed at 25 µs takes them on top of it, which errs slow (vLLM 0.7.4's DeepSeek-R1 rows read
0.75-1.01, not the 0.83-1.08 the older values gave; 0.73-1.06 since session 16 reads MLA's latent
cache whole on every GPU). Session 10 tried SGLang's 0.8 µs for vLLM from
0.15.1, as vLLM 0.15.1's 1k/1k rows read 0.65-0.74 with it, and took it back on review: no vLLM MoE
row above 64 streams or on B200 bounds it, SGLang's own rows timed under vLLM's schedule then read up
to 1.59, and the same InferenceX sweep's 1K/8K table puts gpt-oss-120b at TP 8 and 64 streams at
16.01 ms a token, which reads 1.41 at 0.8 µs and 1.03 at 1.9 (gathered later that session, row
``fresh10-ix828-gptoss120b-h100-vllm0151-tp8-1k8k-c64``, fitted): vLLM keeps 1.9, which that row
binds (1.055 at 1.8)."""

LINEAR_ATTENTION_SEQUENCE_LATENCY_S = 2e-6
"""Time each sequence of a decode batch adds to a linear-attention (Gated DeltaNet) layer: its
recurrent state is updated per sequence and head, beyond the state's bytes. SGLang 0.5.6 on 8 B200
decodes Qwen3-Next-80B-A3B at 6.19 ms a token alone and 50.87 at concurrency 100 (ShareGPT, mean
TPOT; sgl-cookbook Qwen/Qwen3-Next.md @7b5bd9c, 2026-03-01; row
``fresh-sglcb-qwen3next80b-b200-tp8-sharegpt-c100``, fitted after ``MOE_TOUCHED_EXPERT_LATENCY_S``):
2 µs is the smallest whole µs at which that row reads no faster than 1.05 under SGLang's schedule
with the session-8 terms (0.96; 1 µs reads 1.07, 0 reads 1.21; under vLLM's, with its larger expert
term, it reads 0.88). It was 1 µs with session 7's. Since session 16, with each of its 8 GPUs
reading one of its 2 KV heads' cache and an eighth of its recurrent state, it reads 0.96 (1 µs:
1.07). One row: an ESTIMATE."""


def moe_touched_expert_latency_s(engine: str) -> float:
    """``MOE_TOUCHED_EXPERT_LATENCY_S`` for ``engine`` (the largest for one without its own)."""
    return MOE_TOUCHED_EXPERT_LATENCY_S.get(engine, max(MOE_TOUCHED_EXPERT_LATENCY_S.values()))


def batch_layer_latency_s(req: Requirements) -> float:
    """What a decode step's batch adds per layer, as a mean over all layers: the engine's
    ``MOE_TOUCHED_EXPERT_LATENCY_S`` per expert the batch touches beyond one token's (charged on
    every layer of a MoE model, dense ones too: the slow side), and
    ``LINEAR_ATTENTION_SEQUENCE_LATENCY_S`` per sequence of each linear-attention layer, spread
    over the layers."""
    arch = req.arch
    moe = 0.0
    if arch.is_moe:
        extra = expected_experts_touched(arch, req.concurrency) - arch.experts_active
        moe = moe_touched_expert_latency_s(req.engine) * max(0.0, extra)
    linear = LINEAR_ATTENTION_SEQUENCE_LATENCY_S * req.concurrency * arch.linear_layers / max(arch.layers, 1)
    return moe + linear
