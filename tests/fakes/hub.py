"""A local fake of the Hugging Face Hub's read API, enough for ``huggingface_hub``'s
``model_info`` (with ``expand``) and ``hf_hub_download``: repo info with the commit and the
safetensors counts, and files under ``/{repo}/resolve/{revision}/{path}`` (HEAD and GET) with
the headers the client checks (``X-Repo-Commit``, ``ETag``). Errors carry the Hub's
``X-Error-Code`` values (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from selector.spec import hub_arch
from tests.fakes.http import FakeHandler, LocalServer


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    parameters: dict[str, int] | None = None  # safetensors counts per dtype; None: no safetensors
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    token: str | None = None  # a gated repo answers only this bearer token
    snapshots: dict[str, tuple[str, dict[str, bytes]]] = field(default_factory=dict)
    """Other revisions: revision -> (its commit, its files), found by revision or by commit."""
    info: dict[str, Any] = field(default_factory=dict)  # raw fields the repo info answers with
    announced_size: int | None = None  # what a HEAD of a file says its size is (None: the truth)

    def snapshot(self, rev: str) -> tuple[str, dict[str, bytes]] | None:
        if rev in self.revisions or rev == self.commit:
            return self.commit, self.files
        for name, (commit, files) in self.snapshots.items():
            if rev in (name, commit):
                return commit, files
        return None


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo]
    requests: list[str] = field(default_factory=list)


INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/?]+))?$")
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


def serve_hub(hub: FakeHub) -> LocalServer:
    """``hub`` on a loopback port; use as ``with serve_hub(hub) as server: server.url``."""

    class Handler(FakeHandler):
        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _error(self, status: int, code: str, body: bool) -> None:
            data = json.dumps({"error": code}).encode() if body else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _repo(self, name: str, rev: str, body: bool) -> FakeRepo | None:
            repo = hub.repos.get(name)
            if repo is None:
                self._error(404, "RepoNotFound", body)
                return None
            if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
                self._error(403 if self.headers.get("Authorization") else 401, "GatedRepo", body)
                return None
            if repo.snapshot(rev) is None:
                self._error(404, "RevisionNotFound", body)
                return None
            return repo

        def _answer(self, body: bool) -> None:
            raw = urlsplit(self.path).path  # a revision's own slashes arrive quoted (refs%2Fpr%2F1)
            hub.requests.append(f"{self.command} {unquote(raw)}")
            info, resolve = INFO.match(raw), RESOLVE.match(raw)
            if info:
                rev = unquote(info["rev"] or "main")
                repo = self._repo(info["repo"], rev, body)
                if repo is None:
                    return
                snapshot = repo.snapshot(rev)
                assert snapshot is not None
                doc: dict[str, Any] = {"id": info["repo"], "sha": snapshot[0]}
                if repo.parameters is not None:
                    total = sum(repo.parameters.values())
                    doc["safetensors"] = {"parameters": repo.parameters, "total": total}
                doc.update(repo.info)
                data = json.dumps(doc).encode()
                self.send_body(200, data if body else b"", "application/json")
                return
            if resolve:
                rev = unquote(resolve["rev"])
                repo = self._repo(resolve["repo"], rev, body)
                if repo is None:
                    return
                snapshot = repo.snapshot(rev)
                assert snapshot is not None
                commit, files = snapshot
                content = files.get(unquote(resolve["path"]))
                if content is None:
                    self._error(404, "EntryNotFound", body)
                    return
                etag = '"' + hashlib.sha1(content).hexdigest() + '"'
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                size = len(content) if body or repo.announced_size is None else repo.announced_size
                self.send_header("Content-Length", str(size))
                self.send_header("ETag", etag)
                self.send_header("X-Repo-Commit", commit)
                self.end_headers()
                if body:
                    self.wfile.write(content)
                return
            self._error(404, "RepoNotFound", body)

    return LocalServer(Handler, name="fake-hub")


def hub_for_gpufit(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """``hub`` served as the Hub ``gpufit`` reads (``HF_ENDPOINT``), with a cache and an
    ``HF_HOME`` of the test's own, no token, and the in-process model cache emptied before and
    after; a fixture's body: ``yield from hub_for_gpufit(FakeHub(...), tmp_path, monkeypatch)``."""
    monkeypatch.setenv("GPUFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub_arch.cache_clear()
    with serve_hub(hub) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield hub
    hub_arch.cache_clear()
