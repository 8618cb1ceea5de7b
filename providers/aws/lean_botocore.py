"""A boto3 session for the catalog refresh whose EC2 model holds only what the refresh uses.

botocore builds every client from the whole EC2 service model (~800 operations), parsed once
per session and turned into methods and an event-handler copy once per client. Measured on a
2-core machine, the first EC2 client cost 270–410 ms and each further regional client
20–40 ms: more CPU than the ~50 calls of a 20-region refresh spent parsing answers, and on a
GIL-bound thread pool that CPU, not the network, set the refresh's wall time. With this cut
the first client costs about 100 ms and each further one about 5 ms.

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

(Cutting ``endpoints.json`` the same way was tried and dropped: botocore treats an endpoints
file from outside its own directory as a custom endpoint, which changes endpoint resolution.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "botocore_data"
SERVICE = "ec2"
REFRESH_OPERATIONS = (
    "DescribeRegions",
    "DescribeInstanceTypes",
    "DescribeInstanceTypeOfferings",
    "DescribeSpotPriceHistory",
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
}
"""Answer structures narrowed to what ``AwsCatalogFetcher`` reads (its ``_instance_type``)."""


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


def refresh_session() -> Any:
    """A ``boto3.Session`` (credentials, profile, region and endpoints from the standard AWS
    configuration, as ever) whose loader finds the shipped EC2 model before botocore's own and
    whose answers' timestamps are parsed by ``parse_timestamp``. Everything else (other
    services' models, endpoints, paginators) comes from botocore's own data."""
    import boto3
    import botocore.session
    from botocore.loaders import Loader

    core = botocore.session.Session()
    default = core.get_component("data_loader")
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=parse_timestamp)
    builtin = default.BUILTIN_DATA_PATH
    user_paths = [p for p in default.search_paths if p != builtin]  # AWS_DATA_PATH, ~/.aws/models
    paths = [*user_paths, str(DATA_DIR), builtin]
    loader = Loader(extra_search_paths=paths, include_default_search_paths=False)
    core.register_component("data_loader", loader)
    return boto3.Session(botocore_session=core)
