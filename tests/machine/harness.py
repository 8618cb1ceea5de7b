"""Run a machine's rendered boot script in a sandbox and record what it does.

The sandbox is a temporary root: the bootstrap writes the machine's files under it, and the
supervisor runs from there as systemd would start it, under bash, with:

- a metadata server on 127.0.0.1 that answers as EC2's IMDSv2 (a PUT for a token, then the
  token on every GET, else 401) or GCP's (``Metadata-Flavor: Google``, else 403), with the
  interruption, rebalance, scale-in and preemption signals switched on by the scenario's
  conditions;
- ``tests/machine/fakebin.py`` on PATH as ``aws``, ``gcloud``, ``docker``, ``systemd-run``,
  ``systemctl``, ``systemd-cat``, ``shutdown``, ``poweroff`` (and ``torchrun`` only inside
  the fake image environment ``opt/pytorch``), logging every call;
- ``sleep`` and ``date`` on a fake clock: ``sleep N`` advances it by N seconds and pauses a
  250th of that (10 to 100 ms), ``date +%s`` reads it. Timed loops therefore run in
  milliseconds; no real sleep is longer than 100 ms.

The harness plays systemd and the cloud: when a scenario's condition holds (the job has
started, a checkpoint was taken, outputs were synced twice) it runs the supervisor's
``stop deadline`` (what the deadline timer would) or ``shutdown`` (what the OS's shutdown
would), and it flips the metadata signals. A run ends when the supervisor exits, or when the
scenario's ``until`` call is seen and the calls settle; every process the run started is
then killed (found by its environment).
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FAKES = (
    "aws",
    "gcloud",
    "docker",
    "systemd-run",
    "systemctl",
    "systemd-cat",
    "shutdown",
    "poweroff",
    "nvidia-smi",
)
RUN_LIMIT_S = 40.0
SETTLE_S = 0.3
IMDS_TOKEN = "AQAEAFakeToken=="
PRIVATE_IP = "127.0.0.2"
"""The machine's private address as its metadata server gives it (EC2 ``local-ipv4``, GCE
``network-interfaces/0/ip``): a loopback address other than 127.0.0.1, so the sandbox can tell
a server bound to it from one bound to localhost."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """A base port whose ``count`` ports from it are all free on 127.0.0.1 and ``PRIVATE_IP`` (the
    fake engines' replica ports bind one of them): one free port alone may have a neighbour in use,
    which made a replicas scenario fail with "Address already in use"."""
    for _ in range(50):
        base = free_port()
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                for host in ("127.0.0.1", PRIVATE_IP):
                    s = socket.socket()
                    held.append(s)
                    s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


@dataclass
class Call:
    cmd: str
    argv: list[str]
    t: int
    extra: dict[str, Any] = field(default_factory=dict)

    def words(self) -> list[str]:
        return [self.cmd, *self.argv]


def matches(call: Call, pattern: list[str]) -> bool:
    """The call is the pattern's command and holds the pattern's other words in that order
    (a word with ``*`` is a shell-style pattern)."""
    if call.cmd != pattern[0]:
        return False
    position = 0
    for word in pattern[1:]:
        while position < len(call.argv):
            arg = call.argv[position]
            position += 1
            if arg == word or ("*" in word and fnmatch.fnmatchcase(arg, word)):
                break
        else:
            return False
    return True


class Sandbox:
    """One machine's run. ``conditions`` name the moments the scenario waits for."""

    def __init__(self, tmp: Path, knobs: dict[str, Any], clock: int) -> None:
        self.tmp = tmp
        self.root = tmp / "root"
        self.fake = tmp / "fake"
        self.bin = tmp / "bin"
        self.image_bin = self.root / "opt" / "pytorch" / "bin"
        for d in (self.root, self.fake, self.bin, self.fake / "buckets"):
            d.mkdir(parents=True, exist_ok=True)
        self.knobs = knobs
        (self.fake / "knobs.json").write_text(json.dumps(knobs))
        (self.fake / "clock").write_text(str(clock))
        self.metadata_log: list[tuple[str, str, dict[str, str]]] = []
        self._install_fakes()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._metadata_handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.processes: list[subprocess.Popen[bytes]] = []

    # -- set-up ------------------------------------------------------------------------

    @property
    def metadata_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _install_fakes(self) -> None:
        program = self.bin / "fakebin.py"
        program.write_text(f"#!{sys.executable} -SE\n" + (HERE / "fakebin.py").read_text())
        program.chmod(0o755)
        for name in (*FAKES, "fakejob", "fakehook"):
            (self.bin / name).symlink_to(program)
        self.image_bin.mkdir(parents=True, exist_ok=True)
        (self.image_bin / "torchrun").symlink_to(program)
        if self.knobs.get("image_env", True):
            (self.image_bin / "activate").write_text(
                f'export VIRTUAL_ENV="{self.image_bin.parent}"\nexport PATH="{self.image_bin}:$PATH"\n'
            )
        for name in ("sleep", "date"):
            fake = self.bin / name
            fake.write_text((HERE / f"fake_{name}.sh").read_text())
            fake.chmod(0o755)

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "GPUFIT_FAKE": str(self.fake),
            "HOME": str(self.tmp),
            "LANG": "C.UTF-8",
        }

    # -- the metadata server --------------------------------------------------------------

    def holds(self, condition: str | None) -> bool:
        """Whether a scenario condition holds now."""
        if condition in (None, "never"):
            return False
        if condition == "always":
            return True
        if condition == "job_started":
            return (self.fake / "job-started").exists()
        if condition == "checkpointed":
            return (self.fake / "hook-ran").exists()
        found = re.fullmatch(r"synced:(\d+)", condition)
        if found:
            calls = self.calls()
            started = next((i for i, c in enumerate(calls) if c.cmd in ("fakejob", "torchrun")), None)
            if started is None:
                return False
            return sum(self.is_upload(c) for c in calls[started:]) >= int(found.group(1))
        raise ValueError(f"unknown condition {condition!r}")

    def left_its_group(self) -> bool:
        """An Auto Scaling group terminates a machine that asked it to (TerminateInstanceInAuto-
        ScalingGroup, or SetInstanceHealth Unhealthy, which the group replaces): the machine's
        target lifecycle state becomes ``Terminated``, and a terminating lifecycle hook holds it
        in ``Terminating:Wait`` as for a scale-in
        (https://docs.aws.amazon.com/autoscaling/ec2/userguide/lifecycle-hooks-overview.html,
        https://docs.aws.amazon.com/autoscaling/ec2/userguide/retrieving-target-lifecycle-state-through-imds.html)."""
        failing = self.knobs.get("failing_calls", [])
        for call in self.calls():
            words = call.words()
            if words[:2] != ["aws", "autoscaling"] or words[2] in failing:
                continue
            if words[2] == "terminate-instance-in-auto-scaling-group" or (
                words[2] == "set-instance-health" and "Unhealthy" in words
            ):
                return True
        return False

    @staticmethod
    def is_upload(call: Call) -> bool:
        """An outputs sync to the bucket."""
        if call.words()[:3] == ["aws", "s3", "sync"] or call.words()[:3] == ["gcloud", "storage", "rsync"]:
            places = [a for a in call.argv if not a.startswith("-")]
            return places[-2].endswith("/outputs") and "://" in places[-1]
        return False

    @staticmethod
    def is_read(call: Call) -> bool:
        """A look at the bucket (the watchers poll it): no effect on anything."""
        words = call.words()
        return (
            words[:3] == ["aws", "s3", "ls"]
            or (words[:3] == ["aws", "s3", "cp"] and words[-1] == "-")
            or words[:3] in (["gcloud", "storage", "ls"], ["gcloud", "storage", "cat"])
        )

    def _metadata_handler(self) -> type[BaseHTTPRequestHandler]:
        sandbox = self

        class Metadata(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                sandbox.metadata_log.append(("PUT", self.path, dict(self.headers)))
                if self.path == "/latest/api/token" and self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    self._send(200, IMDS_TOKEN)
                else:
                    self._send(400, "")

            def do_GET(self) -> None:
                sandbox.metadata_log.append(("GET", self.path, dict(self.headers)))
                status, body = sandbox.metadata(self.path, dict(self.headers))
                self._send(status, body)

        return Metadata

    def metadata(self, path: str, headers: dict[str, str]) -> tuple[int, str]:
        m = self.knobs.get("metadata", {})
        if path.startswith("/latest/meta-data/"):
            if headers.get("X-aws-ec2-metadata-token") != IMDS_TOKEN:
                return 401, ""  # IMDSv2 only: the instances require tokens
            item = path.removeprefix("/latest/meta-data/")
            if item == "instance-id":
                return 200, self.knobs["machine"]
            if item == "instance-type":
                return 200, self.knobs["machine_type"]
            if item == "local-ipv4":
                return 200, PRIVATE_IP
            if item == "spot/instance-action" and self.holds(m.get("spot_notice")):
                return 200, '{"action": "terminate", "time": "2026-12-02T13:00:00Z"}'
            if item == "events/recommendations/rebalance" and self.holds(m.get("rebalance")):
                return 200, '{"noticeTime": "2026-12-02T12:30:00Z"}'
            if item == "autoscaling/target-lifecycle-state":
                terminated = self.holds(m.get("scale_in")) or self.left_its_group()
                return 200, "Terminated" if terminated else "InService"
            return 404, ""
        if path.startswith("/computeMetadata/v1/"):
            if headers.get("Metadata-Flavor") != "Google":
                return 403, ""
            item = path.removeprefix("/computeMetadata/v1/")
            if item == "instance/name":
                return 200, self.knobs["machine"]
            if item == "instance/network-interfaces/0/ip":
                return 200, PRIVATE_IP
            if item == "instance/machine-type":
                zone = "projects/123456789012/zones/us-central1-a"
                return 200, f"{zone}/machineTypes/{self.knobs['machine_type']}"
            if item.startswith("instance/preempted"):
                preempted = self.holds(m.get("preempted"))
                if "wait_for_change" in item and not preempted:
                    time.sleep(0.02)
                return 200, "TRUE" if preempted else "FALSE"
            return 404, ""
        return 404, ""

    # -- running ---------------------------------------------------------------------------

    def bootstrap(self, script: str) -> subprocess.CompletedProcess[str]:
        path = self.tmp / "bootstrap.sh"
        path.write_text(script)
        return subprocess.run(
            ["bash", str(path)], env=self.env(), capture_output=True, text=True, timeout=30, check=False
        )

    def start(self, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        out = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(
            argv, env=self.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes.append(process)
        return process

    def seen(self, patterns: list[list[str]]) -> bool:
        """Whether calls matching ``patterns`` happened, in that order."""
        position = 0
        calls = self.calls()
        for pattern in patterns:
            while position < len(calls) and not matches(calls[position], pattern):
                position += 1
            if position == len(calls):
                return False
            position += 1
        return True

    def run(
        self,
        supervisor: str,
        fire: list[dict[str, Any]],
        until: list[list[str]] | None,
        on_tick: Callable[[], None] | None = None,
    ) -> int | None:
        """Start the supervisor's ``boot``; fire the scenario's events; return its exit status
        (None when it was still running once the ``until`` calls were seen)."""
        main = self.start(["bash", supervisor, "boot"], "supervisor")
        pending = list(fire)
        deadline = time.monotonic() + RUN_LIMIT_S
        code: int | None = None
        while time.monotonic() < deadline:
            for event in list(pending):
                if self.holds(event["when"]):
                    pending.remove(event)
                    self.start(["bash", supervisor, *event["run"]], "-".join(event["run"]))
            if on_tick is not None:
                on_tick()
            code = main.poll()
            if code is not None:
                self.end_unit(main.pid)
                break
            if until is not None and self.seen(until):
                break
            time.sleep(0.01)
        else:
            self.stop()
            raise AssertionError(f"the run did not end within {RUN_LIMIT_S} s:\n{self.transcript()}")
        self.settle()
        return main.poll() if code is None else code

    def settle(self) -> None:
        """Wait for the fired commands to exit (5 s at most), then ``SETTLE_S`` for the calls
        under way to land."""
        limit = time.monotonic() + 5
        while time.monotonic() < limit and not all(p.poll() is not None for p in self.processes[1:]):
            time.sleep(0.02)
        time.sleep(SETTLE_S)

    def end_unit(self, sid: int) -> None:
        """What systemd does when a service's main process exits: kill the rest of its control
        group (here: the processes of its session, and the job it started in a session of its
        own, whose pid the job's fake recorded)."""
        pids = (
            {int(p.name) for p in (self.fake / "pids").glob("*")} if (self.fake / "pids").exists() else set()
        )
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid or int(pid) in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    def stop(self) -> None:
        """Kill every process this run started: those whose environment names its fake dir."""
        marker = f"GPUFIT_FAKE={self.fake}".encode()
        for _ in range(3):
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    continue
                if marker in environ.split(b"\0"):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.02)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self.server.shutdown()
        self.server.server_close()

    # -- what happened ---------------------------------------------------------------------

    def calls(self) -> list[Call]:
        path = self.fake / "calls.jsonl"
        if not path.exists():
            return []
        with open(path, encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)  # the fakes append under an exclusive lock
            text = handle.read()
        calls = []
        for line in text.splitlines():
            raw = json.loads(line)
            calls.append(Call(raw.pop("cmd"), raw.pop("argv"), raw.pop("t"), raw))
        return calls

    def bucket(self, name: str) -> dict[str, str]:
        root = self.fake / "buckets" / name
        return {
            str(p.relative_to(root)): p.read_text(errors="replace")
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    def output(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')}" for p in sorted(self.tmp.glob("*.log"))
        )

    def transcript(self) -> str:
        calls = "\n".join(" ".join(c.words()) for c in self.calls())
        return f"calls:\n{calls}\n{self.output()}"
