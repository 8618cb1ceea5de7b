"""A choice broad enough to find machines (issue 25, ``placement.min_fallbacks``): a stateless or
checkpointed plan with no pinned type passes over the cheapest offer when its fleet has fewer
than the minimum and a dearer one (ranked next, or a broader region) has them; it says so."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import date
from typing import Any

import pytest
import yaml

from cli.main import main
from cli.render import render_plan
from selector.breadth_choice import BREADTH_CANDIDATES_TRIED, broadest_first
from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.spec import SpecError, parse_spec
from tests.conftest import ROOT

CATALOG = load_catalog()
CATALOG_DAY = date(2026, 12, 4)
REALISTIC = ROOT / "tests" / "fixtures" / "realistic"
NARROW = ("04-llama70b-fp8-spot", "05-llama405b-endpoint", "23-qwen3-235b-endpoint", "27-qwen3-30b-moe-batch")
"""The realistic fixtures whose cheapest offer's fleet has fewer than two fallbacks (main at
d19f4cb: 04 and 23 one, 05 none, 27 one)."""


def _doc(name: str, **placement: Any) -> dict[str, Any]:
    doc = dict(yaml.safe_load((REALISTIC / f"{name}.yaml").read_text()))
    if placement:
        doc["placement"] = {**doc.get("placement", {}), **placement}
    return doc


def _plan(name: str, **placement: Any) -> Plan:
    return plan(parse_spec(_doc(name, **placement)), CATALOG)


def _where(p: Plan) -> tuple[str, str, str, str | None, str]:
    assert p.choice is not None
    o = p.choice.offer
    return (o.instance.cloud, o.instance.name, o.region, o.zone, o.market)


@pytest.mark.parametrize("name", NARROW)
def test_a_narrow_cheapest_offer_gives_way_to_the_cheapest_broad_one(name: str) -> None:
    """Each of the four gets two fallbacks or more, on the cheapest offer (by expected cost) of
    those whose fleet has them; the passed-over offer is the cost-only choice, named with its
    fallbacks and the premium, and it stays in the alternatives."""
    cheapest = _plan(name, min_fallbacks=0)
    broad = _plan(name)
    assert cheapest.choice is not None and broad.choice is not None
    assert len(cheapest.fallbacks) < 2 and cheapest.breadth_choice is None
    assert len(broad.fallbacks) >= 2 and broad.breadth_note is None and broad.broader_region is None
    taken = broad.breadth_choice
    assert taken is not None and taken.min_fallbacks == 2 and taken.fallbacks == len(broad.fallbacks)
    assert taken.passed_over.key == cheapest.choice.offer.key
    assert taken.passed_over_fallbacks == len(cheapest.fallbacks)
    assert taken.premium_usd == pytest.approx(
        broad.choice.cost.expected_usd - cheapest.choice.cost.expected_usd
    )
    assert taken.premium_usd > 0
    assert any(a.offer.key == cheapest.choice.offer.key for a in broad.alternatives)
    # the choice is within the plan's own rules: budget, ttl, market, its fleet planned alone
    deadline = broad.requirements.deadline_hours
    assert broad.choice.offer.market == "spot" and (deadline is None or broad.choice.cost.hours <= deadline)
    assert broad.choice.offer.instance.cloud in broad.spec.placement.clouds


def test_the_choice_is_the_cheapest_of_the_broad_ones() -> None:
    """No cheaper ranked alternative of fixture 05 has two fallbacks of its own: each one pinned
    (its type and region) plans a narrower fleet or costs more."""
    broad = _plan("05-llama405b-endpoint")
    assert broad.choice is not None
    expected = broad.choice.cost.expected_usd
    for alt in broad.alternatives:
        if alt.cost.expected_usd >= expected or alt.offer.market != "spot":
            continue
        o = alt.offer
        there = _plan("05-llama405b-endpoint", regions=[o.region], min_fallbacks=0)
        if there.choice is not None and there.choice.offer.instance.name == o.instance.name:
            assert len(there.fallbacks) < 2 or there.choice.cost.expected_usd >= expected


@pytest.mark.parametrize("name", NARROW)
def test_min_fallbacks_zero_ranks_by_expected_cost_alone(name: str) -> None:
    cheapest = _plan(name, min_fallbacks=0)
    assert cheapest.choice is not None and cheapest.breadth_choice is None
    ranked = sorted([cheapest.choice, *cheapest.alternatives], key=lambda c: c.cost.expected_usd)
    assert ranked[0] is cheapest.choice


def test_a_pinned_type_keeps_its_narrow_fleet() -> None:
    pinned = _plan("05-llama405b-endpoint", instance_types=["a3-highgpu-8g"])
    assert _where(pinned) == ("gcp", "a3-highgpu-8g", "europe-north1", None, "spot")
    assert pinned.breadth_choice is None and pinned.fallbacks == ()
    assert pinned.breadth_note == "placement.instance_types pins the types"


def test_the_failover_attempt_pin_plans_exactly_its_offer() -> None:
    attempt = {
        "cloud": "aws",
        "region": "ap-south-1",
        "zone": "aps1-az1",
        "instance_type": "p4d.24xlarge",
        "market": "spot",
    }
    pinned = _plan("27-qwen3-30b-moe-batch", attempt=attempt)
    assert _where(pinned) == ("aws", "p4d.24xlarge", "ap-south-1", "aps1-az1", "spot")
    assert pinned.breadth_choice is None


def test_fault_tolerance_none_is_unchanged() -> None:
    doc = _doc("05-llama405b-endpoint")
    doc["fault_tolerance"] = "none"
    default = plan(parse_spec(doc), CATALOG)
    doc["placement"] = {**doc.get("placement", {}), "min_fallbacks": 0}
    cost_only = plan(parse_spec(doc), CATALOG)
    assert default.breadth_choice is None and _where(default) == _where(cost_only)
    assert [f.offer.key for f in default.fallbacks] == [f.offer.key for f in cost_only.fallbacks]


def test_a_budget_that_excludes_the_broad_offers_keeps_the_narrow_one_and_its_note() -> None:
    """Fixture 27 with a total budget just above the cheapest plan's bill: every broader offer
    costs more, so the narrow p4d choice stays, with today's note and broader-region sentence."""
    cheapest = _plan("27-qwen3-30b-moe-batch", min_fallbacks=0)
    assert cheapest.choice is not None
    doc = _doc("27-qwen3-30b-moe-batch")
    doc["budget"] = {"max_total_usd": round(cheapest.choice.cost.total_usd * 1.001, 2)}
    tight = plan(parse_spec(doc), CATALOG)
    assert _where(tight) == _where(cheapest) and tight.breadth_choice is None
    assert len(tight.fallbacks) < 2
    note = tight.breadth_note
    assert note is not None and note.startswith(
        f"only {len(tight.fallbacks)} other type(s) run it in aps1-az1"
    )
    assert note.endswith("none of the 3 next-cheapest regions pricing it gives 2 within the budget and ttl")


def test_min_fallbacks_asks_more_than_the_default() -> None:
    """``min_fallbacks: 3``: fixture 27 (two fallbacks by default) looks further."""
    three = _plan("27-qwen3-30b-moe-batch", min_fallbacks=3)
    assert three.choice is not None
    if three.breadth_choice is not None:
        assert len(three.fallbacks) >= 3 and three.breadth_choice.min_fallbacks == 3
    else:
        assert three.breadth_note is not None and "fewer than 3" in render_plan(three, CATALOG_DAY)


@pytest.mark.parametrize("value", [-1, 10, "two"])
def test_min_fallbacks_must_be_a_small_whole_number(value: object) -> None:
    with pytest.raises(SpecError, match=r"placement\.min_fallbacks"):
        parse_spec(_doc("05-llama405b-endpoint", min_fallbacks=value))


def test_the_walk_takes_the_cheapest_that_qualifies_and_stops() -> None:
    """Pure: candidates ranked by (preference, expected); a planned (widened) candidate may cost
    more than its rank; the broader region bounds the walk."""
    fleets = {"a": ("a", 1), "b": ("b-wide", 2), "c": ("c", 3), "d": ("d", 5)}
    keys = {"a": 10.0, "b": 11.0, "b-wide": 30.0, "c": 12.0, "d": 40.0, "r": 20.0}
    tried: list[str] = []

    def size(c: str) -> tuple[str, int]:
        tried.append(c)
        return fleets[c]

    key = lambda c: (0.0, keys[c])  # noqa: E731
    assert broadest_first(iter("abcd"), key, size, 2) == ("c", 3)
    assert tried == ["a", "b", "c"]  # d ranks after c: not planned
    tried.clear()
    assert broadest_first(iter("abd"), key, size, 2, ("r", 2)) == ("r", 2)  # b-wide dearer than r
    assert tried == ["a", "b"]
    assert broadest_first(iter("a"), key, size, 2) is None
    assert BREADTH_CANDIDATES_TRIED >= 5


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_gpufit_plan_says_what_it_chose_over_the_cheapest() -> None:
    path = str(REALISTIC / "05-llama405b-endpoint.yaml")
    code, out, _ = _run("plan", path)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("Breadth   "))
    assert line.startswith(
        "Breadth   chose aws p5en.48xlarge spot us-east-2 (2 fallbacks) over the cheapest gcp "
    )
    assert "a3-highgpu-8g spot europe-north1 (0 fallbacks) at $" in line
    assert "more (expected)" in line and "placement.min_fallbacks: 0 ranks by expected cost alone" in line
    code, out, _ = _run("plan", path, "--json")
    choice = json.loads(out)["choice"]
    taken = choice["breadth_choice"]
    assert taken["passed_over"]["instance_type"] == "a3-highgpu-8g"
    assert taken["passed_over"]["region"] == "europe-north1" and taken["passed_over_fallbacks"] == 0
    assert taken["fallbacks"] == len(choice["fallbacks"]) >= 2 and taken["premium_usd"] > 0
    assert taken["min_fallbacks"] == 2 and choice["broader_region"] is None


def test_gpufit_plan_of_a_cost_only_spec_has_no_breadth_line(tmp_path: Any) -> None:
    path = tmp_path / "cost-only.yaml"
    path.write_text(yaml.safe_dump(_doc("05-llama405b-endpoint", min_fallbacks=0)))
    code, out, _ = _run("plan", str(path))
    assert code == 0 and "Breadth   " not in out
    code, out, _ = _run("plan", str(path), "--json")
    assert json.loads(out)["choice"]["breadth_choice"] is None
