"""Reviewed plans pinned in lock files: ``stacks/<stack>.lock.json``.

A lock holds the chosen offer (with its instance type, price and source), the fleet's
fallback offers in order (with theirs), the cost the review saw, a hash of the validated spec
and the catalog's identity. The Pulumi program
provisions the locked choice when the spec still hashes the same, so ``pulumi up`` applies
what the pull request showed even if prices moved since; a spec changed without re-locking
fails with a clear message. No cloud SDK is imported here.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from selector.block_lock import LOCK_KEY, locked_block, locked_quotes
from selector.catalog import CAPACITY_MARKETS, MARKETS, Catalog, GpuSpec, Offer, catalog_from_doc
from selector.report import cost_to_dict
from selector.select import Plan
from selector.spec import HubFetcher, WorkloadSpec, pin_commit, use_hub

LOCK_SCHEMA_VERSION = 4
"""2: the fleet's fallback offers are pinned too (``fallbacks``). 3: each offer carries
``zones`` (the zones a region-level offer is known in; ``[zone]`` for a zone-specific one),
and a zone-specific choice pins where the fleet launches. 4: fallbacks of a batch fleet may
hold other numbers of replicas (``weighted_capacity``), a spot endpoint's on-demand base is
pinned (``on_demand_base``: the offer its base replicas run on), and so is what an hour of
waiting for capacity was worth (``wait_value_per_hour``), so the replan ranks as the review
did; and a serve plan's engine build (``engine``: release, tag, image with its digest when
recorded, CUDA), so a new engine pin is reviewed like a new price (a serve lock without
``engine`` is stale: it predates engine pinning); and a model sized from the Hub is pinned at
the commit its revision resolved to (``model``: hf, revision, commit), which the Pulumi
program sizes and serves however the branch moved since (a lock without it is stale).
Versions 2 and 3 are still read; a reader of 3 refuses 4, whose weighted fleets it would run
as interchangeable machines."""
READABLE_LOCK_VERSIONS = (2, 3, LOCK_SCHEMA_VERSION)
LOCK_SUFFIX = ".lock.json"
COMMIT = re.compile(r"[0-9a-f]{40}")
HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def spec_hash(spec: WorkloadSpec) -> str:
    """SHA-256 of the validated spec's canonical JSON: formatting, comments and defaults written
    out do not count, any change of meaning does."""
    # Defaults left out: a field added to the spec later (with its default) keeps old locks
    # valid; a changed default that changes the plan is caught by replanning the lock.
    canonical = json.dumps(
        spec.model_dump(mode="json", exclude_defaults=True), sort_keys=True, separators=(",", ":")
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def lock_path(spec_file: Path) -> Path:
    """``stacks/Pulumi.<stack>.yaml`` → ``stacks/<stack>.lock.json``; ``x.yaml`` → ``x.lock.json``."""
    stem = spec_file.name.removesuffix(".yaml").removesuffix(".yml")
    return spec_file.with_name(stem.removeprefix("Pulumi.") + LOCK_SUFFIX)


def _instance_dict(offer: Offer) -> dict[str, Any]:
    it = offer.instance
    return {
        "cloud": it.cloud,
        "name": it.name,
        "machine_type": it.machine_type,
        "gpu": it.gpu.name,
        "gpu_count": it.gpu_count,
        "attached_accelerator": it.attached_accelerator,
        "vcpus": it.vcpus,
        "memory_gib": it.memory_gib,
        "local_nvme_gb": it.local_nvme_gb,
        "network_gbps": it.network_gbps,
        "nvlink": it.nvlink,
        "node_interconnect": it.node_interconnect,
        "source": it.source,
        "confidence": it.confidence,
    }


def _offer_dict(offer: Offer) -> dict[str, Any]:
    return {
        "cloud": offer.cloud,
        "instance_type": offer.instance.name,
        "region": offer.region,
        "zone": offer.zone,
        "zones": list(offer.zones),
        "market": offer.market,
        "hourly_usd": offer.hourly_usd,
        "source": offer.source,
        "as_of": offer.as_of,
        "confidence": offer.confidence,
    }


def make_lock(plan: Plan, spec_file: Path, locked_at: datetime) -> dict[str, Any]:
    """The lock document for a plan with a choice (ValueError otherwise)."""
    choice = plan.choice
    if choice is None:
        raise ValueError(f"{plan.spec.name}: {plan.status}: nothing to lock")
    offer = choice.offer
    # A capacity option is re-derived from the spec when the lock is planned (issue 26): the lock
    # keeps the on-demand offer it is priced from (flex-start) or overflows to (a reservation).
    derived = offer.market in CAPACITY_MARKETS
    base = _base_offer(plan) if choice.cost.on_demand_base or derived else None
    pinned = [offer, *(f.offer for f in plan.fallbacks), *([base] if base else [])]
    sources = {o.source: plan.catalog.sources[o.source] for o in pinned if o.source in plan.catalog.sources}
    return {
        "schema_version": LOCK_SCHEMA_VERSION,
        "workload": plan.spec.name,
        "spec_file": spec_file.as_posix(),
        "spec_sha256": spec_hash(plan.spec),
        "locked_at": locked_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "catalog": {
            "source": plan.catalog.source,
            "as_of": plan.catalog.as_of,
            "sha256": catalog_fingerprint(plan.catalog),
        },
        "instance_type": _instance_dict(offer),
        "offer": _offer_dict(offer),
        "interruption_bucket": offer.interruption_bucket,
        # What the plan was kept off (``gpufit up`` records where capacity ran out): the review sees it.
        **(
            {"exclusions": [e.model_dump(exclude_none=True) for e in plan.spec.placement.exclude]}
            if plan.spec.placement.exclude
            else {}
        ),
        # A live Capacity Block offering: the block bought is the one reviewed (issue 26).
        **({LOCK_KEY: block} if (block := locked_block(offer)) else {}),
        "sources": sources,
        "instances": choice.shape.instances,
        "cost": cost_to_dict(choice.cost),
        "wait_value_per_hour": plan.wait_value_per_hour,
        **({"on_demand_base": {"offer": _offer_dict(base)}} if base else {}),
        **_flex_price(plan),  # issue 26: a flex-start price read from the billing catalog
        "engine": choice.engine.as_dict() if choice.engine is not None else None,
        **({"model": model} if (model := locked_model(plan)) else {}),
        "fallbacks": [
            {
                "instance_type": _instance_dict(f.offer),
                "offer": _offer_dict(f.offer),
                "interruption_bucket": f.offer.interruption_bucket,
                "weighted_capacity": f.weighted_capacity,
                "instances": f.shape.instances,
            }
            for f in plan.fallbacks
        ],
    }


def locked_model(plan: Plan) -> dict[str, Any] | None:
    """A model sized from the Hub: its repo, the revision the spec asks and the commit that
    revision resolved to when the plan was made (the commit the servers run). None otherwise."""
    arch = plan.requirements.arch
    if not arch.hf_commit:
        return None
    return {"hf": arch.hf, "revision": plan.spec.model.revision, "commit": arch.hf_commit}


def pin_locked_model(lock: dict[str, Any]) -> HubFetcher | None:
    """Size the lock's Hub model at its locked commit however its revision moved since (the
    fetcher it replaces, for ``use_hub`` to put back; None when the lock pins no model)."""
    model = lock.get("model")
    if not isinstance(model, dict):
        return None
    return pin_commit(model["hf"], model.get("revision"), model["commit"])


def _base_offer(plan: Plan) -> Offer | None:
    """The on-demand offer a spot endpoint's base replicas run on: the choice's type in its
    region on demand, at the price the plan costed it (the dearest zone's)."""
    choice = plan.choice
    assert choice is not None
    it, region = choice.offer.instance, choice.offer.region
    here = [
        o for o in plan.catalog.offers if o.instance is it and o.region == region and o.market == "on-demand"
    ]
    return max(here, key=lambda o: o.hourly_usd) if here else None


FallbackSummary = tuple[str, str, str, float, int]


def fallback_summary(entries: list[dict[str, Any]]) -> list[FallbackSummary]:
    """(instance type, zone or region, market, $/h, weighted capacity) per fallback: what a
    review compares."""
    return [
        (
            str(e["offer"]["instance_type"]),
            str(e["offer"].get("zone") or e["offer"]["region"]),
            str(e["offer"]["market"]),
            round(float(e["offer"]["hourly_usd"]), 4),
            int(e["weighted_capacity"]),
        )
        for e in entries
    ]


def plan_fallbacks(plan: Plan) -> list[FallbackSummary]:
    """The same summary of a plan's fallbacks."""
    return [
        (
            f.offer.instance.name,
            f.offer.zone or f.offer.region,
            f.offer.market,
            round(f.offer.hourly_usd, 4),
            f.weighted_capacity,
        )
        for f in plan.fallbacks
    ]


def catalog_fingerprint(catalog: Catalog) -> str:
    """A stable identity for the catalog's offers (order-independent)."""
    rows = sorted(f"{o.key}|{o.hourly_usd}|{o.as_of}" for o in catalog.offers)
    return "sha256:" + hashlib.sha256("\n".join(rows).encode()).hexdigest()


def write_lock(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_lock(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable lock ({err})") from None
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or isinstance(version, bool) or version not in READABLE_LOCK_VERSIONS:
        expected = " or ".join(str(v) for v in READABLE_LOCK_VERSIONS)
        raise ValueError(f"{path}: not a gpufit lock this gpufit reads (schema_version {expected} expected)")
    for key in ("spec_sha256", "instance_type", "offer", "workload", "fallbacks"):
        if key not in doc:
            raise ValueError(f"{path}: lock lacks {key!r}")
    model = doc.get("model")
    if model is not None and not (
        isinstance(model, dict)
        and isinstance(model.get("hf"), str)
        and HF_REPO.fullmatch(model["hf"])
        and isinstance(model.get("commit"), str)
        and COMMIT.fullmatch(model["commit"])
        and (model.get("revision") is None or isinstance(model.get("revision"), str))
    ):
        raise ValueError(f"{path}: model: expected the Hub repo (org/name) and its full 40-hex commit")
    return doc


def _flex_price(plan: Plan) -> dict[str, Any]:
    """A flex-start choice's billed price (``Catalog.flex_start_prices``), for the replan."""
    assert plan.choice is not None
    offer = plan.choice.offer
    billed = plan.catalog.flex_start_prices.get((offer.instance.name, offer.region))
    if offer.market != "flex-start" or billed is None:
        return {}
    row = {"cloud": offer.cloud, "instance_type": offer.instance.name, "region": offer.region}
    return {"flex_start_prices": [{**row, **asdict(billed)}]}


def locked_catalog(lock: dict[str, Any], gpus: dict[str, GpuSpec]) -> Catalog:
    """A catalog holding exactly the locked offer and its fallbacks at their locked prices, so
    planning the spec against it reproduces the reviewed choice and fallback list."""
    entries = [lock, *lock.get("fallbacks", [])]
    base = [lock["on_demand_base"]["offer"]] if lock.get("on_demand_base") else []
    doc: dict[str, Any] = {
        "schema_version": 1,
        "as_of": lock["catalog"]["as_of"],
        "source": f"lock of {lock['locked_at']} ({lock['catalog']['source']})",
        "sources": lock.get("sources", {}),
        "instance_types": [e["instance_type"] for e in entries],
        "offers": [e["offer"] for e in entries if e["offer"]["market"] in MARKETS] + base,
        "spot_interruption": [
            {
                "cloud": e["offer"]["cloud"],
                "region": e["offer"]["region"],
                "instance_type": e["offer"]["instance_type"],
                "bucket": e["interruption_bucket"],
                "source": e["offer"]["source"],
                "as_of": e["offer"]["as_of"],
            }
            for e in entries
            if e.get("interruption_bucket") and e["offer"]["market"] == "spot"
        ],
    }
    doc["flex_start_prices"] = lock.get("flex_start_prices", [])
    if lock.get("wait_value_per_hour") is not None:
        doc["wait_value_per_hour"] = lock["wait_value_per_hour"]
    return catalog_from_doc(doc, f"lock {lock['workload']}", gpus)


def reviewed_difference(lock: dict[str, Any], replanned: Plan) -> str | None:
    """How the plan of the locked offers differs from what the review saw (machines, zone or
    region, market, price, fallback list), or None when it is the same. Sizing data or code
    that changed since (a preset, a GPU fact, the fallback rules) shows up here."""
    choice = replanned.choice
    if choice is None:
        return f"the locked offers no longer plan ({replanned.status})"
    locked = lock["offer"]
    where = locked.get("zone") or locked["region"]
    seen = (locked["instance_type"], where, lock["instances"], locked["market"])
    now = (
        choice.offer.instance.name,
        choice.offer.zone or choice.offer.region,
        choice.shape.instances,
        choice.offer.market,
    )
    seen_usd, now_usd = round(lock["cost"]["hourly_usd"], 4), round(choice.cost.hourly_usd, 4)
    if (*seen, seen_usd) != (*now, now_usd):
        return (
            f"the locked offer now plans as {now[0]} in {now[1]}, {now[2]} × {now[3]} at ${now_usd}/h, "
            f"but the review saw {seen[0]} in {seen[1]}, {seen[2]} × {seen[3]} at ${seen_usd}/h"
        )
    built = choice.engine.as_dict() if choice.engine is not None else None
    locked_engine = lock.get("engine")
    if built is not None and locked_engine is None:
        label = choice.engine.label if choice.engine is not None else ""
        return f"the plan launches {label}; the lock predates engine pinning"
    if built is not None and locked_engine is not None and (
        (locked_engine.get("version"), locked_engine.get("image")) != (built["version"], built["image"])
    ):
        return (
            f"the plan now launches {built['engine']} {built['version']} ({built['image']}), "
            f"but the review saw {locked_engine.get('engine')} {locked_engine.get('version')} "
            f"({locked_engine.get('image')})"
        )
    sized, reviewed = locked_model(replanned), lock.get("model")
    if sized is not None and (reviewed or {}).get("commit") != sized["commit"]:
        now_at = f"the plan sizes {sized['hf']} at commit {sized['commit']}"
        if reviewed is None:
            return f"{now_at}; the lock predates model commits"
        return f"{now_at}, the review saw {reviewed['commit']}"
    was, is_now = fallback_summary(lock["fallbacks"]), plan_fallbacks(replanned)
    if was != is_now:
        names = ", ".join(f"{t} in {z} ×{w}" for t, z, _, _, w in is_now) or "none"
        return f"the fleet's fallbacks now plan as [{names}], not the reviewed list"
    return None


@dataclass(frozen=True)
class LockStatus:
    spec_file: Path
    lock_file: Path
    state: str  # "current" | "missing" | "stale" | "unreadable"
    detail: str = ""


def check_lock(spec: WorkloadSpec, spec_file: Path) -> LockStatus:
    path = lock_path(spec_file)
    if not path.exists():
        return LockStatus(spec_file, path, "missing", f"run `gpufit lock {spec_file}`")
    try:
        lock = read_lock(path)
    except ValueError as err:
        return LockStatus(spec_file, path, "unreadable", str(err))
    if lock["spec_sha256"] != spec_hash(spec):
        return LockStatus(
            spec_file,
            path,
            "stale",
            f"the spec changed since it was locked; run `gpufit lock {spec_file}` and commit the lock",
        )
    from selector.catalog import load_gpus
    from selector.select import plan

    previous = pin_locked_model(lock)  # the reviewed commit, not where the branch is today
    try:
        replanned = plan(spec, locked_catalog(lock, load_gpus()), block_quotes=locked_quotes(lock))
        difference = reviewed_difference(lock, replanned)
    except (KeyError, TypeError, ValueError) as err:
        return LockStatus(spec_file, path, "unreadable", f"{path}: {err}")
    finally:
        if previous is not None:
            use_hub(previous)
    if difference is not None:
        return LockStatus(
            spec_file, path, "stale", f"{difference}; run `gpufit lock {spec_file}` and review the change"
        )
    return LockStatus(spec_file, path, "current")
