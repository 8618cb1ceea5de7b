"""Batch generation's concurrency (issue 24, defect 8): chosen per instance type, bounded by
the KV cache, reported in the plan."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selector.batch_concurrency import (
    CALIBRATED_DECODE_CONCURRENCY,
    MAX_BATCH_CONCURRENCY,
    best_concurrency_fit,
    chooses_concurrency,
    concurrency_requirements,
    estimate_note,
    is_estimate,
)
from selector.catalog import Catalog
from selector.select import plan
from selector.sizing import Rejection, Shape, fit, requirements
from tests.conftest import spec_of

BATCH_8B: dict[str, Any] = {
    "name": "batch8b",
    "task": "batch",
    "model": {"preset": "llama-3.1-8b"},
    "precision": "bf16",
    "serving": {"context_tokens": 2048, "tokens": "1e9"},
    "job": {"command": 'python generate.py --max-num-seqs "$GPUFIT_MAX_NUM_SEQS"'},
    "fault_tolerance": "none",
}


def test_only_a_token_batch_without_a_stated_concurrency_is_chosen_for() -> None:
    assert chooses_concurrency(spec_of(BATCH_8B))
    stated = {**BATCH_8B, "serving": {**BATCH_8B["serving"], "concurrency": 1}}
    assert not chooses_concurrency(spec_of(stated))
    serve = {**BATCH_8B, "task": "serve", "serving": {"context_tokens": 2048}}
    assert not chooses_concurrency(spec_of(serve))


def test_the_issue_case_batch_at_concurrency_1_cost_dozens_of_times_more(mini_catalog: Catalog) -> None:
    """`task: batch` with `serving.tokens` defaulted to one sequence at a time: every token
    re-read all the weights. With the concurrency chosen, the job takes a small fraction of the
    GPU-hours on the same machine, and the plan says which concurrency."""
    chosen = plan(spec_of(BATCH_8B), mini_catalog)
    one = plan(spec_of({**BATCH_8B, "serving": {**BATCH_8B["serving"], "concurrency": 1}}), mini_catalog)
    assert chosen.choice is not None and one.choice is not None
    c = chosen.choice.shape.concurrency
    assert 32 <= c <= MAX_BATCH_CONCURRENCY
    assert one.choice.shape.concurrency == 0
    assert chosen.choice.cost.total_usd * 20 < one.choice.cost.total_usd
    assert any(t.name == "batch concurrency" and t.value == c for t in chosen.choice.shape.terms)


def test_concurrency_is_bounded_by_the_kv_cache(mini_catalog: Catalog) -> None:
    """A long context fills the GPU's memory with KV cache well before 256 sequences: the chosen
    concurrency's shape fits, and the next power of two does not fit the same machine."""
    long = spec_of({**BATCH_8B, "serving": {"context_tokens": 131072, "tokens": "1e8"}})
    candidates = concurrency_requirements(long)
    it = next(o.instance for o in mini_catalog.offers if o.instance.name == "p5.4xlarge")
    shape = best_concurrency_fit(candidates, it)
    assert isinstance(shape, Shape) and 1 <= shape.concurrency < MAX_BATCH_CONCURRENCY
    nxt = dict(candidates)[shape.concurrency * 2]
    assert isinstance(fit(nxt, it), Rejection)


def test_the_choice_minimises_instance_hours_among_the_candidates(mini_catalog: Catalog) -> None:
    spec = spec_of(BATCH_8B)
    candidates = concurrency_requirements(spec)
    it = next(o.instance for o in mini_catalog.offers if o.instance.name == "p5.4xlarge")
    best = best_concurrency_fit(candidates, it)
    assert isinstance(best, Shape)
    hours = {}
    for c, req in candidates:
        shape = fit(req, it)
        if isinstance(shape, Shape):
            hours[c] = (shape.job_hours or 0) * shape.instances
    assert (best.job_hours or 0) * best.instances <= min(hours.values()) * 1.01
    assert requirements(spec).concurrency == 1  # the spec's own requirements are untouched


def test_plan_json_and_text_report_the_concurrency(mini_catalog: Catalog, tmp_path: Any, capsys: Any) -> None:
    import yaml

    from cli.main import main
    from tests.conftest import MINI_CATALOG

    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(BATCH_8B))
    assert main(["plan", str(path), "--catalog", str(MINI_CATALOG), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    c = doc["choice"]["shape"]["concurrency"]
    assert isinstance(c, int) and c >= 32
    assert main(["plan", str(path), "--catalog", str(MINI_CATALOG)]) == 0
    text = capsys.readouterr().out
    # issue 24's calibration has decode rows up to 480 sequences: 256 is within it, no ESTIMATE
    assert f"batch concurrency {c} sequences per replica (fewest instance-hours" in text
    assert c <= CALIBRATED_DECODE_CONCURRENCY and "ESTIMATE beyond the calibrated" not in text
    tp = doc["choice"]["shape"]["tensor_parallel"]
    assert f"gpufit starts vllm on 127.0.0.1 (TP {tp}, max-num-seqs {c})" in text
    assert main(["plan", str(path), "--catalog", str(MINI_CATALOG), "--explain"]) == 0
    explain = capsys.readouterr().out
    assert "ESTIMATE: decode speed at" not in explain and "gpufit starts on 127.0.0.1 runs with it" in explain
    own = {**BATCH_8B, "serving": {**BATCH_8B["serving"], "engine": "none"}}
    path.write_text(yaml.safe_dump(own))
    assert main(["plan", str(path), "--catalog", str(MINI_CATALOG)]) == 0
    text = capsys.readouterr().out
    assert "engine must pass $GPUFIT_MAX_NUM_SEQS" in text and "gpufit starts" not in text


def test_the_calibrated_concurrency_is_the_calibration_files() -> None:
    """Decode speed is checked against published rows only up to their highest concurrency; a
    choice above it is marked ESTIMATE (the file, not the constant, is the evidence)."""
    from pathlib import Path

    import yaml

    cases = yaml.safe_load((Path(__file__).parent.parent / "docs" / "calibration.yaml").read_text())["cases"]
    decode = [c["serving"]["concurrency"] for c in cases if c["kind"] == "decode_tokens_per_s"]
    assert decode and max(decode) == CALIBRATED_DECODE_CONCURRENCY


def test_a_token_batch_without_a_command_is_refused() -> None:
    """Nothing would run it: gpufit starts no engine for task batch (the machine boots idle)."""
    from selector.spec import SpecError, parse_spec

    with pytest.raises((SpecError, ValueError), match=r"job\.command: a task batch that generates") as raised:
        parse_spec({k: v for k, v in BATCH_8B.items() if k != "job"})
    assert "\n" not in str(raised.value).strip()


@pytest.mark.parametrize("c", [1, 256])
def test_candidates_carry_their_concurrency(c: int) -> None:
    reqs = dict(concurrency_requirements(spec_of(BATCH_8B)))
    assert reqs[c].concurrency == c


def test_each_machine_type_of_the_fleet_gets_its_own_concurrency(mini_catalog: Catalog) -> None:
    """The boot script's per-type table carries the concurrency chosen for that type; the machine
    exports it to job.command as GPUFIT_MAX_NUM_SEQS (tests/machine/scenarios/aws-group-replicas-p5)."""
    from datetime import UTC, datetime

    from deployment.translate import deployment_from_plan
    from machine.boot import replica_shapes

    spec = spec_of({**BATCH_8B, "fault_tolerance": "stateless", "teardown": {"ttl": "24h"}})
    result = plan(spec, mini_catalog)
    assert result.choice is not None
    d = deployment_from_plan(
        result, stack="dev", project="gpufit", created_at=datetime(2026, 12, 4, tzinfo=UTC)
    )
    assert d.max_num_seqs == result.choice.shape.concurrency > 1
    want = {result.choice.offer.instance.machine_type: result.choice.shape.concurrency}
    want |= {f.offer.instance.machine_type: f.shape.concurrency for f in result.fallbacks}
    got = {entry.split(":")[0]: int(entry.split(":")[3]) for entry in replica_shapes(d)}
    assert got == want and all(c > 1 for c in got.values())


def test_a_token_batch_deploys_its_engine_on_loopback_at_the_chosen_concurrency(
    mini_catalog: Catalog,
) -> None:
    """Issue 24 item 8, "launch the engine with it": the deployment carries the engine gpufit
    starts for job.command (127.0.0.1, the plan's concurrency, the plan's TP), and a gated model's
    engine needs the Hugging Face token like a served one."""
    from datetime import UTC, datetime

    from deployment import missing_token
    from deployment.translate import deployment_from_plan
    from machine.serving import engine_argv

    result = plan(spec_of({**BATCH_8B, "teardown": {"ttl": "24h"}}), mini_catalog)
    assert result.choice is not None
    d = deployment_from_plan(
        result, stack="dev", project="gpufit", created_at=datetime(2026, 12, 4, tzinfo=UTC)
    )
    engine = d.batch_engine
    assert engine is not None and d.server is None and engine.loopback
    argv = engine_argv(engine, 0)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--max-num-seqs") + 1] == str(result.choice.shape.concurrency)
    assert argv[argv.index("--tensor-parallel-size") + 1] == str(result.choice.shape.tensor_parallel)
    assert "meta-llama" in (missing_token(d, have_token=False) or "")
    own = spec_of(
        {**BATCH_8B, "serving": {**BATCH_8B["serving"], "engine": "none"}, "teardown": {"ttl": "24h"}}
    )
    mine = deployment_from_plan(
        plan(own, mini_catalog), stack="dev", project="gpufit", created_at=datetime(2026, 12, 4, tzinfo=UTC)
    )
    assert mine.batch_engine is None and mine.max_num_seqs > 1


def test_a_token_batch_whose_engine_cannot_start_says_how_to_run_its_own(mini_catalog: Catalog) -> None:
    from datetime import UTC, datetime

    from deployment.translate import ServingError, deployment_from_plan

    explicit = {"params_b": 8, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336}
    result = plan(spec_of({**BATCH_8B, "model": explicit, "teardown": {"ttl": "24h"}}), mini_catalog)
    created = datetime(2026, 12, 4, tzinfo=UTC)
    with pytest.raises(ServingError, match=r"model\.hf must name the repo to serve, or serving\.engine none"):
        deployment_from_plan(result, stack="dev", project="gpufit", created_at=created)


def test_a_concurrency_beyond_the_calibrated_rows_is_marked_estimate() -> None:
    top = CALIBRATED_DECODE_CONCURRENCY
    assert not is_estimate(top) and estimate_note(top) == ""
    assert is_estimate(top + 1) and f"beyond the calibrated {top}" in estimate_note(top + 1)


def test_a_token_batch_is_timed_and_budgeted_as_the_engine_gpufit_starts_for_it() -> None:
    """gpufit starts ``spec.batch_engine`` beside job.command with the serving replica's own argv
    (``machine.serving.batch_engine_start``): the decode is that engine's (CUDA graphs, its memory
    budget, one node), not the eager loop of a server gpufit does not launch; ``serving.engine:
    none`` (the command runs its own) keeps the eager, slow-side terms."""
    from selector.sizing.speed import EAGER_LAYER_LATENCY_S, LAYER_LATENCY_S

    for engine in ("vllm", "sglang"):
        spec = {**BATCH_8B, "serving": {**BATCH_8B["serving"], "concurrency": 64, "engine": engine}}
        req = requirements(spec_of(spec))
        assert req.engine == engine
        (layer,) = [t for t in req.terms if t.name == "per-layer latency"]
        assert layer.value == LAYER_LATENCY_S * 1e6
    own = {**BATCH_8B, "serving": {**BATCH_8B["serving"], "concurrency": 64, "engine": "none"}}
    req = requirements(spec_of(own))
    assert req.engine == "none"
    (layer,) = [t for t in req.terms if t.name == "per-layer latency"]
    assert layer.value == EAGER_LAYER_LATENCY_S * 1e6
    default = requirements(spec_of({**BATCH_8B, "serving": {**BATCH_8B["serving"], "concurrency": 64}}))
    assert default.engine == "vllm"  # spec.batch_engine's default


def test_a_token_batch_gets_its_engine_build_and_the_disk_for_its_image(mini_catalog: Catalog) -> None:
    """The engine a token batch starts is chosen per GPU and driver like a server's (the engine
    filter: ``Candidate.engine``), and the boot disk holds its container image; a command that runs
    its own engine gets neither."""
    from selector.cost import ENGINE_IMAGE_ALLOWANCE_GB, disk_parts

    started = plan(spec_of(BATCH_8B), mini_catalog)
    assert started.choice is not None and started.choice.engine is not None
    assert started.choice.engine.engine == "vllm"
    parts = {p.name: p.gb for p in disk_parts(started.spec, started.requirements)}
    assert parts["engine image"] == ENGINE_IMAGE_ALLOWANCE_GB
    own = plan(spec_of({**BATCH_8B, "serving": {**BATCH_8B["serving"], "engine": "none"}}), mini_catalog)
    assert own.choice is not None and own.choice.engine is None
    assert "engine image" not in {p.name for p in disk_parts(own.spec, own.requirements)}


def test_the_engine_a_token_batch_starts_refuses_what_a_served_one_would() -> None:
    """The spec check covers the engine gpufit starts for job.command: a context above the model's
    maximum and a flag its release does not take are spec errors, as for a served model; engine
    arguments with ``serving.engine: none`` have no engine to go to."""
    from selector.spec.loading import SpecError

    bad = {
        **BATCH_8B,
        "serving": {**BATCH_8B["serving"], "context_tokens": 200000, "engine_args": ["--nope"]},
    }
    with pytest.raises(SpecError) as err:
        spec_of(bad)
    assert "131,072 tokens" in str(err.value) and "--nope is not a flag of vLLM" in str(err.value)
    own = {**BATCH_8B, "serving": {**BATCH_8B["serving"], "engine": "none", "engine_args": ["--nope"]}}
    with pytest.raises(SpecError, match=r"serving\.engine_args and serving\.rope_scaling need"):
        spec_of(own)


def test_an_sglang_batch_fleet_keeps_to_machines_launched_like_its_choice() -> None:
    """One boot script starts the batch engine on every machine of the fleet with the choice's
    --mem-fraction-static (only TP, sequences and ports are per type): a type whose own SGLang
    static pool would differ is not in the fleet; under vLLM (one 0.9 budget) the mixed fleet stays."""
    from selector.batch_concurrency import batch_launch_values
    from selector.catalog import load_catalog

    catalog = load_catalog()
    mixtral = {"preset": "mixtral-8x7b"}
    plans = {}
    for engine in ("vllm", "sglang"):
        doc = {
            **BATCH_8B,
            "model": mixtral,
            "serving": {**BATCH_8B["serving"], "concurrency": 64, "engine": engine},
        }
        spec = spec_of(doc)
        result = plan(spec, catalog)
        assert result.choice is not None
        launch = batch_launch_values(spec, result.choice.offer.instance, result.choice.shape)
        assert all(batch_launch_values(spec, f.offer.instance, f.shape) == launch for f in result.fallbacks)
        plans[engine] = (spec, result, launch)
    _, vllm_plan, vllm_launch = plans["vllm"]
    assert vllm_launch == (None, None) and len({f.offer.instance.gpu.name for f in vllm_plan.fallbacks}) > 1
    sglang_spec, sglang_plan, sglang_launch = plans["sglang"]
    assert sglang_launch[0] is not None  # the static pool of the choice's GPU, TP and sequences
    # the types vLLM's fleet mixes would each start SGLang with a pool of their own: left out
    other = [
        f
        for f in vllm_plan.fallbacks
        if batch_launch_values(sglang_spec, f.offer.instance, f.shape) != sglang_launch
    ]
    assert other and not {f.offer.instance.name for f in other} & {
        f.offer.instance.name for f in sglang_plan.fallbacks
    }
