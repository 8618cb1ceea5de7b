"""The workload spec: the two contract examples, clear errors, and fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from selector.spec import SpecError, json_schema, load_spec, load_spec_text, parse_spec
from tests.conftest import QLORA_65B, ROOT, SERVE_70B, merged


def test_contract_examples_load_as_written() -> None:
    serve = load_spec(ROOT / "examples" / "llama70b-chat.yaml")
    assert serve.task == "serve" and serve.serving is not None
    assert serve.serving.context_tokens == 8192 and serve.serving.concurrency == 16
    assert serve.duration == 720.0 and serve.egress.gb == 500 and serve.budget.max_hourly_usd == 60
    qlora = load_spec(ROOT / "examples" / "guanaco-65b.yaml")
    assert qlora.training is not None and qlora.training.tokens == 5e7
    assert qlora.checkpoint_interval == 0.5 and qlora.teardown is not None and qlora.teardown.ttl == 48
    assert qlora.data is not None and qlora.data.region == "us-east-1"
    assert qlora.arch().params == pytest.approx(65.2e9)


def test_stack_file_holds_a_spec(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1", "gpufit:workload": SERVE_70B}}))
    assert load_spec(stack).name == "llama70b-chat"


def test_stack_file_errors_name_the_config_path(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(yaml.safe_dump({"config": {"gpufit:workload": merged(SERVE_70B, precision="bf17")}}))
    with pytest.raises(SpecError) as err:
        load_spec(stack)
    first = str(err.value.problems[0])
    assert first.startswith("config.gpufit:workload.precision: got 'bf17'")


def _problems(data: object) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    return [str(p) for p in err.value.problems]


def test_one_line_per_problem_naming_field_and_expectation() -> None:
    lines = _problems(
        merged(SERVE_70B, task="serv", duration="720", colour="red", serving={"context_tokens": "lots"})
    )
    assert len(lines) == 4
    joined = "\n".join(lines)
    assert "task: got 'serv'; input should be 'serve'" in joined
    assert "duration: could not read '720' as a duration; expected a number with a unit" in joined
    assert "colour: unknown field" in joined
    assert "serving.context_tokens: got 'lots'" in joined
    assert all("\n" not in line for line in lines)


def test_unknown_preset_suggests_close_names() -> None:
    (line,) = _problems(merged(SERVE_70B, model={"preset": "llama3.1-70b"}))
    assert line.startswith("model: unknown preset 'llama3.1-70b'; did you mean llama-3.1-70b")


def test_task_needs_its_section() -> None:
    (line,) = _problems(merged(QLORA_65B, training=None))
    assert "task finetune-qlora needs a training section" in line


def test_qlora_needs_4_bit_precision() -> None:
    (line,) = _problems(merged(QLORA_65B, precision="bf16"))
    assert "precision must be nf4 or int4" in line


def test_explicit_architecture_and_custom_models() -> None:
    spec = parse_spec(merged(SERVE_70B, model={"params_b": 13, "layers": 40, "hidden": 5120, "heads": 40}))
    arch = spec.arch()
    assert arch.head_dim == 128 and arch.kv_heads == 40 and arch.ffn == 4 * 5120
    custom = parse_spec(
        merged(
            SERVE_70B,
            serving=None,
            task="batch",
            duration="8h",
            model={"kind": "custom", "vram_gib": 20, "min_bandwidth_gbps": 500},
        )
    )
    assert custom.arch().vram_gib == 20
    (line,) = _problems(merged(SERVE_70B, model={"kind": "custom", "vram_gib": 20}))
    assert "kind: custom needs vram_gib and min_bandwidth_gbps" in line
    (line,) = _problems(merged(SERVE_70B, model={"preset": "llama-2-7b", "layers": 3}))
    assert "not both" in line


def test_yaml_errors_are_one_line() -> None:
    with pytest.raises(SpecError) as err:
        load_spec_text("name: [unclosed\n", "bad.yaml")
    (line,) = err.value.problems
    assert "not valid YAML" in str(line) and "line" in str(line)


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_spec("/nonexistent/spec.yaml")


def test_schema_is_committed_and_current() -> None:
    from selector.spec import stack_json_schema

    committed = json.loads((ROOT / "schema" / "workload.schema.json").read_text())
    assert committed == json_schema()
    stack = json.loads((ROOT / "schema" / "stack.schema.json").read_text())
    assert stack == stack_json_schema()
    assert stack["properties"]["config"]["properties"]["gpufit:workload"]["$ref"] == "workload.schema.json"
    assert committed["additionalProperties"] is False
    assert {"name", "task", "model"} <= set(committed["required"])


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12))
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)
_fields = st.sampled_from(sorted(SERVE_70B) + sorted(QLORA_65B) + ["work", "tuning", "storage"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_fields, _json, max_size=8), st.sampled_from([SERVE_70B, QLORA_65B]))
def test_fuzzed_specs_fail_only_with_spec_error(mutation: dict[str, object], base: dict[str, object]) -> None:
    data = {**base, **mutation}
    try:
        parse_spec(data)
    except SpecError as err:
        assert err.problems and all(str(p) for p in err.problems)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_yaml_text_fails_only_with_spec_error(text: str) -> None:
    try:
        load_spec_text(text, "fuzz.yaml")
    except SpecError as err:
        assert err.problems
