"""The machine's lifecycle policy as numbers: how long each stop may take, when the in-VM
deadline fires, how often it polls and syncs, how many times a failed job is retried and a
machine replaced. Pure: the boot script renders these, the cloud components size their
lifecycle hook and health checks from them, and the README states them.

Sources for the clouds' own figures:

- AWS Spot: "a warning that is issued two minutes before Amazon EC2 stops or terminates your
  Spot Instance" and "We recommend that you check for these interruption notices every 5
  seconds" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html);
  the rebalance recommendation is polled as often
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html).
- AWS lifecycle hooks: ``HeartbeatTimeout`` "from 30 to 7200 seconds"; an instance may stay in
  a wait state at most 48 hours or 100 × the heartbeat timeout
  (https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_PutLifecycleHook.html,
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/lifecycle-hooks.html).
- GCP: shutdown scripts get "90 seconds after you stop or delete an instance" and "30
  seconds after instance preemption begins", best effort
  (https://cloud.google.com/compute/docs/shutdownscript#limitations).
- GCP autohealing: ``initialDelaySec`` between 0 and 3600 (Compute API
  ``InstanceGroupManagerAutoHealingPolicy``).
- torchrun's c10d rendezvous: ``join_timeout`` defaults to 600 s; the store lives on the host
  node (https://pytorch.org/docs/stable/elastic/run.html,
  https://pytorch.org/docs/stable/elastic/rendezvous.html).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deployment import DOWNLOAD_MB_PER_S, Deployment

SPOT_POLL_S = 5
AWS_SPOT_NOTICE_S = 120
GCP_SPOT_NOTICE_S = 30
GCP_SHUTDOWN_S = 90
HOOK_HEARTBEAT_MIN_S = 30
HOOK_HEARTBEAT_MAX_S = 7200
AUTOHEALING_DELAY_MAX_S = 3600

CHECKPOINT_HOOK_S = 600
"""How long ``job.checkpoint_command`` may run at a planned stop (a gpufit bound: the stop
must still happen)."""
JOB_STOP_GRACE_S = 120
"""From SIGTERM to SIGKILL of the job's process group at a planned stop."""
UPLOAD_MB_PER_S = DOWNLOAD_MB_PER_S
"""Assumed upload rate to the bucket for sizing the final sync (the same stated assumption as
downloads, ``deployment.launch.DOWNLOAD_MB_PER_S``; errs long)."""
FINAL_SYNC_MIN_S = 300
"""The final sync's bound when no checkpoint size is known (outputs since the last periodic
sync)."""

RDZV_PORT = 29400
"""torchrun's c10d rendezvous store port on the host node (its default)."""
RDZV_JOIN_TIMEOUT_S = 900
"""How long surviving nodes wait in a re-rendezvous for a lost node to come back: longer than
an instance takes to be relaunched and boot (minutes), a quarter hour at most of idle GPUs."""

REPLACEMENTS_PER_MACHINE = 2
"""A group may launch this many machines in place of failed ones per machine of the plan
(counted in the bucket under ``status/replacements/``); past it, a failing machine leaves its
group for good (decrementing it) and says why."""
RETRY_PAUSE_S = 60
LEAVE_WAIT_S = 300
"""After asking its group to remove it, a machine waits this long before powering off."""
ABORT_POLL_S = 60
"""How often the nodes of a multi-node job look for a peer's ``status/abort.json``."""
HEALTH_POLL_S = 10
"""How often a new server's ``/health`` is tried while it loads."""
HEALTH_WATCH_S = 30
HEALTH_FAILURES = 10
"""A serving machine whose server fails this many checks in a row (5 minutes) is replaced."""
READINESS_PATH = "/gpufit/alive"
READINESS_BOOT_S = 900
"""The autohealing initial delay: boot, then the readiness responder starts first thing."""


@dataclass(frozen=True)
class Timing:
    """Every duration the machine script uses, in seconds (tests shrink the real-time ones)."""

    stop_margin: int  # the in-VM planned stop fires this long before the deadline
    hook: int
    job_stop: int
    final_sync: int
    notice_hook: int
    notice_sync: int
    shutdown_hook: int
    shutdown_job_stop: int
    shutdown_sync: int
    sync_every: int
    poll: int = SPOT_POLL_S
    abort_poll: int = ABORT_POLL_S
    retry_pause: int = RETRY_PAUSE_S
    leave_wait: int = LEAVE_WAIT_S
    health_poll: int = HEALTH_POLL_S
    health_watch: int = HEALTH_WATCH_S
    health_failures: int = HEALTH_FAILURES
    heartbeat: int = HOOK_HEARTBEAT_MAX_S
    join_timeout: int = RDZV_JOIN_TIMEOUT_S

    @property
    def stop_budget(self) -> int:
        """A planned stop from start to the last byte synced."""
        return self.hook + self.job_stop + self.final_sync


def final_sync_s(d: Deployment) -> int:
    """One training checkpoint at ``UPLOAD_MB_PER_S`` (what a stop may have left unsynced since
    the last periodic sync), at least ``FINAL_SYNC_MIN_S``."""
    return max(FINAL_SYNC_MIN_S, math.ceil(d.checkpoint_gb * 1000 / UPLOAD_MB_PER_S))


def timing(d: Deployment) -> Timing:
    """The deployment's timing. The planned stop fires ``stop_budget`` before the deadline
    (at most a quarter of the machine's life), so that the hook, the job's exit and the final
    sync end before the cloud's own deadline. Notice budgets split the cloud's warning: AWS
    two minutes (50 s hook, 60 s sync), GCP spot 30 s (8 s + 15 s); a shutdown (GCP stop or
    delete, 90 s; EC2's is not documented, taken the same) 20 s hook, 10 s for the job to
    exit, 55 s sync (GCP spot: 5 + 3 + 15 s)."""
    hook = CHECKPOINT_HOOK_S if d.checkpoint_command else 0
    sync = final_sync_s(d)
    budget = hook + JOB_STOP_GRACE_S + sync
    gcp_spot = d.cloud == "gcp" and d.spot
    return Timing(
        stop_margin=min(budget, max(60, d.lifetime_seconds // 4)),
        hook=hook,
        job_stop=JOB_STOP_GRACE_S,
        final_sync=sync,
        notice_hook=8 if gcp_spot else 50,
        notice_sync=15 if gcp_spot else 60,
        shutdown_hook=5 if gcp_spot else 20,
        shutdown_job_stop=3 if gcp_spot else 10,
        shutdown_sync=15 if gcp_spot else 55,
        sync_every=d.checkpoint_interval_s,
        heartbeat=lifecycle_heartbeat_s(d),
    )


def lifecycle_heartbeat_s(d: Deployment) -> int:
    """The AWS terminating hook's heartbeat timeout: the stop budget within the API's 30-7200 s;
    a longer stop sends heartbeats (every half timeout) while it syncs."""
    budget = (CHECKPOINT_HOOK_S if d.checkpoint_command else 0) + JOB_STOP_GRACE_S + final_sync_s(d)
    return max(HOOK_HEARTBEAT_MIN_S, min(HOOK_HEARTBEAT_MAX_S, budget))


def max_replacements(d: Deployment) -> int:
    """Machines a group may launch in place of failed ones, in all."""
    return REPLACEMENTS_PER_MACHINE * max(1, d.nodes)


def load_bound_s(d: Deployment) -> int:
    """How long a new server (or a batch job's engine) may take to answer ``/health``: the
    plan's grace period."""
    engine = d.server or d.batch_engine
    return engine.grace_seconds if engine is not None else 0


def load_problem(d: Deployment) -> str | None:
    """Why the server cannot be expected to serve before the deadline (None when it can)."""
    bound = load_bound_s(d)
    if d.server is None or bound < d.lifetime_seconds:
        return None
    return (
        f"the model server may take {bound // 60} min to load its weights, longer than the "
        f"machines live ({d.lifetime_seconds // 60} min): give a longer duration or teardown.ttl"
    )
