"""A deployment's capacity option on AWS: the Capacity Block it buys, and how its machines
target that block or an On-Demand Capacity Reservation the user holds.

- Buying: ``aws.ec2.CapacityBlockReservation`` from the offering ``aws.ec2.get_capacity_block_offering``
  finds for the block's size, duration and start window. Its docstring: "Once created, a
  reservation is valid for the duration of the provided capacity_block_offering_id and cannot
  be deleted. Performing a destroy will only remove the resource from state." The purchase is
  made only with ``gpufit:purchaseCapacityBlock: true`` (``deployment.capacity.purchase_refusal``),
  and only when the offering's fee is within ``BLOCK_PRICE_TOLERANCE`` of the plan's.
- Launching into it: the launch template's market type ``capacity-block`` and a Capacity
  Reservation target ("To consume Capacity Blocks ... combine the specification with ... A
  market type on your launch template",
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/target-capacity-reservations.html;
  "To use a Capacity Block, instances must specifically target the reservation ID",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html).
- A held reservation: the target alone, by id or resource group ARN, preference omitted ("If
  capacity_reservation_id or capacity_reservation_resource_group_arn is specified ... either
  omit capacity_reservation_preference or set it to capacity-reservations-only", pulumi-aws
  ``LaunchTemplateCapacityReservationSpecificationArgs``).
- Machines beyond a held reservation (``capacity.overflow``, ``selector.capacity_overflow``):
  the group itself carries the target with the preference ``capacity-reservations-first``
  ("Auto Scaling will try to launch instances into a Capacity Reservation ... first. If
  capacity isn't available, instances will run in On-Demand capacity",
  https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CapacityReservationSpecification.html;
  pulumi-aws 7.51.1 ``autoscaling.GroupCapacityReservationSpecificationArgs``) and its launch
  template none (a template's target would make every launch targeted). Plain instances (a
  replica spanning nodes): the first ``reserved`` target it, the rest launch with the preference
  ``none``, on-demand ("The instance doesn't run in a Capacity Reservation even if one is
  available", botocore 1.44.8 ``ec2`` ``CapacityReservationSpecification``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pulumi
import pulumi_aws as aws

from deployment import Deployment
from deployment.capacity import (
    BLOCK_DEADLINE_LEAD,
    BLOCK_PRICE_TOLERANCE,
    TAG_BLOCK_OFFERING,
    CapacityTarget,
    block_tags,
    offering_window,
    overflow_machines,
)
from deployment.tags import iso_utc, parse_iso_utc

INSTANCE_PLATFORM = "Linux/UNIX"  # the Deep Learning AMIs gpufit boots are Ubuntu
BLOCK_START_ACTION = "gpufit-block-start"
RESERVATIONS_FIRST = "capacity-reservations-first"
NO_RESERVATION = "none"


def block_starts_later(d: Deployment) -> bool:
    """The block begins after the deployment is made: its group waits at 0 until then (AWS:
    "you can schedule scaling to run at the start of the Capacity Block reservation"). A block
    found by a lookup at ``pulumi up`` always does: the lookup's window opens at the program's
    clock (``offering_window``), and AWS sells no block that has begun."""
    c = d.capacity
    if c is None or c.kind != "capacity-block" or c.block_start is None:
        return False
    return c.block_start > d.created_at or c.offering_id is None


def block_times(
    block: aws.ec2.CapacityBlockReservation | None, d: Deployment
) -> tuple[pulumi.Input[str], pulumi.Input[str]]:
    """(start, deadline) of the group's scheduled actions, ISO UTC. The start is the block
    actually bought's (``CapacityBlockReservation.start_date``: the offering the lookup found may
    start later in the window than the plan's first day). The deadline is the earlier of the
    plan's (the machines' own, in their tags and boot script, which the policy pack holds the
    group to) and the bought block's end less AWS's termination lead and gpufit's margin
    (``selector.capacity.CapacityTerms.deadline``): never past the block. The plan's without a
    block."""
    c = d.capacity
    planned_start = iso_utc(c.block_start) if c is not None and c.block_start is not None else ""
    if block is None:
        return planned_start, iso_utc(d.expires_at)
    lead = BLOCK_DEADLINE_LEAD
    return (
        block.start_date.apply(lambda s: iso_utc(parse_iso_utc(s)) if s else planned_start),
        block.end_date.apply(
            lambda e: iso_utc(min(parse_iso_utc(e) - lead, d.expires_at)) if e else iso_utc(d.expires_at)
        ),
    )


def _fee_checked(fee: str | None, target: CapacityTarget) -> str:
    """The offering's fee, or a failure when it is over the plan's by more than the tolerance
    (the block is then not bought)."""
    paid = float(fee or "nan")
    ceiling = target.upfront_usd * (1.0 + BLOCK_PRICE_TOLERANCE)
    if not paid <= ceiling:
        raise pulumi.RunError(
            f"capacity block offering costs ${paid:,.2f} up front, over the plan's "
            f"${target.upfront_usd:,.2f} by more than {BLOCK_PRICE_TOLERANCE:.0%}: not bought; re-plan"
        )
    return f"{paid:.2f}"


def capacity_block(
    name: str, d: Deployment, tags: dict[str, str], opts: pulumi.ResourceOptions
) -> aws.ec2.CapacityBlockReservation | None:
    """Buy the plan's Capacity Block (the caller has checked the confirmation)."""
    target = d.capacity
    if target is None or target.kind != "capacity-block":
        return None
    assert target.block_start is not None and target.block_end is not None
    offering_id: pulumi.Input[str]
    if target.offering_id is not None:
        offering_id = target.offering_id
    else:
        earliest, latest_end = offering_window(target, d.created_at)
        found = aws.ec2.get_capacity_block_offering_output(
            capacity_duration_hours=target.block_hours,
            instance_count=target.block_instances,
            instance_type=d.machine_type,
            start_date_range=_iso(earliest),
            end_date_range=_iso(latest_end),
            opts=pulumi.InvokeOptions(parent=opts.parent, provider=opts.provider),
        )
        offering_id = pulumi.Output.all(found.capacity_block_offering_id, found.upfront_fee).apply(
            lambda v: (_fee_checked(v[1], target), str(v[0]))[1]
        )
    return aws.ec2.CapacityBlockReservation(
        f"{name}-block",
        capacity_block_offering_id=offering_id,
        instance_platform=INSTANCE_PLATFORM,
        tags={**tags, **block_tags(target)},  # what the policy pack prices its machines from
        # Not deletable: a destroy drops it from state, and a replacement would buy a second one:
        # a later `pulumi up`'s lookup (its window moves with the clock) may name another
        # offering, which must not replace the block bought.
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(retain_on_delete=True, ignore_changes=["capacityBlockOfferingId"]),
        ),
    )


def block_bought(offering_id: str, region: str) -> bool:
    """Whether this stack already bought the locked offering's block: a Capacity Reservation
    tagged with the offering id (``block_tags``), found with the Resource Groups Tagging API
    (``GetResources``; ``ResourceTypeFilters`` take ``service:resourceType``, an EC2 Capacity
    Reservation's ARN is ``arn:aws:ec2:REGION:ACCOUNT:capacity-reservation/ID``,
    https://docs.aws.amazon.com/resourcegroupstagging/latest/APIReference/API_GetResources.html,
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html).
    A list, empty when nothing matches: the single-result ``get_capacity_block_reservation``
    fails the whole program when none does (pulumi's RPC manager keeps a failed invoke)."""
    found = aws.resourcegroupstaggingapi.get_resources(
        region=region,
        resource_type_filters=["ec2:capacity-reservation"],
        tag_filters=[
            aws.resourcegroupstaggingapi.GetResourcesTagFilterArgs(
                key=TAG_BLOCK_OFFERING, values=[offering_id]
            )
        ],
    )
    return bool(found.resource_tag_mapping_lists)


def fleet_zone(
    name: str, d: Deployment, block: aws.ec2.CapacityBlockReservation | None, parent: pulumi.Resource
) -> pulumi.Output[str | None] | None:
    """The one Availability Zone the fleet must launch in, when only EC2 knows it: the block
    bought (``CapacityBlockReservation.availability_zone``), or a held ODCR whose zone the spec
    does not give, read from EC2 (``aws.ec2.CapacityReservation.get``: DescribeCapacityReservations;
    a read, never created or deleted by the stack). A Capacity Block and an ODCR are each one
    AZ's (``CapacityReservation.AvailabilityZone``, botocore 1.44.8 ``ec2``; "reserve compute
    capacity in specific Availability Zones",
    https://docs.aws.amazon.com/autoscaling/ec2/userguide/use-ec2-capacity-reservations.html),
    and a launch elsewhere cannot use them. The ODCR is read even when the spec gives its zone:
    with ``overflow`` a group that cannot use it runs every machine on-demand without a word
    ("If capacity isn't available, instances will run in On-Demand capacity"), so its type, its
    end and its zone (the AZ ID the spec gives, ``aws.get_availability_zone``) are checked. None
    for a resource group (its reservations may lie in several zones)."""

    if block is not None:
        return block.availability_zone
    c = d.capacity
    if c is None or c.kind != "reservation" or c.reservation_id is None or c.resource_group:
        return None
    held = aws.ec2.CapacityReservation.get(
        f"{name}-reservation", c.reservation_id, opts=pulumi.ResourceOptions(parent=parent)
    )
    machine, now, reservation = d.machine_type, d.created_at, str(c.reservation_id)
    zone = pulumi.Output.all(held.availability_zone, held.instance_type, held.end_date).apply(
        lambda v: _usable(v[0], v[1], v[2], machine, reservation, now)
    )
    given = d.zone
    if not given:
        return zone
    found = aws.get_availability_zone_output(name=zone, opts=pulumi.InvokeOptions(parent=parent))
    return pulumi.Output.all(zone, found.zone_id).apply(lambda v: _in_zone(v[0], v[1], given, reservation))


def _usable(
    zone: str | None, reserved: str | None, end: str | None, machine: str, reservation: str, now: datetime
) -> str | None:
    """The ODCR's zone, after checking it reserves the plan's machine type and has not ended
    (``CapacityReservation.end_date``; an expired reservation serves no launch)."""
    if reserved and reserved != machine:
        raise pulumi.RunError(
            f"capacity.reservation {reservation} reserves {reserved}, not {machine}: correct "
            "capacity.reservation.instance_type and re-plan"
        )
    if end and parse_iso_utc(end) <= now:
        raise pulumi.RunError(
            f"capacity.reservation {reservation} ended at {end}: it serves no launch; re-plan"
        )
    return zone or None


def _in_zone(zone: str | None, zone_id: str | None, given: str, reservation: str) -> str | None:
    """The ODCR's zone when it is the AZ ID the spec gives; a failure otherwise."""
    if zone_id and zone_id != given:
        raise pulumi.RunError(
            f"capacity.reservation {reservation} is in {zone} ({zone_id}), not {given}: correct "
            "capacity.reservation.zone and re-plan"
        )
    return zone


def zone_subnets(
    zone: pulumi.Output[str | None] | None,
    subnet_ids: Sequence[str],
    vpc_id: str,
    invoke: pulumi.InvokeOptions,
) -> pulumi.Input[list[str]]:
    """The fleet's subnets within ``zone`` (``fleet_zone``; an AZ name), as they are without
    one. Empty ``subnet_ids``: the VPC's default subnet there (plain instances)."""
    if zone is None:
        return list(subnet_ids)
    chosen = (
        aws.ec2.GetSubnetsFilterArgs(name="subnet-id", values=list(subnet_ids))
        if subnet_ids
        else aws.ec2.GetSubnetsFilterArgs(name="default-for-az", values=["true"])
    )

    def _in(name: str | None) -> pulumi.Output[list[str]] | list[str]:
        if not name:  # EC2 named no zone: the fleet keeps its subnets
            return list(subnet_ids)
        found = aws.ec2.get_subnets_output(
            filters=[
                aws.ec2.GetSubnetsFilterArgs(name="vpc-id", values=[vpc_id]),
                chosen,
                aws.ec2.GetSubnetsFilterArgs(name="availability-zone", values=[name]),
            ],
            opts=invoke,
        )
        return found.ids.apply(lambda ids: _some_subnet(sorted(ids or []), name, vpc_id))

    return zone.apply(_in)


def _some_subnet(ids: list[str], zone: str, vpc_id: str) -> list[str]:
    if not ids:
        raise pulumi.RunError(
            f"the fleet's capacity is in {zone}, where VPC {vpc_id} has no subnet for it: "
            "add one there (or set gpufit:subnetId to one)"
        )
    return ids


def _iso(moment: datetime) -> str:
    return iso_utc(moment)


def reservation_id(d: Deployment, block: aws.ec2.CapacityBlockReservation | None) -> pulumi.Input[str] | None:
    """The reservation the machines target: the block bought, or the one the user holds."""
    if block is not None:
        return block.id
    if d.capacity is not None and d.capacity.kind == "reservation":
        return d.capacity.reservation_id
    return None


def _capacity_args(
    d: Deployment, target: pulumi.Input[str] | None, spec_args: Any, target_args: Any, market_args: Any
) -> dict[str, Any]:
    """Arguments that put machines in the block or reservation, built from one resource's
    argument classes (a launch template's or a plain instance's)."""
    if target is None or d.capacity is None:
        return {}
    args: dict[str, Any] = {
        "capacity_reservation_specification": spec_args(
            capacity_reservation_target=target_args(**_target_key(d, target))
        )
    }
    if d.capacity.kind == "capacity-block":
        args["instance_market_options"] = market_args(market_type="capacity-block")
    return args


def template_capacity(d: Deployment, target: pulumi.Input[str] | None) -> dict[str, Any]:
    """Launch template arguments that put its machines in the block or reservation (none when
    the group splits its machines across a reservation and on-demand: ``group_capacity``)."""
    if overflow_machines(d.capacity, d.nodes):
        return {}
    return _capacity_args(
        d,
        target,
        aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs,
        aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs,
        aws.ec2.LaunchTemplateInstanceMarketOptionsArgs,
    )


def group_capacity(d: Deployment, target: pulumi.Input[str] | None) -> dict[str, Any]:
    """Auto Scaling group arguments for a fleet larger than its reservation: the reservation
    first, on-demand for the rest (see the module doc); none otherwise."""
    if target is None or d.capacity is None or not overflow_machines(d.capacity, d.nodes):
        return {}
    key = (
        "capacity_reservation_resource_group_arns"
        if d.capacity.resource_group
        else "capacity_reservation_ids"
    )
    return {
        "capacity_reservation_specification": aws.autoscaling.GroupCapacityReservationSpecificationArgs(
            capacity_reservation_preference=RESERVATIONS_FIRST,
            capacity_reservation_target=aws.autoscaling.GroupCapacityReservationSpecificationCapacityReservationTargetArgs(
                **{key: [target]}
            ),
        )
    }


def instance_capacity(d: Deployment, target: pulumi.Input[str] | None, index: int = 0) -> dict[str, Any]:
    """The same for plain instance ``index`` of the fleet (a replica spanning nodes): the ones
    beyond a reservation's count run on-demand (preference ``none``)."""
    if overflow_machines(d.capacity, d.nodes) and d.capacity is not None and index >= d.capacity.reserved:
        return {
            "capacity_reservation_specification": aws.ec2.InstanceCapacityReservationSpecificationArgs(
                capacity_reservation_preference=NO_RESERVATION
            )
        }
    return _capacity_args(
        d,
        target,
        aws.ec2.InstanceCapacityReservationSpecificationArgs,
        aws.ec2.InstanceCapacityReservationSpecificationCapacityReservationTargetArgs,
        aws.ec2.InstanceInstanceMarketOptionsArgs,
    )


def _target_key(d: Deployment, target: pulumi.Input[str]) -> dict[str, Any]:
    if d.capacity is not None and d.capacity.resource_group:
        return {"capacity_reservation_resource_group_arn": target}
    return {"capacity_reservation_id": target}
