"""Sweep orphaned gpufit Compute Engine VMs: list, decide, delete.

One ``instances.aggregatedList`` over every zone of the project, filtered server-side on the
label ``gpufit-managed = "true"`` (should the API refuse the filter, the listing is made
without it), one retried call per page (``page_token`` in, ``next_page_token`` out) with
``return_partial_success`` so that an unreachable zone fails its region, not the sweep. Each VM
is checked again here (managed label exactly ``"true"``, region, status) before
``gitops.sweep.decide`` reads its expiry. VMs STOPPING, PENDING_STOP or DEPROVISIONING are
left alone (they may already be going: Compute reports a VM being deleted as STOPPING); a
TERMINATED, STOPPED or SUSPENDED one (Compute's words for a stopped or suspended VM) is swept,
since its disks still bill. Labels prove nothing on their own (anyone allowed to label a VM can
mark it ``gpufit-managed``): a candidate must also carry the stack and workload labels and run
as the service account gpufit makes for that workload (``gpufit_account``: its id ends in a
digest of project, stack and workload, ``providers.gcp.common.service_account_id``; attaching it
to a VM takes ``iam.serviceAccounts.actAs`` on it, not just labelling); the rest is left alone
with a note. Acting, every chosen VM gets ``instances.delete``, concurrently, each
with a request id that its retries repeat so that Compute does not act twice.

Clients, endpoint and credentials as in the catalog refresh (``cloudapi.gcp``):
``GPUFIT_GCP_COMPUTE_ENDPOINT`` (plain http only on loopback, with anonymous credentials there),
else the application default credentials; the project from ``--project`` or
``GOOGLE_CLOUD_PROJECT``. The Google clients' own retries are off (``retry=None``);
``cloudapi.retry`` retries 429, 5xx and transport errors; 401/403 raise ``AuthError`` naming
the permission.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cloudapi.calls import AuthError, CallCounter
from cloudapi.gcp import (
    COMPUTE_ENDPOINT_ENV,
    GCP_REGION,
    PROJECT_ENV,
    Api,
    CredentialSource,
    auth_error,
    check_endpoint,
    describe_error,
    is_transient,
)
from cloudapi.retry import RetryPolicy, call_with_retry
from gitops.sweep import (
    LABEL_MANAGED,
    Candidate,
    PriceFn,
    SweepResult,
    decide,
    read_expiry,
    stack_and_workload,
)

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

T = TypeVar("T")

INSTANCES_LIST = Api("compute instances.aggregatedList", "compute.instances.list", "roles/compute.viewer")
INSTANCES_DELETE = Api(
    "compute instances.delete", "compute.instances.delete", "roles/compute.instanceAdmin.v1"
)
GROUP_RESIZE = Api(
    "compute regionInstanceGroupManagers.resize",
    "compute.instanceGroupManagers.update",
    "roles/compute.instanceAdmin.v1",
)
GROUP_DELETE = Api(
    "compute regionInstanceGroupManagers.delete",
    "compute.instanceGroupManagers.delete",
    "roles/compute.instanceAdmin.v1",
)
CREATED_BY = re.compile(r"(?:.*/)?projects/[^/]+/(regions|zones)/([^/]+)/instanceGroupManagers/([^/]+)")
"""The ``created-by`` metadata a managed instance group writes on each VM it creates."""
MANAGED_FILTER = f'labels.{LABEL_MANAGED} = "true"'
LEFT_STATUSES = frozenset({"STOPPING", "PENDING_STOP", "DEPROVISIONING"})
"""Statuses of a VM that may already be going (being deleted, or torn down): left alone."""
BILLING_STATUSES = frozenset({"PROVISIONING", "STAGING", "RUNNING", "REPAIRING"})
"""Statuses that bill the machine; a TERMINATED (stopped) or SUSPENDED VM bills only storage."""
PAGE_SIZE = 500
"""``maxResults`` of the aggregated listing (the API accepts 0 to 500)."""
DEFAULT_WORKERS = 16


class _NotAttempted(Exception):
    """A delete not sent because an earlier one was refused for want of a permission."""


def _last(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def instance_type(machine_type: str, accelerators: list[tuple[str, int]]) -> str:
    """The catalog's instance type: the machine type, or for an N1 VM with one attached GPU
    model ``n1-standard-8+t4x1`` (as ``catalog.gcp`` names those offers)."""
    if machine_type.startswith("n1-") and len(accelerators) == 1:
        accelerator, count = accelerators[0]
        short = accelerator.removeprefix("nvidia-").removeprefix("tesla-")
        return f"{machine_type}+{short}x{count}"
    return machine_type


def _created_by(instance: Any) -> str | None:
    """``regions/R/instanceGroupManagers/NAME`` (or ``zones/...``) of the managed instance
    group that created the VM, from its ``created-by`` metadata; None for a lone VM."""
    for item in instance.metadata.items:
        if item.key == "created-by":
            match = CREATED_BY.fullmatch(str(item.value))
            if match:
                scope, where, name = match.groups()
                return f"{scope}/{where}/instanceGroupManagers/{name}"
    return None


def account_digest(project: str, stack: str, workload: str) -> str:
    """The six hex digits that end the id of the service account gpufit makes for a workload
    (``providers.gcp.common.service_account_id``, which a test holds to the same digest)."""
    return hashlib.sha256(f"{project}/{stack}/{workload}".encode()).hexdigest()[:6]


def gpufit_account(instance: Any, project: str, stack: str | None, workload: str | None) -> str | None:
    """Why a VM is gpufit's: it runs as the service account gpufit makes for its stack and
    workload in this project; None when it does not (or lacks those labels)."""
    if not (stack and workload):
        return None
    digest = account_digest(project, stack, workload)
    for account in instance.service_accounts:
        email = str(account.email)
        local, _, domain = email.partition("@")
        if (
            domain == f"{project}.iam.gserviceaccount.com"
            and local.startswith("gf-")
            and local.endswith(f"-{digest}")
        ):
            return f"runs as gpufit's service account {email} of {stack}/{workload}"
    return None


def _group_candidate(group: str, vms: list[Candidate]) -> Candidate:
    """One candidate for a managed instance group from its orphaned VMs (which share labels)."""
    first = vms[0]
    scope, where, _, name = group.split("/")
    costs = [v.hourly_usd for v in vms if v.billing]
    return Candidate(
        cloud="gcp",
        region=where if scope == "regions" else region_of(where),
        zone=None if scope == "regions" else where,
        instance_id=group,
        name=name,
        instance_type=",".join(sorted({v.instance_type for v in vms})),
        stack=first.stack,
        workload=first.workload,
        expires_at=first.expires_at,
        reason=first.reason,
        hourly_usd=None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
        market=first.market,
        state=f"{len(vms)} VM(s)",
        billing=bool(costs),
        kind="group",
        provenance=f"its VMs {first.provenance.replace('runs as', 'run as', 1)}",
    )


class GcpSweeper:
    """Finds and deletes orphaned gpufit VMs through the Compute Engine REST API."""

    cloud = "gcp"

    def __init__(
        self,
        project: str | None = None,
        compute_endpoint: str | None = None,
        policy: RetryPolicy | None = None,
        counter: CallCounter | None = None,
        workers: int = DEFAULT_WORKERS,
        page_size: int = PAGE_SIZE,
        request_timeout: float = 30.0,
    ) -> None:
        self._endpoint, self._loopback = check_endpoint(
            compute_endpoint if compute_endpoint is not None else os.environ.get(COMPUTE_ENDPOINT_ENV),
            "compute",
        )
        project = project or os.environ.get(PROJECT_ENV)
        if not project:
            raise AuthError("no GCP project: set GOOGLE_CLOUD_PROJECT or pass --project")
        self.project = project
        self._policy = policy or RetryPolicy()
        self.counter = counter or CallCounter()
        self._workers = max(1, workers)
        self._page_size = page_size
        self._timeout = request_timeout
        self._local = threading.local()
        self._creds = CredentialSource()
        self._abort = threading.Event()

    # -- clients and calls -------------------------------------------------------------------
    def _credentials(self) -> Credentials:
        return self._creds.get(self._loopback)

    def _client(self, kind: str = "InstancesClient") -> Any:
        """One client of each kind per thread (the REST transport's session is not documented
        thread-safe): ``InstancesClient``, ``RegionInstanceGroupManagersClient``,
        ``InstanceGroupManagersClient``."""
        clients: dict[str, Any] = getattr(self._local, "clients", None) or {}
        self._local.clients = clients
        client = clients.get(kind)
        if client is None:
            from google.api_core.client_options import ClientOptions
            from google.cloud import compute_v1

            options = ClientOptions(api_endpoint=self._endpoint) if self._endpoint else None
            client = clients[kind] = getattr(compute_v1, kind)(
                credentials=self._credentials(), client_options=options
            )
        return client

    def _call(self, api: Api, fn: Callable[[], T]) -> T:
        def attempt() -> T:
            self.counter.add()
            return fn()

        try:
            return call_with_retry(attempt, transient=is_transient, policy=self._policy)
        except Exception as error:
            auth = auth_error(error, api, self.project)
            if auth is not None:
                raise auth from None
            raise

    # -- sweep -------------------------------------------------------------------------------
    def sweep(self, regions: list[str] | None, now: datetime, act: bool, price: PriceFn) -> SweepResult:
        """List the project's orphans (in ``regions``' zones, or everywhere) and, with ``act``,
        delete them."""
        self._abort.clear()
        result = SweepResult(cloud=self.cloud, acted=act)
        start = self.counter.count
        wanted: set[str] | None = None
        if regions:
            wanted = {r for r in regions if GCP_REGION.fullmatch(r)}
            ignored = sorted(set(regions) - wanted)
            if ignored:
                result.notes.append(f"ignored names that are not GCP regions: {', '.join(ignored)}")
            if not wanted:
                return result
        try:
            seen = self._find(wanted, now, price, result)
        except AuthError as error:
            result.auth_error = str(error)
            result.calls = self.counter.count - start
            return result
        except Exception as error:
            why = f"{INSTANCES_LIST.name}: {describe_error(error)}"
            for region in sorted(wanted) if wanted else ["*"]:
                result.regions_failed[region] = why
            result.candidates.clear()
            result.calls = self.counter.count - start
            return result
        result.regions_ok = (wanted if wanted is not None else seen) - set(result.regions_failed)
        if act and result.candidates:
            self._delete_all(result)
        result.sort()
        result.calls = self.counter.count - start
        return result

    def _pages(self, expression: str) -> Iterator[Any]:
        from google.cloud import compute_v1

        client = self._client()
        token = ""
        tokens: set[str] = set()
        while True:
            fields: dict[str, Any] = {
                "project": self.project,
                "max_results": self._page_size,
            }
            if expression:
                fields["filter"] = expression
            if token:
                fields["page_token"] = token
            request = compute_v1.AggregatedListInstancesRequest(**fields)

            def page(request: Any = request) -> Any:
                pager = client.aggregated_list(request=request, retry=None, timeout=self._timeout)
                return next(iter(pager.pages))

            response = self._call(INSTANCES_LIST, page)
            yield response
            token = response.next_page_token
            if not token:
                return
            if token in tokens:
                raise RuntimeError(f"page token {token!r} repeated")
            tokens.add(token)

    def _find(self, wanted: set[str] | None, now: datetime, price: PriceFn, result: SweepResult) -> set[str]:
        """Fill ``result`` with the orphans; return the regions whose zones answered."""
        from google.api_core.exceptions import BadRequest

        try:
            responses = list(self._pages(MANAGED_FILTER))
        except BadRequest:
            result.notes.append(
                f"the API refused the filter {MANAGED_FILTER!r}: listed every VM and filtered here"
            )
            responses = list(self._pages(""))
        seen: set[str] = set()
        found: dict[str, Candidate] = {}
        members: dict[str, list[Candidate]] = {}
        for response in responses:
            for scope in response.unreachables:
                zone = _last(scope)
                region = region_of(zone) if zone.count("-") >= 2 else zone
                if wanted is None or region in wanted:
                    result.regions_failed[region] = f"{INSTANCES_LIST.name}: zone {zone} unreachable"
            for scope, scoped in response.items.items():
                if not scope.startswith("zones/"):
                    continue
                zone = _last(scope)
                region = region_of(zone)
                if wanted is not None and region not in wanted:
                    continue
                if scoped.warning.code == "UNREACHABLE":
                    result.regions_failed[region] = f"{INSTANCES_LIST.name}: zone {zone} unreachable"
                    continue
                seen.add(region)
                for instance in scoped.instances:
                    candidate = self._candidate(instance, zone, now, price)
                    if candidate is None:
                        continue
                    proof = gpufit_account(instance, self.project, candidate.stack, candidate.workload)
                    if proof is None:
                        result.notes.append(
                            f"VM {zone}/{instance.name} is labelled {LABEL_MANAGED} but does not run as"
                            " the service account gpufit makes for"
                            f" {candidate.stack}/{candidate.workload}: left alone"
                        )
                        continue
                    candidate = replace(candidate, provenance=proof)
                    group = _created_by(instance)
                    if group is None:
                        found[candidate.instance_id] = candidate
                    else:  # deleting it would make its group recreate it: sweep the group
                        members.setdefault(group, []).append(candidate)
        result.candidates = [*found.values(), *(_group_candidate(g, vms) for g, vms in members.items())]
        return seen

    @staticmethod
    def _candidate(instance: Any, zone: str, now: datetime, price: PriceFn) -> Candidate | None:
        status = str(instance.status)
        if status in LEFT_STATUSES:
            return None
        if instance.zone and _last(instance.zone) != zone:
            return None  # a VM listed under another zone's scope: not ours to judge here
        labels = dict(instance.labels)
        reason = decide(labels, now, cloud="gcp")  # checks the managed label again
        if reason is None:
            return None
        expires_at, _ = read_expiry(labels, cloud="gcp")
        stack, workload = stack_and_workload(labels, cloud="gcp")
        accelerators = [
            (_last(a.accelerator_type), int(a.accelerator_count)) for a in instance.guest_accelerators
        ]
        kind = instance_type(_last(instance.machine_type), accelerators)
        scheduling = instance.scheduling
        spot = scheduling.provisioning_model == "SPOT" or bool(scheduling.preemptible)
        market = "spot" if spot else "on-demand"
        region = region_of(zone)
        return Candidate(
            cloud="gcp",
            region=region,
            zone=zone,
            instance_id=str(instance.id) if instance.id else f"{zone}/{instance.name}",
            name=str(instance.name),
            instance_type=kind,
            stack=stack,
            workload=workload,
            expires_at=expires_at,
            reason=reason,
            hourly_usd=price("gcp", kind, region, zone, market),
            market=market,
            state=status,
            billing=status in BILLING_STATUSES,
        )

    # -- acting ------------------------------------------------------------------------------
    def _delete_all(self, result: SweepResult) -> None:
        workers = min(self._workers, len(result.candidates))
        with ThreadPoolExecutor(workers, thread_name_prefix="gpufit-sweep-gcp") as pool:
            jobs = {c.instance_id: (c, pool.submit(self._delete, c)) for c in result.candidates}
            for instance_id, (candidate, job) in jobs.items():
                try:
                    outcome, problem = job.result()
                except _NotAttempted:
                    result.failed[instance_id] = "not attempted after a permission error"
                    continue
                except AuthError as error:
                    result.auth_error = result.auth_error or str(error)
                    result.failed[instance_id] = "not deleted: permission denied"
                    continue
                except Exception as error:
                    why = f"{INSTANCES_DELETE.name}: {describe_error(error)}"
                    result.failed[instance_id] = why
                    if is_transient(error):  # retries spent: the region failed, not just this VM
                        result.regions_failed.setdefault(candidate.region, why)
                        result.regions_ok.discard(candidate.region)
                    continue
                if problem is not None:
                    result.failed[instance_id] = problem
                else:
                    result.actions[instance_id] = outcome

    def _remove_group(self, candidate: Candidate) -> tuple[str, str | None]:
        """Resize the managed instance group to 0 (so it recreates nothing), then delete it:
        ("scaled to 0, deleting" | "already gone", None), or ("", why an operation failed)."""
        from google.api_core.exceptions import NotFound

        match = CREATED_BY.fullmatch(f"projects/{self.project}/{candidate.instance_id}")
        assert match is not None
        scope, where, name = match.groups()
        regional = scope == "regions"
        client = self._client(
            "RegionInstanceGroupManagersClient" if regional else "InstanceGroupManagersClient"
        )
        place = {"region": where} if regional else {"zone": where}
        common = {"project": self.project, "instance_group_manager": name, **place}
        resize_id, delete_id = str(uuid.uuid4()), str(uuid.uuid4())
        try:
            operation = self._call(
                GROUP_RESIZE,
                lambda: client.resize_unary(
                    request={**common, "size": 0, "request_id": resize_id}, retry=None, timeout=self._timeout
                ),
            )
            errors = [f"{e.code}: {e.message}" for e in operation.error.errors]
            if errors:
                return "", f"{GROUP_RESIZE.name} operation failed: {'; '.join(errors)}"[:300]
            self._call(
                GROUP_DELETE,
                lambda: client.delete_unary(
                    request={**common, "request_id": delete_id}, retry=None, timeout=self._timeout
                ),
            )
        except NotFound:
            return "already gone", None
        except AuthError:
            self._abort.set()
            raise
        return "scaled to 0, deleting", None

    def _delete(self, candidate: Candidate) -> tuple[str, str | None]:
        """("deleting" | "already gone", None), or ("", why the operation failed)."""
        from google.api_core.exceptions import NotFound
        from google.cloud import compute_v1

        if self._abort.is_set():
            raise _NotAttempted
        if candidate.kind == "group":
            return self._remove_group(candidate)
        client = self._client()
        request = compute_v1.DeleteInstanceRequest(
            project=self.project,
            zone=candidate.zone,
            instance=candidate.name,
            request_id=str(uuid.uuid4()),  # the same id on every retry: Compute ignores a repeat
        )
        try:
            operation = self._call(
                INSTANCES_DELETE,
                lambda: client.delete_unary(request=request, retry=None, timeout=self._timeout),
            )
        except NotFound:
            return "already gone", None
        except AuthError:
            self._abort.set()
            raise
        errors = [f"{e.code}: {e.message}" for e in operation.error.errors]
        if errors:
            return "", f"{INSTANCES_DELETE.name} operation failed: {'; '.join(errors)}"[:300]
        return "deleting", None
