"""What every cloud provider implements, and the plan-to-deployment translation they share.

A ``Deployment`` is pure data derived from a selector ``Plan``: which machine, where, which
market and spot behaviour, how big a disk, when it expires, how it is tagged. The clouds'
Pulumi components (``providers.aws.component``, ``providers.gcp.component``) turn it into
resources; they implement ``GpuProvider`` so the composition root never branches on cloud
internals. This module imports no cloud SDK and no pulumi.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from providers.serving import ServerLaunch
from selector.cost import DEFAULT_SERVING_HOURS, cost_inputs
from selector.select import Plan
from selector.sizing import USABLE_MEMORY_FRACTION

TAG_MANAGED = "gpufit:managed"
TAG_STACK = "gpufit:stack"
TAG_WORKLOAD = "gpufit:workload"
TAG_EXPIRES_AT = "gpufit:expires-at"
TAG_ZONES = "gpufit:zones"
"""AWS: the AZ IDs the machines may launch in (comma-separated), so that a policy prices them
in those zones: AWS spot is priced per zone and a group's subnets do not name their AZ IDs."""

JOB_DEADLINE_FACTOR = 1.5
"""A job without a TTL expires after its expected hours × 1.5 + ``JOB_DEADLINE_SLACK_H``: room
for a slower run than planned, yet nothing outlives its purpose by more than half again."""
JOB_DEADLINE_SLACK_H = 1.0

SPOT_STOP_TASKS = frozenset({"finetune-lora", "finetune-qlora", "finetune-full", "pretrain", "batch"})


def iso_utc(moment: datetime) -> str:
    """``2026-12-04T13:00:00Z``: the expiry as tags carry it."""
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso_utc(text: str) -> datetime:
    """The inverse of ``iso_utc`` (also accepts an explicit offset); ValueError if malformed."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return value.astimezone(UTC)


def gcp_label_time(moment: datetime) -> str:
    """GCP label values allow only lowercase letters, digits, ``-`` and ``_``:
    ``2026-12-04t13-00-00z``."""
    return iso_utc(moment).lower().replace(":", "-")


def parse_gcp_label_time(text: str) -> datetime:
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2})t(\d{2})-(\d{2})-(\d{2})z", text)
    if not match:
        raise ValueError(f"{text!r} is not a gpufit expiry label")
    date, hh, mm, ss = match.groups()
    return parse_iso_utc(f"{date}T{hh}:{mm}:{ss}Z")


def gcp_label(text: str) -> str:
    """A GCP label value: lowercase, [a-z0-9_-], at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]


@dataclass(frozen=True)
class FleetMember:
    """One instance type the fleet may launch: the choice first, then its fallbacks in cost
    order. ``weighted_capacity`` is how many replicas one instance holds (the same for every
    member: a group's machines are interchangeable)."""

    instance_type: str
    machine_type: str
    attached_accelerator: str | None
    gpu_count: int
    weighted_capacity: int
    hourly_usd: float


@dataclass(frozen=True)
class Deployment:
    """Everything a cloud component needs to provision a plan's choice."""

    stack: str
    project: str
    workload: str
    task: str
    cloud: str
    region: str
    zone: str | None
    instance_type: str
    machine_type: str
    attached_accelerator: str | None
    gpu: str
    gpu_count: int
    nodes: int  # machines in all (replicas × nodes per replica)
    market: str
    fault_tolerance: str
    disk_gb: int
    bucket_keep_days: int
    retain_bucket: bool
    ssh_cidrs: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    hourly_usd: float
    estimated_total_usd: float
    needs_node_interconnect: bool
    command: str | None
    checkpoint_command: str | None
    workdir: str
    nodes_per_replica: int = 1
    deadline_pinned: bool = False  # expires_at came from gpufit:expiresAt, not from the clock
    image: str | None = None
    subnet_id: str | None = None
    zones: tuple[str, ...] = ()  # the zones the choice is offered in (() = not known); (zone,) if pinned
    extra_tags: dict[str, str] = field(default_factory=dict)
    fleet: tuple[FleetMember, ...] = ()  # the choice, then its fallbacks; () = the choice alone
    server: ServerLaunch | None = None  # the model server a serve deployment starts
    expose: str = "private"  # or "load_balancer"
    api_cidrs: tuple[str, ...] = ()
    certificate_arn: str | None = None
    hf_gated: bool = False  # the model's repo needs a Hugging Face token

    @property
    def grouped(self) -> bool:
        """Single-node replicas run in the cloud's fleet engine (an Auto Scaling group, a
        managed instance group), which fails over between the fleet's types and replaces
        interrupted or failed machines. A replica spanning nodes stays on plain instances:
        a group that replaces one node would break the job's torchrun rendezvous."""
        return self.nodes_per_replica == 1

    @property
    def pinned(self) -> bool:
        """The plan's price is one zone's (a zone-specific offer): its machines launch there only."""
        return self.zone is not None

    @property
    def allowed_zones(self) -> tuple[str, ...]:
        """Where the machines may launch: the pinned zone; else the zones the region-level offer
        is known in; () = any zone of the region (still only where the cloud offers the type).
        AWS zones are AZ IDs (``use1-az2``), GCP zones names (``us-central1-a``)."""
        if self.zone is not None:
            return (self.zone,)
        return self.zones

    @property
    def members(self) -> tuple[FleetMember, ...]:
        """The fleet's instance types, choice first (the choice alone when none was given)."""
        if self.fleet:
            return self.fleet
        return (
            FleetMember(
                self.instance_type,
                self.machine_type,
                self.attached_accelerator,
                self.gpu_count,
                1,
                self.hourly_usd / max(self.nodes, 1),
            ),
        )

    @property
    def group_name(self) -> str:
        """The fleet group's name, fixed before the group exists so that the boot script and
        the instance role's policy can name it: ``gpufit-<workload>-<stack>``."""
        return f"gpufit-{self.name}"

    @property
    def name(self) -> str:
        """Base name for cloud resources: ``<workload>-<stack>``, DNS-safe, ≤ 40 characters."""
        return gcp_label(f"{self.workload}-{self.stack}").strip("-")[:40].rstrip("-")

    def role(self, index: int) -> tuple[int, int]:
        """(rank inside its distributed group, index of the group's first machine) for the
        machine at ``index``: machines form groups of ``nodes_per_replica``; rank 0 leads."""
        group = index // self.nodes_per_replica
        return index % self.nodes_per_replica, group * self.nodes_per_replica

    @property
    def spot(self) -> bool:
        return self.market == "spot"

    @property
    def resumes_after_interruption(self) -> bool:
        """Checkpointed work resumes after an interruption: on AWS the persistent request
        restarts the stopped instance on the same disk when capacity returns; on GCP the VM is
        deleted (one termination action governs both preemption and the deadline, and it
        must delete at the deadline), so the job resumes from the bucket on the next
        ``pulumi up``. Stateless work is simply deleted on both."""
        return self.fault_tolerance == "checkpointed"

    @property
    def runs_to_completion(self) -> bool:
        """Jobs power off when their command ends; services run until the deadline."""
        return self.task != "serve" and self.command is not None

    @property
    def lifetime_seconds(self) -> int:
        return max(60, math.ceil((self.expires_at - self.created_at).total_seconds()))

    def tags(self) -> dict[str, str]:
        """AWS tags on everything gpufit creates."""
        return {
            TAG_MANAGED: "true",
            TAG_STACK: self.stack,
            TAG_WORKLOAD: self.workload,
            TAG_EXPIRES_AT: iso_utc(self.expires_at),
            **({TAG_ZONES: ",".join(self.allowed_zones)} if self.allowed_zones else {}),
            **self.extra_tags,
        }

    def labels(self) -> dict[str, str]:
        """GCP labels carrying the same facts (label syntax forbids ``:``)."""
        return {
            "gpufit-managed": "true",
            "gpufit-stack": gcp_label(self.stack),
            "gpufit-workload": gcp_label(self.workload),
            "gpufit-expires-at": gcp_label_time(self.expires_at),
            **{gcp_label(k): gcp_label(v) for k, v in self.extra_tags.items()},
        }


def lifetime_hours(plan: Plan) -> float:
    """How long the machines may live: the TTL if the spec sets one; else the service's
    duration; else the job's expected hours × ``JOB_DEADLINE_FACTOR`` + slack."""
    spec = plan.spec
    if spec.teardown is not None:
        return spec.teardown.ttl
    if spec.task == "serve" or plan.choice is None or plan.choice.shape.job_hours is None:
        return spec.duration if spec.duration is not None else DEFAULT_SERVING_HOURS
    return plan.choice.cost.hours * JOB_DEADLINE_FACTOR + JOB_DEADLINE_SLACK_H


class ServingError(ValueError):
    """A serve spec whose model server gpufit cannot start as planned, with the reason."""


GATED_ORGS = frozenset({"meta-llama", "mistralai", "google"})
"""Hugging Face organisations whose model repos are gated (a licence to accept, then a token)."""


ALWAYS_GATED = ("meta-llama/",)
"""Repos whose every model is gated: a server of one is refused without a token."""


def missing_token(d: Deployment, have_token: bool) -> str | None:
    """Why the deployment cannot start without a Hugging Face token (None when it can): the
    server could not download the weights, fail its health check, and be replaced forever."""
    if have_token or d.server is None or not d.server.model.startswith(ALWAYS_GATED):
        return None
    return (
        f"{d.server.model} is gated on Hugging Face: set its token with "
        "`pulumi config set --secret gpufit:hfToken hf_...` (without it the server cannot download "
        "the weights, fails its health check and is replaced over and over)"
    )


def server_launch(plan: Plan) -> ServerLaunch | None:
    """The model server of a serve plan from its own numbers: tensor parallelism and replicas
    per machine from the shape, ``--max-model-len`` = ``serving.context_tokens``,
    ``--max-num-seqs`` = ``serving.concurrency``, the memory fraction the sizing plans with,
    FP8 weights and KV cache where the plan computes in them. ServingError when it cannot be
    started as planned; None when the spec starts no server."""
    spec, choice = plan.spec, plan.choice
    engine = spec.server_engine
    if engine == "none" or choice is None or spec.serving is None:
        return None
    shape, arch = choice.shape, spec.arch()
    if shape.nodes_per_replica > 1:
        raise ServingError(
            f"serving.engine {engine}: the plan spreads a replica over {shape.nodes_per_replica} nodes "
            "(pipeline parallel), which gpufit does not launch; give job.command, or "
            "placement.instance_types that hold the model on one node"
        )
    repo = spec.model.hf or arch.hf
    if repo is None:
        raise ServingError(f"serving.engine {engine}: model.hf must name the Hugging Face repo to serve")
    if spec.precision in ("int8", "int4", "nf4") and spec.model.hf is None:
        raise ServingError(
            f"serving.engine {engine}: precision {spec.precision} needs a quantised checkpoint; "
            f"name one in model.hf ({repo} holds 16-bit weights)"
        )
    return ServerLaunch(
        engine=engine,
        model=repo,
        revision=spec.model.revision,
        served_name=spec.name,
        tensor_parallel=shape.tensor_parallel,
        max_model_len=spec.serving.context_tokens,
        max_num_seqs=spec.serving.concurrency,
        gpu_memory_utilization=USABLE_MEMORY_FRACTION,
        # An FP8 checkpoint carries its quantisation; --quantization fp8 quantises 16-bit weights.
        quantization="fp8" if spec.precision == "fp8" and "fp8" not in repo.lower() else None,
        kv_cache_dtype="fp8" if spec.serving.kv_cache_precision == "fp8" else None,
        replicas=shape.replicas_per_instance,
        base_port=spec.serving.port,
        weights_gb=arch.params * 2 / 1e9,
    )


def deployment_from_plan(
    plan: Plan,
    *,
    stack: str,
    project: str,
    created_at: datetime,
    expires_at: datetime | None = None,
    image: str | None = None,
    subnet_id: str | None = None,
) -> Deployment:
    """Translate the plan's choice into a ``Deployment``; ValueError if the plan has none."""
    choice = plan.choice
    if choice is None:
        raise ValueError(f"plan for {plan.spec.name} has no choice ({plan.status})")
    spec, offer, shape = plan.spec, choice.offer, choice.shape
    inputs = cost_inputs(spec, plan.requirements)
    created = created_at.astimezone(UTC)
    expiry = expires_at or created + timedelta(hours=lifetime_hours(plan))
    if expiry <= created:
        raise ValueError(f"expires_at {iso_utc(expiry)} is not after the creation time {iso_utc(created)}")
    it = offer.instance
    return Deployment(
        stack=stack,
        project=project,
        workload=spec.name,
        task=spec.task,
        cloud=it.cloud,
        region=offer.region,
        zone=offer.zone,
        zones=(offer.zone,) if offer.zone is not None else offer.zones,
        instance_type=it.name,
        machine_type=it.machine_type,
        attached_accelerator=it.attached_accelerator,
        gpu=it.gpu.name,
        gpu_count=it.gpu_count,
        nodes=shape.instances,
        nodes_per_replica=shape.nodes_per_replica,
        deadline_pinned=expires_at is not None,
        market=offer.market,
        fault_tolerance=spec.fault_tolerance,
        disk_gb=math.ceil(inputs.disk_gb),
        bucket_keep_days=max(1, math.ceil(spec.storage.keep_days)),
        retain_bucket=spec.storage.retain_bucket,
        ssh_cidrs=tuple(spec.access.ssh_cidrs),
        created_at=created,
        expires_at=expiry,
        hourly_usd=choice.cost.hourly_usd,
        estimated_total_usd=choice.cost.total_usd,
        needs_node_interconnect=shape.needs_node_interconnect,
        command=spec.job.command,
        checkpoint_command=spec.job.checkpoint_command,
        workdir=spec.job.workdir,
        image=image,
        subnet_id=subnet_id,
        server=server_launch(plan),
        expose=spec.serving.expose if spec.serving is not None else "private",
        api_cidrs=tuple(spec.access.api_cidrs),
        certificate_arn=spec.serving.certificate_arn if spec.serving is not None else None,
        hf_gated=(spec.model.hf or spec.arch().hf or "").split("/")[0] in GATED_ORGS,
        fleet=(
            FleetMember(
                it.name,
                it.machine_type,
                it.attached_accelerator,
                it.gpu_count,
                shape.replicas_per_instance,
                offer.hourly_usd,
            ),
            *(
                FleetMember(
                    f.offer.instance.name,
                    f.offer.instance.machine_type,
                    f.offer.instance.attached_accelerator,
                    f.offer.instance.gpu_count,
                    f.weighted_capacity,
                    f.offer.hourly_usd,
                )
                for f in plan.fallbacks
            ),
        ),
    )


DEADLINE_PROPERTIES = (
    "tags",
    "tagsAll",
    "labels",
    "userData",
    "metadata",
    "instanceMarketOptions",
    "rootBlockDevice.tags",
    "scheduleExpression",
    "description",
    "tagSpecifications",
    "startTime",
    "schedule",
    "scheduling.terminationTime",
)
"""Properties that carry the deadline (tags and labels, boot scripts, the spot request's end,
the schedule). When the deadline comes from the clock rather than ``gpufit:expiresAt``, a
later ``pulumi up`` recomputes it; ignoring changes to these keeps the first deadline (and
spares the running machine a stop/start for new user data). Pin ``gpufit:expiresAt`` to move
a deadline on purpose."""


def deadline_ignore_changes(deployment: Deployment) -> list[str]:
    return [] if deployment.deadline_pinned else list(DEADLINE_PROPERTIES)


@dataclass(frozen=True)
class SecretInputs:
    """The endpoint's secrets as the stack's secret config gives them (Pulumi secret outputs):
    ``gpufit:apiKey`` (None: generated) and ``gpufit:hfToken`` (None: the model needs none)."""

    api_key: Any = None
    hf_token: Any = None


class GpuProvider(Protocol):
    """One cloud's way of provisioning a deployment. ``provision`` registers the resources
    (a Pulumi ComponentResource and its children) and returns the stack outputs."""

    cloud: str

    def provision(self, deployment: Deployment, secrets: SecretInputs | None = None) -> dict[str, Any]: ...
