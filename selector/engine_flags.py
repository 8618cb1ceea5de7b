"""The flags each pinned engine release accepts, as its own argument parser declares them:
``data/engine_flags/<engine>-<version>.json``, dumped from the release's parser by
``scripts/dump_engine_flags.py`` (which also runs every launch gpufit renders through that
parser). Here an argument list is checked against the dump: every flag exists, takes the number
of values it declares, each value is one of its choices and parses as its type. The spec's
``serving.engine_args`` is checked the same way, and may not set a flag gpufit sets itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_json
from selector.engines import ENGINE_NAMES, owned_flags, pinned_versions

FLAGS_DIR = Path(__file__).parent / "data" / "engine_flags"

_HUMAN_INT = re.compile(r"-?\d+(\.\d+)?[kKmMgGtT]?")


@dataclass(frozen=True)
class FlagTable:
    """One release's parser: flag → its declaration (dest, aliases, action, type, nargs,
    choices, default; ``valid_values`` where the engine checks a free string later)."""

    engine: str
    version: str
    flags: dict[str, dict[str, Any]]
    by_option: dict[str, str]

    def lookup(self, option: str) -> tuple[str, dict[str, Any]] | None:
        key = self.by_option.get(option)
        if key is None and self.engine == "vllm":
            # vLLM's FlexibleArgumentParser reads --max_model_len as --max-model-len
            key = self.by_option.get("--" + option[2:].replace("_", "-"))
        return (key, self.flags[key]) if key is not None else None


def flags_path(engine: str, version: str) -> Path:
    return FLAGS_DIR / f"{engine}-{version}.json"


@lru_cache(maxsize=8)
def flag_table(engine: str, version: str) -> FlagTable:
    """The committed dump of a release's parser; FileNotFoundError when it was never dumped."""
    doc = load_json(flags_path(engine, version))
    if doc.get("engine") != engine or doc.get("version") != version:
        raise ValueError(f"{flags_path(engine, version)}: holds {doc.get('engine')} {doc.get('version')}")
    flags: dict[str, dict[str, Any]] = doc["flags"]
    by_option: dict[str, str] = {}
    for key, entry in flags.items():
        if key.startswith("-"):
            by_option[key] = key
            for alias in entry.get("aliases") or []:
                by_option.setdefault(alias, key)
    return FlagTable(engine, version, flags, by_option)


def _value_problem(flag: str, entry: dict[str, Any], value: str) -> str | None:
    """Why ``value`` is not one the flag takes (None when it is)."""
    choices = entry.get("choices")
    if choices is not None and value not in [str(c) for c in choices]:
        shown = ", ".join(str(c) for c in choices[:12]) + (", …" if len(choices) > 12 else "")
        return f"{flag} {value!r} is not one of its choices ({shown})"
    valid = entry.get("valid_values")
    if valid and not any(str(v).startswith("<unavailable") for v in valid) and value not in valid:
        return f"{flag} {value!r} is not a value the engine accepts"
    kind = (entry.get("type") or "str").removeprefix("optional[").rstrip("]")
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind.startswith("human_readable_int"):
            if not (_HUMAN_INT.fullmatch(value) or (kind.endswith("_or_auto") and value == "auto")):
                raise ValueError(value)
        elif kind in ("loads", "parse[loads", "json_list_type") or (
            kind == "union_dict_and_str" and value.lstrip().startswith("{")
        ):
            json.loads(value)
    except ValueError:
        return f"{flag} {value!r} does not parse as {entry.get('type')}"
    return None


_DICT_TYPES = ("loads", "parse[loads", "union_dict_and_str", "parse_dataclass")
"""The dumped types that parse a JSON object: vLLM's ``--flag.key value`` form builds one."""


def _takes_dict(entry: dict[str, Any]) -> bool:
    return (entry.get("type") or "str").removeprefix("optional[").rstrip("]") in _DICT_TYPES


def resolve(table: FlagTable, option: str) -> tuple[str, dict[str, Any]] | None:
    """The flag an option names, as the release's parser reads it: its own spelling, vLLM's
    ``_`` for ``-``, and vLLM's ``--flag.key`` form (FlexibleArgumentParser), which names
    ``--flag``."""
    found = table.lookup(option)
    if found is None and "." in option and table.engine == "vllm":
        found = table.lookup(option.split(".", 1)[0])
    return found


def check_argv(table: FlagTable, argv: list[str]) -> list[str]:
    """Problems of an engine argument list against the release's parser (empty: accepted)."""
    problems: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("-"):
            problems.append(f"{token!r} is not a flag (the launch passes no positional arguments)")
            continue
        option, has_inline, inline = token.partition("=")
        found = resolve(table, option)
        if found is not None and table.lookup(option) is None:
            # vLLM turns --flag.key V into --flag '{"key": V}', which only a JSON flag parses
            if not _takes_dict(found[1]):
                problems.append(f"{option}: {found[0]} takes no JSON object, so it has no .key form")
            i += 0 if has_inline else 1
            continue
        if found is None:
            problems.append(f"{option} is not a flag of {ENGINE_NAMES[table.engine]} {table.version}")
            while i < len(argv) and not argv[i].startswith("-"):  # its values, whatever they were
                i += 1
            continue
        _, entry = found
        nargs = entry.get("nargs")
        if nargs == 0 or any(kind in entry["action"] for kind in ("Const", "StoreTrue", "StoreFalse")):
            if has_inline:
                problems.append(f"{option} takes no value")
            continue
        if has_inline:
            values = [inline]
        elif nargs in ("+", "*"):
            values = []
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        elif nargs == "?":
            values = [argv[i]] if i < len(argv) and not argv[i].startswith("-") else []
            i += len(values)
        else:
            count = 1 if nargs is None else int(nargs)
            values = argv[i : i + count]
            i += count
            if len(values) < count:
                problems.append(f"{option} needs a value")
                continue
        if nargs == "+" and not values:
            problems.append(f"{option} needs at least one value")
        problems += [p for v in values if (p := _value_problem(option, entry, v))]
    return problems


def check_engine_args(engine: str, args: list[str]) -> list[str]:
    """Problems of ``serving.engine_args`` for every pinned release of ``engine``: unknown flags,
    bad values, and flags gpufit sets itself (named with the spec field that sets them)."""
    problems: list[str] = []
    owned = owned_flags(engine)
    for version in pinned_versions(engine):
        table = flag_table(engine, version)
        for problem in check_argv(table, args):
            if problem not in problems:
                problems.append(problem)
        for token in args:
            found = resolve(table, token.partition("=")[0]) if token.startswith("-") else None
            if found is None or found[1]["dest"] not in owned:
                continue
            field = owned[found[1]["dest"]]
            owner = (
                f"set it with {field}"
                if not field.startswith("-")
                else f"gpufit sets it {field.removeprefix('- ').strip('()')}"
            )
            message = f"{token.partition('=')[0]} is set by gpufit; {owner}"
            if message not in problems:
                problems.append(message)
    return problems
