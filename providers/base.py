"""What every cloud provider implements: the ``GpuProvider`` protocol, the ``SecretInputs`` it
takes (and ``unknown_secret_keys``, what it refuses in them), and the properties whose changes
its resources ignore so that a deadline holds (``deadline_ignore_changes``).

The clouds' Pulumi components (``providers.aws.component``, ``providers.gcp.component``)
implement it, so the composition root never branches on cloud internals; what they provision
is a ``deployment.Deployment``. This module imports no cloud SDK and no pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from deployment import Deployment, missing_token
from machine.lifecycle import load_problem


class GpuProvider(Protocol):
    """One cloud's way of provisioning a deployment. ``provision`` registers the resources
    (a Pulumi ComponentResource and its children) and returns the stack outputs."""

    cloud: str

    def provision(self, deployment: Deployment, secrets: SecretInputs | None = None) -> dict[str, Any]: ...


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
    "bootDisk.initializeParams.labels",
    "disks[*].labels",
)
"""Properties that carry the deadline (tags and labels, a GCP VM's and a template's boot-disk
labels, whose change would replace them, boot scripts, the spot request's end, the schedule).
When the deadline comes from the clock rather than ``gpufit:expiresAt``, a later ``pulumi up``
recomputes it; ignoring changes to these keeps the first deadline (and spares the running
machine a stop/start for new user data). Pin ``gpufit:expiresAt`` to move a deadline on
purpose."""


IMAGE_PROPERTIES = ("ami", "imageId")
"""The AWS machine image a machine or launch template was made with. The image is looked up
as the newest of its line, and Deep Learning AMIs ship every few weeks: without this a later
``pulumi up`` would replace a running job's instances (``ami`` forces a new instance) for a
newer image. A stack keeps the image it was made with; a new stack takes the newest."""


def deadline_ignore_changes(deployment: Deployment) -> list[str]:
    return [] if deployment.deadline_pinned else list(DEADLINE_PROPERTIES)


def kept_on_update(deployment: Deployment) -> list[str]:
    """What a later ``pulumi up`` leaves as it was: the deadline's properties (unless pinned)
    and the machine image."""
    return [*deadline_ignore_changes(deployment), *IMAGE_PROPERTIES]


@dataclass(frozen=True)
class SecretInputs:
    """The secrets as the stack's secret config gives them (Pulumi secret outputs):
    ``gpufit:apiKey`` (None: generated), ``gpufit:hfToken`` (None: none given; every task gets
    it as ``HF_TOKEN``) and the values of ``gpufit:secrets`` by key (the spec's ``secrets``
    that name a config key)."""

    api_key: Any = None
    hf_token: Any = None
    config: dict[str, Any] = field(default_factory=dict)


def unknown_secret_keys(d: Deployment, given: SecretInputs | None) -> list[str]:
    """Config keys the spec's ``secrets`` name that ``gpufit:secrets`` lacks, and existing
    secrets on the other cloud: one line each (nothing may be created then)."""
    have = given.config if given is not None else {}
    problems = [
        f"secrets.{s.env}: no key {s.ref!r} in the stack's secret config gpufit:secrets "
        f"(`pulumi config set --secret --path 'gpufit:secrets.{s.ref}' VALUE`)"
        for s in d.secrets
        if s.kind == "config" and s.ref not in have
    ]
    problems += [
        f"secrets.{s.env}: {s.ref} is in {s.kind.upper()} but the plan runs on {d.cloud.upper()}; "
        f"set placement.clouds: [{s.kind}]"
        for s in d.secrets
        if s.kind != "config" and s.kind != d.cloud
    ]
    return problems


def provision_problems(d: Deployment, given: SecretInputs | None) -> list[str]:
    """Why the deployment cannot be provisioned as configured, one line each, before anything
    is created: a gated model without a token, secrets the stack lacks or keeps on the other
    cloud, a model that cannot load within the machine's bounds."""
    missing = missing_token(d, given is not None and given.hf_token is not None)
    loading = load_problem(d)
    return [*([missing] if missing else []), *unknown_secret_keys(d, given), *([loading] if loading else [])]
