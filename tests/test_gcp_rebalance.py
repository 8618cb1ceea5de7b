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
    DEADLINE_MARGIN_SECONDS,
    GRACE_SECONDS,
    GroupState,
    Move,
    RebalancedGroup,
    capacity_pattern,
    decide,
    plan_variable,
    still_starved,
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
from tests.workflows_interp import HttpError, Refused, Workflow, tokens

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
    assert any(f.realised == "flexibility" for f in planned.fallbacks)
    for f in planned.fallbacks:
        assert f.offer.instance.name.startswith("g2-standard-")
        # the choice's GPUs: its group by flexibility; other counts: groups of their own (issue 25),
        # as is every on-demand type after the spot ones (one template, one provisioning model)
        same = f.offer.instance.gpu_count == choice.gpu_count
        assert f.realised == ("flexibility" if same and not f.refuge else "group"), f
        assert f.refuge == (f.offer.market == "on-demand" != planned.choice.offer.market)


# ----------------------------------------------------------------------------- the decision

GROUPS = (RebalancedGroup("a", 4), RebalancedGroup("b", 8), RebalancedGroup("c", 1))


def test_nothing_moves_without_a_starved_vm() -> None:
    assert decide(GROUPS, [GroupState(2), GroupState(0), GroupState(0)], 8) is None
    assert decide(GROUPS[:1], [GroupState(2, ("v",))], 8) is None  # one group: nowhere to go


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


def test_the_last_groups_starved_vms_go_back_to_the_first() -> None:
    """Review i25g #2: the ring. The last group's starved VMs return to the choice's group."""
    assert decide(GROUPS, [GroupState(0), GroupState(0), GroupState(8, tuple("abcdefgh"))], 8) == Move(
        "c", tuple("abcdefgh"), "a", 2
    )


def test_a_move_never_shrinks_the_next_group_nor_passes_the_plans_replicas() -> None:
    # c already runs 8 one-replica VMs: b's starved VM adds nothing, c stays at 8
    move = decide(GROUPS, [GroupState(0), GroupState(1, ("w",)), GroupState(8)], 8)
    assert move == Move("b", ("w",), "c", 8)


class Cloud:
    """Groups whose machines have capacity or not, tick by tick: a resize creates VMs that start
    when their group has capacity, else wait starved (``CREATING`` with a capacity error)."""

    def __init__(self, groups: tuple[RebalancedGroup, ...], targets: list[int]) -> None:
        self.groups, self.running, self.starved = groups, [0] * len(groups), list(targets)
        self.serial = 0

    def vms(self, k: int) -> tuple[str, ...]:
        return tuple(f"{self.groups[k].name}-{n}" for n in range(self.starved[k]))

    def settle(self, has_capacity: list[bool]) -> None:
        for k, ok in enumerate(has_capacity):
            if ok:
                self.running[k] += self.starved[k]
                self.starved[k] = 0

    def tick(self, first: list[bool], after_grace: list[bool], units: int) -> Move | None:
        """One run: a list, the grace period (capacity may come back), a second list."""
        self.settle(first)
        listed = [self.vms(k) for k in range(len(self.groups))]
        self.settle(after_grace)
        states = [
            GroupState(self.running[k] + self.starved[k], still_starved(listed[k], self.vms(k)))
            for k in range(len(self.groups))
        ]
        move = decide(self.groups, states, units)
        if move is not None:
            names = [g.name for g in self.groups]
            i, j = names.index(move.source), names.index(move.destination)
            self.starved[j] += move.target - states[j].target
            self.starved[i] -= len(move.delete)
        return move


def test_a_stockout_shorter_than_the_grace_period_moves_nothing() -> None:
    cloud = Cloud(GROUPS, [2, 0, 0])
    dry, wet = [False, True, True], [True, True, True]
    assert cloud.tick(dry, wet, 8) is None  # a's VMs got capacity during the grace period
    assert cloud.running == [2, 0, 0]


def test_replicas_return_to_the_preferred_group_after_a_shortage() -> None:
    """Review i25g #2: all groups short for a while, then the choice's group recovers: the
    starved replicas go round the ring and land back in the choice's group, never more than
    the budget counts."""
    cloud = Cloud(GROUPS, [2, 0, 0])
    none = [False, False, False]
    seen = []
    for _ in range(3):  # a family-wide stockout: the VMs go a → b → c
        move = cloud.tick(none, none, 8)
        assert move is not None
        seen.append(move.destination)
        held = sum((r + st) * g.weight for r, st, g in zip(cloud.running, cloud.starved, GROUPS, strict=True))
        assert held <= most_replicas([g.weight for g in GROUPS], 8)
    assert seen == ["b", "c", "a"]  # the last group's starved VMs went back to the first
    only_a = [True, False, False]
    assert cloud.tick(only_a, only_a, 8) is None
    assert cloud.running == [2, 0, 0] and cloud.starved == [0, 0, 0]


def test_a_vm_that_got_capacity_is_not_moved_even_with_an_old_error() -> None:
    # listed starved, then it exists: not in the second list, so not moved
    assert still_starved(("v1", "v2"), ("v2",)) == ("v2",)
    assert still_starved(("v1",), ()) == ()


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
                names = [g.name for g in groups]
                targets[names.index(move.destination)] = move.target
                targets[names.index(move.source)] -= len(move.delete)
            if rng.random() < 0.1:  # a finished VM leaves its group
                k = rng.randrange(len(targets))
                targets[k] = max(targets[k] - 1, 0)
            held = sum(t * w for t, w in zip(targets, weights, strict=True))
            assert held <= most_replicas(weights, units), (weights, units, targets)


# --------------------------------------------- the workflow, run by an interpreter of its subset

ERROR = {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}]}


class FakeCompute:
    """The Compute and Cloud Scheduler REST calls the workflow makes, on groups held here.
    ``starved``: a group's VMs that do not exist, ``CREATING`` with a capacity error;
    ``created``: those that get capacity during the grace period (they then exist, and their
    record keeps the old error); ``fail``: calls that answer 503 once."""

    def __init__(
        self,
        project: str,
        region: str,
        targets: dict[str, int],
        starved: dict[str, list[str]],
        fail: tuple[str, ...] = (),
    ) -> None:
        self.base = f"https://compute.googleapis.com/compute/v1/projects/{project}/regions/{region}/instanceGroupManagers/"
        self.targets, self.starved, self.calls = targets, starved, []
        self.created: dict[str, list[str]] = {}
        self.fail, self.paused = set(fail), []
        self.extra: list[dict[str, Any]] = []

    def __call__(self, method: str, args: dict[str, Any]) -> Any:
        assert args["auth"] == {"type": "OAuth2"}
        url = args["url"]
        if url.startswith("https://cloudscheduler.googleapis.com/v1/projects/"):
            assert method == "http.post" and url.endswith(":pause")
            self.paused.append(url)
            return {"body": {}}
        assert url.startswith(self.base), url
        name, _, action = url[len(self.base) :].partition("/")
        if action.split("?")[0] in self.fail:
            self.fail.discard(action.split("?")[0])
            raise HttpError(503)
        self.calls.append((method, name, action))
        if method == "http.get" and not action:
            return {"body": {"targetSize": self.targets[name]}}
        if action == "listManagedInstances":
            vms = [
                {"instance": v, "currentAction": "CREATING", "lastAttempt": ERROR}
                for v in self.starved.get(name, [])
            ]
            vms += [  # exists now, its record still carries the earlier failure
                {
                    "instance": v,
                    "currentAction": "CREATING",
                    "instanceStatus": "STAGING",
                    "lastAttempt": ERROR,
                }
                for v in self.created.get(name, [])
            ]
            vms.append({"instance": "running", "currentAction": "NONE", "instanceStatus": "RUNNING"})
            return {"body": {"managedInstances": vms + self.extra}}
        if action == "deleteInstances":
            assert set(args["body"]) == {"instances", "skipInstancesOnValidationError"}
            assert args["body"]["skipInstancesOnValidationError"] is True
            self.targets[name] -= len(args["body"]["instances"])
            return {"body": {}}
        found = re.fullmatch(r"resize\?size=(\d+)", action)
        assert method == "http.post" and found, (method, action)
        self.targets[name] = int(found.group(1))
        return {"body": {}}


TICK = "projects/p/locations/europe-north1/jobs/gpufit-rebalance-x-tick"


def _env(deadline: int, groups: tuple[RebalancedGroup, ...] = GROUPS) -> dict[str, str]:
    return {
        "GPUFIT_REBALANCE": plan_variable("europe-north1", groups, 8, TICK),
        "GPUFIT_DEADLINE": str(deadline),
        "GOOGLE_CLOUD_PROJECT_ID": "p",
    }


def _run(compute: FakeCompute, now: float, deadline: int = 2_000_000_000, on_sleep: Any = None) -> Workflow:
    flow = Workflow(workflow_definition(), _env(deadline), compute, now, on_sleep or (lambda t: None))
    flow.result = flow.execute()  # type: ignore[attr-defined]
    return flow


@pytest.mark.parametrize(
    ("targets", "starved"),
    [
        ([2, 0, 0], {}),
        ([2, 0, 0], {"a": ["v1", "v2"]}),
        ([2, 0, 0], {"a": ["v1"]}),
        ([1, 1, 0], {"b": ["w"]}),
        ([0, 1, 8], {"b": ["w"]}),
        ([2, 1, 0], {"a": ["v1"], "b": ["w"]}),
        ([0, 0, 8], {"c": list("abcdefgh")}),
    ],
)
def test_the_workflow_makes_the_decisions_move(targets: list[int], starved: dict[str, list[str]]) -> None:
    compute = FakeCompute("p", "europe-north1", dict(zip("abc", targets, strict=True)), starved)
    _run(compute, now=1_900_000_000.0)
    states = [GroupState(t, tuple(starved.get(g.name, []))) for g, t in zip(GROUPS, targets, strict=True)]
    move = decide(GROUPS, states, 8)
    expected = dict(zip("abc", targets, strict=True))
    if move is not None:
        expected[move.source] -= len(move.delete)
        expected[move.destination] = move.target
    assert compute.targets == expected
    writes = [c for c in compute.calls if c[2] and c[2] != "listManagedInstances"]
    assert [w[2].split("?")[0] for w in writes] == (["resize", "deleteInstances"] if move else [])


def test_the_workflow_moves_only_vms_starved_in_both_lists() -> None:
    """Review i25g #3: a VM that got capacity during the grace period (it exists, its record
    still carries the earlier error) is never deleted; one that exists with an old error from
    the first list on is not starved at all."""
    compute = FakeCompute("p", "europe-north1", {"a": 2, "b": 0, "c": 0}, {"a": ["v1", "v2"]})

    def capacity_for_v1(now: float) -> None:
        compute.starved["a"], compute.created["a"] = ["v2"], ["v1"]

    _run(compute, now=1_900_000_000.0, on_sleep=capacity_for_v1)
    assert compute.targets == {"a": 1, "b": 1, "c": 0}
    compute = FakeCompute("p", "europe-north1", {"a": 1, "b": 0, "c": 0}, {})
    compute.created["a"] = ["v1"]
    assert _run(compute, now=1_900_000_000.0).result == "no group is short of capacity"  # type: ignore[attr-defined]


def test_a_recreating_vm_that_does_not_exist_moves_a_stopping_one_does_not() -> None:
    compute = FakeCompute("p", "europe-north1", {"a": 1, "b": 0, "c": 0}, {})
    compute.extra = [{"instance": "pre", "currentAction": "RECREATING", "lastAttempt": ERROR}]
    _run(compute, now=1_900_000_000.0)
    assert compute.targets == {"a": 0, "b": 1, "c": 0}
    compute = FakeCompute("p", "europe-north1", {"a": 1, "b": 0, "c": 0}, {})
    compute.extra = [
        {"instance": "x", "currentAction": "RECREATING", "instanceStatus": "STOPPING", "lastAttempt": ERROR},
        {"instance": "y", "currentAction": "CREATING_WITHOUT_RETRIES", "lastAttempt": ERROR},
    ]
    _run(compute, now=1_900_000_000.0)
    assert compute.targets == {"a": 1, "b": 0, "c": 0}


def test_the_workflow_retries_transient_errors_and_never_loses_replicas() -> None:
    """Review i25g #6: each call is retried on 503 (``http.default_retry``), and the resize
    comes before the delete."""
    compute = FakeCompute(
        "p", "europe-north1", {"a": 2, "b": 0, "c": 0}, {"a": ["v1"]}, fail=("resize", "deleteInstances")
    )
    flow = _run(compute, now=1_900_000_000.0)
    assert flow.retries == 2 and compute.targets == {"a": 1, "b": 1, "c": 0}


def test_the_workflow_at_the_deadline_empties_every_group_and_pauses_its_schedule() -> None:
    """Review i25g #4: at the deadline the workflow makes no move, resizes every group to 0
    (undoing a resize that raced the deadline jobs) and pauses its own tick."""
    compute = FakeCompute("p", "r", {"a": 2, "b": 1, "c": 0}, {"a": ["v1"]})
    compute.base = compute.base.replace("/regions/r/", "/regions/europe-north1/")
    flow = _run(compute, now=1000.0, deadline=1000)
    assert flow.result.startswith("past the deadline")  # type: ignore[attr-defined]
    assert compute.targets == {"a": 0, "b": 0, "c": 0}
    assert {c[2] for c in compute.calls} == {"resize?size=0"}
    assert compute.paused == [f"https://cloudscheduler.googleapis.com/v1/{TICK}:pause"]


def test_the_workflow_grows_no_group_just_before_the_deadline() -> None:
    """Review i25g #4: a run that starts before the deadline but would resize within
    ``DEADLINE_MARGIN_SECONDS`` of it (after its grace period) grows nothing."""
    deadline = 1_900_000_000
    start = deadline - GRACE_SECONDS - DEADLINE_MARGIN_SECONDS + 1
    compute = FakeCompute("p", "europe-north1", {"a": 2, "b": 0, "c": 0}, {"a": ["v1"]})
    flow = _run(compute, now=start, deadline=deadline)
    assert flow.result == "too close to the deadline to move"  # type: ignore[attr-defined]
    assert compute.targets == {"a": 2, "b": 0, "c": 0}


@pytest.mark.parametrize(
    "expression",
    [
        '{"instances": starved}',  # a map literal inside ${}: not in the documented syntax
        "[x for x in starved]",
        "lambda: 1",
        "1 if true else 2",
        "__import__",
        '"a" + 1',
        "starved.__class__",
    ],
)
def test_the_interpreter_refuses_what_is_not_workflows_syntax(expression: str) -> None:
    flow = Workflow({"main": {"steps": []}}, {}, lambda m, a: None, 0.0)
    flow.scope["starved"] = []
    with pytest.raises((Refused, KeyError)):
        flow.ev("${" + expression + "}")


def test_the_interpreter_drops_variables_created_in_a_loop() -> None:
    definition = {
        "main": {
            "steps": [
                {
                    "loop": {
                        "for": {"value": "x", "in": "${[1, 2]}", "steps": [{"a": {"assign": [{"inner": 1}]}}]}
                    }
                },
                {"out": {"return": "${inner}"}},
            ]
        }
    }
    with pytest.raises(Refused, match="does not exist"):
        Workflow(definition, {}, lambda m, a: None, 0.0).execute()


def test_the_workflow_source_keeps_to_the_workflows_syntax() -> None:
    """https://cloud.google.com/workflows/docs/reference/syntax: a ``main`` workflow of named
    steps, each one of assign/switch/for/call/try/return; ``for`` takes ``value`` and ``in`` or
    ``range``; every switch case a ``condition``; expressions in ``${}`` with no map literal
    (maps are YAML in an ``assign``); calls only to the HTTP functions (with OAuth2, each in a
    ``try`` with ``http.default_retry``) and ``sys.sleep``."""
    doc = yaml.safe_load(workflow_source())
    assert list(doc) == ["main"] and list(doc["main"]) == ["steps"]
    kinds = {"assign", "switch", "for", "call", "return", "try"}

    def walk(steps: list[Any], in_try: bool = False) -> None:
        for step in steps:
            assert isinstance(step, dict) and len(step) == 1
            ((name, body),) = step.items()
            assert re.fullmatch(r"[a-z_]+", name)
            check(body, in_try)

    def check(body: dict[str, Any], in_try: bool = False) -> None:
        assert len(set(body) & kinds) == 1 and set(body) <= kinds | {"args", "result", "retry"}
        if "try" in body:
            assert body["retry"] == "${http.default_retry}"
            check(body["try"], in_try=True)
        if "for" in body:
            assert "value" in body["for"] and ("in" in body["for"]) != ("range" in body["for"])
            walk(body["for"]["steps"])
        if "switch" in body:
            for case in body["switch"]:
                assert case["condition"].startswith("${")
                walk(case.get("steps", []))
        if "call" in body:
            if body["call"] == "sys.sleep":
                assert body["args"] == {"seconds": GRACE_SECONDS}
            else:
                assert in_try and body["call"] in ("http.get", "http.post")
                assert body["args"]["auth"] == {"type": "OAuth2"}

    walk(doc["main"]["steps"])
    for expr in re.findall(r"\$\{(.*?)\}(?=\s*$|\"|')", workflow_source(), re.MULTILINE):
        assert "{" not in expr, expr
        tokens(expr)  # every expression tokenises in the subset
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
    # the deadline brings every group to 0
    resized = sorted(
        r.inputs["httpTarget"]["uri"]
        for r in mocks.of_type(JOB)
        if r.inputs["httpTarget"]["uri"].endswith("size=0")
    )
    assert sorted(u.split("/")[-2] for u in resized) == sorted([primary, *fallback_groups])


def test_the_rebalancer_may_only_get_and_resize_the_fleets_groups(stack: Any) -> None:
    mocks, outputs, _ = stack
    (role,) = [
        r
        for r in mocks.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
        if r.inputs["roleId"].startswith("gpufitGroup_")
    ]
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
    # review i25g #5: no predefined Workflows role; the tick's own account may start executions
    # only, the workflow's account may pause schedules only (beside the group role)
    assert not [m for m in members if m.inputs["role"].startswith("roles/workflows")]
    roles = {
        r.inputs["roleId"]: r.inputs["permissions"]
        for r in mocks.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
    }
    unconditioned = {
        m.inputs["member"].split(":")[1].split("-")[1]: m.inputs["role"]
        for m in members
        if not m.inputs.get("condition") and m.inputs["member"].startswith("serviceAccount:gf-")
    }
    granted = {who: roles[role.rsplit("/", 1)[-1]] for who, role in unconditioned.items()}
    assert granted == {"tick": ["workflows.executions.create"], "rebal": ["cloudscheduler.jobs.pause"]}
    (workflow,) = mocks.of_type(WORKFLOW)
    tick = next(j.inputs for j in mocks.of_type(JOB) if j.inputs["schedule"].startswith("*/"))
    assert tick["httpTarget"]["oauthToken"]["serviceAccountEmail"] != workflow.inputs["serviceAccount"]
    plan_doc = json.loads(workflow.inputs["userEnvVars"]["GPUFIT_REBALANCE"])
    assert plan_doc["tick"].endswith("/jobs/" + tick["name"])


def test_a_later_up_keeps_only_the_deadline_of_the_workflow(stack: Any) -> None:
    """Review i25g #6: the deadline is a variable of its own and the only one ignored; the
    plan (groups, weights, replicas) follows the stack on every ``up``."""
    from providers.gcp.fallback_groups import workflow_ignored

    mocks, _, expected = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    env = workflow.inputs["userEnvVars"]
    assert set(env) == {"GPUFIT_REBALANCE", "GPUFIT_DEADLINE"}
    assert "deadline" not in json.loads(env["GPUFIT_REBALANCE"])
    from deployment.translate import deployment_from_plan

    deployment = deployment_from_plan(expected, stack="dev", project="p", created_at=NOW)
    assert not deployment.deadline_pinned
    assert workflow_ignored(deployment) == ['userEnvVars["GPUFIT_DEADLINE"]']
    assert workflow_ignored(dataclasses.replace(deployment, deadline_pinned=True)) == []


def test_the_fallback_groups_follow_the_plans_ranking(stack: Any) -> None:
    """Review i25g #10: after the choice's group, the groups in the plan's ranking of its
    fallbacks, by the expected cost of running the job's replicas on each (the Alternatives
    table ranks each type as a plan of its own, another shape)."""
    mocks, _, expected = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    doc = json.loads(workflow.inputs["userEnvVars"]["GPUFIT_REBALANCE"])
    ranked = sorted(expected.fallbacks, key=lambda f: f.cost.expected_usd)
    assert [g["machine_type"] for g in doc["groups"][1:]] == [f.offer.instance.machine_type for f in ranked]


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

    bodies: dict[str, Any] = {}

    def walk(steps: list[Any]) -> None:
        for step in steps:
            ((_, body),) = step.items()
            body = body.get("try", body)
            for item in body.get("assign", []):
                bodies.update(item)
            if "call" in body and body["call"].startswith("http."):
                url = body["args"]["url"]
                if "cloudscheduler" in url:
                    calls["pause"] = (body["call"], url)
                    continue
                action = re.search(r'"/(\w+)', url.split("name", 1)[-1])
                calls[action.group(1) if action else "get"] = (body["call"], body["args"].get("body"))
            for nested in (
                body.get("for", {}).get("steps", []),
                *[c.get("steps", []) for c in body.get("switch", [])],
            ):
                walk(nested)

    walk(workflow_definition()["main"]["steps"])
    assert set(calls) == {"get", "listManagedInstances", "deleteInstances", "resize", "pause"}
    for name, (call, _) in calls.items():
        if name == "pause":
            continue
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
    # the body is a map assigned as YAML, the instances an expression inside it
    assert calls["deleteInstances"][1] == "${release}"
    assert bodies["release"] == {"instances": "${starved}", "skipInstancesOnValidationError": True}
    assert "targetSize" in schemas["InstanceGroupManager"]["properties"]
    assert "managedInstances" in schemas["RegionInstanceGroupManagersListInstancesResponse"]["properties"]
    instance = schemas["ManagedInstance"]["properties"]
    assert {"instance", "currentAction", "lastAttempt", "instanceStatus"} <= set(instance)
    assert {"CREATING", "RECREATING"} <= set(instance["currentAction"]["enum"])
    assert "errors" in schemas["ManagedInstanceLastAttempt"]["properties"]
    # Cloud Scheduler's pause: POST .../{name=projects/*/locations/*/jobs/*}:pause
    scheduler = document("cloudscheduler.v1")
    pause = scheduler["resources"]["projects"]["resources"]["locations"]["resources"]["jobs"]["methods"][
        "pause"
    ]
    assert pause["httpMethod"] == "POST" and calls["pause"][0] == "http.post"
    assert pause["flatPath"].endswith("/jobs/{jobsId}:pause") and calls["pause"][1].endswith(':pause"}')


def test_the_workflow_runs_in_the_fleets_region_where_workflows_does() -> None:
    from providers.gcp.rebalance import workflow_location

    assert workflow_location("europe-north1") == "europe-north1"
    assert workflow_location("africa-south1") == "us-central1"  # not on the page read
