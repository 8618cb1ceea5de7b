"""The policy pack's validators (policy/gpufit_policies.py), called directly: pulumi_policy is
not installed here and constructing a PolicyPack would start its gRPC server. gpufit's own
example stacks, run under mocks, must pass every guardrail."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from deployment import TAG_EXPIRES_AT, gcp_label_time, iso_utc
from policy import gpufit_policies as gp
from policy.gpufit_policies import (
    AWS_INSTANCE,
    GCP_INSTANCE,
    RESOURCE_VALIDATORS,
    STACK_VALIDATORS,
    PolicyConfig,
    check_disk_encryption,
    check_expiry,
    check_hourly_budget,
    check_imdsv2,
    check_no_open_ingress,
    check_private_buckets,
    check_stack,
    check_stack_budget,
    config_from,
    instance_offer,
)
from selector.catalog import load_catalog
from selector.select import plan
from selector.spec import parse_spec
from tests.pulumi_harness import ROOT, RecordingMocks, links, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)
EXPIRES = NOW + timedelta(hours=48)
CONFIG = PolicyConfig(now=NOW)
POLICY_DIR = ROOT / "policy"
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
SCHEDULE = "aws:scheduler/schedule:Schedule"


def aws_instance(**changes: Any) -> dict[str, Any]:
    """An AWS instance's props as gpufit's component sets them."""
    props: dict[str, Any] = {
        "instanceType": "p4d.24xlarge",
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 2,
        },
        "rootBlockDevice": {
            "volumeSize": 250,
            "volumeType": "gp3",
            "encrypted": True,
            "deleteOnTermination": True,
        },
        "tags": {"gpufit:managed": "true", TAG_EXPIRES_AT: iso_utc(EXPIRES)},
    }
    props.update(changes)
    return props


def gcp_instance(**changes: Any) -> dict[str, Any]:
    """A GCP VM's props as gpufit's component sets them."""
    props: dict[str, Any] = {
        "machineType": "a2-highgpu-2g",
        "zone": "us-central1-a",
        "labels": {"gpufit-managed": "true", "gpufit-expires-at": gcp_label_time(EXPIRES)},
        "scheduling": {
            "provisioningModel": "STANDARD",
            "preemptible": False,
            "instanceTerminationAction": "DELETE",
            "maxRunDuration": {"seconds": 48 * 3600},
        },
    }
    props.update(changes)
    return props


def schedule(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "scheduleExpression": f"at({iso_utc(EXPIRES + timedelta(minutes=1))[:-1]})",
        "scheduleExpressionTimezone": "UTC",
        "target": {"arn": gp.TERMINATE_TARGET, "roleArn": "arn:aws:iam::1:role/r", "input": "{}"},
    }
    props.update(changes)
    return props


def one(messages: list[str], *fragments: str) -> str:
    """The single violation, which must mention every fragment."""
    assert len(messages) == 1, messages
    for fragment in fragments:
        assert fragment in messages[0], (fragment, messages[0])
    return messages[0]


def frozen(value: Any) -> Any:
    """Read-only Mapping/tuple copies: the policy engine hands validators proxies, not dicts/lists."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    return value


# -- the pack's files ---------------------------------------------------------------------------


def _main_tree() -> ast.Module:
    return ast.parse((POLICY_DIR / "__main__.py").read_text())


def test_every_validator_is_listed_and_wired_into_the_pack() -> None:
    defined = {
        name
        for name, fn in inspect.getmembers(gp, inspect.isfunction)
        if name.startswith("check_")
        and fn.__module__ in (gp.__name__, "policy.ingress", "policy.coverage", "policy.budget")
    }
    listed = {fn.__name__ for fn in (*RESOURCE_VALIDATORS, *STACK_VALIDATORS)}
    assert defined == listed
    used = {node.id for node in ast.walk(_main_tree()) if isinstance(node, ast.Name)}
    assert listed <= used, listed - used


def _calls(tree: ast.Module) -> list[tuple[str, ast.Call]]:
    """(function name, call) for every call of a plain name."""
    return [
        (node.func.id, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]


def test_every_policy_in_the_pack_is_mandatory() -> None:
    calls = _calls(_main_tree())
    policies = [(n, c) for n, c in calls if n in ("ResourceValidationPolicy", "StackValidationPolicy")]
    assert {n for n, _ in policies} == {"ResourceValidationPolicy", "StackValidationPolicy"}
    for _, call in policies:
        level = {k.arg: k.value for k in call.keywords}["enforcement_level"]
        assert ast.unparse(level) == "EnforcementLevel.MANDATORY"
    (pack,) = [c for n, c in calls if n == "PolicyPack"]
    assert {k.arg: ast.unparse(k.value) for k in pack.keywords}["name"] == "'gpufit'"
    wired = [c for n, c in calls if n in ("resource_policy", "stack_policy")]
    assert len(wired) == len(RESOURCE_VALIDATORS) + len(STACK_VALIDATORS)


def test_validators_do_not_import_pulumi_policy() -> None:
    tree = ast.parse((POLICY_DIR / "gpufit_policies.py").read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.split(".")[0] in ("pulumi_policy", "pulumi") for m in modules), modules


def test_pack_project_files() -> None:
    project = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    requirements = (POLICY_DIR / "requirements.txt").read_text()
    assert re.search(r"^pulumi-policy==1\.21\.0 \\$", requirements, re.M)
    readme = (POLICY_DIR / "README.md").read_text()
    assert "--policy-pack-config" in readme and "protobuf" in readme


def test_constants_agree_with_the_components() -> None:
    from providers.aws.component import TERMINATE_TARGET

    assert gp.TAG_EXPIRES_AT == TAG_EXPIRES_AT
    assert gp.TERMINATE_TARGET == TERMINATE_TARGET
    moment = datetime(2026, 12, 4, 13, 5, 9, tzinfo=UTC)
    assert gp.parse_gcp_label_time(gcp_label_time(moment)) == moment
    assert gp.parse_iso(iso_utc(moment)) == moment


def test_config_from_policy_config() -> None:
    config = config_from({"max_hourly_usd": 60, "catalog": "c.json"}, now=NOW)
    assert config == PolicyConfig(now=NOW, max_hourly_usd=60.0, catalog="c.json")
    assert config_from({"now": "2027-01-01T00:00:00Z"}, now=NOW).now == datetime(2027, 1, 1, tzinfo=UTC)
    assert config_from({}, now=NOW) == CONFIG
    for bad in ({"max_hourly_usd": 0}, {"max_hourly_usd": True}, {"max_hourly_usd": "60"}, {"now": "soon"}):
        with pytest.raises(ValueError):
            config_from(bad, now=NOW)
    with pytest.raises(ValueError):
        PolicyConfig(now=datetime(2026, 12, 2))


# -- 1. expiry and cloud-side deadline ----------------------------------------------------------


def test_expiry_passes_gpufit_instances_and_ignores_other_types() -> None:
    assert check_expiry(AWS_INSTANCE, aws_instance(), CONFIG) == []
    assert check_expiry(GCP_INSTANCE, gcp_instance(), CONFIG) == []
    assert check_expiry(AWS_INSTANCE, aws_instance(tags={TAG_EXPIRES_AT: iso_utc(NOW)}), CONFIG) == []
    assert check_expiry("aws:s3/bucket:Bucket", {}, CONFIG) == []


@pytest.mark.parametrize(
    ("typ", "props", "fragment"),
    [
        (AWS_INSTANCE, aws_instance(tags={"gpufit:managed": "true"}), "missing the tag 'gpufit:expires-at'"),
        (AWS_INSTANCE, aws_instance(tags=None), "missing the tag"),
        (GCP_INSTANCE, gcp_instance(labels={}), "missing the label 'gpufit-expires-at'"),
        (AWS_INSTANCE, aws_instance(tags={TAG_EXPIRES_AT: "next tuesday"}), "malformed"),
        (AWS_INSTANCE, aws_instance(tags={TAG_EXPIRES_AT: "2026-12-04T13:00:00"}), "no time zone"),
        (GCP_INSTANCE, gcp_instance(labels={"gpufit-expires-at": iso_utc(EXPIRES)}), "malformed"),
        (GCP_INSTANCE, gcp_instance(labels={"gpufit-expires-at": "2026-13-04t13-00-00z"}), "malformed"),
        (AWS_INSTANCE, aws_instance(tags={TAG_EXPIRES_AT: "2026-12-02T11:59:59Z"}), "expired at"),
        (GCP_INSTANCE, gcp_instance(labels={"gpufit-expires-at": "2026-12-01t00-00-00z"}), "expired at"),
    ],
    ids=[
        "aws-missing",
        "aws-no-tags",
        "gcp-missing",
        "aws-garbage",
        "aws-no-zone",
        "gcp-unencoded",
        "gcp-bad-month",
        "aws-past",
        "gcp-past",
    ],
)
def test_expiry_violations(typ: str, props: dict[str, Any], fragment: str) -> None:
    one(check_expiry(typ, props, CONFIG), fragment)


def test_gcp_vm_needs_a_deleting_max_run_duration_within_its_label() -> None:
    base = gcp_instance()["scheduling"]
    missing = {k: v for k, v in base.items() if k != "maxRunDuration"}
    one(check_expiry(GCP_INSTANCE, gcp_instance(scheduling=missing), CONFIG), "maxRunDuration is not set")
    unscheduled = check_expiry(GCP_INSTANCE, gcp_instance(scheduling=None), CONFIG)
    assert len(unscheduled) == 2 and "maxRunDuration is not set" in unscheduled[0]
    zero = {**base, "maxRunDuration": {"seconds": 0}}
    one(check_expiry(GCP_INSTANCE, gcp_instance(scheduling=zero), CONFIG), "maxRunDuration is not set")
    stop = {**base, "instanceTerminationAction": "STOP"}
    one(check_expiry(GCP_INSTANCE, gcp_instance(scheduling=stop), CONFIG), "'STOP', not 'DELETE'")
    longer = {**base, "maxRunDuration": {"seconds": 72 * 3600}}
    one(check_expiry(GCP_INSTANCE, gcp_instance(scheduling=longer), CONFIG), "past the expiry label")
    slack = {**base, "maxRunDuration": {"seconds": 48 * 3600 + 600}}
    assert check_expiry(GCP_INSTANCE, gcp_instance(scheduling=slack), CONFIG) == []


def test_stack_with_aws_instances_needs_a_terminate_schedule() -> None:
    instances = [(AWS_INSTANCE, aws_instance()), (AWS_INSTANCE, aws_instance())]
    assert check_stack([*instances, (SCHEDULE, schedule())]) == []
    one(check_stack(instances), "2 AWS instance(s)", gp.TERMINATE_TARGET)
    other = schedule(target={"arn": "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"})
    one(check_stack([*instances, (SCHEDULE, other)]), "no enabled")
    one(check_stack([*instances, (SCHEDULE, schedule(state="DISABLED"))]), "DISABLED")
    assert check_stack([(GCP_INSTANCE, gcp_instance())]) == []  # GCP VMs carry their own deadline
    assert check_stack([]) == []


def test_terminate_schedule_must_fire_by_the_expiry() -> None:
    instance = (AWS_INSTANCE, aws_instance())
    late = schedule(scheduleExpression=f"at({iso_utc(EXPIRES + timedelta(hours=2))[:-1]})")
    one(check_stack([instance, (SCHEDULE, late)]), "fires at", "after the earliest instance expiry")
    # 09:00 in New York is 14:00 UTC, two hours past a 12:00 UTC expiry
    zoned = schedule(
        scheduleExpression="at(2026-12-04T09:00:00)", scheduleExpressionTimezone="America/New_York"
    )
    one(check_stack([instance, (SCHEDULE, zoned)]), "fires at")
    on_time = schedule(
        scheduleExpression="at(2026-12-04T07:00:00)", scheduleExpressionTimezone="America/New_York"
    )
    assert check_stack([instance, (SCHEDULE, on_time)]) == []
    assert check_stack([instance, (SCHEDULE, schedule(scheduleExpression="rate(1 hour)"))]) == []


# -- 2. hourly price within the budget ------------------------------------------------------------


def test_no_budget_passes_any_price() -> None:
    assert check_hourly_budget(AWS_INSTANCE, aws_instance(instanceType="p5.48xlarge"), CONFIG) == []
    assert check_hourly_budget(AWS_INSTANCE, aws_instance(instanceType="no.such"), CONFIG) == []
    assert check_stack_budget([(AWS_INSTANCE, aws_instance())] * 8, CONFIG) == []


def test_price_over_budget_names_the_price_and_the_budget() -> None:
    config = PolicyConfig(now=NOW, max_hourly_usd=20)
    message = one(check_hourly_budget(AWS_INSTANCE, aws_instance(), config, region="us-east-1"))
    assert message.startswith("aws p4d.24xlarge (on-demand, us-east-1) costs $21.9576/h")
    assert "over the budget max_hourly_usd $20.00/h" in message
    within = PolicyConfig(now=NOW, max_hourly_usd=22)
    assert check_hourly_budget(AWS_INSTANCE, aws_instance(), within, region="us-east-1") == []
    assert check_hourly_budget("aws:s3/bucket:Bucket", {}, config) == []


def test_price_follows_the_market_and_the_region() -> None:
    config = PolicyConfig(now=NOW, max_hourly_usd=1.0)
    spot = aws_instance(instanceType="g6e.xlarge", instanceMarketOptions={"marketType": "spot"})
    assert check_hourly_budget(AWS_INSTANCE, spot, config, region="us-east-2") == []  # $0.7518
    on_demand = aws_instance(instanceType="g6e.xlarge")
    one(check_hourly_budget(AWS_INSTANCE, on_demand, config, region="us-east-2"), "$1.8610/h", "on-demand")
    zoned = aws_instance(instanceType="g6e.xlarge", availabilityZone="us-east-2b")
    one(check_hourly_budget(AWS_INSTANCE, zoned, config), "us-east-2")
    gcp_spot = gcp_instance(scheduling={**gcp_instance()["scheduling"], "provisioningModel": "SPOT"})
    spot_offer = instance_offer(GCP_INSTANCE, gcp_spot, CONFIG)
    assert spot_offer is not None and (spot_offer.market, spot_offer.region) == ("spot", "us-central1")


def test_n1_price_counts_the_attached_gpus() -> None:
    config = PolicyConfig(now=NOW, max_hourly_usd=1.2)
    t4 = {"type": "nvidia-tesla-t4", "count": 1}
    n1 = gcp_instance(machineType="n1-standard-16", guestAccelerators=[t4])
    assert check_hourly_budget(GCP_INSTANCE, n1, config) == []  # $1.11 in us-central1
    four = gcp_instance(machineType="n1-standard-16", guestAccelerators=[{**t4, "count": 4}])
    one(
        check_hourly_budget(GCP_INSTANCE, four, config), "gcp n1-standard-16 + nvidia-tesla-t4x4", "$2.1600/h"
    )
    bare = gcp_instance(machineType="zones/us-central1-a/machineTypes/n1-standard-16")
    one(check_hourly_budget(GCP_INSTANCE, bare, config), "no on-demand price", "in us-central1")


def test_unpriced_instance_fails_when_a_budget_is_set() -> None:
    config = PolicyConfig(now=NOW, max_hourly_usd=100)
    one(check_hourly_budget(AWS_INSTANCE, aws_instance(instanceType="no.such"), config), "no on-demand price")
    wrong_region = aws_instance(instanceType="p4d.24xlarge")
    one(check_hourly_budget(AWS_INSTANCE, wrong_region, config, region="mars-north-1"), "in mars-north-1")


def test_stack_budget_counts_every_node() -> None:
    node = aws_instance(
        instanceType="g6e.xlarge",
        instanceMarketOptions={"marketType": "spot"},
        tags={**aws_instance()["tags"], "gpufit:zones": "use2-az3"},
    )
    # spot g6e.xlarge in use2-az3, the instance's gpufit:zones: $0.5299/h
    anywhere = aws_instance(instanceType="g6e.xlarge", instanceMarketOptions={"marketType": "spot"})
    # no zone known: the region's dearest zone, use2-az1's $0.5499/h
    cheap = PolicyConfig(now=NOW, max_hourly_usd=0.54)
    one(check_hourly_budget(AWS_INSTANCE, anywhere, cheap, "us-east-2"), "$0.5499/h")
    assert check_hourly_budget(AWS_INSTANCE, node, PolicyConfig(now=NOW, max_hourly_usd=1), "us-east-2") == []
    five = [(AWS_INSTANCE, node, "us-east-2")] * 5  # 5 × $0.5299 = $2.6495
    assert check_stack_budget(five, PolicyConfig(now=NOW, max_hourly_usd=2.6495)) == []
    message = one(check_stack_budget(five, PolicyConfig(now=NOW, max_hourly_usd=2)), "5 GPU instance(s)")
    assert "$2.6495/h together, over the budget max_hourly_usd $2.00/h" in message


# -- 3-6. IMDSv2, encryption, ingress, buckets ------------------------------------------------------


def test_imdsv2_required() -> None:
    assert check_imdsv2(AWS_INSTANCE, aws_instance(), CONFIG) == []
    optional = aws_instance(metadataOptions={"httpTokens": "optional"})
    one(check_imdsv2(AWS_INSTANCE, optional, CONFIG), "'optional'")
    one(check_imdsv2(AWS_INSTANCE, aws_instance(metadataOptions=None), CONFIG), "defaults to optional")
    assert check_imdsv2(GCP_INSTANCE, gcp_instance(), CONFIG) == []


def test_disks_encrypted() -> None:
    assert check_disk_encryption(AWS_INSTANCE, aws_instance(), CONFIG) == []
    plain_root = aws_instance(rootBlockDevice={"volumeSize": 100, "encrypted": False})
    one(check_disk_encryption(AWS_INSTANCE, plain_root, CONFIG), "rootBlockDevice")
    one(check_disk_encryption(AWS_INSTANCE, aws_instance(rootBlockDevice=None), CONFIG), "rootBlockDevice")
    ebs = aws_instance(
        ebsBlockDevices=[{"deviceName": "/dev/sdb", "encrypted": True}, {"deviceName": "/dev/sdc"}]
    )
    one(check_disk_encryption(AWS_INSTANCE, ebs, CONFIG), "ebsBlockDevices[1] (/dev/sdc)")
    one(check_disk_encryption("aws:ebs/volume:Volume", {"size": 100}, CONFIG), "EBS volume")
    one(check_disk_encryption("aws:ebs/volume:Volume", {"encrypted": False}, CONFIG), "EBS volume")
    assert check_disk_encryption("aws:ebs/volume:Volume", {"encrypted": True}, CONFIG) == []


@pytest.mark.parametrize(
    ("typ", "props", "fragment"),
    [
        (
            "aws:ec2/securityGroup:SecurityGroup",
            {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]},
            "ingress[0] admits 0.0.0.0/0 (ports tcp 22-22)",
        ),
        (
            "aws:ec2/securityGroup:SecurityGroup",
            {"ingress": [{"cidrBlocks": ["10.0.0.0/8"]}, {"ipv6CidrBlocks": ["::/0"]}]},
            "ingress[1] admits ::/0",
        ),
        ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", {"cidrIpv4": "0.0.0.0/0"}, "0.0.0.0/0"),
        ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", {"cidrIpv6": "::/0"}, "::/0"),
        (
            "aws:ec2/securityGroupRule:SecurityGroupRule",
            {
                "type": "ingress",
                "cidrBlocks": ["0.0.0.0/0"],
                "fromPort": 443,
                "toPort": 443,
                "protocol": "tcp",
            },
            "0.0.0.0/0",
        ),
        (
            "aws:ec2/securityGroupRule:SecurityGroupRule",
            {"type": "ingress", "ipv6CidrBlocks": ["::/0"]},
            "::/0",
        ),
        (
            "gcp:compute/firewall:Firewall",
            {"direction": "INGRESS", "sourceRanges": ["0.0.0.0/0"]},
            "0.0.0.0/0",
        ),
        (
            "gcp:compute/firewall:Firewall",
            {"allows": [{"protocol": "tcp"}], "sourceRanges": ["::/0"]},
            "::/0",
        ),
        ("gcp:compute/firewall:Firewall", {"direction": "INGRESS", "allows": [{}]}, "names no source"),
    ],
    ids=[
        "sg-v4",
        "sg-v6",
        "rule-v4",
        "rule-v6",
        "sgrule-v4",
        "sgrule-v6",
        "fw-v4",
        "fw-v6-default",
        "fw-no-src",
    ],
)
def test_open_ingress_violations(typ: str, props: dict[str, Any], fragment: str) -> None:
    one(check_no_open_ingress(typ, props, CONFIG), fragment)


def test_closed_ingress_passes() -> None:
    sg = {
        "ingress": [{"cidrBlocks": ["203.0.113.7/32"], "ipv6CidrBlocks": ["2001:db8::/64"]}],
        "egress": [{"cidrBlocks": ["0.0.0.0/0"]}],
    }
    assert check_no_open_ingress("aws:ec2/securityGroup:SecurityGroup", sg, CONFIG) == []
    egress = {"type": "egress", "cidrBlocks": ["0.0.0.0/0"]}
    assert check_no_open_ingress("aws:ec2/securityGroupRule:SecurityGroupRule", egress, CONFIG) == []
    fw = "gcp:compute/firewall:Firewall"
    assert (
        check_no_open_ingress(fw, {"direction": "EGRESS", "destinationRanges": ["0.0.0.0/0"]}, CONFIG) == []
    )
    deny = {"direction": "INGRESS", "denies": [{"protocol": "all"}], "sourceRanges": ["0.0.0.0/0"]}
    assert check_no_open_ingress(fw, deny, CONFIG) == []
    tags = {"direction": "INGRESS", "allows": [{"protocol": "tcp"}], "sourceTags": ["gpufit-x"]}
    assert check_no_open_ingress(fw, tags, CONFIG) == []
    iap = {"direction": "INGRESS", "sourceRanges": ["35.235.240.0/20"]}
    assert check_no_open_ingress(fw, iap, CONFIG) == []


def test_private_buckets() -> None:
    pab = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
    flags = dict.fromkeys(gp.PUBLIC_ACCESS_BLOCK_FLAGS, True)
    assert check_private_buckets(pab, flags, CONFIG) == []
    one(
        check_private_buckets(pab, {**flags, "restrictPublicBuckets": False}, CONFIG), "restrictPublicBuckets"
    )
    assert len(check_private_buckets(pab, {"bucket": "b"}, CONFIG)) == 4
    one(check_private_buckets("aws:s3/bucket:Bucket", {"acl": "public-read"}, CONFIG), "'public-read'")
    one(check_private_buckets("aws:s3/bucketAcl:BucketAcl", {"acl": "public-read-write"}, CONFIG), "public")
    assert check_private_buckets("aws:s3/bucket:Bucket", {"acl": "private"}, CONFIG) == []
    gcs = {"publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True}
    assert check_private_buckets("gcp:storage/bucket:Bucket", gcs, CONFIG) == []
    inherited = {**gcs, "publicAccessPrevention": "inherited"}
    one(check_private_buckets("gcp:storage/bucket:Bucket", inherited, CONFIG), "'inherited', not 'enforced'")
    fine_grained = {**gcs, "uniformBucketLevelAccess": False}
    one(check_private_buckets("gcp:storage/bucket:Bucket", fine_grained, CONFIG), "uniformBucketLevelAccess")
    member = "gcp:storage/bucketIAMMember:BucketIAMMember"
    for who in ("allUsers", "allAuthenticatedUsers"):
        one(check_private_buckets(member, {"member": who, "role": "roles/storage.objectViewer"}, CONFIG), who)
    sa = {"member": "serviceAccount:gf@p.iam.gserviceaccount.com", "role": "roles/storage.objectUser"}
    assert check_private_buckets(member, sa, CONFIG) == []
    binding = {"members": ["user:a@example.com", "allUsers"], "role": "roles/storage.objectViewer"}
    one(check_private_buckets("gcp:storage/bucketIAMBinding:BucketIAMBinding", binding, CONFIG), "allUsers")


def test_validators_accept_read_only_mappings_and_sequences() -> None:
    bad = frozen(
        aws_instance(
            metadataOptions={"httpTokens": "optional"},
            ebsBlockDevices=[{"deviceName": "/dev/sdb", "encrypted": False}],
        )
    )
    assert len(check_imdsv2(AWS_INSTANCE, bad, CONFIG)) == 1
    assert len(check_disk_encryption(AWS_INSTANCE, bad, CONFIG)) == 1
    sg = frozen({"ingress": [{"cidrBlocks": ["0.0.0.0/0"]}]})
    assert len(check_no_open_ingress("aws:ec2/securityGroup:SecurityGroup", sg, CONFIG)) == 1
    n1 = frozen(
        gcp_instance(
            machineType="n1-standard-16", guestAccelerators=[{"type": "nvidia-tesla-t4", "count": 4}]
        )
    )
    assert len(check_hourly_budget(GCP_INSTANCE, n1, PolicyConfig(now=NOW, max_hourly_usd=1))) == 1
    assert check_expiry(GCP_INSTANCE, frozen(gcp_instance()), CONFIG) == []


# -- gpufit's own stacks pass its own guardrails -------------------------------------------------------


def _stack_id(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def _all_violations(mocks: RecordingMocks, config: PolicyConfig) -> list[str]:
    regions = {
        r.name: r.inputs.get("region") for r in mocks.resources if r.typ.startswith("pulumi:providers:")
    }

    def region_of(provider: str | None) -> str | None:
        name = (provider or "").split("::")[-1].removesuffix("-id")
        return regions.get(name)

    found: list[str] = []
    for r in mocks.resources:
        for check in RESOURCE_VALIDATORS:
            if check is check_hourly_budget:
                messages = check_hourly_budget(r.typ, r.inputs, config, region=region_of(r.provider))
            else:
                messages = check(r.typ, r.inputs, config)
            found += [f"{check.__name__} {r.typ} {r.name}: {m}" for m in messages]
    stack = [(r.typ, r.inputs, region_of(r.provider), *links(mocks, r)) for r in mocks.resources]
    for stack_check in STACK_VALIDATORS:
        found += [f"{stack_check.__name__}: {m}" for m in stack_check(stack, config)]
    return found


GROUPS = ("aws:autoscaling/group:Group", "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager")


SPECS = sorted((ROOT / "tests" / "contracts" / "specs").glob("*.yaml"))


@pytest.mark.parametrize("spec_file", SPECS, ids=lambda p: p.stem)
def test_adversarial_stacks_pass_every_policy(spec_file: Path) -> None:
    """The contract tests' stacks (long names, several zones, EFA, load balancers, a 200-day
    GCP group, whose template has no termination time past Compute's 120 days) pass the pack,
    whose zones come from the space-separated gpufit:zones tag."""
    doc = yaml.safe_load(spec_file.read_text())
    if (doc.get("contract") or {}).get("expect") == "refused":
        pytest.skip("the plan refuses it: nothing is registered")
    mocks, _ = run_program(dict(doc["config"]), NOW, stack="dev")
    from policy.stack_config import policy_config

    plain = policy_config(doc)["gpufit-no-plain-http"]["allow_plain_http"]  # as the workflows pass it
    assert _all_violations(mocks, PolicyConfig(now=NOW, allow_plain_http=plain)) == []


@pytest.mark.parametrize("day", [0, 79, 81, 150, 199])
def test_a_200_day_gcp_stack_passes_on_every_day_of_its_life(day: int) -> None:
    """The template of a group whose deadline was beyond Compute's 120 days when it was made
    can never gain a termination time (it is immutable, and the property is ignored on later
    runs): the pack accepts it on every later day by its deadline-layer label, while the
    stack-level check still requires the group's Cloud Scheduler job."""
    doc = yaml.safe_load((ROOT / "tests" / "contracts" / "specs" / "gcp-serve-200-days.yaml").read_text())
    mocks, _ = run_program(dict(doc["config"]), NOW, stack="dev")
    template = mocks.one("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate").inputs
    assert template["labels"]["gpufit-deadline-layer"] == "scheduler"
    assert _all_violations(mocks, PolicyConfig(now=NOW + timedelta(days=day))) == []
    without_job = [r for r in mocks.resources if r.typ != "gcp:cloudscheduler/job:Job"]
    stack = [(r.typ, r.inputs, None) for r in without_job]
    found = [m for check in STACK_VALIDATORS for m in check(stack, PolicyConfig(now=NOW))]
    assert any("no Cloud Scheduler job resizing it to 0" in m for m in found), found


def test_a_template_without_a_deadline_or_the_scheduler_label_is_refused_within_reach() -> None:
    labels = {"gpufit-managed": "true", "gpufit-expires-at": gcp_label_time(NOW + timedelta(days=30))}
    props = {"labels": labels, "scheduling": {"instanceTerminationAction": "DELETE"}}
    template = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
    assert any("neither terminationTime" in m for m in check_expiry(template, props, PolicyConfig(now=NOW)))
    labelled = {**props, "labels": {**labels, "gpufit-deadline-layer": "scheduler"}}
    assert check_expiry(template, labelled, PolicyConfig(now=NOW)) == []


@pytest.mark.parametrize("stack_file", STACKS, ids=_stack_id)
def test_example_stack_passes_every_policy(stack_file: Path) -> None:
    config = stack_config(stack_file)
    mocks, outputs = run_program(config, NOW)
    planned = plan(parse_spec(config["gpufit:workload"]), load_catalog())
    assert planned.choice is not None
    instances = [r for r in mocks.resources if r.typ in (AWS_INSTANCE, GCP_INSTANCE)]
    groups = [r for r in mocks.resources if r.typ in GROUPS]
    if planned.choice.shape.nodes_per_replica > 1:
        assert len(instances) == planned.choice.shape.instances >= 1 and not groups
        # the tightest budget the plan allows: its own, else exactly what it costs an hour
        worst = planned.choice.cost.hourly_usd
    else:
        assert len(groups) == 1 and not instances
        # a group may launch any of its types: the budget must hold for the dearest fleet
        worst = max([planned.choice.cost.hourly_usd, *(f.cost.hourly_usd for f in planned.fallbacks)])
    own = (config["gpufit:workload"].get("budget") or {}).get("max_hourly_usd")
    from policy.stack_config import policy_config as stack_policy_config

    plain = stack_policy_config(yaml.safe_load(stack_file.read_text()))["gpufit-no-plain-http"]
    policy_config = PolicyConfig(
        now=NOW, max_hourly_usd=float(own or worst), allow_plain_http=plain["allow_plain_http"]
    )
    assert _all_violations(mocks, policy_config) == []
    region = outputs["region"]
    for instance in instances:  # the policy prices each instance at the offer the plan chose
        offer = instance_offer(instance.typ, instance.inputs, policy_config, region=region)
        assert offer is not None and offer.hourly_usd == planned.choice.offer.hourly_usd
    # and the same resources fail once the budget is a cent under one instance's (or the dearest
    # fleet's) hour
    cap = planned.choice.offer.hourly_usd if instances else worst
    under = PolicyConfig(now=NOW, max_hourly_usd=cap - 0.01)
    found = _all_violations(mocks, under)
    assert any(v.startswith("check_stack_budget") for v in found), found
    if instances:
        assert any(v.startswith("check_hourly_budget") for v in found)


def test_ssh_from_anywhere_opt_in_is_caught_by_the_ingress_policy() -> None:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    access = {"ssh_cidrs": ["0.0.0.0/0", "::/0"], "allow_ssh_from_anywhere": True}
    config["gpufit:workload"] = {**config["gpufit:workload"], "access": access}
    mocks, _ = run_program(config, NOW)
    found = _all_violations(mocks, PolicyConfig(now=NOW))
    assert found == [
        "check_no_open_ingress aws:ec2/securityGroup:SecurityGroup llama70b-chat-test-sg: "
        "ingress[0] admits 0.0.0.0/0 (ports tcp 22-22)",
        "check_no_open_ingress aws:ec2/securityGroup:SecurityGroup llama70b-chat-test-sg: "
        "ingress[0] admits ::/0 (ports tcp 22-22)",
    ]


# ---------------------------------------------------------------------------------- fleet groups

LT = gp.AWS_LAUNCH_TEMPLATE
ASG = gp.AWS_GROUP
GCP_TEMPLATE = gp.GCP_TEMPLATES[0]
MIG = gp.GCP_GROUPS[0]


def launch_template(**changes: Any) -> dict[str, Any]:
    """A launch template's props as gpufit's fleet sets them."""
    tags = {"gpufit:managed": "true", TAG_EXPIRES_AT: iso_utc(EXPIRES)}
    props: dict[str, Any] = {
        "instanceType": "g6e.48xlarge",
        "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required"},
        "blockDeviceMappings": [
            {"deviceName": "/dev/sda1", "ebs": {"volumeSize": 200, "volumeType": "gp3", "encrypted": "true"}}
        ],
        "tagSpecifications": [
            {"resourceType": "instance", "tags": tags},
            {"resourceType": "volume", "tags": tags},
        ],
        "tags": tags,
    }
    props.update(changes)
    return props


def group(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "name": "gpufit-w-s",
        "minSize": 0,
        "maxSize": 8,
        "desiredCapacity": 8,
        "mixedInstancesPolicy": {
            "launchTemplate": {
                "overrides": [
                    {"instanceType": "g6e.48xlarge", "weightedCapacity": "8"},
                    {"instanceType": "g6e.xlarge", "weightedCapacity": "1"},
                ]
            },
            "instancesDistribution": {"onDemandBaseCapacity": 0, "onDemandPercentageAboveBaseCapacity": 0},
        },
        "tags": [{"key": "gpufit:zones", "value": "use2-az1", "propagateAtLaunch": True}],
    }
    props.update(changes)
    return props


def to_zero(**changes: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "autoscalingGroupName": "gpufit-w-s",
        "minSize": 0,
        "maxSize": 0,
        "desiredCapacity": 0,
        "startTime": iso_utc(EXPIRES),
    }
    props.update(changes)
    return props


def test_launch_templates_are_checked_like_instances() -> None:
    assert check_imdsv2(LT, launch_template(), CONFIG) == []
    one(check_imdsv2(LT, launch_template(metadataOptions={}), CONFIG), "httpTokens")
    assert check_disk_encryption(LT, launch_template(), CONFIG) == []
    unencrypted = launch_template(
        blockDeviceMappings=[{"deviceName": "/dev/sda1", "ebs": {"encrypted": "false"}}]
    )
    one(check_disk_encryption(LT, unencrypted, CONFIG), "blockDeviceMappings[0]", "/dev/sda1")
    one(check_disk_encryption(LT, launch_template(blockDeviceMappings=[]), CONFIG), "AMI's default")
    assert check_expiry(LT, launch_template(), CONFIG) == []
    untagged = launch_template(tagSpecifications=[{"resourceType": "volume", "tags": {}}])
    one(check_expiry(LT, untagged, CONFIG), "tagSpecifications", TAG_EXPIRES_AT)


def test_gcp_templates_must_delete_their_vms_at_the_deadline() -> None:
    labels = {"gpufit-managed": "true", "gpufit-expires-at": gcp_label_time(EXPIRES)}
    good = {
        "labels": labels,
        "scheduling": {"instanceTerminationAction": "DELETE", "terminationTime": iso_utc(EXPIRES)},
    }
    assert check_expiry(GCP_TEMPLATE, good, CONFIG) == []
    late = {
        **good,
        "scheduling": {**good["scheduling"], "terminationTime": iso_utc(EXPIRES + timedelta(hours=1))},
    }
    one(check_expiry(GCP_TEMPLATE, late, CONFIG), "terminationTime", "past the expiry label")
    none = {**good, "scheduling": {"instanceTerminationAction": "DELETE"}}
    one(check_expiry(GCP_TEMPLATE, none, CONFIG), "neither terminationTime nor maxRunDuration")
    stop = {**good, "scheduling": {**good["scheduling"], "instanceTerminationAction": "STOP"}}
    one(check_expiry(GCP_TEMPLATE, stop, CONFIG), "'STOP'")


def test_every_group_is_scaled_to_zero_at_its_deadline() -> None:
    check = gp.check_fleet_deadline
    assert check([(LT, launch_template()), (ASG, group()), (gp.AWS_GROUP_SCHEDULE, to_zero())]) == []
    one(check([(LT, launch_template()), (ASG, group())]), "'gpufit-w-s'", "capacity to 0")
    one(check([(ASG, group()), (gp.AWS_GROUP_SCHEDULE, to_zero(maxSize=2))]), "capacity to 0")
    one(check([(ASG, group()), (gp.AWS_GROUP_SCHEDULE, to_zero(autoscalingGroupName="other"))]), "no ")
    late = to_zero(startTime=iso_utc(EXPIRES + timedelta(hours=2)))
    one(
        check([(LT, launch_template()), (ASG, group()), (gp.AWS_GROUP_SCHEDULE, late)]),
        "after its machines' expiry",
    )
    resize = {
        "httpTarget": {
            "uri": "https://compute.googleapis.com/compute/v1/projects/p/regions/r/instanceGroupManagers/m/resize?size=0"
        }
    }
    assert check([(MIG, {"name": "m"}), (gp.GCP_SCHEDULER_JOB, resize)]) == []
    one(check([(MIG, {"name": "m"})]), "'m'", "Cloud Scheduler")
    one(check([(MIG, {"name": "m"}), (gp.GCP_SCHEDULER_JOB, {**resize, "paused": True})]), "Cloud Scheduler")

    # evasions: a URL that only ends like the resize (another host, another group's path, a
    # GET, extra query parameters) stops nothing
    base = "https://compute.googleapis.com/compute/v1/projects/p/regions/r/instanceGroupManagers/m/resize"
    for uri in (
        "https://attacker.example/compute/v1/projects/p/regions/r/instanceGroupManagers/m/resize?size=0",
        "http://compute.googleapis.com/compute/v1/projects/p/regions/r/instanceGroupManagers/m/resize?size=0",
        "https://compute.googleapis.com.attacker.example/compute/v1/projects/p/regions/r/instanceGroupManagers/m/resize?size=0",
        "https://x@compute.googleapis.com/compute/v1/projects/p/regions/r/instanceGroupManagers/m/resize?size=0",
        "https://compute.googleapis.com/anything?u=/instanceGroupManagers/m/resize?size=0",
        "https://compute.googleapis.com/compute/v1/projects/p/zones/r-a/instanceGroupManagers/m/resize?size=0",
        "https://compute.googleapis.com/compute/v1/projects/p/regions/other/instanceGroupManagers/m/resize?size=0",
        base + "?size=0&size=5",
        base + "?size=1",
        base,
    ):
        job = {"httpTarget": {"uri": uri}}
        one(check([(MIG, {"name": "m", "region": "r"}), (gp.GCP_SCHEDULER_JOB, job)]), "Cloud Scheduler")
    get = {"httpTarget": {"uri": base + "?size=0", "httpMethod": "GET"}}
    one(check([(MIG, {"name": "m"}), (gp.GCP_SCHEDULER_JOB, get)]), "Cloud Scheduler")
    assert check([(MIG, {"name": "m", "region": "r"}), (gp.GCP_SCHEDULER_JOB, resize)]) == []


CAL_TEMPLATE = (
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
    {"machineType": "a3-highgpu-8g", "scheduling": {"provisioningModel": "RESERVATION_BOUND"}},
    "us-east4",
)
CAL_GROUP = (MIG, {"name": "g", "targetSize": 0, "distributionPolicyZones": ["us-east4-a"]}, "us-east4")
CAL_RESIZE = (
    "https://compute.googleapis.com/compute/v1/projects/p/regions/us-east4/instanceGroupManagers/g/resize"
)


def test_a_calendar_group_is_budgeted_at_the_vms_its_reservation_brings() -> None:
    """Review i26g must-fix 1: a group at target 0 resized to 8 by a Scheduler job at the
    reservation's start, or brought up by a future reservation of 8, costs 8 VMs an hour."""
    budget = PolicyConfig(now=NOW, max_hourly_usd=10.0)
    eight = (MIG, {**CAL_GROUP[1], "targetSize": 8}, "us-east4")
    at_eight = one(check_stack_budget([CAL_TEMPLATE, eight], budget), "over the budget")
    job = (
        gp.GCP_SCHEDULER_JOB,
        {"httpTarget": {"httpMethod": "POST", "uri": CAL_RESIZE + "?size=8"}},
        "us-east4",
    )
    assert one(check_stack_budget([CAL_TEMPLATE, CAL_GROUP, job], budget), "over the budget") == at_eight
    reservation = (
        "gcp:compute/futureReservation:FutureReservation",
        {
            "specificSkuProperties": {
                "totalCount": "8",
                "instanceProperties": {"machineType": "a3-highgpu-8g"},
            }
        },
        "us-east4",
    )
    assert (
        one(check_stack_budget([CAL_TEMPLATE, CAL_GROUP, reservation], budget), "over the budget") == at_eight
    )
    assert check_stack_budget([CAL_TEMPLATE, CAL_GROUP], budget) == []  # nothing brings VMs
    # a resize of another group, or the deadline's resize to 0, adds nothing
    other = (
        gp.GCP_SCHEDULER_JOB,
        {"httpTarget": {"uri": CAL_RESIZE.replace("/g/", "/h/") + "?size=8"}},
        None,
    )
    to_zero = (gp.GCP_SCHEDULER_JOB, {"httpTarget": {"uri": CAL_RESIZE + "?size=0"}}, None)
    assert check_stack_budget([CAL_TEMPLATE, CAL_GROUP, other, to_zero], budget) == []


@pytest.mark.parametrize("query", ["", "?size=", "?size=8&size=1", "?size=eight", "?size=-1"])
def test_a_scheduler_resize_the_pack_cannot_read_is_refused(query: str) -> None:
    job = (gp.GCP_SCHEDULER_JOB, {"httpTarget": {"uri": CAL_RESIZE + query}}, None)
    problems = check_stack_budget([CAL_TEMPLATE, CAL_GROUP, job], PolicyConfig(now=NOW, max_hourly_usd=1e6))
    one(problems, "'g'", "cannot read")


def test_a_group_is_budgeted_at_its_dearest_type() -> None:
    # spot in use2-az1, the group's gpufit:zones: g6e.48xlarge $4.6364/h × 1 (weight 8);
    # g6e.xlarge $0.5499/h × 8 = $4.3992/h
    worst, unpriced = gp.group_hourly(ASG, group(), [], CONFIG, "us-east-2")
    assert unpriced == [] and worst == pytest.approx(4.6364)
    overrides = group()["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    reordered = group(
        mixedInstancesPolicy={
            **group()["mixedInstancesPolicy"],
            "launchTemplate": {"overrides": overrides[::-1]},
        }
    )
    assert gp.group_hourly(ASG, reordered, [], CONFIG, "us-east-2") == (pytest.approx(4.6364), [])
    # without the tag the group may land in any zone: the dearest, use2-az2's $5.7758/h
    assert gp.group_hourly(ASG, group(tags=[]), [], CONFIG, "us-east-2") == (pytest.approx(5.7758), [])
    bigger = group(maxSize=16)  # g6e.48xlarge × 2 = $9.2728/h; g6e.xlarge × 16 = $8.7984/h
    assert gp.group_hourly(ASG, bigger, [], CONFIG, "us-east-2") == (pytest.approx(2 * 4.6364), [])
    assert check_stack_budget([(ASG, group(), "us-east-2")], PolicyConfig(now=NOW, max_hourly_usd=4.64)) == []
    over = check_stack_budget([(ASG, group(), "us-east-2")], PolicyConfig(now=NOW, max_hourly_usd=4.6))
    one(over, "cost up to $4.6364/h")
    odd = group(mixedInstancesPolicy={"launchTemplate": {"overrides": [{"instanceType": "x9.huge"}]}})
    one(check_stack_budget([(ASG, odd, "us-east-2")], PolicyConfig(now=NOW, max_hourly_usd=6.0)), "x9.huge")


def test_a_spot_groups_on_demand_base_is_budgeted_at_the_on_demand_price() -> None:
    """A spot endpoint keeping one replica on-demand (serving.on_demand_base): 8 one-GPU replicas
    on g6e.xlarge cost 1 × $1.861 on demand + 7 × $0.5499 spot; on g6e.48xlarge (weight 8) the
    base takes its one machine on demand, $30.13118/h."""
    based = group(
        mixedInstancesPolicy={
            **group()["mixedInstancesPolicy"],
            "instancesDistribution": {"onDemandBaseCapacity": 1, "onDemandPercentageAboveBaseCapacity": 0},
        }
    )
    worst, unpriced = gp.group_hourly(ASG, based, [], CONFIG, "us-east-2")
    assert unpriced == [] and worst == pytest.approx(30.13118)
    small = {
        **based,
        "mixedInstancesPolicy": {
            **based["mixedInstancesPolicy"],
            "launchTemplate": {"overrides": [{"instanceType": "g6e.xlarge", "weightedCapacity": "1"}]},
        },
    }
    assert gp.group_hourly(ASG, small, [], CONFIG, "us-east-2") == (pytest.approx(1.861 + 7 * 0.5499), [])
