"""A deployment's capacity option on GCP (issue 26), kept apart from the fleet's own code:

- flex-start: the instance template's ``provisioning_model: FLEX_START`` and a MIG resize
  request (``gcp.compute.RegionResizeRequest``, "the Managed Instance Group implementation of
  Dynamic Workload Scheduler Flex Start" in pulumi-gcp 10.2.0) for the fleet's VMs, run until
  the deadline: "When resources are available, the MIG creates VMs all at once"
  (https://docs.cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig). The
  template follows pulumi-gcp's example for resize requests: no automatic restart, TERMINATE
  on host maintenance, DELETE at the end, a max run duration, no reservation.
- a held reservation: the template's ``reservation_affinity``, SPECIFIC_RESERVATION with the key
  ``compute.googleapis.com/reservation-name`` and the reservation's name, or ANY_RESERVATION
  (https://cloud.google.com/compute/docs/reference/rest/v1/ReservationAffinity).
- overflow beyond the reservation (``capacity.overflow``, a plan of more VMs than it holds): one
  regional MIG with two versions (``group_versions``), a canary split in Google's terms
  (https://cloud.google.com/compute/docs/instance-groups/rolling-out-updates-to-managed-instance-groups#starting_a_canary_update).
  The reserved version's ``targetSize.fixed`` is the reservation's count, its template has the
  reservation's affinity; the other version leaves ``targetSize`` unset and takes "all remaining
  instances" from a template with ``NO_RESERVATION`` ("Do not consume from any allocated
  capacity"), run on-demand as planned (compute.v1 discovery document rev. 20261106:
  ``InstanceGroupManager.versions``: "Exactly one version must leave the targetSize field unset";
  ``InstanceGroupManagerVersion.targetSize``: "If expressed as a fixed number, the minimum of
  either targetSize.fixed or instanceGroupManager.targetSize is used"). Without the split a VM
  beyond a SPECIFIC_RESERVATION has nothing to consume and is not created (v1 has no
  SPECIFIC_THEN_NO_RESERVATION; that fallback is v1beta's only,
  https://cloud.google.com/python/docs/reference/google-cloud-compute-v1beta/latest/google.cloud.compute_v1beta.types.ReservationAffinity.ConsumeReservationType).

The flex-start group follows the configuration pulumi-gcp 10.2.0 documents for a resize request
(its RegionResizeRequest example, ``pulumi_gcp/compute/region_resize_request.py``; Google's list
of the MIG's limitations could not be read here): ``distribution_policy_target_shape
ANY_SINGLE_ZONE`` (all the VMs in one zone: "the group creates all VM instances within a single
zone", https://cloud.google.com/compute/docs/instance-groups/regional-mig-distribution-shape),
update policy ``instance_redistribution_type NONE``, and ``instance_lifecycle_policy
.default_action_on_failure DO_NOTHING`` ("MIG does not repair a failed VM", where the default
REPAIR "automatically repairs a failed VM by recreating it", compute.v1
``InstanceGroupManagerInstanceLifecyclePolicy``): a recreated VM would come outside the
all-at-once request. At the deadline a request still queued is cancelled (``cancel_job``,
``regionInstanceGroupManagerResizeRequests.cancel``, "only possible for requests that are in
accepted state", compute.v1), a minute before the group is resized to 0, so no VMs arrive after
it. The method is compute.v1's (the discovery document rev. 20261106 has it, with
``cloud-platform`` among its scopes; its v1 reference page is
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagerResizeRequests/cancel).
Discovery documents carry no permissions and no stored copy of the v1 page could be read here,
so the permission is quoted from the beta page of the same method
(https://cloud.google.com/compute/docs/reference/rest/beta/regionInstanceGroupManagerResizeRequests/cancel:
"Authorization requires the following IAM permission on the specified resource
instanceGroupManager"), ``compute.instanceGroupManagers.update``: the group role's own permission.

One-shot jobs (the cancel, the calendar start) must not act again a year later: Cloud Scheduler
has only repeating schedules (a v1 ``Job``'s ``schedule`` is "Crontab" or an
"English-like schedule", no end time or run count among its fields, cloudscheduler.v1 discovery
document rev. 20261106; https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules),
so a job on the day's minute and month fires again on the same date every year. They run as
their own account (``one_shot_grant``) whose grant of the group role is bounded in time as well
as to this group: an IAM condition ``request.time < timestamp(...)`` an hour after the deadline
("Date/time attributes are recognized by all Google Cloud services",
https://cloud.google.com/iam/docs/configuring-temporary-access). A year later the call is
refused (403): the group is not resized and nothing is cancelled. The deadline job's own resize
to 0 keeps its perpetual grant: repeated, it resizes an empty group to 0.

A calendar-mode future reservation (``capacity.calendar``, ``selector.calendar_mode``):
``gcp.compute.FutureReservation`` (pulumi-gcp 10.2.0) with ``reservation_mode CALENDAR``
(compute.v1: "delivered at specified start time and terminated at specified end time along with
terminating the VMs running on it"), submitted (``planning_status SUBMITTED``), its auto-created
reservation deleted at the end ("To create a request in calendar mode, you must enable the
auto-delete option",
https://cloud.google.com/compute/docs/instances/future-reservations-calendar-mode-overview),
named so that only VMs that target it by name consume it (``specific_reservation_required``),
in one zone of the plan's region, with the group kept to that zone. Its VMs are
``RESERVATION_BOUND`` ("Bound to the lifecycle of the reservation in which it is provisioned",
compute.v1 ``Scheduling.provisioningModel``) and target the reservation by name; the group
waits at 0 and a Cloud Scheduler job resizes it to the plan's VMs at the reservation's start
(the one-shot account, the same permission until an hour after the deadline). The request is
committed money once approved: ``__main__`` refuses it without ``gpufit:createCalendarReservation: true``
(``deployment.capacity.calendar_refusal``), and a destroy leaves it to run out
(``retain_on_delete``).
"""

from __future__ import annotations

from datetime import timedelta

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment, iso_utc
from deployment.capacity import RESERVATION_NAME_KEY, flex_run_seconds
from providers.gcp.common import CLOUD_PLATFORM_SCOPE


def flex_start(d: Deployment) -> bool:
    return d.capacity is not None and d.capacity.kind == "flex-start"


def calendar(d: Deployment) -> bool:
    return d.capacity is not None and d.capacity.kind == "calendar-reservation"


def calendar_reservation_name(base: str) -> str:
    """The reservation the calendar request creates (RFC 1035, at most 63 characters)."""
    return f"{base[:50]}-cal"


def scheduling(d: Deployment, termination: str | None) -> gcp.compute.RegionInstanceTemplateSchedulingArgs:
    """The template's scheduling: flex-start's, else the fleet's spot or standard one."""
    if flex_start(d):
        return gcp.compute.RegionInstanceTemplateSchedulingArgs(
            provisioning_model="FLEX_START",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="DELETE",
            max_run_duration=gcp.compute.RegionInstanceTemplateSchedulingMaxRunDurationArgs(
                seconds=_run_seconds(d)
            ),
        )
    if calendar(d):
        # "based on the termination action that you specify when creating VMs, Compute Engine
        # stops or deletes the VM at the end of the reservation period"
        # (https://cloud.google.com/compute/docs/instances/about-reservation-bound-vms): DELETE,
        # and no termination time, which no Google page confirms a RESERVATION_BOUND VM accepts
        # (a refusal would surface only when the paid window starts). The template is labelled a
        # scheduler-layer one (``template.instance_template``); the group's deadline job stays.
        return gcp.compute.RegionInstanceTemplateSchedulingArgs(
            provisioning_model="RESERVATION_BOUND",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            instance_termination_action="DELETE",
        )
    # A STANDARD VM takes a termination action only with a run-time limit: the action is "for
    # `SPOT` VM" (pulumi-gcp 10.2 ``instance_termination_action``) or "performed at the
    # termination time" (compute.v1 ``Scheduling.terminationTime``); contract rule gcp.standard
    # (our inferred rule: no Google page says Compute refuses the action on an unlimited STANDARD VM).
    return gcp.compute.RegionInstanceTemplateSchedulingArgs(
        provisioning_model="SPOT" if d.spot else "STANDARD",
        preemptible=d.spot,
        automatic_restart=not d.spot,
        on_host_maintenance="TERMINATE",
        instance_termination_action="DELETE" if d.spot or termination else None,
        termination_time=termination,
    )


def reservation_affinity(
    d: Deployment, overflow: bool = False, base: str = ""
) -> gcp.compute.RegionInstanceTemplateReservationAffinityArgs | None:
    """Which reservation the VMs consume: the one named (or any), the calendar request's, none
    for flex-start and for the overflow version's VMs (on-demand beside the reservation)."""
    c = d.capacity
    if c is None:
        return None
    if c.kind == "calendar-reservation":
        return gcp.compute.RegionInstanceTemplateReservationAffinityArgs(
            type="SPECIFIC_RESERVATION",
            specific_reservation=gcp.compute.RegionInstanceTemplateReservationAffinitySpecificReservationArgs(
                key=RESERVATION_NAME_KEY, values=[calendar_reservation_name(base)]
            ),
        )
    if c.kind == "flex-start" or overflow:
        return gcp.compute.RegionInstanceTemplateReservationAffinityArgs(type="NO_RESERVATION")
    if c.kind != "reservation":
        return None
    if c.affinity == "any":
        return gcp.compute.RegionInstanceTemplateReservationAffinityArgs(type="ANY_RESERVATION")
    return gcp.compute.RegionInstanceTemplateReservationAffinityArgs(
        type="SPECIFIC_RESERVATION",
        specific_reservation=gcp.compute.RegionInstanceTemplateReservationAffinitySpecificReservationArgs(
            key=RESERVATION_NAME_KEY, values=[c.reservation_id or ""]
        ),
    )


def overflow_nodes(d: Deployment) -> int:
    """The VMs beyond the reservation the plan runs beside it (0 without a reservation)."""
    c = d.capacity
    if c is None or c.kind != "reservation" or c.reserved <= 0:
        return 0
    return max(d.nodes - c.reserved, 0)


def group_versions(
    d: Deployment, template: pulumi.Input[str], overflow_template: pulumi.Input[str] | None
) -> list[gcp.compute.RegionInstanceGroupManagerVersionArgs]:
    """The MIG's versions: one template for every VM, or with overflow the reserved version
    (``targetSize.fixed`` = the reservation's count) and the on-demand rest (unset: "applied to
    all remaining instances", compute.v1 ``InstanceGroupManager.versions``)."""
    if overflow_template is None or overflow_nodes(d) == 0:
        return [gcp.compute.RegionInstanceGroupManagerVersionArgs(name="primary", instance_template=template)]
    assert d.capacity is not None
    return [
        gcp.compute.RegionInstanceGroupManagerVersionArgs(
            name="reserved",
            instance_template=template,
            target_size=gcp.compute.RegionInstanceGroupManagerVersionTargetSizeArgs(
                fixed=d.capacity.reserved
            ),
        ),
        gcp.compute.RegionInstanceGroupManagerVersionArgs(
            name="overflow", instance_template=overflow_template
        ),
    ]


FLEX_TARGET_SHAPE = "ANY_SINGLE_ZONE"
CANCEL_LEAD = timedelta(minutes=1)
"""The cancel fires this much before the group's resize to 0 (a gpufit choice): a request that
succeeded in between would otherwise add VMs after the resize."""
CANCEL_RETRIES = 2  # a request no longer ACCEPTED refuses the cancel: nothing to retry for long
ONE_SHOT_GRACE = timedelta(hours=1)
"""How long after the deadline the one-shot account may still update the group: the cancel
fires a minute before it, the calendar start at the window's start, and their retries end within
minutes (a gpufit choice)."""


def one_shot_until(d: Deployment) -> str:
    """When the one-shot account's grant ends (RFC 3339, as CEL's ``timestamp()`` reads it)."""
    return iso_utc(d.expires_at + ONE_SHOT_GRACE)


def one_shot_grant(
    base: str,
    d: Deployment,
    scope: tuple[str, pulumi.Input[str], str, str],
    opts: pulumi.ResourceOptions,
) -> tuple[pulumi.Output[str], gcp.projects.IAMMember] | None:
    """The account the one-shot jobs run as and its grant of the group role on this group until
    ``one_shot_until``; ``scope``: (project, the group role's name, the group's resource name,
    the account id). None without a one-shot job (neither flex-start nor calendar mode)."""
    if not (flex_start(d) or calendar(d)):
        return None
    project, role, group_resource, account_id = scope
    account = gcp.serviceaccount.Account(
        f"{base}-once-sa",
        account_id=account_id,
        display_name=f"gpufit one-shot {d.workload} ({d.stack})"[:100],
        description=f"gpufit: may resize its stack's group until {one_shot_until(d)} only"[:256],
        opts=opts,
    )
    member = gcp.projects.IAMMember(
        f"{base}-once-group",
        project=project,
        role=role,
        member=account.member,
        condition=gcp.projects.IAMMemberConditionArgs(
            title=f"until {one_shot_until(d)}"[:100],
            expression=(
                f'resource.name == "{group_resource}" && request.time < timestamp("{one_shot_until(d)}")'
            ),
        ),
        opts=opts,
    )
    return account.email, member


def target_shape(d: Deployment, fleet_shape: str) -> str:
    """A flex-start group's VMs in one zone, whatever the fleet would take otherwise."""
    return FLEX_TARGET_SHAPE if flex_start(d) else fleet_shape


def lifecycle_policy(
    d: Deployment,
) -> gcp.compute.RegionInstanceGroupManagerInstanceLifecyclePolicyArgs | None:
    """A flex-start group does not recreate a failed VM (DO_NOTHING); others keep the default."""
    if not flex_start(d):
        return None
    return gcp.compute.RegionInstanceGroupManagerInstanceLifecyclePolicyArgs(
        default_action_on_failure="DO_NOTHING"
    )


def flex_request_name(base: str) -> str:
    return f"{base[:52]}-flex"


def cancel_uri(project: str, region: str, group: str, request: str) -> str:
    """``regionInstanceGroupManagerResizeRequests.cancel`` (compute.v1: POST
    ``projects/{project}/regions/{region}/instanceGroupManagers/{instanceGroupManager}/resizeRequests/{resizeRequest}/cancel``)."""
    return (
        f"https://compute.googleapis.com/compute/v1/projects/{project}/regions/{region}"
        f"/instanceGroupManagers/{group}/resizeRequests/{request}/cancel"
    )


def cancel_cron(d: Deployment) -> str:
    """The cancel's minute: ``CANCEL_LEAD`` before the deadline, floored to the minute (UTC)."""
    fire = (d.expires_at - CANCEL_LEAD).replace(second=0, microsecond=0)
    return f"{fire.minute} {fire.hour} {fire.day} {fire.month} *"


def cancel_job(
    base: str,
    d: Deployment,
    caller: tuple[str, str, pulumi.Input[str]],
    request: gcp.compute.RegionResizeRequest | None,
    opts: pulumi.ResourceOptions,
) -> gcp.cloudscheduler.Job | None:
    """The Cloud Scheduler job that cancels a flex-start request still queued at the deadline;
    ``caller``: (project, the group's name, the one-shot account's email)."""
    if request is None:
        return None
    project, group_name, account_email = caller
    name = flex_request_name(base)
    return gcp.cloudscheduler.Job(
        f"{base}-flex-cancel",
        region=d.region,
        description=f"gpufit: cancel {name} if still queued at the deadline {iso_utc(d.expires_at)}",
        schedule=cancel_cron(d),
        time_zone="Etc/UTC",
        attempt_deadline="320s",
        retry_config=gcp.cloudscheduler.JobRetryConfigArgs(
            retry_count=CANCEL_RETRIES, min_backoff_duration="10s", max_backoff_duration="20s"
        ),
        http_target=gcp.cloudscheduler.JobHttpTargetArgs(
            http_method="POST",
            uri=cancel_uri(project, d.region, group_name, name),
            oauth_token=gcp.cloudscheduler.JobHttpTargetOauthTokenArgs(
                service_account_email=account_email, scope=CLOUD_PLATFORM_SCOPE
            ),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[request])),
    )


def initial_size(d: Deployment) -> int:
    """A flex-start group starts empty (its resize request brings the VMs, all at once), and so
    does a calendar one (resized at the reservation's start)."""
    return 0 if flex_start(d) or calendar(d) else d.nodes


def group_zones(d: Deployment, zones: list[str]) -> list[str]:
    """A reservation is zonal ("instances with the same properties are available in a specific
    zone", https://cloud.google.com/compute/docs/instances/reservations-overview): a VM of a
    regional group placed in another zone consumes nothing and, with SPECIFIC_RESERVATION, is not
    created. A held reservation's group is kept to its zone (the plan's pinned zone, the
    reservation's), with its overflow VMs, whatever the lookup returned (an empty list would
    mean every zone); a calendar one's to the zone its request is made in (the first)."""
    c = d.capacity
    if c is not None and c.kind == "reservation" and d.zone is not None:
        return [d.zone]
    return [calendar_zone(d, zones)] if calendar(d) else zones


def calendar_zone(d: Deployment, zones: list[str]) -> str:
    """The zone a calendar request is made in: the plan's pinned zone, else the first of the
    region's UP zones that offer the machine type (``zones``, from compute.machineTypes in
    ``fleet.fleet_placement``; Google reserves GPU VMs "only in specific zones" and publishes no
    per-zone list a plan could read). No such zone: a one-line refusal, before anything is created."""
    if d.zone is not None:
        return d.zone
    if not zones:
        raise pulumi.RunError(
            f"calendar reservation: no UP zone of {d.region} offers {d.machine_type}; re-plan for another "
            "region (placement.regions)"
        )
    return zones[0]


def calendar_resources(
    base: str,
    d: Deployment,
    zone: str,
    caller: tuple[str, str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
) -> tuple[gcp.compute.FutureReservation, gcp.cloudscheduler.Job] | None:
    """The calendar-mode request and the job that resizes the group to the plan's VMs at its
    start; ``caller``: (project, the group's name, the one-shot account's email)."""
    c = d.capacity
    if c is None or c.kind != "calendar-reservation":
        return None
    assert c.block_start is not None and c.block_end is not None
    project, group_name, account_email = caller
    accelerators = (
        [
            gcp.compute.FutureReservationSpecificSkuPropertiesInstancePropertiesGuestAcceleratorArgs(
                accelerator_type=d.attached_accelerator, accelerator_count=d.gpu_count
            )
        ]
        if d.attached_accelerator
        else None
    )
    request = gcp.compute.FutureReservation(
        f"{base}-calendar",
        name=f"{base[:54]}-calendar",
        project=project,
        zone=zone,
        description=f"gpufit {d.workload} ({d.stack}): calendar mode, {c.block_instances} x {d.machine_type}"[
            :2048
        ],
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED",
        auto_delete_auto_created_reservations=True,
        specific_reservation_required=True,
        reservation_name=calendar_reservation_name(base),
        time_window=gcp.compute.FutureReservationTimeWindowArgs(
            start_time=iso_utc(c.block_start), end_time=iso_utc(c.block_end)
        ),
        specific_sku_properties=gcp.compute.FutureReservationSpecificSkuPropertiesArgs(
            total_count=str(c.block_instances),
            instance_properties=gcp.compute.FutureReservationSpecificSkuPropertiesInstancePropertiesArgs(
                machine_type=d.machine_type, guest_accelerators=accelerators
            ),
        ),
        # "you can't cancel, delete, or modify your request" once submitted: a destroy leaves it.
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True)),
    )
    fire = c.block_start + timedelta(minutes=1)
    start = gcp.cloudscheduler.Job(
        f"{base}-calendar-start",
        region=d.region,
        description=f"gpufit: resize {group_name} to {d.nodes} at its calendar reservation's start",
        schedule=f"{fire.minute} {fire.hour} {fire.day} {fire.month} *",
        time_zone="Etc/UTC",
        attempt_deadline="320s",
        retry_config=gcp.cloudscheduler.JobRetryConfigArgs(
            retry_count=5, min_backoff_duration="30s", max_backoff_duration="600s"
        ),
        http_target=gcp.cloudscheduler.JobHttpTargetArgs(
            http_method="POST",
            uri=(
                f"https://compute.googleapis.com/compute/v1/projects/{project}/regions/{d.region}"
                f"/instanceGroupManagers/{group_name}/resize?size={d.nodes}"
            ),
            oauth_token=gcp.cloudscheduler.JobHttpTargetOauthTokenArgs(
                service_account_email=account_email, scope=CLOUD_PLATFORM_SCOPE
            ),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[request])),
    )
    return request, start


def resize_request(
    base: str, d: Deployment, group: gcp.compute.RegionInstanceGroupManager, opts: pulumi.ResourceOptions
) -> gcp.compute.RegionResizeRequest | None:
    """The flex-start request for the fleet's VMs, queued until capacity, run for the plan's
    lifetime (the deadline job deletes them at the deadline if that comes first)."""
    if not flex_start(d):
        return None
    return gcp.compute.RegionResizeRequest(
        f"{base}-flex",
        name=flex_request_name(base),
        region=d.region,
        instance_group_manager=group.name,
        resize_by=d.nodes,
        requested_run_duration=gcp.compute.RegionResizeRequestRequestedRunDurationArgs(
            seconds=str(_run_seconds(d))
        ),
        description=f"gpufit {d.workload} ({d.stack}): flex-start, deleted by the deadline",
        # No update exists for a resize request: a changed input replaces it, and the new
        # request adds its VMs again (double cost) or loses the old one's place in the queue.
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(ignore_changes=["requestedRunDuration", "resizeBy"])
        ),
    )


def _run_seconds(d: Deployment) -> int:
    assert d.capacity is not None
    return flex_run_seconds(d.capacity.run_hours)
