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

import functools
import ipaddress
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, as_completed
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from providers.refresh import AuthError, CallCounter, FetchResult
from selector.catalog import GpuSpec, gpu_by_alias, load_gpus

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from google.cloud import billing_v1, compute_v1
    from tenacity import RetryCallState

T = TypeVar("T")

COMPUTE_ENDPOINT_ENV = "GPUFIT_GCP_COMPUTE_ENDPOINT"
BILLING_ENDPOINT_ENV = "GPUFIT_GCP_BILLING_ENDPOINT"
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
COMPUTE_ENGINE_SERVICE = "services/6F81-5844-456A"
"""The Cloud Billing Catalog's service id for Compute Engine."""

SOURCE_BILLING = "GCP_BILLING"
SOURCE_COMPUTE = "GCP_COMPUTE"
SOURCE_N1_LIMITS = "SKYN1"
PRICE_DIGITS = 5
"""Offers are rounded like the embedded snapshot's (the GCP price pages quote 5 decimals)."""

BUNDLED_FAMILIES = ("a2", "a3", "a4", "g2")
"""Accelerator-optimized series whose machine types carry their GPUs."""
NVLINK_SERIES = frozenset({"a2", "a3", "a4"})
"""Series whose multi-GPU machine types join their GPUs with NVLink/NVSwitch (G2 is PCIe only)."""
FULL_HOST_INTERCONNECT = {
    "a3-highgpu": "gpudirect-tcpx",
    "a3-megagpu": "gpudirect-tcpxo",
    "a3-ultragpu": "gpudirect-rdma",
    "a4-highgpu": "gpudirect-rdma",
}
"""GPUDirect networking per machine series, claimed (as in the embedded snapshot) for the
8-GPU machine types only: GCP documents it for the full-host shapes."""
FULL_HOST_GPUS = 8

N1_HOSTS = ("n1-standard-4", "n1-standard-8", "n1-standard-16", "n1-standard-32", "n1-standard-64")
"""The N1 shapes combined with attached GPUs (the embedded snapshot's hosts)."""
N1_LIMITS: dict[str, dict[int, tuple[int, float]]] = {
    "nvidia-tesla-t4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "nvidia-tesla-v100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
}
"""Largest N1 VM (vCPUs, memory GiB) per attached GPU count, the table the snapshot builds
from (``selector/data/snapshot_src/gcp_n1_limits.csv``, source SKYN1). The API tells only
``maximumCardsPerInstance``; an accelerator type without a row here is reported, not combined."""

SOURCES_STATIC = {
    SOURCE_N1_LIMITS: {
        "title": "SkyPilot sky/clouds/service_catalog/gcp_catalog.py, table _NUM_ACC_TO_MAX_CPU_AND_MEMORY: "
        "maximum vCPUs and memory of an N1 VM per attached T4/V100 count (the code cites "
        "cloud.google.com/compute/docs/gpus)",
        "url": "https://github.com/skypilot-org/skypilot/blob/master/sky/clouds/service_catalog/gcp_catalog.py",
        "retrieved": "2026-12-02",
    }
}

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
GPU_WORD_SYNONYMS = {"plus": "mega"}
"""Billing names the A3 Mega GPU "H100 80GB Mega" in some regions and "H100 80GB Plus" in others
(SkyPilot's fetch_gcp.py matches both for nvidia-h100-mega-80gb)."""
_GCP_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)+[0-9]+$")
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_EXAMPLES = 3


# ---------------------------------------------------------------------------------- endpoints


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(endpoint: str | None, what: str) -> tuple[str | None, bool]:
    """``(endpoint, loopback)``; plain http only for a loopback host, else ``ValueError``."""
    if not endpoint:
        return None, False
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"GCP {what} endpoint {endpoint!r}: expected https://HOST[:PORT] (or http:// on loopback)"
        )
    loopback = is_loopback(parts.hostname)
    if parts.scheme == "http" and not loopback:
        raise ValueError(
            f"GCP {what} endpoint {endpoint!r}: plain http is allowed only for loopback hosts "
            "(127.0.0.0/8, ::1, localhost); use https://"
        )
    return endpoint, loopback


# ---------------------------------------------------------------------------------- errors


class _CallFailed(Exception):
    """An API call that failed for good (retries spent, or an error retrying cannot fix)."""

    def __init__(self, api: str, cause: BaseException, attempts: int) -> None:
        self.api = api
        self.cause = cause
        self.attempts = attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"{api}: {describe_error(cause)}{tries}")


def describe_error(error: BaseException) -> str:
    """One line: HTTP status, class and the server's message."""
    from google.api_core.exceptions import GoogleAPICallError

    if isinstance(error, GoogleAPICallError):
        text = f"{error.code} {type(error).__name__}: {error.message}"
    else:
        text = f"{type(error).__name__}: {error}"
    return " ".join(text.split())[:240]


def is_transient(error: BaseException) -> bool:
    """429, 5xx (not 501) and transport trouble deserve another try; nothing else does."""
    import requests
    from google.api_core.exceptions import DeadlineExceeded, GoogleAPICallError, ServiceUnavailable
    from google.auth.exceptions import TransportError

    if isinstance(error, DeadlineExceeded | ServiceUnavailable):
        return True
    if isinstance(error, GoogleAPICallError):
        code = error.code
        return isinstance(code, int) and (code in _TRANSIENT_STATUS or (code >= 500 and code != 501))
    return isinstance(
        error,
        requests.ConnectionError
        | requests.Timeout
        | requests.exceptions.ChunkedEncodingError
        | TransportError,
    )


def retry_after_seconds(error: BaseException) -> float | None:
    """The server's Retry-After (seconds form) on a 429/503, if it sent one."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class _Api:
    """One API method: how it is named in messages and the IAM permission it needs."""

    name: str
    permission: str
    grant: str


REGIONS_LIST = _Api("compute regions.list", "compute.regions.list", "roles/compute.viewer")
MACHINE_TYPES_LIST = _Api(
    "compute machineTypes.aggregatedList", "compute.machineTypes.list", "roles/compute.viewer"
)
ACCELERATOR_TYPES_LIST = _Api(
    "compute acceleratorTypes.aggregatedList", "compute.acceleratorTypes.list", "roles/compute.viewer"
)
SKUS_LIST = _Api(
    "cloudbilling services.skus.list",
    "billing.services.skus.list (a public catalog: no IAM role needed)",
    "credentials with the cloud-billing.readonly or cloud-platform scope and the Cloud Billing API "
    "(cloudbilling.googleapis.com) enabled on the quota project",
)


def auth_error(error: BaseException, api: _Api, project: str) -> AuthError | None:
    """An ``AuthError`` for 401/403 and credential failures; None for anything else."""
    from google.api_core.exceptions import Forbidden, Unauthorized
    from google.auth.exceptions import DefaultCredentialsError, RefreshError

    said = describe_error(error)
    if isinstance(error, Forbidden):
        return AuthError(
            f"gcp: permission denied for {api.name} in project {project}: needs {api.permission} "
            f"({api.grant}); {said}"
        )
    if isinstance(error, Unauthorized | RefreshError | DefaultCredentialsError):
        return AuthError(
            f"gcp: credentials rejected calling {api.name} ({api.permission}): run "
            f"`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS; {said}"
        )
    return None


# ---------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class _MachineType:
    name: str
    zone: str
    vcpus: int
    memory_mib: int
    accelerators: tuple[tuple[str, int], ...]

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def shape(self) -> tuple[int, int, tuple[tuple[str, int], ...]]:
        return (self.vcpus, self.memory_mib, self.accelerators)


@dataclass
class _Listing:
    """What one region's compute listings returned."""

    machine_types: list[_MachineType] = field(default_factory=list)
    accelerators: dict[str, dict[str, int]] = field(default_factory=dict)  # zone -> type -> max cards
    zones: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    filter_rejected: bool = False


@dataclass(frozen=True)
class _Rate:
    usd: float
    sku: str
    description: str
    spread: int  # how many regions the SKU covers: a narrower SKU is the more specific price


@dataclass
class _PriceBook:
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
        if len(self.unattributed_examples) < _EXAMPLES:
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


def compact(number: float) -> float | int:
    return int(number) if float(number).is_integer() else number


def _unit_price(sku: billing_v1.Sku) -> tuple[float, str, str] | None:
    """(USD, usage unit, currency) of the SKU's current last tier, or None without one."""
    if not sku.pricing_info:
        return None
    expression = sku.pricing_info[-1].pricing_expression
    if not expression.tiered_rates:
        return None
    money = expression.tiered_rates[-1].unit_price
    return money.units + money.nanos / 1e9, expression.usage_unit, money.currency_code


# ---------------------------------------------------------------------------------- fetcher


class CredentialSource:
    """Anonymous credentials against a loopback endpoint (as Google's emulators use), else the
    application default credentials, resolved once and shared across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._default: Credentials | None = None

    def get(self, loopback: bool) -> Credentials:
        if loopback:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()  # type: ignore[no-untyped-call]
        with self._lock:
            if self._default is None:
                import google.auth
                from google.auth.exceptions import DefaultCredentialsError

                try:
                    creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
                except DefaultCredentialsError as error:
                    raise AuthError(
                        "gcp: no credentials found: run `gcloud auth application-default login` "
                        f"or set GOOGLE_APPLICATION_CREDENTIALS ({describe_error(error)})"
                    ) from None
                self._default = creds
            return self._default


class GcpCatalogFetcher:
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

    # -- clients ----------------------------------------------------------------------------
    def _credentials(self, loopback: bool) -> Credentials:
        return self._creds.get(loopback)

    def _client(self, kind: str) -> Any:
        """One client per kind per thread (the REST transport's requests.Session is not
        documented thread-safe)."""
        cache: dict[str, Any] | None = getattr(self._local, "clients", None)
        if cache is None:
            cache = self._local.clients = {}
        if kind not in cache:
            from google.api_core.client_options import ClientOptions

            if kind == "billing":
                from google.cloud import billing_v1

                options = (
                    ClientOptions(api_endpoint=self._billing_endpoint) if self._billing_endpoint else None
                )
                cache[kind] = billing_v1.CloudCatalogClient(
                    credentials=self._credentials(self._billing_loopback),
                    transport="rest",
                    client_options=options,
                )
            else:
                from google.cloud import compute_v1

                options = (
                    ClientOptions(api_endpoint=self._compute_endpoint) if self._compute_endpoint else None
                )
                creds = self._credentials(self._compute_loopback)
                factory = {
                    "regions": compute_v1.RegionsClient,
                    "machine_types": compute_v1.MachineTypesClient,
                    "accelerator_types": compute_v1.AcceleratorTypesClient,
                }[kind]
                cache[kind] = factory(credentials=creds, client_options=options)
        return cache[kind]

    # -- calls ------------------------------------------------------------------------------
    def _wait(self, state: RetryCallState) -> float:
        """Full-jitter exponential backoff (0.5 s window, doubling, capped at ``max_wait``),
        never shorter than a Retry-After the server sent."""
        from tenacity import wait_random_exponential

        wait = float(wait_random_exponential(multiplier=0.5, max=self._max_wait)(state))
        error = state.outcome.exception() if state.outcome is not None else None
        after = retry_after_seconds(error) if error is not None else None
        return max(wait, min(after, self._max_wait)) if after is not None else wait

    def _stop(self, state: RetryCallState) -> bool:
        """Out of attempts, or the next sleep would pass ``max_seconds`` (counting both the
        sleeps taken, which an injected sleep does not make real, and the wall clock)."""
        upcoming = state.upcoming_sleep
        elapsed = max(state.idle_for, state.seconds_since_start or 0.0)
        return (
            state.attempt_number >= self._max_attempts
            or elapsed + upcoming > self._max_seconds
            or self._abort.is_set()
        )

    def _call(self, api: _Api, fn: Callable[[], T]) -> T:
        """One HTTP call under tenacity; every attempt is counted."""
        from tenacity import Retrying, retry_if_exception

        attempts = 0

        def attempt() -> T:
            nonlocal attempts
            if self._abort.is_set():
                raise _CallFailed(api.name, RuntimeError("abandoned: the refresh was aborted"), attempts)
            attempts += 1
            self.counter.add()
            self._calls.add()
            return fn()

        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=self._stop,
            wait=self._wait,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            return retrying(attempt)
        except _CallFailed:
            raise
        except Exception as error:
            auth = auth_error(error, api, self.project)
            if auth is not None:
                self._abort.set()
                raise auth from None
            import requests
            from google.api_core.exceptions import GoogleAPIError
            from google.auth.exceptions import GoogleAuthError
            from google.protobuf.json_format import ParseError  # type: ignore[import-untyped]

            # an answer that cannot be had or read fails this listing (its region), not the refresh
            if isinstance(error, GoogleAPIError | GoogleAuthError | requests.RequestException | ParseError):
                raise _CallFailed(api.name, error, attempts) from error
            raise

    def _pages(self, api: _Api, fetch_page: Callable[[str], tuple[T, str]]) -> Iterator[T]:
        """A paginated listing, one retried call per page: a page that fails is retried alone,
        with the same token, instead of restarting the listing."""
        token = ""
        seen: set[str] = set()
        while True:
            page, token = self._call(api, functools.partial(fetch_page, token))
            yield page
            if not token:
                return
            if token in seen:
                raise _CallFailed(api.name, RuntimeError(f"page token {token!r} repeated"), 1)
            seen.add(token)

    # -- listings ---------------------------------------------------------------------------
    def _list_regions(self) -> list[str]:
        from google.cloud import compute_v1

        client = self._client("regions")

        def page(token: str) -> tuple[compute_v1.RegionList, str]:
            request = compute_v1.ListRegionsRequest(project=self.project, max_results=500, page_token=token)
            response = next(iter(client.list(request=request, retry=None, timeout=self._timeout).pages))
            return response, response.next_page_token

        names: list[str] = []
        for response in self._pages(REGIONS_LIST, page):
            names.extend(r.name for r in response.items if r.deprecated.state not in ("OBSOLETE", "DELETED"))
        return sorted(set(names))

    @staticmethod
    def _zone_filter(region: str) -> str:
        # RE2, matched against the whole field; a zone field may be a name or a URL.
        return f'zone eq "(.*/)?{region}-[a-z0-9]+"'

    @staticmethod
    def _zone_of(scope: str) -> str:
        return scope.rsplit("/", 1)[-1]

    @staticmethod
    def _region_of(zone: str) -> str:
        return zone.rsplit("-", 1)[0]

    @staticmethod
    def _wanted_machine_type(name: str) -> bool:
        return name.split("-", 1)[0] in BUNDLED_FAMILIES or name in N1_HOSTS

    def _aggregated(self, kind: str, api: _Api, region: str, expression: str) -> tuple[list[Any], bool]:
        """All pages of a region's aggregated listing; with the server-side filter, or, if the
        API rejects it (400), without it (the scopes are filtered here in any case)."""
        from google.api_core.exceptions import BadRequest
        from google.cloud import compute_v1

        client = self._client(kind)
        request_type = (
            compute_v1.AggregatedListMachineTypesRequest
            if kind == "machine_types"
            else compute_v1.AggregatedListAcceleratorTypesRequest
        )

        def listing(expr: str) -> list[Any]:
            def page(token: str) -> tuple[Any, str]:
                request = request_type(project=self.project, filter=expr, max_results=500, page_token=token)
                response = next(
                    iter(client.aggregated_list(request=request, retry=None, timeout=self._timeout).pages)
                )
                return response, response.next_page_token

            return list(self._pages(api, page))

        try:
            return listing(expression), False
        except _CallFailed as failed:
            if isinstance(failed.cause, BadRequest) and expression:
                return listing(""), True
            raise

    def _zone_scopes(self, pages: Iterable[Any], region: str, listing: _Listing) -> Iterator[tuple[str, Any]]:
        """The (zone, scoped list) pairs of an aggregated listing that lie in ``region``,
        recording the zones seen and those reported unreachable in ``listing``."""
        for response in pages:
            self._scopes_unreachable(response, region, listing)
            for scope, scoped in response.items.items():
                zone = self._zone_of(scope)
                if not scope.startswith("zones/") or self._region_of(zone) != region:
                    continue
                listing.zones.add(zone)
                if scoped.warning.code == "UNREACHABLE":
                    listing.unreachable.add(zone)
                yield zone, scoped

    def _list_machine_types(self, region: str) -> _Listing:
        names = "|".join(BUNDLED_FAMILIES)
        hosts = "|".join(h.removeprefix("n1-standard-") for h in N1_HOSTS)
        expression = f'({self._zone_filter(region)}) (name eq "({names})-.*|n1-standard-({hosts})")'
        pages, rejected = self._aggregated("machine_types", MACHINE_TYPES_LIST, region, expression)
        listing = _Listing(filter_rejected=rejected)
        for zone, scoped in self._zone_scopes(pages, region, listing):
            for mt in scoped.machine_types:
                if not self._wanted_machine_type(mt.name) or mt.deprecated.state in (
                    "OBSOLETE",
                    "DELETED",
                ):
                    continue
                accelerators = tuple(
                    sorted((a.guest_accelerator_type, a.guest_accelerator_count) for a in mt.accelerators)
                )
                listing.machine_types.append(
                    _MachineType(mt.name, zone, mt.guest_cpus, mt.memory_mb, accelerators)
                )
        return listing

    def _list_accelerator_types(self, region: str) -> _Listing:
        pages, rejected = self._aggregated(
            "accelerator_types", ACCELERATOR_TYPES_LIST, region, self._zone_filter(region)
        )
        listing = _Listing(filter_rejected=rejected)
        for zone, scoped in self._zone_scopes(pages, region, listing):
            for accelerator in scoped.accelerator_types:
                if accelerator.deprecated.state in ("OBSOLETE", "DELETED"):
                    continue
                listing.accelerators.setdefault(zone, {})[accelerator.name] = (
                    accelerator.maximum_cards_per_instance
                )
        return listing

    def _scopes_unreachable(self, response: Any, region: str, listing: _Listing) -> None:
        for scope in response.unreachables:
            zone = self._zone_of(scope)
            if self._region_of(zone) == region or zone == region:
                listing.unreachable.add(zone)

    def _list_skus(self, regions: set[str]) -> _PriceBook:
        from google.cloud import billing_v1

        client = self._client("billing")
        book = _PriceBook()

        def page(token: str) -> tuple[billing_v1.ListSkusResponse, str]:
            request = billing_v1.ListSkusRequest(
                parent=COMPUTE_ENGINE_SERVICE, currency_code="USD", page_size=5000, page_token=token
            )
            response = next(iter(client.list_skus(request=request, retry=None, timeout=self._timeout).pages))
            return response, response.next_page_token

        for response in self._pages(SKUS_LIST, page):
            book.pages += 1
            for sku in response.skus:
                book.skus += 1
                self._read_sku(sku, regions, book)
        return book

    def _read_sku(self, sku: billing_v1.Sku, regions: set[str], book: _PriceBook) -> None:
        """File one SKU's unit price under the parts it prices, or count it as unattributed."""
        group = sku.category.resource_group
        market = MARKET_OF_USAGE.get(sku.category.usage_type)
        covered = sorted(set(sku.service_regions) & regions)
        if group not in PRICED_GROUPS or market is None or not covered:
            return
        description = " ".join(sku.description.split())
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
            except _CallFailed as error:
                result.regions_failed["*"] = str(error)
                result.notes.append(f"could not list regions, nothing refreshed: {error}")
                result.calls = self._calls.count - start_calls
                return result
        else:
            wanted = sorted(dict.fromkeys(r for r in regions if _GCP_REGION.match(r)))
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

        book: _PriceBook | None = None
        billing_failure = ""
        listings: dict[str, list[_Listing]] = {region: [] for region in wanted}
        failed: dict[str, str] = {}
        try:
            for future in as_completed(tasks):
                kind, region = tasks[future]
                try:
                    value = future.result()
                except _CallFailed as error:
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
        listings: dict[str, list[_Listing]],
        book: _PriceBook,
        today: str,
        result: FetchResult,
    ) -> None:
        types: dict[str, dict[str, Any]] = {}
        shapes: dict[str, _MachineType] = {}
        unknown_gpu: dict[str, str] = {}
        odd_shapes: set[str] = set()
        unpriced: list[str] = []
        used_gpus: set[str] = set()
        bundled_accelerators: set[str] = set()
        unlimited: set[str] = set()
        offers: list[dict[str, Any]] = []

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
            offered: dict[str, tuple[_MachineType, str, int]] = {}
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
                    types[mt.name] = self._bundled_type(first, spec, accelerator, count)
                offered.setdefault(mt.name, (first, accelerator, count))
                zones.setdefault(mt.name, set()).add(mt.zone)

            hosts_by_zone: dict[str, list[_MachineType]] = {}
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
                                types[name] = self._n1_type(
                                    name, host_shape, spec, accelerator, count, limits[count]
                                )
                            offered.setdefault(name, (host_shape, accelerator, count))
                            zones.setdefault(name, set()).add(zone)  # host and GPU both listed

            for name, (mt, accelerator, count) in sorted(offered.items()):
                used_gpus.add(gpu_key(accelerator))
                for market in ("on-demand", "spot"):
                    offer = self._offer(
                        name, mt, accelerator, count, region, sorted(zones[name]), market, book, today
                    )
                    if isinstance(offer, str):
                        unpriced.append(f"{name} {region} {market} ({offer})")
                    else:
                        offers.append(offer)

        priced = {o["instance_type"] for o in offers}
        result.instance_types = [types[name] for name in sorted(types) if name in priced]
        result.offers = offers
        notes = result.notes
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
                f"combinations, e.g. {'; '.join(unpriced[:_EXAMPLES])}"
            )
        if book.conflicts:
            listed = "; ".join(
                f"{part} {key} {region} {market} ({', '.join(r.sku for r in rates)})"
                for (part, key, region, market), rates in sorted(book.conflicts.items())[:_EXAMPLES]
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
                f"e.g. {'; '.join(repr(d) for d in stray[:_EXAMPLES])}"
            )

    def _bundled_type(self, mt: _MachineType, spec: GpuSpec, accelerator: str, count: int) -> dict[str, Any]:
        series_variant = "-".join(mt.name.split("-")[:2])
        interconnect = FULL_HOST_INTERCONNECT.get(series_variant) if count >= FULL_HOST_GPUS else None
        return {
            "cloud": self.cloud,
            "name": mt.name,
            "machine_type": mt.name,
            "gpu": spec.name,
            "gpu_count": count,
            "attached_accelerator": None,
            "vcpus": mt.vcpus,
            "memory_gib": compact(mt.memory_gib),
            "local_nvme_gb": None,
            "network_gbps": None,
            "nvlink": count > 1 and mt.name.split("-")[0] in NVLINK_SERIES,
            "node_interconnect": interconnect,
            "source": SOURCE_COMPUTE,
            "confidence": "high",
            "notes": (
                f"{count} x {accelerator}; vCPUs and memory from machineTypes; "
                "local SSD and network bandwidth are not in the API"
            ),
        }

    def _n1_type(
        self,
        name: str,
        host: _MachineType,
        spec: GpuSpec,
        accelerator: str,
        count: int,
        limit: tuple[int, float],
    ) -> dict[str, Any]:
        note = (
            f"N1 host with {count} attached {accelerator}; within GCP's limit of {limit[0]} vCPUs / "
            f"{compact(limit[1])} GiB for this GPU count ({SOURCE_N1_LIMITS})"
        )
        if count > 1:
            note += "; NVLink between attached GPUs not claimed"
        return {
            "cloud": self.cloud,
            "name": name,
            "machine_type": host.name,
            "gpu": spec.name,
            "gpu_count": count,
            "attached_accelerator": accelerator,
            "vcpus": host.vcpus,
            "memory_gib": compact(host.memory_gib),
            "local_nvme_gb": None,
            "network_gbps": None,
            "nvlink": False,
            "node_interconnect": None,
            "source": SOURCE_COMPUTE,
            "confidence": "high",
            "notes": note,
        }

    def _offer(
        self,
        name: str,
        mt: _MachineType,
        accelerator: str,
        count: int,
        region: str,
        zones: list[str],
        market: str,
        book: _PriceBook,
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
            "cloud": self.cloud,
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
