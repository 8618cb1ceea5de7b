"""The training frameworks ``training.framework`` names and the defaults each gives the training
fields (data/training_frameworks.yaml): what the framework does with the memory gpufit sizes."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "training_frameworks.yaml"


@lru_cache(maxsize=1)
def _frameworks() -> dict[str, Any]:
    doc = load_yaml(DATA_FILE)
    require_schema(doc, DATA_FILE, 1)
    frameworks: dict[str, Any] = doc["frameworks"]
    for name, entry in frameworks.items():
        missing = [key for key in entry["sources"] if key not in doc["sources"]]
        if missing:
            raise ValueError(f"{DATA_FILE}: frameworks.{name}.sources: {missing} not in sources")
    return frameworks


def framework_names() -> tuple[str, ...]:
    """Every framework the data file describes."""
    return tuple(_frameworks())


def framework_defaults(name: str) -> dict[str, Any]:
    """The training fields ``name`` sets when the spec does not ({} for a name not described)."""
    entry = _frameworks().get(name)
    return dict(entry["defaults"]) if entry else {}


def framework_title(name: str) -> str:
    """What ``name`` covers, for the plan's line."""
    return str(_frameworks()[name]["title"])
