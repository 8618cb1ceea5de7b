"""The AWS fleet: a ``gpufit:aws:GpuFleet`` component that runs a deployment's single-node
replicas in an EC2 Auto Scaling group.

The group, not gpufit, keeps the workload running: a launch template (IMDSv2 required,
encrypted gp3 root volume, no inbound rule, the boot script) and a mixed-instances policy whose
overrides are the plan's choice and same-shape fallbacks in expected-cost order, so that when
one type has no capacity the group launches the next, in any of the plan's zones whose
subnets offer a type (``providers.aws.placement``: the one zone of a zone-specific plan, whose
price holds there only; else the zones the offer is known in, or the whole region). It replaces an
interrupted spot machine or a failed one by itself (EC2 health checks, and a machine that
cannot do its work marks itself unhealthy). The deadline is a one-time scheduled action that
sets the group to 0 at ``expires_at``; a group that runs a command has a terminating lifecycle
hook, so that each machine checkpoints and syncs before it goes. Each machine also leaves the
group before the deadline and when its job ends, decrementing the desired capacity, so a
finished job is never relaunched and the group is at 0 when the last replica finishes (what
the machine does: ``machine.boot``). The instance role may act on its own group only.

Spot follows fault tolerance: stateless work runs on spot with capacity rebalancing;
checkpointed work runs on spot without rebalancing (a replacement restores from the bucket, and
two copies of one replica must never run at once); ``none`` runs on-demand only with the
``prioritized`` strategy. A spot fleet picks its pools with AWS's recommended
``price-capacity-optimized`` strategy, which "looks at both price and capacity to select the Spot
Instance pools that are the least likely to be interrupted and have the lowest possible price"
(https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html): capacity
first, since a pool without it is no bargain. ``placement.spot_allocation: cost-order`` asks for
gpufit's order (the expected cost of the whole job, which per-hour prices ignore) instead:
``capacity-optimized-prioritized`` honours the overrides' order on a best-effort basis.

The group counts replicas (capacity units): each override's ``WeightedCapacity`` is the replicas
one instance of it holds, and the desired capacity, maximum and on-demand base are in replicas,
as AWS requires of a weighted group ("you must specify these sizes with the same units that you
use for weighting instances", ``LaunchTemplateOverrides.WeightedCapacity``). A batch fleet so
takes machines of several sizes; a serving fleet that allows spot keeps
``serving.on_demand_base`` replicas on-demand (``OnDemandBaseCapacity``), so the endpoint
survives a spot drought.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

from deployment import (
    TAG_EXPIRES_AT,
    TAG_STACK,
    TAG_WORKLOAD,
    Deployment,
    FleetMember,
    iso_utc,
)
from machine import lifecycle
from machine.boot import LIFECYCLE_HOOK, NodeRole, fleet_group, render
from providers.aws.capacity import (
    BLOCK_START_ACTION,
    block_starts_later,
    block_times,
    capacity_block,
    fleet_zone,
    group_capacity,
    reservation_id,
    template_capacity,
    zone_subnets,
)
from providers.aws.endpoint import from_load_balancer, lb_security_group, load_balancer
from providers.aws.placement import FleetPlacement
from providers.aws.resources import (
    checkpoint_bucket,
    instance_profile,
    machine_image,
    policy_document,
    security_group,
    template_metadata_options,
    template_root_volume,
)
from providers.aws.secrets import AwsMachineSecrets, machine_secrets, read_statements
from providers.base import SecretInputs, kept_on_update

SPOT_ALLOCATION_STRATEGY = "price-capacity-optimized"
COST_ORDER_SPOT_ALLOCATION_STRATEGY = "capacity-optimized-prioritized"
ON_DEMAND_ALLOCATION_STRATEGY = "prioritized"
DEADLINE_ACTION = "gpufit-deadline"
HEALTH_CHECK_GRACE_S = 300
"""EC2 status checks start counting five minutes after launch (the Auto Scaling default)."""


def group_arn_pattern(region: str, account: str, group: str) -> str:
    """The ARN of the group by name (its UUID part wildcarded: it is known only once created)."""
    return f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:*:autoScalingGroupName/{group}"


def fleet_role_policy(d: Deployment, account: str, secret_arns: list[str]) -> str:
    """The instance's permissions beyond SSM and its bucket: act on its own group (by name,
    and only while the group carries this stack's tag), ask which group it is in (a read that
    takes no resource), and read its own secrets."""
    existing = [s.ref for s in d.secrets if s.kind == "aws"]
    return policy_document(group_statements(d, account) + read_statements(secret_arns, existing))


GROUP_ACTIONS = (
    "autoscaling:TerminateInstanceInAutoScalingGroup",
    "autoscaling:SetInstanceHealth",
    "autoscaling:CompleteLifecycleAction",
    "autoscaling:RecordLifecycleActionHeartbeat",
)
"""What a member does to its group: leave it (decrementing it), be replaced (marked
unhealthy), and complete or extend the terminating lifecycle hook once its outputs are synced.
Each takes the group's ARN as its resource and the group's tags as conditions
(``autoscaling:ResourceTag/${TagKey}``, ``aws:ResourceTag/${TagKey}``), and none can be narrowed
to the caller's own instance: Auto Scaling defines no instance resource type and no condition
key on the request's instance id
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html).
So any member can act on any member of its own group, and no other group: the group by name
(``gpufit-<workload>-<stack>``) and only while it carries this stack's and workload's tags.
``DescribeAutoScalingInstances`` supports no resource-level permission ("you must use a
wildcard (*)", https://docs.aws.amazon.com/autoscaling/ec2/userguide/control-access-using-iam.html):
it reads which group an instance is in, nothing more."""


def group_statements(d: Deployment, account: str) -> list[dict[str, Any]]:
    return [
        {
            "Sid": "ActOnOwnGroup",
            "Effect": "Allow",
            "Action": list(GROUP_ACTIONS),
            "Resource": [group_arn_pattern(d.region, account, d.group_name)],
            "Condition": {
                "StringEquals": {
                    f"autoscaling:ResourceTag/{TAG_STACK}": d.stack,
                    f"autoscaling:ResourceTag/{TAG_WORKLOAD}": d.workload,
                }
            },
        },
        {
            "Sid": "WhichGroup",
            "Effect": "Allow",
            "Action": ["autoscaling:DescribeAutoScalingInstances"],
            "Resource": ["*"],
        },
    ]


def overrides(
    members: Sequence[FleetMember],
) -> list[aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs]:
    """The mixed-instances overrides in plan order, each weighted by the replicas one instance
    holds (1-999, every override weighted)."""
    return [
        aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(
            instance_type=m.machine_type, weighted_capacity=str(m.weighted_capacity)
        )
        for m in members
    ]


def spot_allocation_strategy(d: Deployment) -> str:
    if d.spot_allocation == "cost-order":
        return COST_ORDER_SPOT_ALLOCATION_STRATEGY
    return SPOT_ALLOCATION_STRATEGY


def instances_distribution(
    d: Deployment,
) -> aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs:
    """All on-demand, or spot above an on-demand base (``serving.on_demand_base``, in the
    group's units: the base instances × the choice's weight); see the module doc for the
    strategies."""
    base = d.on_demand_base * d.members[0].weighted_capacity if d.spot else 0
    return aws.autoscaling.GroupMixedInstancesPolicyInstancesDistributionArgs(
        on_demand_base_capacity=base,
        on_demand_percentage_above_base_capacity=0 if d.spot else 100,
        on_demand_allocation_strategy=ON_DEMAND_ALLOCATION_STRATEGY,
        spot_allocation_strategy=spot_allocation_strategy(d) if d.spot else None,
    )


def _user_data(d: Deployment, bucket: str, secrets: AwsMachineSecrets, arns: list[str]) -> str:
    """The launch template's user data (base64): the boot script of a group member, naming its
    secrets by ARN (their values are fetched on the machine)."""
    script = render(d, bucket, NodeRole(0, 1, ""), fleet_group(d), secrets.refs(d, arns))
    return base64.b64encode(script.encode()).decode()


def lifecycle_hooks(d: Deployment) -> list[aws.autoscaling.GroupInitialLifecycleHookArgs] | None:
    """A terminating hook when the machines run a command: a scale-in (the deadline's scale to
    0, capacity rebalancing, a lowered desired capacity) waits in ``Terminating:Wait`` while the
    machine, seeing ``autoscaling/target-lifecycle-state`` turn ``Terminated`` in IMDS, runs
    the checkpoint hook, syncs and completes the action (or the heartbeat timeout passes:
    ``machine.lifecycle.lifecycle_heartbeat_s``). ``initial_lifecycle_hooks`` attach before
    the first instance launches."""
    if d.command is None:
        return None
    return [
        aws.autoscaling.GroupInitialLifecycleHookArgs(
            name=LIFECYCLE_HOOK,
            lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
            heartbeat_timeout=lifecycle.lifecycle_heartbeat_s(d),
            default_result="CONTINUE",
        )
    ]


class AwsGpuFleet(pulumi.ComponentResource):
    """An Auto Scaling group of single-node replicas with its launch template, network access,
    bucket, role and deadline, for one deployment."""

    outputs: dict[str, Any]

    def __init__(
        self,
        name: str,
        deployment: Deployment,
        placement: FleetPlacement,
        opts: pulumi.ResourceOptions | None = None,
        secrets: SecretInputs | None = None,
        image: Any = None,
    ) -> None:
        """``image``: the AMI (``resources.machine_image``), looked up when not given."""
        super().__init__("gpufit:aws:GpuFleet", name, None, opts)
        d = deployment
        tags = d.tags()
        child = pulumi.ResourceOptions(parent=self, ignore_changes=kept_on_update(d))
        invoke = pulumi.InvokeOptions(parent=self)
        identity = aws.get_caller_identity_output(opts=invoke)

        balanced = d.expose == "load_balancer" and d.server is not None
        lb_sg = lb_security_group(name, d, placement.vpc_id, tags, child) if balanced else None
        sg = security_group(
            name,
            d,
            placement.vpc_id,
            tags,
            child,
            [from_load_balancer(d, lb_sg)] if lb_sg is not None else [],
        )
        bucket = checkpoint_bucket(name, d, tags, child)
        self.secrets = machine_secrets(name, d, secrets, tags, child)
        arns = self.secrets.arns()
        profile = instance_profile(
            name,
            bucket.arn,
            tags,
            child,
            extra=pulumi.Output.all(identity.account_id, arns).apply(
                lambda v: fleet_role_policy(d, str(v[0]), list(v[1]))
            ),
        )
        image = image if image is not None else machine_image(d, invoke)
        machine_tags = {**tags, "Name": f"gpufit-{d.name}"}
        block = capacity_block(name, d, tags, child)  # issue 26: a Capacity Block bought, if chosen
        template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            name_prefix=f"gpufit-{d.name}-",
            description=f"gpufit {d.workload} ({d.stack}): expires {iso_utc(d.expires_at)}",
            image_id=image.id,
            instance_type=d.machine_type,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            vpc_security_group_ids=[sg.id],
            metadata_options=template_metadata_options(),
            block_device_mappings=template_root_volume(d, image),
            # A machine that powers itself off is terminated (the group then decides what runs).
            instance_initiated_shutdown_behavior="terminate",
            user_data=pulumi.Output.all(bucket.bucket, arns).apply(
                lambda v: _user_data(d, str(v[0]), self.secrets, list(v[1]))
            ),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=machine_tags)
                for kind in ("instance", "volume")
            ],
            update_default_version=True,
            tags=tags,
            opts=child,
            **template_capacity(d, reservation_id(d, block)),
        )
        desired = d.capacity_units
        starts_later = block_starts_later(d)
        block_start, deadline = block_times(block, d)  # issue 26: the block bought, not the planned one
        self.load_balancer = (
            load_balancer(name, d, placement.vpc_id, list(placement.lb_subnet_ids), lb_sg, tags, child)
            if lb_sg is not None
            else None
        )
        grace = d.server.grace_seconds if d.server is not None else HEALTH_CHECK_GRACE_S
        group = aws.autoscaling.Group(
            f"{name}-asg",
            name=d.group_name,
            min_size=0,
            max_size=desired,
            desired_capacity=0 if starts_later else desired,
            vpc_zone_identifiers=zone_subnets(
                fleet_zone(name, d, block, self), placement.subnet_ids, placement.vpc_id, invoke
            ),
            mixed_instances_policy=aws.autoscaling.GroupMixedInstancesPolicyArgs(
                launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                    launch_template_specification=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                        launch_template_id=template.id, version="$Latest"
                    ),
                    overrides=overrides(placement.members),
                ),
                instances_distribution=instances_distribution(d),
            ),
            capacity_rebalance=d.spot and d.fault_tolerance == "stateless",
            # A machine leaving at the end of its job unbalances the zones; AZ rebalancing would
            # then terminate a running replica (with no checkpoint hook) to even them out.
            suspended_processes=["AZRebalance"],
            # Behind a load balancer, a machine is healthy when its model server is (ELB checks).
            health_check_type="ELB" if balanced else "EC2",
            health_check_grace_period=grace,
            target_group_arns=self.load_balancer.target_group_arns if self.load_balancer else None,
            # `pulumi up` returns once the group exists; the group keeps launching (and says why it
            # cannot, in its scaling activities) without holding the deployment up.
            wait_for_capacity_timeout="0",
            force_delete=True,
            initial_lifecycle_hooks=lifecycle_hooks(d),
            tags=[
                aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
                for k, v in sorted(machine_tags.items())
            ],
            # Finished replicas lower the desired capacity and the deadline sets it to 0: a later
            # `pulumi up --refresh` must not raise it back and relaunch finished work.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=[*kept_on_update(d), "desiredCapacity"]),
            **group_capacity(d, reservation_id(d, block)),  # issue 26: beyond a reservation, on-demand
        )
        schedule = aws.autoscaling.Schedule(
            f"{name}-deadline",
            autoscaling_group_name=group.name,
            scheduled_action_name=DEADLINE_ACTION,
            min_size=0,
            max_size=0,
            desired_capacity=0,
            start_time=deadline,
            opts=child,
        )

        if starts_later:  # the block is not active yet: the group starts its machines when it is
            assert d.capacity is not None and d.capacity.block_start is not None
            aws.autoscaling.Schedule(
                f"{name}-block-start",
                autoscaling_group_name=group.name,
                scheduled_action_name=BLOCK_START_ACTION,
                min_size=0,
                max_size=desired,
                desired_capacity=desired,
                start_time=block_start,
                opts=child,
            )
        self.block = block
        self.group = group
        self.launch_template = template
        self.schedule = schedule
        self.bucket = bucket
        self.security_group = sg
        region = d.region
        self.outputs = {
            "group": group.name,
            "instance_type": d.instance_type,
            "fallbacks": [m.instance_type for m in placement.members[1:]],
            "cloud": "aws",
            "region": region,
            "zones": list(placement.zones),
            "market": d.market,
            "nodes": d.nodes,
            "desired_capacity": desired,
            "capacity_unit": "replicas",
            "weights": {m.instance_type: m.weighted_capacity for m in placement.members},
            "hourly_usd": round(d.hourly_usd, 4),
            "estimated_total_usd": round(d.estimated_total_usd, 2),
            # From the launch template's state: the deadline set when it was created.
            "expires_at": template.tags.apply(lambda t: (t or {}).get(TAG_EXPIRES_AT, iso_utc(d.expires_at))),
            "bucket": bucket.bucket,
            "status": bucket.bucket.apply(lambda b: f"gpufit status --bucket s3://{b}"),
            "connect": group.name.apply(
                lambda g: (
                    f"aws ssm start-session --region {region} --target $(aws autoscaling "
                    f"describe-auto-scaling-groups --region {region} --auto-scaling-group-names {g} "
                    "--query 'AutoScalingGroups[0].Instances[0].InstanceId' --output text)"
                )
            ),
            **self._endpoint_outputs(d, group.name),
            "activity": group.name.apply(
                lambda g: (
                    "aws autoscaling describe-scaling-activities "
                    + f"--region {region} --auto-scaling-group-name {g}"
                )
            ),
        }
        self.register_outputs(self.outputs)

    def _endpoint_outputs(self, d: Deployment, group: pulumi.Output[str]) -> dict[str, Any]:
        """``endpoint`` (the OpenAI-compatible base URL) and ``api_key`` (secret) for a served
        model; privately, ``port_forward``: the SSM command that brings the port to localhost."""
        if d.server is None or self.secrets.api_key_value is None:
            return {}
        port = d.server.base_port
        outputs: dict[str, Any] = {"api_key": self.secrets.api_key_value}
        if self.load_balancer is not None:
            scheme = "https" if d.certificate_arn else "http"
            outputs["endpoint"] = self.load_balancer.balancer.dns_name.apply(lambda h: f"{scheme}://{h}/v1")
            return outputs
        region = d.region
        outputs["endpoint"] = f"http://127.0.0.1:{port}/v1"
        outputs["port_forward"] = group.apply(
            lambda g: (
                f"aws ssm start-session --region {region} --document-name AWS-StartPortForwardingSession "
                f'--parameters \'{{"portNumber":["{port}"],"localPortNumber":["{port}"]}}\' --target '
                f"$(aws autoscaling describe-auto-scaling-groups --region {region} "
                f"--auto-scaling-group-names {g} "
                "--query 'AutoScalingGroups[0].Instances[0].InstanceId' --output text)"
            )
        )
        return outputs
