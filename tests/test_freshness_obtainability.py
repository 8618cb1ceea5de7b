"""How old the prices are (from the offers' own dates, with a frozen clock) and whether an
offer's capacity can be had (obtainability, as an expected wait in the expected cost); and the
29 realistic plans a new user would try: what they choose now."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from catalog.aws_scores import request_groups
from catalog.store import resolve
from cli.main import main
from cli.render import capacity_line, fleet_line
from selector.breadth import GCP_ONE_TYPE_NOTE
from selector.catalog import SNAPSHOT_FILE, Catalog, Offer, catalog_from_doc, load_catalog
from selector.consumption import status
from selector.cost import with_wait
from selector.fallbacks import spanning_offer
from selector.freshness import STALE_AFTER_DAYS, age_text, price_ages
from selector.markets import on_demand_base
from selector.obtainability import failure_usd, launch_failure, obtainability
from selector.select import plan
from selector.sizing import Rejection, Shape, fit, requirements
from selector.spec import load_spec
from tests.conftest import ROOT

CATALOG = load_catalog()
REALISTIC = sorted((ROOT / "tests" / "fixtures" / "realistic").glob("*.yaml"))
GUANACO = ROOT / "examples" / "guanaco-65b.yaml"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------- freshness


def test_ages_come_from_the_offers_dates() -> None:
    today = date(2026, 12, 4)
    assert age_text("2025-06", today) == "18 months old"
    assert age_text("2026-11-20", today) == "14 days old"
    assert age_text("2026-12-04", today) == "0 days old"
    ages = price_ages(["2025-06", "2025-05", "2025-06", "2026-11-20"])
    assert ages is not None and (ages.oldest, ages.median, ages.newest) == (
        "2025-05",
        "2025-06",
        "2026-11-20",
    )
    assert ages.describe(today) == "prices from 2025-05..2026-11-20, 18 months old"
    assert ages.stale(today) and not ages.stale(date(2025, 6, 1) + timedelta(days=STALE_AFTER_DAYS))


def test_plan_header_and_json_say_how_old_the_prices_are(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run("plan", str(GUANACO))
    assert code == 0
    head = out.splitlines()[0]
    assert head.endswith(
        "catalog embedded snapshot (built 2026-12-02); prices from 2025-05..2025-06, 18 months old"
    )
    assert out.splitlines()[1].startswith("WARNING: the prices used are 18 months old (median as of 2025-06")
    assert "`gpufit catalog refresh`" in out.splitlines()[1]
    assert "1 days old" not in err and "prices from 2025-05..2025-06, 18 months old" in err
    code, out, _ = run("plan", str(GUANACO), "--json")
    prices = json.loads(out)["prices"]
    assert prices["median_as_of"] == "2025-06" and prices["age"] == "18 months old" and prices["stale"]
    assert prices["age_days"] == 551 and prices["offers"] == len(CATALOG.offers)
    # the same prices a few days after they were observed: no warning
    monkeypatch.setenv("GPUFIT_TODAY", "2025-06-20")
    code, out, _ = run("plan", str(GUANACO))
    assert "19 days old" in out.splitlines()[0] and "WARNING" not in out


def test_the_prices_considered_are_the_placements(capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / "07-qwen3-32b-gcp.yaml")
    result = plan(spec, CATALOG)
    assert result.price_ages is not None
    assert result.price_ages.offers == sum(1 for o in CATALOG.offers if o.cloud == "gcp")
    assert (result.price_ages.oldest, result.price_ages.newest) == ("2025-05", "2025-05")


def test_catalog_show_dates_the_prices_and_the_file_apart() -> None:
    code, out, _ = run("catalog", "show", "--catalog", "snapshot")
    assert code == 0
    assert "written 2026-12-02 (2 days ago)" in out
    assert "prices from 2025-05..2025-06 (median 2025-06), 18 months old" in out
    assert "WARNING: the prices used are 18 months old" in out
    code, out, _ = run("catalog", "show", "--catalog", "snapshot", "--json")
    info = json.loads(out)
    assert info["prices"]["age_days"] == 551 and info["unpriced"] == len(CATALOG.unpriced)


def test_the_fallback_to_the_snapshot_names_the_prices_age_not_the_files() -> None:
    resolved = resolve(None, datetime(2026, 12, 4, tzinfo=UTC), Path("/nonexistent/catalog.json"))
    assert resolved.warning is not None
    assert "prices from 2025-05..2025-06, 18 months old" in resolved.warning
    assert "no account needed" in resolved.warning and "days old" not in resolved.warning


# ---------------------------------------------------------------------------- obtainability


def _offer(name: str, market: str, where: str):  # type: ignore[no-untyped-def]
    return next(
        o
        for o in CATALOG.offers
        if o.instance.name == name and o.market == market and where in (o.zone, o.region)
    )


def test_obtainability_reads_the_signals_and_says_which() -> None:
    b200 = obtainability(_offer("p6-b200.48xlarge", "spot", "us-east-1"))
    assert b200.level == "very low" and b200.estimated
    assert b200.reasons == (
        "no placement score",
        "no Spot Instance Advisor data",
        "capacity-block type",
        "spot sale unconfirmed",
        "B200 in high demand",
    )
    assert b200.describe().startswith(
        "very low (no placement score; no Spot Instance Advisor data; capacity-block type"
    )
    od = obtainability(_offer("p6-b200.48xlarge", "on-demand", "us-east-1"))
    assert od.level == "low" and "on-demand sale unconfirmed" in od.reasons
    assert obtainability(_offer("g6e.xlarge", "on-demand", "us-east-1")).level == "high"
    g6e = obtainability(_offer("g6e.xlarge", "spot", "use2-az3"))
    assert g6e.reasons == ("no placement score", "interrupted >20% a month") and g6e.level == "medium"
    two = obtainability(_offer("p4d.24xlarge", "spot", "aps1-az1"), nodes=2)
    assert two.p == pytest.approx(obtainability(_offer("p4d.24xlarge", "spot", "aps1-az1")).p ** 2)


def test_the_expected_wait_enters_the_expected_cost() -> None:
    result = plan(load_spec(GUANACO), CATALOG)
    choice = result.choice
    assert choice is not None and choice.cost.obtainability is not None
    cost = choice.cost
    p = cost.obtainability.p
    window = result.requirements.deadline_hours - cost.hours  # truncated at the ttl
    assert cost.wait_hours == pytest.approx(
        (1 + cost.interruption_rate_per_h * cost.hours) * (1 - p) / p * (1 - (1 - p) ** window)
    )
    assert cost.wait_usd == pytest.approx(cost.wait_hours * result.wait_value_per_hour)
    assert cost.expected_usd == pytest.approx(cost.total_usd + cost.wait_usd + cost.failure_usd)
    # a confirmed market: only the geometric tail past the ttl, negligible
    assert cost.launch_failure < 1e-4 and abs(cost.failure_usd) < 0.01
    deadline = result.requirements.deadline_hours
    assert with_wait(cost, cost.obtainability, result.wait_value_per_hour, deadline).wait_usd == cost.wait_usd
    ranked = [c.cost.expected_usd for c in (choice, *result.alternatives)]
    assert ranked == sorted(ranked)


def test_the_expected_wait_never_runs_past_the_ttl() -> None:
    """A job cannot wait past its deadline (the group is resized to 0 there): the expected wait
    is the geometric wait truncated at the window (TTL less the run), (1 − p) ÷ p × (1 − (1 − p)^W)
    per ask, and never more than the window; a service keeps asking, untruncated."""
    result = plan(load_spec(GUANACO), CATALOG)
    assert result.choice is not None
    cost = result.choice.cost
    b200 = obtainability(_offer("p6-b200.48xlarge", "spot", "us-east-1"))
    assert b200.wait_hours > 10  # about 18 hours untruncated
    run_h = cost.hours
    for ttl in (run_h + 0.5, run_h + 3.0, run_h + 6.0):
        waited = with_wait(cost, b200, 2.0, deadline_hours=ttl)
        window = ttl - run_h
        assert waited.wait_hours <= window + 1e-9
        per_ask = b200.wait_hours * (1 - (1 - b200.p) ** window)
        assert waited.wait_hours == pytest.approx(min((1 + cost.interruptions) * per_ask, window))
        assert waited.wait_usd == pytest.approx(waited.wait_hours * 2.0)
    # a confirmed market's tail past the window is a failure to launch, not a wait
    confirmed = obtainability(_offer("g6e.xlarge", "spot", "use2-az3"))
    assert confirmed.never == 0.0
    tight = with_wait(cost, confirmed, 2.0, deadline_hours=run_h + 1.0)
    assert tight.launch_failure == pytest.approx((1 - confirmed.p) ** 1.0) and tight.failure_usd >= 0
    service = with_wait(cost, b200, 2.0, deadline_hours=None)
    assert service.wait_hours == pytest.approx((1 + cost.interruptions) * b200.wait_hours)
    # the plan's own ranking uses the same capped wait
    for c in (result.choice, *result.alternatives):
        window = result.requirements.deadline_hours - c.cost.hours
        assert c.cost.wait_hours <= window + 1e-9


def test_the_readmes_qlora_example_no_longer_bets_on_spot_b200s() -> None:
    """Half an hour on p6-b200.48xlarge spot was the cheapest job while setup was free ($9.74);
    with its 27 minutes of boot and checkpoint download billed on eight B200s (issue 24,
    defect 7) it is billed more than the L40S's 25 hours, and its capacity is very unlikely to
    be had (about 18 hours of expected wait): the plan takes an L40S that can be."""
    result = plan(load_spec(GUANACO), CATALOG, top=40)
    assert result.choice is not None and result.choice.offer.instance.name != "p6-b200.48xlarge"
    assert (
        result.choice.cost.obtainability is not None and result.choice.cost.obtainability.level != "very low"
    )
    b200 = next(
        c
        for c in result.alternatives
        if (c.offer.instance.name, c.offer.market) == ("p6-b200.48xlarge", "spot")
    )
    assert result.choice.cost.total_usd < b200.cost.total_usd < b200.cost.expected_usd
    assert b200.cost.setup_hours > 0.4
    _, out, _ = run("plan", str(GUANACO))
    capacity = next(line for line in out.splitlines() if line.startswith("Capacity"))
    assert capacity.startswith("Capacity  spot p4d.24xlarge: obtainability medium (no placement score;")
    assert capacity.endswith("(estimate)")


# ------------------------------------------------------------------------ the realistic plans


@pytest.mark.parametrize("spec_file", REALISTIC, ids=[p.stem for p in REALISTIC])
def test_a_realistic_plan_chooses_what_can_be_bought(spec_file: Path) -> None:
    result = plan(load_spec(spec_file), CATALOG)
    choice = result.choice
    assert choice is not None
    offer = choice.offer
    if offer.zones and offer.zone is None and offer not in CATALOG.offers:  # widened to the region's zones
        offer = next(
            o
            for o in CATALOG.offers
            if o.key[:2] == offer.key[:2]
            and o.zone in offer.zones
            and o.market == offer.market
            and o.hourly_usd == offer.hourly_usd
        )
    assert offer in CATALOG.offers and not offer.unpriced  # priced: no floor, no anomaly
    assert status(offer.cloud, offer.instance.name, offer.market) != "no"
    assert (offer.instance.name, offer.region) != ("p5e.48xlarge", "ap-southeast-3")


BREADTH_EXEMPTIONS = (
    "placement.instance_types pins",
    "a multi-node replica",
    "a gcp managed instance group",
    "only ",
)
"""The only reasons a stateless or checkpointed plan may have fewer than two fallbacks."""


@pytest.mark.parametrize("spec_file", REALISTIC, ids=[p.stem for p in REALISTIC])
def test_stateless_and_checkpointed_fleets_have_several_fallbacks_or_say_why(spec_file: Path) -> None:
    """Every realistic fixture (added ones too): a stateless or checkpointed plan has at least
    two fallbacks, or its Fleet line says why not, from a closed list of reasons; an AWS
    single-node fleet with fewer has been widened to its region's zones when it could be."""
    spec = load_spec(spec_file)
    result = plan(spec, CATALOG)
    gcp = result.choice is not None and result.choice.offer.cloud == "gcp"
    grouped = spec.task == "serve" and spec.fault_tolerance != "none"  # issue 25: served MIGs of their own
    if gcp and spec.task != "batch" and not grouped and not result.fallbacks:
        # a GCP group of one endpoint that may go down, or a trained one: flexibility only with
        # the choice's GPUs in a confirmed series
        assert f"fallbacks: none ({GCP_ONE_TYPE_NOTE})" in fleet_line(result)
    if spec.fault_tolerance == "none" or result.choice is None:
        assert result.breadth_note is None
        return
    line = fleet_line(result)
    if len(result.fallbacks) >= 2:
        assert result.breadth_note is None and "fewer than 2" not in line
        return
    note = result.breadth_note
    assert note is not None and note.startswith(BREADTH_EXEMPTIONS), note
    assert note in line
    choice = result.choice
    if choice.offer.cloud == "aws" and choice.shape.nodes_per_replica == 1:
        assert note.startswith("only ")
        wide = spanning_offer(choice.offer, CATALOG)
        assert choice.offer.zone is None or wide is None or "found no more" in note


def test_a_zone_pinned_spot_fleet_spans_the_regions_zones_at_the_dearest_price() -> None:
    zonal = [
        o
        for o in CATALOG.offers
        if o.instance.name == "p5.48xlarge"
        and o.market == "spot"
        and o.region == "us-east-1"
        and o.zone
        and not o.unpriced
    ]
    assert len({o.zone for o in zonal}) >= 2
    cheapest = min(zonal, key=lambda o: o.hourly_usd)
    wide = spanning_offer(cheapest, CATALOG)
    assert wide is not None and wide.zone is None
    assert set(wide.zones) == {o.zone for o in zonal}
    assert wide.hourly_usd == max(o.hourly_usd for o in zonal) >= cheapest.hourly_usd
    assert "priced at the dearest" in wide.notes
    assert spanning_offer(wide, CATALOG) is None  # already region-level


def test_a_widened_fleet_is_chosen_when_its_zone_alone_is_narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zone-pinned spot choice with fewer than two fallbacks in its zone takes the region's
    zones when they hold more: the mixtral batch pinned to us-east-1 gets several."""
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / "09-mixtral-synthetic-data.yaml")
    spec = spec.model_copy(
        update={"placement": spec.placement.model_copy(update=dict(regions=["us-east-1"]))}
    )
    result = plan(spec, CATALOG)
    assert result.choice is not None
    assert len(result.fallbacks) >= 2, fleet_line(result)
    zones = {z for f in result.fallbacks for z in ((f.offer.zone,) if f.offer.zone else f.offer.zones)}
    assert result.choice.offer.zone is None or len(zones) >= 1


# ------------------------------------------------------------------ review follow-ups (issue 25)


def _with_group_score(score: int) -> Catalog:
    """The snapshot with one placement score row for the whole 8-GPU class in us-east-1 (the
    reviewer's reproduction: AWS scores the request, a group of types)."""
    doc = json.loads(SNAPSHOT_FILE.read_bytes())
    types = [t for t in doc["instance_types"] if t["cloud"] == "aws"]
    eight = request_groups(types)[-1]
    assert "p6-b200.48xlarge" in eight and "g6e.48xlarge" in eight
    doc.setdefault("spot_placement_scores", []).append(
        {
            "cloud": "aws",
            "region": "us-east-1",
            "zone": None,
            "instance_types": eight,
            "score": score,
            "target_capacity": 1,
            "source": "AWS_SPOT_PLACEMENT_SCORE",
            "as_of": "2026-12-04",
        }
    )
    return catalog_from_doc(doc, "scored")


def _spot(cat: Catalog, name: str, region: str = "us-east-1") -> Offer:
    return next(
        o for o in cat.offers if o.instance.name == name and o.market == "spot" and o.region == region
    )


def test_a_group_placement_score_never_lifts_a_type_above_its_own_signals() -> None:
    high = _with_group_score(9)
    b200 = _spot(high, "p6-b200.48xlarge")
    assert b200.placement_score == 9
    judged = obtainability(b200)
    assert judged.level == "very low", judged.describe()
    assert judged.p == pytest.approx(obtainability(_spot(CATALOG, "p6-b200.48xlarge")).p)
    assert "spot sale unconfirmed" in judged.reasons and judged.never > 0
    low = _with_group_score(2)
    scored = [o for o in low.offers if o.placement_score == 2]
    assert scored
    for offer in scored:
        capped, own = obtainability(offer), obtainability(replace(offer, placement_score=None))
        assert capped.p == pytest.approx(min(0.2, own.p))
        assert capped.estimated == (own.p <= 0.2)


def test_an_unconfirmed_market_may_never_launch_and_that_enters_the_expected_cost() -> None:
    b200 = obtainability(_offer("p6-b200.48xlarge", "spot", "us-east-1"))
    assert b200.never == pytest.approx(0.5)
    assert launch_failure(b200, 168.0) == pytest.approx(0.5 + 0.5 * (1 - b200.p) ** 168)
    assert launch_failure(b200, None) == pytest.approx(0.5)
    g6e = obtainability(_offer("g6e.xlarge", "spot", "use2-az3"))
    assert g6e.never == 0.0 and launch_failure(g6e, None) == 0.0
    # f × (window × value + re-run − launched)
    assert failure_usd(b200, None, 10.0, 100.0, 300.0) == pytest.approx(0.5 * 200.0)


def test_the_70b_full_fine_tune_does_not_ride_an_unconfirmed_spot_market_alone() -> None:
    """The issue's case: a 7-day checkpointed 70B fine-tune chose p6-b200 spot, a market no
    source confirms, with no fallback. Its chance of never launching now costs a re-run."""
    result = plan(load_spec(ROOT / "stacks" / "Pulumi.llama70b-full-ft.yaml"), CATALOG)
    choice = result.choice
    assert choice is not None
    members = [choice.offer, *(f.offer for f in result.fallbacks)]
    assert any(status(o.cloud, o.instance.name, o.market) == "yes" for o in members), fleet_line(result)
    realistic = plan(
        load_spec(ROOT / "tests" / "fixtures" / "realistic" / "15-llama70b-full-ft.yaml"), CATALOG
    )
    assert realistic.choice is not None
    assert (
        status(
            realistic.choice.offer.cloud, realistic.choice.offer.instance.name, realistic.choice.offer.market
        )
        == "yes"
    )
    text = capacity_line(realistic)
    assert "(estimate)" in text


def test_an_unconfirmed_choice_says_its_failure_odds_as_an_estimate() -> None:
    b200 = _offer("p6-b200.48xlarge", "spot", "us-east-1")
    spec = load_spec(GUANACO)
    spec = spec.model_copy(
        update={
            "placement": spec.placement.model_copy(
                update={"instance_types": ["p6-b200.48xlarge"], "regions": ["us-east-1"]}
            )
        }
    )
    result = plan(spec, CATALOG)
    assert result.choice is not None
    if result.choice.offer.market == "spot":
        assert result.choice.offer == b200
        assert result.choice.cost.launch_failure >= 0.5
        assert "no capacity before the deadline 50% likely (estimate)" in capacity_line(result)


def test_anon_demand_base_is_refused_for_a_multi_node_replica() -> None:
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / "05-llama405b-endpoint.yaml")
    assert spec.serving is not None
    spec = spec.model_copy(update={"serving": spec.serving.model_copy(update=dict(on_demand_base=1))})
    offer = _offer("p5.48xlarge", "spot", "us-east-1")
    shape = fit(requirements(spec), offer.instance)
    assert isinstance(shape, Shape)
    multi = replace(shape, nodes_per_replica=2, instances=2, replicas=1)
    refused = on_demand_base(spec, offer, multi, CATALOG)
    assert isinstance(refused, Rejection) and "a replica spans 2 nodes" in refused.reason
    unset = spec.model_copy(update={"serving": spec.serving.model_copy(update=dict(on_demand_base=None))})
    assert on_demand_base(unset, offer, multi, CATALOG) == (0, 0.0)


NARROW = ROOT / "tests" / "fixtures" / "realistic" / "09-mixtral-synthetic-data.yaml"


def _narrow_yaml() -> str:
    """Fixture 09 with its job.command running its own engine (``serving.engine: none``, timed as
    a server gpufit does not launch) and p5en.48xlarge excluded in ap-south-1: its p4d spot choice
    in aps1-az1 has p5.48xlarge and p5en.48xlarge as fallbacks there, so the exclusion brings back
    the narrow fleet this case is about (one fallback), ranked by expected cost alone
    (``placement.min_fallbacks: 0``: by default the plan takes a broader offer)."""
    text = NARROW.read_text()
    serving = "serving: {context_tokens: 4096, concurrency: 64, tokens: 2e9}"
    assert serving in text
    return text.replace(serving, serving[:-1] + ", engine: none}") + (
        "placement:\n  min_fallbacks: 0\n  exclude:\n"
        "    - {cloud: aws, region: ap-south-1, instance_type: p5en.48xlarge}\n"
    )


def test_a_narrow_zone_pinned_fleet_names_the_region_where_it_would_be_broad(tmp_path: Path) -> None:
    """p4d spot in aps1-az1 has one fallback even widened to ap-south-1's zones: the plan names
    the cheapest other region (of the 3 next-cheapest pricing p4d spot) where its fleet has
    several, and what that costs more; choosing it with placement.regions gives them."""
    path = tmp_path / "narrow.yaml"
    path.write_text(_narrow_yaml())
    spec = load_spec(path)
    result = plan(spec, CATALOG)
    assert result.choice is not None and result.choice.offer.zone == "aps1-az1"
    assert len(result.fallbacks) == 1
    broader = result.broader_region
    assert broader is not None and broader.fallbacks >= 2 and broader.premium_usd > 0
    region = broader.offer.region
    assert region != result.choice.offer.region and broader.offer.instance.name == "p4d.24xlarge"
    note = result.breadth_note
    assert note is not None and f"in {region} it has {broader.fallbacks}+ fallbacks at $" in note
    assert "set placement.regions to choose it" in fleet_line(result)
    pinned = spec.model_copy(update={"placement": spec.placement.model_copy(update={"regions": [region]})})
    there = plan(pinned, CATALOG)
    assert there.choice is not None and there.choice.offer.region == region  # its own best there
    assert len(there.fallbacks) >= 2 and there.broader_region is None


def test_the_json_carries_the_fleet_notes_and_the_broader_region(tmp_path: Path) -> None:
    path = tmp_path / "narrow.yaml"
    path.write_text(_narrow_yaml())
    code, out, _ = run("plan", str(path), "--json")
    assert code == 0
    choice = json.loads(out)["choice"]
    assert choice["broader_region"]["region"] != "ap-south-1" and choice["broader_region"]["premium_usd"] > 0
    assert any(n.startswith("only 1 other type(s) run it in aps1-az1") for n in choice["fleet_notes"])
    assert any(n.startswith("UNCONFIRMED: whether a finished machine") for n in choice["fleet_notes"])
