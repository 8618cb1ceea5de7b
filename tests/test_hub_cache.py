"""The Hub cache answers only for what was asked, and the Hub's own values are checked like user
input (issue 22 item 9).

Reproduced before the fix: ``refs/pr/1`` and ``refs_pr_1`` were one cache file (the second plan
sized the first's model); an entry copied under another repo's name was trusted; a branch's entry
never expired; a hostile endpoint's ``sha`` (``main; rm -rf /``), a string count of safetensors
parameters or a count of 1, and a config.json of gigabytes were taken as they came."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cli.main import main
from hub.cache import BRANCH_TTL, CACHE_SCHEMA, entry_path, read_entry
from hub.client import HubError, cache_file, endpoint, fetch_model
from selector.spec import hub_arch, use_hub
from tests.fakes.hub import FakeHub, FakeRepo, hub_for_gpufit

HF = Path(__file__).parent / "fixtures" / "hf"
LLAMA = (HF / "llama-3.1-8b.json").read_bytes()
QWEN = (HF / "qwen2.5-7b.json").read_bytes()
MAIN = "0123456789abcdef0123456789abcdef01234567"
PR = "1111111111111111111111111111111111111111"
OTHER = "2222222222222222222222222222222222222222"
T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


class Clock:
    """A frozen clock the test moves by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    fake = FakeHub(
        {
            "acme/llama-8b": FakeRepo(
                {"config.json": LLAMA},
                {"BF16": 8_030_261_248},
                commit=MAIN,
                snapshots={
                    "refs/pr/1": (PR, {"config.json": QWEN}),
                    "refs_pr_1": (OTHER, {"config.json": LLAMA}),
                },
            ),
            "acme/qwen-7b": FakeRepo({"config.json": QWEN}, None, commit=OTHER),
        }
    )
    yield from hub_for_gpufit(fake, tmp_path, monkeypatch)


def serve_spec(tmp_path: Path, name: str) -> Path:
    """A serve spec of ``acme/llama-8b`` from the Hub, written as ``s.yaml``."""
    spec = tmp_path / "s.yaml"
    serving = {"context_tokens": 4096, "concurrency": 4}
    spec.write_text(
        json.dumps({"name": name, "task": "serve", "model": {"hf": "acme/llama-8b"}, "serving": serving})
    )
    return spec


def asked(fake: FakeHub) -> int:
    return sum(1 for r in fake.requests if r.startswith("GET /api/models/"))


def test_refs_pr_1_and_refs_pr_1_with_underscores_are_two_entries(hub: FakeHub) -> None:
    pr = fetch_model("acme/llama-8b", "refs/pr/1")
    underscores = fetch_model("acme/llama-8b", "refs_pr_1")
    assert (pr.commit, underscores.commit) == (PR, OTHER)
    assert cache_file("acme/llama-8b", "refs/pr/1") != cache_file("acme/llama-8b", "refs_pr_1")
    # read back from the cache, each is still its own
    before = asked(hub)
    assert fetch_model("acme/llama-8b", "refs/pr/1").config["model_type"] == "qwen2"
    assert fetch_model("acme/llama-8b", "refs_pr_1").config["model_type"] == "llama"
    assert asked(hub) == before


def test_the_key_covers_endpoint_repo_and_revision() -> None:
    paths = {
        entry_path("https://huggingface.co", "a/b", None),
        entry_path("https://huggingface.co", "a/b", "main"),
        entry_path("http://127.0.0.1:9", "a/b", None),
        entry_path("https://huggingface.co", "a/c", None),
        entry_path("https://huggingface.co", "a/b", "refs/pr/1"),
        entry_path("https://huggingface.co", "a/b", "refs_pr_1"),
    }
    assert len(paths) == 6


def test_an_entry_planted_under_another_repos_name_is_not_believed(hub: FakeHub) -> None:
    fetch_model("acme/llama-8b", None)
    planted = cache_file("acme/qwen-7b", None)
    planted.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(cache_file("acme/llama-8b", None), planted)
    before = asked(hub)
    model = fetch_model("acme/qwen-7b", None)
    assert model.config["model_type"] == "qwen2" and model.commit == OTHER
    assert asked(hub) == before + 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("commit", "main; rm -rf /"),
        ("commit", MAIN.upper()),
        ("endpoint", "https://huggingface.co"),
        ("revision", "v1.0"),
        ("schema_version", 1),
        ("parameters", {"BF16": "many"}),
        ("fetched_at", "yesterday"),
        ("fetched_at", "2026-12-04T09:00:00"),  # no zone: whose clock?
    ],
)
def test_a_tampered_entry_is_fetched_again(hub: FakeHub, field: str, value: object) -> None:
    clock = Clock(T0)
    fetch_model("acme/llama-8b", None, clock=clock)
    path = cache_file("acme/llama-8b", None)
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == CACHE_SCHEMA and doc["commit"] == MAIN and doc["repo"] == "acme/llama-8b"
    doc[field] = value
    path.write_text(json.dumps(doc))
    assert read_entry(path, endpoint(), "acme/llama-8b", None, T0) is None
    before = asked(hub)
    assert fetch_model("acme/llama-8b", None, clock=clock).commit == MAIN
    assert asked(hub) == before + 1


def test_an_entry_for_a_commit_must_hold_that_commit(hub: FakeHub) -> None:
    fetch_model("acme/llama-8b", MAIN)
    path = cache_file("acme/llama-8b", MAIN)
    doc = json.loads(path.read_text())
    doc["commit"] = PR  # a well-formed commit, but not the one the entry is for
    path.write_text(json.dumps(doc))
    assert read_entry(path, endpoint(), "acme/llama-8b", MAIN, T0) is None


def test_a_branch_entry_expires_after_the_ttl_and_a_commit_entry_never(hub: FakeHub) -> None:
    clock = Clock(T0)
    fetch_model("acme/llama-8b", None, clock=clock)
    fetch_model("acme/llama-8b", MAIN, clock=clock)
    before = asked(hub)
    clock.at = T0 + BRANCH_TTL - timedelta(minutes=1)
    fetch_model("acme/llama-8b", None, clock=clock)
    assert asked(hub) == before  # still fresh
    clock.at = T0 + BRANCH_TTL + timedelta(minutes=1)
    fetch_model("acme/llama-8b", None, clock=clock)
    assert asked(hub) == before + 1  # main is asked again
    clock.at = T0 + timedelta(days=3650)
    fetch_model("acme/llama-8b", MAIN, clock=clock)
    assert asked(hub) == before + 1  # a commit's files never change
    clock.at = T0 - timedelta(hours=1)  # an entry from the future (a clock ahead of ours)
    fetch_model("acme/llama-8b", None, clock=clock)
    assert asked(hub) == before + 2


def test_refresh_model_asks_the_hub_again_and_rewrites_the_entry(
    hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = serve_spec(tmp_path, "refresh")
    assert main(["plan", str(spec), "--json"]) == 0
    capsys.readouterr()
    before = asked(hub)
    hub_arch.cache_clear()
    assert main(["plan", str(spec), "--json"]) == 0
    assert asked(hub) == before  # from the cache
    hub.repos["acme/llama-8b"].commit = PR  # main moved
    hub_arch.cache_clear()
    assert main(["plan", str(spec), "--json", "--refresh-model"]) == 0
    assert asked(hub) == before + 1
    assert json.loads(cache_file("acme/llama-8b", None).read_text())["commit"] == PR
    use_hub(fetch_model)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"info": {"sha": "main; rm -rf /"}}, 'the Hub answered commit "main; rm -rf /"'),
        ({"info": {"sha": None}}, "the Hub answered commit null"),
        ({"info": {"safetensors": {"parameters": {"BF16": "many"}, "total": 1}}}, "parameters.BF16"),
        ({"info": {"safetensors": {"parameters": {"bf16; x": 1}, "total": 1}}}, "expected a dtype name"),
        ({"info": {"safetensors": {"parameters": {"BF16": 10**15}, "total": 1}}}, "from 0 to 1e+14"),
        ({"info": {"safetensors": {"parameters": {"BF16": 1}, "total": 1}}}, "counts 1 parameters"),
        ({"info": {"safetensors": {"bogus": 1}}}, "what its client cannot read"),
        ({"announced_size": 5 * 2**30}, "config.json: expected at most 4,194,304 bytes"),
        ({"files": {"config.json": b'{"hidden_size": 1, "hidden_size": 4096}'}}, "duplicate key"),
        ({"files": {"config.json": b"[" * 100_000 + b"]" * 100_000}}, "config.json is not JSON"),
        (
            {"files": {"config.json": b" " * (4 * 2**20 + 1) + b"{}"}, "announced_size": 100},
            "the Hub's answer for acme/llama-8b failed a check",
        ),
    ],
)
def test_what_the_hub_says_is_checked_like_user_input(
    hub: FakeHub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    message: str,
) -> None:
    repo = hub.repos["acme/llama-8b"]
    for name, value in change.items():
        setattr(repo, name, value)
    spec = serve_spec(tmp_path, "hostile-hub")
    assert main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], err
    if change.get("announced_size") == 5 * 2**30:  # refused on the HEAD: the body never downloaded
        assert not any(r.startswith("GET /acme/llama-8b/resolve/") for r in hub.requests)


def test_a_commit_the_hub_did_not_ask_for_is_refused(hub: FakeHub) -> None:
    hub.repos["acme/llama-8b"].info = {"sha": PR}
    with pytest.raises(HubError, match="expected the full 40-hex commit asked for"):
        fetch_model("acme/llama-8b", MAIN)
