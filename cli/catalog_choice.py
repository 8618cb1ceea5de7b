"""The catalog a command uses: the one ``--catalog`` names (snapshot, cache or a path), else the
freshest valid one (``catalog.store.resolve``); a fallback to the embedded snapshot is announced
in one line on stderr."""

from __future__ import annotations

import sys
from datetime import datetime

from catalog.store import resolve
from selector.catalog import Catalog


def resolved_catalog(choice: str | None, now: datetime | None = None) -> Catalog:
    resolved = resolve(choice, now)
    if resolved.warning:
        sys.stderr.write(resolved.warning + "\n")
    return resolved.catalog
