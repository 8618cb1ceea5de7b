"""What the machines report in their bucket, read back: the objects the supervisor
(``machine/scripts/gpufit-machine.sh``) writes under ``status/``, parsed and summed up for
``gpufit status``. Pure: the cloud readers (``providers.aws.status``, ``providers.gcp.status``)
fetch the objects.

- ``status/machines/<machine>.json``: one per machine that ever booted, rewritten at every
  change: ``state`` (starting, running, retrying, serving, succeeded, interrupted, stopped,
  replacing, gave-up, failed, expired, idle), ``reason``, ``exit_code``, ``attempt`` of
  ``attempts_allowed``, ``node_rank``/``nodes``, ``group``, and times (epoch seconds);
- ``status/deployments/<deployment>/replacements/<machine>.json``: one per machine a group
  replaced because it failed (their count is bounded: ``replacements_allowed``);
- ``status/deployments/<deployment>/done/<machine>.json``: one per machine whose job exited 0;
  ``<deployment>`` is ``machine.boot.deployment_id`` (the machines' status objects name it), so
  an earlier deployment's markers in a retained bucket count for nothing here, and its
  machines are left out of the verdict;
- ``status/abort.json``: a node of a multi-node job gave up and stopped the others (why).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PREFIX = "status/"


class StatusReadError(Exception):
    """A bucket's status could not be read (the reason, one line)."""


FAILED_STATES = frozenset({"failed", "gave-up"})
FINAL_STATES = frozenset({"succeeded", "failed", "gave-up", "expired", "stopped", "replacing"})


@dataclass(frozen=True)
class MachineStatus:
    machine: str
    state: str
    reason: str
    exit_code: int | None
    attempt: int | None
    attempts_allowed: int | None
    node_rank: int | None
    nodes: int | None
    group: str
    updated_at: int | None
    started_at: int | None
    expires_at: int | None
    replacements_allowed: int | None
    deployment: str = ""

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MachineStatus:
        def num(key: str) -> int | None:
            value = doc.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(
            machine=str(doc.get("machine", "?")),
            state=str(doc.get("state", "?")),
            reason=str(doc.get("reason", "")),
            exit_code=num("exit_code"),
            attempt=num("attempt"),
            attempts_allowed=num("attempts_allowed"),
            node_rank=num("node_rank"),
            nodes=num("nodes"),
            group=str(doc.get("group", "")),
            updated_at=num("updated_at"),
            started_at=num("started_at"),
            expires_at=num("expires_at"),
            replacements_allowed=num("replacements_allowed"),
            deployment=str(doc.get("deployment", "")),
        )


@dataclass
class BucketStatus:
    """Every machine's last word, the replacement count and a multi-node abort."""

    machines: list[MachineStatus] = field(default_factory=list)
    replacements: int = 0
    done: int = 0
    abort: dict[str, Any] | None = None
    unreadable: list[str] = field(default_factory=list)  # keys that did not parse
    deployment: str = ""  # the newest machine's deployment: what is counted
    earlier: int = 0  # machines of earlier deployments, left out

    @property
    def replacements_allowed(self) -> int | None:
        allowed = [m.replacements_allowed for m in self.machines if m.replacements_allowed]
        return max(allowed) if allowed else None

    @property
    def verdict(self) -> str:
        """``failed`` (a machine failed or gave up, or a multi-node job aborted), ``succeeded``
        (every machine's job exited 0), ``running`` (some machine is still at work), else
        ``stopped`` or ``unknown`` (nothing reported yet)."""
        if not self.machines:
            return "unknown"
        if self.abort is not None or any(m.state in FAILED_STATES for m in self.machines):
            return "failed"
        if all(m.state == "succeeded" for m in self.machines):
            return "succeeded"
        if any(m.state not in FINAL_STATES for m in self.machines):
            return "running"
        return "stopped"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "machines": [m.__dict__ for m in self.machines],
            "replacements": self.replacements,
            "replacements_allowed": self.replacements_allowed,
            "done": self.done,
            "abort": self.abort,
            "unreadable": self.unreadable,
            "deployment": self.deployment,
            "earlier_machines": self.earlier,
        }


def parse(objects: dict[str, str]) -> BucketStatus:
    """The status objects (key → text), as one summary of the newest deployment (the one the
    most recently updated machine names); machines newest first."""
    found = BucketStatus()
    markers: dict[str, list[str]] = {}
    for key, text in sorted(objects.items()):
        name = key.removeprefix(PREFIX)
        if name.startswith("deployments/"):
            parts = name.split("/")
            if len(parts) == 4 and parts[2] in ("done", "replacements"):
                markers.setdefault(parts[1], []).append(parts[2])
        elif name.startswith(("replacements/", "done/")):
            markers.setdefault("", []).append(name.split("/", 1)[0])  # before deployment ids
        elif name in ("abort.json", "machines/") or name.startswith("machines/"):
            try:
                doc = json.loads(text)
            except ValueError:
                found.unreadable.append(key)
                continue
            if not isinstance(doc, dict):
                found.unreadable.append(key)
            elif name == "abort.json":
                found.abort = doc
            else:
                found.machines.append(MachineStatus.from_json(doc))
    found.machines.sort(key=lambda m: (-(m.updated_at or 0), m.machine))
    found.deployment = next((m.deployment for m in found.machines if m.deployment), "")
    if found.deployment:
        current = [m for m in found.machines if m.deployment in ("", found.deployment)]
        found.earlier = len(found.machines) - len(current)
        found.machines = current
        starts = [m.started_at for m in current if m.started_at is not None]
        at = found.abort.get("at") if found.abort else None
        if isinstance(at, int) and starts and at < min(starts):
            found.abort = None  # an earlier run's abort (the machines check the same)
    kinds = markers.get(found.deployment, [])
    found.done, found.replacements = kinds.count("done"), kinds.count("replacements")
    return found


def when(epoch: int | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def report(where: str, status: BucketStatus) -> list[str]:
    """The lines ``gpufit status`` prints."""
    lines = [f"{where}: {len(status.machines)} machine(s) reported; verdict: {status.verdict}"]
    if status.earlier:
        lines.append(f"not counted: {status.earlier} machine(s) of earlier deployments")
    if status.replacements or status.replacements_allowed:
        lines.append(f"replacements: {status.replacements} of {status.replacements_allowed or '?'} used")
    if status.done:
        lines.append(f"finished jobs: {status.done}")
    if status.abort is not None:
        lines.append(
            f"abort: node {status.abort.get('node_rank', '?')} ({status.abort.get('machine', '?')}) stopped "
            f"every node: {status.abort.get('reason', '')}"
        )
    rows = [["machine", "rank", "state", "attempt", "exit", "updated", "reason"]]
    for m in status.machines:
        attempt = f"{m.attempt}/{m.attempts_allowed}" if m.attempt else "-"
        rank = f"{m.node_rank}/{m.nodes}" if m.nodes and m.nodes > 1 else "-"
        code = "-" if m.exit_code is None else str(m.exit_code)
        rows.append([m.machine, rank, m.state, attempt, code, when(m.updated_at), m.reason])
    if status.machines:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]
    for key in status.unreadable:
        lines.append(f"unreadable: {key}")
    return lines
