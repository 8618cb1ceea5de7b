"""Choose the cheapest offer that satisfies a workload.

Offers pass a chain of named filters (placement, market, the sizing fit, budget); each
rejection says which filter and why. Survivors are ranked by expected total cost of the
workload (per job for batch and training, for the duration when serving), tie-broken by
fewer GPUs, then more memory bandwidth. The ``Plan`` carries the choice, the best
alternative per instance type and market, rejection counts and the closest misses.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from selector.catalog import MARKETS, Catalog, InstanceType, Offer
from selector.cost import Cost, CostInputs, cost_inputs, cost_key, offer_cost
from selector.engines import EngineBuild, choose_build
from selector.fallbacks import Fallback, fallbacks, fleet_units
from selector.machine_images import machine_image
from selector.rates import CloudRates, load_rates
from selector.sizing import Rejection, Requirements, Shape, fit, requirements
from selector.spec import WorkloadSpec

PlanStatus = Literal["ok", "infeasible", "over-budget"]

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
)
"""Filters that say the hardware cannot do the job (as opposed to placement, market, budget)."""


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

    @property
    def fleet_units(self) -> int:
        """The fleet's desired capacity in replicas (0 without a choice)."""
        return fleet_units(self.choice.shape) if self.choice is not None else 0

    @property
    def status(self) -> PlanStatus:
        if self.choice is not None:
            return "ok"
        return "over-budget" if self.rejections.get("budget") else "infeasible"


def _market_preference(spec: WorkloadSpec, market: str) -> int | None:
    """None = not allowed; lower ranks first. none → on-demand only; stateless → spot first,
    on-demand as fallback; checkpointed → both, by expected cost."""
    if spec.fault_tolerance == "none":
        return 0 if market == "on-demand" else None
    if spec.fault_tolerance == "stateless":
        return 0 if market == "spot" else 1
    return 0


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
    image = machine_image(it.cloud, it.name)
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


def plan(
    spec: WorkloadSpec,
    catalog: Catalog,
    top: int = 5,
    rates: dict[str, CloudRates] | None = None,
    feasible_out: list[Candidate] | None = None,
) -> Plan:
    """Rank every offer of ``catalog`` for ``spec``; the cheapest feasible one is the choice.
    ``feasible_out``, when given, receives every feasible offer as a candidate (for the plan
    report's chart; the plan itself keeps the best per instance type and market)."""
    collected: list[tuple[Offer, Shape]] | None = [] if feasible_out is not None else None
    rates = rates if rates is not None else load_rates()
    req = requirements(spec)
    inputs = cost_inputs(spec, req)
    placement = spec.placement
    tally = _Tally()
    best: dict[tuple[str, str, str], tuple[tuple[object, ...], Offer, Shape]] = {}
    feasible = 0
    fits: dict[tuple[object, ...], Shape | Rejection] = {}
    builds: dict[tuple[str, str], EngineBuild | None] = {}

    def fit_of(it: InstanceType) -> Shape | Rejection:
        key = (it.gpu.name, it.gpu_count, it.nvlink, it.node_interconnect, it.memory_gib, it.name)
        shape = fits.get(key)
        if shape is None:
            why = engine_rejection(spec, req, it, builds)
            shape = fits[key] = why if why is not None else fit(req, it)
        return shape

    market_rejection = Rejection("market", f"fault_tolerance {spec.fault_tolerance} runs on-demand only")
    pref_of = {market: _market_preference(spec, market) for market in MARKETS}
    budget_hourly, budget_total = inputs.budget_hourly, inputs.budget_total
    # Jobs must finish, interruptions included, before the TTL tears them down.
    deadline = req.deadline_hours if inputs.run_hours is None else None
    for it, offers in catalog.by_instance_type:
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
        if isinstance(shape, Rejection):
            if allowed:
                usable = [o for o in allowed if pref_of[o.market] is not None] or list(allowed)
                tally.reject(shape, len(allowed), min(usable, key=lambda o: o.hourly_usd))
            continue
        instances = shape.instances
        gpus = it.gpu_count * instances
        costs: dict[tuple[object, ...], tuple[float, float, float]] = {}
        local: dict[str, tuple[tuple[object, ...], Offer]] = {}
        for offer in allowed:
            pref = pref_of[offer.market]
            if pref is None:
                tally.reject(market_rejection)
                continue
            ck = cost_key(offer, inputs)
            cached = costs.get(ck)
            if cached is None:
                c = offer_cost(offer, shape, inputs, rates)
                cached = costs[ck] = (c.billed_hours, c.other_usd, c.hours)
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
            hourly = offer.hourly_usd * instances
            total = hourly * cached[0] + cached[1]
            if (budget_hourly is not None and hourly > budget_hourly) or (
                budget_total is not None and total > budget_total
            ):
                over = _budget(inputs, hourly, total)
                assert over is not None
                tally.reject(over, 1, offer)
                continue
            feasible += 1
            if collected is not None:
                collected.append((offer, shape))
            incumbent = local.get(offer.market)
            if incumbent is not None and (pref, total) > incumbent[0][:2]:
                continue
            rk = rank_key(pref, total, gpus, offer)
            if incumbent is None or rk < incumbent[0]:
                local[offer.market] = (rk, offer)
        for market, (rk, offer) in local.items():
            best[(it.cloud, it.name, market)] = (rk, offer, shape)
    ranked = sorted(best.values(), key=lambda entry: entry[0])[: top + 1]

    def build_of(offer: Offer) -> EngineBuild | None:
        return builds.get((offer.instance.cloud, offer.instance.name))

    candidates = tuple(
        Candidate(o, s, offer_cost(o, s, inputs, rates), build_of(o)) for _, o, s in ranked
    )
    if feasible_out is not None and collected is not None:
        feasible_out.extend(
            Candidate(o, s, offer_cost(o, s, inputs, rates), build_of(o)) for o, s in collected
        )
    backups: tuple[Fallback, ...] = ()
    if candidates:
        first = candidates[0]

        def same_build(it: InstanceType) -> Shape | Rejection:
            """A fleet runs one boot script: a fallback must take the choice's engine build."""
            own = fit_of(it)
            if isinstance(own, Shape) and builds.get((it.cloud, it.name)) != first.engine:
                return Rejection("engine", "needs another engine build than the choice")
            return own

        backups = fallbacks(
            first.offer,
            first.shape,
            catalog,
            same_build,
            inputs,
            rates,
            placement.instance_types,
            deadline,
            lambda hourly, total: _budget(inputs, hourly, total) is None,
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
        considered=len(catalog.offers),
        catalog=catalog,
        fallbacks=backups,
    )
