"""Google Cloud's rules, each with the page that states it: every body checked against the
discovery documents (field names, types, enums, patterns, required fields) and Google's
documented rules the documents leave in prose (resource names, labels, bucket names, service
account and role ids, run-time limits, metadata sizes, enabled APIs, ...)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from tests.contracts import gcp_requests as api
from tests.contracts.coverage import unread
from tests.contracts.gcp_discovery import document, problems, source
from tests.contracts.model import Resource, Rule, Stack

INSTANCE = "gcp:compute/instance:Instance"
TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
NETWORK = "gcp:compute/network:Network"
FIREWALL = "gcp:compute/firewall:Firewall"
HEALTH = "gcp:compute/regionHealthCheck:RegionHealthCheck"
ARMOR = "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy"
BUCKET = "gcp:storage/bucket:Bucket"
ACCOUNT = "gcp:serviceaccount/account:Account"
ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
SECRET = "gcp:secretmanager/secret:Secret"
JOB = "gcp:cloudscheduler/job:Job"
RESIZE = "gcp:compute/regionResizeRequest:RegionResizeRequest"
SERVICE = "gcp:projects/service:Service"
WORKFLOW = "gcp:workflows/workflow:Workflow"
ADDRESS = "gcp:compute/address:Address"
BACKEND = "gcp:compute/regionBackendService:RegionBackendService"
GROUP_URL = "https://www.googleapis.com/compute/v1/projects/p/regions/europe-north1/instanceGroups/"

RFC1035 = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
"""Compute resource names: "1-63 characters long and match the regular expression
[a-z]([-a-z0-9]*[a-z0-9])?" (every compute resource's ``name`` in the discovery document)."""


def R(typ: str, resource_name: str = "r", /, **inputs: Any) -> Resource:
    return Resource(typ, resource_name, inputs)


def check_discovery(r: Resource, s: Stack) -> Iterator[str]:
    built = api.bodies(r, s)
    for body in built or []:
        yield from problems(body.api, body.schema, body.body, body.method)


def check_coverage(r: Resource, s: Stack) -> Iterator[str]:
    if r.typ not in api.BUILDERS:
        yield f"no contract knows what {r.typ} sends: map it in tests/contracts/gcp_requests.py"
        return
    for key in api.unmapped(r):
        yield (
            f"input {key!r} reaches no request the contracts know: map it in tests/contracts/gcp_requests.py"
        )
    top_level = api.MAPPED.get(r.typ, frozenset())
    for path in unread(r, s, api.bodies, top_level, api.IGNORED.get(r.typ, ())):
        yield (
            f"nested input {path!r} reaches no request the contracts know: map it in "
            "tests/contracts/gcp_requests.py, or list it in IGNORED with the reason"
        )


def check_compute_name(r: Resource, s: Stack) -> Iterator[str]:
    name = api.template_name(r) if r.typ == TEMPLATE else api.name_of(r)
    if not re.fullmatch(RFC1035, name):
        yield f"name {name!r} ({len(name)} characters) is not 1-63 of [a-z]([-a-z0-9]*[a-z0-9])?"
    if r.typ == TEMPLATE and r.get("namePrefix") and len(r.get("namePrefix")) > 54:
        yield f"name_prefix {r.get('namePrefix')!r} is over 54 characters"
    if r.typ == MIG and r.get("baseInstanceName"):
        base = r.get("baseInstanceName")
        if len(base) > 58 or not re.fullmatch(r"[a-z](?:[-a-z0-9]{0,57})", base):
            yield f"base_instance_name {base!r}: at most 58 of [a-z][-a-z0-9]*"


LABEL_KEY = r"[\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}"
LABEL_VALUE = r"[\p{Ll}\p{Lo}\p{N}_-]{0,63}"


def _label_maps(r: Resource) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(r.get("labels"), Mapping):
        yield "labels", r.get("labels")
    params = (r.get("bootDisk") or {}).get("initializeParams") or {}
    if params.get("labels"):
        yield "bootDisk.initializeParams.labels", params["labels"]
    for i, disk in enumerate(r.get("disks") or []):
        if disk.get("labels"):
            yield f"disks[{i}].labels", disk["labels"]


def check_labels(r: Resource, s: Stack) -> Iterator[str]:
    import regex

    for where, labels in _label_maps(r):
        if len(labels) > 64:
            yield f"{where}: {len(labels)} labels, over 64"
        for key, value in labels.items():
            if not regex.fullmatch(LABEL_KEY, str(key)) or len(str(key).encode()) > 128:
                yield (
                    f"{where}: key {key!r}: a lowercase letter, then up to 62 lowercase letters, digits, _ "
                    "or -"
                )
            if not regex.fullmatch(LABEL_VALUE, str(value)) or len(str(value).encode()) > 128:
                yield f"{where}[{key!r}]: value {value!r}: up to 63 lowercase letters, digits, _ or -"


def check_bucket_name(r: Resource, s: Stack) -> Iterator[str]:
    name = api.bucket_name(r)
    if "." in name:
        yield f"bucket name {name!r} has dots (domain-named buckets need verification)"
    if not 3 <= len(name) <= 63 or not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]", name):
        yield f"bucket name {name!r}: 3-63 lowercase letters, digits, - and _, a letter or digit at each end"
    if name.startswith("goog"):
        yield f"bucket name {name!r} begins with goog"
    if re.search(r"g[o0][o0]g[l1]e", name):
        yield f"bucket name {name!r} contains google or a close misspelling"
    try:
        ipaddress.IPv4Address(name)
        yield f"bucket name {name!r} is an IP address"
    except ValueError:
        pass


def check_account_id(r: Resource, s: Stack) -> Iterator[str]:
    account = str(r.get("accountId") or "")
    if not re.fullmatch(r"[a-z](?:[-a-z0-9]{4,28}[a-z0-9])", account):
        yield f"account_id {account!r}: 6-30 of [a-z][-a-z0-9]*[a-z0-9]"
    if len(str(r.get("displayName") or "").encode()) > 100:
        yield "display_name is over 100 bytes"
    if len(str(r.get("description") or "").encode()) > 256:
        yield "description is over 256 bytes"


def check_role_id(r: Resource, s: Stack) -> Iterator[str]:
    role = str(r.get("roleId") or "")
    if not re.fullmatch(r"[a-zA-Z0-9_.]{3,64}", role):
        yield f"role_id {role!r}: 3-64 letters, digits, _ and ."
    if len(str(r.get("title") or "").encode()) > 100:
        yield "title is over 100 bytes"


def check_secret_id(r: Resource, s: Stack) -> Iterator[str]:
    secret = str(r.get("secretId") or "")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,255}", secret):
        yield f"secret_id {secret!r}: 1-255 letters, digits, - and _"


def _seconds(text: Any) -> float | None:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(text or ""))
    return float(found.group(1)) if found else None


def check_scheduler_job(r: Resource, s: Stack) -> Iterator[str]:
    name = api.name_of(r)
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,500}", name):
        yield f"job name {name!r}: 1-500 letters, digits, - and _"
    if len(str(r.get("description") or "")) > 500:
        yield "description is over 500 characters"
    deadline = _seconds(r.get("attemptDeadline"))
    if r.get("httpTarget") and deadline is not None and not 15 <= deadline <= 1800:
        yield f"attempt_deadline {r.get('attemptDeadline')}: 15 s to 30 min for an HTTP target"
    retries = (r.get("retryConfig") or {}).get("retryCount")
    if retries is not None and not 0 <= retries <= 5:
        yield f"retry_count {retries}: 0-5"


def check_workflow(r: Resource, s: Stack) -> Iterator[str]:
    name = api.name_of(r)
    if not re.fullmatch(r"[A-Za-z](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9])?", name):
        yield f"workflow id {name!r}: 1-64 letters, digits, _ and -, from a letter to a letter or digit"
    if len(str(r.get("sourceContents") or "").encode()) > 128 * 1024:
        yield "sourceContents is over 128 KB"
    env = r.get("userEnvVars") or {}
    if len(env) > 20:
        yield f"{len(env)} userEnvVars: at most 20"
    for key, value in env.items():
        if not key or key.startswith(("GOOGLE", "WORKFLOWS")):
            yield f"userEnvVars key {key!r}: not empty, not starting with GOOGLE or WORKFLOWS"
        if len(str(value).encode()) > 4096:
            yield f"userEnvVars {key}: over 4 KiB"


METADATA_VALUE_MAX = 256 * 1024
METADATA_TOTAL_MAX = 512 * 1024


def check_metadata(r: Resource, s: Stack) -> Iterator[str]:
    metadata = r.get("metadata") or {}
    total = 0
    for key, value in metadata.items():
        size = len(str(key).encode()) + len(str(value).encode())
        total += size
        if not re.fullmatch(r"[a-zA-Z0-9-_]{1,128}", str(key)):
            yield f"metadata key {key!r}: 1-128 of [a-zA-Z0-9-_]"
        if len(str(value).encode()) > METADATA_VALUE_MAX:
            yield f"metadata[{key!r}] is {len(str(value).encode())} bytes, over 256 KiB"
    if total >= METADATA_TOTAL_MAX:
        yield f"metadata is {total} bytes in all, not under 512 KB"


RUN_LIMIT = timedelta(days=120)


def check_run_duration(r: Resource, s: Stack) -> Iterator[str]:
    scheduling = r.get("scheduling") or {}
    seconds = (scheduling.get("maxRunDuration") or {}).get("seconds")
    if seconds is not None and not 30 <= int(seconds) <= RUN_LIMIT.total_seconds():
        yield f"max_run_duration {seconds} s: 30 s to 120 days"
    at = scheduling.get("terminationTime")
    if at and s.now is not None:
        moment = datetime.fromisoformat(str(at).replace("Z", "+00:00"))
        if not s.now + timedelta(seconds=30) <= moment <= s.now + RUN_LIMIT:
            yield f"termination_time {at}: 30 s to 120 days from now ({s.now.isoformat()})"
    if (seconds is not None or at) and scheduling.get("instanceTerminationAction") not in ("STOP", "DELETE"):
        yield "a run-time limit needs instance_termination_action STOP or DELETE"
    if (
        (seconds is not None or at)
        and scheduling.get("preemptible")
        and scheduling.get("provisioningModel") != "SPOT"
    ):
        yield "run-time limits do not apply to legacy preemptible VMs (use provisioning_model SPOT)"


def check_spot(r: Resource, s: Stack) -> Iterator[str]:
    scheduling = r.get("scheduling") or {}
    if scheduling.get("provisioningModel") == "SPOT":
        if scheduling.get("automaticRestart"):
            yield "a Spot VM takes automatic_restart false"
        if scheduling.get("onHostMaintenance", "TERMINATE") != "TERMINATE":
            yield "a Spot VM takes on_host_maintenance TERMINATE"


def check_standard(r: Resource, s: Stack) -> Iterator[str]:
    """compute.v1 ``Scheduling.provisioningModel`` (rev. 20261106): STANDARD is "Standard
    provisioning with user controlled runtime, no discounts", SPOT "Heavily discounted, no
    guaranteed runtime"; ``preemptible`` marks the legacy discounted model (documented).

    The termination-action half is OUR rule, INFERRED, not a documented refusal: the action is
    documented only for Spot VMs and run-time limits, and Compute's acceptance of it on an
    unlimited STANDARD VM is unconfirmed (no Google page or API error found either way). Sources:
    pulumi-gcp 10.2 ``pulumi_gcp/compute/_inputs.py`` ``RegionInstanceTemplateSchedulingArgs``
    docstring, "Describe the type of termination action for `SPOT` VM" (the instance's says only
    "for VM"); compute.v1 rev. 20261106 ``Scheduling.instanceTerminationAction``, "Specifies the
    termination action for the instance", and ``terminationTime``/``maxRunDuration``, "If
    specified, the instance termination action will be performed at the termination time" / "at
    the end of the run duration". gpufit keeps the field off such a template because it does
    nothing there (the deadline is the Cloud Scheduler job's), not because Compute refuses it."""
    scheduling = r.get("scheduling") or {}
    if str(scheduling.get("provisioningModel") or "").upper() != "STANDARD":
        return
    if scheduling.get("preemptible"):
        yield "a STANDARD VM is not preemptible (preemptible is the legacy spot model)"
    limited = scheduling.get("terminationTime") or (scheduling.get("maxRunDuration") or {}).get("seconds")
    if scheduling.get("instanceTerminationAction") and not limited:
        yield (
            "a STANDARD VM takes instance_termination_action only with a run-time limit "
            "(termination_time or max_run_duration); without one it is documented only as a Spot "
            "VM's preemption action (gpufit's inferred rule, not a documented refusal)"
        )


GVNIC_SERIES = ("a3-", "a4-", "a4x-", "g4-")
HYPERDISK_SERIES = ("a3-ultragpu-", "a4-", "a4x-", "g4-")


def check_machine_series(r: Resource, s: Stack) -> Iterator[str]:
    machine = str(r.get("machineType") or "")
    nics = r.get("networkInterfaces") or []
    if machine.startswith(GVNIC_SERIES) and any(n.get("nicType") not in ("GVNIC", "MRDMA") for n in nics):
        yield f"{machine} boots with gVNIC interfaces only"
    disk = ((r.get("bootDisk") or {}).get("initializeParams") or {}).get("type")
    disks = [d.get("diskType") for d in r.get("disks") or []]
    for kind in [disk, *disks]:
        if (
            kind is not None
            and machine.startswith(HYPERDISK_SERIES)
            and not str(kind).startswith("hyperdisk-")
        ):
            yield f"{machine} attaches Hyperdisk only, not {kind}"


def check_disk_size(r: Resource, s: Stack) -> Iterator[str]:
    sizes = [((r.get("bootDisk") or {}).get("initializeParams") or {}).get("size")]
    sizes += [d.get("diskSizeGb") for d in r.get("disks") or []]
    for size in sizes:
        if size is not None and int(size) < 10:
            yield f"a boot disk of {size} GB: at least 10"


def check_network(r: Resource, s: Stack) -> Iterator[str]:
    mtu = r.get("mtu")
    if mtu is not None and not 1300 <= int(mtu) <= 8896:
        yield f"mtu {mtu}: 1300-8896"


def check_health_check(r: Resource, s: Stack) -> Iterator[str]:
    timeout, interval = r.get("timeoutSec"), r.get("checkIntervalSec")
    if timeout is not None and interval is not None and timeout > interval:
        yield f"timeout_sec {timeout} is over check_interval_sec {interval}"


def check_group_policies(r: Resource, s: Stack) -> Iterator[str]:
    update = r.get("updatePolicy") or {}
    if update and not (update.get("maxSurgeFixed") or update.get("maxUnavailableFixed")):
        yield "update policy: max_surge or max_unavailable must be above 0"
    healing = r.get("autoHealingPolicies") or []
    for policy in [healing] if isinstance(healing, Mapping) else healing:
        delay = policy.get("initialDelaySec")
        if delay is not None and not 0 <= delay <= 3600:
            yield f"autohealing initial_delay_sec {delay}: 0-3600"


def check_group_versions(r: Resource, s: Stack) -> Iterator[str]:
    versions = r.get("versions") or []
    unset = [v for v in versions if not v.get("targetSize")]
    if versions and len(unset) != 1:
        yield f"{len(unset)} of the group's {len(versions)} versions leave targetSize unset: exactly one must"
    for v in versions:
        size = v.get("targetSize") or {}
        if "fixed" in size and "percent" in size:
            yield f"version {v.get('name')}: targetSize is fixed or percent, not both"
        if "fixed" in size and int(size["fixed"]) < 1:
            yield f"version {v.get('name')}: targetSize.fixed {size['fixed']} must be a positive integer"


def _compute_methods() -> Iterator[tuple[str, dict[str, Any]]]:
    def walk(resources: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        for resource in resources.values():
            yield from ((m["id"], m) for m in resource.get("methods", {}).values())
            yield from walk(resource.get("resources", {}))

    yield from walk(document("compute.v1")["resources"])


def check_compute_call(r: Resource, s: Stack) -> Iterator[str]:
    """A Scheduler job's call to the Compute API is one of compute.v1's methods: its HTTP
    method, its path (``flatPath`` with each ``{param}`` one segment, matching the
    parameter's pattern where it has one) and query parameters that method takes."""
    http = r.get("httpTarget") or {}
    uri = str(http.get("uri") or "")
    prefix = "https://compute.googleapis.com/compute/v1/"
    if not uri.startswith(prefix):
        return
    path, _, query = uri[len(prefix) :].partition("?")
    verb = str(http.get("httpMethod") or "POST")
    given = {kv.partition("=")[0] for kv in query.split("&") if kv}
    for method_id, method in _compute_methods():
        names = re.findall(r"\{(\w+)\}", method["flatPath"])
        pattern = re.escape(method["flatPath"])
        for name in names:
            pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>[^/]+)")
        found = re.fullmatch(pattern, path)
        if found is None or method["httpMethod"] != verb:
            continue
        params = method.get("parameters", {})
        for name in names:
            rule = params.get(name, {}).get("pattern")
            if rule and not re.fullmatch(rule, found.group(name)):
                yield f"{method_id}: {name} {found.group(name)!r} does not match {rule}"
        query_params = {n for n, p in params.items() if p.get("location") == "query"}
        for name in sorted(given - query_params):
            yield f"{method_id} takes no query parameter {name!r}"
        for name, p in params.items():
            if p.get("location") == "query" and p.get("required") and name not in given:
                yield f"{method_id} needs the query parameter {name!r}"
        return
    yield f"{verb} {uri}: no compute.v1 method has that path and HTTP method"


def check_flex_group(r: Resource, s: Stack) -> Iterator[str]:
    """A resize request's group is set up as pulumi-gcp's resize-request example sets it."""
    group = next((m for m in s.of_type(MIG) if api.name_of(m) == r.get("instanceGroupManager")), None)
    if group is None:
        return
    name, shape = api.name_of(group), group.get("distributionPolicyTargetShape")
    if shape != "ANY_SINGLE_ZONE":
        yield f"group {name}: target shape {shape}, not ANY_SINGLE_ZONE"
    if (group.get("instanceLifecyclePolicy") or {}).get("defaultActionOnFailure") != "DO_NOTHING":
        yield f"group {name}: default action on failure is not DO_NOTHING (REPAIR recreates VMs)"
    if (group.get("updatePolicy") or {}).get("instanceRedistributionType") != "NONE":
        yield f"group {name}: instance redistribution is not NONE"


def _flex_groups() -> Stack:
    s = Stack()
    good = {
        "name": "m",
        "distributionPolicyTargetShape": "ANY_SINGLE_ZONE",
        "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
        "updatePolicy": {"instanceRedistributionType": "NONE"},
    }
    s.add(Resource(MIG, "m", good), "m-id")
    s.add(Resource(MIG, "b", {**good, "name": "b", "distributionPolicyTargetShape": "BALANCED"}), "b-id")
    s.add(Resource(MIG, "r", {**good, "name": "r", "instanceLifecyclePolicy": {}}), "r-id")
    return s


def check_armor(r: Resource, s: Stack) -> Iterator[str]:
    rules = r.get("rules") or []
    for rule in rules:
        ranges = ((rule.get("match") or {}).get("config") or {}).get("srcIpRanges") or []
        if len(ranges) > 10:
            yield f"rule {rule.get('priority')}: {len(ranges)} source ranges, over 10"
    if not any(
        rule.get("priority") == 2147483647
        and ((rule.get("match") or {}).get("config") or {}).get("srcIpRanges") == ["*"]
        for rule in rules
    ):
        yield "no default rule (priority 2147483647 matching *)"


GROUP_URL_PATTERN = re.compile(
    r"https://www\.googleapis\.com/compute/v1/projects/[^/]+/regions/(?P<region>[^/]+)/instanceGroups/(?P<name>[^/]+)"
)
"""A regional instance group's URL, as ``RegionInstanceGroupManager.instance_group`` gives it
("The full URL of the instance group created by the manager", pulumi-gcp); the group carries
the manager's name."""


def check_backends(r: Resource, s: Stack) -> Iterator[str]:
    """compute.v1 ``Backend``: ``group`` "must use the *fully-qualified* URL (starting with
    https://www.googleapis.com/) ... Partial URLs are not supported"; ``capacityScaler``: "The
    valid ranges are 0.0 and [0.1,1.0] ... You cannot configure a setting of 0 when there is only
    one backend attached to the backend service". ``BackendService.portName``: "The named port
    must be defined on each backend instance group" (pulumi-gcp: "API sets a default of "http"
    if not given"). A regional backend service "defines a regionally-scoped group of virtual
    machines" (pulumi-gcp ``RegionBackendService``; the regional external Application Load
    Balancer's backend service has regional scope in the table of
    https://cloud.google.com/load-balancing/docs/backend-service): each group must be the
    instance group of a regional group manager of the stack in the service's region, so its
    named ports can be read. pulumi-gcp 10.2 ``RegionBackendServiceBackend.group``: "No two
    backends in a backend service are allowed to use same Instance Group resource"."""
    backends = r.get("backends") or []
    groups = [b.get("group") for b in backends]
    for group in sorted({g for g in groups if isinstance(g, str) and groups.count(g) > 1}):
        yield f"group {group!r} is the group of {groups.count(group)} backends"
    region = r.get("region") or s.region
    port_name = r.get("portName") or "http"
    managers = {api.name_of(m): m for m in s.of_type(MIG)}
    for n, backend in enumerate(backends):
        group = backend.get("group")
        if isinstance(group, str) and not group.startswith("https://www.googleapis.com/"):
            yield f"backend {n}: group {group!r} is not a fully-qualified URL"
        elif isinstance(group, str):
            found = GROUP_URL_PATTERN.fullmatch(group)
            manager = managers.get(found.group("name")) if found else None
            if found is None or manager is None:
                yield f"backend {n}: group {group!r} is not the instance group of a regional group manager"
            elif found.group("region") != region or (manager.get("region") or s.region) != region:
                yield f"backend {n}: group {group!r} is not in the backend service's region {region}"
            elif port_name not in {p.get("name") for p in manager.get("namedPorts") or []}:
                yield f"backend {n}: group {found.group('name')} has no named port {port_name!r}"
        scaler = backend.get("capacityScaler")
        if scaler is None:
            continue
        if scaler != 0 and not 0.1 <= scaler <= 1.0:
            yield f"backend {n}: capacityScaler {scaler} is neither 0 nor in [0.1, 1.0]"
        if scaler == 0 and len(backends) == 1:
            yield "capacityScaler 0 on the only backend"


def _backend_groups() -> Stack:
    s = Stack(region="europe-north1")
    serve0 = [{"name": "serve0", "port": 8000}]
    for name, region, ports in [
        ("g", "europe-north1", serve0),
        ("f", "europe-north1", serve0),
        ("bare", "europe-north1", []),
        ("east", "us-east4", serve0),
    ]:
        s.add(Resource(MIG, name, {"name": name, "region": region, "namedPorts": ports}), f"{name}-id")
    return s


SERVICE_OF = {
    "gcp:compute/": "compute.googleapis.com",
    "gcp:storage/": "storage.googleapis.com",
    "gcp:serviceaccount/": "iam.googleapis.com",
    "gcp:projects/iAMCustomRole": "iam.googleapis.com",
    "gcp:projects/iAMMember": "cloudresourcemanager.googleapis.com",
    "gcp:secretmanager/": "secretmanager.googleapis.com",
    "gcp:cloudscheduler/": "cloudscheduler.googleapis.com",
    "gcp:certificatemanager/": "certificatemanager.googleapis.com",
    "gcp:workflows/": "workflows.googleapis.com",
}
"""The API each resource is created through (its discovery document's ``rootUrl`` host)."""


def service_of(typ: str) -> str | None:
    return next((svc for prefix, svc in SERVICE_OF.items() if typ.startswith(prefix)), None)


def check_apis_enabled(r: Resource, s: Stack) -> Iterator[str]:
    enabled = {str(x.get("service")): x for x in s.of_type(SERVICE)}
    for resource in s.resources:
        needed = service_of(resource.typ)
        if needed is None:
            continue
        service = enabled.get(needed)
        if service is None:
            yield f"{resource.typ} {resource.name}: {needed} is not enabled by the stack"
        elif service.urn and service.urn not in s.depends_on(resource):
            yield f"{resource.typ} {resource.name}: created without waiting for {needed} to be enabled"


def check_service(r: Resource, s: Stack) -> Iterator[str]:
    if not re.fullmatch(r"[a-z0-9-]+\.googleapis\.com", str(r.get("service") or "")):
        yield f"service {r.get('service')!r} is not an API service name"
    if r.get("disableOnDestroy", True) is not False:
        yield "disable_on_destroy must be false: destroying one stack would turn the API off for every other"


def _rule(
    id: str, summary: str, url: str, applies: Iterable[str], check: Any, *examples: Any, **extra: Any
) -> Rule:
    if extra.get("whole_stack"):
        accepting, refusing = examples
        return Rule(
            id,
            summary,
            url,
            tuple(applies),
            check,
            accepting_stack=accepting,
            refusing_stack=refusing,
            **extra,
        )
    accepts, refuses = examples
    return Rule(id, summary, url, tuple(applies), check, tuple(accepts), tuple(refuses), **extra)


def _apis_stack(wait: bool) -> Stack:
    s = Stack()
    service = Resource(SERVICE, "compute-api", {"service": "compute.googleapis.com"}, urn="urn:svc")
    s.add(service, "svc-id")
    network = Resource(NETWORK, "net", {}, urn="urn:net", dependencies=("urn:svc",) if wait else ())
    s.add(network, "net-id")
    s.add(Resource(FIREWALL, "fw", {}, urn="urn:fw", dependencies=("urn:net",)), "fw-id")
    return s


LABELS = {"gpufit-stack": "dev", "gpufit-expires-at": "2026-12-04t13-00-00z"}
NOW = datetime.fromisoformat("2026-12-02T12:00:00+00:00")
ALL = ("gcp:*",)

RULES: tuple[Rule, ...] = (
    _rule(
        "gcp.discovery",
        "every body matches the API's discovery document: field names, types, enums, patterns, required "
        "fields",
        source("compute.v1"),
        ALL,
        check_discovery,
        [R(NETWORK, "net", autoCreateSubnetworks=False, mtu=8896)],
        [
            R(NETWORK, "net", mtu="jumbo"),
            R(FIREWALL, "fw", direction="IN"),
            R(INSTANCE, "vm", scheduling={"provisioningModel": "PREEMPTIBLE"}),
        ],
    ),
    _rule(
        "gcp.contract-coverage",
        "every resource type and input, nested ones included, maps to the request it becomes (or is listed "
        "as ignored, with the reason)",
        "https://github.com/hashicorp/terraform-provider-google/tree/main/google/services",
        ALL,
        check_coverage,
        [R(NETWORK, "net", autoCreateSubnetworks=False)],
        [
            R("gcp:compute/disk:Disk", "d", size=10),
            R(NETWORK, "net", enableUlaInternalIpv6=True),
            R(SECRET, "s", replication={"userManaged": {"replicas": [{"location": "mars-central1"}]}}),
            R(MIG, "m", updatePolicy={"maxSurgeFixed": 1, "replacementMethod": "TELEPORT"}),
        ],
    ),
    _rule(
        "gcp.compute-name",
        "compute resource names: 1-63 of [a-z]([-a-z0-9]*[a-z0-9])?; MIG base names at most 58",
        "https://cloud.google.com/compute/docs/naming-resources#resource-name-format",
        ("gcp:compute/*",),
        check_compute_name,
        [R(FIREWALL, "llama70b-chat-production-intra")],
        [
            R(FIREWALL, "llama70b-chat-production-2026-long-stack-name-intra-cluster"),
            R(NETWORK, "n", name="1net"),
            R(MIG, "m", name="g", baseInstanceName="b" * 59),
        ],
    ),
    _rule(
        "gcp.labels",
        "labels: at most 64; keys start with a lowercase letter; keys and values up to 63 of lowercase "
        "letters, digits, _ and -",
        "https://cloud.google.com/compute/docs/labeling-resources#requirements",
        ALL,
        check_labels,
        [R(BUCKET, "b", labels=LABELS)],
        [
            R(BUCKET, "b", labels={"1team": "x"}),
            R(BUCKET, "b", labels={"team": "A B"}),
            R(INSTANCE, "vm", bootDisk={"initializeParams": {"labels": {"k": "v" * 64}}}),
        ],
    ),
    _rule(
        "gcp.bucket-name",
        "bucket names: 3-63 lowercase letters, digits, - and _; not beginning with goog, not containing "
        "google",
        "https://cloud.google.com/storage/docs/buckets#naming",
        (BUCKET,),
        check_bucket_name,
        [R(BUCKET, "gpufit-llama-dev-ckpt")],
        [
            R(BUCKET, "google-gemma-dev-ckpt"),
            R(BUCKET, "b", name="goog-x"),
            R(BUCKET, "b", name="my-g00gle-data"),
        ],
    ),
    _rule(
        "gcp.service-account-id",
        "service account ids: 6-30 of [a-z][-a-z0-9]*[a-z0-9]; display name up to 100 bytes",
        "https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/create",
        (ACCOUNT,),
        check_account_id,
        [R(ACCOUNT, "sa", accountId="gf-llama-dev-1a2b3c")],
        [R(ACCOUNT, "sa", accountId="gf-llama70b-chat-production-1a2b3c"), R(ACCOUNT, "sa", accountId="gf")],
    ),
    _rule(
        "gcp.custom-role-id",
        "custom role ids: 3-64 letters, digits, _ and .",
        "https://cloud.google.com/iam/docs/reference/rest/v1/projects.roles/create",
        (ROLE,),
        check_role_id,
        [R(ROLE, "role", roleId="gpufitGroup_1a2b3c4d", title="t")],
        [R(ROLE, "role", roleId="gpufit-group", title="t")],
    ),
    _rule(
        "gcp.secret-id",
        "secret ids: 1-255 letters, digits, - and _",
        "https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create",
        (SECRET,),
        check_secret_id,
        [R(SECRET, "s", secretId="llama-dev-api-key")],
        [R(SECRET, "s", secretId="llama.dev/api-key")],
    ),
    _rule(
        "gcp.workflow",
        "Workflows: ids of 1-64 letters, digits, _ and -, starting with a letter; source up to 128 KB; at "
        "most 20 user environment variables, each up to 4 KiB, no key starting with GOOGLE or WORKFLOWS",
        "https://workflows.googleapis.com/$discovery/rest?version=v1 (projects.locations.workflows.create "
        "workflowId; Workflow.sourceContents, Workflow.userEnvVars)",
        (WORKFLOW,),
        check_workflow,
        [
            R(
                WORKFLOW,
                "w",
                name="gpufit-rebalance-0a1b2c3d",
                sourceContents="main: {}",
                userEnvVars={"GPUFIT_X": "1"},
            )
        ],
        [
            R(WORKFLOW, "w", name="1-rebalance"),
            R(WORKFLOW, "w", name="w", userEnvVars={"GOOGLE_X": "1"}),
            R(WORKFLOW, "w", name="w", userEnvVars={"X": "x" * 4097}),
        ],
    ),
    _rule(
        "gcp.scheduler-job",
        "Cloud Scheduler jobs: ids of letters, digits, - and _; description up to 500; HTTP deadline 15 "
        "s-30 min; 0-5 retries",
        "https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs",
        (JOB,),
        check_scheduler_job,
        [
            R(
                JOB,
                "deadline",
                httpTarget={"uri": "https://x"},
                attemptDeadline="320s",
                retryConfig={"retryCount": 5},
            )
        ],
        [
            R(JOB, "deadline", httpTarget={"uri": "https://x"}, attemptDeadline="3600s"),
            R(JOB, "deadline", retryConfig={"retryCount": 6}),
        ],
    ),
    _rule(
        "gcp.metadata",
        "metadata keys [a-zA-Z0-9-_]{1,128}; each value up to 256 KiB; all of it under 512 KB",
        "https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations",
        (INSTANCE, TEMPLATE),
        check_metadata,
        [R(INSTANCE, "vm", metadata={"startup-script": "#!/bin/bash\n"})],
        [
            R(INSTANCE, "vm", metadata={"startup-script": "x" * (256 * 1024 + 1)}),
            R(INSTANCE, "vm", metadata={"startup script": "x"}),
        ],
    ),
    _rule(
        "gcp.run-duration",
        "a VM run-time limit is 30 s to 120 days, with the STOP or DELETE action, not on legacy "
        "preemptible VMs",
        "https://cloud.google.com/compute/docs/instances/limit-vm-runtime",
        (INSTANCE, TEMPLATE),
        check_run_duration,
        [
            R(
                INSTANCE,
                "vm",
                scheduling={"maxRunDuration": {"seconds": 3600}, "instanceTerminationAction": "DELETE"},
            ),
            R(
                TEMPLATE,
                "t",
                scheduling={"terminationTime": "2026-12-04T13:00:00Z", "instanceTerminationAction": "DELETE"},
            ),
        ],
        [
            R(
                INSTANCE,
                "vm",
                scheduling={
                    "maxRunDuration": {"seconds": 200 * 86400},
                    "instanceTerminationAction": "DELETE",
                },
            ),
            R(
                TEMPLATE,
                "t",
                scheduling={"terminationTime": "2027-06-20T12:00:00Z", "instanceTerminationAction": "DELETE"},
            ),
        ],
        context=lambda: Stack(now=NOW),
    ),
    _rule(
        "gcp.spot",
        "a Spot VM takes automatic_restart false and on_host_maintenance TERMINATE",
        "https://cloud.google.com/compute/docs/instances/create-use-spot#create",
        (INSTANCE, TEMPLATE),
        check_spot,
        [
            R(
                INSTANCE,
                "vm",
                scheduling={
                    "provisioningModel": "SPOT",
                    "automaticRestart": False,
                    "onHostMaintenance": "TERMINATE",
                },
            )
        ],
        [R(INSTANCE, "vm", scheduling={"provisioningModel": "SPOT", "automaticRestart": True})],
    ),
    _rule(
        "gcp.standard",
        "a STANDARD (on-demand) VM is not preemptible (documented); and, INFERRED (our rule, not a "
        "documented refusal: the action is documented only for Spot VMs and run-time limits; "
        "Compute's acceptance of it on an unlimited STANDARD VM is unconfirmed), a termination "
        "action only with a run-time limit",
        "https://compute.googleapis.com/$discovery/rest?version=v1 (rev. 20261106 "
        'Scheduling.terminationTime/maxRunDuration: "If specified, the instance termination action '
        'will be performed"); pulumi_gcp/compute/_inputs.py RegionInstanceTemplateSchedulingArgs '
        'instance_termination_action: "Describe the type of termination action for `SPOT` VM"',
        (INSTANCE, TEMPLATE),
        check_standard,
        [
            R(
                TEMPLATE,
                "t",
                scheduling={
                    "provisioningModel": "STANDARD",
                    "preemptible": False,
                    "automaticRestart": True,
                    "terminationTime": "2026-12-04T13:00:00Z",
                    "instanceTerminationAction": "DELETE",
                },
            ),
            R(TEMPLATE, "t", scheduling={"provisioningModel": "STANDARD", "automaticRestart": True}),
        ],
        [
            R(
                TEMPLATE,
                "t",
                scheduling={"provisioningModel": "STANDARD", "instanceTerminationAction": "DELETE"},
            ),
            R(TEMPLATE, "t", scheduling={"provisioningModel": "STANDARD", "preemptible": True}),
        ],
    ),
    _rule(
        "gcp.machine-series",
        "A3/A4/G4 VMs boot with gVNIC only; A3 Ultra/A4/G4 attach Hyperdisk only",
        "https://cloud.google.com/compute/docs/accelerator-optimized-machines",
        (INSTANCE, TEMPLATE),
        check_machine_series,
        [
            R(
                INSTANCE,
                "vm",
                machineType="a3-ultragpu-8g",
                networkInterfaces=[{"nicType": "GVNIC"}],
                bootDisk={"initializeParams": {"type": "hyperdisk-balanced"}},
            )
        ],
        [
            R(INSTANCE, "vm", machineType="a3-highgpu-8g", networkInterfaces=[{}]),
            R(TEMPLATE, "t", machineType="a4-highgpu-8g", disks=[{"diskType": "pd-balanced"}]),
        ],
    ),
    _rule(
        "gcp.disk-size",
        "a boot disk is at least 10 GB",
        "https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert",
        (INSTANCE, TEMPLATE),
        check_disk_size,
        [R(TEMPLATE, "t", disks=[{"diskSizeGb": 200}])],
        [R(TEMPLATE, "t", disks=[{"diskSizeGb": 8}])],
    ),
    _rule(
        "gcp.network-mtu",
        "a VPC network's MTU is 1300-8896",
        "https://cloud.google.com/vpc/docs/mtu",
        (NETWORK,),
        check_network,
        [R(NETWORK, "n", mtu=8896)],
        [R(NETWORK, "n", mtu=9000)],
    ),
    _rule(
        "gcp.health-check",
        "a health check's timeout is not over its interval",
        "https://cloud.google.com/compute/docs/reference/rest/v1/regionHealthChecks",
        (HEALTH,),
        check_health_check,
        [R(HEALTH, "h", timeoutSec=5, checkIntervalSec=15)],
        [R(HEALTH, "h", timeoutSec=20, checkIntervalSec=15)],
    ),
    _rule(
        "gcp.group-policies",
        "a MIG's update policy surges or takes down at least one VM; autohealing delay 0-3600 s",
        "https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers",
        (MIG,),
        check_group_policies,
        [
            R(
                MIG,
                "m",
                updatePolicy={"maxSurgeFixed": 0, "maxUnavailableFixed": 2},
                autoHealingPolicies={"initialDelaySec": 600},
            )
        ],
        [
            R(MIG, "m", updatePolicy={"maxSurgeFixed": 0, "maxUnavailableFixed": 0}),
            R(MIG, "m", autoHealingPolicies={"initialDelaySec": 7200}),
        ],
    ),
    _rule(
        "gcp.group-versions",
        "exactly one of a MIG's versions leaves targetSize unset (it takes the remaining VMs); a fixed "
        "targetSize is a positive integer (compute.v1 InstanceGroupManager.versions, FixedOrPercent)",
        "https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers",
        (MIG,),
        check_group_versions,
        [
            R(MIG, "m", versions=[{"name": "primary", "instanceTemplate": "t"}]),
            R(
                MIG,
                "m",
                versions=[
                    {"name": "reserved", "instanceTemplate": "t", "targetSize": {"fixed": 1}},
                    {"name": "overflow", "instanceTemplate": "u"},
                ],
            ),
        ],
        [
            R(
                MIG,
                "m",
                versions=[
                    {"name": "a", "instanceTemplate": "t"},
                    {"name": "b", "instanceTemplate": "u"},
                ],
            ),
            R(MIG, "m", versions=[{"name": "a", "instanceTemplate": "t", "targetSize": {"fixed": 2}}]),
            R(
                MIG,
                "m",
                versions=[
                    {"name": "a", "instanceTemplate": "t", "targetSize": {"fixed": 0}},
                    {"name": "b", "instanceTemplate": "u"},
                ],
            ),
        ],
    ),
    _rule(
        "gcp.compute-call",
        "a Cloud Scheduler job's Compute API call is a compute.v1 method: its HTTP method, path and "
        "query parameters",
        source("compute.v1"),
        (JOB,),
        check_compute_call,
        [
            R(
                JOB,
                "j",
                httpTarget={
                    "httpMethod": "POST",
                    "uri": "https://compute.googleapis.com/compute/v1/projects/p/regions/r/"
                    "instanceGroupManagers/m/resize?size=0",
                },
            ),
            R(
                JOB,
                "j",
                httpTarget={
                    "httpMethod": "POST",
                    "uri": "https://compute.googleapis.com/compute/v1/projects/p/regions/r/"
                    "instanceGroupManagers/m/resizeRequests/m-flex/cancel",
                },
            ),
        ],
        [
            R(
                JOB,
                "j",
                httpTarget={
                    "httpMethod": "POST",
                    "uri": "https://compute.googleapis.com/compute/v1/projects/p/regions/r/"
                    "instanceGroupManagers/m/resizeRequests/m-flex/stop",
                },
            ),
            R(
                JOB,
                "j",
                httpTarget={
                    "httpMethod": "GET",
                    "uri": "https://compute.googleapis.com/compute/v1/projects/p/regions/r/"
                    "instanceGroupManagers/m/resizeRequests/m-flex/cancel",
                },
            ),
            R(
                JOB,
                "j",
                httpTarget={
                    "httpMethod": "POST",
                    "uri": "https://compute.googleapis.com/compute/v1/projects/p/regions/r/"
                    "instanceGroupManagers/m/resize",
                },
            ),
        ],
    ),
    _rule(
        "gcp.flex-group",
        "a resize request's MIG: ANY_SINGLE_ZONE, default action on failure DO_NOTHING, instance "
        "redistribution NONE (pulumi-gcp 10.2.0's RegionResizeRequest example, "
        "pulumi_gcp/compute/region_resize_request.py; DO_NOTHING: compute.v1 "
        "InstanceGroupManagerInstanceLifecyclePolicy)",
        "https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig",
        (RESIZE,),
        check_flex_group,
        [R(RESIZE, "rr", instanceGroupManager="m")],
        [R(RESIZE, "rr", instanceGroupManager="b"), R(RESIZE, "rr", instanceGroupManager="r")],
        context=_flex_groups,
    ),
    _rule(
        "gcp.backends",
        "a backend's group is the fully-qualified URL of a regional group manager's group in the backend "
        "service's region that defines its named port; its capacityScaler is 0 or in [0.1, 1.0], and not 0 "
        "on the only backend; no group backs it twice",
        source("compute.v1"),
        (BACKEND,),
        check_backends,
        [
            R(BACKEND, "b", portName="serve0", backends=[{"group": GROUP_URL + "g", "capacityScaler": 1.0}]),
            R(
                BACKEND,
                "b",
                portName="serve0",
                backends=[{"group": GROUP_URL + "g"}, {"group": GROUP_URL + "f", "capacityScaler": 0}],
            ),
        ],
        [
            R(BACKEND, "b", portName="serve0", backends=[{"group": "projects/p/regions/r/instanceGroups/g"}]),
            R(
                BACKEND,
                "b",
                portName="serve0",
                backends=[{"group": GROUP_URL + "g", "capacityScaler": 0.05}, {"group": GROUP_URL + "f"}],
            ),
            R(BACKEND, "b", portName="serve0", backends=[{"group": GROUP_URL + "g", "capacityScaler": 0}]),
            # a group without the service's named port; the API's default "http" on one with serve0
            R(
                BACKEND,
                "b",
                portName="serve0",
                backends=[{"group": GROUP_URL + "g"}, {"group": GROUP_URL + "bare"}],
            ),
            R(BACKEND, "b", backends=[{"group": GROUP_URL + "g"}]),
            # another region's group; a zonal group; a group no manager of the stack made
            R(
                BACKEND,
                "b",
                portName="serve0",
                backends=[{"group": GROUP_URL.replace("europe-north1", "us-east4") + "east"}],
            ),
            R(
                BACKEND,
                "b",
                portName="serve0",
                backends=[
                    {"group": GROUP_URL.replace("regions/europe-north1", "zones/europe-north1-a") + "g"}
                ],
            ),
            R(BACKEND, "b", portName="serve0", backends=[{"group": GROUP_URL + "elsewhere"}]),
            R(
                BACKEND,
                "b",
                portName="serve0",
                backends=[{"group": GROUP_URL + "g"}, {"group": GROUP_URL + "g"}],
            ),
        ],
        context=_backend_groups,
    ),
    _rule(
        "gcp.armor",
        "a Cloud Armor rule matches at most 10 ranges; a policy ends with the default rule (2147483647, *)",
        "https://cloud.google.com/armor/docs/security-policy-overview#rules",
        (ARMOR,),
        check_armor,
        [R(ARMOR, "a", rules=[{"priority": 2147483647, "match": {"config": {"srcIpRanges": ["*"]}}}])],
        [
            R(
                ARMOR,
                "a",
                rules=[
                    {
                        "priority": 1000,
                        "match": {"config": {"srcIpRanges": [f"10.0.{i}.0/24" for i in range(11)]}},
                    }
                ],
            )
        ],
    ),
    _rule(
        "gcp.api-service",
        "an API is enabled by its service name and left enabled when one stack is destroyed",
        "https://www.pulumi.com/registry/packages/gcp/api-docs/projects/service/",
        (SERVICE,),
        check_service,
        [R(SERVICE, "s", service="compute.googleapis.com", disableOnDestroy=False)],
        [
            R(SERVICE, "s", service="compute", disableOnDestroy=False),
            R(SERVICE, "s", service="compute.googleapis.com"),
        ],
    ),
    _rule(
        "gcp.apis-enabled",
        "every resource's API is enabled in the project before the resource is created",
        "https://cloud.google.com/service-usage/docs/enable-disable",
        ALL,
        check_apis_enabled,
        lambda: _apis_stack(wait=True),
        lambda: _apis_stack(wait=False),
        whole_stack=True,
    ),
)
