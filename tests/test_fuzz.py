"""Bad input, fuzzed: no spec, unit string or catalog file makes gpufit print a traceback or
plan something wrong.

Property-based (hypothesis, derandomized so CI sees the same examples every run, with a fixed
example budget per test): mutations of the example specs and of a valid catalog, and arbitrary
YAML-shaped values, go through ``gpufit plan`` in-process. Every run must exit with one of the
documented codes, never print a traceback, never plan with a non-finite or negative number in
its requirements or costs, and every plan it returns must satisfy its own requirements.
"""

from __future__ import annotations

import copy
import io
import json
import math
import tempfile
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings, strategies as st

from cli.main import main
from selector.catalog import SNAPSHOT_FILE, load_catalog
from selector.select import Plan, plan
from selector.sizing import usable_gib
from selector.spec import SpecError, load_spec
from selector.units import parse_count, parse_duration_hours, parse_size_gb
from tests.conftest import MINI_CATALOG, ROOT

SEEDS: list[dict[str, Any]] = [
    yaml.safe_load(path.read_text())["config"]["gpufit:workload"]
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
] + [yaml.safe_load(path.read_text()) for path in sorted((ROOT / "examples").glob("*.yaml"))]

SPEC_EXITS = {0, 2, 3, 4}
CATALOG_EXITS = {0, 3, 4, 5}

FUZZ = settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_WORK = Path(tempfile.mkdtemp(prefix="gpufit-fuzz-"))


def _keys(doc: Any) -> set[str]:
    """Every mapping key of the seeds: mutations reach real fields, not only unknown ones."""
    if isinstance(doc, dict):
        return set(doc) | {k for v in doc.values() for k in _keys(v)}
    if isinstance(doc, list):
        return {k for v in doc for k in _keys(v)}
    return set()


FIELD_NAMES = sorted(set().union(*(_keys(s) for s in SEEDS)))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=16)
    | st.sampled_from(["12h", "0s", "-1h", "1e400", "nan", "inf", "5e7", "50M", "200GB", "0", "1e-300", "2w"])
)
yamlish = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=8,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*prefix, i))


def _mutate(doc: Any, path: tuple[Any, ...], action: str, value: Any, key: str) -> Any:
    """``doc`` with the node at ``path`` replaced, deleted, or given an extra ``key``."""
    if not path:
        return value if action == "replace" else doc
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent[last], dict):
        parent[last][key] = value
    else:
        parent[last] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, seeds: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        doc = _mutate(doc, path, action, draw(yamlish), draw(st.sampled_from(FIELD_NAMES)))
    return doc


CHOICES: dict[str, list[Any]] = {
    "precision": ["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4"],
    "kv_cache_precision": ["bf16", "fp16", "fp8", "int8"],
    "fault_tolerance": ["none", "checkpointed", "stateless"],
    "preset": ["llama-2-13b", "llama-3.1-8b", "llama-3.1-70b", "llama-65b", "mixtral-8x7b", "sdxl-base-1.0"],
    "clouds": [["aws"], ["gcp"], ["aws", "gcp"]],
    "ttl": ["30m", "6h", "12h", "48h", "7d"],
    "duration": ["1h", "24h", "720h"],
}


@st.composite
def plausible(draw: st.DrawFn) -> Any:
    """A seed with a few of its values changed to other values of the right kind: numbers
    scaled by 1/100 to 100, enumerations and durations swapped. Most of these plan (or are
    infeasible or over budget), which exercises the plans' own checks."""
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    paths = [p for p in _paths(doc) if p and not isinstance(_get(doc, p), dict | list)]
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=4, unique=True)):
        value, key = _get(doc, path), str(path[-1])
        if key in CHOICES:
            new = draw(st.sampled_from(CHOICES[key]))
        elif isinstance(value, bool):
            new = not value
        elif isinstance(value, int | float):
            scaled = value * draw(st.sampled_from([0.01, 0.1, 0.5, 2, 10, 100]))
            new = max(1, round(scaled)) if isinstance(value, int) else scaled
        else:
            continue
        _mutate(doc, path, "replace", new, "")
    return doc


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def _write(name: str, text: str) -> Path:
    path = _WORK / name
    path.write_text(text, encoding="utf-8")
    return path


def _numbers(doc: Any, where: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(doc, bool):
        return
    if isinstance(doc, int | float):
        yield where, float(doc)
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield from _numbers(value, f"{where}.{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _numbers(value, f"{where}[{i}]")


def assert_plan_keeps_its_word(result: Plan) -> None:
    """The choice and every fallback satisfy the requirements the plan states."""
    req = result.requirements
    assert result.choice is not None
    runs = [(result.choice.offer, result.choice.shape, result.choice.cost)]
    runs += [(f.offer, f.shape, f.cost) for f in result.fallbacks]
    for offer, shape, cost in runs:
        it, gpu = offer.instance, offer.instance.gpu
        assert shape.vram_gib_per_gpu <= usable_gib(gpu, req) + 1e-9, (it.name, shape.vram_gib_per_gpu)
        if req.needs_fp8:
            assert gpu.fp8, it.name
        if req.min_gpu_bandwidth_gbps:
            assert gpu.bandwidth_gbps >= req.min_gpu_bandwidth_gbps, it.name
        if req.tokens_per_s_per_stream and shape.tokens_per_s_per_stream is not None:
            assert shape.tokens_per_s_per_stream >= req.tokens_per_s_per_stream * (1 - 1e-9), it.name
        if shape.needs_nvlink and not req.allow_pcie_parallel:
            assert it.nvlink, it.name
        if shape.needs_node_interconnect:
            assert it.node_interconnect is not None, it.name
        assert offer.hourly_usd > 0 and math.isfinite(offer.hourly_usd)
        for value in (cost.total_usd, cost.hourly_usd, cost.hours, cost.compute_usd, cost.other_usd):
            assert math.isfinite(value) and value >= 0, (it.name, cost)


def assert_clean(code: int, out: str, err: str, allowed: set[int]) -> None:
    assert code in allowed, (code, err)
    assert "Traceback" not in out + err, err
    if code != 0:  # why: on stderr, or (infeasible, over budget) in the plan printed
        problems = [line for line in err.splitlines() if not line.startswith("gpufit: using the embedded")]
        assert problems or out.strip(), "a failure must say why"


# ---------------------------------------------------------------------------------- specs


@FUZZ
@given(doc=mutated(SEEDS))
def test_mutated_specs_exit_cleanly_and_plans_keep_their_word(doc: Any) -> None:
    path = _write("spec.yaml", yaml.safe_dump(doc, allow_unicode=True))
    code, out, err = run_cli("plan", str(path), "--json", "--catalog", "snapshot")
    event(f"exit {code}")
    assert_clean(code, out, err, SPEC_EXITS)
    if code != 0:
        return
    report = json.loads(out)
    for where, value in _numbers({k: report[k] for k in ("requirements", "choice", "cost", "alternatives")}):
        assert math.isfinite(value), where
        if not where.startswith(".requirements.breakdown") and not where.startswith(".requirements.fit"):
            assert value >= 0, where
    assert_plan_keeps_its_word(plan(load_spec(path), load_catalog()))


@FUZZ
@given(doc=plausible())
def test_plausible_specs_plan_within_their_own_requirements(doc: Any) -> None:
    path = _write("plausible.yaml", yaml.safe_dump(doc, allow_unicode=True))
    code, out, err = run_cli("plan", str(path), "--json", "--catalog", "snapshot")
    event(f"exit {code}")
    assert_clean(code, out, err, SPEC_EXITS)
    if code == 0:
        assert_plan_keeps_its_word(plan(load_spec(path), load_catalog()))


@FUZZ
@given(doc=yamlish)
def test_arbitrary_yaml_values_are_refused_in_one_line_each(doc: Any) -> None:
    path = _write("any.yaml", yaml.safe_dump(doc, allow_unicode=True))
    code, out, err = run_cli("plan", str(path))
    assert_clean(code, out, err, {2})
    assert all(line.startswith(str(path)) for line in err.splitlines() if line)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(text=st.text(max_size=80) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text_is_refused_in_one_line_each(text: str) -> None:
    path = _write("text.yaml", text)
    code, out, err = run_cli("plan", str(path))
    assert_clean(code, out, err, SPEC_EXITS)


@pytest.mark.parametrize(
    ("text", "key", "lines", "field"),
    [
        ("name: a\nname: b\n", "name", (1, 2), "name"),
        (
            "config:\n  gpufit:workload:\n    name: x\n    serving:\n      concurrency: 2\n"
            "      concurrency: 3\n",
            "concurrency",
            (5, 6),
            "config.gpufit:workload.serving.concurrency",
        ),
        ("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n  d: 3\n", "d", (4, 5), "c.d"),
        ("items:\n  - {k: 1, k: 2}\n", "k", (2, 2), "items[0].k"),
    ],
)
def test_a_duplicated_key_is_an_error_naming_key_lines_and_field(
    text: str, key: str, lines: tuple[int, int], field: str
) -> None:
    path = _write("dup.yaml", text)
    code, out, err = run_cli("plan", str(path))
    assert code == 2 and out == ""
    expected = (
        f"{path}: {field}: duplicate key {key!r} (lines {lines[0]} and {lines[1]}); write each key once"
    )
    assert err.splitlines()[0] == expected


def test_duplicate_keys_in_an_example_stack_are_caught(tmp_path: Path) -> None:
    original = (ROOT / "stacks" / "Pulumi.sdxl-batch.yaml").read_text()
    doubled = original.replace("    task: batch\n", "    task: batch\n    name: sdxl-batch-2\n")
    spec = tmp_path / "Pulumi.dup.yaml"
    spec.write_text(doubled)
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    (problem,) = caught.value.problems
    assert problem.path == "config.gpufit:workload.name" and "duplicate key 'name'" in problem.message


def test_an_alias_bomb_is_refused_quickly() -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefgh"):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{'abcdefgh'[i]}"] * 9) + "]")
    levels.append("name: [" + ", ".join(["*h"] * 9) + "]")
    code, out, err = run_cli("plan", str(_write("bomb.yaml", "\n".join(levels) + "\n")))
    assert_clean(code, out, err, {2})


# ---------------------------------------------------------------------------------- units


@settings(max_examples=300, derandomize=True, deadline=None)
@given(value=scalars | st.lists(scalars, max_size=2))
def test_unit_parsers_give_a_finite_non_negative_number_or_a_value_error(value: Any) -> None:
    for parse in (parse_size_gb, parse_duration_hours, parse_count):
        try:
            parsed = parse(value)
        except ValueError as err:
            assert str(err)
            continue
        assert isinstance(parsed, float) and math.isfinite(parsed) and parsed >= 0


# ---------------------------------------------------------------------------------- catalogs

MINI = json.loads(MINI_CATALOG.read_text())
SPEC_FOR_CATALOG = _WORK / "catalog-spec.yaml"
SPEC_FOR_CATALOG.write_text((ROOT / "examples" / "guanaco-65b.yaml").read_text())
prices = st.sampled_from(
    [0, 0.0, -1, -0.01, float("nan"), float("inf"), "1.0", "free", True, None, 1e-12, 1e308]
)


@st.composite
def mutated_catalog(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(MINI)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["price", "reprice", "reprice", "reprice", "field", "structure"]))
        section = draw(st.sampled_from(["offers", "instance_types"]))
        entries = (
            [e for e in doc.get(section) or [] if isinstance(e, dict)]
            if isinstance(doc.get(section), list)
            else []
        )
        if kind == "price" and section == "offers" and entries:
            offer = draw(st.sampled_from(entries))
            offer["hourly_usd"] = draw(prices)
        elif kind == "reprice" and isinstance(doc.get("offers"), list):
            for offer in [o for o in doc["offers"] if isinstance(o, dict)]:
                if draw(st.booleans()):
                    offer["hourly_usd"] = draw(st.floats(min_value=0.001, max_value=500.0))
        elif kind == "field" and entries:
            entry = draw(st.sampled_from(entries))
            if not entry:
                continue
            key = draw(st.sampled_from(sorted(entry)))
            if draw(st.booleans()):
                entry[key] = draw(yamlish)
            else:
                del entry[key]
        else:
            key = draw(st.sampled_from(["offers", "instance_types", "schema_version", "spot_interruption"]))
            doc[key] = draw(yamlish)
    return doc


@FUZZ
@given(doc=mutated_catalog())
def test_a_mutated_catalog_is_refused_in_one_line_or_planned_at_its_own_prices(doc: Any) -> None:
    path = _write("catalog.json", json.dumps(doc, allow_nan=True))
    code, out, err = run_cli("plan", str(SPEC_FOR_CATALOG), "--json", "--catalog", str(path))
    event(f"exit {code}")
    assert_clean(code, out, err, CATALOG_EXITS)
    if code == 5:
        (line,) = err.splitlines()
        assert line.startswith("gpufit: catalog: ")
        return
    if code != 0:
        return
    choice = json.loads(out)["choice"]
    listed = {
        (o.get("cloud"), o.get("instance_type"), o.get("region"), o.get("zone"), o.get("market")): o.get(
            "hourly_usd"
        )
        for o in doc["offers"]
    }
    key = (choice["cloud"], choice["instance_type"], choice["region"], choice["zone"], choice["market"])
    assert choice["hourly_usd"] == listed[key]
    assert isinstance(choice["hourly_usd"], float | int) and choice["hourly_usd"] > 0
    assert math.isfinite(choice["hourly_usd"])


@pytest.mark.parametrize("price", [0, -1, float("nan"), float("inf"), "free", True, None])
def test_a_zero_or_odd_price_is_a_catalog_error_not_a_bargain(price: Any) -> None:
    doc = copy.deepcopy(MINI)
    doc["offers"][0]["hourly_usd"] = price
    path = _write("odd-price.json", json.dumps(doc, allow_nan=True))
    code, out, err = run_cli("plan", str(SPEC_FOR_CATALOG), "--catalog", str(path))
    assert code == 5 and out == ""
    (line,) = err.splitlines()
    assert "offers[0]" in line and "hourly_usd" in line


def test_the_snapshot_is_valid_and_its_duplicate_keys_would_be_refused(tmp_path: Path) -> None:
    text = SNAPSHOT_FILE.read_text()
    assert load_catalog().offers
    doubled = text.replace('"schema_version": 1,', '"schema_version": 1,\n "schema_version": 1,', 1)
    path = tmp_path / "dup.json"
    path.write_text(doubled)
    code, _, err = run_cli("plan", str(SPEC_FOR_CATALOG), "--catalog", str(path))
    assert code == 5 and "duplicate key 'schema_version'" in err
