"""Run inside a throwaway venv holding one engine release (CPU is enough): dump the engine's own
server argument parser as JSON, and run argument lists through it.

    python engine_parser_probe.py vllm   --dump flags.json --check cases.json --results out.json
    python engine_parser_probe.py sglang --dump flags.json --check cases.json --results out.json

``scripts/dump_engine_flags.py`` creates the venv and calls this; it imports nothing of gpufit's
(gpufit is not installed in the engine's venv), only the standard library and the engine.

vLLM: the parser ``vllm serve`` builds, ``make_arg_parser(FlexibleArgumentParser())``
(``vllm.entrypoints.common.cli_args`` since 0.2x, ``vllm.entrypoints.openai.cli_args`` before);
building it instantiates config dataclasses that need a device, so ``VLLM_TARGET_DEVICE=cpu``
is set. Flags the parser takes as free strings and the engine checks later against a registry
(``--quantization``, ``--kv-cache-dtype``, ``--tool-call-parser``, ``--reasoning-parser``) get
their registry as ``valid_values``, and the check applies it.

SGLang: ``ServerArgs.add_cli_args`` on a plain ``argparse.ArgumentParser``, as
``sglang.srt.server_args.prepare_server_args`` does, including its merge of ``--config FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from typing import Any


def _type_name(t: Any) -> str | None:
    """A readable name for an argparse ``type``; unwraps vLLM's optional_type/parse_type closures."""
    if t is None:
        return None
    name = getattr(t, "__name__", None) or type(t).__name__
    closure = getattr(t, "__closure__", None)
    if closure and name in {"_optional_type", "_parse_type"}:
        inner = [c.cell_contents for c in closure if callable(c.cell_contents)]
        if inner:
            inner_name = _type_name(inner[0])
            return f"optional[{inner_name}]" if name == "_optional_type" else f"parse[{inner_name}]"
    return str(name)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, set | frozenset):
        return sorted((_jsonable(x) for x in value), key=str)
    if isinstance(value, list | tuple):
        return [_jsonable(x) for x in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(x) for k, x in value.items()}
    if value is argparse.SUPPRESS:
        return "==SUPPRESS=="
    return repr(value)


def dump(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = action.option_strings or [action.dest]
        longs = [o for o in names if o.startswith("--")] or names
        key = longs[0]
        choices = action.choices
        if isinstance(choices, set | frozenset):
            choices = sorted(choices, key=str)
        out[key] = {
            "dest": action.dest,
            "aliases": [o for o in names if o != key],
            "action": type(action).__name__,
            "type": _type_name(action.type),
            "nargs": action.nargs,
            "choices": _jsonable(list(choices)) if choices is not None else None,
            "default": _jsonable(action.default),
            "required": action.required,
            "hidden": action.help is argparse.SUPPRESS,
        }
    return dict(sorted(out.items()))


def vllm() -> tuple[str, argparse.ArgumentParser, dict[str, list[str]]]:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm as engine
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef]
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    valid: dict[str, list[str]] = {}
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    valid["--quantization"] = list(QUANTIZATION_METHODS)
    try:
        from vllm.config.cache import KV_CACHE_DTYPES

        valid["--kv-cache-dtype"] = list(KV_CACHE_DTYPES)
    except ImportError:
        from typing import get_args

        from vllm.config.cache import CacheDType

        valid["--kv-cache-dtype"] = list(get_args(CacheDType))
    for flag, module, cls in (
        ("--tool-call-parser", "vllm.tool_parsers", "ToolParserManager"),
        ("--tool-call-parser", "vllm.entrypoints.openai.tool_parsers", "ToolParserManager"),
        ("--reasoning-parser", "vllm.reasoning", "ReasoningParserManager"),
    ):
        if flag in valid:
            continue
        try:
            manager = getattr(__import__(module, fromlist=[cls]), cls)
        except (ImportError, AttributeError):
            continue
        names = getattr(manager, "list_registered", None)
        if callable(names):
            valid[flag] = sorted(names())
    return str(engine.__version__), parser, valid


def sglang() -> tuple[str, argparse.ArgumentParser, dict[str, list[str]]]:
    from sglang.srt.server_args import ServerArgs

    try:
        from sglang.version import __version__
    except ImportError:
        import sglang as engine

        __version__ = str(getattr(engine, "__version__", "unknown"))
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return __version__, parser, {}


def parse(
    engine: str, parser: argparse.ArgumentParser, case: dict[str, Any], valid: dict[str, list[str]]
) -> str | None:
    """None when the engine's parser accepts the case's argument list, else its message."""
    argv = list(case["argv"])
    with tempfile.TemporaryDirectory() as tmp:
        if case.get("config"):
            path = os.path.join(tmp, "gpufit.yaml")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(case["config"], handle)  # JSON is YAML
            argv = [path if a == case["config_path"] else a for a in argv]
            if engine == "sglang":
                from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

                argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                namespace = parser.parse_args(argv)
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "refused"
        except (ValueError, TypeError) as exc:
            return str(exc)
    for flag, values in valid.items():
        dest = flag.removeprefix("--").replace("-", "_")
        value = getattr(namespace, dest, None)
        if value is not None and value != parser.get_default(dest) and value not in values:
            return f"{flag} {value!r} is not among the engine's registered values"
    return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("engine", choices=["vllm", "sglang"])
    ap.add_argument("--dump", help="write the parser's flags here (JSON)")
    ap.add_argument("--check", help="a JSON list of {label, argv[, config, config_path]} to parse")
    ap.add_argument("--results", help="write each case's verdict here (JSON)")
    opts = ap.parse_args(argv)
    version, parser, valid = vllm() if opts.engine == "vllm" else sglang()
    if opts.dump:
        flags = dump(parser)
        for flag, values in valid.items():
            if flag in flags:
                flags[flag]["valid_values"] = values
        with open(opts.dump, "w", encoding="utf-8") as handle:
            json.dump({"engine": opts.engine, "version": version, "flags": flags}, handle, indent=1)
            handle.write("\n")
    if opts.check:
        with open(opts.check, encoding="utf-8") as handle:
            cases = json.load(handle)
        verdicts = [{"label": c["label"], "error": parse(opts.engine, parser, c, valid)} for c in cases]
        with open(opts.results or "/dev/stdout", "w", encoding="utf-8") as handle:
            json.dump({"engine": opts.engine, "version": version, "cases": verdicts}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
