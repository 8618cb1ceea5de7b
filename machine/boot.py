"""The boot script every gpufit machine runs (cloud-init user data / GCP startup-script).

It arms an in-VM shutdown at the deadline (a backstop to the cloud-side deadline), watches
for a spot interruption notice (AWS IMDSv2 ``spot/instance-action`` every 5 s; GCP metadata
``instance/preempted``) and then runs the checkpoint hook and syncs outputs, runs the job
(through ``torchrun`` rendezvous on node 0 when the plan spans nodes), syncs its outputs to
the checkpoint bucket, and powers off when a job ends so billing ends with it.

A machine of a fleet group (``FleetGroup``) must not merely power off: its group would launch a
replacement. It leaves its group instead, decrementing the group's desired capacity (AWS
``terminate-instance-in-auto-scaling-group --should-decrement-desired-capacity``, GCP
``instance-groups managed delete-instances``), when its job ends, at the deadline (a transient
systemd timer, the in-VM layer under the cloud-side scale-to-0) and when it boots past the
deadline; the plain power-off stays as the last resort.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from deployment import Deployment
from machine.serving import SecretRefs, serving_script

RENDEZVOUS_PORT = 29500
"""torchrun's c10d rendezvous port on node 0 (PyTorch's default master port)."""

TORCHRUN_MAX_RESTARTS = 3
"""torchrun restarts the workers this many times when a peer drops out (elastic rendezvous),
so a node that comes back after a spot interruption rejoins the job."""

SPOT_POLL_SECONDS = 5
"""AWS recommends polling ``spot/instance-action`` every 5 seconds (two-minute notice)."""

_AWS_IMDS = """\
imds_token() { curl -sf -X PUT http://169.254.169.254/latest/api/token \\
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600'; }"""

_AWS_WATCH = """\
interrupted() {{
  code=$(curl -s -o /dev/null -w '%{{http_code}}' -H "X-aws-ec2-metadata-token: $(imds_token)" \\
    http://169.254.169.254/latest/meta-data/spot/instance-action)
  [ "$code" = "200" ]
}}
watch_interruption() {{
  while ! interrupted; do sleep {poll}; done
  log "spot interruption notice received"
  on_interruption
}}"""

_GCP_WATCH = """\
watch_interruption() {
  until curl -sf -H 'Metadata-Flavor: Google' \\
      'http://metadata.google.internal/computeMetadata/v1/instance/preempted?wait_for_change=true' \\
      | grep -q TRUE; do sleep 1; done
  log "spot preemption notice received"
  on_interruption
}"""

_SYNC = {
    "aws": 'aws s3 sync --only-show-errors "$WORKDIR/outputs" "s3://$BUCKET/$NODE_PREFIX/outputs"',
    "gcp": 'gcloud storage rsync --recursive "$WORKDIR/outputs" "gs://$BUCKET/$NODE_PREFIX/outputs"',
}
_RESTORE = {
    "aws": 'aws s3 sync --only-show-errors "s3://$BUCKET/$NODE_PREFIX/outputs" "$WORKDIR/outputs"',
    "gcp": 'gcloud storage rsync --recursive "gs://$BUCKET/$NODE_PREFIX/outputs" "$WORKDIR/outputs"',
}
"""Pulled before the job starts: a machine that replaces an interrupted one (a new GCP VM, a
fresh disk) starts from the last synced checkpoint."""


LEAVE_GROUP_SCRIPT = "/usr/local/sbin/gpufit-leave-group"
DEADLINE_BACKSTOP_GRACE_MIN = 5
"""A grouped machine's plain power-off comes this many minutes after its deadline: first it
leaves its group (so nothing relaunches it); the power-off only catches a failed leave."""


@dataclass(frozen=True)
class FleetGroup:
    """The fleet group a machine belongs to: its cloud, region and name."""

    cloud: str
    region: str
    name: str


def leave_group_script(group: FleetGroup) -> str:
    """The script a grouped machine runs to leave its group with the group's desired capacity
    decremented, then power off. AWS: the instance may call
    ``TerminateInstanceInAutoScalingGroup`` only on this group (IAM), and checks first that
    DescribeAutoScalingInstances names this group; the CLI retries on its own (standard mode).
    GCP: ``delete-instances`` on the regional MIG decrements its target size (Compute API
    ``regionInstanceGroupManagers.deleteInstances``)."""
    g = shlex.quote(group.name)
    r = shlex.quote(group.region)
    if group.cloud == "aws":
        body = f"""export AWS_RETRY_MODE=standard AWS_MAX_ATTEMPTS=8
token=$(curl -sf -X PUT http://169.254.169.254/latest/api/token \\
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
id=$(curl -sf -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/instance-id)
group=$(aws autoscaling describe-auto-scaling-instances --region {r} --instance-ids "$id" \\
  --query 'AutoScalingInstances[0].AutoScalingGroupName' --output text)
if [ "$group" = {g} ]; then
  aws autoscaling terminate-instance-in-auto-scaling-group --region {r} --instance-id "$id" \\
    --should-decrement-desired-capacity || echo "gpufit: could not leave group {group.name}"
else
  echo "gpufit: $id is not in group {group.name} (found '$group')"
fi"""
    else:
        body = f"""meta=http://metadata.google.internal/computeMetadata/v1/instance
name=$(curl -sf -H 'Metadata-Flavor: Google' "$meta/name")
gcloud compute instance-groups managed delete-instances {g} --region {r} \\
  --instances "$name" --quiet || echo "gpufit: could not leave group {group.name}"
"""
    return f"""#!/bin/bash
# gpufit: leave fleet group {group.name} ($1), decrementing its size, then power off.
set -u
{body}
poweroff
"""


def replica_env(d: Deployment) -> str:
    """Shell that exports the machine's share of the work, derived on the machine itself:
    ``GPUFIT_TP`` (its instance type's tensor parallelism in the plan: a batch fleet mixes
    types that run the job at different TP), ``GPUFIT_GPUS`` (``nvidia-smi -L``; the plan's
    count when the driver is not up) and ``GPUFIT_REPLICAS`` = GPUs ÷ TP, the workers of the
    job this machine runs (a fleet's machines are weighted by it: ``selector.fallbacks``).
    Self-contained (it reads the machine's type from the metadata server with its own calls),
    so the boot script may place it anywhere before the job."""
    cases = "\n".join(
        f"  {shlex.quote(m.machine_type)}) GPUFIT_TP={m.tensor_parallel} ;;"
        for m in {m.machine_type: m for m in d.members}.values()
    )
    if d.cloud == "aws":
        machine_type = (
            "t=$(curl -sf -X PUT http://169.254.169.254/latest/api/token "
            "-H 'X-aws-ec2-metadata-token-ttl-seconds: 60'); curl -sf -H \"X-aws-ec2-metadata-token: $t\" "
            "http://169.254.169.254/latest/meta-data/instance-type"
        )
    else:
        machine_type = (
            "curl -sf -H 'Metadata-Flavor: Google' "
            "http://metadata.google.internal/computeMetadata/v1/instance/machine-type | sed 's|.*/||'"
        )
    return f"""gpufit_machine_type() {{ {machine_type}; }}
case "$(gpufit_machine_type)" in
{cases}
  *) GPUFIT_TP={d.tensor_parallel} ;;
esac
GPUFIT_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "${{GPUFIT_GPUS:-0}}" -ge 1 ] 2>/dev/null || GPUFIT_GPUS={d.gpu_count}
GPUFIT_REPLICAS=$(( GPUFIT_GPUS / GPUFIT_TP ))
[ "$GPUFIT_REPLICAS" -ge 1 ] || GPUFIT_REPLICAS=1
export GPUFIT_TP GPUFIT_GPUS GPUFIT_REPLICAS"""


@dataclass(frozen=True)
class NodeRole:
    """Where one machine stands in a multi-node job."""

    rank: int
    nodes: int
    master_addr: str  # node 0's private address; "" on node 0 itself
    machine: int = 0  # index among all the deployment's machines (names its bucket prefix)


def render(
    deployment: Deployment,
    bucket: str,
    role: NodeRole,
    group: FleetGroup | None = None,
    secrets: SecretRefs | None = None,
) -> str:
    """The bash boot script for one node of ``deployment`` (a member of ``group`` when the
    machines run in a fleet group). A deployment with a model server runs it in place of a job
    command, with its secrets fetched by reference from ``secrets``."""
    d = deployment
    if d.server is not None and secrets is None:
        raise ValueError(f"{d.name}: a model server needs its secrets' references")
    expires_epoch = int(d.expires_at.timestamp())
    watch = _AWS_WATCH.format(poll=SPOT_POLL_SECONDS) if d.cloud == "aws" else _GCP_WATCH
    if d.cloud == "aws":
        watch = f"{_AWS_IMDS}\n{watch}"
    prefix = "fleet" if group else f"machine-{role.machine}"
    checkpoint = d.checkpoint_command or "true"
    master = role.master_addr or "$(hostname -I | cut -d' ' -f1)"
    if d.server is not None and secrets is not None:
        run = serving_script(d.server, secrets)
    elif d.command is None:
        run = 'log "no job command: the machine is ready; it powers off at the deadline"'
    elif role.nodes > 1 and d.task != "serve":
        run = (
            f"torchrun --nnodes={role.nodes} --node-rank={role.rank} --nproc-per-node={d.gpu_count} "
            f"--max-restarts={TORCHRUN_MAX_RESTARTS} "
            f"--rdzv-backend=c10d --rdzv-id={shlex.quote(d.name)} "
            '--rdzv-endpoint="$GPUFIT_MASTER_ADDR:$GPUFIT_MASTER_PORT" '
            f"{d.command}"
        )
    else:
        run = d.command
    if not d.runs_to_completion:
        finish = 'log "job exited ($status); the machine stays up until the deadline"\nsync_outputs'
    elif role.nodes > 1 and d.spot and d.resumes_after_interruption:
        # A peer's spot interruption fails the others' collective: powering off here would stop
        # this node for good (a user stop disables its persistent request), stranding the job.
        finish = (
            'sync_outputs\nif [ "$status" -eq 0 ]; then log "job finished: powering off"; poweroff; '
            'else log "job failed ($status): staying up for the peers to resume, until the deadline"; fi'
        )
    elif group is not None:
        finish = (
            f'log "job finished (exit $status): syncing outputs and leaving group {group.name}"\n'
            f'sync_outputs\nstop_machine "job finished"'
        )
    else:
        finish = 'log "job finished (exit $status): syncing outputs and powering off"\nsync_outputs\npoweroff'
    if group is not None:
        deadline = f"""install_leave_group
# Backstop deadline: leave the group (decrementing it) at expiry even if the cloud-side
# scale-to-0 never fires; a plain power-off {DEADLINE_BACKSTOP_GRACE_MIN} minutes later
# catches a failed leave.
seconds=$(( {expires_epoch} - $(date +%s) ))
if [ "$seconds" -le 0 ]; then
  log "past the deadline at boot"; stop_machine "past the deadline at boot"; exit 0
fi
systemd-run --on-active="${{seconds}}s" --unit=gpufit-deadline {LEAVE_GROUP_SCRIPT} deadline \\
  || log "could not arm the deadline timer"
shutdown -h +"$(( seconds / 60 + {DEADLINE_BACKSTOP_GRACE_MIN} ))" "gpufit deadline" || true"""
        helpers = f"""install_leave_group() {{
  cat > {LEAVE_GROUP_SCRIPT} <<'GPUFIT_LEAVE_EOF'
{leave_group_script(group)}GPUFIT_LEAVE_EOF
  chmod 700 {LEAVE_GROUP_SCRIPT}
}}
stop_machine() {{ {LEAVE_GROUP_SCRIPT} "$1"; }}"""
    else:
        deadline = f"""# Backstop deadline: power off at expiry even if the cloud-side deadline never fires.
minutes=$(( ({expires_epoch} - $(date +%s)) / 60 ))
if [ "$minutes" -le 0 ]; then log "past the deadline at boot"; poweroff; fi
shutdown -h +"$minutes" "gpufit deadline" || true"""
        helpers = "stop_machine() { poweroff; }"

    return f"""#!/bin/bash
# gpufit boot script: workload {d.workload}, stack {d.stack}, node {role.rank + 1} of {role.nodes}
# expires at {d.expires_at.isoformat()} (also enforced by the cloud)
set -uo pipefail
export WORKDIR={shlex.quote(d.workdir)} BUCKET={shlex.quote(bucket)} NODE_PREFIX={prefix}
export GPUFIT_NODE_RANK={role.rank} GPUFIT_NNODES={role.nodes} GPUFIT_EXPIRES_AT={expires_epoch}
export GPUFIT_MASTER_ADDR="{master}" GPUFIT_MASTER_PORT={RENDEZVOUS_PORT}
export GPUFIT_GROUP={shlex.quote(group.name) if group else '""'}
mkdir -p "$WORKDIR/outputs" && cd "$WORKDIR"
log() {{ echo "gpufit: $*" | systemd-cat -t gpufit 2>/dev/null || echo "gpufit: $*"; }}
{helpers}

{deadline}

sync_outputs() {{ {_SYNC[d.cloud]} || log "output sync failed"; }}
on_interruption() {{
  ( cd "$WORKDIR" && bash -c {shlex.quote(checkpoint)} ) || log "checkpoint hook failed"
  sync_outputs
}}
{watch}
{"watch_interruption &" if d.spot else "# on-demand: no interruption watcher"}

{_RESTORE[d.cloud]} || log "nothing to restore from the bucket"

{replica_env(d)}

# The job runs in a bash of its own: a comment, a dangling && or a syntax error in the
# command fails the job, never the rest of this script.
bash -c {shlex.quote(run)}
status=$?
{finish}
"""


SERVICE_UNIT = """[Unit]
Description=gpufit job (runs at every boot, so a stopped spot instance resumes its job)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=/usr/local/sbin/gpufit-boot.sh
Restart=no

[Install]
WantedBy=multi-user.target
"""


def as_boot_service(script: str) -> str:
    """Wrap ``script`` as EC2 user data that installs it as a systemd service.

    EC2 runs user data on the first boot only; a persistent spot instance that was stopped by
    an interruption must resume its job when capacity returns, so the script runs as a
    service enabled at every boot (GCP runs startup-script at every boot by itself)."""
    return f"""#!/bin/bash
set -euo pipefail
install -d -m 755 /usr/local/sbin
cat > /usr/local/sbin/gpufit-boot.sh <<'GPUFIT_SCRIPT_EOF'
{script}GPUFIT_SCRIPT_EOF
chmod 700 /usr/local/sbin/gpufit-boot.sh
cat > /etc/systemd/system/gpufit-boot.service <<'GPUFIT_UNIT_EOF'
{SERVICE_UNIT}GPUFIT_UNIT_EOF
systemctl daemon-reload
systemctl enable --now gpufit-boot.service
"""
