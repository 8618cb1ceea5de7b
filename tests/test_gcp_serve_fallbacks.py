"""Issue 25, GCP fleet breadth for served endpoints: a stateless GCP serve plan's fallbacks with at
least the choice's GPU memory each get a MIG of their own, every VM running the choice's launch
(its replicas, ports, GPUs and TP; a bigger VM's other GPUs idle and paid for), every group a
backend of the one regional backend service, and the rebalancer moving a starved replica to the
next group; the endpoint's security model is the choice's; the budget counts the set once at
its dearest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policy.gpufit_policies import RESOURCE_VALIDATORS, STACK_VALIDATORS, check_stack_budget
from policy.resources import PolicyConfig
from providers.gcp.endpoint import HEALTH_CHECK_RANGES, PROXY_SUBNET_CIDR
from providers.gcp.rebalance import workflow_definition
from selector.breadth import GCP_ONE_TYPE_NOTE
from selector.fallbacks import served_group_shape
from selector.gcp_flexibility import realisation
from selector.select import plan, width
from selector.spec import parse_spec
from tests.conftest import ROOT
from tests.machine.unpack import file_named, settings
from tests.pulumi_harness import RecordingMocks, run_program
from tests.test_gcp_fleet import NOW
from tests.test_gcp_rebalance import CATALOG, MIG, TEMPLATE, WORKFLOW, FakeCompute, _type
from tests.workflows_interp import Workflow

REALISTIC = Path(__file__).parent / "fixtures" / "realistic"
BACKEND = "gcp:compute/regionBackendService:RegionBackendService"
FIREWALL = "gcp:compute/firewall:Firewall"
ARMOR = "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy"

PHI4 = {
    "name": "phi4-spot",
    "task": "serve",
    "model": {"preset": "phi-4"},
    "precision": "bf16",
    "serving": {
        "context_tokens": 8192,
        "concurrency": 16,
        "tokens_per_s_per_stream": 20,
        "expose": "load_balancer",
        "domain": "api.example.com",
    },
    "access": {"api_cidrs": ["203.0.113.0/24"]},
    "fault_tolerance": "stateless",
    "duration": "168h",
    "placement": {"clouds": ["gcp"], "regions": ["europe-north1"]},
}


def _fixture(name: str) -> Any:
    """The fixture's plan ranked by expected cost alone (``placement.min_fallbacks: 0``): by
    default 04, 05 and 23 take a broader offer (tests/test_breadth_choice.py)."""
    doc = yaml.safe_load((REALISTIC / f"{name}.yaml").read_text())
    doc["placement"] = {**doc.get("placement", {}), "min_fallbacks": 0}
    return plan(parse_spec(doc), CATALOG)


def test_a_served_model_takes_a_group_of_a_type_with_at_least_its_gpu_memory() -> None:
    h100_1, h100_8, a100_40_8 = _type("a3-highgpu-1g"), _type("a3-highgpu-8g"), _type("a2-highgpu-8g")
    assert realisation(h100_1, h100_8, None, batch=False, served=True) == "group"
    assert realisation(h100_1, a100_40_8, None, batch=False, served=True) is None  # 40 < 80 GB
    assert realisation(h100_1, h100_8, None, batch=False) is None  # not stateless: one group


def test_a_served_group_runs_the_choices_replicas_on_a_vm_with_their_gpus() -> None:
    planned = _fixture("25-phi4-spot-endpoint")
    choice = planned.choice.shape
    big = planned.fallbacks[-1].shape
    assert served_group_shape(choice, big, 8) is not None
    assert served_group_shape(choice, big, 0) is None  # the VM lacks the replica's GPU
    from dataclasses import replace

    assert served_group_shape(choice, replace(big, tensor_parallel=2, gpus_per_replica=2), 8) is None
    slower = replace(big, tokens_per_s_per_replica=choice.tokens_per_s_per_replica * 0.9)
    assert served_group_shape(choice, slower, 8) is None


def test_the_phi4_spot_endpoint_has_several_fallbacks_each_running_its_launch() -> None:
    """Fixture 25: a3-highgpu-1g spot in europe-north1, with no fallback before issue 25's
    served groups; the catalog's other types there are a3-highgpu-2g/4g/8g spot, and then
    a3-highgpu-8g on-demand, the one type sold on demand there (its on-demand group)."""
    planned = _fixture("25-phi4-spot-endpoint")
    choice = planned.choice
    assert choice.offer.instance.name == "a3-highgpu-1g" and choice.offer.region == "europe-north1"
    assert [(f.offer.instance.name, f.offer.market) for f in planned.fallbacks] == [
        ("a3-highgpu-2g", "spot"),
        ("a3-highgpu-4g", "spot"),
        ("a3-highgpu-8g", "spot"),
        ("a3-highgpu-8g", "on-demand"),
    ]
    assert planned.breadth_note is None
    for f in planned.fallbacks:
        assert f.realised == "group" and f.weighted_capacity == choice.shape.replicas_per_instance == 1
        assert (f.shape.gpus_per_replica, f.shape.tensor_parallel) == (1, choice.shape.tensor_parallel)
        assert f.shape.instances == choice.shape.instances and f.shape.replicas == choice.shape.replicas
        assert f.idle_gpus == f.offer.instance.gpu_count - 1
        # the whole VM is paid for: its price, not the replica's share of it
        assert f.cost.total_usd > choice.cost.total_usd * (f.offer.instance.gpu_count - 0.5)
        assert f.offer.region == choice.offer.region
        assert f.refuge == (f.offer.market == "on-demand") and f.refuge != (
            f.offer.market == choice.offer.market
        )


def pinned(name: str) -> Any:
    """A copy of a realistic fixture pinned to GCP's europe-north1 (its plan on main), so that a
    broader selector may move the fixture itself elsewhere without moving this test."""
    doc = yaml.safe_load((REALISTIC / f"{name}.yaml").read_text())
    doc["placement"] = {**doc.get("placement", {}), "clouds": ["gcp"], "regions": ["europe-north1"]}
    return doc


@pytest.mark.parametrize("name", ["04-llama70b-fp8-spot", "23-qwen3-235b-endpoint"])
def test_a_four_gpu_endpoint_in_europe_north1_takes_the_one_bigger_type(name: str) -> None:
    """Fixtures 04 and 23 (a3-highgpu-4g, TP 4; 23 took 8 GPUs a replica while every MoE plan paid
    the 25 µs per routed expert older engine releases do): europe-north1 sells no other type with 80 GB
    GPUs but a3-highgpu-8g (the catalog's spot rows there: a3-highgpu-1g/2g/4g/8g); the 1g and 2g
    lack the replica's 4 GPUs. Its spot group, then its on-demand group (the spot drought's). Only
    the spot group counts toward ``placement.min_fallbacks`` (``breadth_choice.breadth_of``), so
    the plan says the fleet is narrow: 1 other type, and no broader region within europe-north1."""
    planned = plan(parse_spec(pinned(name)), CATALOG)
    assert planned.choice.offer.instance.name == "a3-highgpu-4g"
    assert [(f.offer.instance.name, f.offer.market, f.realised, f.idle_gpus) for f in planned.fallbacks] == [
        ("a3-highgpu-8g", "spot", "group", 4),
        ("a3-highgpu-8g", "on-demand", "group", 4),
    ]
    assert width(planned.choice, planned.fallbacks) == 1
    note = planned.breadth_note
    assert note is not None and "only 1 other type(s) run it in europe-north1, spot" in note
    assert planned.broader_region is None and planned.breadth_choice is None


@pytest.mark.parametrize("name", ["05-llama405b-endpoint"])
def test_the_405b_endpoint_says_its_region_has_no_other_spot_type(name: str) -> None:
    """Fixture 05 (a3-highgpu-8g, 8 GPUs a replica) in europe-north1: no other spot type holds
    the replica, so the on-demand refuge is the only fallback and the plan says so."""
    planned = plan(parse_spec(pinned(name)), CATALOG)
    assert planned.choice.offer.instance.name == "a3-highgpu-8g"
    assert [(f.offer.instance.name, f.offer.market) for f in planned.fallbacks] == [
        ("a3-highgpu-8g", "on-demand")
    ]
    note = planned.breadth_note
    assert note is not None and "run it in europe-north1" in note
    assert GCP_ONE_TYPE_NOTE not in note  # no longer "only a batch or checkpointed job ..."


def test_an_endpoint_pinned_to_one_type_or_not_stateless_gets_no_groups() -> None:
    pinned = plan(
        parse_spec({**PHI4, "placement": {**PHI4["placement"], "instance_types": ["a3-highgpu-1g"]}}), CATALOG
    )
    assert pinned.fallbacks == () and pinned.breadth_note == "placement.instance_types pins the types"
    fragile = plan(parse_spec({**PHI4, "fault_tolerance": "none"}), CATALOG)
    assert all(f.realised != "group" for f in fragile.fallbacks)


@pytest.fixture(scope="module")
def stack() -> tuple[RecordingMocks, dict[str, Any], Any]:
    mocks, outputs = run_program({"gcp:project": "my-project", "gpufit:workload": PHI4}, NOW, stack="dev")
    return mocks, outputs, plan(parse_spec(PHI4), CATALOG)


def test_every_group_is_a_backend_of_the_one_backend_service(stack: Any) -> None:
    mocks, outputs, expected = stack
    assert len(expected.fallbacks) == 4
    migs = {r.inputs["name"]: r for r in mocks.of_type(MIG)}
    primary, groups = outputs["group"], outputs["fallback_groups"]
    assert set(migs) == {primary, *groups} and len(groups) == 4
    assert migs[primary].inputs["targetSize"] == 1
    assert [migs[g].inputs["targetSize"] for g in groups] == [0, 0, 0, 0]
    (backend,) = mocks.of_type(BACKEND)
    assert backend.inputs["portName"] == "serve0"
    backends = backend.inputs["backends"]
    assert len(backends) == 5
    assert {b["balancingMode"] for b in backends} == {"UTILIZATION"}
    assert {b["capacityScaler"] for b in backends} == {1.0}  # 0 would drain a group for good
    # each backend is one group's instance group, the choice's first, then the plan's order
    base = "https://www.googleapis.com/compute/v1/projects/test-project/regions/europe-north1/instanceGroups/"
    assert [b["group"] for b in backends] == [base + name for name in [primary, *groups]]
    for name in [primary, *groups]:
        mig = migs[name].inputs
        assert mig["namedPorts"] == [{"name": "serve0", "port": 8000}]
        assert mig["autoHealingPolicies"] == migs[primary].inputs["autoHealingPolicies"]
        assert mig["autoHealingPolicies"]["healthCheck"]


def test_the_backend_contract_refuses_the_stack_when_a_group_lacks_the_named_port(stack: Any) -> None:
    """``gcp.backends`` on the stack as registered holds; with one fallback MIG registered
    without ``serve0`` (compute.v1 ``BackendService.portName``: "The named port must be defined
    on each backend instance group"), or the backend service moved to another region, it fails."""
    from dataclasses import replace

    from tests.contracts.gcp_rules import check_backends
    from tests.contracts.model import Stack

    mocks, outputs, _ = stack
    registered = mocks.contracts.stack
    (backend,) = registered.of_type(BACKEND)
    assert list(check_backends(backend, registered)) == []

    bare = outputs["fallback_groups"][-1]
    mutated = Stack(region=registered.region)
    for n, r in enumerate(registered.resources):
        if r.typ == MIG and r.inputs["name"] == bare:
            r = replace(r, inputs={k: v for k, v in r.inputs.items() if k != "namedPorts"})
        mutated.add(r, f"{n}-id")
    assert list(check_backends(backend, mutated)) == [f"backend 4: group {bare} has no named port 'serve0'"]
    elsewhere = replace(backend, inputs={**backend.inputs, "region": "us-east4"})
    assert len(list(check_backends(elsewhere, registered))) == 5  # every group in another region


def test_every_groups_template_runs_the_same_engine_command(stack: Any) -> None:
    mocks, outputs, _ = stack
    templates = mocks.of_type(TEMPLATE)
    machine_types = sorted(t.inputs["machineType"] for t in templates)
    assert machine_types == [
        "a3-highgpu-1g",
        "a3-highgpu-2g",
        "a3-highgpu-4g",
        "a3-highgpu-8g",
        "a3-highgpu-8g",
    ]
    scripts = [t.inputs["metadata"]["startup-script"] for t in templates]
    starts = {file_named(s, "/serve-start.sh") for s in scripts}
    assert len(starts) == 1  # one launch: its ports, GPU range and TP
    (start,) = starts
    assert '"device=0"' in start and "--tensor-parallel-size 1" in start and "--port 8000" in start
    found = [settings(s) for s in scripts]
    assert sorted(str(s["GROUP"]) for s in found) == sorted([outputs["group"], *outputs["fallback_groups"]])
    assert len({(str(s["KIND"]), tuple(s["SERVE_PORTS"])) for s in found}) == 1
    # the same network tags: the firewall's health-check and proxy ranges admit every group's VMs
    assert len({tuple(t.inputs["tags"]) for t in templates}) == 1


def test_the_endpoint_keeps_its_security_model(stack: Any) -> None:
    """Cloud Armor admits access.api_cidrs only, and the one backend service (with it) fronts
    every group; the VMs of every group admit the server and readiness ports from Google's
    health-check ranges and the proxy-only subnet only (one network tag for all templates)."""
    mocks, _, _ = stack
    (armor,) = mocks.of_type(ARMOR)
    rules = {r["action"]: r["match"]["config"]["srcIpRanges"] for r in armor.inputs["rules"]}
    assert rules == {"allow": ["203.0.113.0/24"], "deny(403)": ["*"]}
    (backend,) = mocks.of_type(BACKEND)
    assert backend.inputs["securityPolicy"] and backend.inputs["loadBalancingScheme"] == "EXTERNAL_MANAGED"
    walls = [f.inputs for f in mocks.of_type(FIREWALL) if f.inputs.get("direction", "INGRESS") == "INGRESS"]
    allowed = set(HEALTH_CHECK_RANGES) | {PROXY_SUBNET_CIDR}
    assert walls and all(set(w["sourceRanges"]) <= allowed for w in walls if w.get("allows")), walls
    tags = {tuple(t.inputs["tags"]) for t in mocks.of_type(TEMPLATE)}
    assert len(tags) == 1 and all(
        set(w["targetTags"]) <= set(next(iter(tags))) for w in walls if w.get("allows")
    )


def test_the_workflow_moves_a_starved_replica_to_the_next_group(stack: Any) -> None:
    mocks, _, _ = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    env = {
        **workflow.inputs["userEnvVars"],
        "GOOGLE_CLOUD_PROJECT_ID": "my-project",
        "GPUFIT_DEADLINE": "2000000000",
    }
    doc = json.loads(env["GPUFIT_REBALANCE"])
    assert doc["units"] == 1 and {g["weight"] for g in doc["groups"]} == {1}
    names = [g["name"] for g in doc["groups"]]
    assert [g["machine_type"] for g in doc["groups"]] == [
        "a3-highgpu-1g",
        "a3-highgpu-2g",
        "a3-highgpu-4g",
        "a3-highgpu-8g",
        "a3-highgpu-8g",  # on-demand
    ]
    targets = {n: 0 for n in names}
    targets[names[0]] = 1
    compute = FakeCompute("my-project", "europe-north1", dict(targets), {names[0]: ["vm"]})
    Workflow(workflow_definition(), env, compute, 1_900_000_000.0, lambda t: None).execute()
    assert compute.targets == {**{n: 0 for n in names}, names[1]: 1}


def test_the_budget_counts_the_endpoints_groups_once_at_the_dearest(stack: Any) -> None:
    """The figure is read from the catalog file, not from the plan or the policy's helpers: the
    endpoint runs 1 replica on 1 VM at a time, at worst on the dearest group's type,
    a3-highgpu-8g on-demand in europe-north1 (its on-demand group's)."""
    mocks, _, expected = stack
    region = expected.choice.offer.region
    resources = [(r.typ, r.inputs, region) for r in mocks.resources if not r.typ.startswith("pulumi:")]
    rows = json.loads(Path(CATALOG.path).read_text())["offers"]
    (row,) = [
        o
        for o in rows
        if (o["cloud"], o["instance_type"], o["region"], o["market"])
        == ("gcp", "a3-highgpu-8g", "europe-north1", "on-demand")
    ]
    most = 1 * row["hourly_usd"]
    assert check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most + 0.01)) == []
    over = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most - 0.01))
    assert any("over the budget" in p for p in over), over
    config = PolicyConfig(now=NOW)
    problems = [p for check in STACK_VALIDATORS for p in check(resources, config)]
    problems += [
        p for typ, props, _ in resources for check in RESOURCE_VALIDATORS for p in check(typ, props, config)
    ]
    assert problems == []


def test_the_plan_says_how_the_served_groups_run(stack: Any) -> None:
    from cli.render import render_plan

    _, _, expected = stack
    fleet = next(line for line in render_plan(expected, NOW.date()).splitlines() if line.startswith("Fleet"))
    assert "backend of the one regional backend service" in fleet and "resumes from the bucket" not in fleet
    assert "7 GPUs idle" in fleet


def test_a_four_gpu_endpoints_fallback_group_spreads_its_replicas_like_the_choices() -> None:
    """Fixture 04 (a3-highgpu-4g, its a3-highgpu-8g group): a served group is BALANCED over the
    zones, as the choice's is (``fleet.target_shape``), not kept in one zone like a multi-GPU job."""

    workload = pinned("04-llama70b-fp8-spot")
    mocks, outputs = run_program({"gcp:project": "my-project", "gpufit:workload": workload}, NOW, stack="dev")
    migs = {r.inputs["name"]: r.inputs for r in mocks.of_type(MIG)}
    assert len(outputs["fallback_groups"]) == 2 and len(migs) == 3
    assert {m["distributionPolicyTargetShape"] for m in migs.values()} == {"BALANCED"}


def _managed(name: str, zone: str, status: str | None) -> dict[str, Any]:
    """A compute.v1 ``ManagedInstance`` as ``listManagedInstances`` returns it; one the group is
    still creating (no capacity) has a name and URL but no ``instanceStatus``."""
    record: dict[str, Any] = {
        "name": name,
        "instance": f"https://www.googleapis.com/compute/v1/projects/my-project/zones/{zone}/instances/{name}",
        "currentAction": "NONE" if status else "CREATING",
    }
    if status:
        record |= {"instanceStatus": status, "id": "4242"}
    return record


@pytest.mark.parametrize("output", ["port_forward", "connect"])
def test_the_tunnel_and_ssh_reach_the_running_vm_not_a_starved_one(tmp_path: Path, output: str) -> None:
    """The ``port_forward`` and ``connect`` outputs, run by bash with a fake ``gcloud``
    (tests/fake_gcloud.py) answering from compute.v1 ``ManagedInstance`` records: the choice's
    group lists first an instance it cannot create (no ``instanceStatus``), the first fallback
    group the replica the rebalancer moved there. The tunnel/ssh reach the running VM in its zone,
    and no group after it is listed."""
    import os
    import subprocess

    from tests.contracts.gcp_discovery import problems
    from tests.fake_gcloud import install

    private = {**PHI4, "serving": {k: v for k, v in PHI4["serving"].items() if k not in ("expose", "domain")}}
    private.pop("access")
    _, outputs = run_program({"gcp:project": "my-project", "gpufit:workload": private}, NOW, stack="dev")
    choice, (moved_to, later, *_) = outputs["group"], outputs["fallback_groups"]
    records = {
        choice: [_managed(f"{choice}-abcd", "europe-north1-a", None)],
        moved_to: [_managed("vm-f1", "europe-north1-c", "RUNNING")],
        later: [_managed("vm-f2", "europe-north1-b", "RUNNING")],
    }
    refused = [p for rs in records.values() for r in rs for p in problems("compute.v1", "ManagedInstance", r)]
    assert refused == []
    log = install(tmp_path, records)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", outputs[output]], env=env, check=True, timeout=30)
    calls = log.read_text().splitlines()
    assert (
        calls[-1]
        == {
            "port_forward": "compute start-iap-tunnel vm-f1 8000 --local-host-port=localhost:8000"
            " --zone europe-north1-c",
            "connect": "compute ssh vm-f1 --tunnel-through-iap",
        }[output]
    )
    listed = [c.split()[4] for c in calls if "list-instances" in c]
    assert listed == [choice, moved_to]  # stops at the first group with a running VM


@pytest.mark.parametrize(
    ("regions", "named"),
    [
        (["europe-north1", "europe-west1"], "europe-west1"),
        (["europe-north1", "europe-west4"], None),
        (["europe-north1"], None),
        (None, "us-east4"),
    ],
)
def test_the_broader_region_named_is_one_placement_regions_allows(
    regions: list[str] | None, named: str | None
) -> None:
    """A narrow fleet's plan names a broader region only among ``placement.regions``: naming one the
    spec rules out would tell the user to choose what they already refused. europe-west1's
    a3-highgpu-8g spot has 2 spot fallbacks (a3-megagpu-8g, a3-ultragpu-8g); europe-west4's has one
    (a3-megagpu-8g) beside two on-demand groups, which do not count: not named."""
    doc = yaml.safe_load(  # no fallback that counts (its one group is on demand) in europe-north1
        (ROOT / "tests" / "fixtures" / "realistic" / "05-llama405b-endpoint.yaml").read_text()
    )
    doc["placement"] = {"min_fallbacks": 0, **({"regions": regions} if regions is not None else {})}
    result = plan(parse_spec(doc), CATALOG)
    assert result.choice is not None and result.choice.offer.region == "europe-north1"
    broader = result.broader_region
    assert (broader.offer.region if broader is not None else None) == named


def _phi4_up(wait: Any) -> Any:
    """``run_up`` of fixture 25 through the fake program and watcher: the replica comes up only
    in the last fallback group (a3-highgpu-8g), moved there by the rebalancer, 10 min after."""
    from gitops.failover import UpSettings, run_up
    from tests.fakes.failover import FakeClock, FakeWatcher, FakeWorkspace

    doc = dict(yaml.safe_load((REALISTIC / "25-phi4-spot-endpoint.yaml").read_text()))
    planner = lambda s: plan(s, CATALOG)  # noqa: E731
    clock = FakeClock()
    workspace = FakeWorkspace(doc, planner, by_attempt=["ring"], clock=clock)
    settings = UpSettings(attempts=1, **wait)
    report = run_up(
        "s", parse_spec(doc), planner, workspace, FakeWatcher(workspace), settings, clock.now, clock.sleep
    )
    return report, workspace


def test_gpufit_ups_default_wait_covers_the_rebalancer_reaching_the_last_group() -> None:
    """Review of the integrated tree (issue 25, should-fix 3): fixture 25's replica reaches its
    third fallback group after three rebalancer moves (each up to a Cloud Scheduler period plus
    the starvation grace) and boots there: the old fixed 15 min declared the fleet out of
    capacity first; the default wait is 15 min plus 7 min per fallback group (43 min for its
    four, the on-demand group included)."""
    from cli.up_cmd import DEFAULT_WAIT, default_wait
    from providers.gcp.rebalance import EVERY_MINUTES, GRACE_SECONDS

    planned = _fixture("25-phi4-spot-endpoint")
    per_group = EVERY_MINUTES * 60 + GRACE_SECONDS
    assert default_wait(planned).total_seconds() == DEFAULT_WAIT.total_seconds() + 4 * per_group == 43 * 60
    assert default_wait(_fixture("15-llama70b-full-ft")) == DEFAULT_WAIT  # AWS: no rebalancer
    report, workspace = _phi4_up({"wait": DEFAULT_WAIT})
    assert report.attempts[0].outcome == "capacity"  # what a flat 15 min did
    report, workspace = _phi4_up({"wait_of": default_wait})
    assert workspace.deployed[0]["fallback_groups"] and report.verdict == "up", report.attempts[0].line
    assert report.attempts[0].wait_s == 43 * 60


def test_up_dry_run_prints_each_attempts_wait(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    (tmp_path / "stacks").mkdir()
    doc = yaml.safe_load((REALISTIC / "25-phi4-spot-endpoint.yaml").read_text())
    stack = {"config": {"gcp:project": "p", "gpufit:workload": doc}}
    (tmp_path / "stacks" / "Pulumi.s.yaml").write_text(yaml.safe_dump(stack))
    assert main(["up", "s", "--dry-run", "--project-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "attempt 1: gcp a3-highgpu-1g" in out
    assert "its fleet is watched for 43 min (15 min + 4 GCP fallback group(s) × (5 min" in out, out
    assert main(["up", "s", "--dry-run", "--wait", "20m", "--project-dir", str(tmp_path)]) == 0
    assert "its fleet is watched for 20 min\n" in capsys.readouterr().out
