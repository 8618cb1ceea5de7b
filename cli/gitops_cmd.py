"""``gpufit lock``, ``gpufit diff`` and ``gpufit reap``: the GitOps side of the CLI."""

from __future__ import annotations

import argparse
import contextlib
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.exit_codes import (
    BAD_CATALOG as EXIT_BAD_CATALOG,
    INFEASIBLE as EXIT_INFEASIBLE,
    INVALID_SPEC as EXIT_INVALID_SPEC,
    LIVE_BLOCKS_UNREAD as EXIT_LIVE_BLOCKS_UNREAD,
    LOCK_STALE as EXIT_LOCK_STALE,
    OK as EXIT_OK,
    OVER_BUDGET as EXIT_OVER_BUDGET,
    REAP_FAILED as EXIT_REAP_FAILED,
    USAGE as EXIT_USAGE,
)

if TYPE_CHECKING:
    from gitops.lock import LockStatus


def add_parsers(sub: Any) -> None:
    lock = sub.add_parser("lock", help="pin a reviewed plan in <stack>.lock.json")
    lock.add_argument("target", nargs="?", help="a stack name (stacks/Pulumi.<stack>.yaml) or a spec file")
    lock.add_argument("--check", action="store_true", help="exit non-zero when any lock is missing or stale")
    lock.add_argument("--stacks", default="stacks", help="folder of stack files (default: stacks)")
    lock.add_argument("--catalog", help="snapshot, cache or a catalog file (default: the freshest valid)")
    lock.add_argument(
        "--refresh-model", action="store_true", help="model.hf: ask the Hub again instead of the cache"
    )
    lock.add_argument(
        "--capacity-blocks",
        choices=["reference", "live"],
        default="reference",
        help="live: price Capacity Blocks from AWS's offerings and lock the one chosen (what is bought)",
    )
    diff = sub.add_parser("diff", help="what changes in instance and cost between two specs or locks")
    diff.add_argument("old", help="a spec, stack file or lock")
    diff.add_argument("new", help="a spec, stack file or lock")
    diff.add_argument("--catalog", help="catalog for planning specs (default: the freshest valid)")
    reap = sub.add_parser("reap", help="destroy stacks whose expires_at output has passed")
    reap.add_argument("--yes", action="store_true", help="destroy (default: dry run)")
    reap.add_argument("--older-than", default="0s", help="only stacks expired longer ago than this, e.g. 1h")
    reap.add_argument("--project-dir", default=".", help="the Pulumi project (default: .)")


def _spec_file(target: str, stacks: str) -> Path:
    path = Path(target)
    return path if path.suffix in (".yaml", ".yml") else Path(stacks) / f"Pulumi.{target}.yaml"


def _checked(spec_file: Path) -> LockStatus:
    """The lock check of one spec file, its Hub model sized at the locked commit from the start:
    the spec's own validation sizes ``model.hf`` too, and must not fetch the branch's head (it
    may have moved to a broken or gated config since the review). SpecError when invalid."""
    from gitops.lock import check_lock, lock_path, pin_locked_model, read_lock
    from selector.spec import load_spec, use_hub

    previous = None
    if lock_path(spec_file).exists():
        with contextlib.suppress(ValueError):  # check_lock says why a lock is unreadable
            previous = pin_locked_model(read_lock(lock_path(spec_file)))
    try:
        return check_lock(load_spec(spec_file), spec_file)
    finally:
        if previous is not None:
            use_hub(previous)


def cmd_lock(args: argparse.Namespace, now: datetime | None = None) -> int:
    from gitops.lock import lock_path, make_lock, write_lock
    from selector.spec import SpecError

    if args.check:
        files = (
            [_spec_file(args.target, args.stacks)]
            if args.target
            else sorted(Path(args.stacks).glob("Pulumi.*.yaml"))
        )
        bad = 0
        for spec_file in files:
            try:
                status = _checked(spec_file)
            except SpecError as err:
                for problem in err.problems:
                    print(f"{spec_file}: invalid spec: {problem}", file=sys.stderr)
                bad += 1
                continue
            mark = "ok" if status.state == "current" else status.state
            print(f"{mark:<10} {status.lock_file}" + (f": {status.detail}" if status.detail else ""))
            bad += status.state != "current"
        if bad:
            print(f"gpufit: {bad} lock(s) missing or stale", file=sys.stderr)
            return EXIT_LOCK_STALE
        return EXIT_OK
    if not args.target:
        print("gpufit: lock needs a stack name or spec file (or --check)", file=sys.stderr)
        return EXIT_USAGE
    from cli.catalog_choice import spec_and_catalog
    from selector.select import plan

    spec_file = _spec_file(args.target, args.stacks)
    inputs = spec_and_catalog(spec_file, args.catalog)
    if isinstance(inputs, int):
        return inputs
    spec, catalog = inputs
    quotes = None
    if getattr(args, "capacity_blocks", "reference") == "live" and spec.capacity.blocks != "no":
        from cli.capacity_cmd import live_answers

        quotes, asked, failed = live_answers(spec, catalog, (now or datetime.now(UTC)).date())
        if asked and failed == asked:  # nothing read: a lock now would hold no block AWS sells
            print(
                f"gpufit: {spec.name}: all {asked} Capacity Block ask(s) failed; nothing locked",
                file=sys.stderr,
            )
            return EXIT_LIVE_BLOCKS_UNREAD
    result = plan(spec, catalog, block_quotes=quotes)
    from selector.attempt_pin import pin_note

    pinned = pin_note(spec.placement.attempt)
    if pinned:
        print(f"gpufit: {spec.name}: {pinned}", file=sys.stderr)
    if result.choice is None:
        print(f"gpufit: {spec.name}: {result.status}; nothing to lock", file=sys.stderr)
        return EXIT_INFEASIBLE if result.status == "infeasible" else EXIT_OVER_BUDGET
    doc = make_lock(result, spec_file, now or datetime.now(UTC))
    path = write_lock(doc, lock_path(spec_file))
    o = doc["offer"]
    print(
        f"locked {path}: {o['cloud']} {o['instance_type']} × {doc['instances']} "
        f"in {o['zone'] or o['region']}, "
        f"{o['market']}, ${o['hourly_usd']}/h; total ${doc['cost']['total_usd']:,.2f}"
    )
    return EXIT_OK


def _summary(path: Path, catalog_choice: str | None) -> dict[str, Any]:
    """A comparable summary of a lock, or of the plan of a spec/stack file."""
    if path.suffix == ".json":
        from gitops.lock import read_lock

        lock = read_lock(path)
        o = lock["offer"]
        return {
            "cloud": o["cloud"],
            "instance_type": o["instance_type"],
            "region": o["region"],
            "zone": o["zone"],
            "market": o["market"],
            "instances": lock["instances"],
            "hourly_usd": lock["cost"]["hourly_usd"],
            "total_usd": lock["cost"]["total_usd"],
            "hours": lock["cost"]["hours"],
            "from": f"lock of {lock['locked_at']}",
        }
    from cli.catalog_choice import resolved_catalog
    from selector.select import plan
    from selector.spec import load_spec

    result = plan(load_spec(path), resolved_catalog(catalog_choice))
    if result.choice is None:
        return {"status": result.status, "from": "plan"}
    c = result.choice
    return {
        "cloud": c.offer.cloud,
        "instance_type": c.offer.instance.name,
        "region": c.offer.region,
        "zone": c.offer.zone,
        "market": c.offer.market,
        "instances": c.shape.instances,
        "hourly_usd": round(c.cost.hourly_usd, 4),
        "total_usd": round(c.cost.total_usd, 2),
        "hours": round(c.cost.hours, 3),
        "from": f"plan on {result.catalog.source} of {result.catalog.as_of}",
    }


def cmd_diff(args: argparse.Namespace) -> int:
    from selector.catalog import CatalogError
    from selector.spec import SpecError

    try:
        old, new = _summary(Path(args.old), args.catalog), _summary(Path(args.new), args.catalog)
    except SpecError as err:
        for problem in err.problems:
            print(f"{err.source}: {problem}", file=sys.stderr)
        return EXIT_INVALID_SPEC
    except (CatalogError, ValueError) as err:
        print(f"gpufit: {err}", file=sys.stderr)
        return EXIT_BAD_CATALOG
    from cli.render import money, table

    rows = []
    for key in (
        "cloud",
        "instance_type",
        "region",
        "zone",
        "market",
        "instances",
        "hourly_usd",
        "total_usd",
        "hours",
        "status",
        "from",
    ):
        a, b = old.get(key), new.get(key)
        if a is None and b is None:
            continue
        shown = [money(v) if key.endswith("_usd") and isinstance(v, int | float) else str(v) for v in (a, b)]
        change = ""
        if key.endswith("_usd") and isinstance(a, int | float) and isinstance(b, int | float):
            change = f"{'+' if b >= a else '-'}{money(abs(b - a))}" + (f" ({(b - a) / a:+.1%})" if a else "")
        elif a != b and key != "from":
            change = "changed"
        rows.append([key, shown[0], shown[1], change])
    print(table(["", args.old, args.new, "change"], rows))
    return EXIT_OK


def cmd_reap(args: argparse.Namespace, backend: Any = None, now: datetime | None = None) -> int:
    from cli.render import money
    from gitops.reap import AutomationBackend, reap
    from selector.units import parse_duration_hours

    try:
        older_than = timedelta(hours=parse_duration_hours(args.older_than))
    except ValueError as err:
        print(f"gpufit: --older-than: {err}", file=sys.stderr)
        return EXIT_USAGE
    if backend is None:
        try:
            backend = AutomationBackend(Path(args.project_dir))
        except RuntimeError as err:
            print(f"gpufit: {err}", file=sys.stderr)
            return EXIT_REAP_FAILED
    report = reap(
        backend,
        now or datetime.now(UTC),
        older_than,
        args.yes,
        log=lambda line: print(f"gpufit: {line}", file=sys.stderr),
    )
    for d in report.decisions:
        when = d.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if d.expires_at else "-"
        price = money(d.hourly_usd) + "/h" if d.hourly_usd is not None else "?"
        verb = (
            ("destroyed" if d.stack in report.destroyed else "would destroy")
            if d.action == "destroy"
            else d.action
        )
        print(f"{verb:<14} {d.stack:<24} expires {when:<21} {price:>12}  {d.reason}")
    for stack, why in sorted(report.failed.items()):
        print(f"failed         {stack:<24} {why}", file=sys.stderr)
    saved = money(report.hourly_saved)
    print(
        f"{'stopped' if args.yes else 'would stop'} {saved}/h" + ("" if args.yes else " (dry run: add --yes)")
    )
    return EXIT_REAP_FAILED if report.failed else EXIT_OK
