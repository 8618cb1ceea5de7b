"""The machine image a deployment boots: the image line (``selector/data/images.yaml``, with
the NVIDIA driver each ships) that supports its instance type, and which of its fleet's members
that one image can boot. ``Deployment.image`` (``gpufit:image``) overrides it."""

from __future__ import annotations

from deployment.model import Deployment, FleetMember
from selector.images import ImageLine, gcp_image, image_line, unsupported_reason

DLVM_IMAGE = gcp_image().image
"""The Deep Learning VM image family GCP machines boot (driver 580, which a CUDA 13 container
requires; unverified against Google's pages: see ``selector/data/images.yaml``)."""


def boot_image_line(d: Deployment) -> ImageLine | None:
    """The image line of the deployment's own type (None: none supports it, or GCP)."""
    return image_line(d.cloud, d.machine_type)


def unbootable_reason(d: Deployment) -> str:
    """Why no image gpufit boots supports the deployment's type."""
    return unsupported_reason(d.cloud, d.machine_type) or f"{d.machine_type}: no machine image supports it"


def same_image(d: Deployment) -> tuple[tuple[FleetMember, ...], tuple[str, ...]]:
    """(the fleet members the choice's machine image supports, the types it does not): one
    launch template boots one image, so a fallback of another image line (an ARM64 type
    behind an x86-64 choice) cannot join the group. ``gpufit:image`` is taken to support the
    whole fleet."""
    if d.image:
        return d.members, ()
    line = boot_image_line(d)
    kept = tuple(m for m in d.members if image_line(d.cloud, m.machine_type) == line)
    return kept, tuple(m.machine_type for m in d.members if m not in kept)
