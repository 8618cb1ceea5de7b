"""The Pulumi program under mocks: every example stack provisions what `gpufit plan` chooses,
with the security defaults, spot settings, deadline and tags; bad input registers nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest

from providers.base import TAG_EXPIRES_AT, lifetime_hours
from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.spec import parse_spec
from tests.pulumi_harness import ROOT, RecordingMocks, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
AWS_INSTANCE = "aws:ec2/instance:Instance"
GCP_INSTANCE = "gcp:compute/instance:Instance"


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
    typ = AWS_INSTANCE if offer.cloud == "aws" else GCP_INSTANCE
    instances = mocks.of_type(typ)
    assert len(instances) == shape.instances
    key = "instanceType" if offer.cloud == "aws" else "machineType"
    assert {i.inputs[key] for i in instances} == {offer.instance.machine_type}
    assert outputs["instance_type"] == offer.instance.name
    assert (outputs["cloud"], outputs["region"], outputs["market"]) == (
        offer.cloud,
        offer.region,
        offer.market,
    )
    assert all(f"{offer.cloud}-{offer.region}" in (i.provider or "") for i in instances)
    expiry = NOW + timedelta(hours=lifetime_hours(expected))
    assert outputs["expires_at"] == expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert outputs["hourly_usd"] == pytest.approx(expected.choice.cost.hourly_usd, abs=1e-4)
    assert outputs["estimated_total_usd"] == pytest.approx(expected.choice.cost.total_usd, abs=0.01)
    assert {"instance_id", "zone", "bucket", "connect"} <= set(outputs)


def _aws(stack: str, **workload_changes: Any) -> tuple[RecordingMocks, dict[str, Any], dict[str, Any]]:
    config = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **workload_changes}
    mocks, outputs = run_program(config, NOW)
    return mocks, outputs, config


def test_aws_security_defaults() -> None:
    mocks, outputs, _ = _aws("llama70b-chat")
    inst = mocks.one(AWS_INSTANCE).inputs
    assert inst["metadataOptions"]["httpTokens"] == "required"
    root = inst["rootBlockDevice"]
    assert root["encrypted"] is True and root["volumeType"] == "gp3"
    assert root["volumeSize"] == 100 + 150  # OS image + 70.6B × 2 B of weights, rounded up to 10 GB
    sg = mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs
    assert sg["ingress"] == []  # SSM Session Manager, no inbound
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
    attach = mocks.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment").inputs
    assert attach["policyArn"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    assert outputs["connect"].startswith("aws ssm start-session --region us-east-1 --target ")


def test_aws_on_demand_for_fault_tolerance_none() -> None:
    mocks, _, _ = _aws("llama70b-chat")
    inst = mocks.one(AWS_INSTANCE).inputs
    assert "instanceMarketOptions" not in inst
    assert inst["instanceInitiatedShutdownBehavior"] == "terminate"


def test_aws_checkpointed_spot_is_persistent_and_stops() -> None:
    mocks, outputs, _ = _aws("guanaco-65b")
    inst = mocks.one(AWS_INSTANCE).inputs
    spot = inst["instanceMarketOptions"]
    assert spot["marketType"] == "spot"
    assert spot["spotOptions"] == {
        "spotInstanceType": "persistent",
        "instanceInterruptionBehavior": "stop",
        "validUntil": outputs["expires_at"],
    }
    assert "maxPrice" not in spot["spotOptions"]
    assert inst["instanceInitiatedShutdownBehavior"] == "stop"
    script = inst["userData"]
    assert "systemctl enable --now gpufit-boot.service" in script  # resumes at every boot
    assert "meta-data/spot/instance-action" in script and "sleep 5" in script
    assert "touch outputs/INTERRUPTED" in script  # the checkpoint hook
    assert "poweroff" in script and 'shutdown -h +"$minutes"' in script


def test_aws_stateless_spot_is_one_time_and_terminates() -> None:
    mocks, _, _ = _aws("sdxl-batch")
    inst = mocks.one(AWS_INSTANCE).inputs
    assert inst["instanceMarketOptions"]["spotOptions"] == {
        "spotInstanceType": "one-time",
        "instanceInterruptionBehavior": "terminate",
    }
    assert inst["instanceInitiatedShutdownBehavior"] == "terminate"


def test_aws_deadline_schedule_terminates_only_these_instances() -> None:
    mocks, outputs, _ = _aws("guanaco-65b")
    expires = datetime.fromisoformat(outputs["expires_at"].replace("Z", "+00:00"))
    assert expires == NOW + timedelta(hours=48)  # teardown.ttl
    schedule = mocks.one("aws:scheduler/schedule:Schedule").inputs
    assert schedule["scheduleExpression"] == "at(2026-12-04T12:01:00)"
    assert schedule["scheduleExpressionTimezone"] == "UTC"
    assert schedule["flexibleTimeWindow"] == {"mode": "OFF"}
    target = schedule["target"]
    assert target["arn"] == "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"
    assert json.loads(target["input"]) == {"InstanceIds": [outputs["instance_id"]]}
    roles = {r.name: r.inputs for r in mocks.of_type("aws:iam/role:Role")}
    trust = json.loads(roles["guanaco-65b-test-deadline-role"]["assumeRolePolicy"])["Statement"][0]
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
            "Resource": [f"arn:aws:ec2:us-east-2:123456789012:instance/{outputs['instance_id']}"],
        }
    ]


def test_every_aws_resource_carries_the_expiry_tag() -> None:
    mocks, outputs, _ = _aws("guanaco-65b")
    tagged = [r for r in mocks.resources if r.typ.startswith("aws:") and "tags" in r.inputs]
    assert tagged
    for resource in tagged:
        tags = resource.inputs["tags"]
        assert tags[TAG_EXPIRES_AT] == outputs["expires_at"], resource.typ
        assert tags["gpufit:managed"] == "true" and tags["gpufit:stack"] == "test"
        assert tags["gpufit:workload"] == "guanaco-65b"


def test_ssh_only_from_listed_cidrs() -> None:
    mocks, _, _ = _aws("llama70b-chat", access={"ssh_cidrs": ["203.0.113.7/32", "2001:db8::/64"]})
    (rule,) = mocks.one("aws:ec2/securityGroup:SecurityGroup").inputs["ingress"]
    assert (rule["fromPort"], rule["toPort"], rule["protocol"]) == (22, 22, "tcp")
    assert rule["cidrBlocks"] == ["203.0.113.7/32"] and rule["ipv6CidrBlocks"] == ["2001:db8::/64"]


def test_multi_node_plan_gets_placement_group_efa_and_one_deadline() -> None:
    mocks, outputs, config = _aws("llama70b-full-ft")
    expected = planned(config)
    assert expected.choice is not None and expected.choice.shape.nodes_per_replica == 2
    nodes = mocks.of_type(AWS_INSTANCE)
    assert len(nodes) == 2
    group = mocks.one("aws:ec2/placementGroup:PlacementGroup").inputs
    assert group["strategy"] == "cluster"
    assert all(n.inputs["placementGroup"] == "llama70b-sft-test-cluster" for n in nodes)
    enis = mocks.of_type("aws:ec2/networkInterface:NetworkInterface")
    assert len(enis) == 2 and all(e.inputs["interfaceType"] == "efa" for e in enis)
    eips = mocks.of_type("aws:ec2/eip:Eip")
    assert sorted(e.inputs["networkInterface"] for e in eips) == sorted(f"{e.name}-id" for e in enis)
    assert all("primaryNetworkInterface" in n.inputs and "subnetId" not in n.inputs for n in nodes)
    intra = mocks.one("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule").inputs
    assert intra["referencedSecurityGroupId"] == intra["securityGroupId"]  # only between the nodes
    leader_ip = "10.0.0."  # node 0's private IP in the mock
    worker = nodes[1].inputs["userData"]
    assert "torchrun --nnodes=2 --node-rank=1 --nproc-per-node=8" in worker
    assert f'GPUFIT_MASTER_ADDR="{leader_ip}' in worker
    schedule = mocks.one("aws:scheduler/schedule:Schedule").inputs
    assert len(json.loads(schedule["target"]["input"])["InstanceIds"]) == 2
    bucket = mocks.one("aws:s3/bucket:Bucket").inputs
    assert bucket["forceDestroy"] is False  # storage.retain_bucket
    assert outputs["nodes"] == 2


def test_replicas_are_independent_machines() -> None:
    mocks, _, config = _aws("llama8b-fp8")
    expected = planned(config)
    assert expected.choice is not None and expected.choice.shape.replicas > 1
    nodes = mocks.of_type(AWS_INSTANCE)
    assert len(nodes) == expected.choice.shape.instances
    assert not mocks.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert all("torchrun" not in n.inputs["userData"] for n in nodes)


def test_pinned_deadline_from_config() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")
    config["gpufit:expiresAt"] = "2026-12-03T06:30:00Z"
    mocks, outputs = run_program(config, NOW)
    assert outputs["expires_at"] == "2026-12-03T06:30:00Z"
    assert (
        mocks.one("aws:scheduler/schedule:Schedule").inputs["scheduleExpression"] == "at(2026-12-03T06:31:00)"
    )


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
