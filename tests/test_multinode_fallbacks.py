"""Issue 25: a multi-node replica (an AWS job spanning several EFA nodes) gets fallbacks like any
stateless or checkpointed plan: the other types in its region and market that run the replica
when the selector plans them alone, each realised as a ``gpufit up`` attempt of its own (plain
instances of one type, as the choice's are), never as members of a fleet the program does not
build."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import main
from deployment.translate import deployment_from_plan
from gitops.failover import UpSettings, attempt_order, run_up
from policy.gpufit_policies import PolicyConfig, instance_offer
from providers.aws.efa import efa_layout
from selector.catalog import Catalog, load_catalog
from selector.fallbacks import ATTEMPT, attempt_shape
from selector.select import Plan, plan
from selector.sizing import Shape
from selector.spec import WorkloadSpec, parse_spec
from tests.fakes.failover import FakeClock, FakeWatcher, FakeWorkspace
from tests.pulumi_harness import run_program
from tests.test_policy import _all_violations

FIXTURES = Path(__file__).parent / "fixtures" / "realistic"
MULTINODE = {
    "15-llama70b-full-ft": ("p5en.48xlarge", "us-east-2"),
    "26-llama8b-pretrain-small": ("p4d.24xlarge", "ap-south-1"),
}
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _doc(fixture: str, **placement: Any) -> dict[str, Any]:
    doc = dict(yaml.safe_load((FIXTURES / f"{fixture}.yaml").read_text()))
    if placement:
        doc["placement"] = {**doc.get("placement", {}), **placement}
    return doc


def _plan(catalog: Catalog, fixture: str, **placement: Any) -> Plan:
    return plan(parse_spec(_doc(fixture, **placement)), catalog)


@pytest.mark.parametrize("fixture", sorted(MULTINODE))
def test_a_multinode_replica_gets_fallbacks_each_planned_alone(catalog: Catalog, fixture: str) -> None:
    """Fixtures 15 and 26 had none ("a multi-node replica runs on instances of one type"):
    each fallback is another type of the choice's region and market whose own plan (the type
    pinned, the region pinned) is the shape the fallback carries, within the budget and ttl."""
    result = _plan(catalog, fixture)
    choice = result.choice
    assert choice is not None
    assert (choice.offer.instance.name, choice.offer.region) == MULTINODE[fixture]
    assert choice.shape.nodes_per_replica > 1
    assert len(result.fallbacks) >= 2, [f.offer.instance.name for f in result.fallbacks]
    assert result.breadth_note is None
    spec = parse_spec(_doc(fixture))
    ttl_hours = spec.teardown.ttl
    for f in result.fallbacks:
        name = f.offer.instance.name
        assert f.realised == ATTEMPT
        assert name != choice.offer.instance.name
        assert (f.offer.cloud, f.offer.region, f.offer.market) == (
            choice.offer.cloud,
            choice.offer.region,
            choice.offer.market,
        )
        assert not f.offer.unpriced
        alone = _plan(catalog, fixture, instance_types=[name], regions=[f.offer.region])
        assert alone.choice is not None
        for field in ("nodes_per_replica", "gpus_per_replica", "tensor_parallel", "instances"):
            assert getattr(f.shape, field) == getattr(alone.choice.shape, field), (name, field)
        # memory: the replica fits in the type's own GPUs
        assert f.shape.vram_gib_per_replica <= f.offer.instance.gpu.memory_gib * f.shape.gpus_per_replica
        if f.shape.nodes_per_replica > 1:
            # the nodes are joined by EFA, and the AWS program knows the type's card layout
            assert f.offer.instance.node_interconnect == "efa"
            assert len(efa_layout(f.offer.instance.machine_type)) >= 1
        assert f.cost.hours <= ttl_hours


def test_the_breadth_note_says_how_a_multinode_replica_falls_back(catalog: Catalog) -> None:
    """Fewer than two: the note names the region, the market and the realisation (a `gpufit up`
    attempt each), not the retired "instances of one type"."""
    full = _plan(catalog, "26-llama8b-pretrain-small")
    assert len(full.fallbacks) >= 2
    # a budget below the dearest fallback's total keeps fewer of them
    cap = min(f.cost.total_usd for f in full.fallbacks)
    doc = _doc("26-llama8b-pretrain-small")
    doc["budget"] = {**doc.get("budget", {}), "max_total_usd": round(cap + 1, 2)}
    doc["placement"] = {**doc.get("placement", {}), "min_fallbacks": 0}  # ranked by cost alone
    tight = plan(parse_spec(doc), catalog)
    assert tight.choice is not None and tight.choice.shape.nodes_per_replica > 1
    assert len(tight.fallbacks) == 1
    note = tight.breadth_note
    assert note is not None and "runs on instances of one type" not in note
    assert note.startswith("only 1 other type(s) run the multi-node replica in ap-south-1, spot")
    assert "`gpufit up`" in note


def _shape(nodes: int, interconnect: bool = True) -> Shape:
    return Shape(
        tensor_parallel=8,
        gpus_per_replica=8 * nodes,
        nodes_per_replica=nodes,
        replicas_per_instance=1,
        replicas=1,
        instances=nodes,
        vram_gib_per_gpu=60.0,
        vram_gib_per_replica=60.0 * 8 * nodes,
        needs_nvlink=True,
        needs_node_interconnect=interconnect and nodes > 1,
        tokens_per_s_per_stream=None,
        tokens_per_s_per_replica=None,
        job_hours=10.0,
    )


def test_attempt_shape_takes_only_a_multinode_choice_on_aws() -> None:
    assert attempt_shape(_shape(3), _shape(2), "aws") == _shape(2)
    assert attempt_shape(_shape(3), _shape(1), "aws") == _shape(1)  # one bigger node holds it
    assert attempt_shape(_shape(1), _shape(1), "aws") is None  # a single-node fleet: overrides
    assert attempt_shape(_shape(3), _shape(2), "gcp") is None  # not realised on GCP
    assert attempt_shape(_shape(3), _shape(2, interconnect=False), "aws") is None


def test_the_program_builds_the_choice_alone(catalog: Catalog) -> None:
    """The deployment of a multi-node plan holds the choice only: its boot script and the AWS
    program's instances are the choice's; a fallback is deployed by its own attempt."""
    result = _plan(catalog, "15-llama70b-full-ft")
    assert result.fallbacks
    d = deployment_from_plan(result, stack="dev", project="gpufit", created_at=NOW)
    assert [m.instance_type for m in d.members] == ["p5en.48xlarge"]


def _listed(result: Plan) -> list[tuple[object, ...]]:
    """The plan's fallbacks as ``gpufit up`` must deploy them: type, nodes, market, region,
    zone and hourly price."""
    return [
        (
            f.offer.instance.name,
            f.shape.instances,
            f.offer.market,
            f.offer.region,
            f.offer.zone,
            round(f.cost.hourly_usd, 4),
        )
        for f in result.fallbacks
    ]


def _tried(attempts: list[Any]) -> list[tuple[object, ...]]:
    return [(a.instance_type, a.instances, a.market, a.region, a.zone, a.hourly_usd) for a in attempts]


@pytest.mark.parametrize("fixture", sorted(MULTINODE))
def test_gpufit_up_tries_the_listed_fallbacks_in_the_listed_order(catalog: Catalog, fixture: str) -> None:
    """The fixtures as given (no region pinned): attempts 2..k of ``gpufit up --dry-run`` are
    exactly the fallbacks the plan lists, in its order, each with the type, nodes, market,
    region, zone and price the plan shows; the default ``--attempts`` reaches every one. Before
    the review fix a capacity failure re-planned: fixture 15 went to p5en in us-east-2, fixture
    26 to p4d in us-east-1, neither listed."""
    spec = parse_spec(_doc(fixture))
    first = plan(spec, catalog)
    assert first.choice is not None and len(first.fallbacks) >= 2
    order = attempt_order(spec, lambda s: plan(s, catalog), None)
    assert len(order) == 1 + len(first.fallbacks)  # the default --attempts
    assert _tried(order)[0][:3] == (first.choice.offer.instance.name, first.choice.shape.instances, "spot")
    assert _tried(order[1:]) == _listed(first)
    assert [a.listed for a in order] == list(range(len(order)))
    assert all(a.fleet_types == [a.instance_type] for a in order)
    # past the list, a re-plan as before (its own listed attempts after it)
    longer = attempt_order(spec, lambda s: plan(s, catalog), len(order) + 1)
    assert _tried(longer[: len(order)]) == _tried(order) and longer[-1].listed == 0


def test_an_explicit_attempts_limit_cuts_the_list(catalog: Catalog) -> None:
    spec = parse_spec(_doc("15-llama70b-full-ft"))
    first = plan(spec, catalog)
    order = attempt_order(spec, lambda s: plan(s, catalog), 2)
    assert _tried(order[1:]) == _listed(first)[:1]


def test_up_dry_run_prints_the_listed_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``gpufit up --dry-run`` with the default ``--attempts``: one line per listed fallback,
    each named as the plan's fallback i, with its zone and price."""
    (tmp_path / "stacks").mkdir()
    doc = {"config": {"gpufit:workload": _doc("15-llama70b-full-ft")}}
    (tmp_path / "stacks" / "Pulumi.s.yaml").write_text(yaml.safe_dump(doc))
    assert main(["up", "s", "--dry-run", "--project-dir", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("attempt ")]
    first = _plan(load_catalog(), "15-llama70b-full-ft")
    assert len(lines) == 1 + len(first.fallbacks)
    for number, (line, f) in enumerate(zip(lines[1:], first.fallbacks, strict=True), start=1):
        where = f"{f.offer.region} {f.offer.zone}" if f.offer.zone else f.offer.region
        assert f"{f.offer.instance.name} × {f.shape.instances} in {where} (spot;" in line, line
        assert f"the plan's fallback {number})" in line and f"${f.cost.hourly_usd:,.2f}/h" in line


def _run(
    catalog: Catalog, doc: dict[str, Any], by_attempt: list[str], attempts: int | None = None
) -> tuple[Any, FakeWorkspace]:
    spec = parse_spec(doc)
    planner: Callable[[WorkloadSpec], Plan] = lambda s: plan(s, catalog)  # noqa: E731
    clock = FakeClock()
    workspace = FakeWorkspace(doc, planner, by_attempt=by_attempt, clock=clock)
    report = run_up(
        "s",
        spec,
        planner,
        workspace,
        FakeWatcher(workspace),
        UpSettings(attempts=attempts, wait=timedelta(minutes=5), destroy_when_exhausted=True),
        clock.now,
        clock.sleep,
    )
    return report, workspace


@pytest.mark.parametrize("fixture", sorted(MULTINODE))
def test_run_up_deploys_each_listed_fallback_as_listed(catalog: Catalog, fixture: str) -> None:
    """Through ``run_up`` and the fake program (which plans the stack's recorded config): every
    ``pulumi up`` fails with EC2's InsufficientInstanceCapacity; the deployments are the choice,
    then each listed fallback in order (the pin ``placement.attempt`` recorded for each), each
    exclusion names only the type tried, and the stack is destroyed at the end."""
    doc = _doc(fixture)
    first = plan(parse_spec(doc), catalog)
    report, workspace = _run(catalog, doc, ["deploy-capacity"] * 12)
    assert report.verdict == "exhausted" and workspace.destroyed == 1
    deployed = [(d["instance_type"], d["region"], d["market"]) for d in workspace.deployed]
    assert deployed[1:] == [(t, r, m) for t, _, m, r, _, _ in _listed(first)]
    assert _tried(report.attempts[1:]) == _listed(first)
    assert [e["instance_type"] for e in report.exclusions + report.not_recorded] == [d[0] for d in deployed]


def test_the_pin_goes_when_the_list_is_spent(catalog: Catalog) -> None:
    """Past the listed fallbacks ``gpufit up`` re-plans: the pin is removed from the stack's
    config, so the program plans the spec with its exclusions (the next cheapest plan)."""
    doc = _doc("26-llama8b-pretrain-small")
    first = plan(parse_spec(doc), catalog)
    n = len(first.fallbacks)
    report, workspace = _run(catalog, doc, ["deploy-capacity"] * (1 + n) + ["ok"], attempts=n + 2)
    assert report.verdict == "up"
    assert workspace.attempt_keys == {} and workspace.attempt_recorded
    last = report.attempts[-1]
    assert last.listed == 0 and (last.instance_type, last.region) == (
        workspace.deployed[-1]["instance_type"],
        workspace.deployed[-1]["region"],
    )
    earlier = [(a.instance_type, a.region) for a in report.attempts[:-1]]
    assert (last.instance_type, last.region) not in earlier


def test_a_capacity_failure_deploys_the_next_type(catalog: Catalog) -> None:
    """The second attempt comes into service on the first listed fallback, pinned in the
    stack's config as the plan listed it."""
    doc = _doc("15-llama70b-full-ft")
    expected = plan(parse_spec(doc), catalog).fallbacks[0]
    report, workspace = _run(catalog, doc, ["deploy-capacity", "ok"])
    assert report.verdict == "up"
    first, second = report.attempts
    assert first.outcome == "capacity" and first.fleet_types == ["p5en.48xlarge"]
    assert [e["instance_type"] for e in report.exclusions] == ["p5en.48xlarge"]
    assert second.instance_type == expected.offer.instance.name and second.outcome == "in-service"
    pin = {k.rsplit(".", 1)[1]: v for k, v in workspace.attempt_keys.items()}
    assert pin == {
        "cloud": "aws",
        "region": expected.offer.region,
        **({"zone": expected.offer.zone} if expected.offer.zone else {}),
        "instance_type": expected.offer.instance.name,
        "market": "spot",
    }


def test_plan_shows_the_attempts(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFIT_TODAY", "2026-12-04")
    path = str(FIXTURES / "15-llama70b-full-ft.yaml")
    assert main(["plan", path]) == 0
    text = capsys.readouterr().out
    fleet = next(line for line in text.splitlines() if line.startswith("Fleet"))
    assert "p5.48xlarge" in fleet and "a `gpufit up` attempt of its own: 4 nodes" in fleet
    # each fallback shows what `gpufit up` launches for it: instances, zone, price for all of them
    spec = parse_spec(_doc("15-llama70b-full-ft"))
    catalog = load_catalog()
    for attempt in attempt_order(spec, lambda s: plan(s, catalog), None)[1:]:
        shown = (
            f"launched as {attempt.instances} × {attempt.instance_type} in {attempt.zone or attempt.region} "
            f"at ${attempt.hourly_usd:,.2f}/h, est. ${attempt.total_usd:,.2f} in all"
        )
        assert shown in fleet, shown
    assert "runs on instances of one type" not in text
    assert main(["plan", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fallbacks = doc["choice"]["fallbacks"]
    assert len(fallbacks) >= 2
    assert {f["realised"] for f in fallbacks} == {"attempt"}
    assert all(f["nodes_per_replica"] >= 1 and f["realised_how"] for f in fallbacks)


def _attempt_config(pin: dict[str, str] | None) -> dict[str, Any]:
    """The stack's config as ``gpufit up`` leaves it for an attempt: fixture 15 as given, with
    the attempt's pin (``placement.attempt``) and the exclusion of the type tried before."""
    doc = _doc("15-llama70b-full-ft")
    doc["job"] = {"command": "train.py --fsdp full_shard --output_dir outputs"}
    if pin is not None:
        doc["placement"] = {
            **doc.get("placement", {}),
            "attempt": pin,
            "exclude": [
                {"cloud": "aws", "region": "us-east-2", "instance_type": "p5en.48xlarge", "market": "spot"}
            ],
        }
    return {"gpufit:workload": doc}


MOTO_TYPES = Path(__import__("moto").__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
"""EC2's DescribeInstanceTypes records (moto 5.2.5): ``NetworkInfo.MaximumNetworkCards`` per type,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_NetworkInfo.html"""


def _network_cards(machine_type: str) -> int:
    with gzip.open(MOTO_TYPES) as handle:
        return int(json.loads(handle.read())[machine_type]["NetworkInfo"]["MaximumNetworkCards"])


def test_the_next_attempt_is_a_real_program_of_the_listed_fallback(catalog: Catalog) -> None:
    """What a later ``pulumi up`` creates after p5en.48xlarge had no capacity: the program run
    with the config ``gpufit up`` records (the pin and the exclusion; every registration checked
    by the AWS contract rules) builds the first listed fallback in another zone (p6-b200.48xlarge)
    there, at its listed price. The zone-bound resources move with it: each node's primary EFA interface (and
    so its Elastic IP, which names the interface) sits in the new zone's subnet under the same
    resource name, so the next ``pulumi up`` must replace it: an interface's subnet is set only
    at creation (CreateNetworkInterface requires ``SubnetId``; ModifyNetworkInterfaceAttribute
    has no member that moves it, only ``AssociatedSubnetIds``: botocore 1.43.11's ec2
    2016-11-15 model). The diff itself needs the Pulumi CLI and the provider, not run here.
    Each node is replaced, not modified, when the type changes; its launch template has one
    EFA interface per network card of the type, as EC2's DescribeInstanceTypes records it."""
    first = _plan(catalog, "15-llama70b-full-ft")
    assert first.choice is not None
    fallback = next(f for f in first.fallbacks if f.offer.zone != first.choice.offer.zone)
    pin = {
        "cloud": "aws",
        "region": fallback.offer.region,
        "zone": str(fallback.offer.zone),
        "instance_type": fallback.offer.instance.name,
        "market": "spot",
    }
    runs = {}
    for config, offer, shape in (
        (_attempt_config(None), first.choice.offer, first.choice.shape),
        (_attempt_config(pin), fallback.offer, fallback.shape),
    ):
        machine_type, nodes = offer.instance.machine_type, shape.nodes_per_replica
        mocks, outputs = run_program(config, NOW, stack="dev")
        runs[machine_type] = mocks
        assert outputs["instance_type"] == machine_type and outputs["nodes"] == nodes
        assert outputs["zone"] == offer.zone
        instances = mocks.of_type("aws:ec2/instance:Instance")
        assert len(instances) == nodes
        assert {r.inputs["instanceType"] for r in instances} == {machine_type}
        for r in instances:
            request = mocks.requests[(r.typ, r.name)]
            assert "instanceType" in request.replaceOnChanges and request.deleteBeforeReplace
            # an interrupted node still stops and comes back (persistent request, valid until the deadline)
            spot = r.inputs["instanceMarketOptions"]["spotOptions"]
            assert (spot["spotInstanceType"], spot["instanceInterruptionBehavior"]) == ("persistent", "stop")
            assert spot["validUntil"]
        enis = mocks.of_type("aws:ec2/networkInterface:NetworkInterface")
        assert len(enis) == nodes and {e.inputs["subnetId"] for e in enis} == {f"subnet-{offer.zone}"}
        eips = mocks.of_type("aws:ec2/eip:Eip")
        assert sorted(e.name for e in eips) == sorted(f"{e.name.removesuffix('-efa')}-eip" for e in enis)
        templates = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        assert len(templates) == nodes
        for t in templates:
            cards = [i["networkCardIndex"] for i in t.inputs["networkInterfaces"]]
            assert sorted(cards) == list(range(_network_cards(machine_type)))
        # the deadline terminates this attempt's nodes, all of them
        target = json.loads(mocks.one("aws:scheduler/schedule:Schedule").inputs["target"]["input"])
        assert sorted(target["InstanceIds"]) == sorted(outputs["instance_ids"])
        # the policy pack prices each node at the attempt's own offer and holds it to its hour
        attempt = plan(parse_spec(config["gpufit:workload"]), catalog)
        assert attempt.choice is not None and attempt.choice.offer == offer
        hourly = attempt.choice.cost.hourly_usd
        assert _all_violations(mocks, PolicyConfig(now=NOW, max_hourly_usd=hourly)) == []
        for r in instances:
            found = instance_offer(r.typ, r.inputs, PolicyConfig(now=NOW), region=offer.region)
            assert found is not None and found.hourly_usd == offer.hourly_usd
        under = _all_violations(mocks, PolicyConfig(now=NOW, max_hourly_usd=hourly - 0.01))
        assert any(v.startswith("check_stack_budget") for v in under), under
    assert round(attempt.choice.cost.hourly_usd, 4) == round(fallback.cost.hourly_usd, 4)
    # the same names in both programs: Pulumi diffs them (replace), and any nodes the fallback
    # has fewer of are deleted
    before, after = (runs[t] for t in (first.choice.offer.instance.name, fallback.offer.instance.name))
    kinds = ("aws:ec2/instance:Instance", "aws:ec2/networkInterface:NetworkInterface", "aws:ec2/eip:Eip")
    for kind in kinds:
        assert {r.name for r in after.of_type(kind)} <= {r.name for r in before.of_type(kind)}


def test_a_partly_started_attempt_leaves_no_node_behind(catalog: Catalog) -> None:
    """Attempt 1 starts some of its p5 nodes before RunInstances refuses the rest (``pulumi up``
    fails for capacity): the next attempt's ``pulumi up`` declares only the fallback's nodes, so
    no p5 node stays (the fake keeps the stack's nodes by Pulumi's rule: undeclared deleted,
    changed replaced); when every attempt fails so, ``--destroy-when-exhausted`` removes the
    started nodes of the last one."""
    doc = _doc("15-llama70b-full-ft")
    fallback = plan(parse_spec(doc), catalog).fallbacks[0]
    report, workspace = _run(catalog, doc, ["deploy-partial", "ok"])
    assert report.verdict == "up" and report.attempts[0].outcome == "capacity"
    where = f"{fallback.offer.instance.name}@{fallback.offer.zone}"
    assert list(workspace.live.values()) == [where] * fallback.shape.instances

    report, workspace = _run(catalog, doc, ["deploy-partial"] * 12)
    assert report.verdict == "exhausted" and workspace.destroyed == 1 and workspace.live == {}


def test_gpufit_up_says_what_a_partly_started_last_attempt_leaves(catalog: Catalog) -> None:
    """Without ``--destroy-when-exhausted`` the note says what the started nodes of a multi-node
    attempt do (plain instances launch nothing more: the old note said the fleet "keeps
    launching", which only an Auto Scaling group or a MIG does)."""
    doc = _doc("26-llama8b-pretrain-small")
    spec = parse_spec(doc)
    planner: Callable[[WorkloadSpec], Plan] = lambda s: plan(s, catalog)  # noqa: E731
    clock = FakeClock()
    workspace = FakeWorkspace(doc, planner, by_attempt=["deploy-partial"] * 12, clock=clock)
    settings = UpSettings(attempts=1, wait=timedelta(minutes=5))
    report = run_up("s", spec, planner, workspace, FakeWatcher(workspace), settings, clock.now, clock.sleep)
    assert report.verdict == "exhausted" and workspace.destroyed == 0 and workspace.live
    assert "keeps launching" not in report.note
    assert (
        "the nodes of the last attempt (aws ap-south-1 p4d.24xlarge) that started stay deployed"
        in report.note
    )
    assert "--destroy-when-exhausted" in report.note


def test_a_pin_stays_with_its_running_attempt_and_a_new_up_starts_unpinned(catalog: Catalog) -> None:
    """Review of the integrated tree (issue 25, must-fix 1), fixture 15: attempt 1 fails for
    capacity, the listed p5en fallback comes into service pinned (``placement.attempt``).
    The pin stays (a plain ``pulumi up`` keeps the running nodes) and every plan of the stack
    says whose pin it is and how it goes; the next ``gpufit up`` clears it first, so a catalog
    refresh that dropped the pinned offer never ends it "infeasible" without an attempt."""
    from cli.render import render_markdown, render_plan
    from selector.report import plan_to_dict

    doc = _doc("15-llama70b-full-ft")
    report, workspace = _run(catalog, doc, ["deploy-capacity", "ok"])
    assert report.verdict == "up" and report.attempts[-1].listed == 1
    pin = {k.rsplit(".", 1)[1]: v for k, v in workspace.attempt_keys.items()}
    assert pin["instance_type"] == report.attempts[-1].instance_type  # kept: the running nodes stay
    pinned_doc = {**doc, "placement": {**doc.get("placement", {}), "attempt": pin}}
    pinned = plan(parse_spec(pinned_doc), catalog)
    assert pinned.choice is not None and pinned.choice.offer.instance.name == pin["instance_type"]
    assert not pinned.fallbacks
    text = render_plan(pinned, NOW.date())
    said = next(line for line in text.splitlines() if line.startswith("Pinned"))
    assert pin["instance_type"] in said and "next `gpufit up` clears the pin" in said
    assert "pulumi config rm --path gpufit:workload.placement.attempt" in said
    assert "Pinned" in render_markdown(pinned, NOW.date())
    assert plan_to_dict(pinned, NOW.date())["pinned"]["instance_type"] == pin["instance_type"]
    assert "`gpufit up` is trying" not in text
    # A refreshed catalog without the pinned offer: the next `gpufit up` plans the spec unpinned.
    refreshed = dataclasses.replace(
        catalog,
        offers=tuple(
            o for o in catalog.offers if (o.instance.name, o.region) != (pin["instance_type"], pin["region"])
        ),
    )
    again, workspace = _run(refreshed, pinned_doc, ["ok"])
    assert again.verdict == "up", again.note
    unpinned = plan(parse_spec(doc), refreshed)
    assert unpinned.choice is not None and again.attempts[0].listed == 0
    assert again.attempts[0].instance_type == unpinned.choice.offer.instance.name
    assert workspace.attempt_keys == {} and workspace.attempt_recorded  # the stale pin removed
    # Even while the pinned offer is still sold, a new run's first plan is the full one.
    rerun, workspace = _run(catalog, pinned_doc, ["ok"])
    first = plan(parse_spec(doc), catalog)
    assert first.choice is not None and rerun.attempts[0].instance_type == first.choice.offer.instance.name
    assert rerun.attempts[0].instance_type != pin["instance_type"]
    assert workspace.attempt_keys == {} and workspace.attempt_recorded


def test_lock_says_the_stack_is_pinned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = _plan(load_catalog(), "15-llama70b-full-ft").fallbacks[0].offer
    pin = {"cloud": "aws", "region": first.region, "zone": first.zone, "instance_type": first.instance.name}
    spec = tmp_path / "pinned.yaml"
    spec.write_text(yaml.safe_dump(_doc("15-llama70b-full-ft", attempt={**pin, "market": "spot"})))
    assert main(["lock", str(spec)]) == 0
    err = capsys.readouterr().err
    assert f"placement.attempt pins this stack to aws {first.instance.name} spot in {first.zone}" in err
    assert "pulumi config rm --path gpufit:workload.placement.attempt" in err
