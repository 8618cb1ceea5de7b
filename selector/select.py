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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from functools import partial
from operator import attrgetter, itemgetter
from typing import Literal

from selector.attempt_pin import held, pinned_catalog
from selector.batch_concurrency import (
    batch_launch_values,
    best_concurrency_fit,
    chooses_concurrency,
    concurrency_requirements,
)
from selector.breadth import BroaderRegion, Late, broader_region, late_of
from selector.breadth_choice import (
    BREADTH_CANDIDATES_TRIED,
    BreadthChoice,
    FleetAside,
    breadth_allows,
    breadth_note,
    breadth_of,
    broadest_first,
    fallbacks_wanted,
    wants_breadth,
)
from selector.capacity import BlockQuote
from selector.capacity_plan import CapacityOptions, capacity_preference
from selector.catalog import MARKETS, Catalog, InstanceType, Offer
from selector.cost import Cost, cost_inputs, cost_key, instance_setup_hours, offer_cost, with_wait
from selector.engine_filter import engine_rejection
from selector.engines import EngineBuild
from selector.fallbacks import (
    MAX_FALLBACKS,
    VM_COUNTED_CLOUDS,
    Fallback,
    RefugeGap,
    fallbacks,
    fleet_units,
    spanning_offer,
)
from selector.freshness import PriceAges, price_ages_counted
from selector.images import unsupported_reason
from selector.markets import NO_BASE, market_preference, on_demand_base
from selector.obtainability import failure_usd, obtainability, wait_usd
from selector.rates import CloudRates, load_rates
from selector.rejections import Miss, Tally, budget_rejection, without_excluded
from selector.sizing import Rejection, Requirements, Shape, fit, fit_serving_at, requirements
from selector.spec import WorkloadSpec

PlanStatus = Literal["ok", "infeasible", "over-budget"]
_Entry = tuple[Offer, Shape, int, float, float, float, int, tuple[int, float]]
"""A feasible offer: offer, shape, preference, billed total, hours, interruptions/h, GPUs, base."""
_Based = tuple["Candidate", tuple[int, float]]
"""A candidate and its on-demand base (instances, $/h)."""


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


def level_of(c: Candidate) -> str | None:
    return c.cost.obtainability.level if c.cost.obtainability is not None else None


def width(c: Candidate, fleet: Sequence[Fallback]) -> int:
    """The fallbacks of ``c``'s fleet that count toward ``placement.min_fallbacks`` (``breadth_of``)."""
    return breadth_of(fleet, c.offer.market, level_of(c))


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
    breadth_choice: BreadthChoice | None = None
    """The cheapest offer, passed over for a broader fleet (``selector.breadth_choice``)."""
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
        if self.choice is None:
            return None
        offer, shape = self.choice.offer, self.choice.shape
        n = width(self.choice, self.fallbacks)
        return breadth_note(self.spec, offer, shape, n, self.late, self.broader_region, self.breadth_choice)

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
    tally = Tally()
    full_catalog = catalog
    catalog = without_excluded(catalog, placement.exclude, tally)
    catalog = pinned_catalog(catalog, placement.attempt, tally.reject)
    best: dict[tuple[str, str, str], tuple[tuple[object, ...], Offer, Shape]] = {}
    # The breadth walk's candidates: the best offer of each type and market in each region.
    best_there: dict[tuple[str, str, str, str], tuple[tuple[object, ...], Offer, Shape]] = {}
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
                over = budget_rejection(inputs, hourly, total)
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
        top_there = best_there.get((*key, offer.region))
        if top_there is None or rk < top_there[0]:
            best_there[(*key, offer.region)] = (rk, offer, shape)
    base_of = {id(e[0]): e[7] for e in entries}

    def candidate(o: Offer, s: Shape, base: tuple[int, float]) -> Candidate:
        cost = offer_cost(o, s, inputs, rates, base)
        build = builds.get((o.instance.cloud, o.instance.name))
        return Candidate(
            o, s, with_wait(cost, obtainability(o, s.nodes_per_replica), value, deadline, rerun), build
        )

    ranked = sorted(best.values(), key=lambda entry: entry[0])
    candidates = tuple(candidate(o, s, base_of[id(o)]) for _, o, s in ranked[: top + 1])
    if feasible_out is not None and everything is not None:
        feasible_out.extend(candidate(e[0], e[1], e[7]) for e in everything)
    backups: tuple[Fallback, ...] = ()
    aside = FleetAside()
    # An unbudgeted on-demand service never moves back to its choice: cap what a fallback costs.
    unbudgeted = inputs.budget_hourly is None and inputs.budget_total is None
    ratio = placement.max_fallback_cost_ratio if spec.task == "serve" and unbudgeted else None
    wanted = fallbacks_wanted(spec)

    def fleet_of(
        offer: Offer,
        shape: Shape,
        engine: EngineBuild | None,
        base: tuple[int, float],
        limit: int = MAX_FALLBACKS,
        out: FleetAside = aside,
    ) -> tuple[Fallback, ...]:
        launch = batch_launch_values(spec, offer.instance, shape)  # the choice's, once per fleet

        def same_build(it: InstanceType) -> Shape | Rejection:
            """A fleet runs one boot script: a fallback must take its choice's engine build and launch."""
            own = fit_of(it)
            if isinstance(own, Shape) and builds.get((it.cloud, it.name)) != engine:
                return Rejection("engine", "needs another engine build than the choice")
            if isinstance(own, Shape) and batch_launch_values(spec, it, own) != launch:
                return Rejection(
                    "engine", "needs another engine launch than the choice (memory fraction, fp8 KV)"
                )
            return own

        return fallbacks(
            offer,
            shape,
            catalog,
            same_build,
            inputs,
            rates,
            placement.instance_types,
            deadline,
            lambda hourly, total: budget_rejection(inputs, hourly, total) is None,
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
            late=out.late,
            refuge_gaps=out.gaps,
        )

    def in_plan(c: Candidate) -> bool:
        """Within the budget and the TTL."""
        within = budget_rejection(inputs, c.cost.hourly_usd, c.cost.total_usd) is None
        return within and (deadline is None or c.cost.hours <= deadline)

    def widest(
        c: Candidate, base: tuple[int, float], limit: int = MAX_FALLBACKS, out: FleetAside = aside
    ) -> tuple[Candidate, tuple[Fallback, ...]]:
        """``c`` and its fleet; a zone's spot offer with fewer than ``wanted`` fallbacks widened
        to its region's zones when that finds more within the budget and TTL."""
        zone_out, wide_out = FleetAside(), FleetAside()
        found = fleet_of(c.offer, c.shape, c.engine, base, limit, zone_out)
        # min_fallbacks 0 ranks by expected cost alone: never widened
        single = c.shape.nodes_per_replica == 1
        spans = single and placement.min_fallbacks > 0 and spec.fault_tolerance != "none"
        wide = spanning_offer(c.offer, catalog) if spans else None
        if width(c, found) < wanted and wide is not None:
            widened = candidate(wide, c.shape, base)
            more = fleet_of(wide, widened.shape, c.engine, base, limit, wide_out)
            if width(widened, more) > width(c, found) and in_plan(widened):
                c, found, zone_out = widened, more, wide_out
        out.late.extend(zone_out.late)
        out.gaps.extend(zone_out.gaps)
        return c, found

    first_base = NO_BASE
    cheapest: Candidate | None = None
    narrow: tuple[Fallback, ...] = ()
    narrow_aside = FleetAside()
    if candidates:
        cheapest = candidates[0]
        first_base = base_of.get(id(cheapest.offer), NO_BASE)
        first, backups = widest(cheapest, first_base)
        narrow = backups
        if first is not cheapest:  # widened: the cheapest's own fleet, in its zone
            narrow = fleet_of(cheapest.offer, cheapest.shape, cheapest.engine, first_base, out=narrow_aside)
        candidates = (first, *candidates[1:])
    broader: BroaderRegion | None = None
    broad_there: dict[int, tuple[Candidate, tuple[int, float]]] = {}
    if (
        candidates
        and width(candidates[0], backups) < wanted
        and spec.fault_tolerance != "none"
        and placement.instance_types is None
        and candidates[0].shape.nodes_per_replica == 1
        and (
            candidates[0].offer.cloud not in VM_COUNTED_CLOUDS
            or placement.gcp_instance_flexibility is not False
        )
    ):
        first = candidates[0]

        def in_region(offer: Offer) -> tuple[Offer, float, int] | None:
            wide = spanning_offer(offer, catalog) or offer
            # A spot endpoint's on-demand base is priced in the region it runs in.
            base = on_demand_base(spec, wide, first.shape, catalog) if wide.market == "spot" else first_base
            if isinstance(base, Rejection):
                return None
            there = candidate(wide, first.shape, base)
            if not in_plan(there):
                return None
            found = fleet_of(wide, there.shape, there.engine, base, out=FleetAside())
            if width(there, found) < wanted:
                return None
            broad_there[id(wide)] = (there, base)
            return (wide, there.cost.expected_usd, width(there, found))

        regions_allowed = partial(_matches, placement.regions)
        broader = broader_region(
            first.offer, first.cost.expected_usd, catalog, in_region, wanted, regions_allowed
        )
    chosen_for_breadth: BreadthChoice | None = None
    need = placement.min_fallbacks

    if cheapest is not None and wants_breadth(spec, cheapest.offer.market, width(cheapest, narrow)):
        first = candidates[0]
        unwidened = narrow_aside if first is not cheapest else aside

        def takeable(c: Candidate, floor: str | None = level_of(cheapest)) -> bool:
            return breadth_allows(level_of(c), floor)

        made = {id(c.offer): c for c in candidates}
        walk_order = [e for e in sorted(best_there.values(), key=itemgetter(0)) if e[1] is not cheapest.offer]
        walked = (
            (c, base_of[id(o)])
            for _, o, s in walk_order[:BREADTH_CANDIDATES_TRIED]
            if pref_of[o.market] == pref_of[cheapest.offer.market]
            for c in (made.get(id(o)) or candidate(o, s, base_of[id(o)]),)
            if takeable(c)
        )

        def searched(item: _Based) -> tuple[_Based, int]:
            planned, found = widest(item[0], item[1], out=FleetAside())
            return (planned, item[1]), width(planned, found)

        known: list[tuple[_Based, int]] = [((cheapest, first_base), width(cheapest, narrow))]
        if first is not cheapest and takeable(first):
            known.append(((first, first_base), width(first, backups)))
        there = broad_there.get(id(broader.offer)) if broader is not None else None
        if there is not None and broader is not None and takeable(there[0]):
            known.append((there, broader.fallbacks))
        taken = broadest_first(
            walked,
            lambda item: (float(pref_of[item[0].offer.market] or 0), item[0].cost.expected_usd),
            searched,
            need,
            known,
            lambda item: item[0].offer.market == cheapest.offer.market,
        )
        picked = first if taken is None else taken[0][0]  # first: the widening, planned in full
        if taken is not None and picked is not first and picked is not cheapest:
            (planned, base), _ = taken
            aside_taken = FleetAside()
            chosen, fleet = widest(planned, base, out=aside_taken)
            if width(chosen, fleet) > width(cheapest, narrow):
                kind = attrgetter("offer.instance.cloud", "offer.instance.name", "offer.market")
                others = (cheapest, *(c for c in candidates[1:] if kind(c) != kind(chosen)))
                candidates = (chosen, *others)[: top + 1]
                backups, aside, broader = fleet, aside_taken, None
            else:
                picked = cheapest
        if picked is cheapest:
            candidates, backups, aside = (cheapest, *candidates[1:]), narrow, unwidened
    if cheapest is not None and candidates[0] is not cheapest:  # a walked, broader or widened offer
        chosen = candidates[0]
        chosen_for_breadth = BreadthChoice(
            cheapest.offer,
            cheapest.shape.instances,
            width(cheapest, narrow),
            width(chosen, backups),
            chosen.cost.expected_usd - cheapest.cost.expected_usd,
            need,
            level_of(cheapest),
            level_of(chosen),
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
        breadth_choice=chosen_for_breadth,
        late=late_of(aside.late, candidates[0].offer.region if candidates else "", backups),
        refuge_gaps=tuple(dict.fromkeys(aside.gaps)),
        price_ages=price_ages_counted(considered),
        wait_value_per_hour=value,
    )


_AS_OF = attrgetter("as_of")
