"""GCP flex-start (Dynamic Workload Scheduler) prices: the billing catalog's DWS SKUs when a
refresh read them (``Catalog.flex_start_prices``, ``catalog.gcp.prices``), else a share of the
on-demand price per machine series from ``data/capacity/gcp_flex_start.csv`` (dated; an
ESTIMATE where its basis says so; on-demand itself where no discount figure can be checked)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from selector.catalog import FlexStartPrice

RATES_FILE = Path(__file__).parent / "data" / "capacity" / "gcp_flex_start.csv"
DWS_BASIS = "DWS SKUs of the Cloud Billing Catalog (gpufit catalog refresh)"
GOOGLE_BOUND = 0.47
"""Google: flex-start gives "a discount up to 53%"
(https://docs.cloud.google.com/ai-hypercomputer/docs/consumption-models): no estimate goes lower."""


@dataclass(frozen=True, slots=True)
class FlexRate:
    """A flex-start price as a share of on-demand, for a series (``gcp_flex_start.csv``):
    ``basis`` is the short reason the Capacity line shows, ``note`` the full evidence."""

    series: str  # a glob of machine types
    ratio: float
    source: str
    as_of: str
    basis: str
    note: str

    @property
    def estimate(self) -> bool:
        return self.basis.startswith("ESTIMATE")


@dataclass(frozen=True, slots=True)
class FlexQuote:
    """A flex-start $/h for one type in one region, and what it rests on."""

    hourly_usd: float
    estimate: bool
    source: str
    as_of: str
    basis: str
    note: str


@lru_cache(maxsize=1)
def flex_start_rates() -> tuple[FlexRate, ...]:
    """The flex-start rates of ``gcp_flex_start.csv``. Where no figure can be checked the row
    prices flex-start at on-demand (ratio 1): Google promises only "a discount up to 53%", so
    any lower figure could make flex-start look cheaper than it is."""
    with RATES_FILE.open(encoding="utf-8", newline="") as handle:
        raws = list(csv.DictReader(handle))
    rows = []
    for i, raw in enumerate(raws):
        ratio = float(raw["on_demand_ratio"])
        if not GOOGLE_BOUND <= ratio <= 1 or not raw["source_url"].startswith("https://") or not raw["basis"]:
            raise ValueError(
                f"gcp_flex_start.csv:{i + 2}: ratio in [0.47, 1] (Google: 'a discount up to 53%'), "
                "an https source and a basis"
            )
        rows.append(
            FlexRate(raw["series"], ratio, raw["source_url"], raw["as_of"], raw["basis"], raw["notes"])
        )
    return tuple(rows)


def flex_quote(
    billed: FlexStartPrice | None, rate: FlexRate | None, on_demand: float | None
) -> FlexQuote | None:
    """The billing catalog's DWS price when a refresh read one, else the series' share of
    ``on_demand``; None with neither."""
    if billed is not None:
        against = f"on-demand ${on_demand:,.4f}/h" if on_demand is not None else "not sold on demand"
        return FlexQuote(
            billed.hourly_usd,
            False,
            billed.source,
            billed.as_of,
            DWS_BASIS,
            f"${billed.hourly_usd:,.4f}/h from the {DWS_BASIS} ({against}): {billed.notes}",
        )
    if rate is None or on_demand is None:
        return None
    return FlexQuote(
        on_demand * rate.ratio,
        rate.estimate,
        rate.source,
        rate.as_of,
        rate.basis,
        f"{rate.ratio:g} × on-demand ${on_demand:,.4f}/h ({rate.basis}): {rate.note}",
    )
