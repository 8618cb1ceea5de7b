"""Reading YAML and JSON: the selector's own data files (with a schema version) and the
specs and stack files users write, where a key written twice is an error, not "the last one
wins"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# libyaml's loader is ~10x faster; fall back to the pure-Python one.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class DuplicateKey:
    """A mapping key written twice: the key, the 1-based lines of both, and the path of the
    mapping that holds it (``config.gpufit:workload.serving``; "" at the top level)."""

    key: str
    first_line: int
    second_line: int
    path: str

    @property
    def field(self) -> str:
        """The repeated field's path: ``config.gpufit:workload.name``."""
        return f"{self.path}.{self.key}" if self.path else self.key

    @property
    def message(self) -> str:
        lines = f"lines {self.first_line} and {self.second_line}"
        return f"duplicate key {self.key!r} ({lines}); write each key once"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class DuplicateKeyError(ValueError):
    """The YAML document writes one or more keys twice in the same mapping."""

    def __init__(self, duplicates: list[DuplicateKey]) -> None:
        self.duplicates = duplicates
        super().__init__("; ".join(str(d) for d in duplicates))


def find_duplicate_keys(root: yaml.Node | None) -> list[DuplicateKey]:
    """Every key written twice in one mapping, walking the composed node graph once per node
    (aliases share nodes, so an alias bomb costs its size in nodes, not its expansion).
    Scalar keys compare by their text, as PyYAML would collide them; ``<<`` merge keys are
    YAML's own and not duplicates."""
    found: list[DuplicateKey] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != MERGE_TAG:
                    line = key.start_mark.line + 1
                    if key.value in first:
                        found.append(DuplicateKey(key.value, first[key.value], line, path))
                    else:
                        first[key.value] = line
                    child = f"{path}.{key.value}" if path else str(key.value)
                else:
                    child = path
                stack.append((value, child))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    return sorted(found, key=lambda d: (d.second_line, d.key))


def load_yaml(path: Path) -> dict[str, Any]:
    doc = load_yaml_text(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return doc


def load_yaml_text(text: str) -> Any:
    """One YAML document from ``text``; DuplicateKeyError when a mapping repeats a key
    (yaml.YAMLError for malformed YAML)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        duplicates = find_duplicate_keys(node)
        if duplicates:
            raise DuplicateKeyError(duplicates)
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise ValueError(f"duplicate key {key!r}")
        doc[key] = value
    return doc


def loads_json(text: str) -> Any:
    """JSON from ``text``; ValueError for malformed JSON or a key written twice in an object
    (``json`` would keep the last silently)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def load_json(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        doc = loads_json(handle.read())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return doc


def require_schema(doc: dict[str, Any], path: Path, version: int) -> None:
    found = doc.get("schema_version")
    if found != version:
        raise ValueError(f"{path}: schema_version {found!r}, this gpufit reads {version}")
