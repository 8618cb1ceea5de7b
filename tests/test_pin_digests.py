"""``scripts/pin_engine_digests.py`` against a registry that speaks the distribution API (a local
stand-in: the machine that runs the suite reaches no registry), and once against Docker Hub
itself where the network allows."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from scripts.pin_engine_digests import main, resolve
from tests.conftest import ROOT

DIGESTS = {
    "vllm/vllm-openai:v0.34.0": "sha256:" + "1" * 64,
    "lmsysorg/sglang:v0.5.23": "sha256:" + "2" * 64,
}


class Registry(BaseHTTPRequestHandler):
    """Docker Hub's token service and the registry's manifest HEAD, as the distribution spec
    describes them: a bearer token scoped to the repository, then Docker-Content-Digest."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # the token service
        assert self.path.startswith("/token?") and "scope=repository%3A" in self.path
        body = b'{"token": "t0ken"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:  # /v2/<name>/manifests/<reference>
        name, _, reference = self.path.removeprefix("/v2/").partition("/manifests/")
        digest = DIGESTS.get(f"{name}:{reference}")
        authorised = self.headers.get("Authorization") == "Bearer t0ken"
        index = "application/vnd.oci.image.index.v1+json" in self.headers.get("Accept", "")
        self.send_response(200 if digest and authorised and index else 404)
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_digests_are_written_beside_their_tags_and_checked_later(registry: str, tmp_path: Path) -> None:
    engines = tmp_path / "engines.yaml"
    engines.write_text((ROOT / "selector" / "data" / "engines.yaml").read_text())
    args = ["--file", str(engines), "--registry", registry, "--auth", f"{registry}/token"]
    assert main(args) == 0
    doc = yaml.safe_load(engines.read_text())
    for engine in doc["engines"].values():
        for build in engine["releases"][0]["builds"]:
            assert build["digest"] == DIGESTS[build["tag"]] and "digest_note" not in build
    assert "# Model servers gpufit launches" in engines.read_text()  # comments kept
    assert main([*args, "--check"]) == 0
    DIGESTS["lmsysorg/sglang:v0.5.23"] = "sha256:" + "3" * 64  # the tag moved
    try:
        assert main([*args, "--check"]) == 1
    finally:
        DIGESTS["lmsysorg/sglang:v0.5.23"] = "sha256:" + "2" * 64


@pytest.mark.skipif(
    os.environ.get("GPUFIT_NETWORK_TESTS") != "1",
    reason="reaches Docker Hub (registry-1.docker.io), which this machine cannot: GPUFIT_NETWORK_TESTS=1",
)
def test_docker_hub_resolves_the_pinned_tags() -> None:  # pragma: no cover - network
    for tag in DIGESTS:
        assert resolve(tag).startswith("sha256:")
