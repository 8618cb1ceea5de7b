"""Every engine launch gpufit renders for its presets and example stacks, as the argument lists
the engines' own parsers receive: what ``scripts/dump_engine_flags.py`` replays through each
pinned release's real parser, and what the test suite checks against the committed flag dumps.

Each transformer preset is planned for each engine in the variants a user reaches: its default
(16-bit, a context within its maximum), FP8 weights and KV cache, images where it has a vision
encoder, the longest context its documented YaRN recipe allows, on a Hopper GPU (where SGLang's
FP8 KV format differs), and with the engine arguments a user adds for tool calling. A variant no
offer can run is listed with the reason instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployment import ServingError, server_launch
from machine.serving import SGLANG_CONFIG, engine_argv
from selector.catalog import Catalog
from selector.presets import arch_from_preset, preset_names, preset_serving
from selector.select import plan
from selector.spec import SpecError, load_spec, parse_spec

TOOL_ARGS = {
    "vllm": ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    "sglang": ["--tool-call-parser", "qwen25"],
}
"""Engine arguments a user adds to serve tool calls (Qwen's Hermes-style format; names from the
pinned releases' parser dumps)."""

HOPPER_TYPES = ["p5.4xlarge", "p5.48xlarge", "a3-highgpu-*"]


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


def _variants(preset: str, engine: str) -> Iterator[tuple[str, dict[str, Any]]]:
    arch = arch_from_preset(preset)
    limit = arch.context or 4096
    context = min(4096, limit)
    base: dict[str, Any] = {
        "task": "serve",
        "model": {"preset": preset},
        "serving": {"context_tokens": context, "concurrency": 4, "engine": engine},
    }
    yield "default", base
    if arch.quantized_format != "mxfp4":
        fp8 = {**base["serving"], "kv_cache_precision": "fp8"}
        yield "fp8", {**base, "precision": "fp8", "serving": fp8}
        yield (
            "fp8-hopper",
            {
                **base,
                "precision": "fp8",
                "serving": fp8,
                "placement": {"instance_types": HOPPER_TYPES},
            },
        )
    if arch.is_multimodal and arch.image_tokens:
        yield "images", {**base, "serving": {**base["serving"], "images_per_request": 2}}
    serving = preset_serving(preset)
    if serving.yarn_factor and serving.yarn_original:
        longest = int(serving.yarn_original * serving.yarn_factor)
        yield (
            "yarn",
            {
                **base,
                "serving": {**base["serving"], "context_tokens": longest, "rope_scaling": {"type": "yarn"}},
            },
        )
    if arch.family.startswith("qwen"):
        yield "tools", {**base, "serving": {**base["serving"], "engine_args": TOOL_ARGS[engine]}}


def _case(label: str, spec_doc: dict[str, Any], catalog: Catalog) -> LaunchCase | str:
    try:
        spec = parse_spec({"name": "launch-check", **spec_doc})
    except SpecError as err:
        return f"spec refused: {err}"
    return _launch(label, plan(spec, catalog))


def _launch(label: str, result: Any) -> LaunchCase | str:
    if result.choice is None:
        return f"no offer runs it ({result.status})"
    try:
        launch = server_launch(result)
    except ServingError as err:
        return str(err)
    if launch is None:
        return "starts no server"
    config = {"api-key": "gpufit-launch-check"} if launch.engine == "sglang" else None
    return LaunchCase(
        label,
        launch.engine,
        launch.engine_version,
        tuple(engine_argv(launch, 0)),
        config,
        SGLANG_CONFIG if config else None,
    )


def launch_cases(catalog: Catalog, stack_dirs: tuple[Path, ...] = ()) -> tuple[list[LaunchCase], list[str]]:
    """(every launch rendered, every variant not launchable with its reason)."""
    cases: list[LaunchCase] = []
    skipped: list[str] = []
    for preset in preset_names():
        if arch_from_preset(preset).kind != "transformer":
            continue
        for engine in ("vllm", "sglang"):
            for variant, doc in _variants(preset, engine):
                label = f"{preset} {engine} {variant}"
                found = _case(label, doc, catalog)
                (
                    cases.append(found)
                    if isinstance(found, LaunchCase)
                    else skipped.append(f"{label}: {found}")
                )
    for folder in stack_dirs:
        for path in sorted(folder.glob("*.yaml")):
            try:
                spec = load_spec(path)
            except SpecError as err:
                skipped.append(f"{path.name}: {err}")
                continue
            if spec.server_engine == "none":
                continue
            found = _launch(path.name, plan(spec, catalog))
            (
                cases.append(found)
                if isinstance(found, LaunchCase)
                else skipped.append(f"{path.name}: {found}")
            )
    return cases, skipped
