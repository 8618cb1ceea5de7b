"""The GCP side: a ``gpufit:gcp:GpuInstance`` component that provisions a ``Deployment``.

Secure by default: the VMs sit in their own VPC and subnet (so the ``default`` network's
pre-made allow-SSH-from-anywhere rules never apply) and no ingress rule exists unless the spec
lists SSH CIDRs; access is OS Login, through IAP when ``35.235.240.0/20`` is among those CIDRs.
Shielded VM is on, project-wide SSH keys are blocked, and the VMs run as a service account
whose only grant is object access on the stack's private checkpoint bucket. The deadline is
Compute Engine's own ``max_run_duration`` with the DELETE action, so the VMs go away at
``expires_at`` even if nobody is watching. ``nodes`` VMs form replicas of
``nodes_per_replica``; when a replica spans VMs, the plan gets a compact placement policy, a
firewall rule open between the job's VMs only, and a reserved internal address for each
replica's rank-0 VM that the others' torchrun rendezvous points at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment, iso_utc
from machine.boot import NodeRole, render, shutdown_script
from providers.base import SecretInputs, deadline_ignore_changes, provision_problems
from providers.gcp.common import (
    CLOUD_PLATFORM_SCOPE,
    DLVM_IMAGE,
    boot_disk_type,
    checkpoint_bucket,
    enabled_apis,
    firewalls,
    gce_name,
    label_expiry,
    network,
    network_tag,
    nic_type,
    resource_name,
    vm_identity,
)
from providers.gcp.fleet import GcpGpuFleet
from providers.gcp.fleet_placement import fleet_placement
from providers.gcp.secrets import GcpMachineSecrets, machine_secrets, uses_secret_manager

IAP_SSH_RANGE = "35.235.240.0/20"
"""Where IAP TCP forwarding connects from: ``gcloud compute ssh --tunnel-through-iap`` needs it
in ``access.ssh_cidrs``."""

MAX_RUN_DURATION_LIMIT_S = 120 * 24 * 3600
"""Compute Engine accepts a VM run-time limit of 30 seconds to 120 days."""

NO_COMPACT_PLACEMENT_SERIES = ("n1-",)
"""Machine series that compact placement policies do not support: N1 multi-node plans are
created without one rather than failing."""


def scheduling(deployment: Deployment) -> gcp.compute.InstanceSchedulingArgs:
    """Market, maintenance and deadline behaviour of every VM in the deployment.

    One ``instance_termination_action`` governs both a spot preemption and the
    ``max_run_duration`` deadline (pulumi-gcp 10.2: "the termination action could be defined in
    ``instance_termination_action``"; ``termination_time`` and ``on_instance_stop_action`` apply
    the same action). The deadline must delete the VM, so the action is DELETE for on-demand and
    spot alike, checkpointed work included. The trade-off: a preempted checkpointed spot VM is
    deleted rather than stopped, losing its boot disk. Compute Engine never restarts a stopped
    spot VM by itself, so STOP would only have kept the disk for a manual restart; the
    preemption notice (and the shutdown-script) runs the checkpoint hook and syncs outputs to
    the bucket, the job's other nodes stop after the rendezvous wait, and the next ``pulumi up``
    recreates the VM, which resumes from the bucket. STOP would instead leave a
    stopped VM (and its disk bill) past the deadline, restartable by anyone.
    """
    d = deployment
    seconds = d.lifetime_seconds
    if seconds > MAX_RUN_DURATION_LIMIT_S:
        raise ValueError(
            f"{d.name}: lifetime {seconds / 86400:.1f} days exceeds Compute Engine's 120-day "
            "max_run_duration limit, and a job spread over VMs has no other cloud-side deadline "
            "(a managed group's Cloud Scheduler job); shorten teardown.ttl or duration"
        )
    return gcp.compute.InstanceSchedulingArgs(
        provisioning_model="SPOT" if d.spot else "STANDARD",
        preemptible=d.spot,
        automatic_restart=not d.spot,
        on_host_maintenance="TERMINATE",
        instance_termination_action="DELETE",
        max_run_duration=gcp.compute.InstanceSchedulingMaxRunDurationArgs(seconds=seconds),
    )


def first_up_zone(region: str, names: Sequence[str] | None, among: Sequence[str] = ()) -> str:
    """The first zone by name among those reported UP (and in ``among``, the plan's zones,
    when given); ValueError if there are none."""
    up = [n for n in names or [] if not among or n in among]
    if not up:
        scope = f" among {', '.join(among)} (the plan's zones)" if among else ""
        raise ValueError(f"no zone of {region}{scope} is UP")
    return sorted(up)[0]


def _boot_script(
    d: Deployment, rank: int, index: int, project: str, secrets: GcpMachineSecrets
) -> Callable[[list[Any]], str]:
    """Renders machine ``index``'s boot script (``rank`` in its group) from the resolved
    ``[bucket name, group leader's address, secret names]``."""

    def rendered(values: list[Any]) -> str:
        bucket, master, names = values
        role = NodeRole(rank, d.nodes_per_replica, str(master), index)
        return render(d, str(bucket), role, None, secrets.refs(d, list(names), project))

    return rendered


class GcpGpuInstance(pulumi.ComponentResource):
    """GPU VMs, their network, firewall rules, service account, bucket and deadline, for one
    deployment. ``outputs`` holds the stack outputs, also registered on the component; its
    ``instance_id``/``instance_ids`` are VM names, which is what every ``gcloud`` command takes."""

    outputs: dict[str, pulumi.Input[Any]]

    def __init__(
        self,
        name: str,
        deployment: Deployment,
        opts: pulumi.ResourceOptions | None = None,
        secrets: SecretInputs | None = None,
        project: str = "",
    ) -> None:
        """``secrets``: the Hugging Face token and the spec's secrets' values; ``project``:
        where the secrets live (the provider's)."""
        d = deployment
        if d.cloud != "gcp":
            raise ValueError(f"{d.name}: a {d.cloud} deployment cannot be provisioned on GCP")
        if d.nodes < 1 or d.nodes_per_replica < 1 or d.nodes % d.nodes_per_replica:
            raise ValueError(f"{d.name}: {d.nodes} machines do not form groups of {d.nodes_per_replica}")
        vm_scheduling = scheduling(d)
        super().__init__("gpufit:gcp:GpuInstance", name, None, opts)
        base = gce_name(name)
        labels = d.labels()
        tag = network_tag(d)
        needed = ["compute", "iam", "storage"]
        if uses_secret_manager(d, secrets):
            needed.append("secretmanager")
        apis = enabled_apis(base, needed, pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(
            parent=self, ignore_changes=deadline_ignore_changes(d), depends_on=apis
        )
        invoke = pulumi.InvokeOutputOptions(parent=self)

        zone = self._zone(d, invoke)
        network_link, subnetwork = network(base, d, child, invoke)
        self.firewalls = firewalls(base, d, tag, network_link, child)
        self.bucket = checkpoint_bucket(base, d, labels, child)
        self.service_account, bucket_access = vm_identity(base, d, self.bucket, child)
        self.secrets = machine_secrets(base, d, [self.service_account.member], secrets, labels, child)
        names = self.secrets.names()

        distributed = d.nodes_per_replica > 1
        # Each distributed group's leader gets a reserved internal address: known before any VM
        # exists, so all VMs are created together (as a compact policy's vm_count expects) and
        # a recreated leader keeps the address its followers rendezvous at.
        leader_ips: dict[int, pulumi.Output[str]] = {}
        if distributed:
            for leader in range(0, d.nodes, d.nodes_per_replica):
                leader_ips[leader] = gcp.compute.Address(
                    resource_name(base, f"node{leader}-ip"),
                    address_type="INTERNAL",
                    purpose="GCE_ENDPOINT",
                    region=d.region,
                    subnetwork=subnetwork,
                    description=f"node {leader}: the torchrun rendezvous endpoint of its group",
                    labels=labels,
                    opts=child,
                ).address
        self.placement: gcp.compute.ResourcePolicy | None = None
        if distributed and not d.machine_type.startswith(NO_COMPACT_PLACEMENT_SERIES):
            self.placement = gcp.compute.ResourcePolicy(
                resource_name(base, "compact"),
                region=d.region,
                description="gpufit: the job's VMs close together for NCCL",
                group_placement_policy=gcp.compute.ResourcePolicyGroupPlacementPolicyArgs(
                    collocation="COLLOCATED", vm_count=d.nodes
                ),
                opts=child,
            )

        # The VMs wait for the bucket grant so the boot script can write from its first minute.
        # What carries the clock's deadline (labels, description, startup script, the boot
        # disk's labels, which would replace the VM) keeps its first value on a later `up`.
        vm_opts = pulumi.ResourceOptions(
            parent=self, depends_on=[bucket_access, *apis], ignore_changes=deadline_ignore_changes(d)
        )
        self.instances: list[gcp.compute.Instance] = []
        for index in range(d.nodes):
            rank, leader = d.role(index)
            master: pulumi.Input[str] = leader_ips[leader] if rank else ""
            startup_script = pulumi.Output.all(self.bucket.name, master, names).apply(
                _boot_script(d, rank, index, project, self.secrets)
            )
            self.instances.append(
                self._instance(
                    resource_name(base, f"node{index}") if d.nodes > 1 else base,
                    d,
                    zone=zone,
                    subnetwork=subnetwork,
                    network_ip=leader_ips.get(index),
                    startup_script=startup_script,
                    service_account_email=self.service_account.email,
                    placement=self.placement,
                    schedule=vm_scheduling,
                    tag=tag,
                    labels=labels,
                    opts=vm_opts,
                )
            )

        vm_names = [vm.name for vm in self.instances]
        self.outputs = {
            "instance_id": vm_names[0],
            "instance_ids": pulumi.Output.all(*vm_names),
            "instance_type": d.instance_type,
            "cloud": "gcp",
            "region": d.region,
            "zone": zone,
            "market": d.market,
            "nodes": d.nodes,
            "hourly_usd": round(d.hourly_usd, 4),
            "estimated_total_usd": round(d.estimated_total_usd, 2),
            # From the VM's state: the deadline set when it was created (see deadline_ignore_changes).
            "expires_at": self.instances[0].labels.apply(lambda labels: label_expiry(labels, d)),
            "bucket": self.bucket.name,
            "status": self.bucket.name.apply(lambda b: f"gpufit status --bucket gs://{b}"),
            "connect": pulumi.Output.all(vm_names[0], zone).apply(
                lambda v: (
                    f"gcloud compute ssh {v[0]} --zone {v[1]} --tunnel-through-iap"
                    f"  # IAP connects from {IAP_SSH_RANGE}: list it in access.ssh_cidrs"
                )
            ),
        }
        self.register_outputs(self.outputs)

    @staticmethod
    def _zone(d: Deployment, invoke: pulumi.InvokeOutputOptions) -> pulumi.Input[str]:
        """The plan's zone (a zone-specific offer: its price holds there only), else the first
        zone (by name) that is UP among the zones the offer is known in, or in the region."""
        if d.zone:
            return d.zone
        zones = gcp.compute.get_zones_output(region=d.region, status="UP", opts=invoke)
        return zones.names.apply(lambda names: first_up_zone(d.region, names, d.zones))

    @staticmethod
    def _instance(
        resource_name: str,
        d: Deployment,
        *,
        zone: pulumi.Input[str],
        subnetwork: pulumi.Input[str],
        network_ip: pulumi.Input[str] | None,
        startup_script: pulumi.Input[str],
        service_account_email: pulumi.Input[str],
        placement: gcp.compute.ResourcePolicy | None,
        schedule: gcp.compute.InstanceSchedulingArgs,
        tag: str,
        labels: dict[str, str],
        opts: pulumi.ResourceOptions,
    ) -> gcp.compute.Instance:
        accelerators = (
            [gcp.compute.InstanceGuestAcceleratorArgs(type=d.attached_accelerator, count=d.gpu_count)]
            if d.attached_accelerator
            else None
        )
        return gcp.compute.Instance(
            resource_name,
            machine_type=d.machine_type,
            zone=zone,
            description=f"gpufit {d.workload} ({d.stack}), deleted at {iso_utc(d.expires_at)}",
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                auto_delete=True,
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=d.image or DLVM_IMAGE,
                    size=d.disk_gb,
                    type=boot_disk_type(d.machine_type),
                    labels=labels,
                ),
            ),
            guest_accelerators=accelerators,
            network_interfaces=[
                gcp.compute.InstanceNetworkInterfaceArgs(
                    subnetwork=subnetwork,
                    network_ip=network_ip,
                    nic_type=nic_type(d),
                    # An ephemeral public IP for egress (packages, models, the bucket); no
                    # firewall rule lets anything in through it unless access.ssh_cidrs says so.
                    access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs()],
                )
            ],
            scheduling=schedule,
            service_account=gcp.compute.InstanceServiceAccountArgs(
                email=service_account_email, scopes=[CLOUD_PLATFORM_SCOPE]
            ),
            shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_vtpm=True, enable_integrity_monitoring=True
            ),
            metadata={
                "enable-oslogin": "TRUE",
                "block-project-ssh-keys": "TRUE",
                "startup-script": startup_script,
                "shutdown-script": shutdown_script(),
            },
            resource_policies=placement.self_link if placement else None,
            labels=labels,
            tags=[tag],
            allow_stopping_for_update=True,
            opts=opts,
        )


class GcpProvider:
    """``GpuProvider`` for Google Cloud, created with the given explicit provider (project,
    credentials) or the ambient default one: a ``GcpGpuFleet`` (regional MIG) for single-node
    replicas, placed before anything is created; ``GcpGpuInstance`` VMs for replicas that span
    nodes. ``project`` names the project in the group's IAM condition and resize call (default:
    the provider's own)."""

    cloud: str = "gcp"

    def __init__(self, provider: pulumi.ProviderResource | None = None, project: str | None = None) -> None:
        self._provider = provider
        self._project = project

    def provision(self, deployment: Deployment, secrets: SecretInputs | None = None) -> dict[str, Any]:
        if deployment.cloud != "gcp":
            raise ValueError(
                f"{deployment.name}: a {deployment.cloud} deployment cannot be provisioned on GCP"
            )
        problems = provision_problems(deployment, secrets)
        if problems:
            raise pulumi.RunError("\n".join(problems))
        opts = pulumi.ResourceOptions(provider=self._provider)
        if deployment.grouped:
            placement = fleet_placement(
                deployment, self._project, pulumi.InvokeOptions(provider=self._provider)
            )
            return GcpGpuFleet(deployment.name, deployment, placement, opts, secrets).outputs
        project = self._project or ""
        return GcpGpuInstance(deployment.name, deployment, opts, secrets, project).outputs
