"""The Pulumi program under mocks: every example stack provisions what `gpufit plan` chooses,
with the security defaults, spot settings, deadline and tags; bad input registers nothing."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest

from deployment import TAG_EXPIRES_AT, deployment_from_plan, lifetime_hours
from selector.catalog import SNAPSHOT_FILE, load_catalog
from selector.select import Plan, plan
from selector.spec import parse_spec
from tests.fakes.zoned import OfferKey, write_zoned, zoned_catalog
from tests.machine.unpack import file_named, settings
from tests.pulumi_harness import (
    BARREN_ZONE,
    NOT_OFFERED,
    ROOT,
    WITHHELD,
    RecordingMocks,
    az_id,
    run_program,
    stack_config,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
AWS_INSTANCE = "aws:ec2/instance:Instance"
GCP_INSTANCE = "gcp:compute/instance:Instance"
AWS_GROUP = "aws:autoscaling/group:Group"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_GROUP_SCHEDULE = "aws:autoscaling/schedule:Schedule"
GCP_GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
GCP_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"


def planned(config: dict[str, Any]) -> Plan:
    return plan(parse_spec(config["gpufit:workload"]), load_catalog())


def _stack_id(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def test_there_are_six_example_stacks_with_a_schema_line() -> None:
    assert len(STACKS) >= 6
    for path in STACKS:
        assert path.read_text().startswith("# yaml-language-server: $schema=../schema/stack.schema.json")


@pytest.mark.parametrize("stack_file", STACKS, ids=_stack_id)
def test_every_stack_provisions_the_planned_offer(stack_file: Path) -> None:
    config = stack_config(stack_file)
    expected = planned(config)
    assert expected.choice is not None
    offer, shape = expected.choice.offer, expected.choice.shape
    mocks, outputs = run_program(config, NOW)
    planned_types = [
        offer.instance.machine_type,
        *(f.offer.instance.machine_type for f in expected.fallbacks),
    ]
    if shape.nodes_per_replica > 1:  # a replica spanning nodes: plain instances
        typ = AWS_INSTANCE if offer.cloud == "aws" else GCP_INSTANCE
        instances = mocks.of_type(typ)
        assert len(instances) == shape.instances
        key = "instanceType" if offer.cloud == "aws" else "machineType"
        assert {i.inputs[key] for i in instances} == {offer.instance.machine_type}
        assert not mocks.of_type(AWS_GROUP) and not mocks.of_type(GCP_GROUP)
        assert {"instance_id", "zone"} <= set(outputs)
    elif offer.cloud == "aws":
        group = mocks.one(AWS_GROUP)
        overrides = group.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
        assert [o["instanceType"] for o in overrides] == planned_types  # plan order
        assert mocks.one(AWS_LAUNCH_TEMPLATE).inputs["instanceType"] == offer.instance.machine_type
        assert not mocks.of_type(AWS_INSTANCE)
        assert outputs["group"] == group.inputs["name"]
        assert outputs["fallbacks"] == [f.offer.instance.name for f in expected.fallbacks]
        assert (group.provider or "").endswith(f"aws-{offer.region}::aws-{offer.region}-id") or (
            f"aws-{offer.region}" in (group.provider or "")
        )
    else:
        group = mocks.one(GCP_GROUP)
        assert group.inputs["targetSize"] == shape.instances
        assert mocks.one(GCP_TEMPLATE).inputs["machineType"] == offer.instance.machine_type
        assert not mocks.of_type(GCP_INSTANCE)
        assert f"gcp-{offer.region}" in (group.provider or "")
    assert outputs["instance_type"] == offer.instance.name
    assert (outputs["cloud"], outputs["region"], outputs["market"]) == (
        offer.cloud,
        offer.region,
        offer.market,
    )
    expiry = NOW + timedelta(hours=lifetime_hours(expected))
    assert outputs["expires_at"] == expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert outputs["hourly_usd"] == pytest.approx(expected.choice.cost.hourly_usd, abs=1e-4)
    assert outputs["estimated_total_usd"] == pytest.approx(expected.choice.cost.total_usd, abs=0.01)
    assert {"bucket", "connect"} <= set(outputs)


def _aws(stack: str, **workload_changes: Any) -> tuple[RecordingMocks, dict[str, Any], dict[str, Any]]:
    config = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **workload_changes}
    mocks, outputs = run_program(config, NOW)
    return mocks, outputs, config


MULTI_NODE: dict[str, Any] = {"placement": {"regions": ["us-west-2"], "instance_types": ["p5e.48xlarge"]}}
"""llama70b-full-ft kept on p5e.48xlarge (8 × H200) in us-west-2, where its training state
needs two nodes: the stack's own plan now fits one p6-b200.48xlarge (8 × B200), so the tests of
a replica spanning nodes pin the type (a region-level spot offer, known in usw2-az3)."""


def test_the_multi_node_pin_spans_nodes() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-full-ft.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **MULTI_NODE}
    expected = planned(config)
    assert expected.choice is not None
    offer, shape = expected.choice.offer, expected.choice.shape
    assert (offer.instance.name, offer.region, offer.market) == ("p5e.48xlarge", "us-west-2", "spot")
    assert shape.nodes_per_replica == shape.instances == 2 and shape.needs_node_interconnect


def test_the_mock_names_az_ids_as_the_catalog_does() -> None:
    """Every AZ ID the catalog names is one the mock EC2 offers types in, spelt alike."""
    catalog = load_catalog()
    named = {z for o in catalog.offers if o.instance.cloud == "aws" for z in o.zones}
    assert {"use2-az3", "apse3-az1", "apne1-az4", "usw2-az3"} <= named
    regions = {o.region for o in catalog.offers if o.instance.cloud == "aws"}
    offered = {az_id(r, n) for r in regions for n in range(1, BARREN_ZONE)}
    assert named <= offered
    assert not any(z.endswith(f"-az{BARREN_ZONE}") for z in named)  # the barren zone is the mock's own


def user_data(template: Any) -> str:
    """The boot script a launch template carries (base64 user data, decoded)."""
    return base64.b64decode(template.inputs["userData"]).decode()


def test_aws_security_defaults() -> None:
    mocks, outputs, _ = _aws("llama70b-chat")
    template = mocks.one(AWS_LAUNCH_TEMPLATE).inputs
    assert template["metadataOptions"]["httpTokens"] == "required"
    (root,) = template["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/sda1"  # the AMI's root device
    assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
    # OS image + 70.6B × 2 B of weights + the vLLM image allowance, rounded up to 10 GB
    assert root["ebs"]["volumeSize"] == 100 + 150 + 30
    assert template["instanceInitiatedShutdownBehavior"] == "terminate"
    assert "instanceMarketOptions" not in template  # the group's distribution chooses the market
    sg = mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs
    assert sg["ingress"] == []  # SSM Session Manager, no inbound
    assert template["vpcSecurityGroupIds"] == ["llama70b-chat-test-sg-id"]
    pab = mocks.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(
        pab[k] is True
        for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    sse = mocks.one("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert mocks.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs["rule"] == {
        "objectOwnership": "BucketOwnerEnforced"
    }
    lifecycle = mocks.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs
    assert lifecycle["rules"][0]["expiration"]["days"] == 7 and lifecycle["rules"][0]["status"] == "Enabled"
    tls = json.loads(mocks.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    assert tls["Statement"][0]["Effect"] == "Deny"
    assert tls["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    bucket_arn = f"arn:aws:s3:::{outputs['bucket']}"
    access = [r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("bucket-access")]
    statements = json.loads(access[0].inputs["policy"])["Statement"]
    assert {r for s in statements for r in s["Resource"]} == {bucket_arn, f"{bucket_arn}/*"}
    assert all("*" not in a for s in statements for a in s["Action"])
    # Session Manager's own minimal permissions, not AmazonSSMManagedInstanceCore (whose
    # ssm:GetParameter(s) on * would break "bucket only")
    assert not mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    policies = mocks.of_type("aws:iam/rolePolicy:RolePolicy")
    session = [r for r in policies if r.name.endswith("session-manager")]
    (statement,) = json.loads(session[0].inputs["policy"])["Statement"]
    assert sorted(statement["Action"]) == [
        "ssm:UpdateInstanceInformation",
        "ssmmessages:CreateControlChannel",
        "ssmmessages:CreateDataChannel",
        "ssmmessages:OpenControlChannel",
        "ssmmessages:OpenDataChannel",
    ]
    assert outputs["region"] == "us-east-2"  # p4d.24xlarge on-demand, the cheapest region
    assert outputs["connect"].startswith(
        "aws ssm start-session --region us-east-2 --target $(aws autoscaling"
    )


def test_aws_spot_fleet_in_cost_order_when_asked() -> None:
    placement = {"placement": {"clouds": ["aws"], "spot_allocation": "cost-order"}}
    mocks, _, _ = _aws("sdxl-batch", **placement)
    distribution = mocks.one(AWS_GROUP).inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["spotAllocationStrategy"] == "capacity-optimized-prioritized"


def test_aws_on_demand_for_fault_tolerance_none() -> None:
    mocks, _, _ = _aws("llama70b-chat")
    distribution = mocks.one(AWS_GROUP).inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["onDemandPercentageAboveBaseCapacity"] == 100
    assert distribution["onDemandAllocationStrategy"] == "prioritized"
    assert "spotAllocationStrategy" not in distribution
    assert mocks.one(AWS_GROUP).inputs["capacityRebalance"] is False


def test_aws_checkpointed_single_node_runs_on_spot_without_rebalancing() -> None:
    mocks, _, _ = _aws("guanaco-65b")
    group = mocks.one(AWS_GROUP).inputs
    distribution = group["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["onDemandPercentageAboveBaseCapacity"] == 0
    assert distribution["spotAllocationStrategy"] == "price-capacity-optimized"
    # two copies of one checkpointed replica must never run at once
    assert group["capacityRebalance"] is False
    script = user_data(mocks.one(AWS_LAUNCH_TEMPLATE))
    assert "systemctl enable gpufit-boot.service gpufit-final-sync.service" in script
    found = settings(script)
    assert (found["SPOT"], found["T_POLL"], found["KIND"]) == ("1", "5", "job")  # the spot watcher
    assert file_named(script, "/checkpoint.sh").endswith("touch outputs/INTERRUPTED\n")  # the hook
    assert found["NODE_PREFIX"] == "fleet"  # a replacement restores the fleet's shared outputs


def test_aws_checkpointed_multi_node_spot_is_persistent_and_stops() -> None:
    mocks, outputs, _ = _aws("llama70b-full-ft", **MULTI_NODE)
    nodes = mocks.of_type(AWS_INSTANCE)
    assert len(nodes) == 2 and outputs["market"] == "spot"
    for node in nodes:
        spot = node.inputs["instanceMarketOptions"]
        assert spot["marketType"] == "spot"
        assert spot["spotOptions"] == {
            "spotInstanceType": "persistent",
            "instanceInterruptionBehavior": "stop",
            "validUntil": outputs["expires_at"],
        }
        assert node.inputs["instanceInitiatedShutdownBehavior"] == "stop"
        found = settings(node.inputs["userData"])
        assert found["BACKSTOP_AT"] == found["EXPIRES_AT"] and found["GROUP"] == ""


def test_aws_stateless_spot_fleet_rebalances_and_follows_the_plan_order() -> None:
    """The pulumi-fleet-stateless bar: a stateless batch fleet with at least two fallbacks,
    machines of several sizes each weighted by the replicas it holds, the group sized in
    replicas, AWS's price-capacity-optimized strategy."""
    mocks, outputs, config = _aws("sdxl-batch")
    expected = planned(config)
    group = mocks.one(AWS_GROUP).inputs
    distribution = group["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["onDemandPercentageAboveBaseCapacity"] == 0
    assert distribution["onDemandBaseCapacity"] == 0
    assert distribution["spotAllocationStrategy"] == "price-capacity-optimized"
    assert group["capacityRebalance"] is True
    overrides = group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert len(overrides) >= 3 and len(outputs["fallbacks"]) >= 2
    expected_costs = [expected.choice.cost.expected_usd, *(f.cost.expected_usd for f in expected.fallbacks)]
    assert expected_costs == sorted(expected_costs)  # cheapest expected job first
    # every override weighted by the replicas one instance of it holds; the group counts replicas
    weights = [
        expected.choice.shape.replicas_per_instance,
        *(f.weighted_capacity for f in expected.fallbacks),
    ]
    assert [o["weightedCapacity"] for o in overrides] == [str(w) for w in weights]
    assert len(set(weights)) >= 2  # machines of several sizes
    assert group["desiredCapacity"] == group["maxSize"] == expected.fleet_units == 2
    assert outputs["capacity_unit"] == "replicas" and outputs["weights"]["g6e.48xlarge"] == 8
    assert group["minSize"] == 0 and "desiredCapacityType" not in group
    assert group["suspendedProcesses"] == ["AZRebalance"]  # a leaving replica must not trigger a swap
    assert group["healthCheckType"] == "EC2" and group["waitForCapacityTimeout"] == "0"


def test_aws_group_subnets_lie_only_where_the_types_are_offered() -> None:
    """sdxl-batch on on-demand: g6e.xlarge and its fallbacks, region-level offers of us-east-1
    known in use1-az1, -az2, -az4 and -az6. The mock EC2 offers every type in -az1 to -az6 but
    here none of them in -az2: the group spreads over the known zones that offer its types."""
    config = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], "fault_tolerance": "none"}
    expected = planned(config)
    assert expected.choice is not None and expected.choice.offer.zone is None
    assert expected.choice.offer.zones == ("use1-az1", "use1-az2", "use1-az4", "use1-az6")
    members = [expected.choice.offer.instance.name, *(f.offer.instance.name for f in expected.fallbacks)]
    assert len(members) >= 2
    WITHHELD.update((t, "use1-az2") for t in members)
    try:
        mocks, outputs = run_program(config, NOW)
    finally:
        WITHHELD.clear()
    group = mocks.one(AWS_GROUP).inputs
    # zones are AZ IDs, as the catalog names them (an AZ name differs between accounts); -az3
    # and -az5 offer the types but the plan's offer is not known there
    known_and_offered = ["use1-az1", "use1-az4", "use1-az6"]
    assert group["vpcZoneIdentifiers"] == [f"subnet-{z}" for z in known_and_offered]
    assert outputs["zones"] == known_and_offered
    assert [
        o["instanceType"] for o in group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    ] == members
    offerings = [args for token, args in mocks.invokes if token.endswith("getInstanceTypeOfferings")]
    assert offerings[0]["locationType"] == "availability-zone-id"
    subnets = [args for token, args in mocks.invokes if token == "aws:ec2/getSubnets:getSubnets"]
    zone_filter = [f for f in subnets[0]["filters"] if f["name"].startswith("availability-zone")]
    assert zone_filter == [{"name": "availability-zone-id", "values": known_and_offered}]


def test_aws_group_is_scaled_to_zero_at_the_deadline() -> None:
    mocks, outputs, _ = _aws("guanaco-65b")
    expires = datetime.fromisoformat(outputs["expires_at"].replace("Z", "+00:00"))
    assert expires == NOW + timedelta(hours=48)  # teardown.ttl
    action = mocks.one(AWS_GROUP_SCHEDULE).inputs
    assert action["autoscalingGroupName"] == outputs["group"] == "gpufit-guanaco-65b-test"
    assert (action["minSize"], action["maxSize"], action["desiredCapacity"]) == (0, 0, 0)
    assert action["startTime"] == outputs["expires_at"]
    # the in-VM layer stops first, leaving time for the checkpoint hook and the final sync, and
    # the scale-to-0 waits on the terminating hook until the machine has synced
    found = settings(user_data(mocks.one(AWS_LAUNCH_TEMPLATE)))
    assert int(found["EXPIRES_AT"]) == int(expires.timestamp())
    assert int(found["STOP_AT"]) == int(expires.timestamp()) - int(found["T_HOOK"]) - int(
        found["T_JOB_STOP"]
    ) - int(found["T_FINAL_SYNC"])
    assert int(found["BACKSTOP_AT"]) == int(expires.timestamp()) + 300
    (hook,) = mocks.one(AWS_GROUP).inputs["initialLifecycleHooks"]
    assert hook["name"] == found["LIFECYCLE_HOOK"] == "gpufit-final-sync"
    assert hook["lifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert hook["defaultResult"] == "CONTINUE" and 30 <= hook["heartbeatTimeout"] <= 7200


def test_aws_finished_job_leaves_its_own_group() -> None:
    mocks, outputs, _ = _aws("sdxl-batch")
    script = user_data(mocks.one(AWS_LAUNCH_TEMPLATE))
    group = outputs["group"]
    assert outputs["region"] == "us-east-2"  # g6e.xlarge spot
    found = settings(script)
    assert (found["GROUP"], found["REGION"], found["CLOUD"]) == (group, "us-east-2", "aws")
    assert "python generate.py" in file_named(script, "/job.sh")
    fleet = [r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("fleet-access")]
    statements = json.loads(fleet[0].inputs["policy"])["Statement"]
    own = next(s for s in statements if s["Sid"] == "ActOnOwnGroup")
    assert own["Action"] == [
        "autoscaling:TerminateInstanceInAutoScalingGroup",
        "autoscaling:SetInstanceHealth",
        "autoscaling:CompleteLifecycleAction",
        "autoscaling:RecordLifecycleActionHeartbeat",
    ]
    assert own["Resource"] == [
        f"arn:aws:autoscaling:us-east-2:123456789012:autoScalingGroup:*:autoScalingGroupName/{group}"
    ]
    assert own["Condition"] == {
        "StringEquals": {
            "autoscaling:ResourceTag/gpufit:stack": "test",
            "autoscaling:ResourceTag/gpufit:workload": "sdxl-batch",
        }
    }
    # The condition keys each action takes (Service Authorization Reference, EC2 Auto Scaling:
    # https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2autoscaling.html):
    # the group's resource tags only; DescribeAutoScalingInstances takes no resource and no key.
    for key in own["Condition"]["StringEquals"]:
        assert re.fullmatch(r"(?:autoscaling|aws):ResourceTag/[^/]+", key), key
    # ... and the group carries exactly those tags, or every leave would be denied
    group_tags = {t["key"]: t["value"] for t in mocks.one(AWS_GROUP).inputs["tags"]}
    for key, value in own["Condition"]["StringEquals"].items():
        assert group_tags[key.split("/", 1)[1]] == value, key
    which = next(s for s in statements if s["Sid"] == "WhichGroup")
    assert which == {
        "Sid": "WhichGroup",
        "Effect": "Allow",
        "Action": ["autoscaling:DescribeAutoScalingInstances"],
        "Resource": ["*"],
    }
    # the job reads its Hugging Face token, and nothing else
    reads = next(s for s in statements if s["Sid"] == "ReadOwnSecrets")
    (secret,) = mocks.of_type("aws:secretsmanager/secret:Secret")
    assert reads["Resource"] == [f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{secret.name}-AbCdEf"]
    assert outputs["status"] == f"gpufit status --bucket s3://{outputs['bucket']}"


def test_aws_deadline_schedule_terminates_only_these_instances() -> None:
    mocks, outputs, _ = _aws("llama70b-full-ft", **MULTI_NODE)
    assert len(outputs["instance_ids"]) == 2
    schedule = mocks.one("aws:scheduler/schedule:Schedule").inputs
    expires = datetime.fromisoformat(outputs["expires_at"].replace("Z", "+00:00"))
    fire = (expires + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert schedule["scheduleExpression"] == f"at({fire})"
    assert schedule["scheduleExpressionTimezone"] == "UTC"
    assert schedule["flexibleTimeWindow"] == {"mode": "OFF"}
    target = schedule["target"]
    assert target["arn"] == "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"
    assert json.loads(target["input"]) == {"InstanceIds": outputs["instance_ids"]}
    roles = {r.name: r.inputs for r in mocks.of_type("aws:iam/role:Role")}
    trust = json.loads(roles["llama70b-sft-test-deadline-role"]["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}
    terminate = [
        r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("deadline-terminate")
    ]
    statement = json.loads(terminate[0].inputs["policy"])["Statement"]
    assert statement == [
        {
            "Effect": "Allow",
            "Action": ["ec2:TerminateInstances"],
            "Resource": [f"arn:aws:ec2:us-west-2:123456789012:instance/{i}" for i in outputs["instance_ids"]],
        }
    ]


def _tags(inputs: dict[str, Any]) -> dict[str, str]:
    """Tags as a map: an Auto Scaling group lists them as {key, value, propagateAtLaunch}."""
    tags = inputs["tags"]
    return {t["key"]: t["value"] for t in tags} if isinstance(tags, list) else dict(tags)


@pytest.mark.parametrize(
    ("stack", "changes"), [("guanaco-65b", {}), ("llama70b-full-ft", MULTI_NODE)], ids=["group", "multi-node"]
)
def test_every_aws_resource_carries_the_expiry_tag(stack: str, changes: dict[str, Any]) -> None:
    mocks, outputs, config = _aws(stack, **changes)
    grouped = stack == "guanaco-65b"  # the other: two plain instances
    assert bool(mocks.of_type(AWS_GROUP)) is grouped and len(mocks.of_type(AWS_INSTANCE)) == (
        0 if grouped else 2
    )
    tagged = [r for r in mocks.resources if r.typ.startswith("aws:") and "tags" in r.inputs]
    assert tagged
    for resource in tagged:
        tags = _tags(resource.inputs)
        assert tags[TAG_EXPIRES_AT] == outputs["expires_at"], resource.typ
        assert tags["gpufit:managed"] == "true" and tags["gpufit:stack"] == "test"
        assert tags["gpufit:workload"] == config["gpufit:workload"]["name"]
    if stack == "guanaco-65b":
        group = mocks.one(AWS_GROUP).inputs
        assert all(t["propagateAtLaunch"] is True for t in group["tags"])
        specs = mocks.one(AWS_LAUNCH_TEMPLATE).inputs["tagSpecifications"]
        assert {s["resourceType"] for s in specs} == {"instance", "volume"}
        assert all(s["tags"][TAG_EXPIRES_AT] == outputs["expires_at"] for s in specs)


def test_ssh_only_from_listed_cidrs() -> None:
    mocks, _, _ = _aws("llama70b-chat", access={"ssh_cidrs": ["203.0.113.7/32", "2001:db8::/64"]})
    (rule,) = mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs["ingress"]
    assert (rule["fromPort"], rule["toPort"], rule["protocol"]) == (22, 22, "tcp")
    assert rule["cidrBlocks"] == ["203.0.113.7/32"] and rule["ipv6CidrBlocks"] == ["2001:db8::/64"]


def test_multi_node_plan_gets_placement_group_efa_and_one_deadline() -> None:
    mocks, outputs, config = _aws("llama70b-full-ft", **MULTI_NODE)
    expected = planned(config)
    assert expected.choice is not None and expected.choice.shape.nodes_per_replica == 2
    nodes = mocks.of_type(AWS_INSTANCE)
    assert len(nodes) == 2
    group = mocks.one("aws:ec2/placementGroup:PlacementGroup").inputs
    assert group["strategy"] == "cluster"
    assert all(n.inputs["placementGroup"] == "llama70b-sft-test-cluster" for n in nodes)
    # each node: its primary EFA (with ENA) made first, with an Elastic IP, and an EFA-only
    # interface on each of p5e.48xlarge's 31 other network cards, from the node's launch template
    enis = mocks.of_type("aws:ec2/networkInterface:NetworkInterface")
    assert len(enis) == 2 and all(e.inputs["interfaceType"] == "efa" for e in enis)
    eips = mocks.of_type("aws:ec2/eip:Eip")
    assert sorted(e.inputs["networkInterface"] for e in eips) == sorted(f"{e.name}-id" for e in enis)
    templates = {f"{t.name}-id": t.inputs for t in mocks.of_type(AWS_LAUNCH_TEMPLATE)}
    for node in nodes:
        assert "subnetId" not in node.inputs and "vpcSecurityGroupIds" not in node.inputs
        nics = templates[node.inputs["launchTemplate"]["id"]]["networkInterfaces"]
        assert len(nics) == 32
        assert (nics[0]["networkCardIndex"], nics[0]["deviceIndex"]) == (0, 0)
        assert nics[0]["networkInterfaceId"] in {f"{e.name}-id" for e in enis}
        assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics[1:]] == [
            (card, 1, "efa-only") for card in range(1, 32)
        ]
        assert all(n["securityGroups"] == ["llama70b-sft-test-sg-id"] for n in nics[1:])
    # one rule style on the group, all traffic in from and out to itself
    assert not mocks.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    sg = mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs
    every = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}
    assert [r for r in sg["ingress"] if r.get("self")] == [
        {"description": "all traffic from the job nodes (NCCL, EFA)", **every}
    ]
    egress = [r for r in sg["egress"] if r.get("self")]
    assert egress == [{"description": "all traffic to the job nodes (EFA)", **every}]
    leader_ip = "10.0.0."  # node 0's private IP in the mock
    worker = nodes[1].inputs["userData"]
    assert "torchrun --nnodes=2 --nproc-per-node=8" in file_named(worker, "/job.sh")
    assert str(settings(worker)["MASTER_ADDR"]).startswith(leader_ip)
    schedule = mocks.one("aws:scheduler/schedule:Schedule").inputs
    assert len(json.loads(schedule["target"]["input"])["InstanceIds"]) == 2
    bucket = mocks.one("aws:s3/bucket:Bucket").inputs
    assert bucket["forceDestroy"] is False  # storage.retain_bucket
    assert outputs["nodes"] == 2


def test_replicas_run_in_one_group_of_interchangeable_machines() -> None:
    mocks, _, config = _aws("llama8b-fp8")
    expected = planned(config)
    assert expected.choice is not None and expected.choice.shape.replicas > 1
    group = mocks.one(AWS_GROUP).inputs
    assert group["desiredCapacity"] == expected.choice.shape.instances == 6
    overrides = group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert [o["instanceType"] for o in overrides][:2] == ["g6e.xlarge", "g6e.2xlarge"]
    assert {o["weightedCapacity"] for o in overrides} == {"1"}  # a served replica per machine
    # an endpoint on spot keeps serving.on_demand_base replicas on-demand (default 1)
    distribution = group["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["onDemandBaseCapacity"] == 1 == expected.choice.cost.on_demand_base
    assert distribution["onDemandPercentageAboveBaseCapacity"] == 0
    assert not mocks.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert "torchrun" not in user_data(mocks.one(AWS_LAUNCH_TEMPLATE))


def test_refresh_never_raises_a_groups_capacity_back() -> None:
    """A finished replica lowers the desired capacity, the deadline sets it to 0: a later
    `pulumi up --refresh` must not put it back (and relaunch finished work)."""
    mocks = RecordingMocks()
    config = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")
    run_program(config, NOW, mocks=mocks)
    request = mocks.requests[(AWS_GROUP, "sdxl-batch-test-asg")]
    assert "desiredCapacity" in request.ignoreChanges
    assert "maxSize" not in request.ignoreChanges  # a re-planned maximum still applies


def test_a_type_offered_nowhere_in_the_region_is_left_out() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")
    fallbacks = [f.offer.instance.name for f in planned(config).fallbacks]
    assert fallbacks[0] == "g6e.48xlarge"
    NOT_OFFERED.add("g6e.48xlarge")
    try:
        mocks, outputs, _ = _aws("sdxl-batch")
    finally:
        NOT_OFFERED.clear()
    overrides = mocks.one(AWS_GROUP).inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    kept = [o["instanceType"] for o in overrides]
    assert "g6e.48xlarge" not in kept and "g6e.48xlarge" not in outputs["fallbacks"]
    assert outputs["fallbacks"] == fallbacks[1:] and kept[1:] == fallbacks[1:]


def test_no_type_offered_in_the_region_stops_before_any_resource() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    expected = planned(config)
    assert expected.choice is not None
    NOT_OFFERED.update(
        {expected.choice.offer.instance.machine_type, *(f.offer.instance.name for f in expected.fallbacks)}
    )
    mocks = RecordingMocks()
    try:
        message = r"none of the plan's zones \(use2-az1, use2-az2\) in us-east-2 offers p4d\.24xlarge"
        with pytest.raises(pulumi.RunError, match=message):
            run_program(config, NOW, mocks=mocks)
    finally:
        NOT_OFFERED.clear()
    assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []


def test_given_subnet_must_lie_where_the_types_are_offered() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    config["gpufit:subnetId"] = "subnet-0given"  # the mock puts it in zone a: offered
    mocks, _ = run_program(config, NOW)
    assert mocks.one(AWS_GROUP).inputs["vpcZoneIdentifiers"] == ["subnet-0given"]
    assert mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs["vpcId"] == "vpc-0given"


def test_pinned_deadline_from_config() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")
    config["gpufit:expiresAt"] = "2026-12-03T06:30:00Z"
    mocks, outputs = run_program(config, NOW)
    assert outputs["expires_at"] == "2026-12-03T06:30:00Z"
    assert mocks.one(AWS_GROUP_SCHEDULE).inputs["startTime"] == "2026-12-03T06:30:00Z"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"precision": "bf17"}, r"invalid workload spec:\n  gpufit:workload.precision: got 'bf17'"),
        (
            {
                "model": {"preset": "llama-3.1-405b"},
                "placement": {"clouds": ["aws"], "instance_types": ["g5.*"]},
            },
            r"nothing feasible.*\n  closest: aws g5\.",
        ),
        ({"budget": {"max_hourly_usd": 1}}, r"over budget.*\n  closest: aws p4d.24xlarge .*budget"),
    ],
)
def test_bad_input_fails_before_any_resource(change: dict[str, Any], message: str) -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **change}
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=message):
        run_program(config, NOW, mocks=mocks)
    assert mocks.resources == []


def test_pinned_deadline_must_be_valid() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")
    config["gpufit:expiresAt"] = "2026-12-01T00:00:00Z"  # before NOW
    with pytest.raises(pulumi.RunError, match="gpufit:expiresAt"):
        run_program(config, NOW)


class Silent(RecordingMocks):
    """EC2 gives no answer at all about offerings (an old provider, a mock)."""

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        if args.token.endswith("getInstanceTypeOfferings"):
            return {"id": "x"}
        return super().call(args)


def _unzoned(tmp_path: Path, *keys: OfferKey) -> str:
    """The embedded catalog with these region-level offers' zones not known (as in a catalog
    from before zones), written for ``gpufit:catalog``."""
    doc = json.loads(SNAPSHOT_FILE.read_text())
    cleared = 0
    for offer in doc["offers"]:
        if (offer["cloud"], offer["instance_type"], offer["region"], offer["market"]) in keys:
            assert offer["zone"] is None, offer
            offer["zones"] = []
            cleared += 1
    assert cleared == len(keys)
    path = tmp_path / "unzoned.json"
    path.write_text(json.dumps(doc))
    return str(path)


CHAT_CHOICE: OfferKey = ("aws", "p4d.24xlarge", "us-east-2", "on-demand")
"""llama70b-chat's choice: a region-level on-demand offer, known in use2-az1 and use2-az2."""


def test_no_offerings_answer_at_all_keeps_every_default_subnet(tmp_path: Path) -> None:
    """An empty answer means "offered nowhere" (the program stops); no answer at all (an old
    provider, a mock) falls back to every default subnet of the plan's zones (of the VPC when
    they are not known), and the group skips missing types."""
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    expected = planned(config)
    assert expected.choice is not None and expected.choice.offer.zones == ("use2-az1", "use2-az2")
    members = [expected.choice.offer.instance.name, *(f.offer.instance.name for f in expected.fallbacks)]
    mocks, outputs = run_program(config, NOW, mocks=Silent())
    group = mocks.one(AWS_GROUP).inputs
    assert group["vpcZoneIdentifiers"] == ["subnet-use2-az1", "subnet-use2-az2"]  # where it is known
    assert outputs["zones"] == ["use2-az1", "use2-az2"]
    overrides = group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert [o["instanceType"] for o in overrides] == members  # none left out: nothing is known
    config["gpufit:catalog"] = _unzoned(tmp_path, CHAT_CHOICE)
    mocks, outputs = run_program(config, NOW, mocks=Silent())
    group = mocks.one(AWS_GROUP).inputs
    assert group["vpcZoneIdentifiers"] == ["subnet-0a", "subnet-0b"]  # every default subnet
    assert outputs["zones"] == []


def test_an_offer_of_unknown_zones_spreads_over_every_zone_that_offers_it(tmp_path: Path) -> None:
    """A region-level offer whose zones the catalog does not know may launch in any zone of
    its region, still only where EC2 offers the type; offered nowhere, the program stops."""
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    config["gpufit:catalog"] = _unzoned(tmp_path, ("aws", "p4d.24xlarge", "us-east-2", "on-demand"))
    # the plan's fallback (p5.48xlarge, at the same TP) withheld from az4 as well
    WITHHELD.update({("p4d.24xlarge", "use2-az4"), ("p5.48xlarge", "use2-az4")})
    try:
        mocks, outputs = run_program(config, NOW)
    finally:
        WITHHELD.clear()
    offering = [az_id("us-east-2", n) for n in (1, 2, 3, 5, 6)]
    assert mocks.one(AWS_GROUP).inputs["vpcZoneIdentifiers"] == [f"subnet-{z}" for z in offering]
    assert outputs["zones"] == offering and outputs["region"] == "us-east-2"
    NOT_OFFERED.update({"p4d.24xlarge", "p5.48xlarge"})
    mocks = RecordingMocks()
    try:
        with pytest.raises(pulumi.RunError, match=r"no availability zone of us-east-2 offers p4d\.24xlarge"):
            run_program(config, NOW, mocks=mocks)
    finally:
        NOT_OFFERED.clear()
    assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []


# ------------------------------------------------------------------------------------- zones
# The mock EC2 offers every type in AZ IDs -az1 to -az6 of a region (tests withhold some), none
# in -az7 (BARREN_ZONE); a default subnet lies in every zone ("subnet-<AZ ID>"). The embedded
# catalog prices AWS spot per zone: llama8b-fp8 plans g6e.xlarge spot in use2-az3, its cheapest
# zone (not the first by AZ ID), with every fallback offered there.

FP8_ZONE = "use2-az3"
SDXL_SPOT: OfferKey = ("aws", "g6e.48xlarge", "us-east-2", "spot")
SDXL_EAST_2: dict[str, Any] = {
    "placement": {
        "clouds": ["aws"],
        "regions": ["us-east-2"],
        "instance_types": ["g6e.48xlarge", "g6.48xlarge", "p5*.48xlarge", "p4d.24xlarge"],
    }
}
"""sdxl-batch kept to us-east-2 and 8-GPU types: g6e.48xlarge spot is the choice, region-level
in the zoned snapshot unless a test splits it by zone (at lower prices)."""
E2 = ["use2-az1", "use2-az2", "use2-az3"]
BARREN = az_id("us-east-2", BARREN_ZONE)


def _zoned_run(
    tmp_path: Path,
    stack: str,
    mocks: RecordingMocks | None = None,
    config_changes: dict[str, Any] | None = None,
    workload_changes: dict[str, Any] | None = None,
    **zoned: Any,
) -> tuple[RecordingMocks, dict[str, Any]]:
    """Run a stack's program against the snapshot reshaped with zones (``tests.fakes.zoned``)."""
    config = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **(workload_changes or {})}
    config["gpufit:catalog"] = str(write_zoned(tmp_path / "zoned.json", **zoned))
    config.update(config_changes or {})
    return run_program(config, NOW, mocks=mocks)


def _zone_filters(mocks: RecordingMocks) -> list[dict[str, Any]]:
    subnets = [args for token, args in mocks.invokes if token == "aws:ec2/getSubnets:getSubnets"]
    return [f for args in subnets for f in args["filters"] if f["name"].startswith("availability-zone")]


def _no_resources(mocks: RecordingMocks) -> bool:
    return [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []


def test_a_zone_priced_plan_pins_its_fleet_to_that_zone() -> None:
    """The embedded catalog's own zone-specific choice: the group's only subnet is the default
    subnet of that AZ ID, and every fallback is one the plan found offered there."""
    mocks, outputs, config = _aws("llama8b-fp8")
    expected = planned(config)
    assert expected.choice is not None and expected.choice.offer.zone == FP8_ZONE
    assert {f.offer.zone for f in expected.fallbacks} == {FP8_ZONE}
    group = mocks.one(AWS_GROUP).inputs
    assert group["vpcZoneIdentifiers"] == [f"subnet-{FP8_ZONE}"]
    assert outputs["zones"] == [FP8_ZONE]
    assert _zone_filters(mocks) == [{"name": "availability-zone-id", "values": [FP8_ZONE]}]
    overrides = group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert [o["instanceType"] for o in overrides] == [
        expected.choice.offer.instance.machine_type,
        *(f.offer.instance.machine_type for f in expected.fallbacks),
    ]


def test_the_deployment_carries_the_plans_zone_and_zones() -> None:
    spec = load_spec_file("sdxl-batch", **SDXL_EAST_2)
    pinned = plan(
        spec, zoned_catalog(split={SDXL_SPOT: {"use2-az2": 0.9, "use2-az3": 1.0}}, zones={"us-east-2": E2})
    )
    d = deployment_from_plan(pinned, stack="s", project="p", created_at=NOW)
    assert (d.zone, d.zones, d.allowed_zones, d.pinned) == ("use2-az2", ("use2-az2",), ("use2-az2",), True)
    spread = plan(spec, zoned_catalog(zones={"us-east-2": E2}))
    d = deployment_from_plan(spread, stack="s", project="p", created_at=NOW)
    assert (d.zone, d.allowed_zones, d.pinned) == (None, tuple(E2), False)
    unknown = plan(spec, zoned_catalog(zones={"us-east-2": []}))
    d = deployment_from_plan(unknown, stack="s", project="p", created_at=NOW)
    assert (d.zone, d.allowed_zones, d.pinned) == (None, (), False)


def load_spec_file(stack: str, **workload_changes: Any) -> Any:
    workload = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"]
    return parse_spec({**workload, **workload_changes})


def test_a_zone_pinned_fleet_launches_only_in_its_zone(tmp_path: Path) -> None:
    """The plan's price is use2-az2's: the group's only subnet is the default subnet of that
    AZ ID, and every fallback in it is one the plan found offered there."""
    split = {SDXL_SPOT: {"use2-az2": 0.9, "use2-az1": 1.0}}
    mocks, outputs = _zoned_run(
        tmp_path, "sdxl-batch", workload_changes=SDXL_EAST_2, split=split, zones={"us-east-2": E2}
    )
    group = mocks.one(AWS_GROUP).inputs
    assert group["vpcZoneIdentifiers"] == ["subnet-use2-az2"]
    assert outputs["zones"] == ["use2-az2"]
    assert _zone_filters(mocks) == [{"name": "availability-zone-id", "values": ["use2-az2"]}]
    offerings = [a for t, a in mocks.invokes if t.endswith("getInstanceTypeOfferings")]
    assert [a["locationType"] for a in offerings] == ["availability-zone-id"]
    expected = plan(
        load_spec_file("sdxl-batch", **SDXL_EAST_2), zoned_catalog(split=split, zones={"us-east-2": E2})
    )
    overrides = group["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    assert [o["instanceType"] for o in overrides] == [
        "g6e.48xlarge",
        *(f.offer.instance.machine_type for f in expected.fallbacks),
    ]
    assert len(overrides) >= 3


def test_a_zone_pinned_fleet_whose_zone_offers_nothing_stops_before_any_resource() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama8b-fp8.yaml")
    expected = planned(config)
    assert expected.choice is not None and expected.choice.offer.zone == FP8_ZONE
    members = [expected.choice.offer.instance.name, *(f.offer.instance.name for f in expected.fallbacks)]
    WITHHELD.update((t, FP8_ZONE) for t in members)  # still offered in use2-az1, -az2, -az4 ...
    mocks = RecordingMocks()
    try:
        with pytest.raises(
            pulumi.RunError, match=r"none of the plan's zones \(use2-az3\) in us-east-2 offers"
        ):
            run_program(config, NOW, mocks=mocks)
    finally:
        WITHHELD.clear()
    assert _no_resources(mocks)


def test_a_region_level_fleet_keeps_to_the_offers_known_zones(tmp_path: Path) -> None:
    """Known in az2, az3 and az7, offered (per EC2) in az1 to az6: the group spreads over az2
    and az3."""
    known = ["use2-az2", "use2-az3", BARREN]
    mocks, outputs = _zoned_run(
        tmp_path, "sdxl-batch", workload_changes=SDXL_EAST_2, zones={"us-east-2": known}
    )
    assert mocks.one(AWS_GROUP).inputs["vpcZoneIdentifiers"] == ["subnet-use2-az2", "subnet-use2-az3"]
    assert outputs["zones"] == ["use2-az2", "use2-az3"]
    assert _zone_filters(mocks) == [{"name": "availability-zone-id", "values": ["use2-az2", "use2-az3"]}]


def test_a_given_subnet_outside_the_pinned_zone_is_refused() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama8b-fp8.yaml")
    config["gpufit:subnetId"] = "subnet-0given"  # the mock puts it in use2-az1
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"subnet-0given is in use2-az1, outside use2-az3"):
        run_program(config, NOW, mocks=mocks)
    assert _no_resources(mocks)


P5E_EAST_2: dict[str, Any] = {"placement": {"regions": ["us-east-2"], "instance_types": ["p5e.48xlarge"]}}
"""Two p5e.48xlarge nodes on spot in us-east-2: priced per zone, cheapest in use2-az3 (use2-az1
dearer)."""
P5EN_ON_DEMAND: dict[str, Any] = {
    "fault_tolerance": "none",
    "placement": {"regions": ["us-east-2"], "instance_types": ["p5en.48xlarge"]},
}
"""Two p5en.48xlarge nodes on demand in us-east-2: a region-level offer known in use2-az1 to -az3."""


def test_plain_instances_go_to_the_pinned_zone_or_the_first_offering_one() -> None:
    mocks, outputs, config = _aws("llama70b-full-ft", **P5E_EAST_2)
    expected = planned(config)
    assert expected.choice is not None and expected.choice.offer.zone == "use2-az3"
    enis = mocks.of_type("aws:ec2/networkInterface:NetworkInterface")
    assert len(enis) == 2 and {e.inputs["subnetId"] for e in enis} == {"subnet-use2-az3"}
    assert outputs["zone"] == "use2-az3"
    # a region-level plan: the first of its known zones (by AZ ID) that EC2 says offers the type
    WITHHELD.add(("p5en.48xlarge", "use2-az1"))
    try:
        mocks, outputs, config = _aws("llama70b-full-ft", **P5EN_ON_DEMAND)
    finally:
        WITHHELD.clear()
    expected = planned(config)
    assert expected.choice is not None and expected.choice.offer.zone is None
    assert expected.choice.offer.zones == tuple(E2) and expected.choice.shape.instances == 2
    enis = mocks.of_type("aws:ec2/networkInterface:NetworkInterface")
    assert len(enis) == 2 and {e.inputs["subnetId"] for e in enis} == {"subnet-use2-az2"}
    assert outputs["zone"] == "use2-az2"


def test_plain_instances_pinned_where_the_type_is_not_offered_stop_before_any_resource() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-full-ft.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **P5E_EAST_2}
    mocks = RecordingMocks()
    message = r"p5e\.48xlarge is not offered in use2-az3 .*use2-az1, use2-az2, use2-az4"
    WITHHELD.add(("p5e.48xlarge", "use2-az3"))
    try:
        with pytest.raises(pulumi.RunError, match=message):
            run_program(config, NOW, mocks=mocks)
    finally:
        WITHHELD.clear()
    assert _no_resources(mocks)


LB_ON_DEMAND: OfferKey = ("aws", "p5.4xlarge", "us-east-1", "on-demand")


def test_a_pinned_load_balanced_group_stays_in_its_zone_behind_a_two_zone_balancer(tmp_path: Path) -> None:
    """An ALB needs two zones: it spans the VPC's default subnets, while the group, and so
    every target, stays in the plan's zone (an ALB forwards across zones)."""
    split = {LB_ON_DEMAND: {"use1-az2": 1.0, "use1-az4": 1.1}}
    mocks, outputs = _zoned_run(tmp_path, "llama8b-lb", split=split)
    assert mocks.one(AWS_GROUP).inputs["vpcZoneIdentifiers"] == ["subnet-use1-az2"]
    assert outputs["zones"] == ["use1-az2"]
    assert mocks.one("aws:lb/loadBalancer:LoadBalancer").inputs["subnets"] == ["subnet-0a", "subnet-0b"]


def test_a_pinned_load_balanced_group_without_a_second_subnet_says_why(tmp_path: Path) -> None:
    class OneSubnet(RecordingMocks):
        def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
            answer = super().call(args)
            every_default = answer.get("ids") == ["subnet-0b", "subnet-0a"]
            if args.token == "aws:ec2/getSubnets:getSubnets" and every_default:
                answer = {"ids": ["subnet-0a"]}
            return answer

    mocks = OneSubnet()
    message = r"two zones; VPC vpc-0default has 1\. The group stays in use1-az2"
    with pytest.raises(pulumi.RunError, match=message):
        _zoned_run(tmp_path, "llama8b-lb", mocks, split={LB_ON_DEMAND: {"use1-az2": 1.0}})
    assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []
