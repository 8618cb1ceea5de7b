"""What each cloud's resources must be for the cloud to take them and for them to do their job:
the zones tag's form, security groups and EFA for multi-node jobs, names that fit and stay
unique per stack, the instance role's permissions, the image per instance family and its disk,
GCP's APIs, names, 120-day limit and a group's status (issue 20)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pulumi
import pytest

from deployment import TAG_ZONES, Deployment, deployment_from_plan, fitted_name, parse_zones_tag, zones_tag
from policy.pricing import resource_zones
from providers.aws.resources import bucket_prefix, check_disk
from providers.gcp.common import bucket_resource_name, resource_name, service_account_id
from providers.gcp.fleet import template_termination_time
from selector.catalog import load_catalog
from selector.select import plan
from selector.spec import parse_spec
from tests.contracts.runs import SPECS
from tests.pulumi_harness import ROOT, RecordingMocks, run_component, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LONG = "llama-3-1-70b-instruct-chat-eu-west-team"  # 40 characters, the spec's maximum


def _config(stack: str, **workload: Any) -> dict[str, Any]:
    config = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    config["gpufit:workload"] = {**config["gpufit:workload"], **workload}
    return config


def _deployment(stack: str, workload: str = LONG, **spec: Any) -> Deployment:
    config = _config("llama13b-gcp", name=workload, **spec)
    planned = plan(parse_spec(config["gpufit:workload"]), load_catalog())
    return deployment_from_plan(planned, stack=stack, project="gpufit", created_at=NOW)


# -- 1. the zones tag ---------------------------------------------------------------------------


def test_the_zones_tag_separates_zones_with_spaces_which_every_service_takes() -> None:
    mocks, _ = run_program(_config("llama70b-chat"), NOW)
    role = next(r for r in mocks.of_type("aws:iam/role:Role") if r.name.endswith("-role"))
    assert role.inputs["tags"][TAG_ZONES] == "use2-az1 use2-az2"
    assert (
        parse_zones_tag("use2-az1 use2-az2")
        == parse_zones_tag("use2-az1,use2-az2")
        == ("use2-az1", "use2-az2")
    )
    assert zones_tag(("a", "b")) == "a b"


@pytest.mark.parametrize("value", ["use1-az1 use1-az4", "use1-az1,use1-az4", "use1-az1, use1-az4"])
def test_the_policy_reads_the_zones_tag_old_and_new(value: str) -> None:
    tags = {TAG_ZONES: value}
    assert resource_zones("aws:ec2/instance:Instance", {"tags": tags}) == {"use1-az1", "use1-az4"}
    group = {"tags": [{"key": TAG_ZONES, "value": value, "propagateAtLaunch": True}]}
    assert resource_zones("aws:autoscaling/group:Group", group) == {"use1-az1", "use1-az4"}


# -- 5 and 9. names that fit and stay unique ------------------------------------------------------


def test_long_names_are_cut_with_a_digest_of_the_whole() -> None:
    staging, production = (_deployment(s) for s in ("staging", "production"))
    assert staging.name != production.name and len(staging.name) <= 40 >= len(production.name)
    assert staging.name == _deployment("staging").name  # stable from run to run
    assert staging.group_name != production.group_name
    assert service_account_id(staging) != service_account_id(production)
    short = _deployment("dev", workload="llama13b")
    assert short.name == "llama13b-dev"  # a name that fits is left as it is
    # a name that fits is only made DNS-safe, as before, so an existing stack keeps its resources
    assert _deployment("Prod", workload="llama13b").name == "llama13b-prod"
    assert _deployment("eu.prod", workload="llama13b").name == "llama13b-eu-prod"
    assert _deployment("Team_Prod", workload="llama13b").name == "llama13b-team-prod"
    assert fitted_name("abc", 10) == "abc" and len(fitted_name("a" * 50, 20)) == 20


def test_the_bucket_prefix_fits_terraforms_37_characters_in_s3_characters() -> None:
    for stack in ("dev", "llama70b-chat-production", "Team_Prod.eu"):
        prefix = bucket_prefix(_deployment(stack))
        assert len(prefix) <= 37 and prefix.startswith("gpufit-") and prefix.endswith("-")
        assert prefix.replace("-", "").isalnum() and prefix == prefix.lower()
    assert bucket_prefix(_deployment("dev", workload="llama13b")) == "gpufit-llama13b-dev-"


def test_gcp_resource_names_leave_room_for_pulumis_suffix() -> None:
    base = "g-" + "x" * 40
    assert len(resource_name(base, "intra-cluster")) + 8 <= 63
    assert resource_name("llama-dev", "net") == "llama-dev-net"
    assert "goog" not in bucket_resource_name("google-gemma-dev") and "g00g" not in bucket_resource_name(
        "g00gle-x"
    )
    assert bucket_resource_name("llama-dev") == "llama-dev-ckpt"


def test_two_stacks_of_one_long_workload_share_no_gcp_name() -> None:
    def names(stack: str) -> set[str]:
        config = {**_config("llama13b-gcp", name=LONG), "gcp:project": "p"}
        mocks, _ = run_program(config, NOW, stack=stack)
        found = set()
        for r in mocks.resources:
            if not r.typ.startswith("gcp:") or r.typ == "gcp:projects/service:Service":
                continue
            for key in ("name", "accountId", "roleId", "secretId", "baseInstanceName"):
                if r.inputs.get(key):
                    found.add(f"{key}={r.inputs[key]}")
            found.add(r.name)  # the Pulumi name, which autonamed resources are named after
        return found

    assert names("staging") & names("production") == set()


# -- 2, 3, 4, 6: the multi-node security group, EFA and the instance role ----------------------


def test_the_instance_role_may_open_sessions_and_use_its_bucket_only() -> None:
    mocks, _ = run_program(_config("guanaco-65b"), NOW)
    assert not mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    actions = {
        action
        for policy in mocks.of_type("aws:iam/rolePolicy:RolePolicy")
        if not policy.name.endswith("deadline-terminate")
        for statement in json.loads(policy.inputs["policy"])["Statement"]
        for action in statement["Action"]
    }
    assert not any(a.startswith(("ssm:Get", "ec2messages:", "s3:*", "kms:")) for a in actions)
    assert {"ssm:UpdateInstanceInformation", "ssmmessages:OpenDataChannel", "s3:GetObject"} <= actions


@pytest.mark.parametrize(
    ("machine", "cards"),
    [
        ("p4d.24xlarge", 4),
        ("p4de.24xlarge", 4),
        ("p5.48xlarge", 32),
        ("p5en.48xlarge", 16),
        ("p6-b200.48xlarge", 8),
    ],
)
def test_every_node_gets_an_efa_per_efa_card(machine: str, cards: int) -> None:
    spec = next(p for p in SPECS.glob("efa-*.yaml") if machine in p.read_text())
    config = dict(__import__("yaml").safe_load(spec.read_text())["config"])
    mocks, _ = run_program(config, NOW, stack="dev")
    templates = {f"{t.name}-id": t.inputs for t in mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    nodes = mocks.of_type("aws:ec2/instance:Instance")
    assert len(nodes) >= 2
    for node in nodes:
        nics = templates[node.inputs["launchTemplate"]["id"]]["networkInterfaces"]
        assert [n["networkCardIndex"] for n in nics] == list(range(cards))
        assert [n.get("interfaceType") for n in nics[1:]] == ["efa-only"] * (cards - 1)


# -- 7 and 8: the image per family and its disk ---------------------------------------------------


def test_arm64_types_boot_the_arm64_image() -> None:
    from providers.aws.resources import machine_image

    calls: list[dict[str, Any]] = []

    class Asked(RecordingMocks):
        def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
            if args.token == "aws:ec2/getAmi:getAmi":
                calls.append(dict(args.args))
            return super().call(args)

    d = dataclasses.replace(_deployment("dev", workload="x1"), cloud="aws", machine_type="g5g.16xlarge")
    run_component(lambda: {"id": machine_image(d, pulumi.InvokeOptions()).id}, Asked())
    filters = {f["name"]: f["values"] for f in calls[0]["filters"]}
    assert filters["architecture"] == ["arm64"] and "ARM64" in filters["name"][0]


def test_a_type_no_supported_image_runs_is_never_planned() -> None:
    workload = {
        **_config("llama70b-chat")["gpufit:workload"],
        "placement": {"instance_types": ["p3dn.24xlarge"]},
    }
    workload["precision"] = "fp16"
    workload["model"] = {"preset": "llama-3.1-8b"}
    result = plan(parse_spec(workload), load_catalog())
    assert result.choice is None and "image" in result.rejections
    assert "no AWS Deep Learning AMI" in result.rejection_examples["image"]
    guanaco = plan(parse_spec(_config("guanaco-65b")["gpufit:workload"]), load_catalog())
    assert not any(f.offer.instance.name.startswith("p3") for f in guanaco.fallbacks)


def test_a_disk_smaller_than_the_images_snapshot_is_refused_in_one_line() -> None:
    mocks = RecordingMocks()
    with pytest.raises(
        pulumi.RunError, match=r"^storage\.disk_gb 50 is smaller than the root snapshot .* \(75 GB\)"
    ):
        run_program(_config("llama70b-chat", storage={"disk_gb": 50}), NOW, mocks=mocks)
    assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []

    mapping = SimpleNamespace(device_name="/dev/sda1", ebs={"volume_size": "75"})
    ami = SimpleNamespace(id="ami-1", root_device_name="/dev/sda1", block_device_mappings=[mapping])
    d = _deployment("dev", workload="x1")
    check_disk(dataclasses.replace(d, disk_gb=75), ami)  # equal is enough


# -- 11, 12, 14: GCP's 120 days, its APIs and a group's status -------------------------------------


def test_a_deadline_past_120_days_leaves_the_scheduler_job_as_the_groups_cloud_side_layer() -> None:
    d = _deployment("dev", workload="x1")
    assert template_termination_time(d) == "2026-12-16T12:00:00Z"  # 336 h
    far = dataclasses.replace(d, expires_at=NOW + timedelta(days=200))
    assert template_termination_time(far) is None
    config = __import__("yaml").safe_load((SPECS / "gcp-serve-200-days.yaml").read_text())["config"]
    mocks, outputs = run_program(config, NOW, stack="dev")
    template = mocks.one("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate").inputs
    assert "terminationTime" not in template["scheduling"]
    # an on-demand (STANDARD) VM without a run-time limit carries no termination action (gcp.standard)
    assert template["scheduling"]["provisioningModel"] == "STANDARD"
    assert "instanceTerminationAction" not in template["scheduling"]
    job = mocks.one("gcp:cloudscheduler/job:Job").inputs
    assert job["httpTarget"]["uri"].endswith("/resize?size=0")
    assert outputs["deadline_layers"] == "Cloud Scheduler resize to 0, in-VM stop, reap"


def test_the_stack_enables_the_apis_it_uses_and_waits_for_them() -> None:
    mocks, outputs = run_program(
        {**_config("llama8b-lb", placement={"clouds": ["gcp"]}), "gcp:project": "p"}, NOW
    )
    services = {r.inputs["service"]: r for r in mocks.of_type("gcp:projects/service:Service")}
    assert set(services) == {
        "compute.googleapis.com",
        "iam.googleapis.com",
        "storage.googleapis.com",
        "cloudresourcemanager.googleapis.com",
        "cloudscheduler.googleapis.com",
        "secretmanager.googleapis.com",
    }
    assert all(s.inputs["disableOnDestroy"] is False for s in services.values())
    # and a group's status, with the command that says why it has fewer VMs than asked
    assert outputs["activity"].startswith("gcloud compute instance-groups managed list-errors")
    assert outputs["group_status"][0]["is_stable"] is False


def test_an_aws_group_says_where_to_read_why_it_is_empty() -> None:
    _, outputs = run_program(_config("sdxl-batch"), NOW)
    assert outputs["activity"].startswith("aws autoscaling describe-scaling-activities")
