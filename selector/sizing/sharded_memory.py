"""What a sharded training job holds on each GPU beyond its shard of the weights, gradients and
optimiser state: the parameters it gathers to compute with, and DeepSpeed ZeRO-3's own buffers.

A sharded job keeps 1/N of each parameter on each of N GPUs, but a layer cannot run on a shard:
its full weights are gathered before it runs and freed after. ``training.sharding_library`` says
which library does it, for FSDP and ZeRO-3 gather on different rules."""

from __future__ import annotations

from typing import Literal

from selector.model_arch import ModelArch
from selector.sizing.terms import GIB, Requirements, ShardedWorkingSet, Term, held_names

ZERO3_REUSE_WINDOW_NUMEL = 1e9 + 5e7
"""Gathered parameter elements ZeRO-3 may keep on each GPU: ``stage3_max_reuse_distance`` (1e9) and
``stage3_prefetch_bucket_size`` (5e7), DeepSpeed's defaults (deepspeed/runtime/zero/config.py
@edaa722). After a submodule runs, DeepSpeed releases only the parameters it will not use again
within the next ``max_reuse_distance`` elements of the module trace (``__params_to_release``,
deepspeed/runtime/zero/partitioned_param_coordinator.py): those it keeps all lie inside that window,
so they number at most 1e9 elements, plus what it has fetched ahead. Never more than the model.
With one partition no gather buffer is made (``_no_gather_coalesced``: the parameter views its own
partition, partition_parameters.py)."""

ZERO3_REDUCE_BUCKET_NUMEL = 5e8
"""ZeRO-3's gradient bucket, ``reduce_bucket_size`` elements (DeepSpeed default 5e8), allocated once
on the GPU when ``contiguous_gradients`` is on (the default): ``bucket.buffer =
torch.empty(self.reduce_bucket_size, dtype=...)`` (deepspeed/runtime/zero/stage3.py @edaa722). The
Hugging Face Trainer's ``auto`` sets hidden² elements, far less: the default is the safe side, as
gpufit does not write the job's DeepSpeed config."""

ZERO3_SUB_GROUP_NUMEL = 1e9
"""ZeRO-3's optimiser step runs one sub-group of ``sub_group_size`` trained elements at a time
(default 1e9, deepspeed/runtime/zero/config.py). For each it makes an fp32 copy of the sub-group's
16-bit gradients, ``self.flatten(self.averaged_gradients[i]).to(fp32)`` in
``_prepare_fp32_grad_for_sub_group`` (stage3.py @edaa722): a 16-bit flat copy (2 B) and its fp32
cast (4 B) of min(1e9, the GPU's share of trained parameters)."""


def working_set(
    library: Literal["fsdp", "deepspeed"],
    arch: ModelArch,
    *,
    weight_bytes: float,
    root_param_bytes: float,
    trained_params: float,
    grad_bytes: float,
    unit_grads: bool,
    full_model: bool,
) -> ShardedWorkingSet:
    """The working set of a model with ``arch.layers`` blocks and a root of embeddings and head
    (one matrix when tied): ``unit_grads`` when a block's own weights get gradients (a full
    fine-tune, or FSDP1 units that give frozen weights gradients) and no whole-model gradients are
    held already; ``full_model`` when the root's weights are trained too."""
    root = arch.embedding_params or min(2.0 * arch.vocab * arch.hidden, arch.params / 2)
    layer = (arch.params - root) / max(arch.layers, 1)
    return ShardedWorkingSet(
        library=library,
        root_bytes=root * root_param_bytes,
        layer_bytes=layer * weight_bytes,
        unit_grad_bytes=layer * grad_bytes if unit_grads else 0.0,
        root_grad_bytes=root * grad_bytes if unit_grads and full_model else 0.0,
        model_bytes=root * root_param_bytes + (arch.params - root) * weight_bytes,
        element_bytes=4.0 if weight_bytes >= 4.0 else 2.0,
        trained_params=trained_params,
        grad_bytes=grad_bytes,
    )


def fsdp_gathered_bytes(ws: ShardedWorkingSet) -> float:
    """FSDP's peak of gathered parameters on each GPU of a sharded job: the root unit, which stays
    gathered from its forward through the backward pass (FSDP1 ``_post_forward_reshard``: "Do not free
    the root's parameters in the post-forward"; FSDP2 sets the root's ``post_forward_mesh_info`` to
    None, "the parameters would be freed and all-gathered immediately"; torch/distributed/fsdp), and
    a block's backward with the default ``BackwardPrefetch.BACKWARD_PRE``, which "at the peak ...
    holds the current set of parameters, next set of parameters, and current set of gradients"
    (``BackwardPrefetch`` docstring; FSDP2 prefetches the next block likewise): two blocks' weights
    and one block's unsharded gradient. The root's own backward, where its gradient is made, is taken
    instead when it is larger (an untied output head of a large vocabulary)."""
    blocks = 2.0 * ws.layer_bytes + ws.unit_grad_bytes
    return ws.root_bytes + max(blocks, ws.root_grad_bytes)


def zero3_gathered_bytes(ws: ShardedWorkingSet) -> float:
    """ZeRO-3's gathered parameters kept on each GPU: ``ZERO3_REUSE_WINDOW_NUMEL`` elements, at most
    the model."""
    return min(ZERO3_REUSE_WINDOW_NUMEL * ws.element_bytes, ws.model_bytes)


def zero3_step_bytes(ws: ShardedWorkingSet, shards: int) -> float:
    """The optimiser step's fp32 gradient of one sub-group and the 16-bit flat copy it is cast from
    (``ZERO3_SUB_GROUP_NUMEL``); an fp32 gradient is flattened once."""
    flat = ws.grad_bytes if ws.grad_bytes < 4.0 else 0.0
    return min(ZERO3_SUB_GROUP_NUMEL, ws.trained_params / max(shards, 1)) * (4.0 + flat)


def working_bytes(ws: ShardedWorkingSet | None, shards: int) -> float:
    """What each of ``shards`` GPUs holds beyond its shards. FSDP: its gathered units, on two GPUs
    or more (one GPU computes on its own storage). ZeRO-3, which shards on one GPU too: its gradient
    bucket and optimiser-step buffers, and, from two GPUs, its gathered parameters. Each is counted
    on top of the activations, though the step's buffers come after they are freed (errs safe by at
    most the activations)."""
    if ws is None:
        return 0.0
    if ws.library == "fsdp":
        return fsdp_gathered_bytes(ws) if shards > 1 else 0.0
    bucket = ZERO3_REDUCE_BUCKET_NUMEL * (4.0 if ws.grad_bytes >= 4.0 else 2.0)
    gathered = zero3_gathered_bytes(ws) if shards > 1 else 0.0
    return gathered + bucket + zero3_step_bytes(ws, shards)


def working_limit_bytes(ws: ShardedWorkingSet | None) -> float:
    """``working_bytes`` as the GPUs grow without bound (the step's share of trained parameters
    vanishes; what is gathered does not)."""
    if ws is None:
        return 0.0
    if ws.library == "fsdp":
        return fsdp_gathered_bytes(ws)
    return working_bytes(ws, 2) - zero3_step_bytes(ws, 2)


def working_name(ws: ShardedWorkingSet | None) -> str:
    """How a plan line names ``working_bytes``."""
    if ws is None:
        return ""
    return "FSDP's gathered units" if ws.library == "fsdp" else "ZeRO-3's gathered parameters and buffers"


def working_term(ws: ShardedWorkingSet) -> Term:
    """The plan's line for the working set, its value on two GPUs (FSDP has none on one)."""
    if ws.library == "fsdp":
        return Term(
            "FSDP gathered units",
            fsdp_gathered_bytes(ws) / GIB,
            "GiB",
            f"on each GPU of a sharded job: the root (embeddings, head) {ws.root_bytes / GIB:.2f} GiB, kept "
            f"gathered through the backward pass, + two blocks' weights {ws.layer_bytes / GIB:.2f} GiB each"
            + (f" + one block's gradient {ws.unit_grad_bytes / GIB:.2f} GiB" if ws.unit_grad_bytes else "")
            + " (BackwardPrefetch.BACKWARD_PRE; torch FSDP1 and FSDP2); none on one GPU",
        )
    return Term(
        "ZeRO-3 gathered parameters and buffers",
        working_bytes(ws, 2) / GIB,
        "GiB",
        f"on two GPUs: gathered parameters kept for reuse {zero3_gathered_bytes(ws) / GIB:.2f} GiB "
        f"(min(stage3_max_reuse_distance + prefetch bucket, the model); none on one GPU) + gradient "
        f"bucket {ZERO3_REDUCE_BUCKET_NUMEL:.0e} elements + the optimiser step's fp32 gradient of one "
        f"sub-group {zero3_step_bytes(ws, 2) / GIB:.2f} GiB (min(sub_group_size, trained ÷ N) × "
        "(4 + 2) B); DeepSpeed's defaults (stage3.py, partitioned_param_coordinator.py)",
    )


def unsharded_gradient_bytes(req: Requirements, shards: int) -> float:
    """What a sharded job adds on each of ``shards`` GPUs beyond ``sharded_bytes``: a LoRA job's
    frozen weights' gradient shard (``frozen_gradient_bytes``), accumulating under FSDP no_sync, the
    whole gradients less their shard (``accumulated_gradient_bytes``), and the weights it gathers and
    ZeRO-3's buffers (``sharded_memory.working_bytes``; ZeRO-3's on one GPU too)."""
    working = working_bytes(req.sharded_working, shards)
    if shards <= 1:
        return working
    return working + req.frozen_grad_bytes / shards + req.accumulated_grad_bytes * (1.0 - 1.0 / shards)


def replica_gib(req: Requirements, shards: int) -> float:
    """What one copy of a training job's model holds over the ``shards`` GPUs it is sharded across:
    the sharded states once, and each GPU's own replicated part (activations, the loss) and
    ``unsharded_gradient_bytes`` on each; ``Requirements.vram_gib_per_replica`` unsharded."""
    each = req.replicated_bytes + unsharded_gradient_bytes(req, shards)
    return (req.sharded_bytes + req.kv_bytes + max(shards, 1) * each) / GIB


def unshardable_gib(req: Requirements) -> float:
    """What each GPU of a training job holds however many GPUs share it (the limit of
    ``per_gpu_steady_bytes`` as the shards grow): its replicated part (activations, the loss, any
    replicated state), accumulating under FSDP no_sync, the whole model's gradients, and what it
    gathers (``sharded_memory.working_limit_bytes``)."""
    held = req.replicated_bytes + req.accumulated_grad_bytes + working_limit_bytes(req.sharded_working)
    return held / GIB


def unshardable_note(req: Requirements, usable: float) -> str:
    """A training refusal's words when ``unshardable_gib`` alone exceeds a GPU's ``usable`` GiB: no
    node count holds the job sharded, and, where one GPU would hold it unsharded, that it would
    ("" when more GPUs would)."""
    floor = unshardable_gib(req)
    if floor <= usable:
        return ""
    replicated, accumulated = req.replicated_bytes, req.accumulated_grad_bytes
    gathered = working_limit_bytes(req.sharded_working)
    parts = held_names(
        (f"{replicated / GIB:.1f} GiB of activations and other per-GPU memory", replicated),
        (f"{accumulated / GIB:.1f} GiB of the whole model's accumulated gradients", accumulated),
        (f"{gathered / GIB:.1f} GiB of {working_name(req.sharded_working)}", gathered),
    )
    held = (
        f"; unsharded, one GPU would hold it ({req.vram_gib_per_replica:.1f} GiB: training.sharding auto, "
        "where the framework allows)"
        if req.vram_gib_per_replica <= usable
        else ""
    )
    return (
        f"; no number of nodes holds it sharded: every GPU keeps {floor:.1f} GiB however many share the "
        f"model ({', '.join(parts)}){held}"
    )


def gradient_formula_note(req: Requirements, shards: int) -> str:
    """The per-GPU memory line's words for ``unsharded_gradient_bytes`` on ``shards`` GPUs, naming
    only the parts present ("" when there are none)."""
    if not unsharded_gradient_bytes(req, shards):
        return ""
    parts = held_names(
        ("frozen weights' FSDP gradients", req.frozen_grad_bytes if shards > 1 else 0.0),
        ("accumulated FSDP gradients", req.accumulated_grad_bytes if shards > 1 else 0.0),
        (working_name(req.sharded_working), working_bytes(req.sharded_working, shards)),
    )
    return " + beyond the shards (" + ", ".join(parts) + ")"


def gradient_refusal_note(req: Requirements, shards: int) -> str:
    """What a refusal says of ``unsharded_gradient_bytes`` on ``shards`` GPUs, and the setting that
    names a job that avoids them ("" when there are none)."""
    extra = unsharded_gradient_bytes(req, shards)
    if not extra:
        return ""
    parts = held_names(
        (
            "unsharded accumulated gradients beyond their shard (a job that reduces every "
            "micro-batch, as DeepSpeed ZeRO-2/3, torchtune, torchtitan or Accelerate's sync_each_batch "
            "do, holds only its shard: training.accumulation_sync: every)",
            req.accumulated_grad_bytes,
        ),
        (
            "gradients of frozen weights in FSDP1 units mixed with the adapters (the Hugging Face "
            "Trainer, FSDP2, PEFT's fsdp_auto_wrap_policy or DeepSpeed give them none: "
            "training.fsdp_frozen_gradients false)",
            req.frozen_grad_bytes,
        ),
        (
            f"{working_name(req.sharded_working)}, which the job needs to compute",
            working_bytes(req.sharded_working, shards),
        ),
    )
    return f", {extra / GIB:.1f} GiB of it " + "; ".join(parts)
