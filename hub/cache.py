"""gpufit's cache of what the Hub said about a repo at a revision: one JSON entry per (endpoint,
repo, revision), named by a SHA-256 of the three, holding them and the commit the revision
resolved to, checked on every read.

Why a hash: names built from the revision collide (``refs/pr/1`` and ``refs_pr_1`` both become
``refs_pr_1`` once ``/`` is replaced) and a test hub must never answer for the real one. Why
the fields inside: a file copied, planted or left by an older gpufit under the right name still
answers only for the endpoint, repo and revision it records, with a commit that is a full
40-hex id (the one asked for, when a commit was asked for). A branch or tag moves: its entry
expires after ``BRANCH_TTL``; an entry for a full commit never does (a commit's files cannot
change). ``gpufit plan --refresh-model`` skips the cache and rewrites the entry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from catalog.store import cache_dir
from selector.hf_validate import limit, shown
from selector.spec import HubModel

CACHE_SCHEMA = 2
"""2: entries named by a hash of endpoint, repo and revision, with those and ``fetched_at``
inside (1 was named by the revision with ``/`` replaced, and never expired)."""
BRANCH_TTL = timedelta(hours=24)
"""How long a branch or tag's entry is used before the Hub is asked again: a day, so that a
plan made today sizes today's ``main`` (and says which commit it sized); a plan that must not
wait gives a commit, which never expires."""
COMMIT = re.compile(r"[0-9a-f]{40}")
"""A full git commit id, as the Hub's ``sha`` gives it."""
DTYPE = re.compile(r"[A-Z][A-Z0-9_]{0,15}")
"""A safetensors dtype name (``BF16``, ``F8_E4M3``, ``I32``...)."""


def is_commit(revision: str | None) -> bool:
    return revision is not None and COMMIT.fullmatch(revision) is not None


def entry_path(endpoint: str, repo: str, revision: str | None) -> Path:
    """The entry of ``repo`` at ``revision`` (None: the default branch) on ``endpoint``."""
    key = json.dumps([endpoint, repo, revision], separators=(",", ":"))
    return cache_dir() / "hf" / "models" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def parameter_problems(parameters: Any) -> list[str]:
    """What is wrong with a safetensors count per dtype (the Hub's ``safetensors.parameters``):
    dtype names as safetensors spells them, counts from 0 to ``limits.safetensors_count``."""
    if not isinstance(parameters, Mapping):
        return [f"safetensors.parameters: expected an object of counts per dtype, got {shown(parameters)}"]
    most = limit("safetensors_count")
    problems = []
    for dtype, count in parameters.items():
        if not isinstance(dtype, str) or not DTYPE.fullmatch(dtype):
            problems.append(f"safetensors.parameters: expected a dtype name (BF16 ...), got {shown(dtype)}")
        elif isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= most:
            problems.append(
                f"safetensors.parameters.{dtype}: expected an integer from 0 to {most:.0e}, "
                f"got {shown(count)}"
            )
    return problems


def read_entry(path: Path, endpoint: str, repo: str, revision: str | None, now: datetime) -> HubModel | None:
    """The entry at ``path`` if it is the one asked for and still fresh, else None (the caller
    fetches again; an entry that fails a check is never used)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("schema_version") != CACHE_SCHEMA:
        return None
    if (doc.get("endpoint"), doc.get("repo"), doc.get("revision")) != (endpoint, repo, revision):
        return None
    commit, config, parameters = doc.get("commit"), doc.get("config"), doc.get("parameters")
    if not isinstance(commit, str) or not is_commit(commit) or (is_commit(revision) and commit != revision):
        return None
    if not isinstance(config, dict) or not isinstance(parameters, dict) or parameter_problems(parameters):
        return None
    if not is_commit(revision):
        try:
            fetched = datetime.fromisoformat(str(doc.get("fetched_at")))
        except ValueError:
            return None
        if fetched.tzinfo is None or not timedelta(0) <= now - fetched <= BRANCH_TTL:
            return None  # expired, or written by a clock ahead of ours
    return HubModel(repo=repo, revision=revision, commit=commit, config=config, parameters=dict(parameters))


def write_entry(path: Path, endpoint: str, model: HubModel, now: datetime) -> None:
    doc = {
        "schema_version": CACHE_SCHEMA,
        "endpoint": endpoint,
        "repo": model.repo,
        "revision": model.revision,
        "commit": model.commit,
        "fetched_at": now.isoformat(),
        "config": model.config,
        "parameters": model.parameters,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
    tmp.replace(path)  # readers see the old file or the new one, never half of one
