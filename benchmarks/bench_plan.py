"""How fast gpufit plans: cold `gpufit plan` processes and in-process selection time.

Prints figures; asserts nothing (speed is measured here, never in tests). Run with
``make bench`` or ``uv run python benchmarks/bench_plan.py [--runs N]``. Targets: a cold
``gpufit plan`` within 300 ms, selection over 100,000 offers within 250 ms.
"""

from __future__ import annotations

import argparse
import compileall
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selector.catalog import Catalog, catalog_from_doc, load_catalog, load_gpus  # noqa: E402
from selector.select import plan  # noqa: E402
from selector.spec import WorkloadSpec, load_spec  # noqa: E402

SPECS = [ROOT / "examples" / "llama70b-chat.yaml", ROOT / "examples" / "guanaco-65b.yaml"]


def synthetic_catalog(offers: int, seed: int = 7) -> Catalog:
    """A catalog of ``offers`` offers over 500 made-up instance types of the real GPUs,
    100 regions with 2 zones each and both markets: the shape of a live multi-cloud catalog."""
    rng = random.Random(seed)
    gpus = sorted(load_gpus())
    types: list[dict[str, Any]] = []
    for i in range(500):
        count = rng.choice([1, 1, 2, 4, 8])
        types.append(
            {
                "cloud": rng.choice(["aws", "gcp"]),
                "name": f"x{i}.{count}gpu",
                "gpu": rng.choice(gpus),
                "gpu_count": count,
                "vcpus": 8 * count,
                "memory_gib": 64.0 * count,
                "nvlink": count > 1 and rng.random() < 0.6,
                "node_interconnect": "efa" if count == 8 and rng.random() < 0.5 else None,
                "source": "SYN",
            }
        )
    rows: list[dict[str, Any]] = []
    per_type = offers // len(types)
    for t in types:
        for j in range(per_type):
            region, zone, market = f"r{j // 4 % 100}", "ab"[j // 2 % 2], ("on-demand", "spot")[j % 2]
            rows.append(
                {
                    "cloud": t["cloud"],
                    "instance_type": t["name"],
                    "region": region,
                    "zone": f"{region}{zone}",
                    "zones": [f"{region}{zone}"],
                    "market": market,
                    "source": "SYN",
                    "as_of": "2026-12",
                    "hourly_usd": round(rng.uniform(0.3, 100.0) * t["gpu_count"] ** 0.9, 4),
                }
            )
    doc = {
        "schema_version": 1,
        "as_of": "2026-12",
        "source": "synthetic",
        "sources": {"SYN": {}},
        "instance_types": types,
        "offers": rows,
    }
    return catalog_from_doc(doc, "synthetic")


def median_seconds(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cold_process(spec: Path, runs: int) -> float:
    cmd = [sys.executable, "-m", "cli.main", "plan", str(spec)]
    subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True)  # warm the OS file cache
    return median_seconds(lambda: subprocess.run(cmd, cwd=ROOT, capture_output=True, check=True), runs)


def main() -> None:
    # An installed gpufit runs from compiled bytecode; make sure edited sources are compiled too
    # (PYTHONDONTWRITEBYTECODE would otherwise recompile them in every cold process).
    for package in ("selector", "providers", "cli"):
        compileall.compile_dir(ROOT / package, quiet=1)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--offers", type=int, default=100_000)
    args = parser.parse_args()
    print(
        f"python {platform.python_version()} on {platform.machine()}, {platform.processor() or 'cpu'}; "
        f"median of {args.runs} runs"
    )
    embedded = load_catalog()
    load = median_seconds(load_catalog, args.runs)
    zoned = sum(1 for o in embedded.offers if o.zone is not None)
    print(
        f"load the embedded catalog ({len(embedded.offers)} offers, {zoned} zone-specific) in-process: "
        f"{load * 1e3:6.1f} ms"
    )
    specs: list[WorkloadSpec] = [load_spec(p) for p in SPECS]
    for path in SPECS:
        print(
            f"cold `gpufit plan {path.relative_to(ROOT)}`: {cold_process(path, args.runs) * 1e3:7.1f} ms"
            "  (target ≤ 300 ms)"
        )
    for spec in specs:
        t = median_seconds(lambda s=spec: plan(s, embedded), args.runs)
        print(f"selection, embedded catalog ({len(embedded.offers)} offers), {spec.name}: {t * 1e3:7.2f} ms")
    fixtures = sorted((ROOT / "tests" / "fixtures" / "realistic").glob("*.yaml"))
    realistic = {p.stem: load_spec(p) for p in fixtures}
    each = {n: median_seconds(lambda s=spec: plan(s, embedded), args.runs) for n, spec in realistic.items()}
    slowest = max(each, key=lambda name: each[name])
    print(
        f"selection, embedded catalog, {len(each)} realistic fixtures: median "
        f"{statistics.median(each.values()) * 1e3:7.2f} ms, slowest {each[slowest] * 1e3:7.2f} ms ({slowest})"
    )
    start = time.perf_counter()
    big = synthetic_catalog(args.offers)
    build = time.perf_counter() - start
    _ = big.by_instance_type
    print(
        f"synthetic catalog: {len(big.offers)} offers, {len(big.instance_types)} instance types, "
        f"built in {build:.2f} s"
    )
    for spec in specs:
        t = median_seconds(lambda s=spec: plan(s, big), max(3, args.runs // 3))
        print(f"selection, {len(big.offers):,} offers, {spec.name}: {t * 1e3:7.1f} ms  (target ≤ 250 ms)")


if __name__ == "__main__":
    main()
