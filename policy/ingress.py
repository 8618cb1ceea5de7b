"""Policy 5, no ingress from anywhere: no security group, ingress rule or firewall admits the
internet at large, a /0 or a union of CIDRs as broad (``selector.reach``), alone or split over
several resources."""

from __future__ import annotations

import re
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
opted in to an endpoint open to the whole internet. On its own it proves nothing (any security
group can carry a tag): ``check_open_endpoint_structure`` admits it only on the group of an
internet-facing load balancer of the stack, on that load balancer's listener ports."""
LISTENER_PORTS = ((80, 80), (443, 443))
AWS_ALB = "aws:lb/loadBalancer:LoadBalancer"
AWS_LISTENER = "aws:lb/listener:Listener"
SOURCE_ONLY = (
    AWS_SECURITY_GROUP,
    AWS_SG_INGRESS_RULE,
    AWS_SG_RULE,
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
)
"""Resources that name a group as a traffic source or add a rule to it (checked on their own),
not ones the group guards."""


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
                LISTENER_PORTS
            ):
                continue  # a load balancer's listener the spec opened: check_open_endpoint_structure
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


def _exempted_ports(props: Mapping[str, Any]) -> list[int]:
    """The listener ports whose open rules ``check_no_open_ingress`` let pass on a group that
    carries ``OPEN_ENDPOINT_TAG``."""
    if as_map(props.get("tags")).get(OPEN_ENDPOINT_TAG) != "true":
        return []
    ports = []
    for entry in as_seq(props.get("ingress")):
        rule = as_map(entry)
        span = (as_count(rule.get("fromPort")), as_count(rule.get("toPort")))
        cidrs = [*as_seq(rule.get("cidrBlocks")), *as_seq(rule.get("ipv6CidrBlocks"))]
        if span in LISTENER_PORTS and (_open_cidrs(cidrs) or too_broad([c for c in cidrs if c is not None])):
            ports.append(span[0])
    return ports


def entry_links(entry: tuple[Any, ...]) -> tuple[str | None, dict[str, set[str]]]:
    """(urn, {property: urns it depends on}) of a stack entry ``(type, props, region, urn,
    property dependencies)``; (None, {}) when the engine gave neither."""
    urn = entry[3] if len(entry) > 3 and isinstance(entry[3], str) else None
    deps = as_map(entry[4]) if len(entry) > 4 else {}
    return urn, {str(k): {str(u) for u in as_seq(v)} for k, v in deps.items()}


def holds_value(value: Any, ident: Any) -> bool:
    """Whether ``ident`` appears anywhere in ``value``, through nested maps and lists
    (``networkInterfaces[].securityGroups``, ``launchSpecification.vpcSecurityGroupIds`` ...)."""
    if isinstance(value, Mapping):
        return any(holds_value(v, ident) for v in value.values())
    if isinstance(value, list | tuple):
        return any(holds_value(v, ident) for v in value)
    return bool(value == ident)


def _refers_to(props: Mapping[str, Any], deps: dict[str, set[str]], urn: str | None, ident: Any) -> bool:
    """Whether a resource names the group: one of its properties, at any depth, depends on the
    group's resource (known even in a preview, where ids are not) or holds its id (an id from a
    lookup carries no dependency)."""
    if urn is not None and any(urn in urns for urns in deps.values()):
        return True
    return bool(ident) and holds_value(props, ident)


def check_open_endpoint_structure(
    resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None
) -> list[str]:
    """The ``gpufit:open-endpoint`` tag exempts a security group's open listener rules only when
    the stack's structure says it is gpufit's load balancer group: an internet-facing
    Application Load Balancer of the stack names it in ``securityGroups``, nothing else (no
    instance, launch template or network interface) uses it, and that load balancer has a
    listener on each exempted port. Relations come from the engine's property dependencies
    (``PolicyResource.property_dependencies``, https://www.pulumi.com/docs/iac/using-pulumi/crossguard/core-concepts/),
    or from ids where they are known; a group whose relations cannot be read is refused."""
    del config
    entries = [(str(e[0]), as_map(e[1]), *entry_links(e)) for e in resources]
    problems: list[str] = []
    for typ, props, urn, _ in entries:
        ports = _exempted_ports(props) if typ == AWS_SECURITY_GROUP else []
        if not ports:
            continue
        ident = props.get("id")
        label = str(props.get("name") or urn or "a security group")
        users = [(t, p, u, d) for t, p, u, d in entries if u != urn and _refers_to(p, d, urn, ident)]
        albs = [
            (p, u)
            for t, p, u, _ in users
            if t == AWS_ALB
            and p.get("internal") is not True
            and p.get("loadBalancerType", "application") == "application"
        ]
        others = sorted({t for t, _, _, _ in users if t not in (AWS_ALB, AWS_LISTENER, *SOURCE_ONLY)})
        if not albs:
            problems.append(
                f"{label} carries {OPEN_ENDPOINT_TAG} and admits the internet on port(s) "
                f"{', '.join(map(str, ports))}, but no internet-facing load balancer of the stack uses it"
            )
            continue
        if others:
            problems.append(
                f"{label} carries {OPEN_ENDPOINT_TAG} but also guards {', '.join(others)}: the exemption "
                "is for a load balancer's own group"
            )
        listened = {
            as_count(p.get("port"))
            for t, p, _, d in entries
            if t == AWS_LISTENER and any(_refers_to(p, d, u, a.get("arn")) for a, u in albs)
        }
        problems += [
            f"{label} carries {OPEN_ENDPOINT_TAG} and admits the internet on port {port}, where its load "
            "balancer has no listener"
            for port in ports
            if port not in listened
        ]
    return problems


PLAIN_HTTP_TAG = "gpufit:plain-http"
"""On an AWS listener serving plain HTTP because the spec set ``serving.allow_plain_http``."""
PLAIN_HTTP_MARK = "serving.allow_plain_http"
PLAIN_HTTP_DESCRIPTION = re.compile(r"gpufit [a-z0-9-]+: plain HTTP \(serving\.allow_plain_http\)")
"""The whole description gpufit writes on a GCP target HTTP proxy the spec opted in to
(``providers/gcp/endpoint.py``); a description that merely contains the words is no marker."""
ENCRYPTED_LISTENER_PROTOCOLS = frozenset({"HTTPS", "TLS"})
"""A listener whose protocol is anything else serves plaintext: ``HTTP`` (the default of an
Application Load Balancer listener that names none) and a Network Load Balancer's ``TCP``,
``UDP``, ``TCP_UDP``, ``QUIC``, ``TCP_QUIC`` (pulumi-aws ``lb.Listener`` ``protocol``,
https://www.pulumi.com/registry/packages/aws/api-docs/lb/listener/#protocol_python)."""
GCP_PLAIN_PROXIES = (
    "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy",
    "gcp:compute/targetHttpProxy:TargetHttpProxy",
    "gcp:compute/regionTargetTcpProxy:RegionTargetTcpProxy",
    "gcp:compute/targetTcpProxy:TargetTcpProxy",
)
GCP_FORWARDING_RULES = (
    "gcp:compute/forwardingRule:ForwardingRule",
    "gcp:compute/globalForwardingRule:GlobalForwardingRule",
)
GCP_PASSTHROUGH_TARGETS = ("/targetPools/", "/targetInstances/")
"""Targets of a forwarding rule that pass the client's bytes through unterminated."""


def _opted_in(marked: bool, config: PolicyConfig) -> bool:
    """Plain HTTP passes only where the stack's own config opted in (``config.allow_plain_http``,
    from ``serving.allow_plain_http`` in the stack file) and gpufit marked the resource."""
    return config.allow_plain_http and marked


def check_plain_http(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """An endpoint serves HTTPS unless the stack opted in to plain HTTP
    (``serving.allow_plain_http``, passed to the pack as ``allow_plain_http`` policy config):
    an AWS listener whose protocol is not HTTPS/TLS (none named is HTTP) must redirect every
    request to HTTPS or be opted in and carry ``PLAIN_HTTP_TAG``; a GCP target HTTP or TCP proxy
    must be opted in and carry ``PLAIN_HTTP_DESCRIPTION``; an external GCP forwarding rule may not
    pass traffic straight to a backend service, target pool or instance (no proxy to terminate
    TLS). Over plain HTTP the API key and every prompt cross the internet readable by anyone on
    the path."""
    fix = "give a certificate (serving.certificate_arn / serving.domain / serving.certificate) or opt in with"
    if resource_type == AWS_LISTENER:
        protocol = str(props.get("protocol") or "HTTP").upper()
        if protocol in ENCRYPTED_LISTENER_PROTOCOLS:
            return []
        actions = [as_map(a) for a in as_seq(props.get("defaultActions"))]
        redirects = (
            protocol == "HTTP"
            and bool(actions)
            and all(
                a.get("type") == "redirect"
                and str(as_map(a.get("redirect")).get("protocol")).upper() == "HTTPS"
                for a in actions
            )
        )
        if redirects or _opted_in(as_map(props.get("tags")).get(PLAIN_HTTP_TAG) == "true", config):
            return []
        return [f"listener on port {props.get('port')} serves plaintext {protocol}: {fix} {PLAIN_HTTP_MARK}"]
    if resource_type in GCP_PLAIN_PROXIES:
        marked = bool(PLAIN_HTTP_DESCRIPTION.fullmatch(str(props.get("description") or "")))
        if _opted_in(marked and "Http" in resource_type, config):
            return []
        kind = resource_type.rsplit(":", 1)[-1]
        return [f"{kind} serves plaintext: {fix} {PLAIN_HTTP_MARK}"]
    if resource_type in GCP_FORWARDING_RULES:
        scheme = str(props.get("loadBalancingScheme") or "EXTERNAL").upper()
        target = str(props.get("target") or "")
        if scheme.startswith("EXTERNAL") and (
            props.get("backendService") or any(t in target for t in GCP_PASSTHROUGH_TARGETS)
        ):
            return [
                "external forwarding rule passes traffic straight to its backends (no proxy terminates TLS): "
                "front the endpoint with a target HTTPS proxy"
            ]
    return []
