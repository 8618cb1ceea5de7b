"""``Deployment``: everything a cloud component needs to provision a plan's choice, as pure
data; its fleet members and the Hugging Face gating rule."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime

from deployment.capacity import CapacityTarget
from deployment.launch import ServerLaunch
from deployment.tags import (
    TAG_EXPIRES_AT,
    TAG_MANAGED,
    TAG_STACK,
    TAG_WORKLOAD,
    TAG_ZONES,
    fitted_name,
    gcp_label,
    gcp_label_time,
    iso_utc,
    zones_tag,
)
from selector.spec import SecretSource

NAME_LIMIT = 40
"""Characters in a deployment's base name (``Deployment.name``)."""

SPOT_STOP_TASKS = frozenset(
    {"finetune-lora", "finetune-qlora", "finetune-full", "pretrain", "batch", "embed"}
)


@dataclass(frozen=True)
class FleetMember:
    """One instance type the fleet may launch: the choice first, then its fallbacks in cost
    order. ``weighted_capacity`` is how many replicas (the fleet's capacity units) one instance
    holds: the same for every member of a serving or training fleet, the machine's GPUs ÷ its
    tensor parallelism in a batch fleet that mixes sizes (``selector.fallbacks``)."""

    instance_type: str
    machine_type: str
    attached_accelerator: str | None
    gpu_count: int
    weighted_capacity: int
    hourly_usd: float
    tensor_parallel: int = 1
    max_num_seqs: int = 0  # batch generation: sequences per replica on this type (0: none)
    gpu: str | None = None  # the GPU model (catalog name); a GCP group never mixes two
    realised: str = ""  # GCP: "flexibility" (the choice's MIG) or "group" (a MIG of its own)
    market: str = ""  # a group's own market when not the choice's (a spot endpoint's on-demand group)


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
    batch_engine: ServerLaunch | None = None  # a token batch's engine on 127.0.0.1, for job.command
    expose: str = "private"  # or "load_balancer"
    api_cidrs: tuple[str, ...] = ()
    certificate_arn: str | None = None
    tls_domain: str | None = None  # GCP: a Google-managed certificate for it (serving.domain)
    tls_certificate: str | None = None  # GCP: a Certificate Manager certificate of the user's own
    allow_plain_http: bool = False  # serving.allow_plain_http: the load balancer listens on HTTP
    hf_gated: bool = False  # the model's repo needs a Hugging Face token
    secrets: tuple[SecretSource, ...] = ()  # the job's environment from secret stores (spec ``secrets``)
    job_retries: int = 2  # runs of a failed command again on the same machine
    checkpoint_interval_s: int = 1800  # outputs/ is synced this often while the job runs
    checkpoint_gb: float = 0.0  # one training checkpoint (0: not training)
    tensor_parallel: int = 1  # GPUs per replica of the choice's own shape
    max_num_seqs: int = 0  # batch generation: the choice's sequences per replica (0: none)
    fleet_units: int = 0  # the group's desired capacity in replicas (0 = one per machine)
    on_demand_base: int = 0  # instances of a spot serving fleet kept on-demand
    spot_allocation: str = "price-capacity-optimized"  # or "cost-order" (placement.spot_allocation)
    capacity: CapacityTarget | None = None  # a Capacity Block, flex-start request or reservation
    gcp_instance_flexibility: bool | None = None  # placement.gcp_instance_flexibility (None: allowlist)

    @property
    def api_from_anywhere(self) -> bool:
        """``access.api_cidrs`` admit the internet at large (``selector.reach``: a /0, or a
        union such as ``0.0.0.0/1`` + ``128.0.0.0/1``); the spec allowed it only with
        ``access.allow_api_from_anywhere``."""
        from selector.reach import from_anywhere

        return from_anywhere(self.api_cidrs)

    @property
    def capacity_units(self) -> int:
        """The fleet's desired capacity in its units: replicas, each machine weighted by the
        replicas it holds (one unit per machine when the plan did not say)."""
        return self.fleet_units or self.nodes

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
        """Base name for cloud resources: ``<workload>-<stack>`` in DNS-safe characters
        (lowercase, ``[a-z0-9-]``: ``Team_Prod.eu`` → ``team-prod-eu``), at most 40 characters.
        A name that fits is only made safe, as gpufit always named it (so an existing stack
        keeps its resources); one that must be cut keeps its head and a digest of the full
        project/stack/workload name, so stacks ``staging`` and ``production`` of one long
        workload never share a name."""
        safe = re.sub(r"[^a-z0-9-]", "-", f"{self.workload}-{self.stack}".lower()).strip("-")
        if len(safe) <= NAME_LIMIT:
            return safe
        return fitted_name(safe, NAME_LIMIT, f"{self.project}/{self.stack}/{self.workload}")

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
            **({TAG_ZONES: zones_tag(self.allowed_zones)} if self.allowed_zones else {}),
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


GATED_ORGS = frozenset({"meta-llama", "mistralai", "google"})
"""Hugging Face organisations whose model repos are gated (a licence to accept, then a token)."""


ALWAYS_GATED = ("meta-llama/",)
"""Repos whose every model is gated: a server of one is refused without a token."""


def missing_token(d: Deployment, have_token: bool) -> str | None:
    """Why the deployment cannot start without a Hugging Face token (None when it can): the
    server (or a token batch's engine) could not download the weights, fail its health check,
    and be replaced forever."""
    engine = d.server or d.batch_engine
    if have_token or engine is None or not engine.model.startswith(ALWAYS_GATED):
        return None
    return (
        f"{engine.model} is gated on Hugging Face: set its token with "
        "`pulumi config set --secret gpufit:hfToken hf_...` (without it the server cannot download "
        "the weights, fails its health check and is replaced over and over)"
    )
