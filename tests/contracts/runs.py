"""The programs the contract tests run: every stack file, every example spec and every
adversarial spec in ``tests/contracts/specs`` (drop a file there and it is picked up), each
under several stack names; and the comparison a second `pulumi up` makes."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.contracts.model import plain
from tests.pulumi_harness import ROOT, RecordingMocks

SPECS = Path(__file__).parent / "specs"
STACK_NAMES = ("dev", "llama70b-chat-production", "production-eu-west-1-canary-2026-q4-blue", "Team_Prod.eu")
"""A short stack name, the issue's long one, one of 40 characters, and one that is not
DNS-safe (Pulumi stack names may hold capitals, ``_`` and ``.``)."""
GCP_PROJECT = "test-project"


@dataclass(frozen=True)
class Case:
    """A program to run: its stack config and what it must do (``expect`` ``ok``, or
    ``refused`` with a message matching ``because``: a plan that refuses, with its reason,
    registers nothing)."""

    id: str
    config: dict[str, Any]
    expect: str = "ok"
    because: str = ""


def _case(path: Path, doc: Mapping[str, Any]) -> Case:
    # a stack file, or a plain spec file
    config = dict(doc["config"]) if "config" in doc else {"gpufit:workload": dict(doc)}
    config.setdefault("gcp:project", GCP_PROJECT)
    contract = dict(doc.get("contract") or {})
    folder = path.parent.name
    return Case(
        f"{folder}/{path.stem}", config, str(contract.get("expect", "ok")), str(contract.get("because", ""))
    )


def cases() -> list[Case]:
    files = [
        *sorted((ROOT / "stacks").glob("Pulumi.*.yaml")),
        *sorted((ROOT / "examples").glob("*.yaml")),
        *sorted(SPECS.glob("*.yaml")),
    ]
    return [_case(path, yaml.safe_load(path.read_text(encoding="utf-8"))) for path in files]


_SEGMENT = re.compile(r'([^.\[\]"]+)|\[(\d+|\*)\]|\["([^"]+)"\]')


def path_segments(path: str) -> list[str]:
    """A Pulumi property path (``disks[*].labels``, ``tags["Name"]``) as its keys and indexes."""
    return [m.group(1) or m.group(2) or m.group(3) for m in _SEGMENT.finditer(path)]


def without(value: Any, segments: list[str]) -> Any:
    """``value`` with what ``segments`` names removed (``*`` matching every index or key)."""
    if not segments:
        return None
    head, rest = segments[0], segments[1:]
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if head in ("*", key):
                if rest:
                    out[key] = without(item, rest)
            else:
                out[key] = item
        return out
    if isinstance(value, list):
        return [
            (without(item, rest) if rest else None) if head in ("*", str(i)) else item
            for i, item in enumerate(value)
        ]
    return value


def compared(inputs: Mapping[str, Any], ignored: tuple[str, ...]) -> Any:
    """The inputs the engine diffs: all of them but those ``ignore_changes`` names."""
    value: Any = plain(inputs)
    for path in ignored:
        value = without(value, path_segments(path))
    return value


def changes(first: RecordingMocks, second: RecordingMocks) -> Iterator[str]:
    """What a second run registers differently from the first: resources added or gone, and
    every resource whose inputs differ outside what its registration's ``ignoreChanges`` keeps
    (what the Pulumi engine would update or replace)."""
    before = {(r.typ, r.name): r for r in first.resources}
    after = {(r.typ, r.name): r for r in second.resources}
    for key in sorted(before.keys() - after.keys()):
        yield f"{key[0]} {key[1]}: gone on the second run"
    for key in sorted(after.keys() - before.keys()):
        yield f"{key[0]} {key[1]}: new on the second run"
    for key in sorted(before.keys() & after.keys()):
        request = second.requests.get(key)
        ignored = tuple(getattr(request, "ignoreChanges", ()) or ())
        old, new = compared(before[key].inputs, ignored), compared(after[key].inputs, ignored)
        if old != new:
            fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            yield f"{key[0]} {key[1]}: {', '.join(fields)} changed"
