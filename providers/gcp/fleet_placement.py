"""Where a GCP fleet's VMs may go: the plan's members a regional MIG can take (one template's
accelerators, boot disk and NIC; instance flexibility only where allowed) and the zones that
offer them, asked of Compute before any resource is created. Split out of ``providers.gcp.fleet``
(whose docstring explains the rules)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment, FleetMember
from machine.boot import gce_group_name
from providers.gcp import fallback_groups
from providers.gcp.common import boot_disk_type, nic_type


class FleetPlacementError(ValueError):
    """No zone of the region offers the fleet's machine types."""


@dataclass(frozen=True)
class GcpFleetPlacement:
    """The members the template can launch and that some zone offers (plan order kept), the
    types left out and why, and the zones for the MIG's distribution policy."""

    members: tuple[FleetMember, ...]
    left_out: tuple[str, ...]
    zones: tuple[str, ...]
    project: str
    groups: tuple[fallback_groups.OwnGroup, ...] = ()  # a batch's fallbacks in MIGs of their own


def template_compatible(d: Deployment, member: FleetMember) -> bool:
    """Whether one instance template serves ``member`` as it serves the choice: the same
    attached accelerators (or none, GPUs built into the machine type), the same boot-disk
    type and the same NIC requirement."""
    return (
        member.attached_accelerator == d.attached_accelerator
        and (member.attached_accelerator is None or member.gpu_count == d.gpu_count)
        and boot_disk_type(member.machine_type) == boot_disk_type(d.machine_type)
        and _nic(d, member.machine_type) == nic_type(d)
    )


def _nic(d: Deployment, machine_type: str) -> str | None:
    return nic_type(replace(d, machine_type=machine_type))


def machine_type_filter(names: Sequence[str]) -> str:
    """A Compute API list filter matching exactly these machine types (RE2, whole field)."""
    return f'name eq "({"|".join(sorted(set(names)))})"'


def place_members(
    d: Deployment, offered: dict[str, set[str]]
) -> tuple[tuple[FleetMember, ...], tuple[str, ...], tuple[str, ...]]:
    """(members the template serves and some zone offers, in plan order; the machine types
    left out, with why; the zones offering a kept member). ``offered`` maps a zone to the
    machine types it offers. FleetPlacementError when nothing is left."""
    kept: list[FleetMember] = []
    left_out: list[str] = []
    for member in d.members:
        zones = {z for z, types in offered.items() if member.machine_type in types}
        if not zones:
            left_out.append(
                f"{member.instance_type} (offered in none of the plan's zones)"
                if d.allowed_zones
                else f"{member.instance_type} (offered in no zone of {d.region})"
            )
        elif member is not d.members[0] and member.realised == "group":
            continue  # a MIG of its own (``fallback_groups``)
        elif member is not d.members[0] and not _flexible(d, member):
            left_out.append(f"{member.instance_type} ({NOT_FLEXIBLE[d.gcp_instance_flexibility is False]})")
        elif member is not d.members[0] and member.gpu != d.members[0].gpu:
            left_out.append(
                f"{member.instance_type} (another GPU model, {member.gpu}, than the choice's "
                f"{d.members[0].gpu}: a group serves one)"
            )
        elif member is not d.members[0] and not template_compatible(d, member):
            left_out.append(f"{member.instance_type} (needs another instance template)")
        elif d.task != "batch" and member.weighted_capacity != d.members[0].weighted_capacity:
            # A served model's launch (ports, GPU ranges) is rendered for the choice's replicas
            # per VM; a batch VM derives its replicas from its own GPUs.
            left_out.append(
                f"{member.instance_type} (holds {member.weighted_capacity} replicas, the choice "
                f"{d.members[0].weighted_capacity}: a MIG counts VMs)"
            )
        else:
            kept.append(member)
    if not kept:
        names = ", ".join(m.instance_type for m in d.members)
        scope = (
            f"none of the plan's zones ({', '.join(d.allowed_zones)}) offers"
            if d.allowed_zones
            else f"no zone of {d.region} offers"
        )
        raise FleetPlacementError(
            f"{scope} {names} (compute.machineTypes); "
            + (
                "re-plan against a fresh catalog (`gpufit catalog refresh`), or for another region "
                "with placement.regions"
                if d.allowed_zones
                else "plan for another region with placement.regions"
            )
        )
    kept_types = {m.machine_type for m in kept}
    placed = sorted(z for z, types in offered.items() if kept_types & types)
    return tuple(kept), tuple(left_out), tuple(placed)


NOT_FLEXIBLE = (
    "instance flexibility is unconfirmed for it: selector/data/gcp_instance_flexibility.yaml; "
    "placement.gcp_instance_flexibility: true opts in",
    "instance flexibility is off: placement.gcp_instance_flexibility: false",
)


def _flexible(d: Deployment, member: FleetMember) -> bool:
    """Whether the spec's flexibility setting lets ``member`` join the choice's group: opted
    in, or (by default) the planner found its GPUs the choice's in a series Google's code
    confirms (``FleetMember.realised``, from ``selector.gcp_flexibility``)."""
    if d.gcp_instance_flexibility is not None:
        return d.gcp_instance_flexibility
    return member.realised == "flexibility"


def fleet_placement(d: Deployment, project: str | None, invoke: pulumi.InvokeOptions) -> GcpFleetPlacement:
    """Ask Compute which UP zones of the region, among the plan's zones
    (``Deployment.allowed_zones``), offer the fleet's machine types (invokes that run before
    any resource is registered); RunError when none does. For N1 with attached
    GPUs the machine type is offered nearly everywhere, and no data source reports accelerator
    types per zone: such a MIG lists every zone that offers the N1 type, and its BALANCED or
    ANY_SINGLE_ZONE shape creates VMs only where the GPUs can be had."""
    if project is None:
        project = gcp.organizations.get_client_config(opts=invoke).project
    zones = gcp.compute.get_zones(region=d.region, status="UP", opts=invoke).names or []
    allowed = d.allowed_zones
    if allowed and zones:
        up = zones
        zones = [z for z in zones if z in allowed]
        if not zones:
            raise pulumi.RunError(
                f"no zone of {d.region} that the plan allows ({', '.join(allowed)}) is UP "
                f"(UP: {', '.join(sorted(up))}); re-plan"
            )
    wanted = machine_type_filter([m.machine_type for m in d.members])
    offered: dict[str, set[str]] = {}
    answered = False
    for zone in sorted(zones):
        listing = gcp.compute.get_machine_types(zone=zone, filter=wanted, opts=invoke)
        answered = answered or listing.machine_types is not None
        offered[zone] = {mt.name for mt in listing.machine_types or []}
    if zones and not answered:
        # No listing came back at all (as opposed to empty ones): place by the catalog's word
        # that the region offers the types, and let the MIG's shape find the zones.
        pulumi.log.warn(f"no machine-type listing answered for {d.region}: the MIG spans every UP zone")
        offered = {zone: {m.machine_type for m in d.members} for zone in zones}
    try:
        members, left_out, placed = place_members(d, offered)
    except FleetPlacementError as err:
        raise pulumi.RunError(str(err)) from None
    if left_out:
        pulumi.log.warn(f"left out of the group: {'; '.join(left_out)}")
    groups = fallback_groups.own_groups(d, gce_group_name(d), offered)
    return GcpFleetPlacement(members, left_out, placed, project, groups)
