"""The boot script and the plan-to-deployment translation shared by both clouds."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deployment import (
    deployment_from_plan,
    gcp_label_time,
    iso_utc,
    lifetime_hours,
    parse_gcp_label_time,
    parse_iso_utc,
)
from machine.boot import FleetGroup, NodeRole, as_boot_service, render as render_script, replica_env
from machine.serving import SecretRefs
from selector.catalog import load_catalog
from selector.select import plan
from selector.spec import load_spec, parse_spec
from tests.conftest import ROOT
from tests.pulumi_harness import stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CATALOG = load_catalog()
MULTI_NODE = {"placement": {"regions": ["us-west-2"], "instance_types": ["p5e.48xlarge"]}}
"""llama70b-full-ft kept on p5e.48xlarge, where its training state needs two nodes (the stack's
own plan now fits one p6-b200.48xlarge)."""


def deployment(stack: str, **workload_changes: Any):  # type: ignore[no-untyped-def]
    if workload_changes:
        workload = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"]
        spec = parse_spec({**workload, **workload_changes})
    else:
        spec = load_spec(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    result = plan(spec, CATALOG)
    return deployment_from_plan(result, stack="dev", project="gpufit", created_at=NOW), result


def render(d, bucket, role, group=None):  # type: ignore[no-untyped-def]
    """The boot script; a model server gets its secrets' references, as the components give."""
    refs = SecretRefs(d.cloud, d.region, f"{d.name}-api-key", None, "p") if d.server is not None else None
    return render_script(d, bucket, role, group, refs)


def bash_syntax_ok(script: str) -> bool:
    return (
        subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False).returncode
        == 0
    )


@pytest.mark.parametrize(
    ("stack", "changes"),
    [
        ("guanaco-65b", {}),
        ("llama70b-chat", {}),
        ("sdxl-batch", {}),
        ("llama70b-full-ft", {}),
        ("llama70b-full-ft", MULTI_NODE),
        ("llama13b-gcp", {}),
    ],
    ids=[
        "guanaco-65b",
        "llama70b-chat",
        "sdxl-batch",
        "llama70b-full-ft",
        "llama70b-full-ft-2-nodes",
        "llama13b-gcp",
    ],
)
def test_scripts_are_valid_bash(stack: str, changes: dict[str, Any]) -> None:
    d, _ = deployment(stack, **changes)
    assert d.nodes_per_replica == (2 if changes else 1)
    for rank in range(d.nodes_per_replica):
        script = render(d, "bucket-x", NodeRole(rank, d.nodes_per_replica, "10.0.0.1" if rank else "", rank))
        assert bash_syntax_ok(script), script
        assert bash_syntax_ok(as_boot_service(script))


def test_job_script_order_and_deadline_backstop() -> None:
    d, _ = deployment("guanaco-65b")
    script = render(d, "bkt", NodeRole(0, 1, ""))
    expires = int((NOW + timedelta(hours=48)).timestamp())
    assert f"GPUFIT_EXPIRES_AT={expires}" in script
    positions = [
        script.index(s)
        for s in (
            'shutdown -h +"$minutes"',
            "watch_interruption &",
            'aws s3 sync --only-show-errors "s3://$BUCKET',
            "bash -c 'python qlora.py",
            "sync_outputs\npoweroff",
        )
    ]
    assert positions == sorted(positions)
    assert "touch outputs/INTERRUPTED" in script


def test_service_keeps_running_and_on_demand_has_no_watcher() -> None:
    d, _ = deployment("llama70b-chat")
    script = render(d, "bkt", NodeRole(0, 1, ""))
    assert "# on-demand: no interruption watcher" in script
    assert "docker run --detach --name gpufit-serve-0" in script  # the model server, detached
    assert "poweroff\n" not in script.split("docker run")[1]  # a service stays up until the deadline


def test_gcp_script_watches_preemption_and_uses_gcloud() -> None:
    d, _ = deployment("llama13b-gcp")
    script = render(replace(d, market="spot", fault_tolerance="stateless"), "bkt", NodeRole(0, 1, ""))
    assert "instance/preempted?wait_for_change=true" in script
    assert 'gcloud storage rsync --recursive "$WORKDIR/outputs" "gs://$BUCKET' in script


def test_multi_node_training_uses_torchrun_rendezvous_on_node_0() -> None:
    d, _ = deployment("llama70b-full-ft", **MULTI_NODE)
    assert d.nodes == d.nodes_per_replica == 2 and d.needs_node_interconnect
    leader = render(d, "bkt", NodeRole(0, 2, "", 0))
    worker = render(d, "bkt", NodeRole(1, 2, "10.1.2.3", 1))
    assert "--node-rank=0" in leader and "hostname -I" in leader
    assert "--node-rank=1" in worker and 'GPUFIT_MASTER_ADDR="10.1.2.3"' in worker
    assert '--rdzv-endpoint="$GPUFIT_MASTER_ADDR:$GPUFIT_MASTER_PORT"' in worker
    assert "NODE_PREFIX=machine-1" in worker


def test_no_command_boots_ready() -> None:
    d, _ = deployment("sdxl-batch")
    script = render(replace(d, command=None), "bkt", NodeRole(0, 1, ""))
    assert "no job command" in script and "poweroff\n" not in script.split("no job command")[1]


def test_lifetime_follows_ttl_duration_or_job_hours() -> None:
    _, guanaco = deployment("guanaco-65b")
    assert lifetime_hours(guanaco) == 48  # teardown.ttl
    _, chat = deployment("llama70b-chat")
    assert lifetime_hours(chat) == 720  # duration
    spec = load_spec(ROOT / "examples" / "guanaco-65b.yaml").model_copy(update={"teardown": None})
    no_ttl = plan(spec, CATALOG)
    assert no_ttl.choice is not None
    assert lifetime_hours(no_ttl) == pytest.approx(no_ttl.choice.cost.hours * 1.5 + 1)


def test_deployment_carries_the_plan() -> None:
    d, result = deployment("llama8b-fp8")
    assert result.choice is not None
    assert (d.cloud, d.region, d.instance_type, d.market) == (
        result.choice.offer.cloud,
        result.choice.offer.region,
        result.choice.offer.instance.name,
        result.choice.offer.market,
    )
    assert d.nodes == result.choice.shape.instances and d.nodes_per_replica == 1
    assert d.tags()["gpufit:expires-at"] == iso_utc(d.expires_at)
    assert d.labels()["gpufit-expires-at"] == gcp_label_time(d.expires_at)
    assert [d.role(i) for i in range(3)] == [(0, 0), (0, 1), (0, 2)]


def test_expiry_encodings_round_trip() -> None:
    moment = datetime(2026, 12, 4, 13, 5, 9, tzinfo=UTC)
    assert parse_iso_utc(iso_utc(moment)) == moment
    assert gcp_label_time(moment) == "2026-12-04t13-05-09z"
    assert parse_gcp_label_time(gcp_label_time(moment)) == moment
    for bad in ("2026-12-04", "tomorrow"):
        with pytest.raises(ValueError):
            parse_iso_utc(bad)
    with pytest.raises(ValueError):
        parse_gcp_label_time("2026-12-04T13:05:09Z")


def test_deadline_must_follow_creation() -> None:
    _, result = deployment("sdxl-batch")
    with pytest.raises(ValueError, match="not after"):
        deployment_from_plan(
            result, stack="s", project="p", created_at=NOW, expires_at=NOW - timedelta(hours=1)
        )


def test_commands_with_comments_or_continuations_keep_the_script_valid() -> None:
    d, _ = deployment("sdxl-batch")
    for command in ("python train.py  # resume from outputs", "python a.py &&", "echo one; \\", "it's"):
        script = render(replace(d, command=command, checkpoint_command=command), "bkt", NodeRole(0, 1, ""))
        assert bash_syntax_ok(script), command


def test_multi_node_checkpointed_spot_stays_up_after_a_failure() -> None:
    d, _ = deployment("llama70b-full-ft", **MULTI_NODE)
    assert d.nodes_per_replica == 2 and d.market == "spot" and d.fault_tolerance == "checkpointed"
    script = render(d, "bkt", NodeRole(1, 2, "10.1.2.3", 1))
    assert "--max-restarts=3" in script
    assert 'if [ "$status" -eq 0 ]; then log "job finished: powering off"; poweroff; else' in script


def test_a_clock_deadline_is_kept_by_later_updates_and_a_pinned_one_moves() -> None:
    from providers.base import DEADLINE_PROPERTIES, deadline_ignore_changes

    d, result = deployment("guanaco-65b")
    assert not d.deadline_pinned and deadline_ignore_changes(d) == list(DEADLINE_PROPERTIES)
    assert {"tags", "labels", "userData", "metadata", "scheduleExpression"} <= set(DEADLINE_PROPERTIES)
    pinned = deployment_from_plan(
        result, stack="dev", project="gpufit", created_at=NOW, expires_at=NOW + timedelta(hours=5)
    )
    assert pinned.deadline_pinned and deadline_ignore_changes(pinned) == []


# ------------------------------------------------------------------------- fleet group members


@pytest.mark.parametrize("stack", ["sdxl-batch", "guanaco-65b", "llama13b-gcp", "llama70b-chat"])
def test_group_member_scripts_are_valid_bash_and_leave_their_group(stack: str) -> None:
    from machine.boot import LEAVE_GROUP_SCRIPT, FleetGroup, leave_group_script

    d, _ = deployment(stack)
    group = FleetGroup(d.cloud, d.region, d.group_name)
    script = render(d, "bucket-x", NodeRole(0, 1, ""), group)
    assert bash_syntax_ok(script) and bash_syntax_ok(as_boot_service(script))
    leave = leave_group_script(group)
    assert bash_syntax_ok(leave) and leave in script  # installed by the boot script
    assert f"export GPUFIT_GROUP={d.group_name}" in script and "NODE_PREFIX=fleet" in script
    # the deadline: a timer that leaves the group, then the plain power-off 5 minutes later
    assert f"--unit=gpufit-deadline {LEAVE_GROUP_SCRIPT} deadline" in script
    assert 'shutdown -h +"$(( seconds / 60 + 5 ))"' in script
    assert 'stop_machine "past the deadline at boot"' in script
    if d.cloud == "aws":
        assert f'--region {d.region} --instance-id "$id"' in leave
        assert "--should-decrement-desired-capacity" in leave
        assert f'if [ "$group" = {d.group_name} ]; then' in leave
    else:
        assert f"delete-instances {d.group_name} --region {d.region}" in leave
    if d.runs_to_completion:
        assert script.rstrip().endswith('stop_machine "job finished"')
    else:  # a service stays up: only the deadline removes it
        assert 'stop_machine "job finished"' not in script


def test_leave_group_script_passes_shellcheck() -> None:
    import shutil

    from machine.boot import FleetGroup, leave_group_script

    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    for cloud in ("aws", "gcp"):
        found = subprocess.run(
            ["shellcheck", "-s", "bash", "-"],
            input=leave_group_script(FleetGroup(cloud, "us-east-2", "gpufit-w-s")),
            text=True,
            capture_output=True,
            check=False,
        )
        assert found.returncode == 0, found.stdout


def test_a_group_member_that_finishes_leaves_after_syncing() -> None:
    from machine.boot import FleetGroup

    d, _ = deployment("sdxl-batch")
    script = render(d, "b", NodeRole(0, 1, ""), FleetGroup("aws", d.region, d.group_name))
    run = script.index("bash -c 'python generate.py")
    assert run < script.rindex("sync_outputs") < script.rindex('stop_machine "job finished"')
    assert "\npoweroff\n" not in script[run:]  # a bare power-off would make the group relaunch it


def test_deployment_carries_the_fleet_in_plan_order() -> None:
    d, result = deployment("sdxl-batch")
    assert d.grouped
    assert [m.instance_type for m in d.members] == [
        result.choice.offer.instance.name,  # type: ignore[union-attr]
        *(f.offer.instance.name for f in result.fallbacks),
    ]
    # a batch fleet of several sizes: each machine counts for the replicas it holds
    assert [m.weighted_capacity for m in d.members] == [
        result.choice.shape.replicas_per_instance,  # type: ignore[union-attr]
        *(f.weighted_capacity for f in result.fallbacks),
    ]
    assert {m.weighted_capacity for m in d.members} == {1, 8}
    assert d.capacity_units == result.fleet_units
    multi, _ = deployment("llama70b-full-ft", **MULTI_NODE)
    assert multi.nodes_per_replica == 2 and not multi.grouped
    single, _ = deployment("llama70b-full-ft")  # the stack's own plan: one 8 × B200 node, in a group
    assert single.nodes_per_replica == 1 and single.grouped


def _run_replica_env(d: Any, machine_type: str, gpus: int, tmp_path: Any) -> dict[str, str]:
    """``replica_env`` executed with a fake metadata server (curl answering the machine type)
    and a fake ``nvidia-smi -L`` listing ``gpus`` GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    answer = f'case "$*" in *api/token*) echo tok;; *) echo {machine_type};; esac'
    (bin_dir / "curl").write_text(f"#!/bin/bash\n{answer}\n")
    lines = "".join(f"GPU {i}: NVIDIA X (UUID: GPU-{i})\\n" for i in range(gpus))
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/bash\nprintf '{lines}'\n")
    for tool in ("curl", "nvidia-smi"):
        (bin_dir / tool).chmod(0o755)
    script = replica_env(d) + '\necho "$GPUFIT_TP $GPUFIT_GPUS $GPUFIT_REPLICAS"'
    out = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    ).stdout.split()
    return dict(zip(("tp", "gpus", "replicas"), out, strict=True))


def test_each_machine_derives_its_replicas_from_its_gpus_and_its_types_tp(tmp_path: Any) -> None:
    """A batch fleet mixing p4d (TP 4) and p5 (TP 2) machines: each runs GPUs ÷ its own TP
    workers, read on the machine (metadata and nvidia-smi), not from the plan's choice."""
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / "09-mixtral-synthetic-data.yaml")
    result = plan(spec, CATALOG)
    d = deployment_from_plan(result, stack="dev", project="gpufit", created_at=NOW)
    tps = {m.machine_type: m.tensor_parallel for m in d.members}
    assert tps["p4d.24xlarge"] == 4 and tps["p5.48xlarge"] == 2
    assert _run_replica_env(d, "p4d.24xlarge", 8, tmp_path) == {"tp": "4", "gpus": "8", "replicas": "2"}
    assert _run_replica_env(d, "p5.48xlarge", 8, tmp_path) == {"tp": "2", "gpus": "8", "replicas": "4"}
    # a type the plan did not list takes the choice's TP; no GPU visible yet: the plan's count
    assert _run_replica_env(d, "p9.huge", 0, tmp_path) == {"tp": "4", "gpus": "8", "replicas": "2"}
    script = render(d, "b", NodeRole(0, 1, ""), FleetGroup("aws", d.region, d.group_name))
    job = script.index("bash -c 'python generate.py")
    assert script.index("export GPUFIT_TP GPUFIT_GPUS GPUFIT_REPLICAS") < job
    gcp = replace(d, cloud="gcp")
    assert "computeMetadata/v1/instance/machine-type" in replica_env(gcp)
