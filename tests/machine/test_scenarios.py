"""Every scenario in tests/machine/scenarios/, run against the real boot script (see
tests/machine/scenario.py for the format and tests/machine/harness.py for the sandbox)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.machine.scenario import check, load, run_scenario, scenario_files

NEEDED = ("bash", "curl", "flock", "setsid", "timeout", "base64", "gunzip")
missing = [tool for tool in NEEDED if shutil.which(tool) is None]
pytestmark = pytest.mark.skipif(bool(missing), reason=f"the scenarios need {', '.join(missing)} on PATH")


@pytest.mark.parametrize("path", scenario_files(), ids=lambda p: p.stem)
def test_scenario(path: Path, tmp_path: Path) -> None:
    doc = load(path)
    outcome = run_scenario(doc, tmp_path)
    check(outcome, doc["expect"])
