"""The plan-to-deployment translation the clouds share, as pure data.

A ``Deployment`` is derived from a selector ``Plan``: which machine, where, which market and
spot behaviour, how big a disk, when it expires, how it is tagged, which model server it
starts. The clouds' Pulumi components (``providers.aws.component``, ``providers.gcp.component``)
turn it into resources and the boot script (``machine.boot``) into what the machine runs. This
package imports no cloud SDK and no pulumi.

Its parts: ``tags`` (tag and label names, the expiry's spellings), ``launch`` (``ServerLaunch``
and the engine images), ``model`` (``Deployment``, ``FleetMember``, gating), ``translate``
(``deployment_from_plan``, ``server_launch``, ``lifetime_hours``), ``images`` (the machine
images booted unless ``gpufit:image`` names one), ``launches`` (every launch planned for the
presets and stacks, for the engine parser checks). The package exports what the other homes
use; ``images`` and ``launches`` are imported by name, off ``gpufit plan``'s path.
"""

from deployment.launch import (
    DOWNLOAD_MB_PER_S,
    ENGINE_START_S,
    SGLANG_IMAGE,
    VLLM_IMAGE,
    ServerLaunch,
)
from deployment.model import (
    ALWAYS_GATED,
    Deployment,
    FleetMember,
    missing_token,
)
from deployment.tags import (
    DEADLINE_LAYER_SCHEDULER,
    LABEL_DEADLINE_LAYER,
    TAG_EXPIRES_AT,
    TAG_MANAGED,
    TAG_PROJECT,
    TAG_STACK,
    TAG_WORKLOAD,
    TAG_ZONES,
    fitted_name,
    gcp_label,
    gcp_label_time,
    iso_utc,
    name_digest,
    parse_gcp_label_time,
    parse_iso_utc,
    parse_zones_tag,
    zones_tag,
)
from deployment.translate import (
    ServingError,
    deployment_from_plan,
    lifetime_hours,
    server_launch,
)

__all__ = [
    "ALWAYS_GATED",
    "DEADLINE_LAYER_SCHEDULER",
    "DOWNLOAD_MB_PER_S",
    "ENGINE_START_S",
    "LABEL_DEADLINE_LAYER",
    "SGLANG_IMAGE",
    "TAG_EXPIRES_AT",
    "TAG_MANAGED",
    "TAG_PROJECT",
    "TAG_STACK",
    "TAG_WORKLOAD",
    "TAG_ZONES",
    "VLLM_IMAGE",
    "Deployment",
    "FleetMember",
    "ServerLaunch",
    "ServingError",
    "deployment_from_plan",
    "fitted_name",
    "gcp_label",
    "gcp_label_time",
    "iso_utc",
    "lifetime_hours",
    "missing_token",
    "name_digest",
    "parse_gcp_label_time",
    "parse_iso_utc",
    "parse_zones_tag",
    "server_launch",
    "zones_tag",
]
