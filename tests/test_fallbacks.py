"""The fleet's fallback list: same cloud, region and market as the choice; a batch fleet takes
machines of several sizes and GPUs, each weighted by the replicas it holds, a serving or training
fleet the choice's replica shape; cheapest expected job first; shown by `gpufit plan`, pinned by
locks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import main
from gitops.lock import LOCK_SCHEMA_VERSION, locked_catalog, make_lock, read_lock, reviewed_difference
from selector.catalog import Catalog, load_catalog
from selector.cost import cost_inputs, offer_cost, with_wait
from selector.fallbacks import MAX_FALLBACKS, fleet_shape, fleet_units, offered_in
from selector.obtainability import obtainability
from selector.rates import load_rates
from selector.select import Plan, plan
from selector.spec import WorkloadSpec, load_spec, parse_spec
from tests.conftest import ROOT
from tests.fakes.zoned import OfferKey, write_zoned, zoned_catalog, zoned_doc
from tests.pulumi_harness import stack_config

CATALOG = load_catalog()
NOW = "2026-12-02T12:00:00Z"


def stack_plan(stack: str, **changes: Any) -> Plan:
    if not changes:
        return plan(load_spec(ROOT / "stacks" / f"Pulumi.{stack}.yaml"), CATALOG)
    workload = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"]
    return plan(parse_spec({**workload, **changes}), CATALOG)


def test_fallbacks_share_region_market_and_replica_shape_in_cost_order() -> None:
    result = stack_plan("sdxl-batch")
    choice = result.choice
    assert choice is not None
    fallbacks = result.fallbacks
    assert 2 <= len(fallbacks) <= MAX_FALLBACKS
    for f in fallbacks:
        assert (f.offer.cloud, f.offer.region, f.offer.market) == (
            choice.offer.cloud,
            choice.offer.region,
            choice.offer.market,
        )
        assert f.shape.nodes_per_replica == 1 and f.offer.instance.name != choice.offer.instance.name
        # the whole fleet on this type: its replicas carry the choice's capacity
        assert f.shape.instances * f.weighted_capacity >= result.fleet_units
        assert f.weighted_capacity == f.shape.replicas_per_instance
    assert len({f.offer.instance.name for f in fallbacks}) == len(fallbacks)
    expected = [f.cost.expected_usd for f in fallbacks]
    assert expected == sorted(expected) and expected[0] >= choice.cost.expected_usd


def test_a_batch_fleet_takes_machines_of_several_sizes_weighted_by_the_replicas_they_hold() -> None:
    """sdxl-batch runs 2 one-GPU replicas on g6e.xlarge (an L40S each); its fleet also takes
    4-GPU and 8-GPU machines, each counting for the replicas it holds (GPUs ÷ TP), each costed
    for the whole job at its own speed with as many instances as the 2 replicas need."""
    result = stack_plan("sdxl-batch")
    choice = result.choice
    assert choice is not None and choice.shape.replicas_per_instance == 1 and result.fleet_units == 2
    weights = {f.offer.instance.name: f.weighted_capacity for f in result.fallbacks}
    assert weights["g6e.48xlarge"] == 8 and weights["g6e.12xlarge"] == 4 and weights["g6e.2xlarge"] == 1
    rates = load_rates()
    inputs = cost_inputs(result.spec, result.requirements)
    for f in result.fallbacks:
        assert f.weighted_capacity == f.offer.instance.gpu_count // f.shape.tensor_parallel
        assert f.shape.instances == -(-2 // f.weighted_capacity)
        billed = offer_cost(f.offer, f.shape, inputs, rates)
        deadline = result.requirements.deadline_hours  # the wait is truncated at the ttl
        waited = with_wait(billed, obtainability(f.offer), result.wait_value_per_hour, deadline)
        assert f.cost.total_usd == billed.total_usd and f.cost.wait_usd == pytest.approx(waited.wait_usd)
    big = next(f for f in result.fallbacks if f.offer.instance.name == "g6e.48xlarge")
    assert big.shape.instances == 1 and big.shape.job_hours is not None
    assert choice.shape.job_hours is not None and big.shape.job_hours < choice.shape.job_hours


def test_a_batch_fleet_mixes_gpus_at_their_own_tensor_parallelism() -> None:
    """Mixtral in bf16 needs TP 1 on H200, TP 2 on H100 and TP 4 on A100-40GB: all join one batch
    fleet, each machine running its GPUs ÷ its TP replicas."""
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / "09-mixtral-synthetic-data.yaml")
    result = plan(spec, CATALOG)
    assert result.choice is not None and result.choice.offer.instance.name == "p5en.48xlarge"
    assert result.choice.shape.tensor_parallel == 1 and result.choice.shape.replicas_per_instance == 8
    shapes = {f.offer.instance.name: (f.shape.tensor_parallel, f.weighted_capacity) for f in result.fallbacks}
    assert shapes["p5.48xlarge"] == (2, 4) and shapes["p4d.24xlarge"] == (4, 2)


def test_serving_and_training_fleets_keep_the_choices_replica_shape() -> None:
    serving = stack_plan("llama8b-fp8")
    qlora = ROOT / "tests" / "fixtures" / "realistic" / "12-guanaco-65b-qlora.yaml"
    training = plan(load_spec(qlora), CATALOG)
    for result in (serving, training):
        choice = result.choice
        assert choice is not None and len(result.fallbacks) >= 2
        for f in result.fallbacks:
            assert f.weighted_capacity == choice.shape.replicas_per_instance
            assert f.shape.gpus_per_replica == choice.shape.gpus_per_replica
            assert f.shape.tensor_parallel == choice.shape.tensor_parallel


def test_fleet_shape_scales_a_jobs_hours_with_its_instances() -> None:
    own = stack_plan("sdxl-batch").choice
    assert own is not None
    doubled = fleet_shape(own.shape, 2 * fleet_units(own.shape))
    assert doubled.instances == 2 * own.shape.instances
    assert doubled.job_hours == pytest.approx(own.shape.job_hours / 2)


def test_serving_fallbacks_reach_the_token_rate_with_the_choices_replicas() -> None:
    """llama8b-fp8 serves 4,000 tok/s on g6e.xlarge: its fp8 checkpoint decoding as W8A8 at 0.46 of
    the bandwidth (issue 24, session 14) gives an L40S replica 700.5, so 6 replicas; every fallback
    runs 6 that reach the rate."""
    result = stack_plan("llama8b-fp8")
    assert result.choice is not None and result.fleet_units == result.choice.shape.replicas == 6
    assert result.fallbacks
    for f in result.fallbacks:
        assert f.shape.replicas == 6
        assert f.shape.tokens_per_s_per_replica is not None
        assert f.shape.tokens_per_s_per_replica * 6 >= 4000 - 1e-6


def test_a_replica_spanning_nodes_falls_back_by_attempt_and_placement_is_honoured() -> None:
    # kept off p6-b200.48xlarge, whose one node holds the whole fine-tune: a replica of 8-GPU
    # nodes, whose fallbacks (issue 25) are `gpufit up` attempts of the other p5* types
    spanning = stack_plan("llama70b-full-ft", placement={"regions": ["us-east-2"], "instance_types": ["p5*"]})
    choice = spanning.choice
    assert choice is not None and choice.shape.nodes_per_replica > 1 and choice.offer.zone is not None
    others = {
        o.instance.name
        for o in CATALOG.offers
        if (o.region, o.market) == (choice.offer.region, choice.offer.market)
        and offered_in(o, choice.offer.zone)
        and o.instance.name.startswith("p5")
    }
    assert len(others - {choice.offer.instance.name}) >= 2
    assert spanning.fallbacks and all(
        f.realised == "attempt" and f.offer.instance.name.startswith("p5") for f in spanning.fallbacks
    )
    only = stack_plan("sdxl-batch", placement={"clouds": ["aws"], "instance_types": ["p5.48xlarge", "g6e.*"]})
    assert only.choice is not None and only.choice.offer.instance.name.startswith("g6e.")
    assert only.fallbacks and all(
        f.offer.instance.name == "p5.48xlarge" or f.offer.instance.name.startswith("g6e.")
        for f in only.fallbacks
    )


def test_fallbacks_keep_to_the_budget() -> None:
    free = stack_plan("sdxl-batch", budget={"max_total_usd": 1000})
    assert len(free.fallbacks) >= 3
    cap = sorted(f.cost.total_usd for f in free.fallbacks)[1]
    tight = stack_plan("sdxl-batch", budget={"max_total_usd": cap})
    assert tight.fallbacks and all(f.cost.total_usd <= cap for f in tight.fallbacks)
    assert len(tight.fallbacks) < len(free.fallbacks)


def test_gcp_fallbacks_attach_the_same_gpus() -> None:
    """An N1 choice with 4 attached T4s: the fallbacks in its group are N1 types attaching 4
    T4s; g2-standard-48 (4 L4s in its machine type) needs another instance template, so a batch
    job takes it in a group of its own (issue 25: several MIGs), never in the choice's."""
    spec = {
        "name": "sdxl-gcp",
        "task": "batch",
        "model": {"preset": "sdxl-base-1.0"},
        "precision": "fp16",
        "work": {"items": 2e4, "tflop_per_item": 60, "batch": 1},  # batch 8 of SDXL outgrows a T4
        "fault_tolerance": "stateless",
        "teardown": {"ttl": "12h"},
        "placement": {
            "clouds": ["gcp"],
            "regions": ["us-east4"],
            "instance_types": ["n1-*+t4x4", "g2-standard-48"],
            "gcp_instance_flexibility": True,
        },
    }
    result = plan(parse_spec(spec), CATALOG)
    assert result.choice is not None
    attached = result.choice.offer.instance.attached_accelerator
    assert attached == "nvidia-tesla-t4" and result.fallbacks
    in_group = [f for f in result.fallbacks if f.realised != "group"]
    assert in_group
    for f in in_group:
        assert f.offer.instance.attached_accelerator == attached
        assert f.offer.instance.gpu_count == result.choice.offer.instance.gpu_count
        assert f.weighted_capacity == result.choice.shape.replicas_per_instance  # a MIG counts VMs
    realised = {f.offer.instance.name: f.realised for f in result.fallbacks}
    assert realised.get("g2-standard-48") == "group"
    serving = parse_spec({**spec, "placement": {**spec["placement"], "gcp_instance_flexibility": None}})
    assert all(f.realised == "flexibility" for f in plan(serving, CATALOG).fallbacks if f.realised != "group")


def test_plan_shows_and_exports_the_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")]) == 0
    fleet = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Fleet"))
    assert fleet.startswith(
        "Fleet     2 replicas, each machine counted by the replicas it holds; fallbacks: g6e.48xlarge "
        "use2-az3 spot $5.03/h ×8 (medium), g6e.12xlarge use2-az3 spot $2.89/h ×4 (medium), "
    )
    assert main(["plan", str(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml"), "--json"]) == 0
    choice = json.loads(capsys.readouterr().out)["choice"]
    expected = stack_plan("sdxl-batch")
    assert [f["instance_type"] for f in choice["fallbacks"]] == [
        f.offer.instance.name for f in expected.fallbacks
    ]
    first = choice["fallbacks"][0]
    assert {"instance_type", "market", "hourly_usd", "weighted_capacity", "obtainability"} <= set(first)
    assert (first["market"], first["weighted_capacity"]) == ("spot", 8)
    assert {f["weighted_capacity"] for f in choice["fallbacks"]} == {1, 4, 8}
    assert choice["fleet_units"] == 2 and choice["weighted_capacity"] == 1


def test_a_lock_pins_the_fallbacks_and_replans_them_exactly(tmp_path: Path) -> None:
    result = stack_plan("sdxl-batch")
    from datetime import UTC, datetime

    lock = make_lock(result, ROOT / "stacks" / "Pulumi.sdxl-batch.yaml", datetime(2026, 12, 2, tzinfo=UTC))
    assert [f["offer"]["instance_type"] for f in lock["fallbacks"]] == [
        f.offer.instance.name for f in result.fallbacks
    ]
    replanned = plan(result.spec, locked_catalog(lock, CATALOG.gpus))
    assert reviewed_difference(lock, replanned) is None
    changed = json.loads(json.dumps(lock))
    changed["fallbacks"][0]["weighted_capacity"] = 3  # as if sizing had changed since the review
    assert "fallbacks now plan as" in (reviewed_difference(changed, replanned) or "")


def test_lock_check_finds_a_changed_fallback_list_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.sdxl-batch.yaml").write_text((ROOT / "stacks" / "Pulumi.sdxl-batch.yaml").read_text())
    assert main(["lock", "sdxl-batch", "--stacks", str(stacks), "--catalog", "snapshot"]) == 0
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 0
    path = stacks / "sdxl-batch.lock.json"
    lock = read_lock(path)
    lock["fallbacks"].reverse()  # as if the review had seen another order
    path.write_text(json.dumps(lock))
    capsys.readouterr()
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 8
    out = capsys.readouterr().out
    assert "stale" in out and "fallbacks now plan as" in out


# ------------------------------------------------------------------------------------- zones
# On the snapshot made region-level (tests.fakes.zoned), sdxl kept to us-east-2 and to 8-GPU
# types other than p6-b200.48xlarge chooses g6e.48xlarge, with p5e, p5en, p5, g6 and p4d of the
# same shape as fallbacks; each test then decides which of them are zone-specific and where.

E2 = ["use2-az1", "use2-az2", "use2-az3"]
SDXL_PLACEMENT = {
    "clouds": ["aws"],
    "regions": ["us-east-2"],
    "instance_types": ["g6e.48xlarge", "g6.48xlarge", "p5*.48xlarge", "p4d.24xlarge"],
}
SDXL_SPOT = ("aws", "g6e.48xlarge", "us-east-2", "spot")
P5E_SPOT = ("aws", "p5e.48xlarge", "us-east-2", "spot")
P5_SPOT = ("aws", "p5.48xlarge", "us-east-2", "spot")
G6_SPOT = ("aws", "g6.48xlarge", "us-east-2", "spot")
PINNED = {
    # the choice is cheapest in az1 (a zone-specific spot price)
    "split": {SDXL_SPOT: {"use2-az1": 0.9, "use2-az2": 1.0}, P5E_SPOT: {"use2-az1": 1.2, "use2-az2": 0.95}},
    "zones": {"us-east-2": E2},
    # region-level offers: p5 known in az2 and az3 only, g6 in zones not known
    "only": {P5_SPOT: ["use2-az2", "use2-az3"], G6_SPOT: []},
}


def sdxl_on(catalog: Catalog) -> Plan:
    workload = stack_config(ROOT / "stacks" / "Pulumi.sdxl-batch.yaml")["gpufit:workload"]
    # batch 4: an L4 (g6) still holds it; at the stack's batch 8 each further image's ~2.6 GB
    # (the Flux-measured increment, an estimate for SDXL) outgrows one
    work = {**workload["work"], "batch": 4}
    return plan(parse_spec({**workload, "work": work, "placement": SDXL_PLACEMENT}), catalog)


def region_price(key: OfferKey) -> float:
    """``key``'s region-level price in the zoned catalog (its snapshot zones' highest)."""
    (price,) = (
        o["hourly_usd"]
        for o in zoned_doc()["offers"]
        if (o["cloud"], o["instance_type"], o["region"], o["market"]) == key
    )
    return float(price)


def write_pinned_sdxl(stacks: Path) -> Path:
    """The sdxl-batch stack file in ``stacks``, kept to ``SDXL_PLACEMENT``."""
    stacks.mkdir(exist_ok=True)
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.sdxl-batch.yaml").read_text())
    doc["config"]["gpufit:workload"]["placement"] = SDXL_PLACEMENT
    path = stacks / "Pulumi.sdxl-batch.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_zone_pinned_choice_falls_back_only_within_its_zone() -> None:
    """Its price holds in its zone only, so the fleet launches there only: each fallback is
    offered in that zone (its own zone offer, or a region-level one known there), once per
    type at that zone's price, even where another zone is cheaper."""
    result = sdxl_on(zoned_catalog(**PINNED))
    choice = result.choice
    assert choice is not None
    assert (choice.offer.zone, choice.offer.zones) == ("use2-az1", ("use2-az1",))
    names = [f.offer.instance.name for f in result.fallbacks]
    assert len(names) == len(set(names)) >= 3
    assert all(offered_in(f.offer, "use2-az1") for f in result.fallbacks)
    p5e = next(f for f in result.fallbacks if f.offer.instance.name == "p5e.48xlarge")
    assert p5e.offer.zone == "use2-az1"  # not az2's lower price: the fleet cannot launch there
    assert p5e.offer.hourly_usd == pytest.approx(region_price(P5E_SPOT) * 1.2, abs=1e-3)
    # known only in other zones, or in zones not known: no fallback of a pinned choice
    assert "p5.48xlarge" not in names and "g6.48xlarge" not in names
    expected = [f.cost.expected_usd for f in result.fallbacks]
    assert expected == sorted(expected)


def test_a_region_level_choice_keeps_the_region_wide_fallbacks_once_per_type() -> None:
    """A region-level choice spreads over the region: its fallbacks are every qualifying
    offer of the choice's zones (here every zone of the region), each type once at its
    dearest zone there: the group may start it in any of them."""
    zoned = sdxl_on(
        zoned_catalog(
            split={P5E_SPOT: {"use2-az1": 1.2, "use2-az2": 0.95}}, zones=PINNED["zones"], only=PINNED["only"]
        )
    )
    plain = sdxl_on(zoned_catalog(zones=PINNED["zones"]))  # every offer region-level, in every zone
    assert zoned.choice is not None and zoned.choice.offer.zone is None
    assert zoned.choice.offer.instance.name == "g6e.48xlarge"
    assert zoned.choice.offer.zones == tuple(E2)
    names = [f.offer.instance.name for f in zoned.fallbacks]
    assert sorted(names) == sorted(f.offer.instance.name for f in plain.fallbacks)
    assert {"p5.48xlarge", "g6.48xlarge"} <= set(names)  # known in other zones, or zones not known
    p5e = next(f for f in zoned.fallbacks if f.offer.instance.name == "p5e.48xlarge")
    expected = ("use2-az1", pytest.approx(region_price(P5E_SPOT) * 1.2, abs=1e-3))
    assert (p5e.offer.zone, p5e.offer.hourly_usd) == expected


def test_a_lock_pins_the_zone_and_a_changed_zone_makes_it_stale() -> None:
    from datetime import UTC, datetime

    result = sdxl_on(zoned_catalog(**PINNED))
    lock = make_lock(result, ROOT / "stacks" / "Pulumi.sdxl-batch.yaml", datetime(2026, 12, 2, tzinfo=UTC))
    assert lock["schema_version"] == LOCK_SCHEMA_VERSION == 4
    assert (lock["offer"]["zone"], lock["offer"]["zones"]) == ("use2-az1", ["use2-az1"])
    assert all("use2-az1" in f["offer"]["zones"] for f in lock["fallbacks"])
    replanned = plan(result.spec, locked_catalog(lock, CATALOG.gpus))
    assert replanned.choice is not None and replanned.choice.offer.zone == "use2-az1"
    assert replanned.choice.offer.zones == ("use2-az1",)
    assert reviewed_difference(lock, replanned) is None
    # the choice moved to az2: its az1-only fallback no longer qualifies
    moved = json.loads(json.dumps(lock))
    moved["offer"].update(zone="use2-az2", zones=["use2-az2"])
    difference = reviewed_difference(moved, plan(result.spec, locked_catalog(moved, CATALOG.gpus)))
    assert difference is not None and "fallbacks now plan as" in difference
    assert "p5e.48xlarge" not in difference.split("[")[1]
    # a fallback's zone is part of what the review saw
    elsewhere = json.loads(json.dumps(lock))
    elsewhere["fallbacks"][0]["offer"].update(zone="use2-az2", zones=["use2-az2"])
    replanned = plan(result.spec, locked_catalog(elsewhere, CATALOG.gpus))
    assert "fallbacks now plan as" in (reviewed_difference(elsewhere, replanned) or "")


def test_a_version_2_lock_without_zones_still_reads_and_replans(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    result = stack_plan("sdxl-batch")
    lock = make_lock(result, ROOT / "stacks" / "Pulumi.sdxl-batch.yaml", datetime(2026, 12, 2, tzinfo=UTC))
    lock["schema_version"] = 2
    for entry in (lock, *lock["fallbacks"]):
        del entry["offer"]["zones"]
    path = tmp_path / "old.lock.json"
    path.write_text(json.dumps(lock))
    old = read_lock(path)
    replanned = plan(result.spec, locked_catalog(old, CATALOG.gpus))
    # a zone-priced (spot) offer keeps its one zone; a region-level one has none
    assert replanned.choice is not None
    assert replanned.choice.offer.zones in ((), (lock["offer"].get("zone"),))
    assert reviewed_difference(old, replanned) is None
    path.write_text(json.dumps({**lock, "schema_version": 1}))
    with pytest.raises(ValueError, match="schema_version 2 or 3 or 4 expected"):
        read_lock(path)


def test_lock_check_finds_a_moved_zone_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stacks = tmp_path / "stacks"
    write_pinned_sdxl(stacks)
    catalog = write_zoned(tmp_path / "zoned.json", **PINNED)
    assert main(["lock", "sdxl-batch", "--stacks", str(stacks), "--catalog", str(catalog)]) == 0
    assert "in use2-az1" in capsys.readouterr().out
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 0
    path = stacks / "sdxl-batch.lock.json"
    lock = read_lock(path)
    lock["offer"].update(zone="use2-az2", zones=["use2-az2"])
    path.write_text(json.dumps(lock))
    capsys.readouterr()
    assert main(["lock", "--check", "--stacks", str(stacks)]) == 8
    assert "stale" in capsys.readouterr().out


def test_offer_zones_default_to_the_offers_own_zone() -> None:
    doc = zoned_doc(split={SDXL_SPOT: {"use2-az1": 1.0}})
    for offer in doc["offers"]:
        offer.pop("zones", None)  # a catalog that names the zone only
    from selector.catalog import catalog_from_doc

    catalog = catalog_from_doc(doc, "zone only")
    zoned = [o for o in catalog.offers if o.zone is not None]
    assert zoned and all(o.zones == (o.zone,) for o in zoned)
    assert all(o.zones == () for o in catalog.offers if o.zone is None)


def test_a_fleet_of_mixed_weights_says_its_leave_is_unconfirmed() -> None:
    """No AWS statement says a weighted machine's ``--should-decrement-desired-capacity`` lowers
    the group by its weight: a fleet that mixes weights says so on its Fleet line; a fleet whose
    machines all hold the choice's replicas does not."""
    from cli.render import fleet_line

    mixed = stack_plan("sdxl-batch")
    assert {f.weighted_capacity for f in mixed.fallbacks} - {mixed.choice_weight}
    assert mixed.weighted_leave_note is not None and "UNCONFIRMED" in mixed.weighted_leave_note
    assert mixed.weighted_leave_note in fleet_line(mixed)
    even = plan(load_spec(ROOT / "tests" / "fixtures" / "realistic" / "12-guanaco-65b-qlora.yaml"), CATALOG)
    assert all(f.weighted_capacity == even.choice_weight for f in even.fallbacks)
    assert even.weighted_leave_note is None and "UNCONFIRMED" not in fleet_line(even)


MIXED_GCP = ROOT / "tests" / "contracts" / "specs" / "gcp-batch-mixed-sizes.yaml"


def flexible(fixture: str) -> WorkloadSpec:
    """A realistic fixture opted in to GCP instance flexibility (off by default)."""
    spec = load_spec(ROOT / "tests" / "fixtures" / "realistic" / f"{fixture}.yaml")
    placement = spec.placement.model_copy(update={"gcp_instance_flexibility": True})
    return spec.model_copy(update={"placement": placement})


def test_a_gcp_batch_group_counts_vms_and_each_vm_runs_the_replicas_its_gpus_hold() -> None:
    """A MIG's target size is VMs: a GCP batch fleet keeps the choice's VM count whatever size
    each VM gets, each running its GPUs ÷ TP replicas; the shared work takes longer on a
    smaller VM (planned within the TTL) and is costed so."""
    spec = parse_spec(yaml.safe_load(MIXED_GCP.read_text())["config"]["gpufit:workload"])
    result = plan(spec, CATALOG)
    choice = result.choice
    assert choice is not None and choice.offer.instance.name == "a3-highgpu-4g"  # least setup cost
    assert choice.shape.instances == 1 and choice.shape.job_hours is not None
    names = [f.offer.instance.name for f in result.fallbacks]
    assert names == ["a3-highgpu-2g", "a3-highgpu-8g", "a3-highgpu-1g"]
    for f in result.fallbacks:
        assert f.shape.instances == choice.shape.instances  # the group's VMs, not its units
        assert f.weighted_capacity == f.offer.instance.gpu_count // f.shape.tensor_parallel
        assert f.shape.replicas == f.shape.instances * f.weighted_capacity
        gpus = f.offer.instance.gpu_count
        assert f.shape.job_hours == pytest.approx(choice.shape.job_hours * 4 / gpus, rel=0.02)
        assert f.cost.hours <= result.requirements.deadline_hours
    # the realistic fixture's 48 h ttl: timed as the vLLM gpufit starts for job.command (issue 24,
    # session 14), it plans 3 two-GPU VMs (45.0 h); every fallback is bigger and ends within the ttl
    short = plan(flexible("29-qwen14b-gcp-spot-batch"), CATALOG)
    assert short.choice is not None and short.choice.offer.instance.name == "a3-highgpu-2g"
    assert short.choice.shape.instances == 3 and short.fallbacks
    assert all(f.offer.instance.gpu_count > 2 and f.shape.instances == 3 for f in short.fallbacks)
    assert all(f.cost.hours <= short.requirements.deadline_hours for f in short.fallbacks)


def test_a_gcp_endpoint_falls_back_to_bigger_vms_of_its_series_with_gpus_idle() -> None:
    """A served model's launch is rendered for the choice's replicas per VM: a bigger VM of the
    same series and GPU runs it unchanged (GPUs idle), costed at its own price; another series
    or GPU does not join. 2,000 tok/s in all, not the fixture's 3,000: under the decode model of
    issue 24 (fp8 at 0.38 of the bandwidth) one H100 gives 2,274, so 2,500 or 3,000 takes 2 replicas,
    whose default on-demand base a GCP group cannot keep beside spot."""
    fixture = ROOT / "tests" / "fixtures" / "realistic" / "02-llama8b-spot-endpoint.yaml"
    raw = yaml.safe_load(fixture.read_text())
    raw["serving"]["tokens_per_s_total"] = 2000
    raw["placement"] = {**raw.get("placement", {}), "gcp_instance_flexibility": True}
    result = plan(parse_spec(raw), CATALOG)
    choice = result.choice
    assert choice is not None and choice.offer.instance.name == "a3-highgpu-1g"
    assert choice.shape.replicas == 1
    assert [(f.offer.instance.name, f.offer.market) for f in result.fallbacks] == [
        ("a3-highgpu-2g", "spot"),
        ("a3-highgpu-4g", "spot"),
        ("a3-highgpu-8g", "spot"),
        ("a3-highgpu-8g", "on-demand"),  # its own STANDARD group: a spot drought's (issue 25)
    ]
    for f in result.fallbacks:
        assert f.weighted_capacity == choice.shape.replicas_per_instance
        assert (f.shape.replicas_per_instance, f.shape.instances) == (1, 1)
        assert f.shape.tensor_parallel == choice.shape.tensor_parallel
        assert f.cost.hourly_usd == pytest.approx(f.offer.hourly_usd * f.shape.instances, rel=0.01)
    assert result.breadth_note is None
    on_demand = stack_plan("llama13b-gcp", placement={"clouds": ["gcp"], "gcp_instance_flexibility": True})
    assert on_demand.choice is not None
    series = on_demand.choice.offer.instance.machine_type.rsplit("-", 1)[0]
    assert on_demand.fallbacks and all(
        f.offer.instance.machine_type.startswith(series + "-") for f in on_demand.fallbacks
    )


def test_the_breadth_note_names_a_fallback_only_the_deadline_turned_away() -> None:
    """Review of the integrated tree (issue 25, nit 4), fixture 27 with a 59 h ttl (at its own 48 h,
    10 p4d.24xlarge keep both p5 and p5en within it; up to 56 h, 9 do): 8 p4d.24xlarge spot in
    aps1-az1 run the job in 56.7 h of the 59; the p5en.48xlarge fallback, sized by weighted capacity
    to 2 instances, takes 61.1 h, past it: the note says the deadline is what limits the fleet (a
    ttl of 62 h, the same 8 p4d, brings p5en back as a fallback). Ranked by expected cost alone
    (``placement.min_fallbacks: 0``): by default the plan takes a broader fleet."""
    doc = yaml.safe_load((ROOT / "tests/fixtures/realistic/27-qwen3-30b-moe-batch.yaml").read_text())
    doc["placement"] = {**doc.get("placement", {}), "min_fallbacks": 0}
    doc["teardown"] = {"ttl": "59h"}
    planned = plan(parse_spec(doc), CATALOG)
    assert planned.choice is not None and planned.choice.offer.instance.name == "p4d.24xlarge"
    assert planned.choice.offer.zone == "aps1-az1" and planned.choice.shape.instances == 8
    assert planned.choice.cost.hours == pytest.approx(56.7, abs=0.05)
    assert [f.offer.instance.name for f in planned.fallbacks] == ["p5.48xlarge"]
    assert [(e.instance_type, e.instances) for e in planned.late] == [("p5en.48xlarge", 2)]
    assert planned.late[0].hours > 59
    note = planned.breadth_note or ""
    assert (
        "; the deadline limits it: p5en.48xlarge (2 instance(s)) takes 61.1 h, past the stack's deadline"
        in note
    )
    longer = plan(parse_spec({**doc, "teardown": {"ttl": "62h"}}), CATALOG)
    assert longer.choice is not None and longer.choice.offer.key == planned.choice.offer.key
    assert longer.choice.shape.instances == 8 and longer.late == ()
    assert "p5en.48xlarge" in {f.offer.instance.name for f in longer.fallbacks}


def test_late_of_keeps_the_choices_region_the_fastest_offer_and_no_kept_type() -> None:
    from types import SimpleNamespace

    from selector.breadth import Late, deadline_text, late_of

    late = [
        Late("p5en.48xlarge", "ap-south-1", 2, 60.0),
        Late("p5en.48xlarge", "ap-south-1", 2, 52.0),
        Late("p5.48xlarge", "ap-south-1", 1, 50.0),  # another zone's offer made the fleet
        Late("p4de.24xlarge", "us-east-1", 8, 49.0),  # another region (broader_region's search)
    ]
    kept = [SimpleNamespace(offer=SimpleNamespace(instance=SimpleNamespace(name="p5.48xlarge")))]
    assert late_of(late, "ap-south-1", kept) == (Late("p5en.48xlarge", "ap-south-1", 2, 52.0),)
    assert deadline_text(()) == ""
