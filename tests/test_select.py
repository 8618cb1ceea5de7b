"""Choosing the cheapest feasible offer: market policy, budget, rejections, and a property
test against a brute-force minimum over random catalogs and specs."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from selector.catalog import INTERRUPTION_BUCKETS, Catalog, Offer, catalog_from_doc, load_gpus
from selector.cost import Cost, cost_inputs, job_setup, offer_cost, with_wait
from selector.images import unsupported_reason
from selector.markets import market_preference, on_demand_base
from selector.obtainability import obtainability
from selector.rates import load_rates
from selector.select import Candidate, engine_rejection, plan, rank_key
from selector.sizing import Rejection, Shape, fit, requirements
from selector.spec import WorkloadSpec
from tests.conftest import QLORA_65B, SERVE_70B, spec_of

RATES = load_rates()


def test_serving_picks_cheapest_fitting_on_demand(mini_catalog: Catalog) -> None:
    result = plan(spec_of(SERVE_70B), mini_catalog)
    assert result.status == "ok" and result.choice is not None
    assert result.choice.offer.instance.name == "p4de.24xlarge"
    assert result.choice.offer.market == "on-demand"  # fault_tolerance none
    assert result.rejections["market"] >= 1
    totals = [c.cost.expected_usd for c in (result.choice, *result.alternatives)]
    assert totals == sorted(totals)


def test_checkpointed_work_takes_spot_when_cheaper(mini_catalog: Catalog) -> None:
    result = plan(spec_of(QLORA_65B), mini_catalog)
    assert result.choice is not None and result.choice.offer.market == "spot"


def test_stateless_prefers_spot_then_falls_back(mini_catalog: Catalog) -> None:
    spec = spec_of(QLORA_65B, fault_tolerance="stateless")
    result = plan(spec, mini_catalog)
    assert result.choice is not None and result.choice.offer.market == "spot"
    only_od = spec_of(QLORA_65B, fault_tolerance="stateless", placement={"instance_types": ["p5.4xlarge"]})
    fallback = plan(only_od, mini_catalog)
    assert fallback.choice is not None and fallback.choice.offer.market == "on-demand"


def test_cost_per_job_lets_a_faster_gpu_win(mini_catalog: Catalog) -> None:
    """Per hour, a 1×H100 is far cheaper than 8×H100; a job too long for one GPU within its
    TTL goes to the eight, ranked by the job's total, not the hourly price."""
    both = {"instance_types": ["p5.4xlarge", "p5.48xlarge"]}
    training = {**QLORA_65B["training"], "tokens": "5e8"}
    result = plan(spec_of(QLORA_65B, fault_tolerance="none", placement=both, training=training), mini_catalog)
    assert result.choice is not None and result.choice.offer.instance.name == "p5.48xlarge"
    assert result.rejections["deadline"] >= 1


def test_setup_time_is_paid_by_every_gpu_of_a_short_job(mini_catalog: Catalog) -> None:
    """Issue 24, defect 7: a short job on 8×H100 finishes sooner at the same price per GPU-hour,
    but all eight GPUs wait through boot, the 130 GB download and loading: the 1×H100 wins, and
    the gap is the setup hours times the difference in hourly price."""
    both = {"instance_types": ["p5.4xlarge", "p5.48xlarge"]}
    result = plan(spec_of(QLORA_65B, fault_tolerance="none", placement=both), mini_catalog)
    assert result.choice is not None and result.choice.offer.instance.name == "p5.4xlarge"
    eight = next(c for c in result.alternatives if c.offer.instance.name == "p5.48xlarge")
    one = result.choice
    assert one.cost.setup_hours == pytest.approx(eight.cost.setup_hours) and one.cost.setup_hours > 0.3
    job_one = one.cost.hours - one.cost.setup_hours
    job_eight = eight.cost.hours - eight.cost.setup_hours
    assert job_one * one.cost.hourly_usd == pytest.approx(job_eight * eight.cost.hourly_usd, rel=0.02)
    gap = eight.cost.compute_usd - one.cost.compute_usd
    assert gap == pytest.approx(
        one.cost.setup_hours * (eight.cost.hourly_usd - one.cost.hourly_usd), rel=0.05
    )


def test_budget_rejects_with_amount_over(mini_catalog: Catalog) -> None:
    result = plan(spec_of(SERVE_70B, budget={"max_hourly_usd": 10}), mini_catalog)
    assert result.status == "over-budget" and result.choice is None
    budget_misses = [m for m in result.misses if m.rejection.filter == "budget"]
    assert budget_misses and "over max_hourly_usd $10.00" in budget_misses[0].rejection.reason
    total = plan(spec_of(SERVE_70B, budget={"max_total_usd": 100}), mini_catalog)
    assert total.status == "over-budget"


def test_nothing_feasible_explains_closest_misses(mini_catalog: Catalog) -> None:
    spec = spec_of(SERVE_70B, model={"preset": "llama-3.1-405b"}, placement={"clouds": ["gcp"]}, budget=None)
    result = plan(spec, mini_catalog)
    assert result.status == "infeasible"
    assert result.rejections["placement"] > 0 and result.misses
    assert all(m.offer.instance.cloud == "gcp" for m in result.misses)
    assert "vram" in {m.rejection.filter for m in result.misses}
    gaps = [m.rejection.gap for m in result.misses if m.rejection.filter != "budget"]
    assert gaps == sorted(gaps)


def test_placement_globs_and_regions(mini_catalog: Catalog) -> None:
    spec = spec_of(QLORA_65B, placement={"instance_types": ["g6e.*"], "regions": ["us-east-*"]})
    result = plan(spec, mini_catalog)
    assert result.choice is not None and result.choice.offer.instance.name.startswith("g6e.")
    assert all(c.offer.instance.name.startswith("g6e.") for c in result.alternatives)


def test_alternatives_are_distinct_instance_types_and_markets(mini_catalog: Catalog) -> None:
    result = plan(spec_of(QLORA_65B), mini_catalog, top=10)
    keys = [(c.offer.instance.name, c.offer.market) for c in (result.choice, *result.alternatives) if c]
    assert len(keys) == len(set(keys))


# --- the property test --------------------------------------------------------------------


def brute_force(spec: WorkloadSpec, catalog: Catalog) -> Candidate | None:
    """Score every offer on its own, with no caching or grouping, and take the minimum."""
    req = requirements(spec)
    inputs = cost_inputs(spec, req)
    best: tuple[tuple[object, ...], Candidate] | None = None
    feasible: list[tuple[Offer, Shape, Cost]] = []
    p = spec.placement
    for offer in catalog.offers:
        it = offer.instance
        if it.cloud not in p.clouds:
            continue
        if p.instance_types and not any(fnmatch.fnmatchcase(it.name, g) for g in p.instance_types):
            continue
        if p.regions and not any(fnmatch.fnmatchcase(offer.region, g) for g in p.regions):
            continue
        pref = market_preference(spec, offer.market)
        if pref is None:
            continue
        if engine_rejection(spec, req, it, {}) is not None:  # no pinned engine build runs there
            continue
        # a job's setup on this offer runs inside the ttl before its work: the work fits the rest
        setup = job_setup(offer, inputs)
        shape = fit(req, it, setup_hours=setup.hours if setup is not None else 0.0)
        if not isinstance(shape, Shape) or unsupported_reason(it.cloud, it.machine_type):
            continue
        base = on_demand_base(spec, offer, shape, catalog)
        if isinstance(base, Rejection):
            continue
        cost = offer_cost(offer, shape, inputs, RATES, base)
        if spec.teardown is not None and inputs.run_hours is None and cost.hours > spec.teardown.ttl:
            continue
        if spec.budget.max_hourly_usd is not None and cost.hourly_usd > spec.budget.max_hourly_usd:
            continue
        if spec.budget.max_total_usd is not None and cost.total_usd > spec.budget.max_total_usd:
            continue
        feasible.append((offer, shape, cost))
    # An hour of waiting for capacity is worth the lowest hourly spend of a feasible plan.
    value = min((cost.hourly_usd for _, _, cost in feasible), default=0.0)
    # A failure to launch re-runs the job on the best plan whose market is confirmed.
    deadline = spec.teardown.ttl if spec.teardown is not None and inputs.run_hours is None else None
    judged = [(o, s, c, obtainability(o, s.nodes_per_replica)) for o, s, c in feasible]
    # (its billed total and its wait, truncated at the ttl)
    rerun = min(
        (
            c.total_usd + with_wait(c, obt, value, deadline).wait_usd
            for _, _, c, obt in judged
            if obt.never == 0.0
        ),
        default=None,
    )
    for offer, shape, cost, obt in judged:
        waited = with_wait(cost, obt, value, deadline, rerun)
        key = rank_key(0, waited.expected_usd, offer.instance.gpu_count * shape.instances, offer)
        if best is None or key < best[0]:
            best = (key, Candidate(offer, shape, waited))
    return best[1] if best else None


GPU_NAMES = sorted(load_gpus())
REGIONS = {"aws": ["us-east-1", "us-west-2", "eu-west-1"], "gcp": ["us-central1", "us-east4"]}


@st.composite
def catalogs(draw: Any) -> Catalog:
    types, offers = [], []
    for i in range(draw(st.integers(1, 12))):
        cloud = draw(st.sampled_from(["aws", "gcp"]))
        count = draw(st.sampled_from([1, 2, 4, 8]))
        # AWS names carry a family: g6e has a supported Deep Learning AMI, p3 none (an image rejection)
        name = f"{draw(st.sampled_from(['g6e', 'p3']))}.t{i}x{count}" if cloud == "aws" else f"t{i}.{count}x"
        types.append(
            {
                "cloud": cloud,
                "name": name,
                "gpu": draw(st.sampled_from(GPU_NAMES)),
                "gpu_count": count,
                "vcpus": 4 * count,
                "memory_gib": draw(st.sampled_from([16, 64, 256, 1024])),
                "nvlink": draw(st.booleans()) if count > 1 else False,
                "node_interconnect": draw(st.sampled_from([None, "efa"])),
                "source": "T",
            }
        )
        seen = set()
        for _ in range(draw(st.integers(1, 5))):
            region = draw(st.sampled_from(REGIONS[cloud]))
            market = draw(st.sampled_from(["on-demand", "spot"]))
            if (region, market) in seen:
                continue
            seen.add((region, market))
            offers.append(
                {
                    "cloud": cloud,
                    "instance_type": name,
                    "region": region,
                    "zone": None,
                    "market": market,
                    "source": "T",
                    "as_of": "2026-01",
                    "hourly_usd": draw(st.floats(0.1, 120, allow_nan=False).map(lambda x: round(x, 3))),
                }
            )
    interruptions = [
        {
            "cloud": o["cloud"],
            "region": o["region"],
            "instance_type": o["instance_type"],
            "bucket": draw(st.sampled_from(INTERRUPTION_BUCKETS)),
            "source": "T",
            "as_of": "2026",
        }
        for o in offers
        if o["market"] == "spot" and draw(st.booleans())
    ]
    doc = {
        "schema_version": 1,
        "as_of": "2026-01",
        "source": "random",
        "sources": {"T": {}},
        "instance_types": types,
        "offers": offers,
        "spot_interruption": interruptions,
    }
    return catalog_from_doc(doc, "random")


@st.composite
def specs(draw: Any) -> WorkloadSpec:
    template = draw(st.sampled_from(["serve8b", "serve70b", "qlora", "full7b", "diffusion"]))
    common: dict[str, Any] = {
        "fault_tolerance": draw(st.sampled_from(["none", "checkpointed", "stateless"])),
        "placement": {
            "clouds": draw(st.sampled_from([["aws"], ["gcp"], ["aws", "gcp"]])),
            "allow_pcie_tensor_parallel": draw(st.booleans()),
            **({"regions": ["us-*"]} if draw(st.booleans()) else {}),
        },
        "budget": draw(st.sampled_from([{}, {"max_hourly_usd": 20}, {"max_total_usd": 5000}])),
        "egress": {"gb": draw(st.sampled_from([0, 50, 20000])), "to": "internet"},
    }
    if template.startswith("serve"):
        model = "llama-3.1-8b" if template == "serve8b" else "llama-3.1-70b"
        serving = {
            "context_tokens": draw(st.sampled_from([1024, 8192])),
            "concurrency": draw(st.sampled_from([1, 8, 32])),
        }
        if draw(st.booleans()):
            serving["tokens_per_s_per_stream"] = draw(st.sampled_from([10, 40]))
        if draw(st.booleans()):
            serving["tokens_per_s_total"] = 3000
        return spec_of(
            {
                **SERVE_70B,
                **common,
                "model": {"preset": model},
                "serving": serving,
                "precision": draw(st.sampled_from(["bf16", "fp8", "int4"])),
            }
        )
    if template == "qlora":
        return spec_of(
            {**QLORA_65B, **common, "teardown": draw(st.sampled_from([{"ttl": "48h"}, {"ttl": "4h"}]))}
        )
    if template == "full7b":
        return spec_of(
            {
                **QLORA_65B,
                **common,
                "task": "finetune-full",
                "precision": "bf16",
                "model": {"preset": "llama-2-7b"},
                "training": {"tokens": "1e9"},
            }
        )
    return spec_of(
        {
            **SERVE_70B,
            **common,
            "task": "batch",
            "serving": None,
            "model": {"preset": "sdxl-base-1.0"},
            "precision": "fp16",
            "work": {"items": "2e5", "tflop_per_item": 100},
            "duration": None,
        }
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalogs(), specs())
def test_choice_equals_brute_force_minimum(catalog: Catalog, spec: WorkloadSpec) -> None:
    """Ranked by expected cost alone (``placement.min_fallbacks: 0``; the breadth rule is
    tested in tests/test_breadth_choice.py)."""
    spec = spec.model_copy(update={"placement": spec.placement.model_copy(update={"min_fallbacks": 0})})
    expected = brute_force(spec, catalog)
    result = plan(spec, catalog)
    if expected is None:
        assert result.choice is None
        return
    assert result.choice is not None
    assert result.choice.offer.key == expected.offer.key
    assert result.choice.cost.total_usd == pytest.approx(expected.cost.total_usd, rel=1e-12)
    assert result.choice.cost.expected_usd == pytest.approx(expected.cost.expected_usd, rel=1e-12)
    assert result.feasible >= 1 + len(result.alternatives)


def test_spot_rework_past_the_ttl_is_rejected(mini_catalog: Catalog) -> None:
    """A job that fits the TTL on demand but not with its expected spot rework loses the spot offer."""
    base = plan(spec_of(QLORA_65B), mini_catalog)
    assert base.choice is not None and base.choice.shape.job_hours is not None
    hours = base.choice.shape.job_hours + base.choice.cost.setup_hours  # setup runs inside the ttl
    tight = spec_of(
        QLORA_65B,
        teardown={"ttl": f"{hours * 1.0001 * 3600:.0f}s"},
        restart_overhead="2h",
        placement={"instance_types": [base.choice.offer.instance.name]},
    )
    result = plan(tight, mini_catalog)
    assert result.rejections.get("deadline", 0) >= 1
    assert "with spot rework" in result.rejection_examples["deadline"]


def test_a_spot_endpoint_keeps_anon_demand_base(mini_catalog: Catalog) -> None:
    """Two or more replicas on spot keep one on demand (its price in the bill); one replica
    stays on spot unless asked; a base covering every replica, or on GCP (one provisioning
    model per managed instance group), rules the spot offer out with the reason."""
    serving = {
        "context_tokens": 4096,
        "concurrency": 8,
        "tokens_per_s_per_stream": 10,
        "tokens_per_s_total": 600,
    }
    spec = spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, fault_tolerance="stateless", serving=serving)
    result = plan(spec, mini_catalog)
    choice = result.choice
    assert choice is not None and choice.offer.market == "spot" and choice.shape.instances >= 2
    assert choice.cost.on_demand_base == 1
    od = mini_catalog.on_demand_prices[(choice.offer.cloud, choice.offer.instance.name, choice.offer.region)]
    expected = od + choice.offer.hourly_usd * (choice.shape.instances - 1)
    assert choice.cost.hourly_usd == pytest.approx(expected)
    single = spec_of(SERVE_70B, model={"preset": "llama-3.1-8b"}, fault_tolerance="stateless")
    one_replica = plan(single, mini_catalog)
    assert one_replica.choice is not None and one_replica.choice.cost.on_demand_base == 0
    forced = spec_of(
        SERVE_70B,
        model={"preset": "llama-3.1-8b"},
        fault_tolerance="stateless",
        serving={**SERVE_70B["serving"], "on_demand_base": 1},
    )
    all_od = plan(forced, mini_catalog)
    assert all_od.choice is not None and all_od.choice.offer.market == "on-demand"
    assert "keeps all 1 replica(s) on-demand" in all_od.rejection_examples["market"]
    gcp = spec_of(SERVE_70B, fault_tolerance="stateless", placement={"clouds": ["gcp"]}, serving=serving)
    gcp_plan = plan(gcp, mini_catalog)
    assert gcp_plan.choice is None or gcp_plan.choice.offer.market == "on-demand"
    assert "managed instance group runs one provisioning model" in gcp_plan.rejection_examples["market"]
