"""The gpufit command: exit codes, JSON contract, clean errors, no cloud SDK on the plan path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.main import (
    EXIT_BAD_CATALOG,
    EXIT_INFEASIBLE,
    EXIT_INVALID_SPEC,
    EXIT_OK,
    EXIT_OVER_BUDGET,
    EXIT_USAGE,
    main,
)
from tests.conftest import MINI_CATALOG, QLORA_65B, ROOT, SERVE_70B, merged

CAT = ["--catalog", str(MINI_CATALOG)]


def write_spec(tmp_path: Path, data: object, name: str = "spec.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_ok_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["plan", str(ROOT / "examples" / "llama70b-chat.yaml"), *CAT, "--explain"], capsys)
    assert code == EXIT_OK and err == ""
    assert "Choice    aws p4de.24xlarge in us-east-1, on-demand" in out
    assert "kv cache per token" in out and "2 × 80 layers × 8 kv_heads × 128 head_dim × 2 B" in out
    assert "Alternatives" in out and "Rejected" in out


def test_plan_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["plan", str(ROOT / "examples" / "guanaco-65b.yaml"), *CAT, "--json", "--top", "3"], capsys
    )
    assert code == EXIT_OK
    doc = json.loads(out)
    assert {"workload", "requirements", "choice", "cost", "alternatives", "rejections", "catalog"} <= set(doc)
    req = doc["requirements"]
    assert {
        "vram_gib_per_replica",
        "gpus_per_replica",
        "nodes",
        "needs_fp8",
        "needs_nvlink",
        "min_bandwidth_gbps",
        "breakdown",
    } <= set(req)
    choice = doc["choice"]
    assert {
        "cloud",
        "region",
        "zone",
        "instance_type",
        "gpu",
        "gpu_count",
        "gpu_memory_gib",
        "market",
        "hourly_usd",
        "instances",
    } <= set(choice)
    assert {"compute_usd", "storage_usd", "egress_usd", "total_usd", "hours"} <= set(doc["cost"])
    assert {"as_of", "source"} <= set(doc["catalog"])
    assert len(doc["alternatives"]) <= 3
    c = doc["cost"]
    assert c["total_usd"] == pytest.approx(
        c["compute_usd"] + c["storage_usd"] + c["egress_usd"] + c["data_transfer_usd"], abs=0.02
    )


def test_plan_json_serving_has_token_rate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan", str(ROOT / "examples" / "llama70b-chat.yaml"), *CAT, "--json"], capsys)
    assert code == EXIT_OK and json.loads(out)["choice"]["tokens_per_s_per_stream"] >= 20


def test_invalid_spec_exit_2_one_line_per_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(tmp_path, merged(SERVE_70B, precision="bf17", duration="1 fortnight"))
    code, out, err = run(["plan", path, *CAT], capsys)
    assert code == EXIT_INVALID_SPEC and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(path + ": ") for line in lines)
    assert "Traceback" not in err


def test_infeasible_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(
        tmp_path,
        merged(SERVE_70B, model={"preset": "llama-3.1-405b"}, placement={"clouds": ["gcp"]}, budget=None),
    )
    code, out, err = run(["plan", path, *CAT], capsys)
    assert code == EXIT_INFEASIBLE and "nothing feasible" in out and "Closest misses" in out
    assert "nothing feasible" in err


def test_over_budget_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_spec(tmp_path, merged(SERVE_70B, budget={"max_hourly_usd": 5}))
    code, out, _ = run(["plan", path, *CAT], capsys)
    assert code == EXIT_OVER_BUDGET and "over max_hourly_usd" in out


def test_bad_catalog_exit_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cat.json"
    bad.write_text('{"schema_version": 99}')
    code, _, err = run(["plan", str(ROOT / "examples" / "llama70b-chat.yaml"), "--catalog", str(bad)], capsys)
    assert code == EXIT_BAD_CATALOG and "schema_version" in err and "Traceback" not in err


def test_usage_errors_are_distinct(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan"])
    assert exc.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as exc:
        main(["offers", "--sort", "colour"])
    assert exc.value.code == EXIT_USAGE
    for workers in ("0", "-3", "many"):
        with pytest.raises(SystemExit) as exc:
            main(["catalog", "refresh", "--workers", workers])
        assert exc.value.code == EXIT_USAGE
        err = capsys.readouterr().err
        assert f"--workers: expected a whole number of at least 1, got '{workers}'" in err


def test_stack_file_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan", str(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml"), *CAT], capsys)
    assert code == EXIT_OK and out.startswith("llama70b-chat: serve")


def test_offers_json_fields_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["offers", *CAT, "--json", "--gpu", "h100", "--spot", "--sort", "price"], capsys)
    assert code == EXIT_OK
    offers = json.loads(out)
    assert offers and all(o["gpu"] == "H100" and o["market"] == "spot" for o in offers)
    keys = {
        "cloud",
        "region",
        "zone",
        "instance_type",
        "gpu",
        "gpu_count",
        "gpu_memory_gib",
        "bandwidth_gbps",
        "fp8",
        "nvlink",
        "market",
        "hourly_usd",
        "source",
        "as_of",
    }
    assert all(keys <= set(o) for o in offers)
    prices = [o["hourly_usd"] for o in offers]
    assert prices == sorted(prices)
    code, out, _ = run(["offers", *CAT, "--json", "--nvlink", "--fp8", "--min-vram-gib", "70"], capsys)
    assert {o["gpu"] for o in json.loads(out)} == {"H100"}


def test_offers_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["offers", *CAT, "--cloud", "gcp", "--sort", "price-per-gib"], capsys)
    assert code == EXIT_OK and "a3-highgpu-4g" in out and "g6e" not in out and "1s, min 60s" in out


def test_schema_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["schema"], capsys)
    assert code == EXIT_OK and json.loads(out)["title"] == "gpufit workload spec"
    code, out, _ = run(["presets"], capsys)
    assert code == EXIT_OK and "llama-3.1-405b" in out and "huggingface.co" in out


def test_plan_path_imports_no_cloud_sdk_or_pulumi() -> None:
    probe = (
        "import sys\n"
        "from cli.main import main\n"
        f"code = main(['plan', {str(ROOT / 'examples' / 'guanaco-65b.yaml')!r}, '--json'])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'pulumi_aws', 'pulumi_gcp',"
        " 'boto3', 'botocore', 'google', 'rich', 'tenacity'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert "HEAVY []" in proc.stderr, proc.stderr


def test_console_script_runs_as_a_process() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "plan",
            str(ROOT / "examples" / "guanaco-65b.yaml"),
            *CAT,
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == EXIT_OK and json.loads(proc.stdout)["status"] == "ok"


def test_qlora_example_on_fixture_picks_spot(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan", str(ROOT / "examples" / "guanaco-65b.yaml"), *CAT, "--json"], capsys)
    assert code == EXIT_OK and json.loads(out)["choice"]["market"] == "spot"
    assert QLORA_65B["name"] == json.loads(out)["workload"]["name"]
