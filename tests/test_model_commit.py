"""The served model is the exact commit the plan sized (issue 22 item 6, the model's part).

Reproduced before the fix: a model sized from the Hub's ``main`` was served with no
``--revision`` (or with the spec's branch), so the weights the machine pulled at boot were
whatever ``main`` pointed at then, not the config the plan sized; the plan and the lock did not
say which commit was sized. Now the commit the revision resolved to is in the plan (JSON and
text) and the lock, the servers start with ``--revision <commit>`` (the engine downloads the
weights at it), and the Pulumi program sizes and serves the locked commit however the branch
moved since."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from deployment import server_launch
from gitops.lock import check_lock, make_lock, read_lock, reviewed_difference, write_lock
from machine.serving import engine_argv
from selector.catalog import load_catalog
from selector.engine_flags import check_argv, flag_table
from selector.select import plan
from selector.spec import parse_spec
from tests.fakes.hub import FakeHub, FakeRepo, hub_for_gpufit

HF = Path(__file__).parent / "fixtures" / "hf"
SIZED = "0123456789abcdef0123456789abcdef01234567"
MOVED = "89abcdef0123456789abcdef0123456789abcdef"
LLAMA_PARAMS = {"BF16": 8_030_261_248}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    config = (HF / "llama-3.1-8b.json").read_bytes()
    fake = FakeHub(
        {
            "acme/llama-8b": FakeRepo(
                {"config.json": config},
                dict(LLAMA_PARAMS),
                commit=SIZED,
                revisions=("main", "v1.0"),
                snapshots={"old": (MOVED, {"config.json": config})},
            )
        }
    )
    yield from hub_for_gpufit(fake, tmp_path, monkeypatch)


def workload(engine: str = "vllm", revision: str | None = None) -> dict[str, Any]:
    model: dict[str, Any] = {"hf": "acme/llama-8b", **({"revision": revision} if revision else {})}
    return {
        "name": "pinned",
        "task": "serve",
        "model": model,
        "serving": {"context_tokens": 8192, "concurrency": 8, "engine": engine},
        "placement": {"clouds": ["aws"], "regions": ["us-east-1"]},
    }


def move_main(hub: FakeHub) -> None:
    """``main`` now points at another commit (and the cache is skipped, as after a day)."""
    from functools import partial

    from hub.client import fetch_model
    from selector.spec import use_hub

    hub.repos["acme/llama-8b"].commit = MOVED
    hub.repos["acme/llama-8b"].snapshots = {"old": (SIZED, hub.repos["acme/llama-8b"].files)}
    use_hub(partial(fetch_model, refresh=True))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("revision", [None, "v1.0"])
def test_the_server_starts_at_the_commit_the_plan_sized(
    hub: FakeHub, engine: str, revision: str | None
) -> None:
    result = plan(parse_spec(workload(engine, revision)), load_catalog())
    assert result.requirements.arch.hf_commit == SIZED
    launch = server_launch(result)
    assert launch is not None and launch.revision == SIZED  # not "v1.0", not the default branch
    argv = engine_argv(launch, 0)
    at = argv.index("--revision")
    assert argv[at + 1] == SIZED
    # the flag as the pinned release's own parser declares it (issue 23's dumps)
    assert check_argv(flag_table(launch.engine, launch.engine_version), argv) == []


def test_the_plan_says_which_commit_it_sized(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "pinned.yaml"
    spec.write_text(json.dumps(workload()))
    assert main(["plan", str(spec), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workload"]["hf"] == {"repo": "acme/llama-8b", "revision": None, "commit": SIZED}
    assert doc["serve"]["revision"] == SIZED
    assert main(["plan", str(spec)]) == 0
    text = capsys.readouterr().out
    assert f"Model     acme/llama-8b at commit {SIZED} (the default branch when planned)" in text
    assert f"acme/llama-8b at commit {SIZED} (model.hf)" in text


def test_a_preset_plan_names_no_commit() -> None:
    result = plan(parse_spec({**workload(), "model": {"preset": "llama-3.1-8b"}}), load_catalog())
    assert result.requirements.arch.hf_commit == ""
    assert make_lock(result, Path("x.yaml"), datetime(2026, 12, 4, tzinfo=UTC)).get("model") is None


def test_the_lock_pins_the_commit_and_a_moved_branch_does_not_move_it(hub: FakeHub, tmp_path: Path) -> None:
    spec_file = tmp_path / "pinned.yaml"
    spec_file.write_text(json.dumps(workload()))
    spec = parse_spec(workload())
    lock = make_lock(plan(spec, load_catalog()), spec_file, datetime(2026, 12, 4, tzinfo=UTC))
    assert lock["model"] == {"hf": "acme/llama-8b", "revision": None, "commit": SIZED}
    write_lock(lock, spec_file.with_name("pinned.lock.json"))
    move_main(hub)
    moved = parse_spec(workload())
    assert plan(moved, load_catalog()).requirements.arch.hf_commit == MOVED  # main moved
    # the lock check sizes the reviewed commit, so the lock stays current
    assert check_lock(moved, spec_file).state == "current"
    # a plan at another commit than the reviewed one is a difference to review
    replanned = plan(moved, load_catalog())
    assert reviewed_difference(lock, replanned) == (
        f"the plan sizes acme/llama-8b at commit {MOVED}, the review saw {SIZED}"
    )
    old = {k: v for k, v in lock.items() if k != "model"}
    assert "the lock predates model commits" in str(reviewed_difference(old, replanned))


@pytest.mark.parametrize(
    "model",
    [
        {"hf": "acme/llama-8b", "revision": None, "commit": "main; rm -rf /"},
        {"hf": "acme/llama-8b", "revision": None, "commit": SIZED + "\n"},
        {"hf": "acme/llama-8b $(id)", "revision": None, "commit": SIZED},
        {"hf": "acme/llama-8b", "revision": 7, "commit": SIZED},
        "acme/llama-8b",
    ],
)
def test_a_lock_whose_model_is_not_a_repo_and_a_commit_is_unreadable(
    hub: FakeHub, tmp_path: Path, model: object
) -> None:
    spec = parse_spec(workload())
    lock = make_lock(plan(spec, load_catalog()), tmp_path / "x.yaml", datetime(2026, 12, 4, tzinfo=UTC))
    lock["model"] = model
    path = write_lock(lock, tmp_path / "x.lock.json")
    with pytest.raises(ValueError, match="model: expected the Hub repo"):
        read_lock(path)


def test_the_pulumi_program_serves_the_locked_commit_after_main_moved(hub: FakeHub, tmp_path: Path) -> None:
    from tests.machine.unpack import file_named
    from tests.pulumi_harness import run_program
    from tests.test_program import AWS_LAUNCH_TEMPLATE, user_data

    now = datetime(2026, 12, 3, tzinfo=UTC)
    spec = parse_spec(workload())
    lock = make_lock(plan(spec, load_catalog()), tmp_path / "Pulumi.test.yaml", now)
    write_lock(lock, tmp_path / "test.lock.json")
    move_main(hub)
    config = {"gpufit:workload": workload(), "gpufit:lockDir": str(tmp_path)}
    mocks, _ = run_program(config, now)
    start = file_named(user_data(mocks.one(AWS_LAUNCH_TEMPLATE)), "/serve-start.sh")
    assert f"--revision {SIZED}" in start and MOVED not in start
    # without the lock, and main's cache entry gone (a CI runner's empty cache): main as it is now
    from hub.client import cache_file

    (tmp_path / "test.lock.json").unlink()
    cache_file("acme/llama-8b", None).unlink()
    mocks, _ = run_program(config, now)
    assert f"--revision {MOVED}" in file_named(user_data(mocks.one(AWS_LAUNCH_TEMPLATE)), "/serve-start.sh")


def test_lock_check_sizes_the_locked_commit_when_main_moved_to_a_broken_config(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of i22h, should-fix 1: the spec's own validation fetched ``main``'s head before the
    lock's commit was pinned, so a branch moved to ``num_attention_heads: 0`` failed the check
    (exit 8) although the reviewed commit is sound and still served."""
    spec_file = tmp_path / "pinned.yaml"
    spec_file.write_text(json.dumps(workload()))
    lock = make_lock(
        plan(parse_spec(workload()), load_catalog()), spec_file, datetime(2026, 12, 4, tzinfo=UTC)
    )
    write_lock(lock, spec_file.with_name("pinned.lock.json"))
    repo = hub.repos["acme/llama-8b"]
    broken = json.loads(repo.files["config.json"])
    broken.update(num_attention_heads=0, vocab_size=-1)
    repo.snapshots = {"old": (SIZED, repo.files)}
    repo.commit, repo.files = MOVED, {"config.json": json.dumps(broken).encode()}
    assert main(["lock", "--check", "--refresh-model", str(spec_file)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("ok ")
    # without the lock, the branch's head is sized: every problem of it on its own line
    spec_file.with_name("pinned.lock.json").unlink()
    assert main(["lock", "--check", "--refresh-model", str(spec_file)]) == 8
    lines = capsys.readouterr().err.splitlines()
    assert any("num_attention_heads: expected" in line for line in lines)
    assert any("vocab_size: expected" in line for line in lines)


def test_a_lock_of_another_repo_is_stale(hub: FakeHub, tmp_path: Path) -> None:
    """Review of i22h, nit 4: a lock whose model is another repo than the spec's (the spec's
    repo changed after the review) does not pass as current."""
    spec_file = tmp_path / "pinned.yaml"
    spec_file.write_text(json.dumps(workload()))
    lock = make_lock(
        plan(parse_spec(workload()), load_catalog()), spec_file, datetime(2026, 12, 4, tzinfo=UTC)
    )
    lock["model"] = {"hf": "acme/other-8b", "revision": None, "commit": MOVED}
    write_lock(lock, spec_file.with_name("pinned.lock.json"))
    status = check_lock(parse_spec(workload()), spec_file)
    assert status.state == "stale" and f"the review saw {MOVED}" in status.detail
    hub.repos["acme/other-8b"] = hub.repos["acme/llama-8b"]
    moved = {**workload(), "model": {"hf": "acme/other-8b"}}
    status = check_lock(parse_spec(moved), spec_file)
    assert status.state == "stale" and "the spec changed" in status.detail
