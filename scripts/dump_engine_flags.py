"""Prove gpufit's engine launches with the engines' own argument parsers.

For each pinned engine release in ``selector/data/engines.yaml``: install the release's wheel in
a throwaway virtualenv (CPU only: a CPU torch, the engine without its dependencies, then the
pure-Python packages its parser imports), dump the flags its server parser accepts, with their
value choices, to ``selector/data/engine_flags/<engine>-<version>.json``, and run every launch
gpufit renders for its presets and example stacks (planned by ``deployment.launches``, rendered
by ``machine.launches``) through that parser's ``parse_args`` (SGLang's with its ``--config``
file merged, as ``prepare_server_args`` does).
Exit 1 when a launch is refused. The test suite then checks rendered launches against the
committed dumps, so CI needs no engine install.

    uv run python scripts/dump_engine_flags.py                      # every pinned release
    uv run python scripts/dump_engine_flags.py --engine sglang --venvs /tmp/engine-parsers
    uv run python scripts/dump_engine_flags.py --check-only         # keep the committed dumps

Run it whenever a pin moves (about 3 minutes and 5.5 GB the first time; venvs are reused).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deployment.launches import server_launches  # noqa: E402
from machine.launches import LaunchCase, launch_cases  # noqa: E402
from selector.catalog import load_catalog  # noqa: E402
from selector.engine_flags import flags_path  # noqa: E402
from selector.engines import pinned_versions  # noqa: E402

PROBE = ROOT / "scripts" / "engine_parser_probe.py"
PARSER_DEPS = {
    # what each engine's parser modules import (found by import → ModuleNotFoundError → install)
    "vllm": [
        "numpy", "packaging", "regex", "pyyaml", "pydantic", "psutil", "pyzmq", "tqdm",
        "transformers", "aiohttp", "requests", "fastapi", "pillow", "pybase64", "cachetools",
        "prometheus_client", "openai", "openai-harmony", "cbor2", "msgspec", "cloudpickle",
        "uvloop", "py-cpuinfo", "partial-json-parser", "llguidance", "xgrammar",
    ],
    "sglang": [
        "numpy", "orjson", "psutil", "pybase64", "requests", "triton", "packaging", "pillow",
        "starlette", "msgspec", "pydantic", "pyzmq", "tqdm", "IPython", "aiohttp", "pyyaml",
    ],
}  # fmt: skip


def _run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def ensure_venv(engine: str, version: str, root: Path, torch: str, torch_index: str) -> Path:
    """The release's throwaway venv under ``root`` (created once, then reused)."""
    venv = root / f"{engine}-{version}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    _run([*pip, torch, *(["--index-url", torch_index] if torch_index else [])])
    _run([*pip, "--no-deps", f"{engine}=={version}"])
    _run([*pip, *PARSER_DEPS[engine]])
    return python


def probe(python: Path, engine: str, cases: list[LaunchCase], dump: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        check, results = Path(tmp) / "cases.json", Path(tmp) / "results.json"
        check.write_text(json.dumps([c.as_dict() for c in cases]), encoding="utf-8")
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
        cmd = [str(python), str(PROBE), engine, "--dump", str(dump), "--check", str(check)]
        _run([*cmd, "--results", str(results)], env=env)
        found: dict[str, object] = json.loads(results.read_text(encoding="utf-8"))
        return found


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["vllm", "sglang"], action="append", help="default: both")
    ap.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()) / "gpufit-engine-parsers")
    ap.add_argument("--torch", default="torch", help="the torch requirement for the venvs (CPU build)")
    ap.add_argument("--torch-index", default="https://download.pytorch.org/whl/cpu", help="'' for pip's own")
    ap.add_argument("--check-only", action="store_true", help="check launches, keep the committed dumps")
    opts = ap.parse_args(argv)
    launches, skipped = server_launches(load_catalog(), (ROOT / "stacks", ROOT / "examples"))
    cases = launch_cases(launches)
    refused = 0
    for engine in opts.engine or ["vllm", "sglang"]:
        for version in pinned_versions(engine):
            mine = [c for c in cases if c.engine == engine and c.version == version]
            python = ensure_venv(engine, version, opts.venvs, opts.torch, opts.torch_index)
            dump = opts.venvs / f"{engine}-{version}.flags.json"
            result = probe(python, engine, mine, dump)
            if result["version"] != version:
                print(f"{engine}: the venv holds {result['version']}, not {version}")
                return 1
            verdicts = result["cases"]
            assert isinstance(verdicts, list)
            bad = [v for v in verdicts if v["error"]]
            refused += len(bad)
            for v in bad:
                print(f"REFUSED {engine} {version} {v['label']}: {v['error']}")
            accepted = len(verdicts) - len(bad)
            print(f"{engine} {version}: {accepted} of {len(verdicts)} launches accepted by its parser")
            if not opts.check_only:
                flags_path(engine, version).write_text(dump.read_text(encoding="utf-8"), encoding="utf-8")
                print(f"wrote {flags_path(engine, version).relative_to(ROOT)}")
    print(f"{len(skipped)} variants not launchable (no offer, or no repo): not checked")
    for line in skipped:
        print(f"  {line}")
    return 1 if refused else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
