"""The sizing arithmetic against hand-worked figures from published sources."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from selector.catalog import InstanceType, load_gpus
from selector.presets import arch_from_preset
from selector.sizing import (
    BYTES_PER_PARAM,
    GIB,
    Rejection,
    Shape,
    decode_weight_bytes,
    expected_experts_touched,
    fit,
    kv_bytes_per_token,
    lora_params,
    requirements,
    usable_gib,
)
from selector.sizing.fit import USABLE_MEMORY_FRACTION, fit_serving_at
from selector.sizing.gpu_memory import per_gpu_steady_bytes
from selector.sizing.inference import PREFILL_CHUNK_TOKENS, prefill_chunk_tokens
from selector.sizing.inference_mfu import PREFILL_MFU, decode_mfu
from selector.sizing.speed import (
    ALLREDUCE_LATENCY_S,
    DEFAULT_BANDWIDTH_EFFICIENCY,
    KV_BANDWIDTH_EFFICIENCY,
    LAYER_LATENCY_S,
    STEP_OVERHEAD_S,
    decode_speed,
    engine_generation,
    prefill_step_s,
)
from selector.sizing.training import LOSS_BYTES_PER_LOGIT
from selector.spec import SpecError, parse_spec
from tests.conftest import QLORA_65B, SERVE_70B, merged, spec_of

GPUS = load_gpus()


def instance(
    gpu: str, n: int = 1, nvlink: bool = False, interconnect: str | None = None, memory_gib: float = 1024.0
) -> InstanceType:
    return InstanceType(
        cloud="aws",
        name=f"test-{n}x{gpu}",
        machine_type="t",
        gpu=GPUS[gpu],
        gpu_count=n,
        vcpus=8 * n,
        memory_gib=memory_gib,
        nvlink=nvlink,
        node_interconnect=interconnect,
    )


def shape(result: Shape | Rejection) -> Shape:
    assert isinstance(result, Shape), result
    return result


def rejection(result: Shape | Rejection) -> Rejection:
    assert isinstance(result, Rejection), result
    return result


# --- KV cache (vLLM paper, Kwon et al. SOSP'23; gpu-cloud-facts.md §6) -------------------------


def test_kv_cache_per_token_llama_3_1() -> None:
    assert kv_bytes_per_token(arch_from_preset("llama-3.1-8b"), 2) == 128 * 1024
    assert kv_bytes_per_token(arch_from_preset("llama-3.1-70b"), 2) == 320 * 1024


def test_kv_cache_per_token_opt_13b_without_gqa() -> None:
    """vLLM paper §2.3: OPT-13B needs 800 KB of KV cache per token (2·40 layers·5120·2 B)."""
    spec = spec_of(SERVE_70B, model={"params_b": 13, "layers": 40, "hidden": 5120, "heads": 40})
    assert kv_bytes_per_token(spec.arch(), 2) == 800 * 1024


def test_kv_cache_scales_with_context_and_concurrency() -> None:
    req = requirements(spec_of(SERVE_70B))
    assert req.kv_bytes == 320 * 1024 * 8192 * 16  # = 40 GiB
    fp8 = requirements(spec_of(SERVE_70B, serving={**SERVE_70B["serving"], "kv_cache_precision": "fp8"}))
    assert fp8.kv_bytes == req.kv_bytes / 2 and fp8.needs_fp8


# --- weights and training state --------------------------------------------------------------


def test_weight_bytes_per_precision() -> None:
    assert BYTES_PER_PARAM["bf16"] == 2 and BYTES_PER_PARAM["fp8"] == 1
    # GPTQ/AWQ at group size 128: 4 bits + a 16-bit scale and a 4-bit zero per 128 weights
    assert BYTES_PER_PARAM["int4"] * 8 == pytest.approx(4.156, abs=1e-3)
    assert BYTES_PER_PARAM["nf4"] == pytest.approx(0.516, abs=1e-3)  # QLoRA: ~4.13 bits/param


def _full(params_b: float, optimizer: str = "adamw", precision: str = "bf16") -> float:
    spec = spec_of(
        QLORA_65B,
        task="finetune-full",
        precision=precision,
        model={"params_b": params_b, "layers": 32, "hidden": 4096, "heads": 32},
        training={"tokens": "1e9", "optimizer": optimizer},
    )
    return requirements(spec).sharded_bytes / (params_b * 1e9)


def test_mixed_precision_adamw_is_16_bytes_per_param() -> None:
    """Transformer Math 101: 2 (bf16 weights) + 2 (grads) + 12 (fp32 master, m, v) bytes."""
    assert _full(7) == 16
    assert _full(7, "adamw-8bit") == 10  # 8-bit Adam: 6 B of optimiser state
    assert _full(7, "sgd") == 12  # momentum SGD: 8 B
    assert _full(7, precision="fp32") == 16  # fp32 weights, grads, m, v


def test_qlora_65b_fits_one_48gb_gpu_but_not_24gb() -> None:
    """QLoRA (Dettmers et al. 2023): a 65B model fine-tunes on a single 48 GB GPU (memory only: no
    TTL, as eager training on one L40S runs past the example's 48 h), with its adapters in bf16 as
    the paper's qlora.py runs them under --bf16; PEFT's default fp32 adapters (gpufit's default,
    4 B more a parameter (weights and gradients) and an fp32 input copy a layer) miss the L40S."""
    req = requirements(spec_of(QLORA_65B, teardown=None))  # bf16 adapters
    assert req.vram_gib_per_replica < 40.5  # usable on an L40S
    on_l40s = shape(fit(req, instance("L40S")))
    assert on_l40s.gpus_per_replica == 1 and on_l40s.vram_gib_per_gpu < usable_gib(GPUS["L40S"])
    assert rejection(fit(req, instance("L4"))).filter == "vram"
    fp32 = requirements(
        spec_of(merged(QLORA_65B, training={**QLORA_65B["training"], "adapter_dtype": "fp32"}), teardown=None)
    )
    assert rejection(fit(fp32, instance("L40S"))).filter == "vram"
    assert fp32.vram_gib_per_replica < req.vram_gib_per_replica + 3.5  # 800M adapter params × 4 B


def test_full_finetune_of_65b_needs_over_780_gb() -> None:
    """QLoRA §1: 16-bit full fine-tuning of LLaMA-65B needs more than 780 GB of GPU memory."""
    req = requirements(spec_of(QLORA_65B, task="finetune-full", precision="bf16"))
    assert req.sharded_bytes / 1e9 > 780


def test_lora_base_of_gpt3_is_350_gb() -> None:
    """LoRA (Hu et al. 2021, §4.2): GPT-3 175B trains in 350 GB with LoRA (the frozen 16-bit base)."""
    spec = spec_of(
        QLORA_65B,
        task="finetune-lora",
        precision="bf16",
        model={"params_b": 175, "layers": 96, "hidden": 12288, "heads": 96},
        training={"tokens": "1e8", "lora_rank": 4},
    )
    req = requirements(spec)
    base = next(t.value for t in req.terms if t.name == "frozen base weights") * 2**30
    assert base / 1e9 == pytest.approx(350)
    # the adapters (PEFT's fp32) and their AdamW state shard with the base: 4 + 12 B a parameter
    adapters = lora_params(req.arch, 4)
    assert req.sharded_bytes == pytest.approx(base + adapters * (4 + 12))


def test_lora_parameter_count_for_llama_2_7b() -> None:
    """Rank 64 on every linear layer of Llama-2-7B: 64·32·(4·8192 + 3·15104) = 159.9M."""
    assert lora_params(arch_from_preset("llama-2-7b"), 64) == 64 * 32 * (4 * 8192 + 3 * (4096 + 11008))


def test_activation_recomputation_shrinks_activations() -> None:
    """Without recompute every layer keeps the measured full fine-tune figure (20 + 4·kv/heads +
    8·ffn/hidden s·b·h); with full recompute 2·s·b·h a layer plus one layer's worth."""
    base = merged(QLORA_65B, task="finetune-full", precision="bf16")
    full = requirements(
        spec_of(base, training={"tokens": "1e9", "sequence_tokens": 2048, "activation_checkpointing": False})
    )
    ckpt = requirements(
        spec_of(base, training={"tokens": "1e9", "sequence_tokens": 2048, "activation_checkpointing": True})
    )
    s, h, layers = 2048, 8192, 80
    logits = s * 32000 * LOSS_BYTES_PER_LOGIT
    per = 20 + 4 * full.arch.kv_heads / full.arch.heads + 8 * full.arch.ffn / h
    assert full.replicated_bytes == pytest.approx(per * s * h * layers + logits)
    assert ckpt.replicated_bytes == pytest.approx(2 * s * h * layers + per * s * h + logits)


def test_saved_activations_reproduce_the_measured_llama_layers() -> None:
    """The activation lines against the measured cells (HF LlamaForCausalLM + PEFT, SDPA, middle
    layer, CUDA's 1-byte dropout masks): ffn 3.5h with kv heads a quarter of the heads (Llama-3's
    shape) and ffn 2.6875h with kv = heads (Llama-2's); LoRA with PEFT's default fp32 adapters."""
    from selector.model_arch import ModelArch
    from selector.sizing.activations import saved_bytes_per_sbh

    llama3 = ModelArch(
        "l3", "transformer", 1e9, 1e9, layers=2, hidden=1024, heads=16, kv_heads=4, ffn=3584, vocab=256
    )
    llama2 = ModelArch(
        "l2", "transformer", 1e9, 1e9, layers=2, hidden=1024, heads=16, kv_heads=16, ffn=2752, vocab=256
    )
    fp32, bf16 = "fp32", "bf16"  # PEFT's default fp32 adapters; bf16 ones (torchtune, litgpt bf16-true)
    measured = {
        (llama3, "finetune-full", "all-linear", False, fp32): 49.07,
        (llama2, "finetune-full", "all-linear", False, fp32): 45.57,
        (llama3, "finetune-lora", "q-v", False, fp32): 42.20,
        (llama2, "finetune-lora", "q-v", False, fp32): 40.32,
        (llama3, "finetune-lora", "q-v", True, fp32): 44.20,
        (llama3, "finetune-lora", "all-linear", False, fp32): 72.51,
        (llama2, "finetune-lora", "all-linear", False, fp32): 67.38,
        (llama3, "finetune-lora", "all-linear", True, fp32): 82.01,
        (llama2, "finetune-lora", "all-linear", True, fp32): 76.07,
        (llama3, "finetune-qlora", "q-v", False, bf16): 45.13,  # bitsandbytes < 0.43.2 (emulated)
        (llama3, "finetune-qlora", "q-v", True, bf16): 51.13,
        (llama3, "finetune-lora", "q-v", False, bf16): 36.13,
        (llama2, "finetune-lora", "q-v", False, bf16): 34.26,
        (llama3, "finetune-lora", "q-v", True, bf16): 40.13,
        (llama3, "finetune-lora", "all-linear", False, bf16): 45.29,
        (llama3, "finetune-lora", "all-linear", True, bf16): 62.79,
        (llama2, "finetune-lora", "all-linear", True, bf16): 58.48,
        (llama3, "finetune-qlora", "all-linear", True, bf16): 73.79,
    }
    for (arch, task, targets, dropout, adapters), value in measured.items():
        assert saved_bytes_per_sbh(arch, task, targets, dropout, adapters)[0] == pytest.approx(
            value, abs=0.35
        )


def test_selective_recomputation_keeps_what_no_recompute_keeps_and_runs_half_the_matmuls() -> None:
    """``activation_checkpointing: selective``: memory as without recomputation (the measured
    full fine-tune layer, the most torchtitan's op policy or Megatron's selective keeps), 1 FLOP per parameter
    per token more (every second forward matmul run again), between none (6) and full (8)."""
    base = merged(QLORA_65B, task="finetune-full", precision="bf16")
    by_mode = {
        mode: requirements(spec_of(base, training={"tokens": "1e9", "activation_checkpointing": mode}))
        for mode in (False, "selective", True)
    }
    none, selective, full = by_mode[False], by_mode["selective"], by_mode[True]
    assert selective.replicated_bytes == none.replicated_bytes > full.replicated_bytes
    params = selective.arch.params_active
    assert selective.train_flops - none.train_flops == pytest.approx(1.0 * params * 1e9)
    assert none.train_flops < selective.train_flops < full.train_flops
    (compute,) = (t for t in selective.terms if t.name == "training compute")
    assert "recomputed matmuls (selective)" in compute.formula


def test_activation_checkpointing_takes_true_false_or_selective_only() -> None:
    base = merged(QLORA_65B, task="finetune-full", precision="bf16")
    with pytest.raises(SpecError) as err:
        spec_of(base, training={"tokens": "1e9", "activation_checkpointing": "partial"})
    (line,) = [p for p in err.value.problems if "activation_checkpointing" in str(p)]
    assert "selective" in str(line)


# --- parallelism ----------------------------------------------------------------------------


def test_70b_bf16_takes_tp4_on_80gb_gpus_and_needs_nvlink() -> None:
    req = requirements(spec_of(SERVE_70B))
    a100 = shape(fit(req, instance("A100-80GB", 8, nvlink=True, interconnect="efa")))
    assert a100.tensor_parallel == 4 and a100.replicas_per_instance == 2 and a100.instances == 1
    pcie = rejection(fit(req, instance("L40S", 8)))
    assert pcie.filter == "nvlink" and "over PCIe" in pcie.reason
    allowed = requirements(spec_of(SERVE_70B, placement={"allow_pcie_tensor_parallel": True}))
    slow = rejection(fit(allowed, instance("L40S", 8)))  # 160 all-reduces a step over PCIe
    assert slow.filter == "speed"
    modest = merged(SERVE_70B, serving={**SERVE_70B["serving"], "tokens_per_s_per_stream": 10})
    allowed = requirements(spec_of(modest, placement={"allow_pcie_tensor_parallel": True}))
    assert shape(fit(allowed, instance("L40S", 8))).tensor_parallel == 8


def test_405b_spans_two_h100_nodes_but_one_h200_node() -> None:
    serving = {"context_tokens": 4096, "concurrency": 4}
    spec = spec_of(
        SERVE_70B, model={"preset": "llama-3.1-405b"}, serving={**serving, "engine": "none"}
    )  # a server of the user's own: gpufit's engines run a replica on one node
    launched = requirements(spec_of(SERVE_70B, model={"preset": "llama-3.1-405b"}, serving=serving))
    refused = rejection(fit(launched, instance("H100", 8, nvlink=True, interconnect="efa")))
    assert refused.filter == "vram" and "replica on one node" in refused.reason
    req = requirements(spec)
    h100 = shape(fit(req, instance("H100", 8, nvlink=True, interconnect="efa")))
    assert h100.nodes_per_replica == 2 and h100.needs_node_interconnect and h100.instances == 2
    assert shape(fit(req, instance("H200", 8, nvlink=True, interconnect="efa"))).nodes_per_replica == 1
    no_efa = rejection(fit(req, instance("H100", 8, nvlink=True)))
    assert no_efa.filter == "vram" and "lacks EFA/GPUDirect" in no_efa.reason


def test_kv_heads_bound_kv_sharding() -> None:
    """Past kv_heads GPUs, KV heads replicate instead of splitting."""
    from selector.sizing import per_gpu_gib

    req = requirements(spec_of(SERVE_70B))
    at8 = per_gpu_gib(req, 8, 8) - req.sharded_bytes / 8 / GIB
    at16 = per_gpu_gib(req, 16, 8) - req.sharded_bytes / 16 / GIB
    assert at8 == pytest.approx(at16)


# --- precision support ------------------------------------------------------------------------


def test_fp8_requires_fp8_tensor_cores() -> None:
    modest = merged(SERVE_70B, serving={**SERVE_70B["serving"], "tokens_per_s_per_stream": 10})
    req = requirements(spec_of(modest, precision="fp8", model={"preset": "llama-3.1-8b"}))
    assert rejection(fit(req, instance("A100-80GB"))).filter == "fp8"
    assert isinstance(fit(req, instance("L40S")), Shape)


def test_bf16_requires_ampere() -> None:
    req = requirements(
        spec_of(SERVE_70B, model={"preset": "llama-2-7b"}, serving={"context_tokens": 2048, "concurrency": 1})
    )
    assert rejection(fit(req, instance("T4"))).filter == "precision"
    fp16 = requirements(
        spec_of(
            SERVE_70B,
            precision="fp16",
            model={"params_b": 3, "layers": 26, "hidden": 3200, "heads": 32},
            serving={"context_tokens": 1024, "concurrency": 1},
        )
    )
    assert isinstance(fit(fp16, instance("T4")), Shape)


# --- speed ------------------------------------------------------------------------------------


def test_decode_speed_is_bandwidth_bound() -> None:
    """Llama-2-7B bf16, one stream on an A100-80GB: 13.48 GB ÷ (2039 GB/s × 0.62) + KV ÷ (2039 GB/s
    × 0.5) + 0.5 ms per step + 32 layers × 20 µs."""
    spec = spec_of(
        SERVE_70B, model={"preset": "llama-2-7b"}, serving={"context_tokens": 1024, "concurrency": 1}
    )
    req = requirements(spec)
    weights = 6.74e9 * 2
    kv = 2 * 32 * 32 * 128 * 2 * 1024
    assert DEFAULT_BANDWIDTH_EFFICIENCY == 0.62
    step = weights / (2039e9 * 0.62) + kv / (2039e9 * KV_BANDWIDTH_EFFICIENCY) + 32 * LAYER_LATENCY_S
    step += STEP_OVERHEAD_S
    assert shape(fit(req, instance("A100-80GB"))).tokens_per_s_per_stream == pytest.approx(1 / step)


def test_quantised_decode_is_slower_per_byte_and_keeps_16bit_embeddings() -> None:
    """int4 weight-only reaches less of the bandwidth than bf16 (torchao's H100 GB/s) and its
    embeddings and output head stay 16-bit (vLLM 0.19 loads a w4a16 Llama-3.1-8B as 5.38 GiB)."""
    serving = {"context_tokens": 256, "concurrency": 1}
    bf16 = requirements(spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, serving=serving))
    int4 = requirements(
        spec_of(SERVE_70B, precision="int4", model={"preset": "llama-3.1-8b"}, serving=serving)
    )
    assert int4.bandwidth_efficiency < bf16.bandwidth_efficiency
    weights = next(t.value for t in int4.terms if t.name == "weights")
    assert weights == pytest.approx(5.38, rel=0.05)
    fast = shape(fit(bf16, instance("H100"))).tokens_per_s_per_stream
    slow = shape(fit(int4, instance("H100"))).tokens_per_s_per_stream
    assert fast is not None and slow is not None and slow < 2.6 * fast  # not the 4× of bytes alone


def test_pcie_all_reduce_is_slower_than_nvlink() -> None:
    spec = spec_of(
        SERVE_70B,
        model={"preset": "llama-2-7b"},
        serving={"context_tokens": 1024, "concurrency": 1},
        placement={"allow_pcie_tensor_parallel": True},
    )
    req = requirements(spec)
    nvlink = shape(fit_serving_at(req, instance("A10G", 4, nvlink=True), 4)).tokens_per_s_per_stream
    pcie = shape(fit_serving_at(req, instance("A10G", 4), 4)).tokens_per_s_per_stream
    assert nvlink is not None and pcie is not None
    gap = 1 / pcie - 1 / nvlink
    assert gap == pytest.approx(2 * 32 * (ALLREDUCE_LATENCY_S["pcie"] - ALLREDUCE_LATENCY_S["nvlink"]))


def test_mean_context_and_prefill_interference_need_the_prompt_length() -> None:
    """Unknown prompt length: KV read at the full context and half the context taken as prompt for
    prefill interference (both err slow). Known: prompt + output ÷ 2, and at concurrency > 1 each
    step carries concurrency × prompt ÷ output prefill tokens."""
    base = {"context_tokens": 2176, "concurrency": 64}
    unknown = requirements(spec_of(SERVE_70B, model={"preset": "llama-2-7b"}, serving=base))
    known = requirements(
        spec_of(SERVE_70B, model={"preset": "llama-2-7b"}, serving={**base, "prompt_tokens": 128})
    )
    per_token = 2 * 32 * 32 * 128 * 2
    assert unknown.kv_bytes_per_decode_step == pytest.approx(per_token * 2176 * 64)
    assert known.kv_bytes_per_decode_step == pytest.approx(per_token * (128 + 2048 / 2) * 64)
    attention = 2 * 32 * 32 * 128  # causal prefill attention per prompt token, × prompt length
    unknown_per_token = 2 * 6.74e9 + attention * 1088  # prompt unknown: half the context
    assert unknown.prefill_flops_per_step == pytest.approx(unknown_per_token * 64 * 1.0, rel=0.01)
    known_per_token = 2 * 6.74e9 + attention * 128
    assert known.prefill_flops_per_step == pytest.approx(known_per_token * 64 * 128 / 2048, rel=0.01)
    assert known.kv_bytes == unknown.kv_bytes  # memory still holds the full context


def test_a_long_prompts_prefill_counts_its_attention_to_the_prefix() -> None:
    """Each prompt token attends to the tokens before it: per token, 2 × active params plus causal
    attention 2 × layers × heads × head_dim × prompt (FlashAttention-2's count, halved for causal).
    A 30k prompt of Llama-3.1-8B costs ~1.5× the matmuls per token, so it cannot be promised at
    the linear rate; a 3k prompt ~1.05×."""

    def per_prompt_token(prompt: int) -> float:
        serving = {"context_tokens": prompt + 1024, "prompt_tokens": prompt, "concurrency": 16}
        req = requirements(spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, serving=serving))
        return req.prefill_flops_per_step / req.prefill_tokens_per_step

    linear = 2 * 8.03e9
    assert per_prompt_token(30_000) == pytest.approx(linear + 2 * 32 * 32 * 128 * 30_000, rel=0.01)
    assert per_prompt_token(30_000) / linear > 1.45
    assert 1.02 < per_prompt_token(3_000) / linear < 1.06


def test_a_short_prompts_prefill_attention_is_not_hidden_under_the_weight_read() -> None:
    """Only the chunk's GEMMs share the step's weight read; its attention to the prefix runs as a
    kernel of its own. With the step memory-bound, chunked prefill still adds that attention."""
    serving = {"context_tokens": 640, "prompt_tokens": 512, "concurrency": 8}
    req = requirements(spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, serving=serving))
    flops = load_gpus()["H100"].tflops_at("bf16") * 1e12  # type: ignore[operator]
    assert 0 < req.prefill_attention_flops_per_step < req.prefill_flops_per_step
    # read-bound: the weight read 1 s, the decode GEMMs nil
    added = prefill_step_s(req, weights_s=1.0, gemm_s=1e-6, flops_per_s=flops, pass_s=(1.0, 0.0))
    share = req.prefill_tokens_per_step / req.prefill_chunk_tokens
    attention = share * req.prefill_chunk_tokens * 2 * 32 * 32 * 128 * 512 / (flops * PREFILL_MFU)
    assert added == pytest.approx(attention)


def test_chunked_prefill_shares_the_weight_read_with_the_decode() -> None:
    """vLLM V1 schedules decode tokens first and a prompt chunk in the rest of the token budget, in
    one forward pass: a step carrying a chunk costs max(weight read, decode + chunk GEMMs) before the
    attention phase, not weight read + chunk compute. The model is faster than the additive first
    fit, slower than no prefill."""
    serving = {"context_tokens": 5500, "prompt_tokens": 5000, "concurrency": 50}
    spec = spec_of(SERVE_70B, model={"preset": "llama-3.1-70b"}, precision="fp8", serving=serving)
    req = requirements(spec)
    h100 = load_gpus()["H100"]
    step, _ = decode_speed(req, h100, 2)
    none, _ = decode_speed(dataclasses.replace(req, prefill_flops_per_step=0.0), h100, 2)
    fp8_flops = h100.tflops_at("fp8") * 1e12  # type: ignore[operator]
    additive = none + req.prefill_flops_per_step / (2 * fp8_flops * PREFILL_MFU)
    assert none < step < additive
    assert req.prefill_chunk_tokens == 5000 and req.prefill_tokens_per_step == pytest.approx(500)
    # one step in ten carries a 5,000-token chunk: the saving is that step's weight read
    memory = step - (additive - none)
    assert 0 < additive - step < none and memory < step


def test_a_compute_bound_batch_still_reads_its_kv_cache_after_the_gemms() -> None:
    """Each layer runs its GEMMs, then attention: at 384 sequences of Llama-3.1-8B on an H100 the
    GEMMs outrun the weight read, and the step is their compute plus the KV read, not the larger of
    the two (which the single max over the step's bytes and FLOPs gave). At batch 1 the two phases
    are both reads and the step is their sum, as before."""
    serving = {"context_tokens": 2048, "prompt_tokens": 1024, "concurrency": 384}
    req = requirements(spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, serving=serving))
    req = dataclasses.replace(req, prefill_flops_per_step=0.0, prefill_tokens_per_step=0.0)
    h100 = load_gpus()["H100"]
    bandwidth = h100.bandwidth_gbps * 1e9
    weights_s = (req.bytes_per_decode_step - req.kv_bytes_per_decode_step) / (
        bandwidth * req.bandwidth_efficiency
    )
    kv_s = req.kv_bytes_per_decode_step / (bandwidth * KV_BANDWIDTH_EFFICIENCY)
    flops = h100.tflops_at("bf16") * 1e12 * decode_mfu("bf16")  # type: ignore[operator]
    gemm_s = (req.flops_per_decode_step - req.attention_flops_per_decode_step) / flops
    assert gemm_s > weights_s and kv_s > req.attention_flops_per_decode_step / flops
    step, why = decode_speed(req, h100, 1)
    fixed = step - gemm_s - kv_s
    assert 0 < fixed < 0.1 * step  # the per-step overhead and per-layer latencies only
    assert step > max(gemm_s + req.attention_flops_per_decode_step / flops, weights_s + kv_s) + fixed / 2
    assert "GEMMs compute-bound" in why and "then attention" in why


def test_a_replicated_kv_cache_is_read_whole_on_every_gpu() -> None:
    """Tensor parallelism splits the KV read only as far as the KV heads go: DeepSeek-V3's MLA
    latent sits whole on each of 8 GPUs (every rank reads all of it, as in one GPU's step), and
    Qwen3-235B-A22B's 4 KV heads on 8 GPUs are read as on 4; Llama-3.1-70B's 8 heads split 8 ways."""
    h200 = load_gpus()["H200"]

    def kv_phase_s(preset: str, gpus: int) -> float:
        serving = {"context_tokens": 8192, "prompt_tokens": 4096, "concurrency": 64}
        req = requirements(spec_of(SERVE_70B, model={"preset": preset}, serving=serving))
        req = dataclasses.replace(req, prefill_flops_per_step=0.0, prefill_tokens_per_step=0.0)
        with_kv, _ = decode_speed(req, h200, gpus)
        no_kv = dataclasses.replace(
            req,
            bytes_per_decode_step=req.bytes_per_decode_step - req.kv_bytes_per_decode_step,
            kv_bytes_per_decode_step=0.0,
            flops_per_decode_step=req.flops_per_decode_step - req.attention_flops_per_decode_step,
            attention_flops_per_decode_step=0.0,
        )
        without, _ = decode_speed(no_kv, h200, gpus)
        return with_kv - without

    def whole_s(preset: str) -> float:
        serving = {"context_tokens": 8192, "prompt_tokens": 4096, "concurrency": 64}
        req = requirements(spec_of(SERVE_70B, model={"preset": preset}, serving=serving))
        return req.kv_bytes_per_decode_step / (h200.bandwidth_gbps * 1e9 * KV_BANDWIDTH_EFFICIENCY)

    assert kv_phase_s("deepseek-v3", 8) == pytest.approx(whole_s("deepseek-v3"), rel=1e-6)
    assert kv_phase_s("qwen3-235b-a22b", 8) == pytest.approx(whole_s("qwen3-235b-a22b") / 4, rel=1e-6)
    assert kv_phase_s("llama-3.1-70b", 8) == pytest.approx(whole_s("llama-3.1-70b") / 8, rel=1e-6)


def test_a_recurrent_state_splits_over_every_gpu_where_its_kv_cache_cannot() -> None:
    """Qwen3-Next keeps 2 KV heads in its attention layers but 32 value heads in its Gated DeltaNet
    layers: at TP 8 vLLM and SGLang split the recurrent state 8 ways (by its own heads) and the KV
    cache only 2 ways. Both the memory plan and the decode step's read say so."""
    serving = {"context_tokens": 4096, "prompt_tokens": 2048, "concurrency": 64}
    req = requirements(spec_of(SERVE_70B, model={"preset": "qwen3-next-80b-a3b"}, serving=serving))
    assert req.state_bytes == 3 * req.state_bytes_per_decode_step > 0  # vLLM's three pages a stream
    assert req.arch.kv_split_heads == 2
    no_state = dataclasses.replace(req, state_bytes=0.0)
    held = per_gpu_steady_bytes(req, 8, req.arch.kv_split_heads)
    assert held - per_gpu_steady_bytes(no_state, 8, 2) == pytest.approx(req.state_bytes / 8)
    h200 = load_gpus()["H200"]
    quiet = dataclasses.replace(req, prefill_flops_per_step=0.0, prefill_tokens_per_step=0.0)
    step, _ = decode_speed(quiet, h200, 8)
    without, _ = decode_speed(
        dataclasses.replace(
            quiet,
            bytes_per_decode_step=quiet.bytes_per_decode_step - quiet.state_bytes_per_decode_step,
            state_bytes_per_decode_step=0.0,
        ),
        h200,
        8,
    )
    read = req.state_bytes_per_decode_step / (8 * h200.bandwidth_gbps * 1e9 * KV_BANDWIDTH_EFFICIENCY)
    assert step - without == pytest.approx(read, rel=1e-6)


def test_decode_step_time_rises_with_the_batch() -> None:
    """More sequences never make a step faster, through the turn from memory-bound to compute-bound
    GEMMs and beyond 256 sequences (one decode MFU at every batch), for 16-bit, fp8 and int8
    weight-only Llama-3.1-8B on an H100."""
    h100 = load_gpus()["H100"]
    for precision in ("bf16", "fp8", "int8"):
        steps = [
            decode_speed(
                requirements(
                    spec_of(
                        SERVE_70B,
                        model={"preset": "llama-3.1-8b"},
                        precision=precision,
                        serving={"context_tokens": 2048, "prompt_tokens": 1024, "concurrency": n},
                    )
                ),
                h100,
                1,
            )[0]
            for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024)
        ]
        assert all(later > earlier for earlier, later in itertools.pairwise(steps)), precision


def test_explain_names_the_chunked_prefill_schedule() -> None:
    """--explain states the chunk a prefilling step carries and that it shares the weight read; with
    the prompt unknown it says the prefill is added in full."""
    known = {"context_tokens": 4096, "prompt_tokens": 3072, "concurrency": 32}
    req = requirements(spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, serving=known))
    term = next(t for t in req.terms if t.name == "prefill interference")
    assert "chunks of 3072 tokens" in term.formula and "weight read" in term.formula
    step = next(t for t in shape(fit(req, instance("H100"))).terms if t.name == "decode step")
    assert "chunked prefill" in step.formula and "chunks of 3072 tokens" in step.formula
    unknown = requirements(
        spec_of(
            SERVE_70B, model={"preset": "llama-3.1-8b"}, serving={"context_tokens": 4096, "concurrency": 32}
        )
    )
    step = next(t for t in shape(fit(unknown, instance("H100"))).terms if t.name == "decode step")
    assert "prompt unknown: added in full" in step.formula


def test_prefill_chunk_is_bounded_by_the_token_budget() -> None:
    assert prefill_chunk_tokens(32768, 30000, 64) == PREFILL_CHUNK_TOKENS - 64
    assert prefill_chunk_tokens(2176, 128, 64) == 128
    assert prefill_chunk_tokens(4096, None, 8) == 2048  # half the context when the prompt is unknown
    unknown = requirements(spec_of(SERVE_70B, serving={"context_tokens": 4096, "concurrency": 8}))
    assert unknown.prefill_chunk_tokens == 0  # no chunk credit without the prompt: additive, errs slow


def test_engine_generation_by_release() -> None:
    assert engine_generation("tgi", "1.0.3") == "no-cuda-graphs"
    assert engine_generation("tgi", "1.4.5") == "no-cuda-graphs"
    assert engine_generation("tgi", "2.0.0") == "current"
    assert engine_generation("vllm", "0.6.3") == "v0-engine"
    assert engine_generation("vllm", "0.7.3") == "v0-engine"
    assert engine_generation("vllm", "0.8.0") == "current"
    assert engine_generation("vllm", "0.23.0") == "current"
    assert engine_generation("sglang", "0.4.0") == "current"


def test_token_rate_target_rejects_slow_gpus_and_sets_bandwidth_need() -> None:
    spec = spec_of(
        SERVE_70B,
        model={"preset": "llama-3.1-8b"},
        serving={"context_tokens": 4096, "concurrency": 8, "tokens_per_s_per_stream": 60},
    )
    req = requirements(spec)
    step_bytes = 8.03e9 * 2 + 128 * 1024 * 4096 * 8
    assert req.min_bandwidth_gbps == pytest.approx(step_bytes * 60 / DEFAULT_BANDWIDTH_EFFICIENCY / 1e9)
    slow = rejection(fit(req, instance("L40S")))
    assert slow.filter == "speed" and slow.gap > 0
    assert shape(fit(req, instance("H100"))).tokens_per_s_per_stream > 60


def test_throughput_target_sets_replicas_and_instances() -> None:
    spec = spec_of(
        SERVE_70B,
        model={"preset": "llama-3.1-8b"},
        serving={"context_tokens": 2048, "concurrency": 16, "tokens_per_s_total": 5000},
    )
    req = requirements(spec)
    result = shape(fit(req, instance("L40S")))
    per_replica = result.tokens_per_s_per_replica
    assert per_replica is not None
    assert result.replicas == -(-5000 // per_replica)
    assert result.instances == result.replicas  # one GPU, one replica per instance


def test_mixture_of_experts_reads_touched_experts() -> None:
    mixtral = arch_from_preset("mixtral-8x7b")
    assert expected_experts_touched(mixtral, 1) == pytest.approx(2.0)
    assert expected_experts_touched(mixtral, 64) == pytest.approx(8.0, abs=1e-6)
    one, _ = decode_weight_bytes(mixtral, 2.0, 1)
    assert one == pytest.approx(12.9e9 * 2)  # batch 1 reads the active parameters only


def test_training_time_matches_llama_2_7b_gpu_hours() -> None:
    """Llama 2 7B: 2T tokens took 184,320 A100-80GB GPU-hours (Touvron et al. 2023, Table 2).
    (6·P + 12·L·s·h)·D at A100's 42% MFU of 312 TFLOPS gives about 199,000: on the safe side,
    within 12%. Meta's "custom training libraries" (Llama 2 model card; Llama 1 §2.4: xformers
    attention, a hand-written backward pass) are not eager PyTorch: `training.compile: true`."""
    spec = spec_of(
        QLORA_65B,
        task="pretrain",
        precision="bf16",
        model={"preset": "llama-2-7b"},
        training={"tokens": "2e12", "sequence_tokens": 4096, "compile": True},
        teardown=None,
    )
    result = shape(fit(requirements(spec), instance("A100-80GB", 8, nvlink=True, interconnect="efa")))
    assert result.job_hours is not None
    gpu_hours = result.job_hours * result.gpus_per_replica
    assert 184_320 <= gpu_hours <= 184_320 * 1.12


def test_deadline_adds_nodes_or_rejects() -> None:
    spec = spec_of(
        QLORA_65B,
        task="finetune-full",
        precision="bf16",
        model={"preset": "llama-2-7b"},
        training={"tokens": "2e10"},
        teardown={"ttl": "48h"},
    )
    req = requirements(spec)
    with_efa = shape(fit(req, instance("H100", 8, nvlink=True, interconnect="efa")))
    assert with_efa.job_hours is not None and with_efa.job_hours <= 48 and with_efa.nodes_per_replica > 1
    assert rejection(fit(req, instance("H100", 8, nvlink=True))).filter == "deadline"


def test_qlora_paged_optimizer_needs_host_memory() -> None:
    req = requirements(spec_of(QLORA_65B))
    assert req.host_bytes == pytest.approx(lora_params(arch_from_preset("llama-65b"), 64) * 8)
    assert rejection(fit(req, instance("L40S", memory_gib=4))).filter == "host-memory"


def test_host_memory_counts_every_process_on_the_node() -> None:
    """Each of a node's training processes (one per GPU) pages its own optimiser state: a host that
    holds one process's state can hold one GPU's job but not eight GPUs' (plan and rejection say so)."""
    req = requirements(spec_of(QLORA_65B))
    one_gib = req.host_bytes / 2**30
    ram = 4.5 * one_gib / USABLE_MEMORY_FRACTION  # room for four processes' state, not five
    one = shape(fit(req, instance("A100-80GB", 1, memory_gib=ram)))
    line = next(t for t in one.terms if t.name == "host RAM per node")
    assert line.value == pytest.approx(one_gib) and "paged optimiser" in line.formula
    assert shape(fit(req, instance("A100-80GB", 4, nvlink=True, memory_gib=ram)))
    eight = rejection(fit(req, instance("A100-80GB", 8, nvlink=True, memory_gib=ram)))
    assert eight.filter == "host-memory"
    assert f"{8 * one_gib:.1f} GiB (8 processes × {one_gib:.2f} GiB)" in eight.reason


def test_custom_model_states_its_needs() -> None:
    spec = parse_spec(
        merged(
            SERVE_70B,
            task="batch",
            serving=None,
            duration="8h",
            model={"kind": "custom", "vram_gib": 30, "min_bandwidth_gbps": 800},
        )
    )
    req = requirements(spec)
    assert rejection(fit(req, instance("L4"))).filter == "bandwidth"  # 300 GB/s < 800
    on_l40s = shape(fit(req, instance("L40S")))  # 864 GB/s, 30 of 39.5 GiB usable
    assert on_l40s.vram_gib_per_gpu == pytest.approx(30)
    assert rejection(fit(req, instance("A10G"))).filter == "bandwidth"
