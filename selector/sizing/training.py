"""What one training replica needs: weights, gradients and optimiser state (full training) or
the frozen base and its LoRA adapters, activations, loss logits, the checkpoint and the
training compute."""

from __future__ import annotations

from dataclasses import replace

from selector.model_arch import ModelArch
from selector.sizing.activations import (
    EAGER_SOFTCAP_BACKWARD_BYTES,
    eager_score_bytes_per_sbh,
    saved_bytes_per_sbh,
)
from selector.sizing.memory import lora_params
from selector.sizing.sharded_memory import working_set, working_term
from selector.sizing.terms import GIB, Requirements, ShardedWorkingSet, Term
from selector.spec import WorkloadSpec
from selector.spec.frameworks import framework_defaults, framework_title
from selector.spec.training import TrainingSpec

OPTIMIZER_BYTES: dict[str, float] = {"adamw": 12.0, "adamw-8bit": 6.0, "adamw-bf16": 4.0, "sgd": 8.0}
"""Optimiser state per trained parameter in mixed precision: AdamW fp32 master + momentum +
variance 12 B; 8-bit Adam 6 B; SGD with momentum 8 B (EleutherAI, 'Transformer Math 101').
``adamw-bf16`` is pure-bf16 training (torchtune's default ``dtype: bf16``: no fp32 master copy,
momentum and variance in bf16, 2 + 2 B; pytorch/torchtune docs 'Memory optimization overview',
'Lower precision optimizers')."""

FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN = 2
"""With full activation recomputation only each layer's input is kept: 2·s·b·h bytes per
layer (Korthikanti et al. 2023, §4), plus one layer's activations while it is recomputed."""

LOSS_BYTES_PER_LOGIT = 16
"""Bytes per logit at the loss peak of a stock PyTorch/HF cross-entropy: the 16-bit logits (2),
their fp32 upcast (4), the fp32 softmax/log-softmax (4) and its gradient (4), about 14-16 B
(issue 24 notes; Unsloth's HF + FlashAttention-2 baseline reaches only 28,454 tokens of
Llama-3.1-8B QLoRA context on 80 GB, unslothai/unsloth README @e3162dc). Chunked cross-entropy
(torchtune, Unsloth) is ``CHUNKED_LOSS_BYTES_PER_LOGIT``; gpufit assumes the stock loss unless
``training.loss: chunked`` (errs safe)."""

CHUNKED_LOSS_BYTES_PER_LOGIT = 3.25
"""Bytes per logit with a chunked cross-entropy (``training.loss: chunked``) whose per-chunk
upcast and cross-entropy are compiled together (``training.compile: true``; torchtune
CEWithChunkedOutputLoss: "upcasting only one chunk at a time", "The CE and upcasting have to be
compiled together", torchtune/modules/loss/ce_chunked_output_loss.py @1814feb, PR #1390). Every
chunk's 16-bit logits are kept for the backward pass (2 B); the compiled graph saves no fp32 copy.
The backward runs every chunk's cross-entropy node before any output-projection node: PyTorch's
autograd engine takes ready nodes highest sequence number first (torch/csrc/autograd/engine.h,
``CompareNodeTaskTime``), and the loss's nodes were all made after the model's output projection.
So the chunks' 16-bit gradients pile up (2 B in all) while each chunk's saved logits are freed as
its node finishes (no ``retain_graph``): the sum stays at 2 B, plus the chunk in hand, its fp32
upcast and fp32 gradient and its 16-bit gradient, (4 + 4 + 2) B ÷ 8 chunks. 2 + 1.25 = 3.25 B, the
fused kernel's fp32 buffers counted in full (errs heavy). 4 B until session 9 (every chunk's
logits and gradient both counted whole, before the engine's order was read); torchtune's Llama
3.1 8B LoRA row on an RTX 4090 (16.2 GiB, README @0031bfb) sits below gpufit's terms without any
logits (16.6 GiB) and cannot pin this figure (docs/calibration.yaml note)."""

EAGER_CHUNKED_LOSS_BYTES_PER_LOGIT = 6.5
"""The same chunked loss run eagerly (``training.compile: false``). Autograd keeps each chunk's
fp32 log-softmax output for the backward pass (4 B; ``log_softmax`` saves its result, the fp32
upcast saves nothing), and the loss still holds every chunk's 16-bit logits until the forward pass
ends (2 B): at the last chunk, with its fp32 upcast in hand (4 B ÷ 8), 2 + 4 + 0.5 = 6.5 B. The
backward frees each chunk's log-softmax as its gradient is made and stays below that (about
4 + 1 B, with the chunk's two fp32 gradients). 6 B until session 9 (the last chunk's upcast left
out)."""

KBIT_FP32_PARAMS_BYTES = 4.0
"""PEFT's ``prepare_model_for_kbit_training`` casts every parameter that is not quantised (token
embeddings, output head, norms) to fp32 (huggingface/peft src/peft/utils/other.py); gpufit counts
the embeddings and output head (one matrix when tied, ``ModelArch.embedding_params``; else
2 × vocab × hidden) at 4 B in a QLoRA base."""

UNQUANTIZED_TRAIN_BYTES = 2.0
"""Without PEFT's k-bit preparation (``training.kbit_preparation: none``) the parameters a QLoRA
base does not quantise (token embeddings, output head, norms) stay 16-bit: torchtune quantises
only the LoRA layers' base weights to NF4 (``LoRALinear(quantize_base=True)`` → torchao
``to_nf4``, pytorch/torchtune torchtune/modules/peft/lora.py) and its recipe
recipes/lora_finetune_single_device.py never upcasts to fp32; gpufit counts the embeddings and
head at 2 B. Its optimiser is plain torch AdamW on the GPU, not bitsandbytes' paged one."""

OFFLOAD_RESIDENT_LAYERS = 2
"""With activation offloading (``training.activation_offload``: torchtune's
``enable_activation_offloading``, torchtune/training/_activation_offloading.py
``OffloadActivations``) each layer's saved activations are copied to pinned host memory on a
side stream as the forward pass moves on and brought back one layer ahead of the backward pass:
gpufit keeps two layers' saved activations on the GPU (the one in use, the one in flight) and
the rest in host RAM."""

FP8_TRAINING_MEMORY = "on par with BF16 (NeMo AutoModel FP8 training docs)"
"""FP8 training (Transformer Engine, Megatron-LM ``--fp8-format``, torchao float8) is sized as its
BF16 run: "FP8 training achieves on par memory usage with BF16 baseline" (NVIDIA NeMo AutoModel
docs, https://docs.nvidia.com/nemo/automodel/advanced-training/fp8-training, read 2026-12-04).
Without ``fp8_model_init`` the 16-bit weights stay the only persistent copy and each layer's FP8
cast is a transient of its GEMM (NVIDIA/TransformerEngine transformer_engine/pytorch/fp8.py). No
published FP8 training memory row says otherwise; the speed gain is ``FP8_TRAINING_SPEEDUP``."""

FP8_TRAINING_SPEEDUP = 1.2
"""FP8 training runs ~1.2× the BF16 rate, not the 2× of the FP8 tensor-core peak: "Over 1.2x
training speedup on 8xH100 with tensorwise scaling" (NVIDIA NeMo AutoModel docs, "FP8 Training",
https://docs.nvidia.com/nemo/automodel/advanced-training/fp8-training, read 2026-12-04): casts,
amax reductions and the non-GEMM work do not speed up. The lower bound taken (errs slow)."""

EAGER_TRAINING_SLOWDOWN = 8998 / 7075
"""Eager PyTorch training (``training.compile: false``) against the compiled, fused-kernel runs
gpufit's training utilisation was fitted on (llm-foundry, torchtitan with compile, Megatron with
Transformer Engine, torchtune with compile): torchtune's Llama-3.2-3B full fine-tune on an A100,
packed, went from 7,075 to 8,998 tokens/s when compiled, 1.27× (pytorch/torchtune README
@1814feb, Optimization flags table)."""

ATTENTION_TRAIN_FLOPS_PER_TOKEN_LAYER = 12
"""Attention's score and value FLOPs per token in training: 12 × layers × sequence × hidden
(forward 2 × 2 × s × h, ×3 with the backward pass; Narayanan et al. 2021, arXiv 2104.04473,
§5.1), counted without the causal mask's saving as llm-foundry's MFU does. Fitted with
llm-foundry's MPT-13B at 32k on 8×H100 (mosaicml/
llm-foundry scripts/train/benchmarking/README.md @4952183), where 6·P·D alone over-promised 2.5×."""

TRAIN_FLOPS_PER_PARAM_TOKEN: dict[str, float] = {
    "finetune-full": 6.0,
    "pretrain": 6.0,
    "finetune-lora": 4.0,
    "finetune-qlora": 4.0,
}
"""Training compute C ≈ 6·P·D (Kaplan et al. 2020; 'Transformer Math 101'); a frozen base
skips the weight gradients, leaving ≈ 4·P·D for LoRA and QLoRA."""

RECOMPUTE_FLOPS_PER_PARAM_TOKEN = 2.0
"""Full activation recomputation runs each layer's forward pass again in the backward pass: 2 FLOPs
per parameter per token more (Korthikanti et al. 2023, arXiv 2205.05198, §4; PaLM's hardware vs
model FLOPs utilisation, Chowdhery et al. 2022, arXiv 2204.02311, Appendix B). llm-foundry reports
HFU = MFU × 4/3 for its activation-checkpointed rows (mosaicml/llm-foundry scripts/train/
benchmarking/README.md @4952183)."""


SELECTIVE_RECOMPUTE_FLOPS_PER_PARAM_TOKEN = 1.0
"""Selective activation checkpointing (``training.activation_checkpointing: selective``) runs half
the forward pass's matmuls again: torchtitan's op-level policy "Saves output of all compute ops,
except every second mm" (pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py @004b314,
``_apply_ac_to_transformer_block``), 1 FLOP per parameter per token of the 2 a forward pass runs.
The upper bound taken (errs slow): every second of a Llama block's seven matmuls (wk, wo, w3) is
~37 % of its linear FLOPs, and Megatron's ``--recompute-granularity selective`` recomputes only the
core attention (Korthikanti et al. 2023, arXiv 2205.05198, §5: 2.7 % more FLOPs for GPT-3).
Memory: the kept activations are sized as no recomputation (``activations.saved_bytes_per_sbh``, the
most either policy keeps). For torchtitan's op policy it is on the high side: its Llama-3.1-8B FSDP 8
run at local batch 2 measured 77.0 GiB a GPU (benchmarks/llama3_h100_202412_torchtitan.md @820504e,
96 GB H100s) where gpufit plans 114 GiB, so a selective job may be planned on more GPUs than it needs."""


def fsdp_gradient_bytes(training: TrainingSpec, job_bytes: float) -> float:
    """Bytes of a gradient FSDP keeps for a parameter (``accumulated_gradient_bytes``): fp32 where the
    optimiser keeps an fp32 master, the job's own under ``adamw-bf16``."""
    return job_bytes if training.optimizer == "adamw-bf16" else max(job_bytes, 4.0)


def reduce_input_bytes(training: TrainingSpec, job_bytes: float, accumulated: float) -> float:
    """Bytes a parameter's unsharded gradient adds under FSDP beyond the gradient itself
    (``sharded_memory.fsdp_gathered_bytes``): FSDP2 copies every gradient into a reduce-scatter input
    in its reduce dtype, fp32 where the optimiser keeps an fp32 master (``fsdp_gradient_bytes``), and
    keeps it until the next block's post-backward; none while it accumulates under no_sync
    (``accumulated``), which reduces nothing."""
    return 0.0 if accumulated else fsdp_gradient_bytes(training, job_bytes)


def accumulated_gradient_bytes(
    training: TrainingSpec,
    trained_params: float,
    job_grad_bytes: float,
    terms: list[Term],
) -> float:
    """The whole model's gradients, which each GPU of a sharded job holds unsharded while it
    accumulates micro-batches without reducing them (``training.accumulation_sync: last``), and the
    plan's line for them. PyTorch FSDP's ``no_sync``: "This likely results in higher memory usage
    because FSDP will accumulate the full model gradients (instead of gradient shards) until the
    eventual sync" (torch/distributed/fsdp/fully_sharded_data_parallel.py,
    ``FullyShardedDataParallel.no_sync``); FSDP2 under ``set_requires_gradient_sync(False)``
    reshards the parameters but keeps each one's unsharded gradient. Hugging Face Accelerate enters
    it on every micro-batch but the last unless ``sync_each_batch`` is set (``Accelerator.accumulate``
    and ``no_sync``, huggingface/accelerate @16cb6eb8; the Trainer's loop does the same, exempting
    DeepSpeed, and older Trainers ignore ``sync_each_batch``); Lightning Fabric's FSDP strategy maps
    ``no_backward_sync`` to it, which litgpt's full fine-tune enters while it accumulates
    (litgpt/finetune/full.py lines 253-254 @00af8b0). DeepSpeed ZeRO-2/3, torchtune's and
    torchtitan's FSDP2 recipes and the Lightning Trainer reduce every micro-batch
    (``accumulation_sync: every``).
    No sharded gradient exists meanwhile (the optimiser step sets them to None, and each unit's
    unsharded gradient is freed as its shard is made on the last micro-batch), so a GPU of N holds
    these bytes × (1 − 1/N) beyond the gradient shard ``sharded_bytes`` counts
    (``beyond_shard_bytes``); a replica that holds the whole job holds its gradients already.
    Their dtype is the unsharded parameters' (FSDP1 keeps ``param_dtype``; FSDP2 casts to
    ``reduce_dtype``): fp32 (4 B) wherever the optimiser keeps an fp32 master (Lightning's
    ``bf16-mixed`` runs FSDP with fp32 parameters; an FSDP2 policy with an fp32 ``reduce_dtype``),
    the safe side, though Accelerate's bf16 policy keeps 2 B; the job's own bytes under pure 16-bit
    training (``adamw-bf16``). The shard subtracted is at the same bytes: a sharded mixed-precision
    job's 16 B a parameter (written "2 weights + 2 grads + 12" above) are, as FSDP stores them, a
    4 B fp32 parameter, a 4 B fp32 gradient shard and 8 B of moments (adamw-8bit 10 B and sgd 12 B
    likewise), so its gradient shard is 4 B ÷ N."""
    if training.gradient_accumulation == 1 or training.accumulation_sync == "every":
        return 0.0
    grad_bytes = fsdp_gradient_bytes(training, job_grad_bytes)
    held = trained_params * grad_bytes
    terms.append(
        Term(
            "unsharded accumulated gradients",
            held / GIB,
            "GiB",
            f"{trained_params:.4g} params × {grad_bytes:g} B, × (1 − 1/N) on each of N GPUs of a sharded job "
            f"beyond its gradient shard: {training.gradient_accumulation} micro-batches reduced on the last "
            "only (FSDP no_sync, the Hugging Face Trainer's and Lightning Fabric's default)",
        )
    )
    return held


def frozen_gradient_bytes(
    training: TrainingSpec, arch: ModelArch, weight_bytes: float, terms: list[Term]
) -> tuple[float, float]:
    """(what a sharded LoRA job's FSDP adds for its frozen weights, split over its GPUs; their
    gradients held whole while it accumulates under no_sync), and the plan's line. The
    ``FullyShardedDataParallel`` docstring: "For use_orig_params=True, FSDP supports mixing frozen
    and non-frozen parameters, but it's recommended to avoid doing so to prevent higher than expected
    gradient memory usage": a unit's flat gradient covers every parameter in it (torch 2.1
    ``_use_sharded_grad_views`` only sets the frozen views' ``.grad`` to None). Lightning Fabric's
    FSDP strategy sets ``use_orig_params=True`` ("Enables joint setup of model and optimizer"), and
    litgpt wraps each ``Block``, adapters inside, in its LoRA fine-tunes (finetune/lora.py @8641822,
    ``FSDPStrategy(auto_wrap_policy={Block}, ...)``); a hand-written Accelerate FSDP1 loop with
    transformer-layer wrapping mixes them too, and Accelerate then upcasts every flat parameter that
    needs gradients to fp32, frozen weights included (``Accelerator.prepare_model``). The Hugging Face
    Trainer wraps a PEFT model's adapters apart itself (transformers ``update_fsdp_plugin_peft`` sets
    PEFT's ``fsdp_auto_wrap_policy``), as fms-hf-tuning and torchtune's first ``lora_fsdp_wrap_policy``
    do; FSDP2 (torchtune, torchtitan) "mixes frozen and non-frozen parameters ... without using extra
    memory"; DeepSpeed ZeRO keeps no gradient for them: ``training.fsdp_frozen_gradients: false``, the
    default, as most frameworks run (true would refuse a 70B LoRA on one 8×80 GB node, which the
    Trainer and torchtune run: torchtune measured 27.6 GiB a GPU).
    The embeddings, head and final norm form the root unit, all frozen, and get none. Per frozen
    parameter ÷ N: the gradient at ``fsdp_gradient_bytes`` and, where that is fp32, Accelerate's
    upcast of the 16-bit weight (the safe side for litgpt's bf16-true, which keeps both 16-bit unless
    its rows say ``adamw-bf16``). Sized for 16- and 32-bit LoRA only: quantised frozen weights (int8,
    fp8; a 4-bit QLoRA base's packed storage) hold no gradient. Like every sharded term it applies
    only where gpufit shards the job: a framework that shards whatever fits (litgpt with more than one
    device) is sized so with ``training.sharding: full``."""
    if not training.fsdp_frozen_gradients or weight_bytes < 2.0:  # quantised frozen weights take none
        return 0.0, 0.0
    root_unit = arch.embedding_params or min(2.0 * arch.vocab * arch.hidden, arch.params / 2)
    frozen_params = arch.params - root_unit
    grad_bytes = fsdp_gradient_bytes(training, weight_bytes)
    per_param = grad_bytes + max(0.0, grad_bytes - weight_bytes)
    held = frozen_params * per_param
    terms.append(
        Term(
            "frozen weights' FSDP gradients",
            held / GIB,
            "GiB",
            f"{frozen_params:.4g} params outside the embeddings and head × {per_param:g} B (gradient"
            + (" + fp32 upcast" if per_param > grad_bytes else "")
            + "), ÷ N on each of N GPUs of a sharded job: FSDP1 units mixing frozen weights and adapters "
            "(training.fsdp_frozen_gradients: Lightning Fabric, litgpt)",
        )
    )
    return held, accumulated_gradient_bytes(training, frozen_params, weight_bytes, terms)


def framework_term(training: TrainingSpec, task: str) -> Term:
    """The plan's line for ``training.framework``: the fields it set, as the job runs them (a field
    the spec states wins, so a value may differ from the framework's default)."""
    assert training.framework is not None
    defaults = framework_defaults(training.framework)
    held = ", ".join(f"{field} {_spelled(getattr(training, field))}" for field in defaults)
    stated = training.model_fields_set
    trainer = training.framework.startswith("hf-trainer")
    if task == "finetune-qlora" and trainer and "kbit_preparation" not in stated:
        held += (
            f"; kbit_preparation {training.kbit_preparation}, gpufit's default: the Trainer's tools differ "
            "by release (TRL >= 0.26, axolotl, LLaMA-Factory and ms-swift keep the embeddings 16-bit and "
            "the optimiser on the GPU: none; PEFT's recipe with a paged optimiser: fp32-cast): state "
            "the job's"
        )
    if "activation_checkpointing" not in defaults and "activation_checkpointing" not in stated:
        held += (
            f"; activation_checkpointing {_spelled(training.activation_checkpointing)}, gpufit's default "
            "(full recomputation: the least memory, the most time): the framework's configs differ, state "
            "the job's"
        )
    return Term(
        "training framework",
        len(defaults),
        "fields",
        f"{training.framework} ({framework_title(training.framework)}): {held} "
        "(data/training_frameworks.yaml; a field the spec states wins)",
    )


ONE_GPU_ONLY = (
    "LitGPT fine-tunes a quantised model on one GPU only ('Quantization is currently not supported for "
    "multi-GPU training', litgpt/finetune/lora.py @00af8b0)"
)


def one_gpu_only(req: Requirements) -> bool:
    """Whether the named framework runs the job on one GPU and one node only: LitGPT with a quantised
    base (its fine-tunes raise when devices × nodes > 1)."""
    return req.framework == "litgpt" and req.precision in ("int8", "int4", "nf4")


def _spelled(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def training_requirements(
    spec: WorkloadSpec,
    arch: ModelArch,
    wbytes: float,
    terms: list[Term],
    common: Requirements,
) -> Requirements:
    training = spec.training
    assert training is not None
    if training.framework:
        terms.append(framework_term(training, spec.task))
    s, b, h, layers = training.sequence_tokens, training.micro_batch, arch.hidden, arch.layers
    opt = OPTIMIZER_BYTES[training.optimizer]
    paged = offloaded = 0.0
    deepspeed = training.sharding_library == "deepspeed"
    if spec.task in ("finetune-full", "pretrain"):
        grad_bytes = 4.0 if spec.precision == "fp32" else 2.0 if spec.precision == "fp8" else wbytes
        if spec.precision == "fp32":
            per_param, formula = 4 + 4 + (opt - 4), f"4 weights + 4 grads + {opt - 4:g} optimiser (fp32)"
        elif spec.precision == "fp8":
            per_param = 2 + 2 + opt
            formula = (
                f"2 bf16 weights + 2 grads + {opt:g} {training.optimizer} state "
                f"(FP8 training: {FP8_TRAINING_MEMORY})"
            )
        else:
            per_param = wbytes + wbytes + opt
            formula = f"{wbytes:g} weights + {wbytes:g} grads + {opt:g} {training.optimizer} state"
        sharded = arch.params * per_param
        replicated_states = 0.0
        checkpoint = arch.params * (2 + opt)
        terms.append(
            Term(
                "weights + grads + optimiser",
                sharded / GIB,
                "GiB",
                f"{arch.params:.4g} params × {per_param:g} B ({formula})",
            )
        )
        accumulated = accumulated_gradient_bytes(training, arch.params, grad_bytes, terms)
        frozen = 0.0
        trained, root_bytes = arch.params, wbytes
        unit_grad, reduce = grad_bytes, reduce_input_bytes(training, grad_bytes, accumulated)
    else:
        frozen = accumulated = 0.0  # the adapters' gradients are held whole on every GPU already
        adapters = lora_params(arch, training.lora_rank)
        sharded = arch.params * wbytes
        root_bytes = wbytes
        peft_prep = training.kbit_preparation == "fp32-cast"
        if spec.task == "finetune-qlora" and arch.vocab and arch.hidden:
            # a tied head shares the embedding matrix (config.json tie_word_embeddings)
            embed = arch.embedding_params or min(2.0 * arch.vocab * arch.hidden, arch.params / 2)
            kept = KBIT_FP32_PARAMS_BYTES if peft_prep else UNQUANTIZED_TRAIN_BYTES
            sharded += embed * (kept - wbytes)
            root_bytes = kept
            terms.append(
                Term(
                    "k-bit prep fp32 embeddings" if peft_prep else "unquantised embeddings",
                    embed * (kept - wbytes) / GIB,
                    "GiB",
                    f"embeddings + output head {embed:.4g} params at {kept:g} B, not {wbytes:.3g} ("
                    + (
                        "PEFT prepare_model_for_kbit_training casts them to fp32)"
                        if peft_prep
                        else "kbit_preparation none: kept 16-bit, as torchtune, litgpt and TRL ≥ 0.26 do)"
                    ),
                )
            )
        terms.append(
            Term(
                "frozen base weights",
                sharded / GIB,
                "GiB",
                f"{arch.params:.4g} params × {wbytes:.3g} B ({spec.precision})",
            )
        )
        if spec.task == "finetune-lora":  # a sharded job's FSDP1 units may give them gradients too
            frozen, accumulated = frozen_gradient_bytes(training, arch, wbytes, terms)
        terms.append(
            Term(
                "lora adapter params", adapters / 1e6, "M", f"rank {training.lora_rank} on every linear layer"
            )
        )
        adapter_bytes = 4.0 if training.adapter_dtype == "fp32" else 2.0
        trained = adapters
        unit_grad, reduce = wbytes, reduce_input_bytes(training, wbytes, accumulated)
        # FSDP shards the adapters with the base; ZeRO-3 keeps those of at most 1e5 elements whole on
        # every GPU (stage3_param_persistence_threshold): counted whole under it; gradients whole on each
        replicated_states = adapters * adapter_bytes * (2 if deepspeed else 1)
        if not deepspeed:
            sharded += adapters * adapter_bytes
        checkpoint = adapters * (2 + opt)
        terms.append(
            Term(
                "adapter weights + grads",
                adapters * 2 * adapter_bytes / GIB,
                "GiB",
                f"adapters × ({adapter_bytes:g} + {adapter_bytes:g}) B ({training.adapter_dtype}); FSDP "
                "shards the weights with the base (ZeRO-3 keeps those of at most 1e5 elements whole, "
                "stage3_param_persistence_threshold: all counted whole) and each GPU is counted the "
                "whole gradients (unsharded under no_sync; the heavy side otherwise)",
            )
        )
        if spec.task == "finetune-qlora" and peft_prep:
            paged = adapters * 8
            terms.append(
                Term(
                    "paged optimiser state (host RAM)",
                    paged / GIB,
                    "GiB",
                    "adapters × 8 B (fp32 Adam moments, paged to CPU memory)",
                )
            )
        else:
            sharded += adapters * opt
            terms.append(
                Term(
                    "adapter optimiser state",
                    adapters * opt / GIB,
                    "GiB",
                    f"adapters × {opt:g} B ({training.optimizer}), sharded over the GPUs of a sharded job",
                )
            )
    eager = arch.attention_softcap and training.softcap_attention == "eager"
    recompute_all = training.activation_checkpointing is True
    selective = training.activation_checkpointing == "selective"
    per_layer, per_formula = saved_bytes_per_sbh(
        arch,
        spec.task,
        training.lora_targets,
        training.lora_dropout > 0.0,
        training.adapter_dtype,
        training.framework,
        eager,
    )
    scores = eager_score_bytes_per_sbh(arch, s, eager)
    if scores:
        per_layer += scores
        per_formula += f" + {scores:.1f} soft-capped eager attention scores (8 B × heads × s ÷ h)"
    saved = FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN if recompute_all else per_layer
    on_gpu = min(layers, OFFLOAD_RESIDENT_LAYERS) if training.activation_offload else layers
    acts = on_gpu * saved * s * b * h
    if recompute_all:
        acts += per_layer * s * b * h
        act_formula = f"{on_gpu} layers × 2·s·b·h + one layer × {per_formula} (full recompute)"
    elif selective:
        act_formula = f"{on_gpu} layers × {per_formula} (selective recompute keeps at most this)"
    else:
        act_formula = f"{on_gpu} layers × {per_formula} (no recompute)"
    if eager:  # the backward of one layer's soft-capped attention, above what it saved
        acts += EAGER_SOFTCAP_BACKWARD_BYTES * arch.heads * s * s * b
        act_formula += f" + one layer's attention backward {EAGER_SOFTCAP_BACKWARD_BYTES:g} B × heads × s²·b"
    if training.activation_offload:
        offloaded = (layers - on_gpu) * saved * s * b * h
        act_formula += f"; {layers - on_gpu} layers' saved activations offloaded to host RAM (torchtune)"
    chunked = CHUNKED_LOSS_BYTES_PER_LOGIT if training.compile else EAGER_CHUNKED_LOSS_BYTES_PER_LOGIT
    per_logit = chunked if training.loss == "chunked" else LOSS_BYTES_PER_LOGIT
    logits = s * b * arch.vocab * per_logit
    terms.append(Term("activations", acts / GIB, "GiB", f"{act_formula}; s={s}, b={b}, h={h}"))
    loss_note = f"{training.loss} loss" + (
        ", compiled"
        if training.loss == "chunked" and training.compile
        else ", eager"
        if training.loss == "chunked"
        else ""
    )
    terms.append(Term("loss logits", logits / GIB, "GiB", f"s·b·vocab × {per_logit} B ({loss_note})"))
    full_model = spec.task in ("finetune-full", "pretrain")
    gathered = 2.0 if spec.precision == "fp8" and full_model else wbytes  # FP8 training gathers bf16
    working: ShardedWorkingSet = working_set(
        training.sharding_library,
        arch,
        weight_bytes=gathered,
        root_param_bytes=max(root_bytes, gathered),
        trained_params=trained,
        grad_bytes=unit_grad,
        reduce_bytes=reduce,
        comm_bytes=4.0 if spec.precision == "fp32" else 2.0,
        unit_grads=full_model or bool(frozen),
        full_model=full_model,
    )
    terms.append(working_term(working))
    k = TRAIN_FLOPS_PER_PARAM_TOKEN[spec.task]
    attention = ATTENTION_TRAIN_FLOPS_PER_TOKEN_LAYER * layers * s * h * k / 6.0
    recompute = 0.0
    if recompute_all:
        recompute = RECOMPUTE_FLOPS_PER_PARAM_TOKEN * arch.params_active + attention * 2.0 / k
    elif selective:
        recompute = SELECTIVE_RECOMPUTE_FLOPS_PER_PARAM_TOKEN * arch.params_active
    flops = (k * arch.params_active + attention + recompute) * training.tokens
    terms.append(
        Term(
            "checkpoint",
            checkpoint / 1e9,
            "GB",
            "trained weights (2 B) + optimiser state per trained parameter",
        )
    )
    recomputed = "matmuls (selective)" if selective else "forward"
    terms.append(
        Term(
            "training compute",
            flops,
            "FLOP",
            f"({k:g} × {arch.params_active:.4g} params + attention {attention:.3g}"
            + (f" + recomputed {recomputed} {recompute:.3g}" if recompute else "")
            + " per token) "
            f"× {training.tokens:.3g} tokens",
        )
    )
    return replace(
        common,
        sharded_bytes=sharded,
        kv_bytes=0.0,
        replicated_bytes=replicated_states + acts + logits,
        accumulated_grad_bytes=accumulated,
        frozen_grad_bytes=frozen,
        framework=training.framework or "",
        paged_optimizer_bytes=paged,
        offloaded_activation_bytes=offloaded,
        bytes_per_decode_step=0.0,
        flops_per_decode_step=0.0,
        min_bandwidth_gbps=0.0,
        train_flops=flops,
        terms=tuple(terms),
        checkpoint_bytes=checkpoint,
        eager_training=not training.compile,
        shard_training=training.sharding == "full" or deepspeed,
        sharded_working=working,
    )
