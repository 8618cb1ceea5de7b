"""The HTML pages: self-contained and small, checked structurally everywhere, and in a real
headless Chromium (Debian's, driven by Selenium through Debian's chromedriver) where it is
installed: sorting reorders rows, a filter hides rows and their marks, every chart has one mark
per point, the plan's choice is highlighted. Screenshots land in build/test-artifacts/."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from selector.catalog import load_catalog
from selector.select import plan
from selector.spec import load_spec
from tests.conftest import ROOT

ARTIFACTS = ROOT / "build" / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SDXL = ROOT / "stacks" / "Pulumi.sdxl-batch.yaml"


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside <title> elements of marks."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def of(self, tag: str, cls: str | None = None, **attrs: str) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.tags
            if t == tag
            and (cls is None or cls in a.get("class", "").split())
            and all(a.get(k) == v for k, v in attrs.items())
        ]


def parse(text: str) -> Tags:
    tags = Tags()
    tags.feed(text)
    return tags


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    offers, report = out / "offers.html", out / "plan.html"
    assert main(["offers", "--html", str(offers), "--catalog", "snapshot"]) == 0
    assert main(["plan", str(SDXL), "--html", str(report), "--catalog", "snapshot"]) == 0
    return {"offers": offers, "plan": report}


def _feasible() -> int:
    return plan(load_spec(SDXL), load_catalog()).feasible


def test_pages_are_self_contained_and_small(pages: dict[str, Path]) -> None:
    for path in pages.values():
        text = path.read_text()
        assert len(text.encode()) < 500_000
        tags = parse(text)
        assert not [a for t, a in tags.tags if t in ("script", "img", "iframe") and a.get("src")]
        assert not tags.of("link")  # no stylesheet fetched
        assert not re.search(r"""(src|href)=["']https?://""", text)


def offers_data(text: str) -> dict[str, Any]:
    """The offers page's table rows, as its script reads them."""
    start = text.index('<script type="application/json" id="offers-data">')
    start = text.index(">", start) + 1
    data: dict[str, Any] = json.loads(text[start : text.index("</script>", start)])
    return data


def test_offers_page_has_a_row_per_type_region_and_market_and_a_mark_per_type_and_market(
    pages: dict[str, Path],
) -> None:
    catalog = load_catalog()
    everything = (*catalog.offers, *catalog.unpriced)  # kept but never priced: shown, with why
    text = pages["offers"].read_text()
    tags = parse(text)
    data = offers_data(text)
    groups = {(o.cloud, o.instance.name, o.region, o.market, bool(o.unpriced)) for o in everything}
    assert len(data["rows"]) == len(groups) < len(everything)  # AWS spot zones share a row
    assert sum(len(row[3]) for row in data["rows"]) == len(everything)  # every offer in one
    rows = {}
    for t, region, spot, entries, source, date, level, why in data["rows"]:
        cloud, name = data["types"][t][:2]
        key = (cloud, name, data["regions"][region], "spot" if spot else "on-demand", why >= 0)
        rows[key] = [(usd, tuple(data["zones"][z] for z in zones)) for usd, zones in entries]
        assert [usd for usd, _ in entries] == sorted(usd for usd, _ in entries)  # cheapest first
        assert data["sources"][source] in catalog.sources and data["dates"][date]
        assert data["levels"][level] in ("high", "medium", "low", "very low", "-")
        assert (data["levels"][level] == "-") == (why >= 0)
    assert set(rows) == groups
    for o in everything:  # each offer's price and zones, in its row
        key = (o.cloud, o.instance.name, o.region, o.market, bool(o.unpriced))
        assert (o.hourly_usd, o.zones) in rows[key], o.key
    floor = next(r for r in data["rows"] if r[7] >= 0 and data["types"][r[0]][1] == "p5e.48xlarge")
    assert "EC2's spot floor" in data["reasons"][floor[7]]
    spot = rows[("aws", "g5.xlarge", "us-east-1", "spot", False)]
    assert len(spot) == 5 and all(len(zones) == 1 for _, zones in spot)  # one price per AZ ID
    kinds = {(o.cloud, o.instance.name, o.market) for o in catalog.offers}
    for chart in ("chart-vram", "chart-bandwidth"):
        assert tags.of("svg", id=chart)
    marks = tags.of("circle", "mark")
    assert len(marks) == 2 * len(kinds)  # one per instance type and market, in each chart
    assert {m["data-key"] for m in marks} == {"/".join(k) for k in kinds}
    headers = [a for t, a in tags.tags if t == "th" and "sortable" in a.get("class", "")]
    assert len(headers) == 19
    for name in ("cloud", "region", "gpu", "min_vram", "fp8", "nvlink", "spot"):
        assert [a for t, a in tags.tags if t in ("select", "input") and a.get("name") == name], name


def test_plan_page_marks_every_feasible_offer_and_the_choice(pages: dict[str, Path]) -> None:
    tags = parse(pages["plan"].read_text())
    marks = tags.of("circle", "mark")
    assert len(marks) == _feasible()
    assert len(tags.of("circle", "choice")) == 1
    assert tags.of("polyline", "frontier") and tags.of("svg", id="chart-cost")
    assert tags.of("rect", "part") and tags.of("table", id="rejections")


def test_markdown_has_a_mermaid_chart(capsys: pytest.CaptureFixture[str]) -> None:
    """The choice first, then the alternatives: read from the plan, not written down here (the
    choice follows the catalog: with every region and zone it is no longer the 510-offer
    catalog's g6e.48xlarge spot at $41)."""
    assert main(["plan", str(SDXL), "--format", "markdown", "--catalog", "snapshot"]) == 0
    out = capsys.readouterr().out
    chart = out[out.index("```mermaid") : out.index("```", out.index("```mermaid") + 3)]
    result = plan(load_spec(SDXL), load_catalog())
    assert result.choice is not None and result.alternatives
    shown = [result.choice, *result.alternatives][:6]
    names = ", ".join(f'"{c.offer.instance.name} {c.offer.market}"' for c in shown)
    assert "xychart-beta" in chart and f"x-axis [{names}]" in chart
    assert f"bar [{', '.join(f'{c.cost.total_usd:.0f}' for c in shown)}]" in chart


def test_an_unwritable_html_path_is_one_line_and_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["offers", "--html", "/nonexistent-dir/x.html"]) == 64
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gpufit: --html /nonexistent-dir/x.html:")


# ---------------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/ensure-test-tools.sh)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / name))


ROWS_JS = """return Array.from(document.querySelectorAll('#offers tbody tr')).filter(function(r){
  return !r.hidden;}).map(function(r){return Array.from(r.cells).map(function(c){
  return c.hasAttribute('data-v') ? c.getAttribute('data-v') : c.textContent;});});"""


def _visible_rows(driver: Any) -> list[list[str]]:
    """The rows the filters leave, as each cell's sort value, in table order: read from the DOM
    in one script (the rows' ``hidden`` flag), not from what is scrolled into view."""
    rows: list[list[str]] = driver.execute_script(ROWS_JS)
    return rows


def test_offers_page_sorts_and_filters_in_a_browser(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.support.ui import Select

    browser.get(pages["offers"].as_uri())
    catalog = load_catalog()
    offers = (*catalog.offers, *catalog.unpriced)  # kept but never priced: rows of their own
    groups = {(o.cloud, o.instance.name, o.region, o.market, bool(o.unpriced)) for o in offers}
    assert len(_visible_rows(browser)) == len(groups)
    assert browser.find_element("id", "count").text == f"{len(groups)} rows shown ({len(offers)} offers)"
    price = browser.find_elements("css selector", "#offers thead th")[11]
    assert price.text.startswith("$/h")

    def prices() -> list[float]:
        # the exact price each cell sorts by: its cheapest zone's (its text shows a range)
        return [float(r[11]) for r in _visible_rows(browser)]

    price.click()
    ascending = prices()
    assert ascending == sorted(ascending)
    assert ascending[0] == min(o.hourly_usd for o in offers)
    price.click()
    assert prices() == sorted(ascending, reverse=True)

    zoned = [o for o in offers if o.key[1:3] == ("g5.xlarge", "us-east-1") and o.market == "spot"]
    low, high = min(o.hourly_usd for o in zoned), max(o.hourly_usd for o in zoned)
    row = 'tr[data-key="aws/g5.xlarge/spot"][data-region="us-east-1"]'
    cells = browser.execute_script(
        "var r=document.querySelector('#offers tbody '+arguments[0]);"
        "return [r.cells[2].textContent,r.cells[2].title,r.cells[11].textContent];",
        row,
    )
    assert cells[0] == str(len(zoned)) and cells[2] == f"${low:.3f}\u2013{high:.3f}"
    for o in zoned:  # each zone's own price in the zones cell's tooltip
        assert f"{o.zone}: ${o.hourly_usd:g}" in cells[1]

    Select(browser.find_element("name", "gpu")).select_by_value("H100")
    rows = _visible_rows(browser)
    h100 = [o for o in offers if o.instance.gpu.name == "H100"]
    h100_rows = {(o.cloud, o.instance.name, o.region, o.market, bool(o.unpriced)) for o in h100}
    assert len(rows) == len(h100_rows) and {r[4] for r in rows} == {"H100"}
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('#chart-vram circle.mark'))"
        ".filter(function(m){return m.style.display !== 'none';}).map(function(m){return m.dataset.series;});"
    )
    assert shown and set(shown) == {"H100"}
    assert browser.find_element("id", "count").text == f"{len(h100_rows)} rows shown ({len(h100)} offers)"
    browser.find_element("name", "spot").click()
    assert all(r[10] == "spot" for r in _visible_rows(browser))
    _shot(browser, "offers-filtered.png")


def test_plan_report_in_a_browser(browser: Any, pages: dict[str, Path]) -> None:
    browser.get(pages["plan"].as_uri())
    marks = browser.find_elements("css selector", "#chart-pareto circle.mark")
    assert len(marks) == _feasible()
    (choice,) = browser.find_elements("css selector", "#chart-pareto circle.mark.choice")
    chosen = plan(load_spec(SDXL), load_catalog()).choice
    assert chosen is not None
    title = choice.find_element("tag name", "title").get_attribute("textContent")
    assert title.startswith(f"aws {chosen.offer.instance.name} ")
    assert float(choice.get_attribute("r")) > float(marks[0].get_attribute("r"))
    # drawn: a box with some extent, shown and stroked (Selenium's is_displayed wants width and
    # height both, which a frontier of two offers about as quick as each other, upright, lacks)
    width, height, display, visibility, stroke = browser.execute_script(
        "var e=document.querySelector('#chart-pareto polyline.frontier'),b=e.getBBox(),s=getComputedStyle(e);"
        "return [b.width,b.height,s.display,s.visibility,s.stroke];"
    )
    assert max(width, height) > 0 and display != "none" and visibility == "visible" and stroke != "none"
    _shot(browser, "plan-report.png")
    assert (ARTIFACTS / "plan-report.png").stat().st_size > 10_000
