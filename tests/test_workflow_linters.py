"""The workflow linters `make test` runs are real: actionlint and zizmor pass the project's
workflows and fail workflows made to break them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BIN = Path(sys.executable).parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def tool(name: str) -> str:
    found = BIN / name
    if not found.exists():
        pytest.skip(f"{name} is not installed in the environment (uv sync installs it)")
    return str(found)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def test_actionlint_passes_the_workflows() -> None:
    result = run(tool("actionlint"), *map(str, WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_finds_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.event.nope.}}\n      - uses: actions/checkout\n"
    )
    result = run(tool("actionlint"), str(broken))
    assert result.returncode != 0 and "broken.yml" in result.stdout


def test_actionlint_runs_shellcheck_on_run_scripts(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (scripts/ensure-test-tools.sh installs it as root)")
    unsafe = tmp_path / "unsafe.yml"
    unsafe.write_text(
        "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: |\n          for f in $(ls *.txt); do cat $f; done\n"
    )
    result = run(tool("actionlint"), str(unsafe))
    assert result.returncode != 0 and "shellcheck" in result.stdout


def test_makefile_runs_zizmor_as_the_auditor() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"zizmor --persona auditor --offline --quiet \.github/workflows", makefile)


def test_zizmor_auditor_passes_the_workflows_and_flags_an_injection(tmp_path: Path) -> None:
    # The auditor persona: every finding, false positives included; each ignore is justified
    # in a comment beside it (apply.yml's concurrency-limits).
    workflows = str(ROOT / ".github" / "workflows")
    clean = run(tool("zizmor"), "--persona", "auditor", "--offline", "--quiet", workflows)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    injected = tmp_path / ".github" / "workflows" / "inject.yml"
    injected.parent.mkdir(parents=True)
    injected.write_text(
        "on: pull_request\npermissions: {}\njobs:\n  greet:\n    runs-on: ubuntu-latest\n"
        '    steps:\n      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    found = run(tool("zizmor"), "--offline", "--quiet", str(injected))
    assert found.returncode != 0 and "template-injection" in found.stdout


def test_zizmor_auditor_flags_a_secret_outside_an_environment(tmp_path: Path) -> None:
    leaky = tmp_path / ".github" / "workflows" / "leaky.yml"
    leaky.parent.mkdir(parents=True)
    leaky.write_text(
        "on: pull_request\npermissions: {}\njobs:\n  preview:\n    runs-on: ubuntu-latest\n"
        "    permissions:\n      contents: read  # read the code\n    steps:\n"
        "      - run: pulumi preview\n        env:\n"
        "          PULUMI_ACCESS_TOKEN: ${{ secrets.PULUMI_ACCESS_TOKEN }}\n"
    )
    regular = run(tool("zizmor"), "--offline", "--quiet", str(leaky))
    auditor = run(tool("zizmor"), "--persona", "auditor", "--offline", "--quiet", str(leaky))
    assert "secrets-outside-env" not in regular.stdout, "only the auditor persona shows it"
    assert auditor.returncode != 0 and "secrets-outside-env" in auditor.stdout


FIXTURES = sorted((ROOT / "tests" / "fixtures" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_zizmor_auditor_on_the_fixture_workflows(path: Path) -> None:
    """zizmor reads each fixture too (exit 0: nothing found, 10-14: findings by severity; any
    other code means it could not read it): a fixture's `# zizmor: AUDIT` lines name findings it
    must report, `# zizmor: nothing` says it must pass. The project's own checks
    (tests/test_workflows.py) catch what zizmor does not: a workflow-level secret env, an
    install after the credentials, a preview holding any secret."""
    text = path.read_text(encoding="utf-8")
    expected = re.findall(r"^# zizmor: (.+?)\s*$", text, re.M)
    result = run(tool("zizmor"), "--persona", "auditor", "--offline", "--quiet", str(path))
    assert result.returncode in (0, 10, 11, 12, 13, 14), result.stdout + result.stderr
    if expected == ["nothing"]:
        assert result.returncode == 0, result.stdout
    for audit in expected:
        if audit != "nothing":
            assert f"[{audit}]" in result.stdout, f"{path.name}: {audit} not reported:\n{result.stdout}"
