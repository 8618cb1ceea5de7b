"""What the model server itself does with GPU memory, beyond the model's own bytes: the peak
while it loads a 16-bit checkpoint it quantises to FP8, and the share SGLang keeps out of its
static pool (weights + KV cache) for activations and CUDA graphs. Separate from the model's
arithmetic on purpose: both depend on the engine release, not on the model.
"""

from __future__ import annotations

from selector.model_arch import ModelArch

LOAD_PEAKS = ("full_16bit", "layerwise")


def online_fp8_load_bytes(arch: ModelArch, peak: str) -> float:
    """Bytes on the GPUs at the peak of loading a 16-bit checkpoint the engine quantises to FP8
    (engines.yaml ``online_fp8``):

    - ``full_16bit``: the whole checkpoint in 16 bit before any layer is quantised (SGLang
      0.5.23's DefaultModelLoader, vLLM before 0.16: "we load the model at original precision
      before quantizing down to 8-bits, so you need enough memory to load the whole model",
      vLLM docs quoted in vllm-project/vllm#19967): params × 2 B;
    - ``layerwise``: vLLM ≥ 0.16 creates the FP8 weights on the meta device and materialises
      and quantises one layer at a time (vllm-project/vllm#31914): the FP8 model plus one layer
      in 16 bit, params × 1 B + (params ÷ layers) × 2 B.
    """
    if peak == "full_16bit":
        return arch.params * 2.0
    if peak == "layerwise":
        return arch.params * 1.0 + arch.params / max(arch.layers, 1) * 2.0
    raise ValueError(f"unknown load peak {peak!r} (one of {', '.join(LOAD_PEAKS)})")


def _prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill CUDA graphs SGLang 0.5.23 captures up to ``max_bs`` tokens
    (``generate_prefill_cuda_graph_batch_sizes`` in sglang/srt/arg_groups/cuda_graph_hook.py)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return sum(1 for s in sizes if s <= max_bs)


def sglang_reserved_mib(gpu_mib: float, tp: int, concurrency: int, mla: bool) -> float:
    """MiB SGLang 0.5.23 keeps outside its static pool when ``--mem-fraction-static`` is unset
    (sglang/srt/arg_groups/memory_hook.py ``handle_gpu_memory_settings`` and
    ``reserve_for_graph_mb``): 512 + max(chunked prefill, 2048) × 1.5 + TP/8 × 1024 + decode
    graphs (their largest batch × 2) + prefill graphs (8 each, or 1.5 GiB with MLA), at least
    10 GiB on GPUs above 60 GiB. Its chunked prefill and decode batch follow the GPU's memory;
    the decode batch is capped by ``--max-running-requests`` (gpufit sets it to the concurrency)."""
    gib = 1024.0
    if gpu_mib < 20 * gib:
        chunk, bs = 2048, 8
    elif gpu_mib < 35 * gib:
        chunk, bs = 4096, 48 if tp < 4 else 160
    elif gpu_mib < 60 * gib:
        chunk, bs = 4096, 32 if tp < 4 else 160
    elif gpu_mib < 160 * gib:
        chunk, bs = 8192, 256 if tp < 4 else 512
    else:
        chunk, bs = 16384, 512
    bs = min(bs, concurrency)
    prefill = 1.5 * gib if mla else _prefill_graph_sizes(chunk) * 8
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * gib + bs * 2 + prefill
    if gpu_mib > 60 * gib:
        reserved = max(reserved, 10 * gib)
    return reserved


VLM_FACTOR = 0.95
"""SGLang scales the fraction of a vision-language model by 0.95 for a ViT-L-sized encoder
(``adjust_mem_fraction_for_vlm``), leaving room to run the image encoder."""


def sglang_static_fraction(gpu_mib: float, tp: int, concurrency: int, mla: bool, multimodal: bool) -> float:
    """``--mem-fraction-static`` as SGLang would choose it: (memory − reserved) ÷ memory,
    rounded to 3 places, × 0.95 for a multimodal model; gpufit renders it explicitly and plans
    the weights and KV cache within it."""
    fraction = round((gpu_mib - sglang_reserved_mib(gpu_mib, tp, concurrency, mla)) / gpu_mib, 3)
    return round(fraction * VLM_FACTOR, 3) if multimodal else fraction


SGLANG_STATE_SLOTS_PER_REQUEST = 5
"""Recurrent-state slots SGLang 0.5.23 keeps per running request of a hybrid (linear-attention)
model with its radix cache on, its default: ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` = 3
plus, under the default overlap schedule with ``--mamba-radix-cache-strategy auto`` resolved to
``extra_buffer``, ``get_mamba_tracking_slots`` = 2 (sglang/srt/mem_cache/kv_cache_configurator.py
``_calculate_mamba_ratio``, mem_cache/allocation_sizing.py, arg_groups/overrides.py; the wheel's
own code). 5 is the most it keeps (3 where the model takes ``no_buffer``; speculative decoding,
which ``serving.engine_args`` can turn on, needs more). Left to itself SGLang gives that pool
``mamba_full_memory_ratio`` (0.9) ÷ 1.9 of what the weights leave of its static pool, whatever the
concurrency, and the KV cache the rest, which can hold far fewer tokens than a plan needs; gpufit
sets ``--max-mamba-cache-size`` to this many slots per stream (``ServerLaunch.state_slots``; SGLang
then caps the running requests at that ÷ its own ratio, never below the concurrency) and plans
them, plus the pool's one padding slot (``held_state_slots``)."""


VLLM_STATE_SLOTS_PER_REQUEST = 3
"""Recurrent-state pages vLLM 0.34 holds per running request of a hybrid model: it turns prefix
caching on for hybrid generative models (``ModelConfig.is_prefix_caching_supported``), which sets
``mamba_cache_mode`` to ``align`` (``MambaModelConfig.verify_and_update_config`` in
vllm/model_executor/models/config.py); a request then holds 2 + speculative + prefill-checkpoint
pages (``MambaSpec.max_memory_usage_bytes``, vllm/v1/kv_cache_interface.py), and the Gated
DeltaNet layer asks for 1 checkpoint page where FlashInfer runs its prefill
(vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py ``get_kv_cache_spec``): 3 at most
without speculative decoding (the third only on a prefill's last chunk; steady decode holds 1-2),
out of the same pool as the KV cache (the wheel's own code). Each page is counted at gpufit's
float32 state size: vLLM keeps the state in the model's 16-bit dtype
(``MambaStateDtypeCalculator._mamba_state_dtype``) but pads each page up to whole 64-token
attention blocks (platforms/interface.py ``_align_hybrid_block_size``; +7.5 % to +43 % for
Qwen3-Next at TP 1-8), which twice the 16-bit size covers. Speculative decoding through
``serving.engine_args`` adds a page per draft token, which no plan counts."""


def held_state_slots(engine: str, concurrency: int) -> int:
    """Recurrent states a server holds for ``concurrency`` streams of a hybrid model: SGLang the
    ``--max-mamba-cache-size`` gpufit sets + its pool's padding slot, vLLM
    ``VLLM_STATE_SLOTS_PER_REQUEST`` a stream, any other server one."""
    if engine == "sglang":
        return SGLANG_STATE_SLOTS_PER_REQUEST * concurrency + 1
    if engine == "vllm":
        return VLLM_STATE_SLOTS_PER_REQUEST * concurrency
    return concurrency


PROMPT_LOGIT_BYTES = 6.0
"""Bytes per prompt position and vocabulary entry a Hugging Face Transformers ``generate`` holds at
prefill before 4.45: every position's logits in the model's 16-bit dtype, then upcast to fp32
(``logits = logits.float()`` in most ``*ForCausalLM.forward``, huggingface/transformers issue
#30860), 2 + 4 B. PR #31292 (in 4.45, ``TRANSFORMERS_LAST_LOGIT_FROM``) computes only the last
position's in ``generate``. A server gpufit does not launch (``serving.engine: none``) is sized
with them when ``serving.own_server: transformers-legacy`` says it is such a release; by default
(``transformers``) and in both transformers modes it prefills every prompt in one forward pass,
unchunked, the most a current server holds. The prompt is the whole context when
``serving.prompt_tokens`` is not given. Prefill logits and the doubled cache peak at different
moments; gpufit adds them (an over-count on the safe side). Consistent with Qwen2's speed benchmark
(transformers 4.38.2: 5.3-5.9 B per prompt logit above gpufit's other terms at 6k-30k prompts) and
with Qwen2.5's (4.46) and Qwen3's (4.51.3), which show none; not read off them."""

TRANSFORMERS_LAST_LOGIT_FROM = "4.45.0"
"""The first transformers release whose ``generate`` keeps only the last position's logits."""

TRANSFORMERS_SINGLE_CACHE_FROM = "4.42.0"
"""The first transformers release whose ``generate`` holds the KV cache once: it creates a
``DynamicCache`` up front (PR #30536, "Reduce by 2 the memory requirement in generate()"), whose
layers are replaced as they are concatenated. Before it (the tuple cache, and 4.36-4.41, whose
``generate`` kept the legacy tuple in its arguments while the model wrapped the same tensors in a
cache), the previous step's keys and values stay referenced while the forward pass concatenates
the next ones by ``torch.cat``: a step ends holding the KV cache twice. ``serving.own_server:
transformers-legacy`` is sized with the second copy (an over-count for 4.42-4.44). Consistent with
Optimum's GPTQ benchmark (transformers 4.32-4.35: Llama-2-13B holds about a KV cache more than
gpufit's other terms at batch 4-16); not read off it."""
