"""``gpufit status``: the machines' status objects read back from the bucket (S3 under moto, Cloud
Storage from a local fake of its JSON API), including those a real boot script wrote in a
scenario run."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from cli.exit_codes import JOB_FAILED, OK, STATUS_UNREADABLE
from cli.main import main
from machine.status import parse
from tests.fakes.http import FakeHandler
from tests.machine.scenario import BUCKET, load, run_scenario

SCENARIOS = Path(__file__).parent / "machine" / "scenarios"


def machine(name: str, state: str, updated: int, **extra: Any) -> str:
    return json.dumps(
        {
            "schema": 1,
            "workload": "w",
            "stack": "s",
            "cloud": "aws",
            "machine": name,
            "group": "gpufit-w-s",
            "node_rank": 0,
            "nodes": 1,
            "state": state,
            "reason": extra.pop("reason", state),
            "exit_code": extra.pop("exit_code", None),
            "attempt": 1,
            "attempts_allowed": 3,
            "replacements_allowed": 2,
            "started_at": updated - 60,
            "updated_at": updated,
            "expires_at": updated + 3600,
        }
    )


FAILED = {
    "status/machines/i-1.json": machine("i-1", "replacing", 1796212000, exit_code=3, reason="exit 3"),
    "status/machines/i-2.json": machine("i-2", "gave-up", 1796213000, exit_code=3, reason="all 2 used"),
    "status/replacements/i-1.json": "{}",
    "status/replacements/i-0.json": "{}",
}
RUNNING = {
    "status/machines/i-5.json": machine("i-5", "running", 1796213000),
    "status/done/i-4.json": "{}",
    "status/machines/i-4.json": machine("i-4", "succeeded", 1796212000, exit_code=0),
}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="gpufit-w-s-abc")
        yield client


def put_all(client: Any, objects: dict[str, str]) -> None:
    for key, text in objects.items():
        client.put_object(Bucket="gpufit-w-s-abc", Key=key, Body=text.encode())


def test_a_failed_job_is_reported_with_exit_12(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    put_all(s3, {**FAILED, "fleet/outputs/x.png": "not a status"})
    assert main(["status", "--bucket", "s3://gpufit-w-s-abc"]) == JOB_FAILED
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "s3://gpufit-w-s-abc: 2 machine(s) reported; verdict: failed"
    assert "replacements: 2 of 2 used" in out
    gave_up = next(line for line in out.splitlines() if line.startswith("i-2"))
    assert "gave-up" in gave_up and "all 2 used" in gave_up and " 3 " in gave_up
    assert out.index("i-2") < out.index("i-1 ")  # newest first


def test_json_and_a_running_fleet(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    put_all(s3, RUNNING)
    assert main(["status", "--bucket", "s3://gpufit-w-s-abc", "--json"]) == OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "running" and doc["done"] == 1 and doc["replacements"] == 0
    assert [m["state"] for m in doc["machines"]] == ["running", "succeeded"]


def test_unreadable_buckets_and_targets_are_one_line(s3: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--bucket", "s3://no-such-bucket-here"]) == STATUS_UNREADABLE
    err = capsys.readouterr().err
    assert err.startswith("gpufit: aws: s3://no-such-bucket-here: NoSuchBucket") and err.count("\n") == 1
    assert main(["status", "--bucket", "ftp://x"]) == STATUS_UNREADABLE
    assert "expected s3://NAME or gs://NAME" in capsys.readouterr().err
    assert main(["status"]) == STATUS_UNREADABLE
    assert "give a stack" in capsys.readouterr().err


def test_a_stack_names_its_bucket_through_its_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import build_parser
    from cli.status_cmd import cmd_status

    class Backend:
        def outputs(self, stack: str) -> dict[str, Any]:
            assert stack == "dev"
            return {"bucket": "gpufit-w-s-abc", "cloud": "gcp"}

    asked: list[tuple[str, str]] = []

    def reader(cloud: str, bucket: str) -> dict[str, str]:
        asked.append((cloud, bucket))
        return RUNNING

    args = build_parser("status").parse_args(["status", "dev"])
    assert cmd_status(args, Backend(), reader) == OK
    assert asked == [("gcp", "gpufit-w-s-abc")]
    assert capsys.readouterr().out.startswith("gs://gpufit-w-s-abc: 2 machine(s)")


# ------------------------------------------------------------------------- Cloud Storage


class GcsFake(FakeHandler):
    """``objects.list`` (prefix, one object a page) and ``objects.get?alt=media`` of one bucket."""

    objects: ClassVar[dict[str, str]] = {}
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self.requests.append(self.path)
        query = parse_qs(url.query)
        parts = url.path.split("/")
        if parts[:5] != ["", "storage", "v1", "b", "gpufit-w-s-abc"] or parts[5:6] != ["o"]:
            body = {"error": {"code": 404, "message": "The specified bucket does not exist."}}
            self.send_body(404, json.dumps(body).encode(), "application/json")
            return
        if len(parts) == 6:
            names = sorted(n for n in self.objects if n.startswith(query.get("prefix", [""])[0]))
            start = int(query.get("pageToken", ["0"])[0])
            page: dict[str, Any] = {"items": [{"name": n} for n in names[start : start + 1]]}
            if start + 1 < len(names):
                page["nextPageToken"] = str(start + 1)
            self.send_body(200, json.dumps(page).encode(), "application/json")
            return
        name = unquote(parts[6])
        assert query.get("alt") == ["media"]
        self.send_body(200, self.objects[name].encode(), "application/octet-stream")


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[GcsFake]]:
    GcsFake.objects, GcsFake.requests = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), GcsFake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield GcsFake
    finally:
        server.shutdown()
        server.server_close()


def test_cloud_storage_pages_and_media(gcs: type[GcsFake], capsys: pytest.CaptureFixture[str]) -> None:
    gcs.objects = {**FAILED, "fleet/outputs/a.png": "x"}
    assert main(["status", "--bucket", "gs://gpufit-w-s-abc"]) == JOB_FAILED
    assert "verdict: failed" in capsys.readouterr().out
    listings = [r for r in gcs.requests if "alt=media" not in r]
    assert len(listings) == 4 and all("prefix=status%2F" in r for r in listings)  # one object a page
    assert main(["status", "--bucket", "gs://other"]) == STATUS_UNREADABLE
    assert "HTTP 404: The specified bucket does not exist." in capsys.readouterr().err


# ------------------------------------------------------------------------- producer to reader


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("flock") is None, reason="needs curl, flock")
def test_what_a_failing_machine_wrote_is_what_status_reports(tmp_path: Path, s3: Any) -> None:
    doc = load(SCENARIOS / "aws-group-job-fails-past-the-replacement-bound.yaml")
    outcome = run_scenario(doc, tmp_path)
    written = {k: v for k, v in outcome.bucket.items() if k.startswith("status/")}
    status = parse(written)
    assert status.verdict == "failed" and status.replacements == 4 and status.replacements_allowed == 4
    (me,) = status.machines
    assert (me.state, me.exit_code, me.attempt, me.attempts_allowed) == ("gave-up", 1, 3, 3)
    s3.create_bucket(Bucket=BUCKET)
    for key, text in written.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=text.encode())
    assert main(["status", "--bucket", f"s3://{BUCKET}"]) == JOB_FAILED
