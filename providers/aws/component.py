"""The AWS side: a ``gpufit:aws:GpuInstance`` component that provisions a ``Deployment``.

Secure by default: no inbound rule unless the spec lists SSH CIDRs (access is through SSM
Session Manager), IMDSv2 required, encrypted gp3 root volumes, a private encrypted checkpoint
bucket with lifecycle expiry, and an instance role that may touch that bucket only. Spot
follows fault tolerance: one-time + terminate for stateless work, persistent + stop (valid
until the deadline) for checkpointed work. An EventBridge Scheduler one-time schedule
terminates the instances at ``expires_at`` even if nobody is watching; its role may
terminate those instances and nothing else. Multi-node plans get a cluster placement group
and, on every node, one EFA interface per EFA-capable network card (``providers.aws.efa``):
the primary interface, an EFA with ENA created beforehand so that its Elastic IP reaches SSM,
the bucket and the model hub from the first boot (EC2 assigns no public IPv4 address to an
instance with several interfaces), and an EFA-only interface on each further card, all
launched from the node's launch template (pulumi-aws deprecates ``ec2.Instance``'s own
``network_interfaces``). The instances share one subnet, in the plan's zone when the plan is
zone-specific (``providers.aws.placement``).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pulumi
import pulumi_aws as aws

from deployment import (
    TAG_EXPIRES_AT,
    TAG_PROJECT,
    Deployment,
    iso_utc,
)
from machine.boot import NodeRole, fleet_group, render
from machine.serving import MachineSecrets
from providers.aws.capacity import (
    capacity_block,
    fleet_zone,
    instance_capacity,
    reservation_id,
    zone_subnets,
)
from providers.aws.efa import efa_layout
from providers.aws.fleet import AwsGpuFleet
from providers.aws.placement import InstanceNetwork, fleet_placement, instance_network
from providers.aws.resources import (
    METADATA_HOP_LIMIT,
    checkpoint_bucket,
    instance_profile,
    machine_image,
    policy_document,
    security_group,
    template_metadata_options,
    template_root_volume,
    trust_policy,
)
from providers.aws.secrets import AwsMachineSecrets, machine_secrets, read_statements
from providers.base import SecretInputs, kept_on_update, provision_problems

TERMINATE_TARGET = "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"
DEADLINE_GRACE_MINUTES = 1
"""The terminate schedule fires a minute after ``expires_at``: the persistent spot request
(``valid_until`` = ``expires_at``) has closed by then and cannot relaunch the instance."""


def terminate_policy_document(instance_arns: list[str]) -> str:
    """The deadline schedule's only permission: terminate these instances."""
    return policy_document(
        [{"Effect": "Allow", "Action": ["ec2:TerminateInstances"], "Resource": instance_arns}]
    )


def schedule_expression(deployment: Deployment) -> str:
    """``at(yyyy-mm-ddThh:mm:ss)`` in UTC, a minute after the deadline."""
    from datetime import timedelta

    fire = deployment.expires_at + timedelta(minutes=DEADLINE_GRACE_MINUTES)
    return f"at({iso_utc(fire)[:-1]})"


def _user_data(
    d: Deployment, role: tuple[int, int, int], secrets: AwsMachineSecrets, resolved: list[Any]
) -> str:
    """EC2 user data for one machine once its bucket name, leader address and secrets' ARNs
    resolve."""
    rank, nodes, machine = role
    bucket, master, arns = str(resolved[0]), str(resolved[1]), list(resolved[2])
    return render(d, bucket, NodeRole(rank, nodes, master, machine), None, secrets.refs(d, arns))


def check_user_data(d: Deployment) -> None:
    """Render the boot script with the longest names the resources may get, before any is
    created: a plan whose commands would not fit EC2's user-data limit stops here."""
    arn = f"arn:aws:secretsmanager:{d.region}:123456789012:secret:gpufit/{d.name}/secret-{'x' * 64}-AbCdEf"
    refs = MachineSecrets(
        "aws", d.region, arn if d.server else None, arn, job=tuple((s.env, arn) for s in d.secrets)
    )
    group = fleet_group(d) if d.grouped else None
    try:
        last = NodeRole(d.nodes_per_replica - 1, d.nodes_per_replica, "255.255.255.255", d.nodes)
        render(d, "b" * 63, last, group, refs)
    except ValueError as err:
        raise pulumi.RunError(str(err)) from None


class AwsGpuInstance(pulumi.ComponentResource):
    """GPU instances, their network access, bucket, role and deadline, for one deployment."""

    outputs: dict[str, Any]

    def __init__(
        self,
        name: str,
        deployment: Deployment,
        opts: pulumi.ResourceOptions | None = None,
        network: InstanceNetwork | None = None,
        secrets: SecretInputs | None = None,
        image: Any = None,
    ) -> None:
        """``network``: where the instances go (``placement.instance_network``) and ``image``
        the AMI (``resources.machine_image``), both asked before the component so that a plan
        that cannot be placed or booted creates nothing; looked up here when not given.
        ``secrets``: the Hugging Face token and the spec's secrets' values."""
        super().__init__("gpufit:aws:GpuInstance", name, None, opts)
        d = deployment
        tags = d.tags()
        child = pulumi.ResourceOptions(parent=self, ignore_changes=kept_on_update(d))
        invoke = pulumi.InvokeOptions(parent=self)

        net = network if network is not None else instance_network(d, invoke)
        subnet_id: pulumi.Input[str] = net.subnet_id
        sg = security_group(name, d, net.vpc_id, tags, child)
        bucket = checkpoint_bucket(name, d, tags, child)
        self.secrets = machine_secrets(name, d, secrets, tags, child)
        arns = self.secrets.arns()
        existing = [s.ref for s in d.secrets if s.kind == "aws"]
        reads = self.secrets.hf_token is not None or bool(self.secrets.job)
        profile = instance_profile(
            name,
            bucket.arn,
            tags,
            child,
            extra=arns.apply(lambda v: policy_document(read_statements(v, existing))) if reads else None,
        )
        image = image if image is not None else machine_image(d, invoke)
        block = capacity_block(name, d, tags, child)  # issue 26: a Capacity Block bought, if chosen
        target = reservation_id(d, block)
        zone = fleet_zone(name, d, block, self)
        if zone is not None:  # the block's or ODCR's AZ: the given subnet there, else the default one
            given = (net.subnet_id,) if d.subnet_id else ()
            fallback = net.subnet_id  # when EC2 names no zone
            subnet_id = pulumi.Output.from_input(zone_subnets(zone, given, net.vpc_id, invoke)).apply(
                lambda ids: ids[0] if ids else fallback
            )
        # "there is no need to use a cluster placement group with a Capacity Block" (its guide)
        placement = (
            aws.ec2.PlacementGroup(f"{name}-cluster", strategy="cluster", tags=tags, opts=child)
            if d.needs_node_interconnect and block is None
            else None
        )
        instances: list[aws.ec2.Instance] = []
        for index in range(d.nodes):
            rank, leader = d.role(index)
            master = instances[leader].private_ip if rank else pulumi.Output.from_input("")
            role = (rank, d.nodes_per_replica, index)
            user_data = pulumi.Output.all(bucket.bucket, master, arns).apply(
                functools.partial(_user_data, d, role, self.secrets)
            )
            instances.append(
                self._instance(
                    f"{name}-node{index}" if d.nodes > 1 else name,
                    d,
                    image=image,
                    subnet_id=subnet_id,
                    sg_id=sg.id,
                    profile=profile.name,
                    user_data=user_data,
                    placement=placement,
                    tags={**tags, TAG_PROJECT: d.project, "Name": f"gpufit-{d.name}-{index}"},
                    opts=child,
                    capacity=instance_capacity(d, target, index),
                )
            )
        schedule = self._deadline(name, d, instances, child, invoke)

        ids = [i.id for i in instances]
        self.instances = instances
        self.bucket = bucket
        self.security_group = sg
        self.schedule = schedule
        self.outputs = {
            "instance_id": ids[0],
            "instance_ids": pulumi.Output.all(*ids),
            "instance_type": d.instance_type,
            "cloud": "aws",
            "region": d.region,
            "zone": net.zone,  # an AZ ID
            "market": d.market,
            "nodes": d.nodes,
            "hourly_usd": round(d.hourly_usd, 4),
            "estimated_total_usd": round(d.estimated_total_usd, 2),
            # From the instance's state: the deadline set when it was created (see deadline_ignore_changes).
            "expires_at": instances[0].tags.apply(
                lambda tags: (tags or {}).get(TAG_EXPIRES_AT, iso_utc(d.expires_at))
            ),
            "bucket": bucket.bucket,
            "status": bucket.bucket.apply(lambda b: f"gpufit status --bucket s3://{b}"),
            "connect": ids[0].apply(lambda i: f"aws ssm start-session --region {d.region} --target {i}"),
        }
        self.register_outputs(self.outputs)

    @staticmethod
    def _instance(
        resource_name: str,
        d: Deployment,
        *,
        image: Any,
        subnet_id: pulumi.Input[str],
        sg_id: pulumi.Input[str],
        profile: pulumi.Input[str],
        user_data: pulumi.Input[str],
        placement: aws.ec2.PlacementGroup | None,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions,
        capacity: dict[str, Any] | None = None,
    ) -> aws.ec2.Instance:
        market = (capacity or {}).get("instance_market_options")
        if d.spot:
            resumes = d.resumes_after_interruption
            market = aws.ec2.InstanceInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
                    spot_instance_type="persistent" if resumes else "one-time",
                    instance_interruption_behavior="stop" if resumes else "terminate",
                    valid_until=iso_utc(d.expires_at) if resumes else None,
                ),
            )
        network: dict[str, Any] = {"subnet_id": subnet_id, "vpc_security_group_ids": [sg_id]}
        if d.needs_node_interconnect:
            template = _efa_template(resource_name, d, image, subnet_id, sg_id, tags, opts)
            network = {"launch_template": template}
        # A node of a multi-node job owns its pre-made primary EFA interface: a replacement must
        # let go of it first (EC2 refuses to attach an interface in use to a second instance).
        # Another type (`gpufit up`'s next attempt, issue 25) replaces a spot instance or an EFA
        # node rather than modifying it: a Spot Instance's type cannot be changed ("While a Spot
        # Instance is stopped, you can modify some of its instance attributes, but not the
        # instance type", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/interruption-behavior.html),
        # and an EFA node's interfaces are laid out per network card of its type (efa_cards.yaml).
        opts = pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                delete_before_replace=d.needs_node_interconnect,
                replace_on_changes=["instanceType"] if d.spot or d.needs_node_interconnect else None,
            ),
        )
        return aws.ec2.Instance(
            resource_name,
            ami=image.id,
            instance_type=d.machine_type,
            iam_instance_profile=profile,
            **network,
            placement_group=placement.name if placement else None,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=METADATA_HOP_LIMIT,
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=d.disk_gb,
                volume_type="gp3",
                encrypted=True,
                delete_on_termination=True,
                tags=tags,
            ),
            instance_market_options=market,
            capacity_reservation_specification=(capacity or {}).get("capacity_reservation_specification"),
            # A persistent spot request cannot take "terminate"; a stopped instance bills no compute.
            instance_initiated_shutdown_behavior="stop"
            if d.spot and d.resumes_after_interruption
            else "terminate",
            user_data=user_data,
            user_data_replace_on_change=False,
            tags=tags,
            opts=opts,
        )

    @staticmethod
    def _deadline(
        name: str,
        d: Deployment,
        instances: list[aws.ec2.Instance],
        child: pulumi.ResourceOptions,
        invoke: pulumi.InvokeOptions,
    ) -> aws.scheduler.Schedule:
        identity = aws.get_caller_identity_output(opts=invoke)
        arns = pulumi.Output.all(identity.account_id, *[i.id for i in instances]).apply(
            lambda v: [f"arn:aws:ec2:{d.region}:{v[0]}:instance/{iid}" for iid in v[1:]]
        )
        role = aws.iam.Role(
            f"{name}-deadline-role",
            assume_role_policy=identity.account_id.apply(
                lambda acct: trust_policy("scheduler.amazonaws.com", acct)
            ),
            description="gpufit deadline: may terminate this stack's instances only",
            tags=d.tags(),
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-deadline-terminate",
            role=role.id,
            policy=arns.apply(terminate_policy_document),
            opts=child,
        )
        return aws.scheduler.Schedule(
            f"{name}-deadline",
            description=f"gpufit: terminate {d.workload} ({d.stack}) at its deadline {iso_utc(d.expires_at)}",
            schedule_expression=schedule_expression(d),
            schedule_expression_timezone="UTC",
            flexible_time_window=aws.scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
            target=aws.scheduler.ScheduleTargetArgs(
                arn=TERMINATE_TARGET,
                role_arn=role.arn,
                input=pulumi.Output.all(*[i.id for i in instances]).apply(
                    lambda ids: json.dumps({"InstanceIds": list(ids)})
                ),
                retry_policy=aws.scheduler.ScheduleTargetRetryPolicyArgs(
                    maximum_event_age_in_seconds=86400, maximum_retry_attempts=185
                ),
            ),
            # Kept after it fires so the stack's state matches the cloud; the reaper destroys the stack.
            action_after_completion="NONE",
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[policy])),
        )


def _efa_template(
    resource_name: str,
    d: Deployment,
    image: Any,
    subnet_id: pulumi.Input[str],
    sg_id: pulumi.Input[str],
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> aws.ec2.InstanceLaunchTemplateArgs:
    """A node's network: its primary EFA-with-ENA interface (made first, with an Elastic IP:
    a node in the default VPC has no NAT, and EC2 assigns no public address to an instance with
    several interfaces) and an EFA-only interface on each further EFA card, in a launch
    template the instance launches from. Every interface carries the group whose inbound and
    outbound rules admit the other nodes. The template is a whole machine (image, type,
    IMDSv2, encrypted root volume, expiry tags) like a fleet's, so that it stands on its own
    before the policy pack; the instance's own settings take precedence where both give one."""
    layout = efa_layout(d.machine_type)
    primary = aws.ec2.NetworkInterface(
        f"{resource_name}-efa",
        subnet_id=subnet_id,
        security_groups=[sg_id],
        interface_type="efa",
        description="gpufit: the primary interface of a job node, EFA with ENA",
        tags=tags,
        opts=opts,
    )
    aws.ec2.Eip(f"{resource_name}-eip", domain="vpc", network_interface=primary.id, tags=tags, opts=opts)
    template = aws.ec2.LaunchTemplate(
        f"{resource_name}-network",
        name_prefix=f"gpufit-{resource_name}-",
        description=f"gpufit {d.workload}: {len(layout)} EFA interfaces on {d.machine_type}",
        image_id=image.id,
        instance_type=d.machine_type,
        metadata_options=template_metadata_options(),
        block_device_mappings=template_root_volume(d, image),
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tags)
            for kind in template_tagged(d)
        ],
        network_interfaces=[
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=0, device_index=0, network_interface_id=primary.id
            ),
            *(
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                    network_card_index=efa.network_card,
                    device_index=efa.device_index,
                    interface_type=efa.interface_type,
                    subnet_id=subnet_id,
                    security_groups=[sg_id],
                    delete_on_termination="true",
                )
                for efa in layout[1:]
            ),
        ],
        tags=tags,
        opts=opts,
    )
    return aws.ec2.InstanceLaunchTemplateArgs(id=template.id, version="$Latest")


def template_tagged(d: Deployment) -> tuple[str, ...]:
    """The resource types a node's launch template tags. A spot node's request too: the
    instance's own ``tags`` "apply to the instance" only (pulumi-aws ``ec2.Instance``), and a
    request's tags do not reach the instances it launches nor the other way round
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/concepts-spot-instances-request-tags.html),
    so this is what lets ``gpufit up`` and ``gpufit sweep`` find a request whose instance Pulumi
    deleted (its persistent request stays open: terraform-provider-aws#38142). A launch template
    takes "instance | volume | network-interface | spot-instances-request"; a type the launch
    does not make fails it, so an on-demand node's template names no request
    (LaunchTemplateTagSpecificationRequest, botocore's ec2 model)."""
    return ("instance", "volume", "network-interface", *(("spot-instances-request",) if d.spot else ()))


class AwsProvider:
    """Provisions deployments on AWS through an explicit regional ``aws.Provider``."""

    cloud = "aws"

    def __init__(self, provider: pulumi.ProviderResource | None = None) -> None:
        self._provider = provider

    def provision(self, deployment: Deployment, secrets: SecretInputs | None = None) -> dict[str, Any]:
        """A fleet group for single-node replicas; plain instances for a replica that spans
        nodes. Both are placed (zones, subnets) before anything is created, so a type offered
        nowhere in the plan's zones stops the program with nothing half-made."""
        problems = provision_problems(deployment, secrets)
        if problems:
            raise pulumi.RunError("\n".join(problems))
        check_user_data(deployment)
        providers = [self._provider] if self._provider is not None else None
        opts = pulumi.ResourceOptions(providers=providers)
        invoke = pulumi.InvokeOptions(provider=self._provider)
        image = machine_image(deployment, invoke)
        if deployment.grouped:
            placement = fleet_placement(deployment, invoke)
            return AwsGpuFleet(deployment.name, deployment, placement, opts, secrets, image).outputs
        network = instance_network(deployment, invoke)
        return AwsGpuInstance(deployment.name, deployment, opts, network, secrets, image).outputs
