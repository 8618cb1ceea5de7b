"""The decode speed model: the efficiencies a serving engine reaches, the tensor-parallel
all-reduce latency, and the time of one decode step."""

from __future__ import annotations

from selector.catalog import GpuSpec
from selector.sizing.terms import Requirements

DEFAULT_BANDWIDTH_EFFICIENCY = 0.6
"""Share of peak memory bandwidth a serving engine reaches while decoding (model bandwidth
utilisation). Databricks, 'LLM Inference Performance Engineering: Best Practices' (2023)
reports about 60% MBU on A100/H100. Override with ``tuning.bandwidth_efficiency``."""

TP_ALLREDUCE_LATENCY_S = 13e-6
"""Time one tensor-parallel all-reduce of a decode step takes, whatever its few KiB: 11-14 µs
on 2-8 A100s for vLLM's custom all-reduce of 512 B to 32 KiB (sglang PR #2688, 'Support
twoshot kernel'). Megatron tensor parallelism all-reduces twice per layer in the forward pass
(Shoeybi et al. 2019, arXiv 1909.08053, Figure 4), so a decode step over t > 1 GPUs waits
2 × layers × this beyond the bytes it reads; without it decode at TP 4-8 came out 1.4-3.5×
faster than gpt-fast measured (docs/calibration.md)."""

DEFAULT_MFU = 0.40
"""Model FLOPs utilisation. Llama 3 pre-training reached 38-43% BF16 MFU on H100
(Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 4). Override with ``tuning.mfu``."""


def decode_speed(req: Requirements, gpu: GpuSpec, gpus: int) -> tuple[float, str]:
    """Decode step time = max(bytes read ÷ (bandwidth × efficiency), flops ÷ (TFLOPS × MFU)),
    over the GPUs that share one replica's weights (memory-bound decode: gpu-cloud-facts.md §6),
    plus two all-reduces per layer when they are more than one (``TP_ALLREDUCE_LATENCY_S``)."""
    memory_s = req.bytes_per_decode_step / (gpus * gpu.bandwidth_gbps * 1e9 * req.bandwidth_efficiency)
    comm_s = 2 * req.arch.layers * TP_ALLREDUCE_LATENCY_S if gpus > 1 else 0.0
    comm = f" + {2 * req.arch.layers} all-reduces × {TP_ALLREDUCE_LATENCY_S * 1e6:g} µs" if comm_s else ""
    tflops = gpu.tflops_at(req.precision)
    if tflops is None:
        return memory_s + comm_s, f"memory-bound (no sourced TFLOPS for the compute floor){comm}"
    compute_s = req.flops_per_decode_step / (gpus * tflops * 1e12 * req.mfu)
    if compute_s > memory_s:
        return compute_s + comm_s, f"compute-bound{comm}"
    return memory_s + comm_s, f"memory-bound{comm}"
