"""Why a GCP spot endpoint that would keep on-demand groups after its spot fallbacks
(``selector.fallbacks.on_demand_refuge``) has none: the budget turned each away, or no type sold
on demand in the region runs the choice's launch. The plan says so (Fleet line, ``--json``
``fleet_notes``): such an endpoint has no refuge in a spot drought (issue 25, review finding 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from selector.fallbacks import on_demand_refuge

if TYPE_CHECKING:
    from selector.select import Plan


def refuge_note(plan: Plan) -> str | None:
    """``no on-demand group: ...; the endpoint has no refuge in a spot drought`` when the plan
    wants on-demand groups (``on_demand_refuge``) and keeps none: the cheapest the budget
    turned away in the choice's region (``Plan.refuge_gaps``), else that no type sold on demand
    there runs the launch (among ``placement.instance_types`` when pinned). None otherwise."""
    choice, spec = plan.choice, plan.spec
    served = spec.task == "serve" and spec.fault_tolerance != "none"
    if choice is None or not on_demand_refuge(choice.offer, choice.shape, served):
        return None
    if any(f.refuge for f in plan.fallbacks):
        return None
    region = choice.offer.region
    here = sorted((g for g in plan.refuge_gaps if g.region == region), key=lambda g: g.total_usd)
    if here:
        why = f"{here[0].instance_type} on-demand {here[0].over}"
    else:
        among = " among placement.instance_types" if spec.placement.instance_types is not None else ""
        why = f"no type{among} sold on demand in {region} runs the choice's launch"
    return f"no on-demand group: {why}; the endpoint has no refuge in a spot drought"


def worst_case_usd(plan: Plan) -> float | None:
    """What the plan costs at most: every replica on the dearest member of its fleet (the choice
    or a fallback, each costed as the whole fleet there) for the full duration. The budget policy
    enforces the same bound by the hour on a rebalanced set (``policy.gpufit_policies``); for a
    spot endpoint with an on-demand group that is the on-demand rate, since nothing moves a VM
    back to spot. None without a choice."""
    if plan.choice is None:
        return None
    return max([plan.choice.cost.total_usd, *(f.cost.total_usd for f in plan.fallbacks)])


def worst_case_clause(plan: Plan, money: Callable[[float], str]) -> str:
    """`` (up to $32,506.01 if moved on demand; the total and its rank assume spot capacity
    holds)`` for a plan with an on-demand group whose
    worst case exceeds its total, else ``""``: the Cost line's bound."""
    worst = worst_case_usd(plan)
    if worst is None or plan.choice is None or not any(f.refuge for f in plan.fallbacks):
        return ""
    if worst <= plan.choice.cost.total_usd:
        return ""
    return f" (up to {money(worst)} if moved on demand; the total and its rank assume spot capacity holds)"
