"""A hostile or broken Hub ``config.json`` is refused like a bad spec: one line per problem naming
the field and what was expected, exit 2, no traceback, no plan written (issue 22 item 9).

The cases are data: a table here and every file in ``tests/fixtures/hub_configs/`` (its README
says how to add one), each run against the config reader and through ``gpufit plan`` with the
config served by a fake Hub. Before the fix, ``num_attention_heads: 0`` raised ZeroDivisionError
out of ``gpufit plan``, ``hidden_size: 1e400`` (infinity) and string or boolean widths were
refused only when the reader happened to touch them, and a 10^30-layer integer was sized."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from selector.datafile import load_yaml_text, loads_json
from selector.hf_config import ConfigError, arch_from_config
from selector.hf_validate import check_value, config_problems, field_table, shown
from selector.sizing import requirements
from selector.spec import SpecError, hub_arch, parse_spec
from tests.fakes.hub import FakeHub, FakeRepo, hub_for_gpufit

FIXTURES = Path(__file__).parent / "fixtures"
HF = FIXTURES / "hf"
CASES_DIR = FIXTURES / "hub_configs"
BUNDLED = Path(__file__).resolve().parent.parent / "selector" / "data" / "configs"
SAFETENSORS = "safetensors"
"""An ``expect`` entry: the Hub's safetensors count and the config's shapes disagree."""


@dataclass(frozen=True)
class Case:
    name: str
    text: str  # the config.json as the Hub serves it
    expect: tuple[str, ...]  # field paths the error names; () = the config must size
    safetensors: dict[str, int] | None = None  # the Hub's counts per dtype (None: no safetensors)


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


def build(
    name: str,
    expect: list[str] | tuple[str, ...],
    base: str = "llama-3.1-8b.json",
    config: dict[str, Any] | None = None,
    set_: dict[str, Any] | None = None,
    set_json: dict[str, str] | None = None,
    safetensors: dict[str, int] | None = None,
) -> Case:
    """A case's config text: ``base`` (or ``config``) with ``set_`` applied, and ``set_json``'s raw
    JSON literals put in verbatim (1e400, NaN and 30-digit integers say what YAML cannot)."""
    base_file = HF / base if (HF / base).exists() else BUNDLED / base
    doc = copy.deepcopy(config) if config is not None else json.loads(base_file.read_text())
    for path, value in (set_ or {}).items():
        _set(doc, path, value)
    raw = {f"@@raw{i}@@": text for i, text in enumerate((set_json or {}).values())}
    for path, marker in zip((set_json or {}), raw, strict=True):
        _set(doc, path, marker)
    text = json.dumps(doc)
    for marker, literal in raw.items():
        text = text.replace(json.dumps(marker), literal)
    return Case(name, text, tuple(expect), safetensors)


TABLE = [
    build("hidden_size 1e400", ["hidden_size"], set_json={"hidden_size": "1e400"}),
    build("heads 0", ["num_attention_heads"], set_={"num_attention_heads": 0}),
    build("layers 1e30 float", ["num_hidden_layers"], set_json={"num_hidden_layers": "1e30"}),
    build("layers 10^30 integer", ["num_hidden_layers"], set_json={"num_hidden_layers": "1" + "0" * 30}),
    build("negative vocab", ["vocab_size"], set_={"vocab_size": -1}),
    build("huge vocab", ["vocab_size"], set_={"vocab_size": 10**9}),
    build("bool where int", ["num_key_value_heads"], set_={"num_key_value_heads": True}),
    build("string where int", ["intermediate_size"], set_={"intermediate_size": "14336"}),
    build("float where int", ["hidden_size"], set_={"hidden_size": 4096.0}),
    build("kv heads not a divisor", ["num_key_value_heads"], set_={"num_key_value_heads": 3}),
    build("head_dim not dividing", ["hidden_size"], set_={"hidden_size": 4100, "head_dim": None}),
    build("head_dim 0", ["head_dim"], set_={"head_dim": 0}),
    build("context 0", ["max_position_embeddings"], set_={"max_position_embeddings": 0}),
    build("tied as a string", ["tie_word_embeddings"], set_={"tie_word_embeddings": "false"}),
    build("rope_theta NaN", ["rope_theta"], set_json={"rope_theta": "NaN"}),
    build("rope_scaling a string", ["rope_scaling"], set_={"rope_scaling": "yarn"}),
    build("rope factor infinite", ["rope_scaling.factor"], set_json={"rope_scaling.factor": "1e400"}),
    build("model_type a number", ["model_type"], set_={"model_type": 7}),
    build("text_config a list", ["text_config"], set_={"text_config": [1, 2]}),
    build(
        "nested text heads",
        ["text_config.num_attention_heads"],
        base="gemma-3-12b-it.json",
        set_={"text_config.num_attention_heads": 0},
    ),
    build(
        "vision width infinite",
        ["vision_config.hidden_size"],
        base="gemma-3-12b-it.json",
        set_json={"vision_config.hidden_size": "1e400"},
    ),
    build("experts 0", ["num_local_experts"], base="mixtral-8x7b-v0.1.json", set_={"num_local_experts": 0}),
    build(
        "top-k above experts",
        ["num_experts_per_tok"],
        base="qwen3-30b-a3b.json",
        set_={"num_experts_per_tok": 129},
    ),
    build("MLA rank 0", ["kv_lora_rank"], base="deepseek-v3.json", set_={"kv_lora_rank": 0}),
    build(
        "dense layers beyond the model",
        ["first_k_dense_replace"],
        base="deepseek-v3.json",
        set_={"first_k_dense_replace": 61},
    ),
    build("window negative", ["sliding_window"], base="mistral-7b-v0.1.json", set_={"sliding_window": -1}),
    build("layer_types a string", ["layer_types"], set_={"layer_types": "sliding_attention"}),
    build(
        "several at once",
        ["num_attention_heads", "vocab_size", "rope_scaling.factor"],
        set_={"num_attention_heads": 0, "vocab_size": -5, "rope_scaling.factor": 0},
    ),
    build("llama sound", []),
    build("gemma 3 sound", [], base="gemma-3-12b-it.json"),
]


def folder_cases() -> list[Case]:
    """Every case file in ``tests/fixtures/hub_configs/`` (see its README)."""
    cases = []
    for path in sorted(CASES_DIR.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        doc = load_yaml_text(text) if path.suffix != ".json" else json.loads(text)
        if isinstance(doc, dict) and "expect" in doc:
            expect = doc["expect"]
            cases.append(
                build(
                    path.name,
                    [expect] if isinstance(expect, str) else list(expect),
                    base=doc.get("base", "llama-3.1-8b.json"),
                    config=doc.get("config"),
                    set_=doc.get("set"),
                    set_json={k: str(v) for k, v in (doc.get("set_json") or {}).items()},
                    safetensors=doc.get("safetensors"),
                )
            )
        else:  # a plain config.json: the expected field is the name up to "--"
            cases.append(Case(path.name, text, (path.name.split("--")[0].removesuffix(path.suffix),)))
    return cases


FOLDER = folder_cases()


def test_the_folder_holds_cases() -> None:
    assert len(FOLDER) >= 8 and any(not c.expect for c in FOLDER) and any(c.expect for c in FOLDER)


def problems_of(case: Case) -> list[str]:
    try:
        doc = loads_json(case.text)
        arch_from_config(doc, "case")
    except ConfigError as err:
        return str(err).splitlines()
    return []


@pytest.mark.parametrize("case", TABLE + FOLDER, ids=lambda c: c.name)
def test_the_reader_names_each_bad_field(case: Case) -> None:
    lines = problems_of(case)
    if not (expect := [w for w in case.expect if w != SAFETENSORS]):
        assert lines == []
        return
    for wanted in expect:
        assert any(line.startswith(f"config.json: {wanted}: expected ") for line in lines), (wanted, lines)
    assert all(line.isprintable() and len(line) < 240 for line in lines)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    yield from hub_for_gpufit(FakeHub({}), tmp_path, monkeypatch)


@pytest.mark.parametrize("case", TABLE + FOLDER, ids=lambda c: c.name)
def test_gpufit_plan_refuses_it_in_one_line_per_problem(
    case: Case, hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.repos["acme/model"] = FakeRepo({"config.json": case.text.encode()}, case.safetensors)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "hostile",
                "task": "serve",
                "model": {"hf": "acme/model"},
                "serving": {"context_tokens": 4096, "concurrency": 4},
            }
        )
    )
    page = tmp_path / "plan.html"
    rc = main(["plan", str(spec), "--html", str(page)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if not case.expect:
        assert rc != 2, err
        return
    lines = err.strip().splitlines()
    assert rc == 2 and not page.exists()
    assert all(line.startswith(f"{spec}: model: model.hf acme/model@") for line in lines), lines
    for wanted in case.expect:
        said = (
            ": the Hub's safetensors metadata counts "
            if wanted == SAFETENSORS
            else f": config.json: {wanted}: "
        )
        assert any(said in line and "expected " in line for line in lines), (wanted, lines)


def test_the_example_in_the_brief_reads_as_one_line() -> None:
    case = build("heads 0", ["num_attention_heads"], set_={"num_attention_heads": 0})
    assert problems_of(case) == [
        "config.json: num_attention_heads: expected an integer from 1 to 4,096, got 0"
    ]


def test_every_published_config_gpufit_knows_passes_the_table() -> None:
    """The ranges refuse nothing real (the bundled configs and the test transcriptions)."""
    files = sorted(BUNDLED.glob("*.json")) + sorted(HF.glob("*.json"))
    assert len(files) > 40
    for path in files:
        assert config_problems(json.loads(path.read_text())) == [], path.name


def test_the_checks_refuse_what_they_should_and_take_what_they_should() -> None:
    rule = field_table()["fields"]["hidden_size"]
    assert [check_value(v, rule) for v in (1, 262_144, None)] == [None, None, None]
    refused = [0, 262_145, -1, True, 1.0, "4096", math.inf, [4096], {"a": 1}]
    assert all(check_value(v, rule) for v in refused)
    ratio = field_table()["fields"]["pixel_shuffle_ratio"]
    assert check_value(0.5, ratio) is None and check_value(0, ratio) and check_value(math.nan, ratio)
    assert shown("x" * 100).endswith("...") and len(shown("x" * 100)) == 40
    assert shown(math.inf) == "a number beyond a float (read as infinity)"


def test_a_combination_the_table_does_not_foresee_is_refused_without_a_traceback() -> None:
    """Gemma 3n's per-layer widths as an empty list pass the table (a list of integers) but
    cannot be sized: the reader's own errors become one ConfigError line."""
    doc = json.loads((HF / "gemma-3n-defaults.json").read_text())
    text = doc.get("text_config", doc)
    text["intermediate_size"] = []
    with pytest.raises(ConfigError) as caught:
        arch_from_config(doc, "g3n")
    assert len(str(caught.value).splitlines()) == 1 and str(caught.value).startswith("config.json: ")


def _serve_hf(repo: str, precision: str | None = None) -> dict[str, Any]:
    """A one-stream serve spec of a Hub repo (at ``precision`` when given)."""
    spec: dict[str, Any] = {
        "name": "hub",
        "task": "serve",
        "model": {"hf": repo},
        "serving": {"context_tokens": 4096, "concurrency": 1},
    }
    return {**spec, "precision": precision} if precision else spec


def _weights_gib(spec: dict[str, Any]) -> float:
    return next(t.value for t in requirements(parse_spec(spec)).terms if t.name == "weights")


def test_a_packed_int4_repo_is_sized_from_its_shapes_not_its_packed_count(hub: FakeHub) -> None:
    """An AWQ Llama-3.1-8B as the Hub counts it (I32 packed weights and zeros, F16 scales and
    16-bit embeddings): gpufit once took the 1.98e9 stored elements for parameters and planned
    about 2.3 GiB of weights for a 5.3 GiB checkpoint (review of session 15). Its parameters are
    the config's 8.03e9 and its int4 weights about vLLM's loaded 5.38 GiB; its files' bytes are the
    stored ones."""
    counts = {"I32": 879_200_000, "F16": 1_105_500_000}
    hub.repos["acme/awq"] = FakeRepo({"config.json": (HF / "llama-3.1-8b.json").read_bytes()}, counts)
    arch = hub_arch("acme/awq", None)
    assert arch.params == pytest.approx(8.03e9, rel=0.01)
    assert arch.checkpoint_bytes == 879_200_000 * 4 + 1_105_500_000 * 2
    assert "packed" in arch.source
    assert (
        5.2 < _weights_gib(_serve_hf("acme/awq", "int4")) < 5.6
    )  # vLLM 0.19 loads RedHatAI's w4a16 Llama-3.1-8B as 5.38 GiB


def test_a_packed_mxfp4_repo_is_sized_from_its_shapes(hub: FakeHub) -> None:
    """gpt-oss-20b as the Hub counts it (U8 MXFP4 expert blocks, two values a byte, and their U8
    scales; everything else BF16): with the stored-element count taken for parameters, its 16-bit
    remainder (params less the 19.1e9 MXFP4 expert parameters from the shapes) went negative and
    the plan's weights read -3.9 GiB (review of session 15). From its shapes: 19.1e9 expert
    parameters at 4.25 bits and 1.8e9 in 16 bit, about 12.8 GiB, its files' bytes."""
    config = (BUNDLED / "gpt-oss-20b.json").read_bytes()
    counts = {"U8": 10_150_000_000, "BF16": 1_800_000_000}
    hub.repos["acme/oss"] = FakeRepo({"config.json": config}, counts)
    arch = hub_arch("acme/oss", None)
    assert arch.params == pytest.approx(20.9e9, rel=0.02) and arch.quantized_format == "mxfp4"
    assert 12.0 < _weights_gib(_serve_hf("acme/oss")) < 13.5


W4A16_GROUP = {"weights": {"num_bits": 4, "type": "int", "symmetric": True}, "input_activations": None}


@pytest.mark.parametrize(
    ("quantization", "published", "asked", "why"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4", "bf16", "never loads"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4", "fp8", "refuses --quantization fp8"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8", "int4", "never loads"),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": W4A16_GROUP}},
            "int4",
            "fp8",
            "refuses --quantization fp8",
        ),
    ],
)
def test_an_integer_checkpoint_asked_at_another_precision_is_refused_with_the_way_out(
    hub: FakeHub, quantization: dict[str, Any], published: str, asked: str, why: str
) -> None:
    """AWQ, GPTQ and llm-compressor's weight-only checkpoints are served as published: at fp8 vLLM
    refuses a --quantization other than the checkpoint's, and at any other precision the plan would
    size weights it never loads (a 4-bit AWQ Llama-3.1-8B at bf16: 2.8x). The spec error names the
    precision, the reason and the way out; at the published precision the repo plans."""
    doc = json.loads((HF / "llama-3.1-8b.json").read_bytes())
    doc["quantization_config"] = quantization
    counts = {"I32": 879_200_000, "F16": 1_105_500_000}
    hub.repos["acme/q"] = FakeRepo({"config.json": json.dumps(doc).encode()}, counts)
    with pytest.raises(
        SpecError, match=f"precision {asked}: .* publishes {published} .*{why}.*set precision {published}"
    ):
        parse_spec(_serve_hf("acme/q", asked))
    assert hub_arch("acme/q", None).integer_precision == published
    assert parse_spec(_serve_hf("acme/q", published)).precision == published


def test_a_w8a8_or_unrecognised_quantization_is_not_taken_for_integer_weights() -> None:
    """Activations quantised too (W8A8) or an unknown layout: not a weight-only integer checkpoint."""
    from selector.hf_families import published_integer_weights

    w8a8 = {"weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8, "type": "int"}}
    for qc in (
        {"quant_method": "compressed-tensors", "config_groups": {"g": w8a8}},
        {"quant_method": "gptq", "bits": 3},
        {"quant_method": "awq", "bits": "4"},
        {"quant_method": "bitsandbytes", "load_in_4bit": True},
    ):
        assert published_integer_weights({"quantization_config": qc}, {}) == ("", "")


def test_codes_packed_in_i16_are_not_taken_for_parameters(hub: FakeHub) -> None:
    """AQLM stores a code per group in I16: a Llama-2-7B 1x16 repo counts about 1.2e9 elements. Any
    dtype outside the unpacked ones sends a repo to its config's shapes."""
    counts = {"I16": 810_000_000, "F16": 380_000_000}
    hub.repos["acme/aqlm"] = FakeRepo({"config.json": (HF / "llama-3.1-8b.json").read_bytes()}, counts)
    assert hub_arch("acme/aqlm", None).params == pytest.approx(8.03e9, rel=0.01)


def test_a_non_packing_integer_buffer_keeps_a_float_checkpoints_exact_count(hub: FakeHub) -> None:
    """An I64 position-id buffer beside BF16 weights is not packing: the Hub's exact count stays."""
    counts = {"BF16": 8_000_000_000, "I64": 1_000}
    hub.repos["acme/buf"] = FakeRepo({"config.json": (HF / "llama-3.1-8b.json").read_bytes()}, counts)
    assert hub_arch("acme/buf", None).params == sum(counts.values())


@pytest.mark.parametrize(
    ("counts", "sized"),
    [
        ({"BF16": 12_000_000_000}, True),  # 1.49x the shapes' 8.03e9: float, within 1.5x
        ({"BF16": 13_000_000_000}, False),  # 1.62x: float weights are not packed
        ({"BF16": 5_000_000_000}, False),  # 1/1.6x
        ({"I32": 800_000_000, "F16": 12_000_000_000}, True),  # packed int4 (GPTQ/AWQ): the 20x bound
        ({"U8": 100_000_000, "BF16": 100_000_000}, False),  # 40x fewer even packed
    ],
)
def test_the_safetensors_bound_depends_on_whether_the_weights_are_packed(
    hub: FakeHub, counts: dict[str, int], sized: bool
) -> None:
    """Review of i22h, should-fix 2: 1.5x either way for float dtypes only, 20x with packed ones.
    A float checkpoint's count is the model's; a packed one's counts stored elements (eight int4
    values in one I32), so the config's shapes keep the count."""
    hub.repos["acme/model"] = FakeRepo({"config.json": (HF / "llama-3.1-8b.json").read_bytes()}, counts)
    shapes = arch_from_config(json.loads((HF / "llama-3.1-8b.json").read_bytes()), "m").params
    if sized:
        packed = "I32" in counts or "U8" in counts
        assert hub_arch("acme/model", None).params == (shapes if packed else sum(counts.values()))
    else:
        with pytest.raises(ValueError, match="the Hub's safetensors metadata counts"):
            hub_arch("acme/model", None)
