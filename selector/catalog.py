"""The catalog: GPU facts, instance types and priced offers, loaded from data files.

``gpus.yaml`` holds what each GPU model can do; a catalog file (the embedded snapshot, or one
written by ``gpufit catalog refresh``) holds instance types and offers, each offer one
instance type in one region (or zone) and market at one hourly price, with its source and date.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from selector.datafile import load_json, load_yaml, require_schema

Market = Literal["on-demand", "spot"]
MARKETS: tuple[Market, ...] = ("on-demand", "spot")
CLOUDS: tuple[str, ...] = ("aws", "gcp")
INTERRUPTION_BUCKETS: tuple[str, ...] = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
NODE_INTERCONNECTS: tuple[str, ...] = ("efa", "gpudirect-tcpx", "gpudirect-tcpxo", "gpudirect-rdma")

DATA_DIR = Path(__file__).parent / "data"
GPUS_FILE = DATA_DIR / "gpus.yaml"
SNAPSHOT_FILE = DATA_DIR / "catalog.json"


class CatalogError(ValueError):
    """A catalog or facts file that cannot be used, with the reason."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model's facts. Throughputs are dense TFLOP/s; None means none or not sourced."""

    name: str
    aliases: tuple[str, ...]
    memory_mib: int
    memory_type: str
    bandwidth_gbps: float
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    int8_tops: float | None
    nvlink_gbps: float | None
    arch: str
    compute_capability: tuple[int, int]
    source: str
    confidence: str = "high"
    notes: str = ""
    estimated: tuple[str, ...] = ()  # throughput fields that are estimates, not sourced figures
    estimate_source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def fp8(self) -> bool:
        """FP8 tensor cores exist from compute capability 8.9 (Ada) upward."""
        return self.fp8_tflops is not None

    @property
    def bf16(self) -> bool:
        """BF16 tensor cores exist from compute capability 8.0 (Ampere) upward."""
        return self.compute_capability >= (8, 0)

    def tflops_at(self, precision: str) -> float | None:
        """Dense tensor throughput a job computing in ``precision`` can reach.

        Weight-only quantised formats (int4, nf4) and int8 weights compute in 16 bit; fp32
        training runs on TF32 tensor cores at half the BF16 rate (A100 156 vs 312, H100 SXM
        494.5 vs 989 TFLOP/s, NVIDIA datasheets).
        """
        sixteen = self.bf16_tflops if self.bf16_tflops is not None else self.fp16_tflops
        if precision == "fp8":
            return self.fp8_tflops
        if precision == "fp16":
            return self.fp16_tflops
        if precision == "fp32":
            return self.bf16_tflops / 2 if self.bf16_tflops is not None else None
        return sixteen


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

    @property
    def cloud(self) -> str:
        return self.instance.cloud

    @property
    def key(self) -> tuple[str, str, str, str | None, str]:
        return (self.instance.cloud, self.instance.name, self.region, self.zone, self.market)


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GpuSpec]
    instance_types: tuple[InstanceType, ...]
    offers: tuple[Offer, ...]
    as_of: str
    source: str
    path: str
    sources: dict[str, Any] = field(default_factory=dict)

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

    def describe_source(self, key: str, full: bool = False) -> str:
        """``KEY (url, retrieved)``; with ``full``, the source's title as well."""
        ref = self.sources.get(key)
        if not isinstance(ref, dict):
            return key
        title = f": {ref.get('title', '')}" if full else ""
        return f"{key}{title} ({ref.get('url', '')}, retrieved {ref.get('retrieved', '')})"


def _req(entry: dict[str, Any], key: str, where: str) -> Any:
    if key not in entry:
        raise CatalogError(f"{where}: missing {key!r}")
    return entry[key]


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


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
    value = _req(entry, key, where)
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
    value = _req(entry, key, where)
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


def _parse_gpu(entry: dict[str, Any], where: str) -> GpuSpec:
    cc = str(_req(entry, "compute_capability", where)).split(".")
    estimates = dict(entry.get("estimates") or {})
    for key in estimates:
        if entry.get(key) is not None:
            raise CatalogError(f"{where}: {key} is sourced; an estimate may only fill a gap")

    def figure(key: str) -> float | None:
        return _opt_float(entry.get(key) if entry.get(key) is not None else estimates.get(key))

    return GpuSpec(
        name=str(_req(entry, "name", where)),
        aliases=tuple(str(a) for a in entry.get("aliases", [])),
        memory_mib=int(_req(entry, "memory_mib", where)),
        memory_type=str(entry.get("memory_type", "")),
        bandwidth_gbps=float(_req(entry, "bandwidth_gbps", where)),
        bf16_tflops=figure("bf16_tflops"),
        fp16_tflops=figure("fp16_tflops"),
        fp8_tflops=figure("fp8_tflops"),
        int8_tops=figure("int8_tops"),
        nvlink_gbps=_opt_float(entry.get("nvlink_gbps")),
        arch=str(entry.get("arch", "")),
        compute_capability=(int(cc[0]), int(cc[1]) if len(cc) > 1 else 0),
        source=str(_req(entry, "source", where)),
        confidence=str(entry.get("confidence", "high")),
        notes=str(entry.get("notes", "")),
        estimated=tuple(sorted(estimates)),
        estimate_source=str(entry.get("estimate_source", "")),
    )


def sourced_only(gpu: GpuSpec) -> GpuSpec:
    """``gpu`` with its estimated throughputs removed (``placement.require_sourced``)."""
    if not gpu.estimated:
        return gpu
    cleared: dict[str, Any] = dict.fromkeys(gpu.estimated)
    return replace(gpu, **cleared, estimated=())


@lru_cache(maxsize=4)
def load_gpus(path: Path = GPUS_FILE) -> dict[str, GpuSpec]:
    """GPU facts by canonical name."""
    doc = load_yaml(path)
    try:
        require_schema(doc, path, 1)
    except ValueError as err:
        raise CatalogError(str(err)) from None
    gpus: dict[str, GpuSpec] = {}
    for i, entry in enumerate(doc.get("gpus", [])):
        spec = _parse_gpu(entry, f"{path}: gpus[{i}]")
        if spec.source not in doc.get("sources", {}):
            raise CatalogError(f"{path}: gpu {spec.name} names unknown source {spec.source!r}")
        gpus[spec.name] = spec
    return gpus


def gpu_by_alias(gpus: dict[str, GpuSpec], name: str) -> GpuSpec | None:
    """Resolve a cloud API's GPU name (``nvidia-l4``, ``NVIDIA H200``) to its facts."""
    lowered = name.lower()
    for spec in gpus.values():
        if lowered == spec.name.lower() or lowered in (a.lower() for a in spec.aliases):
            return spec
    return None


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
    nvlink = _req(entry, "nvlink", where)
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
assert not _SLOTS, f"Offer fields not set by the plain path: {sorted(_SLOTS)}"


def _plain_offer(
    entry: Any,
    types: dict[tuple[str, str], InstanceType],
    buckets: dict[tuple[str, str, str], str],
    shared: dict[Any, Any],
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
    if type(confidence) is not str or type(notes) is not str or type(stale) is not bool:
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
    return offer


def _checked_offer(
    entry: Any,
    types: dict[tuple[str, str], InstanceType],
    buckets: dict[tuple[str, str, str], str],
    where: str,
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
        zones=_zones(entry, zone, where),
        stale=bool(entry.get("stale", False)),
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
    offers: list[Offer] = []
    seen: set[tuple[str, str, str, str | None, str]] = set()
    shared: dict[Any, Any] = {}  # one object per distinct string and zones tuple
    for i, entry in enumerate(_entries(doc, "offers", path)):
        offer = _plain_offer(entry, types, buckets, shared)
        if offer is None:  # anything unusual: the checked path accepts it or says why not
            offer = _checked_offer(entry, types, buckets, f"{path}: offers[{i}]")
        offer_key = offer.key
        if offer_key in seen:
            raise CatalogError(f"{path}: offers[{i}]: duplicate offer {offer_key}")
        seen.add(offer_key)
        offers.append(offer)
    return Catalog(
        gpus=gpus,
        instance_types=tuple(types.values()),
        offers=tuple(offers),
        as_of=str(doc.get("as_of", "")),
        source=str(doc.get("source", "")),
        path=path,
        sources=sources,
    )


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
