"""Choose the cheapest offer that satisfies a workload.

Offers pass a chain of named filters (placement, market, the sizing fit, budget); each
rejection says which filter and why. Survivors are ranked by expected total cost of the
workload (per job for batch and training, for the duration when serving), tie-broken by
fewer GPUs, then more memory bandwidth. The ``Plan`` carries the choice, the best
alternative per instance type and market, rejection counts and the closest misses.
"""

from __future__ import annotations

import fnmatch
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from functools import partial
from operator import attrgetter
from typing import Literal

from selector.attempt_pin import held, pinned_catalog
from selector.batch_concurrency import best_concurrency_fit, chooses_concurrency, concurrency_requirements
from selector.breadth import (
    GCP_ONE_TYPE_NOTE,
    MIN_FALLBACKS,
    BroaderRegion,
    Late,
    broader_region,
    broader_text,
    deadline_text,
    late_of,
)
from selector.capacity import BlockQuote
from selector.capacity_plan import CapacityOptions, capacity_preference
from selector.catalog import CAPACITY_MARKETS, MARKETS, Catalog, InstanceType, Offer
from selector.cost import Cost, CostInputs, cost_inputs, cost_key, instance_setup_hours, offer_cost, with_wait
from selector.engines import EngineBuild, choose_build
from selector.fallbacks import (
    MAX_FALLBACKS,
    VM_COUNTED_CLOUDS,
    Fallback,
    RefugeGap,
    fallbacks,
    fleet_units,
    multinode_note,
    spanning_offer,
)
from selector.freshness import PriceAges, price_ages_counted
from selector.images import boot_image, unsupported_reason
from selector.markets import NO_BASE, market_preference, on_demand_base
from selector.obtainability import failure_usd, obtainability, wait_usd
from selector.rates import CloudRates, load_rates
from selector.sizing import Rejection, Requirements, Shape, fit, fit_serving_at, requirements
from selector.spec import ExcludeSpec, WorkloadSpec

PlanStatus = Literal["ok", "infeasible", "over-budget"]
_Entry = tuple[Offer, Shape, int, float, float, float, int, tuple[int, float]]
"""A feasible offer: offer, shape, preference, billed total, hours, interruptions/h, GPUs, base."""

FIT_FILTERS = (
    "engine",
    "fp8",
    "precision",
    "bandwidth",
    "vram",
    "nvlink",
    "interconnect",
    "speed",
    "deadline",
    "host-memory",
    "image",
)
"""Filters that say the machine cannot do the job (as opposed to placement, market, budget);
``image``: no machine image gpufit boots supports it (``selector.images``)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A feasible offer with how the workload runs on it and what it costs."""

    offer: Offer
    shape: Shape
    cost: Cost
    engine: EngineBuild | None = None  # the model server build a serve plan launches on it

    @property
    def total_gpus(self) -> int:
        return self.offer.instance.gpu_count * self.shape.instances


@dataclass(frozen=True, slots=True)
class Miss:
    """An offer that almost made it: the cheapest offer of its instance type, and why not."""

    offer: Offer
    rejection: Rejection


@dataclass(frozen=True)
class Plan:
    spec: WorkloadSpec
    requirements: Requirements
    choice: Candidate | None
    alternatives: tuple[Candidate, ...]
    rejections: dict[str, int]
    rejection_examples: dict[str, str]
    misses: tuple[Miss, ...]
    feasible: int
    considered: int
    catalog: Catalog
    fallbacks: tuple[Fallback, ...] = ()
    broader_region: BroaderRegion | None = None
    """Where a fleet with fewer than two fallbacks would have several (``broader_region``)."""
    late: tuple[Late, ...] = ()  # fallbacks of the choice's region only the deadline turned away
    refuge_gaps: tuple[RefugeGap, ...] = ()  # on-demand groups only the budget turned away
    price_ages: PriceAges | None = None
    """The dates of the prices of the offers the plan considered (placement allowed)."""
    wait_value_per_hour: float = 0.0
    """What an hour of waiting for capacity is worth: the lowest hourly spend of any feasible
    plan (``selector.obtainability``)."""

    @property
    def choice_weight(self) -> int:
        """How many replicas (capacity units) one instance of the choice holds."""
        return self.choice.shape.replicas_per_instance if self.choice is not None else 0

    @property
    def fleet_units(self) -> int:
        """The fleet's desired capacity in replicas (0 without a choice)."""
        return fleet_units(self.choice.shape) if self.choice is not None else 0

    @property
    def breadth_note(self) -> str | None:
        """Why a stateless or checkpointed fleet has fewer than two fallbacks (issue 25: "several
        fallbacks unless the user pinned a type"), or None when it has them or needs none."""
        choice = self.choice
        if choice is None:
            return None
        if self.spec.fault_tolerance == "none" or len(self.fallbacks) >= MIN_FALLBACKS:
            return None
        if self.spec.placement.instance_types is not None:
            return "placement.instance_types pins the types"
        if choice.offer.market in CAPACITY_MARKETS:
            return f"a {choice.offer.market} holds machines of one type"
        offer = choice.offer
        n = len(self.fallbacks)
        tail = deadline_text(self.late) + broader_text(self.broader_region)
        if choice.shape.nodes_per_replica > 1:
            return multinode_note(offer, n) + tail
        resumes = self.spec.task != "serve" and self.spec.fault_tolerance == "checkpointed"
        grouped = self.spec.task in ("batch", "serve") or resumes  # fallbacks in MIGs of their own
        if offer.cloud in VM_COUNTED_CLOUDS and n == 0 and not grouped:
            return GCP_ONE_TYPE_NOTE
        if offer.cloud in VM_COUNTED_CLOUDS:
            vms = choice.shape.instances
            each = (
                "each VM running the replicas its GPUs hold"
                if self.spec.task == "batch"
                else "each VM of the choice's GPU count and at least its GPU memory, in a group of its own"
                if resumes
                else "each VM of at least the choice's GPU memory running its replicas (GPUs beyond them "
                "idle), in a group of its own behind the one backend service"
                if self.spec.task == "serve"
                else "each VM running the choice's replicas, a bigger one of its series with GPUs idle"
            )
            return (
                f"a {offer.cloud} managed instance group keeps one instance template and counts VMs: "
                f"only {n} other type(s) run it in {offer.region}, "
                f"{offer.market}, as {vms} VM(s), {each}, within the budget and ttl"
            ) + tail
        where = offer.region
        if offer.zone is not None:
            where = f"{offer.zone} (widening to {offer.region}'s zones found no more)"
        note = f"only {n} other type(s) run it in {where}, {offer.market}, within the budget and ttl"
        return note + tail

    @property
    def weighted_leave_note(self) -> str | None:
        """The caveat of a fleet that mixes machine weights (AWS ``WeightedCapacity``): AWS says
        only that ``TerminateInstanceInAutoScalingGroup`` "decrements the size of the Auto
        Scaling group" (API reference), ``DetachInstances`` "by the number of instances
        detached"; no AWS statement says by the weight (UNCONFIRMED)."""
        if self.choice is None or self.choice.offer.cloud in VM_COUNTED_CLOUDS:
            return None
        weights = {self.choice_weight, *(f.weighted_capacity for f in self.fallbacks)}
        if len(weights) < 2:
            return None
        return (
            "UNCONFIRMED: whether a finished machine lowers the group by its weight or by 1; if by 1, "
            "the group may start a machine that finds the shared work done and leaves (a boot's cost)"
        )

    @property
    def status(self) -> PlanStatus:
        if self.choice is not None:
            return "ok"
        return "over-budget" if self.rejections.get("budget") else "infeasible"


def _matches(patterns: list[str] | None, value: str) -> bool:
    return patterns is None or any(fnmatch.fnmatchcase(value, p) for p in patterns)


def rank_key(pref: int, total: float, gpus: int, offer: Offer) -> tuple[object, ...]:
    """Expected total cost, then fewer GPUs, then more bandwidth, then names (determinism)."""
    it = offer.instance
    return (
        pref,
        total,
        gpus,
        -it.gpu.bandwidth_gbps,
        it.cloud,
        it.name,
        offer.region,
        offer.zone or "",
        offer.market,
    )


class _Tally:
    """Rejection counts, one example reason per filter, the closest miss per instance type."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.misses: dict[tuple[str, str], Miss] = {}

    def reject(self, rejection: Rejection, offers: int = 1, offer: Offer | None = None) -> None:
        self.counts[rejection.filter] += offers
        self.examples.setdefault(rejection.filter, rejection.reason)
        if offer is None or rejection.filter not in (*FIT_FILTERS, "budget"):
            return
        key = (offer.instance.cloud, offer.instance.name)
        best = self.misses.get(key)
        if best is None or (rejection.gap, offer.hourly_usd) < (best.rejection.gap, best.offer.hourly_usd):
            self.misses[key] = Miss(offer, rejection)


def engine_rejection(
    spec: WorkloadSpec,
    req: Requirements,
    it: InstanceType,
    builds: dict[tuple[str, str], EngineBuild | None],
) -> Rejection | None:
    """The engine filter of a serve plan that starts a model server: the build it launches on
    ``it`` (recorded in ``builds``), or why no pinned build serves the model on its GPU with the
    driver of the image it boots (``selector.engines.choose_build``)."""
    engine = spec.server_engine
    if engine not in ("vllm", "sglang"):
        return None
    image = boot_image(it.cloud, it.name)
    if image is None:  # no image boots it: the image filter says so
        return None
    chosen = choose_build(engine, req.arch.family, it.gpu, image.nvidia_driver, image.label)
    if isinstance(chosen, str):
        builds[(it.cloud, it.name)] = None
        return Rejection("engine", chosen)
    builds[(it.cloud, it.name)] = chosen
    return None


def _budget(inputs: CostInputs, hourly: float, total: float) -> Rejection | None:
    if inputs.budget_hourly is not None and hourly > inputs.budget_hourly:
        over = hourly - inputs.budget_hourly
        return Rejection(
            "budget",
            f"${hourly:,.2f}/h is ${over:,.2f}/h over max_hourly_usd ${inputs.budget_hourly:,.2f}",
            gap=over / inputs.budget_hourly,
        )
    if inputs.budget_total is not None and total > inputs.budget_total:
        over = total - inputs.budget_total
        return Rejection(
            "budget",
            f"${total:,.2f} in all is ${over:,.2f} over max_total_usd ${inputs.budget_total:,.2f}",
            gap=over / inputs.budget_total,
        )
    return None


def _without_excluded(catalog: Catalog, exclude: list[ExcludeSpec], tally: _Tally) -> Catalog:
    """``catalog`` less the offers ``placement.exclude`` names (choice, alternatives and fleet
    fallbacks alike), each counted as a placement rejection."""
    if not exclude:
        return catalog
    kept: list[Offer] = []
    for offer in catalog.offers:
        where = (offer.cloud, offer.region, offer.instance.name, offer.market)
        rule = next((e for e in exclude if e.matches(*where)), None)
        if rule is None:
            kept.append(offer)
            continue
        why = f" ({rule.reason})" if rule.reason else ""
        tally.reject(Rejection("placement", f"{rule.label} is in placement.exclude{why}"))
    return replace(catalog, offers=tuple(kept)) if len(kept) < len(catalog.offers) else catalog


def plan(
    spec: WorkloadSpec,
    catalog: Catalog,
    top: int = 5,
    rates: dict[str, CloudRates] | None = None,
    feasible_out: list[Candidate] | None = None,
    today: date | None = None,
    block_quotes: tuple[BlockQuote, ...] | None = None,
) -> Plan:
    """Rank every offer of ``catalog`` for ``spec``; the cheapest feasible one is the choice.
    ``feasible_out``, when given, receives every feasible offer as a candidate (for the plan
    report's chart; the plan itself keeps the best per instance type and market). ``today``
    dates a Capacity Block (the catalog's date when not given); ``block_quotes``: live Capacity
    Block offerings (``catalog.capacity_blocks``), else reference rates (``selector.capacity``)."""
    rates = rates if rates is not None else load_rates()
    req = requirements(spec)
    inputs = cost_inputs(spec, req)
    # Batch generation without a stated concurrency: the best one per instance type.
    by_concurrency = concurrency_requirements(spec) if chooses_concurrency(spec) else None
    placement = spec.placement
    tally = _Tally()
    full_catalog = catalog
    catalog = _without_excluded(catalog, placement.exclude, tally)
    catalog = pinned_catalog(catalog, placement.attempt, tally.reject)
    best: dict[tuple[str, str, str], tuple[tuple[object, ...], Offer, Shape]] = {}
    fits: dict[tuple[object, ...], Shape | Rejection] = {}
    builds: dict[tuple[str, str], EngineBuild | None] = {}

    def fit_of(it: InstanceType) -> Shape | Rejection:
        key = (it.gpu.name, it.gpu_count, it.nvlink, it.node_interconnect, it.memory_gib, it.name)
        shape = fits.get(key)
        if shape is None:
            why = engine_rejection(spec, req, it, builds)
            if why is not None:
                shape = why
            else:
                # A job's setup runs inside the ttl, before its work (sizing.fit.within_ttl).
                fit_one = partial(fit, setup_hours=instance_setup_hours(it, inputs))
                if by_concurrency is None:
                    shape = fit_one(req, it)
                else:
                    shape = best_concurrency_fit(by_concurrency, it, fit_one)
            unbootable = unsupported_reason(it.cloud, it.machine_type)
            if isinstance(shape, Shape) and unbootable is not None:
                shape = Rejection("image", unbootable)
            fits[key] = shape
        return shape

    market_rejection = Rejection("market", f"fault_tolerance {spec.fault_tolerance} runs on-demand only")
    serving_base = spec.task == "serve"  # a spot endpoint may keep an on-demand base
    pref_of = capacity_preference(spec, {market: market_preference(spec, market) for market in MARKETS})
    options = CapacityOptions(spec, catalog, inputs, today, block_quotes)
    budget_hourly, budget_total = inputs.budget_hourly, inputs.budget_total
    # Jobs must finish, interruptions included, before the TTL tears them down.
    deadline = req.deadline_hours if inputs.run_hours is None else None
    considered: Counter[str] = Counter()
    # Feasible offers that may rank first: (offer, shape, preference, billed total, hours,
    # interruption rate, GPUs, on-demand base); every feasible one for ``feasible_out``.
    entries: list[_Entry] = []
    everything: list[_Entry] | None = [] if feasible_out is not None else None
    feasible = 0
    cheapest_hourly = math.inf
    for it, offers in options.instance_types():
        if it.cloud not in placement.clouds:
            tally.reject(Rejection("placement", f"{it.cloud} is not in placement.clouds"), len(offers))
            continue
        if not _matches(placement.instance_types, it.name):
            tally.reject(
                Rejection("placement", f"{it.name} does not match placement.instance_types"), len(offers)
            )
            continue
        shape = fit_of(it)
        allowed = offers
        if placement.regions is not None:
            allowed = tuple(o for o in offers if _matches(placement.regions, o.region))
            if len(allowed) < len(offers):
                tally.reject(
                    Rejection("placement", "region not in placement.regions"), len(offers) - len(allowed)
                )
        if not isinstance(shape, Rejection):
            allowed = held(placement.attempt, options.offers_for(it, shape, allowed, tally.reject))
        considered.update(map(_AS_OF, allowed))
        if isinstance(shape, Rejection):
            if allowed:
                usable = [o for o in allowed if pref_of[o.market] is not None] or list(allowed)
                tally.reject(shape, len(allowed), min(usable, key=lambda o: o.hourly_usd))
            continue
        instances = shape.instances
        gpus = it.gpu_count * instances
        costs: dict[tuple[object, ...], tuple[float, float, float, float]] = {}
        bases: dict[str, tuple[int, float] | Rejection] = {}
        # The cheapest offer of each market and obtainability class: the others of the class
        # wait as long (same p, same interruptions), so none of them can rank first.
        local: dict[tuple[str, str | None, int | None], tuple[float, str, str, _Entry]] = {}
        for offer in allowed:
            market = offer.market
            pref = pref_of[market]
            if pref is None:
                tally.reject(market_rejection)
                continue
            base: tuple[int, float] | Rejection | None = NO_BASE
            if market == "reservation":
                base = options.reserved_base
            elif market == "spot" and serving_base:
                base = bases.get(offer.region)
                if base is None:
                    base = bases[offer.region] = on_demand_base(spec, offer, shape, catalog)
                if isinstance(base, Rejection):
                    tally.reject(base, 1, offer)
                    continue
            assert base is not None and not isinstance(base, Rejection)
            bucket = offer.interruption_bucket
            ck = cost_key(offer, inputs, base)
            cached = costs.get(ck)
            if cached is None:
                c = offer_cost(offer, shape, inputs, rates, base)
                cached = costs[ck] = (c.billed_hours, c.other_usd, c.hours, c.interruption_rate_per_h)
            if deadline is not None and cached[2] > deadline:
                tally.reject(
                    Rejection(
                        "deadline",
                        f"expects {cached[2]:.1f} h with spot rework, over the {deadline:g} h ttl",
                        gap=cached[2] / deadline - 1.0,
                    ),
                    1,
                    offer,
                )
                continue
            hourly = offer.hourly_usd * (instances - base[0]) + base[1] * base[0]
            total = hourly * cached[0] + cached[1]
            if (budget_hourly is not None and hourly > budget_hourly) or (
                budget_total is not None and total > budget_total
            ):
                over = _budget(inputs, hourly, total)
                assert over is not None
                tally.reject(over, 1, offer)
                continue
            feasible += 1
            if hourly < cheapest_hourly:
                cheapest_hourly = hourly
            if everything is not None:
                everything.append((offer, shape, pref, total, cached[2], cached[3], gpus, base))
            klass = (market, bucket, offer.placement_score)
            leader = local.get(klass)
            if leader is not None and (
                total > leader[0] or (total == leader[0] and (offer.region, offer.zone or "") >= leader[1:3])
            ):
                continue
            entry = (offer, shape, pref, total, cached[2], cached[3], gpus, base)
            local[klass] = (total, offer.region, offer.zone or "", entry)
        entries.extend(e[3] for e in local.values())
    if options.reservation_refused is not None:  # the reason that matters most to the user
        tally.examples["capacity"] = options.reservation_refused
    value = catalog.wait_value_per_hour
    if value is None:
        value = cheapest_hourly if feasible else 0.0
    judged = [
        (e, obt, e[3] + wait_usd(obt, e[5] * e[4], value, None if deadline is None else deadline - e[4]))
        for e in entries
        for obt in (obtainability(e[0], e[1].nodes_per_replica),)
    ]
    # A failure to launch re-runs the job on the best plan whose market is confirmed.
    rerun = min((launched for _, obt, launched in judged if obt.never == 0.0), default=None)
    for (offer, shape, pref, _total, hours, _rate, gpus, _), obt, launched in judged:
        window = None if deadline is None else max(deadline - hours, 0.0)
        expected = launched + failure_usd(obt, window, value, launched, rerun)
        key = (offer.instance.cloud, offer.instance.name, offer.market)
        rk = rank_key(pref, expected, gpus, offer)
        top_of_type = best.get(key)
        if top_of_type is None or rk < top_of_type[0]:
            best[key] = (rk, offer, shape)
    base_of = {id(e[0]): e[7] for e in entries}

    def candidate(o: Offer, s: Shape, base: tuple[int, float]) -> Candidate:
        cost = offer_cost(o, s, inputs, rates, base)
        build = builds.get((o.instance.cloud, o.instance.name))
        return Candidate(
            o, s, with_wait(cost, obtainability(o, s.nodes_per_replica), value, deadline, rerun), build
        )

    ranked = sorted(best.values(), key=lambda entry: entry[0])[: top + 1]
    candidates = tuple(candidate(o, s, base_of[id(o)]) for _, o, s in ranked)
    if feasible_out is not None and everything is not None:
        feasible_out.extend(candidate(e[0], e[1], e[7]) for e in everything)
    backups: tuple[Fallback, ...] = ()
    late: list[Late] = []
    gaps: list[RefugeGap] = []
    # An unbudgeted on-demand service never moves back to its choice: cap what a fallback costs.
    unbudgeted = inputs.budget_hourly is None and inputs.budget_total is None
    ratio = placement.max_fallback_cost_ratio if spec.task == "serve" and unbudgeted else None

    def fleet_of(
        offer: Offer,
        shape: Shape,
        fit: Callable[[InstanceType], Shape | Rejection],
        base: tuple[int, float],
        limit: int = MAX_FALLBACKS,
    ) -> tuple[Fallback, ...]:
        return fallbacks(
            offer,
            shape,
            catalog,
            fit,
            inputs,
            rates,
            placement.instance_types,
            deadline,
            lambda hourly, total: _budget(inputs, hourly, total) is None,
            base,
            weighted=spec.task in ("batch", "embed"),
            wait_value=value,
            rerun_usd=rerun,
            fit_at=(lambda it, tp: fit_serving_at(req, it, tp)) if spec.task == "serve" else None,
            vm_flexibility=placement.gcp_instance_flexibility,
            max_cost_ratio=ratio if offer.market == "on-demand" else None,
            limit=limit,
            checkpointed=spec.task != "serve" and spec.fault_tolerance == "checkpointed",
            served=spec.task == "serve" and spec.fault_tolerance != "none",
            late=late,
            refuge_gaps=gaps,
        )

    def same_build(it: InstanceType) -> Shape | Rejection:
        """A fleet runs one boot script: a fallback must take the choice's engine build."""
        own = fit_of(it)
        if isinstance(own, Shape) and builds.get((it.cloud, it.name)) != candidates[0].engine:
            return Rejection("engine", "needs another engine build than the choice")
        return own

    if candidates:
        first = candidates[0]
        backups = fleet_of(first.offer, first.shape, same_build, base_of.get(id(first.offer), NO_BASE))
    if candidates and len(backups) < MIN_FALLBACKS and spec.fault_tolerance != "none":
        first = candidates[0]
        wide = spanning_offer(first.offer, catalog) if first.shape.nodes_per_replica == 1 else None
        if wide is not None:
            widened = candidate(wide, first.shape, base_of.get(id(first.offer), NO_BASE))
            more = fleet_of(wide, widened.shape, same_build, base_of.get(id(first.offer), NO_BASE))
            fits_budget = _budget(inputs, widened.cost.hourly_usd, widened.cost.total_usd) is None
            in_time = deadline is None or widened.cost.hours <= deadline
            if len(more) > len(backups) and fits_budget and in_time:
                candidates = (widened, *candidates[1:])
                backups = more
    broader: BroaderRegion | None = None
    if (
        candidates
        and len(backups) < MIN_FALLBACKS
        and spec.fault_tolerance != "none"
        and placement.instance_types is None
        and candidates[0].shape.nodes_per_replica == 1
        and (
            candidates[0].offer.cloud not in VM_COUNTED_CLOUDS
            or placement.gcp_instance_flexibility is not False
        )
    ):
        first = candidates[0]
        base = base_of.get(id(first.offer), NO_BASE)

        def in_region(offer: Offer) -> tuple[Offer, float, int] | None:
            wide = spanning_offer(offer, catalog) or offer
            there = candidate(wide, first.shape, base)
            if _budget(inputs, there.cost.hourly_usd, there.cost.total_usd) is not None:
                return None
            if deadline is not None and there.cost.hours > deadline:
                return None
            found = fleet_of(wide, there.shape, same_build, base, MIN_FALLBACKS)
            return (wide, there.cost.expected_usd, len(found)) if len(found) >= MIN_FALLBACKS else None

        regions_allowed = partial(_matches, placement.regions)
        broader = broader_region(
            first.offer, first.cost.expected_usd, catalog, in_region, MIN_FALLBACKS, regions_allowed
        )
    # Offers that only cost too much come first: they would run the job as it stands.
    misses = sorted(
        tally.misses.values(),
        key=lambda m: (m.rejection.filter != "budget", m.rejection.gap, m.offer.hourly_usd),
    )
    return Plan(
        spec=spec,
        requirements=req,
        choice=candidates[0] if candidates else None,
        alternatives=candidates[1:],
        rejections=dict(tally.counts),
        rejection_examples=tally.examples,
        misses=tuple(misses[:5]),
        feasible=feasible,
        considered=len(full_catalog.offers),
        catalog=full_catalog,
        fallbacks=backups,
        broader_region=broader,
        late=late_of(late, candidates[0].offer.region if candidates else "", backups),
        refuge_gaps=tuple(gaps),
        price_ages=price_ages_counted(considered),
        wait_value_per_hour=value,
    )


_AS_OF = attrgetter("as_of")
