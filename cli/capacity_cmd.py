"""The capacity parts of ``gpufit plan`` and ``gpufit offers``: live Capacity Block offerings
(opt-in: ``--capacity-blocks live`` asks AWS, with the default credential chain) and the
``offers --capacity-blocks`` listing (reference rates, or live offerings)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import date
from typing import Any

from selector.capacity import BlockAsk, BlockQuote, block_regions, reference_quote
from selector.catalog import Catalog
from selector.spec import WorkloadSpec


def ec2_clients() -> Callable[[str], Any]:
    """The EC2 client per region the live path uses (tests replace this function)."""
    from catalog.capacity_blocks import boto3_clients

    return boto3_clients()


def live_quotes(spec: WorkloadSpec, catalog: Catalog, today: date) -> tuple[BlockQuote, ...]:
    """The offerings AWS has for this workload's blocks; a failed ask is reported on stderr."""
    return live_answers(spec, catalog, today)[0]


def live_answers(
    spec: WorkloadSpec, catalog: Catalog, today: date
) -> tuple[tuple[BlockQuote, ...], int, int]:
    """(the offerings, the asks made, the asks that failed); each failure one line on stderr."""
    from catalog.capacity_blocks import block_offerings
    from selector.capacity_plan import block_asks

    asks = block_asks(spec, catalog)
    quotes, notes = block_offerings(asks, ec2_clients(), today)
    for note in notes:
        sys.stderr.write(f"gpufit: capacity blocks: {note}\n")
    return quotes, len(asks), len(notes)


def add_offers_arguments(o: Any) -> None:
    o.add_argument(
        "--capacity-blocks",
        nargs="?",
        const="reference",
        choices=["reference", "live"],
        help="list EC2 Capacity Block prices instead: reference rates (ESTIMATES, dated) or live offerings",
    )
    o.add_argument("--block-instances", type=int, default=1, help="live: instances per block (default 1)")
    o.add_argument("--block-days", type=int, default=1, help="live: block duration in days (default 1)")


def block_rows(args: argparse.Namespace, catalog: Catalog, today: date) -> list[dict[str, Any]]:
    """One row per (type, region): the reference rate, or each live offering."""
    import fnmatch

    types = sorted(
        {it.name: it for it, _ in catalog.by_instance_type if it.cloud == "aws"}.values(),
        key=lambda t: t.name,
    )
    rows: list[dict[str, Any]] = []
    asks: list[BlockAsk] = []
    for it in types:
        gpu = (args.gpu or "").lower()
        if gpu and gpu not in (it.gpu.name.lower(), *(a.lower() for a in it.gpu.aliases)):
            continue
        for region in block_regions(it.name):
            if args.region and not fnmatch.fnmatchcase(region, args.region):
                continue
            if args.capacity_blocks == "live":
                asks.append(BlockAsk(it.name, region, args.block_instances, args.block_days * 24))
                continue
            quote = reference_quote(it.name, region)
            if quote is not None:
                rows.append(_row(quote, it.gpu_count, it.gpu.name, today))
    if asks:
        from catalog.capacity_blocks import block_offerings

        quotes, notes = block_offerings(asks, ec2_clients(), today)
        for note in notes:
            sys.stderr.write(f"gpufit: capacity blocks: {note}\n")
        gpus = {it.name: (it.gpu_count, it.gpu.name) for it in types}
        rows = [_row(q, *gpus[q.instance_type], today) for q in quotes]
    rows.sort(key=lambda r: (r["usd_per_gpu_hour"], r["instance_type"], r["region"]))
    return rows


def _row(q: BlockQuote, gpus: int, gpu: str, today: date) -> dict[str, Any]:
    from selector.freshness import age_text

    return {
        "instance_type": q.instance_type,
        "region": q.region,
        "gpus": f"{gpus}×{gpu}",
        "usd_per_instance_hour": round(q.rate_usd, 4),
        "usd_per_gpu_hour": round(q.rate_usd / gpus, 4),
        "estimate": not q.live,
        "offering_id": q.offering_id,
        "availability_zone": q.availability_zone,
        "start": q.start.isoformat() if q.start else None,
        "end": q.end.isoformat() if q.end else None,
        "instances": q.instance_count,
        "upfront_usd": q.upfront_usd,
        "as_of": q.as_of,
        "age": age_text(q.as_of, today),  # review nit 11: a reference rate's age, as the catalog's
        "source": q.source,
    }


def print_blocks(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    lines = ["EC2 Capacity Blocks for ML (paid up front for the whole block; not refundable)"]
    for r in rows:
        if r["offering_id"]:
            what = (
                f"offering {r['offering_id']} {r['availability_zone']} {r['start']} to {r['end']}, "
                f"{r['instances']} instance(s), ${r['upfront_usd']:,.2f} up front"
            )
        else:
            what = "reference rate, ESTIMATE"
        head = f"  {r['instance_type']:<15} {r['region']:<15} {r['gpus']:<12}"
        lines.append(
            f"{head} ${r['usd_per_instance_hour']:>8,.2f}/h (${r['usd_per_gpu_hour']:,.3f}/GPU-h)  "
            f"{what}; as of {r['as_of']} ({r['age']}); {r['source']}"
        )
    if len(lines) == 1:
        lines.append("  none (no type in the catalog has a Capacity Block price for these filters)")
    sys.stdout.write("\n".join(lines) + "\n")
