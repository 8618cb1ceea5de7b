"""A request body checked against Google's discovery documents: field names, types, enum
values, patterns and the fields a method requires.

The documents ship in ``google-api-python-client`` (a pinned dev dependency):
``googleapiclient/discovery_cache/documents/<api>.<version>.json``, the same documents
``https://<api>.googleapis.com/$discovery/rest?version=<version>`` serves; each is read once.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import googleapiclient

DOCUMENTS = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@functools.cache
def document(api: str) -> dict[str, Any]:
    """The discovery document of ``api`` (``compute.v1``, ``storage.v1``, ...)."""
    return dict(json.loads((DOCUMENTS / f"{api}.json").read_text(encoding="utf-8")))


def source(api: str) -> str:
    doc = document(api)
    return f"{doc['rootUrl']}$discovery/rest?version={doc['version']} (revision {doc['revision']})"


def problems(api: str, schema: str, body: Mapping[str, Any], method: str | None = None) -> list[str]:
    """What ``api`` would refuse in ``body`` of type ``schema`` for ``method`` (its id, as in
    ``compute.instances.insert``, for the fields it requires)."""
    schemas = document(api)["schemas"]
    return [f"{api} {schema}: {p}" for p in _object(schemas, schemas[schema], body, "", method)]


def _object(
    schemas: dict[str, Any], spec: Mapping[str, Any], body: Mapping[str, Any], path: str, method: str | None
) -> Iterator[str]:
    properties = spec.get("properties", {})
    for key, value in body.items():
        where = f"{path}.{key}" if path else key
        if key not in properties:
            yield f"{where}: no such field (fields: {', '.join(sorted(properties))})"
            continue
        yield from _value(schemas, properties[key], value, where, method)
    if method is not None:
        for key, prop in properties.items():
            required = (prop.get("annotations") or {}).get("required") or []
            if method in required and key not in body:
                yield f"{path + '.' if path else ''}{key}: required by {method}"


def _value(
    schemas: dict[str, Any], prop: Mapping[str, Any], value: Any, where: str, method: str | None
) -> Iterator[str]:
    if "$ref" in prop:
        target = schemas[prop["$ref"]]
        if not isinstance(value, Mapping):
            yield f"{where}: expected an object ({prop['$ref']}), got {value!r}"
            return
        yield from _object(schemas, target, value, where, method)
        return
    kind = prop.get("type")
    if kind == "array":
        if not isinstance(value, list):
            yield f"{where}: expected a list, got {value!r}"
            return
        item_spec = dict(prop.get("items", {}))
        if "pattern" in prop:  # compute puts an item pattern on the array (Tags.items)
            item_spec.setdefault("pattern", prop["pattern"])
        for i, item in enumerate(value):
            yield from _value(schemas, item_spec, item, f"{where}[{i}]", method)
        return
    if kind == "object":
        if not isinstance(value, Mapping):
            yield f"{where}: expected an object, got {value!r}"
            return
        inner = prop.get("additionalProperties")
        if isinstance(inner, Mapping):
            for k, v in value.items():
                yield from _value(schemas, inner, v, f"{where}.{k}", method)
        elif "properties" in prop:
            yield from _object(schemas, prop, value, where, method)
        return
    yield from _scalar(prop, value, where)


def _scalar(prop: Mapping[str, Any], value: Any, where: str) -> Iterator[str]:
    kind, fmt = prop.get("type"), prop.get("format")
    if kind == "string" and fmt in ("int64", "uint64"):
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, str) and value.isdigit())
        ):
            yield f"{where}: expected an {fmt} (digits), got {value!r}"
        return
    if kind == "string" and not isinstance(value, str):
        yield f"{where}: expected a string, got {value!r}"
        return
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        yield f"{where}: expected an integer, got {value!r}"
        return
    if kind == "boolean" and not isinstance(value, bool):
        yield f"{where}: expected true or false, got {value!r}"
        return
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        yield f"{where}: expected a number, got {value!r}"
        return
    if "enum" in prop and value not in prop["enum"]:
        yield f"{where}: {value!r} is not one of {prop['enum']}"
    if "pattern" in prop and isinstance(value, str) and not re.fullmatch(prop["pattern"], value):
        yield f"{where}: {value!r} does not match {prop['pattern']}"
