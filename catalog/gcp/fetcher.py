"""Refresh GCP GPU machine types and prices from the Compute Engine and Cloud Billing APIs.

Per region, concurrently on the caller's pool: ``machineTypes.aggregatedList`` (the GPU families
A2, A3, A4, G2 and the N1 hosts GPUs attach to) and ``acceleratorTypes.aggregatedList`` (which
GPUs a zone can attach to an N1 VM, and how many), each filtered server-side to the region's
zones; the zones come from the aggregated results' scope keys. Alongside, once for all regions,
the Compute Engine SKUs of the Cloud Billing Catalog (``services.skus.list``), which price a
machine type by its parts: per vCPU-hour and per GiB-hour of the machine family, and per
GPU-hour of the accelerator. A machine type is priced in a region and market only when every
part has a SKU there; SKU descriptions are parsed as data that changes, and what cannot be
attributed is reported in the notes, never guessed. Prices are per region, so each offer is
region-level (``zone`` null) and lists in ``zones`` the zones whose listings hold the machine
type (an N1 combination: the host and the accelerator type, with enough cards). GPU names
resolve through the selector's GPU facts; a machine type whose GPU is not there is reported
and left out.

Every HTTP call (each page of a listing) is its own tenacity-retried call: exponential backoff
with full jitter on 429, 5xx and transport errors (never shorter than a Retry-After), within
``max_attempts`` and ``max_seconds``; 401/403 raise ``AuthError`` at once, naming the
permission, and stop the other calls' retries. The Google clients' own retry layer is switched
off (``retry=None``) so that every attempt is counted and every sleep injectable. Pages are
fetched one request at a time (``page_token`` in, ``next_page_token`` out) rather than through
the client's pager, whose later pages would be fetched outside the retry.

What fails lands in ``FetchResult.regions_failed`` instead of raising: a region whose listing
fails for good or reports an unreachable zone; every region when the billing catalog cannot be
read; ``"*"`` when the region list itself cannot be had. A region that lists no GPU or N1
machine type at all is in neither ``regions_ok`` nor ``regions_failed`` (noted), so that an
empty answer never drops the offers an earlier catalog holds for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, as_completed
from datetime import UTC, date, datetime
from typing import Any

from catalog.gcp.client import CallFailed, GcpCatalogClient
from catalog.gcp.machine_types import (
    N1_HOSTS,
    N1_LIMITS,
    SOURCE_COMPUTE,
    SOURCES_STATIC,
    Listing,
    MachineType,
    bundled_type,
    n1_type,
)
from catalog.gcp.prices import EXAMPLES, FLEX_START, SOURCE_BILLING, PriceBook, gpu_key, price_offer
from catalog.refresh import FetchResult
from cloudapi.calls import AuthError, CallCounter
from cloudapi.gcp import (
    BILLING_ENDPOINT_ENV,
    COMPUTE_ENDPOINT_ENV,
    GCP_REGION,
    PROJECT_ENV,
    CredentialSource,
    check_endpoint,
)
from selector.catalog import gpu_by_alias, load_gpus

FLEX_ROW_KEYS = ("cloud", "instance_type", "region", "hourly_usd", "source", "as_of", "notes")
"""A ``flex_start_prices`` row of the catalog document (``selector.catalog``)."""


class GcpCatalogFetcher(GcpCatalogClient):
    """Fetches the GCP part of a catalog through the Compute Engine and Cloud Billing REST APIs."""

    cloud = "gcp"

    def __init__(
        self,
        project: str | None = None,
        compute_endpoint: str | None = None,
        billing_endpoint: str | None = None,
        counter: CallCounter | None = None,
        max_attempts: int = 5,
        max_seconds: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        today: Callable[[], date] | None = None,
        request_timeout: float = 30.0,
        max_wait: float = 16.0,
    ) -> None:
        self._compute_endpoint, self._compute_loopback = check_endpoint(
            compute_endpoint if compute_endpoint is not None else os.environ.get(COMPUTE_ENDPOINT_ENV),
            "compute",
        )
        self._billing_endpoint, self._billing_loopback = check_endpoint(
            billing_endpoint if billing_endpoint is not None else os.environ.get(BILLING_ENDPOINT_ENV),
            "billing",
        )
        project = project or os.environ.get(PROJECT_ENV)
        if not project:
            raise AuthError("no GCP project: set GOOGLE_CLOUD_PROJECT or pass --project")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.project = project
        self.counter = counter or CallCounter()
        self._max_attempts = max_attempts
        self._max_seconds = max_seconds
        self._sleep = sleep
        self._today = today or (lambda: datetime.now(UTC).date())
        self._timeout = min(request_timeout, max_seconds)
        self._max_wait = max_wait
        self._gpus = load_gpus()
        self._local = threading.local()
        self._creds = CredentialSource()
        self._abort = threading.Event()
        self._calls = CallCounter()

    # -- fetch ------------------------------------------------------------------------------
    def fetch(
        self, regions: list[str] | None, pool: Executor, progress: Callable[[str], None]
    ) -> FetchResult:
        self._abort.clear()
        start_calls = self._calls.count
        today = self._today().isoformat()
        result = FetchResult(cloud=self.cloud)
        result.sources = {
            SOURCE_BILLING: {
                "title": "Cloud Billing Catalog API, Compute Engine SKUs",
                "url": "https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list",
                "retrieved": today,
            },
            SOURCE_COMPUTE: {
                "title": "Compute Engine API, machineTypes and acceleratorTypes aggregatedList",
                "url": "https://cloud.google.com/compute/docs/reference/rest/v1/machineTypes/aggregatedList",
                "retrieved": today,
            },
            **SOURCES_STATIC,
        }
        # Credentials first, in this thread: a missing login is one clear error, not one per task.
        self._credentials(self._compute_loopback)
        self._credentials(self._billing_loopback)

        if regions is None:
            progress("gcp: listing regions")
            try:
                wanted = self._list_regions()
            except CallFailed as error:
                result.regions_failed["*"] = str(error)
                result.notes.append(f"could not list regions, nothing refreshed: {error}")
                result.calls = self._calls.count - start_calls
                return result
        else:
            wanted = sorted(dict.fromkeys(r for r in regions if GCP_REGION.fullmatch(r)))
            ignored = sorted(set(regions) - set(wanted))
            if ignored:
                result.notes.append(f"ignored names that are not GCP regions: {', '.join(ignored)}")
        if not wanted:
            result.calls = self._calls.count - start_calls
            return result

        progress(f"gcp: {len(wanted)} regions: listing machine types, accelerator types and billing SKUs")
        tasks: dict[Future[Any], tuple[str, str]] = {
            pool.submit(self._list_skus, set(wanted)): ("billing", "")
        }
        for region in wanted:
            tasks[pool.submit(self._list_machine_types, region)] = ("machine_types", region)
            tasks[pool.submit(self._list_accelerator_types, region)] = ("accelerator_types", region)

        book: PriceBook | None = None
        billing_failure = ""
        listings: dict[str, list[Listing]] = {region: [] for region in wanted}
        failed: dict[str, str] = {}
        try:
            for future in as_completed(tasks):
                kind, region = tasks[future]
                try:
                    value = future.result()
                except CallFailed as error:
                    if kind == "billing":
                        billing_failure = str(error)
                        progress(f"gcp: billing SKUs failed: {error}")
                    else:
                        failed.setdefault(region, str(error))
                        progress(f"gcp: {region}: failed: {error}")
                    continue
                if kind == "billing":
                    book = value
                    progress(f"gcp: billing: {value.skus} SKUs in {value.pages} pages")
                else:
                    listings[region].append(value)
                    if len(listings[region]) == 2:
                        progress(f"gcp: {region}: machine and accelerator types listed")
        except BaseException:
            self._abort.set()
            for future in tasks:
                future.cancel()
            raise

        if any(listing.filter_rejected for group in listings.values() for listing in group):
            result.notes.append(
                "the Compute API rejected the zone/name filter; listings were filtered here instead"
            )
        for region, group in listings.items():
            unreachable = sorted({z for listing in group for z in listing.unreachable})
            if region not in failed and unreachable:
                failed[region] = f"zones unreachable: {', '.join(unreachable)}"
            if region not in failed and billing_failure:
                failed[region] = f"billing SKUs unavailable: {billing_failure}"
        result.regions_failed = {region: failed[region] for region in wanted if region in failed}
        # A region that lists no GPU or N1 machine type at all is left out of regions_ok: its
        # previous offers, if any, stay as they were rather than being dropped on an empty answer.
        unknown = [r for r in wanted if r not in failed and not any(g.zones for g in listings[r])]
        bare = [
            r
            for r in wanted
            if r not in failed and r not in unknown and not any(g.machine_types for g in listings[r])
        ]
        if unknown:
            result.notes.append(f"no zones listed for {', '.join(unknown)} (not a region of this project?)")
        if bare:
            result.notes.append(f"no GPU or N1 machine types listed in {', '.join(bare)}; left as they were")
        ok = [r for r in wanted if r not in failed and r not in unknown and r not in bare]
        if book is not None and ok:
            progress(f"gcp: pricing {len(ok)} regions")
            self._price(ok, listings, book, today, result)
        result.regions_ok = set(ok)
        result.calls = self._calls.count - start_calls
        progress(
            f"gcp: {len(result.instance_types)} instance types, {len(result.offers)} offers, "
            f"{len(result.regions_failed)} regions failed, {result.calls} API calls"
        )
        return result

    # -- pricing ----------------------------------------------------------------------------
    def _price(
        self,
        regions: list[str],
        listings: dict[str, list[Listing]],
        book: PriceBook,
        today: str,
        result: FetchResult,
    ) -> None:
        types: dict[str, dict[str, Any]] = {}
        shapes: dict[str, MachineType] = {}
        unknown_gpu: dict[str, str] = {}
        odd_shapes: set[str] = set()
        unpriced: list[str] = []
        used_gpus: set[str] = set()
        bundled_accelerators: set[str] = set()
        unlimited: set[str] = set()
        offers: list[dict[str, Any]] = []
        flex_start: list[dict[str, Any]] = []

        for region in regions:
            machine_types = sorted(
                (mt for listing in listings[region] for mt in listing.machine_types),
                key=lambda m: (m.name, m.zone),
            )
            zones_accels: dict[str, dict[str, int]] = {}
            for listing in listings[region]:
                for zone, accels in listing.accelerators.items():
                    zones_accels.setdefault(zone, {}).update(accels)
            bundled_accelerators.update(a for mt in machine_types for a, _ in mt.accelerators)

            # (instance name, machine type, accelerator, count) offered in this region
            offered: dict[str, tuple[MachineType, str, int]] = {}
            zones: dict[str, set[str]] = {}  # instance name -> the zones that list it
            for mt in machine_types:
                first = shapes.setdefault(mt.name, mt)
                if first.shape != mt.shape:
                    odd_shapes.add(mt.name)
                if mt.name in N1_HOSTS:
                    continue
                if len(mt.accelerators) != 1:
                    continue  # a GPU family shape without exactly one GPU model: nothing to price by
                accelerator, count = mt.accelerators[0]
                spec = gpu_by_alias(self._gpus, accelerator)
                if spec is None:
                    unknown_gpu[mt.name] = accelerator
                    continue
                if mt.name not in types:
                    types[mt.name] = bundled_type(first, spec, accelerator, count)
                offered.setdefault(mt.name, (first, accelerator, count))
                zones.setdefault(mt.name, set()).add(mt.zone)

            hosts_by_zone: dict[str, list[MachineType]] = {}
            for mt in machine_types:
                if mt.name in N1_HOSTS:
                    hosts_by_zone.setdefault(mt.zone, []).append(mt)
            for zone, hosts in sorted(hosts_by_zone.items()):
                for accelerator, max_cards in sorted(zones_accels.get(zone, {}).items()):
                    limits = N1_LIMITS.get(accelerator)
                    if limits is None:
                        unlimited.add(accelerator)
                        continue
                    spec = gpu_by_alias(self._gpus, accelerator)
                    if spec is None:
                        unknown_gpu[f"n1 + {accelerator}"] = accelerator
                        continue
                    for host in hosts:
                        for count, (max_vcpus, max_gib) in sorted(limits.items()):
                            if count > max_cards or host.vcpus > max_vcpus or host.memory_gib > max_gib:
                                continue
                            short = accelerator.removeprefix("nvidia-").removeprefix("tesla-")
                            name = f"{host.name}+{short}x{count}"
                            host_shape = shapes.setdefault(host.name, host)
                            if name not in types:
                                types[name] = n1_type(
                                    name, host_shape, spec, accelerator, count, limits[count]
                                )
                            offered.setdefault(name, (host_shape, accelerator, count))
                            zones.setdefault(name, set()).add(zone)  # host and GPU both listed

            for name, (mt, accelerator, count) in sorted(offered.items()):
                used_gpus.add(gpu_key(accelerator))
                for market in ("on-demand", "spot"):
                    offer = price_offer(
                        name, mt, accelerator, count, region, sorted(zones[name]), market, book, today
                    )
                    if isinstance(offer, str):
                        unpriced.append(f"{name} {region} {market} ({offer})")
                    else:
                        offers.append(offer)
                # issue 26: the flex-start rate where every part has a DWS SKU (else the
                # selector's per-series estimate stands)
                flex = price_offer(name, mt, accelerator, count, region, [], FLEX_START, book, today)
                if not isinstance(flex, str):
                    flex_start.append({k: flex[k] for k in FLEX_ROW_KEYS})

        priced = {o["instance_type"] for o in offers}
        result.instance_types = [types[name] for name in sorted(types) if name in priced]
        result.offers = offers
        result.flex_start = flex_start
        notes = result.notes
        if flex_start:
            notes.append(f"flex-start (DWS Defined Duration SKUs): {len(flex_start)} type/region rates")
        if unknown_gpu:
            listed = ", ".join(f"{name} ({gpu})" for name, gpu in sorted(unknown_gpu.items()))
            notes.append(f"left out, GPU not in the GPU facts table: {listed}")
        unused = sorted(unlimited - bundled_accelerators)
        if unused:
            notes.append(
                "accelerator types not combined with N1 hosts (no vCPU/memory limits known): "
                + ", ".join(unused)
            )
        if odd_shapes:
            notes.append(
                "machine types whose specs differ between zones (first zone's kept): "
                + ", ".join(sorted(odd_shapes))
            )
        if unpriced:
            notes.append(
                f"unpriced (a part had no SKU; never guessed): {len(unpriced)} machine type/region/market "
                f"combinations, e.g. {'; '.join(unpriced[:EXAMPLES])}"
            )
        if book.conflicts:
            listed = "; ".join(
                f"{part} {key} {region} {market} ({', '.join(r.sku for r in rates)})"
                for (part, key, region, market), rates in sorted(book.conflicts.items())[:EXAMPLES]
            )
            notes.append(
                f"billing: {len(book.conflicts)} parts have conflicting SKUs at the same scope "
                f"(left unpriced), e.g. {listed}"
            )
        if book.unattributed:
            groups = ", ".join(f"{group} {n}" for group, n in sorted(book.unattributed.items()))
            notes.append(
                f"billing: {sum(book.unattributed.values())} CPU/RAM/GPU SKUs not attributed ({groups}), "
                f"e.g. {'; '.join(book.unattributed_examples)}"
            )
        stray = sorted(desc for key, desc in book.gpu_models.items() if key not in used_gpus)
        if stray:
            notes.append(
                f"billing: {len(stray)} GPU SKU models match no accelerator listed in these regions, "
                f"e.g. {'; '.join(repr(d) for d in stray[:EXAMPLES])}"
            )
