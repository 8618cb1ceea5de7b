"""Bytes a decoder layer keeps for its backward pass, per token and hidden unit (s·b·h), by
training mode: measured with PyTorch's own autograd, not one constant for every model."""

from __future__ import annotations

from typing import Literal

from selector.model_arch import ModelArch

LoraTargets = Literal["all-linear", "q-v"]

SAVED_PER_SBH: dict[tuple[str, str, bool], tuple[float, float, float]] = {
    ("full", "", False): (20.0, 4.0, 8.0),
    ("lora", "q-v", False): (14.0, 4.0, 6.0),
    ("lora", "q-v", True): (18.0, 4.0, 6.0),
    ("lora", "all-linear", False): (16.0, 4.0, 8.0),
    ("lora", "all-linear", True): (30.0, 4.0, 9.0),
    ("qlora", "q-v", False): (16.0, 4.0, 8.0),
    ("qlora", "q-v", True): (22.0, 4.0, 8.0),
    ("qlora", "all-linear", False): (16.0, 4.0, 8.0),
    ("qlora", "all-linear", True): (34.0, 4.0, 11.0),
}
"""Saved bytes per layer ÷ (s·b·h) = c + k·(kv heads ÷ heads) + m·(ffn ÷ hidden), as (c, k, m), by
mode, LoRA targets and whether LoRA dropout is on: Hugging Face ``LlamaForCausalLM`` (RMSNorm keeps
an fp32 and a 16-bit copy of its input, SwiGLU four ffn-wide tensors) in bf16 with SDPA
(FlashAttention-style: no s×s scores), PEFT LoRA r 16, one forward pass under
``torch.autograd.graph.saved_tensors_hooks``, each storage counted once, a middle layer of the stack
(scripts/measure_saved_activations.py; torch 2.13.0, transformers 5.25.0, peft 0.21.2, measured
2026-12-05 on CPU, dropout masks corrected to CUDA's 1-byte bool). Every SDPA cell (ffn 3.5h and
2.6875h, kv heads 1/4 and 1 of the heads) fits its line to ±0.3. A frozen 16-bit linear keeps
nothing (LoRA on q, v: 36 for Llama-3's shape, under Korthikanti et al.'s 34 for a GPT layer); full
fine-tuning keeps every linear's input (49); each PEFT dropout keeps its own copy and mask; a
bitsandbytes 4-bit base keeps each layer's input (``MatMul4Bit``: ``ctx.tensors = (A, B)``).
``("qlora", "all-linear", False)`` was not measured: it takes the larger of its two measured
neighbours (an estimate). Mixture-of-experts layers count ffn × the experts a token is routed to
(an estimate); other MLP shapes (GeLU) are sized as SwiGLU (errs high). Eager attention would add
6·heads·s÷h (the fp32 scores); gpufit assumes FlashAttention/SDPA."""


def saved_bytes_per_sbh(arch: ModelArch, task: str, targets: LoraTargets, dropout: bool) -> tuple[float, str]:
    """(bytes a layer keeps per s·b·h, the formula) for ``task`` (``finetune-full``/``pretrain``,
    ``finetune-lora``, ``finetune-qlora``) from ``SAVED_PER_SBH``."""
    mode = {"finetune-lora": "lora", "finetune-qlora": "qlora"}.get(task, "full")
    key = (mode, targets if mode != "full" else "", dropout if mode != "full" else False)
    c, k, m = SAVED_PER_SBH[key]
    g = arch.kv_heads / arch.heads if arch.heads and arch.kv_heads else 1.0
    routed = arch.experts_active if arch.is_moe else 1
    f = arch.ffn * routed / arch.hidden if arch.hidden else 0.0
    value = c + k * g + m * f
    what = "full fine-tune" if mode == "full" else f"{mode} on {targets}" + (", dropout" if dropout else "")
    return value, f"{c:g} + {k:g}·{g:.3g} + {m:g}·{f:.3g} = {value:.1f}·s·b·h ({what}; measured, HF + PEFT)"
