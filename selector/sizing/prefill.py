"""Prefill-only work (``task: embed``): documents encoded in one forward pass each, sized by
the pass's compute and memory, never by decode bandwidth (issue 24, defect 9)."""

from __future__ import annotations

from dataclasses import replace

from selector.model_arch import ModelArch
from selector.sizing.inference import PREFILL_CHUNK_TOKENS
from selector.sizing.memory import kv_bytes_per_token
from selector.sizing.terms import GIB, Requirements, Term
from selector.spec import WorkloadSpec

PREFILL_MFU = 0.35
"""Share of the dense 16-bit tensor peak a serving engine reaches in prefill, an ESTIMATE taken
below every published measurement found (issue 24 research notes, section 11): vLLM 0.13
Llama-3.1-8B bf16 at 30.9k tokens/s on H100 (2 × 8.03e9 × 30.9e3 = 496 TFLOP/s, 0.50 of 989) and
59.1k on B200 (0.95 PFLOP/s, 0.42 of 2,250; pytorch/ao torchao/quantization/README.md @aa25287,
vLLM benchmark 32 × 4096); TensorRT-LLM's 2048-token first-token latency for Llama-2-7B on A100
fp16, 133 ms, 0.67 (NVIDIA/TensorRT-LLM docs/source/performance.md @138f96d, v0.6.1);
llama.cpp A100 F16 7.5k tokens/s, 0.39. No 16-bit prefill row was found for L40S, L4 or A10G:
0.35 errs slow there too, so a plan does not promise a prefill rate no engine was measured at."""

PREFILL_MFU_FP8 = 0.30
"""The same share of the FP8 peak: TensorRT-LLM's Llama-2-7B fp8 on H100 prefills 2048 tokens
in 36 ms, 2 × 6.7e9 × 56.9e3 = 763 TFLOP/s, 0.39 of 1,979 (same table); taken below it."""


def prefill_mfu(precision: str) -> float:
    """``PREFILL_MFU_FP8`` for FP8 compute, else ``PREFILL_MFU``."""
    return PREFILL_MFU_FP8 if precision == "fp8" else PREFILL_MFU


def forward_flops_per_token(arch: ModelArch, context: int) -> float:
    """FLOPs of one token's forward pass: 2 × active parameters plus attention over the
    context, 2 × layers × context × attention width (Kaplan et al. 2020, 'Scaling Laws for
    Neural Language Models', arXiv 2001.08361, Table 1: C_forward ≈ 2N + 2 n_layer n_ctx d_attn)."""
    width = arch.heads * arch.head_dim if arch.heads and arch.head_dim else arch.hidden
    return 2.0 * arch.params_active + 2.0 * arch.layers * context * width


def embed_requirements(
    spec: WorkloadSpec, arch: ModelArch, wbytes: float, terms: list[Term], common: Requirements
) -> Requirements:
    """Memory: the weights, the activation workspace and the K/V of one forward pass of at least
    ``PREFILL_CHUNK_TOKENS`` tokens (a document is encoded whole, so its longest sets the pass);
    time: documents × tokens × forward FLOPs ÷ (GPUs × TFLOPS × ``prefill_mfu``)."""
    embed = spec.embed
    assert embed is not None
    weights = arch.params * wbytes
    pass_tokens = max(PREFILL_CHUNK_TOKENS, embed.longest)
    kv = kv_bytes_per_token(arch, 2.0) * pass_tokens
    activations = pass_tokens * (4 * arch.hidden + 3 * arch.ffn) * 2.0
    per_token = forward_flops_per_token(arch, embed.tokens_per_document)
    tokens = embed.documents * embed.tokens_per_document
    work = tokens * per_token / 1e12
    mfu = spec.tuning.mfu or prefill_mfu(spec.precision)
    terms += [
        Term("weights", weights / GIB, "GiB", f"{arch.params:.4g} params × {wbytes:g} B ({spec.precision})"),
        Term(
            "forward-pass kv",
            kv / GIB,
            "GiB",
            f"kv per token × {pass_tokens} tokens in one pass "
            f"(max(longest document, {PREFILL_CHUNK_TOKENS}))",
        ),
        Term(
            "activation workspace",
            activations / GIB,
            "GiB",
            f"{pass_tokens} tokens × (4·hidden + 3·ffn) × 2 B",
        ),
        Term(
            "forward flops per token",
            per_token / 1e9,
            "GFLOP",
            f"2 × {arch.params_active:.4g} active params + 2 × {arch.layers} layers × "
            f"{embed.tokens_per_document} context × attention width (Kaplan et al. 2020)",
        ),
        Term(
            "work",
            work,
            "TFLOP",
            f"{embed.documents:.3g} documents × {embed.tokens_per_document} tokens × flops per token",
        ),
        Term(
            "prefill MFU",
            mfu,
            "",
            "tuning.mfu"
            if spec.tuning.mfu
            else "ESTIMATE below the measured engine prefill: 16-bit vLLM 0.13 H100 0.50, B200 0.42, "
            "TRT-LLM A100 0.67, llama.cpp A100 0.39; fp8 TRT-LLM H100 0.39 (selector.sizing.prefill)",
        ),
    ]
    return replace(
        common,
        sharded_bytes=weights + activations,
        kv_bytes=kv,
        replicated_bytes=0.0,
        bytes_per_decode_step=0.0,
        flops_per_decode_step=0.0,
        min_bandwidth_gbps=0.0,
        train_flops=0.0,
        mfu=mfu,
        work_tflop=work,
        terms=tuple(terms),
        activation_bytes=activations,
    )
