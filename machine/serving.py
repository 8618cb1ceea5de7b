"""The model server a ``serve`` deployment starts: vLLM or SGLang, launched with the plan's own
numbers, one server per replica on its own GPUs and port.

A renderer like the boot script: plan numbers in, shell out, one pure function per engine,
tested by its output. Secrets move only by reference: the script fetches the Hugging Face token
and the API key from the cloud's secret store on the machine (AWS Secrets Manager, GCP Secret
Manager), writes them to a root-only env file that ``docker run --env-file`` reads, and never
echoes them; user data, metadata, tags and logs carry only the secrets' names.

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

from deployment import ServerLaunch

HEALTH_PATH = "/health"
"""Both engines answer ``GET /health`` with 200 once the model is loaded and serving."""

MODEL_CACHE = "/opt/gpufit/hf-cache"
"""Where the weights land on the machine's data disk (the Hugging Face cache layout); the
stack's bucket keeps a copy under ``model-cache/`` so a replacement machine skips the Hub."""
ENV_FILE = "/etc/gpufit/serve.env"



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


def docker_run(launch: ServerLaunch, replica: int) -> str:
    """``docker run`` of one replica: its GPUs, its port on the host network, the weights cache
    on the data disk, the secrets from the root-only env file, restarted if it dies."""
    head = [
        "docker", "run", "--detach", "--name", f"gpufit-serve-{replica}",
        "--restart", "unless-stopped",
        "--gpus", f'"device={launch.devices(replica)}"',
        "--network", "host", "--ipc", "host",
        "--env-file", ENV_FILE,
        "--volume", f"{MODEL_CACHE}:/root/.cache/huggingface",
    ]  # fmt: skip
    if launch.engine == "vllm":
        return shlex.join([*head, launch.image, *vllm_args(launch, replica)])
    inner = shlex.join(["python3", "-m", "sglang.launch_server", *sglang_args(launch, replica)])
    return shlex.join(
        [*head, "--entrypoint", "bash", launch.image, "-c", f'exec {inner} --api-key "$GPUFIT_API_KEY"']
    )


@dataclass(frozen=True)
class SecretRefs:
    """Where the machine finds its secrets: AWS Secrets Manager ARNs, or GCP Secret Manager
    secret names (with the project). ``hf_token`` is None for a model that needs none."""

    cloud: str
    region: str
    api_key: str
    hf_token: str | None = None
    project: str | None = None

    def fetch(self, ref: str) -> str:
        """The shell expression that prints one secret's value."""
        if self.cloud == "aws":
            return (
                f"aws secretsmanager get-secret-value --region {shlex.quote(self.region)} "
                f"--secret-id {shlex.quote(ref)} --query SecretString --output text"
            )
        project = f" --project {shlex.quote(self.project)}" if self.project else ""
        return f"gcloud secrets versions access latest --secret {shlex.quote(ref)}{project}"


def serving_script(launch: ServerLaunch, secrets: SecretRefs) -> str:
    """The commands a serve machine runs in place of ``job.command``: restore the weights from
    the bucket, fetch the secrets into the env file, start one container per replica, wait for
    the first to be healthy, then copy the weights back to the bucket for the next machine."""
    remote = '"s3://$BUCKET/model-cache"' if secrets.cloud == "aws" else '"gs://$BUCKET/model-cache"'
    # The Hugging Face cache links snapshots/ to blobs/: copying the links as files would store
    # every weight twice; the blobs and refs are enough for the hub client to rebuild the links.
    copy = (
        "aws s3 sync --only-show-errors --no-follow-symlinks"
        if secrets.cloud == "aws"
        else "gcloud storage rsync --recursive --ignore-symlinks"
    )
    restore = f'{copy} {remote} {MODEL_CACHE} || echo "gpufit: no cached weights in the bucket"'
    upload = f'{copy} {MODEL_CACHE} {remote} || echo "gpufit: could not cache the weights in the bucket"'
    key_var = "VLLM_API_KEY" if launch.engine == "vllm" else "GPUFIT_API_KEY"
    fetches = [(key_var, secrets.api_key, "the API key")]
    if secrets.hf_token:
        fetches.append(("HF_TOKEN", secrets.hf_token, "the Hugging Face token"))
    # Each value goes through a variable: a failed fetch stops the script (set -e) instead of
    # starting a server with an empty key; values are never echoed.
    written = "\n".join(
        f'value=$({secrets.fetch(ref)})\n[ -n "$value" ] || {{ echo "gpufit: {what} is empty"; exit 1; }}\n'
        f'printf "{var}=%s\\n" "$value" >> {ENV_FILE}'
        for var, ref, what in fetches
    )
    # The boot script runs at every boot: a container left from the last one is replaced.
    runs = "\n".join(
        f"docker rm --force gpufit-serve-{r} >/dev/null 2>&1 || true\n{docker_run(launch, r)}"
        for r in range(launch.replicas)
    )
    first = f"http://127.0.0.1:{launch.port(0)}{HEALTH_PATH}"
    return f"""set -euo pipefail
mkdir -p {MODEL_CACHE} /etc/gpufit
{restore}
umask 077
: > {ENV_FILE}
{written}
unset value
umask 022
docker pull {shlex.quote(launch.image)}
{runs}
# Readiness, bounded by the health check's grace period; the load balancer or the group's
# health check decides what happens to a machine that never gets there.
for _ in $(seq {max(1, launch.grace_seconds // 10)}); do
  if curl -sf -o /dev/null {first}; then {upload}; exit 0; fi
  sleep 10
done
echo "gpufit: the model server is not healthy after {launch.grace_seconds} s"
exit 1
"""
