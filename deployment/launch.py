"""The model server a ``serve`` deployment starts, as the plan's numbers: ``ServerLaunch``, and
the pinned engine images it runs (``selector/data/engines.yaml``; ``machine.serving`` renders
the launch, checked against each release's own flags)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from selector.engines import pinned_builds


def _newest_image(engine: str) -> str:
    """The image of the newest pinned release's first build (digest when recorded)."""
    return pinned_builds(engine)[0][1][0].image


VLLM_IMAGE = _newest_image("vllm")
SGLANG_IMAGE = _newest_image("sglang")
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
    image_ref: str = ""  # the plan's engine build (tag, or tag@digest); "" = the newest pinned build
    engine_version: str = ""
    trust_remote_code: bool = False
    images_per_prompt: int = 0  # multimodal: the per-request image limit the engine enforces
    rope_override: str | None = None  # the RoPE-scaling override, JSON, in the engine's own form
    rope_flag: str | None = None  # the flag that takes it (--hf-overrides, --json-model-override-args)
    env: tuple[tuple[str, str], ...] = ()  # environment the engine needs (never a secret)
    engine_args: tuple[str, ...] = ()  # serving.engine_args, after gpufit's own flags
    health_path: str = "/health"
    loopback: bool = False  # a batch job's engine: on 127.0.0.1 for job.command only, no API key
    state_slots_per_request: int = 0  # SGLang: a hybrid model's recurrent-state slots per stream (0: none)

    @property
    def image(self) -> str:
        return self.image_ref or IMAGES[self.engine]

    @property
    def state_slots(self) -> int:
        """SGLang's ``--max-mamba-cache-size``: the state slots the plan holds for the streams."""
        return self.state_slots_per_request * self.max_num_seqs

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
