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
it; the method needs ``compute.instanceGroupManagers.update`` on the group
(https://cloud.google.com/compute/docs/reference/rest/beta/regionInstanceGroupManagerResizeRequests/cancel:
"Authorization requires the following IAM permission on the specified resource
instanceGroupManager"), which the deadline's account already holds on this group alone: its
role is not widened.

Calendar-mode future reservations (``gcp.compute.FutureReservation``, ``reservation_mode:
CALENDAR``) exist in pulumi-gcp 10.2.0 but are not planned here: see the README's "Capacity".
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
    return gcp.compute.RegionInstanceTemplateSchedulingArgs(
        provisioning_model="SPOT" if d.spot else "STANDARD",
        preemptible=d.spot,
        automatic_restart=not d.spot,
        on_host_maintenance="TERMINATE",
        instance_termination_action="DELETE",
        termination_time=termination,
    )


def reservation_affinity(
    d: Deployment, overflow: bool = False
) -> gcp.compute.RegionInstanceTemplateReservationAffinityArgs | None:
    """Which reservation the VMs consume: the one named (or any), none for flex-start and for
    the overflow version's VMs (on-demand beside the reservation)."""
    c = d.capacity
    if c is None:
        return None
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
    ``caller``: (project, the group's name, the deadline account's email)."""
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
    """A flex-start group starts empty: its resize request brings the VMs, all at once."""
    return 0 if flex_start(d) else d.nodes


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
