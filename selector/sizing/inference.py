"""What one serving (or batch inference) replica needs: weights, KV cache, activation
workspace, bytes and FLOPs per decode step, the bandwidth for the token rate; and an
encoder-decoder speech model's state."""

from __future__ import annotations

from dataclasses import replace

from selector.hf_families import QUANTIZED_BYTES
from selector.model_arch import ModelArch
from selector.served import ServedModel, published_quantized_bytes
from selector.sizing.attention import (
    LINEAR_CONV_BYTES,
    LINEAR_STATE_BYTES,
    indexer_bytes_per_token_layer,
    linear_state_bytes_per_sequence,
)
from selector.sizing.engine_memory import (
    PROMPT_LOGIT_BYTES,
    SGLANG_STATE_SLOTS_PER_REQUEST,
    TRANSFORMERS_LAST_LOGIT_FROM,
    TRANSFORMERS_SINGLE_CACHE_FROM,
    VLLM_STATE_SLOTS_PER_REQUEST,
    held_state_slots,
    online_fp8_load_bytes,
)
from selector.sizing.fp8_path import engine_bandwidth_efficiency
from selector.sizing.inference_mfu import PREFILL_MFU
from selector.sizing.memory import (
    decode_weight_bytes,
    image_kv_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
)
from selector.sizing.schedule import SEPARATE_PREFILL_ENGINES
from selector.sizing.speed import MOE_EXPERT_LATENCY_S, moe_expert_latency_s
from selector.sizing.speed_explain import speed_terms
from selector.sizing.terms import BYTES_PER_PARAM, GIB, Requirements, Term
from selector.spec import WorkloadSpec

PREFILL_CHUNK_TOKENS = 8192
"""Tokens a serving engine prefills in one forward pass (chunked prefill); sizes the activation
workspace. vLLM's OpenAI server defaults ``max_num_batched_tokens`` to 8192 on GPUs of 70 GiB or
more other than the A100 and to 2048 elsewhere (vllm/engine/arg_utils.py,
``default_max_num_batched_tokens``); gpufit takes the larger everywhere (errs safe). vLLM 0.19's
profile run peaked 1.2-3.9 GiB above the weights on H100 (llm-d-incubation/llm-d-planner @d3121e0)."""

RUNTIME_RESERVE_GIB = 1.25
"""GPU memory a serving engine holds on every GPU beyond weights, KV cache and activation peak:
non-torch allocations (0.25 GiB at TP 1) and CUDA graphs (0.91 GiB), vLLM 0.19 on H100 for
Llama-3.1-8B (llm-d-incubation/llm-d-planner @d3121e0, accuracy/results/v0.19.0/logs,
2026-04-22). Fitted to the vLLM 0.19 per-GPU rows of docs/calibration.yaml."""

RUNTIME_RESERVE_TP_GIB = 2.0
"""Non-torch memory each GPU adds at tensor parallelism ≥ 2 (NCCL and custom all-reduce buffers):
vLLM 0.19 logged 2.07-2.21 GiB of non-torch memory per GPU at TP 2-4 against 0.25 at TP 1 (same
logs: Llama-3.1-8B TP 2, Llama-3.3-70B FP8 TP 2/4, Mixtral TP 2, Llama-4-Scout TP 4)."""

UNQUANTIZED_EMBEDDING_BYTES = 2.0
"""Weight-only quantisation (GPTQ, AWQ, FP8, bitsandbytes NF4, torchao) leaves the token
embeddings and the output head in 16 bit: vLLM 0.19 loads a w4a16 Llama-3.1-8B as 5.38 GiB and
the FP8 Llama-3.3-70B as 33.88 GiB per GPU at TP 2, where params × the nominal bytes give 3.74
and 32.9 (llm-d-planner @d3121e0 logs); 2 × vocab × hidden × 2 B is 1.96 GiB for Llama-3.1-8B."""


def _kv_precision_bytes(spec: WorkloadSpec) -> float:
    """KV cache precision: as declared, else 4 bytes for fp32 models and 2 (bf16) otherwise,
    which is what serving engines do unless told to quantise the cache."""
    declared = spec.serving.kv_cache_precision if spec.serving else None
    if declared:
        return BYTES_PER_PARAM[declared]
    return 4.0 if spec.precision == "fp32" else 2.0


AUDIO_ACTIVATION_FACTOR = 4
"""Encoder activations of one 30-second window held at once: about four hidden-width tensors
per position (residual stream, attention output, the MLP's input and output), the inference
counterpart of Korthikanti et al.'s per-layer terms with nothing kept for a backward pass.
A gpufit estimate, not a measured figure."""


def audio_state_bytes(spec: WorkloadSpec, arch: ModelArch, terms: list[Term]) -> float:
    """An encoder-decoder speech model's memory beyond its weights, per batch of windows:
    the decoder's KV cache over its own tokens (self-attention, ``context`` = 448 for Whisper)
    and over the encoder's states (cross-attention, 1500 positions for a 30 s window: Radford
    et al. 2022, §2.2), 2 × layers × hidden × bytes per cached position, plus the encoder's
    activations for the window."""
    batch = spec.work.batch if spec.work is not None else 1
    kvb = _kv_precision_bytes(spec)
    positions = arch.context + arch.encoder_positions
    kv = 2.0 * arch.layers * arch.hidden * kvb * positions * batch
    acts = AUDIO_ACTIVATION_FACTOR * arch.encoder_positions * arch.hidden * 2.0 * batch
    terms.append(
        Term(
            "decoder kv cache",
            kv / GIB,
            "GiB",
            f"2 × {arch.layers} layers × {arch.hidden} × {kvb:g} B × ({arch.context} text + "
            f"{arch.encoder_positions} audio positions) × {batch} windows",
        )
    )
    terms.append(
        Term(
            "encoder activations",
            acts / GIB,
            "GiB",
            f"{AUDIO_ACTIVATION_FACTOR} × {arch.encoder_positions} positions × {arch.hidden} × 2 B × {batch}",
        )
    )
    return kv + acts


def _weights(
    spec: WorkloadSpec, arch: ModelArch, wbytes: float, served: ServedModel
) -> tuple[float, str, float | None]:
    """(bytes of the served weights, formula, bytes per expert parameter when experts are stored
    apart): the published format of a natively quantised checkpoint (gpt-oss's MXFP4 experts,
    DeepSeek/Kimi FP8 blocks), else params × the precision's bytes."""
    if served.fp8 == "native" and arch.quantized_format:
        per = QUANTIZED_BYTES[arch.quantized_format]
        rest = arch.params - arch.quantized_params
        formula = (
            f"{arch.quantized_params:.4g} params in {arch.quantized_format} × {per:.4g} B "
            f"+ {rest:.4g} in 16 bit × 2 B (the published checkpoint)"
        )
        experts = per if arch.quantized_format == "mxfp4" and arch.is_moe else None
        return published_quantized_bytes(arch), formula, experts
    if wbytes < UNQUANTIZED_EMBEDDING_BYTES and arch.vocab and arch.hidden:
        embed = min(2.0 * arch.vocab * arch.hidden, arch.params / 2)
        total = (arch.params - embed) * wbytes + embed * UNQUANTIZED_EMBEDDING_BYTES
        return (
            total,
            (
                f"{arch.params - embed:.4g} params × {wbytes:g} B ({spec.precision}) + embeddings and "
                f"output head {embed:.4g} × {UNQUANTIZED_EMBEDDING_BYTES:g} B (left 16-bit by the quantiser)"
            ),
            None,
        )
    return arch.params * wbytes, f"{arch.params:.4g} params × {wbytes:g} B ({spec.precision})", None


def _kv_formula(arch: ModelArch, kvb: float) -> str:
    """The per-token KV arithmetic of the model's attention kind, for ``--explain``."""
    if arch.is_mla:
        text = (
            f"{arch.kv_layers} layers × (kv_lora_rank {arch.kv_lora_rank} + rope {arch.qk_rope_head_dim}) "
            f"× {kvb:g} B (multi-head latent attention)"
        )
    else:
        layers = f"{arch.kv_layers} layers"
        if arch.linear_layers:
            layers = f"{arch.kv_layers} full-attention layers (of {arch.layers}; the rest are linear)"
        elif arch.kv_shared_layers:
            layers = f"{arch.kv_layers} layers (the last {arch.kv_shared_layers} reuse earlier caches)"
        text = f"2 × {layers} × {arch.kv_heads} kv_heads × {arch.head_dim} head_dim × {kvb:g} B"
    if arch.index_head_dim:
        text += (
            f" + {arch.layers} layers × {indexer_bytes_per_token_layer(arch):g} B indexer key "
            f"(index_head_dim {arch.index_head_dim} in FP8 + scales)"
        )
    if arch.family == "gpt_oss":
        text += "; attention sinks are one scalar per head (no cache)"
    return text


def serving_requirements(
    spec: WorkloadSpec,
    arch: ModelArch,
    wbytes: float,
    eff: float,
    terms: list[Term],
    common: Requirements,
) -> Requirements:
    serving = spec.serving
    assert serving is not None
    batch = serving.concurrency
    kvb = _kv_precision_bytes(spec)
    served = spec.served()
    weights, weights_formula, expert_bytes = _weights(spec, arch, wbytes, served)
    per_token = kv_bytes_per_token(arch, kvb)
    kv = kv_cache_bytes(arch, kvb, serving.context_tokens, batch)
    image_tokens = serving.images_per_request * (serving.image_tokens or arch.image_tokens)
    if image_tokens:
        kv += image_kv_bytes(arch, kvb, serving.context_tokens, image_tokens, batch)
    engine = spec.decode_engine  # the server that decodes and holds the memory
    per_state = linear_state_bytes_per_sequence(arch)
    state = per_state * batch  # a step reads the running streams' states
    slots = held_state_slots(engine, batch)
    held_state = per_state * slots  # the engines keep more than the streams
    prompt_tokens = serving.prompt_tokens or serving.context_tokens  # unstated: the whole context
    if spec.tuning.bandwidth_efficiency is None:
        eff = engine_bandwidth_efficiency(spec.precision, engine, served.fp8)  # W8A8 fp8 checkpoints
    own = serving.own_server if engine == "none" else "chunked"
    chunk = (
        int(prompt_tokens * batch)
        if own != "chunked"
        else min(PREFILL_CHUNK_TOKENS, serving.context_tokens * batch)
    )
    legacy = own == "transformers-legacy"  # every prompt position's logits, the KV cache twice
    prompt_logits = prompt_tokens * batch * arch.vocab * PROMPT_LOGIT_BYTES if legacy else 0.0
    legacy_cache = kv if legacy else 0.0
    expert_s = launched_moe_expert_latency_s(engine)
    activations = chunk * (4 * arch.hidden + 3 * arch.ffn) * 2.0 + batch * arch.vocab * 4.0
    step_weights, step_formula = decode_weight_bytes(
        arch, weights / arch.params if expert_bytes is None else 2.0, batch, expert_bytes
    )
    mean_context, mean_note = mean_decode_context(serving.context_tokens, serving.prompt_tokens)
    kv_read = kv_cache_bytes(arch, kvb, mean_context, batch)
    if image_tokens:
        kv_read += image_kv_bytes(arch, kvb, mean_context, image_tokens, batch)
    step_bytes = step_weights + kv_read + state
    attention_flops = 4.0 * arch.kv_layers * arch.heads * arch.head_dim * mean_context * batch
    step_flops = 2.0 * (arch.params_active - arch.vision_params) * batch + attention_flops
    prefill_tokens = prefill_tokens_per_step(serving.context_tokens, serving.prompt_tokens, batch)
    prompt_len = prefill_prompt_tokens(serving.context_tokens, serving.prompt_tokens)
    prefill_flops = prefill_flops_per_token(arch, prompt_len) * prefill_tokens
    prefill_chunk = prefill_chunk_tokens(serving.context_tokens, serving.prompt_tokens, batch)
    rate = serving.tokens_per_s_per_stream
    min_bw = step_bytes * rate / eff / 1e9 if rate else 0.0
    if arch.vision_params:
        terms.append(
            Term(
                "vision encoder (in the weights)",
                arch.vision_params * wbytes / GIB,
                "GiB",
                f"{arch.vision_params:.3g} params × {wbytes:g} B; read at prefill only",
            )
        )
    terms += [
        Term("weights", weights / GIB, "GiB", weights_formula),
        Term("kv cache per token", per_token / 1024, "KiB", _kv_formula(arch, kvb)),
        Term(
            "kv cache",
            kv / GIB,
            "GiB",
            f"per token × {serving.context_tokens} context × {batch} concurrent"
            + (
                f"; {min(arch.window_layers, arch.kv_layers)} sliding-window layers keep "
                f"min(context, {arch.sliding_window})"
                if arch.sliding_window and arch.window_layers
                else ""
            )
            + (
                f"; + {serving.images_per_request} images × {image_tokens // serving.images_per_request} "
                "tokens each"
                + (f" in {arch.image_token_layers} cross-attention layers" if arch.image_token_layers else "")
                if image_tokens
                else ""
            ),
        ),
    ]
    if state:
        terms.append(
            Term(
                "linear-attention state",
                held_state / GIB,
                "GiB",
                f"{arch.linear_layers} Gated DeltaNet layers × ({arch.linear_value_heads} × "
                f"{arch.linear_key_dim} × {arch.linear_value_dim} × {LINEAR_STATE_BYTES:g} B recurrent "
                f"+ conv (2 × {arch.linear_key_heads} × {arch.linear_key_dim} + {arch.linear_value_heads} × "
                f"{arch.linear_value_dim}) × {arch.linear_conv_kernel - 1} × {LINEAR_CONV_BYTES:g} B) "
                + (
                    f"× {slots} slots (SGLang keeps {SGLANG_STATE_SLOTS_PER_REQUEST} per stream with its "
                    "radix cache, + 1 padding; gpufit sets --max-mamba-cache-size)"
                    if engine == "sglang"
                    else f"× {slots} pages (vLLM's prefix caching keeps up to "
                    f"{VLLM_STATE_SLOTS_PER_REQUEST} per stream, 16-bit states padded to attention blocks)"
                    if engine == "vllm"
                    else f"× {batch} sequences"
                )
                + "; fixed whatever the context; splits over every GPU by its own heads",
            )
        )
    terms += [
        Term(
            "activation workspace",
            activations / GIB,
            "GiB",
            f"{chunk} prefill tokens × (4·hidden + 3·ffn) × 2 B + {batch} × vocab × 4 B logits",
        ),
        Term(
            "average kv occupancy",
            mean_context,
            "tokens",
            mean_note,
        ),
        Term(
            "bytes read per decode step",
            step_bytes / 1e9,
            "GB",
            f"{step_formula} + kv cache at {mean_context:g} tokens × {batch} sequences"
            + (" + linear-attention state" if state else ""),
        ),
        Term(
            "flops per decode step",
            step_flops / 1e12,
            "TFLOP",
            f"2 × {arch.params_active - arch.vision_params:.4g} active params × {batch} sequences "
            f"+ attention 4 × {arch.kv_layers} layers × {arch.heads} heads × {arch.head_dim} × "
            f"{mean_context:g} tokens × {batch}",
        ),
        Term(
            "prefill interference",
            prefill_tokens,
            "tokens/step",
            (
                "prompt tokens arriving per decode step: concurrency × prompt ÷ output tokens"
                if serving.prompt_tokens
                else f"prompt length unknown: {UNKNOWN_PROMPT_SHARE:g} of the context taken as prompt "
                "(estimate, errs slow; set serving.prompt_tokens)"
            )
            + (
                "; each prompt a forward pass of its own that the streams wait for (SGLang: 'prefill passes')"
                if engine in SEPARATE_PREFILL_ENGINES
                else f"; in chunks of {prefill_chunk:g} tokens = min(prompt, {PREFILL_CHUNK_TOKENS} budget − "
                f"{batch} decodes) sharing the step's weight read (vLLM V1 scheduler)"
                if serving.prompt_tokens
                else "; added to every step in full (the chunk size is unknown)"
            )
            + f", at {PREFILL_MFU:g} MFU; each 2 × active params + causal attention 2 × "
            f"{arch.kv_layers} layers × {arch.heads} heads × {arch.head_dim} × {prompt_len:g} prompt"
            if prefill_tokens
            else "none at concurrency 1",
        ),
        *speed_terms(spec, arch, eff, expert_s, engine),
        Term(
            "runtime reserve",
            RUNTIME_RESERVE_GIB,
            "GiB/GPU",
            f"non-torch memory + CUDA graphs (vLLM 0.19 logs), + {RUNTIME_RESERVE_TP_GIB:g} GiB per GPU "
            "at tensor parallelism ≥ 2 (NCCL buffers)",
        ),
    ]
    if rate:
        terms.append(
            Term(
                "bandwidth for the token rate",
                min_bw,
                "GB/s",
                f"bytes per step × {rate:g} tokens/s ÷ {eff:g} efficiency",
            )
        )
    if prompt_logits:
        terms.append(
            Term(
                "prompt logits",
                prompt_logits / GIB,
                "GiB",
                f"{batch} × {prompt_tokens:g} prompt tokens × vocab {arch.vocab} × {PROMPT_LOGIT_BYTES:g} B: "
                "serving.own_server transformers-legacy keeps every prompt position's logits, upcast to fp32 "
                f"(transformers before {TRANSFORMERS_LAST_LOGIT_FROM}, #30860/#31292)",
            )
        )
    if legacy_cache:
        terms.append(
            Term(
                "previous step's kv cache",
                legacy_cache / GIB,
                "GiB",
                "serving.own_server transformers-legacy holds the KV cache twice at the end of a step "
                f"(transformers before {TRANSFORMERS_SINGLE_CACHE_FROM}, PR #30536)",
            )
        )
    load = _load_peak(spec, arch, served, engine, terms)
    return replace(
        common,
        bandwidth_efficiency=eff,
        sharded_bytes=weights + activations,
        kv_bytes=kv + legacy_cache,
        state_bytes=held_state,
        replicated_bytes=RUNTIME_RESERVE_GIB * GIB + prompt_logits,
        legacy_cache_bytes=legacy_cache,
        bytes_per_decode_step=step_bytes,
        flops_per_decode_step=step_flops,
        attention_flops_per_decode_step=attention_flops,
        prefill_flops_per_step=prefill_flops,
        prefill_attention_flops_per_step=prefill_attention_flops_per_token(arch, prompt_len) * prefill_tokens,
        prefill_tokens_per_step=prefill_tokens,
        prefill_chunk_tokens=prefill_chunk if prefill_tokens and serving.prompt_tokens else 0.0,
        kv_bytes_per_decode_step=kv_read,
        state_bytes_per_decode_step=state,
        runtime_reserve_bytes=RUNTIME_RESERVE_GIB * GIB,
        runtime_reserve_tp_bytes=RUNTIME_RESERVE_TP_GIB * GIB,
        min_bandwidth_gbps=min_bw,
        train_flops=0.0,
        terms=tuple(terms),
        concurrency=batch,
        tokens_per_s_per_stream=rate,
        tokens_per_s_total=serving.tokens_per_s_total,
        batch_tokens=serving.tokens,
        work_tflop=None,
        weights_file_bytes=served.download_bytes,
        engine=engine,
        load_bytes=load,
        activation_bytes=activations,
        moe_expert_latency_s=expert_s,
    )


def launched_moe_expert_latency_s(engine: str) -> float:
    """``speed.moe_expert_latency_s`` of the engine gpufit launches: the slowest over its pinned
    releases (``selector/data/engines.yaml``); the slow value for a server gpufit does not launch."""
    if engine not in ("vllm", "sglang"):
        return MOE_EXPERT_LATENCY_S
    from selector.engines import pinned_versions

    return max(
        (moe_expert_latency_s(engine, v) for v in pinned_versions(engine)), default=MOE_EXPERT_LATENCY_S
    )


def mean_decode_context(context: int, prompt: int | None) -> tuple[float, str]:
    """Tokens of KV cache a decode step reads per sequence on average: over a generation the
    context grows from the prompt to prompt + output, so prompt + output ÷ 2 when the prompt length
    is known (issue 24: TensorRT-LLM static batches of 128 in / 2048 out measured 0.46× gpufit's
    per-stream rate at the full context, 0.77-0.81× at the mean). Unknown: the full context, which
    errs slow."""
    if prompt is None or prompt >= context:
        return float(context), f"full context {context} (prompt length unknown: errs slow)"
    mean = prompt + (context - prompt) / 2.0
    return mean, f"prompt {prompt} + output {context - prompt} ÷ 2 (mean over a generation)"


UNKNOWN_PROMPT_SHARE = 0.5
"""Share of the context taken as prompt for prefill interference when ``serving.prompt_tokens`` is
not given at concurrency ≥ 2: an estimate, with the KV read still at the full context so both terms
err slow. Chat traffic is less prompt-heavy (ShareGPT: 161 prompt / 338 output tokens on average,
Kwon et al. 2023, arXiv 2309.06180, §6.1); without any prefill term NIM's 5,000-in / 500-out rows
at concurrency 25-50 (docs/calibration.yaml, fitted) were over-promised by up to 15 %, at 0.5 by
at most 6 % (review of branch i24m, finding 2)."""


def prefill_prompt_tokens(context: int, prompt: int | None) -> float:
    """The length of an arriving prompt: ``serving.prompt_tokens``, else ``UNKNOWN_PROMPT_SHARE`` of
    the context."""
    return UNKNOWN_PROMPT_SHARE * context if prompt is None else float(min(prompt, context))


def prefill_flops_per_token(arch: ModelArch, prompt: float) -> float:
    """FLOPs of one prompt token, averaged over a prompt of ``prompt`` tokens: 2 × active params
    for the matmuls, plus its attention to the prefix before it. A token at position p takes
    4 × layers × heads × head_dim × p (QKᵀ and AV, 2 FLOPs a multiply-add), so causal attention
    averages 2 × layers × heads × head_dim × prompt per token (FlashAttention-2's FLOP count,
    4 · seqlen² · head_dim · heads, halved for causal: Dao 2023, arXiv 2307.08691, §4.1). Llama-3.1-8B
    at a 30k prompt: +49 % over the matmuls; at 2k, +3 %."""
    return 2.0 * (arch.params_active - arch.vision_params) + prefill_attention_flops_per_token(arch, prompt)


def prefill_attention_flops_per_token(arch: ModelArch, prompt: float) -> float:
    """The causal-attention part of ``prefill_flops_per_token``."""
    return 2.0 * arch.kv_layers * arch.heads * arch.head_dim * prompt


def prefill_chunk_tokens(context: int, prompt: int | None, concurrency: int) -> float:
    """Prompt tokens one prefilling step carries: the prompt (``UNKNOWN_PROMPT_SHARE`` of the
    context when unknown) up to what the step's token budget (``PREFILL_CHUNK_TOKENS``, vLLM's
    ``max_num_batched_tokens``) leaves after the running sequences' decode tokens, which vLLM's V1
    scheduler takes first (vllm/v1/core/sched/scheduler.py @00024d31, ``Scheduler.schedule``)."""
    whole = prefill_prompt_tokens(context, prompt)
    return max(1.0, min(whole, float(PREFILL_CHUNK_TOKENS - concurrency)))


def prefill_tokens_per_step(context: int, prompt: int | None, concurrency: int) -> float:
    """Prompt tokens an engine prefills inside each decode step at steady state: every stream
    brings a new prompt once per ``output`` steps, so concurrency × prompt ÷ output (chunked
    prefill shares the step; NIM's Llama-3.3-70B inter-token latency grows from 21.8 ms at
    concurrency 5 to 59.7 ms at 50 with 5,000-token prompts). None at concurrency 1 (the prompt is
    prefilled before the first token); ``UNKNOWN_PROMPT_SHARE`` of the context when the prompt
    length is unknown."""
    if concurrency < 2:
        return 0.0
    if prompt is None:
        return concurrency * UNKNOWN_PROMPT_SHARE / (1.0 - UNKNOWN_PROMPT_SHARE)
    if prompt >= context:
        return 0.0
    return concurrency * prompt / (context - prompt)


def _load_peak(
    spec: WorkloadSpec, arch: ModelArch, served: ServedModel, engine: str, terms: list[Term]
) -> float:
    """Bytes at the peak of loading when the engine quantises a 16-bit checkpoint to FP8 (the
    worst of its pinned releases; ``engine_memory.online_fp8_load_bytes``); 0 otherwise."""
    if served.fp8 != "online" or engine not in ("vllm", "sglang"):
        return 0.0
    from selector.engines import online_fp8, pinned_versions

    worst = max(
        ((online_fp8_load_bytes(arch, online_fp8(engine, v).load_peak), v) for v in pinned_versions(engine)),
        default=(0.0, ""),
    )
    load, version = worst
    peak = online_fp8(engine, version).load_peak if version else ""
    how = (
        "the whole 16-bit checkpoint before it is quantised: params × 2 B"
        if peak == "full_16bit"
        else "FP8 weights plus one 16-bit layer: params × 1 B + params ÷ layers × 2 B"
    )
    terms.append(
        Term(
            "load peak (FP8 quantised at load)",
            load / GIB,
            "GiB",
            f"{engine} {version} loads {served.repo} as {how}; the GPUs must hold it before the KV cache",
        )
    )
    return load
