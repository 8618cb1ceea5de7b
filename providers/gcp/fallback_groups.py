"""A GCP batch, single-node checkpointed or stateless served fleet's fallbacks in groups of their
own, and the rebalancer that moves VMs to them (``providers.gcp.rebalance`` says why and how).
A served model's groups carry the choice's named ports and autohealing, and each is a backend
of the endpoint's one regional backend service (``providers.gcp.endpoint.load_balancer``). A
spot endpoint's on-demand groups (``selector.fallbacks.on_demand_refuge``) come last, each
template STANDARD (``member_deployment``: the member's market) and its boot script told so.

Each fallback the plan realises as a ``group`` (``selector.gcp_flexibility``) gets a regional
instance template of its machine type (the fleet's one boot script: a VM looks its replicas up
by its own machine type, ``machine.boot``), a regional MIG at target size 0 over the zones that
offer the type, and a Cloud Scheduler job that resizes it to 0 at the deadline, as the choice's
group has. One Cloud Workflows workflow, run by Cloud Scheduler every ``EVERY_MINUTES``
minutes, moves the VMs a group cannot create for want of capacity to the next group. Its
service account holds the fleet's custom role (get and update of a group) on these groups only
(an IAM condition on their resource names) and may pause its own schedule; the schedule starts
it as an account of its own that may only start executions. The VMs' service account may leave
a group the same way (``GROUP_PERMISSIONS``); the groups of the choice's market share one account,
whose condition names them; the groups of another market (a spot endpoint's on-demand groups)
have an account of their own whose condition names those alone, so a spot VM cannot grow an
on-demand group or point a spot group at a STANDARD template.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment, FleetMember, iso_utc
from providers.gcp.common import CLOUD_PLATFORM_SCOPE, resize_to_zero_job
from providers.gcp.rebalance import (
    DEADLINE_VARIABLE,
    EVERY_MINUTES,
    PLAN_VARIABLE,
    RebalancedGroup,
    plan_variable,
    workflow_location,
    workflow_source,
)
from providers.gcp.template import TemplateInputs, instance_template

EMPTY_EXECUTION = base64.b64encode(b"{}").decode()
"""An execution with no argument: the workflow reads its plan from its environment (Cloud
Scheduler's ``httpTarget.body`` is bytes, base64 in JSON: discovery document ``cloudscheduler.v1``)."""

TICK_PERMISSIONS = ("workflows.executions.create",)
"""What Cloud Scheduler's OAuth token needs to start the rebalancer ("Trigger a workflow
execution": https://cloud.google.com/workflows/docs/access-control;
https://cloud.google.com/scheduler/docs/tut-workflows). Workflows roles are granted on a project
at the lowest ("Lowest-level resources where you can grant this role: Project":
https://cloud.google.com/iam/docs/roles-permissions/workflows), so this one permission goes to an
account of its own, the tick's, which nothing but the Scheduler job uses: the workflow's own
account cannot start any workflow."""

PAUSE_PERMISSIONS = ("cloudscheduler.jobs.pause",)
"""What the workflow needs to pause its own tick at the deadline ("Authorization requires the
following IAM permission on the specified resource name: cloudscheduler.jobs.pause":
https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs/pause). Cloud
Scheduler is not among the services that recognise IAM conditions on a resource name
(https://cloud.google.com/iam/docs/conditions-resource-attributes), so it holds on the project:
pausing stops a schedule and runs nothing."""


@dataclass(frozen=True)
class OwnGroup:
    """A fallback with a MIG of its own: the member, its group's name and the zones offering it."""

    member: FleetMember
    name: str
    zones: tuple[str, ...]


def own_groups(d: Deployment, group: str, offered: dict[str, set[str]]) -> tuple[OwnGroup, ...]:
    """The fleet's ``group``-realised fallbacks some zone offers, in plan order, each named
    ``<group>-f<n>`` (a Compute name: 63 characters at most). None for a capacity plan (a
    reservation or flex-start request holds one type)."""
    if d.capacity is not None:
        return ()
    found: list[OwnGroup] = []
    # in the plan's ranking of its fallbacks: expected cost (total, wait value, failure to
    # launch) of running the job's replicas on each (``selector.fallbacks``)
    for member in d.members[1:]:
        if member.realised != "group":
            continue
        zones = tuple(sorted(z for z, types in offered.items() if member.machine_type in types))
        if zones:
            suffix = f"-f{len(found) + 1}"
            found.append(OwnGroup(member, f"{group[: 63 - len(suffix)].rstrip('-')}{suffix}", zones))
    return tuple(found)


def member_deployment(d: Deployment, member: FleetMember) -> Deployment:
    """The deployment as a VM of ``member`` sees it: its machine type, GPUs, price and market (a
    spot endpoint's on-demand group: STANDARD VMs, ``capacity.scheduling``)."""
    return replace(
        d,
        market=member.market or d.market,
        instance_type=member.instance_type,
        machine_type=member.machine_type,
        attached_accelerator=member.attached_accelerator,
        gpu=member.gpu or d.gpu,
        gpu_count=member.gpu_count,
        tensor_parallel=member.tensor_parallel,
        max_num_seqs=member.max_num_seqs,
        hourly_usd=member.hourly_usd,
    )


def other_market(d: Deployment, member: FleetMember) -> bool:
    """Whether ``member``'s group runs in another market than the choice's (a spot endpoint's
    on-demand group): its VMs then have a service account of their own."""
    return bool(member.market) and member.market != d.market


def rebalanced(d: Deployment, group: str, groups: Sequence[OwnGroup]) -> tuple[RebalancedGroup, ...]:
    """The choice's group, then the fallbacks' groups, each with the replicas a VM holds."""

    def one(name: str, m: FleetMember) -> RebalancedGroup:
        on_demand = m.market == "on-demand" and d.market == "spot"  # a spot fleet's on-demand group
        return RebalancedGroup(
            name, m.weighted_capacity, m.machine_type, m.attached_accelerator, m.gpu_count, on_demand
        )

    return (one(group, d.members[0]), *(one(g.name, g.member) for g in groups))


def fleet_units(d: Deployment) -> int:
    """The replicas the plan runs: the group's capacity in replicas, else one per VM."""
    return d.fleet_units or d.nodes * d.members[0].weighted_capacity


@dataclass(frozen=True)
class FleetParts:
    """What the fallback groups share with the choice's group: its name, template inputs and
    update policy, and the fleet's custom role (get and update of a group) with the IAM
    condition naming every group of the fleet; ``digest`` tells the stack's accounts apart."""

    group: str
    template: TemplateInputs
    # a group's boot script: its VMs leave (and recreate in) that group, in its market (GPUFIT_SPOT)
    script: Callable[[str, Deployment], Any]
    update_policy: gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs
    project: str
    role: Any
    condition: gcp.projects.IAMMemberConditionArgs
    digest: str
    # the VMs' account of the groups in another market than the choice's (``other_market``)
    other_account: Any
    # a served model's: the replicas' named ports (the backend service reaches ``serve0`` in every
    # group) and the readiness responder's autohealing, as the choice's group has them
    named_ports: Sequence[gcp.compute.RegionInstanceGroupManagerNamedPortArgs] = ()
    autohealing: gcp.compute.RegionInstanceGroupManagerAutoHealingPoliciesArgs | None = None
    target_shape: str = "BALANCED"  # the choice's group's (``fleet.target_shape``)


@dataclass(frozen=True)
class Deadline:
    """The choice's deadline, for the fallback groups: the cron, the resize-to-0 URI of a
    group, the deadline's service account and its grant (to wait for)."""

    cron: str
    uri: Callable[[str], str]
    account_email: Any
    grant: Any


def create(
    base: str,
    d: Deployment,
    groups: Sequence[OwnGroup],
    fleet: FleetParts,
    deadline: Deadline,
    opts: pulumi.ResourceOptions,
) -> tuple[dict[str, Any], list[gcp.compute.RegionInstanceGroupManager]]:
    """The fallback groups, each with its deadline job as the choice's group has it, and the
    rebalancer between the groups. Returns the stack outputs that name them, and the groups (a
    served model's load balancer takes each as a backend)."""
    if not groups:
        return {}, []
    migs = []
    for n, own in enumerate(groups, start=1):
        dv = member_deployment(d, own.member)
        # the choice's launch (its machine type's replicas, TP), in this group's market
        script = fleet.script(own.name, replace(d, market=dv.market))
        inputs = replace(fleet.template, startup_script=script)
        if other_market(d, own.member):
            inputs = replace(inputs, service_account_email=fleet.other_account)
        template = instance_template(f"{base}-f{n}-tmpl", dv, inputs, opts)
        mig = gcp.compute.RegionInstanceGroupManager(
            f"{base}-f{n}-mig",
            name=own.name,
            region=d.region,
            base_instance_name=f"{base[:46]}-f{n}",
            description=(
                f"gpufit {d.workload} ({d.stack}): fallback {own.member.instance_type}, sized by its "
                f"rebalancer, resized to 0 at {iso_utc(d.expires_at)}"
            ),
            versions=[
                gcp.compute.RegionInstanceGroupManagerVersionArgs(
                    name="primary", instance_template=template.self_link
                )
            ],
            target_size=0,
            distribution_policy_zones=list(own.zones),
            distribution_policy_target_shape=fleet.target_shape,
            update_policy=replace_surge(fleet.update_policy, len(own.zones)),
            wait_for_instances=False,
            named_ports=list(fleet.named_ports) or None,
            auto_healing_policies=fleet.autohealing,
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(ignore_changes=["targetSize", "distributionPolicyZones"])
            ),
        )
        resize_to_zero_job(
            f"{base}-f{n}-deadline",
            d.region,
            own.name,
            iso_utc(d.expires_at),
            deadline.cron,
            deadline.uri(own.name),
            deadline.account_email,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[deadline.grant, mig])),
        )
        migs.append(mig)
    order = rebalanced(d, fleet.group, groups)
    account, tick_account = (
        gcp.serviceaccount.Account(
            f"{base}-{what}-sa",
            account_id=f"gf-{short}-{fleet.digest}",
            display_name=f"gpufit {what} {d.workload} ({d.stack})"[:100],
            description=description,
            opts=opts,
        )
        for what, short, description in (
            (
                "rebalance",
                "rebal",
                "gpufit rebalancer: gets and resizes its stack's groups, pauses its schedule",
            ),
            ("rebalance-tick", "tick", "gpufit rebalancer's schedule: may start workflow executions only"),
        )
    )
    granted = gcp.projects.IAMMember(
        f"{base}-rebalance-group",
        project=fleet.project,
        role=fleet.role,
        member=account.member,
        condition=fleet.condition,
        opts=opts,
    )
    grants = [granted]
    for what, permissions, member in (
        ("Pause", PAUSE_PERMISSIONS, account.member),
        ("Tick", TICK_PERMISSIONS, tick_account.member),
    ):
        role = gcp.projects.IAMCustomRole(
            f"{base}-rebalance-{what.lower()}-role",
            project=fleet.project,
            role_id=f"gpufitRebal{what}_{fleet.digest}",
            title=f"gpufit {d.workload} ({d.stack}): rebalancer {what.lower()}"[:100],
            description=f"{', '.join(permissions)} only",
            permissions=list(permissions),
            opts=opts,
        )
        grants.append(
            gcp.projects.IAMMember(
                f"{base}-rebalance-{what.lower()}",
                project=fleet.project,
                role=role.name,
                member=member,
                opts=opts,
            )
        )
    workflow_name = f"gpufit-rebalance-{fleet.digest}"
    tick_name = f"{workflow_name}-tick"
    location = workflow_location(d.region)
    tick_job = f"projects/{fleet.project}/locations/{d.region}/jobs/{tick_name}"
    workflow = gcp.workflows.Workflow(
        f"{base}-rebalance",
        name=workflow_name,
        region=location,
        description=f"gpufit: moves VMs short of capacity between {d.workload}'s groups"[:100],
        service_account=account.email,
        source_contents=workflow_source(),
        user_env_vars={
            PLAN_VARIABLE: plan_variable(d.region, order, fleet_units(d), tick_job),
            DEADLINE_VARIABLE: str(int(d.expires_at.timestamp())),
        },
        call_log_level="LOG_ERRORS_ONLY",
        deletion_protection=False,
        # The deadline was set when the stack was created (as the labels are); a later `up` keeps
        # it but updates the groups and replicas (Pulumi property paths:
        # https://www.pulumi.com/docs/iac/concepts/options/ignorechanges/).
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                depends_on=migs,
                ignore_changes=workflow_ignored(d),
            ),
        ),
    )
    gcp.cloudscheduler.Job(
        f"{base}-rebalance-tick",
        name=tick_name,
        region=d.region,
        description=(
            f"gpufit: run {d.workload}'s rebalancer every {EVERY_MINUTES} minutes "
            "(it pauses this at the deadline)"
        ),
        schedule=f"*/{EVERY_MINUTES} * * * *",
        time_zone="Etc/UTC",
        attempt_deadline="180s",
        http_target=gcp.cloudscheduler.JobHttpTargetArgs(
            http_method="POST",
            uri=(
                f"https://workflowexecutions.googleapis.com/v1/projects/{fleet.project}/locations/{location}"
                f"/workflows/{workflow_name}/executions"
            ),
            body=EMPTY_EXECUTION,
            headers={"Content-Type": "application/json"},
            oauth_token=gcp.cloudscheduler.JobHttpTargetOauthTokenArgs(
                service_account_email=tick_account.email, scope=CLOUD_PLATFORM_SCOPE
            ),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[*grants, workflow])),
    )
    return {
        "fallback_groups": [g.name for g in groups],
        "rebalancer": workflow.name,
        "rebalancer_account": account.member,
    }, migs


def workflow_ignored(d: Deployment) -> list[str]:
    """What a later ``pulumi up`` leaves as it is on the workflow: its deadline only (set when the
    stack was created, unless pinned), never the plan (groups, weights, replicas), which must
    follow the stack's groups (a Pulumi property path: ``userEnvVars["GPUFIT_DEADLINE"]``)."""
    return [] if d.deadline_pinned else [f'userEnvVars["{DEADLINE_VARIABLE}"]']


def replace_surge(
    policy: gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs, zones: int
) -> gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs:
    """The choice's update policy with ``max_unavailable_fixed`` at this group's zone count (a
    regional MIG's fixed values are 0 or at least its number of zones)."""
    return gcp.compute.RegionInstanceGroupManagerUpdatePolicyArgs(
        type=policy.type,
        minimal_action=policy.minimal_action,
        instance_redistribution_type=policy.instance_redistribution_type,
        max_surge_fixed=policy.max_surge_fixed,
        max_unavailable_fixed=zones,
    )
