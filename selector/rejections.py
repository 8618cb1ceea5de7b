"""The rejections of a plan: the filters that say a machine cannot do the job, the rejection
tally (counts, one example per filter, the closest miss per instance type), the budget filter
and ``placement.exclude``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from selector.catalog import Catalog, Offer
from selector.cost import CostInputs
from selector.sizing import Rejection
from selector.spec import ExcludeSpec

FIT_FILTERS = (
    "engine",
    "fp8",
    "precision",
    "bandwidth",
    "vram",
    "nvlink",
    "interconnect",
    "speed",
    "deadline",
    "host-memory",
    "framework",
    "image",
)
"""Filters that say the machine cannot do the job (as opposed to placement, market, budget);
``image``: no machine image gpufit boots supports it (``selector.images``); ``framework``: the
training framework the spec names cannot run the job on it (``sizing.training.one_gpu_only``)."""


@dataclass(frozen=True, slots=True)
class Miss:
    """An offer that almost made it: the cheapest offer of its instance type, and why not."""

    offer: Offer
    rejection: Rejection


class Tally:
    """Rejection counts, one example reason per filter, the closest miss per instance type."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.misses: dict[tuple[str, str], Miss] = {}

    def reject(self, rejection: Rejection, offers: int = 1, offer: Offer | None = None) -> None:
        self.counts[rejection.filter] += offers
        self.examples.setdefault(rejection.filter, rejection.reason)
        if offer is None or rejection.filter not in (*FIT_FILTERS, "budget"):
            return
        key = (offer.instance.cloud, offer.instance.name)
        best = self.misses.get(key)
        if best is None or (rejection.gap, offer.hourly_usd) < (best.rejection.gap, best.offer.hourly_usd):
            self.misses[key] = Miss(offer, rejection)


def budget_rejection(inputs: CostInputs, hourly: float, total: float) -> Rejection | None:
    if inputs.budget_hourly is not None and hourly > inputs.budget_hourly:
        over = hourly - inputs.budget_hourly
        return Rejection(
            "budget",
            f"${hourly:,.2f}/h is ${over:,.2f}/h over max_hourly_usd ${inputs.budget_hourly:,.2f}",
            gap=over / inputs.budget_hourly,
        )
    if inputs.budget_total is not None and total > inputs.budget_total:
        over = total - inputs.budget_total
        return Rejection(
            "budget",
            f"${total:,.2f} in all is ${over:,.2f} over max_total_usd ${inputs.budget_total:,.2f}",
            gap=over / inputs.budget_total,
        )
    return None


def without_excluded(catalog: Catalog, exclude: list[ExcludeSpec], tally: Tally) -> Catalog:
    """``catalog`` less the offers ``placement.exclude`` names (choice, alternatives and fleet
    fallbacks alike), each counted as a placement rejection."""
    if not exclude:
        return catalog
    kept: list[Offer] = []
    for offer in catalog.offers:
        where = (offer.cloud, offer.region, offer.instance.name, offer.market)
        rule = next((e for e in exclude if e.matches(*where)), None)
        if rule is None:
            kept.append(offer)
            continue
        why = f" ({rule.reason})" if rule.reason else ""
        tally.reject(Rejection("placement", f"{rule.label} is in placement.exclude{why}"))
    return replace(catalog, offers=tuple(kept)) if len(kept) < len(catalog.offers) else catalog
