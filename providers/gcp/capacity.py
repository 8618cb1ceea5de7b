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

Calendar-mode future reservations (``gcp.compute.FutureReservation``, ``reservation_mode:
CALENDAR``) exist in pulumi-gcp 10.2.0 but are not planned here: see the README's "Capacity".
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment
from deployment.capacity import RESERVATION_NAME_KEY, flex_run_seconds


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
        gcp.compute.RegionInstanceGroupManagerVersionArgs(name="overflow", instance_template=overflow_template),
    ]


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
        name=f"{base[:52]}-flex",
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
