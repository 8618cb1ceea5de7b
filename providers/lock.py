"""Reviewed plans pinned in lock files: ``stacks/<stack>.lock.json``.

A lock holds the chosen offer (with its instance type, price and source), the cost the
review saw, a hash of the validated spec and the catalog's identity. The Pulumi program
provisions the locked choice when the spec still hashes the same, so ``pulumi up`` applies
what the pull request showed even if prices moved since; a spec changed without re-locking
fails with a clear message. No cloud SDK is imported here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from selector.catalog import Catalog, Offer, catalog_from_doc
from selector.report import cost_to_dict
from selector.select import Plan
from selector.spec import WorkloadSpec

LOCK_SCHEMA_VERSION = 1
LOCK_SUFFIX = ".lock.json"


def spec_hash(spec: WorkloadSpec) -> str:
    """SHA-256 of the validated spec's canonical JSON: formatting and comments do not count,
    any change of meaning does."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
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
    source_ref = plan.catalog.sources.get(offer.source, {})
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
        "sources": {offer.source: source_ref} if source_ref else {},
        "instances": choice.shape.instances,
        "cost": cost_to_dict(choice.cost),
    }


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
    if not isinstance(doc, dict) or doc.get("schema_version") != LOCK_SCHEMA_VERSION:
        raise ValueError(f"{path}: not a gpufit lock (schema_version {LOCK_SCHEMA_VERSION} expected)")
    for key in ("spec_sha256", "instance_type", "offer", "workload"):
        if key not in doc:
            raise ValueError(f"{path}: lock lacks {key!r}")
    return doc


def locked_catalog(lock: dict[str, Any], base: Catalog) -> Catalog:
    """A one-offer catalog holding exactly the locked offer at its locked price, so planning
    the spec against it reproduces the reviewed choice."""
    offer = lock["offer"]
    doc = {
        "schema_version": 1,
        "as_of": lock["catalog"]["as_of"],
        "source": f"lock of {lock['locked_at']} ({lock['catalog']['source']})",
        "sources": lock.get("sources", {}),
        "instance_types": [lock["instance_type"]],
        "offers": [offer],
        "spot_interruption": (
            [
                {
                    "cloud": offer["cloud"],
                    "region": offer["region"],
                    "instance_type": offer["instance_type"],
                    "bucket": lock["interruption_bucket"],
                    "source": offer["source"],
                    "as_of": offer["as_of"],
                }
            ]
            if lock.get("interruption_bucket") and offer["market"] == "spot"
            else []
        ),
    }
    return catalog_from_doc(doc, f"lock {lock['workload']}", base.gpus)


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
    return LockStatus(spec_file, path, "current")
