#!/usr/bin/env python3
"""Build the embedded price/instance snapshot ``selector/data/catalog.json``.

The tables it reads and the rules it enforces: ``catalog/snapshot/__init__.py``.

Usage
  uv run python scripts/build_snapshot.py           # regenerate catalog.json
  uv run python scripts/build_snapshot.py --check   # fail if catalog.json is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from catalog.snapshot import OUT, BuildError, build, render, summary  # noqa: E402


def check_with_loader(doc: dict[str, Any]) -> str:
    """Load the document with the selector's own loader when it is importable."""
    try:
        from selector.catalog import catalog_from_doc  # type: ignore[import-not-found]
    except ImportError as err:
        return f"selector.catalog not importable ({err}); loader check skipped"
    catalog = catalog_from_doc(json.loads(render(doc)), str(OUT))
    n_types, n_offers = len(catalog.instance_types), len(catalog.offers)
    return f"selector.catalog loads it: {n_types} instance types, {n_offers} offers"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if catalog.json differs from a fresh build"
    )
    parser.add_argument("--no-loader", action="store_true", help="skip the selector.catalog load check")
    args = parser.parse_args(argv)
    try:
        doc = build()
        loader = "" if args.no_loader else check_with_loader(doc)
    except BuildError as err:
        print(f"build_snapshot: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # selector.catalog.CatalogError is a ValueError
        print(f"build_snapshot: selector.catalog rejects the snapshot: {err}", file=sys.stderr)
        return 1
    text = render(doc)
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(
                f"build_snapshot: {OUT.relative_to(ROOT)} is out of date; rerun scripts/build_snapshot.py",
                file=sys.stderr,
            )
            return 1
        print(f"{OUT.relative_to(ROOT)} is up to date")
    else:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")
    print(summary(doc))
    if loader:
        print(loader)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
