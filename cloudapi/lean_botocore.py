"""A boto3 session for the catalog refresh whose EC2 model holds only what the refresh uses.

botocore builds every client from the whole EC2 service model (~800 operations), parsed once
per session and turned into methods and an event-handler copy once per client. Measured on a
2-core machine, the first EC2 client cost 270–410 ms and each further regional client
20–40 ms: more CPU than the ~50 calls of a 20-region refresh spent parsing answers, and on a
GIL-bound thread pool that CPU, not the network, set the refresh's wall time. With the cut
model, the loader and the handlers below, the first client costs about 30 ms in a fresh
process (18 ms of it parsing ``endpoints.json``) and each further one 2–4 ms.

botocore looks for its data files in its loader's search paths (``botocore.loaders``: extra
search paths such as ``AWS_DATA_PATH`` and ``~/.aws/models``, then its own directory).
gpufit ships ``botocore_data/ec2/<api version>/service-2.json``, a cut of the installed
botocore's EC2 model made by ``scripts/trim_botocore_data.py``: only ``REFRESH_OPERATIONS``,
the shapes they reach, no documentation, and the two big answer structures narrowed to the
members the refresh reads (``READ_MEMBERS``; the XML parser skips elements its shape lacks).
Requests are serialised exactly as with botocore's own model. It is searched after the
user's own data paths and before botocore's. Only the refresh's session uses it; the tests
check it against the installed botocore (pinned in ``pyproject.toml``) and that a refresh
through it produces exactly what botocore's full model produces.

The session's loader (``RefreshLoader``) also makes the first client cheaper without changing
what it loads. botocore's ``Loader.load_service_model`` first lists every service under every
search path (~420 directories: ~900 ``listdir`` and ~3,000 ``stat`` calls, 20–30 ms for each
model type, twice per session), only to check that the one requested is among them; this
loader checks that service's own directories, which answers the same. And its file loader
(``PlainJSONFileLoader``) parses into plain dicts, ordered since Python 3.7, instead of
``OrderedDict``: botocore's 1.2 MB ``endpoints.json`` parses in ~18 ms instead of ~42 ms.

And the session registers only the built-in event handlers that can fire for the services its
clients are of (``SESSION_SERVICES``): botocore registers 127, most of them for S3, RDS,
Glacier and the like, and copies all of them into every client it builds, which then looks
each event up among them (``handler_applies`` says which are kept, and why that is exact;
the tests check each kept event's handlers, and their first/middle/last places, against a
plain session's, with a ``botocore.register_initializer`` plugin present).

(Cutting ``endpoints.json`` the same way was tried and dropped: botocore treats an endpoints
file from outside its own directory as a custom endpoint, which changes endpoint resolution.)
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import DataNotFoundError
from botocore.loaders import ExtrasProcessor, JSONFileLoader, Loader, instance_cache

DATA_DIR = Path(__file__).resolve().parent / "botocore_data"
SERVICE = "ec2"
REFRESH_OPERATIONS = (
    "DescribeRegions",
    "DescribeInstanceTypes",
    "DescribeInstanceTypeOfferings",
    "DescribeSpotPriceHistory",
    "DescribeAvailabilityZones",
    "GetSpotPlacementScores",
)
READ_MEMBERS: Mapping[str, tuple[str, ...]] = {
    "InstanceTypeInfo": (
        "InstanceType",
        "VCpuInfo",
        "MemoryInfo",
        "InstanceStorageInfo",
        "NetworkInfo",
        "GpuInfo",
    ),
    "NetworkInfo": ("NetworkPerformance", "EfaSupported"),
    "InstanceTypeOffering": ("InstanceType", "Location"),
    "SpotPrice": ("AvailabilityZone", "InstanceType", "SpotPrice", "Timestamp"),
    "AvailabilityZone": ("ZoneName", "ZoneId"),
    "SpotPlacementScore": ("Region", "AvailabilityZoneId", "Score"),
}
"""Answer structures narrowed to what ``AwsCatalogFetcher`` reads (``_instance_type``,
``_offerings``, ``_spot``)."""


def trim_service_model(
    model: dict[str, Any],
    operations: tuple[str, ...],
    read_members: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """``model`` (a botocore ``service-2`` document) with only ``operations``, the shapes
    they reach (inputs, outputs, errors, transitively through members, list members and map
    keys/values), structures in ``read_members`` narrowed to those members, and no
    ``documentation`` strings. Raises KeyError for an unknown operation, shape or member."""
    shapes = dict(model["shapes"])
    for name, members in (read_members or {}).items():
        shape = shapes[name]
        shapes[name] = {**shape, "members": {m: shape["members"][m] for m in members}}
    reached: set[str] = set()

    def reach(name: str) -> None:
        if name in reached:
            return
        reached.add(name)
        shape = shapes[name]
        for key in ("member", "key", "value"):
            if key in shape:
                reach(shape[key]["shape"])
        for member in shape.get("members", {}).values():
            reach(member["shape"])

    kept_operations = {}
    for name in operations:
        operation = model["operations"][name]
        kept_operations[name] = operation
        for key in ("input", "output"):
            if key in operation:
                reach(operation[key]["shape"])
        for error in operation.get("errors", []):
            reach(error["shape"])
    trimmed = {key: value for key, value in model.items() if key not in ("operations", "shapes")}
    trimmed["operations"] = kept_operations
    trimmed["shapes"] = {name: shapes[name] for name in sorted(reached)}
    return _without_documentation(trimmed)  # type: ignore[no-any-return]


def _without_documentation(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_documentation(v) for k, v in node.items() if k != "documentation"}
    if isinstance(node, list):
        return [_without_documentation(v) for v in node]
    return node


SESSION_SERVICES = frozenset({"ec2", "pricing", "sts", "sso", "sso-oidc", "signin"})
"""The services the refresh session builds clients of: the refresh's own two, and those
botocore's credential providers build through the session (assume-role and web identity:
sts; IAM Identity Center: sso and sso-oidc; ``aws login``: signin)."""

SESSION_ENDPOINT_PREFIXES = frozenset({"ec2", "api.pricing", "sts", "portal.sso", "oidc", "signin"})
"""The endpoint prefixes of ``SESSION_SERVICES`` (``endpointPrefix`` in their models; the
tests check them against the installed botocore). A few events carry the endpoint prefix
rather than the service's name: ``creating-serializer.<prefix>`` is one."""


def session_event_parts(
    services: frozenset[str] = SESSION_SERVICES, prefixes: frozenset[str] = SESSION_ENDPOINT_PREFIXES
) -> frozenset[str]:
    """The names that can stand as the service part of an event emitted for a client of one
    of ``services``: the services' names and their endpoint prefixes' first parts."""
    return services | {prefix.split(".")[0] for prefix in prefixes}


def handler_applies(event_name: str, services: frozenset[str], aliases: Mapping[str, str]) -> bool:
    """Whether a handler registered for ``event_name`` can fire for a client of one of
    ``services`` (the names its events carry: ``session_event_parts``). botocore names events
    ``<event>.<service>.<operation>...`` (documentation events ``docs.<section>.<service>...``)
    and matches them part by part, ``*`` matching any part; a handler registered without a
    service part fires for every service. Before matching, both the registered and the
    emitted names go through botocore's event aliases (``aliases``: ``EVENT_ALIASES``, e.g.
    ``api.pricing`` → ``pricing``). So a handler whose service part is a plain name, neither
    one of ``services``, nor ``*``, nor any part of an alias, can only fire for that other
    service, and is the only kind this says False to."""
    parts = event_name.split(".")
    at = 2 if parts[0] == "docs" else 1
    if len(parts) <= at:
        return True
    service = parts[at]
    aliased = {part for old in aliases for part in old.split(".")}
    return service == "*" or service in services or service in aliased


def register_handlers_for(events: Any, services: frozenset[str]) -> None:
    """Register on botocore event emitter ``events`` the built-in handlers that
    ``handler_applies`` keeps for ``services``, in botocore's order and with its first/last
    placement, exactly as ``botocore.session.Session`` registers all of them."""
    from botocore import handlers
    from botocore.utils import EVENT_ALIASES

    for spec in handlers.BUILTIN_HANDLERS:
        event_name, handler = spec[0], spec[1]
        if not handler_applies(event_name, services, EVENT_ALIASES):
            continue
        if len(spec) == 2:
            events.register(event_name, handler)
        elif spec[2] is handlers.REGISTER_FIRST:
            events.register_first(event_name, handler)
        elif spec[2] is handlers.REGISTER_LAST:
            events.register_last(event_name, handler)


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 timestamp as AWS writes them (``2026-12-02T11:00:00.000Z``) by the standard
    library, and anything else by botocore's own parser. botocore's default goes through
    dateutil, ~0.2 ms a value: a spot price history answer holds hundreds."""
    try:
        stamp = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        stamp = None
    if stamp is None or stamp.tzinfo is None:
        from botocore.utils import parse_timestamp as botocore_parse

        return botocore_parse(text)  # type: ignore[no-any-return]
    return stamp


class PlainJSONFileLoader(JSONFileLoader):  # type: ignore[misc]
    """botocore's JSON file loader (``<path>.json``, else ``<path>.json.gz``), parsing into
    plain dicts rather than ``OrderedDict``s: the same keys in the same order, at less than
    half the CPU."""

    OPENERS: tuple[tuple[str, Any], ...] = ((".json", open), (".json.gz", gzip.open))

    def load_file(self, file_path: str) -> Any:
        for extension, opener in self.OPENERS:
            path = file_path + extension
            if os.path.isfile(path):
                with opener(path, "rb") as handle:
                    data = json.loads(handle.read().decode("utf-8"))
                if data is not None:  # as botocore's: a file holding ``null`` counts as absent
                    return data
        return None


SERVICE_DIRECTORY_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
"""How botocore's service directories are named (lower-case letters, digits and hyphens):
the names ``RefreshLoader`` looks up itself."""


def is_service_directory_name(name: str) -> bool:
    """Whether ``name`` is spelt as botocore's service directories are. Anything else (a path
    such as ``./ec2`` or ``..``, or ``EC2``, which a case-insensitive file system would find
    though botocore's listing of services would not) is not."""
    return SERVICE_DIRECTORY_NAME.fullmatch(name) is not None


class RefreshLoader(Loader):  # type: ignore[misc]
    """botocore's ``Loader`` whose ``load_service_model`` looks only in the requested service's
    directories to learn that the service is known, instead of listing every service."""

    @instance_cache  # type: ignore[untyped-decorator]
    def load_service_model(self, service_name: str, type_name: str, api_version: str | None = None) -> Any:
        """What ``Loader.load_service_model`` returns: the model of ``type_name`` for
        ``service_name`` at ``api_version`` (else its latest), with its extras merged in. A
        service with no ``type_name`` data in any search path goes to botocore's own method,
        whose ``UnknownServiceError`` names the known services, and so does a name that is not
        a single directory name (``./ec2``, ``ec2/``, ``..``), which botocore's listing of
        services could never hold, or one spelt otherwise than botocore's directories."""
        if not is_service_directory_name(service_name):
            return super().load_service_model(service_name, type_name, api_version)
        try:
            latest = self.determine_latest_version(service_name, type_name)
        except DataNotFoundError:
            return super().load_service_model(service_name, type_name, api_version)
        version = api_version if api_version is not None else latest
        model = self.load_data(os.path.join(service_name, version, type_name))
        extras = []
        for extras_type in self.extras_types:
            with contextlib.suppress(DataNotFoundError):  # most models have no extras
                extras.append(
                    self.load_data(os.path.join(service_name, version, f"{type_name}.{extras_type}-extras"))
                )
        ExtrasProcessor().process(model, extras)
        return model


@functools.cache
def _refresh_core_session_class() -> type[Any]:
    """``botocore.session.Session`` registering only the built-in handlers that can fire for
    ``SESSION_SERVICES``. The handlers go in where botocore's own go
    (``_register_builtin_handlers``, called before the session's components exist), so
    anything registered later (boto3's handlers, initializers added with
    ``botocore.register_initializer``) is placed after them, exactly as in a plain session.
    ``_register_builtin_handlers`` is botocore's own, not a public API: the tests check the
    result against a plain session of the pinned botocore."""
    import botocore.session

    class RefreshCoreSession(botocore.session.Session):  # type: ignore[misc]
        def _register_builtin_handlers(self, events: Any) -> None:
            register_handlers_for(events, session_event_parts())

    return RefreshCoreSession


def refresh_session() -> Any:
    """A ``boto3.Session`` (credentials, profile, region and endpoints from the standard AWS
    configuration, as ever) whose loader finds the shipped EC2 model before botocore's own and
    whose answers' timestamps are parsed by ``parse_timestamp``. Everything else (other
    services' models, endpoints, paginators) comes from botocore's own data. Only for clients
    of ``SESSION_SERVICES``: built-in handlers for other services are not registered."""
    import boto3

    core = _refresh_core_session_class()()
    default = core.get_component("data_loader")
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    builtin = default.BUILTIN_DATA_PATH
    user_paths = [p for p in default.search_paths if p != builtin]  # AWS_DATA_PATH, ~/.aws/models
    paths = [*user_paths, str(DATA_DIR), builtin]
    loader = RefreshLoader(
        extra_search_paths=paths, file_loader=PlainJSONFileLoader(), include_default_search_paths=False
    )
    core.register_component("data_loader", loader)
    return boto3.Session(botocore_session=core)
