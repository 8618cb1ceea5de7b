#!/usr/bin/env python3
"""Write docs/calibration.md from docs/calibration.yaml: gpufit's estimates beside published
measurements (see selector/calibration.py).

Usage
  uv run --no-sync python scripts/calibration.py           # regenerate docs/calibration.md
  uv run --no-sync python scripts/calibration.py --check   # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from selector.calibration import compute_rows, load_cases  # noqa: E402
from selector.calibration_kinds import render_document  # noqa: E402

CASES = ROOT / "docs" / "calibration.yaml"
TABLE = ROOT / "docs" / "calibration.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the table is out of date")
    parser.add_argument("--cases", type=Path, default=CASES, help="calibration YAML (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=TABLE, help="markdown table (default: %(default)s)")
    args = parser.parse_args(argv)
    text = render_document(compute_rows(load_cases(args.cases)))
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
        if current != text:
            print(
                f"{args.output} is out of date with {args.cases} and the sizing code; "
                "run: uv run --no-sync python scripts/calibration.py",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
