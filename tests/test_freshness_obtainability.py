"""How old the prices are (from the offers' own dates, with a frozen clock) and whether an
offer's capacity can be had (obtainability, as an expected wait in the expected cost); and the
29 realistic plans a new user would try: what they choose now."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from catalog.store import resolve
from cli.main import main
from selector.catalog import load_catalog
from selector.consumption import status
from selector.cost import with_wait
from selector.freshness import STALE_AFTER_DAYS, age_text, price_ages
from selector.obtainability import obtainability
from selector.select import plan
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
    assert cost.wait_hours == pytest.approx((1 + cost.interruption_rate_per_h * cost.hours) * (1 - p) / p)
    assert cost.wait_usd == pytest.approx(cost.wait_hours * result.wait_value_per_hour)
    assert cost.expected_usd == pytest.approx(cost.total_usd + cost.wait_usd)
    assert cost == with_wait(cost, cost.obtainability, result.wait_value_per_hour)
    ranked = [c.cost.expected_usd for c in (choice, *result.alternatives)]
    assert ranked == sorted(ranked)


def test_the_readmes_qlora_example_no_longer_bets_on_spot_b200s() -> None:
    """Billed alone, p6-b200.48xlarge spot is the cheapest job ($9.74, half an hour); its capacity
    is very unlikely to be had (about 18 hours of expected wait): the plan takes an L40S that can be."""
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
    assert b200.cost.total_usd < result.choice.cost.total_usd < b200.cost.expected_usd
    _, out, _ = run("plan", str(GUANACO))
    capacity = next(line for line in out.splitlines() if line.startswith("Capacity"))
    assert capacity.startswith("Capacity  spot g6e.xlarge: obtainability medium (no placement score;")
    assert capacity.endswith("(estimate)")


# ------------------------------------------------------------------------ the realistic plans


@pytest.mark.parametrize("spec_file", REALISTIC, ids=[p.stem for p in REALISTIC])
def test_a_realistic_plan_chooses_what_can_be_bought(spec_file: Path) -> None:
    result = plan(load_spec(spec_file), CATALOG)
    choice = result.choice
    assert choice is not None
    offer = choice.offer
    assert offer in CATALOG.offers and not offer.unpriced  # priced: no floor, no anomaly
    assert status(offer.cloud, offer.instance.name, offer.market) != "no"
    assert (offer.instance.name, offer.region) != ("p5e.48xlarge", "ap-southeast-3")


FLEETS = [
    "10-llama3b-batch",
    "11-qwen7b-batch",
    "12-guanaco-65b-qlora",
    "13-llama8b-lora",
    "14-llama8b-full-ft",
    "16-llama70b-qlora",
    "17-qwen32b-lora",
    "18-mistral7b-qlora-cheap",
    "19-sdxl-batch",
    "20-flux-batch",
    "21-whisper-batch",
    "26-llama8b-pretrain-small",
]
"""The stateless and checkpointed realistic plans whose fleet can hold other types (not a
replica spanning nodes, not a zone where only the choice runs the job, not a GCP group whose
template serves no other type): each gets at least two fallbacks."""


@pytest.mark.parametrize("name", FLEETS)
def test_stateless_and_checkpointed_fleets_have_several_fallbacks(name: str) -> None:
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / f"{name}.yaml")
    assert spec.fault_tolerance in ("stateless", "checkpointed")
    result = plan(spec, CATALOG)
    assert len(result.fallbacks) >= 2, [f.offer.instance.name for f in result.fallbacks]
