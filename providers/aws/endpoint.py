"""A serve deployment's endpoint on AWS (``serving.expose: load_balancer``): an Application Load
Balancer in front of the fleet group. (The API key and the token are Secrets Manager secrets:
``providers.aws.secrets``.)

The load balancer admits ``access.api_cidrs`` only (its security group), listens on HTTPS with
``serving.certificate_arn``, on plain HTTP only with ``serving.allow_plain_http`` (the plan
warns; the listener carries ``PLAIN_HTTP_TAG`` for the policy pack), and forwards to one target group
per replica port, health-checked on the model server's ``/health``; the machines admit the
server ports from the load balancer's security group alone. The group's health then follows
the load balancer's (ELB health checks) after a grace period long enough to load the weights.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from deployment import Deployment

TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
"""TLS 1.3 and 1.2 only (AWS's recommended policy for ALB HTTPS listeners)."""
IDLE_TIMEOUT_S = 600
"""Streamed completions of long generations outlast the ALB's default 60 s idle timeout."""


OPEN_ENDPOINT_TAG = "gpufit:open-endpoint"
"""On a load balancer's security group opened to the whole internet by
``access.allow_api_from_anywhere``: the opt-in, visible to the policy pack."""


PLAIN_HTTP_TAG = "gpufit:plain-http"
"""On a listener that serves plain HTTP because the spec set ``serving.allow_plain_http``."""


def listener_port(d: Deployment) -> int:
    """443 with a certificate; 80 only with ``serving.allow_plain_http`` (the spec refuses an
    endpoint with neither; this refuses a deployment that reached here without one)."""
    if d.certificate_arn is not None:
        return 443
    if d.allow_plain_http:
        return 80
    raise pulumi.RunError(
        "serving.allow_plain_http: a load-balanced endpoint on AWS needs serving.certificate_arn, or "
        "allow_plain_http: true to serve plain HTTP"
    )


def _cidr_groups(cidrs: tuple[str, ...]) -> tuple[list[str], list[str]]:
    v4 = [c for c in cidrs if ipaddress.ip_network(c, strict=False).version == 4]
    v6 = [c for c in cidrs if ipaddress.ip_network(c, strict=False).version == 6]
    return v4, v6


@dataclass
class LoadBalancer:
    balancer: aws.lb.LoadBalancer
    security_group: aws.ec2.SecurityGroup
    target_groups: list[aws.lb.TargetGroup]
    listener: aws.lb.Listener

    @property
    def target_group_arns(self) -> list[pulumi.Output[str]]:
        return [tg.arn for tg in self.target_groups]


MAX_TARGET_GROUPS = 5
"""An Application Load Balancer's forward action takes at most five target groups."""


def lb_security_group(
    name: str, d: Deployment, vpc_id: pulumi.Input[str], tags: dict[str, str], child: pulumi.ResourceOptions
) -> aws.ec2.SecurityGroup:
    """The load balancer's group: the listener's port from ``access.api_cidrs`` only, out to
    the model servers' ports. Made before the machines' group, which admits the servers' ports
    from this one (inline, so no rule of one group refers back to the other)."""
    assert d.server is not None
    port = listener_port(d)
    v4, v6 = _cidr_groups(d.api_cidrs)
    return aws.ec2.SecurityGroup(
        f"{name}-lb-sg",
        description=f"gpufit {d.workload}: the endpoint, for access.api_cidrs only",
        vpc_id=vpc_id,
        ingress=[
            aws.ec2.SecurityGroupIngressArgs(
                description="the API from access.api_cidrs",
                protocol="tcp",
                from_port=port,
                to_port=port,
                cidr_blocks=v4 or None,
                ipv6_cidr_blocks=v6 or None,
            )
        ],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(
                description="to the model servers",
                protocol="tcp",
                from_port=d.server.base_port,
                to_port=d.server.port(d.server.replicas - 1),
                cidr_blocks=["0.0.0.0/0"],
            )
        ],
        # The policy pack admits an endpoint open to everyone only with this mark of the opt-in.
        tags={**tags, OPEN_ENDPOINT_TAG: "true"} if d.api_from_anywhere else tags,
        opts=child,
    )


def from_load_balancer(d: Deployment, lb_sg: aws.ec2.SecurityGroup) -> aws.ec2.SecurityGroupIngressArgs:
    """The machines' inbound rule for the model servers' ports, from the load balancer only."""
    assert d.server is not None
    return aws.ec2.SecurityGroupIngressArgs(
        description="the model servers, from the load balancer only",
        protocol="tcp",
        from_port=d.server.base_port,
        to_port=d.server.port(d.server.replicas - 1),
        security_groups=[lb_sg.id],
    )


def load_balancer(
    name: str,
    d: Deployment,
    vpc_id: pulumi.Input[str],
    subnet_ids: list[str],
    lb_sg: aws.ec2.SecurityGroup,
    tags: dict[str, str],
    child: pulumi.ResourceOptions,
) -> LoadBalancer:
    """An internet-facing ALB for ``access.api_cidrs`` in front of the group's server ports.
    Only ``/v1/*`` reaches the servers (the engines check the API key on ``/v1`` paths only);
    every other path gets a 404 from the load balancer. Names come from AWS (``name_prefix``):
    load balancer and target group names are limited to 32 characters."""
    assert d.server is not None
    if d.server.replicas > MAX_TARGET_GROUPS:
        raise pulumi.RunError(
            f"serving.expose load_balancer: the plan runs {d.server.replicas} replicas per machine and an "
            f"Application Load Balancer forwards to at most {MAX_TARGET_GROUPS} target groups; restrict "
            "placement.instance_types to machines with fewer GPUs"
        )
    port = listener_port(d)
    https = port == 443
    balancer = aws.lb.LoadBalancer(
        f"{name}-lb",
        name_prefix="gpufit",
        load_balancer_type="application",
        internal=False,
        security_groups=[lb_sg.id],
        subnets=subnet_ids,
        drop_invalid_header_fields=True,
        idle_timeout=IDLE_TIMEOUT_S,
        tags=tags,
        opts=child,
    )
    groups = [
        aws.lb.TargetGroup(
            f"{name}-tg{replica}",
            name_prefix=f"gf{replica}-",
            port=server_port,
            protocol="HTTP",
            target_type="instance",
            vpc_id=vpc_id,
            deregistration_delay=30,
            health_check=aws.lb.TargetGroupHealthCheckArgs(
                enabled=True,
                path=d.server.health_path,
                port="traffic-port",
                protocol="HTTP",
                matcher="200",
                interval=15,
                timeout=5,
                healthy_threshold=2,
                unhealthy_threshold=3,
            ),
            tags=tags,
            opts=child,
        )
        for replica, server_port in enumerate(d.server.ports())
    ]
    listener = aws.lb.Listener(
        f"{name}-{'https' if https else 'http'}",
        load_balancer_arn=balancer.arn,
        port=port,
        protocol="HTTPS" if https else "HTTP",
        ssl_policy=TLS_POLICY if https else None,
        certificate_arn=d.certificate_arn,
        default_actions=[
            aws.lb.ListenerDefaultActionArgs(
                type="fixed-response",
                fixed_response=aws.lb.ListenerDefaultActionFixedResponseArgs(
                    content_type="text/plain", message_body="not found", status_code="404"
                ),
            )
        ],
        tags=tags if https else {**tags, PLAIN_HTTP_TAG: "true"},
        opts=child,
    )
    aws.lb.ListenerRule(
        f"{name}-api",
        listener_arn=listener.arn,
        priority=10,
        conditions=[
            aws.lb.ListenerRuleConditionArgs(
                path_pattern=aws.lb.ListenerRuleConditionPathPatternArgs(values=["/v1/*"])
            )
        ],
        actions=[
            aws.lb.ListenerRuleActionArgs(
                type="forward",
                forward=aws.lb.ListenerRuleActionForwardArgs(
                    target_groups=[
                        aws.lb.ListenerRuleActionForwardTargetGroupArgs(arn=g.arn, weight=1) for g in groups
                    ]
                ),
            )
        ],
        tags=tags,
        opts=child,
    )
    return LoadBalancer(balancer, lb_sg, groups, listener)
