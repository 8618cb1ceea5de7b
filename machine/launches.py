"""Every engine launch gpufit renders for its presets and example stacks (planned by
``deployment.launches``), as the argument lists the engines' own parsers receive: what
``scripts/dump_engine_flags.py`` replays through each pinned release's real parser, and what
the test suite checks against the committed flag dumps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from deployment import ServerLaunch
from machine.serving import SGLANG_CONFIG, engine_argv


@dataclass(frozen=True)
class LaunchCase:
    """One rendered launch: its label, the engine release, the argument list, and SGLang's
    config file (a placeholder key where the real one would be fetched on the machine)."""

    label: str
    engine: str
    version: str
    argv: tuple[str, ...]
    config: dict[str, str] | None = None
    config_path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "argv": list(self.argv),
            "config": self.config,
            "config_path": self.config_path,
        }


def launch_case(label: str, launch: ServerLaunch) -> LaunchCase:
    """The first replica's argument list of ``launch``, with SGLang's config file."""
    config = {"api-key": "gpufit-launch-check"} if launch.engine == "sglang" else None
    return LaunchCase(
        label,
        launch.engine,
        launch.engine_version,
        tuple(engine_argv(launch, 0)),
        config,
        SGLANG_CONFIG if config else None,
    )


def launch_cases(launches: Iterable[tuple[str, ServerLaunch]]) -> list[LaunchCase]:
    """Each labelled launch (``deployment.launches.server_launches``), rendered."""
    return [launch_case(label, launch) for label, launch in launches]
