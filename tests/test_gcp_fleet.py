"""The GCP fleet under Pulumi's mock engine: single-node replicas run in a regional managed
instance group across the zones that offer the machine types, with instance flexibility over
the plan's same-template fallbacks, and a cloud-side resize to 0 at the deadline."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest

from cli.render import render_plan
from deployment import Deployment, FleetMember
from providers.gcp.fleet import GROUP_PERMISSIONS, cron_at, target_shape
from providers.gcp.fleet_placement import FleetPlacementError, machine_type_filter, place_members
from selector import report
from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.spec import parse_spec
from tests.fakes.zoned import OfferKey, write_zoned, zoned_catalog
from tests.machine.unpack import file_named, settings
from tests.pulumi_harness import ROOT, RecordingMocks, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
JOB = "gcp:cloudscheduler/job:Job"
ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
MEMBER = "gcp:projects/iAMMember:IAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"

BATCH = {
    "name": "sdxl-gcp",
    "task": "batch",
    "model": {"preset": "sdxl-base-1.0"},
    "precision": "fp16",
    "work": {"items": 2e4, "tflop_per_item": 60, "batch": 1},  # batch 8 of SDXL outgrows a T4
    "fault_tolerance": "stateless",
    "teardown": {"ttl": "12h"},
    # kept to N1 with attached T4s in us-east4 (elsewhere a G2 or A3 type, GPUs in the machine
    # type, is cheaper): a job on 4 T4s, with same-template N1 fallbacks
    "placement": {
        "clouds": ["gcp"],
        "regions": ["us-east4"],
        "instance_types": ["n1-*"],
        "gcp_instance_flexibility": True,
    },
    "job": {"command": "python generate.py --resume"},
}


def _run(workload: dict[str, Any]) -> tuple[RecordingMocks, dict[str, Any], Plan]:
    config = {"gcp:project": "my-project", "gpufit:workload": workload}
    mocks, outputs = run_program(config, NOW, stack="dev")
    return mocks, outputs, plan(parse_spec(workload), load_catalog())


@pytest.fixture(scope="module")
def serve() -> tuple[RecordingMocks, dict[str, Any], Plan]:
    config = stack_config(ROOT / "stacks" / "Pulumi.llama13b-gcp.yaml")
    return _run(config["gpufit:workload"])


@pytest.fixture(scope="module")
def batch() -> tuple[RecordingMocks, dict[str, Any], Plan]:
    return _run(BATCH)


def test_serving_replicas_run_in_a_regional_mig_across_the_offering_zones(serve: Any) -> None:
    mocks, outputs, expected = serve
    mig = mocks.one(MIG).inputs
    region = expected.choice.offer.region
    # the mock's zone -b offers no GPU machine type; -a and -c do
    assert mig["distributionPolicyZones"] == [f"{region}-a", f"{region}-c"]
    assert mig["distributionPolicyTargetShape"] == "BALANCED"
    assert mig["targetSize"] == expected.choice.shape.instances
    assert mig["region"] == region and mig["name"] == outputs["group"] == "gpufit-llama13b-gcp-dev"
    assert mig["updatePolicy"]["instanceRedistributionType"] == "NONE"
    assert mig["updatePolicy"]["maxUnavailableFixed"] == 2  # 0 or at least the zones, for a regional MIG
    # by default one machine type: Google does not confirm instance flexibility for GPU types
    assert expected.fallbacks == ()
    assert "instanceFlexibilityPolicy" not in mig
    assert mocks.one(TEMPLATE).inputs["machineType"] == "a2-highgpu-2g"
    planned = [expected.choice.offer.instance]
    # a refresh must not undo finished VMs' leaving, and a changed zone listing must not replace
    # the group (and delete its VMs)
    ignored = mocks.requests[(MIG, "llama13b-gcp-dev-mig")].ignoreChanges
    assert {"targetSize", "distributionPolicyZones"} <= set(ignored)
    assert not mocks.of_type("gcp:compute/instance:Instance")
    assert outputs["zones"] == mig["distributionPolicyZones"]
    zone_lookups = [a for t, a in mocks.invokes if t == "gcp:compute/getMachineTypes:getMachineTypes"]
    assert {a["zone"] for a in zone_lookups} == {f"{region}-a", f"{region}-b", f"{region}-c"}
    assert all(a["filter"] == machine_type_filter([it.machine_type for it in planned]) for a in zone_lookups)


def _primary(mocks: RecordingMocks) -> Any:
    """The choice's MIG (a batch's fallback groups are named ``<group>-f<n>``)."""
    (mig,) = [r for r in mocks.of_type(MIG) if not re.search(r"-f\d+$", str(r.inputs["name"]))]
    return mig


def _opted_in(**placement: Any) -> dict[str, Any]:
    workload = stack_config(ROOT / "stacks" / "Pulumi.llama13b-gcp.yaml")["gpufit:workload"]
    return {**workload, "placement": {**workload["placement"], **placement}}


def test_opted_in_bigger_vms_of_the_series_join_the_group_up_to_twice_the_plans_cost() -> None:
    """placement.gcp_instance_flexibility: bigger VMs of the choice's series run its one replica
    with GPUs idle; an unbudgeted on-demand service takes none costing more than 2× the plan
    (placement.max_fallback_cost_ratio raises it)."""
    mocks, _, expected = _run(_opted_in(gcp_instance_flexibility=True))
    planned = [expected.choice.offer.instance, *(f.offer.instance for f in expected.fallbacks)]
    assert [it.name for it in planned] == ["a2-highgpu-2g", "a2-highgpu-4g"]
    (bigger,) = expected.fallbacks
    assert bigger.idle_gpus == 2 and bigger.cost.total_usd <= 2 * expected.choice.cost.total_usd
    mig = mocks.one(MIG).inputs
    selections = sorted(mig["instanceFlexibilityPolicy"]["instanceSelections"], key=lambda s: s["rank"])
    assert [s["machineTypes"] for s in selections] == [[it.machine_type] for it in planned]
    text = render_plan(expected, NOW.date())
    assert "a2-highgpu-4g us-central1 on-demand $14.69/h (high; 2 GPUs idle, $" in text
    assert "= 2.0× the plan; instance flexibility (opted in: a2-highgpu with other GPU counts" in text
    wide = plan(
        parse_spec(_opted_in(gcp_instance_flexibility=True, max_fallback_cost_ratio=8)), load_catalog()
    )
    assert [f.offer.instance.name for f in wide.fallbacks] == ["a2-highgpu-4g", "a2-highgpu-8g"]
    assert wide.fallbacks[1].idle_gpus == 6


def test_a_gcp_plan_says_why_it_has_no_fallbacks_and_how_to_opt_in(serve: Any) -> None:
    _, _, expected = serve
    text = render_plan(expected, NOW.date())
    assert "fallbacks: none (a gcp managed instance group keeps one instance template" in text
    assert "placement.gcp_instance_flexibility: true takes any size of the series, unconfirmed" in text
    assert text.count("placement.gcp_instance_flexibility") == 1
    # a fault_tolerance: none service needs no breadth note; its Fleet line still says why
    assert expected.spec.fault_tolerance == "none" and expected.breadth_note is None
    assert report.plan_to_dict(expected, NOW.date())["choice"]["fleet_notes"] == []


def test_the_mig_is_resized_to_zero_at_the_deadline_from_the_cloud_side(serve: Any) -> None:
    mocks, outputs, _ = serve
    job = mocks.one(JOB).inputs
    expires = datetime.fromisoformat(outputs["expires_at"].replace("Z", "+00:00"))
    assert expires == NOW + timedelta(hours=336)
    assert job["schedule"] == f"{expires.minute} {expires.hour} {expires.day} {expires.month} *"
    assert job["timeZone"] == "Etc/UTC"
    target = job["httpTarget"]
    assert target["httpMethod"] == "POST"
    assert target["uri"] == (
        "https://compute.googleapis.com/compute/v1/projects/my-project/regions/us-central1/"
        "instanceGroupManagers/gpufit-llama13b-gcp-dev/resize?size=0"
    )
    deadline_sa = next(a for a in mocks.of_type(ACCOUNT) if a.name.endswith("deadline-sa"))
    email = f"{deadline_sa.inputs['accountId']}@test-project.iam.gserviceaccount.com"
    assert target["oauthToken"]["serviceAccountEmail"] == email
    assert target["oauthToken"]["scope"] == "https://www.googleapis.com/auth/cloud-platform"
    # the template deletes its VMs at the same absolute moment (a replacement gets no extra run)
    scheduling = mocks.one(TEMPLATE).inputs["scheduling"]
    assert scheduling["terminationTime"] == outputs["expires_at"]
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert scheduling["provisioningModel"] == "STANDARD" and scheduling["onHostMaintenance"] == "TERMINATE"


def test_the_group_may_be_updated_only_by_its_vms_and_its_deadline(serve: Any) -> None:
    mocks, _, _ = serve
    role = mocks.one(ROLE).inputs
    assert sorted(role["permissions"]) == sorted(GROUP_PERMISSIONS)
    assert role["project"] == "my-project"
    members = mocks.of_type(MEMBER)
    assert len(members) == 2
    name = "projects/my-project/regions/us-central1/instanceGroupManagers/gpufit-llama13b-gcp-dev"
    for member in members:
        assert member.inputs["condition"]["expression"] == f'resource.name == "{name}"'
        assert member.inputs["role"] == f"projects/my-project/roles/{role['roleId']}"
    accounts = {a.inputs["accountId"] for a in mocks.of_type(ACCOUNT)}
    granted = {m.inputs["member"].split(":")[1].split("@")[0] for m in members}
    assert granted == accounts  # the VMs' account and the deadline's, nobody else


def test_template_carries_the_secure_defaults_and_the_boot_script(serve: Any) -> None:
    mocks, outputs, _ = serve
    template = mocks.one(TEMPLATE).inputs
    assert template["machineType"] == "a2-highgpu-2g" and "guestAccelerators" not in template
    assert template["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableVtpm": True,
        "enableIntegrityMonitoring": True,
    }
    metadata = template["metadata"]
    assert metadata["enable-oslogin"] == "TRUE" and metadata["block-project-ssh-keys"] == "TRUE"
    found = settings(metadata["startup-script"])
    assert (found["GROUP"], found["REGION"], found["KIND"]) == (
        "gpufit-llama13b-gcp-dev",
        "us-central1",
        "serve",
    )
    assert metadata["shutdown-script"] == "#!/bin/bash\nexec /usr/local/sbin/gpufit-machine shutdown\n"
    assert template["labels"]["gpufit-expires-at"] == "2026-12-16t12-00-00z"
    (disk,) = template["disks"]
    assert disk["boot"] is True and disk["autoDelete"] is True
    assert outputs["connect"].startswith("gcloud compute ssh $(gcloud compute instance-groups managed")


def test_batch_fleet_falls_back_over_same_template_types_in_cost_order(batch: Any) -> None:
    mocks, outputs, expected = batch
    assert expected.choice.offer.instance.attached_accelerator == "nvidia-tesla-t4"
    assert len(expected.fallbacks) >= 2
    mig = _primary(mocks).inputs
    selections = mig["instanceFlexibilityPolicy"]["instanceSelections"]
    ranked = sorted(selections, key=lambda s: s["rank"])
    machine_types = [s["machineTypes"] for s in ranked]
    planned_types = [
        expected.choice.offer.instance.machine_type,
        *(f.offer.instance.machine_type for f in expected.fallbacks if f.realised != "group"),
    ]
    assert machine_types == [[t] for t in planned_types]
    assert [s["rank"] for s in ranked] == list(range(len(planned_types)))
    template = next(t.inputs for t in mocks.of_type(TEMPLATE) if t.name.endswith("-dev-tmpl"))
    assert template["guestAccelerators"] == [{"type": "nvidia-tesla-t4", "count": 4}]
    assert template["scheduling"]["provisioningModel"] == "SPOT"
    assert mig["distributionPolicyTargetShape"] == "ANY_SINGLE_ZONE"  # a multi-GPU job: one zone
    assert sorted(outputs["fallbacks"]) == sorted(f.offer.instance.name for f in expected.fallbacks)
    script = template["metadata"]["startup-script"]
    assert "python generate.py" in file_named(script, "/job.sh") and settings(script)["KIND"] == "job"


class NothingOffered(RecordingMocks):
    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        answer = super().call(args)
        if args.token == "gcp:compute/getMachineTypes:getMachineTypes":
            answer["machineTypes"] = []
        return answer


@pytest.mark.parametrize(
    ("zones", "message"),
    [
        # the snapshot knows the offer in every zone of us-east4: the plan's zones are those
        (None, r"none of the plan's zones \(us-east4-a, us-east4-b, us-east4-c\) offers n1-standard-4\+t4x4"),
        # an offer whose zones are not known: the plan's zones are the region's
        ([], r"no zone of us-east4 offers n1-standard-4\+t4x4"),
    ],
)
def test_no_zone_offering_the_types_stops_before_any_resource(
    tmp_path: Path, zones: list[str] | None, message: str
) -> None:
    mocks = NothingOffered()
    config: dict[str, Any] = {"gcp:project": "my-project", "gpufit:workload": BATCH}
    if zones is not None:
        config["gpufit:catalog"] = str(write_zoned(tmp_path / "zoned.json", only={BATCH_SPOT: zones}))
    with pytest.raises(pulumi.RunError, match=message):
        run_program(config, NOW, mocks=mocks)
    assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []


CHOICE = Deployment(
    stack="dev",
    project="gpufit",
    workload="w",
    task="batch",
    cloud="gcp",
    region="us-central1",
    zone=None,
    instance_type="g2-standard-8",
    machine_type="g2-standard-8",
    attached_accelerator=None,
    gpu="L4",
    gpu_count=1,
    nodes=2,
    market="spot",
    fault_tolerance="stateless",
    disk_gb=200,
    bucket_keep_days=7,
    retain_bucket=False,
    ssh_cidrs=(),
    created_at=NOW,
    expires_at=NOW + timedelta(hours=6, seconds=30),
    hourly_usd=1.0,
    estimated_total_usd=6.0,
    needs_node_interconnect=False,
    command="run",
    checkpoint_command=None,
    workdir="/w",
    gcp_instance_flexibility=True,  # the tests of a group of several types opt in
)


def _member(name: str, attached: str | None = None, gpus: int = 1) -> FleetMember:
    machine = name.split("+")[0]
    return FleetMember(name, machine, attached, gpus, 1, 1.0)


def test_place_members_keeps_plan_order_and_leaves_out_what_one_template_cannot_serve() -> None:
    d = dataclasses.replace(
        CHOICE,
        fleet=(
            _member("g2-standard-8"),
            _member("a3-ultragpu-8g"),  # Hyperdisk-only boot disk: another template
            _member("g2-standard-12"),
            _member("g2-standard-16"),
        ),
    )
    offered = {
        "us-central1-a": {"g2-standard-12", "a3-ultragpu-8g"},
        "us-central1-b": {"g2-standard-8", "g2-standard-12"},
        "us-central1-c": set(),
    }
    kept, left_out, zones = place_members(d, offered)
    assert [m.machine_type for m in kept] == ["g2-standard-8", "g2-standard-12"]
    assert left_out == (
        "a3-ultragpu-8g (needs another instance template)",
        "g2-standard-16 (offered in no zone of us-central1)",
    )
    assert zones == ("us-central1-a", "us-central1-b")
    with pytest.raises(FleetPlacementError, match="no zone of us-central1 offers g2-standard-8"):
        place_members(d, {"us-central1-a": set()})


def test_a_mig_counts_vms_so_only_a_batch_group_mixes_replicas_per_vm() -> None:
    """A MIG's target size is VMs and instance flexibility has no weights: a batch VM runs the
    replicas its own GPUs hold, so a bigger member stays in a batch group; a served model's
    launch is rendered for the choice's replicas per VM, so there it is left out, saying why."""
    bigger = dataclasses.replace(_member("g2-standard-48"), weighted_capacity=4)
    d = dataclasses.replace(CHOICE, fleet=(_member("g2-standard-8"), _member("g2-standard-12"), bigger))
    offered = {"us-central1-a": {"g2-standard-8", "g2-standard-12", "g2-standard-48"}}
    kept, left_out, _ = place_members(d, offered)
    assert [m.machine_type for m in kept] == ["g2-standard-8", "g2-standard-12", "g2-standard-48"]
    assert left_out == ()
    kept, left_out, _ = place_members(dataclasses.replace(d, task="serve"), offered)
    assert [m.machine_type for m in kept] == ["g2-standard-8", "g2-standard-12"]
    assert left_out == ("g2-standard-48 (holds 4 replicas, the choice 1: a MIG counts VMs)",)


def test_a_group_takes_other_types_only_opted_in_and_never_another_gpu_model() -> None:
    """Default: one machine type (instance flexibility for GPU types is unconfirmed). Opted in:
    an A100-80GB a2-ultragpu group still leaves out an H100 a3-highgpu (one GPU model)."""
    ultra = dataclasses.replace(_member("a2-ultragpu-1g"), gpu="A100-80GB")
    h100 = dataclasses.replace(_member("a3-highgpu-1g"), gpu="H100")
    ultra2 = dataclasses.replace(_member("a2-ultragpu-2g"), gpu="A100-80GB")
    d = dataclasses.replace(CHOICE, task="serve", gcp_instance_flexibility=False, fleet=(ultra, h100, ultra2))
    offered = {"us-central1-a": {"a2-ultragpu-1g", "a3-highgpu-1g", "a2-ultragpu-2g"}}
    kept, left_out, _ = place_members(d, offered)
    assert [m.machine_type for m in kept] == ["a2-ultragpu-1g"]
    assert all("placement.gcp_instance_flexibility: false" in why for why in left_out)
    kept, left_out, _ = place_members(dataclasses.replace(d, gcp_instance_flexibility=None), offered)
    assert [m.machine_type for m in kept] == ["a2-ultragpu-1g"]  # another GPU count: unconfirmed
    assert any("a2-ultragpu-2g (instance flexibility is unconfirmed for it" in why for why in left_out)
    kept, left_out, _ = place_members(dataclasses.replace(d, gcp_instance_flexibility=True), offered)
    assert [m.machine_type for m in kept] == ["a2-ultragpu-1g", "a2-ultragpu-2g"]
    assert left_out == (
        "a3-highgpu-1g (another GPU model, H100, than the choice's A100-80GB: a group serves one)",
    )


def test_the_planner_never_mixes_gpu_models_in_a_gcp_group() -> None:
    """Fixture 25's shape: phi-4 on a2-ultragpu-1g spot in us-east5, where a3-highgpu-1g (H100)
    was a fallback; opted in, only A100-80GB sizes remain. 15 tok/s per stream: the merged decode
    model (issue 24) gives one A100-80GB 18.1 tok/s at 16 streams, under the fixture's 20."""
    workload = {
        "name": "phi4",
        "task": "serve",
        "model": {"preset": "phi-4"},
        "precision": "bf16",
        "serving": {"context_tokens": 8192, "concurrency": 16, "tokens_per_s_per_stream": 15},
        "fault_tolerance": "stateless",
        "duration": "168h",
        "placement": {
            "clouds": ["gcp"],
            "regions": ["us-east5"],
            "instance_types": ["a2-ultragpu-*", "a3-highgpu-1g"],
            "gcp_instance_flexibility": True,
        },
    }
    planned = plan(parse_spec(workload), load_catalog())
    assert planned.choice is not None and planned.choice.offer.instance.gpu.name == "A100-80GB"
    assert planned.fallbacks
    in_group = [f for f in planned.fallbacks if f.realised != "group"]
    assert in_group and {f.offer.instance.gpu.name for f in in_group} == {"A100-80GB"}
    # issue 25: another GPU model runs the endpoint's launch in a MIG of its own, not this group
    assert all(f.realised == "group" for f in planned.fallbacks if f.offer.instance.gpu.name != "A100-80GB")
    assert "a3-highgpu-1g" in [c.offer.instance.name for c in planned.alternatives]


def test_target_shape_and_deadline_cron() -> None:
    assert target_shape(CHOICE) == "ANY_SINGLE_ZONE"  # two one-GPU VMs of a job: keep them together
    assert target_shape(dataclasses.replace(CHOICE, nodes=1)) == "BALANCED"
    assert target_shape(dataclasses.replace(CHOICE, task="serve")) == "BALANCED"
    assert cron_at(CHOICE) == "1 18 2 12 *"  # 18:00:30 rounds up to the next minute
    assert cron_at(dataclasses.replace(CHOICE, expires_at=NOW)) == "0 12 2 12 *"
    assert json.dumps(machine_type_filter(["b", "a", "b"])) == json.dumps('name eq "(a|b)"')


def test_no_machine_type_listing_at_all_spans_every_up_zone() -> None:
    class Silent(RecordingMocks):
        def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
            if args.token == "gcp:compute/getMachineTypes:getMachineTypes":
                return {"id": "x", "zone": args.args.get("zone", "")}
            return super().call(args)

    config = {"gcp:project": "my-project", "gpufit:workload": BATCH}
    mocks, _ = run_program(config, NOW, mocks=Silent())
    assert _primary(mocks).inputs["distributionPolicyZones"] == ["us-east4-a", "us-east4-b", "us-east4-c"]


# ------------------------------------------------------------------------------------- zones
# The mock's zone -b of a region offers no GPU machine type; -a and -c offer every one.

SERVE_ON_DEMAND: OfferKey = ("gcp", "a2-highgpu-2g", "us-central1", "on-demand")
BATCH_SPOT: OfferKey = ("gcp", "n1-standard-4+t4x4", "us-east4", "spot")
EAST4 = ["us-east4-a", "us-east4-b", "us-east4-c"]


def _zoned(
    tmp_path: Path, workload: dict[str, Any], mocks: RecordingMocks | None = None, **zoned: Any
) -> tuple[RecordingMocks, dict[str, Any], Plan]:
    config = {
        "gcp:project": "my-project",
        "gpufit:workload": workload,
        "gpufit:catalog": str(write_zoned(tmp_path / "zoned.json", **zoned)),
    }
    mocks, outputs = run_program(config, NOW, stack="dev", mocks=mocks)
    return mocks, outputs, plan(parse_spec(workload), zoned_catalog(**zoned))


def _lookups(mocks: RecordingMocks) -> list[str]:
    return sorted(a["zone"] for t, a in mocks.invokes if t == "gcp:compute/getMachineTypes:getMachineTypes")


def test_a_zone_pinned_mig_runs_in_its_zone_only(tmp_path: Path) -> None:
    """The plan's price is us-central1-c's: the MIG's one distribution zone is that zone, and
    a later re-plan into another zone must move the group (the zones are not ignored)."""
    workload = stack_config(ROOT / "stacks" / "Pulumi.llama13b-gcp.yaml")["gpufit:workload"]
    split = {SERVE_ON_DEMAND: {"us-central1-c": 0.9, "us-central1-a": 1.0}}
    mocks, outputs, expected = _zoned(tmp_path, workload, split=split)
    assert expected.choice is not None and expected.choice.offer.zone == "us-central1-c"
    mig = mocks.one(MIG).inputs
    assert mig["distributionPolicyZones"] == ["us-central1-c"] == outputs["zones"]
    assert mig["updatePolicy"]["maxUnavailableFixed"] == 1
    assert _lookups(mocks) == ["us-central1-c"]  # only the plan's zone is asked
    ignored = mocks.requests[(MIG, "llama13b-gcp-dev-mig")].ignoreChanges
    assert "targetSize" in ignored and "distributionPolicyZones" not in ignored


def test_a_zone_pinned_mig_falls_back_over_types_offered_in_its_zone(tmp_path: Path) -> None:
    only = {
        ("gcp", "n1-standard-8+t4x4", "us-east4", "spot"): ["us-east4-a", "us-east4-c"],
        ("gcp", "n1-standard-16+t4x4", "us-east4", "spot"): ["us-east4-c"],
    }
    split = {BATCH_SPOT: {"us-east4-a": 0.9, "us-east4-c": 1.0}}
    mocks, _, expected = _zoned(tmp_path, BATCH, split=split, zones={"us-east4": EAST4}, only=only)
    assert expected.choice is not None and expected.choice.offer.zone == "us-east4-a"
    fallbacks = [f.offer.instance.name for f in expected.fallbacks]
    assert "n1-standard-8+t4x4" in fallbacks and "n1-standard-16+t4x4" not in fallbacks
    mig = _primary(mocks).inputs
    assert mig["distributionPolicyZones"] == ["us-east4-a"]
    selections = sorted(mig["instanceFlexibilityPolicy"]["instanceSelections"], key=lambda s: s["rank"])
    assert [s["machineTypes"][0] for s in selections] == [
        "n1-standard-4",
        *(f.offer.instance.machine_type for f in expected.fallbacks if f.realised != "group"),
    ]


def test_a_region_level_mig_keeps_to_the_offers_known_zones(tmp_path: Path) -> None:
    """Known in -b and -c; the mock's -b lists no GPU machine type: the MIG spreads over -c,
    and (looked up afresh on each `pulumi up`) its zones stay ignored after creation."""
    mocks, outputs, expected = _zoned(tmp_path, BATCH, zones={"us-east4": ["us-east4-b", "us-east4-c"]})
    assert expected.choice is not None and expected.choice.offer.zone is None
    mig = _primary(mocks).inputs
    assert mig["distributionPolicyZones"] == ["us-east4-c"] == outputs["zones"]
    assert _lookups(mocks) == ["us-east4-b", "us-east4-c"]
    assert "distributionPolicyZones" in mocks.requests[(MIG, "sdxl-gcp-dev-mig")].ignoreChanges


@pytest.mark.parametrize(
    ("zone", "message"),
    [
        ("us-east4-b", r"none of the plan's zones \(us-east4-b\) offers n1-standard-4\+t4x4"),
        ("us-east4-z", r"no zone of us-east4 that the plan allows \(us-east4-z\) is UP"),
    ],
)
def test_a_pinned_zone_that_cannot_run_the_plan_stops_before_any_resource(
    tmp_path: Path, zone: str, message: str
) -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=message):
        _zoned(tmp_path, BATCH, mocks, split={BATCH_SPOT: {zone: 0.9}})
    assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []


def test_a_batch_group_takes_vms_of_every_size_of_its_series() -> None:
    """One MIG, one template, VMs of 1, 2, 4 or 8 H100s by rank, its target size the plan's
    VMs: each VM derives its replicas from its own GPUs (the boot script's type table)."""
    spec = ROOT / "tests" / "contracts" / "specs" / "gcp-batch-mixed-sizes.yaml"
    mocks, outputs, expected = _run(stack_config(spec)["gpufit:workload"])
    mig = mocks.one(MIG).inputs
    ranked = sorted(mig["instanceFlexibilityPolicy"]["instanceSelections"], key=lambda s: s["rank"])
    # the choice is the 4-GPU VM: a bigger one pays the same $/GPU-hour but its 26 min of setup
    # (engine image and weights at the boot disk's write rate, i24p) at a higher rate
    assert [s["machineTypes"] for s in ranked] == [
        ["a3-highgpu-4g"],
        ["a3-highgpu-2g"],
        ["a3-highgpu-8g"],
        ["a3-highgpu-1g"],
    ]
    assert mig["targetSize"] == expected.choice.shape.instances == 1
    assert outputs["fallbacks"] == ["a3-highgpu-2g", "a3-highgpu-8g", "a3-highgpu-1g"]
    template = mocks.one(TEMPLATE).inputs
    assert template["machineType"] == "a3-highgpu-4g" and "guestAccelerators" not in template
    script = template["metadata"]["startup-script"]
    # the per-type table each VM reads its TP (and planned GPUs) from: replicas = its GPUs ÷ TP
    table = settings(script)["TP_BY_TYPE"]
    assert sorted(str(row).split(":")[0] for row in table) == sorted(
        ["a3-highgpu-8g", "a3-highgpu-4g", "a3-highgpu-2g", "a3-highgpu-1g"]
    )
