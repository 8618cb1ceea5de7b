"""The model server a ``serve`` deployment starts: vLLM or SGLang, launched with the plan's own
numbers, one server per replica on its own GPUs and port.

A renderer like the boot script: plan numbers in, shell out, one pure function per engine,
tested by its output, and every rendered argument list checked against the pinned release's own
argument parser (``selector/data/engine_flags/``, dumped and replayed through the real parser by
``scripts/dump_engine_flags.py``). Secrets move only by reference (``MachineSecrets``): the
machine's supervisor (``machine.boot``) fetches the Hugging Face token and the API key from the
cloud's secret store (AWS Secrets Manager, GCP Secret Manager) into root-only files on tmpfs
(the env file ``docker run --env-file`` reads; SGLang's key file, below), and never echoes them;
user data, metadata, tags and logs carry only the secrets' names. ``serve_start`` starts the
replicas, ``serve_cache`` copies the weights between the disk and the bucket, and the readiness
responder (``scripts/readiness.py``) answers GCP's autohealing while the weights load.

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
  graphs keep their room; for a hybrid model ``--max-mamba-cache-size``, the recurrent-state
  slots the plan holds (``ServerLaunch.state_slots``); liveness at ``GET /health_generate``,
  which runs a one-token generation (a hung scheduler answers 503).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from deployment import ServerLaunch

HEALTH_PATH = "/health"
"""vLLM's health route (``ServerLaunch.health_path`` is each engine's own)."""

MODEL_CACHE = "/opt/gpufit/hf-cache"
"""Where the weights land on the machine's data disk (the Hugging Face cache layout); the
stack's bucket keeps a copy under ``model-cache/`` so a replacement machine skips the Hub."""
ENV_FILE = "/run/gpufit/serve.env"
"""The root-only file the supervisor writes the server's secrets to (tmpfs, never on disk)."""
SGLANG_CONFIG = "/run/gpufit/sglang.yaml"
"""SGLang's root-only config file the supervisor writes from the fetched API key (tmpfs, mode
0600): only ``api-key``, read by ``--config`` inside the server, never on a command line."""
SGLANG_CONFIG_IN_CONTAINER = "/etc/gpufit/sglang.yaml"
"""Where the server's container sees it (mounted read-only)."""
SERVE_HOST = "@SERVE_HOST@"
"""The ``--host`` the server binds, rendered as the supervisor's ``$SERVE_HOST``: loopback where
only the machine itself connects (AWS SSM port forwarding reaches ``localhost``), else the
private interface's address from the metadata server (a load balancer, GCP's health checks
and IAP reach the VM there), never 0.0.0.0 (``gpufit-machine.sh``: ``serve_host``). Sources:
an ALB routes to an instance target's primary private IP
(https://docs.aws.amazon.com/elasticloadbalancing/latest/application/target-group-register-targets.html);
IAP connects from 35.235.240.0/20 (https://cloud.google.com/iap/docs/using-tcp-forwarding);
``AWS-StartPortForwardingSession`` forwards to a port on the instance itself, other hosts being
``AWS-StartPortForwardingSessionToRemoteHost``
(https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html)."""


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
        "--host", bind_host(launch),
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
        "--host", bind_host(launch),
        "--port", str(launch.port(replica)),
        "--tp-size", str(launch.tensor_parallel),
        "--context-length", str(launch.max_model_len),
        "--max-running-requests", str(launch.max_num_seqs),
        "--mem-fraction-static", f"{launch.gpu_memory_utilization:g}",
        "--download-dir", "/root/.cache/huggingface/hub",
        "--log-level", "warning",  # at info, SGLang logs its server arguments, the API key among them
    ]  # fmt: skip
    if launch.state_slots:  # a hybrid model's recurrent-state pool, as the plan sized it
        args += ["--max-mamba-cache-size", str(launch.state_slots)]
    if not launch.loopback:  # a batch job's loopback engine takes no key
        args += ["--config", SGLANG_CONFIG_IN_CONTAINER]
    return args + _common_tail(launch, "--limit-mm-data-per-request")


def engine_argv(launch: ServerLaunch, replica: int) -> list[str]:
    """The arguments the engine's own parser receives for one replica."""
    return vllm_args(launch, replica) if launch.engine == "vllm" else sglang_args(launch, replica)


def docker_run(
    launch: ServerLaunch,
    replica: int,
    env_file: str = ENV_FILE,
    model_cache: str = MODEL_CACHE,
    sglang_config: str = SGLANG_CONFIG,
) -> str:
    """``docker run`` of one replica: its GPUs, its port on the host network, the weights cache
    on the data disk, the secrets from root-only files, restarted if it dies."""
    head = [
        "docker", "run", "--detach", "--name", f"gpufit-serve-{replica}",
        "--restart", "unless-stopped",
        "--gpus", f'"device={launch.devices(replica)}"',
        "--network", "host", "--ipc", "host",
        "--env-file", env_file,
        "--volume", f"{model_cache}:/root/.cache/huggingface",
    ]  # fmt: skip
    for name, value in launch.env:
        head += ["--env", f"{name}={value}"]
    if launch.engine == "vllm":
        return _at_serve_host(shlex.join([*head, launch.image, *vllm_args(launch, replica)]))
    head += ["--volume", f"{sglang_config}:{SGLANG_CONFIG_IN_CONTAINER}:ro", "--entrypoint", "python3"]
    argv = [*head, launch.image, "-m", "sglang.launch_server", *sglang_args(launch, replica)]
    return _at_serve_host(shlex.join(argv))


def bind_host(launch: ServerLaunch) -> str:
    """The ``--host`` of a launch: 127.0.0.1 for a token batch's engine (``loopback``: only
    ``job.command`` on the machine calls it, with no API key), else ``SERVE_HOST``."""
    return "127.0.0.1" if launch.loopback else SERVE_HOST


def _at_serve_host(line: str) -> str:
    """``SERVE_HOST`` (left bare by ``shlex.join``: only word characters and ``@``) as the
    supervisor's quoted variable."""
    return line.replace(SERVE_HOST, '"$SERVE_HOST"')


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
        """vLLM reads ``VLLM_API_KEY`` from the env file; SGLang has no such variable, so the
        supervisor writes its key to ``SGLANG_CONFIG`` instead ("": no variable)."""
        return "VLLM_API_KEY" if engine == "vllm" else ""

    def job_env(self) -> list[tuple[str, str]]:
        """The job's variables: ``HF_TOKEN`` when a token is given, then the spec's secrets."""
        return ([("HF_TOKEN", self.hf_token)] if self.hf_token else []) + list(self.job)

    def serve_env(self) -> list[tuple[str, str]]:
        """The server container's variables besides the API key."""
        return [("HF_TOKEN", self.hf_token)] if self.hf_token else []

    def references(self) -> list[str]:
        return [r for r in (self.api_key, self.hf_token) if r] + [r for _, r in self.job]


_DIGEST_REF = re.compile(
    r"(?P<repo>[a-z0-9][a-z0-9._/-]*)(?::[\w][\w.-]{0,127})?@(?P<digest>sha256:[0-9a-f]{64})"
)


def verify_digest(image: str) -> str:
    """The shell line, after ``docker pull``, that refuses to start an image pinned ``tag@digest``
    unless Docker holds it under ``repo@digest`` (``RepoDigests``: the registry digest of what was
    pulled); "" for an image named by tag alone. A pull by digest is already content-addressed
    (https://docs.docker.com/reference/cli/docker/image/pull/#pull-an-image-by-digest-immutable-identifier);
    this is the second, explicit check the plan promises, and the one that fails loudly."""
    if "@" not in image:
        return ""
    match = _DIGEST_REF.fullmatch(image)
    if match is None:
        raise ValueError(f"engine image {image!r}: expected repository[:tag]@sha256:<64 hex>")
    ref = f"{match['repo']}@{match['digest']}"
    digests = "'{{range .RepoDigests}}{{println .}}{{end}}'"
    return (
        f"docker image inspect --format {digests} {shlex.quote(ref)} 2>/dev/null"
        f" | grep -xF -e {shlex.quote(ref)} -e {shlex.quote('docker.io/' + ref)} >/dev/null"
        f" || {{ echo {shlex.quote(f'gpufit: the pulled image is not {ref}')} >&2; exit 3; }}\n"
    )


def serve_start(
    launch: ServerLaunch,
    env_file: str = ENV_FILE,
    model_cache: str = MODEL_CACHE,
    sglang_config: str = SGLANG_CONFIG,
) -> str:
    """The commands that start the server: the image, then one container per replica (a
    container left from the last boot is replaced). The supervisor has fetched the secrets
    into ``env_file`` (and SGLang's key into ``sglang_config``) and restored the weights
    before, and waits for the engine's health route after. An image pinned by digest is checked
    after the pull (``verify_digest``)."""
    runs = "\n".join(
        f"docker rm --force gpufit-serve-{r} >/dev/null 2>&1 || true\n"
        + docker_run(launch, r, env_file, model_cache, sglang_config)
        for r in range(launch.replicas)
    )
    return f"""#!/bin/bash
# gpufit: start the model server ({launch.engine}, {launch.replicas} replica(s))
set -euo pipefail
mkdir -p {shlex.quote(model_cache)}
docker pull {shlex.quote(launch.image)}
{verify_digest(launch.image)}{runs}
"""


BATCH_RUNTIME = {
    "--port": '"$port"',
    "--tensor-parallel-size": '"$GPUFIT_TP"',
    "--tp-size": '"$GPUFIT_TP"',
    "--max-num-seqs": '"$GPUFIT_MAX_NUM_SEQS"',
    "--max-running-requests": '"$GPUFIT_MAX_NUM_SEQS"',
}
"""The values a batch engine takes from the machine's own type (a batch fleet mixes types):
the supervisor's ``GPUFIT_TP`` and ``GPUFIT_MAX_NUM_SEQS`` (``TP_BY_TYPE``), one port a replica;
SGLang's ``--max-mamba-cache-size`` follows ``GPUFIT_MAX_NUM_SEQS`` too (``batch_engine_start``)."""


def batch_engine_start(launch: ServerLaunch, env_file: str = ENV_FILE, model_cache: str = MODEL_CACHE) -> str:
    """The engine a token-generating batch job talks to: ``GPUFIT_REPLICAS`` servers on
    127.0.0.1 (ports ``base_port + r``), each on ``GPUFIT_TP`` GPUs at ``GPUFIT_MAX_NUM_SEQS``
    sequences, the arguments otherwise ``engine_argv``'s (checked against the release's parser
    like a serve launch). Run by the supervisor with the job's variables; no API key (the port
    is not reachable from outside the machine)."""
    args = engine_argv(launch, 0)
    words = [shlex.quote(a) for a in args]
    for i, arg in enumerate(args[:-1]):
        if arg in BATCH_RUNTIME:
            words[i + 1] = BATCH_RUNTIME[arg]
        elif arg == "--max-mamba-cache-size":  # the state slots of the machine's own sequences
            words[i + 1] = f'"$(({launch.state_slots_per_request} * GPUFIT_MAX_NUM_SEQS))"'
    head = [
        "docker", "run", "--detach", "--name", '"gpufit-batch-$r"', "--gpus", '"\\"device=$devices\\""',
        "--network", "host", "--ipc", "host", "--env-file", shlex.quote(env_file),
        "--volume", shlex.quote(f"{model_cache}:/root/.cache/huggingface"),
    ]  # fmt: skip
    head += [f"--env {shlex.quote(f'{name}={value}')}" for name, value in launch.env]
    if launch.engine == "vllm":
        head.append(shlex.quote(launch.image))
    else:
        head += ["--entrypoint", "python3", shlex.quote(launch.image), "-m", "sglang.launch_server"]
    return f"""#!/bin/bash
# gpufit: start the batch job's engine ({launch.engine}) on 127.0.0.1, one per GPUFIT_TP GPUs
set -euo pipefail
mkdir -p {shlex.quote(model_cache)}
docker pull {shlex.quote(launch.image)}
for ((r = 0; r < GPUFIT_REPLICAS; r++)); do
  port=$(({launch.base_port} + r))
  devices=$(seq -s, $((r * GPUFIT_TP)) $((r * GPUFIT_TP + GPUFIT_TP - 1)))
  docker rm --force "gpufit-batch-$r" >/dev/null 2>&1 || true
  {" ".join(head)} \\
    {" ".join(words)}
done
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
