"""Which offers may be priced: the consumption rule, EC2's spot floor and per-GPU floors.

Each rule judges one offer against reference data, never against whichever sibling row a
catalog happens to hold:

- **Not sold**: an offer in a market its type is not sold in (``selector.consumption``) does
  not exist; callers drop it.
- **Unconfirmed**: a market no source confirms keeps its offers, at low confidence.
- **EC2's spot floor**: AWS states no floor rule, but promises savings "up to 90% off the
  On-Demand instance price" (AWS What's New, 2017-11), no savings figure of the Spot Instance
  Advisor snapshot of 2025-06-28 exceeds 90 (25,323 entries), and 46 of the snapshot's spot
  rows sit at exactly a tenth of on-demand: 10 % is taken as the floor (an inference). A spot
  price at the floor is a pool nobody bids in, which rarely comes with capacity: kept, never
  priced. The on-demand price it is compared with is the type's own in the region; else the
  type's median on-demand price in the cloud's other regions; else its same-GPU sibling's
  per-GPU on-demand price (same GPU count first) times its GPUs, in the region, else the
  median elsewhere. Prices are rounded in the sources (a g5 spot 0.7939 against on-demand
  7.93854), so the test is ``spot ≤ 0.1 × on-demand × 1.005``.
- **Per-GPU floor**: a price per GPU-hour below the sourced floor of its GPU and market
  (``data/price_floors.yaml``) is kept, never priced.

``RULES_VERSION`` is written into catalogs whose offers were judged when they were built (the
snapshot build and ``gpufit catalog refresh``); the loader judges other catalogs itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from selector.consumption import not_sold_reason, row_for, status
from selector.datafile import load_yaml, require_schema

RULES_VERSION = 1
SPOT_FLOOR_RATIO = 0.1
FLOOR_TOLERANCE = 1.005
"""Relative rounding allowance of the floor test (sources quote 4-6 decimals)."""
FLOOR_CLOUDS = frozenset({"aws"})
"""Clouds whose spot market has a documented floor. GCP spot goes "up to 91%" off
(https://cloud.google.com/spot-vms/pricing): 9 % of on-demand is a real GCP price."""
FLOORS_FILE = Path(__file__).parent / "data" / "price_floors.yaml"

Verdict = Literal["ok", "not-sold", "unpriced"]


@dataclass(frozen=True, slots=True)
class PricePoint:
    """What the rules read of one offer."""

    cloud: str
    instance_type: str
    gpu: str
    gpu_count: int
    region: str
    market: str
    hourly_usd: float


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    reason: str = ""
    unconfirmed: str = ""  # why the market is unconfirmed ("" when confirmed)
    floor_warning: str = ""  # an on-demand list price under gpufit's estimated per-GPU floor


@dataclass(frozen=True)
class PriceFloors:
    """Per-GPU floors ($ per GPU-hour) by GPU, market and cloud, with the basis of each."""

    on_demand: dict[str, float]
    spot: dict[tuple[str, str], float]  # (gpu, cloud)
    basis: dict[str, str]

    def floor(self, gpu: str, market: str, cloud: str) -> float | None:
        if market == "on-demand":
            return self.on_demand.get(gpu)
        return self.spot.get((gpu, cloud))


@lru_cache(maxsize=2)
def load_price_floors(path: Path = FLOORS_FILE) -> PriceFloors:
    doc = load_yaml(path)
    require_schema(doc, path, 1)
    sources = doc["sources"]
    fraction = float(doc["on_demand_floor_fraction"])
    discounts = {cloud: float(entry["value"]) for cloud, entry in doc["spot_max_discount"].items()}
    on_demand: dict[str, float] = {}
    spot: dict[tuple[str, str], float] = {}
    basis: dict[str, str] = {}
    for gpu, entry in doc["gpus"].items():
        if entry["source"] not in sources:
            raise ValueError(f"{path}: {gpu} names unknown source {entry['source']!r}")
        reference = float(entry["reference_usd"])
        on_demand[gpu] = fraction * reference
        for cloud, discount in discounts.items():
            spot[(gpu, cloud)] = (1.0 - discount) * reference
        basis[gpu] = f"reference ${reference:g}/GPU-h: {entry['row']} ({entry['source']})"
    return PriceFloors(on_demand, spot, basis)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class _References:
    """On-demand prices by type and region and per GPU, for the floor's comparison."""

    def __init__(self, points: Sequence[PricePoint], usable: Sequence[bool]) -> None:
        self.by_region: dict[tuple[str, str, str], float] = {}
        self.per_gpu: dict[tuple[str, str, str, str], float] = {}  # (cloud, gpu, type, region)
        self.counts: dict[tuple[str, str], int] = {}
        for point, ok in zip(points, usable, strict=True):
            if point.market != "on-demand" or not ok:
                continue
            key = (point.cloud, point.instance_type, point.region)
            self.by_region[key] = max(self.by_region.get(key, 0.0), point.hourly_usd)
            self.per_gpu[(point.cloud, point.gpu, point.instance_type, point.region)] = (
                self.by_region[key] / point.gpu_count
            )
            self.counts[(point.cloud, point.instance_type)] = point.gpu_count

    def on_demand(self, p: PricePoint) -> tuple[float, str] | None:
        """The on-demand price a spot price of ``p`` is compared with, and where it comes from."""
        own = self.by_region.get((p.cloud, p.instance_type, p.region))
        if own is not None:
            return own, f"{p.instance_type}'s on-demand ${own:g}/h in {p.region}"
        elsewhere = [v for (c, t, _), v in self.by_region.items() if c == p.cloud and t == p.instance_type]
        if elsewhere:
            median = _median(elsewhere)
            return median, (
                f"{p.instance_type}'s median on-demand ${median:g}/h in {len(elsewhere)} other "
                f"region{'s' if len(elsewhere) > 1 else ''} ({p.region} has none)"
            )
        siblings = [
            (t, r, per)
            for (c, g, t, r), per in self.per_gpu.items()
            if c == p.cloud and g == p.gpu and t != p.instance_type
        ]
        same_count = [s for s in siblings if self.counts[(p.cloud, s[0])] == p.gpu_count]
        for pool in (same_count, siblings):
            here = [s for s in pool if s[1] == p.region]
            for chosen, where in ((here, f"in {p.region}"), (pool, "median elsewhere")):
                if chosen:
                    per = _median([s[2] for s in chosen])
                    names = ", ".join(sorted({s[0] for s in chosen})[:3])
                    return per * p.gpu_count, (
                        f"the same-GPU {names} on-demand ${per:g}/GPU-h {where} × {p.gpu_count} "
                        f"(${per * p.gpu_count:g}/h; {p.instance_type} has no on-demand price)"
                    )
        return None


def judge(points: Sequence[PricePoint], floors: PriceFloors | None = None) -> list[Judgement]:
    """A judgement per point, in order (see the module doc for the rules)."""
    floors = floors if floors is not None else load_price_floors()
    out: list[Judgement | None] = [None] * len(points)
    usable = [True] * len(points)
    for i, p in enumerate(points):
        gone = not_sold_reason(p.cloud, p.instance_type, p.market)
        if gone is not None:
            out[i] = Judgement("not-sold", gone)
            usable[i] = False
            continue
        floor = floors.floor(p.gpu, p.market, p.cloud)
        per_gpu = p.hourly_usd / p.gpu_count
        if floor is not None and per_gpu < floor and p.market == "on-demand":
            # A cloud's own list price outranks an estimated floor (half the lowest list price
            # seen): after a cut like AWS's of June 2025 (up to 45 % on P4/P5) it is the floor
            # that is stale. Priced, and the refresh says to re-derive the floors.
            out[i] = Judgement(
                "ok",
                floor_warning=(
                    f"{p.cloud} {p.instance_type} {p.region}: on-demand ${per_gpu:.4g} per {p.gpu}-hour is "
                    f"under the estimated floor ${floor:.4g} ({floors.basis[p.gpu]}): kept priced (a list "
                    "price cut?); re-derive selector/data/price_floors.yaml"
                ),
            )
        elif floor is not None and per_gpu < floor:
            out[i] = Judgement(
                "unpriced",
                f"${per_gpu:.4g} per {p.gpu}-hour is under the {p.market} floor ${floor:.4g} "
                f"({floors.basis[p.gpu]}): not a price",
            )
            usable[i] = False
    refs = _References(points, usable)
    judged: list[Judgement] = []
    for i, p in enumerate(points):
        verdict = out[i]
        if verdict is None and p.market == "spot" and p.cloud in FLOOR_CLOUDS:
            ref = refs.on_demand(p)
            if ref is not None and p.hourly_usd <= SPOT_FLOOR_RATIO * ref[0] * FLOOR_TOLERANCE:
                verdict = Judgement(
                    "unpriced",
                    f"spot ${p.hourly_usd:g}/h is at EC2's spot floor, 10 % of {ref[1]}: a pool "
                    "nobody bids in, rarely with capacity",
                )
        if verdict is None:
            verdict = Judgement("ok")
        if verdict.verdict != "not-sold" and status(p.cloud, p.instance_type, p.market) == "unconfirmed":
            row = row_for(p.cloud, p.instance_type)
            why = (
                f"{p.market} sale of {p.instance_type} unconfirmed ({row.where}: {row.sources[-1]})"
                if row is not None
                else f"{p.instance_type} has no consumption row: {p.market} sale unconfirmed"
            )
            verdict = Judgement(verdict.verdict, verdict.reason, why, verdict.floor_warning)
        judged.append(verdict)
    return judged


def points_of_doc(doc: dict[str, Any]) -> list[PricePoint]:
    """The price points of a catalog document's offers (instance types looked up in it)."""
    types = {(t["cloud"], t["name"]): t for t in doc.get("instance_types", [])}
    points = []
    for offer in doc.get("offers", []):
        it = types[(offer["cloud"], offer["instance_type"])]
        points.append(
            PricePoint(
                offer["cloud"],
                offer["instance_type"],
                it["gpu"],
                int(it["gpu_count"]),
                offer["region"],
                offer["market"],
                float(offer["hourly_usd"]),
            )
        )
    return points


def apply_to_doc(doc: dict[str, Any]) -> dict[str, int]:
    """Judge a catalog document's offers in place: drop those not sold in their market, mark
    the unpriceable ``unpriced`` (with the reason), lower the unconfirmed ones to low
    confidence with a note; set ``price_rules``. Returns counts by outcome."""
    offers = doc.get("offers", [])
    verdicts = judge(points_of_doc(doc))
    kept: list[dict[str, Any]] = []
    counts = {"not-sold": 0, "unpriced": 0, "unconfirmed": 0, "under-floor-on-demand": 0}
    for offer, verdict in zip(offers, verdicts, strict=True):
        if verdict.floor_warning:
            counts["under-floor-on-demand"] += 1
        if verdict.verdict == "not-sold":
            counts["not-sold"] += 1
            continue
        offer = dict(offer)
        if verdict.verdict == "unpriced":
            counts["unpriced"] += 1
            offer["unpriced"] = verdict.reason
        elif offer.get("unpriced"):
            counts["unpriced"] += 1
        if verdict.unconfirmed:
            counts["unconfirmed"] += 1
            offer["confidence"] = "low"
            if verdict.unconfirmed not in offer.get("notes", ""):
                offer["notes"] = "; ".join(n for n in (offer.get("notes", ""), verdict.unconfirmed) if n)
        kept.append(offer)
    doc["offers"] = kept
    doc["price_rules"] = RULES_VERSION
    return counts
