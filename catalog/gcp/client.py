"""The Compute Engine and Cloud Billing calls a GCP catalog refresh makes: one client per kind
per thread, every HTTP call (each page of a listing) retried by tenacity and counted, and the
region's machine-type and accelerator-type listings and the billing SKUs they ask for."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from catalog.gcp.machine_types import BUNDLED_FAMILIES, N1_HOSTS, Listing, MachineType
from catalog.gcp.prices import PriceBook, read_sku
from cloudapi.calls import CallCounter
from cloudapi.gcp import Api, CredentialSource, auth_error, describe_error, is_transient, retry_after_seconds

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from google.cloud import billing_v1, compute_v1
    from tenacity import RetryCallState

T = TypeVar("T")

COMPUTE_ENGINE_SERVICE = "services/6F81-5844-456A"
"""The Cloud Billing Catalog's service id for Compute Engine."""


class CallFailed(Exception):
    """An API call that failed for good (retries spent, or an error retrying cannot fix)."""

    def __init__(self, api: str, cause: BaseException, attempts: int) -> None:
        self.api = api
        self.cause = cause
        self.attempts = attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"{api}: {describe_error(cause)}{tries}")


REGIONS_LIST = Api("compute regions.list", "compute.regions.list", "roles/compute.viewer")
MACHINE_TYPES_LIST = Api(
    "compute machineTypes.aggregatedList", "compute.machineTypes.list", "roles/compute.viewer"
)
ACCELERATOR_TYPES_LIST = Api(
    "compute acceleratorTypes.aggregatedList", "compute.acceleratorTypes.list", "roles/compute.viewer"
)
SKUS_LIST = Api(
    "cloudbilling services.skus.list",
    "billing.services.skus.list (a public catalog: no IAM role needed)",
    "credentials with the cloud-billing.readonly or cloud-platform scope and the Cloud Billing API "
    "(cloudbilling.googleapis.com) enabled on the quota project",
)


class GcpCatalogClient:
    """The calls of ``GcpCatalogFetcher``, which sets these attributes from its arguments."""

    project: str
    counter: CallCounter
    _compute_endpoint: str | None
    _compute_loopback: bool
    _billing_endpoint: str | None
    _billing_loopback: bool
    _max_attempts: int
    _max_seconds: float
    _sleep: Callable[[float], None]
    _timeout: float
    _max_wait: float
    _local: threading.local
    _creds: CredentialSource
    _abort: threading.Event
    _calls: CallCounter

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

    def _call(self, api: Api, fn: Callable[[], T]) -> T:
        """One HTTP call under tenacity; every attempt is counted."""
        from tenacity import Retrying, retry_if_exception

        attempts = 0

        def attempt() -> T:
            nonlocal attempts
            if self._abort.is_set():
                raise CallFailed(api.name, RuntimeError("abandoned: the refresh was aborted"), attempts)
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
        except CallFailed:
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
                raise CallFailed(api.name, error, attempts) from error
            raise

    def _pages(self, api: Api, fetch_page: Callable[[str], tuple[T, str]]) -> Iterator[T]:
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
                raise CallFailed(api.name, RuntimeError(f"page token {token!r} repeated"), 1)
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

    def _aggregated(self, kind: str, api: Api, region: str, expression: str) -> tuple[list[Any], bool]:
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
        except CallFailed as failed:
            if isinstance(failed.cause, BadRequest) and expression:
                return listing(""), True
            raise

    def _zone_scopes(self, pages: Iterable[Any], region: str, listing: Listing) -> Iterator[tuple[str, Any]]:
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

    def _list_machine_types(self, region: str) -> Listing:
        names = "|".join(BUNDLED_FAMILIES)
        hosts = "|".join(h.removeprefix("n1-standard-") for h in N1_HOSTS)
        expression = f'({self._zone_filter(region)}) (name eq "({names})-.*|n1-standard-({hosts})")'
        pages, rejected = self._aggregated("machine_types", MACHINE_TYPES_LIST, region, expression)
        listing = Listing(filter_rejected=rejected)
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
                    MachineType(mt.name, zone, mt.guest_cpus, mt.memory_mb, accelerators)
                )
        return listing

    def _list_accelerator_types(self, region: str) -> Listing:
        pages, rejected = self._aggregated(
            "accelerator_types", ACCELERATOR_TYPES_LIST, region, self._zone_filter(region)
        )
        listing = Listing(filter_rejected=rejected)
        for zone, scoped in self._zone_scopes(pages, region, listing):
            for accelerator in scoped.accelerator_types:
                if accelerator.deprecated.state in ("OBSOLETE", "DELETED"):
                    continue
                listing.accelerators.setdefault(zone, {})[accelerator.name] = (
                    accelerator.maximum_cards_per_instance
                )
        return listing

    def _scopes_unreachable(self, response: Any, region: str, listing: Listing) -> None:
        for scope in response.unreachables:
            zone = self._zone_of(scope)
            if self._region_of(zone) == region or zone == region:
                listing.unreachable.add(zone)

    def _list_skus(self, regions: set[str]) -> PriceBook:
        from google.cloud import billing_v1

        client = self._client("billing")
        book = PriceBook()

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
                read_sku(sku, regions, book)
        return book
