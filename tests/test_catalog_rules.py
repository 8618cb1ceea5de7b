"""Only offers that can be bought, at prices that are prices: consumption options per type
(sourced data), EC2's spot floor and per-GPU floors, judged against reference data rather than
whatever sibling row a catalog holds; what is kept but never priced says why in `offers`."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from catalog.snapshot import build, summary
from cli.main import main
from selector.catalog import SNAPSHOT_FILE, catalog_from_doc, load_catalog
from selector.consumption import DATA_DIR, OPTIONS, ConsumptionError, load_consumption, row_for, status
from selector.price_rules import PricePoint, apply_to_doc, judge, load_price_floors
from tests.conftest import ROOT

CATALOG = load_catalog()


def _unpriced(name: str, where: str, market: str = "spot") -> str:
    found = [
        o.unpriced
        for o in CATALOG.unpriced
        if o.instance.name == name and (o.zone or o.region) == where and o.market == market
    ]
    assert len(found) == 1, (name, where, found)
    return found[0]


# ----------------------------------------------------------------------------- consumption


def test_every_catalog_type_has_exactly_one_sourced_consumption_row() -> None:
    rows = load_consumption()
    assert rows and all(r.sources and all(u.startswith("https://") for u in r.sources) for r in rows)
    assert all(len(r.as_of) == 10 and r.notes for r in rows)
    for it in CATALOG.instance_types:
        row = row_for(it.cloud, it.name)  # raises if two rows match
        assert row is not None, it.name
        assert {o for o, _ in row.options} == set(OPTIONS)
    with (DATA_DIR / "gcp.csv").open(encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert header[:7] == [
        "pattern",
        "on_demand",
        "spot",
        "flex_start",
        "capacity_block",
        "calendar_reservation",
        "reservation",
    ]


OWN_HOSTS = {
    "aws": (
        "https://docs.aws.amazon.com/",
        "https://aws.amazon.com/",
        "https://spot-bid-advisor.s3.amazonaws.com/",  # the Spot Instance Advisor's data file
    ),
    "gcp": ("https://cloud.google.com/", "https://docs.cloud.google.com/"),
}
READ_DAY = "2026-12-04"


@pytest.mark.parametrize("row", load_consumption(), ids=lambda r: f"{r.cloud}:{r.pattern}")
def test_a_consumption_row_says_which_statuses_rest_on_third_parties_and_dates_its_source(row: Any) -> None:
    """House rule: a row stands on the cloud's own statement. A market status that only third
    parties give (a catalog, a pull request, a blog) is listed in ``third_party_only``; a row
    with no source of the cloud's own lists every on-demand and spot status it settles; the
    date is the deciding source's own (the day read only for an undated cloud page, said so)."""
    own = [u for u in row.sources if u.startswith(OWN_HOSTS[row.cloud])]
    assert own, f"{row.where}: no source of {row.cloud}'s own"
    for option in row.third_party_only:
        assert row.status(option) in ("yes", "no")
    if row.cloud == "aws" and row.status("spot") == "yes" and "spot" not in row.third_party_only:
        assert any("spot-bid-advisor" in u for u in row.sources), f"{row.where}: spot yes on whose word?"
    if row.as_of == READ_DAY:
        assert "undated" in row.notes, f"{row.where}: as_of is the day read, not the source's date"


def test_the_third_party_markets_are_the_ones_no_aws_source_gives() -> None:
    g6e = row_for("aws", "g6e.xlarge")
    assert g6e is not None and g6e.third_party_only == ()  # on demand: AWS's own Price List
    assert any(u.startswith("https://pricing.us-east-1.amazonaws.com/offers/") for u in g6e.sources)
    assert row_for("aws", "p5en.48xlarge").third_party_only == ("on-demand", "spot")  # type: ignore[union-attr]
    assert row_for("aws", "p5.48xlarge").third_party_only == ()  # type: ignore[union-attr]


def test_third_party_only_names_a_settled_option(tmp_path: Path) -> None:
    for name in ("aws.csv", "gcp.csv"):
        (tmp_path / name).write_text((DATA_DIR / name).read_text(encoding="utf-8"), encoding="utf-8")
    row = "p6-b200.48xlarge,unconfirmed,unconfirmed,no,yes,no,unconfirmed,us-east-1 us-east-2 us-west-2,"
    text = (tmp_path / "aws.csv").read_text(encoding="utf-8").replace(row + ",", row + "spot,")
    (tmp_path / "aws.csv").write_text(text, encoding="utf-8")
    with pytest.raises(ConsumptionError, match="third_party_only names 'spot'"):
        load_consumption(tmp_path)


def test_google_and_aws_say_which_types_are_not_sold_on_demand() -> None:
    for name in ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-ultragpu-8g", "a4-highgpu-8g"):
        assert status("gcp", name, "on-demand") == "no"
        assert status("gcp", name, "spot") == "yes" and status("gcp", name, "flex-start") == "yes"
    assert status("gcp", "a3-highgpu-8g", "on-demand") == "yes"
    assert status("aws", "p5e.48xlarge", "on-demand") == "no"
    assert status("aws", "p5e.48xlarge", "capacity-block") == "yes"
    assert status("aws", "p6-b200.48xlarge", "on-demand") == "unconfirmed"
    assert status("aws", "g99.xlarge", "spot") == "unconfirmed"  # a type the table does not know
    a3 = row_for("gcp", "a3-highgpu-4g")
    assert a3 is not None and "must create instances by using Spot VMs or Flex-start VMs" in a3.notes


def test_the_embedded_catalog_sells_each_type_only_as_it_is_sold() -> None:
    markets = {(o.cloud, o.instance.name, o.market) for o in (*CATALOG.offers, *CATALOG.unpriced)}
    for name in ("a3-highgpu-1g", "a3-highgpu-2g", "a3-highgpu-4g", "a3-ultragpu-8g"):
        assert ("gcp", name, "on-demand") not in markets and ("gcp", name, "spot") in markets
    assert ("aws", "p5e.48xlarge", "on-demand") not in markets
    b200 = [o for o in CATALOG.offers if o.instance.name == "p6-b200.48xlarge"]
    assert b200 and all(o.confidence == "low" for o in b200)
    assert all("sale of p6-b200.48xlarge unconfirmed" in o.notes for o in b200)


def test_the_build_drops_the_not_sold_and_says_how_many() -> None:
    doc = build()
    text = summary(doc)
    assert "57 offers dropped, their type not sold in their market (gcp a3-highgpu-1g on-demand" in text
    assert "46 spot offers at EC2's floor" in text and doc["price_rules"] == 1


def test_a_catalog_not_judged_when_written_is_judged_when_loaded() -> None:
    """An old cache or a hand-made file: its not-sold offers are dropped (and named), its floor
    prices kept but not priced, its unconfirmed markets lowered to low confidence."""
    doc = json.loads(SNAPSHOT_FILE.read_text())
    del doc["price_rules"]
    for offer in doc["offers"]:
        offer.pop("unpriced", None)
    a3 = next(o for o in doc["offers"] if o["instance_type"] == "a3-highgpu-4g" and o["market"] == "spot")
    doc["offers"].append({**a3, "market": "on-demand", "hourly_usd": 43.92})
    for offer in doc["offers"]:
        if offer["instance_type"] == "p6-b200.48xlarge":
            offer["confidence"] = "high"
    catalog = catalog_from_doc(doc, "old cache")
    assert ("gcp", "a3-highgpu-4g", "on-demand") not in {
        (o.cloud, o.instance.name, o.market) for o in (*catalog.offers, *catalog.unpriced)
    }
    assert any("a3-highgpu-4g is not sold on-demand" in why for why in catalog.not_sold)
    assert {(o.key, o.unpriced) for o in catalog.unpriced} == {
        (o.key, o.unpriced) for o in CATALOG.unpriced
    } - {
        (o.key, o.unpriced)
        for o in CATALOG.unpriced
        if "suspect:" in o.unpriced  # GCP table judgements
    }
    assert all(o.confidence == "low" for o in catalog.offers if o.instance.name == "p6-b200.48xlarge")


# ------------------------------------------------------------------------------ the floors


def test_p5e_spot_at_its_same_gpu_siblings_floor_is_not_priced() -> None:
    """p5e has no on-demand price anywhere (it is sold through Capacity Blocks), so the floor
    comes from p5en's on-demand price in the region: 8 × H200 at $87.3485/h; its spot price
    of $8.7348/h is exactly a tenth of it."""
    why = _unpriced("p5e.48xlarge", "apse3-az1")
    assert "EC2's spot floor" in why and "p5en.48xlarge on-demand $10.9186/GPU-h in ap-southeast-3" in why
    assert not any(o.instance.name == "p5e.48xlarge" and o.region == "ap-southeast-3" for o in CATALOG.offers)


def test_a_spot_price_rounded_to_the_floor_is_caught() -> None:
    """g5.12xlarge in ap-southeast-3: spot 0.7939 against on-demand 7.93854 (the spot price is
    rounded to four decimals, 0.000046 above a tenth)."""
    why = _unpriced("g5.12xlarge", "apse3-az3")
    assert "spot $0.7939/h is at EC2's spot floor, 10 % of g5.12xlarge's on-demand $7.93854/h" in why


def _point(name: str, region: str, market: str, usd: float, gpu: str = "H200", count: int = 8) -> PricePoint:
    return PricePoint("aws", name, gpu, count, region, market, usd)


def test_the_floor_uses_the_types_own_price_elsewhere_then_a_siblings_and_rounding() -> None:
    points = [
        _point("p5en.48xlarge", "us-east-1", "on-demand", 63.296),
        _point("p5en.48xlarge", "us-east-2", "on-demand", 63.296),
        _point("p5en.48xlarge", "eu-north-1", "on-demand", 67.7267),
        _point("p5en.48xlarge", "ap-south-1", "spot", 6.33),  # no on-demand here: median elsewhere
        _point("p5e.48xlarge", "us-west-2", "spot", 6.34),  # no p5e on-demand anywhere: its sibling
        _point("p5e.48xlarge", "us-east-2", "spot", 0.1 * 63.296 * 1.0049),  # within the rounding
        _point("p5e.48xlarge", "us-east-1", "spot", 0.1 * 63.296 * 1.006),  # just above: priced
        _point("p9.48xlarge", "us-east-1", "spot", 15.0, gpu="B200"),  # no reference at all: priced
    ]
    verdicts = judge(points)
    assert [v.verdict for v in verdicts] == ["ok", "ok", "ok", "unpriced", "unpriced", "unpriced", "ok", "ok"]
    assert (
        "p5en.48xlarge's median on-demand $63.296/h in 3 other regions (ap-south-1 has none)"
        in verdicts[3].reason
    )
    assert "same-GPU p5en.48xlarge on-demand $7.912/GPU-h median elsewhere × 8" in verdicts[4].reason


def test_gcp_spot_has_no_ten_percent_floor_but_every_gpu_has_one() -> None:
    """GCP spot goes "up to 91%" off: 9 % of on-demand is a real price. A per-GPU price under
    the sourced floor of its GPU is no price on either cloud."""
    floors = load_price_floors()
    gcp = [
        PricePoint("gcp", "a2-highgpu-1g", "A100-40GB", 1, "us-central1", "on-demand", 3.67),
        PricePoint("gcp", "a2-highgpu-1g", "A100-40GB", 1, "us-central1", "spot", 0.33),
        PricePoint("gcp", "a2-highgpu-1g", "A100-40GB", 1, "us-east1", "spot", 0.2),
    ]
    verdicts = judge(gcp, floors)
    assert [v.verdict for v in verdicts] == ["ok", "ok", "unpriced"]
    assert verdicts[2].reason.startswith("$0.2 per A100-40GB-hour is under the spot floor $0.247")
    assert floors.floor("T4", "spot", "aws") == pytest.approx(0.1 * 0.3975)
    assert floors.floor("H100", "on-demand", "gcp") == pytest.approx(0.5 * 6.88)
    # no offer of the embedded catalog is under its GPU's floor
    assert all(
        o.hourly_usd / o.instance.gpu_count >= (floors.floor(o.instance.gpu.name, o.market, o.cloud) or 0)
        for o in CATALOG.offers
    )


# ------------------------------------------------------------------------------ shown in offers


def test_offers_show_what_is_kept_but_not_priced_and_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["offers", "--cloud", "aws", "--region", "ap-southeast-3", "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    assert "8.735†" in out
    assert "  aws p5e.48xlarge apse3-az1 spot: spot $8.7348/h is at EC2's spot floor" in out
    assert "prices from 2025-06, 18 months old" in out and "WARNING: the prices used are 18 months old" in out
    assert main(["offers", "--cloud", "aws", "--region", "ap-southeast-3", "--gpu", "H200", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    p5e = next(r for r in rows if r["instance_type"] == "p5e.48xlarge")
    assert (p5e["priced"], p5e["consumption"]) == (False, "unconfirmed")
    assert "EC2's spot floor" in p5e["unpriced_reason"] and p5e["price_age_days"] == 551
    page = tmp_path / "offers.html"
    assert main(["offers", "--cloud", "aws", "--region", "ap-southeast-3", "--html", str(page)]) == 0
    html = page.read_text()
    assert "not priced because" in html and "EC2's spot floor" in html and 'id="stale"' in html


def test_offers_name_what_was_left_out_as_not_sold(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc: dict[str, Any] = json.loads(SNAPSHOT_FILE.read_text())
    del doc["price_rules"]
    a3 = next(o for o in doc["offers"] if o["instance_type"] == "a3-highgpu-4g" and o["market"] == "spot")
    doc["offers"].append({**a3, "market": "on-demand", "hourly_usd": 43.92})
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    assert main(["offers", "--cloud", "gcp", "--catalog", str(path)]) == 0
    out = capsys.readouterr().out
    assert "left out, not sold that way: gcp a3-highgpu-4g is not sold on-demand" in out


def test_the_snapshot_tables_mark_every_floor_row(tmp_path: Path) -> None:
    rows = list(csv.DictReader((ROOT / "selector/data/snapshot_src/aws_offers.csv").open(encoding="utf-8")))
    marked = [r for r in rows if r["status"] == "suspect"]
    assert len(marked) == 46 and all(r["market"] == "spot" and r["notes"] for r in marked)


def test_an_on_demand_list_price_under_the_estimated_floor_stays_priced_and_warns() -> None:
    """The per-GPU floors are estimates (half the lowest list price seen); a cloud's own
    on-demand list price under one (a price cut like AWS's June 2025 one) is the better figure:
    kept priced, and the refresh asks to re-derive the floors. A spot price under its floor is
    still no price."""
    floors = load_price_floors()
    cut = 0.4 * floors.floor("H100", "on-demand", "aws")  # type: ignore[operator]
    points = [
        PricePoint("aws", "p5.48xlarge", "H100", 8, "us-east-1", "on-demand", cut * 8),
        PricePoint("aws", "p5.48xlarge", "H100", 8, "us-east-1", "spot", 0.01),
    ]
    verdicts = judge(points, floors)
    assert (
        verdicts[0].verdict == "ok"
        and "re-derive selector/data/price_floors.yaml" in verdicts[0].floor_warning
    )
    assert verdicts[1].verdict == "unpriced" and not verdicts[1].floor_warning
    doc = {
        "instance_types": [{"cloud": "aws", "name": "p5.48xlarge", "gpu": "H100", "gpu_count": 8}],
        "offers": [
            {
                "cloud": "aws",
                "instance_type": "p5.48xlarge",
                "region": "us-east-1",
                "market": "on-demand",
                "hourly_usd": cut * 8,
            },
        ],
    }
    counts = apply_to_doc(doc)
    assert counts["under-floor-on-demand"] == 1 and counts["unpriced"] == 0
    assert "unpriced" not in doc["offers"][0]


def test_the_refresh_summary_warns_of_on_demand_prices_under_the_floor() -> None:
    from catalog.refresh import RefreshReport

    report = RefreshReport({}, [], {}, [], True, rules={"not-sold": 0, "under-floor-on-demand": 2})
    assert any(line.startswith("WARNING: 2 on-demand list price(s) under") for line in report.lines())
    quiet = RefreshReport({}, [], {}, [], True, rules={"not-sold": 0, "under-floor-on-demand": 0})
    assert not any("under gpufit's estimated" in line for line in quiet.lines())


def test_a_market_resting_on_a_third_party_says_so_in_the_plan_and_json() -> None:
    """p5en.48xlarge spot rests on a dstack pull request alone: the plan's Capacity line and
    ``--json`` name the third party; an AWS-stated market (p5.48xlarge spot) says nothing."""
    from cli.render import capacity_line
    from selector import report
    from selector.select import plan
    from selector.spec import parse_spec

    def served_on(types: list[str]) -> Any:
        spec = {
            "name": "third",
            "task": "serve",
            "model": {"preset": "llama-3.1-70b"},
            "precision": "bf16",
            "serving": {"context_tokens": 8192, "concurrency": 8, "tokens_per_s_per_stream": 20},
            "fault_tolerance": "stateless",
            "duration": "24h",
            "placement": {"clouds": ["aws"], "instance_types": types},
        }
        result = plan(parse_spec(spec), CATALOG)
        assert result.choice is not None and result.choice.offer.market == "spot"
        return result

    p5en = served_on(["p5en.48xlarge"])
    line = capacity_line(p5en)
    assert "only a third party says aws p5en.48xlarge is sold spot" in line
    assert "https://github.com/dstackai/dstack/pull/4110" in line
    assert "dstack/pull/4110" in report.plan_to_dict(p5en)["choice"]["consumption_third_party_only"]
    assert report.plan_to_dict(p5en)["choice"]["consumption"] == "yes"
    p5 = served_on(["p5.48xlarge"])
    assert "third party" not in capacity_line(p5)
    assert report.plan_to_dict(p5)["choice"]["consumption_third_party_only"] is None
