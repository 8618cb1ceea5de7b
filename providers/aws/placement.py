"""Where AWS machines go: the availability zones that offer the plan's instance types, kept to
the plan's zones, and the subnets there.

Zones are AZ IDs (``use1-az2``), as the catalog names them: an AZ name (``us-east-1a``) maps to
a different physical zone in each account, an AZ ID to the same one everywhere
(https://docs.aws.amazon.com/ram/latest/userguide/working-with-az-ids.html). So the offerings
are asked by ``availability-zone-id`` (``ec2:DescribeInstanceTypeOfferings``) and subnets
filtered by ``availability-zone-id``.

The plan decides which zones may be used (``Deployment.allowed_zones``): a zone-specific
choice (AWS spot prices differ by zone) promises that zone's price, so everything launches in
that zone only; a region-level choice spreads over the zones the catalog knows it in, or over
the whole region when they are not known; in every case only where EC2 says a type is offered.
Everything here is an invoke that runs before any resource is registered, so a plan that cannot
be placed stops the program with nothing half-made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pulumi
import pulumi_aws as aws

from deployment import Deployment, FleetMember
from deployment.images import same_image

LOCATION_TYPE = "availability-zone-id"
ZONE_FILTER = "availability-zone-id"


class FleetPlacementError(ValueError):
    """No availability zone (or no usable subnet) of the region offers the fleet's types."""


@dataclass(frozen=True)
class FleetPlacement:
    """Where the group may launch: the fleet's members offered in an allowed zone (plan order
    kept), the types offered in none, the zones (AZ IDs) and subnets, and the VPC."""

    members: tuple[FleetMember, ...]
    dropped: tuple[str, ...]
    zones: tuple[str, ...]
    subnet_ids: tuple[str, ...]
    vpc_id: str
    lb_subnet_ids: tuple[str, ...] = ()  # a load balancer's subnets (two zones at least)


@dataclass(frozen=True)
class InstanceNetwork:
    """Where plain instances go: one subnet (a cluster placement group lives in one zone), its
    zone (AZ ID) and VPC."""

    subnet_id: str
    zone: str
    vpc_id: str


def offered_zones(instance_types: Sequence[str], locations: Sequence[str]) -> dict[str, set[str]]:
    """The zones offering each type, from DescribeInstanceTypeOfferings' parallel answer lists."""
    zones: dict[str, set[str]] = {}
    for instance_type, zone in zip(instance_types, locations, strict=True):
        zones.setdefault(instance_type, set()).add(zone)
    return zones


def where(d: Deployment) -> str:
    """How the plan's zones read in a message: ``use1-az2 (the plan's zone: its price is that
    zone's)``, ``use1-az1, use1-az2 (the plan's zones)`` or the region."""
    if d.zone is not None:
        return f"{d.zone} (the plan's zone: its price is that zone's)"
    if d.zones:
        return f"{', '.join(d.zones)} (the zones the plan's offer is known in)"
    return f"any availability zone of {d.region}"


def place_members(
    members: Sequence[FleetMember],
    zones_by_type: dict[str, set[str]],
    region: str,
    allowed: Sequence[str] = (),
) -> tuple[tuple[FleetMember, ...], tuple[str, ...], tuple[str, ...]]:
    """(members offered in some allowed zone, in plan order; the types offered in none; the
    allowed zones offering at least one member, sorted). ``allowed`` empty = every zone.
    FleetPlacementError when no member is offered."""
    if allowed:
        zones_by_type = {t: zones & set(allowed) for t, zones in zones_by_type.items()}
    kept = tuple(m for m in members if zones_by_type.get(m.machine_type))
    dropped = tuple(m.machine_type for m in members if not zones_by_type.get(m.machine_type))
    if not kept:
        names = ", ".join(m.machine_type for m in members)
        scope = (
            f"none of the plan's zones ({', '.join(allowed)}) in {region} offers"
            if allowed
            else f"no availability zone of {region} offers"
        )
        raise FleetPlacementError(
            f"{scope} {names} (ec2:DescribeInstanceTypeOfferings); "
            + (
                "re-plan against a fresh catalog (`gpufit catalog refresh`), or for another region "
                "with placement.regions"
                if allowed
                else "plan for another region with placement.regions"
            )
        )
    zones = sorted({z for m in kept for z in zones_by_type[m.machine_type]})
    return kept, dropped, tuple(zones)


def zone_offerings(types: Sequence[str], invoke: pulumi.InvokeOptions) -> dict[str, set[str]] | None:
    """The AZ IDs offering each of ``types``; None when EC2 gave no answer at all (as opposed
    to an empty one)."""
    offerings = aws.ec2.get_instance_type_offerings(
        location_type=LOCATION_TYPE,
        filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=list(types))],
        opts=invoke,
    )
    if offerings.locations is None:
        return None
    return offered_zones(offerings.instance_types or [], offerings.locations)


def _default_subnets(vpc_id: str, zones: Sequence[str], invoke: pulumi.InvokeOptions) -> list[str]:
    """The default VPC's default subnets, in ``zones`` only when given."""
    filters = [
        aws.ec2.GetSubnetsFilterArgs(name="vpc-id", values=[vpc_id]),
        aws.ec2.GetSubnetsFilterArgs(name="default-for-az", values=["true"]),
    ]
    if zones:
        filters.append(aws.ec2.GetSubnetsFilterArgs(name=ZONE_FILTER, values=list(zones)))
    return sorted(aws.ec2.get_subnets(filters=filters, opts=invoke).ids or [])


def _given_subnet(d: Deployment, invoke: pulumi.InvokeOptions) -> aws.ec2.GetSubnetResult:
    """``gpufit:subnetId``, refused when it lies outside the plan's zones."""
    assert d.subnet_id is not None
    subnet = aws.ec2.get_subnet(id=d.subnet_id, opts=invoke)
    allowed = d.allowed_zones
    if allowed and subnet.availability_zone_id not in allowed:
        raise pulumi.RunError(
            f"gpufit:subnetId {d.subnet_id} is in {subnet.availability_zone_id}, outside {where(d)}; "
            "give a subnet there, or re-plan"
        )
    return subnet


def fleet_placement(d: Deployment, invoke: pulumi.InvokeOptions) -> FleetPlacement:
    """Where the group and (``serving.expose: load_balancer``) its load balancer go: the
    subnets of the allowed zones offering the fleet's types, and for the load balancer every
    subnet of the VPC that the group uses (default VPC: its default subnets), which must span
    two zones. A zone-pinned group stays in its one zone while its load balancer spans the
    VPC's zones (its nodes in the other zones forward across zones, at no charge for an ALB)."""
    placement = _group_placement(d, invoke)
    if d.expose != "load_balancer":
        return placement
    filters = [aws.ec2.GetSubnetsFilterArgs(name="vpc-id", values=[placement.vpc_id])]
    if not d.subnet_id:
        filters.append(aws.ec2.GetSubnetsFilterArgs(name="default-for-az", values=["true"]))
    found = sorted(aws.ec2.get_subnets(filters=filters, opts=invoke).ids or [])
    if len(found) < 2:
        pinned = (
            f" The group stays in {d.zone}, where the plan's price holds, but the load balancer needs "
            "a second zone's subnet beside it: add a subnet in another zone of the VPC (it carries "
            "no machines), or use serving.expose private."
            if d.pinned
            else ""
        )
        raise pulumi.RunError(
            f"serving.expose load_balancer: an Application Load Balancer needs subnets in two zones; "
            f"VPC {placement.vpc_id} has {len(found)}.{pinned}"
        )
    return replace(placement, lb_subnet_ids=tuple(found))


def _group_placement(d: Deployment, invoke: pulumi.InvokeOptions) -> FleetPlacement:
    """Ask EC2 which zones offer the fleet's types and which subnets lie there, within the
    plan's zones; RunError when none can be used."""
    members, other_image = same_image(d)
    if other_image:
        pulumi.log.warn(
            f"{', '.join(other_image)}: another machine image than {d.machine_type}: left out of the group"
        )
    d = replace(d, fleet=members)
    by_type = zone_offerings([m.machine_type for m in d.members], invoke)
    if by_type is None:
        # No answer at all (as opposed to an empty one): keep every default subnet of the plan's
        # zones and let the group skip the zones where a type is missing.
        pulumi.log.warn(f"DescribeInstanceTypeOfferings gave no answer for {d.region}: using {where(d)}")
        return _unplaced(d, invoke)
    try:
        members, dropped, zones = place_members(d.members, by_type, d.region, d.allowed_zones)
    except FleetPlacementError as err:
        raise pulumi.RunError(str(err)) from None
    if dropped:
        pulumi.log.warn(f"not offered in {where(d)}: {', '.join(dropped)}: left out of the group")
    if d.subnet_id:
        subnet = _given_subnet(d, invoke)
        zone = subnet.availability_zone_id
        here = tuple(m for m in members if zone in by_type.get(m.machine_type, set()))
        if not here:
            raise pulumi.RunError(
                f"gpufit:subnetId {d.subnet_id} is in {zone}, where none of "
                f"{', '.join(m.machine_type for m in members)} is offered (offered in {', '.join(zones)})"
            )
        elsewhere = tuple(m.machine_type for m in members if m not in here)
        if elsewhere:
            pulumi.log.warn(f"{', '.join(elsewhere)} not offered in {zone} (gpufit:subnetId): left out")
        return FleetPlacement(here, (*dropped, *elsewhere), (zone,), (d.subnet_id,), subnet.vpc_id)
    vpc = aws.ec2.get_vpc(default=True, opts=invoke)
    subnets = _default_subnets(vpc.id, zones, invoke)
    if not subnets:
        raise pulumi.RunError(
            f"the default VPC of {d.region} has no default subnet in {', '.join(zones)}, where the "
            "fleet's types are offered; set gpufit:subnetId"
        )
    return FleetPlacement(members, dropped, zones, tuple(subnets), vpc.id)


def _unplaced(d: Deployment, invoke: pulumi.InvokeOptions) -> FleetPlacement:
    """Every member, in the given subnet or every default subnet of the default VPC (of the
    plan's zones when it names them)."""
    if d.subnet_id:
        subnet = _given_subnet(d, invoke)
        return FleetPlacement(d.members, (), (subnet.availability_zone_id,), (d.subnet_id,), subnet.vpc_id)
    vpc = aws.ec2.get_vpc(default=True, opts=invoke)
    subnets = _default_subnets(vpc.id, d.allowed_zones, invoke)
    if not subnets:
        raise pulumi.RunError(f"the default VPC of {d.region} has no default subnet in {where(d)}")
    return FleetPlacement(d.members, (), d.allowed_zones, tuple(subnets), vpc.id)


def instance_network(d: Deployment, invoke: pulumi.InvokeOptions) -> InstanceNetwork:
    """The subnet for plain instances (a replica spanning nodes): ``gpufit:subnetId`` (inside
    the plan's zones), else the default subnet of the first allowed zone (by AZ ID) that offers
    the type. RunError when there is none."""
    if d.subnet_id:
        subnet = _given_subnet(d, invoke)
        return InstanceNetwork(d.subnet_id, subnet.availability_zone_id, subnet.vpc_id)
    allowed = d.allowed_zones
    by_type = zone_offerings([d.machine_type], invoke)
    if by_type is None:
        pulumi.log.warn(f"DescribeInstanceTypeOfferings gave no answer for {d.region}: using {where(d)}")
        candidates: list[str] = list(allowed)
    else:
        offered = by_type.get(d.machine_type, set())
        candidates = sorted(offered & set(allowed) if allowed else offered)
        if not candidates:
            raise pulumi.RunError(
                f"{d.machine_type} is not offered in {where(d)} (ec2:DescribeInstanceTypeOfferings)"
                + (f"; EC2 offers it in {', '.join(sorted(offered))}" if offered else "")
            )
    vpc = aws.ec2.get_vpc(default=True, opts=invoke)
    for zone in candidates:
        ids = _default_subnets(vpc.id, [zone], invoke)
        if ids:
            return InstanceNetwork(ids[0], zone, vpc.id)
    if candidates:
        raise pulumi.RunError(
            f"the default VPC of {d.region} has no default subnet in {', '.join(candidates)}, where "
            f"{d.machine_type} is offered; set gpufit:subnetId"
        )
    ids = _default_subnets(vpc.id, (), invoke)
    if not ids:
        raise pulumi.RunError(f"the default VPC of {d.region} has no default subnet; set gpufit:subnetId")
    return InstanceNetwork(ids[0], aws.ec2.get_subnet(id=ids[0], opts=invoke).availability_zone_id, vpc.id)
