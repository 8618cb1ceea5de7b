"""Issue 25, GCP fleet breadth for checkpointed jobs: a single-node checkpointed fine-tune's
fallbacks with the choice's GPU count and at least its GPU memory each get a MIG of their own
under the rebalancer (its launch runs unchanged there and resumes from the bucket), found by
the selector's own fit; a pinned type gets none; the stack, its workflow and its budget."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policy.gpufit_policies import RESOURCE_VALIDATORS, STACK_VALIDATORS, check_stack_budget
from policy.resources import PolicyConfig
from providers.gcp.rebalance import workflow_definition
from selector.gcp_flexibility import most_replicas, realisation
from selector.select import plan
from selector.spec import parse_spec
from tests.machine.unpack import settings
from tests.pulumi_harness import RecordingMocks, run_program
from tests.test_gcp_fleet import NOW
from tests.test_gcp_rebalance import CATALOG, MIG, TEMPLATE, WORKFLOW, FakeCompute, _type
from tests.workflows_interp import Workflow

FINE_TUNE = {
    "name": "l70-lora-gcp",
    "task": "finetune-lora",
    "model": {"preset": "llama-3.1-70b"},
    "precision": "bf16",
    "training": {"tokens": 1e8, "sequence_tokens": 2048},
    "fault_tolerance": "checkpointed",
    "teardown": {"ttl": "96h"},
    # A100 and H100 8-GPU machines; a3-ultragpu-8g (H200) is priced in us-central1-b only, a
    # zone that offers no GPU machine type in the Pulumi mocks (tests/pulumi_harness.py)
    "placement": {
        "clouds": ["gcp"],
        "regions": ["us-central1"],
        "instance_types": ["a2-*-8g", "a3-highgpu-8g", "a3-megagpu-8g", "a3-edgegpu-8g"],
    },
    "job": {"command": "python train.py --resume"},
}


def _spec(**placement: Any) -> dict[str, Any]:
    return {**FINE_TUNE, "placement": {**FINE_TUNE["placement"], **placement}}


def test_a_checkpointed_job_takes_types_with_its_gpu_count_and_at_least_its_memory() -> None:
    h100_8, mega_8 = _type("a3-highgpu-8g"), _type("a3-megagpu-8g")
    a100_40_8, a100_80_8, h100_4 = _type("a2-highgpu-8g"), _type("a2-ultragpu-8g"), _type("a3-highgpu-4g")
    assert realisation(h100_8, mega_8, None, batch=False, checkpointed=True) == "group"
    assert realisation(h100_8, a100_80_8, None, batch=False, checkpointed=True) == "group"
    assert realisation(a100_40_8, h100_8, None, batch=False, checkpointed=True) == "group"  # more memory
    assert realisation(h100_8, a100_40_8, None, batch=False, checkpointed=True) is None  # 40 < 80 GB
    assert realisation(h100_8, h100_4, None, batch=False, checkpointed=True) is None  # another GPU count
    assert realisation(h100_8, mega_8, None, batch=False) is None  # not checkpointed: one group


def test_a_gcp_checkpointed_fine_tune_has_several_fallbacks_each_running_its_launch() -> None:
    planned = plan(parse_spec(FINE_TUNE), CATALOG)
    choice = planned.choice
    assert choice is not None and choice.offer.cloud == "gcp" and choice.shape.nodes_per_replica == 1
    assert len(planned.fallbacks) >= 2 and planned.breadth_note is None
    for f in planned.fallbacks:
        assert f.realised == "group" and f.weighted_capacity == choice.shape.replicas_per_instance
        it = f.offer.instance
        assert it.gpu_count == choice.offer.instance.gpu_count
        assert it.gpu.memory_mib >= choice.offer.instance.gpu.memory_mib
        assert (f.shape.gpus_per_replica, f.shape.tensor_parallel) == (
            choice.shape.gpus_per_replica,
            choice.shape.tensor_parallel,
        )
        assert f.offer.region == choice.offer.region and f.offer.market == choice.offer.market
        # the selector's own sizing: planned alone, the type runs the job with the same launch
        alone = plan(parse_spec(_spec(instance_types=[it.name])), CATALOG).choice
        assert alone is not None and alone.offer.instance.name == it.name
        assert (alone.shape.gpus_per_replica, alone.shape.tensor_parallel, alone.shape.instances) == (
            choice.shape.gpus_per_replica,
            choice.shape.tensor_parallel,
            choice.shape.instances,
        )
        assert f.cost.expected_usd >= f.cost.total_usd > 0


def test_a_fine_tune_pinned_to_one_type_gets_no_fallbacks() -> None:
    planned = plan(parse_spec(_spec(instance_types=["a3-highgpu-8g"])), CATALOG)
    assert planned.choice is not None and planned.fallbacks == ()
    assert planned.breadth_note == "placement.instance_types pins the types"


def test_a_fine_tune_that_is_not_checkpointed_keeps_one_group() -> None:
    planned = plan(parse_spec({**_spec(), "fault_tolerance": "none"}), CATALOG)
    assert planned.choice is not None
    assert all(f.realised != "group" for f in planned.fallbacks)


@pytest.fixture(scope="module")
def stack() -> tuple[RecordingMocks, dict[str, Any], Any]:
    mocks, outputs = run_program(
        {"gcp:project": "my-project", "gpufit:workload": FINE_TUNE}, NOW, stack="dev"
    )
    return mocks, outputs, plan(parse_spec(FINE_TUNE), CATALOG)


def test_the_fine_tunes_fallbacks_are_groups_the_rebalancer_names(stack: Any) -> None:
    mocks, outputs, expected = stack
    migs = {r.inputs["name"]: r.inputs for r in mocks.of_type(MIG)}
    primary, groups = outputs["group"], outputs["fallback_groups"]
    assert len(groups) == len(expected.fallbacks) >= 2 and set(migs) == {primary, *groups}
    assert migs[primary]["targetSize"] == 1 and [migs[g]["targetSize"] for g in groups] == [0] * len(groups)
    (workflow,) = mocks.of_type(WORKFLOW)
    doc = json.loads(workflow.inputs["userEnvVars"]["GPUFIT_REBALANCE"])
    assert [g["name"] for g in doc["groups"]] == [primary, *groups]
    assert [g["machine_type"] for g in doc["groups"][1:]] == [
        f.offer.instance.machine_type for f in expected.fallbacks
    ]
    assert {g["weight"] for g in doc["groups"]} == {1} and doc["units"] == 1
    # every group's VMs run the same command, at the choice's TP, and sync the one bucket
    scripts = [settings(t.inputs["metadata"]["startup-script"]) for t in mocks.of_type(TEMPLATE)]
    assert sorted(s["GROUP"] for s in scripts) == sorted([primary, *groups])
    assert len({(s["TP_DEFAULT"], s["BUCKET"], s["DEPLOYMENT"], s["KIND"]) for s in scripts}) == 1
    assert sorted(outputs["fallbacks"]) == sorted(f.offer.instance.name for f in expected.fallbacks)


def test_the_workflow_moves_the_fine_tunes_vm_round_the_ring(stack: Any) -> None:
    """The stack's own plan run by the Workflows-subset interpreter: the one VM the choice's
    group cannot create moves to the next group, and so on, the last back to the first."""
    mocks, _, _ = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    env = {**workflow.inputs["userEnvVars"], "GOOGLE_CLOUD_PROJECT_ID": "my-project"}
    env["GPUFIT_DEADLINE"] = "2000000000"
    names = [g["name"] for g in json.loads(env["GPUFIT_REBALANCE"])["groups"]]
    targets = {n: 0 for n in names}
    targets[names[0]] = 1
    for k in range(len(names)):
        here, there = names[k], names[(k + 1) % len(names)]
        compute = FakeCompute("my-project", "us-central1", dict(targets), {here: ["vm"]})
        Workflow(workflow_definition(), env, compute, 1_900_000_000.0, lambda t: None).execute()
        assert compute.targets == {**{n: 0 for n in names}, there: 1}, (here, compute.targets)
        targets = compute.targets


def test_the_budget_counts_the_fine_tunes_groups_once_at_the_dearest(stack: Any) -> None:
    mocks, _, expected = stack
    region = expected.choice.offer.region
    resources = [(r.typ, r.inputs, region) for r in mocks.resources if not r.typ.startswith("pulumi:")]
    dearest = max(o.hourly_usd for o in [expected.choice.offer, *(f.offer for f in expected.fallbacks)])
    most = dearest * most_replicas([1] * (1 + len(expected.fallbacks)), 1)
    assert check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most + 0.01)) == []
    over = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most - 0.01))
    assert any("over the budget" in p for p in over), over
    config = PolicyConfig(now=NOW)
    problems = [p for check in STACK_VALIDATORS for p in check(resources, config)]
    problems += [
        p for typ, props, _ in resources for check in RESOURCE_VALIDATORS for p in check(typ, props, config)
    ]
    assert problems == []


def test_the_plan_shows_the_fine_tunes_fallbacks_and_how_they_run(stack: Any) -> None:
    from cli.render import render_plan
    from selector import report

    _, _, expected = stack
    text = render_plan(expected, NOW.date())
    fleet = next(line for line in text.splitlines() if line.startswith("Fleet"))
    for f in expected.fallbacks:
        assert f"{f.offer.instance.name} " in fleet
        assert f"${f.cost.expected_usd:,.2f} expected on it alone" in fleet
    assert "resumes from the bucket's checkpoint" in fleet and "multi-node replica" in fleet
    doc = report.plan_to_dict(expected, NOW.date())
    fallbacks = doc["choice"]["fallbacks"]
    assert {f["realised"] for f in fallbacks} == {"group"} and all(f["realised_how"] for f in fallbacks)
    assert all(f["expected_usd"] > 0 and f["hourly_usd"] > 0 for f in fallbacks)
