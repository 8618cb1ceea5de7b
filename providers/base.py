"""What every cloud provider implements: the ``GpuProvider`` protocol, the ``SecretInputs`` it
takes, and the properties whose changes its resources ignore so that a deadline holds
(``deadline_ignore_changes``).

The clouds' Pulumi components (``providers.aws.component``, ``providers.gcp.component``)
implement it, so the composition root never branches on cloud internals; what they provision
is a ``deployment.Deployment``. This module imports no cloud SDK and no pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from deployment import Deployment


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


def deadline_ignore_changes(deployment: Deployment) -> list[str]:
    return [] if deployment.deadline_pinned else list(DEADLINE_PROPERTIES)


@dataclass(frozen=True)
class SecretInputs:
    """The endpoint's secrets as the stack's secret config gives them (Pulumi secret outputs):
    ``gpufit:apiKey`` (None: generated) and ``gpufit:hfToken`` (None: the model needs none)."""

    api_key: Any = None
    hf_token: Any = None
