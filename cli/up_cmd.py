"""``gpufit up STACK``: deploy the stack through the Pulumi Automation API, watch its fleet come
into service, and fail over to the next plan when a region has no capacity (``gitops.failover``).

Exit codes: 0 the fleet is in service (or ``--dry-run``); 2 invalid spec; 3 nothing feasible;
5 unusable catalog; 8 the stack's lock is stale; 13 a plan would buy a Capacity Block that the
stack's ``gpufit:purchaseCapacityBlock`` does not confirm, or request a calendar-mode reservation
that ``gpufit:createCalendarReservation`` does not confirm (or whose window has begun); 14 every
attempt ran out of capacity; 15 the fleet is only partly in service at the end of ``--wait`` (it
keeps launching); 16 ``pulumi up``
or the fleet failed for another reason (quota, an error, no Pulumi CLI); 64 bad command line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.exit_codes import (
    CAPACITY_EXHAUSTED,
    FLEET_PARTIAL,
    INFEASIBLE,
    LOCK_STALE,
    OK,
    PURCHASE_UNCONFIRMED,
    UP_FAILED,
    USAGE,
)

if TYPE_CHECKING:
    from gitops.failover import Attempt, FleetState, FleetWatcher, StackWorkspace, UpReport
    from selector.catalog import Catalog
    from selector.select import Plan
    from selector.spec import WorkloadSpec

DEFAULT_WAIT = timedelta(minutes=15)
"""``--wait`` for a fleet of one group: a GPU VM's launch and boot take minutes."""


def default_wait(result: Plan) -> timedelta:
    """``--wait``'s default for an attempt: ``DEFAULT_WAIT``, and for a GCP fleet with fallback
    groups (MIGs of their own the rebalancer moves starved VMs to) the time the rebalancer may
    take to reach the last of them (``providers.gcp.rebalance.ring_wait``)."""
    from providers.gcp.rebalance import ring_wait

    groups = sum(1 for f in result.fallbacks if f.realised == "group" and f.offer.cloud == "gcp")
    return ring_wait(groups, DEFAULT_WAIT) if groups else DEFAULT_WAIT


def _wait_help() -> str:
    from providers.gcp.rebalance import EVERY_MINUTES, GRACE_SECONDS

    per = EVERY_MINUTES + GRACE_SECONDS / 60
    return (
        "how long each attempt's fleet may take to come up (default 15m; for a GCP fleet with "
        f"fallback groups 15m plus {per:g}m per group: the rebalancer runs every {EVERY_MINUTES} "
        f"min and moves a VM after {GRACE_SECONDS} s of starvation, one group per move; "
        "--dry-run prints each attempt's wait)"
    )


EXIT_OF = {
    "up": OK,
    "dry-run": OK,
    "exhausted": CAPACITY_EXHAUSTED,
    "partial": FLEET_PARTIAL,
    "refused": PURCHASE_UNCONFIRMED,
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "up",
        help="deploy a stack, watch its fleet come up, fail over to the next region when capacity runs out",
        description="Run `pulumi up` on the stack (Automation API, this project's __main__.py), watch "
        "the fleet for --wait; when it stays empty because the cloud has no capacity, exclude that "
        "cloud/region/type in the stack's spec (and lock) and try the next plan, up to --attempts: "
        "first each fallback the plan lists as an attempt of its own (a multi-node replica's other "
        "types), as listed and in the listed order, then a re-plan.",
    )
    p.add_argument("stack", help="a stack of this project (stacks/Pulumi.<stack>.yaml)")
    p.add_argument(
        "--attempts",
        type=int,
        default=None,
        help="plans to try at most (default: 1 + the fallbacks the plan lists as attempts of their "
        "own, at least 3, at most 10)",
    )
    p.add_argument("--wait", default=None, help=_wait_help())
    p.add_argument(
        "--dry-run", action="store_true", help="print the order of plans it would try; touch nothing"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--log", metavar="FILE", help="the JSON log (default build/up/<stack>-<time>.json)")
    p.add_argument(
        "--destroy-when-exhausted", action="store_true", help="destroy the stack if no attempt came up"
    )
    p.add_argument("--project-dir", default=".", help="the Pulumi project (default: .)")
    p.add_argument("--catalog", help="snapshot, cache or a catalog file (default: the freshest valid)")


def capacity_lines(spec: WorkloadSpec, catalog: Catalog) -> list[str]:
    """Capacity Blocks and flex-start offers for ``spec`` (what could still be had when every
    on-demand and spot attempt ran out), cheapest first; the spec's exclusions rule out only
    their own market (a Capacity Block is capacity set aside, not the pool that ran out)."""
    from cli.clock import today
    from selector.capacity_plan import capacity_alternatives

    def excluded(offer: Any) -> bool:
        return any(
            e.matches(offer.cloud, offer.region, offer.instance.name, offer.market)
            for e in spec.placement.exclude
        )

    found = capacity_alternatives(spec, catalog, today=today(), excluded=excluded)
    return [
        f"{a.describe()}; nothing is bought: see `gpufit offers --capacity-blocks` and the README's "
        '"Capacity" section'
        if a.kind == "capacity-block"
        else a.describe()
        for a in found
    ]


def _alternatives(
    catalog: Catalog, planner: Callable[[WorkloadSpec], Plan]
) -> Callable[[WorkloadSpec], list[str]]:
    def closest(spec: WorkloadSpec) -> list[str]:
        from selector.report import failure_summary

        result = planner(spec)
        if result.choice is not None:
            o = result.choice.offer
            lines = [
                f"next plan (not tried, --attempts reached): {o.cloud} {o.instance.name} in {o.region}, "
                f"{o.market}, ${result.choice.cost.hourly_usd:,.2f}/h"
            ]
        else:
            lines = failure_summary(result)
        return lines + capacity_lines(spec, catalog)

    return closest


class CloudWatcher:
    """The fleet watcher of the stack's cloud (its ``cloud`` output)."""

    def __init__(self, gcp_project: str | None) -> None:
        self._gcp_project = gcp_project
        self._watchers: dict[str, FleetWatcher] = {}

    def state(self, outputs: Any, since: datetime) -> FleetState:
        cloud = str(outputs.get("cloud"))
        if cloud not in self._watchers:
            if cloud == "aws":
                from providers.aws.fleet_watch import AsgWatcher

                self._watchers[cloud] = AsgWatcher()
            else:
                from providers.gcp.fleet_watch import MigWatcher

                if not self._gcp_project:
                    raise ValueError("gcp:project is not set in the stack's config")
                self._watchers[cloud] = MigWatcher(self._gcp_project)
        return self._watchers[cloud].state(outputs, since)


def release_spot_requests(
    stack: str, attempt: Attempt, canceller: Any = None, *, project: str, workload: str
) -> list[str]:
    """Before Pulumi deletes an attempt's nodes: an AWS multi-node spot attempt's nodes are plain
    instances whose persistent requests deleting them leaves open (``providers.aws.spot_requests``);
    a group's spot instances come from one-time requests, and GCP has no requests. Only the
    requests that carry all of the stack's identifying tags (``project``: the Pulumi project) and
    are of the attempt's type (and of its ``instance_ids`` when it names some) are cancelled."""
    if attempt.cloud != "aws" or attempt.market != "spot" or attempt.nodes < 2:
        return []
    from providers.aws.spot_requests import owner_tags

    if canceller is None:
        from providers.aws.spot_requests import SpotRequestCanceller

        canceller = SpotRequestCanceller()
    owner = owner_tags(project, stack, workload)
    notes: list[str] = canceller.release(owner, attempt.region, attempt.instance_type, attempt.instance_ids)
    return notes


def pulumi_project_name(project_dir: Path) -> str:
    """The ``name`` of the Pulumi project in ``project_dir`` (``Pulumi.yaml``): what the program's
    ``pulumi.get_project()`` returns, and so its nodes' ``gpufit:project`` tag."""
    from selector.datafile import load_yaml

    return str(load_yaml(project_dir / "Pulumi.yaml")["name"])


def _stack_config(spec_file: Path) -> dict[str, Any]:
    from selector.datafile import load_yaml

    return dict(load_yaml(spec_file).get("config") or {})


def unconfigured_clouds(config: dict[str, Any]) -> dict[str, str]:
    """Clouds the Pulumi program cannot deploy to with this stack config (``__main__.py``
    ``cloud_provider``: GCP needs ``gcp:project``; AWS reads its region from the plan)."""
    return {} if config.get("gcp:project") else {"gcp": "set gcp:project in the stack's config"}


def cmd_up(
    args: argparse.Namespace,
    workspace: StackWorkspace | None = None,
    watcher: FleetWatcher | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    release: Callable[[str, Attempt], list[str]] | None = None,
) -> int:
    from cli.catalog_choice import spec_and_catalog
    from deployment.capacity import CALENDAR_KEY
    from gitops.failover import POLL_S, UpReport, UpSettings, attempt_order, run_up
    from gitops.lock import lock_path, locked_catalog, make_lock, read_lock, spec_hash, write_lock
    from selector.select import plan
    from selector.units import parse_duration_hours

    if args.attempts is not None and args.attempts < 1:
        print("gpufit: --attempts must be at least 1", file=sys.stderr)
        return USAGE
    try:
        wait = timedelta(hours=parse_duration_hours(args.wait)) if args.wait else DEFAULT_WAIT
    except ValueError as err:
        print(f"gpufit: --wait {args.wait!r}: {err}", file=sys.stderr)
        return USAGE
    wait_of = None if args.wait else default_wait
    if wait.total_seconds() < POLL_S:
        print(
            f"gpufit: --wait {args.wait!r}: expected at least {POLL_S:.0f}s (one read of the fleet)",
            file=sys.stderr,
        )
        return USAGE
    project = Path(args.project_dir)
    spec_file = project / "stacks" / f"Pulumi.{args.stack}.yaml"
    inputs = spec_and_catalog(spec_file, args.catalog)
    if isinstance(inputs, int):
        return inputs
    spec, catalog = inputs
    if release is None:
        workload = spec.name

        def release_aws(stack: str, attempt: Attempt) -> list[str]:  # the project read only when needed
            if attempt.cloud != "aws" or attempt.market != "spot" or attempt.nodes < 2:
                return []
            return release_spot_requests(
                stack, attempt, project=pulumi_project_name(project), workload=workload
            )

        release = release_aws
    lock_file = lock_path(spec_file)
    lock = None
    if lock_file.exists():
        try:
            lock = read_lock(lock_file)
        except ValueError as err:
            print(f"gpufit: {err}", file=sys.stderr)
            return LOCK_STALE
        if lock["spec_sha256"] != spec_hash(spec):
            print(
                f"gpufit: {lock_file}: the spec changed since it was locked; run `gpufit lock {args.stack}`",
                file=sys.stderr,
            )
            return LOCK_STALE
    pinned = locked_catalog(lock, catalog.gpus) if lock is not None else None

    def planner(candidate: WorkloadSpec) -> Plan:
        """The reviewed lock's plan while the spec is the locked one, and a listed fallback at
        its locked price (the lock holds the fallbacks' offers); the catalog's after."""
        if pinned is not None and (candidate is spec or candidate.placement.attempt is not None):
            result = plan(candidate, pinned, today=now().date())
            if candidate is spec or result.choice is not None:
                return result
        return plan(candidate, catalog, today=now().date())

    config = _stack_config(spec_file)
    unconfigured = unconfigured_clouds(config)
    if args.dry_run:
        skipped: list[str] = []
        order = attempt_order(
            spec, planner, args.attempts, unconfigured, skipped, wait_of or (lambda _: wait)
        )
        if not order:
            print(f"gpufit: {spec.name}: nothing feasible to try", file=sys.stderr)
            return INFEASIBLE
        if args.json:
            print(
                json.dumps(
                    {
                        "stack": args.stack,
                        "verdict": "dry-run",
                        "order": [a.__dict__ for a in order],
                        "skipped": skipped,
                    },
                    indent=2,
                )
            )
        else:
            print(
                f"{args.stack}: the order `gpufit up` would try, "
                "each next one if the fleet stays empty for capacity:"
            )
            for a in order:
                print(a.line)
                print(f"  its fleet is watched for {_minutes(a.wait_s)}" + _wait_why(a.wait_s, wait_of))
            for why in dict.fromkeys(skipped):
                print(f"skipped: {why}")
        return OK

    if workspace is None:
        from gitops.automation import AutomationWorkspace

        try:
            workspace = AutomationWorkspace(project)
        except RuntimeError as err:
            print(f"gpufit: {err}", file=sys.stderr)
            return UP_FAILED

    def relock(result: Plan) -> None:
        if lock is not None:
            write_lock(make_lock(result, spec_file.relative_to(project), now()), lock_file)
            print(f"re-locked {lock_file} with the exclusions: review and commit it", file=sys.stderr)

    def log(line: str) -> None:
        print(line.rstrip("\n"), file=sys.stderr)

    settings = UpSettings(
        attempts=args.attempts,
        wait=wait,
        destroy_when_exhausted=args.destroy_when_exhausted,
        purchase_confirmed=str(config.get("gpufit:purchaseCapacityBlock", "")).lower() == "true",
        calendar_confirmed=str(config.get(CALENDAR_KEY, "")).lower() == "true",
        unconfigured=unconfigured,
        wait_of=wait_of,
    )
    gcp_project = config.get("gcp:project")
    report = UpReport(args.stack, "exhausted", [], [])
    log_file = args.log or f"build/up/{args.stack}-{now().strftime('%Y%m%dT%H%M%SZ')}.json"
    try:
        run_up(
            args.stack,
            spec,
            planner,
            workspace,
            watcher or CloudWatcher(str(gcp_project) if gcp_project else None),
            settings,
            now,
            sleep,
            relock=relock,
            alternatives=_alternatives(catalog, planner),
            log=log,
            report=report,
            release=release,
        )
    except Exception as err:  # recording or re-locking failed: one line, and the log of what ran
        report.verdict = "stopped"
        report.note = f"`gpufit up` stopped: {type(err).__name__}: {' '.join(str(err).split())[:300]}"
        print(f"gpufit: up {args.stack}: {type(err).__name__}: {err}", file=sys.stderr)
        return UP_FAILED
    finally:
        _write_log(report, log_file)
    _print(report, args.json)
    if report.verdict == "infeasible":
        return INFEASIBLE
    return EXIT_OF.get(report.verdict, UP_FAILED)


def _minutes(seconds: float | None) -> str:
    return f"{(seconds or 0) / 60:g} min"


def _wait_why(seconds: float | None, wait_of: object) -> str:
    """Why an attempt's default wait is longer than ``DEFAULT_WAIT`` (nothing for ``--wait``)."""
    from providers.gcp.rebalance import EVERY_MINUTES, GRACE_SECONDS

    extra = (seconds or 0) - DEFAULT_WAIT.total_seconds()
    if wait_of is None or extra <= 0:
        return ""
    groups = round(extra / (EVERY_MINUTES * 60 + GRACE_SECONDS))
    return (
        f" ({_minutes(DEFAULT_WAIT.total_seconds())} + {groups} GCP fallback group(s) × "
        f"({EVERY_MINUTES} min rebalancer schedule + {GRACE_SECONDS} s starvation grace): "
        "the rebalancer moves starved VMs one group per run)"
    )


def _write_log(report: UpReport, path: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    print(f"gpufit: wrote {target}", file=sys.stderr)


def _print(report: UpReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        return
    print(f"{report.stack}: {report.verdict} after {len(report.attempts)} attempt(s)")
    for attempt in report.attempts:
        print(attempt.line)
    for entry in report.exclusions:
        print(
            f"excluded: {entry['cloud']} {entry['region']} {entry['instance_type']} "
            f"({entry.get('reason', '')})"
        )
    for why in dict.fromkeys(report.skipped):
        print(f"skipped: {why}")
    for entry in report.not_recorded:
        print(
            f"not recorded (the last attempt's, still deployed): {entry['cloud']} {entry['region']} "
            f"{entry['instance_type']}"
        )
    if report.note:
        print(f"note: {report.note}")
    for line in report.alternatives:
        print(f"alternative: {line.strip()}")
