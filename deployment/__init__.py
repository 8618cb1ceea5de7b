"""The plan-to-deployment translation the clouds share, as pure data.

A ``Deployment`` is derived from a selector ``Plan``: which machine, where, which market and
spot behaviour, how big a disk, when it expires, how it is tagged, which model server it
starts. The clouds' Pulumi components (``providers.aws.component``, ``providers.gcp.component``)
turn it into resources and the boot script (``machine.boot``) into what the machine runs. This
package imports no cloud SDK and no pulumi.

Its parts: ``tags`` (tag and label names, the expiry's spellings), ``launch`` (``ServerLaunch``
and the engine images), ``model`` (``Deployment``, ``FleetMember``, gating, deadline
properties, ``SecretInputs``), ``translate`` (``deployment_from_plan``, ``server_launch``,
``lifetime_hours``).
"""

from deployment.launch import (
    DOWNLOAD_MB_PER_S,
    ENGINE_START_S,
    IMAGES,
    SGLANG_IMAGE,
    VLLM_IMAGE,
    ServerLaunch,
)
from deployment.model import (
    ALWAYS_GATED,
    DEADLINE_PROPERTIES,
    GATED_ORGS,
    SPOT_STOP_TASKS,
    Deployment,
    FleetMember,
    SecretInputs,
    deadline_ignore_changes,
    missing_token,
)
from deployment.tags import (
    TAG_EXPIRES_AT,
    TAG_MANAGED,
    TAG_STACK,
    TAG_WORKLOAD,
    TAG_ZONES,
    gcp_label,
    gcp_label_time,
    iso_utc,
    parse_gcp_label_time,
    parse_iso_utc,
)
from deployment.translate import (
    JOB_DEADLINE_FACTOR,
    JOB_DEADLINE_SLACK_H,
    ServingError,
    deployment_from_plan,
    lifetime_hours,
    server_launch,
)

__all__ = [
    "ALWAYS_GATED",
    "DEADLINE_PROPERTIES",
    "DOWNLOAD_MB_PER_S",
    "ENGINE_START_S",
    "GATED_ORGS",
    "IMAGES",
    "JOB_DEADLINE_FACTOR",
    "JOB_DEADLINE_SLACK_H",
    "SGLANG_IMAGE",
    "SPOT_STOP_TASKS",
    "TAG_EXPIRES_AT",
    "TAG_MANAGED",
    "TAG_STACK",
    "TAG_WORKLOAD",
    "TAG_ZONES",
    "VLLM_IMAGE",
    "Deployment",
    "FleetMember",
    "SecretInputs",
    "ServerLaunch",
    "ServingError",
    "deadline_ignore_changes",
    "deployment_from_plan",
    "gcp_label",
    "gcp_label_time",
    "iso_utc",
    "lifetime_hours",
    "missing_token",
    "parse_gcp_label_time",
    "parse_iso_utc",
    "server_launch",
]
