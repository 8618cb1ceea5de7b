"""The model server a ``serve`` deployment starts: vLLM or SGLang, launched with the plan's own
numbers, one server per replica on its own GPUs and port.

A renderer like the boot script: plan numbers in, shell out, one pure function per engine,
tested by its output, and every rendered argument list checked against the pinned release's own
argument parser (``selector/data/engine_flags/``, dumped and replayed through the real parser by
``scripts/dump_engine_flags.py``). Secrets move only by reference: the script fetches the Hugging
Face token and the API key from the cloud's secret store on the machine (AWS Secrets Manager,
GCP Secret Manager) into root-only files, and never echoes them; user data, metadata, tags and
logs carry only the secrets' names.

The engines run as pinned container images on the GPU image's Docker with the NVIDIA runtime:
an image pins the engine, its CUDA and its Python dependencies together, where a pip install
would resolve them anew on every boot. The plan chooses the build (``selector.engines``:
``selector/data/engines.yaml``) that serves the model on the GPU with the machine image's
driver, and names it in ``ServerLaunch.image`` (``tag@digest`` once a digest is recorded).

- vLLM (``vllm/vllm-openai``, arguments after the image are ``vllm serve``'s): the API key from
  the ``VLLM_API_KEY`` environment variable (the same as ``--api-key`` without a command line);
  online FP8 as the release spells it (``fp8_per_tensor`` from 0.31); YaRN through
  ``--hf-overrides`` and ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``; images through
  ``--limit-mm-per-prompt`` (JSON); readiness and liveness at ``GET /health``.
- SGLang (``lmsysorg/sglang``, ``python3 -m sglang.launch_server``): no environment variable
  takes the key, so it sits in a root-only YAML file the server reads with ``--config``
  (merged into its arguments inside Python, never on a command line); ``--log-level warning``
  (at info it logs its arguments); the FP8 KV format FlashAttention 3 takes on Hopper
  (``fp8_e4m3``); ``--mem-fraction-static`` as SGLang would size it, so activations and CUDA
  graphs keep their room; liveness at ``GET /health_generate``, which runs a one-token
  generation (a hung scheduler answers 503).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from deployment import ServerLaunch

HEALTH_PATH = "/health"
"""vLLM's health route (``ServerLaunch.health_path`` is each engine's own)."""

MODEL_CACHE = "/opt/gpufit/hf-cache"
"""Where the weights land on the machine's data disk (the Hugging Face cache layout); the
stack's bucket keeps a copy under ``model-cache/`` so a replacement machine skips the Hub."""
ENV_FILE = "/etc/gpufit/serve.env"
SGLANG_CONFIG = "/etc/gpufit/sglang.yaml"
"""SGLang's root-only config file: only the API key, read by ``--config`` inside the server."""


def _common_tail(launch: ServerLaunch, images_flag: str) -> list[str]:
    args: list[str] = []
    if launch.revision:
        args += ["--revision", launch.revision]
    if launch.quantization:
        args += ["--quantization", launch.quantization]
    if launch.kv_cache_dtype:
        args += ["--kv-cache-dtype", launch.kv_cache_dtype]
    if launch.trust_remote_code:
        args += ["--trust-remote-code"]
    if launch.images_per_prompt:
        args += [images_flag, json.dumps({"image": launch.images_per_prompt})]
    if launch.rope_override and launch.rope_flag:
        args += [launch.rope_flag, launch.rope_override]
    return [*args, *launch.engine_args]


def vllm_args(launch: ServerLaunch, replica: int) -> list[str]:
    """``vllm serve``'s arguments for one replica (flag names: the release's parser dump)."""
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
    return args + _common_tail(launch, "--limit-mm-per-prompt")


def sglang_args(launch: ServerLaunch, replica: int) -> list[str]:
    """SGLang's ``launch_server`` arguments for one replica (flag names: the release's parser
    dump); the API key comes from the root-only ``--config`` file."""
    args = [
        "--model-path", launch.model,
        "--served-model-name", launch.served_name,
        "--host", "0.0.0.0",
        "--port", str(launch.port(replica)),
        "--tp-size", str(launch.tensor_parallel),
        "--context-length", str(launch.max_model_len),
        "--max-running-requests", str(launch.max_num_seqs),
        "--mem-fraction-static", f"{launch.gpu_memory_utilization:g}",
        "--download-dir", "/root/.cache/huggingface/hub",
        "--log-level", "warning",  # at info, SGLang logs its server arguments, the API key among them
        "--config", SGLANG_CONFIG,
    ]  # fmt: skip
    return args + _common_tail(launch, "--limit-mm-data-per-request")


def engine_argv(launch: ServerLaunch, replica: int) -> list[str]:
    """The arguments the engine's own parser receives for one replica."""
    return vllm_args(launch, replica) if launch.engine == "vllm" else sglang_args(launch, replica)


def docker_run(launch: ServerLaunch, replica: int) -> str:
    """``docker run`` of one replica: its GPUs, its port on the host network, the weights cache
    on the data disk, the secrets from root-only files, restarted if it dies."""
    head = [
        "docker", "run", "--detach", "--name", f"gpufit-serve-{replica}",
        "--restart", "unless-stopped",
        "--gpus", f'"device={launch.devices(replica)}"',
        "--network", "host", "--ipc", "host",
        "--env-file", ENV_FILE,
        "--volume", f"{MODEL_CACHE}:/root/.cache/huggingface",
    ]  # fmt: skip
    for name, value in launch.env:
        head += ["--env", f"{name}={value}"]
    if launch.engine == "vllm":
        return shlex.join([*head, launch.image, *vllm_args(launch, replica)])
    head += ["--volume", f"{SGLANG_CONFIG}:{SGLANG_CONFIG}:ro", "--entrypoint", "python3"]
    return shlex.join([*head, launch.image, "-m", "sglang.launch_server", *sglang_args(launch, replica)])


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


def _sglang_key_file(secrets: SecretRefs) -> str:
    """SGLang's API key into its root-only YAML config (umask 077 is in force): one line,
    single-quoted with YAML's own escape (a quote doubled); a key spanning lines is refused."""
    return (
        f'value=$({secrets.fetch(secrets.api_key)})\n'
        '[ -n "$value" ] || { echo "gpufit: the API key is empty"; exit 1; }\n'
        '[ "$(printf \'%s\' "$value" | wc -l)" -eq 0 ] || '
        '{ echo "gpufit: the API key spans lines"; exit 1; }\n'
        f"printf \"api-key: '%s'\\n\" \"$(printf '%s' \"$value\" | sed \"s/'/''/g\")\" > {SGLANG_CONFIG}"
    )


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
    fetches = [("VLLM_API_KEY", secrets.api_key, "the API key")] if launch.engine == "vllm" else []
    if secrets.hf_token:
        fetches.append(("HF_TOKEN", secrets.hf_token, "the Hugging Face token"))
    # Each value goes through a variable: a failed fetch stops the script (set -e) instead of
    # starting a server with an empty key; values are never echoed.
    written = "\n".join(
        f'value=$({secrets.fetch(ref)})\n[ -n "$value" ] || {{ echo "gpufit: {what} is empty"; exit 1; }}\n'
        f'printf "{var}=%s\\n" "$value" >> {ENV_FILE}'
        for var, ref, what in fetches
    )
    if launch.engine == "sglang":
        written = _sglang_key_file(secrets) + ("\n" + written if written else "")
    # The boot script runs at every boot: a container left from the last one is replaced.
    runs = "\n".join(
        f"docker rm --force gpufit-serve-{r} >/dev/null 2>&1 || true\n{docker_run(launch, r)}"
        for r in range(launch.replicas)
    )
    first = f"http://127.0.0.1:{launch.port(0)}{launch.health_path}"
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
