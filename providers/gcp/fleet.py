"""The GCP fleet: a ``gpufit:gcp:GpuFleet`` component that runs a deployment's single-node
replicas in a regional managed instance group (MIG).

The MIG, not gpufit, keeps the workload running: a regional instance template (Shielded VM,
OS Login, no ingress unless the spec lists SSH CIDRs, the boot script as ``startup-script``,
spot by fault tolerance) and a MIG spread over the region's zones that offer the fleet's
machine types (``gcp.compute.get_zones`` + ``get_machine_types`` per zone, asked before any
resource is created), kept to the plan's zones: the one zone of a zone-specific plan (its
price holds there only), else the zones the region-level offer is known in (all of them when
not known). It recreates a preempted or failed VM by itself, and with instance
flexibility it falls back to the plan's same-shape alternatives in cost order (``rank``: lower
is preferred) when the choice has no capacity.

A MIG's target size counts VMs and its flexibility has no weights (Compute discovery document
``compute.v1`` rev. 20261106: an instance selection takes ``machineTypes``, ``rank``,
``minCpuPlatform``, ``disks``; ``targetSize`` is "the target number of running instances"):
one group, one template, the plan's VMs whatever type each gets. A batch VM may be of any size
and runs the replicas its GPUs hold (``selector.fallbacks.vm_fleet_shape``); a served model's
or fine-tune's VM runs the choice's replicas, a bigger one with GPUs idle
(``selector.fallbacks.idle_gpu_shape``), and a member holding another count is left out.
A batch's other fallbacks, a single-node checkpointed job's with its GPU count and at least
its GPU memory (its launch unchanged, resumed from the bucket), and a stateless served model's
with at least its GPU memory (its launch unchanged, each group a backend of the one backend
service: ``providers.gcp.endpoint.load_balancer``), run in MIGs of their own at
size 0, between which a Cloud Workflows rebalancer moves the VMs a group cannot create
(``fallback_groups``, ``rebalance``).

Instance flexibility overrides only a VM's machine type, minimum CPU platform and disks
(https://docs.cloud.google.com/compute/docs/instance-groups/about-instance-flexibility): the
template's attached accelerators, boot-disk type and network interface stay. So a fallback
must attach the same GPUs (N1 + ``guestAccelerators``), or carry its GPUs in its machine type
like the choice (A2/A3/G2), and take the same boot disk and NIC; others are left out. The
pages that could be read do not say whether flexibility accepts GPU machine types (every
example there is general-purpose: c3/n2/c2-standard-8); Google's Cluster Toolkit does not refuse it for
types with the choice's GPU model and count, which the group takes by default
(``FleetMember.realised``, from ``selector.gcp_flexibility``); other sizes only when the spec
opts in (``placement.gcp_instance_flexibility``), none when it opts out. Even
opted in, a member of another GPU model than the choice (A100-80GB ``a2-ultragpu`` with H100
``a3-highgpu``) is left out: one group serves one GPU model.

The deadline has three layers. A Cloud Scheduler job resizes the MIG to 0 at ``expires_at``
through the Compute API, with an OAuth token of a service account that may update this MIG
only; the template's absolute ``termination_time`` deletes every VM at the same moment (a
relative ``max_run_duration`` would give a VM the MIG recreates late a full run of its own),
when the deadline is within Compute Engine's 120 days (``template_termination_time``; past
them the scheduler job is the cloud-side layer alone);
and each VM leaves the group before the deadline and when its job ends (``delete-instances``
decrements the target size), so a finished job is never recreated and the MIG reaches 0 when
the last replica finishes; a failing VM asks for its own recreation (``recreate-instances``,
bounded: ``machine.boot``), and every VM carries a ``shutdown-script`` for its final sync.
Cloud Scheduler runs cron schedules only (https://cloud.google.com/scheduler/docs/creating:
"intended for repeated jobs"): the job fires on the deadline's minute, day and month, so it
would fire again a year later, harmlessly (a resize of a group that is already 0, or gone with
its stack). The one-shot jobs of issue 26 (a flex request's cancel, a calendar start) would not
be harmless: their account's grant ends an hour after the deadline (``capacity.one_shot_grant``).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment, iso_utc
from machine import lifecycle
from machine.boot import gce_group_name
from providers.base import SecretInputs, deadline_ignore_changes
from providers.gcp import capacity, fallback_groups
from providers.gcp.common import (
    checkpoint_bucket,
    enabled_apis,
    firewalls,
    gce_name,
    label_expiry,
    network,
    network_tag,
    resize_to_zero_job,
    vm_identity,
)
from providers.gcp.endpoint import (
    health_check,
    load_balancer,
    readiness_check,
    readiness_firewall,
    server_firewall,
)
from providers.gcp.fleet_placement import GcpFleetPlacement
from providers.gcp.secrets import machine_secrets, uses_secret_manager
from providers.gcp.template import TemplateInputs, boot_script, instance_template

GROUP_PERMISSIONS = ("compute.instanceGroupManagers.get", "compute.instanceGroupManagers.update")
"""What ``regionInstanceGroupManagers.resize`` and ``deleteInstances`` need (Compute API
reference: "Authorization requires the following IAM permission ... update")."""


def target_shape(d: Deployment) -> str:
    """BALANCED for serving replicas (spread over zones, as even as capacity allows);
    ANY_SINGLE_ZONE for a job on more than one GPU (its VMs together in one zone, wherever
    capacity is); BALANCED for a one-GPU job."""
    if d.task != "serve" and d.gpu_count * d.nodes > 1:
        return "ANY_SINGLE_ZONE"
    return "BALANCED"


def first_vm(groups: list[str], region: str, fields: str) -> str:
    """A shell command printing ``fields`` of the first RUNNING VM of the first group that has
    one (a served or batch fleet's VMs may sit in a fallback group the rebalancer moved them to).
    A managed instance the group is still trying to create (a starved one) has a name but no
    ``instanceStatus`` (compute.v1 ``ManagedInstance.instanceStatus``: "empty when the instance
    does not exist"), so the listing keeps RUNNING ones; gcloud applies ``--filter`` before
    ``--limit`` (https://cloud.google.com/sdk/gcloud/reference/topic/filters). The loop stops
    at the first group with one. Group names are Compute names (``[a-z0-9-]``), safe unquoted."""

    def listing(group: str) -> str:
        return (
            f"gcloud compute instance-groups managed list-instances {group} --region {region} "
            f"--filter=instanceStatus=RUNNING --format='value({fields})' --limit 1"
        )

    if len(groups) == 1:
        return listing(groups[0])
    return (
        f"for g in {' '.join(groups)}; do v=$({listing('$g')}); "
        'if [ -n "$v" ]; then echo "$v"; break; fi; done'
    )


TERMINATION_TIME_LIMIT = timedelta(days=120)
"""Compute Engine: "The maximum time limit is 120 days" for a VM's run time, a termination
time included (https://cloud.google.com/compute/docs/instances/limit-vm-runtime)."""


def template_termination_time(d: Deployment) -> str | None:
    """The template's absolute ``termination_time``: the deadline, when it lies within Compute
    Engine's 120 days of now (the stack's creation time); None past that, when the group's
    cloud-side deadline is its Cloud Scheduler job alone (with the VMs' own stop and gpufit
    reap behind it), as the plan's log and the ``deadline_layers`` output say."""
    if d.expires_at - d.created_at <= TERMINATION_TIME_LIMIT:
        return iso_utc(d.expires_at)
    pulumi.log.warn(
        f"{d.name}: the deadline {iso_utc(d.expires_at)} is more than 120 days away, beyond a VM "
        "termination time's reach: the group's cloud-side deadline is its Cloud Scheduler job "
        "(resize to 0), backed by each VM's own stop and `gpufit reap`"
    )
    return None


def cron_at(d: Deployment) -> str:
    """The Cloud Scheduler cron for the deadline's minute (rounded up), in UTC."""
    fire = d.expires_at
    if fire.second or fire.microsecond:
        fire = fire.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return f"{fire.minute} {fire.hour} {fire.day} {fire.month} *"


def group_resource_name(project: str, region: str, group: str) -> str:
    """The MIG's resource name, as the Compute API path and IAM Conditions' ``resource.name``."""
    return f"projects/{project}/regions/{region}/instanceGroupManagers/{group}"


def group_condition(
    project: str, region: str, groups: list[str], title: str
) -> gcp.projects.IAMMemberConditionArgs:
    """An IAM condition holding on ``groups`` alone, by ``resource.name`` (``group_resource_name``;
    Compute Engine recognises resource names in conditions:
    https://cloud.google.com/iam/docs/conditions-resource-attributes)."""
    return gcp.projects.IAMMemberConditionArgs(
        title=title[:100],
        expression=" || ".join(
            f'resource.name == "{group_resource_name(project, region, g)}"' for g in groups
        ),
    )


def resize_uri(project: str, region: str, group: str) -> str:
    """``regionInstanceGroupManagers.resize`` to 0 (Compute API v1)."""
    path = group_resource_name(project, region, group)
    return f"https://compute.googleapis.com/compute/v1/{path}/resize?size=0"


def _digest(d: Deployment) -> str:
    return hashlib.sha256(f"{d.project}/{d.stack}/{d.workload}".encode()).hexdigest()[:8]


class GcpGpuFleet(pulumi.ComponentResource):
    """A regional MIG of single-node replicas with its template, network, firewall rules,
    service accounts, bucket and deadline, for one deployment."""

    outputs: dict[str, Any]

    def __init__(
        self,
        name: str,
        deployment: Deployment,
        placement: GcpFleetPlacement,
        opts: pulumi.ResourceOptions | None = None,
        secrets: SecretInputs | None = None,
    ) -> None:
        d = deployment
        super().__init__("gpufit:gcp:GpuFleet", name, None, opts)
        base = gce_name(name)
        group_name = gce_group_name(d)
        project, region = placement.project, d.region
        labels = d.labels()
        tag = network_tag(d)
        needed = ["compute", "iam", "storage", "cloudresourcemanager", "cloudscheduler"]
        if placement.groups:
            needed.append("workflows")
        if uses_secret_manager(d, secrets):
            needed.append("secretmanager")
        if d.expose == "load_balancer" and d.tls_domain is not None:
            needed.append("certificatemanager")
        apis = enabled_apis(base, needed, pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(
            parent=self, ignore_changes=deadline_ignore_changes(d), depends_on=apis
        )
        invoke = pulumi.InvokeOutputOptions(parent=self)

        network_link, subnetwork = network(base, d, child, invoke)
        self.firewalls = firewalls(base, d, tag, network_link, child)
        self.bucket = checkpoint_bucket(base, d, labels, child)
        self.service_account, bucket_access = vm_identity(base, d, self.bucket, child)
        # A spot endpoint's on-demand groups' VMs have an account of their own (finding: a spot VM
        # able to grow the on-demand group multiplies the hourly cost a compromise can run up).
        other = [g.name for g in placement.groups if fallback_groups.other_market(d, g.member)]
        self.other_account = (
            vm_identity(base, d, self.bucket, child, market="on-demand")[0] if other else None
        )
        readers = [a.member for a in (self.service_account, self.other_account) if a is not None]
        self.secrets = machine_secrets(base, d, readers, secrets, labels, child)
        self.health_check = None
        self.readiness_check = None
        if d.server is not None:
            # Autohealing asks the machine's readiness responder (healthy while the weights load
            # within the plan's bound); the load balancer asks the engine itself.
            self.readiness_check = readiness_check(base, d, child)
            self.firewalls.append(server_firewall(base, d, network_link, tag, child))
            self.firewalls.append(readiness_firewall(base, d, network_link, tag, child))
            if d.expose == "load_balancer":
                self.health_check = health_check(base, d, child)
        names = self.secrets.names()

        # Leaving and resizing the group: one custom role, granted on the fleet's MIGs alone (IAM
        # condition on their resource names) to the deadline's own account; to each VM account on
        # its own market's groups only (a VM leaves or recreates itself in its own group).
        role = gcp.projects.IAMCustomRole(
            f"{base}-group-role",
            project=project,
            role_id=f"gpufitGroup_{_digest(d)}",
            title=f"gpufit {d.workload} ({d.stack}): update its group"[:100],
            description="Resize the stack's managed instance group and delete its own VMs from it",
            permissions=list(GROUP_PERMISSIONS),
            opts=child,
        )
        all_groups = [group_name, *(g.name for g in placement.groups)]
        condition = group_condition(
            project,
            region,
            all_groups,
            f"only {group_name}" + (" and its fallback groups" if placement.groups else ""),
        )
        own = [g for g in all_groups if g not in other]
        self.deadline_account = gcp.serviceaccount.Account(
            f"{base}-deadline-sa",
            account_id=f"gf-deadline-{_digest(d)}",
            display_name=f"gpufit deadline {d.workload} ({d.stack})"[:100],
            description="gpufit deadline: may resize its stack's managed instance group only",
            opts=child,
        )
        vm_group, deadline_group = (
            gcp.projects.IAMMember(
                f"{base}-{who}-group",
                project=project,
                role=role.name,
                member=account.member,
                condition=scope,
                opts=child,
            )
            for who, account, scope in (
                (
                    "sa",
                    self.service_account,
                    condition
                    if not other
                    else group_condition(project, region, own, f"{d.market} groups only"),
                ),
                ("deadline", self.deadline_account, condition),
            )
        )
        if self.other_account is not None:
            gcp.projects.IAMMember(
                f"{base}-sa-on-demand-group",
                project=project,
                role=role.name,
                member=self.other_account.member,
                condition=group_condition(project, region, other, "on-demand groups only"),
                opts=child,
            )

        once = capacity.one_shot_grant(  # issue 26: the cancel and calendar start, bounded in time
            base,
            d,
            (project, role.name, group_resource_name(project, region, group_name), f"gf-once-{_digest(d)}"),
            child,
        )
        # A calendar VM is deleted at the reservation's end (capacity.scheduling): no termination time.
        termination = None if capacity.calendar(d) else template_termination_time(d)
        template_inputs = TemplateInputs(
            base=base,
            labels=labels,
            tag=tag,
            subnetwork=subnetwork,
            service_account_email=self.service_account.email,
            startup_script=boot_script(d, project, self.secrets, self.bucket.name, names),
            termination=termination,
        )
        self.template = instance_template(f"{base}-tmpl", d, template_inputs, child)
        self.overflow_template = (  # issue 26: the on-demand VMs beside a reservation
            instance_template(f"{base}-overflow", d, replace(template_inputs, overflow=True), child)
            if capacity.overflow_nodes(d)
            else None
        )
        flexibility = (
            gcp.compute.RegionInstanceGroupManagerInstanceFlexibilityPolicyArgs(
                instance_selections=[
                    gcp.compute.RegionInstanceGroupManagerInstanceFlexibilityPolicyInstanceSelectionArgs(
                        name=f"rank-{rank}", rank=rank, machine_types=[m.machine_type]
                    )
                    for rank, m in enumerate(placement.members)
                ]
            )
            if len(placement.members) > 1
            else None
        )
        zones = capacity.group_zones(d, list(placement.zones))
        # The VMs wait for their grants so the boot script can write and leave from its first minute.
        # Finished VMs lower the target size and the deadline sets it to 0: a later `pulumi up
        # --refresh` must not raise it back. The zones are looked up afresh on every `pulumi up`,
        # and a change of them would replace the group (deleting its running VMs): ignored,
        # unless the plan pins one zone, which then comes from the plan, not the lookup, and a
        # re-planned zone must move the group (its price is that zone's).
        ignored = [*deadline_ignore_changes(d), "targetSize"]
        if not d.pinned:
            ignored.append("distributionPolicyZones")
        update_policy = gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs(
            type="OPPORTUNISTIC",
            minimal_action="REPLACE",
            # BALANCED and ANY_SINGLE_ZONE place VMs where capacity is: no redistribution.
            instance_redistribution_type="NONE",
            max_surge_fixed=0,
            max_unavailable_fixed=len(zones),
        )
        named_ports = [
            gcp.compute.RegionInstanceGroupManagerNamedPortArgs(name=f"serve{i}", port=p)
            for i, p in enumerate(d.server.ports() if d.server else [])
        ]
        # A VM whose readiness responder stops answering (a hung machine, a server past its load
        # bound or failed) is recreated; the responder is up minutes after boot, so the initial
        # delay need not cover the weights' load (which may outlast the API's 3600 s).
        autohealing = (
            gcp.compute.RegionInstanceGroupManagerAutoHealingPoliciesArgs(
                health_check=self.readiness_check.id, initial_delay_sec=lifecycle.READINESS_BOOT_S
            )
            if self.readiness_check is not None
            else None
        )
        group_opts = pulumi.ResourceOptions(
            parent=self, depends_on=[bucket_access, vm_group, *apis], ignore_changes=ignored
        )
        self.group = gcp.compute.RegionInstanceGroupManager(
            f"{base}-mig",
            name=group_name,
            region=region,
            base_instance_name=base[:50],
            description=f"gpufit {d.workload} ({d.stack}): resized to 0 at {iso_utc(d.expires_at)}",
            versions=capacity.group_versions(
                d,
                self.template.self_link,
                self.overflow_template.self_link if self.overflow_template is not None else None,
            ),
            target_size=capacity.initial_size(d),
            distribution_policy_zones=zones,
            distribution_policy_target_shape=capacity.target_shape(d, target_shape(d)),
            instance_lifecycle_policy=capacity.lifecycle_policy(d),
            instance_flexibility_policy=flexibility,
            update_policy=update_policy,
            wait_for_instances=False,
            named_ports=named_ports,
            auto_healing_policies=autohealing,
            opts=group_opts,
        )
        self.flex_request = capacity.resize_request(base, d, self.group, child)  # issue 26

        self.deadline = resize_to_zero_job(
            f"{base}-deadline",
            region,
            group_name,
            iso_utc(d.expires_at),
            cron_at(d),
            resize_uri(project, region, group_name),
            self.deadline_account.email,
            pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[deadline_group, self.group])
            ),
        )

        once_email, once_opts = (
            (
                once[0],
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[once[1], self.group])),
            )
            if once is not None
            else (self.deadline_account.email, child)
        )
        self.flex_cancel = capacity.cancel_job(  # issue 26: a request still queued at the deadline
            base, d, (project, group_name, once_email), self.flex_request, once_opts
        )
        self.calendar = capacity.calendar_resources(  # issue 26: a calendar-mode reservation
            base, d, capacity.calendar_zone(d, zones), (project, group_name, once_email), once_opts
        )

        # issue 25: a batch's fallbacks in groups of their own, and the rebalancer between them
        fallback_outputs, fallback_migs = fallback_groups.create(
            base,
            d,
            placement.groups,
            fallback_groups.FleetParts(
                group_name,
                template_inputs,
                lambda group, dm: boot_script(dm, project, self.secrets, self.bucket.name, names, group),
                update_policy,
                project,
                role.name,
                condition,
                _digest(d),
                self.other_account.email if self.other_account is not None else None,
                named_ports,
                autohealing,
                target_shape(d),
            ),
            fallback_groups.Deadline(
                cron_at(d),
                lambda group: resize_uri(project, region, group),
                self.deadline_account.email,
                deadline_group,
            ),
            child,
        )

        self.load_balancer = None
        if d.expose == "load_balancer" and d.server is not None and d.server.replicas > 1:
            raise pulumi.RunError(
                f"serving.expose load_balancer on GCP: the plan runs {d.server.replicas} replicas per VM and "
                "the regional load balancer's backend reaches one named port; restrict "
                "placement.instance_types to VMs that hold one replica"
            )
        if d.expose == "load_balancer" and self.health_check is not None:
            self.load_balancer = load_balancer(
                base,
                d,
                network_link,
                [self.group.instance_group, *(mig.instance_group for mig in fallback_migs)],
                self.health_check,
                make_proxy_subnet=not d.subnet_id,
                labels=labels,
                child=child,
            )
        self.outputs = {
            "group": self.group.name,
            "instance_type": d.instance_type,
            "fallbacks": [m.instance_type for m in placement.members[1:]]
            + [g.member.instance_type for g in placement.groups],
            **fallback_outputs,
            "cloud": "gcp",
            "region": region,
            "zones": zones,
            "market": d.market,
            "nodes": d.nodes,
            "desired_capacity": d.nodes,
            "hourly_usd": round(d.hourly_usd, 4),
            "estimated_total_usd": round(d.estimated_total_usd, 2),
            # From the template's state: the deadline set when it was created.
            "expires_at": self.template.labels.apply(lambda found: label_expiry(found, d)),
            "bucket": self.bucket.name,
            "status": self.bucket.name.apply(lambda b: f"gpufit status --bucket gs://{b}"),
            "connect": f"gcloud compute ssh $({first_vm(all_groups, region, 'name')}) --tunnel-through-iap",
            **self._endpoint_outputs(d, all_groups),
            # Why the group has fewer VMs than asked (no capacity, quota, a machine type not sold
            # in a zone): its errors, and its status as Compute reports it.
            "activity": f"gcloud compute instance-groups managed list-errors {group_name} --region {region}",
            "group_status": self.group.statuses,
            "deadline_layers": "Cloud Scheduler resize to 0, in-VM stop, reap"
            if termination is None
            else "Cloud Scheduler resize to 0, VM termination time, in-VM stop, reap",
        }
        self.register_outputs(self.outputs)

    def _endpoint_outputs(self, d: Deployment, groups: list[str]) -> dict[str, Any]:
        """``endpoint``, ``api_key`` (secret) and, privately, ``port_forward`` (an IAP tunnel)."""
        if d.server is None or self.secrets.api_key_value is None:
            return {}
        port = d.server.base_port
        outputs: dict[str, Any] = {"api_key": self.secrets.api_key_value}
        lb = self.load_balancer
        if lb is not None:
            if d.tls_domain is not None:
                outputs["endpoint"] = f"https://{d.tls_domain}/v1"
                outputs["endpoint_ip"] = lb.address.address  # the domain's A record
            else:
                scheme = "https" if lb.https else "http"
                outputs["endpoint"] = lb.address.address.apply(lambda ip: f"{scheme}://{ip}/v1")
            if lb.dns_authorization is not None:  # add it to the zone: the certificate is issued then
                outputs["dns_authorization_record"] = lb.dns_authorization.dns_resource_records
            return outputs
        outputs["endpoint"] = f"http://127.0.0.1:{port}/v1"
        # compute.v1 ``ManagedInstance`` has no zone field (``zone.basename()`` printed nothing);
        # the zone is in its ``instance`` URL, as gcloud's own list-instances table reads it
        # (googlecloudsdk surface/compute/instance_groups/managed/list_instances.py, ZONE column).
        outputs["port_forward"] = (
            f"vm=$({first_vm(groups, d.region, 'name,instance.scope().segment(0)')}); "
            # gcloud's ``value()`` format separates fields by a TAB ("CSV with no heading and <TAB>
            # separator": https://cloud.google.com/sdk/gcloud/reference/topic/formats)
            f"gcloud compute start-iap-tunnel ${{vm%%[[:space:]]*}} {port} "
            f"--local-host-port=localhost:{port} --zone ${{vm##*[[:space:]]}}"
        )
        return outputs
