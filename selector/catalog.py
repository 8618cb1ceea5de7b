"""The catalog: GPU facts, instance types and priced offers, loaded from data files.

``gpus.yaml`` holds what each GPU model can do; a catalog file (the embedded snapshot, or one
written by ``gpufit catalog refresh``) holds instance types and offers, each offer one
instance type in one region (or zone) and market at one hourly price, with its source and date.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


def _parse_gpu(entry: dict[str, Any], where: str) -> GpuSpec:
    cc = str(_req(entry, "compute_capability", where)).split(".")
    return GpuSpec(
        name=str(_req(entry, "name", where)),
        aliases=tuple(str(a) for a in entry.get("aliases", [])),
        memory_mib=int(_req(entry, "memory_mib", where)),
        memory_type=str(entry.get("memory_type", "")),
        bandwidth_gbps=float(_req(entry, "bandwidth_gbps", where)),
        bf16_tflops=_opt_float(entry.get("bf16_tflops")),
        fp16_tflops=_opt_float(entry.get("fp16_tflops")),
        fp8_tflops=_opt_float(entry.get("fp8_tflops")),
        int8_tops=_opt_float(entry.get("int8_tops")),
        nvlink_gbps=_opt_float(entry.get("nvlink_gbps")),
        arch=str(entry.get("arch", "")),
        compute_capability=(int(cc[0]), int(cc[1]) if len(cc) > 1 else 0),
        source=str(_req(entry, "source", where)),
        confidence=str(entry.get("confidence", "high")),
        notes=str(entry.get("notes", "")),
    )


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
    gpu_name = str(_req(entry, "gpu", where))
    if gpu_name not in gpus:
        raise CatalogError(f"{where}: GPU {gpu_name!r} is not in the GPU facts table")
    cloud = str(_req(entry, "cloud", where))
    if cloud not in CLOUDS:
        raise CatalogError(f"{where}: cloud {cloud!r}, expected one of {', '.join(CLOUDS)}")
    interconnect = entry.get("node_interconnect")
    if interconnect is not None and interconnect not in NODE_INTERCONNECTS:
        raise CatalogError(f"{where}: unknown node_interconnect {interconnect!r}")
    count = int(_req(entry, "gpu_count", where))
    if count < 1:
        raise CatalogError(f"{where}: gpu_count must be at least 1")
    name = str(_req(entry, "name", where))
    return InstanceType(
        cloud=cloud,
        name=name,
        machine_type=str(entry.get("machine_type", name)),
        gpu=gpus[gpu_name],
        gpu_count=count,
        vcpus=int(_req(entry, "vcpus", where)),
        memory_gib=float(_req(entry, "memory_gib", where)),
        nvlink=bool(_req(entry, "nvlink", where)),
        node_interconnect=interconnect,
        attached_accelerator=entry.get("attached_accelerator"),
        local_nvme_gb=_opt_float(entry.get("local_nvme_gb")),
        network_gbps=_opt_float(entry.get("network_gbps")),
        source=str(entry.get("source", "")),
        confidence=str(entry.get("confidence", "high")),
        notes=str(entry.get("notes", "")),
    )


def catalog_from_doc(doc: dict[str, Any], path: str, gpus: dict[str, GpuSpec] | None = None) -> Catalog:
    """Build a ``Catalog`` from a decoded catalog document, checking it as it goes."""
    gpus = gpus if gpus is not None else load_gpus()
    if doc.get("schema_version") != 1:
        raise CatalogError(f"{path}: schema_version {doc.get('schema_version')!r}, expected 1")
    sources = doc.get("sources", {})
    types: dict[tuple[str, str], InstanceType] = {}
    for i, entry in enumerate(doc.get("instance_types", [])):
        it = _parse_instance(entry, gpus, f"{path}: instance_types[{i}]")
        types[(it.cloud, it.name)] = it
    buckets: dict[tuple[str, str, str], str] = {}
    for entry in doc.get("spot_interruption", []):
        bucket = entry.get("bucket")
        if bucket not in INTERRUPTION_BUCKETS:
            raise CatalogError(
                f"{path}: spot_interruption bucket {bucket!r} is not one of {INTERRUPTION_BUCKETS}"
            )
        buckets[(entry["cloud"], entry["region"], entry["instance_type"])] = bucket
    offers: list[Offer] = []
    seen: set[tuple[str, str, str, str | None, str]] = set()
    for i, entry in enumerate(doc.get("offers", [])):
        where = f"{path}: offers[{i}]"
        try:
            it = types[(entry["cloud"], entry["instance_type"])]
        except KeyError:
            raise CatalogError(
                f"{where}: instance type {entry.get('cloud')}/{entry.get('instance_type')} is not declared"
            ) from None
        market = entry.get("market")
        if market not in MARKETS:
            raise CatalogError(f"{where}: market {market!r}, expected on-demand or spot")
        price = float(_req(entry, "hourly_usd", where))
        if not price > 0:
            raise CatalogError(f"{where}: hourly_usd must be positive")
        spread = entry.get("hourly_usd_range")
        region = str(_req(entry, "region", where))
        offer = Offer(
            instance=it,
            region=region,
            zone=entry.get("zone"),
            market=market,
            hourly_usd=price,
            source=str(_req(entry, "source", where)),
            as_of=str(_req(entry, "as_of", where)),
            confidence=str(entry.get("confidence", "high")),
            hourly_usd_range=(float(spread[0]), float(spread[1])) if spread else None,
            interruption_bucket=buckets.get((it.cloud, region, it.name)) if market == "spot" else None,
            notes=str(entry.get("notes", "")),
            stale=bool(entry.get("stale", False)),
        )
        if offer.key in seen:
            raise CatalogError(f"{where}: duplicate offer {offer.key}")
        seen.add(offer.key)
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
        doc = load_json(file)
    except FileNotFoundError:
        raise CatalogError(f"{file}: no such catalog file") from None
    except (OSError, ValueError) as err:
        raise CatalogError(f"{file}: not a readable catalog ({err})") from None
    return catalog_from_doc(doc, str(file))
