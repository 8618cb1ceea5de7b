"""``gpufit catalog refresh`` and ``gpufit catalog show``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from cli.exit_codes import (
    AUTH as EXIT_AUTH,
    BAD_CATALOG as EXIT_BAD_CATALOG,
    OK as EXIT_OK,
    REFRESH_FAILED as EXIT_REFRESH_FAILED,
)


def positive_int(text: str) -> int:
    """An argparse type: a whole number ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def add_parser(sub: Any) -> None:
    catalog = sub.add_parser("catalog", help="refresh or inspect the price catalog")
    verbs = catalog.add_subparsers(dest="verb", required=True, parser_class=type(catalog))
    refresh = verbs.add_parser("refresh", help="fetch today's specs and prices from the clouds")
    refresh.add_argument("--cloud", choices=["aws", "gcp"], action="append", help="default: both")
    refresh.add_argument("--regions", nargs="+", help="default: every enabled region")
    refresh.add_argument("--out", help="default: the user cache directory")
    refresh.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="threads making API calls, shared by the clouds (default 32)",
    )
    refresh.add_argument("--project", help="GCP project (default: GOOGLE_CLOUD_PROJECT)")
    refresh.add_argument(
        "--aws-source",
        choices=["auto", "public", "account"],
        default="auto",
        help="AWS prices from its public files (no account) or its APIs (credentials); "
        "auto: the APIs when credentials are found, else the public files",
    )
    refresh.add_argument(
        "--no-placement-scores",
        action="store_true",
        help="with AWS credentials, skip GetSpotPlacementScores (it needs ec2:GetSpotPlacementScores)",
    )
    show = verbs.add_parser("show", help="which catalog plans use, its age and coverage")
    show.add_argument("--catalog", help="snapshot, cache or a file (default: the freshest valid)")
    show.add_argument("--json", action="store_true")


@contextmanager
def _progress(clouds: list[str]) -> Iterator[Callable[[str], None]]:
    """A rich progress display per cloud on a terminal; plain log lines otherwise."""
    if not sys.stderr.isatty():
        yield lambda message: print(f"gpufit: {message}", file=sys.stderr, flush=True)
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as progress:
        tasks = {cloud: progress.add_task(f"{cloud}: starting", total=None) for cloud in clouds}

        def update(message: str) -> None:
            cloud = message.split(":", 1)[0]
            if cloud in tasks:
                progress.update(tasks[cloud], description=message)

        yield update


def cmd_refresh(args: argparse.Namespace) -> int:
    from catalog.refresh import DEFAULT_WORKERS, refresh
    from catalog.store import default_cache_path, read_catalog_file, write_catalog
    from cloudapi.calls import AuthError, CallCounter
    from selector.catalog import SNAPSHOT_FILE, CatalogError

    out = Path(args.out) if args.out else default_cache_path()
    previous_path = out if out.exists() else SNAPSHOT_FILE
    try:
        previous = read_catalog_file(previous_path)
    except CatalogError as err:
        print(f"gpufit: {err}; merging over the embedded snapshot instead", file=sys.stderr)
        previous_path = SNAPSHOT_FILE
        previous = read_catalog_file(previous_path)
    previous_doc = json.loads(previous_path.read_text(encoding="utf-8"))
    clouds = args.cloud or ["aws", "gcp"]
    counter = CallCounter()
    fetchers: list[Any] = []
    skipped: dict[str, str] = {}
    # Each cloud is set up on its own: one cloud's missing project or credentials never stops
    # another's refresh. A cloud named with --cloud that cannot run is an error (exit 7); one
    # refreshed by default is skipped with the reason.
    for cloud in clouds:
        try:
            fetchers.append(_fetcher(cloud, args, counter, previous_doc))
        except AuthError as err:
            skipped[cloud] = str(err)
        except ValueError as err:
            print(f"gpufit: {cloud}: {err}", file=sys.stderr)
            return EXIT_REFRESH_FAILED
    if not fetchers:
        for cloud, why in skipped.items():
            print(f"gpufit: {cloud}: {why}", file=sys.stderr)
        return EXIT_AUTH
    try:
        with _progress([f.cloud for f in fetchers]) as progress:
            report = refresh(
                fetchers,
                previous,
                previous_doc,
                regions=args.regions,
                workers=args.workers or DEFAULT_WORKERS,
                progress=progress,
            )
    except AuthError as err:
        print(f"gpufit: {err}", file=sys.stderr)
        return EXIT_AUTH
    except ValueError as err:
        print(f"gpufit: {err}", file=sys.stderr)
        return EXIT_REFRESH_FAILED
    report.skipped.update(skipped)
    for line in report.lines():
        print(line)
    for error in report.auth_errors:
        print(f"gpufit: {error}", file=sys.stderr)
    asked = set(args.cloud or ())
    failed_asked = bool(report.auth_errors) or bool(asked & set(skipped))
    if not report.useful:
        print("gpufit: nothing useful was fetched; the previous catalog is unchanged", file=sys.stderr)
        return EXIT_AUTH if report.auth_errors or skipped else EXIT_REFRESH_FAILED
    path = write_catalog(report.doc, out)
    print(
        f"wrote {path}: {len(report.doc['offers'])} offers, "
        f"{len(report.doc['instance_types'])} instance types"
    )
    return EXIT_AUTH if failed_asked and args.cloud else EXIT_OK


def _fetcher(cloud: str, args: argparse.Namespace, counter: Any, previous: dict[str, Any]) -> Any:
    """The cloud's fetcher; ``AuthError`` when it cannot run (no GCP project, no AWS
    credentials for ``--aws-source account``). AWS without credentials reads its public
    files (``catalog.aws_public``)."""
    if cloud == "gcp":
        from catalog.gcp import GcpCatalogFetcher

        return GcpCatalogFetcher(project=args.project, counter=counter)
    from cloudapi.public_http import PublicHttp

    if args.aws_source == "public" or (args.aws_source == "auto" and not _aws_credentials()):
        from catalog.aws_public import AwsPublicFetcher

        return AwsPublicFetcher(previous, counter=counter, http=PublicHttp(counter, log=_file_size))
    from catalog.aws import AwsCatalogFetcher

    return AwsCatalogFetcher(
        counter=counter, scores=not args.no_placement_scores, advisor=PublicHttp(counter, log=_file_size)
    )


def _file_size(line: str) -> None:
    """One public file's size as its server sent it (issue 25: the refresh measures its download)."""
    print(f"gpufit: aws: {line}", file=sys.stderr, flush=True)


def _aws_credentials() -> bool:
    """Whether the standard AWS configuration yields credentials (a provider that fails counts
    as present: the refresh then says why it failed)."""
    from cloudapi.lean_botocore import refresh_session

    try:
        return refresh_session().get_credentials() is not None
    except Exception:
        return True


def describe(resolved: Any, now: datetime) -> dict[str, Any]:
    catalog = resolved.catalog
    regions: dict[str, set[str]] = {}
    for offer in catalog.offers:
        regions.setdefault(offer.cloud, set()).add(offer.region)
    from selector.freshness import price_ages

    stale = sorted({f"{o.cloud}:{o.region}" for o in catalog.offers if o.stale})
    try:
        age = (now.date() - datetime.fromisoformat(catalog.as_of[:10]).date()).days
    except ValueError:
        age = None
    ages = price_ages(o.as_of for o in catalog.offers)
    return {
        "kind": resolved.kind,
        "path": catalog.path,
        "source": catalog.source,
        "as_of": catalog.as_of,
        "age_days": age,
        "offers": len(catalog.offers),
        "instance_types": len(catalog.instance_types),
        "regions": {cloud: sorted(r) for cloud, r in sorted(regions.items())},
        "stale_regions": stale,
        "prices": ages.as_dict(now.date()) if ages is not None else None,
        "unpriced": len(catalog.unpriced),
        "not_sold": list(catalog.not_sold),
        "warning": resolved.warning,
    }


def cmd_show(args: argparse.Namespace) -> int:
    from catalog.store import resolve
    from cli.clock import now
    from selector.catalog import CatalogError

    clock = now()
    try:
        resolved = resolve(args.catalog, clock)
    except CatalogError as err:
        print(f"gpufit: catalog: {err}", file=sys.stderr)
        return EXIT_BAD_CATALOG
    info = describe(resolved, clock)
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    print(f"catalog in use: {info['kind']} ({info['path']})")
    print(f"source: {info['source']}; written {info['as_of']} ({info['age_days']} days ago)")
    prices = info["prices"]
    if prices:
        span = f"{prices['oldest_as_of']}..{prices['newest_as_of']}"
        if prices["oldest_as_of"] == prices["newest_as_of"]:
            span = prices["oldest_as_of"]
        print(f"prices from {span} (median {prices['median_as_of']}), {prices['age']}")
    print(
        f"{info['offers']} offers ({info['unpriced']} more kept but not priced), "
        f"{info['instance_types']} instance types"
    )
    for cloud, regions in info["regions"].items():
        print(f"  {cloud}: {len(regions)} regions: {', '.join(regions)}")
    if info["stale_regions"]:
        print(f"stale (kept from an earlier catalog): {', '.join(info['stale_regions'])}")
    if prices and prices["warning"]:
        print(f"WARNING: {prices['warning']}")
    if info["warning"]:
        print(info["warning"], file=sys.stderr)
    return EXIT_OK


def cmd_catalog(args: argparse.Namespace) -> int:
    return cmd_refresh(args) if args.verb == "refresh" else cmd_show(args)
