"""The boot script every gpufit machine runs: EC2 user data and GCP ``startup-script`` alike.

What is rendered is a small bootstrap that writes fixed files and starts a systemd service:

- ``gpufit-machine`` (``machine/scripts/gpufit-machine.sh``), the supervisor, preceded by its
  settings: shell assignments whose every value is quoted (``shlex.quote``). It arms the
  deadline, watches for interruptions and scale-in, runs the job with retries or the model
  server with its health checks, syncs ``outputs/`` periodically and at every stop it sees
  coming, writes a status object to the bucket and leaves its group (see the README, "What the
  machine does", and ``machine.lifecycle`` for the numbers);
- ``job.sh`` and ``checkpoint.sh``: ``job.command`` and ``job.checkpoint_command`` verbatim,
  run by ``bash`` in the job's own process group, in the image's environment;
- for a model server, ``serve-start.sh``, ``serve-cache.sh`` and the readiness responder
  (``machine.serving``);
- the systemd units: ``gpufit-boot.service`` (every boot) and, for jobs,
  ``gpufit-final-sync.service`` whose ``ExecStop`` runs the final sync when the OS goes down.

Every file travels gzip-compressed and base64-encoded inside single quotes (the base64
alphabet holds no quote and no line break), so no spec value can end a quoted string or a
here-document and change what runs: the bootstrap's structure is the same for every spec
(https://docs.cloud-init.io/en/latest/reference/modules.html#write-files describes the same
encoding for cloud-config; a shell bootstrap serves GCP's startup-script too). EC2 takes
16 KB of user data before base64 (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html);
``render`` refuses a bigger one.

``Paths`` holds the machine's file locations and metadata endpoints. Production renders with
``PATHS``; the scenario tests render with a temporary root and a local metadata server. Paths
are a render argument, never derived from the spec.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from deployment import Deployment
from machine import lifecycle
from machine.lifecycle import RDZV_PORT, Timing
from machine.serving import (
    HEALTH_PATH,
    MachineSecrets,
    batch_engine_start,
    readiness_port,
    readiness_script,
    serve_cache,
    serve_start,
)

USER_DATA_LIMIT = 16 * 1024
"""EC2 user data, raw (before the API's base64)."""

LIFECYCLE_HOOK = "gpufit-final-sync"
"""The AWS group's terminating lifecycle hook: the machine syncs, then completes it."""

BACKSTOP_GRACE_S = 300
"""A grouped machine's plain power-off comes five minutes after its deadline: the planned stop
left the group before; the power-off only catches a failed leave."""


@dataclass(frozen=True)
class Paths:
    """Where things are on the machine, and its metadata servers."""

    root: str = ""  # prefix of every file path (the tests' temporary root)
    imds: str = "http://169.254.169.254"
    gce_metadata: str = "http://metadata.google.internal"
    image_envs: tuple[str, ...] = ("/opt/pytorch/bin/activate", "/opt/conda/bin/activate")
    """The image's Python environment, first found wins: the AWS Deep Learning AMI's venv
    (release notes: ``python_location /opt/pytorch/bin/python``), then a conda base (Google's
    Deep Learning VM images; not confirmed from a page we could read)."""

    def at(self, path: str) -> str:
        return f"{self.root}{path}"

    @property
    def sbin(self) -> str:
        return self.at("/usr/local/sbin")

    @property
    def supervisor(self) -> str:
        return f"{self.sbin}/gpufit-machine"

    @property
    def etc(self) -> str:
        return self.at("/etc/gpufit")

    @property
    def run(self) -> str:
        """Runtime state on tmpfs: markers, pids, the secrets' files (never on disk)."""
        return self.at("/run/gpufit")

    @property
    def lib(self) -> str:
        return self.at("/usr/local/lib/gpufit")

    @property
    def units(self) -> str:
        return self.at("/etc/systemd/system")

    @property
    def model_cache(self) -> str:
        return self.at("/opt/gpufit/hf-cache")


PATHS = Paths()


@dataclass(frozen=True)
class FleetGroup:
    """The fleet group a machine belongs to: its cloud, region and name."""

    cloud: str
    region: str
    name: str
    project: str = ""  # GCP: the MIG's project
    lifecycle_hook: str = ""  # AWS: the terminating hook the machine completes


def fleet_group(d: Deployment, project: str = "") -> FleetGroup:
    """The group of a deployment's single-node replicas: named ``Deployment.group_name`` (GCP:
    cut to a Compute name), with the terminating lifecycle hook on AWS when the machines run a
    command whose outputs must be synced before a scale-in."""
    if d.cloud == "aws":
        return FleetGroup("aws", d.region, d.group_name, "", LIFECYCLE_HOOK if d.command is not None else "")
    return FleetGroup("gcp", d.region, gce_group_name(d), project)


def gce_group_name(d: Deployment) -> str:
    """The MIG's name: the group name as a Compute Engine name (lower case, ``-``, 63 at most)."""
    stem = re.sub(r"[^a-z0-9-]", "-", d.group_name.lower()).strip("-")
    stem = stem if stem[:1].isalpha() else f"g-{stem}"
    return stem[:63].rstrip("-")


@dataclass(frozen=True)
class NodeRole:
    """Where one machine stands in a multi-node job."""

    rank: int
    nodes: int
    master_addr: str  # node 0's private address; "" on node 0 itself
    machine: int = 0  # index among all the deployment's machines (names its bucket prefix)


@dataclass(frozen=True)
class MachineFile:
    path: str
    content: str
    mode: str = "0644"


@dataclass(frozen=True)
class Bundle:
    """What one machine gets: its files and the services to start."""

    files: tuple[MachineFile, ...]
    start: tuple[str, ...] = field(default=("gpufit-boot.service",))

    def file(self, path: str) -> MachineFile:
        return next(f for f in self.files if f.path == path)


COMMENT_LINE = re.compile(r"^[ \t]*#(?! shellcheck )[^\n]*\n", re.MULTILINE)
"""A line that is only a comment (not a ``# shellcheck`` directive, which shellcheck reads)."""


@cache
def supervisor_body() -> str:
    """The supervisor as the machine gets it: ``machine/scripts/gpufit-machine.sh`` without its
    comment-only lines (the commented source is in the repository), so the largest boot script
    stays within EC2's 16 KB of user data. The script has no here-documents, so no comment line
    is content."""
    source = (Path(__file__).parent / "scripts" / "gpufit-machine.sh").read_text(encoding="utf-8")
    head, _, body = source.partition("\n")
    return head + "\n" + COMMENT_LINE.sub("", body)


def deployment_id(d: Deployment) -> str:
    """What the machines of one deployment share, and a later deployment of the same stack does
    not: its deadline (epoch seconds; a new ``pulumi up`` of a clock-based stack keeps the first
    one, as it keeps the user data) and a digest of what the machines run. The supervisor keys its
    done and replacement markers by it (``status/deployments/<id>/``), so markers that an earlier
    deployment left in a retained or reused bucket neither skip this one's job nor use up its
    replacements."""
    work = "\n".join([d.command or "", d.checkpoint_command or "", d.workload, d.stack])
    return f"{int(d.expires_at.timestamp())}-{hashlib.sha256(work.encode()).hexdigest()[:10]}"


def kind(d: Deployment) -> str:
    """``serve`` (gpufit's model server), ``job`` (runs to completion), ``service`` (a command
    that serves until the deadline) or ``idle`` (no command)."""
    if d.server is not None:
        return "serve"
    if d.command is None:
        return "idle"
    return "job" if d.runs_to_completion else "service"


def torchrun_line(d: Deployment, role: NodeRole, timing: Timing) -> str:
    """``job.command`` launched by torchrun on every node: c10d rendezvous hosted on node 0 at a
    stable address (AWS: the instance's private IP, kept across a stop and start; GCP: a
    reserved internal address), one id per job, a join timeout that lets a relaunched node
    rejoin, worker restarts bounded by ``job.retries``
    (https://pytorch.org/docs/stable/elastic/run.html). Checked with torch 2.11 as two nodes on
    one host: after a non-host node is killed the other's torchrun restarts its workers, waits
    ``join_timeout`` in the rendezvous and exits 1 (``RendezvousTimeoutError``); after node 0
    is killed the other exits 1 within a second (``RendezvousConnectionError``)."""
    assert d.command is not None
    conf = f"join_timeout={timing.join_timeout},is_host={1 if role.rank == 0 else 0}"
    return (
        f"command -v torchrun >/dev/null || {{ echo 'gpufit: torchrun is not in the image environment' >&2; "
        f"exit 127; }}\nexec torchrun --nnodes={role.nodes} --nproc-per-node={d.gpu_count} "
        f"--max-restarts={d.job_retries} --rdzv-backend=c10d --rdzv-id={shlex.quote(d.name)} "
        f'--rdzv-endpoint="$GPUFIT_MASTER_ADDR:$GPUFIT_MASTER_PORT" --rdzv-conf={conf} {d.command}\n'
    )


def _array(values: list[str] | tuple[str, ...]) -> str:
    return "(" + " ".join(shlex.quote(v) for v in values) + ")"


def replica_shapes(d: Deployment) -> list[str]:
    """``TYPE:TP:GPUS:SEQS`` for each machine type the deployment may launch: a machine finds its
    own type's tensor parallelism (and GPU count, should ``nvidia-smi`` not answer yet) and runs
    GPUs ÷ TP workers of the job (``selector.fallbacks`` weights the fleet's machines by them),
    each at SEQS sequences (a batch job's concurrency for that type; 0: none)."""
    members = {m.machine_type: m for m in d.members}
    shapes = [
        f"{m.machine_type}:{m.tensor_parallel}:{m.gpu_count}:{m.max_num_seqs}" for m in members.values()
    ]
    if d.machine_type not in members:
        shapes.insert(0, f"{d.machine_type}:{d.tensor_parallel}:{d.gpu_count}:{d.max_num_seqs}")
    return shapes


def settings(
    d: Deployment,
    bucket: str,
    role: NodeRole,
    group: FleetGroup | None,
    secrets: MachineSecrets | None,
    paths: Paths,
    timing: Timing,
) -> str:
    """The supervisor's settings: one assignment per line, every value quoted."""
    expires = int(d.expires_at.timestamp())
    job_kind = kind(d)
    refs = secrets or MachineSecrets(d.cloud, d.region)
    serving = d.server
    engine = serving or d.batch_engine
    values: list[tuple[str, str | int]] = [
        ("SELF", paths.supervisor),
        ("ETC", paths.etc),
        ("RUN", paths.run),
        ("LIB", paths.lib),
        ("IMDS", paths.imds),
        ("GCE", paths.gce_metadata),
        ("CLOUD", d.cloud),
        ("REGION", d.region),
        ("PROJECT", group.project if group else refs.project or ""),
        ("WORKLOAD", d.workload),
        ("STACK", d.stack),
        ("BUCKET", bucket),
        ("DEPLOYMENT", deployment_id(d)),
        # which `gpufit up` attempt a multi-node job's nodes belong to (each attempt another type
        # or region): a node of a failed attempt, replaced by the next one, stops none of it
        ("ATTEMPT", f"{d.region}/{d.machine_type}/{role.nodes}"),
        ("NODE_PREFIX", "fleet" if group else f"machine-{role.machine}"),
        ("WORKDIR", paths.at(d.workdir)),
        ("KIND", job_kind),
        ("SPOT", 1 if d.spot else 0),
        ("GROUP", group.name if group else ""),
        ("LIFECYCLE_HOOK", group.lifecycle_hook if group else ""),
        ("EXPIRES_AT", expires),
        ("STOP_AT", expires - timing.stop_margin),
        ("BACKSTOP_AT", expires + (BACKSTOP_GRACE_S if group else 0)),
        ("NODE_RANK", role.rank),
        ("NNODES", role.nodes),
        ("MASTER_ADDR", role.master_addr),
        ("RDZV_PORT", RDZV_PORT),
        ("MACHINES", d.nodes if group else 1),
        # The machine's share of the work (GPUFIT_TP, GPUFIT_GPUS, GPUFIT_REPLICAS), derived on
        # the machine: a batch fleet mixes types that run the job at different TP.
        ("TP_DEFAULT", d.tensor_parallel),
        ("SEQS_DEFAULT", d.max_num_seqs),
        ("GPU_COUNT", d.gpu_count),
        # Multi-node: torchrun restarts the workers itself (--max-restarts); when torchrun exits
        # non-zero the job cannot go on, and the nodes stop rather than wait again.
        ("RETRIES", 0 if role.nodes > 1 else d.job_retries),
        ("MAX_REPLACEMENTS", lifecycle.max_replacements(d) if group else 0),
        ("HAS_CHECKPOINT", 1 if d.checkpoint_command else 0),
        ("T_HOOK", timing.hook),
        ("T_JOB_STOP", timing.job_stop),
        ("T_FINAL_SYNC", timing.final_sync),
        ("T_NOTICE_HOOK", timing.notice_hook),
        ("T_NOTICE_SYNC", timing.notice_sync),
        ("T_SHUTDOWN_HOOK", timing.shutdown_hook),
        ("T_SHUTDOWN_JOB_STOP", timing.shutdown_job_stop),
        ("T_SHUTDOWN_SYNC", timing.shutdown_sync),
        ("T_SYNC_EVERY", timing.sync_every),
        ("T_POLL", timing.poll),
        ("T_ABORT_POLL", timing.abort_poll),
        ("T_RETRY_PAUSE", timing.retry_pause),
        ("T_LEAVE_WAIT", timing.leave_wait),
        ("T_HEALTH_POLL", timing.health_poll),
        ("T_HEALTH_WATCH", timing.health_watch),
        ("T_HEALTH_FAILURES", timing.health_failures),
        ("T_HEARTBEAT", timing.heartbeat),
        ("T_JOIN", timing.join_timeout),
        ("LOAD_BOUND", lifecycle.load_bound_s(d)),
        ("HEALTH_PATH", engine.health_path if engine else HEALTH_PATH),
        # a token batch's engine on 127.0.0.1 (ports BATCH_PORT + replica) for job.command
        ("BATCH_PORT", d.batch_engine.base_port if d.batch_engine else 0),
        ("API_KEY_VAR", refs.api_key_var(serving.engine if serving else "vllm")),
        ("API_KEY_REF", refs.api_key or ""),
        # SGLang takes its key only from a flag or its --config file: the supervisor writes it there.
        ("SGLANG_CONFIG", f"{paths.run}/sglang.yaml" if serving and serving.engine == "sglang" else ""),
        # GCP's autohealing asks the readiness responder; AWS groups need none (the load
        # balancer asks the engine, the machine reports its own failures).
        ("READINESS_PORT", readiness_port(serving) if serving and d.cloud == "gcp" else 0),
        # the server binds loopback where only the machine connects (AWS SSM port forwarding),
        # else the private interface (load balancers, GCP health checks and IAP): never 0.0.0.0
        ("SERVE_BIND", "loopback" if d.cloud == "aws" and d.expose == "private" else "private"),
    ]
    lines = [f"{name}={shlex.quote(str(value))}" for name, value in values]
    job_env = refs.job_env()
    lines += [
        f"IMAGE_ENVS={_array([paths.at(p) for p in paths.image_envs])}",
        f"SECRET_VARS={_array([v for v, _ in job_env])}",
        f"SECRET_REFS={_array([r for _, r in job_env])}",
        f"SERVE_SECRETS={_array([x for pair in refs.serve_env() for x in pair])}",
        f"SERVE_PORTS={_array([str(p) for p in serving.ports()] if serving else [])}",
        f"TP_BY_TYPE={_array(replica_shapes(d))}",
    ]
    return "\n".join(lines)


def supervisor(
    d: Deployment,
    bucket: str,
    role: NodeRole,
    group: FleetGroup | None = None,
    secrets: MachineSecrets | None = None,
    paths: Paths = PATHS,
    timing: Timing | None = None,
) -> str:
    """The supervisor script: settings, then the fixed body."""
    t = timing or lifecycle.timing(d)
    head = (
        "#!/bin/bash\n# gpufit machine supervisor: its settings (rendered by machine/boot.py, "
        "each value quoted)\n# shellcheck disable=SC2034  # some settings are used by one kind "
        "of machine only\n"
    )
    return f"{head}{settings(d, bucket, role, group, secrets, paths, t)}\n{supervisor_body()}"


BOOT_UNIT = """[Unit]
Description=gpufit machine (runs at every boot: a restarted spot instance resumes its job)
Wants=network-online.target
After=network-online.target docker.service

[Service]
Type=simple
ExecStart={supervisor} boot
Restart=no
Environment=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

[Install]
WantedBy=multi-user.target
"""

FINAL_SYNC_UNIT = """[Unit]
Description=gpufit final sync when the machine shuts down (checkpoint hook, outputs to the bucket)
Wants=network-online.target
After=network-online.target gpufit-boot.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop={supervisor} shutdown
TimeoutStopSec={timeout}
Environment=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

[Install]
WantedBy=multi-user.target
"""
"""Stopped before gpufit-boot.service (ordered after it) and before the network goes down, so
the job is still running when its checkpoint hook runs."""


def bundle(
    d: Deployment,
    bucket: str,
    role: NodeRole,
    group: FleetGroup | None = None,
    secrets: MachineSecrets | None = None,
    paths: Paths = PATHS,
    timing: Timing | None = None,
) -> Bundle:
    """Every file one machine gets, with the services to start."""
    if d.server is not None and (secrets is None or secrets.api_key is None):
        raise ValueError(f"{d.name}: a model server needs its secrets' references")
    t = timing or lifecycle.timing(d)
    files = [
        MachineFile(paths.supervisor, supervisor(d, bucket, role, group, secrets, paths, t), "0700"),
        MachineFile(f"{paths.units}/gpufit-boot.service", BOOT_UNIT.format(supervisor=paths.supervisor)),
    ]
    start = ["gpufit-boot.service"]
    if d.command is not None:
        command = torchrun_line(d, role, t) if role.nodes > 1 else d.command + "\n"
        files.append(MachineFile(f"{paths.etc}/job.sh", "# gpufit: job.command\n" + command, "0700"))
        files.append(
            MachineFile(
                f"{paths.etc}/checkpoint.sh",
                "# gpufit: job.checkpoint_command\n" + (d.checkpoint_command or "true") + "\n",
                "0700",
            )
        )
        stop_budget = t.shutdown_hook + t.shutdown_job_stop + t.shutdown_sync + 30
        files.append(
            MachineFile(
                f"{paths.units}/gpufit-final-sync.service",
                FINAL_SYNC_UNIT.format(supervisor=paths.supervisor, timeout=stop_budget),
            )
        )
        start.append("gpufit-final-sync.service")
    if d.server is not None:
        assert secrets is not None
        env_file = f"{paths.run}/serve.env"
        files.append(
            MachineFile(
                f"{paths.etc}/serve-start.sh",
                serve_start(d.server, env_file, paths.model_cache, f"{paths.run}/sglang.yaml"),
            )
        )
        for name, upload in (("serve-restore.sh", False), ("serve-cache.sh", True)):
            files.append(
                MachineFile(f"{paths.etc}/{name}", serve_cache(d.cloud, paths.model_cache, bucket, upload))
            )
        if d.cloud == "gcp":
            files.append(MachineFile(f"{paths.lib}/readiness.py", readiness_script(), "0755"))
    if d.batch_engine is not None:
        start_script = batch_engine_start(d.batch_engine, f"{paths.run}/serve.env", paths.model_cache)
        files.append(MachineFile(f"{paths.etc}/batch-engine-start.sh", start_script))
    return Bundle(tuple(files), tuple(start))


def _blob(text: str) -> str:
    """gzip (no name, no time: the same text gives the same bytes) then base64."""
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode()


def bootstrap(machine: Bundle, paths: Paths = PATHS) -> str:
    """The user data / startup-script: write each file from its quoted base64, then start the
    services (enabled, so they run at every boot)."""
    dirs = sorted({f.path.rsplit("/", 1)[0] for f in machine.files})
    writes = "\n".join(
        f"printf '%s' '{_blob(f.content)}' | base64 -d | gunzip > {shlex.quote(f.path)}.new\n"
        f"chmod {f.mode} {shlex.quote(f.path)}.new && mv {shlex.quote(f.path)}.new {shlex.quote(f.path)}"
        for f in machine.files
    )
    units = " ".join(machine.start)
    return f"""#!/bin/bash
# gpufit bootstrap: writes the machine's files (gzip + base64, machine/boot.py) and starts them.
set -euo pipefail
umask 022
install -d -m 0755 {" ".join(shlex.quote(d) for d in dirs)}
install -d -m 0700 {shlex.quote(paths.run)}
{writes}
systemctl daemon-reload
systemctl enable {units}
systemctl start --no-block {units}
"""


def render(
    d: Deployment,
    bucket: str,
    role: NodeRole,
    group: FleetGroup | None = None,
    secrets: MachineSecrets | None = None,
    paths: Paths = PATHS,
    timing: Timing | None = None,
) -> str:
    """The boot script of one machine (EC2 user data, GCP startup-script). ValueError when it
    would exceed EC2's 16 KB user-data limit."""
    text = bootstrap(bundle(d, bucket, role, group, secrets, paths, timing), paths)
    if d.cloud == "aws" and len(text.encode()) > USER_DATA_LIMIT:
        raise ValueError(
            f"{d.name}: the boot script is {len(text.encode())} bytes, over EC2's {USER_DATA_LIMIT}-byte "
            "user-data limit (shorten job.command or job.checkpoint_command)"
        )
    return text


def shutdown_script(paths: Paths = PATHS) -> str:
    """GCP ``shutdown-script`` metadata: the machine's final sync when Compute Engine stops or
    deletes the VM (90 s, preemption 30 s, best effort:
    https://cloud.google.com/compute/docs/shutdownscript). Fixed text."""
    return f"#!/bin/bash\nexec {shlex.quote(paths.supervisor)} shutdown\n"
