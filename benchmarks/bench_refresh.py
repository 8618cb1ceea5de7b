"""How fast `gpufit catalog refresh` is against local fakes with injected per-call latency.

EC2 is moto as a local server, the Price List API a local fake; every call waits
``--latency-ms`` first (as a round trip to a distant endpoint would). Prints the number of
API calls, wall time, the ratio of wall time to calls × latency, and the speed-up of the
default worker count over the same calls made one after another. Prints figures only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from providers.aws.catalog import AwsCatalogFetcher  # noqa: E402
from providers.refresh import DEFAULT_WORKERS, CallCounter  # noqa: E402
from tests.fakes.aws import PricingServer, Recorder, aws_env, moto_server  # noqa: E402

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def timed_fetch(regions: list[str], workers: int, hook: object | None = None) -> tuple[int, float]:
    import boto3

    session = boto3.Session()
    if hook is not None:
        session.events.register("before-send.ec2", hook)
    counter = CallCounter()
    fetcher = AwsCatalogFetcher(session=session, counter=counter, now=lambda: NOW)
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        result = fetcher.fetch(regions, pool, lambda _: None)
    wall = time.perf_counter() - start
    assert not result.regions_failed, result.regions_failed
    return counter.count, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--regions", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    latency = args.latency_ms / 1000
    from tests.test_aws_catalog import snapshot_prices

    prices = snapshot_prices()
    with moto_server() as ec2_url, PricingServer(prices) as pricing:
        os.environ.update(aws_env(ec2_url, pricing.url))
        import boto3

        regions = sorted(
            r["RegionName"] for r in boto3.client("ec2", "us-east-1").describe_regions()["Regions"]
        )
        regions = regions[: args.regions]
        recorder = Recorder()
        timed_fetch(regions, DEFAULT_WORKERS, recorder)  # record moto's answers once
    # The fakes run in their own process, as a real API would not share this process's CPU.
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(
            {
                "ec2": [[r, b, base64.b64encode(v).decode()] for (r, b), v in recorder.recorded.items()],
                "prices": [[t, r, p] for (t, r), p in prices.items()],
            },
            handle,
        )
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.aws", handle.name, str(latency)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        os.environ["AWS_ENDPOINT_URL_EC2"] = server.stdout.readline().strip()
        os.environ["AWS_ENDPOINT_URL_PRICING"] = server.stdout.readline().strip()
        print(
            f"AWS refresh over {len(regions)} regions, {args.latency_ms:g} ms per call "
            f"({len(recorder.recorded)} EC2 answers recorded from moto, replayed by a separate process)"
        )
        serial_calls, serial = timed_fetch(regions, 1)
        calls, wall = timed_fetch(regions, DEFAULT_WORKERS)
    finally:
        server.communicate("")
        os.unlink(handle.name)
    print(
        f"one after another (1 worker): {serial_calls} calls, {serial:6.2f} s "
        f"(calls × latency = {serial_calls * latency:.2f} s)"
    )
    print(
        f"default ({DEFAULT_WORKERS} workers):        {calls} calls, {wall:6.2f} s, "
        f"wall ÷ (calls × latency) = {wall / (calls * latency):.3f}"
    )
    print(f"speed-up: {serial / wall:.1f}x  (target ≥ 5x)")
    print(
        f"client CPU (serial wall − calls × latency): {serial - serial_calls * latency:.2f} s: boto3 "
        "builds a client per region and parses every answer here, which bounds the speed-up"
    )


if __name__ == "__main__":
    main()
