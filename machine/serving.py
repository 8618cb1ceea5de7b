"""The model server a ``serve`` deployment starts: vLLM or SGLang, launched with the plan's own
numbers, one server per replica on its own GPUs and port.

A renderer like the boot script: plan numbers in, shell out, one pure function per engine,
tested by its output. Secrets move only by reference (``MachineSecrets``): the machine's
supervisor (``machine.boot``) fetches the Hugging Face token and the API key from the cloud's
secret store (AWS Secrets Manager, GCP Secret Manager), writes them to a root-only env file on
tmpfs that ``docker run --env-file`` reads, and never echoes them; user data, metadata, tags and
logs carry only the secrets' names. ``serve_start`` starts the replicas, ``serve_cache`` copies
the weights between the disk and the bucket, and the readiness responder
(``scripts/readiness.py``) answers GCP's autohealing while the weights load.

The engines run as pinned container images on the GPU image's Docker with the NVIDIA runtime
(the AWS Deep Learning AMI and Google's Deep Learning VM images ship both): an image tag pins
the engine, its CUDA and its Python dependencies together, where a pip install would resolve
them anew on every boot (the tags are ``deployment.launch``'s ``IMAGES``, part of the plan's
``ServerLaunch``). Flag names are those of the pinned versions' documentation:

- vLLM v0.8.5 (``vllm/vllm-openai:v0.8.5``): engine arguments
  https://docs.vllm.ai/en/v0.8.5/serving/engine_args.html (``--tensor-parallel-size``,
  ``--max-model-len``, ``--max-num-seqs``, ``--gpu-memory-utilization``, ``--quantization fp8``,
  ``--kv-cache-dtype fp8``, ``--revision``, ``--download-dir``); the OpenAI-compatible server
  https://docs.vllm.ai/en/v0.8.5/serving/openai_compatible_server.html (``--served-model-name``,
  ``--host``, ``--port``; the API key from the ``VLLM_API_KEY`` environment variable, the same
  as ``--api-key`` without putting the key on a command line; readiness at ``GET /health``).
- SGLang v0.4.7.post1 (``lmsysorg/sglang:v0.4.7.post1-cu124``): server arguments
  https://docs.sglang.ai/backend/server_arguments.html (``--model-path``, ``--tp-size``,
  ``--context-length``, ``--max-running-requests``, ``--mem-fraction-static``,
  ``--quantization fp8``, ``--kv-cache-dtype fp8_e5m2``, ``--served-model-name``, ``--host``,
  ``--port``, ``--api-key``, ``--revision``); readiness at ``GET /health``. SGLang takes the key
  only as a flag, so the script passes it from the env file inside the container, never in
  user data.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from deployment import ServerLaunch

HEALTH_PATH = "/health"
"""Both engines answer ``GET /health`` with 200 once the model is loaded and serving."""

MODEL_CACHE = "/opt/gpufit/hf-cache"
"""Where the weights land on the machine's data disk (the Hugging Face cache layout); the
stack's bucket keeps a copy under ``model-cache/`` so a replacement machine skips the Hub."""
ENV_FILE = "/run/gpufit/serve.env"
"""The root-only file the supervisor writes the server's secrets to (tmpfs, never on disk)."""



def vllm_args(launch: ServerLaunch, replica: int) -> list[str]:
    """The vLLM OpenAI server's arguments for one replica (flag names: see the module doc)."""
    args = [
        "--model", launch.model,
        "--served-model-name", launch.served_name,
        "--host", "0.0.0.0",
        "--port", str(launch.port(replica)),
        "--tensor-parallel-size", str(launch.tensor_parallel),
        "--max-model-len", str(launch.max_model_len),
        "--max-num-seqs", str(launch.max_num_seqs),
        "--gpu-memory-utilization", f"{launch.gpu_memory_utilization:g}",
        "--download-dir", "/root/.cache/huggingface/hub",
    ]  # fmt: skip
    if launch.revision:
        args += ["--revision", launch.revision]
    if launch.quantization:
        args += ["--quantization", launch.quantization]
    if launch.kv_cache_dtype:
        args += ["--kv-cache-dtype", launch.kv_cache_dtype]
    return args


def sglang_args(launch: ServerLaunch, replica: int) -> list[str]:
    """SGLang's ``launch_server`` arguments for one replica (flag names: see the module doc);
    ``--api-key`` comes from the env file inside the container."""
    args = [
        "--model-path", launch.model,
        "--served-model-name", launch.served_name,
        "--host", "0.0.0.0",
        "--port", str(launch.port(replica)),
        "--tp-size", str(launch.tensor_parallel),
        "--context-length", str(launch.max_model_len),
        "--max-running-requests", str(launch.max_num_seqs),
        "--mem-fraction-static", f"{launch.gpu_memory_utilization:g}",
        "--log-level", "warning",  # at info, SGLang logs its server arguments, the API key among them
    ]  # fmt: skip
    if launch.revision:
        args += ["--revision", launch.revision]
    if launch.quantization:
        args += ["--quantization", launch.quantization]
    if launch.kv_cache_dtype:
        args += ["--kv-cache-dtype", "fp8_e5m2"]
    return args


def docker_run(
    launch: ServerLaunch, replica: int, env_file: str = ENV_FILE, model_cache: str = MODEL_CACHE
) -> str:
    """``docker run`` of one replica: its GPUs, its port on the host network, the weights cache
    on the data disk, the secrets from the root-only env file, restarted if it dies."""
    head = [
        "docker", "run", "--detach", "--name", f"gpufit-serve-{replica}",
        "--restart", "unless-stopped",
        "--gpus", f'"device={launch.devices(replica)}"',
        "--network", "host", "--ipc", "host",
        "--env-file", env_file,
        "--volume", f"{model_cache}:/root/.cache/huggingface",
    ]  # fmt: skip
    if launch.engine == "vllm":
        return shlex.join([*head, launch.image, *vllm_args(launch, replica)])
    inner = shlex.join(["python3", "-m", "sglang.launch_server", *sglang_args(launch, replica)])
    return shlex.join(
        [*head, "--entrypoint", "bash", launch.image, "-c", f'exec {inner} --api-key "$GPUFIT_API_KEY"']
    )


@dataclass(frozen=True)
class MachineSecrets:
    """Where the machine finds its secrets, by reference only: AWS Secrets Manager ARNs, or GCP
    Secret Manager secret names (ours, in ``project``) or resource names
    (``projects/P/secrets/S``). ``api_key`` is the model server's key (None without one);
    ``hf_token`` the Hugging Face token (``HF_TOKEN`` for the server and the job alike);
    ``job`` the spec's ``secrets`` as (variable, reference)."""

    cloud: str
    region: str
    api_key: str | None = None
    hf_token: str | None = None
    project: str | None = None
    job: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def api_key_var(engine: str) -> str:
        """vLLM reads ``VLLM_API_KEY``; SGLang gets ``--api-key "$GPUFIT_API_KEY"`` inside its
        container."""
        return "VLLM_API_KEY" if engine == "vllm" else "GPUFIT_API_KEY"

    def job_env(self) -> list[tuple[str, str]]:
        """The job's variables: ``HF_TOKEN`` when a token is given, then the spec's secrets."""
        return ([("HF_TOKEN", self.hf_token)] if self.hf_token else []) + list(self.job)

    def serve_env(self) -> list[tuple[str, str]]:
        """The server container's variables besides the API key."""
        return [("HF_TOKEN", self.hf_token)] if self.hf_token else []

    def references(self) -> list[str]:
        return [r for r in (self.api_key, self.hf_token) if r] + [r for _, r in self.job]


def serve_start(launch: ServerLaunch, env_file: str = ENV_FILE, model_cache: str = MODEL_CACHE) -> str:
    """The commands that start the server: the image, then one container per replica (a
    container left from the last boot is replaced). The supervisor has fetched the secrets
    into ``env_file`` and restored the weights before, and waits for ``/health`` after."""
    runs = "\n".join(
        f"docker rm --force gpufit-serve-{r} >/dev/null 2>&1 || true\n"
        + docker_run(launch, r, env_file, model_cache)
        for r in range(launch.replicas)
    )
    return f"""#!/bin/bash
# gpufit: start the model server ({launch.engine}, {launch.replicas} replica(s))
set -euo pipefail
mkdir -p {shlex.quote(model_cache)}
docker pull {shlex.quote(launch.image)}
{runs}
"""


def serve_cache(cloud: str, model_cache: str, bucket: str, upload: bool) -> str:
    """Copy the weights between the data disk and the bucket's ``model-cache/`` (so that a
    replacement machine skips the Hub). The Hugging Face cache links snapshots/ to blobs/:
    copying the links as files would store every weight twice; the blobs and refs are enough
    for the hub client to rebuild the links."""
    remote = f"{'s3' if cloud == 'aws' else 'gs'}://{bucket}/model-cache"
    copy = (
        ["aws", "s3", "sync", "--only-show-errors", "--no-follow-symlinks"]
        if cloud == "aws"
        else ["gcloud", "storage", "rsync", "--recursive", "--ignore-symlinks"]
    )
    pair = [model_cache, remote] if upload else [remote, model_cache]
    return f"#!/bin/bash\n# gpufit: the weights to the bucket\nexec {shlex.join([*copy, *pair])}\n"


READINESS_PORT = 9321
"""The readiness responder's port, unless a replica uses it (then the next free one)."""


def readiness_port(launch: ServerLaunch) -> int:
    """A port no replica uses."""
    port = READINESS_PORT
    while port in launch.ports():
        port += 1
    return port


def readiness_script() -> str:
    """The readiness responder (``machine/scripts/readiness.py``), run with python3 from the
    image by a systemd unit the supervisor starts."""
    return (Path(__file__).parent / "scripts" / "readiness.py").read_text(encoding="utf-8")
