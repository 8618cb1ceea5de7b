"""How fast `gpufit catalog refresh` is against local fakes with injected per-call latency.

EC2 answers are recorded once from moto running as a local server, then replayed, with the
Price List API fake, by a separate process that waits ``--latency-ms`` before every answer
(as a round trip to a distant endpoint would). Each measured refresh runs in a fresh Python
process that imports only gpufit and boto3, as `gpufit catalog refresh` does, so neither the
fakes nor moto share its CPU or heap. That process refreshes once to import what a refresh
imports, then measures one refresh as the command makes it (``catalog.refresh.refresh``
with the AWS fetcher, merged over the embedded snapshot): a new session, its clients, the
calls, parsing, merge and load check. Prints, for one worker (the same calls one after
another) and for the default worker count: API calls, wall time (median of ``--repeats``),
client CPU, and the ratio of wall time to calls × latency; then the speed-up. Figures only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog.aws import AwsCatalogFetcher  # noqa: E402
from catalog.refresh import DEFAULT_WORKERS, refresh  # noqa: E402
from cloudapi.aws import PRICING_REGION  # noqa: E402
from cloudapi.calls import CallCounter  # noqa: E402
from cloudapi.lean_botocore import refresh_session  # noqa: E402
from selector.catalog import SNAPSHOT_FILE, load_catalog  # noqa: E402

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def timed_refresh(regions: list[str], workers: int, hook: object | None = None) -> dict[str, float]:
    """One AWS refresh of ``regions`` the way `gpufit catalog refresh` makes it."""
    previous, previous_doc = load_catalog(), json.loads(SNAPSHOT_FILE.read_text(encoding="utf-8"))
    start, cpu = time.perf_counter(), time.process_time()
    session = refresh_session()
    if hook is not None:
        session.events.register("before-send.ec2", hook)
    counter = CallCounter()
    fetcher = AwsCatalogFetcher(session=session, counter=counter, now=lambda: NOW, scores=False)
    report = refresh([fetcher], previous, previous_doc, regions=regions, workers=workers, now=NOW)
    wall = time.perf_counter() - start
    (result,) = report.results
    assert not result.regions_failed and not report.auth_errors, result.regions_failed
    assert result.offers, "the refresh found no offers"
    return {"calls": counter.count, "wall": wall, "cpu": time.process_time() - cpu}


def measure_in_fresh_process(regions: list[str], workers: int, env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            "--workers",
            str(workers),
            "--region-list",
            ",".join(regions),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def record(region_count: int) -> tuple[list[str], str]:
    """Moto's answers to one refresh, and the snapshot's on-demand prices, in a temp file."""
    import logging

    import boto3

    from tests.fakes.aws import PricingServer, Recorder, aws_env, moto_server
    from tests.test_aws_catalog import snapshot_prices

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    prices = snapshot_prices()
    with moto_server() as ec2_url, PricingServer(prices) as pricing:
        os.environ.update(aws_env(ec2_url, pricing.url))
        others = sorted(
            r["RegionName"] for r in boto3.client("ec2", "us-east-1").describe_regions()["Regions"]
        )
        others.remove(PRICING_REGION)  # where the specs come from, as in a refresh of every region
        regions = [PRICING_REGION, *others[: region_count - 1]]
        recorder = Recorder()
        timed_refresh(regions, DEFAULT_WORKERS, recorder)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(
            {
                "ec2": [[r, b, base64.b64encode(v).decode()] for (r, b), v in recorder.recorded.items()],
                "prices": [[t, r, p] for (t, r), p in prices.items()],
            },
            handle,
        )
    return regions, handle.name


def line(label: str, runs: list[dict[str, float]], latency: float) -> tuple[float, str]:
    wall = statistics.median(r["wall"] for r in runs)
    cpu = statistics.median(r["cpu"] for r in runs)
    calls = int(runs[0]["calls"])
    each = ", ".join(f"{r['wall']:.2f}" for r in runs)
    return wall, (
        f"{label:<26} {calls} calls, wall {wall:5.2f} s (runs: {each}), "
        f"client CPU {cpu:4.2f} s, wall ÷ (calls × latency) = {wall / (calls * latency):.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help=argparse.SUPPRESS)
    parser.add_argument("--region-list", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # the child: figures of one refresh as JSON
        regions = args.region_list.split(",")
        timed_refresh(regions, DEFAULT_WORKERS)  # the modules a refresh imports; not what is measured
        print(json.dumps(timed_refresh(regions, args.workers)))
        return
    latency = args.latency_ms / 1000
    regions, recorded = record(args.regions)
    from tests.fakes.aws import aws_env

    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.aws", recorded, str(latency)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        env = aws_env(server.stdout.readline().strip(), server.stdout.readline().strip())
        measure_in_fresh_process(regions, DEFAULT_WORKERS, env)  # warm the OS file cache
        runs: dict[int, list[dict[str, Any]]] = {1: [], DEFAULT_WORKERS: []}
        for _ in range(args.repeats):  # interleaved, so machine load affects both alike
            for workers in runs:
                runs[workers].append(measure_in_fresh_process(regions, workers, env))
    finally:
        server.communicate("")
        os.unlink(recorded)
    print(
        f"AWS refresh over {len(regions)} regions, {args.latency_ms:g} ms per call "
        f"(moto's answers replayed by a separate process; each refresh in a fresh process; "
        f"median of {args.repeats})"
    )
    serial, serial_line = line("one after another (1):", runs[1], latency)
    wall, default_line = line(f"default ({DEFAULT_WORKERS} workers):", runs[DEFAULT_WORKERS], latency)
    print(serial_line)
    print(default_line)
    print(f"speed-up: {serial / wall:.1f}x  (target ≥ 5x)")


if __name__ == "__main__":
    main()
