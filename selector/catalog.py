"""The catalog: GPU facts, instance types and priced offers, loaded from data files.

``gpus.yaml`` holds what each GPU model can do; a catalog file (the embedded snapshot, or one
written by ``gpufit catalog refresh``) holds instance types and offers, each offer one
instance type in one region (or zone) and market at one hourly price, with its source and date.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from selector.datafile import load_json
from selector.gpus import (
    GPUS_FILE,
    CatalogError,
    GpuSpec,
    gpu_by_alias,
    load_gpus,
    required,
    sourced_only,
)
from selector.price_rules import RULES_VERSION, PricePoint, judge

MIN_SCORED_TYPES = 3

__all__ = [
    "CAPACITY_MARKETS",
    "CLOUDS",
    "GPUS_FILE",
    "INTERRUPTION_BUCKETS",
    "MARKETS",
    "SNAPSHOT_FILE",
    "Catalog",
    "CatalogError",
    "FlexStartPrice",
    "GpuSpec",
    "InstanceType",
    "Market",
    "Offer",
    "catalog_from_doc",
    "gpu_by_alias",
    "load_catalog",
    "load_gpus",
    "sourced_only",
]

Market = Literal["on-demand", "spot", "capacity-block", "flex-start", "reservation", "calendar-reservation"]
MARKETS: tuple[Market, ...] = ("on-demand", "spot")
"""The markets a catalog row is priced in; the others are the capacity options that
``selector.capacity`` offers per plan (a block, a flex-start request, a reservation held)."""
CAPACITY_MARKETS: tuple[Market, ...] = ("capacity-block", "flex-start", "reservation", "calendar-reservation")
CLOUDS: tuple[str, ...] = ("aws", "gcp")
INTERRUPTION_BUCKETS: tuple[str, ...] = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
NODE_INTERCONNECTS: tuple[str, ...] = ("efa", "gpudirect-tcpx", "gpudirect-tcpxo", "gpudirect-rdma")

DATA_DIR = Path(__file__).parent / "data"
SNAPSHOT_FILE = DATA_DIR / "catalog.json"


@dataclass(frozen=True, slots=True)
class InstanceType:
    cloud: str
    name: str
    machine_type: str
    gpu: GpuSpec
    gpu_count: int
    vcpus: int
    memory_gib: float
    nvlink: bool
    node_interconnect: str | None
    attached_accelerator: str | None = None
    local_nvme_gb: float | None = None
    network_gbps: float | None = None
    source: str = ""
    confidence: str = "high"
    notes: str = ""

    @property
    def gpu_memory_gib(self) -> float:
        return self.gpu.memory_gib


@dataclass(frozen=True, slots=True)
class Offer:
    """One instance type, in one region (zone when known) and market, at one hourly price."""

    instance: InstanceType
    region: str
    zone: str | None
    market: Market
    hourly_usd: float
    source: str
    as_of: str
    confidence: str = "high"
    hourly_usd_range: tuple[float, float] | None = None
    interruption_bucket: str | None = None
    notes: str = ""
    # the zones the source lists it in: (zone,) when zone-specific, sorted zones when
    # region-level, () unknown. AWS zones are AZ IDs (use1-az2), GCP zone names (us-central1-a).
    zones: tuple[str, ...] = ()
    stale: bool = False  # kept from an earlier catalog because its region failed to refresh
    unpriced: str = ""  # why this price is never used (selector.price_rules); "" = priced
    placement_score: int | None = None  # AWS spot placement score 1-10 (a refresh with credentials)
    capacity: Any = None  # a capacity option's terms (selector.capacity.CapacityTerms); None: catalog

    @property
    def cloud(self) -> str:
        return self.instance.cloud

    @property
    def key(self) -> tuple[str, str, str, str | None, str]:
        return (self.instance.cloud, self.instance.name, self.region, self.zone, self.market)


@dataclass(frozen=True)
class FlexStartPrice:
    """A GCP flex-start $/h for a type in a region, read from the billing catalog's DWS SKUs on a
    refresh (``flex_start_prices``), preferred to ``selector.capacity``'s per-series estimate."""

    hourly_usd: float
    source: str
    as_of: str
    notes: str = ""


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuSpec]
    instance_types: tuple[InstanceType, ...]
    offers: tuple[Offer, ...]
    as_of: str
    source: str
    path: str
    sources: dict[str, Any] = field(default_factory=dict)
    unpriced: tuple[Offer, ...] = ()
    """Offers kept for the record but never priced, each with its ``unpriced`` reason."""
    not_sold: tuple[str, ...] = ()
    """Why offers of this file were left out: their type is not sold in their market."""
    flex_start_prices: dict[tuple[str, str], FlexStartPrice] = field(default_factory=dict)
    """(instance type, region) → its flex-start price from a refresh (GCP, issue 26)."""
    wait_value_per_hour: float | None = None
    """A lock's catalog pins what an hour of waiting for capacity was worth when the plan was
    reviewed (``gitops.lock``); None: the plan works it out (``selector.select``)."""

    @cached_property
    def by_instance_type(self) -> tuple[tuple[InstanceType, tuple[Offer, ...]], ...]:
        """Offers grouped by instance type, in catalog order (computed once)."""
        groups: dict[int, list[Offer]] = {}
        types: dict[int, InstanceType] = {}
        for offer in self.offers:
            key = id(offer.instance)
            if key not in groups:
                groups[key] = []
                types[key] = offer.instance
            groups[key].append(offer)
        return tuple((types[k], tuple(v)) for k, v in groups.items())

    @cached_property
    def on_demand_prices(self) -> dict[tuple[str, str, str], float]:
        """(cloud, instance type, region) → its on-demand $/h there (the dearest zone's)."""
        prices: dict[tuple[str, str, str], float] = {}
        for offer in self.offers:
            if offer.market == "on-demand":
                key = (offer.instance.cloud, offer.instance.name, offer.region)
                prices[key] = max(prices.get(key, 0.0), offer.hourly_usd)
        return prices

    def describe_source(self, key: str, full: bool = False) -> str:
        """``KEY (url, retrieved)``; with ``full``, the source's title as well."""
        ref = self.sources.get(key)
        if not isinstance(ref, dict):
            return key
        title = f": {ref.get('title', '')}" if full else ""
        return f"{key}{title} ({ref.get('url', '')}, retrieved {ref.get('retrieved', '')})"


def _entries(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """``doc[key]``: a list of objects (absent = empty)."""
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise CatalogError(f"{where}: {key} must be a list of objects")
    return value


def _number(
    entry: dict[str, Any], key: str, where: str, *, minimum: float = 0.0, strict: bool = False
) -> float:
    """A required finite number (not a string, not a boolean) ≥ ``minimum`` (> with ``strict``)."""
    value = required(entry, key, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CatalogError(f"{where}: {key} must be a finite number, not {value!r}")
    if value < minimum or (strict and value <= minimum):
        bound = "positive" if strict and minimum == 0 else f"{'above' if strict else 'at least'} {minimum:g}"
        raise CatalogError(f"{where}: {key} must be {bound}, not {value!r}")
    return float(value)


def _opt_number(entry: dict[str, Any], key: str, where: str) -> float | None:
    return None if entry.get(key) is None else _number(entry, key, where)


def _text(entry: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    """A required string (or ``default`` when absent)."""
    if key not in entry and default is not None:
        return default
    value = required(entry, key, where)
    if not isinstance(value, str) or not value:
        raise CatalogError(f"{where}: {key} must be a non-empty string, not {value!r}")
    return value


def _opt_text(entry: dict[str, Any], key: str, where: str) -> str | None:
    return None if entry.get(key) is None else _text(entry, key, where)


def _zones(entry: dict[str, Any], zone: str | None, where: str) -> tuple[str, ...]:
    """An offer's ``zones``: the zones the source lists it in (absent = ``(zone,)`` for a
    zone-specific offer, else unknown). A zone-specific offer lists exactly its own zone."""
    value = entry.get("zones")
    if value is None:
        return (zone,) if zone is not None else ()
    if not isinstance(value, list) or not all(isinstance(z, str) and z for z in value):
        raise CatalogError(f"{where}: zones must be a list of zone names, not {value!r}")
    if len(set(value)) != len(value):
        raise CatalogError(f"{where}: zones {value!r} lists a zone twice")
    if zone is not None and value != [zone]:
        raise CatalogError(f"{where}: a zone-specific offer ({zone}) lists zones {value!r}, not [{zone!r}]")
    return tuple(value)


def _parse_instance(entry: dict[str, Any], gpus: dict[str, GpuSpec], where: str) -> InstanceType:
    gpu_name = _text(entry, "gpu", where)
    if gpu_name not in gpus:
        raise CatalogError(f"{where}: GPU {gpu_name!r} is not in the GPU facts table")
    cloud = _text(entry, "cloud", where)
    if cloud not in CLOUDS:
        raise CatalogError(f"{where}: cloud {cloud!r}, expected one of {', '.join(CLOUDS)}")
    interconnect = entry.get("node_interconnect")
    if interconnect is not None and interconnect not in NODE_INTERCONNECTS:
        raise CatalogError(f"{where}: unknown node_interconnect {interconnect!r}")
    count = _number(entry, "gpu_count", where, minimum=1)
    if count != int(count):
        raise CatalogError(f"{where}: gpu_count must be a whole number, not {count!r}")
    nvlink = required(entry, "nvlink", where)
    if not isinstance(nvlink, bool):
        raise CatalogError(f"{where}: nvlink must be true or false, not {nvlink!r}")
    name = _text(entry, "name", where)
    return InstanceType(
        cloud=cloud,
        name=name,
        machine_type=_text(entry, "machine_type", where, default=name),
        gpu=gpus[gpu_name],
        gpu_count=int(count),
        vcpus=int(_number(entry, "vcpus", where, minimum=1)),
        memory_gib=_number(entry, "memory_gib", where, strict=True),
        nvlink=nvlink,
        node_interconnect=interconnect,
        attached_accelerator=_opt_text(entry, "attached_accelerator", where),
        local_nvme_gb=_opt_number(entry, "local_nvme_gb", where),
        network_gbps=_opt_number(entry, "network_gbps", where),
        source=str(entry.get("source", "")),
        confidence=str(entry.get("confidence", "high")),
        notes=str(entry.get("notes", "")),
    )


_INF = math.inf

# Building thousands of frozen Offers through the dataclass __init__ (one object.__setattr__ per
# field) costs a cold `gpufit plan` milliseconds; the plain path below fills the slots through
# their descriptors instead. Every field is set, so the object equals Offer(...) with the same
# values (tests/test_catalog_zones.py checks it field by field).
_new_object = object.__new__
_SLOTS = {name: Offer.__dict__[name].__set__ for name in Offer.__dataclass_fields__}
_SET_INSTANCE = _SLOTS.pop("instance")
_SET_REGION = _SLOTS.pop("region")
_SET_ZONE = _SLOTS.pop("zone")
_SET_MARKET = _SLOTS.pop("market")
_SET_HOURLY_USD = _SLOTS.pop("hourly_usd")
_SET_SOURCE = _SLOTS.pop("source")
_SET_AS_OF = _SLOTS.pop("as_of")
_SET_CONFIDENCE = _SLOTS.pop("confidence")
_SET_HOURLY_USD_RANGE = _SLOTS.pop("hourly_usd_range")
_SET_INTERRUPTION_BUCKET = _SLOTS.pop("interruption_bucket")
_SET_NOTES = _SLOTS.pop("notes")
_SET_ZONES = _SLOTS.pop("zones")
_SET_STALE = _SLOTS.pop("stale")
_SET_UNPRICED = _SLOTS.pop("unpriced")
_SET_PLACEMENT_SCORE = _SLOTS.pop("placement_score")
_SET_CAPACITY = _SLOTS.pop("capacity")
assert not _SLOTS, f"Offer fields not set by the plain path: {sorted(_SLOTS)}"


def _plain_offer(
    entry: Any,
    types: dict[tuple[str, str], InstanceType],
    buckets: dict[tuple[str, str, str], str],
    shared: dict[Any, Any],
    scores: dict[tuple[str, str, str, str], int],
) -> Offer | None:
    """The offer of a plainly valid entry, checked inline (a catalog holds thousands); None for
    anything else, which ``_checked_offer`` then accepts or rejects with the reason. Accepts a
    subset of what ``_checked_offer`` accepts, never more."""
    if type(entry) is not dict or "hourly_usd_range" in entry:
        return None
    get = entry.get
    cloud, name, market, region = get("cloud"), get("instance_type"), get("market"), get("region")
    price, source, as_of, zone = get("hourly_usd"), get("source"), get("as_of"), get("zone")
    if (
        type(cloud) is not str
        or type(name) is not str
        or (market != "on-demand" and market != "spot")
        or type(region) is not str
        or not region
        or type(source) is not str
        or not source
        or type(as_of) is not str
        or not as_of
        or (zone is not None and (type(zone) is not str or not zone))
        or (type(price) is not float and type(price) is not int)
        or not 0 < price < _INF
    ):
        return None
    it = types.get((cloud, name))
    if it is None:
        return None
    zones = get("zones")
    if zones is None:
        zones_t: tuple[str, ...] = (zone,) if zone is not None else ()
    else:
        if type(zones) is not list:
            return None
        zones_t = tuple(zones)
        cached = shared.get(zones_t)
        if cached is None:
            if not all(type(z) is str and z for z in zones_t) or len(set(zones_t)) != len(zones_t):
                return None
            if zone is not None and zones_t != (zone,):
                return None
            shared[zones_t] = cached = zones_t
        elif zone is not None and cached != (zone,):
            return None
        zones_t = cached
    confidence, notes, stale = get("confidence", "high"), get("notes", ""), get("stale", False)
    unpriced = get("unpriced", "")
    if (
        type(confidence) is not str
        or type(notes) is not str
        or type(stale) is not bool
        or type(unpriced) is not str
    ):
        return None
    region = shared.setdefault(region, region)
    offer: Offer = _new_object(Offer)
    _SET_INSTANCE(offer, it)
    _SET_REGION(offer, region)
    _SET_ZONE(offer, zone)
    _SET_MARKET(offer, market)
    _SET_HOURLY_USD(offer, float(price))
    _SET_SOURCE(offer, shared.setdefault(source, source))
    _SET_AS_OF(offer, shared.setdefault(as_of, as_of))
    _SET_CONFIDENCE(offer, shared.setdefault(confidence, confidence))
    _SET_HOURLY_USD_RANGE(offer, None)
    _SET_INTERRUPTION_BUCKET(offer, buckets.get((cloud, region, name)) if market == "spot" else None)
    _SET_NOTES(offer, notes)
    _SET_ZONES(offer, zones_t)
    _SET_STALE(offer, stale)
    _SET_UNPRICED(offer, unpriced)
    score = _score(scores, cloud, region, zone, zones_t, name) if market == "spot" else None
    _SET_PLACEMENT_SCORE(offer, score)
    _SET_CAPACITY(offer, None)
    return offer


def _score(
    scores: dict[tuple[str, str, str, str], int],
    cloud: str,
    region: str,
    zone: str | None,
    zones: tuple[str, ...],
    name: str,
) -> int | None:
    """A spot offer's placement score: its zone's; for a region-level offer, the best of its
    zones' (the fleet may launch in any of them), else the region's own score (zone "")."""
    if not scores:
        return None
    if zone is not None:
        return scores.get((cloud, region, zone, name))
    found = [s for z in zones if (s := scores.get((cloud, region, z, name))) is not None]
    return max(found) if found else scores.get((cloud, region, "", name))


def _checked_offer(
    entry: Any,
    types: dict[tuple[str, str], InstanceType],
    buckets: dict[tuple[str, str, str], str],
    where: str,
    scores: dict[tuple[str, str, str, str], int],
) -> Offer:
    """An offer entry, checked field by field: the offer, or CatalogError saying what is wrong."""
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: an offer must be an object, not {entry!r}")
    cloud, name = entry.get("cloud"), entry.get("instance_type")
    declared = types.get((cloud, name)) if isinstance(cloud, str) and isinstance(name, str) else None
    if declared is None:
        raise CatalogError(f"{where}: instance type {cloud}/{name} is not declared")
    it = declared
    market = entry.get("market")
    if market not in MARKETS:
        raise CatalogError(f"{where}: market {market!r}, expected on-demand or spot")
    # A zero price is an error in the catalog, not a bargain.
    price = _number(entry, "hourly_usd", where, strict=True)
    spread = entry.get("hourly_usd_range")
    if spread is not None and not (
        isinstance(spread, list)
        and len(spread) == 2
        and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in spread
        )
    ):
        raise CatalogError(f"{where}: hourly_usd_range must be two positive prices, not {spread!r}")
    region = _text(entry, "region", where)
    zone = _opt_text(entry, "zone", where)
    if spread is not None and zone is not None:
        raise CatalogError(f"{where}: hourly_usd_range spans zones; the zone-specific {zone} has one price")
    unpriced = entry.get("unpriced", "")
    if not isinstance(unpriced, str):
        raise CatalogError(f"{where}: unpriced must be the reason (a string), not {unpriced!r}")
    zones = _zones(entry, zone, where)
    return Offer(
        instance=it,
        region=region,
        zone=zone,
        market=market,
        hourly_usd=price,
        source=_text(entry, "source", where),
        as_of=_text(entry, "as_of", where),
        confidence=str(entry.get("confidence", "high")),
        hourly_usd_range=(float(spread[0]), float(spread[1])) if spread else None,
        interruption_bucket=buckets.get((it.cloud, region, it.name)) if market == "spot" else None,
        notes=str(entry.get("notes", "")),
        zones=zones,
        stale=bool(entry.get("stale", False)),
        unpriced=unpriced,
        placement_score=_score(scores, it.cloud, region, zone, zones, it.name) if market == "spot" else None,
    )


def catalog_from_doc(doc: dict[str, Any], path: str, gpus: dict[str, GpuSpec] | None = None) -> Catalog:
    """Build a ``Catalog`` from a decoded catalog document, checking it as it goes."""
    gpus = gpus if gpus is not None else load_gpus()
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: not a catalog document (expected a JSON object)")
    if doc.get("schema_version") != 1 or isinstance(doc.get("schema_version"), bool):
        raise CatalogError(f"{path}: schema_version {doc.get('schema_version')!r}, expected 1")
    sources = doc.get("sources", {})
    if not isinstance(sources, dict):
        raise CatalogError(f"{path}: sources must be an object")
    types: dict[tuple[str, str], InstanceType] = {}
    for i, entry in enumerate(_entries(doc, "instance_types", path)):
        it = _parse_instance(entry, gpus, f"{path}: instance_types[{i}]")
        types[(it.cloud, it.name)] = it
    buckets: dict[tuple[str, str, str], str] = {}
    for i, entry in enumerate(_entries(doc, "spot_interruption", path)):
        where = f"{path}: spot_interruption[{i}]"
        bucket = entry.get("bucket")
        if bucket not in INTERRUPTION_BUCKETS:
            raise CatalogError(f"{where}: bucket {bucket!r} is not one of {INTERRUPTION_BUCKETS}")
        key = (
            _text(entry, "cloud", where),
            _text(entry, "region", where),
            _text(entry, "instance_type", where),
        )
        buckets[key] = str(bucket)
    scores = _placement_scores(doc, path)
    offers: list[Offer] = []
    seen: set[tuple[str, str, str, str | None, str]] = set()
    shared: dict[Any, Any] = {}  # one object per distinct string and zones tuple
    for i, entry in enumerate(_entries(doc, "offers", path)):
        offer = _plain_offer(entry, types, buckets, shared, scores)
        if offer is None:  # anything unusual: the checked path accepts it or says why not
            offer = _checked_offer(entry, types, buckets, f"{path}: offers[{i}]", scores)
        offer_key = offer.key
        if offer_key in seen:
            raise CatalogError(f"{path}: offers[{i}]: duplicate offer {offer_key}")
        seen.add(offer_key)
        offers.append(offer)
    not_sold: list[str] = []
    if doc.get("price_rules") != RULES_VERSION:  # not judged when it was written: judge it now
        offers, not_sold = _judged(offers)
    return Catalog(
        gpus=gpus,
        instance_types=tuple(types.values()),
        offers=tuple(o for o in offers if not o.unpriced),
        as_of=str(doc.get("as_of", "")),
        source=str(doc.get("source", "")),
        path=path,
        sources=sources,
        unpriced=tuple(o for o in offers if o.unpriced),
        not_sold=tuple(not_sold),
        wait_value_per_hour=_opt_number(doc, "wait_value_per_hour", path),
        flex_start_prices=_flex_start_prices(doc, path),
    )


def _flex_start_prices(doc: dict[str, Any], path: str) -> dict[tuple[str, str], FlexStartPrice]:
    """``flex_start_prices``: GCP rows of a type, region, positive $/h, source and as_of."""
    prices: dict[tuple[str, str], FlexStartPrice] = {}
    for i, entry in enumerate(_entries(doc, "flex_start_prices", path)):
        where = f"{path}: flex_start_prices[{i}]"
        if entry.get("cloud") != "gcp":
            raise CatalogError(f"{where}: cloud {entry.get('cloud')!r}, expected gcp (flex-start is GCP's)")
        key = (_text(entry, "instance_type", where), _text(entry, "region", where))
        prices[key] = FlexStartPrice(
            _number(entry, "hourly_usd", where, strict=True),
            _text(entry, "source", where),
            _text(entry, "as_of", where),
            str(entry.get("notes", "")),
        )
    return prices


def _judged(offers: list[Offer]) -> tuple[list[Offer], list[str]]:
    """``selector.price_rules`` on loaded offers: those not sold in their market dropped (with
    the reason, once per type and market), the unpriceable marked, the unconfirmed at low
    confidence."""
    verdicts = judge(
        [
            PricePoint(
                o.instance.cloud,
                o.instance.name,
                o.instance.gpu.name,
                o.instance.gpu_count,
                o.region,
                o.market,
                o.hourly_usd,
            )
            for o in offers
        ]
    )
    kept: list[Offer] = []
    gone: dict[str, None] = {}
    for offer, verdict in zip(offers, verdicts, strict=True):
        if verdict.verdict == "not-sold":
            gone[verdict.reason] = None
            continue
        if verdict.verdict == "unpriced":
            offer = replace(offer, unpriced=verdict.reason)
        if verdict.unconfirmed and offer.confidence != "low":
            notes = "; ".join(n for n in (offer.notes, verdict.unconfirmed) if n)
            offer = replace(offer, confidence="low", notes=notes)
        kept.append(offer)
    return kept, list(gone)


def _placement_scores(doc: dict[str, Any], path: str) -> dict[tuple[str, str, str, str], int]:
    """``spot_placement_scores``: (cloud, region, zone or "", instance type) → score 1-10, from
    requests of at least ``MIN_SCORED_TYPES`` types (EC2: with fewer, "the returned placement
    score will always be low", GetSpotPlacementScores ``InstanceTypes``)."""
    scores: dict[tuple[str, str, str, str], int] = {}
    for i, entry in enumerate(_entries(doc, "spot_placement_scores", path)):
        where = f"{path}: spot_placement_scores[{i}]"
        score = _number(entry, "score", where, minimum=1)
        if score > 10 or score != int(score):
            raise CatalogError(f"{where}: score must be a whole number from 1 to 10, not {score!r}")
        names = entry.get("instance_types")
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise CatalogError(f"{where}: instance_types must list the types the score was asked for")
        if len(names) < MIN_SCORED_TYPES:
            continue
        zone = entry.get("zone") or ""
        for name in names:
            key = (_text(entry, "cloud", where), _text(entry, "region", where), str(zone), name)
            scores[key] = int(score)
    return scores


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load a catalog file; the embedded snapshot when ``path`` is None."""
    file = Path(path) if path is not None else SNAPSHOT_FILE
    try:
        # The embedded snapshot is generated from its tables (scripts/build_snapshot.py, whose
        # --check runs in the tests), so it skips the duplicate-key check other files get.
        doc = json.loads(file.read_bytes()) if file == SNAPSHOT_FILE else load_json(file)
    except FileNotFoundError:
        raise CatalogError(f"{file}: no such catalog file") from None
    except (OSError, ValueError) as err:
        raise CatalogError(f"{file}: not a readable catalog ({err})") from None
    return catalog_from_doc(doc, str(file))
