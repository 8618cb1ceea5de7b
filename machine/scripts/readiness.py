#!/usr/bin/env python3
"""gpufit readiness responder: what the group's health check (GCP autohealing) asks.

    readiness.py STATE-FILE PORT HEALTH-PATH ENGINE-PORT...

It answers GET on PORT from the supervisor's state file (``{"state": ..., "until": epoch}``):

- ``loading``: 200 until ``until`` (the plan's load bound: the weights may take longer to load
  than the cloud's autohealing delay allows, 3600 s on GCP), then 503;
- ``serving``: the engine's own health route (HEALTH-PATH) on every replica port, 200 only
  if all answer 200;
- ``leaving``: 200 (the machine is leaving its group on its own; no second replacement);
- ``failed`` or anything else, or no state file: 503.

Standard library only: it runs with the image's python3, before any engine exists.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENGINE_TIMEOUT_S = 2.0
ENGINE_HOST = os.environ.get("GPUFIT_ENGINE_HOST", "127.0.0.1")
"""Where the engine listens (the supervisor's ``$SERVE_HOST``: it binds no wildcard address)."""


def engine_healthy(port: int, path: str = "/health") -> bool:
    try:
        with urllib.request.urlopen(f"http://{ENGINE_HOST}:{port}{path}", timeout=ENGINE_TIMEOUT_S) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def verdict(state_file: str, engine_ports: list[int], now: float, path: str = "/health") -> tuple[int, str]:
    """(HTTP status, a word saying why)."""
    try:
        with open(state_file, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return 503, "no state"
    if not isinstance(state, dict):
        return 503, "no state"
    name = state.get("state")
    if name == "loading":
        until = state.get("until")
        if isinstance(until, int | float) and now < until:
            return 200, "loading"
        return 503, "not healthy within the load bound"
    if name == "serving":
        if all(engine_healthy(port, path) for port in engine_ports):
            return 200, "serving"
        return 503, "engine not healthy"
    if name == "leaving":
        return 200, "leaving"
    return 503, str(name or "unknown")


def handler(state_file: str, engine_ports: list[int], path: str) -> type[BaseHTTPRequestHandler]:
    class Readiness(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, word = verdict(state_file, engine_ports, time.time(), path)
            body = (word + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Readiness


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print("usage: readiness.py STATE-FILE PORT HEALTH-PATH ENGINE-PORT...", file=sys.stderr)
        return 64
    state_file, port, path = argv[0], int(argv[1]), argv[2]
    engine_ports = [int(p) for p in argv[3:]]
    server = ThreadingHTTPServer(("0.0.0.0", port), handler(state_file, engine_ports, path))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
