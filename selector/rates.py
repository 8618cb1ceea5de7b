"""Billing granularity, storage and egress prices per cloud, from ``data/rates.yaml``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema

RATES_FILE = Path(__file__).parent / "data" / "rates.yaml"

HOURS_PER_MONTH = 730.0
"""Cloud price pages convert monthly storage prices at 730 hours a month (AWS EBS pricing)."""


@dataclass(frozen=True, slots=True)
class EgressTier:
    up_to_gb: float  # cumulative within a month; math.inf for the last tier
    usd_per_gb: float


@dataclass(frozen=True, slots=True)
class CloudRates:
    cloud: str
    billing_increment_s: float
    billing_minimum_s: float
    block_storage_type: str
    block_usd_per_gb_month: float
    object_usd_per_gb_month: float
    egress_internet: tuple[EgressTier, ...]
    egress_inter_region_usd_per_gb: float | None
    low_confidence: tuple[str, ...]

    def billed_hours(self, hours: float) -> float:
        """Hours billed for a run of ``hours``: rounded up to the increment, at least the minimum.

        AWS Linux on-demand and spot bill per second with a 60 s minimum; GCP bills per
        second after a 1-minute minimum (gpu-cloud-facts.md §5).
        """
        seconds = max(hours * 3600.0, self.billing_minimum_s)
        billed = math.ceil(seconds / self.billing_increment_s - 1e-9) * self.billing_increment_s
        return billed / 3600.0

    def internet_egress_usd(self, gb: float, months: float = 1.0) -> float:
        """Internet egress of ``gb`` spread evenly over ``months``, priced by monthly tiers."""
        if gb <= 0:
            return 0.0
        months = max(months, 1.0)
        per_month = gb / months
        cost, floor = 0.0, 0.0
        for tier in self.egress_internet:
            if per_month <= floor:
                break
            span = min(per_month, tier.up_to_gb) - floor
            cost += span * tier.usd_per_gb
            floor = tier.up_to_gb
        return cost * months


def _tiers(entry: dict[str, Any]) -> tuple[EgressTier, ...]:
    tiers = []
    for tier in entry["tiers"]:
        bound = tier["up_to_gb"]
        tiers.append(EgressTier(math.inf if bound is None else float(bound), float(tier["usd_per_gb"])))
    return tuple(tiers)


@lru_cache(maxsize=2)
def load_rates(path: Path = RATES_FILE) -> dict[str, CloudRates]:
    doc = load_yaml(path)
    require_schema(doc, path, 1)
    rates: dict[str, CloudRates] = {}
    for cloud, entry in doc["clouds"].items():
        low = tuple(
            name
            for name in ("block_storage", "object_storage", "egress_internet", "egress_inter_region")
            if isinstance(entry.get(name), dict) and entry[name].get("confidence") == "low"
        )
        inter = entry.get("egress_inter_region")
        rates[cloud] = CloudRates(
            cloud=cloud,
            billing_increment_s=float(entry["billing"]["increment_s"]),
            billing_minimum_s=float(entry["billing"]["minimum_s"]),
            block_storage_type=str(entry["block_storage"]["type"]),
            block_usd_per_gb_month=float(entry["block_storage"]["usd_per_gb_month"]),
            object_usd_per_gb_month=float(entry["object_storage"]["usd_per_gb_month"]),
            egress_internet=_tiers(entry["egress_internet"]),
            egress_inter_region_usd_per_gb=None if inter is None else float(inter["usd_per_gb"]),
            low_confidence=low,
        )
    return rates
