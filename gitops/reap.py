"""``gpufit reap``: destroy the project's stacks whose ``expires_at`` output has passed.

The orchestration talks to stacks through ``StackBackend``: ``AutomationBackend`` uses
Pulumi's Automation API (it drives the Pulumi CLI against the configured state backend);
tests use a fake. Dry run by default: it lists what it would destroy and what that saves per
hour; ``--yes`` destroys. The clock is a parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from deployment import parse_iso_utc
from gitops.pulumi_cli import PulumiProject


class StackBackend(Protocol):
    def list_stacks(self) -> list[str]: ...

    def outputs(self, stack: str) -> dict[str, Any]: ...

    def destroy(self, stack: str) -> None: ...


@dataclass(frozen=True)
class ReapDecision:
    stack: str
    expires_at: datetime | None
    hourly_usd: float | None
    action: str  # "destroy" | "keep" | "skip"
    reason: str


def decide(stack: str, outputs: dict[str, Any], now: datetime, older_than: timedelta) -> ReapDecision:
    """Destroy a stack whose deadline passed more than ``older_than`` ago. A stack with no
    ``expires_at`` output (never deployed, or not gpufit's) is skipped, never destroyed."""
    raw = outputs.get("expires_at")
    hourly = outputs.get("hourly_usd")
    price = float(hourly) if isinstance(hourly, int | float) else None
    if not raw:
        return ReapDecision(
            stack, None, price, "skip", "no expires_at output (not deployed, or not gpufit's)"
        )
    try:
        expires = parse_iso_utc(str(raw))
    except ValueError:
        return ReapDecision(
            stack, None, price, "skip", f"expires_at {raw!r} is not a date; left for a person"
        )
    if now - expires > older_than:
        return ReapDecision(stack, expires, price, "destroy", f"expired {_ago(now - expires)} ago")
    if now >= expires:
        return ReapDecision(
            stack, expires, price, "keep", f"expired {_ago(now - expires)} ago, within --older-than"
        )
    return ReapDecision(stack, expires, price, "keep", f"expires in {_ago(expires - now)}")


def _ago(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f} h" if hours < 72 else f"{hours / 24:.1f} d"


@dataclass
class ReapReport:
    decisions: list[ReapDecision]
    destroyed: list[str]
    failed: dict[str, str]

    @property
    def hourly_saved(self) -> float:
        return sum(d.hourly_usd or 0.0 for d in self.decisions if d.action == "destroy")


def reap(
    backend: StackBackend,
    now: datetime,
    older_than: timedelta = timedelta(0),
    yes: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> ReapReport:
    decisions = []
    failed: dict[str, str] = {}
    for stack in sorted(backend.list_stacks()):
        try:
            outputs = backend.outputs(stack)
        except Exception as error:
            failed[stack] = f"could not read outputs: {error}"
            continue
        decisions.append(decide(stack, outputs, now, older_than))
    destroyed = []
    if yes:
        for decision in decisions:
            if decision.action != "destroy":
                continue
            log(f"destroying {decision.stack} ({decision.reason})")
            try:
                backend.destroy(decision.stack)
                destroyed.append(decision.stack)
            except Exception as error:
                failed[decision.stack] = f"destroy failed: {error}"
    return ReapReport(decisions, destroyed, failed)


class AutomationBackend(PulumiProject):
    """Stacks of the Pulumi project in ``work_dir``, through the Automation API."""

    def __init__(self, work_dir: Path) -> None:
        super().__init__(work_dir)
        self._workspace = self._auto.LocalWorkspace(work_dir=self._work_dir)

    def list_stacks(self) -> list[str]:
        return [s.name for s in self._workspace.list_stacks()]

    def outputs(self, stack: str) -> dict[str, Any]:
        return {key: item.value for key, item in self._stack(stack).outputs().items()}

    def destroy(self, stack: str) -> None:
        self._stack(stack).destroy(on_output=lambda line: None)
