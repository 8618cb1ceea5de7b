"""The catalog a command uses: the one ``--catalog`` names (snapshot, cache or a path), else the
freshest valid one (``catalog.store.resolve``); a fallback to the embedded snapshot is announced
in one line on stderr."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from catalog.store import resolve
from cli.exit_codes import BAD_CATALOG, INVALID_SPEC
from selector.catalog import Catalog, CatalogError

if TYPE_CHECKING:
    from selector.spec import WorkloadSpec


def resolved_catalog(choice: str | None, now: datetime | None = None) -> Catalog:
    resolved = resolve(choice, now)
    if resolved.warning:
        sys.stderr.write(resolved.warning + "\n")
    return resolved.catalog


def spec_and_catalog(spec_file: Path, choice: str | None) -> tuple[WorkloadSpec, Catalog] | int:
    """The spec a command plans and the catalog it plans on, or its exit code (``INVALID_SPEC``,
    ``BAD_CATALOG``) after one stderr line per problem. The spec models load here, not at import,
    so ``gpufit offers`` does not pay for them."""
    from selector.spec import SpecError, load_spec

    try:
        spec = load_spec(spec_file)
    except SpecError as err:
        for problem in err.problems:
            print(f"{err.source}: {problem}", file=sys.stderr)
        return INVALID_SPEC
    try:
        return spec, resolved_catalog(choice)
    except CatalogError as err:
        print(f"gpufit: catalog: {err}", file=sys.stderr)
        return BAD_CATALOG
