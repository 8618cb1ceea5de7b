"""A request checked against the installed botocore service model, as the service checks it.

botocore's own validator (``botocore.validate.ParamValidator``) checks types, required members
and minimum lengths and values; it does not check maximum lengths or values, enums or patterns
(``VALIDATED_METADATA_ATTRS`` in the installed botocore 1.44.8). The services do, so this module
runs botocore's validator and then walks the request for what it leaves out. The models are
the files behind the AWS API references (the same ``min``/``max``/``pattern`` are printed on
each shape's page)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.loaders import Loader
from botocore.model import ServiceModel, Shape
from botocore.validate import ParamValidator

from tests.contracts.javaregex import matches

API_REFERENCE = {
    "ec2": "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_{op}.html",
    "iam": "https://docs.aws.amazon.com/IAM/latest/APIReference/API_{op}.html",
    "s3": "https://docs.aws.amazon.com/AmazonS3/latest/API/API_{op}.html",
    "elbv2": "https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_{op}.html",
    "autoscaling": "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_{op}.html",
    "scheduler": "https://docs.aws.amazon.com/scheduler/latest/APIReference/API_{op}.html",
    "secretsmanager": "https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_{op}.html",
}


@functools.cache
def service_model(service: str) -> ServiceModel:
    return ServiceModel(Loader().load_service_model(service, "service-2"), service)


def reference(service: str, operation: str) -> str:
    return API_REFERENCE[service].format(op=operation)


def problems(service: str, operation: str, params: Mapping[str, Any]) -> list[str]:
    """Everything the service would refuse in ``params`` for ``operation``: botocore's checks
    (type, required, min) plus max, enum and pattern."""
    shape = service_model(service).operation_model(operation).input_shape
    report = ParamValidator().validate(dict(params), shape)
    found = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
    found = [line for line in found if not line.startswith("Parameter validation failed")]
    found += list(_walk(params, shape, "", set()))
    return [f"{service}:{operation} {p}" for p in found]


def _walk(value: Any, shape: Shape, path: str, seen: set[str]) -> Iterator[str]:
    meta = shape.metadata
    where = path or "input"
    kind = shape.type_name
    if kind == "string" and isinstance(value, str):
        if "max" in meta and len(value) > meta["max"]:
            yield f"{where}: {len(value)} characters, over the maximum {meta['max']}"
        enum = getattr(shape, "enum", None)
        if enum and value not in enum:
            yield f"{where}: {value!r} is not one of {sorted(enum)}"
        if "pattern" in meta and not matches(meta["pattern"], value):
            yield f"{where}: {value!r} does not match the pattern {meta['pattern']!r}"
    elif kind in ("integer", "long", "double", "float") and isinstance(value, int | float):
        if "max" in meta and value > meta["max"]:
            yield f"{where}: {value} is over the maximum {meta['max']}"
    elif kind == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            yield f"{where}: {len(value)} items, over the maximum {meta['max']}"
        member = shape.member  # type: ignore[attr-defined]
        for i, item in enumerate(value):
            yield from _walk(item, member, f"{path}[{i}]", seen)
    elif kind == "map" and isinstance(value, Mapping):
        if "max" in meta and len(value) > meta["max"]:
            yield f"{where}: {len(value)} entries, over the maximum {meta['max']}"
        for k, v in value.items():
            yield from _walk(k, shape.key, f"{path}{{key}}", seen)  # type: ignore[attr-defined]
            yield from _walk(v, shape.value, f"{path}.{k}", seen)  # type: ignore[attr-defined]
    elif kind == "structure" and isinstance(value, Mapping):
        members = shape.members  # type: ignore[attr-defined]
        for name, item in value.items():
            if name in members:
                yield from _walk(item, members[name], f"{path}.{name}" if path else name, seen)
