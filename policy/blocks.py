"""Which machines of a stack run in a Capacity Block the same stack buys, and what that block
costs an hour (issue 26). A machine is the block's only when it is tied to the block resource:
an instance, or the launch template a group itself launches from, of market type
``capacity-block`` whose ``capacityReservationSpecification`` comes from the block (the
engine's property dependencies, ``PolicyResource.property_dependencies``,
https://www.pulumi.com/docs/iac/using-pulumi/crossguard/core-concepts/). Any other machine is
priced by the hour. A block's fee is its ``gpufit:block-fee-usd`` tag, never less than the
reference rate's floor for the machines it backs: a tag alone cannot make them free."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policy.ingress import entry_links, holds_value
from policy.resources import AWS_GROUP, AWS_INSTANCE, as_count, as_map
from selector.capacity import reference_quote

AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_CAPACITY_BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
CAPACITY_BLOCK = "capacity-block"
TAG_BLOCK_FEE = "gpufit:block-fee-usd"  # deployment/capacity.py: the most the block's fee can be
TAG_BLOCK_HOURS = "gpufit:block-hours"
FEE_FLOOR_SHARE = 0.5
"""A block's fee is taken as at least this share of the reference rate (``data/capacity/
aws_capacity_blocks.csv``) × its machines × hours: live offerings are priced below the
reference at times, never, gpufit assumes, by half (a gpufit choice, on the side of refusing)."""
SPEC = "capacityReservationSpecification"
GROUP_TEMPLATE_KEYS = ("launchTemplate", "mixedInstancesPolicy")


def _tag(props: Mapping[str, Any], key: str) -> float | None:
    try:
        value = float(str(as_map(props.get("tags")).get(key)))
    except ValueError:
        return None
    return value if value > 0 else None


def _market(props: Mapping[str, Any]) -> Any:
    return as_map(props.get("instanceMarketOptions")).get("marketType")


def _from(
    props: Mapping[str, Any], deps: dict[str, set[str]], keys: Iterable[str], urn: str | None, ident: Any
) -> bool:
    """Whether one of ``keys`` of a resource comes from the resource ``urn`` (or holds its id)."""
    return any(
        (urn is not None and urn in deps.get(k, set())) or (bool(ident) and holds_value(props.get(k), ident))
        for k in keys
    )


def block_backing(resources: Iterable[tuple[Any, ...]]) -> tuple[float, int, list[str], frozenset[int]]:
    """(the stack's blocks' hourly cost, their count, a problem per block whose fee is not
    stated, the indexes in ``resources`` of the machines a block of the stack backs)."""
    entries = [(str(e[0]), as_map(e[1]), e[2] if len(e) > 2 else None, *entry_links(e)) for e in resources]
    blocks = [i for i, e in enumerate(entries) if e[0] == AWS_CAPACITY_BLOCK]
    backs: dict[int, int] = {}  # machine or template index: block index
    for i, (typ, props, _, _, deps) in enumerate(entries):
        if typ in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE) and _market(props) == CAPACITY_BLOCK:
            for b in blocks:
                if _from(props, deps, (SPEC,), entries[b][3], entries[b][1].get("id")):
                    backs[i] = b
    templates = [i for i in backs if entries[i][0] == AWS_LAUNCH_TEMPLATE]
    machines: dict[int, list[tuple[str, int]]] = {b: [] for b in blocks}
    backed: set[int] = set()
    for i, (typ, props, _, _, deps) in enumerate(entries):
        if typ == AWS_INSTANCE and i in backs:
            backed.add(i)
            machines[backs[i]].append((str(props.get("instanceType")), 1))
        own = [
            t
            for t in templates
            if typ == AWS_GROUP
            and _from(props, deps, GROUP_TEMPLATE_KEYS, entries[t][3], entries[t][1].get("id"))
        ]
        if own:
            backed.add(i)
            size = as_count(props.get("maxSize")) or 0
            machines[backs[own[0]]].append((str(entries[own[0]][1].get("instanceType")), size))
    total, problems = 0.0, []
    for b in blocks:
        props, region = entries[b][1], entries[b][2]
        fee, hours = _tag(props, TAG_BLOCK_FEE), _tag(props, TAG_BLOCK_HOURS)
        if fee is None or hours is None:
            problems.append(f"a Capacity Block without {TAG_BLOCK_FEE}/{TAG_BLOCK_HOURS}: cannot price it")
            continue
        rates = [
            (reference_quote(kind, str(region)) if region else None, count) for kind, count in machines[b]
        ]
        floor = sum(q.rate_usd * count * hours * FEE_FLOOR_SHARE for q, count in rates if q is not None)
        total += max(fee, floor) / hours
    return total, len(blocks), problems, frozenset(backed)
