"""The Pulumi Automation API side of ``gpufit up``: the project's own ``__main__.py`` (a local
program, ``select_stack(stack_name, work_dir=project)``), so ``gpufit up`` deploys exactly what
``pulumi up`` would. It drives the Pulumi CLI (``pulumi.automation`` runs it as a subprocess),
which must be on PATH with the configured state backend."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from gitops.failover import DeployError
from gitops.pulumi_cli import PulumiProject

EXCLUDE_KEY = "gpufit:workload.placement.exclude"
"""Where the exclusions live in the stack's config (a ``--path`` key): the stack file under
``stacks/`` shows them, and the spec hash a lock checks covers them."""
ATTEMPT_KEY = "gpufit:workload.placement.attempt"
"""Where ``gpufit up`` pins the listed fallback it is trying (``placement.attempt``)."""


def attempt_config(attempt: dict[str, str] | None) -> list[tuple[str, str]]:
    """The ``--path`` keys and values that write the pinned attempt (none: no keys)."""
    return [(f"{ATTEMPT_KEY}.{key}", str(value)) for key, value in (attempt or {}).items()]


def exclusion_config(exclusions: list[dict[str, str]]) -> list[tuple[str, str]]:
    """The ``--path`` keys and values that write ``exclusions`` as a list of objects, in order
    (an index equal to the list's length appends:
    https://www.pulumi.com/docs/iac/concepts/config/#structured-configuration)."""
    return [
        (f"{EXCLUDE_KEY}[{index}].{key}", str(value))
        for index, entry in enumerate(exclusions)
        for key, value in entry.items()
    ]


class AutomationWorkspace(PulumiProject):
    """A stack of the Pulumi project in ``work_dir``, through the Automation API."""

    def up(self, stack: str, log: Callable[[str], None]) -> dict[str, Any]:
        try:
            result = self._stack(stack).up(on_output=log, color="never")
        except self._auto.errors.CommandError as err:
            raise DeployError(str(err)) from None
        return {key: item.value for key, item in result.outputs.items()}

    def record_exclusions(self, stack: str, exclusions: list[dict[str, str]]) -> None:
        self._replace_config(stack, EXCLUDE_KEY, exclusion_config(exclusions))

    def record_attempt(self, stack: str, attempt: dict[str, str] | None) -> None:
        self._replace_config(stack, ATTEMPT_KEY, attempt_config(attempt))

    def _replace_config(self, stack: str, key: str, pairs: list[tuple[str, str]]) -> None:
        """Remove ``key`` from the stack's config, then write ``pairs`` in one `pulumi config
        set-all --path` (Stack.set_all_config): no half-written value."""
        handle = self._stack(stack)
        with contextlib.suppress(self._auto.errors.CommandError):  # none recorded yet
            handle.remove_config(key, path=True)
        values = {k: self._auto.ConfigValue(value=v) for k, v in pairs}
        if values:
            handle.set_all_config(values, path=True)

    def outputs(self, stack: str) -> dict[str, Any]:
        """The stack's outputs now (none before its first ``pulumi up``)."""
        return {key: item.value for key, item in self._stack(stack).outputs().items()}

    def destroy(self, stack: str, log: Callable[[str], None]) -> None:
        try:
            self._stack(stack).destroy(on_output=log, color="never")
        except self._auto.errors.CommandError as err:
            raise DeployError(str(err)) from None
