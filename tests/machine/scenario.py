"""A boot-script scenario: a YAML file in ``tests/machine/scenarios/`` says which plan's machine
runs, how the world behaves (the job's exits, the metadata signals, failing secrets, a
server that never answers, the clock at boot), and what must happen (calls in order, calls
that must not happen, objects in the bucket, the machine's status object, the job's
environment). ``run_scenario`` renders the real boot script for that plan, runs it in a
``Sandbox`` and checks every expectation, and the invariants every machine keeps: no secret
value in the boot script, the journal or the bucket's status; IMDSv2 tokens (or GCP's
metadata header) on every metadata request; outputs synced only to the stack's bucket.

Keys (all optional but ``plan`` and ``expect``):

  what            one line: the case
  plan            {stack: NAME, changes: {workload fields}}: the stack's plan, or
                  {fixture: PATH}: a spec under tests/fixtures/
  rank            the node's rank in a multi-node job (default 0)
  job, torchrun   the job's attempts in order: {exit: N, write: [files], block: true,
                  on_term: N (the exit status a blocked job gives on SIGTERM; default 143)}
  exec_job        true: ``job.command`` is ``exec fakejob --resume`` (the job's own program
                  gets the supervisor's signals, not the wrapping bash)
  secret_region   the region of the user's secrets' ARNs (default: the deployment's)
  hook            false: no job.checkpoint_command (default: ``fakehook``)
  hook_hangs      the checkpoint hook never returns
  secrets         {VAR: value}: the spec's secrets (from gpufit:secrets)
  hf_token        false: no Hugging Face token (default: given)
  failing_secrets [api_key | hf_token | VAR]: the secret store refuses them
  failing_calls   [autoscaling or MIG operations, "docker run"]: they fail
  aws_group_lookup what DescribeAutoScalingInstances answers (default: the group)
  bucket          {key: text}: objects in the bucket before boot ({deployment} in a key: this
                  deployment's id)
  metadata        {spot_notice | rebalance | scale_in | preempted: CONDITION}
  engine          healthy | never | stops: the model server's /health
  boot            past_deadline: the machine boots after its planned stop
  image_env       false: the image has no /opt/pytorch environment
  image_digest    sha256:...: the engine image is pinned tag@digest (as engines.yaml records it)
  registry_digest sha256:...: the digest of what the registry serves for it (default: the same)
  machine_type    the type the metadata server answers (default: the plan's choice)
  gpus            how many GPUs ``nvidia-smi -L`` lists (default 0: the driver is not up)
  timing          {field: seconds}: ``machine.lifecycle.Timing`` overrides
  fire            [{when: CONDITION, run: [stop, deadline] | [shutdown]} | {when, put: {key: text}}]
  until           call patterns (one, or a list seen in order) that end a run whose
                  supervisor keeps running

Expectations (``expect``): ``exit`` (the supervisor's status, or ``running``), ``order`` (call
patterns seen in that order), ``absent``, ``last`` (the last call that is not a read of the
bucket), ``times`` ([pattern, n]), ``bucket`` / ``no_bucket`` (object keys), ``status`` (fields of
the machine's status object; ``~text``: holds it), ``job_env`` (the job's environment),
``modes`` (file modes under the root), ``files`` (a file's exact text), ``journal`` (text in
the supervisor's log).

Conditions: always, never, job_started, checkpointed, synced:N (N output syncs since the job
started).
A call pattern is [command, word, ...]: the command, then words the call holds in that order
(a word with ``*`` is a shell-style pattern). Placeholders: {bucket} {workdir} {machine}
{group} {region} {prefix} {deployment} {api_key} (the API key's fake value); in call patterns and
``job_env``, {batch_port+i}: a token batch's engine port for replica i (a free port each run, as a
server's is, so two test runs on one machine do not collide).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from deployment import Deployment
from machine import lifecycle
from machine.boot import FleetGroup, NodeRole, Paths, deployment_id, fleet_group, render
from machine.serving import MachineSecrets
from tests.machine.harness import PRIVATE_IP, Call, Sandbox, free_ports, matches
from tests.machine.plans import deployment, fixture_deployment

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
BUCKET = "gpufit-test-bucket-abc123"
HF_TOKEN_VALUE = "hf_FakeTokenValue0123456789abcdefghijkl"
API_KEY_VALUE = "sk-fake-api-key-0123456789"


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict) and "plan" in doc and "expect" in doc, f"{path.name}: needs plan and expect"
    return doc


def scenario_files() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


@dataclass
class Machine:
    """The machine a scenario runs: its deployment, place, group and secrets."""

    d: Deployment
    role: NodeRole
    group: FleetGroup | None
    secrets: MachineSecrets | None
    name: str
    secret_values: dict[str, str]  # reference → value, as the fake secret store answers


def secret_ref(d: Deployment, what: str, region: str | None = None) -> str:
    if d.cloud == "aws":
        arn = f"arn:aws:secretsmanager:{region or d.region}:123456789012:secret"
        return f"{arn}:gpufit/{d.name}/{what}-AbCdEf"
    return f"{d.name[:40]}-{what}"


def machine(doc: dict[str, Any]) -> Machine:
    spec = doc["plan"]
    if "fixture" in spec:
        d, _ = fixture_deployment(spec["fixture"])
    else:
        d, _ = deployment(spec["stack"], **spec.get("changes", {}))
    rank = int(doc.get("rank", 0))
    multi = d.nodes_per_replica > 1
    if d.command is not None:
        single = "exec fakejob --resume" if doc.get("exec_job") else "fakejob --resume"
        d = replace(d, command="train.py --steps 1000" if multi else single)
    d = replace(d, checkpoint_command="fakehook" if doc.get("hook", True) and d.command else None)
    if d.server is not None:
        d = replace(d, server=replace(d.server, base_port=free_ports(len(d.server.ports()))))
        if doc.get("image_digest"):
            d = replace(d, server=replace(d.server, image_ref=f"{d.server.image}@{doc['image_digest']}"))
    if d.batch_engine is not None:  # a free port as for a server: a fixed one collides with another run
        d = replace(d, batch_engine=replace(d.batch_engine, base_port=free_ports(8)))
    user = doc.get("secrets", {})
    if user:
        from selector.spec import secret_sources

        d = replace(d, secrets=secret_sources({var: var.lower() for var in user}))
    group = fleet_group(d, "test-project") if d.grouped else None
    role = NodeRole(rank, d.nodes_per_replica, "10.0.0.1" if rank else "", rank)
    values: dict[str, str] = {}
    job: list[tuple[str, str]] = []
    for var, value in user.items():
        ref = secret_ref(d, f"secret-{var.lower()}", doc.get("secret_region"))
        values[ref] = value
        job.append((var, ref))
    hf = secret_ref(d, "hf-token") if doc.get("hf_token", True) else None
    if hf:
        values[hf] = HF_TOKEN_VALUE
    api = secret_ref(d, "api-key") if d.server is not None else None
    if api:
        values[api] = API_KEY_VALUE
    secrets = MachineSecrets(d.cloud, d.region, api, hf, "test-project", tuple(job))
    name = "i-0abc1234def567890" if d.cloud == "aws" else f"{(group.name if group else d.name)[:40]}-x1y2"
    return Machine(d, role, group, secrets, name, values)


def refs_failing(m: Machine, names: list[str]) -> list[str]:
    assert m.secrets is not None
    found = []
    for name in names:
        if name == "api_key":
            found.append(m.secrets.api_key)
        elif name == "hf_token":
            found.append(m.secrets.hf_token)
        else:
            found += [r for v, r in m.secrets.job if v == name]
    return [r for r in found if r]


def serve_host(d: Any) -> str:
    """Where the machine's server must listen: loopback for a private AWS endpoint (SSM port
    forwarding connects to localhost), else the private address the metadata server gives
    (``PRIVATE_IP``), so a server answering on any other address is never seen healthy."""
    return "127.0.0.1" if d.cloud == "aws" and d.expose == "private" else PRIVATE_IP


class Engine:
    """The model server's /health on the replicas' ports: healthy, never up, or healthy
    until the machine reports serving and then failing."""

    def __init__(
        self,
        mode: str,
        ports: list[int],
        sandbox: Sandbox,
        status_key: str,
        path: str = "/health",
        host: str = "127.0.0.1",
    ) -> None:
        self.mode, self.sandbox, self.status_key, self.path = mode, sandbox, status_key, path
        self.servers: list[ThreadingHTTPServer] = []
        if mode == "never":
            return
        engine = self

        class Health(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                ok = engine.healthy() and self.path == engine.path
                self.send_response(200 if ok else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

        for port in ports:
            server = ThreadingHTTPServer((host, port), Health)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def healthy(self) -> bool:
        if self.mode != "stops":
            return True
        status = self.sandbox.bucket(BUCKET).get(self.status_key)
        return not (status and json.loads(status)["state"] == "serving")

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@dataclass
class Outcome:
    exit: int | None
    calls: list[Call]
    bucket: dict[str, str]
    status: dict[str, Any] | None
    m: Machine
    sandbox: Sandbox
    boot_script: str
    journal: str

    def fill(self, word: str) -> str:
        d = self.m.d
        for i in range(8):  # a token batch's engine ports, replica i
            word = word.replace(
                f"{{batch_port+{i}}}", str(d.batch_engine.base_port + i if d.batch_engine else 0)
            )
        return (
            word.replace("{bucket}", BUCKET)
            .replace("{workdir}", self.sandbox.root.as_posix() + d.workdir)
            .replace("{machine}", self.m.name)
            .replace("{group}", self.m.group.name if self.m.group else "")
            .replace("{region}", d.region)
            .replace("{prefix}", "fleet" if self.m.group else f"machine-{self.m.role.machine}")
            .replace("{deployment}", deployment_id(d))
            .replace("{api_key}", API_KEY_VALUE)
        )

    def pattern(self, raw: list[Any]) -> list[str]:
        return [self.fill(str(w)) for w in raw]

    def transcript(self) -> str:
        return self.sandbox.transcript()


def run_scenario(doc: dict[str, Any], tmp: Path) -> Outcome:
    m = machine(doc)
    d = m.d
    t = replace(lifecycle.timing(d), **doc.get("timing", {}))
    start = d.created_at + timedelta(seconds=60)
    if doc.get("boot") == "past_deadline":
        start = d.expires_at - timedelta(seconds=t.stop_margin) + timedelta(seconds=30)
    failing = refs_failing(m, doc.get("failing_secrets", []))
    knobs = {
        "machine": m.name,
        "group": m.group.name if m.group else "None",
        "secrets": m.secret_values,
        "failing_secrets": failing,
        "failing_calls": doc.get("failing_calls", []),
        "record_env": [v for v, _ in (m.secrets.job if m.secrets else ())],
        "metadata": doc.get("metadata", {}),
        "fakejob": doc.get("job", [{"exit": 0}]),
        "torchrun": doc.get("torchrun", [{"exit": 0}]),
        "hook_hangs": doc.get("hook_hangs", False),
        "image_env": doc.get("image_env", True),
        "machine_type": doc.get("machine_type", d.machine_type),
        "gpus": doc.get("gpus", 0),
        "registry_digest": doc.get("registry_digest", ""),
    }
    if "aws_group_lookup" in doc:
        knobs["aws_group_lookup"] = doc["aws_group_lookup"]
    sandbox = Sandbox(tmp, knobs, int(start.timestamp()))
    for key, text in doc.get("bucket", {}).items():
        target = sandbox.fake / "buckets" / BUCKET / key.replace("{deployment}", deployment_id(d))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    paths = Paths(root=sandbox.root.as_posix(), imds=sandbox.metadata_url, gce_metadata=sandbox.metadata_url)
    secrets = m.secrets if (d.server is not None or (m.secrets and m.secrets.job_env())) else None
    boot = render(d, BUCKET, m.role, m.group, secrets, paths, t)
    made = sandbox.bootstrap(boot)
    assert made.returncode == 0, made.stderr
    supervisor = paths.supervisor
    status_key = f"status/machines/{m.name}.json"
    launch = d.server or d.batch_engine
    engine = Engine(
        doc.get("engine", "never"),
        d.server.ports()
        if d.server
        else [d.batch_engine.base_port + r for r in range(8)]
        if d.batch_engine
        else [],
        sandbox,
        status_key,
        launch.health_path if launch else "/health",
        serve_host(d) if d.server else "127.0.0.1",  # a batch engine binds loopback
    )
    fire = doc.get("fire", [])
    puts = [e for e in fire if "put" in e]
    runs = [e for e in fire if "run" in e]

    def put_objects() -> None:
        for event in list(puts):
            if sandbox.holds(event["when"]):
                puts.remove(event)
                for key, text in event["put"].items():
                    target = sandbox.fake / "buckets" / BUCKET / key
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(text)

    until = doc.get("until")
    if until and not isinstance(until[0], list):
        until = [until]
    filler = Outcome(None, [], {}, None, m, sandbox, boot, "")
    wanted = [filler.pattern(p) for p in until] if until else None
    try:
        code = sandbox.run(supervisor, runs, wanted, put_objects)
    finally:
        sandbox.stop()
        engine.close()
    bucket = sandbox.bucket(BUCKET)
    raw_status = bucket.get(status_key)
    status = json.loads(raw_status) if raw_status else None
    return Outcome(code, sandbox.calls(), bucket, status, m, sandbox, boot, sandbox.output())


# ------------------------------------------------------------------------- expectations


def check(outcome: Outcome, expect: dict[str, Any]) -> None:
    """Every expectation of the scenario, then the invariants."""
    calls = outcome.calls
    why = outcome.transcript
    if "exit" in expect:
        want = expect["exit"]
        assert outcome.exit == (None if want == "running" else want), f"exit {outcome.exit}\n{why()}"
    position = 0
    for raw in expect.get("order", []):
        pattern = outcome.pattern(raw)
        while position < len(calls) and not matches(calls[position], pattern):
            position += 1
        assert position < len(calls), f"no {pattern} in order\n{why()}"
        position += 1
    for raw in expect.get("absent", []):
        pattern = outcome.pattern(raw)
        found = [" ".join(c.words()) for c in calls if matches(c, pattern)]
        assert not found, f"unexpected {found}\n{why()}"
    if "last" in expect:
        pattern = outcome.pattern(expect["last"])
        acts = [c for c in calls if not Sandbox.is_read(c)]
        assert acts and matches(acts[-1], pattern), f"the last act is not {pattern}\n{why()}"
    for raw, n in expect.get("times", []):
        pattern = outcome.pattern(raw)
        got = sum(matches(c, pattern) for c in calls)
        assert got == n, f"{pattern}: {got} calls, expected {n}\n{why()}"
    for key in expect.get("bucket", []):
        assert outcome.fill(key) in outcome.bucket, (
            f"no {outcome.fill(key)} in the bucket: {sorted(outcome.bucket)}"
        )
    for key in expect.get("no_bucket", []):
        assert outcome.fill(key) not in outcome.bucket, f"{outcome.fill(key)} should not be in the bucket"
    if "status" in expect:
        assert outcome.status is not None, f"no status object\n{why()}"
        for field, want in expect["status"].items():
            got = outcome.status.get(field)
            if isinstance(want, str) and want.startswith("~"):
                assert want[1:] in str(got), f"status {field} = {got!r}, expected it to hold {want[1:]!r}"
            else:
                assert got == want, f"status {field} = {got!r}, expected {want!r}\n{outcome.status}"
    if "job_env" in expect:
        runs = [c for c in calls if c.cmd in ("fakejob", "torchrun")]
        assert runs, f"the job never ran\n{why()}"
        env = runs[0].extra["env"]
        for var, want in expect["job_env"].items():
            if want == "<absent>":
                assert var not in env, f"{var} should not reach the job"
            elif isinstance(want, str) and want.startswith("~"):
                assert outcome.fill(want[1:]) in env.get(var, ""), f"{var}={env.get(var)!r}"
            else:
                assert env.get(var) == outcome.fill(str(want)), f"{var}={env.get(var)!r}, expected {want!r}"
    for path, mode in expect.get("modes", {}).items():
        found = outcome.sandbox.root / path.lstrip("/")
        assert found.exists(), f"no {path}"
        assert oct(found.stat().st_mode & 0o777) == oct(int(str(mode), 8)), (
            f"{path} mode {oct(found.stat().st_mode)}"
        )
    for path, text in expect.get("files", {}).items():
        found = outcome.sandbox.root / path.lstrip("/")
        assert found.exists(), f"no {path}"
        assert found.read_text() == outcome.fill(text), f"{path} holds {found.read_text()!r}"
    for text in expect.get("journal", []):
        assert outcome.fill(text) in outcome.journal, f"the journal lacks {text!r}\n{outcome.journal}"
    invariants(outcome)


def invariants(outcome: Outcome) -> None:
    secrets = list(outcome.m.secret_values.values())
    statuses = "".join(v for k, v in outcome.bucket.items() if k.startswith("status/"))
    for value in secrets:
        assert value not in outcome.boot_script, "a secret value in the boot script"
        assert value not in outcome.journal, "a secret value in the journal"
        assert value not in statuses, "a secret value in a status object"
        calls = json.dumps([c.words() for c in outcome.calls])
        assert value not in calls, "a secret value on a command line"
    for method, path, headers in outcome.sandbox.metadata_log:
        if path.startswith("/latest/meta-data/"):
            assert headers.get("X-aws-ec2-metadata-token"), f"IMDSv1 request {method} {path}"
        if path.startswith("/computeMetadata/"):
            assert headers.get("Metadata-Flavor") == "Google", (
                f"GCP metadata request without its header: {path}"
            )
    for call in outcome.calls:
        if Sandbox.is_upload(call):
            target = [a for a in call.argv if not a.startswith("-")][-1]
            assert target.split("://", 1)[1].startswith(f"{BUCKET}/"), f"outputs synced to {target}"
