"""What a GPU resource costs an hour by the catalog: its market, region and zones as its own
properties say, the dearest matching offer, and the most a fleet group can cost."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from policy.resources import (
    AWS_GROUP,
    AWS_INSTANCE,
    AWS_ZONE,
    GCP_GROUPS,
    GCP_INSTANCE,
    TAG_ZONES,
    PolicyConfig,
    as_count,
    as_map,
    as_seq,
    last_segment,
)
from selector.catalog import Catalog, Offer, load_catalog
from selector.gcp_flexibility import most_replicas

GCP_WORKFLOW = "gcp:workflows/workflow:Workflow"
REBALANCE_VARIABLE = "GPUFIT_REBALANCE"
"""The user-defined environment variable of a batch fleet's rebalancer workflow: its groups
(name, replicas per VM, machine), in preference order, and the plan's replicas
(``providers.gcp.rebalance.plan_variable``)."""


@functools.lru_cache(maxsize=4)
def _catalog(path: str | None) -> Catalog:
    return load_catalog(path)


CAPACITY_BLOCK = "capacity-block"


def instance_market(resource_type: str, props: Mapping[str, Any]) -> str:
    """``spot`` or ``on-demand``, as the instance's own settings say (a capacity-block machine no
    block of the stack backs is priced on-demand)."""
    if resource_type == AWS_INSTANCE:
        market = as_map(props.get("instanceMarketOptions")).get("marketType")
        return "spot" if market == "spot" else "on-demand"
    scheduling = as_map(props.get("scheduling"))
    model = str(scheduling.get("provisioningModel") or "").upper()
    return "spot" if model == "SPOT" or scheduling.get("preemptible") is True else "on-demand"


def instance_region(resource_type: str, props: Mapping[str, Any]) -> str | None:
    """The region from the instance's own zone (AWS ``availabilityZone``, GCP ``zone``), if set."""
    if resource_type == AWS_INSTANCE:
        match = AWS_ZONE.fullmatch(str(props.get("availabilityZone") or ""))
        return match.group(1) if match else None
    zone = props.get("zone")
    if not zone:
        return None
    name = last_segment(zone)
    return name.rsplit("-", 1)[0] if "-" in name else None


def describe_instance(resource_type: str, props: Mapping[str, Any]) -> str:
    if resource_type == AWS_INSTANCE:
        return f"aws {props.get('instanceType')}"
    accelerators = [
        f"{last_segment(as_map(a).get('type'))}x{as_count(as_map(a).get('count'))}"
        for a in as_seq(props.get("guestAccelerators"))
    ]
    extra = f" + {', '.join(accelerators)}" if accelerators else ""
    return f"gcp {last_segment(props.get('machineType'))}{extra}"


def _matches(offer: Offer, resource_type: str, props: Mapping[str, Any]) -> bool:
    it = offer.instance
    if resource_type == AWS_INSTANCE:
        return it.cloud == "aws" and it.machine_type == props.get("instanceType")
    if it.cloud != "gcp" or it.machine_type != last_segment(props.get("machineType")):
        return False
    if it.attached_accelerator is None:
        return True  # accelerator-optimized series (A2, A3, G2, ...): the GPUs come with the type
    attached = [as_map(a) for a in as_seq(props.get("guestAccelerators"))]
    return any(
        last_segment(a.get("type")) == it.attached_accelerator and as_count(a.get("count")) == it.gpu_count
        for a in attached
    )


def resource_zones(resource_type: str, props: Mapping[str, Any]) -> frozenset[str]:
    """The zones a GPU resource may run in, where its properties say: AWS the ``gpufit:zones``
    tag (AZ IDs separated by spaces; by commas in stacks created before IAM's tag rules were
    followed; a group's tags are a list), GCP an instance's zone or a MIG's distribution
    zones. Empty when unknown (anywhere in the region)."""
    if resource_type == GCP_INSTANCE or resource_type in GCP_GROUPS:
        raw = props.get("zone") if resource_type == GCP_INSTANCE else props.get("distributionPolicyZones")
        names = [raw] if isinstance(raw, str) else list(as_seq(raw))
        return frozenset(last_segment(z) for z in names if z)
    tags = props.get("tags")
    value: Any = None
    if isinstance(tags, Mapping):
        value = tags.get(TAG_ZONES)
    else:
        pairs = (as_map(t) for t in as_seq(tags))
        value = next((t.get("value") for t in pairs if t.get("key") == TAG_ZONES), None)
    return frozenset(z for z in re.split(r"[\s,]+", str(value)) if z) if value else frozenset()


def instance_offer(
    resource_type: str,
    props: Mapping[str, Any],
    config: PolicyConfig,
    region: str | None = None,
    zones: frozenset[str] = frozenset(),
) -> Offer | None:
    """The dearest catalog offer for this instance: same cloud and type (GCP N1: the attached
    GPUs too), same market (on-demand, else spot), in ``region`` (else the instance's own zone's
    region; when neither is known, any region), in ``zones`` when given (else the resource's
    own, ``resource_zones``). None when the catalog has no such offer.

    The dearest, because AWS spot is priced per zone and a group may land in any of its zones:
    a budget guardrail holds only if it holds in the zone that costs most. Offers whose zones
    are not known count in every zone."""
    where = region or instance_region(resource_type, props)
    market = instance_market(resource_type, props)
    offers = [
        o
        for o in _catalog(config.catalog).offers
        if o.market == market and (where is None or o.region == where) and _matches(o, resource_type, props)
    ]
    allowed = zones or resource_zones(resource_type, props)
    if allowed:
        offers = [
            o
            for o in offers
            if (o.zone in allowed if o.zone is not None else not o.zones or bool(allowed & set(o.zones)))
        ]
    return max(offers, key=lambda o: o.hourly_usd) if offers else None


def group_hourly(
    resource_type: str,
    props: Mapping[str, Any],
    templates: Sequence[Mapping[str, Any]],
    config: PolicyConfig,
    region: str | None,
) -> tuple[float, list[str]]:
    """The most a fleet group can cost an hour, and the types the catalog cannot price: over the
    types it may launch, price × instances needed for its capacity (AWS: ⌈max size ÷ weight⌉,
    in the market its instances distribution says; GCP: target size, in the template's market,
    with its attached GPUs)."""
    worst, unpriced = 0.0, []
    if resource_type == AWS_GROUP:
        policy = as_map(props.get("mixedInstancesPolicy"))
        distribution = as_map(policy.get("instancesDistribution"))
        spot = as_count(distribution.get("onDemandPercentageAboveBaseCapacity")) == 0
        capacity = as_count(props.get("maxSize")) or 0
        base = (as_count(distribution.get("onDemandBaseCapacity")) or 0) if spot else 0
        zones = resource_zones(AWS_GROUP, props)
        for override in as_seq(as_map(policy.get("launchTemplate")).get("overrides")):
            o = as_map(override)
            weight = as_count(o.get("weightedCapacity")) or 1
            shape = {"instanceType": o.get("instanceType")}
            wants_od = base or not spot
            on_demand = instance_offer(AWS_INSTANCE, shape, config, region, zones) if wants_od else None
            if spot:
                shape["instanceMarketOptions"] = {"marketType": "spot"}
            offer = instance_offer(AWS_INSTANCE, shape, config, region, zones) if spot else on_demand
            if offer is None or (base and on_demand is None):
                unpriced.append(f"aws {o.get('instanceType')}")
                continue
            # An on-demand base (serving.on_demand_base) runs at the on-demand price, the rest on spot.
            instances, base_instances = -(-capacity // weight), -(-base // weight)
            hourly = offer.hourly_usd * max(0, instances - base_instances)
            if on_demand is not None and base:
                hourly += on_demand.hourly_usd * base_instances
            worst = max(worst, hourly)
        return worst, unpriced
    raw = as_map(props.get("instanceFlexibilityPolicy")).get("instanceSelections")
    # Pulumi passes the selections as a list; the Compute API writes them as a map by name.
    selections = list(raw.values()) if isinstance(raw, Mapping) else list(as_seq(raw))
    flexible = [t for sel in selections for t in as_seq(as_map(sel).get("machineTypes"))]
    for template in group_templates(props, templates):
        for machine_type in flexible or [last_segment(template.get("machineType"))]:
            shape = {
                "machineType": machine_type,
                "guestAccelerators": template.get("guestAccelerators"),
                "scheduling": template.get("scheduling"),
            }
            offer = instance_offer(GCP_INSTANCE, shape, config, region, resource_zones(GCP_GROUPS[0], props))
            if offer is None:
                unpriced.append(f"gcp {machine_type}")
                continue
            worst = max(worst, offer.hourly_usd * (as_count(props.get("targetSize")) or 0))
    return worst, unpriced


def group_templates(
    group: Mapping[str, Any], templates: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The instance templates a MIG's versions name (by their last path segment, against a
    template's name or id); every template of the stack when a version names none of them (the
    dearest then prices the group), so a cheap template listed first cannot price a dear group."""
    wanted = {last_segment(as_map(v).get("instanceTemplate")) for v in as_seq(group.get("versions"))}
    wanted.discard("")
    own = [t for t in templates if wanted & {str(t.get("name")), str(t.get("id"))}]
    return own or list(templates) or [{}]


def in_block(resource_type: str, props: Mapping[str, Any]) -> bool:
    """An instance that says it runs in a Capacity Block (market type ``capacity-block``): the
    stack policy prices it (``policy.blocks``), from the block when one of the stack backs it,
    else on-demand."""
    market = as_map(props.get("instanceMarketOptions")).get("marketType")
    return resource_type == AWS_INSTANCE and market == CAPACITY_BLOCK


def rebalanced_sets(items: Sequence[tuple[str, Mapping[str, Any], str | None]]) -> list[dict[str, Any]]:
    """The plans of the stack's rebalancer workflows (``GPUFIT_REBALANCE``), each naming the
    groups it moves VMs between; a workflow whose plan does not parse names none."""
    found = []
    for typ, props, _ in items:
        raw = as_map(props.get("userEnvVars")).get(REBALANCE_VARIABLE) if typ == GCP_WORKFLOW else None
        try:
            doc = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("groups"), list):
            found.append(doc)
    return found


def _group_template(
    group: Mapping[str, Any], templates: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The template a MIG's first version names (by its last path segment), if in the stack."""
    versions = [as_map(v) for v in as_seq(group.get("versions"))]
    wanted = last_segment(versions[0].get("instanceTemplate")) if versions else None
    return next((t for t in templates if wanted and wanted in (t.get("name"), t.get("id"))), None)


def rebalanced_hourly(
    plan: Mapping[str, Any],
    stack_groups: Mapping[str, Mapping[str, Any]],
    templates: Sequence[Mapping[str, Any]],
    config: PolicyConfig,
    region: str | None,
) -> tuple[float, list[str], list[str]]:
    """The most a rebalanced set of groups can cost an hour: the dearest replica-hour among its
    groups' machines (price ÷ replicas per VM; each group priced both as the plan names its
    machine and as its own template does, in its own template's market; a group whose template
    the stack does not name, in every template's market the catalog prices its machine in, the
    on-demand one of a spot endpoint's on-demand group included) times the most replicas
    the groups hold together: ``selector.gcp_flexibility.most_replicas`` of the plan's units
    (the rebalancer moves VMs, it never adds replicas), or the groups' own target sizes ×
    replicas per VM when those are more: a self-declared plan never prices a group below what
    its own ``targetSize`` runs. Also the machines the catalog cannot price, and the plan's
    problems: a group that is not a MIG of this stack, or groups whose own target sizes hold
    more replicas than the plan's units (refused: the rebalancer's cap assumes they do not)."""
    groups = [as_map(g) for g in as_seq(plan.get("groups"))]
    weights = [max(as_count(g.get("weight")) or 1, 1) for g in groups]
    units = as_count(plan.get("units")) or 0
    dearest, unpriced, refused, own = 0.0, [], [], 0
    for g, weight in zip(groups, weights, strict=True):
        mig = stack_groups.get(str(g.get("name")))
        if mig is None:
            name = g.get("name")
            refused.append(
                f"the rebalancer's plan names {name!r}, not a managed instance group of this stack"
            )
            continue
        own += (as_count(mig.get("targetSize")) or 0) * weight
        # its own template when the stack names it, else every template's market (the dearest)
        template = _group_template(mig, templates)
        markets = [template] if template else list(templates) or [{}]
        accelerator = g.get("accelerator")
        shapes = [
            {
                "machineType": g.get("machine_type"),
                "guestAccelerators": [{"type": accelerator, "count": g.get("gpus")}] if accelerator else None,
                "scheduling": t.get("scheduling"),
            }
            for t in markets
        ]
        missing, priced = [], False
        for shape in [*shapes, *([template] if template else [])]:
            offer = instance_offer(GCP_INSTANCE, shape, config, region, resource_zones(GCP_GROUPS[0], mig))
            if offer is None:
                missing.append(f"gcp {last_segment(shape.get('machineType'))}")
                continue
            priced, dearest = True, max(dearest, offer.hourly_usd / weight)
        # A group whose template is not known runs one of the stack's templates: a market the
        # catalog does not sell its machine in (a spot endpoint's on-demand group beside an
        # a3-highgpu-1g sold as Spot only) is not one it runs in, as long as one market prices it.
        if template is not None or not priced:
            unpriced.extend(missing)
    if own > units:
        refused.append(
            f"the rebalanced groups' own target sizes hold {own} replicas, over the plan's units {units}"
        )
    return dearest * max(most_replicas(weights, units), own), unpriced, refused


def rebalanced_budget(
    items: Sequence[tuple[str, Mapping[str, Any], str | None]],
    templates: Sequence[Mapping[str, Any]],
    config: PolicyConfig,
) -> tuple[float, int, list[str], set[str]]:
    """The stack's rebalanced group sets together: the most they cost an hour, how many sets,
    a problem per set the catalog cannot price or whose plan does not hold (``rebalanced_hourly``),
    and the names of the groups they cover (which the budget then leaves out of its per-group
    count)."""
    total, problems, moved = 0.0, [], set()
    stack_groups = {str(props.get("name")): props for typ, props, _ in items if typ in GCP_GROUPS}
    sets = rebalanced_sets(items)
    for plan in sets:
        region = str(plan["region"]) if plan.get("region") else None
        worst, unpriced, refused = rebalanced_hourly(plan, stack_groups, templates, config, region)
        if unpriced:
            problems.append(
                f"no catalog price for {', '.join(sorted(set(unpriced)))} in {region or 'any region'}: "
                "cannot show the rebalanced groups are within the budget"
            )
        problems.extend(f"{r}: the budget cannot trust this rebalancer's plan" for r in refused)
        total += worst
        moved |= {str(as_map(g).get("name")) for g in as_seq(plan.get("groups"))} & set(stack_groups)
    return total, len(sets), problems, moved
