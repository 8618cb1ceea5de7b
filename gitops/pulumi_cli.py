"""The Pulumi project in a folder, through the Automation API, which drives the Pulumi CLI as a
subprocess (https://www.pulumi.com/docs/iac/using-pulumi/automation-api/): the CLI must be on
PATH, and ``pulumi.automation`` is imported only once it is (off ``gpufit plan``'s path)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


class PulumiProject:
    """The Pulumi project in ``work_dir``; its stacks are selected by name."""

    def __init__(self, work_dir: Path) -> None:
        if shutil.which("pulumi") is None:
            raise RuntimeError(
                "the Pulumi CLI is not on PATH: install it (https://www.pulumi.com/docs/install/)"
            )
        from pulumi import automation as auto

        self._auto = auto
        self._work_dir = str(work_dir)

    def _stack(self, name: str) -> Any:
        return self._auto.select_stack(stack_name=name, work_dir=self._work_dir)
