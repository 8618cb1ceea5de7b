"""Which inputs a request mapper reads, down to every nested leaf.

A mapper (``aws_requests.requests``, ``gcp_requests.bodies``) picks the keys it knows out of a
resource's inputs; a nested key it does not know would otherwise be dropped without a word, and
the cloud never checked against it (a launch template's ``ebs.iops``, a secret's user-managed
replication). So the coverage rules run the mapper on the inputs wrapped in read-tracking
containers and refuse every leaf it neither read nor passed on whole into a request, unless the
mapping module lists it as ignored, with the reason the provider or the cloud ignores it.

A leaf is a scalar or an empty container. It counts as read when the mapper looked it up
(``get``, ``[]``, ``in``, iteration, ``items``/``values``) or when a container holding it went
into the request as it is (then the request's own checks see all of it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.contracts.model import Resource, Stack


@dataclass(frozen=True)
class Ignored:
    """A nested input the provider or the cloud ignores, so no request carries it: ``path``
    with ``[]`` for any list index (``ingress[].fromPort``), ``when`` what must hold of the
    mapping that holds it (None: always), ``reason`` why it is safe to leave out."""

    path: str
    reason: str
    when: Callable[[Mapping[str, Any]], bool] | None = None


@dataclass
class _Log:
    touched: set[str] = field(default_factory=set)
    containers: dict[int, tuple[Any, str]] = field(default_factory=dict)


def _child(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _wrap(value: Any, path: str, log: _Log) -> Any:
    if isinstance(value, Mapping):
        return TrackedDict(value, path, log)
    if isinstance(value, list | tuple):
        return TrackedList(value, path, log)
    return value


class TrackedDict(dict[str, Any]):
    """A mapping that notes every key read out of it."""

    def __init__(self, data: Mapping[str, Any], path: str, log: _Log) -> None:
        super().__init__({str(k): _wrap(v, _child(path, k), log) for k, v in data.items()})
        self._path = path
        self._log = log
        log.containers[id(self)] = (self, path)

    def _read(self, key: str) -> Any:
        self._log.touched.add(_child(self._path, key))
        return dict.__getitem__(self, key)

    def __getitem__(self, key: str) -> Any:
        return self._read(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self._read(key) if dict.__contains__(self, key) else default

    def __contains__(self, key: object) -> bool:
        found = dict.__contains__(self, key)
        if found:
            self._log.touched.add(_child(self._path, key))
        return found

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        return [(k, self._read(k)) for k in dict.keys(self)]

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self._read(k) for k in dict.keys(self)]


class TrackedList(list[Any]):
    """A list that notes every item read out of it."""

    def __init__(self, data: Iterable[Any], path: str, log: _Log) -> None:
        super().__init__(_wrap(v, f"{path}[{i}]", log) for i, v in enumerate(data))
        self._path = path
        self._log = log
        log.containers[id(self)] = (self, path)

    def __getitem__(self, index: Any) -> Any:
        positions = range(len(self))[index]
        for i in positions if isinstance(positions, range) else [positions]:
            self._log.touched.add(f"{self._path}[{i}]")
        return list.__getitem__(self, index)

    def __iter__(self) -> Iterator[Any]:
        for i, value in enumerate(list.__iter__(self)):
            self._log.touched.add(f"{self._path}[{i}]")
            yield value


def _embedded(value: Any, log: _Log, found: set[str], seen: set[int]) -> None:
    """The paths of the tracked containers that went into a request as they are."""
    if id(value) in seen:
        return
    seen.add(id(value))
    known = log.containers.get(id(value))
    if known is not None and known[0] is value:
        found.add(known[1])
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _embedded(getattr(value, f.name), log, found, seen)
    elif isinstance(value, Mapping):
        for item in dict.values(value) if isinstance(value, dict) else value.values():
            _embedded(item, log, found, seen)
    elif isinstance(value, list | tuple):
        for item in list.__iter__(value) if isinstance(value, list) else value:
            _embedded(item, log, found, seen)


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any, Mapping[str, Any] | None]]:
    """Every leaf of ``value``: its path, its value and the mapping that holds it."""
    yield from _leaves(value, path, None)


def _leaves(value: Any, path: str, parent: Mapping[str, Any] | None) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _leaves(item, _child(path, key), value)
    elif isinstance(value, list | tuple) and value:
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]", None)
    else:
        yield path, value, parent


def pattern(path: str) -> str:
    """A leaf's path with its list indexes as ``[]``, as ``Ignored.path`` spells it."""
    return re.sub(r"\[\d+\]", "[]", path)


def unread(
    resource: Resource,
    stack: Stack,
    build: Callable[[Resource, Stack], Any],
    top_level: Iterable[str],
    ignored: Iterable[Ignored] = (),
) -> list[str]:
    """The leaves under ``top_level`` inputs that ``build`` neither read nor passed on whole,
    less those ``ignored`` names (when its condition holds)."""
    log = _Log()
    tracked = TrackedDict(resource.inputs, "", log)
    built = build(dataclasses.replace(resource, inputs=tracked), stack)
    embedded: set[str] = set()
    _embedded(built, log, embedded, set())
    rules = list(ignored)
    found = []
    for key in top_level:
        if key not in resource.inputs:
            continue
        for path, _, holder in leaves(resource.inputs[key], key):
            if path in log.touched or any(path == e or path.startswith((e + ".", e + "[")) for e in embedded):
                continue
            if any(
                rule.path == pattern(path)
                and (rule.when is None or (holder is not None and rule.when(holder)))
                for rule in rules
            ):
                continue
            found.append(path)
    return found
