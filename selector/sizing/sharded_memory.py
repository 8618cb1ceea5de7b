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
"""Gathered parameter elements ZeRO-3 may keep on each GPU between modules: ``stage3_max_reuse_distance``
(1e9) and ``stage3_prefetch_bucket_size`` (5e7), DeepSpeed's defaults (deepspeed/runtime/zero/config.py
@edaa722). After a submodule runs, DeepSpeed releases only the parameters it will use again beyond
the next ``max_reuse_distance`` elements of the module trace (``__params_to_release``,
deepspeed/runtime/zero/partitioned_param_coordinator.py). The window is checked only at module
boundaries (``if params_traversed >= self.__max_reuse_dist_in_numel: break``), so it can overrun by
one module, and the prefetch by one parameter (``while ... numel_prefetching <
max_params_to_prefetch``); the module running is fetched whatever the limits: the bound adds two of
the model's largest parameters (``ShardedWorkingSet.largest_param_numel``). Never more than the model.
With one partition no gather buffer is made (``_no_gather_coalesced``: the parameter views its own
partition, partition_parameters.py)."""

ZERO3_REDUCE_BUCKET_NUMEL = 5e8
"""ZeRO-3's gradient bucket, ``reduce_bucket_size`` elements (DeepSpeed default 5e8) in the
communication dtype (``comm_dtypes = {self.communication_data_type}``: the model's 16-bit dtype
under bf16/fp16), allocated once on the GPU when ``contiguous_gradients`` is on (the default):
``bucket.buffer = torch.empty(self.reduce_bucket_size, dtype=...)`` (deepspeed/runtime/zero/stage3.py
@edaa722). Reducing it (``reduce_scatter`` on by default) concatenates the padded partitions into a
second bucket-sized copy (``reduce_scatter_coalesced``: ``torch.cat(tensor_partitions_lst_with_padding)``),
and a trained parameter's whole 16-bit gradient exists before it is copied in or, larger than the
bucket, reduced on its own: the bucket, a copy of as much as it holds (at most the trained
parameters) and the largest trained parameter's gradient. The Hugging Face
Trainer's ``auto`` sets hidden² elements, far less: the default is the safe side, as gpufit does not
write the job's DeepSpeed config."""

ZERO3_SUB_GROUP_NUMEL = 1e9
"""ZeRO-3's optimiser step runs one sub-group of ``sub_group_size`` trained elements at a time
(default 1e9, deepspeed/runtime/zero/config.py). For each it casts the sub-group's gradients, held
in the model's dtype (``grad_accum_dtype``), to an fp32 copy, ``self.flatten(
self.averaged_gradients[i]).to(fp32)`` in ``_prepare_fp32_grad_for_sub_group`` (stage3.py @edaa722):
a flat copy (2 B under 16-bit training, freed once cast) then the fp32 gradient (4 B); the optimiser
then runs on it, and torch's foreach AdamW (``adamw_torch``, the Trainer's default before torch 2.8)
makes one 4 B square-root temporary of ``exp_avg_sq`` (torch/optim/adamw.py ``_multi_tensor_adamw``,
``torch._foreach_sqrt``; the rest runs in place; the fused AdamW and DeepSpeed's FusedAdam make none):
``ZERO3_STEP_BYTES`` each, the heavy side."""

ZERO3_STEP_BYTES = 8.0
"""Bytes per element of the sub-group at the step's peak: the fp32 gradient and AdamW's temporary,
4 + 4 (above the 4 + 2 of the cast)."""


def working_set(
    library: Literal["fsdp", "deepspeed"],
    arch: ModelArch,
    *,
    weight_bytes: float,
    root_param_bytes: float,
    trained_params: float,
    grad_bytes: float,
    reduce_bytes: float,
    comm_bytes: float,
    unit_grads: bool,
    full_model: bool,
) -> ShardedWorkingSet:
    """The working set of a model with ``arch.layers`` blocks and a root of embeddings and head
    (one matrix when tied). Under FSDP a parameter's unsharded gradient takes ``grad_bytes`` and,
    reduced in fp32, ``reduce_bytes`` more for the reduce-scatter input; a block's is counted when
    ``unit_grads`` (its own weights get gradients: a full fine-tune, or FSDP1 units that give frozen
    weights gradients, and no whole-model gradients are held already), the root's too when
    ``full_model``. ``comm_bytes``: ZeRO-3's communication and gradient dtype."""
    root = arch.embedding_params or min(2.0 * arch.vocab * arch.hidden, arch.params / 2)
    layer = (arch.params - root) / max(arch.layers, 1)
    # the largest parameter: the head, an MLP's gate and up projections (fused in some models), or,
    # in a mixture of experts, every expert's gate and up projections fused into one tensor
    # (transformers >= 5): about two thirds of an average layer, the experts' MLPs being most of it
    mlp = 2.0 / 3.0 * layer if arch.is_moe else 2.0 * arch.ffn * arch.hidden
    largest = max(arch.vocab * arch.hidden, mlp)
    return ShardedWorkingSet(
        library=library,
        root_bytes=root * root_param_bytes,
        layer_bytes=layer * weight_bytes,
        unit_grad_bytes=layer * (grad_bytes + reduce_bytes) if unit_grads else 0.0,
        root_grad_bytes=root * grad_bytes if unit_grads and full_model else 0.0,
        root_reduce_bytes=root * reduce_bytes if unit_grads and full_model else 0.0,
        model_bytes=root * root_param_bytes + (arch.params - root) * weight_bytes,
        element_bytes=weight_bytes if weight_bytes >= 1.0 else 2.0,
        largest_param_numel=largest,
        largest_trained_numel=largest if full_model else 0.0,
        trained_params=trained_params,
        comm_bytes=comm_bytes,
    )


def fsdp_gathered_bytes(ws: ShardedWorkingSet) -> float:
    """FSDP's peak of gathered parameters and unsharded gradients on each GPU of a sharded job. The
    root unit stays gathered from its forward through the backward pass (FSDP1 ``_post_forward_reshard``:
    "Do not free the root's parameters in the post-forward"; FSDP2 sets the root's
    ``post_forward_mesh_info`` to None, "the parameters would be freed and all-gathered immediately";
    torch/distributed/fsdp), and so does its 16-bit gradient, made first (the output head) and reduced
    last (FSDP2's root post-backward runs in ``_root_post_backward_final_callback``, its inputs being
    token ids that need none; FSDP1's one flat root gradient forms once the embedding's arrives); its
    fp32 reduce-scatter input comes at the end, when no block is gathered, and is taken instead of the
    blocks where larger. A block's
    backward, with the default ``BackwardPrefetch.BACKWARD_PRE``, "at the peak ... holds the current
    set of parameters, next set of parameters, and current set of gradients" (``BackwardPrefetch``
    docstring; FSDP2 prefetches the next block likewise): two blocks' weights and one block's
    gradient, the 16-bit gradient and, where it is reduced in fp32 (FSDP2 with an fp32
    ``reduce_dtype``, torchtitan's default), the previous block's fp32 reduce-scatter input FSDP2
    keeps until the next post-backward (``ReduceScatterState``): 2 + 4 B a parameter, which FSDP1's
    16-bit gradient stays below."""
    blocks = 2.0 * ws.layer_bytes + ws.unit_grad_bytes
    return ws.root_bytes + ws.root_grad_bytes + max(blocks, ws.root_reduce_bytes)


def zero3_gathered_bytes(ws: ShardedWorkingSet) -> float:
    """ZeRO-3's gathered parameters kept on each GPU: ``ZERO3_REUSE_WINDOW_NUMEL`` elements and two of
    the largest parameters, at most the model."""
    numel = ZERO3_REUSE_WINDOW_NUMEL + 2.0 * ws.largest_param_numel
    return min(numel * ws.element_bytes, ws.model_bytes)


def zero3_step_bytes(ws: ShardedWorkingSet, shards: int) -> float:
    """The optimiser step's peak over one sub-group (``ZERO3_SUB_GROUP_NUMEL``, ``ZERO3_STEP_BYTES``)."""
    return min(ZERO3_SUB_GROUP_NUMEL, ws.trained_params / max(shards, 1)) * ZERO3_STEP_BYTES


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
    gathered = zero3_gathered_bytes(ws) if shards > 1 else 0.0
    return gathered + zero3_bucket_bytes(ws) + zero3_step_bytes(ws, shards)


def zero3_bucket_bytes(ws: ShardedWorkingSet) -> float:
    """ZeRO-3's gradient reduction (``ZERO3_REDUCE_BUCKET_NUMEL``): the bucket, its reduce-scatter copy
    and the largest trained parameter's whole gradient, in the communication dtype."""
    copy = min(ZERO3_REDUCE_BUCKET_NUMEL, ws.trained_params)  # the bucket holds at most what is trained
    return (ZERO3_REDUCE_BUCKET_NUMEL + copy + ws.largest_trained_numel) * ws.comm_bytes


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
            f"on each GPU of a sharded job: the root (embeddings, head) {ws.root_bytes / GIB:.2f} GiB"
            + (f" and its gradient {ws.root_grad_bytes / GIB:.2f} GiB" if ws.root_grad_bytes else "")
            + f", kept through the backward pass, + two blocks' weights {ws.layer_bytes / GIB:.2f} GiB each"
            + (f" + one block's gradient {ws.unit_grad_bytes / GIB:.2f} GiB" if ws.unit_grad_bytes else "")
            + (
                f", or at the end the root's fp32 reduce-scatter input {ws.root_reduce_bytes / GIB:.2f} GiB "
                "where larger"
                if ws.root_reduce_bytes
                else ""
            )
            + " (BackwardPrefetch.BACKWARD_PRE; torch FSDP1 and FSDP2); none on one GPU",
        )
    return Term(
        "ZeRO-3 gathered parameters and buffers",
        working_bytes(ws, 2) / GIB,
        "GiB",
        f"on two GPUs: gathered parameters kept for reuse {zero3_gathered_bytes(ws) / GIB:.2f} GiB "
        "(stage3_max_reuse_distance + prefetch bucket + two of the largest parameters, at most the "
        f"model; none on one GPU) + gradient reduction {zero3_bucket_bytes(ws) / GIB:.2f} GiB (the "
        f"reduce_bucket_size {ZERO3_REDUCE_BUCKET_NUMEL:.0e} bucket, its reduce-scatter copy and the largest "
        "trained parameter's gradient) + the optimiser step over one sub-group "
        f"{zero3_step_bytes(ws, 2) / GIB:.2f} GiB (min(sub_group_size, trained ÷ N) × "
        f"{ZERO3_STEP_BYTES:g} B: fp32 gradient + AdamW temporary); DeepSpeed's defaults (stage3.py, "
        "partitioned_param_coordinator.py)",
    )


def beyond_shard_bytes(req: Requirements, shards: int) -> float:
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
    ``beyond_shard_bytes`` on each; ``Requirements.vram_gib_per_replica`` unsharded."""
    each = req.replicated_bytes + beyond_shard_bytes(req, shards)
    return (req.sharded_bytes + req.kv_bytes + req.state_bytes + max(shards, 1) * each) / GIB


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
    zero3 = req.sharded_working is not None and req.sharded_working.library == "deepspeed"
    held = (
        f"; unsharded, one GPU would hold it ({req.vram_gib_per_replica:.1f} GiB: training.sharding auto"
        + (" and sharding_library fsdp, as ZeRO-3 always shards" if zero3 else "")
        + ", where the framework allows)"
        if req.vram_gib_per_replica <= usable
        else ""
    )
    return (
        f"; no number of nodes holds it sharded: every GPU keeps {floor:.1f} GiB however many share the "
        f"model ({', '.join(parts)}){held}"
    )


def beyond_shard_formula_note(req: Requirements, shards: int) -> str:
    """The per-GPU memory line's words for ``beyond_shard_bytes`` on ``shards`` GPUs, naming
    only the parts present ("" when there are none)."""
    if not beyond_shard_bytes(req, shards):
        return ""
    parts = held_names(
        ("frozen weights' FSDP gradients", req.frozen_grad_bytes if shards > 1 else 0.0),
        ("accumulated FSDP gradients", req.accumulated_grad_bytes if shards > 1 else 0.0),
        (working_name(req.sharded_working), working_bytes(req.sharded_working, shards)),
    )
    return " + beyond the shards (" + ", ".join(parts) + ")"


def beyond_shard_refusal_note(req: Requirements, shards: int) -> str:
    """What a refusal says of ``beyond_shard_bytes`` on ``shards`` GPUs, and the setting that
    names a job that avoids them ("" when there are none)."""
    extra = beyond_shard_bytes(req, shards)
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
