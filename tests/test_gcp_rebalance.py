"""Issue 25, GCP fleet breadth: which fallbacks join the choice's MIG by instance flexibility
(a sourced allowlist), which get MIGs of their own, the rebalancer that moves VMs between them
(its decision as a pure function, and its Cloud Workflows source run by a small interpreter of
the constructs it uses against a fake Compute API), the stack a GCP-only stateless batch
makes, and the budget policy that counts the groups once."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from policy.gpufit_policies import check_stack_budget
from policy.resources import PolicyConfig
from providers.gcp.rebalance import (
    GroupState,
    Move,
    RebalancedGroup,
    capacity_pattern,
    decide,
    plan_variable,
    workflow_definition,
    workflow_source,
)
from selector.catalog import load_catalog
from selector.datafile import load_yaml
from selector.gcp_flexibility import DATA_FILE, evidence, most_replicas, realisation
from selector.select import plan
from selector.spec import parse_spec
from tests.machine.unpack import settings
from tests.pulumi_harness import RecordingMocks, run_program
from tests.test_gcp_fleet import NOW

CATALOG = load_catalog()
MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
WORKFLOW = "gcp:workflows/workflow:Workflow"
JOB = "gcp:cloudscheduler/job:Job"
TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"

BATCH = {
    "name": "qwen14b-gcp-batch",
    "task": "batch",
    "model": {"preset": "qwen3-14b"},
    "precision": "bf16",
    "serving": {"context_tokens": 4096, "concurrency": 32, "tokens": 1e9},
    "fault_tolerance": "stateless",
    "teardown": {"ttl": "480h"},
    "placement": {"clouds": ["gcp"], "regions": ["europe-north1"]},
    "job": {"command": "python gen.py --resume"},
}


def _type(name: str) -> Any:
    return next(it for it in CATALOG.instance_types if it.cloud == "gcp" and it.name == name)


# ------------------------------------------------------------------------------- the allowlist


def test_the_allowlist_names_a_source_for_every_series() -> None:
    doc = load_yaml(DATA_FILE)
    assert doc["as_of"] and doc["schema_version"] == 1
    for row in doc["series"]:
        assert row["status"] in ("confirmed", "refused", "unknown")
        source = doc["sources"][row["source"]]
        assert source["url"].startswith("https://") and source["retrieved"]
    assert evidence("g2-standard-8").status == "confirmed"
    assert evidence("a3-ultragpu-8g").status == "refused" and evidence("a4-highgpu-8g").status == "refused"
    assert evidence("z9-new-8g").status == "unknown"


def test_flexibility_by_default_only_with_the_choices_gpus_in_a_confirmed_series() -> None:
    g2_8, g2_4, g2_24 = _type("g2-standard-8"), _type("g2-standard-4"), _type("g2-standard-24")
    assert realisation(g2_8, g2_4, None, batch=False) == "flexibility"  # both 1 L4
    assert realisation(g2_8, g2_24, None, batch=False) is None  # 2 L4: another count, unconfirmed
    assert realisation(g2_8, g2_24, True, batch=False) == "opted-in flexibility"
    assert realisation(g2_8, g2_4, False, batch=False) is None  # opted out
    assert realisation(g2_8, g2_24, None, batch=True) == "group"  # a batch: a MIG of its own
    assert realisation(g2_8, _type("a3-highgpu-1g"), True, batch=True) == "group"  # another GPU
    # refused by Google's code: never in one group, even opted in
    h200 = _type("a3-ultragpu-8g")
    twin = dataclasses.replace(h200, name="a3-ultragpu-8g-twin", machine_type="a3-ultragpu-8g")
    assert realisation(h200, twin, True, batch=False) is None


def test_a_gcp_only_stateless_batch_plan_has_several_fallbacks_by_default() -> None:
    """Without opting in to anything: the A3 High sizes each in a MIG of their own."""
    planned = plan(parse_spec(BATCH), CATALOG)
    assert planned.choice is not None and planned.choice.offer.cloud == "gcp"
    assert len(planned.fallbacks) >= 2
    assert {f.realised for f in planned.fallbacks} == {"group"}
    assert planned.breadth_note is None


def test_a_served_g2_plan_takes_same_gpu_sizes_by_flexibility_by_default() -> None:
    spec = {
        "name": "l4-chat",
        "task": "serve",
        "model": {"preset": "llama-3.1-8b"},
        "precision": "bf16",
        "serving": {"context_tokens": 4096, "concurrency": 4, "tokens_per_s_per_stream": 5},
        "fault_tolerance": "stateless",
        "duration": "24h",
        "placement": {"clouds": ["gcp"], "regions": ["us-central1"], "instance_types": ["g2-*"]},
    }
    planned = plan(parse_spec(spec), CATALOG)
    assert planned.choice is not None
    choice = planned.choice.offer.instance
    assert planned.fallbacks, planned.breadth_note
    for f in planned.fallbacks:
        assert f.realised == "flexibility"
        assert f.offer.instance.gpu_count == choice.gpu_count and f.offer.instance.name.startswith(
            "g2-standard-"
        )


# ----------------------------------------------------------------------------- the decision

GROUPS = (RebalancedGroup("a", 4), RebalancedGroup("b", 8), RebalancedGroup("c", 1))


def test_nothing_moves_without_a_starved_vm() -> None:
    assert decide(GROUPS, [GroupState(2), GroupState(0), GroupState(0)], 8) is None
    # the last group has nowhere to move to
    assert decide(GROUPS, [GroupState(0), GroupState(0), GroupState(8, ("vm",))], 8) is None


def test_starved_vms_move_to_the_next_group_by_the_replicas_they_held() -> None:
    # 2 VMs of 4 replicas starved: the 8-replica group takes ⌈8 ÷ 8⌉ = 1 VM
    move = decide(GROUPS, [GroupState(2, ("v1", "v2")), GroupState(0), GroupState(0)], 8)
    assert move == Move("a", ("v1", "v2"), "b", 1)
    # 1 of 2 starved: the next group still takes one 8-replica VM, capped at what the plan needs
    assert decide(GROUPS, [GroupState(2, ("v1",)), GroupState(0), GroupState(0)], 8) == Move(
        "a", ("v1",), "b", 1
    )
    # the second group starved in turn: its VM's 8 replicas go to 8 one-replica VMs
    assert decide(GROUPS, [GroupState(1), GroupState(1, ("w",)), GroupState(0)], 8) == Move(
        "b", ("w",), "c", 4
    )


def test_a_move_never_shrinks_the_next_group_nor_passes_the_plans_replicas() -> None:
    # c already runs 8 one-replica VMs: b's starved VM adds nothing, c stays at 8
    move = decide(GROUPS, [GroupState(0), GroupState(1, ("w",)), GroupState(8)], 8)
    assert move == Move("b", ("w",), "c", 8)


def test_no_sequence_of_runs_holds_more_than_the_budget_counts() -> None:
    """Random starvation, runs and finished VMs leaving: the groups never hold more replicas than
    ``most_replicas``, the figure the budget policy prices."""
    rng = random.Random(25)
    for _ in range(300):
        weights = [rng.choice([1, 2, 4, 8]) for _ in range(rng.randint(2, 4))]
        groups = [RebalancedGroup(f"g{i}", w) for i, w in enumerate(weights)]
        units = weights[0] * rng.randint(1, 4)
        targets = [units // weights[0], *[0] * (len(groups) - 1)]
        for _ in range(12):
            states = [GroupState(t, tuple(f"vm{k}" for k in range(rng.randint(0, t)))) for t in targets]
            move = decide(groups, states, units)
            if move is not None:
                i = [g.name for g in groups].index(move.source)
                targets[i] -= len(move.delete)
                targets[i + 1] = move.target
            if rng.random() < 0.1:  # a finished VM leaves its group
                k = rng.randrange(len(targets))
                targets[k] = max(targets[k] - 1, 0)
            held = sum(t * w for t, w in zip(targets, weights, strict=True))
            assert held <= most_replicas(weights, units), (weights, units, targets)


# --------------------------------------------- the workflow, run by an interpreter of its constructs


class Obj(dict[str, Any]):
    """A Workflows map: keys read as attributes (``got.body.targetSize``)."""

    def __getattr__(self, key: str) -> Any:
        return self[key]


def _obj(value: Any) -> Any:
    if isinstance(value, dict):
        return Obj({k: _obj(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_obj(v) for v in value]
    return value


class Ns:
    def __init__(self, **fns: Any) -> None:
        self.__dict__.update(fns)


def _map_get(m: Any, keys: Any) -> Any:
    for key in [keys] if isinstance(keys, str) else keys:
        if not isinstance(m, dict) or key not in m:
            return None
        m = m[key]
    return m


class Returned(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class FakeCompute:
    """The Compute REST calls the workflow makes, on groups held here."""

    def __init__(
        self, project: str, region: str, targets: dict[str, int], starved: dict[str, list[str]]
    ) -> None:
        self.base = f"https://compute.googleapis.com/compute/v1/projects/{project}/regions/{region}/instanceGroupManagers/"
        self.targets, self.starved, self.calls = targets, starved, []

    def __call__(self, method: str, args: dict[str, Any]) -> Any:
        assert args["auth"] == {"type": "OAuth2"}
        url = args["url"]
        assert url.startswith(self.base), url
        name, _, action = url[len(self.base) :].partition("/")
        self.calls.append((method, name, action))
        if method == "http.get" and not action:
            return _obj({"body": {"targetSize": self.targets[name]}})
        if action == "listManagedInstances":
            error = {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}]}
            vms = [
                {"instance": v, "currentAction": "CREATING", "lastAttempt": {"errors": error}}
                for v in self.starved.get(name, [])
            ]
            vms.append({"instance": "running", "currentAction": "NONE"})
            return _obj({"body": {"managedInstances": vms}})
        if action == "deleteInstances":
            self.targets[name] -= len(args["body"]["instances"])
            return _obj({"body": {}})
        found = re.fullmatch(r"resize\?size=(\d+)", action)
        assert method == "http.post" and found, (method, action)
        self.targets[name] = int(found.group(1))
        return _obj({"body": {}})


def _run_workflow(env: dict[str, str], compute: FakeCompute, now: float) -> Any:
    scope: dict[str, Any] = {}
    names = {
        "sys": Ns(get_env=lambda k: env[k], now=lambda: now),
        "json": Ns(decode=lambda t: _obj(json.loads(t)), encode_to_string=lambda v: json.dumps(v)),
        "text": Ns(match_regex=lambda s, r: re.search(r, s) is not None),
        "map": Ns(get=_map_get),
        "list": Ns(concat=lambda xs, v: [*xs, v]),
        "default": lambda v, d: d if v is None else v,
        "len": len,
        "int": int,
        "string": str,
        "true": True,
        "false": False,
    }

    def ev(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
            return eval(value[2:-1], {"__builtins__": {}}, {**names, **scope})
        return value

    def run(steps: list[dict[str, Any]]) -> None:
        for step in steps:
            ((_, body),) = step.items()
            if "assign" in body:
                for item in body["assign"]:
                    ((key, value),) = item.items()
                    scope[key] = ev(value)
            elif "switch" in body:
                for case in body["switch"]:
                    if ev(case["condition"]):
                        for item in case.get("assign", []):
                            ((key, value),) = item.items()
                            scope[key] = ev(value)
                        run(case.get("steps", []))
                        if "return" in case:
                            raise Returned(ev(case["return"]))
                        break
            elif "for" in body:
                loop = body["for"]
                items = (
                    ev(loop["in"]) if "in" in loop else range(ev(loop["range"][0]), ev(loop["range"][1]) + 1)
                )
                for item in items:
                    scope[loop["value"]] = item
                    run(loop["steps"])
            elif "call" in body:
                args = {k: ev(v) if k != "auth" else v for k, v in body["args"].items()}
                scope[body["result"]] = compute(body["call"], args)
            elif "return" in body:
                raise Returned(ev(body["return"]))
            else:
                raise AssertionError(f"a step the interpreter does not know: {body}")

    try:
        run(workflow_definition()["main"]["steps"])
    except Returned as done:
        return done.value
    raise AssertionError("the workflow ended without a return")


@pytest.mark.parametrize(
    ("targets", "starved"),
    [
        ([2, 0, 0], {}),
        ([2, 0, 0], {"a": ["v1", "v2"]}),
        ([2, 0, 0], {"a": ["v1"]}),
        ([1, 1, 0], {"b": ["w"]}),
        ([0, 1, 8], {"b": ["w"]}),
        ([2, 1, 0], {"a": ["v1"], "b": ["w"]}),
    ],
)
def test_the_workflow_makes_the_decisions_move(targets: list[int], starved: dict[str, list[str]]) -> None:
    env = {"GPUFIT_REBALANCE": plan_variable("europe-north1", GROUPS, 8, 2_000_000_000)}
    compute = FakeCompute("p", "europe-north1", dict(zip("abc", targets, strict=True)), starved)
    _run_workflow({**env, "GOOGLE_CLOUD_PROJECT_ID": "p"}, compute, now=1_900_000_000.0)
    states = [GroupState(t, tuple(starved.get(g.name, []))) for g, t in zip(GROUPS, targets, strict=True)]
    move = decide(GROUPS, states, 8)
    expected = dict(zip("abc", targets, strict=True))
    if move is not None:
        expected[move.source] -= len(move.delete)
        expected[move.destination] = move.target
    assert compute.targets == expected
    writes = [c for c in compute.calls if c[2] and c[2] != "listManagedInstances"]
    assert len(writes) == (2 if move else 0)  # a delete and a resize, or nothing


def test_the_workflow_does_nothing_past_the_deadline() -> None:
    env = {"GPUFIT_REBALANCE": plan_variable("r", GROUPS, 8, 1000), "GOOGLE_CLOUD_PROJECT_ID": "p"}
    compute = FakeCompute("p", "r", {"a": 2, "b": 0, "c": 0}, {"a": ["v1"]})
    assert _run_workflow(env, compute, now=1000.0) == "past the deadline"
    assert compute.calls == []


def test_the_workflow_source_keeps_to_the_workflows_syntax() -> None:
    """https://cloud.google.com/workflows/docs/reference/syntax: a ``main`` workflow of named
    steps, each one of assign/switch/for/call/return; ``for`` takes ``value`` and ``in`` or
    ``range``; every switch case a ``condition``; expressions in ``${}``; calls only to the
    HTTP functions, with OAuth2, on the Compute API."""
    doc = yaml.safe_load(workflow_source())
    assert list(doc) == ["main"] and list(doc["main"]) == ["steps"]
    kinds = {"assign", "switch", "for", "call", "return"}

    def walk(steps: list[Any]) -> None:
        for step in steps:
            assert isinstance(step, dict) and len(step) == 1
            ((name, body),) = step.items()
            assert re.fullmatch(r"[a-z_]+", name)
            assert set(body) & kinds and set(body) <= kinds | {"args", "result"}
            if "for" in body:
                assert "value" in body["for"] and ("in" in body["for"]) != ("range" in body["for"])
                walk(body["for"]["steps"])
            if "switch" in body:
                for case in body["switch"]:
                    assert case["condition"].startswith("${")
                    walk(case.get("steps", []))
            if "call" in body:
                assert body["call"] in ("http.get", "http.post") and body["args"]["auth"] == {
                    "type": "OAuth2"
                }

    walk(doc["main"]["steps"])
    for expr in re.findall(r"\$\{.*?\}(?=\s*$|\")", workflow_source(), re.MULTILINE):
        assert expr.count("(") == expr.count(")")
    assert len(workflow_source().encode()) < 128 * 1024  # Workflow.sourceContents' limit
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in capacity_pattern()


# ------------------------------------------------------------------- the stack and its budget


@pytest.fixture(scope="module")
def stack() -> tuple[RecordingMocks, dict[str, Any], Any]:
    mocks, outputs = run_program({"gcp:project": "my-project", "gpufit:workload": BATCH}, NOW, stack="dev")
    return mocks, outputs, plan(parse_spec(BATCH), CATALOG)


def test_the_batch_fleet_realises_its_fallbacks_as_groups_with_a_rebalancer(stack: Any) -> None:
    mocks, outputs, expected = stack
    migs = {r.inputs["name"]: r.inputs for r in mocks.of_type(MIG)}
    primary = outputs["group"]
    assert len(expected.fallbacks) >= 2 and len(migs) == 1 + len(expected.fallbacks)
    assert migs[primary]["targetSize"] == expected.choice.shape.instances
    fallback_groups = outputs["fallback_groups"]
    assert [migs[g]["targetSize"] for g in fallback_groups] == [0] * len(expected.fallbacks)
    assert sorted(outputs["fallbacks"]) == sorted(f.offer.instance.name for f in expected.fallbacks)
    machine_types = sorted(t.inputs["machineType"] for t in mocks.of_type(TEMPLATE))
    assert machine_types == sorted(
        [
            expected.choice.offer.instance.machine_type,
            *(f.offer.instance.machine_type for f in expected.fallbacks),
        ]
    )
    # each group's VMs leave (and ask to be recreated in) their own group
    groups_left = sorted(
        settings(t.inputs["metadata"]["startup-script"])["GROUP"] for t in mocks.of_type(TEMPLATE)
    )
    assert groups_left == sorted([primary, *fallback_groups])
    (workflow,) = mocks.of_type(WORKFLOW)
    doc = json.loads(workflow.inputs["userEnvVars"]["GPUFIT_REBALANCE"])
    assert [g["name"] for g in doc["groups"]] == [primary, *fallback_groups]
    assert doc["units"] == expected.fleet_units
    assert yaml.safe_load(workflow.inputs["sourceContents"]) == workflow_definition()
    jobs = {r.inputs["schedule"]: r.inputs for r in mocks.of_type(JOB)}
    tick = jobs["*/5 * * * *"]
    assert tick["httpTarget"]["uri"].startswith("https://workflowexecutions.googleapis.com/v1/projects/")
    assert tick["httpTarget"]["oauthToken"]["serviceAccountEmail"] == workflow.inputs["serviceAccount"]
    # the deadline brings every group to 0
    resized = sorted(
        r.inputs["httpTarget"]["uri"]
        for r in mocks.of_type(JOB)
        if r.inputs["httpTarget"]["uri"].endswith("size=0")
    )
    assert sorted(u.split("/")[-2] for u in resized) == sorted([primary, *fallback_groups])


def test_the_rebalancer_may_only_get_and_resize_the_fleets_groups(stack: Any) -> None:
    mocks, outputs, _ = stack
    (role,) = mocks.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
    assert sorted(role.inputs["permissions"]) == [
        "compute.instanceGroupManagers.get",
        "compute.instanceGroupManagers.update",
    ]
    members = mocks.of_type("gcp:projects/iAMMember:IAMMember")
    on_groups = [m.inputs for m in members if m.inputs.get("condition")]
    names = [outputs["group"], *outputs["fallback_groups"]]
    for grant in on_groups:
        expression = grant["condition"]["expression"]
        assert sorted(re.findall(r'instanceGroupManagers/([^"]+)"', expression)) == sorted(names)
    assert any(m["member"].startswith("serviceAccount:gf-rebal-") for m in on_groups)
    invoker = [m.inputs for m in members if m.inputs["role"] == "roles/workflows.invoker"]
    assert len(invoker) == 1 and invoker[0]["member"].startswith("serviceAccount:gf-rebal-")


def test_the_budget_counts_the_groups_at_the_most_they_hold_not_their_sum(stack: Any) -> None:
    mocks, _, expected = stack
    region = expected.choice.offer.region
    resources = [(r.typ, r.inputs, region) for r in mocks.resources]
    (workflow,) = mocks.of_type(WORKFLOW)
    doc = json.loads(workflow.inputs["userEnvVars"]["GPUFIT_REBALANCE"])
    offers = [expected.choice.offer, *(f.offer for f in expected.fallbacks)]
    weights = [g["weight"] for g in doc["groups"]]
    most = max(o.hourly_usd / w for o, w in zip(offers, weights, strict=True)) * most_replicas(
        weights, doc["units"]
    )
    assert check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most + 0.01)) == []
    over = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most - 0.01))
    assert any("over the budget" in p for p in over), over
    summed = sum(o.hourly_usd * max(1, doc["units"] // w) for o, w in zip(offers, weights, strict=True))
    assert most < summed  # not the sum of the groups each run full


def test_the_plan_shows_how_each_gcp_fallback_is_realised(stack: Any) -> None:
    from cli.render import render_plan
    from selector import report

    _, _, expected = stack
    text = render_plan(expected, NOW.date())
    assert "its own MIG at size 0" in text and "Cloud Workflows rebalancer" in text
    doc = report.plan_to_dict(expected, NOW.date())
    assert {f["realised"] for f in doc["choice"]["fallbacks"]} == {"group"}
    assert all(f["realised_how"] for f in doc["choice"]["fallbacks"])
    assert Path(DATA_FILE).exists()


def test_the_whole_policy_pack_passes_the_rebalanced_stack(stack: Any) -> None:
    """Every per-resource and stack validator (the fallback groups' deadline jobs included)."""
    from policy.gpufit_policies import RESOURCE_VALIDATORS, STACK_VALIDATORS

    mocks, _, expected = stack
    region = expected.choice.offer.region
    resources = [(r.typ, r.inputs, region) for r in mocks.resources if not r.typ.startswith("pulumi:")]
    config = PolicyConfig(now=NOW)
    problems = [p for check in STACK_VALIDATORS for p in check(resources, config)]
    problems += [
        p for typ, props, _ in resources for check in RESOURCE_VALIDATORS for p in check(typ, props, config)
    ]
    assert problems == []


def test_the_workflows_compute_requests_match_the_discovery_document() -> None:
    """Each call the workflow makes against ``compute.v1``: its HTTP method and path, the
    ``deleteInstances`` body, and the response fields it reads (the groups list without paging:
    ``listManagedInstancesResults`` defaults to PAGELESS, "pageToken ... supported only if ...
    PAGINATED")."""
    from tests.contracts.gcp_discovery import document, problems

    compute = document("compute.v1")
    methods = compute["resources"]["regionInstanceGroupManagers"]["methods"]
    schemas = compute["schemas"]
    calls = {}

    def walk(steps: list[Any]) -> None:
        for step in steps:
            ((_, body),) = step.items()
            if "call" in body:
                url = body["args"]["url"]
                action = re.search(r'"/(\w+)', url.split("name", 1)[-1])
                calls[action.group(1) if action else "get"] = (body["call"], body["args"].get("body"))
            for nested in (
                body.get("for", {}).get("steps", []),
                *[c.get("steps", []) for c in body.get("switch", [])],
            ):
                walk(nested)

    walk(workflow_definition()["main"]["steps"])
    assert set(calls) == {"get", "listManagedInstances", "deleteInstances", "resize"}
    for name, (call, _) in calls.items():
        assert methods[name]["httpMethod"] == call.removeprefix("http.").upper()
        assert methods[name]["flatPath"].endswith(
            "{instanceGroupManager}" + ("" if name == "get" else f"/{name}")
        )
    assert methods["resize"]["parameters"]["size"]["location"] == "query"
    release = {
        "instances": ["https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/vm"],
        "skipInstancesOnValidationError": True,
    }
    assert problems("compute.v1", "RegionInstanceGroupManagersDeleteInstancesRequest", release) == []
    assert '"skipInstancesOnValidationError": true' in calls["deleteInstances"][1]
    assert "targetSize" in schemas["InstanceGroupManager"]["properties"]
    assert "managedInstances" in schemas["RegionInstanceGroupManagersListInstancesResponse"]["properties"]
    instance = schemas["ManagedInstance"]["properties"]
    assert {"instance", "currentAction", "lastAttempt"} <= set(instance)
    assert "CREATING" in instance["currentAction"]["enum"]
    assert "errors" in schemas["ManagedInstanceLastAttempt"]["properties"]


def test_the_workflow_runs_in_the_fleets_region_where_workflows_does() -> None:
    from providers.gcp.rebalance import workflow_location

    assert workflow_location("europe-north1") == "europe-north1"
    assert workflow_location("africa-south1") == "us-central1"  # not on the page read
