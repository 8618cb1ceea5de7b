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
    ZERO3_REDUCE_BUCKET_NUMEL,
    ZERO3_REUSE_WINDOW_NUMEL,
    fsdp_gathered_bytes,
    working_bytes,
    working_limit_bytes,
    zero3_step_bytes,
)
from selector.spec import parse_spec

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


def _root_and_block(req: Requirements) -> tuple[float, float]:
    arch = req.arch
    root = arch.embedding_params or 2 * arch.vocab * arch.hidden
    return root, (arch.params - root) / arch.layers


def test_fsdp_holds_the_root_two_blocks_and_a_blocks_gradient_on_two_gpus_or_more() -> None:
    """A Llama-3.1-8B full fine-tune under FSDP: each GPU of a sharded job holds the root unit (the
    untied embedding and head, 1.05B parameters at 2 B), two blocks' weights (BACKWARD_PRE: the
    current and the next) and one block's fp32 gradient, or the root's own gradient when that is
    larger; one GPU computes on its own storage and gathers nothing."""
    req = _req("finetune-full")
    ws = req.sharded_working
    assert ws is not None and ws.library == "fsdp"
    root, block = _root_and_block(req)
    assert root == pytest.approx(2 * 128256 * 4096)
    assert ws.root_bytes == pytest.approx(root * 2) and ws.layer_bytes == pytest.approx(block * 2)
    blocks = 2 * block * 2 + block * 4  # two blocks' bf16 weights + one block's fp32 gradient
    root_gradient = root * 4
    assert fsdp_gathered_bytes(ws) == pytest.approx(root * 2 + max(blocks, root_gradient))
    assert root_gradient > blocks  # Llama-3's 128k vocabulary: the head's backward is the peak
    assert working_bytes(ws, 1) == 0.0
    for shards in (2, 8):
        assert working_bytes(ws, shards) == pytest.approx(fsdp_gathered_bytes(ws))
    base = per_gpu_gib(req, 8, 0) - working_bytes(ws, 8) / GIB
    assert base == pytest.approx(req.sharded_bytes / 8 / GIB + req.replicated_bytes / GIB)
    assert per_gpu_gib(req, 1, 0) == pytest.approx(req.vram_gib_per_replica)


def test_a_lora_job_gathers_frozen_blocks_without_their_gradient_unless_fsdp1_gives_them_one() -> None:
    """LoRA: the frozen blocks are gathered like any other (2 blocks + the root), but carry a gradient
    only where FSDP1 units mix them with the adapters (training.fsdp_frozen_gradients); QLoRA gathers
    its 4-bit blocks at their packed size and its 16-bit root."""
    apart = _req("finetune-lora")
    mixed = _req("finetune-lora", fsdp_frozen_gradients=True)
    root, block = _root_and_block(apart)
    assert apart.sharded_working is not None and mixed.sharded_working is not None
    assert fsdp_gathered_bytes(apart.sharded_working) == pytest.approx(root * 2 + 2 * block * 2)
    assert fsdp_gathered_bytes(mixed.sharded_working) == pytest.approx(root * 2 + 2 * block * 2 + block * 4)
    qlora = _req("finetune-qlora", precision="nf4", kbit_preparation="none")
    assert qlora.sharded_working is not None
    assert fsdp_gathered_bytes(qlora.sharded_working) == pytest.approx(root * 2 + 2 * block * 4.13 / 8)


def test_lora_adapters_and_their_optimiser_state_shard_with_the_base() -> None:
    """FSDP and ZeRO-3 shard every parameter, the adapters too: their weights and AdamW state divide
    over the GPUs; their gradients stay whole on each (held unsharded under no_sync)."""
    req = _req("finetune-lora", adapter_dtype="bf16")
    adapters = lora_params(req.arch, 16)
    base = next(t.value for t in req.terms if t.name == "frozen base weights") * GIB
    assert req.sharded_bytes == pytest.approx(base + adapters * (2 + 12))
    activations_and_loss = sum(t.value for t in req.terms if t.name in ("activations", "loss logits")) * GIB
    assert req.replicated_bytes == pytest.approx(adapters * 2 + activations_and_loss)


def test_zero3_buffers_on_one_gpu_and_its_gathered_parameters_from_two() -> None:
    """The Hugging Face Trainer with ZeRO-3 (hf-trainer-zero3 sets sharding_library deepspeed, and
    ZeRO-3 always shards): on one GPU its gradient bucket (5e8 bf16 elements) and the optimiser
    step's fp32 copy of one sub-group's gradients with the bf16 flat copy it is cast from, (4 + 2) B ×
    min(1e9, trained ÷ N); from two GPUs also the gathered parameters it keeps for reuse, up to
    1.05e9 elements, never more than the model."""
    req = _req("finetune-full", framework="hf-trainer-zero3")
    ws = req.sharded_working
    assert ws is not None and ws.library == "deepspeed" and req.shard_training
    params = req.arch.params
    bucket = ZERO3_REDUCE_BUCKET_NUMEL * 2
    assert working_bytes(ws, 1) == pytest.approx(bucket + 1e9 * 6)  # 8B trained params: a full sub-group
    assert working_bytes(ws, 16) == pytest.approx(bucket + ZERO3_REUSE_WINDOW_NUMEL * 2 + params / 16 * 6)
    assert working_bytes(ws, 8) == pytest.approx(bucket + ZERO3_REUSE_WINDOW_NUMEL * 2 + 1e9 * 6)  # capped
    assert zero3_step_bytes(ws, 64) == pytest.approx(params / 64 * 6)
    assert working_limit_bytes(ws) == pytest.approx(bucket + ZERO3_REUSE_WINDOW_NUMEL * 2)
    small = _req("finetune-full", preset="small", framework="hf-trainer-zero3")
    assert small.sharded_working is not None
    assert working_bytes(small.sharded_working, 2) == pytest.approx(
        bucket + small.sharded_working.model_bytes + small.arch.params / 2 * 6
    )
    lora = _req("finetune-lora", framework="hf-trainer-zero3")  # trains the fp32 adapters only
    assert lora.sharded_working is not None
    adapters = lora_params(lora.arch, 16)
    assert zero3_step_bytes(lora.sharded_working, 4) == pytest.approx(adapters / 4 * 4)  # fp32: no flat copy
    assert working_bytes(lora.sharded_working, 1) == pytest.approx(
        ZERO3_REDUCE_BUCKET_NUMEL * 4 + adapters * 4
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
    assert f"{working_limit_bytes(req.sharded_working) / GIB:.1f} GiB of FSDP's gathered units" in refused.reason
    assert "FSDP's gathered units, which the job needs to compute" in refused.reason
