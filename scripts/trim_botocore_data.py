#!/usr/bin/env python3
"""Cut the installed botocore's EC2 model to what the catalog refresh uses.

Writes ``cloudapi/botocore_data/ec2/<latest api version>/service-2.json`` (see
``cloudapi/lean_botocore.py`` for why). Rerun after upgrading botocore.

Usage
  uv run python scripts/trim_botocore_data.py           # regenerate
  uv run python scripts/trim_botocore_data.py --check   # fail if the shipped cut is out of date
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudapi.lean_botocore import (  # noqa: E402
    DATA_DIR,
    READ_MEMBERS,
    REFRESH_OPERATIONS,
    SERVICE,
    trim_service_model,
)


def render(doc: object) -> str:
    return json.dumps(doc, indent=1) + "\n"


def build() -> dict[Path, str]:
    """Shipped file → its text, from the installed botocore's own data."""
    from botocore.loaders import Loader

    # botocore's own data only: not AWS_DATA_PATH, ~/.aws/models or the shipped cut
    loader = Loader(extra_search_paths=[Loader.BUILTIN_DATA_PATH], include_default_search_paths=False)
    version = loader.determine_latest_version(SERVICE, "service-2")
    model = loader.load_service_model(SERVICE, "service-2", version)
    return {
        DATA_DIR / SERVICE / version / "service-2.json": render(
            trim_service_model(model, REFRESH_OPERATIONS, READ_MEMBERS)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the shipped cut is out of date")
    args = parser.parse_args(argv)
    files = build()
    shipped = {*DATA_DIR.glob(f"{SERVICE}/*/service-2.json"), *DATA_DIR.glob("*.json")}
    if args.check:
        differ = {p for p, text in files.items() if p in shipped and p.read_text(encoding="utf-8") != text}
        stale = sorted(str(p.relative_to(ROOT)) for p in (shipped ^ set(files)) | differ)
        if stale:
            print(
                f"trim_botocore_data: {', '.join(stale)} do not match the installed botocore; "
                "rerun scripts/trim_botocore_data.py",
                file=sys.stderr,
            )
            return 1
        print(f"{len(files)} files in {DATA_DIR.relative_to(ROOT)} are up to date")
        return 0
    for old in shipped - set(files):
        if old.name == "service-2.json":
            shutil.rmtree(old.parent)
        else:
            old.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
