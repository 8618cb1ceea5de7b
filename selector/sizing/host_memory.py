"""Host RAM a training node needs beside its GPUs: the paged optimiser state (PEFT's k-bit
preparation) and the offloaded activations (``training.activation_offload``), for every process
the node runs."""

from __future__ import annotations

from selector.catalog import InstanceType
from selector.sizing.terms import GIB, Requirements, Term, held_names


def host_memory_cause(req: Requirements) -> str:
    """What holds a training job's host RAM: the paged optimiser state (PEFT's k-bit preparation)
    and/or the offloaded activations (``training.activation_offload``)."""
    causes = held_names(
        ("the paged optimiser state", req.paged_optimizer_bytes),
        ("the offloaded activations", req.offloaded_activation_bytes),
    )
    return " and ".join(causes) or "host-side state"


def node_host_gib(req: Requirements, gpus_per_node: int) -> float:
    """Host RAM a training node needs: ``Requirements.host_bytes`` (one process's paged optimiser state
    and offloaded activations) for each of its processes, one per GPU, as torchrun's
    ``--nproc-per-node`` runs a multi-node job (machine/boot.py) and as single-node launchers
    (torchrun, accelerate launch) run one (a single-process job is over-counted: the safe side).
    Each process builds its own optimiser and offloads its own activations (bitsandbytes' paged
    optimisers page each process's state apart; torchtune's ``OffloadActivations`` keeps each rank's
    saved tensors in its own pinned host memory), whether the processes replicate the job (DDP) or
    shard it: gpufit keeps adapter state replicated under sharding too (the slow side)."""
    return gpus_per_node * req.host_bytes / GIB


def _per_node(req: Requirements, it: InstanceType) -> str:
    n = it.gpu_count
    return f"{n} processes × {req.host_bytes / GIB:.2f} GiB" if n > 1 else f"{req.host_bytes / GIB:.2f} GiB"


def host_memory_rejection(req: Requirements, it: InstanceType, usable_fraction: float) -> str | None:
    """Why ``it`` cannot hold the job's host-side state (``node_host_gib`` over ``usable_fraction``
    of its RAM), or None."""
    need = node_host_gib(req, it.gpu_count)
    usable = it.memory_gib * usable_fraction
    if need <= usable:
        return None
    return (
        f"host RAM for {host_memory_cause(req)}: {need:.1f} GiB ({_per_node(req, it)}); "
        f"{it.name} has {it.memory_gib:g} GiB, {usable:.1f} usable"
    )


def host_memory_terms(req: Requirements, it: InstanceType) -> tuple[Term, ...]:
    """The plan's line for a node's host RAM, where the job keeps anything there."""
    if not req.host_bytes:
        return ()
    return (
        Term(
            "host RAM per node",
            node_host_gib(req, it.gpu_count),
            "GiB",
            f"{_per_node(req, it)} ({host_memory_cause(req)}); {it.name} has {it.memory_gib:g} GiB",
        ),
    )
