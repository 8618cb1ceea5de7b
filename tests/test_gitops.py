"""Reviewed plans pinned in locks, plan markdown, diff, and the reaper (through its seam)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from cli.gitops_cmd import EXIT_LOCK_STALE, EXIT_REAP_FAILED, cmd_reap
from cli.main import build_parser, main
from gitops.lock import lock_path, read_lock, spec_hash
from gitops.reap import decide, reap
from selector.catalog import load_catalog
from selector.select import plan
from selector.spec import load_spec
from tests.pulumi_harness import ROOT, RecordingMocks, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    folder = tmp_path / "stacks"
    folder.mkdir()
    for name in ("guanaco-65b", "llama70b-chat"):
        shutil.copy(ROOT / "stacks" / f"Pulumi.{name}.yaml", folder)
    return folder


def test_committed_locks_are_current() -> None:
    assert main(["lock", "--check", "--stacks", str(ROOT / "stacks")]) == 0


def test_lock_pins_the_choice_and_check_finds_stale_and_missing(
    stacks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lock", "--check", "--stacks", str(stacks)]) == EXIT_LOCK_STALE  # none yet
    assert main(["lock", "guanaco-65b", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    lock = read_lock(stacks / "guanaco-65b.lock.json")
    expected = plan(load_spec(stacks / "Pulumi.guanaco-65b.yaml"), load_catalog())
    assert expected.choice is not None
    assert lock["offer"]["instance_type"] == expected.choice.offer.instance.name
    assert lock["offer"]["hourly_usd"] == expected.choice.offer.hourly_usd
    assert lock["spec_sha256"] == spec_hash(expected.spec)
    assert main(["lock", "llama70b-chat", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    capsys.readouterr()
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 0
    # a change of meaning makes the lock stale; a comment does not
    path = stacks / "Pulumi.guanaco-65b.yaml"
    path.write_text("# reviewed\n" + path.read_text())
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 0
    doc = yaml.safe_load(path.read_text())
    doc["config"]["gpufit:workload"]["teardown"] = {"ttl": "24h"}
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert main(["lock", "--check", "--stacks", str(stacks)]) == EXIT_LOCK_STALE
    out = capsys.readouterr().out
    assert "stale" in out and "guanaco-65b.lock.json" in out


def _program_with_lock(
    stacks: Path, stack: str, change: dict[str, Any] | None = None, mocks: RecordingMocks | None = None
) -> tuple[RecordingMocks, dict[str, Any]]:
    config = stack_config(stacks / f"Pulumi.{stack}.yaml")
    if change:
        config["gpufit:workload"] = {**config["gpufit:workload"], **change}
    config["gpufit:lockDir"] = str(stacks)
    return run_program(config, NOW, stack=stack, mocks=mocks)


def test_program_provisions_the_locked_offer_even_if_prices_moved(stacks: Path, tmp_path: Path) -> None:
    assert main(["lock", "guanaco-65b", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    lock = read_lock(stacks / "guanaco-65b.lock.json")
    from selector.catalog import SNAPSHOT_FILE

    moved = json.loads(SNAPSHOT_FILE.read_text())
    for offer in moved["offers"]:  # today's prices: the locked offer tripled, a rival halved
        if (offer["instance_type"], offer["region"], offer["market"]) == (
            lock["offer"]["instance_type"],
            lock["offer"]["region"],
            lock["offer"]["market"],
        ):
            offer["hourly_usd"] *= 3
        elif offer["instance_type"] == "a3-highgpu-4g":
            offer["hourly_usd"] /= 2
    catalog = tmp_path / "today.json"
    catalog.write_text(json.dumps(moved))
    config = stack_config(stacks / "Pulumi.guanaco-65b.yaml")
    config["gpufit:lockDir"] = str(stacks)
    config["gpufit:catalog"] = str(catalog)
    mocks, outputs = run_program(config, NOW, stack="guanaco-65b")
    (template,) = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert template.inputs["instanceType"] == lock["offer"]["instance_type"]
    (group,) = mocks.of_type("aws:autoscaling/group:Group")
    overrides = group.inputs["mixedInstancesPolicy"]["launchTemplate"]["overrides"]
    locked = [lock["offer"]["instance_type"], *(f["offer"]["instance_type"] for f in lock["fallbacks"])]
    assert [o["instanceType"] for o in overrides] == locked  # the reviewed fallbacks, not today's
    assert outputs["region"] == lock["offer"]["region"]
    assert outputs["hourly_usd"] == pytest.approx(lock["cost"]["hourly_usd"], abs=1e-4)


def test_program_refuses_a_lock_that_no_longer_plans_the_same(stacks: Path) -> None:
    assert main(["lock", "guanaco-65b", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    lock_file = stacks / "guanaco-65b.lock.json"
    lock = json.loads(lock_file.read_text())
    assert (lock["offer"]["instance_type"], lock["offer"]["zone"], lock["instances"]) == (
        "p4d.24xlarge",
        "aps1-az1",
        1,
    )
    lock["instances"] = 2  # as if sizing data had changed since the review
    lock_file.write_text(json.dumps(lock))
    mocks = RecordingMocks()
    with pytest.raises(
        pulumi.RunError,
        match=r"now plans as p4d\.24xlarge in aps1-az1, 1 × spot .* but the review saw "
        r"p4d\.24xlarge in aps1-az1, 2 × spot",
    ):
        _program_with_lock(stacks, "guanaco-65b", mocks=mocks)
    assert mocks.resources == []


def test_program_refuses_a_spec_changed_after_locking(stacks: Path) -> None:
    assert main(["lock", "guanaco-65b", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"guanaco-65b.lock.json was made for a different spec"):
        _program_with_lock(stacks, "guanaco-65b", {"teardown": {"ttl": "24h"}}, mocks=mocks)
    assert mocks.resources == []


def test_plan_markdown_for_a_pull_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "plan",
                str(ROOT / "stacks" / "Pulumi.guanaco-65b.yaml"),
                "--format",
                "markdown",
                "--catalog",
                "snapshot",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("### gpufit plan: `guanaco-65b`")
    assert "| choice | **aws p4d.24xlarge** × 1 in aps1-az1, spot |" in out
    assert "<details><summary>Alternatives</summary>" in out and "| total | **$21.21**" in out
    assert "> **Warning:** the prices used are 18 months old" in out  # GPUFIT_TODAY: 2026-12-04
    assert "| capacity | spot p4d.24xlarge: obtainability medium (" in out


def test_diff_of_two_locks_and_a_lock_against_a_plan(
    stacks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lock", "guanaco-65b", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    capsys.readouterr()
    lock = stacks / "guanaco-65b.lock.json"
    assert main(["diff", str(lock), str(stacks / "Pulumi.guanaco-65b.yaml"), "--catalog", "snapshot"]) == 0
    same = capsys.readouterr().out
    assert "changed" not in same.split("from")[0] and "+$0.00" in same
    moved = json.loads(lock.read_text())
    assert (moved["offer"]["instance_type"], moved["cost"]["hourly_usd"]) == ("p4d.24xlarge", 4.0815)
    moved["offer"]["instance_type"] = "p5e.48xlarge"
    moved["cost"]["hourly_usd"] = 11.3399
    other = stacks / "other.lock.json"
    other.write_text(json.dumps(moved))
    assert main(["diff", str(lock), str(other)]) == 0
    out = capsys.readouterr().out
    assert "p4d.24xlarge" in out and "p5e.48xlarge" in out and "changed" in out and "+$7.26" in out


def test_lock_path_naming() -> None:
    assert lock_path(Path("stacks/Pulumi.dev.yaml")) == Path("stacks/dev.lock.json")
    assert lock_path(Path("examples/x.yaml")) == Path("examples/x.lock.json")


# --- the reaper ---------------------------------------------------------------------------


class FakeBackend:
    def __init__(self, outputs: dict[str, dict[str, Any]], fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self._outputs = outputs
        self.fail = fail
        self.destroyed: list[str] = []

    def list_stacks(self) -> list[str]:
        return list(self._outputs)

    def outputs(self, stack: str) -> dict[str, Any]:
        return self._outputs[stack]

    def destroy(self, stack: str) -> None:
        if stack in self.fail:
            raise RuntimeError("conflict: another update is running")
        self.destroyed.append(stack)


STACK_OUTPUTS = {
    "old-job": {"expires_at": "2026-12-01T10:00:00Z", "hourly_usd": 4.96},
    "just-expired": {"expires_at": "2026-12-02T11:30:00Z", "hourly_usd": 21.958},
    "running": {"expires_at": "2026-12-09T00:00:00Z", "hourly_usd": 7.35},
    "never-deployed": {},
    "garbled": {"expires_at": "soon", "hourly_usd": 1.0},
}


def test_reap_decisions() -> None:
    actions = {s: decide(s, o, NOW, timedelta(hours=1)).action for s, o in STACK_OUTPUTS.items()}
    assert actions == {
        "old-job": "destroy",
        "just-expired": "keep",
        "running": "keep",
        "never-deployed": "skip",
        "garbled": "skip",
    }


def test_reap_is_a_dry_run_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    backend = FakeBackend(STACK_OUTPUTS)
    args = build_parser().parse_args(["reap"])
    assert cmd_reap(args, backend=backend, now=NOW) == 0
    out = capsys.readouterr().out
    assert backend.destroyed == []
    assert "would destroy  old-job" in out and "would destroy  just-expired" in out
    assert "would stop $26.92/h (dry run: add --yes)" in out


def test_reap_yes_destroys_only_expired_and_reports_failures(capsys: pytest.CaptureFixture[str]) -> None:
    backend = FakeBackend(STACK_OUTPUTS, fail={"just-expired"})
    args = build_parser().parse_args(["reap", "--yes"])
    assert cmd_reap(args, backend=backend, now=NOW) == EXIT_REAP_FAILED
    captured = capsys.readouterr()
    assert backend.destroyed == ["old-job"]
    assert "destroyed      old-job" in captured.out and "destroy failed: conflict" in captured.err
    report = reap(FakeBackend(STACK_OUTPUTS), NOW, timedelta(hours=2), yes=True)
    assert report.destroyed == ["old-job"] and report.hourly_saved == pytest.approx(4.96)


def test_reap_needs_the_pulumi_cli_here(capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("pulumi"):
        pytest.skip("a pulumi CLI is on PATH; the real backend test below covers it")
    assert main(["reap"]) == EXIT_REAP_FAILED
    assert "Pulumi CLI is not on PATH" in capsys.readouterr().err


@pytest.mark.skipif(
    shutil.which("pulumi") is None,
    reason="no `pulumi` CLI on PATH (its installer downloads from hosts this machine cannot reach)",
)
def test_reap_against_a_local_file_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pulumi import automation as auto

    from gitops.reap import AutomationBackend

    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test")
    work = tmp_path / "proj"
    work.mkdir()

    def program() -> None:
        pulumi.export("expires_at", "2026-12-01T00:00:00Z")
        pulumi.export("hourly_usd", 1.0)

    stack = auto.create_stack(stack_name="expired", project_name="reaptest", program=program)
    stack.up()
    (work / "Pulumi.yaml").write_text("name: reaptest\nruntime: python\n")
    report = reap(AutomationBackend(work), NOW, yes=True)
    assert report.destroyed == ["expired"]
