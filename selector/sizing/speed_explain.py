"""``--explain``'s decode-speed lines: the bandwidth efficiency, per-layer latency, what a batch
adds per layer and the per-step overhead a served workload gets, each with its source."""

from __future__ import annotations

from selector.model_arch import ModelArch
from selector.sizing.fp8_path import W8A8_FP8_EFFICIENCY
from selector.sizing.inference_mfu import decode_mfu
from selector.sizing.memory import expected_experts_touched
from selector.sizing.schedule import (
    LINEAR_ATTENTION_SEQUENCE_LATENCY_S,
    MOE_TOUCHED_EXPERT_LATENCY_S,
    SEPARATE_PREFILL_ENGINES,
    moe_touched_expert_latency_s,
)
from selector.sizing.speed import (
    EAGER_LAYER_LATENCY_S,
    KV_BANDWIDTH_EFFICIENCY,
    LAYER_LATENCY_S,
    MOE_EXPERT_LATENCY_S,
    STEP_OVERHEAD_S,
)
from selector.sizing.terms import Term
from selector.spec import WorkloadSpec


def speed_terms(spec: WorkloadSpec, arch: ModelArch, eff: float, expert_s: float, engine: str) -> list[Term]:
    """The decode-speed constants this workload gets, with their sources, for ``--explain``
    (``expert_s``: ``inference.launched_moe_expert_latency_s`` of ``engine``, the one that decodes)."""
    tuned = spec.tuning.bandwidth_efficiency is not None
    per_layer = (EAGER_LAYER_LATENCY_S if engine == "none" else LAYER_LATENCY_S) + (
        expert_s * arch.experts_active if arch.is_moe else 0.0
    )
    layer_note = (
        "eager decode loop (a server gpufit does not launch; HF transformers Qwen2.5-7B, errs slow)"
        if engine == "none"
        else f"{engine} with CUDA graphs (Qwen2.5 vLLM and torchao batch-1 rows)"
    )
    if arch.is_moe:
        layer_note += f" + {arch.experts_active} routed experts × {expert_s * 1e6:g} µs " + (
            f"on Hopper/Blackwell, {MOE_EXPERT_LATENCY_S * 1e6:g} µs on other GPUs (read off SGLang 0.5.6 "
            "GLM-4.6 on 8 B200 at batch 1, the slower of two models measured, applied to the pinned "
            "releases; an estimate)"
            if expert_s < MOE_EXPERT_LATENCY_S
            else "(gpt-fast Mixtral rows and issue 24's 61-layer MoE; estimate, errs slow)"
        )
    return [
        Term(
            "precision efficiency",
            eff,
            "of peak GB/s",
            "tuning.bandwidth_efficiency"
            if tuned
            else f"{spec.precision} weights (an ESTIMATE, each value the highest at which no fitted "
            "current-engine row reads over 1.05: 16-bit 0.62, on the fast side of the 0.6 used before, "
            "bound by one row, SGLang 0.5.6 gpt-oss-120b on 8 B200 at 100 streams; int8 0.53 bound by "
            "gpt-fast Mixtral int8 on one A100, fp8 0.38 by torchao generate.py's fp8 per-tensor "
            "Llama-3.1-8B on H100; "
            "int4 0.51 by gpt-fast's int4 Llama-2-70B at TP 8 (vLLM 0.6.3's Marlin GPTQ/AWQ rows read up "
            "to 1.03 at it; an estimate on Hopper and Blackwell); for the current vLLM/SGLang gpufit "
            "launches, older engines' terms time only "
            f"calibration rows); KV cache reads at {KV_BANDWIDTH_EFFICIENCY:g} "
            "(vLLM concurrency-128 rows)"
            + (
                "; nf4 0.35, bitsandbytes kernels no faster than int4's (no row measures them: estimate)"
                if spec.precision == "nf4"
                else ""
            )
            + _fp8_note(spec, eff, engine, tuned),
        ),
        Term("per-layer latency", per_layer * 1e6, "µs", layer_note),
        *_batch_latency_terms(spec, arch, engine),
        Term(
            "per-step overhead",
            STEP_OVERHEAD_S * 1e3,
            "ms",
            "scheduling and sampling outside the layers, for today's releases (an estimate; vLLM's V0 "
            "engine before 0.8.0 took 2.24 ms, read off its Qwen2.5-0.5B A100 row)",
        ),
    ]


def _fp8_note(spec: WorkloadSpec, eff: float, engine: str, tuned: bool) -> str:
    """Which fp8 path the weights take (``fp8_path``), for the precision-efficiency line."""
    if spec.precision != "fp8" or tuned:
        return ""
    if eff == W8A8_FP8_EFFICIENCY:
        return (
            f"; an fp8 checkpoint runs as W8A8 fp8 GEMMs under {engine} (Ada, Hopper, Blackwell): "
            f"{W8A8_FP8_EFFICIENCY:g}, the highest value at which gpufit's fp8 gain over 16-bit exceeds "
            "no measured pair's (SGLang Qwen3-8B and vLLM Llama-3.1-8B on an H100; an estimate)"
        )
    return "; fp8 quantised as the engine loads 16-bit weights, or a server gpufit does not launch: " + (
        "torchao's 0.38 (vLLM: online fp8's 'latency improvements are limited'; no row measures it)"
    )


def _server_name(engine: str) -> str:
    return "a server gpufit does not launch" if engine == "none" else f"the {engine} gpufit launches"


def _batch_latency_terms(spec: WorkloadSpec, arch: ModelArch, engine: str) -> list[Term]:
    """``--explain``'s lines for what a batch adds per layer (MoE experts it touches, linear-attention
    sequences) and for SGLang's separate prefill passes, where they apply."""
    serving = spec.serving
    concurrency = serving.concurrency if serving is not None else 1
    terms: list[Term] = []
    if arch.is_moe and concurrency > 1:
        extra = expected_experts_touched(arch, concurrency) - arch.experts_active
        per_expert = moe_touched_expert_latency_s(engine)
        terms.append(
            Term(
                "batch expert latency",
                per_expert * extra * 1e6,
                "µs/layer",
                f"{extra:.1f} more experts touched by {concurrency} sequences × {per_expert * 1e6:g} µs "
                f"under {_server_name(engine)} "
                "(SGLang 0.5.6 gpt-oss-120b at 100 streams, sgl-cookbook: "
                f"{MOE_TOUCHED_EXPERT_LATENCY_S['sglang'] * 1e6:g} µs under SGLang's schedule, "
                f"{MOE_TOUCHED_EXPERT_LATENCY_S['vllm'] * 1e6:g} under vLLM's; an estimate, one row)",
            )
        )
    if arch.linear_layers and concurrency > 1:
        terms.append(
            Term(
                "linear-attention latency",
                LINEAR_ATTENTION_SEQUENCE_LATENCY_S * concurrency * arch.linear_layers * 1e3,
                "ms/step",
                f"{concurrency} sequences × {arch.linear_layers} linear-attention layers × "
                f"{LINEAR_ATTENTION_SEQUENCE_LATENCY_S * 1e6:g} µs (SGLang 0.5.6 Qwen3-Next at 100 streams; "
                "an estimate, one row)",
            )
        )
    if concurrency > 1:
        terms.append(
            Term(
                "decode GEMM MFU",
                decode_mfu(spec.precision),
                "of dense TFLOPS",
                "applies on a GPU where the batch's GEMMs outrun the weight read (the fit's decode step "
                "says so); attention's KV read is timed after them, not overlapped (TensorRT-LLM and vLLM "
                "0.13 rows at 60-128 sequences; the same at any batch, which errs slow above 256)",
            )
        )
    if engine in SEPARATE_PREFILL_ENGINES and concurrency > 1:
        terms.append(
            Term(
                "prefill passes",
                concurrency,
                "streams wait",
                f"{engine} prefills each arriving prompt in a forward pass of its own "
                "(--enable-mixed-chunk off, its default): the weights are read again and every stream waits",
            )
        )
    return terms
