"""Policy 5, no ingress from anywhere: no security group, ingress rule or firewall admits the
internet at large, a /0 or a union of CIDRs as broad (``selector.reach``), alone or split over
several resources."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from policy.resources import (
    AWS_SECURITY_GROUP,
    AWS_SG_INGRESS_RULE,
    AWS_SG_RULE,
    GCP_FIREWALL,
    PolicyConfig,
    as_count,
    as_map,
    as_seq,
    is_open,
    stack_items,
)
from selector.reach import too_broad

OPEN_ENDPOINT_TAG = "gpufit:open-endpoint"
"""The marker gpufit writes (AWS tag ``gpufit:open-endpoint``, GCP description) when the spec
opted in to an endpoint open to the whole internet."""


def _open_cidrs(values: Iterable[Any]) -> list[str]:
    return [str(v) for v in values if v is not None and is_open(v)]


def _together_open(values: Iterable[Any], what: str) -> list[str]:
    """A problem when ``values`` together (not one alone) admit the internet at large: split
    ranges such as ``0.0.0.0/1`` + ``128.0.0.0/1`` (``selector.reach``)."""
    listed = [v for v in values if v is not None]
    if any(is_open(v) for v in listed):
        return []  # reported CIDR by CIDR
    return [f"{what} together admit the internet ({b})" for b in too_broad(listed)]


def check_no_open_ingress(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """No inbound rule admits the internet at large: a /0 (``0.0.0.0/0``, ``::/0``), or CIDRs
    whose union covers more public addresses than ``selector.reach`` allows (``0.0.0.0/1`` +
    ``128.0.0.0/1``), counted across all the rules of one resource: security group inline
    ``ingress`` rules, ``SecurityGroupIngressRule``, ``SecurityGroupRule`` of type ingress, and
    GCP ``INGRESS`` firewalls that allow traffic (a GCP ingress rule with no source at all
    applies to 0.0.0.0/0 as well). Rules split over several resources: ``check_ingress_union``."""
    del config
    problems: list[str] = []
    opened_on_purpose = as_map(props.get("tags")).get(OPEN_ENDPOINT_TAG) == "true"
    if resource_type == AWS_SECURITY_GROUP:
        union: list[Any] = []
        for index, entry in enumerate(as_seq(props.get("ingress"))):
            rule = as_map(entry)
            if opened_on_purpose and (as_count(rule.get("fromPort")), as_count(rule.get("toPort"))) in (
                (80, 80),
                (443, 443),
            ):
                continue  # a load balancer's listener the spec opened (access.allow_api_from_anywhere)
            cidrs = [*as_seq(rule.get("cidrBlocks")), *as_seq(rule.get("ipv6CidrBlocks"))]
            union += cidrs
            problems += [f"ingress[{index}] admits {c} (ports {_ports(rule)})" for c in _open_cidrs(cidrs)]
        problems += _together_open(union, "the ingress rules")
    elif resource_type == AWS_SG_INGRESS_RULE:
        opened = _open_cidrs([props.get("cidrIpv4"), props.get("cidrIpv6")])
        problems += [f"ingress rule admits {c} (ports {_ports(props)})" for c in opened]
    elif resource_type == AWS_SG_RULE and str(props.get("type") or "").lower() == "ingress":
        cidrs = [*as_seq(props.get("cidrBlocks")), *as_seq(props.get("ipv6CidrBlocks"))]
        problems += [f"ingress rule admits {c} (ports {_ports(props)})" for c in _open_cidrs(cidrs)]
        problems += _together_open(cidrs, "its CIDR blocks")
    elif resource_type == GCP_FIREWALL and str(props.get("direction") or "INGRESS").upper() == "INGRESS":
        if not as_seq(props.get("allows")) and as_seq(props.get("denies")):
            return []  # a deny rule shuts traffic out, whatever its sources
        ranges = as_seq(props.get("sourceRanges"))
        problems += [f"INGRESS firewall admits {c}" for c in _open_cidrs(ranges)]
        problems += _together_open(ranges, "its sourceRanges")
        sources = as_seq(props.get("sourceTags")) or as_seq(props.get("sourceServiceAccounts"))
        if not ranges and not sources:
            problems.append("INGRESS firewall names no source: Compute Engine applies it to 0.0.0.0/0")
    return problems


def _ingress_sources(resource_type: str, props: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
    """(what the rule opens, its CIDRs) for a stand-alone ingress rule or an allowing GCP
    ingress firewall; None for anything else."""
    if resource_type == AWS_SG_INGRESS_RULE:
        return f"security group {props.get('securityGroupId')}", [
            props.get("cidrIpv4"),
            props.get("cidrIpv6"),
        ]
    if resource_type == AWS_SG_RULE and str(props.get("type") or "").lower() == "ingress":
        cidrs = [*as_seq(props.get("cidrBlocks")), *as_seq(props.get("ipv6CidrBlocks"))]
        return f"security group {props.get('securityGroupId')}", cidrs
    if (
        resource_type == GCP_FIREWALL
        and str(props.get("direction") or "INGRESS").upper() == "INGRESS"
        and as_seq(props.get("allows"))
    ):
        return f"network {props.get('network')}", list(as_seq(props.get("sourceRanges")))
    return None


def check_ingress_union(
    resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None
) -> list[str]:
    """Inbound rules split over several resources still may not admit the internet together:
    the CIDRs of every stand-alone ingress rule of one security group, and of every allowing
    ingress firewall of one VPC network (any of them may apply to the same VM), are counted as
    one union (``selector.reach``)."""
    del config
    groups: dict[str, list[Any]] = {}
    for typ, props, _ in stack_items(resources):
        found = _ingress_sources(typ, props)
        if found is not None:
            groups.setdefault(found[0], []).extend(found[1])
    problems = []
    for target, cidrs in groups.items():
        listed = [c for c in cidrs if c is not None]
        if any(is_open(c) for c in listed):
            continue  # check_no_open_ingress reports it
        problems += [
            f"the ingress rules of {target} together admit the internet ({b})" for b in too_broad(listed)
        ]
    return problems


def _ports(rule: Mapping[str, Any]) -> str:
    low, high = as_count(rule.get("fromPort")), as_count(rule.get("toPort"))
    protocol = rule.get("protocol") or rule.get("ipProtocol") or "?"
    return f"{protocol} {low}-{high}" if low is not None else str(protocol)
