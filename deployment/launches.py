"""Every engine launch gpufit plans for its presets and example stacks, as ``ServerLaunch``es:
what ``machine.launches`` renders into the argument lists the engines' own parsers receive
(``scripts/dump_engine_flags.py`` replays them through each pinned release's real parser, the
test suite checks them against the committed flag dumps).

Each transformer preset is planned for each engine in the variants a user reaches: its default
(16-bit, a context within its maximum), FP8 weights and KV cache, images where it has a vision
encoder, the longest context its documented YaRN recipe allows, on a Hopper GPU (where SGLang's
FP8 KV format differs), with the engine arguments a user adds for tool calling, and as the engine a
token-generating batch starts beside its command. A variant no offer can run is listed with the
reason instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deployment.launch import ServerLaunch
from deployment.translate import ServingError, server_launch
from selector.catalog import Catalog
from selector.presets import arch_from_preset, preset_names, preset_serving
from selector.select import Plan, plan
from selector.spec import SpecError, load_spec, parse_spec

TOOL_ARGS = {
    "vllm": ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    "sglang": ["--tool-call-parser", "qwen25"],
}
"""Engine arguments a user adds to serve tool calls (Qwen's Hermes-style format; names from the
pinned releases' parser dumps)."""

HOPPER_TYPES = ["p5.4xlarge", "p5.48xlarge", "a3-highgpu-*"]


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
    # the engine a token batch starts on 127.0.0.1 for job.command (machine.serving.batch_engine_start)
    batch = {**base["serving"], "tokens": 1e9}
    yield "batch", {**base, "task": "batch", "serving": batch, "job": {"command": "python generate.py"}}


def _case(spec_doc: dict[str, Any], catalog: Catalog) -> ServerLaunch | str:
    try:
        spec = parse_spec({"name": "launch-check", **spec_doc})
    except SpecError as err:
        return f"spec refused: {err}"
    return _launch(plan(spec, catalog))


def _launch(result: Plan) -> ServerLaunch | str:
    if result.choice is None:
        return f"no offer runs it ({result.status})"
    try:
        launch = server_launch(result, batch=result.spec.task == "batch")
    except ServingError as err:
        return str(err)
    if launch is None:
        return "starts no server"
    return launch


def server_launches(
    catalog: Catalog, stack_dirs: tuple[Path, ...] = ()
) -> tuple[list[tuple[str, ServerLaunch]], list[str]]:
    """(every launch planned, with its label; every variant not launchable with its reason)."""
    launches: list[tuple[str, ServerLaunch]] = []
    skipped: list[str] = []
    for preset in preset_names():
        if arch_from_preset(preset).kind != "transformer":
            continue
        for engine in ("vllm", "sglang"):
            for variant, doc in _variants(preset, engine):
                label = f"{preset} {engine} {variant}"
                found = _case(doc, catalog)
                (
                    launches.append((label, found))
                    if isinstance(found, ServerLaunch)
                    else skipped.append(f"{label}: {found}")
                )
    for folder in stack_dirs:
        for path in sorted(folder.glob("*.yaml")):
            try:
                spec = load_spec(path)
            except SpecError as err:
                skipped.append(f"{path.name}: {err}")
                continue
            if spec.decode_engine == "none":
                continue
            found = _launch(plan(spec, catalog))
            (
                launches.append((path.name, found))
                if isinstance(found, ServerLaunch)
                else skipped.append(f"{path.name}: {found}")
            )
    return launches, skipped
