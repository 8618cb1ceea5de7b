"""Launches the engines accept: every launch gpufit renders for its presets and example stacks
is checked against the flags the pinned release's own parser declares (dumped from it by
``scripts/dump_engine_flags.py``, which also replays the same launches through the real parser:
``parse_args``); ``serving.engine_args`` is checked the same way."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from deployment.launches import server_launches
from machine.launches import LaunchCase, launch_cases
from selector.catalog import load_catalog
from selector.engine_flags import check_argv, check_engine_args, flag_table, flags_path
from selector.engines import engine_data, owned_flags, pinned_versions
from selector.spec import SpecError, parse_spec
from tests.conftest import ROOT

LAUNCHES, SKIPPED = server_launches(load_catalog(), (ROOT / "stacks", ROOT / "examples"))
CASES = launch_cases(LAUNCHES)


def test_every_pinned_release_has_its_parser_dump_committed() -> None:
    for engine in ("vllm", "sglang"):
        for version in pinned_versions(engine):
            doc = json.loads(flags_path(engine, version).read_text())
            assert (doc["engine"], doc["version"]) == (engine, version)
            assert len(doc["flags"]) > 300  # the whole parser, not a hand-picked subset


def test_the_launch_matrix_covers_both_engines_every_variant_and_the_example_stacks() -> None:
    engines = Counter(c.engine for c in CASES)
    assert engines["vllm"] > 100 and engines["sglang"] > 100
    variants = {c.label.rsplit(" ", 1)[-1] for c in CASES}
    assert {"default", "fp8", "fp8-hopper", "images", "yarn", "tools", "batch"} <= variants
    assert {"Pulumi.llama70b-chat.yaml", "Pulumi.llama8b-lb.yaml", "llama70b-chat.yaml"} <= {
        c.label for c in CASES
    }
    # what cannot launch says why: no single-node offer, a dropped family, or no repo to pull
    assert all(": " in s for s in SKIPPED) and len(SKIPPED) < len(CASES) / 5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_each_rendered_launch_passes_the_pinned_releases_parser(case: LaunchCase) -> None:
    assert check_argv(flag_table(case.engine, case.version), list(case.argv)) == []
    owned = set(owned_flags(case.engine))
    table = flag_table(case.engine, case.version)
    used = [table.lookup(a) for a in case.argv if a.startswith("--")]
    assert all(found is not None for found in used)
    if case.engine == "sglang":
        assert case.config == {"api-key": "gpufit-launch-check"} and "--api-key" not in case.argv
    assert {found[1]["dest"] for found in used if found} - owned <= {
        "enable_auto_tool_choice",
        "tool_call_parser",
    }


def test_the_check_refuses_what_the_parsers_refuse() -> None:
    sglang = flag_table("sglang", pinned_versions("sglang")[0])
    vllm = flag_table("vllm", pinned_versions("vllm")[0])
    # gpufit's launches before this work: SGLang has no plain fp8 KV choice
    assert check_argv(sglang, ["--kv-cache-dtype", "fp8"])[0].startswith("--kv-cache-dtype 'fp8' is not one")
    assert check_argv(sglang, ["--max-model-len", "4096"]) == [
        "--max-model-len is not a flag of SGLang 0.5.23"
    ]
    assert check_argv(vllm, ["--rope-scaling", "{}"]) == ["--rope-scaling is not a flag of vLLM 0.34.0"]
    assert check_argv(vllm, ["--limit-mm-per-prompt", "image=2"])[0].endswith(
        "does not parse as parse[loads]"
    )
    assert check_argv(vllm, ["--quantization", "fp8_bogus"]) == [
        "--quantization 'fp8_bogus' is not a value the engine accepts"
    ]
    assert check_argv(vllm, ["--max-num-seqs", "many"]) == ["--max-num-seqs 'many' does not parse as int"]
    assert check_argv(vllm, ["--max-model-len", "128k", "--max_num_seqs", "8"]) == []
    assert check_argv(vllm, ["--trust-remote-code=yes"]) == ["--trust-remote-code takes no value"]
    assert check_argv(vllm, ["stray"]) == [
        "'stray' is not a flag (the launch passes no positional arguments)"
    ]


def test_engine_args_take_the_releases_flags_and_not_gpufits_own() -> None:
    assert check_engine_args("vllm", ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]) == []
    assert check_engine_args("sglang", ["--reasoning-parser", "qwen3", "--tool-call-parser", "qwen25"]) == []
    assert check_engine_args("vllm", ["-tp", "4"]) == [
        "-tp is set by gpufit; gpufit sets it the plan's tensor parallelism"
    ]
    assert check_engine_args("sglang", ["--context-length=8192"]) == [
        "--context-length is set by gpufit; set it with serving.context_tokens"
    ]
    assert check_engine_args("vllm", ["--tool-call-parser", "nope"]) == [
        "--tool-call-parser 'nope' is not a value the engine accepts"
    ]
    for engine in ("vllm", "sglang"):
        for dest in owned_flags(engine):
            assert dest in {v["dest"] for v in flag_table(engine, pinned_versions(engine)[0]).flags.values()}


def test_engine_args_problems_are_spec_errors_naming_the_field() -> None:
    doc = {
        "name": "flags",
        "task": "serve",
        "model": {"preset": "qwen3-8b"},
        "serving": {
            "engine": "sglang",
            "engine_args": ["--mem-fraction-static", "0.95", "--speculative-algo"],
        },
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(doc)
    text = str(caught.value)
    assert "serving.engine_args: --mem-fraction-static is set by gpufit" in text
    assert "serving.engine_args: --speculative-algo is not a flag of SGLang 0.5.23" in text
    with pytest.raises(SpecError, match=r"need serving\.engine vllm or sglang"):
        parse_spec({**doc, "serving": {"engine": "none", "engine_args": ["--x"]}})


def test_the_renderers_spell_each_flag_as_the_data_owns_it() -> None:
    for engine, entry in engine_data()["engines"].items():
        table = flag_table(engine, pinned_versions(engine)[0])
        assert table.lookup(entry["images_flag"]["flag"]) is not None
