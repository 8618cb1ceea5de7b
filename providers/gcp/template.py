"""The GCP fleet's regional instance template, built in one place (``instance_template``) so
that what a group's VMs are made of (provisioning model, accelerators, disks, reservation
affinity) is extended here, whichever group uses it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pulumi
import pulumi_gcp as gcp

from deployment import DEADLINE_LAYER_SCHEDULER, LABEL_DEADLINE_LAYER, Deployment, iso_utc
from machine.boot import NodeRole, fleet_group, render, shutdown_script
from providers.gcp import capacity
from providers.gcp.common import CLOUD_PLATFORM_SCOPE, DLVM_IMAGE, boot_disk_type, nic_type
from providers.gcp.secrets import GcpMachineSecrets


@dataclass(frozen=True)
class TemplateInputs:
    """What a group's instance template takes from the stack's other resources."""

    base: str
    labels: dict[str, str]
    tag: str
    subnetwork: Any
    service_account_email: Any
    startup_script: Any
    termination: str | None
    overflow: bool = False  # the on-demand VMs beside a reservation (``capacity.group_versions``)


def boot_script(
    d: Deployment, project: str, secrets: GcpMachineSecrets, bucket: Any, names: Any, group: str = ""
) -> pulumi.Output[str]:
    """A group's boot script (``startup-script``) once the bucket and secret names resolve;
    ``group``: the MIG its VMs leave and ask to be recreated in, when not the choice's (a
    batch's fallback group, ``providers.gcp.fallback_groups``)."""

    def script(values: list[Any]) -> str:
        own = fleet_group(d, project)
        own = replace(own, name=group) if group else own
        return render(d, str(values[0]), NodeRole(0, 1, ""), own, secrets.refs(d, list(values[1]), project))

    return pulumi.Output.all(bucket, names).apply(script)


def instance_template(
    name: str, d: Deployment, given: TemplateInputs, opts: pulumi.ResourceOptions
) -> gcp.compute.RegionInstanceTemplate:
    """The group's regional instance template (the one place it is built): Shielded VM, OS
    Login, the boot script, spot by fault tolerance, the attached GPUs of an N1 choice, and the
    absolute termination time when the deadline is within reach (``template_termination_time``).
    Instance flexibility overrides only its machine type (``place_members`` keeps the members
    it serves)."""
    labels = given.labels
    accelerators = (
        [
            gcp.compute.RegionInstanceTemplateGuestAcceleratorArgs(
                type=d.attached_accelerator, count=d.gpu_count
            )
        ]
        if d.attached_accelerator
        else None
    )
    template_labels = (
        labels if given.termination else {**labels, LABEL_DEADLINE_LAYER: DEADLINE_LAYER_SCHEDULER}
    )
    return gcp.compute.RegionInstanceTemplate(
        name,
        name_prefix=f"{given.base[:36]}-",
        region=d.region,
        machine_type=d.machine_type,
        description=f"gpufit {d.workload} ({d.stack}), deleted at {iso_utc(d.expires_at)}",
        disks=[
            gcp.compute.RegionInstanceTemplateDiskArgs(
                boot=True,
                auto_delete=True,
                source_image=d.image or DLVM_IMAGE,
                disk_size_gb=d.disk_gb,
                disk_type=boot_disk_type(d.machine_type),
                labels=labels,
            )
        ],
        guest_accelerators=accelerators,
        network_interfaces=[
            gcp.compute.RegionInstanceTemplateNetworkInterfaceArgs(
                subnetwork=given.subnetwork,
                nic_type=nic_type(d),
                # Ephemeral public IP for egress only; no firewall rule lets anything in.
                access_configs=[gcp.compute.RegionInstanceTemplateNetworkInterfaceAccessConfigArgs()],
            )
        ],
        scheduling=capacity.scheduling(d, given.termination),
        reservation_affinity=capacity.reservation_affinity(d, given.overflow, given.base),  # issue 26
        service_account=gcp.compute.RegionInstanceTemplateServiceAccountArgs(
            email=given.service_account_email, scopes=[CLOUD_PLATFORM_SCOPE]
        ),
        shielded_instance_config=gcp.compute.RegionInstanceTemplateShieldedInstanceConfigArgs(
            enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
        ),
        metadata={
            "enable-oslogin": "TRUE",
            "block-project-ssh-keys": "TRUE",
            "startup-script": given.startup_script,
            "shutdown-script": shutdown_script(),
        },
        labels=template_labels,
        tags=[given.tag],
        opts=opts,
    )
