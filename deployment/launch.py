"""The model server a ``serve`` deployment starts, as the plan's numbers: ``ServerLaunch``, and
the pinned engine images it runs (``machine.serving`` renders the launch and names the flags
of each pinned version)."""

from __future__ import annotations

import math
from dataclasses import dataclass

VLLM_IMAGE = "vllm/vllm-openai:v0.8.5"
SGLANG_IMAGE = "lmsysorg/sglang:v0.4.7.post1-cu124"
IMAGES = {"vllm": VLLM_IMAGE, "sglang": SGLANG_IMAGE}

DOWNLOAD_MB_PER_S = 100.0
"""Assumed weight download rate, MB/s, from the Hub or the bucket: a stated assumption (about
800 Mbit/s, below what GPU instances' 10-400 Gbit/s links allow), not a measurement; it only
sizes the health check's grace period, which errs long."""
ENGINE_START_S = 300
"""Pulling the engine's image (a few GB) and starting it, before weights: five minutes."""


@dataclass(frozen=True)
class ServerLaunch:
    """What one machine runs: ``replicas`` servers of ``tensor_parallel`` GPUs each, replica ``i``
    on GPUs ``i·tp … i·tp+tp-1`` and port ``base_port + i``."""

    engine: str
    model: str
    revision: str | None
    served_name: str
    tensor_parallel: int
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    quantization: str | None
    kv_cache_dtype: str | None
    replicas: int
    base_port: int
    weights_gb: float

    @property
    def image(self) -> str:
        return IMAGES[self.engine]

    def port(self, replica: int) -> int:
        return self.base_port + replica

    def ports(self) -> list[int]:
        return [self.port(r) for r in range(self.replicas)]

    def devices(self, replica: int) -> str:
        """``CUDA_VISIBLE_DEVICES`` of one replica (Docker's ``--gpus device=...``)."""
        first = replica * self.tensor_parallel
        return ",".join(str(g) for g in range(first, first + self.tensor_parallel))

    @property
    def grace_seconds(self) -> int:
        """How long a new machine may take to become healthy: image and start
        (``ENGINE_START_S``) plus the weights at ``DOWNLOAD_MB_PER_S``, twice over for loading
        them into GPU memory, rounded up to a minute."""
        seconds = ENGINE_START_S + 2 * self.weights_gb * 1000 / DOWNLOAD_MB_PER_S
        return int(math.ceil(seconds / 60) * 60)
