"""The readiness responder GCP's autohealing asks: healthy while the weights load within the
plan's bound, the engine's own /health once serving, unhealthy on failure."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

from tests.machine.harness import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "machine" / "scripts" / "readiness.py"


def responder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readiness", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine(status: int) -> tuple[ThreadingHTTPServer, int]:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


def test_loading_is_healthy_until_the_bound_then_not(tmp_path: Path) -> None:
    r = responder()
    state = tmp_path / "readiness.json"
    state.write_text(json.dumps({"state": "loading", "until": 1000}))
    assert r.verdict(str(state), [], now=999.0) == (200, "loading")
    assert r.verdict(str(state), [], now=1000.0) == (503, "not healthy within the load bound")


def test_serving_follows_every_replica(tmp_path: Path) -> None:
    r = responder()
    state = tmp_path / "readiness.json"
    state.write_text(json.dumps({"state": "serving", "until": 0}))
    good, good_port = engine(200)
    bad, bad_port = engine(503)
    try:
        assert r.verdict(str(state), [good_port], now=0)[0] == 200
        assert r.verdict(str(state), [good_port, bad_port], now=0) == (503, "engine not healthy")
        assert r.verdict(str(state), [free_port()], now=0)[0] == 503  # nothing listening
    finally:
        good.shutdown()
        bad.shutdown()


def test_failed_leaving_and_missing_state(tmp_path: Path) -> None:
    r = responder()
    state = tmp_path / "readiness.json"
    assert r.verdict(str(state), [], now=0) == (503, "no state")
    state.write_text("{not json")
    assert r.verdict(str(state), [], now=0)[0] == 503
    state.write_text(json.dumps({"state": "failed", "until": 0}))
    assert r.verdict(str(state), [], now=0) == (503, "failed")
    state.write_text(json.dumps({"state": "leaving", "until": 0}))
    assert r.verdict(str(state), [], now=0) == (200, "leaving")


def test_it_answers_over_http(tmp_path: Path) -> None:
    state = tmp_path / "readiness.json"
    state.write_text(json.dumps({"state": "loading", "until": time.time() + 3600}))
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(state), str(port), "/health", "8000"])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/gpufit/alive", timeout=1) as answer:
                    assert answer.status == 200 and answer.read() == b"loading\n"
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline, "the responder did not start"
                time.sleep(0.05)
        state.write_text(json.dumps({"state": "failed", "until": 0}))
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/gpufit/alive", timeout=2)
            raise AssertionError("a failed machine answered 200")
        except urllib.error.HTTPError as err:
            assert err.code == 503
    finally:
        process.kill()
        process.wait()
