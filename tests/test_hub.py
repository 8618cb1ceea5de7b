"""Sizing a model named only by its Hugging Face id: config.json and the safetensors counts
from the Hub (a local fake at HF_ENDPOINT), cached so the next plan is offline; gated repos,
unknown repos and revisions, no network: one line each, exit 2, nothing fetched twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.main import main
from hub.client import cache_file
from selector.spec import hub_arch
from tests.fakes.hub import FakeHub, FakeRepo, serve_hub

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "hf"
LLAMA_PARAMS = {"BF16": 8_030_261_248}  # meta-llama/Llama-3.1-8B safetensors, as the Hub reports it


def config(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def repos() -> dict[str, FakeRepo]:
    return {
        "acme/llama-8b": FakeRepo({"config.json": config("llama-3.1-8b.json")}, dict(LLAMA_PARAMS)),
        "acme/gated-8b": FakeRepo(
            {"config.json": config("llama-3.1-8b.json")}, dict(LLAMA_PARAMS), token="hf_secret"
        ),
        "acme/qwen-7b": FakeRepo(
            {"config.json": config("qwen2.5-7b.json")},
            None,
            commit="fedcba9876543210fedcba9876543210fedcba98",
            revisions=("main", "v1.0"),
        ),
        "acme/pipeline": FakeRepo({"model_index.json": b"{}"}, None),
        "acme/rwkv": FakeRepo({"config.json": json.dumps({"model_type": "rwkv"}).encode()}, None),
    }


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeHub, str]]:
    fake = FakeHub(repos())
    monkeypatch.setenv("GPUFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub_arch.cache_clear()
    with serve_hub(fake) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield fake, server.url
    hub_arch.cache_clear()


def write_spec(tmp_path: Path, model: dict[str, object], name: str = "from-hub") -> Path:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": name,
                "task": "serve",
                "model": model,
                "serving": {"context_tokens": 8192, "concurrency": 8},
            }
        )
    )
    return spec


def plan_json(spec: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["plan", str(spec), "--json"]) == 0, capsys.readouterr().err
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return report


def test_a_model_named_by_its_hub_id_plans_on_the_exact_parameter_count(
    hub: tuple[FakeHub, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, _ = hub
    report = plan_json(write_spec(tmp_path, {"hf": "acme/llama-8b"}), capsys)
    assert report["status"] == "ok"
    arch = hub_arch("acme/llama-8b", None)
    assert arch.params == 8_030_261_248  # the safetensors count, not the estimate from shapes
    assert arch.checkpoint_bytes == 2 * 8_030_261_248  # BF16
    assert "acme/llama-8b@0123456789ab" in arch.source and "BF16 8,030,261,248" in arch.source
    assert arch.hf == "acme/llama-8b" and arch.kv_heads == 8
    assert "GET /api/models/acme/llama-8b" in fake.requests
    assert "GET /acme/llama-8b/resolve/0123456789abcdef0123456789abcdef01234567/config.json" in fake.requests


def test_the_second_plan_reads_the_cache_without_the_hub(
    hub: tuple[FakeHub, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, _ = hub
    spec = write_spec(tmp_path, {"hf": "acme/llama-8b"})
    first = plan_json(spec, capsys)
    asked = len(fake.requests)
    assert cache_file("acme/llama-8b", None).exists()
    # A fresh process with the Hub unreachable: same plan, no huggingface_hub import.
    env = {**os.environ, "HF_ENDPOINT": os.environ["HF_ENDPOINT"]}
    fake.repos.clear()  # anything that reached the hub would now fail
    code = (
        "import json, sys; from cli.main import main; rc = main(['plan', sys.argv[1], '--json']); "
        "print(json.dumps({'rc': rc, 'hub': 'huggingface_hub' in sys.modules}), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    status = json.loads(done.stderr.strip().splitlines()[-1])
    assert status == {"rc": 0, "hub": False}
    assert json.loads(done.stdout)["choice"] == first["choice"]
    assert len(fake.requests) == asked


def test_a_revision_is_asked_for_and_cached_on_its_own(
    hub: tuple[FakeHub, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, _ = hub
    report = plan_json(write_spec(tmp_path, {"hf": "acme/qwen-7b", "revision": "v1.0"}), capsys)
    assert report["status"] == "ok"
    assert "GET /api/models/acme/qwen-7b/revision/v1.0" in fake.requests
    assert cache_file("acme/qwen-7b", "v1.0").exists() and not cache_file("acme/qwen-7b", None).exists()
    arch = hub_arch("acme/qwen-7b", "v1.0")
    assert arch.checkpoint_bytes == 0.0 and arch.params > 7e9  # no safetensors: computed from shapes


def test_a_gated_repo_needs_hf_token(
    hub: tuple[FakeHub, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = write_spec(tmp_path, {"hf": "acme/gated-8b"})
    assert main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model: model.hf: acme/gated-8b is gated" in err[0] and "HF_TOKEN" in err[0]
    assert "Traceback" not in err[0]
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    hub_arch.cache_clear()
    assert plan_json(spec, capsys)["status"] == "ok"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"hf": "acme/missing"}, "no model acme/missing on the Hub, or it is private"),
        ({"hf": "acme/qwen-7b", "revision": "v9"}, "acme/qwen-7b has no revision 'v9'"),
        ({"hf": "acme/pipeline"}, "has no config.json (a diffusers pipeline or a GGUF repo?)"),
        ({"hf": "acme/rwkv"}, "model_type 'rwkv' is not a family gpufit sizes"),
    ],
)
def test_hub_problems_are_one_line_and_exit_2(
    hub: tuple[FakeHub, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    model: dict[str, object],
    message: str,
) -> None:
    assert main(["plan", str(write_spec(tmp_path, model))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    fetched = "rwkv" in str(model["hf"])  # the Hub answered: its config is kept, gpufit can't size it
    assert cache_file(str(model["hf"]), None).exists() == fetched


def test_offline_without_a_cache_says_how_to_pass_a_local_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_hub(FakeHub({})) as server:
        dead = server.url  # nothing listens here once the block ends
    monkeypatch.setenv("HF_ENDPOINT", dead)
    monkeypatch.setenv("GPUFIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    hub_arch.cache_clear()
    assert main(["plan", str(write_spec(tmp_path, {"hf": "acme/llama-8b"}))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "cannot reach the Hugging Face Hub" in err[0] and "model.config" in err[0]
    hub_arch.cache_clear()


def test_the_pulumi_program_sizes_a_hub_model_and_serves_that_repo(hub: tuple[FakeHub, str]) -> None:
    from datetime import UTC, datetime

    from tests.pulumi_harness import run_program
    from tests.test_program import AWS_LAUNCH_TEMPLATE, user_data

    workload = {
        "name": "hub-served",
        "task": "serve",
        "model": {"hf": "acme/llama-8b"},
        "serving": {"context_tokens": 8192, "concurrency": 8},
        "placement": {"clouds": ["aws"], "regions": ["us-east-1"]},
    }
    mocks, outputs = run_program({"gpufit:workload": workload}, datetime(2026, 12, 3, tzinfo=UTC))
    assert outputs["instance_type"]
    script = user_data(mocks.one(AWS_LAUNCH_TEMPLATE))
    from tests.machine.unpack import file_named

    assert "--model acme/llama-8b" in file_named(script, "/serve-start.sh")  # the repo the plan sized
