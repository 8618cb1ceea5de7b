"""A choice broad enough to find machines (issue 25, ``placement.min_fallbacks``): a stateless or
checkpointed plan with no pinned type passes over the cheapest offer when its fleet has fewer
than the minimum and a dearer one (ranked next, or a broader region) has them; it says so."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from datetime import date
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

import selector.engine_filter as engine_filter
import selector.select as select_module
from cli.main import main
from cli.render import render_plan
from selector.breadth_choice import (
    BREADTH_CANDIDATES_TRIED,
    UNOBTAINABLE,
    breadth_allows,
    breadth_of,
    broadest_first,
)
from selector.catalog import GpuSpec, load_catalog
from selector.engines import EngineBuild
from selector.select import Candidate, Plan, plan, width
from selector.spec import SpecError, parse_spec
from tests.conftest import ROOT

CATALOG = load_catalog()
CATALOG_DAY = date(2026, 12, 4)
REALISTIC = ROOT / "tests" / "fixtures" / "realistic"
NARROW = ("04-llama70b-fp8-spot", "05-llama405b-endpoint", "23-qwen3-235b-endpoint", "27-qwen3-30b-moe-batch")
"""The realistic fixtures whose cheapest offer's fleet has fewer fallbacks that count than the minimum
they ask (``ASKED``; ``breadth_choice.breadth_of``: in the choice's market, not "very low"): 04 one
(a3-highgpu-8g spot; its on-demand a3-highgpu-8g group is kept but not counted), 23 the same, 05 none
(its one group is on demand), 27 two (p5.48xlarge and p5en.48xlarge in aps1-az1) of the 3 it asks."""
ASKED = {"27-qwen3-30b-moe-batch": 3}
"""The ``placement.min_fallbacks`` a ``NARROW`` fixture is planned with (else the default, 2): since
the MoE decode step pays for each expert its batch touches (issue 24), fixture 27's cheapest fleet
has the default's two."""


def _doc(name: str, **placement: Any) -> dict[str, Any]:
    doc = dict(yaml.safe_load((REALISTIC / f"{name}.yaml").read_text()))
    if placement:
        doc["placement"] = {**doc.get("placement", {}), **placement}
    return doc


def _plan(name: str, **placement: Any) -> Plan:
    return plan(parse_spec(_doc(name, **placement)), CATALOG)


def _asked(name: str) -> dict[str, int]:
    """The placement fields that make ``name`` (one of ``NARROW``) narrow: ``ASKED``'s minimum."""
    return {"min_fallbacks": ASKED[name]} if name in ASKED else {}


def _where(p: Plan) -> tuple[str, str, str, str | None, str]:
    assert p.choice is not None
    o = p.choice.offer
    return (o.instance.cloud, o.instance.name, o.region, o.zone, o.market)


@pytest.mark.parametrize("name", NARROW)
def test_a_narrow_cheapest_offer_gives_way_to_the_cheapest_broad_one(name: str) -> None:
    """Each of the four gets the minimum it asks (``ASKED``: 2, 3 for fixture 27) or more fallbacks
    that count (``width``: the choice's market, not "very low"), on the cheapest offer (by expected
    cost) of those whose fleet has them; the passed-over offer is the cost-only choice, named with its
    counted fallbacks and the premium, and it stays in the alternatives. Uncounted members stay in
    the fleet."""
    cheapest = _plan(name, min_fallbacks=0)
    broad = _plan(name, **_asked(name))
    assert cheapest.choice is not None and broad.choice is not None
    need = broad.spec.placement.min_fallbacks
    assert need == ASKED.get(name, 2)
    narrow_width, broad_width = (
        width(cheapest.choice, cheapest.fallbacks),
        width(broad.choice, broad.fallbacks),
    )
    assert narrow_width < need and cheapest.breadth_choice is None
    assert broad_width >= need and broad.breadth_note is None and broad.broader_region is None
    assert len(broad.fallbacks) >= broad_width
    taken = broad.breadth_choice
    assert taken is not None and taken.min_fallbacks == need and taken.fallbacks == broad_width
    assert taken.passed_over.key == cheapest.choice.offer.key
    assert taken.passed_over_fallbacks == narrow_width
    assert taken.premium_usd == pytest.approx(
        broad.choice.cost.expected_usd - cheapest.choice.cost.expected_usd
    )
    assert taken.premium_usd > 0
    assert any(a.offer.key == cheapest.choice.offer.key for a in broad.alternatives)
    # the choice is within the plan's own rules: budget, ttl, market, its fleet planned alone
    deadline = broad.requirements.deadline_hours
    assert broad.choice.offer.market == "spot" and (deadline is None or broad.choice.cost.hours <= deadline)
    assert broad.choice.offer.instance.cloud in broad.spec.placement.clouds


def _level(c: Candidate) -> str | None:
    return c.cost.obtainability.level if c.cost.obtainability is not None else None


@pytest.mark.parametrize("name", NARROW)
def test_the_choice_is_the_cheapest_of_the_broad_ones(name: str) -> None:
    """Brute-force oracle: every ranked candidate of the cost-only plan (one per instance type and market;
    the walk reads the best of each in each region, a superset) that the walk may take (the cheapest one's
    market, not "very low" unless the cheapest is) and that costs less (expected) than the choice is
    planned alone: ``placement.clouds``/``placement.regions`` narrowed to its cloud and region, its
    region's other market excluded (``placement.exclude``: asked for 3, a walk in us-east-2 alone takes
    on-demand p5en.48xlarge, whose fleet has them), the minimum the fixture asks (``ASKED``, so its zone
    is widened as the walk widens it). Where that plan's choice is
    the candidate's type and market, its fleet has fewer than the minimum that count (``width``), or,
    widened to the region's zones (priced at the dearest), it costs at least the choice: billed there plus
    the ranked offer's wait and failure estimate (the alone plan values an hour of waiting at its own
    cheapest rate, so its expected cost is not the walk's), or it is the choice itself (the candidate's
    zone widened). Pinning cannot reproduce a candidate when another type of its region wins there
    (pinning its type with ``placement.instance_types`` would also limit its fallbacks to that list);
    those are counted. 04 has no cheaper candidate (the broader region, us-east4, is cheaper than every
    other type with two); 05 and 23 have two each: p5.48xlarge use1-az5 (reproduced: widened to
    us-east-1, 1 that counts, p5en; p6-b200 is "very low") and p5en.48xlarge use2-az3 (not
    reproducible: p5.48xlarge wins us-east-2); 27 (asking 3) one, p5en.48xlarge use2-az3 (p5e and
    p6-b200 are "very low"): widened to us-east-2 it counts 2 (p5, p4d; p5e and p6-b200 kept)."""
    broad = _plan(name, **_asked(name))
    ranked = plan(parse_spec(_doc(name, min_fallbacks=0)), CATALOG, top=BREADTH_CANDIDATES_TRIED)
    assert broad.choice is not None and ranked.choice is not None
    cheapest, need = ranked.choice, broad.spec.placement.min_fallbacks
    chosen = broad.choice.cost.expected_usd
    eligible = reproduced = 0
    for alt in ranked.alternatives:
        o = alt.offer
        if alt.cost.expected_usd >= chosen or o.market != cheapest.offer.market:
            continue
        if not breadth_allows(_level(alt), _level(cheapest)):
            continue
        eligible += 1
        markets = [m for m in ("on-demand", "spot") if m != o.market]
        exclude = [{"cloud": o.cloud, "region": o.region, "instance_type": "*", "market": m} for m in markets]
        alone = _plan(name, clouds=[o.cloud], regions=[o.region], exclude=exclude, **_asked(name))
        c = alone.choice
        if c is None or (c.offer.instance.name, c.offer.market) != (o.instance.name, o.market):
            continue
        reproduced += 1
        counted = width(c, alone.fallbacks)
        if c.offer.key == broad.choice.offer.key:  # the choice itself, this zone widened
            assert o.zone is not None and c.offer.zone is None and counted >= need, (o.key, counted)
        elif c.offer.zone == o.zone:
            assert counted < need, (o.key, counted)
        else:  # widened to the region
            estimate = c.cost.total_usd + alt.cost.expected_usd - alt.cost.total_usd
            assert counted < need or estimate >= chosen, (o.key, counted, estimate)
    assert eligible == 0 or reproduced >= 1, (eligible, reproduced)
    assert (
        eligible
        == {
            "04-llama70b-fp8-spot": 0,
            "05-llama405b-endpoint": 2,
            "23-qwen3-235b-endpoint": 0,
            "27-qwen3-30b-moe-batch": 1,
        }[name]
    )


P5EN_USE1_AZ6_FLEET = {
    "p4de.24xlarge": "low",
    "p5.48xlarge": "low",
    "p4d.24xlarge": "low",
    "p6-b200.48xlarge": UNOBTAINABLE,
}
"""Fixture 27's fleet once it asks 3 or more fallbacks: p5en.48xlarge spot use1-az6's, by obtainability."""


def test_the_walk_tries_a_type_in_each_region() -> None:
    """Fixture 27 asking ``min_fallbacks: 3``: p5en.48xlarge's best spot offer (use2-az3, the only
    p5en spot offer the cost-only ranking lists) counts 2 even widened to us-east-2 (p5, p4d; p5e
    and p6-b200 are "very low"): planned in us-east-2 alone at the default minimum it is the choice,
    cheaper than the one taken; p5en.48xlarge spot in use1-az6 counts 3 (p4de, p5, p4d; p6-b200 kept
    but not counted) and is the choice, at $461.56 more than the cheapest (p4d.24xlarge aps1-az1, 2
    fallbacks): the walk reads the best offer of each type and market in each region, not one per
    type and market. (Before the count excluded "very low" fallbacks, fixture 05's p5.48xlarge in
    use2-az3 showed the same; it now counts 1 there, p5e being "very low".)"""
    three = _plan("27-qwen3-30b-moe-batch", min_fallbacks=3)
    assert three.choice is not None
    assert _where(three) == ("aws", "p5en.48xlarge", "us-east-1", "use1-az6", "spot")
    assert width(three.choice, three.fallbacks) == 3
    assert {f.offer.instance.name: _level(f) for f in three.fallbacks} == P5EN_USE1_AZ6_FLEET
    taken = three.breadth_choice
    assert taken is not None and taken.reached and (taken.fallbacks, taken.min_fallbacks) == (3, 3)
    assert taken.premium_usd == pytest.approx(461.56, abs=0.01)
    ranked = plan(
        parse_spec(_doc("27-qwen3-30b-moe-batch", min_fallbacks=0)), CATALOG, top=BREADTH_CANDIDATES_TRIED
    )
    listed = [a.offer for a in (ranked.choice, *ranked.alternatives) if a is not None]
    p5en = [o.zone for o in listed if (o.instance.name, o.market) == ("p5en.48xlarge", "spot")]
    assert p5en == ["use2-az3"]
    two = _plan("27-qwen3-30b-moe-batch", regions=["us-east-2"])
    assert two.choice is not None and _where(two) == ("aws", "p5en.48xlarge", "us-east-2", None, "spot")
    assert width(two.choice, two.fallbacks) == 2
    assert two.choice.cost.expected_usd < three.choice.cost.expected_usd


def test_a_breadth_choice_never_takes_an_offer_the_plan_expects_not_to_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fixture 27 asking ``min_fallbacks: 4``: the cheapest, p4d.24xlarge spot aps1-az1 (obtainability
    medium, 2 fallbacks), gives way to p5en.48xlarge spot use1-az6 (medium), whose fleet counts 3
    (p4de, p5 and p4d, low; p6-b200, "very low", stays in it uncounted): short of 4, the cheapest with
    the most found. Not to p6-b200.48xlarge spot us-east-1, whose fleet has 4 (the walk's only offer
    with them, $62.58 dearer, expected) but whose obtainability is "very low" (spot sale unconfirmed,
    a capacity-block type): the plan itself expects it not to launch. With that rule off
    (``select.breadth_allows`` always true) the plan takes it."""
    broad = _plan("27-qwen3-30b-moe-batch", min_fallbacks=4)
    assert broad.choice is not None
    assert _where(broad) == ("aws", "p5en.48xlarge", "us-east-1", "use1-az6", "spot")
    assert _level(broad.choice) == "medium"
    assert {f.offer.instance.name: _level(f) for f in broad.fallbacks} == P5EN_USE1_AZ6_FLEET
    taken = broad.breadth_choice
    assert (
        taken is not None
        and not taken.reached
        and taken.fallbacks == width(broad.choice, broad.fallbacks) == 3
    )
    assert (taken.passed_over.instance.name, taken.passed_over.zone) == ("p4d.24xlarge", "aps1-az1")
    assert (taken.passed_over_fallbacks, taken.passed_over_obtainability) == (2, "medium")
    assert taken.obtainability == "medium"
    assert taken.premium_usd == pytest.approx(461.56, abs=0.01)
    b200 = next(a for a in broad.alternatives if a.offer.instance.name == "p6-b200.48xlarge")
    assert _level(b200) == UNOBTAINABLE
    assert b200.cost.expected_usd - broad.choice.cost.expected_usd == pytest.approx(62.58, abs=0.01)
    assert breadth_allows(UNOBTAINABLE, UNOBTAINABLE) and not breadth_allows(UNOBTAINABLE, "low")
    monkeypatch.setattr(select_module, "breadth_allows", lambda level, cheapest_level: True)
    unruled = _plan("27-qwen3-30b-moe-batch", min_fallbacks=4)
    assert unruled.choice is not None and _level(unruled.choice) == UNOBTAINABLE
    assert _where(unruled) == ("aws", "p6-b200.48xlarge", "us-east-1", None, "spot")
    assert unruled.breadth_choice is not None and unruled.breadth_choice.reached
    assert width(unruled.choice, unruled.fallbacks) == 4


_Member = tuple[str, str, bool]
"""A fleet member as (instance type, market, refuge)."""


def _four_gpu_refuge_case(name: str, premium: float, case_id: str) -> Any:
    """Fixtures 04 and 23 (a3-highgpu-4g a replica): the same narrow europe-north1 fleet and the same
    broad us-east4 one, at their own premium."""
    return pytest.param(
        name,
        2,
        ("a3-highgpu-4g", [("a3-highgpu-8g", "spot", False), ("a3-highgpu-8g", "on-demand", True)]),
        ("gcp", "a3-highgpu-4g", "us-east4", None, "spot"),
        [
            ("a3-megagpu-8g", "spot", False),
            ("a3-highgpu-8g", "spot", False),
            ("a3-ultragpu-8g", "spot", False),
            ("a3-highgpu-8g", "on-demand", True),
            ("a3-megagpu-8g", "on-demand", True),
        ],
        (1, 3),
        premium,
        "Breadth   chose gcp a3-highgpu-4g spot us-east4 (3 fallbacks, obtainability low) over the "
        "cheapest gcp a3-highgpu-4g spot europe-north1 (1 fallback, obtainability low) at ",
        id=case_id,
    )


REFUGE_CASES = [
    _four_gpu_refuge_case("04-llama70b-fp8-spot", 928.25, "04"),
    _four_gpu_refuge_case("23-qwen3-235b-endpoint", 464.12, "23"),
]


@pytest.mark.parametrize(
    ("name", "asked", "narrow", "where", "fleet", "counted", "premium", "line_start"), REFUGE_CASES
)
def test_an_on_demand_refuge_is_kept_but_not_counted(
    name: str,
    asked: int,
    narrow: tuple[str, list[_Member]],
    where: tuple[str, str, str, str | None, str],
    fleet: list[_Member],
    counted: tuple[int, int],
    premium: float,
    line_start: str,
) -> None:
    """Review of integ5, must-fix 1: a GCP spot endpoint's on-demand group (its spot drought's refuge,
    ~14x the rate, never moved back from) stays in the fleet but does not count toward
    ``placement.min_fallbacks``. Fixture 04 as given: in europe-north1 the cheapest, a3-highgpu-4g
    spot, has a3-highgpu-8g spot and then a3-highgpu-8g on demand; only the spot one counts, so the
    plan takes a3-highgpu-4g spot in us-east4, whose three spot fallbacks count, its own two on-demand
    refuges kept after them. Fixture 23 the same (a3-highgpu-4g a replica again since current MoE
    engines pay 9 µs per routed expert on Hopper, not 25). The Breadth line says how many the
    passed-over offer had. (Counting the refuge, either plan stayed in europe-north1 with
    no Breadth line and no broader region.)"""
    cheapest = _plan(name, min_fallbacks=0)
    assert cheapest.choice is not None
    assert _where(cheapest) == ("gcp", narrow[0], "europe-north1", None, "spot")
    assert [(f.offer.instance.name, f.offer.market, f.refuge) for f in cheapest.fallbacks] == narrow[1]
    refuges = sum(f.refuge for f in cheapest.fallbacks)
    assert refuges == 1 and width(cheapest.choice, cheapest.fallbacks) + refuges == asked
    broad = _plan(name, min_fallbacks=asked)
    assert broad.choice is not None
    assert _where(broad) == where
    assert width(cheapest.choice, cheapest.fallbacks) == counted[0]
    assert [(f.offer.instance.name, f.offer.market, f.refuge) for f in broad.fallbacks] == fleet
    taken = broad.breadth_choice
    assert taken is not None and taken.reached and taken.min_fallbacks == asked
    assert (
        (taken.passed_over_fallbacks, taken.fallbacks)
        == counted
        == (
            width(cheapest.choice, cheapest.fallbacks),
            width(broad.choice, broad.fallbacks),
        )
    )
    assert taken.premium_usd == pytest.approx(premium, abs=0.01)
    line = next(x for x in render_plan(broad, CATALOG_DAY).splitlines() if x.startswith("Breadth   "))
    assert line.startswith(f"{line_start}${premium:,.2f} more")


def _member(market: str, level: str | None) -> Any:
    obtainability = SimpleNamespace(level=level) if level is not None else None
    return SimpleNamespace(
        offer=SimpleNamespace(market=market), cost=SimpleNamespace(obtainability=obtainability)
    )


def test_breadth_of_counts_the_choices_market_and_not_very_low() -> None:
    """Pure: a fleet of a spot fallback ("low"), a "very low" one, one of unknown obtainability and
    an on-demand refuge counts 2 beside a "low" spot choice, 3 beside a "very low" one (no worse than
    the choice), and the on-demand member only beside an on-demand choice."""
    fleet = [
        _member("spot", "low"),
        _member("spot", UNOBTAINABLE),
        _member("spot", None),
        _member("on-demand", "high"),
    ]
    assert breadth_of(fleet, "spot", "low") == 2
    assert breadth_of(fleet, "spot", None) == 2
    assert breadth_of(fleet, "spot", UNOBTAINABLE) == 3
    assert breadth_of(fleet, "on-demand", "high") == 1
    assert breadth_of([], "spot", "low") == 0


def test_a_fleet_of_very_low_extras_is_widened() -> None:
    """Review of integ5, should-fix 4, fixture 27 in us-east-2: p5en.48xlarge spot use2-az3's zone
    fleet is p5e ("very low") and p5 (low), so it counts 1, not 2: the plan widens it to us-east-2's
    zones, where p5 and p4d count (p5e and p6-b200 kept, not counted). (Counting p5e, the zone fleet
    was taken as broad enough.)"""
    zone = _plan("27-qwen3-30b-moe-batch", clouds=["aws"], regions=["us-east-2"], min_fallbacks=0)
    assert zone.choice is not None
    assert _where(zone) == ("aws", "p5en.48xlarge", "us-east-2", "use2-az3", "spot")
    assert {f.offer.instance.name: _level(f) for f in zone.fallbacks} == {
        "p5e.48xlarge": UNOBTAINABLE,
        "p5.48xlarge": "low",
    }
    wide = _plan("27-qwen3-30b-moe-batch", clouds=["aws"], regions=["us-east-2"])
    assert wide.choice is not None
    assert _where(wide) == ("aws", "p5en.48xlarge", "us-east-2", None, "spot")
    assert width(zone.choice, zone.fallbacks) == 1
    assert width(wide.choice, wide.fallbacks) == 2
    assert {f.offer.instance.name for f in wide.fallbacks} == {
        "p5.48xlarge",
        "p4d.24xlarge",
        "p5e.48xlarge",
        "p6-b200.48xlarge",
    }
    taken = wide.breadth_choice
    assert taken is not None and taken.passed_over.zone == "use2-az3"
    assert (taken.passed_over_fallbacks, taken.fallbacks) == (1, 2)


EU_QLORA = {
    "name": "aws-eu-qlora",
    "task": "finetune-qlora",
    "model": {"preset": "llama-3.1-70b"},
    "precision": "nf4",
    "training": {
        "tokens": 1e8,
        "sequence_tokens": 2048,
        "micro_batch": 1,
        "activation_checkpointing": True,
        "lora_rank": 16,
    },
    "fault_tolerance": "checkpointed",
    "teardown": {"ttl": "72h"},
    "placement": {"clouds": ["aws"], "regions": ["eu-*"]},
    "job": {"command": "python train.py --resume"},
}
"""The review's spec (/tmp/rev-i25b/specs/b-aws-eu-qlora.yaml): no offer in eu-* reaches two."""


def test_when_none_reaches_the_minimum_the_cheapest_with_the_most_fallbacks_is_taken() -> None:
    """The cheapest, p4d.24xlarge spot euc1-az3 (0 fallbacks), widened to eu-central-1 has 1 at
    its dearest zone's price ($27.43/h, ~$307 expected); p5.48xlarge spot eu-north-1 has 1 for
    ~$114: the plan takes the cheapest of those with the most fallbacks found, and says so."""
    narrow = plan(parse_spec(EU_QLORA), CATALOG)
    cost_only = plan(
        parse_spec({**EU_QLORA, "placement": {**EU_QLORA["placement"], "min_fallbacks": 0}}), CATALOG
    )
    assert narrow.choice is not None and cost_only.choice is not None
    assert cost_only.choice.offer.zone == "euc1-az3"
    most = len(narrow.fallbacks)
    assert most == 1 and narrow.choice.offer.instance.name == "p5.48xlarge"
    assert narrow.choice.cost.expected_usd < 150.0
    for alt in [*narrow.alternatives]:  # none cheaper (expected) has as many
        if alt.cost.expected_usd < narrow.choice.cost.expected_usd and alt.offer.market == "spot":
            o = alt.offer
            alone = plan(
                parse_spec(
                    {**EU_QLORA, "placement": {"clouds": ["aws"], "regions": [o.region], "min_fallbacks": 0}}
                ),
                CATALOG,
            )
            assert alone.choice is not None
            if alone.choice.offer.instance.name == o.instance.name:
                assert len(alone.fallbacks) < most
    taken = narrow.breadth_choice
    assert taken is not None and not taken.reached and taken.fallbacks == 1
    assert taken.passed_over.key == cost_only.choice.offer.key and taken.passed_over_fallbacks == 0
    assert taken.premium_usd == pytest.approx(
        narrow.choice.cost.expected_usd - cost_only.choice.cost.expected_usd
    )
    text = render_plan(narrow, CATALOG_DAY)
    line = next(x for x in text.splitlines() if x.startswith("Breadth   "))
    assert "over the cheapest aws p4d.24xlarge spot euc1-az3 (0 fallbacks, obtainability low)" in line
    assert "the most fallbacks of the offers tried, fewer than placement.min_fallbacks 2" in line


def test_a_widened_zone_offer_is_stated_on_the_breadth_line() -> None:
    """Fixture 12 pinned to p4d/p4de in us-east-1: the cheapest, p4d.24xlarge spot use1-az1, has
    no fallback in its zone; widened to us-east-1's zones (priced at the dearest) it has p4de. The
    choice is then not the cheapest offer as ranked, and the Breadth line says so with the
    premium; ``min_fallbacks: 0`` keeps the zone offer (expected cost alone)."""
    pins = {"regions": ["us-east-1"], "instance_types": ["p4d.24xlarge", "p4de.24xlarge"]}
    wide, zone = _plan("12-guanaco-65b-qlora", **pins), _plan("12-guanaco-65b-qlora", **pins, min_fallbacks=0)
    assert (
        _where(zone) == ("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "spot")
        and zone.breadth_choice is None
    )
    assert _where(wide) == ("aws", "p4d.24xlarge", "us-east-1", None, "spot") and len(wide.fallbacks) == 1
    assert wide.choice is not None and zone.choice is not None
    taken = wide.breadth_choice
    assert taken is not None and taken.passed_over.key == zone.choice.offer.key and not taken.reached
    assert taken.premium_usd == pytest.approx(wide.choice.cost.expected_usd - zone.choice.cost.expected_usd)
    line = next(x for x in render_plan(wide, CATALOG_DAY).splitlines() if x.startswith("Breadth   "))
    assert (
        line.startswith("Breadth   chose aws p4d.24xlarge spot us-east-1 (1 fallback, obtainability ")
        and "over the cheapest aws p4d.24xlarge spot use1-az1 (0 fallbacks, obtainability " in line
    )


def test_a_rejected_widening_leaves_nothing_on_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of integ5, should-fix 2: what planning the widened fleet sets aside (here a
    deadline-late entry, injected into the region-wide attempt's ``late`` list, since no catalog row
    makes a sibling zone's type late alone) reaches the plan only when the widening is taken.
    Fixture 12 pinned to p4d/p4de in us-east-1: p4d.24xlarge spot use1-az1 has no fallback in its
    zone; widened to us-east-1 (priced at the dearest zone, ~$72) it has p4de. With a $50 budget the
    widening is not taken, and the plan names no deadline-late type; without the budget it is
    taken, and the entry is on the plan."""
    from selector.breadth import Late

    real = select_module.fallbacks
    spanned: list[str] = []

    def with_late_in_region(choice_offer: Any, *args: Any, **kwargs: Any) -> Any:
        found = real(choice_offer, *args, **kwargs)
        late = kwargs.get("late")
        if choice_offer.zone is None and late is not None:
            spanned.append(choice_offer.region)
            late.append(Late("p5.48xlarge", choice_offer.region, 1, 60.0))
        return found

    monkeypatch.setattr(select_module, "fallbacks", with_late_in_region)
    pins = {"regions": ["us-east-1"], "instance_types": ["p4d.24xlarge", "p4de.24xlarge"]}
    doc = _doc("12-guanaco-65b-qlora", **pins)
    budget = plan(parse_spec({**doc, "budget": {"max_total_usd": 50.0}}), CATALOG)
    assert spanned == ["us-east-1"]  # the widening was tried
    assert _where(budget) == ("aws", "p4d.24xlarge", "us-east-1", "use1-az1", "spot")
    assert budget.fallbacks == () and budget.late == ()
    assert "the deadline limits it" not in (budget.breadth_note or "")
    spanned.clear()
    wide = plan(parse_spec(doc), CATALOG)
    assert spanned == ["us-east-1"] and _where(wide) == ("aws", "p4d.24xlarge", "us-east-1", None, "spot")
    assert [(e.instance_type, e.region) for e in wide.late] == [("p5.48xlarge", "us-east-1")]


def test_a_walked_candidate_plans_its_fleet_with_its_own_engine_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fixture 25 on AWS alone, in a world where H100s get another vLLM build (a CUDA 12.9 image,
    as the 0.3x releases shipped beside their CUDA 13 ones) than other GPUs: the cheapest,
    p5.4xlarge (H100), launches the H100 build and has no fallback; the walked p4de.24xlarge
    use1-az6 (A100-80GB) launches the other one, and its fleet (one boot script) takes only types
    of its own build: p4d (A100-40GB) and p5en (H200), which count, and p6-b200 ("very low"), never
    p5.48xlarge (H100), though use1-az6 sells it and the real world's fleet there takes it.
    Comparing with the cheapest's build would give it the H100 types instead. (Fixture 05 showed
    this while "very low" fallbacks counted: its walked H200 choice's fleet is now p5e and p6-b200
    only, neither counted.)"""
    real_world = _plan("25-phi4-spot-endpoint", clouds=["aws"], regions=["us-east-1"])
    assert real_world.choice is not None
    assert _where(real_world) == ("aws", "p4de.24xlarge", "us-east-1", "use1-az6", "spot")
    assert "p5.48xlarge" in {f.offer.instance.name for f in real_world.fallbacks}
    real = engine_filter.choose_build

    def by_generation(engine: str, family: str, gpu: GpuSpec, driver: int, image: str) -> EngineBuild | str:
        build = real(engine, family, gpu, driver, image)
        if isinstance(build, EngineBuild) and gpu.name == "H100":
            return replace(build, tag=f"{build.tag}-cu129", cuda="12.9", min_driver=525)
        return build

    monkeypatch.setattr(engine_filter, "choose_build", by_generation)
    broad = _plan("25-phi4-spot-endpoint", clouds=["aws"])
    assert broad.choice is not None and broad.choice.engine is not None
    taken = broad.breadth_choice
    assert taken is not None and taken.reached and taken.passed_over.instance.gpu.name == "H100"
    assert _where(broad) == ("aws", "p4de.24xlarge", "us-east-1", "use1-az6", "spot")
    assert broad.choice.engine.tag == "vllm/vllm-openai:v0.34.0"
    assert [f.offer.instance.name for f in broad.fallbacks] == [
        "p4d.24xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
    ]
    assert width(broad.choice, broad.fallbacks) == 2
    for f in broad.fallbacks:
        gpu = f.offer.instance.gpu
        assert gpu.name != "H100", f.offer.key
        own = by_generation("vllm", broad.requirements.arch.family, gpu, 580, "image")
        assert own == broad.choice.engine, f.offer.key


@pytest.mark.parametrize("name", NARROW)
def test_min_fallbacks_zero_ranks_by_expected_cost_alone(name: str) -> None:
    cheapest = _plan(name, min_fallbacks=0)
    assert cheapest.choice is not None and cheapest.breadth_choice is None
    ranked = sorted([cheapest.choice, *cheapest.alternatives], key=lambda c: c.cost.expected_usd)
    assert ranked[0] is cheapest.choice


def test_a_pinned_type_keeps_its_narrow_fleet() -> None:
    pinned = _plan("05-llama405b-endpoint", instance_types=["a3-highgpu-8g"])
    assert _where(pinned) == ("gcp", "a3-highgpu-8g", "europe-north1", None, "spot")
    assert pinned.breadth_choice is None
    members = [(f.offer.instance.name, f.offer.market) for f in pinned.fallbacks]
    assert members == [("a3-highgpu-8g", "on-demand")]
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
    assert note.endswith(
        "no other region placement.regions allows, among the 3 cheapest pricing it, gives 2 within the "
        "budget and ttl"
    )
    doc["placement"] = {**doc.get("placement", {}), "min_fallbacks": 3}
    three = plan(parse_spec(doc), CATALOG).breadth_note
    assert three is not None
    assert three.endswith("among the 3 cheapest pricing it, gives 3 within the budget and ttl")


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
    assert broadest_first(iter("abd"), key, size, 2, [("r", 2)]) == ("r", 2)  # b-wide dearer than r
    assert tried == ["a", "b"]
    assert broadest_first(iter(""), key, size, 2) is None


def test_when_none_reaches_the_minimum_the_cheapest_with_the_most_wins() -> None:
    """Pure: the cheapest (0 fallbacks) widened to its region has 1 at key 50; the next ranked
    candidate has 1 too at key 12: it wins, and every candidate is tried (none reaches 2)."""
    keys = {"z": 10.0, "z-wide": 50.0, "x": 12.0, "y": 13.0, "w": 60.0}
    fleets = {"x": ("x", 1), "y": ("y", 0), "w": ("w", 1)}
    tried: list[str] = []

    def size(c: str) -> tuple[str, int]:
        tried.append(c)
        return fleets[c]

    key = lambda c: (0.0, keys[c])  # noqa: E731
    known = [("z", 0), ("z-wide", 1)]
    assert broadest_first(iter("xyw"), key, size, 2, known) == ("x", 1)
    assert tried == ["x", "y", "w"]
    assert broadest_first(iter("y"), key, size, 2, known) == ("z-wide", 1)
    assert broadest_first(iter("y"), key, size, 2, [("z", 0)]) == ("z", 0)  # ties keep the cheapest
    assert BREADTH_CANDIDATES_TRIED >= 5


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _counted(choice: dict[str, Any]) -> int:
    """``breadth_of`` read from ``--json``: the fallbacks in the choice's market, not "very low"."""
    level = choice["obtainability"]["level"] if choice["obtainability"] else None
    return sum(
        1
        for f in choice["fallbacks"]
        if f["market"] == choice["market"]
        and breadth_allows(f["obtainability"]["level"] if f["obtainability"] else None, level)
    )


def test_gpufit_plan_says_what_it_chose_over_the_cheapest() -> None:
    """Fixture 05: a3-megagpu-8g spot us-east4 (a3-highgpu-8g and a3-ultragpu-8g spot count; its two
    on-demand groups are kept, not counted) over a3-highgpu-8g spot europe-north1, whose one group
    is on demand: 0 that count."""
    path = str(REALISTIC / "05-llama405b-endpoint.yaml")
    code, out, _ = _run("plan", path)
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("Breadth   "))
    assert line.startswith(
        "Breadth   chose gcp a3-megagpu-8g spot us-east4 (2 fallbacks, obtainability low) over the "
        "cheapest gcp a3-highgpu-8g spot europe-north1 (0 fallbacks, obtainability low) at $569.10 more "
        "(expected, incl. estimated wait), for placement.min_fallbacks 2;"
    )
    assert "placement.min_fallbacks: 0 ranks by expected cost alone" in line
    code, out, _ = _run("plan", path, "--json")
    choice = json.loads(out)["choice"]
    taken = choice["breadth_choice"]
    assert taken["passed_over"]["instance_type"] == "a3-highgpu-8g"
    assert taken["passed_over"]["region"] == "europe-north1" and taken["passed_over_fallbacks"] == 0
    assert [(f["instance_type"], f["market"]) for f in choice["fallbacks"]] == [
        ("a3-highgpu-8g", "spot"),
        ("a3-ultragpu-8g", "spot"),
        ("a3-highgpu-8g", "on-demand"),
        ("a3-megagpu-8g", "on-demand"),
    ]
    assert taken["fallbacks"] == _counted(choice) == 2 and taken["premium_usd"] == pytest.approx(
        569.10, abs=0.01
    )
    assert taken["min_fallbacks"] == 2 and choice["broader_region"] is None
    assert taken["obtainability"] == "low" and taken["passed_over_obtainability"] == "low"
    assert taken["min_fallbacks_reached"] is True
    # each fallback says whether it counts: the spot ones here, not the on-demand refuges
    assert [f["counts_toward_min_fallbacks"] for f in choice["fallbacks"]] == [True, True, False, False]


def test_gpufit_plan_names_both_obtainability_levels(tmp_path: Any) -> None:
    """Fixture 12 asking ``min_fallbacks: 3``: the Breadth line and JSON say the passed-over offer,
    p4d.24xlarge aps1-az1 (2 fallbacks), was "medium", the choice, p4de.24xlarge use1-az6, "low"; the
    choice counts 3 of its 4 fallbacks (p6-b200 is "very low")."""
    path = tmp_path / "guanaco-three.yaml"
    path.write_text(yaml.safe_dump(_doc("12-guanaco-65b-qlora", min_fallbacks=3)))
    code, out, _ = _run("plan", str(path))
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("Breadth   "))
    assert line.startswith(
        "Breadth   chose aws p4de.24xlarge spot use1-az6 (3 fallbacks, obtainability low) over the "
        "cheapest aws p4d.24xlarge spot aps1-az1 (2 fallbacks, obtainability medium) at $28.94 more"
    )
    code, out, _ = _run("plan", str(path), "--json")
    choice = json.loads(out)["choice"]
    taken = choice["breadth_choice"]
    assert (taken["passed_over_obtainability"], taken["obtainability"]) == ("medium", "low")
    assert taken["fallbacks"] == _counted(choice) == 3 and len(choice["fallbacks"]) == 4


def test_gpufit_plan_of_a_cost_only_spec_has_no_breadth_line(tmp_path: Any) -> None:
    path = tmp_path / "cost-only.yaml"
    path.write_text(yaml.safe_dump(_doc("05-llama405b-endpoint", min_fallbacks=0)))
    code, out, _ = _run("plan", str(path))
    assert code == 0 and "Breadth   " not in out
    code, out, _ = _run("plan", str(path), "--json")
    assert json.loads(out)["choice"]["breadth_choice"] is None
