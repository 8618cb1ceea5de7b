"""``gpufit sweep``: find gpufit instances whose expiry has passed, or that carry no valid
expiry, and (with ``--yes``) remove them. Dry run by default.

Exit codes: 0 ok (nothing to do included); 6 some region failed after its retries, or some
instance could not be removed (named in the report); 7 cloud credentials or a permission
missing (named). Without ``--cloud`` both clouds are swept, GCP only when a project is set
(``--project`` or ``GOOGLE_CLOUD_PROJECT``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cli.exit_codes import AUTH as EXIT_AUTH, OK as EXIT_OK, SWEEP_INCOMPLETE
from cli.render import money, table

EXIT_FAILED = SWEEP_INCOMPLETE
"""6: the cloud APIs failed after their retries (a region), or an instance could not be removed."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        help="remove gpufit instances past their expiry or without a valid one (dry run unless --yes)",
        description="Find instances tagged gpufit:managed=true (GCP label gpufit-managed=true) whose "
        "expiry has passed or is missing or malformed, and terminate (AWS) or delete (GCP) them. "
        "Instances without the managed tag/label are never touched. Dry run unless --yes.",
    )
    p.add_argument(
        "--cloud",
        choices=["aws", "gcp"],
        nargs="+",
        action="extend",
        help="default: aws, and gcp when a project is set",
    )
    p.add_argument(
        "--regions", nargs="+", help="AWS regions and/or GCP regions (default: every enabled region)"
    )
    p.add_argument("--project", help="GCP project (default: GOOGLE_CLOUD_PROJECT)")
    p.add_argument(
        "--aws-deployer",
        action="append",
        metavar="ARN",
        help="the IAM role or user that runs `pulumi up` (repeatable): a launch template proves a"
        " machine is gpufit's only when this identity created it (default: the caller's own identity)",
    )
    p.add_argument("--yes", action="store_true", help="remove them (default: only list what would go)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--catalog", help="prices from: snapshot, cache or a catalog file (default: freshest valid)"
    )


def _pricer(choice: str | None, now: datetime) -> Any:
    from catalog.store import resolve
    from gitops.sweep import Pricer
    from selector.catalog import CatalogError

    try:
        resolved = resolve(choice, now=now)
    except CatalogError as err:
        print(f"gpufit: catalog: {err}; prices shown as ?", file=sys.stderr)
        return Pricer.empty()
    if resolved.warning:
        print(resolved.warning, file=sys.stderr)
    return Pricer(resolved.catalog.offers)


def _sweeper(cloud: str, args: argparse.Namespace) -> Any:
    if cloud == "aws":
        from providers.aws.sweep import AwsSweeper

        return AwsSweeper(deployers=args.aws_deployer)
    from providers.gcp.sweep import GcpSweeper

    return GcpSweeper(project=args.project)


def cmd_sweep(
    args: argparse.Namespace, now: datetime | None = None, *, sweepers: Mapping[str, Any] | None = None
) -> int:
    """Run the sweep; ``sweepers`` (cloud -> object with ``sweep(regions, now, act, price)``)
    replaces the default AWS/GCP sweepers (tests inject retry policies and faults)."""
    from cloudapi.calls import AuthError
    from gitops.sweep import SweepResult, to_json

    now = now or datetime.now(UTC)
    if args.cloud:
        clouds = list(dict.fromkeys(args.cloud))
    else:
        clouds = ["aws"]
        if args.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or (sweepers and "gcp" in sweepers):
            clouds.append("gcp")
        else:
            print(
                "gpufit: gcp skipped: no project (set GOOGLE_CLOUD_PROJECT or pass --project)",
                file=sys.stderr,
            )
    price = _pricer(getattr(args, "catalog", None), now)
    results: list[SweepResult] = []
    for cloud in clouds:
        try:
            sweeper = sweepers[cloud] if sweepers and cloud in sweepers else _sweeper(cloud, args)
        except AuthError as err:
            results.append(SweepResult(cloud=cloud, acted=args.yes, auth_error=str(err)))
            continue
        except ValueError as err:  # a malformed endpoint setting
            results.append(SweepResult(cloud=cloud, acted=args.yes, regions_failed={"*": str(err)}))
            continue
        results.append(sweeper.sweep(args.regions, now, args.yes, price))
    if args.json:
        print(json.dumps(to_json(results), indent=2))
    else:
        print(render(results))
    for result in results:
        if result.auth_error:
            print(f"gpufit: {result.auth_error}", file=sys.stderr)
    if any(r.auth_error for r in results):
        return EXIT_AUTH
    failed_regions = [f"{r.cloud}:{region}" for r in results for region in sorted(r.regions_failed)]
    failed_instances = [f"{r.cloud}:{i}" for r in results for i in sorted(r.failed)]
    if failed_regions:
        print(f"gpufit: sweep incomplete: failed in {', '.join(failed_regions)}", file=sys.stderr)
    if failed_instances:
        print(f"gpufit: could not remove {', '.join(failed_instances)}", file=sys.stderr)
    return EXIT_FAILED if failed_regions or failed_instances else EXIT_OK


if TYPE_CHECKING:
    from gitops.sweep import Candidate, SweepResult


def _price_cell(c: Candidate) -> str:
    """An instance's cost in the report."""
    if not c.billing:
        return "not running"  # stopping it stops no machine cost; its disks still bill
    return "?" if c.hourly_usd is None else f"{money(c.hourly_usd)}/h"


def _what(results: list[SweepResult], count: int) -> str:
    """``3 instances`` or ``2 instances and 1 group`` (a group is removed with its machines)."""
    groups = sum(
        1
        for r in results
        for c in r.candidates
        if c.kind == "group" and (not r.acted or c.instance_id in r.actions)
    )
    if not groups:
        return f"{count} instances"
    return f"{count - groups} instances and {groups} group{'s' if groups > 1 else ''}"


def render(results: list[SweepResult]) -> str:
    """The sweep's report: one table of candidates across clouds, what happened to each when
    acting, failures, and the hourly cost stopped (or that acting would stop)."""
    from deployment import iso_utc
    from gitops.sweep import totals

    acted = any(r.acted for r in results)
    headers = [
        "cloud",
        "where",
        "instance",
        "name",
        "type",
        "market",
        "stack",
        "workload",
        "expires",
        "reason",
    ]
    headers += ["$/h"] + (["result"] if acted else [])
    rows: list[list[str]] = []
    for result in results:
        for c in result.candidates:
            row = [
                c.cloud,
                c.zone or c.region,
                f"group {c.instance_id.rsplit('/', 1)[-1]} ({c.state})"
                if c.kind == "group"
                else c.instance_id,
                c.name or "-",
                c.instance_type,
                c.market,
                c.stack or "-",
                c.workload or "-",
                iso_utc(c.expires_at) if c.expires_at else "-",
                c.reason,
                _price_cell(c),
            ]
            if acted:
                row.append(
                    result.actions.get(c.instance_id) or f"FAILED: {result.failed.get(c.instance_id, '?')}"
                )
            rows.append(row)
    lines: list[str] = []
    if rows:
        lines.extend(table(headers, rows, right=(10,)).splitlines())
    for result in results:  # why each one is swept: its tags' reason, and what proves it gpufit's
        lines.extend(
            f"{c.cloud}: {c.instance_id}: {c.reason}; {c.provenance}"
            for c in result.candidates
            if c.provenance
        )
    for result in results:
        lines.extend(f"{result.cloud}: {note}" for note in result.notes)
        lines.extend(
            f"{result.cloud}: region {region} failed: {why}"
            for region, why in sorted(result.regions_failed.items())
        )
    usd, count, unknown = totals(results, done_only=acted)
    idle = sum(
        1
        for r in results
        for c in r.candidates
        if not c.billing and (not acted or c.instance_id in r.actions)
    )
    unpriced = f" (+ {unknown} of unknown price)" if unknown else ""
    if idle:
        unpriced += f"; {idle} not running (disks only, not counted)"
    incomplete = [
        f"{r.cloud}: {'permission or credentials missing' if r.auth_error else 'some regions failed'}"
        for r in results
        if r.auth_error or r.regions_failed
    ]
    caveat = f" (incomplete: {'; '.join(incomplete)})" if incomplete else ""
    if not any(r.candidates for r in results):
        if incomplete:
            lines.append(f"found nothing to sweep where the listing succeeded{caveat}")
        else:
            lines.append("nothing to sweep: no gpufit instance past its expiry or without a valid one")
    elif acted:
        failed = sum(len(r.failed) for r in results)
        tail = f"; {failed} failed" if failed else ""
        lines.append(f"removed {_what(results, count)}: stopped {money(usd)}/h{unpriced}{tail}{caveat}")
    else:
        lines.append(
            f"dry run: would remove {_what(results, count)}, stopping {money(usd)}/h{unpriced}{caveat}; "
            "run again with --yes to remove them"
        )
    return "\n".join(lines)
