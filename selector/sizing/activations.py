"""Bytes a decoder layer keeps for its backward pass, per token and hidden unit (s·b·h), by
training mode: measured with PyTorch's own autograd, not one constant for every model."""

from __future__ import annotations

from typing import Literal

from selector.model_arch import ModelArch

LoraTargets = Literal["all-linear", "q-v"]

Line = tuple[float, float, float]
"""(c, k, m): saved bytes per layer ÷ (s·b·h) = c + k·(kv heads ÷ heads) + m·(ffn ÷ hidden)."""

FULL_FINETUNE: Line = (20.0, 4.0, 8.0)

LORA: dict[tuple[str, LoraTargets, bool], Line] = {
    ("fp32", "q-v", False): (20.0, 4.0, 6.0),
    ("fp32", "q-v", True): (22.0, 4.0, 6.0),
    ("fp32", "all-linear", False): (36.5, 4.0, 10.0),
    ("fp32", "all-linear", True): (42.5, 4.0, 11.0),
    ("bf16", "q-v", False): (14.0, 4.0, 6.0),
    ("bf16", "q-v", True): (18.0, 4.0, 6.0),
    ("bf16", "all-linear", False): (16.0, 4.0, 8.0),
    ("bf16", "all-linear", True): (30.0, 4.0, 9.0),
}
"""LoRA on a frozen 16-bit base, by adapter dtype, targets and dropout. fp32: PEFT's default
(``get_peft_model(autocast_adapter_dtype=True)``), each adapted layer casting and keeping its own fp32
copy of its input; bf16: adapters in the model's dtype (torchtune, litgpt's bf16-true), which keep
the 16-bit input the layer shares. Each dropout keeps its output and a 1-byte mask."""

BNB_INPUTS_BESIDE_FP32_ADAPTERS: Line = (4.0, 0.0, 2.0)
"""What a bitsandbytes 4-bit base before 0.43.2 adds beside fp32 adapters, which keep their own fp32
copies and share none of its 16-bit inputs: the q/k/v input (2), the gate/up input (2) and the down
input (2·ffn/hidden). An ESTIMATE from the measured layers' structure (not measured together)."""

LEGACY_4BIT: dict[tuple[LoraTargets, bool], Line] = {
    ("q-v", False): (16.0, 4.0, 8.0),
    ("q-v", True): (22.0, 4.0, 8.0),
    ("all-linear", False): (16.0, 4.0, 8.0),
    ("all-linear", True): (34.0, 4.0, 11.0),
}
"""A bitsandbytes 4-bit base before 0.43.2, whose ``MatMul4Bit`` kept each layer's input for backward
(``ctx.tensors = (A, B)``; commit 9e75374 "fix QLoRA mem bug" stopped it), with 16-bit adapters
(litgpt's table pins bitsandbytes 0.42.0). ``("all-linear", False)`` was not measured: each 4-bit
input is the storage the adapter keeps anyway, so it equals the q-v line."""

MEASUREMENT = (
    "scripts/measure_saved_activations.py: Hugging Face LlamaForCausalLM in bf16 with SDPA, PEFT LoRA "
    "r 16, one forward pass under torch.autograd.graph.saved_tensors_hooks, each storage counted "
    "once, a middle layer of the stack; torch 2.13.0, transformers 5.25.0, peft 0.21.2, 2026-12-05, "
    "CPU, dropout masks corrected to CUDA's 1-byte bool"
)
"""Where every line comes from (the fp32 adapter lines with ``--fp32-adapters``). Each line fits its
measured cells (ffn 3.5h with kv heads a quarter of the heads, ffn 2.6875h with all of them; the
bf16 lines also the two other combinations) to ±0.3: a frozen 16-bit linear keeps nothing, a full fine-tune
keeps every linear's input (49·s·b·h for Llama-3's shape, where Korthikanti et al. 2023 count 34 for
a GPT layer), RMSNorm an fp32 and a 16-bit copy of its input, SwiGLU four ffn-wide tensors. Not
measured, and sized as above: torch.compile and fused kernels (keep less), padded batches (HF then
keeps full-width keys and values: about +3), PEFT's k-bit preparation (fp32 norm outputs: +2 a norm),
other MLP shapes (GeLU, sized as SwiGLU: errs high), mixture-of-experts layers (ffn × the experts a
token is routed to, missing each expert's h-wide input and output: errs low), eager attention
(+6·heads·s÷h for the scores; gpufit assumes FlashAttention/SDPA)."""


def saved_bytes_per_sbh(
    arch: ModelArch, task: str, targets: LoraTargets, dropout: bool, adapters: str = "fp32"
) -> tuple[float, str]:
    """(bytes a layer keeps per s·b·h, the formula) for ``task``: ``FULL_FINETUNE`` for a full
    fine-tune or pre-training, ``LORA`` for LoRA with ``adapters`` in that dtype, and for QLoRA a
    bitsandbytes base before 0.43.2 (its release is not known: the safe side), ``LEGACY_4BIT`` with
    bf16 adapters, ``LORA`` + ``BNB_INPUTS_BESIDE_FP32_ADAPTERS`` with fp32 ones."""
    g = arch.kv_heads / arch.heads if arch.heads and arch.kv_heads else 1.0
    routed = arch.experts_active if arch.is_moe else 1
    f = arch.ffn * routed / arch.hidden if arch.hidden else 0.0
    if task in ("finetune-lora", "finetune-qlora"):
        what, line = f"LoRA, {adapters} adapters", LORA[(adapters, targets, dropout)]
        if task == "finetune-qlora" and adapters == "bf16":
            what, line = "bitsandbytes < 0.43.2 4-bit base, bf16 adapters", LEGACY_4BIT[(targets, dropout)]
        elif task == "finetune-qlora":
            c0, k0, m0 = line
            c1, k1, m1 = BNB_INPUTS_BESIDE_FP32_ADAPTERS
            what, line = f"{what} + bitsandbytes < 0.43.2 inputs (estimate)", (c0 + c1, k0 + k1, m0 + m1)
        what += f" on {targets}" + (", dropout" if dropout else "")
    else:
        what, line = "full fine-tune", FULL_FINETUNE
    c, k, m = line
    value = c + k * g + m * f
    return value, f"{c:g} + {k:g}·{g:.3g} + {m:g}·{f:.3g} = {value:.1f}·s·b·h ({what}; measured, HF + PEFT)"
