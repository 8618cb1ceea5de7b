"""Every scenario in tests/machine/scenarios/, run against the real boot script (see
tests/machine/scenario.py for the format and tests/machine/harness.py for the sandbox)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.machine.scenario import check, load, run_scenario, scenario_files

NEEDED = ("bash", "curl", "flock", "setsid", "timeout", "base64", "gunzip")
missing = [tool for tool in NEEDED if shutil.which(tool) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"the scenarios need {', '.join(missing)} on PATH")


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A sandbox root as short as a machine's own paths allow: the boot script holds every file's
    path, and pytest's tmp_path (about 60 characters) would take a kilobyte of EC2's 16 KB that
    production paths (/etc/gpufit/...) do not (test_rendering checks the real size)."""
    folder = Path(tempfile.mkdtemp(prefix="gf", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("path", scenario_files(), ids=lambda p: p.stem)
def test_scenario(path: Path, short_tmp: Path) -> None:
    doc = load(path)
    outcome = run_scenario(doc, short_tmp)
    check(outcome, doc["expect"])


def test_the_batch_engine_launch_passes_the_releases_parser(short_tmp: Path) -> None:
    """The engine a token batch starts is launched as `serve` launches it: every recorded
    `docker run` argument list after the image passes the pinned release's own parser
    (selector/data/engine_flags/), with this machine type's TP and concurrency."""
    from selector.engine_flags import check_argv, flag_table

    path = next(p for p in scenario_files() if p.stem == "aws-group-batch-engine")
    outcome = run_scenario(load(path), short_tmp)
    launch = outcome.m.d.batch_engine
    assert launch is not None and launch.loopback
    runs = [c.argv for c in outcome.calls if c.cmd == "docker" and c.argv[:1] == ["run"]]
    assert len(runs) == 4  # 8 GPUs of a p5 at TP 2
    for argv in runs:
        engine_args = argv[argv.index(launch.image) + 1 :]
        assert check_argv(flag_table(launch.engine, launch.engine_version), engine_args) == []
        assert engine_args[engine_args.index("--max-num-seqs") + 1] == "64"
        assert engine_args[engine_args.index("--host") + 1] == "127.0.0.1"
