"""Issue 26, AWS side: a fleet larger than its reservation split across the reservation and
on-demand, machines confined to the reservation's or block's Availability Zone, the live
offering locked into the stack, capacity-block pricing in the policy pack."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.spec import SpecError, parse_spec
from tests.contracts.aws_model import problems
from tests.pulumi_harness import run_program

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "capacity"
TODAY = date(2026, 12, 4)
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ODCR = "cr-0123456789abcdef0"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
GROUP = "aws:autoscaling/group:Group"


def _spec(path: Path) -> dict[str, Any]:
    return dict(json.loads(json.dumps(yaml.safe_load(path.read_text()), default=str)))


def _plan(raw: dict[str, Any]) -> Plan:
    return plan(parse_spec(raw), load_catalog(), today=TODAY)


def _multi_node(overflow: bool, zone: str | None = None) -> dict[str, Any]:
    """A 70B full fine-tune (4 × p5.48xlarge, one replica over four nodes) on a 1-machine ODCR."""
    raw = _spec(FIXTURES / "multinode-70b-full-ft.yaml")
    held: dict[str, Any] = {"id": ODCR, "cloud": "aws", "instance_type": "p5.48xlarge", "count": 1}
    if zone is not None:
        held["zone"] = zone
    raw["capacity"] = {"reservation": {**held, "region": "us-east-1"}, "overflow": overflow}
    return raw


def _serving_group(overflow: bool = True) -> dict[str, Any]:
    """An endpoint of several single-node p4d replicas on a 1-machine ODCR (an Auto Scaling group)."""
    raw = _spec(FIXTURES / "reservation-aws-odcr.yaml")
    raw["serving"] = {"context_tokens": 8192, "tokens_per_s_total": 100}
    raw["placement"]["instance_types"] = ["p4d.*"]
    raw["capacity"]["reservation"]["count"] = 1
    raw["capacity"]["overflow"] = overflow
    return raw


# --- 1. overflow: the reservation's machines at $0, the rest on-demand ------------------------


def test_overflow_prices_the_reserved_machines_at_zero_and_the_rest_on_demand() -> None:
    result = _plan(_multi_node(overflow=True))
    choice = result.choice
    assert choice is not None and choice.offer.market == "reservation"
    assert choice.shape.instances == 4
    on_demand = load_catalog().on_demand_prices[("aws", "p5.48xlarge", "us-east-1")]
    assert choice.cost.hourly_usd == pytest.approx(3 * on_demand)
    from selector.capacity import capacity_to_dict

    doc = capacity_to_dict(choice.offer, choice.shape.instances)
    assert doc["reservation"] == {
        "id": ODCR,
        "reserved": 1,
        "used": 1,
        "overflow_on_demand": 3,
        "affinity": "specific",
    }
    assert "3 more on-demand (capacity.overflow)" in str(doc["summary"])


def test_multi_node_overflow_targets_the_reservation_with_exactly_its_count() -> None:
    mocks, _ = run_program({"gpufit:workload": _multi_node(overflow=True)}, NOW)
    instances = mocks.of_type(INSTANCE)
    assert len(instances) == 4
    specs = [r.inputs.get("capacityReservationSpecification") for r in instances]
    targeted = [
        s for s in specs if s and s.get("capacityReservationTarget") == {"capacityReservationId": ODCR}
    ]
    on_demand = [s for s in specs if s == {"capacityReservationPreference": "none"}]
    assert len(targeted) == 1 and len(on_demand) == 3
    for r in instances:
        assert "instanceMarketOptions" not in r.inputs  # on-demand, never spot


def test_a_group_beyond_its_reservation_prefers_it_then_runs_on_demand() -> None:
    result = _plan(_serving_group())
    assert result.choice is not None and result.choice.offer.market == "reservation"
    assert result.choice.shape.instances > 1
    mocks, _ = run_program({"gpufit:workload": _serving_group()}, NOW)
    group = mocks.one(GROUP)
    assert group.inputs["capacityReservationSpecification"] == {
        "capacityReservationPreference": "capacity-reservations-first",
        "capacityReservationTarget": {"capacityReservationIds": [ODCR]},
    }
    # The template carries no target: a targeted launch never falls back to on-demand.
    assert "capacityReservationSpecification" not in mocks.one(LAUNCH_TEMPLATE).inputs
    distribution = group.inputs["mixedInstancesPolicy"]["instancesDistribution"]
    assert distribution["onDemandPercentageAboveBaseCapacity"] == 100


def test_a_resource_group_overflow_targets_the_group_by_arn() -> None:
    raw = _serving_group()
    arn = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-pool"
    raw["capacity"]["reservation"]["id"] = arn
    mocks, _ = run_program({"gpufit:workload": raw}, NOW)
    target = mocks.one(GROUP).inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationResourceGroupArns": [arn]}


def test_the_group_request_is_what_auto_scaling_accepts() -> None:
    """botocore's autoscaling model: the preference enum and the target's list members."""
    good = {
        "AutoScalingGroupName": "g",
        "MinSize": 0,
        "MaxSize": 3,
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": "capacity-reservations-first",
            "CapacityReservationTarget": {"CapacityReservationIds": [ODCR]},
        },
    }
    assert problems("autoscaling", "CreateAutoScalingGroup", good) == []
    bad = json.loads(json.dumps(good))
    bad["CapacityReservationSpecification"]["CapacityReservationPreference"] = (
        "open"  # EC2's, not Auto Scaling's
    )
    assert problems("autoscaling", "CreateAutoScalingGroup", bad)


def test_overflow_is_refused_where_the_fleet_cannot_be_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cloud whose fleet gpufit does not split refuses the plan on the reservation, and so
    does an AWS reservation whose type has no on-demand price for the rest."""
    from types import SimpleNamespace

    from selector import capacity_overflow

    three = SimpleNamespace(instances=3)
    gcp = {
        "id": "pool-h100",
        "cloud": "gcp",
        "instance_type": "a3-highgpu-8g",
        "count": 1,
        "region": "us-central1",
        "zone": "us-central1-a",
    }
    raw = _multi_node(overflow=True)
    raw["capacity"]["reservation"] = gcp
    raw["placement"] = {"clouds": ["gcp"]}
    monkeypatch.setattr(capacity_overflow, "OVERFLOW_SPLIT_CLOUDS", frozenset({"aws"}))
    refused = capacity_overflow.overflow_refusal(parse_spec(raw), "a3-highgpu-8g", three, 88.0)  # type: ignore[arg-type]
    assert refused is not None and "not provisioned beside it" in refused.reason
    aws = parse_spec(_multi_node(overflow=True))
    unpriced = capacity_overflow.overflow_refusal(aws, "p5.48xlarge", three, None)  # type: ignore[arg-type]
    assert unpriced is not None and "no on-demand price of p5.48xlarge in us-east-1" in unpriced.reason
    assert capacity_overflow.overflow_refusal(aws, "p5.48xlarge", three, 55.04) is None  # type: ignore[arg-type]


# --- 2. Availability Zone confinement ----------------------------------------------------------


def test_an_aws_reservation_zone_is_an_az_id() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_multi_node(overflow=True, zone="us-east-1a"))
    assert any("expected the reservation's AZ ID" in str(p) for p in err.value.problems)


def test_the_fleet_is_confined_to_the_reservations_zone() -> None:
    from tests.pulumi_harness import RecordingMocks

    p5 = RecordingMocks(odcrs={ODCR: {"availabilityZone": "us-east-1d", "instanceType": "p5.48xlarge"}})
    run_program({"gpufit:workload": _multi_node(overflow=True, zone="use1-az4")}, NOW, mocks=p5)
    interfaces = p5.of_type("aws:ec2/networkInterface:NetworkInterface")
    assert len(interfaces) == 4 and {r.inputs["subnetId"] for r in interfaces} == {"subnet-us-east-1d"}
    raw = _serving_group()
    raw["capacity"]["reservation"]["zone"] = "use1-az2"
    p4d = RecordingMocks(odcrs={ODCR: {"availabilityZone": "us-east-1b", "instanceType": "p4d.24xlarge"}})
    run_program({"gpufit:workload": raw}, NOW, mocks=p4d)
    assert p4d.one(GROUP).inputs["vpcZoneIdentifiers"] == ["subnet-us-east-1b"]


@pytest.mark.parametrize(
    ("held", "problem"),
    [
        (
            {"availabilityZone": "us-east-1a", "instanceType": "p4d.24xlarge"},
            r"is in us-east-1a \(use1-az1\), not use1-az2",
        ),
        (
            {"availabilityZone": "us-east-1b", "instanceType": "p5.48xlarge"},
            r"reserves p5\.48xlarge, not p4d",
        ),
        (
            {
                "availabilityZone": "us-east-1b",
                "instanceType": "p4d.24xlarge",
                "endDate": "2026-12-01T00:00:00Z",
            },
            r"ended at 2026-12-01T00:00:00Z",
        ),
    ],
)
def test_an_odcr_with_its_zone_given_is_still_checked_against_ec2(held: dict[str, Any], problem: str) -> None:
    """Review i26a #4: with a zone given the ODCR was never read; with overflow a wrong zone,
    type or an ended reservation ran the whole fleet on-demand while the plan showed it reserved."""
    from tests.pulumi_harness import RecordingMocks

    raw = _serving_group()
    raw["capacity"]["reservation"]["zone"] = "use1-az2"
    with pytest.raises(Exception, match=problem):
        run_program({"gpufit:workload": raw}, NOW, mocks=RecordingMocks(odcrs={ODCR: held}))


def _block_raw() -> dict[str, Any]:
    return _spec(FIXTURES / "block-llama8b-lora.yaml")


def test_a_block_group_launches_only_in_the_blocks_zone() -> None:
    mocks, _ = run_program({"gpufit:workload": _block_raw(), "gpufit:purchaseCapacityBlock": True}, NOW)
    group = mocks.one(GROUP)
    region = mocks.region
    assert group.inputs["vpcZoneIdentifiers"] == [f"subnet-{region}a"]
    asked = [a for t, a in mocks.invokes if t == "aws:ec2/getSubnets:getSubnets"]
    filters = {f["name"]: f["values"] for f in asked[-1]["filters"]}
    assert filters["availability-zone"] == [f"{region}a"]


@pytest.mark.parametrize(
    "now",
    [
        datetime(2026, 12, 4, 12, 0, tzinfo=UTC),  # days before the earliest block
        datetime(2026, 12, 9, 11, 29, tzinfo=UTC),  # a minute before the first planned start
        datetime(2026, 12, 9, 11, 30, tzinfo=UTC),  # at it
        datetime(2026, 12, 9, 12, 30, tzinfo=UTC),  # an hour into it
    ],
)
def test_a_multi_node_replica_never_buys_a_block(now: datetime) -> None:
    """Review i26a #1: plain instances cannot wait for a block (EC2 launches into it only once
    active) and no block is sold once begun. Before, the plan chose a block, the program bought
    it and launched the instances at once into a block not yet active, which EC2 rejects: the
    fee paid for nothing. Now the plan refuses blocks for such a replica (with ``require``:
    infeasible, saying why, nothing created; with ``allow``: on-demand, no block bought)."""
    from tests.pulumi_harness import RecordingMocks

    raw = _spec(FIXTURES / "multinode-70b-full-ft.yaml")
    raw["capacity"] = {"blocks": "require"}
    result = _plan(raw)
    assert result.choice is None
    assert "multi-node replica runs as plain EC2 instances" in result.rejection_examples["capacity"]
    mocks = RecordingMocks()
    with pytest.raises(Exception, match=r"multi-node replica runs as plain EC2 instances"):
        run_program({"gpufit:workload": raw, "gpufit:purchaseCapacityBlock": True}, now, mocks=mocks)
    assert mocks.resources == []
    raw["capacity"] = {"blocks": "allow"}
    mocks, _ = run_program({"gpufit:workload": raw, "gpufit:purchaseCapacityBlock": True}, now)
    assert not mocks.of_type("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    assert len(mocks.of_type(INSTANCE)) > 1
    for r in mocks.of_type(INSTANCE):
        assert "instanceMarketOptions" not in r.inputs


def test_the_program_refuses_a_block_for_plain_instances_at_any_time() -> None:
    """The program's own guard (a plan made by another gpufit, a hand-edited lock): a block for
    plain instances is refused before anything is bought, whatever the clock."""
    from deployment.capacity import CapacityTarget, block_wait_refusal

    start = datetime(2026, 12, 11, 11, 30, tzinfo=UTC)
    block = CapacityTarget(kind="capacity-block", block_start=start, offering_id="cb-0aaaaaaaaaaaaaaa2")
    assert block_wait_refusal(block, grouped=False) is not None
    assert block_wait_refusal(block, grouped=True) is None


def test_an_odcr_without_a_zone_is_read_from_ec2_and_confines_the_fleet() -> None:
    from tests.pulumi_harness import RecordingMocks

    raw = _serving_group()
    mocks = RecordingMocks(odcrs={ODCR: {"availabilityZone": "us-east-1c", "instanceType": "p4d.24xlarge"}})
    run_program({"gpufit:workload": raw}, NOW, mocks=mocks)
    assert mocks.one(GROUP).inputs["vpcZoneIdentifiers"] == ["subnet-us-east-1c"]
    read = mocks.one("aws:ec2/capacityReservation:CapacityReservation")
    assert read.name.endswith("-reservation")


def test_a_multi_node_replica_on_an_odcr_without_a_zone_launches_in_its_zone() -> None:
    from tests.pulumi_harness import RecordingMocks

    mocks = RecordingMocks(odcrs={ODCR: {"availabilityZone": "us-east-1d", "instanceType": "p5.48xlarge"}})
    run_program({"gpufit:workload": _multi_node(overflow=True)}, NOW, mocks=mocks)
    interfaces = mocks.of_type("aws:ec2/networkInterface:NetworkInterface")
    assert interfaces and {r.inputs["subnetId"] for r in interfaces} == {"subnet-us-east-1d"}


def test_an_odcr_of_another_type_or_unknown_id_stops_the_program() -> None:
    from tests.pulumi_harness import RecordingMocks

    wrong = RecordingMocks(odcrs={ODCR: {"availabilityZone": "us-east-1c", "instanceType": "p5.48xlarge"}})
    with pytest.raises(Exception, match=r"reserves p5\.48xlarge, not p4d\.24xlarge"):
        run_program({"gpufit:workload": _serving_group()}, NOW, mocks=wrong)
    with pytest.raises(Exception, match=r"InvalidCapacityReservationId\.NotFound"):
        run_program({"gpufit:workload": _serving_group()}, NOW, mocks=RecordingMocks(odcrs={}))


# --- 3. the block actually bought sets the start and the deadline -------------------------------


def _schedules(mocks: Any) -> dict[str, dict[str, Any]]:
    return {
        s.inputs["scheduledActionName"]: s.inputs for s in mocks.of_type("aws:autoscaling/schedule:Schedule")
    }


def test_the_group_starts_with_the_block_bought_and_never_stops_past_it() -> None:
    """Deployed after the planned first day's 11:30 UTC start: the lookup buys the next day's
    block, and the group waits for it; its deadline is the machines' own (the plan's), which
    is before the bought block's end less 40 minutes (the fleet-deadline policy holds the group
    to the machines' expiry)."""
    raw = _block_raw()
    raw["capacity"] = {"blocks": "require"}  # no start window: the earliest block
    late = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)
    mocks, _ = run_program({"gpufit:workload": raw, "gpufit:purchaseCapacityBlock": True}, late)
    group = mocks.one(GROUP)
    assert group.inputs["desiredCapacity"] == 0
    actions = _schedules(mocks)
    assert actions["gpufit-block-start"]["startTime"] == "2026-12-05T11:30:00Z"
    _, args = next(i for i in mocks.invokes if i[0].endswith("getCapacityBlockOffering"))
    days = int(args["capacityDurationHours"]) // 24
    planned_deadline = f"2026-12-{4 + days:02d}T10:50:00Z"
    assert actions["gpufit-deadline"]["startTime"] == planned_deadline
    from policy.gpufit_policies import check_fleet_deadline

    assert check_fleet_deadline([(r.typ, r.inputs) for r in mocks.resources]) == []


def test_the_group_deadline_is_never_past_the_block_bought() -> None:
    """A pinned gpufit:expiresAt later than the block: the group still stops 40 minutes before
    the bought block ends."""
    raw = _block_raw()
    config = {
        "gpufit:workload": raw,
        "gpufit:purchaseCapacityBlock": True,
        "gpufit:expiresAt": "2026-12-30T00:00:00Z",
    }
    mocks, _ = run_program(config, NOW)
    _, args = next(i for i in mocks.invokes if i[0].endswith("getCapacityBlockOffering"))
    days = int(args["capacityDurationHours"]) // 24
    assert _schedules(mocks)["gpufit-deadline"]["startTime"] == f"2026-12-{9 + days:02d}T10:50:00Z"


def _live_lock(stacks: Path) -> dict[str, Any]:
    """The 8B LoRA block planned on a live offering (the fake EC2's cheaper one) and locked."""
    from catalog.capacity_blocks import block_offerings
    from gitops.lock import lock_path, make_lock, write_lock
    from selector.capacity_plan import block_asks
    from tests.fakes.ec2_capacity import clients
    from tests.test_capacity import _market

    spec = parse_spec(_block_raw())
    quotes, _ = block_offerings(block_asks(spec, load_catalog()), clients(_market()), TODAY)
    result = plan(spec, load_catalog(), today=TODAY, block_quotes=quotes)
    stack_file = stacks / "Pulumi.test.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {"gpufit:workload": _block_raw()}}))
    doc = make_lock(result, stack_file, NOW)
    write_lock(doc, lock_path(stack_file))
    return doc


def test_the_live_offering_is_locked_and_bought_as_reviewed(tmp_path: Path) -> None:
    doc = _live_lock(tmp_path)
    assert doc["capacity_block"] == {
        "offering_id": "cb-0aaaaaaaaaaaaaaa2",
        "instance_type": "p4d.24xlarge",
        "region": "us-east-2",
        "availability_zone": "us-east-2a",
        "start": "2026-12-11T11:30:00+00:00",
        "end": "2026-12-13T11:30:00+00:00",
        "instances": 1,
        "upfront_usd": 600.0,
        "source": doc["capacity_block"]["source"],
        "as_of": "2026-12-04",
    }
    config = {
        "gpufit:workload": _block_raw(),
        "gpufit:purchaseCapacityBlock": True,
        "gpufit:lockDir": str(tmp_path),
    }
    mocks, _ = run_program(config, NOW)
    block = mocks.one("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    assert block.inputs["capacityBlockOfferingId"] == "cb-0aaaaaaaaaaaaaaa2"
    assert not [t for t, _ in mocks.invokes if t.endswith("getCapacityBlockOffering")]  # no lookup
    actions = _schedules(mocks)
    assert actions["gpufit-block-start"]["startTime"] == "2026-12-11T11:30:00Z"


def test_a_locked_offering_that_has_started_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    from tests.pulumi_harness import RecordingMocks

    _live_lock(tmp_path)
    config = {
        "gpufit:workload": _block_raw(),
        "gpufit:purchaseCapacityBlock": True,
        "gpufit:lockDir": str(tmp_path),
    }
    mocks = RecordingMocks()
    later = datetime(2026, 12, 11, 12, 0, tzinfo=UTC)
    with pytest.raises(Exception, match=r"offering cb-0aaaaaaaaaaaaaaa2 started at 2026-12-11 11:30 UTC"):
        run_program(config, later, mocks=mocks)
    assert mocks.resources == []


def test_a_stack_that_bought_its_locked_block_runs_on_after_the_start(tmp_path: Path) -> None:
    """Review i26a #2: once the block is bought (tagged with the offering), a later up or
    preview inside the block is not refused; the group keeps the locked block's dates."""
    from tests.pulumi_harness import RecordingMocks

    _live_lock(tmp_path)
    config = {
        "gpufit:workload": _block_raw(),
        "gpufit:purchaseCapacityBlock": True,
        "gpufit:lockDir": str(tmp_path),
    }
    first = RecordingMocks()
    run_program(config, NOW, mocks=first)
    tags = first.one("aws:ec2/capacityBlockReservation:CapacityBlockReservation").inputs["tags"]
    assert tags["gpufit:capacity-block-offering"] == "cb-0aaaaaaaaaaaaaaa2"
    later = datetime(2026, 12, 11, 12, 0, tzinfo=UTC)
    mocks = RecordingMocks(bought={"cb-0aaaaaaaaaaaaaaa2": "cr-0bbbbbbbbbbbbbbb1"})
    run_program(config, later, mocks=mocks)
    asked = [a for t, a in mocks.invokes if t.endswith("getResources")]
    assert asked and asked[0]["tagFilters"][0]["values"] == ["cb-0aaaaaaaaaaaaaaa2"]
    assert mocks.one(GROUP).inputs["desiredCapacity"] >= 1  # the block is active: no wait
    assert "gpufit-block-start" not in _schedules(mocks)
    assert _schedules(mocks)["gpufit-deadline"]["startTime"] == "2026-12-13T10:50:00Z"
    block = mocks.one("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    assert block.inputs["capacityBlockOfferingId"] == "cb-0aaaaaaaaaaaaaaa2"


def test_a_live_lock_checks_current_and_the_cli_locks_the_live_offering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli import capacity_cmd
    from cli.main import main
    from gitops.lock import check_lock, read_lock
    from tests.fakes.ec2_capacity import clients
    from tests.test_capacity import _market

    _live_lock(tmp_path)
    assert check_lock(parse_spec(_block_raw()), tmp_path / "Pulumi.test.yaml").state == "current"
    monkeypatch.setattr(capacity_cmd, "ec2_clients", lambda: clients(_market()))
    assert main(["lock", "test", "--stacks", str(tmp_path), "--capacity-blocks", "live"]) == 0
    assert read_lock(tmp_path / "test.lock.json")["capacity_block"]["offering_id"].startswith("cb-0aaaa")


def test_a_live_lock_whose_every_ask_failed_locks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review i26a #5: no credentials (every ask refused) used to write a lock with no block and
    exit 0; the program then fell back to the lookup at up."""
    from cli import capacity_cmd
    from cli.exit_codes import LIVE_BLOCKS_UNREAD
    from cli.main import main
    from tests.fakes.ec2_capacity import clients

    stack_file = tmp_path / "Pulumi.test.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {"gpufit:workload": _block_raw()}}))
    monkeypatch.setattr(capacity_cmd, "ec2_clients", lambda: clients())  # every region refuses
    assert (
        main(["lock", "test", "--stacks", str(tmp_path), "--capacity-blocks", "live"]) == LIVE_BLOCKS_UNREAD
    )
    err = capsys.readouterr().err
    assert "Capacity Block ask(s) failed; nothing locked" in err
    assert err.count("UnauthorizedOperation") >= 1
    assert not (tmp_path / "test.lock.json").exists()


# --- 4. the policy pack prices a block's machines from its fee ------------------------------------


def test_the_policy_prices_a_block_from_its_fee_not_on_demand() -> None:
    """p5e has no on-demand price: a block of it was refused whenever a budget was set."""
    from policy.gpufit_policies import check_hourly_budget, check_stack_budget
    from policy.resources import PolicyConfig
    from tests.pulumi_harness import links

    raw = _block_raw()
    raw["placement"] = {**raw.get("placement", {}), "instance_types": ["p5e.48xlarge"]}
    chosen = _plan(raw).choice
    assert chosen is not None and chosen.offer.market == "capacity-block"
    assert ("aws", "p5e.48xlarge", chosen.offer.region) not in load_catalog().on_demand_prices
    mocks, _ = run_program({"gpufit:workload": raw, "gpufit:purchaseCapacityBlock": True}, NOW)
    resources = [(r.typ, r.inputs, chosen.offer.region, *links(mocks, r)) for r in mocks.resources]
    block = mocks.one("aws:ec2/capacityBlockReservation:CapacityBlockReservation")
    terms = chosen.offer.capacity
    fee = round(terms.upfront_usd * 1.1, 2)  # type: ignore[union-attr]
    assert block.inputs["tags"]["gpufit:block-fee-usd"] == f"{fee:.2f}"
    hours = int(block.inputs["tags"]["gpufit:block-hours"])
    hourly = fee / hours
    roomy = PolicyConfig(now=NOW, max_hourly_usd=hourly + 1)
    assert check_stack_budget(resources, roomy) == []
    for typ, props, region, *_ in resources:
        assert check_hourly_budget(typ, props, roomy, region) == []
    tight = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=hourly - 1))
    assert any("over the budget" in p for p in tight), tight


# --- 5. the reference rates' age is shown ------------------------------------------------------


def test_the_reference_block_rates_show_their_age(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.fleet_text import capacity_line
    from cli.main import main
    from selector.capacity import CapacityTerms

    result = _plan(_block_raw())
    assert result.choice is not None
    terms = result.choice.offer.capacity
    assert isinstance(terms, CapacityTerms) and terms.estimate
    line = capacity_line(result, TODAY)
    assert f"reference rate as of {terms.as_of}, " in line and "months old" in line
    assert main(["offers", "--capacity-blocks"]) == 0
    out = capsys.readouterr().out
    rows = [x for x in out.splitlines() if "reference rate, ESTIMATE" in x]
    assert rows and all("old)" in x for x in rows), rows
