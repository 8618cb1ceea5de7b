"""A serve deployment's endpoint on GCP: the MIG's autohealing check (the machine's readiness
responder), the engine's health check, and (``serving.expose: load_balancer``) a regional
external Application Load Balancer with the MIG as its backend. (The API key and the token are
Secret Manager secrets: ``providers.gcp.secrets``.)

The load balancer (EXTERNAL_MANAGED, regional) needs a proxy-only subnet in the VPC; Cloud
Armor admits ``access.api_cidrs`` and denies everything else; the URL map forwards ``/v1/*``
only and answers 404 to every other path (``API_PATHS``); the VMs admit the server ports
from Google's health-check ranges and the proxy-only subnet only. GCP's regional load balancer
has no managed certificate here: it listens on HTTP (the plan warns), and HTTPS is left for a
Certificate Manager certificate of your own (see the README).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment
from machine.lifecycle import READINESS_PATH
from machine.serving import readiness_port
from providers.gcp.common import resource_name

HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
"""Where Google Cloud's health checks come from (Cloud Load Balancing documentation)."""
PROXY_SUBNET_CIDR = "10.129.0.0/23"
"""The regional load balancer's proxy-only subnet (a /23 is Google's recommended size)."""
IAP_RANGE = "35.235.240.0/20"
"""Where IAP TCP forwarding connects from (``gcloud compute start-iap-tunnel``)."""
ARMOR_RANGES_PER_RULE = 10
"""Cloud Armor's basic match rule takes at most 10 source ranges."""


def health_check(base: str, d: Deployment, child: pulumi.ResourceOptions) -> gcp.compute.RegionHealthCheck:
    """HTTP health check of the engine's own route (vLLM ``/health``, SGLang ``/health_generate``)
    on the first replica's port: the load balancer's backend sends requests only to a VM whose
    engine answers it."""
    assert d.server is not None
    return gcp.compute.RegionHealthCheck(
        resource_name(base, "health"),
        region=d.region,
        description=f"gpufit {d.workload}: the model server is ready",
        http_health_check=gcp.compute.RegionHealthCheckHttpHealthCheckArgs(
            port=d.server.base_port, request_path=d.server.health_path
        ),
        check_interval_sec=15,
        timeout_sec=5,
        healthy_threshold=2,
        unhealthy_threshold=3,
        opts=child,
    )


def readiness_check(base: str, d: Deployment, child: pulumi.ResourceOptions) -> gcp.compute.RegionHealthCheck:
    """The MIG's autohealing check: the machine's readiness responder (``machine.serving``),
    healthy while the weights load within the plan's bound, then as the engine's ``/health``;
    unhealthy once the machine gave up."""
    assert d.server is not None
    return gcp.compute.RegionHealthCheck(
        f"{base}-alive",
        region=d.region,
        description=f"gpufit {d.workload}: the machine is loading or serving",
        http_health_check=gcp.compute.RegionHealthCheckHttpHealthCheckArgs(
            port=readiness_port(d.server), request_path=READINESS_PATH
        ),
        check_interval_sec=30,
        timeout_sec=10,
        healthy_threshold=1,
        unhealthy_threshold=4,
        opts=child,
    )


def readiness_firewall(
    base: str, d: Deployment, network: pulumi.Input[str], tag: str, child: pulumi.ResourceOptions
) -> gcp.compute.Firewall:
    """The readiness responder's port, from Google's health checkers only."""
    assert d.server is not None
    return gcp.compute.Firewall(
        f"{base}-alive",
        network=network,
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(readiness_port(d.server))])],
        source_ranges=list(HEALTH_CHECK_RANGES),
        target_tags=[tag],
        description="gpufit: the readiness responder, from Google's health checks",
        opts=child,
    )


def server_firewall(
    base: str, d: Deployment, network: pulumi.Input[str], tag: str, child: pulumi.ResourceOptions
) -> gcp.compute.Firewall:
    """The server ports, from the health checkers and either the load balancer's proxies or,
    for a private endpoint, IAP's TCP forwarding (the `port_forward` output's tunnel)."""
    assert d.server is not None
    last = PROXY_SUBNET_CIDR if d.expose == "load_balancer" else IAP_RANGE
    sources = [*HEALTH_CHECK_RANGES, last]
    return gcp.compute.Firewall(
        resource_name(base, "serve"),
        network=network,
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(p) for p in d.server.ports()])],
        source_ranges=sources,
        target_tags=[tag],
        description="gpufit: the model server, from Google's health checks and the load balancer's proxies",
        opts=child,
    )


def armor_rules(cidrs: tuple[str, ...]) -> list[gcp.compute.RegionSecurityPolicyRuleArgs]:
    """Allow ``cidrs`` (ten ranges a rule), deny the rest."""
    chunks = [list(cidrs[i : i + ARMOR_RANGES_PER_RULE]) for i in range(0, len(cidrs), ARMOR_RANGES_PER_RULE)]
    rules = [
        gcp.compute.RegionSecurityPolicyRuleArgs(
            action="allow",
            priority=1000 + i,
            description="access.api_cidrs",
            match=gcp.compute.RegionSecurityPolicyRuleMatchArgs(
                versioned_expr="SRC_IPS_V1",
                config=gcp.compute.RegionSecurityPolicyRuleMatchConfigArgs(src_ip_ranges=chunk),
            ),
        )
        for i, chunk in enumerate(chunks)
    ]
    rules.append(
        gcp.compute.RegionSecurityPolicyRuleArgs(
            action="deny(403)",
            priority=2147483647,
            description="everyone else",
            match=gcp.compute.RegionSecurityPolicyRuleMatchArgs(
                versioned_expr="SRC_IPS_V1",
                config=gcp.compute.RegionSecurityPolicyRuleMatchConfigArgs(src_ip_ranges=["*"]),
            ),
        )
    )
    return rules


API_PATHS = "/v1/*"
"""The only paths the load balancer forwards: vLLM checks ``--api-key`` on ``/v1`` paths only
(``/invocations``, ``/tokenize``, ``/score``, ``/rerank``, ``/metrics``, ``/health`` … answer
without it: https://docs.vllm.ai/en/latest/usage/security.html, "API Key Authentication
Limitations"). The AWS listener forwards the same set (``providers.aws.endpoint``). The health
checks probe the VMs directly from ``HEALTH_CHECK_RANGES``, not through the URL map."""
NOT_FOUND = 404


def not_found(backend: pulumi.Input[str]) -> gcp.compute.RegionUrlMapDefaultRouteActionArgs:
    """A route action that answers 404 to every request it gets, before any reaches a VM: the
    regional URL map has no direct response, so the action names the backend and aborts 100 %
    of requests with ``faultInjectionPolicy.abort`` (supported on the regional external
    Application Load Balancer: https://cloud.google.com/load-balancing/docs/features#routing-traffic-management;
    fields: https://cloud.google.com/compute/docs/reference/rest/v1/regionUrlMaps)."""
    c = gcp.compute
    return c.RegionUrlMapDefaultRouteActionArgs(
        weighted_backend_services=[
            c.RegionUrlMapDefaultRouteActionWeightedBackendServiceArgs(backend_service=backend, weight=100)
        ],
        fault_injection_policy=c.RegionUrlMapDefaultRouteActionFaultInjectionPolicyArgs(
            abort=c.RegionUrlMapDefaultRouteActionFaultInjectionPolicyAbortArgs(
                http_status=NOT_FOUND, percentage=100.0
            )
        ),
    )


def matcher_not_found(
    backend: pulumi.Input[str],
) -> gcp.compute.RegionUrlMapPathMatcherDefaultRouteActionArgs:
    """``not_found`` for a path matcher's unmatched paths."""
    c = gcp.compute
    return c.RegionUrlMapPathMatcherDefaultRouteActionArgs(
        weighted_backend_services=[
            c.RegionUrlMapPathMatcherDefaultRouteActionWeightedBackendServiceArgs(
                backend_service=backend, weight=100
            )
        ],
        fault_injection_policy=c.RegionUrlMapPathMatcherDefaultRouteActionFaultInjectionPolicyArgs(
            abort=c.RegionUrlMapPathMatcherDefaultRouteActionFaultInjectionPolicyAbortArgs(
                http_status=NOT_FOUND, percentage=100.0
            )
        ),
    )


PLAIN_HTTP_MARK = "serving.allow_plain_http"
"""In the description of a target HTTP proxy the spec opted in to (``policy`` checks it)."""
CERTIFICATE_MANAGER = "//certificatemanager.googleapis.com/"
"""The namespace a Certificate Manager certificate carries in a target proxy's
``sslCertificates`` ("Certificate Manager Certificates must include the certificatemanager API
namespace": Compute API discovery document, ``TargetHttpsProxy.sslCertificates``)."""


@dataclass
class GcpLoadBalancer:
    backend: gcp.compute.RegionBackendService
    forwarding_rule: gcp.compute.ForwardingRule
    address: gcp.compute.Address
    policy: gcp.compute.RegionSecurityPolicy
    https: bool = False
    dns_authorization: gcp.certificatemanager.DnsAuthorization | None = None


def _tls_certificate(
    base: str, d: Deployment, labels: dict[str, str], child: pulumi.ResourceOptions
) -> tuple[pulumi.Input[str] | None, gcp.certificatemanager.DnsAuthorization | None]:
    """The HTTPS proxy's certificate (with the Certificate Manager namespace) and, for a
    Google-managed one, the DNS authorization whose record the user adds to their zone
    (regional Google-managed certificates take DNS authorization:
    https://cloud.google.com/certificate-manager/docs/deploy-google-managed-regional); (None,
    None) for plain HTTP, which only ``serving.allow_plain_http`` allows."""
    if d.tls_certificate is not None:
        return CERTIFICATE_MANAGER + d.tls_certificate, None
    if d.tls_domain is not None:
        authorization = gcp.certificatemanager.DnsAuthorization(
            resource_name(base, "dns-auth"),
            location=d.region,
            domain=d.tls_domain,
            description=f"gpufit {d.workload}: proves {d.tls_domain} for its certificate",
            labels=labels,
            opts=child,
        )
        certificate = gcp.certificatemanager.Certificate(
            resource_name(base, "cert"),
            location=d.region,
            description=f"gpufit {d.workload}: Google-managed, for {d.tls_domain}",
            managed=gcp.certificatemanager.CertificateManagedArgs(
                domains=[d.tls_domain], dns_authorizations=[authorization.id]
            ),
            labels=labels,
            opts=child,
        )
        return certificate.id.apply(lambda i: CERTIFICATE_MANAGER + i), authorization
    if d.allow_plain_http:
        return None, None
    raise pulumi.RunError(
        "serving.allow_plain_http: a load-balanced endpoint on GCP needs serving.domain or "
        "serving.certificate, or allow_plain_http: true to serve plain HTTP"
    )


def backend_of(group: pulumi.Input[str]) -> gcp.compute.RegionBackendServiceBackendArgs:
    """One MIG as a backend of the endpoint's backend service, every group alike: UTILIZATION
    balancing at full capacity. The backend service cannot say which group is the choice, and it
    need not: a group the rebalancer left at 0 VMs has no capacity and no healthy endpoint, so
    requests reach only the groups whose VMs pass the health check. ``capacityScaler`` stays 1
    for a fallback group: "A setting of 0 means the group is completely drained, offering 0% of
    its available capacity", and nothing would raise it when the rebalancer moves a replica
    there (its account may get and resize groups only); ``balancingMode``: "Backends of a
    backend service may use different balancing modes" (Compute discovery document
    ``compute.v1`` rev. 20261106, schema ``Backend``). The ``group`` is the MIG's
    ``instanceGroup``, a fully-qualified URL as the field requires, which a MIG has at target
    size 0. That Compute accepts a group with no VM as a backend is UNCONFIRMED. For: compute.v1
    ``Backend`` and pulumi-gcp 10.2 ``RegionBackendServiceBackend.group`` state no minimum size;
    ``AutoscalingPolicy.minNumReplicas`` "cannot be less than 0" and an autoscaled MIG may be a
    load balancer's backend (https://cloud.google.com/compute/docs/autoscaler/scaling-load-balancing).
    Against: in 2017 Terraform's regional backend service page said "Instance groups must
    contain at least one instance" (hashicorp/terraform#15097, after #15027: an empty unmanaged
    group behind an INTERNAL TCP service was refused); the current provider page no longer does.
    A refusal would fail `pulumi up` at this backend service (Compute error 400 on
    ``backends[n].group``) after the groups exist, before the URL map and forwarding rule."""
    return gcp.compute.RegionBackendServiceBackendArgs(
        group=group, balancing_mode="UTILIZATION", capacity_scaler=1.0
    )


def load_balancer(
    base: str,
    d: Deployment,
    network: pulumi.Input[str],
    groups: Sequence[pulumi.Input[str]],
    check: gcp.compute.RegionHealthCheck,
    make_proxy_subnet: bool,
    labels: dict[str, str],
    child: pulumi.ResourceOptions,
) -> GcpLoadBalancer:
    """Regional external Application Load Balancer: address, forwarding rule, HTTP proxy, URL
    map, backend service on the MIGs (the choice's, then its fallbacks' groups: port ``serve0``
    of each, ``backend_of``), Cloud Armor for ``access.api_cidrs``."""
    assert d.server is not None
    region = d.region
    certificate, authorization = _tls_certificate(base, d, labels, child)
    proxies: list[Any] = []
    if make_proxy_subnet:
        proxies.append(
            gcp.compute.Subnetwork(
                resource_name(base, "proxy-only"),
                network=network,
                region=region,
                ip_cidr_range=PROXY_SUBNET_CIDR,
                purpose="REGIONAL_MANAGED_PROXY",
                role="ACTIVE",
                description="gpufit: the regional load balancer's proxies",
                opts=child,
            )
        )
    policy = gcp.compute.RegionSecurityPolicy(
        resource_name(base, "armor"),
        region=region,
        type="CLOUD_ARMOR",
        description=f"gpufit {d.workload}: access.api_cidrs only"
        + (" (access.allow_api_from_anywhere)" if d.api_from_anywhere else ""),
        rules=armor_rules(d.api_cidrs),
        opts=child,
    )
    backend = gcp.compute.RegionBackendService(
        resource_name(base, "backend"),
        region=region,
        load_balancing_scheme="EXTERNAL_MANAGED",
        protocol="HTTP",
        port_name="serve0",
        timeout_sec=600,
        health_checks=check.id,
        security_policy=policy.id,
        backends=[backend_of(group) for group in groups],
        opts=child,
    )
    url_map = gcp.compute.RegionUrlMap(
        resource_name(base, "urls"),
        region=region,
        description=f"gpufit {d.workload}: {API_PATHS} to the model servers, 404 elsewhere",
        default_route_action=not_found(backend.id),
        host_rules=[gcp.compute.RegionUrlMapHostRuleArgs(hosts=["*"], path_matcher="api")],
        path_matchers=[
            gcp.compute.RegionUrlMapPathMatcherArgs(
                name="api",
                default_route_action=matcher_not_found(backend.id),
                path_rules=[
                    gcp.compute.RegionUrlMapPathMatcherPathRuleArgs(paths=[API_PATHS], service=backend.id)
                ],
            )
        ],
        opts=child,
    )
    proxy: gcp.compute.RegionTargetHttpsProxy | gcp.compute.RegionTargetHttpProxy
    if certificate is not None:
        tls = gcp.compute.RegionSslPolicy(
            resource_name(base, "tls"),
            region=region,
            min_tls_version="TLS_1_2",
            profile="MODERN",
            description="gpufit: TLS 1.2 or later, modern ciphers",
            opts=child,
        )
        proxy = gcp.compute.RegionTargetHttpsProxy(
            resource_name(base, "https"),
            region=region,
            url_map=url_map.id,
            certificate_manager_certificates=[certificate],
            ssl_policy=tls.id,
            opts=child,
        )
    else:
        proxy = gcp.compute.RegionTargetHttpProxy(
            resource_name(base, "http"),
            region=region,
            url_map=url_map.id,
            description=f"gpufit {d.workload}: plain HTTP ({PLAIN_HTTP_MARK})",
            opts=child,
        )
    address = gcp.compute.Address(
        resource_name(base, "lb-ip"),
        region=region,
        address_type="EXTERNAL",
        network_tier="STANDARD",
        labels=labels,
        opts=child,
    )
    rule = gcp.compute.ForwardingRule(
        resource_name(base, "lb"),
        region=region,
        load_balancing_scheme="EXTERNAL_MANAGED",
        ip_protocol="TCP",
        port_range="443" if certificate is not None else "80",
        target=proxy.id,
        network=network,
        network_tier="STANDARD",
        ip_address=address.id,
        labels=labels,
        opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=proxies)),
    )
    return GcpLoadBalancer(backend, rule, address, policy, certificate is not None, authorization)
