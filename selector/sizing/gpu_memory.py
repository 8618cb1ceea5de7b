"""What each GPU of a replica holds: the shardable part split by the GPUs, the KV cache only as far
as its heads split, a recurrent state by its own heads, the replicated part whole, and a served
model's load peak where it is larger (``fit`` checks it against what the GPU may fill)."""

from __future__ import annotations

from selector.sizing.sharded_memory import beyond_shard_bytes
from selector.sizing.terms import GIB, Requirements


def per_gpu_gib(req: Requirements, shards: int, kv_heads: int) -> float:
    """Memory on each GPU when the shardable part is split ``shards`` ways (``per_gpu_steady_bytes``);
    the KV cache splits by tensor parallelism only up to the number of KV heads (beyond, heads
    replicate). An engine quantising a 16-bit checkpoint as it loads peaks before the KV cache
    exists: the larger of the two."""
    steady = per_gpu_steady_bytes(req, shards, kv_heads) / GIB
    if req.load_bytes:
        reserve = req.runtime_reserve_tp_bytes if shards > 1 else 0.0
        return max(steady, (req.load_bytes / shards + req.replicated_bytes + reserve) / GIB)
    return steady


def per_gpu_steady_bytes(req: Requirements, shards: int, kv_heads: int) -> float:
    """Bytes on each GPU once serving (weights, KV cache, workspace) or training, without a served
    model's load peak; over more GPUs, a served model's NCCL reserve, a job's unsharded gradients.
    The KV cache splits only as far as ``kv_heads``; a recurrent state by its own heads, all ways."""
    kv_split = min(shards, kv_heads) if kv_heads else shards
    reserve = (req.runtime_reserve_tp_bytes if shards > 1 else 0.0) + beyond_shard_bytes(req, shards)
    return (
        (req.sharded_bytes + req.state_bytes) / shards
        + req.kv_bytes / max(kv_split, 1)
        + req.replicated_bytes
        + reserve
    )
