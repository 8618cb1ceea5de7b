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

LITGPT_LORA: dict[tuple[LoraTargets, bool], Line] = {
    ("q-v", False): (20.3, 2.0, 6.0),
    ("q-v", True): (21.3, 2.0, 6.0),
    ("all-linear", False): (22.6, 0.0, 8.0),
    ("all-linear", True): (28.6, 0.0, 9.0),
}
"""LoRA in litgpt's own model code (``training.framework: litgpt``; bf16-true, bf16 adapters), by
targets ("q-v": litgpt's lora_query and lora_value; "all-linear": also key, projection and MLP) and
dropout. Beside the HF + PEFT layer it keeps q, k and v at every query head (it expands k and v for
SDPA: 8 in all where HF keeps 4 + 4·kv/heads), the unpadded LoRA output of ``LoRAQKVLinear.zero_pad``
when q, k and v are not all adapted (2 + 2·kv/heads), and one dropout on the shared q/k/v input where
PEFT keeps one per projection. Measured (``LITGPT_MEASUREMENT``) at rank 8 on the grouped-query shapes
and fitted to ±0.01; rank 32 (config_hub's Llama configs) adds 0.09 on q-v and 0.32 on all-linear
(measured in review), so each constant is the rank-32 figure rounded up to a tenth (a larger rank on a
narrow model adds more: rank ÷ hidden); a model whose key/value heads equal its query heads adds
``LITGPT_MHA_STEP``. Measured on CPU, whose SDPA returns its output in (B, H, T, D) layout, so
litgpt's reshape before the attention projection copies it (+2 where that projection keeps its input:
a full fine-tune, LoRA on every layer without dropout, a 4-bit base); CUDA's flash and
memory-efficient kernels return a (B, T, H, D) layout the reshape only views: those lines err 2 heavy
there. Gemma 2's soft-capped attention, which litgpt runs eagerly, and its two extra norms are added
as for every framework (``EAGER_SOFTCAP_SCORE_BYTES``, ``POST_NORM_BYTES``)."""

LITGPT_LEGACY_4BIT: dict[tuple[LoraTargets, bool], Line] = {
    ("q-v", False): (24.3, 2.0, 8.0),
    ("q-v", True): (27.3, 2.0, 8.0),
    ("all-linear", False): (22.6, 0.0, 8.0),
    ("all-linear", True): (32.6, 0.0, 11.0),
}
"""litgpt's QLoRA on a bitsandbytes 4-bit base before 0.43.2 (its config_hub era pinned 0.42), bf16
adapters. The q-v lines are measured with every base linear emulating the old ``MatMul4Bit`` (it kept
each layer's 16-bit input); the all-linear lines are an ESTIMATE, ``LITGPT_LORA``'s plus what the old
4-bit base adds beside bf16 adapters on every layer in the HF + PEFT measurement (``LEGACY_4BIT`` less
``LORA``: 4 + 2·ffn/hidden with dropout, nothing without)."""

LITGPT_FULL_FINETUNE: Line = (30.1, 0.0, 8.0)
"""A full fine-tune in litgpt's model code: beside the HF layer, its RMSNorm keeps an fp32 input and an
fp32 output (8 where HF keeps 4 + 2; before litgpt commit 916a84c, 2024-07-23, it returned a 16-bit
product and kept about 6 less) and, on CPU, the attention output copied before the projection (+2,
see ``LITGPT_LORA``)."""

LITGPT_MHA_STEP = 4.0
"""What a litgpt layer adds when its key/value heads equal its query heads: v is then a view into the
fused qkv output, which stays alive whole (measured +4.0 in every configuration); with one key/value
head 4 ÷ heads (+0.25 of 16 heads measured)."""

LITGPT_MEASUREMENT = (
    "scripts/measure_litgpt_saved_activations.py: litgpt 0.4.13's Block (litgpt/model.py, litgpt/lora.py; "
    "identical to commit 00af8b0, the config_hub table's README; its cells date from April-July 2024 "
    "commits with the same LoRA code) in bf16 with SDPA, LoRA r 8 (r 32 adds 0.09), "
    "one forward pass under torch.autograd.graph.saved_tensors_hooks, each storage counted once, "
    "S(3 layers) - S(2); torch 2.13.0, 2026-12-05, CPU, dropout masks corrected to CUDA's 1-byte bool; "
    "hidden 1024, 16 heads, ffn 3.5h and 2.6875h, key/value heads 1, 4, 8 and 16"
)

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
without soft-capping, which a user may choose (+6·heads·s÷h for the scores; gpufit assumes
FlashAttention/SDPA wherever the model allows it; soft-capped models: ``EAGER_SOFTCAP_SCORE_BYTES``)."""


def saved_bytes_per_sbh(
    arch: ModelArch,
    task: str,
    targets: LoraTargets,
    dropout: bool,
    adapters: str = "fp32",
    framework: str | None = None,
    eager: bool = False,
) -> tuple[float, str]:
    """(bytes a layer keeps per s·b·h, the formula) for ``task``: ``FULL_FINETUNE`` for a full
    fine-tune or pre-training, ``LORA`` for LoRA with ``adapters`` in that dtype, and for QLoRA a
    bitsandbytes base before 0.43.2 (its release is not known: the safe side), ``LEGACY_4BIT`` with
    bf16 adapters, ``LORA`` + ``BNB_INPUTS_BESIDE_FP32_ADAPTERS`` with fp32 ones. Under ``framework``
    litgpt (its own model code, bf16: ``litgpt_saved_bytes_per_sbh``) the LITGPT lines. ``eager``:
    attention runs eagerly (a soft-capped model), which keeps keys and values at every query head;
    Gemma's norms (``POST_NORM_BYTES``) and query/key norms (``QK_NORM_BYTES``) are added."""
    g = arch.kv_heads / arch.heads if arch.heads and arch.kv_heads else 1.0
    routed = arch.experts_active if arch.is_moe else 1
    f = arch.ffn * routed / arch.hidden if arch.hidden else 0.0
    if framework == "litgpt" and (task in ("finetune-full", "pretrain") or adapters == "bf16"):
        return with_norms(arch, task, *litgpt_saved_bytes_per_sbh(arch, task, targets, dropout, g, f), True)
    if eager:
        g = 1.0  # eager attention copies k and v out to every query head and keeps them
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
    formula = f"{c:g} + {k:g}·{g:.3g} + {m:g}·{f:.3g} = {value:.1f}·s·b·h ({what}; measured, HF + PEFT)"
    return with_norms(arch, task, value, formula)


POST_NORM_BYTES: dict[bool, float] = {False: 8.0, True: 16.0}
"""What Gemma 2's and 3's norms after attention and after the MLP add per layer, in s·b·h
(``post_norms``): their fp32 inputs (4 + 4) and, with trained weights (full fine-tune), their fp32
normalised values for the weights' gradients (4 + 4 more). Measured the same way on Hugging Face Gemma2
and litgpt's Gemma-2-2b (``GEMMA2_MEASUREMENT``), the two norms replaced by identities: 8.04 with a
frozen base, 16.03 trained."""

FP32_NORM_VALUE_BYTES = 2.0
"""What a trained norm that multiplies its weight in fp32 (``fp32_norms``: Gemma 2/3's
``x.float() * (1 + weight)``, OLMo 2's ``(weight * x).to(dtype)``) keeps beyond a Llama norm's 16-bit
normalised value, per element: 4 B, not 2. For the two pre-norms the lines count, 2 × 2 s·b·h: a
trained Gemma-2 layer without its extra norms measured 59.14 against the line's 56 (its o_proj input
2048 wide, not 2304: 0.8 less); OLMo 2's layer norms +4 (measured in review)."""

QK_NORM_BYTES: dict[bool, float] = {False: 4.0, True: 6.0}
"""What a norm on each head's queries and keys keeps (``qk_norm``: Qwen 3, Gemma 3, OLMo 2, Llama 4's
``use_qk_norm``), per element of q and k: its fp32 input (4) and, its weight trained, the 16-bit
normalised value (2; an ``fp32_norms`` model's is fp32, 4 more: measured 8.06 for Gemma 3 and OLMo 2).
In s·b·h: × (heads + kv heads) × head_dim ÷ hidden. Measured in review with saved_tensors_hooks
(Qwen 3 4.03-4.06 frozen, 6.03-6.06 trained). Qwen3-Next normalises only its full-attention layers'
(counted on every layer: the heavy side); Gemma 3n also normalises v (not counted)."""

EAGER_SOFTCAP_BACKWARD_BYTES = 6.5
"""What the backward pass of one soft-capped eager attention adds above its saved scores, per score
element: the gradients of the softmax and tanh in flight (measured in review with a live-storage
tracker on CPU: 6.5 at 1,024 tokens, 6.25 at 2,048; the larger taken). Counted for one layer, the
one in backward (under full recompute, the one recomputed)."""

EAGER_SOFTCAP_SCORE_BYTES = 8.0
"""Bytes a layer keeps per element of its (batch × heads × s × s) attention scores when the logits are
soft-capped (Gemma 2's ``attn_logit_softcapping``), which SDPA cannot do, so training runs attention
eagerly (Hugging Face transformers refuses SDPA for it and recommends eager for Gemma 2; litgpt
switches to its eager path): the tanh output (bf16, 2), the fp32 softmax output (4) and the bf16
weights the value matmul keeps (2). Measured on Hugging Face Gemma2 and litgpt's Gemma-2-2b at 256,
512 and 1,024 tokens (``GEMMA2_MEASUREMENT``): 8.000 per element in both (6 without the tanh). A run
with FlashAttention-2 ≥ 2.6, which soft-caps in its kernel, keeps none of it: errs heavy there."""

GEMMA2_MEASUREMENT = (
    "hidden 2304, 8 heads of 256, 4 key/value heads, ffn 9216, bf16, LoRA r 16 on q and v with dropout "
    "and a full fine-tune; transformers 5.25.0 (Gemma2ForCausalLM, attn_implementation eager), litgpt "
    "0.4.13 (Gemma-2-2b); torch 2.13.0 CPU, saved_tensors_hooks, S(3 layers) - S(2), 2026-12-05"
)


def with_norms(
    arch: ModelArch, task: str, value: float, formula: str, litgpt: bool = False
) -> tuple[float, str]:
    """``value`` and its formula with Gemma's extra norms (``POST_NORM_BYTES``), fp32 norm values
    (``FP32_NORM_VALUE_BYTES``, not for litgpt, whose lines keep them already) and query/key norms
    (``QK_NORM_BYTES``) added where the model has them."""
    trained = task in ("finetune-full", "pretrain")
    if arch.post_norms:
        extra = POST_NORM_BYTES[trained]
        value, formula = value + extra, f"{formula} + {extra:g} (Gemma's post-attention and post-MLP norms)"
    if arch.fp32_norms and trained and not litgpt:
        extra = 2 * FP32_NORM_VALUE_BYTES
        value, formula = value + extra, f"{formula} + {extra:g} (fp32 norm values of the two pre-norms)"
    if arch.qk_norm and arch.hidden:
        per = QK_NORM_BYTES[trained] + (FP32_NORM_VALUE_BYTES if trained and arch.fp32_norms else 0.0)
        extra = per * (arch.heads + (arch.kv_heads or arch.heads)) * arch.head_dim / arch.hidden
        value, formula = value + extra, f"{formula} + {extra:.1f} (query and key norms)"
    return value, formula


def eager_score_bytes_per_sbh(arch: ModelArch, s: int, eager: bool) -> float:
    """What a layer's soft-capped eager attention keeps, in s·b·h at ``s`` tokens: 8 B × heads × s²
    per sequence (``EAGER_SOFTCAP_SCORE_BYTES``); 0 unless ``eager`` (a soft-capped model trained
    without FlashAttention-2)."""
    if not eager or not arch.hidden:
        return 0.0
    return EAGER_SOFTCAP_SCORE_BYTES * arch.heads * s / arch.hidden


def litgpt_saved_bytes_per_sbh(
    arch: ModelArch, task: str, targets: LoraTargets, dropout: bool, g: float, f: float
) -> tuple[float, str]:
    """``saved_bytes_per_sbh`` in litgpt's model code: ``LITGPT_FULL_FINETUNE``, ``LITGPT_LORA`` or,
    for QLoRA, ``LITGPT_LEGACY_4BIT``, with ``LITGPT_MHA_STEP`` where key/value heads equal the query
    heads (a quarter of a step with one)."""
    if task == "finetune-qlora":
        what, line = (
            "litgpt, bitsandbytes < 0.43.2 4-bit base, bf16 adapters",
            LITGPT_LEGACY_4BIT[(targets, dropout)],
        )
    elif task == "finetune-lora":
        what, line = "litgpt, bf16 adapters", LITGPT_LORA[(targets, dropout)]
    else:
        what, line = "litgpt full fine-tune", LITGPT_FULL_FINETUNE
    if task != "finetune-full" and task != "pretrain":
        what += f" on {targets}" + (", dropout" if dropout else "")
    c, k, m = line
    kv = arch.kv_heads or arch.heads  # unknown: as many as the query heads
    step = LITGPT_MHA_STEP * kv / arch.heads if kv in (1, arch.heads) else 0.0
    value = c + k * g + m * f + step
    stepped = f" + {step:g} (fused qkv kept)" if step else ""
    return (
        value,
        f"{c:g} + {k:g}·{g:.3g} + {m:g}·{f:.3g}{stepped} = {value:.1f}·s·b·h ({what}; measured, litgpt)",
    )
