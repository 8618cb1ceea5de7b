"""The spec's ``training`` section: what a fine-tune or pre-training job processes and how it keeps
its activations, adapters, loss and optimiser state."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from selector.spec.fields import Count, Optimizer, Strict
from selector.spec.frameworks import framework_defaults

Framework = Literal["hf-trainer", "hf-trainer-zero3", "litgpt", "torchtune", "torchtitan"]
"""The frameworks data/training_frameworks.yaml describes (tests keep the two the same)."""


ZERO3_DEFAULTS: dict[str, object] = {"accumulation_sync": "every", "fsdp_frozen_gradients": False}
"""What DeepSpeed ZeRO-3 does where the FSDP fields would differ: it reduce-scatters every micro-batch
(its engine exempts itself from no_sync) and gives frozen weights no gradient."""


class TrainingSpec(Strict):
    framework: Framework | None = Field(
        None,
        description="the training framework, which sets the defaults of the fields below that say what "
        "it does with memory (accumulation_sync, fsdp_frozen_gradients, sharding, sharding_library, "
        "kbit_preparation, adapter_dtype, loss; a field the spec states wins): hf-trainer (the Hugging "
        "Face Trainer with DDP/FSDP: TRL, axolotl, LLaMA-Factory, ms-swift), hf-trainer-zero3 (the same "
        "with DeepSpeed ZeRO-3), litgpt (fine-tuning, sized with its own model code's activations; a "
        "quantised one on one GPU only; its command line's bf16-mixed keeps fp32 weights: state precision "
        "fp32 then), torchtune (from v0.3.0), torchtitan; unset, gpufit's own defaults",
    )
    tokens: Count = Field(..., description="tokens processed by the whole job (all epochs)")

    @model_validator(mode="before")
    @classmethod
    def _framework_defaults(cls, data: object) -> object:
        """A named framework's defaults under the fields the spec leaves out (an unknown name is
        left for the field's own one-line error)."""
        if not isinstance(data, dict):
            return data
        framework = data.get("framework")
        defaults = framework_defaults(framework) if isinstance(framework, str) else {}
        if data.get("sharding_library", defaults.get("sharding_library")) == "deepspeed":
            defaults = {
                **defaults,
                **ZERO3_DEFAULTS,
            }  # ZeRO reduces every micro-batch, frozen weights keep none
        return {**defaults, **data}

    sequence_tokens: int = Field(2048, gt=0)
    micro_batch: int = Field(1, gt=0, description="sequences per GPU per step")
    activation_checkpointing: bool | Literal["selective"] = Field(
        True,
        description="true: full recomputation (each layer's input kept, its forward run again); "
        "selective: the matmul and attention outputs kept, half the forward's matmuls run again "
        "(torchtitan op-level SAC; Megatron --recompute-granularity selective runs less); false: none",
    )
    lora_rank: int = Field(16, gt=0)
    lora_targets: Literal["all-linear", "q-v"] = Field(
        "all-linear",
        description="layers the LoRA adapters train, for the activations they keep: every linear layer, "
        "or the query and value projections only (adapter parameters are sized on every linear layer)",
    )
    adapter_dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="LoRA adapters' dtype: fp32 (PEFT's default; each adapted layer keeps an fp32 copy of "
        "its input) or bf16 (torchtune, litgpt bf16-true)",
    )
    lora_dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="LoRA dropout; above 0 each adapter keeps its own dropout copy"
    )
    optimizer: Optimizer = "adamw"
    loss: Literal["stock", "chunked"] = Field(
        "stock",
        description="cross-entropy: stock (fp32 upcast of all logits) or chunked (torchtune/Unsloth style)",
    )
    softcap_attention: Literal["eager", "flash-attention-2"] = Field(
        "eager",
        description="how a model with soft-capped attention logits (Gemma 2) runs attention in training: "
        "eager (transformers' and litgpt's default, SDPA cannot soft-cap: each layer keeps its scores) or "
        "flash-attention-2 (>= 2.6, which soft-caps in its kernel and keeps none: Unsloth, axolotl's Gemma 2 "
        "examples, LLaMA-Factory with flash-attn installed)",
    )
    activation_offload: bool = Field(
        False, description="saved activations offloaded to host RAM (torchtune enable_activation_offloading)"
    )
    compile: bool = Field(
        False,
        description="true: compiled/fused kernels (torch.compile, Transformer Engine), as gpufit's training "
        "utilisation was fitted; false (default, the safe side): eager PyTorch, timed 1.27x slower "
        "(torchtune) and a chunked loss sized at 6.5 B per logit",
    )

    @field_validator("activation_checkpointing", mode="before")
    @classmethod
    def _checkpointing_mode(cls, value: object) -> object:
        if isinstance(value, bool) or value == "selective":
            return value
        raise ValueError(f"got {value!r}; expected true (full), false (none) or selective")

    sharding: Literal["auto", "full"] = Field(
        "auto",
        description="how a multi-GPU job holds weights, gradients and optimiser state: auto (each GPU "
        "holds the whole job when it fits one, as DDP, else ZeRO-3/FSDP over all GPUs) or full (always "
        "sharded over all GPUs of the job, as FSDP FULL_SHARD or ZeRO-3 runs it)",
    )
    sharding_library: Literal["fsdp", "deepspeed"] = Field(
        "fsdp",
        description="what shards a sharded job, for the memory each GPU needs beyond its shard: fsdp "
        "(PyTorch FSDP1/FSDP2 per transformer block: the root's weights and 16-bit gradient, two blocks' "
        "weights and a block's gradient) or deepspeed (ZeRO-3, which shards on one GPU too, reduces every "
        "micro-batch and gives frozen weights no gradient: gathered elements kept for reuse, its gradient "
        "bucket and the optimiser step's fp32 sub-group, at DeepSpeed's defaults)",
    )
    gradient_accumulation: int = Field(
        1,
        gt=0,
        description="micro-batches each GPU runs per optimiser step; above 1 on a sharded job the "
        "accumulation_sync setting decides whether every GPU holds the whole model's gradients",
    )
    accumulation_sync: Literal["last", "every"] = Field(
        "last",
        description="under gradient accumulation on a sharded job, when the job reduces gradients: last "
        "(default, the safe side: only on the last micro-batch, PyTorch FSDP no_sync as the Hugging Face "
        "Trainer/Accelerate and Lightning Fabric run it, so every GPU holds the whole model's unsharded "
        "gradients, fp32 where the optimiser keeps an fp32 master) or every (reduce-scattered each "
        "micro-batch: DeepSpeed ZeRO-2/3, torchtune, torchtitan, the Lightning Trainer, Accelerate "
        "sync_each_batch)",
    )
    fsdp_frozen_gradients: bool = Field(
        False,
        description="a sharded 16-bit LoRA job (finetune-lora; set training.sharding full where the "
        "framework shards whatever fits, as litgpt does over several GPUs): false (default) under the "
        "Hugging Face Trainer (TRL, axolotl, "
        "LLaMA-Factory, ms-swift: it wraps a PEFT model's adapters apart), FSDP2 (torchtune, torchtitan), "
        "PEFT's fsdp_auto_wrap_policy or DeepSpeed ZeRO; true where FSDP1 units mix the frozen base "
        "weights with the adapters under use_orig_params (Lightning Fabric and litgpt; a hand-written "
        "Accelerate FSDP1 loop with transformer-layer wrapping), which gives the frozen weights "
        "gradient memory too",
    )
    kbit_preparation: Literal["fp32-cast", "none"] = Field(
        "fp32-cast",
        description="QLoRA: fp32-cast (PEFT prepare_model_for_kbit_training, paged optimiser) or none "
        "(torchtune: unquantised parameters stay 16-bit, optimiser on the GPU)",
    )
