"""``gpufit status STACK | --bucket s3://NAME | gs://NAME``: what the stack's machines report in
its bucket (``machine.status``): each machine's state, attempts, exit code and why, the
replacements used of those allowed, and a multi-node job's abort.

Exit codes: 0 read (nothing failed); 11 the status could not be read (no bucket, no
credentials, no Pulumi CLI for STACK: the reason on one line); 12 a job failed or gave up.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cli.exit_codes import JOB_FAILED, OK, STATUS_UNREADABLE


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="what a stack's machines report: state, attempts, exit codes, replacements",
        description="Read the status objects the machines write under status/ in the stack's bucket. "
        "Give the stack (its bucket is read from the stack's outputs through the Pulumi CLI) or "
        "the bucket itself. Exit 12 when a job failed or gave up.",
    )
    p.add_argument("stack", nargs="?", help="a Pulumi stack of this project")
    p.add_argument("--bucket", help="s3://NAME or gs://NAME (the stack's `bucket` output)")
    p.add_argument("--region", help="AWS: the bucket's region (default: found by S3)")
    p.add_argument("--project-dir", default=".", help="the Pulumi project (default: .)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _target(args: argparse.Namespace, backend: Any) -> tuple[str, str]:
    """(cloud, bucket name) from --bucket or from the stack's outputs."""
    if args.bucket:
        scheme, sep, name = args.bucket.partition("://")
        if not sep or scheme not in ("s3", "gs") or not name.strip("/"):
            raise ValueError(f"--bucket {args.bucket!r}: expected s3://NAME or gs://NAME")
        return ("aws" if scheme == "s3" else "gcp"), name.strip("/")
    if not args.stack:
        raise ValueError("give a stack, or --bucket s3://NAME | gs://NAME")
    if backend is None:
        from gitops.reap import AutomationBackend

        try:
            backend = AutomationBackend(Path(args.project_dir))
        except RuntimeError as err:
            raise ValueError(f"{err}; or give --bucket") from None
    outputs = backend.outputs(args.stack)
    if "bucket" not in outputs or "cloud" not in outputs:
        raise ValueError(f"stack {args.stack} has no bucket output (is it deployed?)")
    return str(outputs["cloud"]), str(outputs["bucket"])


def cmd_status(args: argparse.Namespace, backend: Any = None, reader: Any = None) -> int:
    from machine.status import StatusReadError, parse, report

    try:
        cloud, bucket = _target(args, backend)
    except ValueError as err:
        print(f"gpufit: {err}", file=sys.stderr)
        return STATUS_UNREADABLE
    try:
        if reader is not None:
            objects = reader(cloud, bucket)
        elif cloud == "aws":
            from providers.aws.status import read_objects

            objects = read_objects(bucket, region=args.region)
        else:
            from providers.gcp.status import read_objects as read_gcs

            objects = read_gcs(bucket)
    except StatusReadError as err:
        print(f"gpufit: {err}", file=sys.stderr)
        return STATUS_UNREADABLE
    status = parse(objects)
    where = f"{'s3' if cloud == 'aws' else 'gs'}://{bucket}"
    if args.json:
        print(json.dumps({"bucket": where, **status.to_dict()}, indent=2))
    else:
        print("\n".join(report(where, status)))
    return JOB_FAILED if status.verdict == "failed" else OK
