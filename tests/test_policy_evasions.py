"""The policy pack against resources built to slip past it (issue 22, item 4): each test makes
the evasion and expects a violation."""

from __future__ import annotations

import base64
import gzip
from datetime import UTC, datetime

import pytest

from policy.gpufit_policies import (
    RESOURCE_VALIDATORS,
    PolicyConfig,
    check_backend_armor,
    check_bucket_access_blocks,
    check_known_compute,
    check_no_secrets_in_boot_data,
)

CONFIG = PolicyConfig(now=datetime(2026, 12, 4, tzinfo=UTC))

UNCHECKED_COMPUTE = [
    "aws:ec2/spotInstanceRequest:SpotInstanceRequest",
    "aws:ec2/spotFleetRequest:SpotFleetRequest",
    "aws:ec2/fleet:Fleet",
    "aws:ec2/launchConfiguration:LaunchConfiguration",
    "gcp:compute/instanceFromTemplate:InstanceFromTemplate",
    "gcp:compute/instanceFromMachineImage:InstanceFromMachineImage",
    "gcp:container/nodePool:NodePool",
    "gcp:tpu/v2Vm:V2Vm",
    "gcp:compute/futureVm:FutureVm",  # a type the provider might add: deny-by-default
]


@pytest.mark.parametrize("resource_type", UNCHECKED_COMPUTE)
def test_a_machine_through_a_type_the_pack_does_not_check_is_refused(resource_type: str) -> None:
    # a spot request with no expiry, IMDSv1, an unencrypted disk: nothing else would see it
    props = {
        "instanceType": "p5.48xlarge",
        "userData": "HF_TOKEN=hf_x",
        "metadataOptions": {"httpTokens": "optional"},
    }
    problems = [p for check in RESOURCE_VALIDATORS for p in check(resource_type, props, CONFIG)]
    assert any("cannot check" in p for p in problems), problems


@pytest.mark.parametrize(
    "resource_type",
    [
        "aws:ec2/instance:Instance",
        "aws:ec2/launchTemplate:LaunchTemplate",
        "aws:autoscaling/group:Group",
        "gcp:compute/instance:Instance",
        "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
        "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
        "gcp:compute/instanceIAMMember:InstanceIAMMember",
        "aws:ec2/securityGroup:SecurityGroup",
    ],
)
def test_types_the_pack_checks_or_that_make_no_machine_pass(resource_type: str) -> None:
    assert check_known_compute(resource_type, {}, CONFIG) == []


@pytest.mark.parametrize(
    "backend",
    ["gcp:compute/regionBackendService:RegionBackendService", "gcp:compute/backendService:BackendService"],
)
def test_a_gcp_backend_without_cloud_armor_is_refused(backend: str) -> None:
    for scheme in ("EXTERNAL_MANAGED", "EXTERNAL", None):
        props = {"loadBalancingScheme": scheme} if scheme else {}
        assert check_backend_armor(backend, props, CONFIG), scheme
        assert (
            check_backend_armor(
                backend, {**props, "securityPolicy": "projects/p/regions/r/securityPolicies/a"}, CONFIG
            )
            == []
        )
    assert check_backend_armor(backend, {"loadBalancingScheme": "INTERNAL_MANAGED"}, CONFIG) == []


TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
SCRIPT = f"#!/bin/bash\nexport HF_TOKEN={TOKEN}\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


SECRET_HIDEOUTS = [
    ("aws:ec2/instance:Instance", {"userDataBase64": _b64(SCRIPT.encode())}, "userDataBase64"),
    ("aws:ec2/instance:Instance", {"userDataBase64": _b64(gzip.compress(SCRIPT.encode()))}, "gzip user data"),
    (
        "aws:ec2/launchTemplate:LaunchTemplate",
        {"userData": _b64(gzip.compress(SCRIPT.encode()))},
        "gzip in LT",
    ),
    (
        "aws:ec2/launchTemplate:LaunchTemplate",
        {"userData": _b64(f"#!/bin/bash\necho {_b64(SCRIPT.encode())} | base64 -d | bash\n".encode())},
        "base64 inside the script",
    ),
    ("gcp:compute/instance:Instance", {"metadata": {"user-data": SCRIPT}}, "another metadata key"),
    ("gcp:compute/instance:Instance", {"metadata": {"env": _b64(SCRIPT.encode())}}, "base64 metadata"),
    (
        "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
        {"metadata": {"x": SCRIPT}},
        "template metadata",
    ),
    ("aws:ec2/securityGroup:SecurityGroup", {"tags": {"note": TOKEN}}, "a tag of any resource"),
    (
        "aws:ec2/launchTemplate:LaunchTemplate",
        {"tagSpecifications": [{"resourceType": "instance", "tags": {"t": TOKEN}}]},
        "LT tags",
    ),
    (
        "aws:autoscaling/group:Group",
        {"tags": [{"key": "k", "value": TOKEN, "propagateAtLaunch": True}]},
        "group tags",
    ),
    ("gcp:storage/bucket:Bucket", {"labels": {"k": TOKEN.lower()[:63]}}, "a label"),
]


@pytest.mark.parametrize(
    ("resource_type", "props", "where"), SECRET_HIDEOUTS, ids=[w for *_, w in SECRET_HIDEOUTS]
)
def test_a_secret_hidden_outside_the_startup_script_is_found(
    resource_type: str, props: dict[str, object], where: str
) -> None:
    assert check_no_secrets_in_boot_data(resource_type, props, CONFIG), where


def test_references_and_plain_text_without_secrets_pass() -> None:
    clean = "#!/bin/bash\nHF_TOKEN=$(aws secretsmanager get-secret-value --secret-id arn:x)\n"
    assert (
        check_no_secrets_in_boot_data(
            "aws:ec2/instance:Instance", {"userDataBase64": _b64(clean.encode())}, CONFIG
        )
        == []
    )
    assert (
        check_no_secrets_in_boot_data(
            "gcp:compute/instance:Instance", {"metadata": {"k": "v"}, "labels": {"a": "b"}}, CONFIG
        )
        == []
    )


PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
FLAGS = {
    "blockPublicAcls": True,
    "blockPublicPolicy": True,
    "ignorePublicAcls": True,
    "restrictPublicBuckets": True,
}


def test_a_bucket_without_a_public_access_block_is_refused() -> None:
    bucket = ("aws:s3/bucket:Bucket", {"bucket": "gpufit-ckpt-abc"})
    assert check_bucket_access_blocks([bucket, (PAB, {"bucket": "gpufit-ckpt-abc", **FLAGS})]) == []
    assert check_bucket_access_blocks([bucket])  # no block at all
    assert check_bucket_access_blocks([bucket, (PAB, {"bucket": "other", **FLAGS})])  # another bucket's
    assert check_bucket_access_blocks(
        [bucket, (PAB, {"bucket": "gpufit-ckpt-abc", **FLAGS, "blockPublicPolicy": False})]
    )
    v2 = ("aws:s3/bucketV2:BucketV2", {"bucket": "b2"})
    assert check_bucket_access_blocks([bucket, v2, (PAB, {"bucket": "gpufit-ckpt-abc", **FLAGS})])
    # names not known yet (a preview): one full block per unnamed bucket
    unnamed = ("aws:s3/bucket:Bucket", {"bucketPrefix": "gpufit-"})
    assert check_bucket_access_blocks([unnamed, (PAB, {**FLAGS})]) == []
    assert check_bucket_access_blocks([unnamed, unnamed, (PAB, {**FLAGS})])


def test_a_group_at_zero_resized_by_a_scheduler_job_does_not_escape_the_budget() -> None:
    """Review i26g must-fix 1: declaring a GPU group at target size 0 and bringing it to 16 VMs
    with a Cloud Scheduler resize (any host, zonal or regional path) is budgeted at 16."""
    from policy.gpufit_policies import GCP_SCHEDULER_JOB, check_stack_budget

    budget = PolicyConfig(now=CONFIG.now, max_hourly_usd=10.0)
    template = (
        "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
        {"machineType": "a3-highgpu-8g"},
        "us-east4",
    )
    group = (
        "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
        {"name": "quiet", "targetSize": 0},
        "us-east4",
    )
    assert check_stack_budget([template, group], budget) == []
    for uri in (
        "https://compute.googleapis.com/compute/v1/projects/p/regions/us-east4/instanceGroupManagers/quiet/resize?size=16",
        "https://compute.googleapis.com/compute/v1/projects/p/zones/us-east4-a/instanceGroupManagers/quiet/resize?size=16",
        "https://compute.googleapis.com:443/compute/v1/projects/p/regions/us-east4/instanceGroupManagers/quiet/resize?size=16",
    ):
        job = (GCP_SCHEDULER_JOB, {"httpTarget": {"httpMethod": "POST", "uri": uri}}, "us-east4")
        problems = check_stack_budget([template, group, job], budget)
        assert any("over the budget" in p for p in problems), (uri, problems)
