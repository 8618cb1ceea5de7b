"""Where catalogs live and which one a command uses.

A refreshed catalog is written, atomically (temp file + rename), to the user cache directory
with a SHA-256 checksum of its content. ``plan``, ``offers`` and the Pulumi program use the
freshest valid catalog: the cache when it is present, intact, newer than the embedded
snapshot and younger than ``MAX_CACHE_AGE``; otherwise the snapshot, with a one-line warning.
No cloud SDK is imported here: this is on ``gpufit plan``'s path.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from selector.catalog import SNAPSHOT_FILE, Catalog, CatalogError, catalog_from_doc, load_catalog
from selector.datafile import loads_json
from selector.freshness import REFRESH_HINT, price_ages

MAX_CACHE_AGE = timedelta(days=7)
"""A refreshed catalog older than this is not trusted over the snapshot: spot prices move daily."""

CACHE_FILE_NAME = "catalog.json"
CACHE_ENV = "GPUFIT_CACHE_DIR"


def cache_dir() -> Path:
    """``$GPUFIT_CACHE_DIR``, else the platform's user cache directory for gpufit."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    if sys.platform.startswith("linux"):
        # platformdirs' rule on Linux (XDG), without its ~40 ms import on `gpufit plan`'s path.
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        return Path(xdg if xdg else Path.home() / ".cache") / "gpufit"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("gpufit", appauthor=False))


def default_cache_path() -> Path:
    return cache_dir() / CACHE_FILE_NAME


def checksum(doc: dict[str, Any]) -> str:
    """SHA-256 of the document's canonical JSON, without its own ``checksum`` field."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def write_catalog(doc: dict[str, Any], path: Path) -> Path:
    """Write ``doc`` with its checksum to ``path`` atomically: readers see the old file or
    the new one, never half of one."""
    doc = {**doc, "checksum": checksum(doc)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".catalog-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_catalog_file(path: Path, require_checksum: bool = False) -> Catalog:
    """Load a catalog file. A refreshed catalog carries a checksum, which must match its
    content (a corrupt or partial file is refused); the embedded snapshot has none."""
    try:
        doc = loads_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CatalogError(f"{path}: no such catalog file") from None
    except (OSError, ValueError) as err:
        raise CatalogError(f"{path}: not a readable catalog ({err})") from None
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: not a catalog document")
    stated = doc.get("checksum")
    if stated is None and require_checksum:
        raise CatalogError(f"{path}: no checksum (partial or hand-edited file)")
    if stated is not None and stated != checksum(doc):
        raise CatalogError(f"{path}: checksum mismatch (corrupt or partial file)")
    return catalog_from_doc(doc, str(path))


@dataclass(frozen=True)
class Resolved:
    """The catalog a command uses, what it is, and a warning to print if any."""

    catalog: Catalog
    kind: str  # "snapshot" | "cache" | "file"
    warning: str | None = None


def _as_of(catalog: Catalog) -> date:
    try:
        return date.fromisoformat(catalog.as_of[:10])
    except ValueError:
        return date.min


def resolve(
    choice: str | None = None, now: datetime | None = None, cache_path: Path | None = None
) -> Resolved:
    """Pick the catalog: ``snapshot``, ``cache``, a file path, or (None/``auto``) the freshest
    valid one. ``cache`` and paths fail loudly; ``auto`` falls back to the snapshot with a warning."""
    now = now or datetime.now(UTC)
    cache = cache_path or default_cache_path()
    if choice == "snapshot":
        return Resolved(load_catalog(SNAPSHOT_FILE), "snapshot")
    if choice == "cache":
        return Resolved(read_catalog_file(cache, require_checksum=True), "cache")
    if choice not in (None, "", "auto"):
        return Resolved(read_catalog_file(Path(choice)), "file")
    snapshot = load_catalog(SNAPSHOT_FILE)
    if not cache.exists():
        return Resolved(snapshot, "snapshot", _snapshot_warning(snapshot, now, "no refreshed catalog"))
    try:
        cached = read_catalog_file(cache, require_checksum=True)
    except CatalogError as err:
        return Resolved(snapshot, "snapshot", _snapshot_warning(snapshot, now, f"ignored {err}"))
    cached_day = _as_of(cached)
    if cached_day < _as_of(snapshot):
        reason = f"the refreshed catalog ({cached.as_of}) is older than the snapshot"
        return Resolved(snapshot, "snapshot", _snapshot_warning(snapshot, now, reason))
    if now.date() - cached_day > MAX_CACHE_AGE:
        reason = f"the refreshed catalog of {cached.as_of} is over {MAX_CACHE_AGE.days} days old"
        return Resolved(snapshot, "snapshot", _snapshot_warning(snapshot, now, reason))
    return Resolved(cached, "cache")


def _snapshot_warning(snapshot: Catalog, now: datetime, reason: str) -> str:
    """Why the embedded snapshot is used, and how old its prices are: the prices' own dates,
    not the day the file was built."""
    ages = price_ages(o.as_of for o in snapshot.offers)
    age = f"; {ages.describe(now.date())}" if ages is not None else ""
    return f"gpufit: using the embedded catalog ({reason}{age}); {REFRESH_HINT}"
