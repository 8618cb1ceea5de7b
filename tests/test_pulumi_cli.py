"""`pulumi preview` of every example stack through the Automation API, against a local
``file://`` backend. It needs the Pulumi CLI (and cloud credentials for the providers'
lookups), which cannot be installed offline: here it skips, saying why; where they exist,
it runs for real."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.pulumi_harness import ROOT
from tests.test_architecture import INSTALLED

PULUMI = shutil.which("pulumi")
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
CREDENTIALS = {
    "aws": bool(os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")),
    "gcp": bool(os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("GOOGLE_CREDENTIALS")),
}

pytestmark = pytest.mark.skipif(
    PULUMI is None,
    reason="no `pulumi` CLI on PATH (its installer downloads from hosts this machine cannot reach); "
    "the program is covered under pulumi.runtime.set_mocks in test_program.py",
)


def _project_copy(tmp_path: Path) -> Path:
    """A copy of the Pulumi project, so previews never write stack files into the repository."""
    work = tmp_path / "project"
    work.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(ROOT / name, work / name)
    for folder in (*sorted(INSTALLED), "stacks", "schema"):  # the project, which uv installs
        shutil.copytree(ROOT / folder, work / folder)
    return work


@pytest.mark.parametrize("stack_file", STACKS, ids=lambda p: p.stem.removeprefix("Pulumi."))
def test_preview_every_stack(tmp_path: Path, stack_file: Path) -> None:
    from pulumi import automation as auto

    from selector.catalog import load_catalog
    from selector.select import plan
    from selector.spec import load_spec

    choice = plan(load_spec(stack_file), load_catalog()).choice
    assert choice is not None
    if not CREDENTIALS[choice.offer.cloud]:
        pytest.skip(f"no {choice.offer.cloud} credentials: preview looks up the image, VPC and account")
    work = _project_copy(tmp_path)
    backend = tmp_path / "state"
    backend.mkdir()
    env = {"PULUMI_BACKEND_URL": f"file://{backend}", "PULUMI_CONFIG_PASSPHRASE": "gpufit-test"}
    name = stack_file.stem.removeprefix("Pulumi.")
    stack = auto.create_or_select_stack(
        stack_name=name, work_dir=str(work), opts=auto.LocalWorkspaceOptions(env_vars=env)
    )
    assert yaml.safe_load((work / "stacks" / stack_file.name).read_text())["config"]["gpufit:workload"]
    result = stack.preview()
    assert result.change_summary.get("create", 0) > 0
