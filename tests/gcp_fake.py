"""A local fake of the Compute Engine and Cloud Billing REST APIs, for the GCP catalog tests.

It serves the JSON the real services do (camelCase fields, aggregated lists keyed by
``zones/ZONE`` with per-scope warnings, ``nextPageToken`` pagination, Google's error
envelope) on 127.0.0.1, records every request, and fails requests on demand (``fail``).
Routes (what the google-cloud-compute and google-cloud-billing REST transports call):

  GET /compute/v1/projects/{project}/regions
  GET /compute/v1/projects/{project}/aggregated/machineTypes      (filter, pageToken)
  GET /compute/v1/projects/{project}/aggregated/acceleratorTypes  (filter, pageToken)
  GET /v1/services/{service}/skus                                 (currencyCode, pageSize, pageToken)

Filters are honoured the way Compute documents its regular-expression form: ``field eq "RE2"``
terms, each in parentheses when there are several, each matched against the whole field.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.http import FakeHandler

API = "https://www.googleapis.com/compute/v1"
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}


# ------------------------------------------------------------------ resource builders


def stable_id(*parts: object, digits: int = 12) -> str:
    """A deterministic numeric id (``hash()`` of a str changes between runs)."""
    return str(int(hashlib.sha256(repr(parts).encode()).hexdigest(), 16) % 10**digits)


def machine_type(
    project: str,
    zone: str,
    name: str,
    cpus: int,
    memory_mb: int,
    accelerator: str | None = None,
    count: int = 0,
    deprecated: str | None = None,
) -> dict[str, Any]:
    """A ``compute#machineType`` as the REST API returns it."""
    item: dict[str, Any] = {
        "kind": "compute#machineType",
        "id": stable_id(zone, name),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": name,
        "description": f"{cpus} vCPUs, {memory_mb / 1024:g} GB RAM",
        "guestCpus": cpus,
        "memoryMb": memory_mb,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "selfLink": f"{API}/projects/{project}/zones/{zone}/machineTypes/{name}",
        "isSharedCpu": False,
        "architecture": "X86_64",
    }
    if accelerator:
        item["accelerators"] = [{"guestAcceleratorType": accelerator, "guestAcceleratorCount": count}]
    if deprecated:
        item["deprecated"] = {"state": deprecated, "replacement": f"{API}/projects/{project}/zones/{zone}/x"}
    return item


def accelerator_type(project: str, zone: str, name: str, max_cards: int) -> dict[str, Any]:
    """A ``compute#acceleratorType``; its ``zone`` is a URL, as the real API returns it."""
    return {
        "kind": "compute#acceleratorType",
        "id": stable_id(zone, name),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": name,
        "description": name.replace("-", " ").upper(),
        "zone": f"{API}/projects/{project}/zones/{zone}",
        "selfLink": f"{API}/projects/{project}/zones/{zone}/acceleratorTypes/{name}",
        "maximumCardsPerInstance": max_cards,
    }


def sku(
    description: str,
    group: str,
    usage: str,
    regions: list[str],
    usd: float,
    unit: str = "h",
    sku_id: str | None = None,
) -> dict[str, Any]:
    """A Cloud Billing ``Sku``: the price as units + nanos of USD per ``unit``."""
    units = int(usd)
    nanos = round((usd - units) * 1e9)
    sku_id = (
        sku_id or hashlib.sha256(repr((description, usage, regions, usd)).encode()).hexdigest()[:12].upper()
    )
    sku_id = f"{sku_id[:4]}-{sku_id[4:8]}-{sku_id[8:12]}"
    unit_text = {
        "h": ("hour", "s", "second", 3600),
        "GiBy.h": ("gibibyte hour", "By.s", "byte second", 3.865e12),
    }
    unit_description, base_unit, base_description, factor = unit_text.get(unit, (unit, unit, unit, 1))
    return {
        "name": f"services/6F81-5844-456A/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                    "usageUnitDescription": unit_description,
                    "baseUnit": base_unit,
                    "baseUnitDescription": base_description,
                    "baseUnitConversionFactor": factor,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-12-01T08:00:00.000Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL", "regions": regions},
    }


# ------------------------------------------------------------------ the server


@dataclass
class Fault:
    route: str  # "regions" | "machineTypes" | "acceleratorTypes" | "skus"
    status: int
    times: int | None  # None: every matching request
    region: str | None = None  # only compute requests filtered to this region
    page_token: str | None = None  # only the request for this page
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None  # sent as is instead of Google's JSON error envelope


@dataclass(frozen=True)
class Seen:
    route: str
    query: dict[str, str]
    region: str | None
    status: int


class FakeGcp:
    """The fake APIs' data, faults and request log; ``with FakeGcp(...) as fake`` serves them."""

    def __init__(
        self,
        project: str,
        regions: dict[str, list[str]],
        machine_types: list[dict[str, Any]],
        accelerator_types: list[dict[str, Any]],
        skus: list[dict[str, Any]],
        scopes_per_page: int = 2,
        regions_per_page: int = 2,
        skus_per_page: int = 4,
    ) -> None:
        self.project = project
        self.regions = regions  # region -> zones
        self.machine_types = machine_types
        self.accelerator_types = accelerator_types
        self.skus = skus
        self.scopes_per_page = scopes_per_page
        self.regions_per_page = regions_per_page
        self.skus_per_page = skus_per_page
        self.unreachable_zones: set[str] = set()
        self.reject_filters = False
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control ------------------------------------------------------------------------
    def fail(
        self,
        route: str,
        status: int,
        times: int | None = 1,
        region: str | None = None,
        page_token: str | None = None,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> None:
        self.faults.append(Fault(route, status, times, region, page_token, headers or {}, body))

    def requests(self, route: str, region: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.route == route and (region is None or s.region == region)]

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> FakeGcp:
        fake = self

        class Handler(FakeHandler):
            def do_GET(self) -> None:
                status, body, headers = fake.handle(self.path)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_body(status, data, "application/json; charset=UTF-8", headers)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-gcp", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- requests -----------------------------------------------------------------------
    def handle(self, raw_path: str) -> tuple[int, dict[str, Any] | str, dict[str, str]]:
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        route, project = self._route(parts.path)
        if route is None:
            return self._error(404, f"The requested URL {parts.path} was not found")
        try:
            filters = parse_filter(query.get("filter", ""))
        except ValueError as error:
            return self._error(400, str(error))
        region = self._filtered_region(filters) if route in ("machineTypes", "acceleratorTypes") else None
        with self._lock:
            fault = self._take_fault(route, region, query.get("pageToken", ""))
            status = fault.status if fault else 200
            self.seen.append(Seen(route, query, region, status))
        if fault is not None:
            if fault.body is not None:
                return fault.status, fault.body, fault.headers
            status, body, headers = self._error(fault.status, f"injected {fault.status}")
            return status, body, {**headers, **fault.headers}
        if route != "skus" and project != self.project:
            return self._error(404, f"The resource 'projects/{project}' was not found")
        if route == "regions":
            return self._regions(query)
        if route == "skus":
            return self._skus(query)
        if self.reject_filters and query.get("filter"):
            return self._error(400, "Invalid value for field 'filter'")
        return self._aggregated(route, query, filters)

    @staticmethod
    def _route(path: str) -> tuple[str | None, str]:
        match = re.fullmatch(
            r"/compute/v1/projects/([^/]+)/(regions|aggregated/machineTypes|aggregated/acceleratorTypes)",
            path,
        )
        if match:
            return match.group(2).removeprefix("aggregated/"), match.group(1)
        match = re.fullmatch(r"/v1/services/([^/]+)/skus", path)
        if match and match.group(1) == "6F81-5844-456A":
            return "skus", ""
        return None, ""

    def _take_fault(self, route: str, region: str | None, token: str) -> Fault | None:
        for fault in self.faults:
            if fault.route != route or (fault.times is not None and fault.times <= 0):
                continue
            if fault.region is not None and fault.region != region:
                continue
            if fault.page_token is not None and fault.page_token != token:
                continue
            if fault.times is not None:
                fault.times -= 1
            return fault
        return None

    def _filtered_region(self, filters: dict[str, re.Pattern[str]]) -> str | None:
        zone = filters.get("zone")
        if zone is None:
            return None
        for region, zones in self.regions.items():
            if any(
                zone.fullmatch(z) or zone.fullmatch(f"{API}/projects/{self.project}/zones/{z}") for z in zones
            ):
                return region
        return None

    @staticmethod
    def _error(status: int, message: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {
            "error": {
                "code": status,
                "message": message,
                "errors": [
                    {"message": message, "domain": "global", "reason": STATUS_NAMES.get(status, "error")}
                ],
                "status": STATUS_NAMES.get(status, "UNKNOWN"),
            }
        }
        return status, body, {}

    def _page(self, items: list[Any], size: int, token: str, kind: str) -> tuple[list[Any], str] | None:
        """One page and the next token; None for a token this server never issued."""
        if token:
            match = re.fullmatch(rf"{kind}-(\d+)", token)
            if not match:
                return None
            start = int(match.group(1))
        else:
            start = 0
        end = start + size
        return items[start:end], (f"{kind}-{end}" if end < len(items) else "")

    def _regions(self, query: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        items = [
            {
                "kind": "compute#region",
                "id": str(1000 + i),
                "name": name,
                "description": name,
                "status": "UP",
                "zones": [f"{API}/projects/{self.project}/zones/{z}" for z in zones],
                "selfLink": f"{API}/projects/{self.project}/regions/{name}",
                "supportsPzs": False,
            }
            for i, (name, zones) in enumerate(sorted(self.regions.items()))
        ]
        page = self._page(items, self.regions_per_page, query.get("pageToken", ""), "regions")
        if page is None:
            return self._error(400, "Invalid page token")
        body: dict[str, Any] = {
            "kind": "compute#regionList",
            "id": f"projects/{self.project}/regions",
            "items": page[0],
        }
        if page[1]:
            body["nextPageToken"] = page[1]
        return 200, body, {}

    def _aggregated(
        self, route: str, query: dict[str, str], filters: dict[str, re.Pattern[str]]
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        resources = self.machine_types if route == "machineTypes" else self.accelerator_types
        key = "machineTypes" if route == "machineTypes" else "acceleratorTypes"
        scopes: list[tuple[str, dict[str, Any]]] = []
        for zone in sorted(z for zones in self.regions.values() for z in zones):
            if zone in self.unreachable_zones:
                warning = {"code": "UNREACHABLE", "message": f"Scope 'zones/{zone}' is unreachable"}
                scopes.append((f"zones/{zone}", {"warning": warning}))
                continue
            items = [
                r
                for r in resources
                if r["zone"].rsplit("/", 1)[-1] == zone
                and all(pattern.fullmatch(str(r.get(name, ""))) for name, pattern in filters.items())
            ]
            if items:
                scopes.append((f"zones/{zone}", {key: items}))
            else:
                message = f"There are no results for scope 'zones/{zone}' on this page."
                scopes.append(
                    (f"zones/{zone}", {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": message}})
                )
        # the token carries the filter it belongs to: a token used with another filter is refused
        kind = f"{route}{stable_id(query.get('filter', ''), digits=8)}"
        page = self._page(scopes, self.scopes_per_page, query.get("pageToken", ""), kind)
        if page is None:
            return self._error(400, "Invalid page token")
        body: dict[str, Any] = {
            "kind": f"compute#{key[:-1]}AggregatedList",
            "id": f"projects/{self.project}/aggregated/{key}",
            "items": dict(page[0]),
            "selfLink": f"{API}/projects/{self.project}/aggregated/{key}",
        }
        if page[1]:
            body["nextPageToken"] = page[1]
        return 200, body, {}

    def _skus(self, query: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        if query.get("currencyCode") != "USD":
            return self._error(400, "currencyCode must be USD in this fake")
        page = self._page(self.skus, self.skus_per_page, query.get("pageToken", ""), "skus")
        if page is None:
            return self._error(400, "Invalid page token")
        return 200, {"skus": page[0], "nextPageToken": page[1]}, {}


def parse_filter(text: str) -> dict[str, re.Pattern[str]]:
    """``(zone eq "RE") (name eq "RE")`` or ``zone eq "RE"`` -> {field: compiled RE}."""
    terms = re.findall(r'\(?\s*(\w+)\s+eq\s+"([^"]*)"\s*\)?', text)
    if text and not terms:
        raise ValueError(f"filter not understood by the fake: {text!r}")
    return {name: re.compile(pattern) for name, pattern in terms}


# ------------------------------------------------------------------ instances (gpufit sweep)
#
#   GET    /compute/v1/projects/{project}/aggregated/instances     (filter, maxResults, pageToken)
#   DELETE /compute/v1/projects/{project}/zones/{zone}/instances/{instance}   (requestId)
#
# The filter is the AIP-160 form Compute documents for labels: ``labels.KEY = "VALUE"`` terms,
# each in parentheses when there are several (ANDed); anything else is refused with a 400.


def instance(
    project: str,
    zone: str,
    name: str,
    labels: dict[str, str] | None = None,
    status: str = "RUNNING",
    machine: str = "g2-standard-4",
    accelerators: tuple[tuple[str, int], ...] = (),
    spot: bool = False,
    created_by: str | None = None,
    service_account: str | None = "gpufit",
) -> dict[str, Any]:
    """A ``compute#instance`` as the REST API returns it (URLs for zone, machine and GPU types).
    ``service_account``: the VM's account; "gpufit" (default) is the one gpufit makes for the
    VM's stack and workload labels, when it has them; None: no account."""
    zone_url = f"{API}/projects/{project}/zones/{zone}"
    item: dict[str, Any] = {
        "kind": "compute#instance",
        "id": stable_id(project, zone, name, digits=19),
        "creationTimestamp": "2026-11-30T04:00:00.000-08:00",
        "name": name,
        "machineType": f"{zone_url}/machineTypes/{machine}",
        "status": status,
        "zone": zone_url,
        "selfLink": f"{zone_url}/instances/{name}",
        "scheduling": {
            "onHostMaintenance": "TERMINATE",
            "automaticRestart": not spot,
            "preemptible": spot,
            "provisioningModel": "SPOT" if spot else "STANDARD",
        },
        "labelFingerprint": "42WmSpB8rSM=",
    }
    if labels:
        item["labels"] = dict(labels)
    if accelerators:
        item["guestAccelerators"] = [
            {"acceleratorType": f"{zone_url}/acceleratorTypes/{kind}", "acceleratorCount": count}
            for kind, count in accelerators
        ]
    if (
        service_account == "gpufit"
        and labels
        and labels.get("gpufit-stack")
        and labels.get("gpufit-workload")
    ):
        from providers.gcp.sweep import account_digest

        digest = account_digest(project, labels["gpufit-stack"], labels["gpufit-workload"])
        service_account = f"gf-{labels['gpufit-workload'][:16]}-{digest}@{project}.iam.gserviceaccount.com"
    if service_account and service_account != "gpufit":
        item["serviceAccounts"] = [
            {"email": service_account, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
        ]
    if created_by:  # what a managed instance group writes on the VMs it creates
        item["metadata"] = {"items": [{"key": "created-by", "value": created_by}]}
    return item


@dataclass
class InstanceFault:
    route: str  # "instances" (the aggregated list) | "delete"
    status: int
    times: int | None  # None: every matching request
    name: str | None = None  # only deletes of this instance
    page_token: str | None = None  # only the listing request for this page


@dataclass(frozen=True)
class DeleteSeen:
    zone: str
    name: str
    request_id: str
    status: int


class FakeGcpInstances:
    """The instances API's data, faults and request log; ``with FakeGcpInstances(...) as fake``
    serves it. ``deleted`` lists (zone, name) of the VMs actually deleted, once each."""

    def __init__(
        self, project: str, zones: list[str], instances: list[dict[str, Any]], per_page: int = 2
    ) -> None:
        self.project = project
        self.zones = zones
        self.instances = list(instances)
        self.per_page = per_page
        self.unreachable_zones: set[str] = set()
        self.reject_filters = False
        self.faults: list[InstanceFault] = []
        self.lists: list[dict[str, str]] = []  # query of every listing request
        self.deletes: list[DeleteSeen] = []  # every DELETE request
        self.deleted: list[tuple[str, str]] = []
        self.groups: dict[str, int] = {}  # "regions/R/instanceGroupManagers/NAME" -> target size
        self.group_calls: list[tuple[str, str]] = []  # (method, group) of every group request
        self._operations: dict[str, dict[str, Any]] = {}  # requestId -> the operation it started
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def fail(
        self,
        route: str,
        status: int,
        times: int | None = 1,
        name: str | None = None,
        page_token: str | None = None,
    ) -> None:
        self.faults.append(InstanceFault(route, status, times, name, page_token))

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeGcpInstances:
        fake = self

        class Handler(FakeHandler):
            def _answer(self, status: int, body: dict[str, Any]) -> None:
                self.send_body(status, json.dumps(body).encode(), "application/json; charset=UTF-8")

            def do_GET(self) -> None:
                self._answer(*fake.handle_get(self.path))

            def do_DELETE(self) -> None:
                if "/instanceGroupManagers/" in self.path:
                    self._answer(*fake.handle_group("DELETE", self.path))
                else:
                    self._answer(*fake.handle_delete(self.path))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self._answer(*fake.handle_group("POST", self.path))

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fake-gcp-instances",
            daemon=True,
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _take_fault(self, route: str, name: str | None, token: str | None) -> InstanceFault | None:
        for fault in self.faults:
            if fault.route != route or (fault.times is not None and fault.times <= 0):
                continue
            if fault.name is not None and fault.name != name:
                continue
            if fault.page_token is not None and fault.page_token != token:
                continue
            if fault.times is not None:
                fault.times -= 1
            return fault
        return None

    def handle_get(self, raw_path: str) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        match = re.fullmatch(r"/compute/v1/projects/([^/]+)/aggregated/instances", parts.path)
        if not match:
            return FakeGcp._error(404, f"The requested URL {parts.path} was not found")[:2]
        with self._lock:
            self.lists.append(query)
            fault = self._take_fault("instances", None, query.get("pageToken", ""))
        if fault is not None:
            return FakeGcp._error(fault.status, f"injected {fault.status}")[:2]
        if match.group(1) != self.project:
            return FakeGcp._error(404, f"The resource 'projects/{match.group(1)}' was not found")[:2]
        expression = query.get("filter", "")
        if expression and self.reject_filters:
            return FakeGcp._error(400, "Invalid value for field 'filter'")[:2]
        try:
            wanted = parse_label_filter(expression)
        except ValueError as error:
            return FakeGcp._error(400, str(error))[:2]
        with self._lock:
            chosen = sorted(
                (
                    i
                    for i in self.instances
                    if i["zone"].rsplit("/", 1)[-1] not in self.unreachable_zones
                    and all(i.get("labels", {}).get(k) == v for k, v in wanted.items())
                ),
                key=lambda i: (i["zone"], i["name"]),
            )
        size = min(int(query.get("maxResults") or 500), self.per_page) or self.per_page
        kind = f"instances{stable_id(expression, digits=8)}"
        token = query.get("pageToken", "")
        start = 0
        if token:
            found = re.fullmatch(rf"{kind}-(\d+)", token)
            if not found:
                return FakeGcp._error(400, "Invalid page token")[:2]
            start = int(found.group(1))
        page = chosen[start : start + size]
        items: dict[str, Any] = {}
        for zone in sorted(self.zones):
            if zone in self.unreachable_zones:
                warning = {"code": "UNREACHABLE", "message": f"Scope 'zones/{zone}' is unreachable"}
                items[f"zones/{zone}"] = {"warning": warning}
                continue
            here = [i for i in page if i["zone"].rsplit("/", 1)[-1] == zone]
            if here:
                items[f"zones/{zone}"] = {"instances": here}
            else:
                message = f"There are no results for scope 'zones/{zone}' on this page."
                items[f"zones/{zone}"] = {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": message}}
        body: dict[str, Any] = {
            "kind": "compute#instanceAggregatedList",
            "id": f"projects/{self.project}/aggregated/instances",
            "items": items,
            "selfLink": f"{API}/projects/{self.project}/aggregated/instances",
        }
        if start + size < len(chosen):
            body["nextPageToken"] = f"{kind}-{start + size}"
        if self.unreachable_zones:
            body["unreachables"] = [f"zones/{z}" for z in sorted(self.unreachable_zones)]
        return 200, body

    def handle_group(self, method: str, raw_path: str) -> tuple[int, dict[str, Any]]:
        """``POST .../instanceGroupManagers/NAME/resize?size=N`` and ``DELETE .../NAME`` of a
        regional or zonal managed instance group; deleting one deletes the VMs it created."""
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        match = re.fullmatch(
            r"/compute/v1/projects/([^/]+)/((?:regions|zones)/[^/]+/instanceGroupManagers/[^/]+)(/resize)?",
            parts.path,
        )
        if not match or match.group(1) != self.project or (method == "POST") != bool(match.group(3)):
            return FakeGcp._error(404, f"The requested URL {parts.path} was not found")[:2]
        group = match.group(2)
        with self._lock:
            self.group_calls.append((method, group))
            if group not in self.groups:
                return FakeGcp._error(404, f"The resource 'projects/{self.project}/{group}' was not found")[
                    :2
                ]
            if method == "POST":
                self.groups[group] = int(query["size"])
            else:
                del self.groups[group]
                for vm in [i for i in self.instances if _created_by(i) == f"projects/{self.project}/{group}"]:
                    self.instances.remove(vm)
                    self.deleted.append((vm["zone"].rsplit("/", 1)[-1], vm["name"]))
        url = f"{API}/projects/{self.project}/{group}"
        return 200, {
            "kind": "compute#operation",
            "id": stable_id("op", method, group, query.get("requestId", ""), digits=19),
            "name": f"operation-{stable_id('op', method, group)}",
            "operationType": "compute.instanceGroupManagers.resize" if method == "POST" else "delete",
            "targetLink": url,
            "status": "DONE",
            "progress": 100,
            "selfLink": f"{url}/operations/x",
        }

    def handle_delete(self, raw_path: str) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(raw_path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        match = re.fullmatch(r"/compute/v1/projects/([^/]+)/zones/([^/]+)/instances/([^/]+)", parts.path)
        if not match:
            return FakeGcp._error(404, f"The requested URL {parts.path} was not found")[:2]
        project, zone, name = match.groups()
        request_id = query.get("requestId", "")
        with self._lock:
            fault = self._take_fault("delete", name, None)
            status = fault.status if fault else 200
            if fault is None and request_id in self._operations:  # a retry of a delete already done
                self.deletes.append(DeleteSeen(zone, name, request_id, 200))
                return 200, self._operations[request_id]
            target = next(
                (
                    i
                    for i in self.instances
                    if i["name"] == name and i["zone"].rsplit("/", 1)[-1] == zone and project == self.project
                ),
                None,
            )
            if fault is None and target is None:
                status = 404
            self.deletes.append(DeleteSeen(zone, name, request_id, status))
            if fault is not None:
                return FakeGcp._error(fault.status, f"injected {fault.status}")[:2]
            if target is None:
                message = f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                return FakeGcp._error(404, message)[:2]
            self.instances.remove(target)
            self.deleted.append((zone, name))
            zone_url = f"{API}/projects/{project}/zones/{zone}"
            operation = {
                "kind": "compute#operation",
                "id": stable_id("op", zone, name, request_id, digits=19),
                "name": f"operation-{stable_id('op', zone, name, request_id)}",
                "zone": zone_url,
                "operationType": "delete",
                "targetLink": f"{zone_url}/instances/{name}",
                "targetId": target["id"],
                "status": "RUNNING",
                "user": "gpufit@example.iam.gserviceaccount.com",
                "progress": 0,
                "insertTime": "2026-12-04T05:00:00.000-08:00",
                "startTime": "2026-12-04T05:00:00.000-08:00",
                "selfLink": f"{zone_url}/operations/operation-{stable_id('op', zone, name, request_id)}",
            }
            if request_id:
                self._operations[request_id] = operation
            return 200, operation


def _created_by(vm: dict[str, Any]) -> str | None:
    for item in vm.get("metadata", {}).get("items", []):
        if item["key"] == "created-by":
            return str(item["value"])
    return None


def parse_label_filter(text: str) -> dict[str, str]:
    """``labels.KEY = "VALUE"`` or ``(labels.K1 = "V1") (labels.K2 = V2)`` -> {KEY: VALUE}."""
    if not text.strip():
        return {}
    term = r'\(?\s*labels\.([a-z0-9_-]+)\s*=\s*(?:"([^"]*)"|([a-z0-9_-]+))\s*\)?'
    if not re.fullmatch(rf"(?:\s*{term}\s*)+", text):
        raise ValueError(f"filter not understood by the fake: {text!r}")
    return {key: quoted or bare for key, quoted, bare in re.findall(term, text)}
