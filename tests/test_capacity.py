"""Capacity options (issue 26): Capacity Blocks for ML, existing reservations, GCP flex-start.

The spec examples under ``tests/fixtures/capacity/`` are data: every file there is planned and
provisioned under the Pulumi mocks (whose contracts check each request against the clouds'
models), and held to the rules its ``capacity`` section implies; an optional
``expect/<same name>.yaml`` adds specific expectations. A spec dropped in is tested the same way.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from catalog.capacity_blocks import block_offerings, quote_of
from deployment import deployment_from_plan, iso_utc
from deployment.capacity import calendar_refusal, flex_run_seconds, purchase_refusal
from deployment.translate import lifetime_hours
from selector.calendar_mode import calendar_days, calendar_offers
from selector.capacity import (
    BLOCK_COUNTS,
    BlockAsk,
    CapacityTerms,
    block_days,
    block_instances,
    describe as describe_capacity,
    flex_start_rates,
    reference_blocks,
)
from selector.capacity_plan import block_asks, capacity_alternatives
from selector.catalog import load_catalog
from selector.report import plan_to_dict
from selector.select import Plan, plan
from selector.sizing import Rejection, fit, requirements
from selector.spec import SpecError, WorkloadSpec, parse_spec
from tests.fakes.ec2_capacity import FakeEc2Capacity, InvalidRequest, Offering, clients, duration_problem
from tests.pulumi_harness import RecordingMocks, run_program

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "capacity"
SPECS = sorted(FIXTURES.glob("*.yaml"))
TODAY = date(2026, 12, 4)
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
BLOCK_RESOURCE = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
GCP_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GCP_GROUP = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
RESIZE = "gcp:compute/regionResizeRequest:RegionResizeRequest"
FUTURE = "gcp:compute/futureReservation:FutureReservation"


def _spec(path: Path) -> dict[str, Any]:
    """The spec as a stack's config holds it (YAML dates become strings, as in JSON)."""
    return dict(json.loads(json.dumps(yaml.safe_load(path.read_text()), default=str)))


def _expect(path: Path) -> dict[str, Any]:
    sidecar = FIXTURES / "expect" / path.name
    return dict(yaml.safe_load(sidecar.read_text()) or {}) if sidecar.exists() else {}


def _plan(raw: dict[str, Any], **kw: Any) -> Plan:
    return plan(parse_spec(raw), load_catalog(), today=TODAY, **kw)


# --- the rules AWS sells blocks by ---------------------------------------------------------


def test_block_durations_round_up_to_the_steps_aws_sells() -> None:
    assert [block_days(h) for h in (0.5, 24, 24.1, 14 * 24, 14 * 24 + 1, 21 * 24, 22 * 24)] == [
        1,
        1,
        2,
        14,
        21,
        21,
        28,
    ]
    assert block_days(182 * 24) == 182
    assert block_days(182 * 24 + 1) is None
    for hours in range(1, 182 * 24, 7):
        days = block_days(hours)
        assert days is not None and duration_problem(days * 24) is None, hours


def test_block_sizes_round_up_to_the_listed_counts() -> None:
    assert [block_instances(n) for n in (1, 2, 3, 5, 9, 33, 64, 65)] == [1, 2, 4, 8, 16, 64, 64, None]
    assert BLOCK_COUNTS == (1, 2, 4, 8, 16, 32, 64)


def test_reference_rates_are_sourced_dated_and_marked_estimates() -> None:
    for quote in reference_blocks():
        assert quote.source.startswith("https://") and len(quote.as_of) == 10
        assert "ESTIMATE" in quote.note and not quote.live


# --- the data-driven examples ----------------------------------------------------------------


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_capacity_example_plans_by_its_rules(path: Path) -> None:
    raw, expect = _spec(path), _expect(path)
    spec = parse_spec(raw)
    result = plan(spec, load_catalog(), today=TODAY)
    cap = spec.capacity
    assert result.choice is not None, result.rejection_examples
    choice = result.choice
    offer, cost, shape = choice.offer, choice.cost, choice.shape
    for key in ("market", "instance_type", "region", "instances"):
        if key in expect:
            actual = {
                "market": offer.market,
                "instance_type": offer.instance.name,
                "region": offer.region,
                "instances": shape.instances,
            }[key]
            assert actual == expect[key], key
    if "compute_usd" in expect:
        assert cost.compute_usd == pytest.approx(float(expect["compute_usd"]))
    required = (
        "capacity-block" if cap.blocks == "require" else "flex-start" if cap.flex_start == "require" else None
    )
    if required:
        assert offer.market == required
    if cap.reservation is not None and not cap.overflow:
        assert offer.market == "reservation"
    terms = offer.capacity
    doc = plan_to_dict(result, TODAY)
    assert doc["capacity"]["kind"] == offer.market
    if offer.market == "capacity-block":
        assert isinstance(terms, CapacityTerms) and terms.start is not None and terms.end is not None
        assert terms.block_instances in BLOCK_COUNTS and terms.block_instances >= shape.instances
        assert duration_problem(round((terms.end - terms.start).total_seconds() / 3600)) is None
        assert terms.end.time().isoformat() == "11:30:00"
        assert terms.start.date() <= TODAY + timedelta(weeks=8)
        if cap.start_after:
            assert terms.start.date() >= cap.start_after
        if "block_start_on_or_after" in expect:
            assert terms.start.date() >= expect["block_start_on_or_after"]
        # paid up front for the whole block: the idle tail (hours and instances) is counted
        assert cost.compute_usd == pytest.approx(terms.upfront_usd)
        assert terms.upfront_usd == pytest.approx(
            terms.rate_usd * terms.block_instances * (terms.end - terms.start).total_seconds() / 3600
        )
        assert doc["capacity"]["committed_usd"] == pytest.approx(terms.upfront_usd, abs=0.01)
        assert "up front" in doc["capacity"]["summary"]
    if offer.market == "calendar-reservation":  # the whole window at the on-demand rate: the most it can cost
        assert isinstance(terms, CapacityTerms) and terms.start is not None and terms.end is not None
        assert terms.start.date() == cap.start_after and terms.estimate and offer.confidence == "low"
        window = (terms.end - terms.start).total_seconds() / 3600
        assert window >= cost.hours and window % 24 == 0
        assert cost.compute_usd == pytest.approx(terms.upfront_usd)
        assert terms.upfront_usd == pytest.approx(offer.hourly_usd * shape.instances * window)
        assert doc["capacity"]["committed_usd"] == pytest.approx(terms.upfront_usd, abs=0.01)
    if offer.market == "flex-start":
        assert cost.hours <= 7 * 24 and cost.interruption_rate_per_h == 0
        assert "queued until capacity, then guaranteed for the run" in doc["capacity"]["summary"]
    if offer.market == "reservation":
        held = cap.reservation
        assert held is not None and offer.instance.name == held.instance_type and offer.region == held.region
        assert cost.hourly_usd == pytest.approx(offer.hourly_usd * max(shape.instances - held.count, 0))


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_capacity_example_provisions_its_option(path: Path) -> None:
    raw = _spec(path)
    result = _plan(raw)
    assert result.choice is not None
    offer, shape = result.choice.offer, result.choice.shape
    config: dict[str, Any] = {"gpufit:workload": raw, "gcp:project": "test-project"}
    if offer.market == "capacity-block":
        config["gpufit:purchaseCapacityBlock"] = True
    if offer.market == "calendar-reservation":
        config["gpufit:createCalendarReservation"] = True
    mocks, _ = run_program(config, NOW)
    d = deployment_from_plan(result, stack="test", project="gpufit", created_at=NOW)
    if offer.market == "capacity-block":
        block = mocks.one(BLOCK_RESOURCE)
        assert block.inputs["instancePlatform"] == "Linux/UNIX"
        launched = mocks.of_type(LAUNCH_TEMPLATE) if d.grouped else mocks.of_type(INSTANCE)
        assert launched
        for r in launched:
            assert r.inputs["instanceMarketOptions"]["marketType"] == "capacity-block"
            target = r.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
            assert target["capacityReservationId"] == f"{block.name}-id"
        terms = offer.capacity
        assert isinstance(terms, CapacityTerms) and terms.deadline is not None
        assert d.expires_at == terms.deadline < terms.end  # type: ignore[operator]
    elif offer.market == "reservation" and offer.cloud == "aws":
        spec_id = parse_spec(raw).capacity.reservation.id  # type: ignore[union-attr]
        launched = mocks.of_type(LAUNCH_TEMPLATE) if d.grouped else mocks.of_type(INSTANCE)
        for r in launched:
            target = r.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
            assert target == {"capacityReservationId": spec_id}
            assert "instanceMarketOptions" not in r.inputs
        assert not mocks.of_type(BLOCK_RESOURCE)
    elif offer.market == "reservation":
        held = parse_spec(raw).capacity.reservation
        assert held is not None
        templates = {t.name: t for t in mocks.of_type(GCP_TEMPLATE)}
        versions = mocks.one(GCP_GROUP).inputs["versions"]
        reserved = templates[next(n for n in templates if not n.endswith("-overflow"))]
        affinity = reserved.inputs["reservationAffinity"]
        if held.affinity == "any":
            assert affinity == {"type": "ANY_RESERVATION"}
        else:
            assert affinity == {
                "type": "SPECIFIC_RESERVATION",
                "specificReservation": {
                    "key": "compute.googleapis.com/reservation-name",
                    "values": [held.id],
                },
            }
        # a reservation is zonal: the group (its overflow VMs too) stays in the reservation's zone
        assert mocks.one(GCP_GROUP).inputs["distributionPolicyZones"] == [held.zone]
        if shape.instances > held.count:  # overflow: the rest from a template without the reservation
            assert len(templates) == 2 and len(versions) == 2
            overflow = templates[next(n for n in templates if n.endswith("-overflow"))]
            assert overflow.inputs["reservationAffinity"] == {"type": "NO_RESERVATION"}
            assert versions[0]["targetSize"] == {"fixed": held.count}
            assert "targetSize" not in versions[1]
        else:
            assert len(templates) == 1 and len(versions) == 1 and "targetSize" not in versions[0]
    elif offer.market == "calendar-reservation":
        terms = offer.capacity
        assert isinstance(terms, CapacityTerms) and terms.start is not None and terms.end is not None
        request = mocks.one(FUTURE).inputs
        assert (
            request["reservationMode"] == "CALENDAR" and request["autoDeleteAutoCreatedReservations"] is True
        )
        assert request["timeWindow"] == {"startTime": iso_utc(terms.start), "endTime": iso_utc(terms.end)}
        assert request["specificSkuProperties"]["totalCount"] == str(d.nodes)
        template = mocks.one(GCP_TEMPLATE).inputs
        assert template["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
        # deleted at the reservation's end (review i26g nit 7): no termination time it may refuse
        assert template["scheduling"]["instanceTerminationAction"] == "DELETE"
        assert "terminationTime" not in template["scheduling"]
        assert template["labels"]["gpufit-deadline-layer"] == "scheduler"
        assert template["reservationAffinity"]["specificReservation"]["values"] == [
            request["reservationName"]
        ]
        group = mocks.one(GCP_GROUP).inputs
        assert group["targetSize"] == 0 and group["distributionPolicyZones"] == [request["zone"]]
        assert d.expires_at == terms.deadline < terms.end  # type: ignore[operator]
    elif offer.market == "flex-start":
        scheduling = mocks.one(GCP_TEMPLATE).inputs["scheduling"]
        assert scheduling["provisioningModel"] == "FLEX_START"
        assert scheduling["automaticRestart"] is False
        request = mocks.one(RESIZE)
        seconds = int(request.inputs["requestedRunDuration"]["seconds"])
        assert 600 <= seconds <= 604_800
        assert seconds == flex_run_seconds(lifetime_hours(result))
        assert request.inputs["resizeBy"] == d.nodes
        assert mocks.one(GCP_GROUP).inputs["targetSize"] == 0


# --- purchases are confirmed, priced and never made on a stale quote ---------------------------


def test_an_unconfirmed_calendar_reservation_is_refused_with_its_cost_before_anything_is_created() -> None:
    raw = _spec(FIXTURES / "calendar-gcp-finetune.yaml")
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"calendar reservation not confirmed: .*up to \$[\d,]+\.\d\d .*"
                       r"gpufit:createCalendarReservation true"):  # fmt: skip
        run_program({"gpufit:workload": raw, "gcp:project": "test-project"}, NOW, mocks=mocks)
    assert mocks.resources == []


def test_a_calendar_window_must_start_after_today_and_a_past_one_is_refused() -> None:
    raw = _spec(FIXTURES / "calendar-gcp-finetune.yaml")
    raw["capacity"] = {**raw["capacity"], "start_after": TODAY.isoformat()}
    spec, catalog = parse_spec(raw), load_catalog()
    it = next(t for t in catalog.instance_types if t.name == "a3-highgpu-8g")
    shape = fit(requirements(spec), it)
    assert not isinstance(shape, Rejection)
    offers, why = calendar_offers(spec, it, shape, 5.0, catalog, (), TODAY)
    assert not offers and "a day after today" in why[0].reason
    assert _plan(raw).choice is None
    planned = _plan(_spec(FIXTURES / "calendar-gcp-finetune.yaml"))
    d = deployment_from_plan(planned, stack="s", project="p", created_at=NOW)
    assert calendar_refusal(d.capacity, True, NOW) is None
    late = calendar_refusal(d.capacity, True, datetime(2026, 12, 10, 1, tzinfo=UTC))
    assert late is not None and "has passed" in late


def test_a_calendar_window_covers_the_job_with_the_start_and_deadline_margins() -> None:
    assert calendar_days(24.0 - 0.1) == 1 and calendar_days(24.1) == 2 and calendar_days(90 * 24 + 1) is None
    raw = _spec(FIXTURES / "calendar-gcp-finetune.yaml")
    result = _plan(raw)
    assert result.choice is not None
    terms = result.choice.offer.capacity
    assert isinstance(terms, CapacityTerms) and terms.end is not None and terms.start is not None
    window = (terms.end - terms.start).total_seconds() / 3600
    assert window >= result.choice.cost.hours + 11 / 60


def test_a_calendar_group_waits_at_zero_and_is_resized_at_the_reservations_start() -> None:
    raw = _spec(FIXTURES / "calendar-gcp-finetune.yaml")
    config = {"gpufit:workload": raw, "gcp:project": "test-project", "gpufit:createCalendarReservation": True}
    mocks, outputs = run_program(config, NOW)
    group = mocks.one(GCP_GROUP).inputs
    jobs = {j.name.rsplit("-", 1)[-1]: j.inputs for j in mocks.of_type("gcp:cloudscheduler/job:Job")}
    start = jobs["start"]
    assert start["schedule"] == "1 0 10 12 *"  # a minute after 2026-12-10 00:00 UTC
    assert start["httpTarget"]["uri"].endswith(f"/instanceGroupManagers/{group['name']}/resize?size=1")
    _assert_one_shot(mocks, outputs, start)
    assert mocks.requests[(FUTURE, mocks.one(FUTURE).name)].retainOnDelete is True
    assert not mocks.of_type(RESIZE)


def _assert_one_shot(mocks: RecordingMocks, outputs: dict[str, Any], job: dict[str, Any]) -> None:
    """Review i26g should-fix 3: a one-shot job (the flex cancel, the calendar start) runs as its
    own account, granted the group role on this group until an hour after the deadline only: its
    cron fires again on the same date next year, and that call is refused."""
    account = next(
        a for a in mocks.of_type("gcp:serviceaccount/account:Account") if a.name.endswith("-once-sa")
    )
    assert job["httpTarget"]["oauthToken"]["serviceAccountEmail"].split("@")[0] == account.inputs["accountId"]
    members = {m.name.rsplit("-", 2)[-2]: m.inputs for m in mocks.of_type("gcp:projects/iAMMember:IAMMember")}
    group = mocks.one(GCP_GROUP).inputs
    resource = f"projects/test-project/regions/{group['region']}/instanceGroupManagers/{group['name']}"
    expires = datetime.fromisoformat(str(outputs["expires_at"]).replace("Z", "+00:00"))
    until = expires + timedelta(hours=1)
    assert members["once"]["condition"]["expression"] == (
        f'resource.name == "{resource}" && request.time < timestamp("{iso_utc(until)}")'
    )
    assert members["once"]["role"] == members["deadline"]["role"]
    assert members["deadline"]["condition"]["expression"] == f'resource.name == "{resource}"'
    minute, hour, day, month, weekday = job["schedule"].split()
    assert weekday == "*" and job["timeZone"] == "Etc/UTC"
    fires = datetime(NOW.year, int(month), int(day), int(hour), int(minute), tzinfo=UTC)
    fires = fires if fires >= NOW else fires.replace(year=NOW.year + 1)
    assert NOW <= fires < until <= fires.replace(year=fires.year + 1) - timedelta(days=300)


def _block_raw() -> dict[str, Any]:
    return _spec(FIXTURES / "block-llama8b-lora.yaml")


def test_an_unconfirmed_block_purchase_is_refused_with_its_cost_before_anything_is_created() -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"capacity block purchase not confirmed: .*\$708\.00 up front"):
        run_program({"gpufit:workload": _block_raw()}, NOW, mocks=mocks)
    assert mocks.resources == []


def test_the_refusal_is_one_line_naming_the_confirmation() -> None:
    result = _plan(_block_raw())
    assert result.choice is not None
    d = deployment_from_plan(result, stack="s", project="p", created_at=NOW)
    line = purchase_refusal(d.capacity, confirmed=False)
    assert line is not None and "\n" not in line and "gpufit:purchaseCapacityBlock true" in line
    assert purchase_refusal(d.capacity, confirmed=True) is None


def test_a_block_dearer_than_planned_is_not_bought() -> None:
    mocks = RecordingMocks(block_fee_factor=1.5)
    with pytest.raises(Exception, match=r"over the plan's \$708\.00"):
        run_program({"gpufit:workload": _block_raw(), "gpufit:purchaseCapacityBlock": True}, NOW, mocks=mocks)
    assert not mocks.of_type(BLOCK_RESOURCE)


def test_a_future_block_group_waits_at_zero_and_starts_at_the_block() -> None:
    mocks, _ = run_program({"gpufit:workload": _block_raw(), "gpufit:purchaseCapacityBlock": True}, NOW)
    group = mocks.one("aws:autoscaling/group:Group")
    assert group.inputs["desiredCapacity"] == 0
    starts = [
        s
        for s in mocks.of_type("aws:autoscaling/schedule:Schedule")
        if s.inputs["scheduledActionName"] == "gpufit-block-start"
    ]
    assert len(starts) == 1 and starts[0].inputs["startTime"] == "2026-12-09T11:30:00Z"
    assert starts[0].inputs["desiredCapacity"] == 1
    _, args = next(i for i in mocks.invokes if i[0].endswith("getCapacityBlockOffering"))
    assert args["capacityDurationHours"] == 48 and args["instanceCount"] == 1


# --- reservations -------------------------------------------------------------------------------


def test_a_reservation_without_overflow_is_the_only_feasible_offer() -> None:
    raw = _spec(FIXTURES / "reservation-aws-odcr.yaml")
    result = _plan(raw)
    assert result.feasible == 1 and result.alternatives == ()
    assert result.rejections["capacity"] > 0


def test_a_reservation_too_small_without_overflow_is_infeasible_and_says_why() -> None:
    raw = _spec(FIXTURES / "multinode-70b-full-ft.yaml")  # a 70B full fine-tune: several 8-GPU nodes
    held = {"id": "cr-0123456789abcdef0", "cloud": "aws", "instance_type": "p5.48xlarge", "count": 1}
    raw["capacity"] = {"reservation": {**held, "region": "us-east-1"}}
    result = _plan(raw)
    assert result.choice is None
    why = result.rejection_examples["capacity"]
    assert "reservation cr-0123456789abcdef0 holds 1" in why
    assert "capacity.overflow: true runs the other 3 on-demand beside it" in why


def test_a_gcp_group_runs_the_reserved_count_on_its_reservation_and_the_rest_on_demand() -> None:
    """One MIG, two versions: exactly the reservation's count from the template that targets
    it, every other VM from one that consumes no reservation; priced $0 + on-demand."""
    raw = _spec(FIXTURES / "reservation-gcp-overflow.yaml")
    result = _plan(raw)
    assert result.choice is not None
    choice = result.choice
    assert choice.offer.market == "reservation" and choice.shape.instances == 3
    assert choice.cost.hourly_usd == pytest.approx(2 * choice.offer.hourly_usd)
    assert "1 × a2-highgpu-1g already paid, 2 more on-demand" in describe_capacity(choice.offer, 3)
    mocks, _ = run_program({"gpufit:workload": raw, "gcp:project": "test-project"}, NOW)
    group = mocks.one(GCP_GROUP)
    assert group.inputs["targetSize"] == 3
    by_link = {
        f"projects/test-project/regions/r/instanceTemplates/{t.name}": t for t in mocks.of_type(GCP_TEMPLATE)
    }
    specific = [
        v
        for v in group.inputs["versions"]
        if "team-a100-pool" in json.dumps(by_link[v["instanceTemplate"]].inputs)
    ]
    assert [v.get("targetSize") for v in specific] == [{"fixed": 1}]
    rest = [v for v in group.inputs["versions"] if v not in specific]
    assert len(rest) == 1 and "targetSize" not in rest[0]
    assert by_link[rest[0]["instanceTemplate"]].inputs["reservationAffinity"]["type"] == "NO_RESERVATION"
    without = {**raw, "capacity": {"reservation": raw["capacity"]["reservation"]}}
    refused = _plan(without)
    assert refused.choice is None and "capacity.overflow: true" in refused.rejection_examples["capacity"]


def test_a_resource_group_reservation_is_targeted_by_arn() -> None:
    raw = _spec(FIXTURES / "reservation-aws-odcr.yaml")
    arn = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-pool"
    raw["capacity"]["reservation"]["id"] = arn
    mocks, _ = run_program({"gpufit:workload": raw}, NOW)
    for r in mocks.of_type(LAUNCH_TEMPLATE) + mocks.of_type(INSTANCE):
        assert r.inputs["capacityReservationSpecification"]["capacityReservationTarget"] == {
            "capacityReservationResourceGroupArn": arn
        }


@pytest.mark.parametrize(
    ("reservation", "problem"),
    [
        ({"id": "cr-123", "cloud": "aws"}, "cr- and 17 hex digits"),
        ({"id": "Bad_Name", "cloud": "gcp", "zone": "us-central1-a"}, "GCP reservation name"),
        ({"id": "pool", "cloud": "gcp"}, "give its zone"),
        ({"id": "cr-0123456789abcdef0", "cloud": "aws", "affinity": "any"}, "affinity any is GCP's"),
    ],
)
def test_a_malformed_reservation_is_a_one_line_spec_error(reservation: dict[str, Any], problem: str) -> None:
    raw = _spec(FIXTURES / "reservation-aws-odcr.yaml")
    raw["capacity"]["reservation"] = {**raw["capacity"]["reservation"], **reservation}
    if reservation["cloud"] == "gcp":
        raw["placement"] = {"clouds": ["aws", "gcp"]}
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    lines = [str(p) for p in err.value.problems]
    assert any(problem in p and "capacity.reservation" in p for p in lines), lines


# --- flex-start ----------------------------------------------------------------------------------


def test_flex_start_is_for_jobs_of_at_most_seven_days() -> None:
    raw = _spec(FIXTURES / "flex-gcp-finetune.yaml")
    raw["training"] = {**raw["training"], "tokens": 4e11}
    raw["teardown"] = {"ttl": "60d"}
    result = _plan(raw)
    assert result.choice is None or result.choice.cost.hours <= 7 * 24
    assert (
        "flex-start VMs run at most 7 days" in result.rejection_examples.get("capacity", "")
        or any("7 days" in m.rejection.reason for m in result.misses)
        or result.choice is not None
    )


@pytest.mark.parametrize("pinned", [None, "2026-12-07T12:00:00Z"])
def test_a_second_up_an_hour_later_keeps_the_flex_request_as_it_is(pinned: str | None) -> None:
    """A resize request has no update (compute.v1: cancel, delete, get, insert, list): a changed
    input would replace it and add its VMs again."""
    raw = _spec(FIXTURES / "flex-gcp-finetune.yaml")
    config = {"gpufit:workload": raw, "gcp:project": "p", "gpufit:expiresAt": pinned}
    seen = []
    for now in (NOW, NOW + timedelta(hours=1)):
        mocks, _ = run_program(config, now)
        request = mocks.one(RESIZE)
        duration = mocks.one(GCP_TEMPLATE).inputs["scheduling"]["maxRunDuration"]
        seen.append((request.inputs, duration, set(mocks.requests[(RESIZE, request.name)].ignoreChanges)))
    assert seen[0][:2] == seen[1][:2]
    assert {"requestedRunDuration", "resizeBy"} <= seen[1][2]


def test_a_flex_request_still_queued_at_the_deadline_is_cancelled_before_the_resize() -> None:
    """The one-shot account cancels the request (``compute.instanceGroupManagers.update`` on
    this group, the group role's own, until an hour after the deadline) a minute before the
    deadline's resize to 0; the group is set up as pulumi-gcp's resize-request example (one
    zone, no repair)."""
    raw = _spec(FIXTURES / "flex-gcp-finetune.yaml")
    mocks, outputs = run_program({"gpufit:workload": raw, "gcp:project": "test-project"}, NOW)
    request = mocks.one(RESIZE)
    jobs = {j.name.rsplit("-", 1)[-1]: j.inputs for j in mocks.of_type("gcp:cloudscheduler/job:Job")}
    cancel, resize = jobs["cancel"], jobs["deadline"]
    group = mocks.one(GCP_GROUP).inputs
    assert cancel["httpTarget"]["httpMethod"] == "POST"
    assert cancel["httpTarget"]["uri"] == (
        "https://compute.googleapis.com/compute/v1/projects/test-project/regions/"
        f"{group['region']}/instanceGroupManagers/{group['name']}/resizeRequests/"
        f"{request.inputs['name']}/cancel"
    )
    _assert_one_shot(mocks, outputs, cancel)
    minute, hour, *_ = resize["schedule"].split()
    c_minute, c_hour, *_ = cancel["schedule"].split()
    assert (int(hour) * 60 + int(minute)) - (int(c_hour) * 60 + int(c_minute)) in (
        1,
        2,
        1 - 24 * 60,
        2 - 24 * 60,
    )
    role = mocks.one("gcp:projects/iAMCustomRole:IAMCustomRole").inputs
    assert sorted(role["permissions"]) == [
        "compute.instanceGroupManagers.get",
        "compute.instanceGroupManagers.update",
    ]
    assert group["distributionPolicyTargetShape"] == "ANY_SINGLE_ZONE"
    assert group["instanceLifecyclePolicy"] == {"defaultActionOnFailure": "DO_NOTHING"}
    assert group["updatePolicy"]["instanceRedistributionType"] == "NONE"


def test_only_a_flex_stack_has_a_cancel_job_and_a_no_repair_group() -> None:
    raw = _spec(FIXTURES / "reservation-gcp-specific.yaml")
    mocks, _ = run_program({"gpufit:workload": raw, "gcp:project": "test-project"}, NOW)
    assert len(mocks.of_type("gcp:cloudscheduler/job:Job")) == 1
    assert "instanceLifecyclePolicy" not in mocks.one(GCP_GROUP).inputs


def test_flex_start_prices_scale_the_on_demand_price_and_never_interrupt() -> None:
    raw = _spec(FIXTURES / "flex-gcp-finetune.yaml")
    raw["capacity"] = {"flex_start": "allow"}
    catalog = load_catalog()
    feasible: list[Any] = []
    plan(parse_spec(raw), catalog, today=TODAY, feasible_out=feasible)
    flex = [c for c in feasible if c.offer.market == "flex-start"]
    assert {c.offer.instance.name.split("-")[0] for c in flex} >= {"a2", "a3"}
    for c in flex:
        od = catalog.on_demand_prices[("gcp", c.offer.instance.name, c.offer.region)]
        name = c.offer.instance.name
        # A2 with A100 40GB: the DWS SKUs' 0.55 (one observation, an ESTIMATE); A3 and A2 with
        # A100 80GB: no figure, so on-demand, the most it can cost under "a discount up to 53%"
        share = 0.55 if name.startswith(("a2-highgpu", "a2-megagpu")) else 1.0
        assert c.offer.hourly_usd == pytest.approx(od * share)
        assert c.cost.interruption_rate_per_h == 0 and c.offer.confidence == "low"
        assert "ESTIMATE" in describe_capacity(c.offer, c.shape.instances)


def test_flex_start_queue_is_an_estimate_and_must_fit_before_the_deadline() -> None:
    raw = _spec(FIXTURES / "flex-gcp-finetune.yaml")
    result = _plan(raw)
    assert result.choice is not None and result.choice.offer.market == "flex-start"
    obt = result.choice.cost.obtainability
    assert obt is not None and obt.estimated and obt.level != "high"
    assert "queue time unknown: an ESTIMATE" in obt.describe()
    assert result.choice.cost.wait_hours >= 2.0  # not the 20 min of an on-demand launch
    # a deadline that leaves the job's hours but not the queue: flex-start cannot run it
    raw["teardown"] = {"ttl": f"{round(result.choice.shape.job_hours or 0) + 1}h"}
    tight = _plan(raw)
    assert tight.choice is None or tight.choice.offer.market != "flex-start"
    reasons = " ".join(m.rejection.reason for m in tight.misses) + str(tight.rejection_examples)
    assert "expected queue" in reasons and "teardown.ttl" in reasons


def test_flex_start_rates_name_their_basis_and_never_undercut_googles_bound() -> None:
    rates = flex_start_rates()
    assert all(0.47 <= r.ratio <= 1.0 and r.basis and r.source.startswith("https://") for r in rates)
    by_series = {r.series: r for r in rates}
    assert by_series["a3-*"].ratio == 1.0 and by_series["a4-*"].ratio == 1.0
    assert (
        by_series["a2-highgpu-*"].ratio == 0.55 and "DWS Defined Duration" in by_series["a2-highgpu-*"].note
    )
    # Google: "For A4, A3, A2, and H4D machine types, you obtain ... at a discounted price": not G2
    g2 = by_series["g2-standard-*"]
    assert g2.ratio == 1.0 and not g2.estimate and "about-flex-start-vms" in g2.source


# --- live offerings: a fake EC2 checked against botocore's model ---------------------------------


def _market() -> FakeEc2Capacity:
    start = datetime(2026, 12, 10, 11, 30, tzinfo=UTC)
    return FakeEc2Capacity(
        "us-east-2",
        offerings=[
            Offering("p4d.24xlarge", "us-east-2", "us-east-2b", 1, start, 48, 650.0, "cb-0aaaaaaaaaaaaaaa1"),
            Offering(
                "p4d.24xlarge",
                "us-east-2",
                "us-east-2a",
                1,
                start + timedelta(days=1),
                48,
                600.0,
                "cb-0aaaaaaaaaaaaaaa2",
            ),
        ],
        page_size=1,
    )


def test_live_offerings_are_read_page_by_page_and_priced_per_instance_hour() -> None:
    market = _market()
    quotes, notes = block_offerings([BlockAsk("p4d.24xlarge", "us-east-2", 1, 48)], clients(market), TODAY)
    assert notes == [] and len(quotes) == 2 and len(market.requests) == 2
    assert {q.offering_id for q in quotes} == {"cb-0aaaaaaaaaaaaaaa1", "cb-0aaaaaaaaaaaaaaa2"}
    cheap = min(quotes, key=lambda q: q.upfront_usd or 0)
    assert cheap.rate_usd == pytest.approx(600.0 / 48) and cheap.live


def test_a_refused_region_is_a_note_not_a_failure() -> None:
    quotes, notes = block_offerings([BlockAsk("p4d.24xlarge", "us-west-2", 1, 48)], clients(_market()), TODAY)
    assert quotes == () and len(notes) == 1 and "us-west-2" in notes[0]


def test_the_fake_refuses_what_ec2_refuses() -> None:
    market = _market()
    with pytest.raises(InvalidRequest, match="7-day increments"):
        market.describe_capacity_block_offerings(InstanceType="p4d.24xlarge", CapacityDurationHours=15 * 24)
    with pytest.raises(InvalidRequest, match="CapacityDurationHours"):
        market.describe_capacity_block_offerings(InstanceType="p4d.24xlarge")
    with pytest.raises(InvalidRequest, match=r"CapacityBlockOfferingId|InstancePlatform"):
        market.purchase_capacity_block(CapacityBlockOfferingId="cb-0aaaaaaaaaaaaaaa1")
    assert (
        market.purchase_capacity_block(
            CapacityBlockOfferingId="cb-0aaaaaaaaaaaaaaa2", InstancePlatform="Linux/UNIX"
        )["CapacityReservation"]["ReservationType"]
        == "capacity-block"
    )


def test_end_date_range_is_the_latest_end_so_the_window_adds_the_duration() -> None:
    """botocore 1.44.8 DescribeCapacityBlockOfferingsRequest: StartDateRange "The earliest start
    date", EndDateRange "The latest end date for the Capacity Block offering"."""
    last_day = Offering(
        "p4d.24xlarge",
        "us-east-2",
        "us-east-2a",
        1,
        datetime(2026, 12, 20, 11, 30, tzinfo=UTC),
        48,
        700.0,
        "cb-0aaaaaaaaaaaaaaa3",
    )
    too_late = replace_start(last_day, datetime(2026, 12, 21, 11, 30, tzinfo=UTC), "cb-0aaaaaaaaaaaaaaa4")
    market = FakeEc2Capacity("us-east-2", [last_day, too_late])
    # the fake follows the documented meaning: an offering ending after EndDateRange is not returned
    answer = market.describe_capacity_block_offerings(
        InstanceType="p4d.24xlarge",
        InstanceCount=1,
        CapacityDurationHours=48,
        EndDateRange=datetime(2026, 12, 21, tzinfo=UTC),
    )
    assert answer["CapacityBlockOfferings"] == []
    ask = BlockAsk("p4d.24xlarge", "us-east-2", 1, 48, date(2026, 12, 9), date(2026, 12, 20))
    quotes, notes = block_offerings([ask], clients(market), TODAY)
    assert notes == [] and [q.offering_id for q in quotes] == ["cb-0aaaaaaaaaaaaaaa3"]
    sent = market.requests[-1][1]
    assert sent["StartDateRange"] == datetime(2026, 12, 9, tzinfo=UTC)
    assert sent["EndDateRange"] == datetime(2026, 12, 23, tzinfo=UTC)  # 12-20 + 1 day + 48 h


def replace_start(o: Offering, start: datetime, offering_id: str) -> Offering:
    return Offering(
        o.instance_type,
        o.region,
        o.availability_zone,
        o.instance_count,
        start,
        o.hours,
        o.upfront_fee,
        offering_id,
    )


def _offering_lookup(raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    mocks, _ = run_program({"gpufit:workload": raw, "gpufit:purchaseCapacityBlock": True}, now)
    assert mocks.one(BLOCK_RESOURCE)
    return next(a for t, a in mocks.invokes if t.endswith("getCapacityBlockOffering"))


def test_the_purchase_looks_up_the_start_window_never_the_past() -> None:
    # start window 12-09..12-20: from its first day to the latest end of a block starting on its last
    args = _offering_lookup(_block_raw(), NOW)
    assert args["startDateRange"] == "2026-12-09T00:00:00Z"
    assert args["endDateRange"] == "2026-12-23T00:00:00Z"
    # no window, deployed at 12:00 UTC (the frozen clock), after the day's 11:30 block start:
    # the lookup starts now, not at the plan's 11:30, and takes the next day's block
    raw = _block_raw()
    del raw["capacity"]["start_after"], raw["capacity"]["start_before"]
    args = _offering_lookup(raw, NOW)
    assert args["startDateRange"] == "2026-12-04T12:00:00Z"
    assert args["endDateRange"] == "2026-12-08T00:00:00Z"  # a block starting by 12-05 (2 days)
    # deployed a week after the window opened: the lookup starts at the deployment, not before it
    later = datetime(2026, 12, 12, 9, 0, tzinfo=UTC)
    args = _offering_lookup(_block_raw(), later)
    assert args["startDateRange"] == "2026-12-12T09:00:00Z"


def test_the_plan_asks_for_the_block_it_needs_and_takes_the_cheapest_live_offering() -> None:
    raw = _block_raw()
    spec = parse_spec(raw)
    asks = block_asks(spec, load_catalog())
    mine = [a for a in asks if a.instance_type == "p4d.24xlarge" and a.region == "us-east-2"]
    assert mine == [BlockAsk("p4d.24xlarge", "us-east-2", 1, 48, date(2026, 12, 9), date(2026, 12, 20))]
    quotes, _ = block_offerings(mine, clients(_market()), TODAY)
    result = plan(spec, load_catalog(), today=TODAY, block_quotes=quotes)
    assert result.choice is not None and result.choice.offer.market == "capacity-block"
    terms = result.choice.offer.capacity
    assert isinstance(terms, CapacityTerms)
    assert terms.offering_id == "cb-0aaaaaaaaaaaaaaa2" and terms.upfront_usd == 600.0 and not terms.estimate
    assert result.choice.cost.obtainability is not None and not result.choice.cost.obtainability.estimated
    mocks, _ = run_program({"gpufit:workload": raw, "gpufit:purchaseCapacityBlock": True}, NOW)
    # the Pulumi program re-plans offline (reference rates); a live offering id is bought as is
    assert mocks.one(BLOCK_RESOURCE)


def test_an_offering_in_another_currency_or_without_a_fee_is_skipped() -> None:
    raw = _market().offerings[0].as_api()
    assert quote_of({**raw, "CurrencyCode": "EUR"}, "us-east-2", TODAY) is None
    assert quote_of({k: v for k, v in raw.items() if k != "UpfrontFee"}, "us-east-2", TODAY) is None


# --- closest alternatives (for `gpufit up`) and the Capacity line --------------------------------


def test_capacity_alternatives_list_blocks_and_flex_start_cheapest_first() -> None:
    spec = parse_spec(_spec(FIXTURES / "flex-gcp-finetune.yaml") | {"placement": {"clouds": ["aws", "gcp"]}})
    alts = capacity_alternatives(spec, load_catalog(), TODAY)
    kinds = {a.kind for a in alts}
    assert kinds <= {"capacity-block", "flex-start"} and alts
    assert [a.total_usd for a in alts] == sorted(a.total_usd for a in alts)
    cut = capacity_alternatives(spec, load_catalog(), TODAY, excluded=lambda o: o.market == "flex-start")
    assert all(a.kind == "capacity-block" for a in cut)


def test_the_capacity_line_in_text_markdown_html_and_json(tmp_path: Path) -> None:
    from cli.pages import plan_page
    from cli.render import render_markdown, render_plan

    result = _plan(_block_raw())
    text = render_plan(result, TODAY)
    line = next(x for x in text.splitlines() if x.startswith("Capacity"))
    assert "capacity block 1 × p4d.24xlarge from 2026-12-09 11:30 UTC" in line and "$708.00 up front" in line
    assert "capacity block 1 × p4d.24xlarge" in render_markdown(result, TODAY)
    assert "capacity block 1 × p4d.24xlarge" in plan_page(result, [], TODAY)
    doc = json.loads(json.dumps(plan_to_dict(result, TODAY)))
    assert doc["capacity"]["block"]["upfront_usd"] == 708.0


def test_plans_that_ask_nothing_of_capacity_are_unchanged() -> None:
    raw = _spec(ROOT / "tests" / "fixtures" / "realistic" / "15-llama70b-full-ft.yaml")
    result = plan(parse_spec(raw), load_catalog(), today=TODAY)
    assert result.choice is not None and result.choice.offer.market in ("on-demand", "spot")
    assert WorkloadSpec.model_fields["capacity"].default_factory is not None  # type: ignore[misc]
    assert all(c.offer.market in ("on-demand", "spot") for c in result.alternatives)


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_a_lock_of_a_capacity_plan_replans_to_the_reviewed_choice(path: Path) -> None:
    from gitops.lock import locked_catalog, make_lock, reviewed_difference
    from selector.catalog import load_gpus

    raw = _spec(path)
    result = _plan(raw)
    lock = json.loads(json.dumps(make_lock(result, path, NOW)))
    replanned = plan(parse_spec(raw), locked_catalog(lock, load_gpus()), today=TODAY)
    assert reviewed_difference(lock, replanned) is None
    assert replanned.choice is not None and replanned.choice.offer.market == result.choice.offer.market  # type: ignore[union-attr]


def test_plan_and_offers_read_live_offerings_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import cli.capacity_cmd
    from cli.main import main

    monkeypatch.setenv("GPUFIT_TODAY", "2026-12-04")
    market = _market()
    monkeypatch.setattr(cli.capacity_cmd, "ec2_clients", lambda: clients(market))
    spec_file = FIXTURES / "block-llama8b-lora.yaml"
    assert main(["plan", str(spec_file), "--json"]) == 0
    assert market.requests == []  # offline by default
    reference = json.loads(capsys.readouterr().out)["capacity"]
    assert reference["estimate"] is True and reference["block"]["offering_id"] is None
    assert main(["plan", str(spec_file), "--json", "--capacity-blocks", "live"]) == 0
    live = json.loads(capsys.readouterr().out)["capacity"]
    assert live["block"]["offering_id"] == "cb-0aaaaaaaaaaaaaaa2" and live["committed_usd"] == 600.0
    assert main(["offers", "--capacity-blocks", "--json", "--region", "us-east-2"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["estimate"] and r["region"] == "us-east-2" for r in rows)
    assert main(["offers", "--capacity-blocks", "live", "--block-days", "2", "--region", "us-east-2"]) == 0
    text = capsys.readouterr().out
    assert "offering cb-0aaaaaaaaaaaaaaa2" in text and "$600.00 up front" in text


def test_the_policy_budget_counts_the_vms_a_flex_start_request_adds() -> None:
    from policy.gpufit_policies import check_stack_budget
    from policy.resources import PolicyConfig

    raw = _spec(FIXTURES / "flex-gcp-finetune.yaml")
    mocks, _ = run_program({"gpufit:workload": raw, "gcp:project": "test-project"}, NOW)
    chosen = _plan(raw).choice
    assert chosen is not None
    resources = [(r.typ, r.inputs, chosen.offer.region) for r in mocks.resources]
    assert mocks.one(GCP_GROUP).inputs["targetSize"] == 0  # its VMs come from the resize request
    problems = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=1.0))
    assert any("over the budget" in p for p in problems), problems


def test_the_policy_budget_counts_the_vms_a_calendar_reservation_brings() -> None:
    """Review i26g must-fix 1: the calendar group waits at 0 and a Scheduler job resizes it at the
    reservation's start; the budget counts the reservation's VMs, not the 0."""
    from policy.gpufit_policies import check_stack_budget
    from policy.resources import PolicyConfig

    raw = _spec(FIXTURES / "calendar-gcp-finetune.yaml")
    config = {"gpufit:workload": raw, "gcp:project": "test-project", "gpufit:createCalendarReservation": True}
    mocks, _ = run_program(config, NOW)
    chosen = _plan(raw).choice
    assert chosen is not None
    resources = [(r.typ, r.inputs, chosen.offer.region) for r in mocks.resources]
    assert mocks.one(GCP_GROUP).inputs["targetSize"] == 0
    problems = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=1.0))
    assert any("over the budget" in p for p in problems), problems


def test_calendar_prefer_takes_it_first_and_the_plan_says_its_price_is_an_upper_bound() -> None:
    """Review i26g should-fix 5: priced at its upper bound (on-demand for the whole window) a
    calendar offer loses to spot under ``allow``; ``prefer`` ranks it first whenever one runs
    the job, and the Capacity line says the figure is an upper bound."""
    raw = _spec(FIXTURES / "calendar-gcp-finetune.yaml")
    chosen: dict[str, Any] = {}
    for use in ("allow", "prefer", "require"):
        result = _plan({**raw, "capacity": {**raw["capacity"], "calendar": use}})
        assert result.choice is not None
        chosen[use] = result.choice
    assert chosen["allow"].offer.market != "calendar-reservation"
    assert chosen["allow"].cost.total_usd < chosen["prefer"].cost.total_usd
    assert chosen["prefer"].offer.market == chosen["require"].offer.market == "calendar-reservation"
    doc = plan_to_dict(_plan({**raw, "capacity": {**raw["capacity"], "calendar": "prefer"}}))
    summary = doc["capacity"]["summary"]
    assert "an upper bound" in summary and "a discount up to 53%" in summary, summary


def test_a_held_reservations_group_is_kept_to_the_reservations_zone() -> None:
    """Review i26g nit 4: whatever zones the lookup returns, the group of a held reservation
    lists only the reservation's zone (a VM elsewhere cannot consume it)."""
    from providers.gcp.capacity import group_zones

    result = _plan(_spec(FIXTURES / "reservation-gcp-overflow.yaml"))
    d = deployment_from_plan(result, stack="test", project="gpufit", created_at=NOW)
    assert d.zone == "us-central1-a"
    assert group_zones(d, ["us-central1-a", "us-central1-b", "us-central1-c"]) == ["us-central1-a"]
    assert group_zones(d, ["us-central1-b"]) == group_zones(d, []) == ["us-central1-a"]  # never another


def test_a_calendar_request_is_made_in_a_zone_offering_the_type_or_refused_in_one_line() -> None:
    """Review i26g nit 6: the request's zone is the first UP zone that offers the type (the
    group is kept to it); no such zone is a one-line refusal, not an IndexError."""
    from providers.gcp.capacity import calendar_zone, group_zones

    result = _plan(_spec(FIXTURES / "calendar-gcp-finetune.yaml"))
    d = deployment_from_plan(result, stack="test", project="gpufit", created_at=NOW)
    assert d.zone is None
    offered = ["us-east4-b", "us-east4-c"]
    assert calendar_zone(d, offered) == "us-east4-b" and group_zones(d, offered) == ["us-east4-b"]
    with pytest.raises(pulumi.RunError) as err:
        group_zones(d, [])
    assert str(err.value) == (
        f"calendar reservation: no UP zone of {d.region} offers {d.machine_type}; re-plan for another "
        "region (placement.regions)"
    )
