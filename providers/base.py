"""What every cloud provider implements: the ``GpuProvider`` protocol.

The clouds' Pulumi components (``providers.aws.component``, ``providers.gcp.component``)
implement it, so the composition root never branches on cloud internals; what they provision
is a ``deployment.Deployment``. This module imports no cloud SDK and no pulumi.
"""

from __future__ import annotations

from typing import Any, Protocol

from deployment import Deployment, SecretInputs


class GpuProvider(Protocol):
    """One cloud's way of provisioning a deployment. ``provision`` registers the resources
    (a Pulumi ComponentResource and its children) and returns the stack outputs."""

    cloud: str

    def provision(self, deployment: Deployment, secrets: SecretInputs | None = None) -> dict[str, Any]: ...
