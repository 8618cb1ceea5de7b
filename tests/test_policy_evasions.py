"""The policy pack against resources built to slip past it (issue 22, item 4): each test makes
the evasion and expects a violation."""

from __future__ import annotations

import base64
import gzip
from datetime import UTC, datetime
from typing import Any

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


# -- issue 25 review, finding 1: a rebalancer's plan must not price groups below their own size --

REBALANCED_MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
SPOT_A3 = {
    "machineType": "a3-highgpu-4g",
    "scheduling": {"provisioningModel": "SPOT", "preemptible": True},
}


def _rebalanced_stack(primary_target: int, units: int, names: tuple[str, ...] = ("g", "g-f1")) -> list[Any]:
    import json

    plan = {
        "region": "europe-north1",
        "units": units,
        "deadline": 2_000_000_000,
        "groups": [
            {"name": n, "weight": w, "machine_type": m, "accelerator": None, "gpus": g}
            for n, (w, m, g) in zip(names, [(4, "a3-highgpu-4g", 4), (1, "a3-highgpu-1g", 1)], strict=False)
        ],
    }
    return [
        ("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate", SPOT_A3, "europe-north1"),
        (REBALANCED_MIG, {"name": "g", "targetSize": primary_target}, "europe-north1"),
        (REBALANCED_MIG, {"name": "g-f1", "targetSize": 0}, "europe-north1"),
        ("gcp:workflows/workflow:Workflow", {"userEnvVars": {"GPUFIT_REBALANCE": json.dumps(plan)}}, None),
    ]


def _hourly(resources: list[Any]) -> float:
    from policy.gpufit_policies import check_stack_budget

    (line,) = [
        p
        for p in check_stack_budget(resources, PolicyConfig(now=CONFIG.now, max_hourly_usd=0.0))
        if "over the budget" in p
    ]
    return float(line.split("$")[1].split("/h")[0].replace(",", ""))


def test_a_rebalancer_plan_does_not_price_a_group_below_its_own_target_size() -> None:
    from policy.gpufit_policies import check_stack_budget

    honest = _hourly(_rebalanced_stack(1, 4))
    inflated = _rebalanced_stack(50, 4)
    # the group's own 50 VMs are priced (50 × 4 replicas at the dearest replica-hour) ...
    assert _hourly(inflated) >= 50 * honest / (4 + 4 - 1) * 4 - 0.01
    without_plan = [r for r in inflated if "workflow" not in r[0]]
    assert _hourly(inflated) >= _hourly(without_plan) - 0.01
    # ... and the plan is refused outright
    problems = check_stack_budget(inflated, PolicyConfig(now=CONFIG.now, max_hourly_usd=1e9))
    assert any("over the plan's units 4" in p for p in problems), problems


def test_a_rebalancer_plan_cannot_take_a_group_of_another_name_out_of_the_budget() -> None:
    from policy.gpufit_policies import check_stack_budget

    stack = _rebalanced_stack(1, 4, names=("g", "not-here"))
    problems = check_stack_budget(stack, PolicyConfig(now=CONFIG.now, max_hourly_usd=1e9))
    assert any("'not-here', not a managed instance group of this stack" in p for p in problems), problems


# --- review i26a #3: Capacity-Block machines are free only when a block of the stack backs them --

_P5 = {"instanceType": "p5.48xlarge", "instanceMarketOptions": {"marketType": "capacity-block"}}
_BLOCK_URN = "urn:pulumi:test::gpufit::aws:ec2/capacityBlockReservation:CapacityBlockReservation::b"
_LT_URN = "urn:pulumi:test::gpufit::aws:ec2/launchTemplate:LaunchTemplate::lt"


def _budget(resources: list[tuple[Any, ...]]) -> list[str]:
    from policy.gpufit_policies import check_stack_budget
    from policy.resources import PolicyConfig

    return check_stack_budget(
        resources, PolicyConfig(now=datetime(2026, 12, 4, 12, tzinfo=UTC), max_hourly_usd=1.0)
    )


def _block(fee: str) -> tuple[Any, ...]:
    tags = {"gpufit:block-fee-usd": fee, "gpufit:block-hours": "336"}
    return (
        "aws:ec2/capacityBlockReservation:CapacityBlockReservation",
        {"tags": tags},
        "us-east-1",
        _BLOCK_URN,
        {},
    )


def test_capacity_block_instances_no_block_backs_are_priced_on_demand() -> None:
    inst = ("aws:ec2/instance:Instance", _P5, "us-east-1")
    assert any("over the budget" in p for p in _budget([inst] * 8))


def test_a_block_fee_tag_below_the_reference_floor_is_not_believed() -> None:
    inst = (
        "aws:ec2/instance:Instance",
        _P5,
        "us-east-1",
        None,
        {"capacityReservationSpecification": [_BLOCK_URN]},
    )
    assert any("over the budget" in p for p in _budget([*[inst] * 8, _block("1")]))


def test_a_group_is_exempt_only_through_its_own_block_template() -> None:
    block_lt = (
        "aws:ec2/launchTemplate:LaunchTemplate",
        _P5,
        "us-east-1",
        _LT_URN,
        {"capacityReservationSpecification": [_BLOCK_URN]},
    )
    plain_lt = (
        "aws:ec2/launchTemplate:LaunchTemplate",
        {"instanceType": "p5.48xlarge"},
        "us-east-1",
        _LT_URN + "2",
        {},
    )
    group = {
        "maxSize": 64,
        "mixedInstancesPolicy": {
            "instancesDistribution": {"onDemandPercentageAboveBaseCapacity": 100},
            "launchTemplate": {"overrides": [{"instanceType": "p5.48xlarge"}]},
        },
    }
    on_demand = (
        "aws:autoscaling/group:Group",
        group,
        "us-east-1",
        None,
        {"mixedInstancesPolicy": [_LT_URN + "2"]},
    )
    assert any("over the budget" in p for p in _budget([block_lt, plain_lt, on_demand, _block("1000000")]))
    own = (
        "aws:autoscaling/group:Group",
        {**group, "maxSize": 1},
        "us-east-1",
        None,
        {"mixedInstancesPolicy": [_LT_URN]},
    )
    assert any("over the budget" in p for p in _budget([block_lt, own, _block("1")]))  # the floor, not $1


def test_the_block_floor_counts_every_machine_it_backs() -> None:
    """Two groups of 4 on one block: the floor is for all 8 machines, not the larger list."""
    from selector.capacity import reference_quote

    quote = reference_quote("p5.48xlarge", "us-east-1")
    assert quote is not None
    block_lt = (
        "aws:ec2/launchTemplate:LaunchTemplate",
        _P5,
        "us-east-1",
        _LT_URN,
        {"capacityReservationSpecification": [_BLOCK_URN]},
    )
    group = ("aws:autoscaling/group:Group", {"maxSize": 4}, "us-east-1", None, {"launchTemplate": [_LT_URN]})
    from policy.blocks import block_backing

    hourly, count, problems, backed = block_backing([block_lt, group, group, _block("1")])
    assert count == 1 and not problems and backed == {1, 2}
    assert hourly == pytest.approx(quote.rate_usd * 8 * 0.5)


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


# -- second review of issue 26 (review2-26): the budget where the rebalancer and resizes meet --

_T = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
_G = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"


def _a3_region() -> str:
    from selector.catalog import load_catalog

    regions = {
        o.region
        for o in load_catalog().offers
        if o.instance.name == "a3-highgpu-8g" and o.market == "on-demand"
    } & {o.region for o in load_catalog().offers if o.instance.name == "g2-standard-4" and o.market == "spot"}
    return sorted(regions)[0]


def _a3_stack(region: str) -> list[Any]:
    a3 = (
        _T,
        {"name": "t-a3", "machineType": "a3-highgpu-8g", "scheduling": {"provisioningModel": "STANDARD"}},
        region,
    )
    return [a3, (_G, {"name": "g", "targetSize": 0, "versions": [{"instanceTemplate": "t-a3"}]}, region)]


def test_a_rebalancer_plan_cannot_hide_a_group_a_scheduler_resizes() -> None:
    """A group at 0 that a Cloud Scheduler job resizes to 8 counts at 8 even when a rebalancer's
    plan names it (with 0 units): the plan is refused and the 8 VMs priced over the budget."""
    import json

    from policy.gpufit_policies import check_stack_budget

    region = _a3_region()
    uri = f"https://compute.googleapis.com/compute/v1/projects/p/regions/{region}/instanceGroupManagers/g/resize?size=8"
    job = ("gcp:cloudscheduler/job:Job", {"httpTarget": {"httpMethod": "POST", "uri": uri}}, region)
    plan = {
        "region": region,
        "units": 0,
        "groups": [{"name": "g", "machine_type": "a3-highgpu-8g", "weight": 1}],
    }
    flow = (
        "gcp:workflows/workflow:Workflow",
        {"userEnvVars": {"GPUFIT_REBALANCE": json.dumps(plan)}},
        region,
    )
    budget = PolicyConfig(now=CONFIG.now, max_hourly_usd=10.0)
    problems = check_stack_budget([*_a3_stack(region), job, flow], budget)
    assert any("over the plan's units 0" in p for p in problems), problems
    assert any("over the budget" in p for p in problems), problems


def test_a_gcp_group_is_priced_by_its_own_template_not_the_first_one() -> None:
    """A cheap L4 spot template listed first does not price 8 × a3-highgpu-8g on demand."""
    from policy.gpufit_policies import check_stack_budget

    region = _a3_region()
    l4 = (
        _T,
        {"name": "t-l4", "machineType": "g2-standard-4", "scheduling": {"provisioningModel": "SPOT"}},
        region,
    )
    a3, _ = _a3_stack(region)
    small = (_G, {"name": "s", "targetSize": 1, "versions": [{"instanceTemplate": "t-l4"}]}, region)
    big = (_G, {"name": "b", "targetSize": 8, "versions": [{"instanceTemplate": "t-a3"}]}, region)
    budget = PolicyConfig(now=CONFIG.now, max_hourly_usd=10.0)
    assert any("over the budget" in p for p in check_stack_budget([l4, a3, small, big], budget))
