"""The Cloud Billing SKU price rules: which SKUs price a machine type's vCPUs, memory and GPUs
(descriptions parsed as data that changes), the price book they fill, and an offer priced from
its parts, or the reason it cannot be."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog.gcp.machine_types import MachineType, compact

if TYPE_CHECKING:
    from google.cloud import billing_v1

SOURCE_BILLING = "GCP_BILLING"
PRICE_DIGITS = 5
"""Offers are rounded like the embedded snapshot's (the GCP price pages quote 5 decimals)."""

MARKET_OF_USAGE = {"OnDemand": "on-demand", "Preemptible": "spot"}
PRICED_GROUPS = frozenset({"CPU", "RAM", "N1Standard", "GPU"})
"""Billing resource groups that price vCPUs, memory (N1Standard holds both) and GPUs."""
UNIT_OF_PART = {"core": "h", "ram": "GiBy.h", "gpu": "h"}
NOT_LIST_PRICE = re.compile(
    r"custom|sole tenan|commit|reserv|premium|extended|dws|defined duration|flex|calendar|"
    r"virtual workstation|licen",
    re.IGNORECASE,
)
"""Description words of SKUs that are not the plain on-demand/spot rate of a predefined VM
(custom shapes, sole tenancy, commitments, reservations, DWS, workstation licences): skipped."""
_VM_SKU = re.compile(
    r"^(?:spot\s+)?(?:preemptible\s+)?(?P<family>.+?)\s+instance\s+(?P<part>core|ram)\s+running\s+in\s+\S",
    re.IGNORECASE,
)
_GPU_SKU = re.compile(
    r"^(?:spot\s+)?(?:preemptible\s+)?nvidia\s+(?P<model>.+?)(?:\s+gpu)?(?:\s*\(1 gpu slice\))?"
    r"(?:\s+attached\s+to\s+spot\s+preemptible\s+vms)?\s+running\s+in\s+\S",
    re.IGNORECASE,
)
_DWS_VM_SKU = re.compile(
    r"^dws\s+defined\s+duration\s+(?P<family>.+?)\s+(?:instance\s+)?(?P<part>core|ram)\s+running\s+in\s+\S",
    re.IGNORECASE,
)
_DWS_GPU_SKU = re.compile(
    r"^nvidia\s+(?P<model>.+?)(?:\s+gpu)?\s+attached\s+to\s+dws\s+defined\s+duration\s+vms\s+running\s+in\s+\S",
    re.IGNORECASE,
)
"""Flex-start (Dynamic Workload Scheduler) SKUs, usage type OnDemand: "DWS Defined Duration A2
Core|Ram running in Americas", "Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs
running in Americas" (the Compute Engine SKUs of the Cloud Billing Catalog, service
6F81-5844-456A). The authority is Google's SKU list, https://cloud.google.com/skus/?filter=DWS,
which could not be read from here. The names are corroborated by public copies of the catalog's
descriptions found by content search of public GitHub files on 2026-12-04 (the index names no
repository): a research note of 2026-08-02 quoting a live Billing Catalog pull ("DWS Defined
Duration A2 Core|Ram", "Nvidia Tesla A100 GPU attached to DWS Defined Duration VMs";
a2-highgpu-1g flex-start $2.02038/h in us-central1 = $0.20868 + $0.19805 + $1.61365, the rates
the fake catalog of tests/test_gcp_catalog.py uses, which this parser sums to the same figure),
a .NET test fixture ("Nvidia Tesla A100 80GB GPU attached to DWS Defined Duration VMs running in
Americas") and a TPU price fetcher ("DWS Defined Duration V6e running in Columbus"). Filed under
the market ``flex-start``; "DWS Flex Start" (H4D only) and calendar mode are not read."""
FLEX_START = "flex-start"
GPU_WORD_SYNONYMS = {"plus": "mega"}
"""Billing names the A3 Mega GPU "H100 80GB Mega" in some regions and "H100 80GB Plus" in others
(SkyPilot's fetch_gcp.py matches both for nvidia-h100-mega-80gb)."""
EXAMPLES = 3


@dataclass(frozen=True)
class _Rate:
    usd: float
    sku: str
    description: str
    spread: int  # how many regions the SKU covers: a narrower SKU is the more specific price


@dataclass
class PriceBook:
    """Unit prices by (part, key, region, market); ``key`` is a machine family for core/ram and
    an accelerator key for GPUs."""

    rates: dict[tuple[str, str, str, str], _Rate] = field(default_factory=dict)
    conflicts: dict[tuple[str, str, str, str], list[_Rate]] = field(default_factory=dict)
    gpu_models: dict[str, str] = field(default_factory=dict)  # accelerator key -> a description
    unattributed: Counter[str] = field(default_factory=Counter)
    unattributed_examples: list[str] = field(default_factory=list)
    skipped: int = 0
    skus: int = 0
    pages: int = 0

    def add(self, key: tuple[str, str, str, str], rate: _Rate) -> None:
        old = self.rates.get(key)
        if old is None or rate.spread < old.spread:
            self.rates[key] = rate
            self.conflicts.pop(key, None)
        elif rate.spread == old.spread and abs(rate.usd - old.usd) > 1e-12:
            self.conflicts.setdefault(key, [old]).append(rate)

    def unattributed_sku(self, group: str, description: str, sku: str, why: str) -> None:
        self.unattributed[group] += 1
        if len(self.unattributed_examples) < EXAMPLES:
            self.unattributed_examples.append(f"{description!r} [{sku}, {why}]")

    def lookup(self, part: str, keys: list[str], region: str, market: str, label: str) -> _Rate | str:
        """The rate for the first key that has one, or why there is none (naming ``label``)."""
        for key in keys:
            full = (part, key, region, market)
            if full in self.conflicts:
                skus = ", ".join(r.sku for r in self.conflicts[full])
                return f"conflicting {part} SKUs for {label} ({skus})"
            rate = self.rates.get(full)
            if rate is not None:
                return rate
        return f"no {part} SKU for {label}"


def family_keys(machine_type: str) -> list[str]:
    """Billing family keys for a machine type, most specific first: a3-megagpu-8g ->
    ["a3mega", "a3megagpu", "a3"] (billing says "A3 Instance Core", maybe "A3 Mega ...")."""
    series, _, rest = machine_type.partition("-")
    variant = rest.split("-")[0] if rest else ""
    keys = [series + variant.removesuffix("gpu"), series + variant, series] if variant else [series]
    return list(dict.fromkeys(keys))


def vm_family_key(family: str) -> str:
    """ "N1 Predefined" -> "n1", "A3" -> "a3", "A3 Mega" -> "a3mega"."""
    words = [w for w in re.split(r"[^a-z0-9]+", family.lower()) if w and w != "predefined"]
    return "".join(words)


def gpu_key(name: str) -> str:
    """Order-free key shared by accelerator types and billing GPU names:
    nvidia-h100-mega-80gb and "H100 80GB Mega" -> "80gb h100 mega"."""
    words = {GPU_WORD_SYNONYMS.get(w, w) for w in re.split(r"[^a-z0-9]+", name.lower()) if w}
    words -= {"nvidia", "gpu"}
    return " ".join(sorted(words))


def _unit_price(sku: billing_v1.Sku) -> tuple[float, str, str] | None:
    """(USD, usage unit, currency) of the SKU's current last tier, or None without one."""
    if not sku.pricing_info:
        return None
    expression = sku.pricing_info[-1].pricing_expression
    if not expression.tiered_rates:
        return None
    money = expression.tiered_rates[-1].unit_price
    return money.units + money.nanos / 1e9, expression.usage_unit, money.currency_code


def read_sku(sku: billing_v1.Sku, regions: set[str], book: PriceBook) -> None:
    """File one SKU's unit price under the parts it prices, or count it as unattributed."""
    group = sku.category.resource_group
    market = MARKET_OF_USAGE.get(sku.category.usage_type)
    covered = sorted(set(sku.service_regions) & regions)
    if group not in PRICED_GROUPS or market is None or not covered:
        return
    description = " ".join(sku.description.split())
    dws = _dws_part(description) if market == "on-demand" else None
    if dws is not None:
        _file(sku, group, description, *dws, FLEX_START, covered, book)
        return
    if NOT_LIST_PRICE.search(description):
        book.skipped += 1
        return
    if market == "on-demand" and re.search(r"\b(spot|preemptible)\b", description, re.IGNORECASE):
        book.unattributed_sku(group, description, sku.sku_id, "spot wording on an OnDemand SKU")
        return
    key: str
    if group == "GPU":
        gpu = _GPU_SKU.match(description)
        if gpu is None:
            book.unattributed_sku(group, description, sku.sku_id, "GPU wording not recognised")
            return
        part, key = "gpu", gpu_key(gpu.group("model"))
        book.gpu_models.setdefault(key, description)
    else:
        vm = _VM_SKU.match(description)
        if vm is None:
            book.unattributed_sku(group, description, sku.sku_id, "wording not recognised")
            return
        part = "core" if vm.group("part").lower() == "core" else "ram"
        if (group, part) in (("CPU", "ram"), ("RAM", "core")):
            book.unattributed_sku(group, description, sku.sku_id, f"{part} SKU in resource group {group}")
            return
        key = vm_family_key(vm.group("family"))
    _file(sku, group, description, part, key, market, covered, book)


def _dws_part(description: str) -> tuple[str, str] | None:
    """(part, key) of a flex-start SKU (``_DWS_VM_SKU``, ``_DWS_GPU_SKU``), None for others."""
    gpu = _DWS_GPU_SKU.match(description)
    if gpu is not None:
        return "gpu", gpu_key(gpu.group("model"))
    vm = _DWS_VM_SKU.match(description)
    if vm is not None:
        return vm.group("part").lower(), vm_family_key(vm.group("family"))
    return None


def _file(
    sku: billing_v1.Sku,
    group: str,
    description: str,
    part: str,
    key: str,
    market: str,
    covered: list[str],
    book: PriceBook,
) -> None:
    """File the SKU's unit price for ``part``/``key`` in ``covered`` regions, or say why not."""
    price = _unit_price(sku)
    if price is None:
        book.unattributed_sku(group, description, sku.sku_id, "no tiered rate")
        return
    usd, unit, currency = price
    if unit != UNIT_OF_PART[part] or currency not in ("USD", ""):
        book.unattributed_sku(group, description, sku.sku_id, f"unit {unit} {currency}")
        return
    if not usd > 0:
        book.unattributed_sku(group, description, sku.sku_id, "price 0")
        return
    rate = _Rate(usd, sku.sku_id, description, len(sku.service_regions))
    for region in covered:
        book.add((part, key, region, market), rate)


def price_offer(
    name: str,
    mt: MachineType,
    accelerator: str,
    count: int,
    region: str,
    zones: list[str],
    market: str,
    book: PriceBook,
    today: str,
) -> dict[str, Any] | str:
    """The offer, or why it cannot be priced: region-level (one price in every zone),
    listing the zones that list the machine type (an N1 combination: both the host and
    the accelerator type, with enough cards)."""
    families = family_keys(mt.name)
    series = families[-1].upper()
    core = book.lookup("core", families, region, market, series)
    ram = book.lookup("ram", families, region, market, series)
    gpu = book.lookup("gpu", [gpu_key(accelerator)], region, market, accelerator)
    missing = [r for r in (core, ram, gpu) if isinstance(r, str)]
    if missing:
        return "; ".join(missing)
    assert isinstance(core, _Rate) and isinstance(ram, _Rate) and isinstance(gpu, _Rate)
    total = mt.vcpus * core.usd + mt.memory_gib * ram.usd + count * gpu.usd
    return {
        "cloud": "gcp",
        "instance_type": name,
        "region": region,
        "zone": None,
        "zones": zones,
        "market": market,
        "hourly_usd": round(total, PRICE_DIGITS),
        "source": SOURCE_BILLING,
        "as_of": today,
        "confidence": "high",
        "notes": (
            f"{mt.vcpus} vCPU x ${core.usd:g} + {compact(mt.memory_gib)} GiB x ${ram.usd:g} + "
            f"{count} x {accelerator} ${gpu.usd:g} (SKUs {core.sku}, {ram.sku}, {gpu.sku})"
        ),
    }
