"""Policy 2 of the pack: the hourly price of what a stack runs stays within the budget
(``max_hourly_usd``), per machine or group and for the whole stack together: Capacity Blocks by
their fee (``policy.blocks``), flex-start groups with their resize requests, a rebalanced GCP
fleet's groups once (``policy.pricing.rebalanced_budget``). Split out of
``policy.gpufit_policies``, which registers it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policy.blocks import block_backing
from policy.group_sizes import group_sizes
from policy.pricing import (
    describe_instance,
    group_hourly,
    in_block,
    instance_market,
    instance_offer,
    instance_region,
    rebalanced_budget,
)
from policy.resources import (
    AWS_GROUP,
    GCP_GROUPS,
    GCP_TEMPLATES,
    GPU_INSTANCES,
    PRICE_TOLERANCE_USD,
    PolicyConfig,
    stack_items,
)

# -- 2. hourly price within the budget ---------------------------------------------------------


def check_hourly_budget(
    resource_type: str, props: Mapping[str, Any], config: PolicyConfig, region: str | None = None
) -> list[str]:
    """A GPU instance's catalog hourly price must not exceed ``max_hourly_usd``; passes when no
    budget is configured. ``region`` is the region of the resource's provider, when known. An
    instance the catalog cannot price fails: the budget cannot be shown to hold."""
    if resource_type not in GPU_INSTANCES or config.max_hourly_usd is None or in_block(resource_type, props):
        return []  # a block's machines are priced from its fee (check_stack_budget)
    budget = config.max_hourly_usd
    market = instance_market(resource_type, props)
    where = region or instance_region(resource_type, props)
    label = describe_instance(resource_type, props)
    offer = instance_offer(resource_type, props, config, region)
    if offer is None:
        place = f" in {where}" if where else ""
        return [
            f"no {market} price in the catalog for {label}{place}: cannot show it is within the "
            f"budget max_hourly_usd ${budget:,.2f}/h (point the policy's `catalog` config at a "
            "refreshed catalog)"
        ]
    if offer.hourly_usd > budget + PRICE_TOLERANCE_USD:
        return [
            f"{label} ({market}, {offer.region}) costs ${offer.hourly_usd:,.4f}/h, over the budget "
            f"max_hourly_usd ${budget:,.2f}/h (catalog prices as of {offer.as_of})"
        ]
    return []


def check_stack_budget(resources: Iterable[tuple[Any, ...]], config: PolicyConfig) -> list[str]:
    """All of the stack's GPU instances together must cost no more than ``max_hourly_usd`` an
    hour (a multi-node plan's budget is for all of its nodes). Instances the catalog cannot
    price are left to ``check_hourly_budget``, which reports them. ``resources``: ``(type,
    props)`` or ``(type, props, region)`` tuples."""
    if config.max_hourly_usd is None:
        return []
    resources = list(resources)
    total, count, problems, backed = block_backing(resources)  # issue 26: blocks, by their fee
    for i, (typ, props, region) in enumerate(stack_items(resources)):
        priced = typ in GPU_INSTANCES and i not in backed
        offer = instance_offer(typ, props, config, region) if priced else None
        if offer is not None:
            total, count = total + offer.hourly_usd, count + 1
        elif priced and in_block(typ, props):
            problems.append(f"a {props.get('instanceType')} capacity-block instance no block backs: unpriced")
    templates = [props for typ, props, _ in stack_items(resources) if typ in GCP_TEMPLATES]
    # issue 26: a flex-start or calendar group's VMs come from its resize request, a Scheduler
    # resize or its future reservation, not from its initial target size (policy/group_sizes.py)
    sizes, resized_problems = group_sizes(stack_items(resources))
    problems.extend(resized_problems)
    # issue 25: a batch fleet's groups that a rebalancer moves VMs between count once, together
    # ... each at the most VMs anything in the stack brings it to (a Scheduler resize included)
    sized = [
        (typ, {**props, "targetSize": sizes[str(props.get("name"))]}, region)
        if typ in GCP_GROUPS and str(props.get("name")) in sizes
        else (typ, props, region)
        for typ, props, region in stack_items(resources)
    ]
    worst, sets, unpriced, moved = rebalanced_budget(sized, templates, config)
    total, count = total + worst, count + sets
    problems.extend(unpriced)
    for i, (typ, props, region) in enumerate(stack_items(resources)):
        if (
            typ not in (AWS_GROUP, *GCP_GROUPS)
            or i in backed
            or (typ in GCP_GROUPS and str(props.get("name")) in moved)
        ):
            continue
        if typ in GCP_GROUPS and str(props.get("name")) in sizes:
            props = {**props, "targetSize": sizes[str(props.get("name"))]}
        worst, unpriced = group_hourly(typ, props, templates, config, region)
        if unpriced:
            problems.append(
                f"no catalog price for {', '.join(unpriced)} in {region or 'any region'}: cannot show "
                f"the group {props.get('name')!r} is within the budget"
            )
        total += worst
        count += 1
    if total > config.max_hourly_usd + PRICE_TOLERANCE_USD:
        problems.append(
            f"the stack's {count} GPU instance(s) and group(s) cost up to ${total:,.4f}/h together, over "
            f"the budget max_hourly_usd ${config.max_hourly_usd:,.2f}/h"
        )
    return problems
