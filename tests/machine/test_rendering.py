"""The boot script as rendered: every variant passes shellcheck, fits EC2's user-data limit, and
keeps its structure whatever the spec says (commands are data in files of their own; the
bootstrap carries every file as quoted base64)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deployment import Deployment
from machine.boot import (
    PATHS,
    USER_DATA_LIMIT,
    NodeRole,
    Paths,
    bootstrap,
    bundle,
    fleet_group,
    render,
    shutdown_script,
)
from machine.serving import MachineSecrets
from tests.machine.harness import Sandbox
from tests.machine.plans import MULTI_NODE, ON_GCP, deployment

SERVICE = {
    "serving": {"context_tokens": 8192, "concurrency": 16, "tokens_per_s_per_stream": 20, "engine": "none"},
    "job": {"command": "python my_server.py --port 8000"},
}
TOKEN_BATCH = {
    "task": "batch",
    "serving": {"context_tokens": 4096, "tokens": "1e9"},
    "job": {"command": "python generate.py --resume"},
    "duration": None,
}
"""A token batch: gpufit starts vLLM on 127.0.0.1 for its job.command."""
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("sdxl-batch", {}),
    ("llama8b-lb", TOKEN_BATCH),
    ("llama8b-lb", {**TOKEN_BATCH, **ON_GCP}),
    ("sdxl-batch", ON_GCP),
    ("sdxl-batch", {"job": {"command": None}}),
    ("guanaco-65b", {}),
    ("guanaco-65b", ON_GCP),
    ("llama70b-full-ft", {}),
    ("llama70b-full-ft", MULTI_NODE),
    ("llama70b-chat", {}),
    ("llama8b-lb", {}),
    ("llama8b-lb", SERVICE),
    ("llama8b-fp8", {}),
    ("llama13b-gcp", {}),
]
"""Both clouds; groups and plain instances; jobs (spot and on-demand, with and without a
checkpoint hook), a service command, an idle machine and model servers (private, behind a load
balancer, on spot); single- and multi-node (every rank)."""

ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufit/{}/{}-AbCdEf"


def secrets_for(d: Deployment) -> MachineSecrets:
    ref = (lambda what: ARN.format(d.name, what)) if d.cloud == "aws" else (lambda what: f"{d.name}-{what}")
    return MachineSecrets(
        d.cloud,
        d.region,
        ref("api-key") if d.server else None,
        ref("hf-token"),
        "my-project",
        (("WANDB_API_KEY", ref("wandb")),),
    )


def machines() -> list[tuple[str, Deployment, NodeRole, Any]]:
    """Every machine of every variant: (id, deployment, role, group)."""
    found = []
    for stack, changes in VARIANTS:
        d, _ = deployment(stack, **changes)
        tag = f"{stack}-{d.cloud}" + ("-" + "-".join(sorted(changes)) if changes else "")
        if d.grouped:
            found.append((tag, d, NodeRole(0, 1, ""), fleet_group(d, "my-project")))
        else:
            for rank in range(d.nodes_per_replica):
                role = NodeRole(rank, d.nodes_per_replica, "10.0.0.1" if rank else "", rank)
                found.append((f"{tag}-rank{rank}", d, role, None))
    return found


MACHINES = machines()


def shell_files(d: Deployment, role: NodeRole, group: Any) -> dict[str, str]:
    """The rendered bootstrap and every shell file it writes that gpufit authors (job.sh and
    checkpoint.sh hold the user's commands verbatim; a multi-node job.sh is gpufit's torchrun
    launch, checked with a placeholder command)."""
    made = bundle(d, "gpufit-bucket-0123456789", role, group, secrets_for(d))
    files = {"bootstrap": bootstrap(made)}
    for f in made.files:
        if f.path.endswith((".sh", "/gpufit-machine")) and not f.path.endswith(("/job.sh", "/checkpoint.sh")):
            files[f.path.rsplit("/", 1)[1]] = f.content
    if role.nodes > 1 and d.command is not None:
        placeholder = replace(d, command="train.py --config configs/run.yaml")
        launch = bundle(placeholder, "gpufit-bucket-0123456789", role, group, secrets_for(d)).file(
            f"{PATHS.etc}/job.sh"
        )
        files["job.sh"] = "#!/bin/bash\n" + launch.content
    if d.cloud == "gcp":
        files["shutdown-script"] = shutdown_script()
    return files


@pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="shellcheck is not installed (make test-tools)"
)
def test_every_rendered_variant_passes_shellcheck(tmp_path: Path) -> None:
    checked = []
    for tag, d, role, group in MACHINES:
        for name, text in shell_files(d, role, group).items():
            path = tmp_path / f"{tag}--{name}"
            path.write_text(text)
            checked.append(path)
    found = subprocess.run(
        ["shellcheck", "-S", "warning", "-s", "bash", *map(str, checked)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 0, found.stdout
    # the variants named in VARIANTS, every rank (llama70b-full-ft's own plan is two nodes)
    assert len(MACHINES) == 16 and len(checked) == 54


@pytest.mark.parametrize(("tag", "d", "role", "group"), MACHINES, ids=[m[0] for m in MACHINES])
def test_user_data_fits_and_is_valid_bash(tag: str, d: Deployment, role: NodeRole, group: Any) -> None:
    text = render(d, "gpufit-" + "b" * 56, role, group, secrets_for(d))
    assert len(text.encode()) <= USER_DATA_LIMIT or d.cloud == "gcp"
    assert len(text.encode()) < 256 * 1024  # a GCP metadata value
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


@pytest.mark.parametrize(
    ("tag", "d", "role", "group"),
    [m for m in MACHINES if m[1].server is not None],
    ids=[m[0] for m in MACHINES if m[1].server is not None],
)
def test_user_data_fits_with_the_image_pinned_by_digest(
    tag: str, d: Deployment, role: NodeRole, group: Any
) -> None:
    """A recorded digest lengthens the image name and adds the check after the pull; every
    server variant still fits EC2's limit (render refuses one that does not)."""
    assert d.server is not None
    pinned = replace(d, server=replace(d.server, image_ref=f"{d.server.image}@sha256:{'f' * 64}"))
    text = render(pinned, "gpufit-" + "b" * 56, role, group, secrets_for(pinned))
    assert len(text.encode()) <= USER_DATA_LIMIT or d.cloud == "gcp"
    made = bundle(pinned, "gpufit-bucket-0123456789", role, group, secrets_for(pinned))
    serve = next(f.content for f in made.files if f.path.endswith("/serve-start.sh"))
    assert "RepoDigests" in serve and f"@sha256:{'f' * 64}" in serve
    if shutil.which("shellcheck"):
        shellcheck = ["shellcheck", "-S", "warning", "-s", "bash", "-"]
        checked = subprocess.run(shellcheck, input=serve, text=True, check=False)
        assert checked.returncode == 0


def test_a_boot_script_over_the_ec2_limit_is_refused() -> None:
    d, _ = deployment("sdxl-batch")
    import hashlib

    noise = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(128))[:4096]
    with pytest.raises(ValueError, match="over EC2's 16384-byte user-data limit"):
        render(
            replace(d, command=noise, checkpoint_command=noise[::-1]), "b", NodeRole(0, 1, ""), fleet_group(d)
        )


HOSTILE = [
    "python job.py\nGPUFIT_SCRIPT_EOF\ntouch {pwned}/heredoc",
    "python job.py\nGPUFIT_LEAVE_EOF\ntouch {pwned}/leave",
    "x'; touch {pwned}/quote; echo '",
    "$(touch {pwned}/subst) `touch {pwned}/backtick`",
    'EOF\n"; touch {pwned}/dquote; #',
]


def test_no_command_can_change_what_the_bootstrap_runs(tmp_path: Path) -> None:
    """The commands end up byte for byte in job.sh and checkpoint.sh and nowhere else: writing
    the machine's files runs none of them, and the supervisor is the same for any command."""
    pwned = tmp_path / "pwned"
    pwned.mkdir()
    d, _ = deployment("guanaco-65b")
    benign = bundle(d, "b", NodeRole(0, 1, ""), fleet_group(d))
    sandbox = Sandbox(tmp_path / "box", {"machine": "i-1"}, 0)
    paths = Paths(root=sandbox.root.as_posix())
    try:
        for hostile in HOSTILE:
            command = hostile.format(pwned=pwned)
            evil = replace(d, command=command, checkpoint_command=command)
            made = bundle(evil, "b", NodeRole(0, 1, ""), fleet_group(d), paths=paths)
            ran = sandbox.bootstrap(bootstrap(made, paths))
            assert ran.returncode == 0, ran.stderr
            assert not list(pwned.iterdir()), f"{hostile!r} ran while the files were written"
            assert (Path(paths.etc) / "job.sh").read_text() == "# gpufit: job.command\n" + command + "\n"
            assert (Path(paths.etc) / "checkpoint.sh").read_text().endswith(command + "\n")
            # the supervisor and units do not depend on the command, but for the deployment id's
            # digest of it (hex digits: it cannot change the script's structure)
            same = bundle(evil, "b", NodeRole(0, 1, ""), fleet_group(d))
            for mine, theirs in zip(benign.files, same.files, strict=True):
                if not mine.path.endswith(("/job.sh", "/checkpoint.sh")):
                    assert re.search(r"^DEPLOYMENT=[0-9]+-[0-9a-f]{10}$", theirs.content, re.M) or (
                        "DEPLOYMENT=" not in theirs.content
                    )
                    mask = re.compile(r"^DEPLOYMENT=.*$", re.M)
                    assert mask.sub("", mine.content) == mask.sub("", theirs.content)
                    assert (mine.path, mine.mode) == (theirs.path, theirs.mode)
    finally:
        sandbox.stop()


def test_the_bootstrap_is_the_same_shape_for_every_spec() -> None:
    """Apart from the base64 blobs and the file list, every line is fixed text."""
    shapes = set()
    for _, d, role, group in MACHINES:
        text = render(d, "bkt", role, group, secrets_for(d))
        shape = re.sub(r"'[A-Za-z0-9+/=]+'", "'B64'", text)
        shape = re.sub(r"> \S+\.new\nchmod 0[0-7]{3} \S+\.new && mv \S+\.new \S+", "> F", shape)
        shape = re.sub(r"(printf '%s' 'B64' \| base64 -d \| gunzip > F\n)+", "FILES\n", shape)
        shapes.add(re.sub(r"(install -d -m 0755|systemctl (?:enable|start --no-block)) .*", r"\1 …", shape))
    assert len(shapes) == 1, shapes


def test_settings_are_quoted_values_only() -> None:
    """Each settings line is NAME=one-shell-word or NAME=(words): nothing a value could break."""
    d, _ = deployment("sdxl-batch")
    odd = replace(d, workload="w", stack="it's $(x) `y`", region="us-east-1")
    text = bundle(odd, "b", NodeRole(0, 1, ""), fleet_group(odd)).file(PATHS.supervisor).content
    settings = text.split("# --- gpufit machine supervisor")[0].splitlines()[3:]
    import shlex

    for line in settings:
        name, _, value = line.partition("=")
        assert re.fullmatch(r"[A-Z_]+", name), line
        words = shlex.split(value.strip("()")) if value.startswith("(") else shlex.split(value)
        assert len(words) <= 1 or value.startswith("("), line
    assert "STACK='it'\"'\"'s $(x) `y`'" in text


def test_production_paths_and_the_image_environment() -> None:
    d, _ = deployment("llama70b-full-ft", **MULTI_NODE)
    made = bundle(d, "b", NodeRole(1, 2, "10.0.0.1", 1))
    unit = made.file("/etc/systemd/system/gpufit-boot.service").content
    assert "ExecStart=/usr/local/sbin/gpufit-machine boot" in unit
    assert "Environment=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in unit
    supervisor = made.file("/usr/local/sbin/gpufit-machine").content
    assert "IMAGE_ENVS=(/opt/pytorch/bin/activate /opt/conda/bin/activate)" in supervisor
    assert "IMDS=http://169.254.169.254" in supervisor and "GCE=http://metadata.google.internal" in supervisor
    final = made.file("/etc/systemd/system/gpufit-final-sync.service").content
    assert (
        "ExecStop=/usr/local/sbin/gpufit-machine shutdown" in final
        and "After=network-online.target gpufit-boot.service" in final
    )


def test_every_stop_fits_the_time_its_cloud_gives() -> None:
    """The notice and shutdown budgets fit the clouds' documented windows (machine.lifecycle),
    the planned stop ends before the deadline, and the autohealing delay is one the API takes."""
    from machine import lifecycle

    for stack, changes in VARIANTS:
        d, _ = deployment(stack, **changes)
        t = lifecycle.timing(d)
        gcp_spot = d.cloud == "gcp" and d.spot
        notice = lifecycle.GCP_SPOT_NOTICE_S if gcp_spot else lifecycle.AWS_SPOT_NOTICE_S
        assert t.notice_hook + t.notice_sync < notice
        shutdown = lifecycle.GCP_SPOT_NOTICE_S if gcp_spot else lifecycle.GCP_SHUTDOWN_S
        assert t.shutdown_hook + t.shutdown_job_stop + t.shutdown_sync < shutdown
        assert t.stop_margin == min(t.stop_budget, max(60, d.lifetime_seconds // 4))
        assert lifecycle.HOOK_HEARTBEAT_MIN_S <= t.heartbeat <= lifecycle.HOOK_HEARTBEAT_MAX_S
    assert 0 < lifecycle.READINESS_BOOT_S <= lifecycle.AUTOHEALING_DELAY_MAX_S
    ft, _ = deployment("llama70b-full-ft")
    assert ft.checkpoint_command is None and lifecycle.timing(ft).stop_budget == 120 + 9884  # the README's
    assert lifecycle.timing(replace(ft, checkpoint_command="kill -USR1 1")).stop_budget == 600 + 120 + 9884
