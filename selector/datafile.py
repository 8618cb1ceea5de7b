"""Reading the selector's own data files (YAML and JSON with a schema version)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# libyaml's loader is ~10x faster; fall back to the pure-Python one.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        doc = yaml.load(handle, Loader=_Loader)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return doc


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def load_json(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        doc = json.load(handle)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return doc


def require_schema(doc: dict[str, Any], path: Path, version: int) -> None:
    found = doc.get("schema_version")
    if found != version:
        raise ValueError(f"{path}: schema_version {found!r}, this gpufit reads {version}")
