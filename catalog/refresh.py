"""``gpufit catalog refresh``: fetch instance specs and prices from the clouds, merge them
with the previous catalog so a refresh can never leave the user worse off, and report.

Each cloud implements ``CatalogFetcher`` (``catalog/aws.py``, ``catalog/gcp/``); this module
runs them with a bounded thread pool, keeps a failed region's previous offers (marked stale),
flags prices that moved more than ``PRICE_MOVE_FACTOR`` from the previous catalog, checks the
result loads, and writes it.
"""

from __future__ import annotations

import gc
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from cloudapi.calls import AuthError
from selector.catalog import Catalog, catalog_from_doc
from selector.price_rules import apply_to_doc

PRICE_MOVE_FACTOR = 3.0
"""A refreshed price more than 3× above or below the previous one is kept but reported:
real moves that large are rare; API or parsing errors are not."""

DEFAULT_WORKERS = 32
"""Concurrent API calls. A 20-region AWS refresh starts ~30 jobs after its first call (a region's
two calls, and the price queries); at 32 none waits for a worker. Measured against fakes at
150 ms a call: 0.84 s, against 0.96 s at 16; at 50 ms, where client CPU bounds it, 0.42 s at
32, 0.39 s at 20 and 0.46 s at 12 (medians of 8 on a shared 2-core machine, 2026-12-02;
differences within its noise except at 12). Each AWS region sees one call at a time, far
inside EC2's per-region request buckets; price queries are paced to their own quota; a GCP
refresh's ~100 calls sit inside the Compute API's per-minute read quota whatever the
concurrency."""


AWS_AZ_ID = re.compile(r"[a-z]+[0-9]+(?:-[a-z]+[0-9]+)?-az[0-9]+")  # fullmatch
"""An AWS availability-zone ID (``use1-az2``, a Local Zone's ``usw2-lax1-az1``), as catalogs
name AWS zones; a zone name (``us-east-1a``) is account-specific and is not one."""


@dataclass
class FetchResult:
    """What one cloud's fetch produced, in the catalog file's own schema."""

    cloud: str
    instance_types: list[dict[str, Any]] = field(default_factory=list)
    offers: list[dict[str, Any]] = field(default_factory=list)
    regions_ok: set[str] = field(default_factory=set)
    regions_failed: dict[str, str] = field(default_factory=dict)
    kept: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(region, instance type, market) whose fresh prices failed inside a refreshed region:
    the previous offers are kept, marked stale."""
    notes: list[str] = field(default_factory=list)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: int = 0
    zone_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    """AWS: region → zone name → availability-zone ID, as this refresh learnt them (to bring
    previous offers keyed by zone names, from an older refresh, to AZ IDs)."""
    spot_interruption: list[dict[str, Any]] | None = None
    """Fresh interruption-frequency rows (the Spot Instance Advisor); None: not fetched, the
    previous rows stay."""
    flex_start: list[dict[str, Any]] | None = None
    """GCP flex-start (DWS) rates per type and region from the billing catalog (issue 26);
    None: not fetched. Replaces the previous rows of the regions refreshed."""
    placement_scores: list[dict[str, Any]] | None = None
    """Fresh spot placement scores (credentials only); None: not fetched. A cloud's previous
    scores never outlive a refresh of it: a score is a moment's answer."""


class CatalogFetcher(Protocol):
    """One cloud's catalog source. ``fetch`` may run calls concurrently on ``pool``; it
    records regions that failed after their retries in ``regions_failed`` rather than raising,
    and raises ``AuthError`` for credential or permission problems."""

    cloud: str

    def fetch(
        self, regions: list[str] | None, pool: Executor, progress: Callable[[str], None]
    ) -> FetchResult: ...


@dataclass
class RefreshReport:
    doc: dict[str, Any]
    results: list[FetchResult]
    stale_regions: dict[str, str]
    price_moves: list[str]
    useful: bool
    auth_errors: list[str] = field(default_factory=list)
    rules: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """Clouds not refreshed, and why (no credentials or project): their previous offers stay."""

    def lines(self) -> list[str]:
        out = [
            f"{cloud}: not refreshed ({why}); its previous offers kept" for cloud, why in self.skipped.items()
        ]
        for r in self.results:
            out.append(
                f"{r.cloud}: {len(r.regions_ok)} regions refreshed, {len(r.regions_failed)} failed, "
                f"{len(r.instance_types)} instance types, {len(r.offers)} offers, {r.calls} API calls"
            )
            out.extend(f"  {note}" for note in r.notes)
        out.extend(
            f"stale (kept previous prices): {key}: {why}" for key, why in sorted(self.stale_regions.items())
        )
        out.extend(f"price moved: {line}" for line in self.price_moves)
        if self.rules:
            out.append(
                f"price rules: {self.rules.get('not-sold', 0)} offers dropped (type not sold in that "
                "market), "
                f"{self.rules.get('unpriced', 0)} kept but never priced (spot floor, per-GPU floor, marked "
                f"suspect), {self.rules.get('unconfirmed', 0)} in an unconfirmed market (low confidence)"
            )
        if self.rules.get("under-floor-on-demand"):
            out.append(
                f"WARNING: {self.rules['under-floor-on-demand']} on-demand list price(s) under gpufit's "
                "estimated per-GPU floor, kept priced (a price cut?): "
                "re-derive selector/data/price_floors.yaml"
            )
        return out


def _offer_key(offer: dict[str, Any]) -> tuple[Any, ...]:
    return (offer["cloud"], offer["instance_type"], offer["region"], offer.get("zone"), offer["market"])


def price_moves(
    previous: Iterable[dict[str, Any]], fresh: Iterable[dict[str, Any]], factor: float
) -> list[str]:
    """Offers whose price moved by more than ``factor`` either way."""
    before = {_offer_key(o): float(o["hourly_usd"]) for o in previous}
    moves = []
    for offer in fresh:
        old = before.get(_offer_key(offer))
        new = float(offer["hourly_usd"])
        if old and (new > old * factor or new < old / factor):
            cloud, name, region, zone, market = _offer_key(offer)
            moves.append(f"{cloud} {name} {zone or region} {market}: ${old:.4g}/h -> ${new:.4g}/h")
    return moves


def with_az_ids(offer: dict[str, Any], ids: dict[str, str] | None) -> dict[str, Any] | None:
    """An AWS offer of a previous catalog with its zones as AZ IDs: as it is when they are
    already, else translated by ``ids`` (zone name → AZ ID, this refresh's); None when a zone
    name cannot be translated (an older refresh wrote names, and the region's IDs are not
    known now): such an offer is left out rather than mixing names with IDs."""
    zone = offer.get("zone")
    zones = offer.get("zones") or []
    named = [z for z in (zone, *zones) if z is not None and not AWS_AZ_ID.fullmatch(z)]
    if not named:
        return offer
    if ids is None or any(z not in ids for z in named):
        return None
    known = ids

    def az_id(z: str) -> str:
        return z if AWS_AZ_ID.fullmatch(z) else known[z]

    out = dict(offer)
    if zone is not None:
        out["zone"] = az_id(zone)
        out["zones"] = [out["zone"]]
    else:
        out["zones"] = sorted({az_id(z) for z in zones})
    return out


def merge(
    previous: dict[str, Any],
    results: list[FetchResult],
    now: datetime,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The new catalog document: fresh data where a region was refreshed, the previous data
    (marked stale) where it failed, and everything of clouds not refreshed, untouched."""
    refreshed_clouds = {r.cloud for r in results}
    ok = {(r.cloud, region) for r in results for region in r.regions_ok}
    failed = {(r.cloud, region): why for r in results for region, why in r.regions_failed.items()}
    everywhere = {r.cloud: r.regions_failed["*"] for r in results if "*" in r.regions_failed}
    for offer in previous.get("offers", []):  # "*": every region of that cloud not refreshed failed
        where = (offer["cloud"], offer["region"])
        if offer["cloud"] in everywhere and where not in ok:
            failed.setdefault(where, everywhere[offer["cloud"]])
    types: dict[tuple[str, str], dict[str, Any]] = {
        (t["cloud"], t["name"]): t for t in previous.get("instance_types", [])
    }
    for r in results:
        for t in r.instance_types:
            key = (t["cloud"], t["name"])
            old = types.get(key, {})
            # An API that does not report a spec (local NVMe, network) keeps the previous figure.
            types[key] = {**t, **{k: v for k, v in old.items() if t.get(k) is None and v is not None}}
    offers: list[dict[str, Any]] = []
    stale: dict[str, str] = {}
    partial = {(r.cloud, *key): why for r in results for key, why in r.kept.items()}
    zone_ids = {(r.cloud, region): ids for r in results for region, ids in r.zone_ids.items()}
    dropped: dict[str, int] = {}
    for offer in previous.get("offers", []):
        where = (offer["cloud"], offer["region"])
        part = (offer["cloud"], offer["region"], offer["instance_type"], offer["market"])
        if offer["cloud"] in refreshed_clouds and where in ok and part not in partial:
            continue
        if offer["cloud"] == "aws":
            translated = with_az_ids(offer, zone_ids.get(where))
            if translated is None:
                dropped[offer["region"]] = dropped.get(offer["region"], 0) + 1
                continue
            offer = translated
        kept = dict(offer)
        reason = failed.get(where) or partial.get(part)
        if reason is not None:
            kept["stale"] = True
            kept["notes"] = (kept.get("notes", "") + f" stale: refresh failed {now:%Y-%m-%d}").strip()
            stale[f"{where[0]}:{where[1]}"] = reason
        offers.append(kept)
    for r in results:
        offers.extend(r.offers)
    sources = dict(previous.get("sources", {}))
    for r in results:
        sources.update(r.sources)
    used_types = {(o["cloud"], o["instance_type"]) for o in offers}
    doc: dict[str, Any] = {
        "schema_version": 1,
        "as_of": now.strftime("%Y-%m-%d"),
        "generated_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": "refresh "
        + "+".join(sorted(refreshed_clouds))
        + f" over {previous.get('source', 'snapshot')}",
        "sources": sources,
        "instance_types": sorted(
            (t for key, t in types.items() if key in used_types), key=lambda t: (t["cloud"], t["name"])
        ),
        "offers": sorted(
            offers,
            key=lambda o: (o["cloud"], o["instance_type"], o["region"], o.get("zone") or "", o["market"]),
        ),
        "spot_interruption": _interruptions(previous, results),
        "flex_start_prices": [
            f for f in previous.get("flex_start_prices", []) if (f["cloud"], f["region"]) not in ok
        ]
        + [f for r in results for f in r.flex_start or []],
        "spot_placement_scores": [
            s
            for s in previous.get("spot_placement_scores", [])
            if s.get("cloud") not in refreshed_clouds
        ]
        + [s for r in results for s in r.placement_scores or []],
        "refresh": {
            "regions_ok": sorted(f"{c}:{r}" for c, r in ok),
            "regions_stale": stale,
        },
    }
    if dropped:
        doc["refresh"]["dropped_zone_names"] = {f"aws:{r}": n for r, n in sorted(dropped.items())}
    # A refresh never brings back an offer its type is not sold as (a3-highgpu-4g on demand).
    doc["refresh"]["rules"] = apply_to_doc(doc)
    return doc, stale


def _interruptions(previous: dict[str, Any], results: list[FetchResult]) -> list[dict[str, Any]]:
    """The previous interruption rows, each replaced by a fresh one for the same cloud, region
    and type where a refresh fetched them."""
    rows = {(e["cloud"], e["region"], e["instance_type"]): e for e in previous.get("spot_interruption", [])}
    for r in results:
        for e in r.spot_interruption or []:
            rows[(e["cloud"], e["region"], e["instance_type"])] = e
    return [rows[k] for k in sorted(rows)]


class CollectorPause:
    """The cyclic garbage collector paused while refreshes run (``with collector_paused():``).

    A refresh allocates hundreds of thousands of objects: short-lived ones (botocore's per-call
    machinery, parsed answers), which reference counting frees, and long-lived ones (each
    session's endpoint and model data, each client), which every young-generation collection
    they trigger walks again until they reach the oldest generation. Measured on a 2-core
    machine over a 20-region AWS refresh: with the collector running, collections took
    22–40 ms of its ~0.5 s of CPU (82 collections, 6 of them of the middle generation walking
    the session's data); paused, none.

    The collector is process-wide, so it is paused for every thread of the process while any
    refresh runs; pauses nest (the last one out resumes it), and a collector the caller had
    paused stays paused. Resuming plainly would make the next young collection walk every
    survivor at once; so the first time in a process, the survivors are instead frozen and
    unfrozen (``gc.freeze``, ``gc.unfreeze``), which files them in the oldest generation,
    walked only by full collections (with them, any object of the process's other threads
    still in a younger generation: harmless, it ages the same way). Objects filed that way do
    not count towards the collector's trigger for its next full collection, so the refresh's
    cyclic leftovers (~20,000 objects for 20 AWS regions) wait for one: once per process
    that is harmless, but repeated it would let garbage pile up in a long-running process;
    so later pauses resume plainly, and their survivors age through the generations as any
    object does. Nor is it done when the caller has frozen objects of its own, which
    ``gc.unfreeze`` would thaw."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False
        self._filed_once = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    if not self._filed_once and gc.get_freeze_count() == 0:
                        gc.freeze()
                        gc.unfreeze()
                        self._filed_once = True
                    if self._resume:
                        gc.enable()


collector_paused = CollectorPause()
"""The process's one ``CollectorPause``: every refresh pauses the collector through it."""


def refresh(
    fetchers: list[CatalogFetcher],
    previous: Catalog,
    previous_doc: dict[str, Any],
    regions: list[str] | None = None,
    workers: int = DEFAULT_WORKERS,
    now: datetime | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> RefreshReport:
    """Run the fetchers and build the merged catalog (not yet written)."""
    now = now or datetime.now(UTC)
    results: list[FetchResult] = []
    auth_errors: list[str] = []
    with collector_paused():
        with (
            ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="gpufit-refresh") as pool,
            ThreadPoolExecutor(
                max_workers=max(1, len(fetchers)), thread_name_prefix="gpufit-cloud"
            ) as clouds,
        ):
            jobs = [clouds.submit(fetcher.fetch, regions, pool, progress) for fetcher in fetchers]
            for job in jobs:
                try:
                    results.append(job.result())
                except AuthError as error:  # this cloud stops; the others' results still count
                    auth_errors.append(str(error))
        doc, stale = merge(previous_doc, results, now)
        dropped = doc["refresh"].get("dropped_zone_names")
        for r in results:
            if r.cloud == "aws" and dropped:
                r.notes.append(
                    f"left out {sum(dropped.values())} previous offers keyed by zone names (an older "
                    f"refresh) whose AZ IDs are not known now: {', '.join(sorted(dropped))}"
                )
        catalog_from_doc(doc, "refreshed catalog", previous.gpus)  # the result must load
        moves = price_moves(
            previous_doc.get("offers", []), [o for r in results for o in r.offers], PRICE_MOVE_FACTOR
        )
    useful = any(r.offers for r in results)
    return RefreshReport(
        doc=doc,
        results=results,
        stale_regions=stale,
        price_moves=moves,
        useful=useful,
        auth_errors=auth_errors,
        rules=dict(doc["refresh"]["rules"]),
    )
