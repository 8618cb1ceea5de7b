"""What a sharded training job holds beyond its shards (selector/sizing/sharded_memory.py): FSDP's
gathered root and blocks, DeepSpeed ZeRO-3's gathered parameters and buffers, and LoRA adapters
sharded with the base."""

from __future__ import annotations

from typing import Any

import pytest

from selector.calibration import calibration_instance
from selector.catalog import load_gpus
from selector.sizing import Rejection, Requirements, fit, per_gpu_gib, requirements
from selector.sizing.memory import lora_params
from selector.sizing.sharded_memory import (
    fsdp_gathered_bytes,
    working_bytes,
    working_limit_bytes,
    zero3_step_bytes,
)
from selector.spec import SpecError, parse_spec

GIB = 2**30
GPUS = load_gpus()


def _req(task: str, preset: str = "llama-3.1-8b", precision: str = "bf16", **training: Any) -> Requirements:
    model: dict[str, Any] = {"preset": preset}
    if preset == "small":  # below ZeRO-3's reuse window: 0.5B parameters (Qwen2.5-0.5B's shape)
        model = {"params_b": 0.494, "layers": 24, "hidden": 896, "heads": 14, "kv_heads": 2, "vocab": 151936}
    spec = {
        "name": "sharded",
        "task": task,
        "model": model,
        "precision": precision,
        "training": {"tokens": 1e9, "sequence_tokens": 2048, "micro_batch": 1, **training},
    }
    return requirements(parse_spec(spec))


def test_fsdp_holds_the_root_and_its_gradient_two_blocks_and_a_blocks_gradient_on_two_gpus() -> None:
    """A Llama-3.1-8B full fine-tune under FSDP (AdamW with an fp32 master): each GPU of a sharded job
    holds the root unit (the untied embedding and head, 2 × 128,256 × 4,096 parameters at 2 B) and
    its 16-bit gradient, kept through the backward pass, two blocks' weights (BACKWARD_PRE: the current
    and the next) and one block's gradient, 2 B plus the 4 B fp32 reduce-scatter input FSDP2 keeps, or
    at the end the root's own fp32 reduce-scatter input where larger; one GPU computes on its own
    storage and gathers nothing."""
    req = _req("finetune-full")
    ws = req.sharded_working
    assert ws is not None and ws.library == "fsdp"
    root = 2 * 128256 * 4096
    block = (req.arch.params - root) / 32
    expected = root * 2 + root * 2 + max(2 * block * 2 + block * 6, root * 4)
    assert fsdp_gathered_bytes(ws) == pytest.approx(expected)
    assert working_bytes(ws, 1) == 0.0
    for shards in (2, 8):
        assert working_bytes(ws, shards) == pytest.approx(expected)
    sharded_and_replicated = req.sharded_bytes / 8 + req.replicated_bytes
    assert per_gpu_gib(req, 8, 0) == pytest.approx((sharded_and_replicated + expected) / GIB)
    assert per_gpu_gib(req, 1, 0) == pytest.approx(req.vram_gib_per_replica)
    # reduced in bf16: FSDP2 still copies each gradient into a 2 B reduce-scatter input
    pure = _req("finetune-full", optimizer="adamw-bf16")
    assert pure.sharded_working is not None
    pure_expected = root * 2 + root * 2 + max(2 * block * 2 + block * 4, root * 2)
    assert fsdp_gathered_bytes(pure.sharded_working) == pytest.approx(pure_expected)
    # accumulating under no_sync nothing is reduced: the 16-bit gradients alone, beside the whole ones
    accumulating = _req("finetune-full", gradient_accumulation=4)
    assert accumulating.sharded_working is not None
    assert fsdp_gathered_bytes(accumulating.sharded_working) == pytest.approx(
        root * 2 + root * 2 + 2 * block * 2 + block * 2
    )
    term = next(t for t in req.terms if t.name == "FSDP gathered units")
    assert term.value == pytest.approx(expected / GIB)
    assert f"its gradient {root * 2 / GIB:.2f} GiB" in term.formula
    assert f"the root's fp32 reduce-scatter input {root * 4 / GIB:.2f} GiB" in term.formula


def test_a_lora_job_gathers_frozen_blocks_without_their_gradient_unless_fsdp1_gives_them_one() -> None:
    """LoRA: the frozen root and blocks are gathered like any other (the root + 2 blocks), with no
    gradient, but for a block's where FSDP1 units mix frozen weights with the adapters
    (training.fsdp_frozen_gradients: 2 + 4 B); QLoRA gathers its 4-bit blocks at their packed size and
    its 16-bit root."""
    apart = _req("finetune-lora")
    mixed = _req("finetune-lora", fsdp_frozen_gradients=True)
    root = 2 * 128256 * 4096
    block = (apart.arch.params - root) / 32
    assert apart.sharded_working is not None and mixed.sharded_working is not None
    assert fsdp_gathered_bytes(apart.sharded_working) == pytest.approx(root * 2 + 2 * block * 2)
    assert fsdp_gathered_bytes(mixed.sharded_working) == pytest.approx(root * 2 + 2 * block * 2 + block * 6)
    qlora = _req("finetune-qlora", precision="nf4", kbit_preparation="none")
    assert qlora.sharded_working is not None
    assert fsdp_gathered_bytes(qlora.sharded_working) == pytest.approx(root * 2 + 2 * block * 4.13 / 8)


def test_lora_adapters_and_their_optimiser_state_shard_with_the_base() -> None:
    """FSDP shards every parameter, the adapters too: their weights and AdamW state divide over the
    GPUs; their gradients stay whole on each (held unsharded under no_sync). ZeRO-3 keeps parameters
    of at most 1e5 elements whole (stage3_param_persistence_threshold; a rank-16 LoRA matrix on a
    4,096-wide layer has 65,536) and partitions the optimiser state."""
    req = _req("finetune-lora", adapter_dtype="bf16")
    adapters = lora_params(req.arch, 16)
    base = next(t.value for t in req.terms if t.name == "frozen base weights") * GIB
    activations_and_loss = sum(t.value for t in req.terms if t.name in ("activations", "loss logits")) * GIB
    assert req.sharded_bytes == pytest.approx(base + adapters * (2 + 12))
    assert req.replicated_bytes == pytest.approx(adapters * 2 + activations_and_loss)
    zero3 = _req("finetune-lora", adapter_dtype="bf16", sharding_library="deepspeed")
    assert zero3.sharded_bytes == pytest.approx(base + adapters * 12)
    assert zero3.replicated_bytes == pytest.approx(adapters * 4 + activations_and_loss)
    assert next(t.value for t in zero3.terms if t.name == "adapter weights + grads") == pytest.approx(
        adapters * 4 / GIB
    )


def test_zero3_buffers_on_one_gpu_and_its_gathered_parameters_from_two() -> None:
    """The Hugging Face Trainer with ZeRO-3 (hf-trainer-zero3 sets sharding_library deepspeed, and
    ZeRO-3 always shards), at DeepSpeed's defaults: on one GPU its gradient reduction (the 5e8-element
    bf16 bucket, its reduce-scatter copy and the largest trained parameter's gradient, Llama-3.1-8B's
    head of 128,256 × 4,096) and the optimiser step over one sub-group, 8 B × min(1e9, trained ÷ N)
    (the fp32 gradient and AdamW's square-root temporary); from two GPUs also the gathered parameters
    it keeps, 1.05e9 elements plus two of the largest parameters, never more than the model."""
    req = _req("finetune-full", framework="hf-trainer-zero3")
    ws = req.sharded_working
    assert ws is not None and ws.library == "deepspeed" and req.shard_training
    params = req.arch.params
    head = 128256 * 4096
    bucket = (2 * 5e8 + head) * 2
    kept = (1.05e9 + 2 * head) * 2
    assert working_bytes(ws, 1) == pytest.approx(bucket + 1e9 * 8)  # 8B trained parameters: a whole sub-group
    assert working_bytes(ws, 8) == pytest.approx(bucket + kept + 1e9 * 8)  # 1.004e9 a GPU: capped
    assert working_bytes(ws, 16) == pytest.approx(bucket + kept + params / 16 * 8)
    assert zero3_step_bytes(ws, 64) == pytest.approx(params / 64 * 8)
    assert working_limit_bytes(ws) == pytest.approx(bucket + kept)
    small = _req("finetune-full", preset="small", framework="hf-trainer-zero3")
    assert small.sharded_working is not None  # the whole model is inside the window
    # the bucket, its copy (at most the 0.494e9 trained) and the largest parameter, the embedding
    small_bucket = (5e8 + 0.494e9 + 151936 * 896) * 2
    assert working_bytes(small.sharded_working, 2) == pytest.approx(
        small_bucket + 0.494e9 * 2 + 0.494e9 / 2 * 8
    )
    lora = _req("finetune-lora", framework="hf-trainer-zero3")  # trains the adapters only
    assert lora.sharded_working is not None
    adapters = lora_params(lora.arch, 16)
    assert working_bytes(lora.sharded_working, 1) == pytest.approx((5e8 + adapters) * 2 + adapters * 8)
    fp32 = _req("finetune-full", precision="fp32", sharding_library="deepspeed")
    assert fp32.sharded_working is not None and working_bytes(fp32.sharded_working, 1) == pytest.approx(
        (2 * 5e8 + head) * 4 + 1e9 * 8
    )


def test_a_plan_names_what_a_sharded_gpu_holds_beyond_its_shards() -> None:
    """The plan's per-GPU line and --explain name the working set; a one-GPU ZeRO-3 job is sized with
    its buffers and its line says so."""
    spec = {
        "name": "z3",
        "task": "finetune-full",
        "model": {"preset": "qwen2.5-3b"},
        "precision": "bf16",
        "training": {"tokens": 1e8, "sequence_tokens": 2048, "framework": "hf-trainer-zero3"},
    }
    req = requirements(parse_spec(spec))
    shape = fit(req, calibration_instance(GPUS["A100-80GB"], 1))
    assert not isinstance(shape, Rejection)
    line = next(t.formula for t in shape.terms if t.name == "per-GPU memory")
    assert "beyond the shards (ZeRO-3's gathered parameters and buffers)" in line
    assert any(t.name == "ZeRO-3 gathered parameters and buffers" for t in req.terms)
    fsdp = _req("finetune-full")
    node = fit(fsdp, calibration_instance(GPUS["A100-80GB"], 8))
    assert not isinstance(node, Rejection) and node.gpus_per_replica > 1
    line = next(t.formula for t in node.terms if t.name == "per-GPU memory")
    assert "beyond the shards (FSDP's gathered units)" in line
    assert any(t.name == "FSDP gathered units" for t in fsdp.terms)


def test_a_refusal_for_what_every_gpu_gathers_says_so() -> None:
    """A 70B full fine-tune at 4,096 tokens on A10G nodes: every GPU keeps its activations and FSDP's
    gathered root and blocks however many share the model, more than an A10G holds: the refusal
    names both."""
    spec = {
        "name": "big",
        "task": "finetune-full",
        "model": {"preset": "llama-3.1-70b"},
        "precision": "bf16",
        "training": {"tokens": 1e9, "sequence_tokens": 4096, "micro_batch": 1},
    }
    req = requirements(parse_spec(spec))
    refused = fit(req, calibration_instance(GPUS["A10G"], 8))
    assert isinstance(refused, Rejection) and refused.filter == "vram"
    assert "no number of nodes holds it sharded" in refused.reason
    root = 2 * 128256 * 8192  # Llama-3.1-70B's embedding and head
    block = (req.arch.params - root) / 80
    gathered = (root * 2 + root * 2 + max(2 * block * 2 + block * 6, root * 4)) / GIB
    assert f"{gathered:.1f} GiB of FSDP's gathered units" in refused.reason
    assert "FSDP's gathered units, which the job needs to compute" in refused.reason


def test_a_zero3_job_one_gpu_would_hold_unsharded_is_told_to_leave_zero3() -> None:
    """ZeRO-3 shards whatever the GPU count, so a job that no node count holds under it (a 0.5B LoRA at
    7,424 tokens on A10Gs: its whole model gathered and a 1 GB bucket beside the activations) but one
    GPU would hold unsharded (as DDP) is told to set sharding auto and leave ZeRO-3."""
    req = _req("finetune-lora", preset="small", sequence_tokens=7424, framework="hf-trainer-zero3")
    refused = fit(req, calibration_instance(GPUS["A10G"], 4))
    assert isinstance(refused, Rejection), refused
    assert "no number of nodes holds it sharded" in refused.reason
    assert "training.sharding auto and sharding_library fsdp, as ZeRO-3 always shards" in refused.reason


def test_a_mixture_of_experts_largest_parameter_is_its_fused_experts_not_the_dense_width() -> None:
    """ZeRO-3's window overrun is two of the largest parameters: for a mixture of experts, every
    expert's gate and up projections fused into one tensor, about two thirds of an average layer
    (Qwen3-30B-A3B: 128 experts × 2 × 768 × 2,048 = 0.40e9 elements), not the dense MLP width times
    the experts (which would read 5.1e9 there)."""
    moe = requirements(
        parse_spec(
            {
                "name": "moe",
                "task": "finetune-full",
                "model": {"preset": "qwen3-30b-a3b"},
                "precision": "bf16",
                "training": {"tokens": 1e8, "sequence_tokens": 2048, "framework": "hf-trainer-zero3"},
            }
        )
    )
    ws = moe.sharded_working
    assert ws is not None and moe.arch.is_moe
    assert 0.38e9 < ws.largest_param_numel < 0.46e9


def test_zero3_settings_fsdp_alone_has_are_spec_errors() -> None:
    """ZeRO-3 reduces every micro-batch and gives frozen weights no gradient: sharding_library
    deepspeed defaults the FSDP fields so, shards whatever `training.sharding` says, and refuses them
    stated otherwise, one line each."""
    base = {"name": "zz", "task": "finetune-lora", "model": {"preset": "llama-3.1-8b"}, "precision": "bf16"}
    plain = parse_spec({**base, "training": {"tokens": 1e8, "sharding_library": "deepspeed"}})
    assert plain.training is not None
    assert plain.training.accumulation_sync == "every" and not plain.training.fsdp_frozen_gradients
    assert requirements(plain).shard_training  # sharding auto, yet ZeRO-3 shards
    bad = {"tokens": 1e8, "sharding_library": "deepspeed", "accumulation_sync": "last"}
    with pytest.raises(SpecError) as err:
        parse_spec({**base, "training": {**bad, "fsdp_frozen_gradients": True}})
    problems = [str(p) for p in err.value.problems]
    assert any("training.accumulation_sync: last is FSDP's no_sync" in p for p in problems)
    assert any("training.fsdp_frozen_gradients: true is FSDP1's" in p for p in problems)
    # a framework's FSDP defaults give way to ZeRO-3's where the spec names deepspeed
    trainer = parse_spec(
        {**base, "training": {"tokens": 1e8, "framework": "hf-trainer", "sharding_library": "deepspeed"}}
    )
    assert trainer.training is not None and trainer.training.accumulation_sync == "every"


def test_fp8_training_gathers_its_bf16_weights() -> None:
    """FP8 training keeps bf16 weights and casts each GEMM's (torchao and Transformer Engine gather
    bf16 unless told otherwise): its gathered blocks and root are bf16's, not 1 B a parameter."""
    bf16 = _req("finetune-full")
    fp8 = _req("finetune-full", precision="fp8")
    assert bf16.sharded_working is not None and fp8.sharded_working is not None
    assert fp8.sharded_working.layer_bytes == pytest.approx(bf16.sharded_working.layer_bytes)
    assert fp8.sharded_working.root_bytes == pytest.approx(bf16.sharded_working.root_bytes)
