"""The fallback fleet and capacity lines of a plan: what the cloud's fleet engine may launch,
whether the choice's capacity can be had, and how old the prices are."""

from __future__ import annotations

import math
from datetime import date

from cli.figures import money, where
from selector.breadth import GCP_ONE_TYPE_NOTE
from selector.breadth_choice import fallbacks_wanted
from selector.capacity import CapacityTerms, describe as describe_capacity
from selector.catalog import Offer
from selector.consumption import third_party_note
from selector.fallbacks import VM_COUNTED_CLOUDS, Fallback, multinode_note, realised_text
from selector.freshness import age_text
from selector.obtainability import obtainability
from selector.refuge import refuge_note
from selector.select import Plan
from selector.units import format_hours


def fleet_line(plan: Plan) -> str:
    """What the cloud's fleet engine may launch when the choice has no capacity, in order, and
    why there are fewer than two (``Plan.breadth_note``)."""
    line = _fleet_members(plan)
    note = plan.breadth_note
    wanted = fallbacks_wanted(plan.spec)
    line = f"{line}; fewer than {wanted}: {note}" if note is not None and note not in line else line
    line = f"{line}; {refuge}" if (refuge := refuge_note(plan)) is not None else line
    leave = plan.weighted_leave_note
    return f"{line}; {leave}" if leave is not None else line


def breadth_line(plan: Plan) -> str | None:
    """``chose aws p5en.48xlarge spot use2-az3 (2 fallbacks, obtainability low) over the cheapest
    aws p4d.24xlarge spot aps1-az1 (1 fallback, obtainability medium) at $209.98 more (expected,
    incl. estimated wait); ...`` when the choice is not the cheapest offer as ranked (a widened
    zone offer included; ``selector.breadth_choice``), else None."""
    taken, choice = plan.breadth_choice, plan.choice
    if taken is None or choice is None:
        return None
    o, cheapest = choice.offer, taken.passed_over
    why = (
        f"for placement.min_fallbacks {taken.min_fallbacks}"
        if taken.reached
        else "the most fallbacks of the offers tried, fewer than placement.min_fallbacks "
        f"{taken.min_fallbacks}"
    )
    return (
        f"chose {o.instance.cloud} {o.instance.name} {o.market} {where(o)} ({_count(taken.fallbacks)}"
        f"{_level_of(taken.obtainability)}) over the cheapest {cheapest.instance.cloud} "
        f"{cheapest.instance.name} {cheapest.market} {where(cheapest)} ({_count(taken.passed_over_fallbacks)}"
        f"{_level_of(taken.passed_over_obtainability)}) at {money(taken.premium_usd)} more "
        f"(expected, incl. estimated wait), {why}; placement.min_fallbacks: 0 ranks by expected cost alone"
    )


def _count(n: int) -> str:
    return f"{n} fallback{'s' if n != 1 else ''}"


def _level_of(level: str | None) -> str:
    return f", obtainability {level}" if level is not None else ""


def _fleet_members(plan: Plan) -> str:
    if not plan.fallbacks:
        choice = plan.choice
        if choice is not None and choice.shape.nodes_per_replica > 1:
            return f"fallbacks: none ({multinode_note(choice.offer, 0)})"
        if plan.spec.placement.instance_types is not None:
            return "fallbacks: none among placement.instance_types"
        if choice is not None and choice.offer.cloud in VM_COUNTED_CLOUDS and not _resumes(plan):
            return f"fallbacks: none ({GCP_ONE_TYPE_NOTE})"
        if choice is not None and choice.offer.zone is not None:
            return (
                f"fallbacks: none (no other type runs it in {choice.offer.zone}, the zone this spot "
                f"price holds in, within the budget and ttl)"
            )
        return "fallbacks: none (no other type runs it in this region and market within the budget and ttl)"
    parts = [
        f"{f.offer.instance.name} {where(f.offer)} {f.offer.market} {money(f.offer.hourly_usd)}/h"
        + (f" ×{f.weighted_capacity}" if f.weighted_capacity != plan.choice_weight else "")
        + f" ({_level(f)}{_idle(plan, f)}{_realised(f)}{_expected(f)})"
        for f in plan.fallbacks
    ]
    weights = plan.choice_weight != 1 or any(f.weighted_capacity != 1 for f in plan.fallbacks)
    units = f"{plan.fleet_units} replicas, each machine counted by the replicas it holds; " if weights else ""
    choice = plan.choice
    if weights and choice is not None and choice.offer.cloud in VM_COUNTED_CLOUDS:
        vms = choice.shape.instances
        units = (
            f"{vms} VM{'s' if vms != 1 else ''} (a {choice.offer.cloud} group counts VMs), "
            "each running the replicas its GPUs hold; "
        )
    rebalanced = any(f.realised == "group" for f in plan.fallbacks)
    note = f"; {REBALANCER_NOTE}" if rebalanced else ""
    if rebalanced and plan.spec.task == "serve":
        note += f"; {SERVED_GROUPS_NOTE}"
    elif rebalanced and plan.spec.task != "batch":
        note += f"; {RESUME_NOTE}"
    return f"{units}fallbacks: " + ", ".join(parts) + note


def _resumes(plan: Plan) -> bool:
    """Whether a GCP plan's other types may run in groups of their own: a batch job, a
    single-node checkpointed job or a stateless served model
    (``selector.gcp_flexibility.realisation``)."""
    if plan.spec.task == "serve":
        return plan.spec.fault_tolerance != "none"
    return plan.spec.task == "batch" or plan.spec.fault_tolerance == "checkpointed"


RESUME_NOTE = (
    "a checkpointed job's VM moved to another group runs the same launch (the choice's GPUs per "
    "machine, TP and command, on GPUs with at least its memory) and resumes from the bucket's "
    "checkpoint; a multi-node replica stays on plain VMs of one type"
)


SERVED_GROUPS_NOTE = (
    "every group is a backend of the one regional backend service; a VM moved to another group "
    "runs the choice's launch (its replicas, ports, GPUs and TP, on GPUs with at least its "
    "memory; a bigger VM's other GPUs idle, since the backend reaches one port per VM)"
)


REBALANCER_NOTE = (
    "a fallback in its own MIG starts at size 0: a Cloud Workflows rebalancer, run by Cloud "
    "Scheduler every 5 minutes, moves the VMs a group has not been able to create for want of "
    "capacity for 2 minutes to the next group (the last group's back to the first), never adding "
    "to the plan's replicas; at the deadline it empties every group and pauses its schedule. Its "
    "own cost, not in the hourly figures, is cents a day (ESTIMATE: about 5 + groups × (4 + VMs "
    "per group) Workflows steps a run, 288 runs a day, at list prices of $0.01 per 1,000 steps "
    "and $0.10 a month per Cloud Scheduler job: https://cloud.google.com/workflows/pricing, "
    "https://cloud.google.com/scheduler/pricing)"
)


def _level(fallback: Fallback) -> str:
    """The fallback's obtainability, all the nodes of a multi-node replica at once."""
    return obtainability(fallback.offer, fallback.shape.nodes_per_replica).level


def _realised(fallback: Fallback) -> str:
    """``; instance flexibility (...)`` or ``; its own MIG ...`` for a GCP fallback, ``; `gpufit
    up`'s next attempt ...`` for a multi-node replica's."""
    text = realised_text(fallback)
    return f"; {text}" if text else ""


def _expected(fallback: Fallback) -> str:
    """``; $150.42 expected on it alone`` for a fallback in a group of its own: what the job
    costs if every VM runs there (``selector.fallbacks``: its rank among the groups)."""
    if fallback.realised != "group":
        return ""
    return f"; {money(fallback.cost.expected_usd)} expected on it alone"


def _idle(plan: Plan, fallback: Fallback) -> str:
    """``; 7 GPUs idle, $21,173.88 = 8.0× the plan`` for a bigger VM running the choice's
    launch: nothing moves the group back to the choice, so it may bill that for the whole run."""
    if fallback.idle_gpus == 0 or plan.choice is None:
        return ""
    n, total = fallback.idle_gpus, fallback.cost.total_usd
    times = total / plan.choice.cost.total_usd if plan.choice.cost.total_usd > 0 else math.inf
    return f"; {n} GPU{'s' if n != 1 else ''} idle, {money(total)} = {times:.1f}× the plan"


def prices_line(plan: Plan, today: date) -> str:
    """``prices from 2025-05..2025-06, 18 months old`` for the offers the plan considered."""
    return plan.price_ages.describe(today) if plan.price_ages is not None else "no prices considered"


def reference_block_age(offer: Offer, today: date | None) -> str:
    """``; reference rate as of 2024-12-31, 23 months old ...`` for a block priced from a
    reference rate (issue 26 review nit 11: the rates' age is shown as the catalog's is)."""
    terms = offer.capacity
    if today is None or not isinstance(terms, CapacityTerms) or terms.kind != "capacity-block":
        return ""
    if not terms.estimate:
        return ""
    return (
        f"; reference rate as of {terms.as_of}, {age_text(terms.as_of, today)} "
        "(`gpufit plan --capacity-blocks live` quotes AWS's offerings)"
    )


def capacity_line(plan: Plan, today: date | None = None) -> str:
    """Whether the choice's capacity can be had: its obtainability, and the expected wait's
    value as it enters the expected cost; a block priced from a reference rate, that rate's age."""
    choice = plan.choice
    assert choice is not None
    cost, offer = choice.cost, choice.offer
    obt = cost.obtainability or obtainability(offer)
    line = f"{describe_capacity(offer, choice.shape.instances)}: obtainability {obt.describe()}"
    if cost.on_demand_base and offer.market == "spot":
        line += f"; {cost.on_demand_base} instance(s) kept on-demand (serving.on_demand_base)"
    if cost.wait_hours >= 0.05:
        line += (
            f"; expected wait {format_hours(cost.wait_hours)} × {money(cost.wait_value_per_hour)}/h "
            f"(the cheapest plan's rate) = {money(cost.wait_usd)}, ranked at {money(cost.expected_usd)}"
        )
    if cost.launch_failure >= 0.005:
        line += (
            f"; no capacity before the deadline {cost.launch_failure:.0%} likely (estimate), "
            f"then re-run elsewhere: +{money(cost.failure_usd)}, ranked at {money(cost.expected_usd)}"
        )
    line += " (estimate)" if obt.estimated else ""
    line += reference_block_age(offer, today)
    third = third_party_note(offer.instance.cloud, offer.instance.name, offer.market)
    return f"{line}; {third}" if third is not None else line
