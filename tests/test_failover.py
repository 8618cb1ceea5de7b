"""``gpufit up``: capacity failover through the workspace and watcher seams, the exclusions in
spec, plan and lock, the clouds' error strings, and the clouds' watchers against their APIs."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.exit_codes import CAPACITY_EXHAUSTED, FLEET_PARTIAL, PURCHASE_UNCONFIRMED, UP_FAILED
from cli.main import main
from cli.up_cmd import cmd_up
from gitops.automation import EXCLUDE_KEY, exclusion_config
from gitops.capacity import classify, rules
from gitops.failover import FleetState, UpSettings, run_up, watch
from gitops.lock import lock_path, locked_catalog, make_lock, read_lock, reviewed_difference, spec_hash
from selector.catalog import Catalog, load_catalog
from selector.select import Plan, plan
from selector.spec import ExcludeSpec, SpecError, WorkloadSpec, load_spec, parse_spec
from tests.fakes.failover import FakeClock, FakeWatcher, FakeWorkspace
from tests.pulumi_harness import ROOT

SCENARIOS = sorted((Path(__file__).parent / "fixtures" / "failover").glob("*.yaml"))


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _project(tmp_path: Path, stack: str) -> Path:
    (tmp_path / "stacks").mkdir()
    for suffix in (f"Pulumi.{stack}.yaml", f"{stack}.lock.json"):
        if (ROOT / "stacks" / suffix).exists():
            shutil.copy(ROOT / "stacks" / suffix, tmp_path / "stacks" / suffix)
    return tmp_path


def _program_planner(project: Path, stack: str, catalog: Catalog) -> Callable[[WorkloadSpec], Plan]:
    """What ``__main__.py`` plans from the stack's config: the lock's offers when the lock is
    of this spec, refusing a stale lock, else the catalog."""
    lock_file = lock_path(project / "stacks" / f"Pulumi.{stack}.yaml")

    def planner(spec: WorkloadSpec) -> Plan:
        if not lock_file.exists():
            return plan(spec, catalog)
        lock = read_lock(lock_file)
        assert lock["spec_sha256"] == spec_hash(spec), "the program would refuse a stale lock"
        result = plan(spec, locked_catalog(lock, catalog.gpus), today=FakeClock().now().date())
        # __main__.py `_same_as_reviewed`: the locked offers must plan as the review saw them.
        assert reviewed_difference(lock, result) is None, "the program would refuse this lock"
        return result

    return planner


def _workload(project: Path, stack: str) -> dict[str, Any]:
    doc = yaml.safe_load((project / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return dict(doc["config"]["gpufit:workload"])


def _args(stack: str, project: Path, **extra: Any) -> argparse.Namespace:
    values = {
        "stack": stack,
        "attempts": 3,
        "wait": "15m",
        "dry_run": False,
        "json": False,
        "log": str(project / "up.json"),
        "destroy_when_exhausted": False,
        "project_dir": str(project),
        "catalog": None,
    }
    return argparse.Namespace(**{**values, **extra})


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_failover_scenario(
    path: Path, tmp_path: Path, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each tests/fixtures/failover/*.yaml: ``stack`` (a stack of stacks/, its lock with it) or
    ``spec`` (a workload written as the stack ``scenario``), optional ``catalog`` (a catalog file
    under tests/fixtures), ``attempts``, ``wait``, what the cloud does per attempt (``by_attempt``)
    or per ``cloud/region`` (``by_region``): ok, capacity, quota, partial, silent, slow,
    deploy-capacity, deploy-error; and ``expect``: verdict, exit, outcomes, optionally ``tried``
    (cloud/region per attempt), ``different_regions``, ``printed`` (lines the output holds) and
    ``not_recorded`` (cloud/region of exclusions logged but not written to the stack)."""
    scenario = yaml.safe_load(path.read_text())
    if "spec" in scenario:
        stack = "scenario"
        project = tmp_path
        (project / "stacks").mkdir()
        doc = {"config": {"gpufit:workload": scenario["spec"]}}
        (project / "stacks" / "Pulumi.scenario.yaml").write_text(yaml.safe_dump(doc))
    else:
        stack = scenario["stack"]
        project = _project(tmp_path, stack)
    if "catalog" in scenario:
        catalog = load_catalog(Path(__file__).parent / "fixtures" / scenario["catalog"])
    workspace = FakeWorkspace(
        _workload(project, stack),
        _program_planner(project, stack, catalog),
        by_attempt=list(scenario.get("by_attempt", [])),
        by_region=dict(scenario.get("by_region", {})),
        clock=(clock := FakeClock()),
    )
    args = _args(
        stack,
        project,
        attempts=scenario.get("attempts", 3),
        wait=scenario.get("wait", "15m"),
        catalog=str(Path(__file__).parent / "fixtures" / scenario["catalog"])
        if "catalog" in scenario
        else None,
    )
    code = cmd_up(args, workspace, FakeWatcher(workspace), clock.now, clock.sleep)
    log = json.loads((project / "up.json").read_text())
    expect = scenario["expect"]
    assert log["verdict"] == expect["verdict"]
    assert code == expect["exit"]
    attempts = log["attempts"]
    assert [a["outcome"] for a in attempts] == expect["outcomes"]
    assert len(workspace.deployed) == len(attempts)
    for attempt, deployed in zip(attempts, workspace.deployed, strict=True):
        # What ran is what the attempt planned (the recorded exclusions moved the program too).
        assert (attempt["cloud"], attempt["region"], attempt["instance_type"]) == (
            deployed["cloud"],
            deployed["region"],
            deployed["instance_type"],
        )
        assert attempt["hourly_usd"] > 0 and attempt["total_usd"] > 0 and attempt["reason"]
    if "tried" in expect:
        assert [f"{a['cloud']}/{a['region']}" for a in attempts] == expect["tried"]
    if expect.get("different_regions"):
        tried = [(a["cloud"], a["region"]) for a in attempts]
        assert len(set(tried)) == len(tried)
    failed_for_capacity = [a for a in attempts[:-1] if a["outcome"] == "capacity"]
    excluded = {(e["cloud"], e["region"], e["instance_type"]) for e in log["exclusions"]}
    for attempt in failed_for_capacity:
        assert {(attempt["cloud"], attempt["region"], t) for t in attempt["fleet_types"]} <= excluded
        assert "capacity" in attempt["reason"].lower() or "EXHAUSTED" in attempt["reason"]
        assert attempt["source"].startswith("https://")
    if not failed_for_capacity:
        assert workspace.config == {} and log["exclusions"] == []
    lock_file = project / "stacks" / f"{stack}.lock.json"
    if failed_for_capacity and lock_file.exists():
        lock = read_lock(lock_file)
        assert {(e["cloud"], e["region"], e["instance_type"]) for e in lock["exclusions"]} == excluded
    if expect["verdict"] == "exhausted":
        assert log["alternatives"], "the end of the attempts names the closest alternatives"
    out = capsys.readouterr().out
    for text in expect.get("printed", []):
        assert text in out, f"{text!r} not in the output:\n{out}"
    if "not_recorded" in expect:
        assert sorted({f"{e['cloud']}/{e['region']}" for e in log["not_recorded"]}) == expect["not_recorded"]
        assert not {(e["cloud"], e["region"]) for e in log["not_recorded"]} & {
            (e["cloud"], e["region"]) for e in log["exclusions"]
        }


def test_first_region_out_of_capacity_then_second_in_service(tmp_path: Path, catalog: Catalog) -> None:
    """The issue's case through ``run_up`` itself: the exclusion recorded in the config (the
    --path keys the Automation API writes) before the second ``pulumi up``, waits bounded."""
    spec = load_spec(ROOT / "stacks" / "Pulumi.llama13b-gcp.yaml")
    planner: Callable[[WorkloadSpec], Plan] = lambda s: plan(s, catalog)  # noqa: E731
    clock = FakeClock()
    workspace = FakeWorkspace(
        _workload(ROOT, "llama13b-gcp"), planner, by_attempt=["capacity", "ok"], clock=clock
    )
    lines: list[str] = []
    report = run_up(
        "s",
        spec,
        planner,
        workspace,
        FakeWatcher(workspace),
        UpSettings(wait=timedelta(minutes=15)),
        clock.now,
        clock.sleep,
        log=lines.append,
    )
    assert report.verdict == "up"
    first, second = report.attempts
    assert first.outcome == "capacity" and "ZONE_RESOURCE_POOL_EXHAUSTED" in first.reason
    assert second.outcome == "in-service" and second.region != first.region
    # Two `pulumi up`s of 120 s each; the first fleet watched its whole --wait, no more.
    assert sum(clock.slept) == 2 * 120 + 15 * 60
    assert workspace.config[f"{EXCLUDE_KEY}[0].cloud"] == "gcp"
    assert workspace.config[f"{EXCLUDE_KEY}[0].region"] == first.region
    assert any(line.startswith("attempt 1:") and "capacity" in line for line in lines)


def test_watch_returns_as_soon_as_the_fleet_is_in_service() -> None:
    clock = FakeClock()
    states = iter([FleetState(2, 0), FleetState(2, 1), FleetState(2, 2)])

    class Watcher:
        def state(self, outputs: Any, since: datetime) -> FleetState:
            return next(states)

    final = watch(Watcher(), {"group": "g"}, timedelta(minutes=15), clock.now, clock.sleep, poll_s=30)
    assert final == FleetState(2, 2) and clock.slept == [30, 30]
    # Plain instances (no group output): `pulumi up` created them.
    assert watch(Watcher(), {"nodes": 2}, timedelta(minutes=1), clock.now, clock.sleep) == FleetState(2, 2)


def test_excluded_offers_are_never_planned_and_the_plan_says_why(catalog: Catalog) -> None:
    spec = load_spec(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    first = plan(spec, catalog)
    assert first.choice is not None
    o = first.choice.offer
    rule = ExcludeSpec(
        cloud="aws", region=o.region, instance_type="p*", reason="InsufficientInstanceCapacity"
    )
    excluded = spec.model_copy(update={"placement": spec.placement.model_copy(update={"exclude": [rule]})})
    second = plan(excluded, catalog)
    assert second.choice is not None
    for chosen in (second.choice.offer, *(f.offer for f in second.fallbacks)):
        assert not rule.matches(chosen.cloud, chosen.region, chosen.instance.name, chosen.market)
    assert second.rejections["placement"] >= 1 and "placement.exclude" in str(second.rejection_examples)
    from cli.render import render_markdown, render_plan
    from selector.report import plan_to_dict

    today = datetime(2026, 12, 4).date()
    assert f"Excluded  aws {o.region} p* , InsufficientInstanceCapacity".replace(" ,", ",") in render_plan(
        second, today
    )
    assert "**Excluded**" in render_markdown(second, today)
    assert plan_to_dict(second, today)["excluded"][0]["instance_type"] == "p*"
    lock = make_lock(second, Path("stacks/Pulumi.llama70b-chat.yaml"), datetime(2026, 12, 4, tzinfo=UTC))
    assert lock["exclusions"] == [rule.model_dump(exclude_none=True)]
    assert "exclusions" not in make_lock(first, Path("x.yaml"), datetime(2026, 12, 4, tzinfo=UTC))
    # A market-scoped exclusion keeps the other market.
    spot_only = ExcludeSpec(cloud="aws", region=o.region, instance_type=o.instance.name, market="spot")
    assert spot_only.matches("aws", o.region, o.instance.name, "spot")
    assert not spot_only.matches("aws", o.region, o.instance.name, "on-demand")


def test_exclusion_spec_rejects_what_is_not_a_name_or_glob() -> None:
    base = _workload(ROOT, "llama13b-gcp")
    parse_spec(base, source="t")  # valid as it stands
    base["placement"] = {"exclude": [{"cloud": "azure", "region": "us east;rm", "instance_type": "x"}]}
    with pytest.raises(SpecError) as err:
        parse_spec(base, source="t")
    text = "\n".join(str(p) for p in err.value.problems)
    assert "placement.exclude.0.cloud" in text and "placement.exclude.0.region" in text, text


def test_a_failed_pulumi_up_is_classified_by_its_one_matching_line() -> None:
    output = (
        "Updating (dev):\n  + aws:ec2:Instance gpufit-x creating (0s)\n"
        "  error: creating EC2 Instance: operation error EC2: RunInstances, https response error "
        "StatusCode: 500, api error InsufficientInstanceCapacity: We currently do not have sufficient "
        "p5.48xlarge capacity in the Availability Zone you requested (us-east-1a).\n"
        "Resources:\n    12 unchanged\n"
    )
    found = classify("aws", [output])
    assert found.verdict == "capacity"
    assert "\n" not in found.message and found.message.startswith("error: creating EC2 Instance")
    assert len(classify("aws", ["x " * 400]).message) <= 300


@pytest.mark.parametrize(
    ("cloud", "message", "verdict"),
    [
        # EC2's text as an ASG activity carries it (gitops/capacity_errors.yaml has the sources).
        (
            "aws",
            "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you "
            "requested (us-east-1a). Our system will be working on provisioning additional capacity.",
            "capacity",
        ),
        (
            "aws",
            "An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation "
            "(reached max retries: 4): There is no Spot capacity available that matches your request.",
            "capacity",
        ),
        # An ASG's Spot launch failure (repost.aws knowledge-center/eks-troubleshoot-spot-instances).
        (
            "aws",
            "Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill capacity due to your "
            "request configuration. Please adjust your request and try again. Launching EC2 instance failed.",
            "capacity",
        ),
        # EC2's error-code reference (errors-overview.html).
        (
            "aws",
            "UnfulfillableCapacity: At this time there isn't enough spare capacity to fulfill your request "
            "for Spot Instances.",
            "capacity",
        ),
        ("aws", "You have requested more vCPU capacity than your current vCPU limit of 0 allows", "quota"),
        ("aws", "Access denied when attempting to assume role", "other"),
        (
            "gcp",
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: The zone 'projects/p/zones/us-central1-a' does "
            "not have enough resources available to fulfill the request.",
            "capacity",
        ),
        (
            "gcp",
            "A a2-ultragpu-4g VM instance with 4 nvidia-a100-80gb accelerator(s) is currently unavailable "
            "in the us-east5-b zone.",
            "capacity",
        ),
        ("gcp", "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally.", "quota"),
        # An AWS string does not decide a GCP failure.
        ("gcp", "InsufficientInstanceCapacity", "other"),
    ],
)
def test_classify_the_clouds_own_messages(cloud: str, message: str, verdict: str) -> None:
    assert classify(cloud, [message]).verdict == verdict


def test_every_rule_has_a_quote_it_matches_and_a_source() -> None:
    for rule in rules():
        assert rule.source.startswith("https://")
        assert rule.pattern.search(rule.quote), rule.quote


def test_exclusion_config_writes_path_keys_in_order() -> None:
    keys = exclusion_config([{"cloud": "aws", "region": "us-east-1"}, {"cloud": "gcp", "region": "x"}])
    assert keys == [
        ("gpufit:workload.placement.exclude[0].cloud", "aws"),
        ("gpufit:workload.placement.exclude[0].region", "us-east-1"),
        ("gpufit:workload.placement.exclude[1].cloud", "gcp"),
        ("gpufit:workload.placement.exclude[1].region", "x"),
    ]


def test_dry_run_prints_the_order_and_touches_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "llama70b-chat", "--dry-run", "--attempts", "3", "--project-dir", str(ROOT)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("attempt ")]
    assert len(lines) == 3 and all("$" in line and "/h" in line for line in lines)
    regions = [line.split(" in ")[1].split(" (")[0] for line in lines]
    assert len(set(regions)) == 3


def test_up_without_the_pulumi_cli_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("shutil.which", lambda _: None)
    project = _project(tmp_path, "llama13b-gcp")
    assert cmd_up(_args("llama13b-gcp", project)) == UP_FAILED
    assert "Pulumi CLI is not on PATH" in capsys.readouterr().err


def test_exit_codes_are_distinct_and_in_the_readme() -> None:
    import cli.exit_codes as codes

    values = [v for k, v in vars(codes).items() if k.isupper()]
    assert len(values) == len(set(values))
    readme = (ROOT / "README.md").read_text()
    for code in (CAPACITY_EXHAUSTED, FLEET_PARTIAL, UP_FAILED):
        assert f"`{code}` `gpufit up`" in readme


@pytest.mark.skipif(shutil.which("pulumi") is None, reason="the Pulumi CLI is not installed here")
def test_automation_workspace_records_exclusions_in_the_stack_file(tmp_path: Path) -> None:
    """The real Automation API path: select the stack in a copy of the project, record two
    exclusions with --path keys, read them back through the spec parser."""
    from pulumi import automation as auto

    from gitops.automation import AutomationWorkspace

    project = tmp_path / "p"
    shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns(".venv", ".tools", "build", ".git"))
    auto.create_or_select_stack("t", work_dir=str(project))
    (project / "stacks" / "Pulumi.t.yaml").write_text(
        (ROOT / "stacks" / "Pulumi.llama13b-gcp.yaml").read_text()
    )
    entries = [{"cloud": "gcp", "region": "us-east5", "instance_type": "a2-ultragpu-4g", "reason": "x"}]
    AutomationWorkspace(project).record_exclusions("t", entries * 2)
    spec = load_spec(project / "stacks" / "Pulumi.t.yaml")
    assert [e.region for e in spec.placement.exclude] == ["us-east5", "us-east5"]


# ------------------------------------------------------------------ the clouds' watchers

SINCE = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_asg_watcher_counts_weighted_units_in_service_and_reads_failed_activities() -> None:
    """Against the autoscaling model (botocore Stubber checks requests and responses; moto
    5.2.5 has no DescribeScalingActivities)."""
    import boto3
    from botocore.stub import Stubber

    from providers.aws.fleet_watch import AsgWatcher

    client = boto3.client(
        "autoscaling", region_name="us-east-2", aws_access_key_id="a", aws_secret_access_key="b"
    )
    stub = Stubber(client)
    instance = {"AvailabilityZone": "us-east-2a", "HealthStatus": "Healthy", "ProtectedFromScaleIn": False}
    stub.add_response(
        "describe_auto_scaling_groups",
        {
            "AutoScalingGroups": [
                {
                    "AutoScalingGroupName": "gpufit-x",
                    "MinSize": 0,
                    "MaxSize": 4,
                    "DesiredCapacity": 4,
                    "DefaultCooldown": 300,
                    "AvailabilityZones": ["us-east-2a"],
                    "HealthCheckType": "EC2",
                    "CreatedTime": SINCE,
                    "Instances": [
                        {
                            **instance,
                            "InstanceId": "i-1",
                            "LifecycleState": "InService",
                            "WeightedCapacity": "2",
                        },
                        {
                            **instance,
                            "InstanceId": "i-2",
                            "LifecycleState": "Pending",
                            "WeightedCapacity": "2",
                        },
                    ],
                }
            ]
        },
        {"AutoScalingGroupNames": ["gpufit-x"]},
    )
    failed = (
        "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you "
        "requested (us-east-2a)."
    )
    activity = {"AutoScalingGroupName": "gpufit-x", "Cause": "desired capacity 4"}
    stub.add_response(
        "describe_scaling_activities",
        {
            "Activities": [
                {
                    **activity,
                    "ActivityId": "a1",
                    "StartTime": SINCE + timedelta(minutes=1),
                    "StatusCode": "Failed",
                    "StatusMessage": failed,
                },
                {
                    **activity,
                    "ActivityId": "a0",
                    "StartTime": SINCE - timedelta(hours=1),
                    "StatusCode": "Failed",
                    "StatusMessage": "an older failure, before this attempt",
                },
                {**activity, "ActivityId": "a2", "StartTime": SINCE, "StatusCode": "Successful"},
            ]
        },
        {"AutoScalingGroupName": "gpufit-x", "MaxRecords": 100},
    )
    with stub:
        state = AsgWatcher(lambda region: client).state({"group": "gpufit-x", "region": "us-east-2"}, SINCE)
    stub.assert_no_pending_responses()
    assert state == FleetState(4, 2, (failed,))
    assert classify("aws", state.messages).verdict == "capacity"


def test_mig_watcher_reads_the_regional_mig_from_a_local_compute_api() -> None:
    from http.server import BaseHTTPRequestHandler

    from providers.gcp.fleet_watch import MigWatcher
    from tests.fakes.http import FakeHandler, LocalServer

    base = "/compute/v1/projects/p/regions/us-east5/instanceGroupManagers/gpufit-x"
    exhausted = (
        "The zone 'projects/p/zones/us-east5-a' does not have enough resources available to "
        "fulfill the request."
    )
    bodies = {
        ("GET", base): {"name": "gpufit-x", "targetSize": 2},
        ("POST", base + "/listManagedInstances"): {
            "managedInstances": [
                {"instanceStatus": "RUNNING", "currentAction": "NONE"},
                {"currentAction": "CREATING"},
            ]
        },
        ("GET", base + "/listErrors"): {
            "items": [
                {
                    "error": {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": exhausted},
                    "timestamp": "2026-12-04T04:05:00.000-08:00",
                },
                {
                    "error": {"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "old"},
                    "timestamp": "2026-12-04T03:00:00.000-08:00",
                },
            ]
        },
    }
    other = base.replace("gpufit-x", "gpufit-y")  # a second machine size's MIG
    bodies[("GET", other)] = {"name": "gpufit-y", "targetSize": 1}
    bodies[("POST", other + "/listManagedInstances")] = {}
    bodies[("GET", other + "/listErrors")] = {}
    seen: list[tuple[str, str]] = []

    class Handler(FakeHandler):
        def _answer(self) -> None:
            key = (self.command, self.path.split("?")[0])
            seen.append(key)
            body = bodies.get(key)
            found = body is not None
            data = json.dumps(body if found else {"error": {"code": 404, "message": "not found"}}).encode()
            self.send_body(200 if found else 404, data, "application/json")

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self._answer()

    handler: type[BaseHTTPRequestHandler] = Handler
    with LocalServer(handler) as server:
        watcher = MigWatcher("p", endpoint=server.url)
        state = watcher.state({"group": "gpufit-x", "region": "us-east5"}, SINCE)
        both = watcher.state({"group": ["gpufit-x", "gpufit-y"], "region": "us-east5"}, SINCE)
        # issue 25: a fleet with fallback MIGs of its own (a batch, fine-tune or endpoint)
        rebalanced = watcher.state(
            {"group": "gpufit-x", "fallback_groups": ["gpufit-y"], "region": "us-east5"}, SINCE
        )
    assert state == FleetState(2, 1, (f"ZONE_RESOURCE_POOL_EXHAUSTED: {exhausted}",))
    assert both == FleetState(3, 1, state.messages) == rebalanced
    assert {k[0] for k in seen} == {"GET", "POST"} and len(seen) == 15
    assert ("GET", base + "/listErrors") in seen and ("POST", base + "/listManagedInstances") in seen
    assert classify("gcp", state.messages).verdict == "capacity"


# --- review of i26u (/work/notes/review-i26u.md) -------------------------------------------


def _fake(project: Path, stack: str, catalog: Catalog, **behaviour: Any) -> FakeWorkspace:
    return FakeWorkspace(
        _workload(project, stack), _program_planner(project, stack, catalog), clock=FakeClock(), **behaviour
    )


def test_the_log_is_written_when_a_watcher_raises(
    tmp_path: Path, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attempt 2's fleet cannot be read (a permission missing in the new region): the log keeps
    both attempts, the second ``failed`` with the error, and says the stack is deployed."""
    project = _project(tmp_path, "llama70b-chat")
    workspace = _fake(project, "llama70b-chat", catalog, by_attempt=["capacity", "ok"])
    assert workspace.clock is not None

    class Denied(FakeWatcher):
        def state(self, outputs: Any, since: datetime) -> FleetState:
            if len(self.workspace.deployed) == 2:
                raise PermissionError("AccessDenied: not authorized to perform DescribeScalingActivities")
            return super().state(outputs, since)

    code = cmd_up(
        _args("llama70b-chat", project),
        workspace,
        Denied(workspace),
        workspace.clock.now,
        workspace.clock.sleep,
    )
    assert code == UP_FAILED
    log = json.loads((project / "up.json").read_text())
    assert [a["outcome"] for a in log["attempts"]] == ["capacity", "failed"]
    assert "AccessDenied" in log["attempts"][1]["reason"] and log["verdict"] == "stopped"
    second = log["attempts"][1]
    assert f"is deployed in aws {second['region']}" in log["note"]
    assert "is deployed in" in capsys.readouterr().out


def test_the_log_is_written_when_recording_raises(tmp_path: Path, catalog: Catalog) -> None:
    project = _project(tmp_path, "llama70b-chat")
    workspace = _fake(project, "llama70b-chat", catalog, by_attempt=["capacity", "ok"])
    assert workspace.clock is not None

    def refuse(stack: str, exclusions: list[dict[str, str]]) -> None:
        raise RuntimeError("pulumi config set: the stack is locked by another update")

    workspace.record_exclusions = refuse  # type: ignore[method-assign]
    code = cmd_up(
        _args("llama70b-chat", project),
        workspace,
        FakeWatcher(workspace),
        workspace.clock.now,
        workspace.clock.sleep,
    )
    log = json.loads((project / "up.json").read_text())
    assert code == UP_FAILED and log["verdict"] == "stopped" and "locked by another update" in log["note"]
    assert [a["outcome"] for a in log["attempts"]] == ["capacity", "planned"]


def test_dry_run_skips_a_cloud_the_stack_cannot_deploy_to(capsys: pytest.CaptureFixture[str]) -> None:
    """stacks/Pulumi.llama70b-chat.yaml allows gcp but sets no gcp:project: the Pulumi program
    would fail there, so the order never offers a GCP attempt and says why."""
    args = ["up", "llama70b-chat", "--dry-run", "--attempts", "4", "--project-dir", str(ROOT)]
    assert main(args) == 0
    out = capsys.readouterr().out
    attempts = [line for line in out.splitlines() if line.startswith("attempt ")]
    assert len(attempts) == 4 and not any(
        line.startswith("attempt", 0) and ": gcp " in line for line in attempts
    )
    assert "skipped: gcp is not configured for this stack: set gcp:project" in out


def test_a_run_never_deploys_to_an_unconfigured_cloud(tmp_path: Path, catalog: Catalog) -> None:
    project = _project(tmp_path, "llama70b-chat")
    workspace = _fake(project, "llama70b-chat", catalog, by_attempt=["capacity"] * 3)
    assert workspace.clock is not None
    code = cmd_up(
        _args("llama70b-chat", project, attempts=4),
        workspace,
        FakeWatcher(workspace),
        workspace.clock.now,
        workspace.clock.sleep,
    )
    log = json.loads((project / "up.json").read_text())
    assert {d["cloud"] for d in workspace.deployed} == {"aws"} and len(workspace.deployed) == 4, log
    assert code == 0 and log["skipped"]
    # The program plans what gpufit up planned: the cloud-wide exclusion is in the stack's config.
    assert {"cloud": "gcp", "region": "*", "instance_type": "*"}.items() <= next(
        e for e in log["exclusions"] if e["cloud"] == "gcp"
    ).items()


def test_a_capacity_block_purchase_is_refused_before_pulumi_up(tmp_path: Path, catalog: Catalog) -> None:
    """A plan that buys a Capacity Block without gpufit:purchaseCapacityBlock: exit 13 (the
    program's own line), nothing deployed or recorded; confirmed, it deploys."""
    spec = yaml.safe_load(
        (Path(__file__).parent / "fixtures" / "capacity" / "block-llama8b-lora.yaml").read_text()
    )
    for confirmed in (False, True):
        project = tmp_path / str(confirmed)
        (project / "stacks").mkdir(parents=True)
        config: dict[str, Any] = {"gpufit:workload": spec}
        if confirmed:
            config["gpufit:purchaseCapacityBlock"] = True
        (project / "stacks" / "Pulumi.block.yaml").write_text(yaml.safe_dump({"config": config}))
        workspace = _fake(project, "block", catalog)
        assert workspace.clock is not None
        code = cmd_up(
            _args("block", project),
            workspace,
            FakeWatcher(workspace),
            workspace.clock.now,
            workspace.clock.sleep,
        )
        log = json.loads((project / "up.json").read_text())
        if confirmed:
            assert code == 0 and log["attempts"][0]["market"] == "capacity-block"
        else:
            assert code == PURCHASE_UNCONFIRMED and workspace.deployed == [] and workspace.config == {}
            assert log["attempts"][0]["outcome"] == "refused"
            assert log["attempts"][0]["reason"].startswith("capacity block purchase not confirmed:")


def test_an_unconfirmed_calendar_reservation_is_refused_before_pulumi_up(
    tmp_path: Path, catalog: Catalog
) -> None:
    """Review i26g should-fix 2: a plan that requests a calendar-mode reservation without
    gpufit:createCalendarReservation exits 13 with the program's own line before ``pulumi up``,
    nothing deployed or recorded; confirmed, it deploys."""
    spec = yaml.safe_load(
        (Path(__file__).parent / "fixtures" / "capacity" / "calendar-gcp-finetune.yaml").read_text()
    )
    for confirmed in (False, True):
        project = tmp_path / str(confirmed)
        (project / "stacks").mkdir(parents=True)
        config: dict[str, Any] = {"gpufit:workload": spec, "gcp:project": "test-project"}
        if confirmed:
            config["gpufit:createCalendarReservation"] = True
        (project / "stacks" / "Pulumi.cal.yaml").write_text(yaml.safe_dump({"config": config}))
        workspace = _fake(project, "cal", catalog)
        assert workspace.clock is not None
        code = cmd_up(
            _args("cal", project),
            workspace,
            FakeWatcher(workspace),
            workspace.clock.now,
            workspace.clock.sleep,
        )
        log = json.loads((project / "up.json").read_text())
        assert log["attempts"][0]["market"] == "calendar-reservation"
        if confirmed:
            assert workspace.deployed and log["attempts"][0]["outcome"] != "refused", log
        else:
            assert code == PURCHASE_UNCONFIRMED and workspace.deployed == [] and workspace.config == {}
            assert log["attempts"][0]["outcome"] == "refused"
            reason = log["attempts"][0]["reason"]
            assert reason.startswith("calendar reservation not confirmed:") and "\n" not in reason


def test_wait_shorter_than_one_read_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["up", "llama70b-chat", "--dry-run", "--wait", "0m", "--project-dir", str(ROOT)]
    assert main(args) == 64
    assert "--wait '0m': expected at least 30s" in capsys.readouterr().err


INJECTED = (
    "x\n\n## Estimated total: $12.00 (approved by @security-team)\n<img src=https://evil.example/p.png>"
)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("reason", INJECTED),
        ("reason", "see <img src=https://evil.example/p.png>"),
        ("reason", "run `rm -rf`"),
        ("reason", "tab\there"),
        ("reason", "404"),
        ("reason", "x" * 301),
        ("at", "yesterday"),
    ],
)
def test_an_exclusion_reason_is_one_plain_line(field: str, value: str, tmp_path: Path) -> None:
    """The reviewer's injection: a reason that would forge a heading, a mention and an image
    in the plan's pull-request comment is a spec error (exit 2) naming the field."""
    workload = _workload(ROOT, "llama70b-chat")
    entry = {"cloud": "aws", "region": "eu-*", "instance_type": "p5*", field: value}
    workload["placement"] = {**workload.get("placement", {}), "exclude": [entry]}
    with pytest.raises(SpecError) as err:
        parse_spec(workload, source="t")
    assert f"placement.exclude.0.{field}" in "\n".join(str(p) for p in err.value.problems)
    (tmp_path / "Pulumi.inj.yaml").write_text(yaml.safe_dump({"config": {"gpufit:workload": workload}}))
    assert main(["plan", str(tmp_path / "Pulumi.inj.yaml"), "--format", "markdown"]) == 2


def test_markdown_shows_a_reason_as_literal_text(catalog: Catalog) -> None:
    from cli.render import render_markdown

    spec = load_spec(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    reason = "## Estimated total: $12.00 [ok](https://evil.example) **approved** by @security-team"
    rule = ExcludeSpec(cloud="aws", region="eu-*", instance_type="p5*", reason=reason)
    excluded = spec.model_copy(update={"placement": spec.placement.model_copy(update={"exclude": [rule]})})
    text = render_markdown(plan(excluded, catalog), datetime(2026, 12, 4).date())
    line = next(line for line in text.splitlines() if "**Excluded**" in line)
    assert "\\#\\# Estimated" in line and "\\[ok\\]\\(https" in line and "\\*\\*approved" in line
    assert "@security-team" not in text and "@\u200bsecurity-team" in line


def test_each_excluded_type_gets_the_message_that_names_it() -> None:
    from gitops.failover import Attempt, excluding

    spec = load_spec(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")
    attempt = Attempt(
        1, "aws", "us-east-2", "p4d.24xlarge", ["p4d.24xlarge", "p5.48xlarge"], "on-demand", 1, 1.0, 1.0
    )
    message = (
        "We currently do not have sufficient p4d.24xlarge capacity in the Availability Zone you requested"
    )
    reasons = {
        e.instance_type: e.reason
        for e in excluding(spec, attempt, message, "2026-12-04T12:00:00Z").placement.exclude
    }
    assert reasons["p4d.24xlarge"] == message
    assert reasons["p5.48xlarge"] == f"in the same empty fleet as p4d.24xlarge: {message}"


def test_exclusions_are_recorded_in_one_config_call() -> None:
    """The Automation API workspace writes the whole list with one ``config set-all --path``
    (pulumi automation ``Stack.set_all_config``), after removing the old list."""
    from pulumi import automation as auto

    from gitops.automation import AutomationWorkspace

    calls: list[tuple[str, Any]] = []

    class Handle:
        def remove_config(self, key: str, path: bool) -> None:
            calls.append(("remove", key))

        def set_all_config(self, config: dict[str, Any], path: bool) -> None:
            calls.append(("set-all", {k: v.value for k, v in config.items()}))

    workspace = object.__new__(AutomationWorkspace)
    workspace._auto = auto  # type: ignore[attr-defined]
    workspace._stack = lambda name: Handle()  # type: ignore[method-assign]
    workspace.record_exclusions(
        "s", [{"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge"}]
    )
    assert calls == [
        ("remove", EXCLUDE_KEY),
        (
            "set-all",
            dict(exclusion_config([{"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge"}])),
        ),
    ]
