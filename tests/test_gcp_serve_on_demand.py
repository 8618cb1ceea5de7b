"""Issue 25, an endpoint that survives a spot drought on GCP: a stateless GCP serve plan whose
choice is spot takes on-demand groups of its own after its spot fallbacks (a MIG per type the
catalog sells on demand in the region, each VM running the choice's launch), each a STANDARD
instance template, a backend of the one backend service, reached by the same rebalancer; the
plan says nothing moves a VM back to spot; the budget prices the set at its dearest, the
on-demand rate included.

The realistic fixtures are copied and pinned to GCP's europe-north1 (``placement.clouds`` and
``placement.regions``), so that a broader choice of offer elsewhere leaves these tests alone."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from policy.gpufit_policies import RESOURCE_VALIDATORS, STACK_VALIDATORS, check_stack_budget
from policy.resources import PolicyConfig
from providers.gcp.rebalance import workflow_definition
from selector.consumption import not_sold_reason
from selector.fallbacks import REFUGE_NOTE, on_demand_refuge
from selector.report import plan_to_dict
from selector.select import plan, width
from selector.spec import parse_spec
from tests.contracts.gcp_discovery import problems as discovery_problems
from tests.contracts.gcp_rules import check_standard
from tests.contracts.model import Resource, Stack
from tests.machine.unpack import settings
from tests.pulumi_harness import RecordingMocks, run_program
from tests.test_gcp_fleet import NOW
from tests.test_gcp_rebalance import CATALOG, MIG, TEMPLATE, WORKFLOW, FakeCompute
from tests.workflows_interp import Workflow

REALISTIC = Path(__file__).parent / "fixtures" / "realistic"
BACKEND = "gcp:compute/regionBackendService:RegionBackendService"
ARMOR = "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy"
FIREWALL = "gcp:compute/firewall:Firewall"
SMALL_A3 = ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g")


def pinned(name: str, **extra: Any) -> dict[str, Any]:
    doc = dict(yaml.safe_load((REALISTIC / f"{name}.yaml").read_text()))
    doc["placement"] = {**doc.get("placement", {}), "clouds": ["gcp"], "regions": ["europe-north1"]}
    return {**doc, **extra}


def endpoint(name: str) -> dict[str, Any]:
    """``pinned`` behind the regional load balancer (its backend service takes every group)."""
    doc = pinned(name)
    doc["serving"] = {**doc["serving"], "expose": "load_balancer", "domain": "api.example.com"}
    doc["access"] = {"api_cidrs": ["203.0.113.0/24"]}
    return doc


def _market_rows(name: str, market: str) -> list[dict[str, Any]]:
    rows = json.loads(Path(CATALOG.path).read_text())["offers"]
    return [
        o
        for o in rows
        if (o["cloud"], o["instance_type"], o["region"], o["market"])
        == ("gcp", name, "europe-north1", market)
    ]


def test_the_catalog_sells_only_the_8_gpu_a3_high_on_demand_in_europe_north1() -> None:
    """What the on-demand groups rest on: the consumption table says a3-highgpu-1g/2g/4g are
    not sold on demand (Google: "you must create instances by using Spot VMs or Flex-start VMs"),
    so the catalog holds no such offer, and a3-highgpu-8g is."""
    for small in SMALL_A3:
        assert not_sold_reason("gcp", small, "on-demand") is not None
        assert not [o for o in CATALOG.offers if o.instance.name == small and o.market == "on-demand"]
    assert not_sold_reason("gcp", "a3-highgpu-8g", "on-demand") is None
    assert len(_market_rows("a3-highgpu-8g", "on-demand")) == 1


@pytest.mark.parametrize(
    "name", ["04-llama70b-fp8-spot"]
)  # 23 needs 8 GPUs a replica since issue 24's round 6
def test_a_four_gpu_spot_endpoint_takes_its_spot_group_then_an_on_demand_one(name: str) -> None:
    planned = plan(parse_spec(pinned(name)), CATALOG)
    choice = planned.choice
    assert (choice.offer.instance.name, choice.offer.market) == ("a3-highgpu-4g", "spot")
    assert [(f.offer.instance.name, f.offer.market, f.realised, f.refuge) for f in planned.fallbacks] == [
        ("a3-highgpu-8g", "spot", "group", False),
        ("a3-highgpu-8g", "on-demand", "group", True),
    ]
    spot, refuge = planned.fallbacks
    # the choice's launch on the bigger VM, its other 4 GPUs idle and paid for at on-demand rates
    for f in planned.fallbacks:
        assert (f.shape.gpus_per_replica, f.shape.tensor_parallel) == (4, choice.shape.tensor_parallel)
        assert f.shape.instances == choice.shape.instances and f.idle_gpus == 4
    assert refuge.offer.hourly_usd == _market_rows("a3-highgpu-8g", "on-demand")[0]["hourly_usd"]
    assert refuge.cost.total_usd > spot.cost.total_usd * 5  # on-demand A3 High is ~7× its spot price
    # kept in the fleet but not counted toward placement.min_fallbacks: the plan says it is narrow
    assert width(choice, planned.fallbacks) == 1
    note = planned.breadth_note
    assert note is not None and "only 1 other type(s) run it in europe-north1, spot" in note


def test_the_405b_spot_endpoint_gets_its_one_type_on_demand() -> None:
    planned = plan(parse_spec(pinned("05-llama405b-endpoint")), CATALOG)
    assert (planned.choice.offer.instance.name, planned.choice.offer.market) == ("a3-highgpu-8g", "spot")
    (refuge,) = planned.fallbacks
    assert (refuge.offer.instance.name, refuge.offer.market, refuge.realised) == (
        "a3-highgpu-8g",
        "on-demand",
        "group",
    )
    assert refuge.idle_gpus == 0 and refuge.weighted_capacity == planned.choice.shape.replicas_per_instance


def test_the_plan_and_json_name_each_fallbacks_market_and_say_nothing_moves_back() -> None:
    from cli.render import render_plan

    planned = plan(parse_spec(pinned("04-llama70b-fp8-spot")), CATALOG)
    entries = plan_to_dict(planned)["choice"]["fallbacks"]
    assert [(e["instance_type"], e["market"]) for e in entries] == [
        ("a3-highgpu-8g", "spot"),
        ("a3-highgpu-8g", "on-demand"),
    ]
    assert REFUGE_NOTE in entries[1]["realised_how"] and REFUGE_NOTE not in entries[0]["realised_how"]
    fleet = next(line for line in render_plan(planned, NOW.date()).splitlines() if line.startswith("Fleet"))
    assert "a3-highgpu-8g europe-north1 on-demand $96.71/h" in fleet
    assert "nothing moves a VM back to spot when spot capacity returns" in fleet
    assert fleet.index("europe-north1 spot $13.56/h") < fleet.index("europe-north1 on-demand")


def test_no_on_demand_group_where_it_does_not_belong() -> None:
    """A type pinned, an on-demand choice, a budget the on-demand rate exceeds, an AWS spot
    endpoint (its fleet keeps an on-demand base instead), a batch job: no on-demand group."""
    types = pinned("04-llama70b-fp8-spot")
    types["placement"]["instance_types"] = ["a3-highgpu-4g"]
    assert plan(parse_spec(types), CATALOG).fallbacks == ()
    fragile = plan(parse_spec(pinned("04-llama70b-fp8-spot", fault_tolerance="none")), CATALOG)
    assert fragile.choice.offer.market == "on-demand" and not any(f.refuge for f in fragile.fallbacks)
    budget = pinned("04-llama70b-fp8-spot", budget={"max_hourly_usd": 50})
    capped = plan(parse_spec(budget), CATALOG)
    assert [(f.offer.instance.name, f.offer.market) for f in capped.fallbacks] == [("a3-highgpu-8g", "spot")]
    aws = dict(yaml.safe_load((REALISTIC / "04-llama70b-fp8-spot.yaml").read_text()))
    aws["placement"] = {"clouds": ["aws"]}
    on_aws = plan(parse_spec(aws), CATALOG)
    assert on_aws.choice.offer.cloud == "aws" and not any(f.refuge for f in on_aws.fallbacks)
    assert {f.offer.market for f in on_aws.fallbacks} <= {on_aws.choice.offer.market}
    choice = plan(parse_spec(pinned("04-llama70b-fp8-spot")), CATALOG).choice
    assert on_demand_refuge(choice.offer, choice.shape, served=True)
    assert not on_demand_refuge(choice.offer, choice.shape, served=False)


@pytest.fixture(scope="module")
def stack() -> tuple[RecordingMocks, dict[str, Any]]:
    return run_program(
        {"gcp:project": "my-project", "gpufit:workload": endpoint("04-llama70b-fp8-spot")}, NOW, stack="dev"
    )


def _templates(mocks: RecordingMocks) -> dict[str, dict[str, Any]]:
    """Each MIG's template inputs, by the MIG's name."""
    by_link = {t.name: t.inputs for t in mocks.of_type(TEMPLATE)}
    return {
        m.inputs["name"]: by_link[m.inputs["versions"][0]["instanceTemplate"].rsplit("/", 1)[-1]]
        for m in mocks.of_type(MIG)
    }


def test_the_on_demand_groups_template_is_standard_with_the_deadline(stack: Any) -> None:
    mocks, outputs = stack
    templates = _templates(mocks)
    choice, (spot, refuge) = outputs["group"], outputs["fallback_groups"]
    assert [templates[g]["machineType"] for g in (choice, spot, refuge)] == [
        "a3-highgpu-4g",
        "a3-highgpu-8g",
        "a3-highgpu-8g",
    ]
    assert templates[choice]["scheduling"]["provisioningModel"] == "SPOT"
    assert templates[spot]["scheduling"] == templates[choice]["scheduling"]
    on_demand = templates[refuge]["scheduling"]
    assert on_demand == {
        "provisioningModel": "STANDARD",
        "preemptible": False,
        "automaticRestart": True,
        "onHostMaintenance": "TERMINATE",
        # the deadline holds on every group: the run-time limit and its action (gcp.run-duration)
        "terminationTime": templates[choice]["scheduling"]["terminationTime"],
        "instanceTerminationAction": "DELETE",
    }
    assert list(check_standard(Resource(TEMPLATE, "t", templates[refuge]), Stack())) == []
    assert discovery_problems("compute.v1", "Scheduling", on_demand) == []
    # the boot script knows its market: an on-demand VM watches for no preemption
    assert str(settings(templates[refuge]["metadata"]["startup-script"])["SPOT"]) == "0"
    assert {str(settings(templates[g]["metadata"]["startup-script"])["SPOT"]) for g in (choice, spot)} == {
        "1"
    }
    assert str(settings(templates[refuge]["metadata"]["startup-script"])["GROUP"]) == refuge


def test_a_standard_template_without_a_run_time_limit_carries_no_termination_action() -> None:
    """Past Compute Engine's 120-day reach the template has no termination time (the deadline is
    the Scheduler job's): the on-demand group's STANDARD scheduling then has no action either,
    which the contract rule refuses (gcp.standard), as it would the spot one's."""
    mocks, outputs = run_program(
        {"gcp:project": "my-project", "gpufit:workload": pinned("05-llama405b-endpoint", duration="3000h")},
        NOW,
        stack="dev",
    )
    templates = _templates(mocks)
    (refuge,) = outputs["fallback_groups"]
    scheduling = templates[refuge]["scheduling"]
    assert scheduling["provisioningModel"] == "STANDARD" and "terminationTime" not in scheduling
    assert "instanceTerminationAction" not in scheduling
    assert templates[outputs["group"]]["scheduling"]["instanceTerminationAction"] == "DELETE"  # spot's
    bad = Resource(TEMPLATE, "t", {"scheduling": {**scheduling, "instanceTerminationAction": "DELETE"}})
    assert len(list(check_standard(bad, Stack()))) == 1
    legacy = Resource(TEMPLATE, "t", {"scheduling": {**scheduling, "preemptible": True}})
    assert len(list(check_standard(legacy, Stack()))) == 1


def test_the_backend_service_takes_every_group_alike(stack: Any) -> None:
    mocks, outputs = stack
    migs = {r.inputs["name"]: r.inputs for r in mocks.of_type(MIG)}
    names = [outputs["group"], *outputs["fallback_groups"]]
    (backend,) = mocks.of_type(BACKEND)
    base = "https://www.googleapis.com/compute/v1/projects/test-project/regions/europe-north1/instanceGroups/"
    assert [b["group"] for b in backend.inputs["backends"]] == [base + n for n in names]
    assert {(b["balancingMode"], b["capacityScaler"]) for b in backend.inputs["backends"]} == {
        ("UTILIZATION", 1.0)
    }
    assert backend.inputs["portName"] == "serve0" and backend.inputs["securityPolicy"]
    for n in names:
        assert migs[n]["namedPorts"] == migs[names[0]]["namedPorts"]
        assert migs[n]["autoHealingPolicies"] == migs[names[0]]["autoHealingPolicies"]
        assert migs[n]["targetSize"] == (1 if n == names[0] else 0)
    templates = _templates(mocks)
    assert len({tuple(templates[n]["tags"]) for n in names}) == 1  # the firewall's target tag
    (armor,) = mocks.of_type(ARMOR)
    assert {r["action"] for r in armor.inputs["rules"]} == {"allow", "deny(403)"}


def test_the_rebalancer_moves_a_starved_spot_replica_into_the_on_demand_group(stack: Any) -> None:
    """Two runs of the workflow's own definition in the interpreter: the choice's spot VM
    starved moves to the spot a3-highgpu-8g group; starved there too, to the on-demand group."""
    mocks, outputs = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    env = {
        **workflow.inputs["userEnvVars"],
        "GOOGLE_CLOUD_PROJECT_ID": "my-project",
        "GPUFIT_DEADLINE": "2000000000",
    }
    names = [g["name"] for g in json.loads(env["GPUFIT_REBALANCE"])["groups"]]
    choice, spot, refuge = names
    assert [choice, spot, refuge] == [outputs["group"], *outputs["fallback_groups"]]
    first = FakeCompute("my-project", "europe-north1", {choice: 1, spot: 0, refuge: 0}, {choice: ["vm"]})
    Workflow(workflow_definition(), env, first, 1_900_000_000.0, lambda t: None).execute()
    assert first.targets == {choice: 0, spot: 1, refuge: 0}
    second = FakeCompute("my-project", "europe-north1", dict(first.targets), {spot: ["vm2"]})
    Workflow(workflow_definition(), env, second, 1_900_000_300.0, lambda t: None).execute()
    assert second.targets == {choice: 0, spot: 0, refuge: 1}
    # a VM that runs on demand never starves, so nothing moves it back to spot
    third = FakeCompute("my-project", "europe-north1", dict(second.targets), {})
    Workflow(workflow_definition(), env, third, 1_900_000_600.0, lambda t: None).execute()
    assert third.targets == second.targets


def test_the_budget_prices_the_set_at_the_on_demand_rate(stack: Any) -> None:
    """The catalog row, read from the file: 1 replica on 1 VM, at worst a3-highgpu-8g on demand
    ($96.71/h), not the spot rates of the other groups."""
    mocks, _ = stack
    resources = [
        (r.typ, r.inputs, "europe-north1") for r in mocks.resources if not r.typ.startswith("pulumi:")
    ]
    (row,) = _market_rows("a3-highgpu-8g", "on-demand")
    most = row["hourly_usd"]
    assert check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most + 0.01)) == []
    over = check_stack_budget(resources, PolicyConfig(now=NOW, max_hourly_usd=most - 0.01))
    assert any("over the budget" in p for p in over), over
    config = PolicyConfig(now=NOW)
    found = [p for check in STACK_VALIDATORS for p in check(resources, config)]
    found += [
        p for typ, props, _ in resources for check in RESOURCE_VALIDATORS for p in check(typ, props, config)
    ]
    assert found == []
    walls = [f.inputs for f in mocks.of_type(FIREWALL) if f.inputs.get("allows")]
    assert walls and all("0.0.0.0/0" not in w["sourceRanges"] for w in walls)


def test_the_policy_takes_a_standard_template_beyond_reach_without_a_termination_action() -> None:
    """A 3,000-hour endpoint's templates (no termination time: beyond Compute's 120 days): the
    spot ones keep DELETE, the on-demand group's STANDARD one has no action, which the pack
    accepts (nothing in Compute Engine terminates a STANDARD VM with no run-time limit; the
    group's Scheduler job is its deadline). The pack still refuses a spot template without the
    action, and a STANDARD one with a termination time but no action."""
    from policy.gpufit_policies import check_expiry

    mocks, outputs = run_program(
        {"gcp:project": "my-project", "gpufit:workload": pinned("05-llama405b-endpoint", duration="3000h")},
        NOW,
        stack="dev",
    )
    templates = _templates(mocks)
    config = PolicyConfig(now=NOW)
    (refuge,) = outputs["fallback_groups"]
    for name in (outputs["group"], refuge):
        assert check_expiry(TEMPLATE, templates[name], config) == []
    spot = templates[outputs["group"]]
    bare_spot = {
        **spot,
        "scheduling": {k: v for k, v in spot["scheduling"].items() if k != "instanceTerminationAction"},
    }
    assert any("instanceTerminationAction" in p for p in check_expiry(TEMPLATE, bare_spot, config))
    timed = {
        **templates[refuge],
        "scheduling": {**templates[refuge]["scheduling"], "terminationTime": "2026-12-10T12:00:00Z"},
        "labels": {k: v for k, v in templates[refuge]["labels"].items() if k != "gpufit-deadline-layer"},
    }
    assert any("instanceTerminationAction" in p for p in check_expiry(TEMPLATE, timed, config))


QUOTA = {
    "errors": [
        {
            "code": "QUOTA_EXCEEDED",
            "message": "Quota 'NVIDIA_H100_GPUS' exceeded. Limit: 0.0 in region europe-north1.",
        }
    ]
}


def test_a_vm_refused_on_demand_quota_goes_back_round_the_ring_to_spot(
    stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project that runs spot on preemptible quota may have no on-demand GPU quota: a VM of the
    on-demand group refused for quota moves on, round the ring to the choice's spot group, rather
    than wait there for quota for ever; a spot group's quota error stays put (the same
    preemptible quota), as before."""
    import tests.test_gcp_rebalance as rebalance_tests

    mocks, _ = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    env = {
        **workflow.inputs["userEnvVars"],
        "GOOGLE_CLOUD_PROJECT_ID": "my-project",
        "GPUFIT_DEADLINE": "2000000000",
    }
    groups = json.loads(env["GPUFIT_REBALANCE"])["groups"]
    assert ["starved_by" in g for g in groups] == [False, False, True]
    choice, spot, refuge = (g["name"] for g in groups)
    monkeypatch.setattr(rebalance_tests, "ERROR", QUOTA)
    starved = FakeCompute("my-project", "europe-north1", {choice: 0, spot: 0, refuge: 1}, {refuge: ["vm"]})
    Workflow(workflow_definition(), env, starved, 1_900_000_000.0, lambda t: None).execute()
    assert starved.targets == {choice: 1, spot: 0, refuge: 0}
    kept = FakeCompute("my-project", "europe-north1", {choice: 0, spot: 1, refuge: 0}, {spot: ["vm"]})
    Workflow(workflow_definition(), env, kept, 1_900_000_000.0, lambda t: None).execute()
    assert kept.targets == {choice: 0, spot: 1, refuge: 0}


def test_each_vm_account_may_update_only_its_own_markets_groups(stack: Any) -> None:
    """A spot VM's account is granted the group role on the spot groups only, an on-demand VM's on
    the on-demand group only (a compromised spot VM cannot grow the on-demand group or point a
    spot group at the STANDARD template); the deadline's and the rebalancer's accounts hold every
    group. Each template runs as its market's account, and both read the endpoint's secrets."""
    mocks, outputs = stack
    choice, (spot, refuge) = outputs["group"], outputs["fallback_groups"]
    templates = _templates(mocks)
    spot_email = templates[choice]["serviceAccount"]["email"]
    refuge_email = templates[refuge]["serviceAccount"]["email"]
    assert templates[spot]["serviceAccount"]["email"] == spot_email != refuge_email

    def named(expression: str) -> set[str]:
        return set(re.findall(r'instanceGroupManagers/([a-z0-9-]+)"', expression))

    scopes: dict[str, set[str]] = {}
    for m in mocks.of_type("gcp:projects/iAMMember:IAMMember"):
        if m.inputs.get("condition"):
            scopes.setdefault(m.inputs["member"].split(":", 1)[1], set()).update(
                named(m.inputs["condition"]["expression"])
            )
    assert scopes[spot_email] == {choice, spot}
    assert scopes[refuge_email] == {refuge}
    others = [groups for email, groups in scopes.items() if email not in (spot_email, refuge_email)]
    assert others and all(groups == {choice, spot, refuge} for groups in others)  # deadline, rebalancer
    readers = {
        (m.inputs["secretId"], m.inputs["member"].split(":", 1)[1])
        for m in mocks.of_type("gcp:secretmanager/secretIamMember:SecretIamMember")
    }
    secrets = {s for s, _ in readers}
    assert secrets and readers == {(s, e) for s in secrets for e in (spot_email, refuge_email)}


def test_a_budget_that_drops_the_on_demand_group_is_said_in_the_fleet_line_and_json() -> None:
    """Review finding 2: a spot endpoint the plan would give an on-demand group but whose budget
    turns it away says so, with the figure and the limit ($96.71/h × 336 h, the catalog's row)."""
    from cli.fleet_text import fleet_line

    budgeted = plan(parse_spec(pinned("04-llama70b-fp8-spot", budget={"max_total_usd": 10000})), CATALOG)
    assert budgeted.choice is not None and not any(f.refuge for f in budgeted.fallbacks)
    note = (
        "no on-demand group: a3-highgpu-8g on-demand $32,506.01 is over max_total_usd $10,000.00; "
        "the endpoint has no refuge in a spot drought"
    )
    assert fleet_line(budgeted).endswith(note)
    assert note in plan_to_dict(budgeted)["choice"]["fleet_notes"]
    unbudgeted = plan(parse_spec(pinned("04-llama70b-fp8-spot")), CATALOG)
    assert any(f.refuge for f in unbudgeted.fallbacks)
    assert "no on-demand group" not in fleet_line(unbudgeted)
    assert not any("no on-demand group" in n for n in plan_to_dict(unbudgeted)["choice"]["fleet_notes"])


def test_a_region_that_sells_no_type_on_demand_is_said_too() -> None:
    """us-south1 sells a3-ultragpu-8g as spot only in the catalog: no on-demand group can exist."""
    from cli.fleet_text import fleet_line

    doc = pinned("04-llama70b-fp8-spot")
    doc["placement"]["regions"] = ["us-south1"]
    rows = json.loads(Path(CATALOG.path).read_text())["offers"]
    there = {
        (o["instance_type"], o["market"]) for o in rows if (o["cloud"], o["region"]) == ("gcp", "us-south1")
    }
    assert ("a3-ultragpu-8g", "spot") in there and not any(m == "on-demand" for _, m in there)
    p = plan(parse_spec(doc), CATALOG)
    assert p.choice is not None and p.choice.offer.region == "us-south1" and p.choice.offer.market == "spot"
    note = (
        "no on-demand group: no type sold on demand in us-south1 runs the choice's launch; "
        "the endpoint has no refuge in a spot drought"
    )
    assert note in fleet_line(p) and note in plan_to_dict(p)["choice"]["fleet_notes"]


def test_the_cost_line_and_json_give_the_worst_case_on_demand() -> None:
    """Review finding 3: fixture 04's headline total is the spot figure; its bound, every replica
    on the on-demand group for the whole 336 h (the refuge's own total, the figure the budget
    policy enforces by the hour), is on the Cost line and in ``cost.worst_case_usd``."""
    from datetime import date

    from cli.render import render_plan

    p = plan(parse_spec(pinned("04-llama70b-fp8-spot")), CATALOG)
    assert p.choice is not None
    refuge = next(f for f in p.fallbacks if f.refuge)
    assert refuge.cost.total_usd == max(f.cost.total_usd for f in p.fallbacks) > p.choice.cost.total_usd
    cost = plan_to_dict(p)["cost"]
    assert cost["worst_case_usd"] == round(refuge.cost.total_usd, 2) == 32506.01
    assert cost["total_usd"] == round(p.choice.cost.total_usd, 2) < cost["worst_case_usd"]
    (line,) = [ln for ln in render_plan(p, date(2026, 12, 4)).splitlines() if ln.startswith("Cost ")]
    assert line.endswith(
        "(up to $32,506.01 if moved on demand; the total and its rank assume spot capacity holds)"
    )
    # without an on-demand group (the budget turned it away): the dearest spot group, no clause
    budgeted = plan(parse_spec(pinned("04-llama70b-fp8-spot", budget={"max_total_usd": 10000})), CATALOG)
    assert plan_to_dict(budgeted)["cost"]["worst_case_usd"] == round(
        max(f.cost.total_usd for f in budgeted.fallbacks), 2
    )
    (line,) = [ln for ln in render_plan(budgeted, date(2026, 12, 4)).splitlines() if ln.startswith("Cost ")]
    assert "if moved on demand" not in line


CPU_QUOTA = {
    "errors": [
        {"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded. Limit: 24.0 in region europe-north1."}
    ]
}


@pytest.mark.parametrize(
    "error",
    [
        CPU_QUOTA,
        {
            "errors": [
                {
                    **CPU_QUOTA["errors"][0],
                    "message": "Quota 'PREEMPTIBLE_NVIDIA_H100_GPUS' exceeded. Limit: 0.0 in region "
                    "europe-north1.",
                }
            ]
        },
    ],
)
def test_an_on_demand_vm_refused_for_a_quota_spot_shares_stays_put(
    stack: Any, monkeypatch: pytest.MonkeyPatch, error: dict[str, Any]
) -> None:
    """Review finding 7: only a standard GPU quota error (``Quota 'NVIDIA_..._GPUS' exceeded``)
    moves an on-demand group's VM on; a CPUS quota error, which moving to a spot group cannot
    cure, or any other metric, leaves it in place (the workflow's own definition, interpreted)."""
    import tests.test_gcp_rebalance as rebalance_tests

    mocks, _ = stack
    (workflow,) = mocks.of_type(WORKFLOW)
    env = {
        **workflow.inputs["userEnvVars"],
        "GOOGLE_CLOUD_PROJECT_ID": "my-project",
        "GPUFIT_DEADLINE": "2000000000",
    }
    choice, spot, refuge = (g["name"] for g in json.loads(env["GPUFIT_REBALANCE"])["groups"])
    monkeypatch.setattr(rebalance_tests, "ERROR", error)
    kept = FakeCompute("my-project", "europe-north1", {choice: 0, spot: 0, refuge: 1}, {refuge: ["vm"]})
    Workflow(workflow_definition(), env, kept, 1_900_000_000.0, lambda t: None).execute()
    assert kept.targets == {choice: 0, spot: 0, refuge: 1}


def test_up_dry_run_lists_each_fleet_members_market() -> None:
    """Review finding 8: fixture 05's one fallback is its own type on demand; the attempt's line
    says so instead of "fleet a3-highgpu-8g, a3-highgpu-8g"."""
    from gitops.failover import _attempt

    p = plan(parse_spec(pinned("05-llama405b-endpoint")), CATALOG)
    attempt = _attempt(1, p)
    assert attempt.fleet_types == ["a3-highgpu-8g", "a3-highgpu-8g"]  # the names the errors name
    assert "fleet a3-highgpu-8g, a3-highgpu-8g on-demand)" in attempt.line
    assert "on-demand" in REFUGE_NOTE and "NVIDIA_<GPU>_GPUS" in REFUGE_NOTE  # finding 6: the quota
