"""Issue 22 items 4 and 5: the open-endpoint exemption is tied to the stack's structure, and a
load-balanced endpoint serves HTTPS (AWS: an ACM certificate; GCP: a Certificate Manager
certificate, Google-managed for ``serving.domain`` or the user's own) or plain HTTP only by the
explicit opt-in ``serving.allow_plain_http``. Each attack is tried first."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pulumi
import pytest

from deployment import ServingError
from policy.gpufit_policies import RESOURCE_VALIDATORS, STACK_VALIDATORS, PolicyConfig
from policy.ingress import check_open_endpoint_structure, check_plain_http
from selector.spec import SpecError, parse_spec
from tests.pulumi_harness import ROOT, RecordingMocks, links, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
CONFIG = PolicyConfig(now=NOW)
OPTED_IN = PolicyConfig(now=NOW, allow_plain_http=True)
ARN = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
SG = "aws:ec2/securityGroup:SecurityGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ALB = "aws:lb/loadBalancer:LoadBalancer"
LISTENER = "aws:lb/listener:Listener"
GCP = {"gcp:project": "my-project"}


def _workload(**serving: Any) -> dict[str, Any]:
    workload = dict(stack_config(ROOT / "stacks" / "Pulumi.llama8b-lb.yaml")["gpufit:workload"])
    merged = {**workload["serving"], **serving}
    workload["serving"] = {k: v for k, v in merged.items() if v is not None}
    return workload


def _gcp(**serving: Any) -> dict[str, Any]:
    return {**_workload(**{"allow_plain_http": None, **serving}), "placement": {"clouds": ["gcp"]}}


def _run(workload: dict[str, Any], **config: Any) -> tuple[RecordingMocks, dict[str, Any]]:
    mocks = RecordingMocks()
    _, outputs = run_program({"gpufit:workload": workload, **config}, NOW, mocks=mocks)
    return mocks, outputs


def policy_view(mocks: RecordingMocks) -> list[tuple[Any, ...]]:
    """The stack as a stack policy sees it: type, properties, region, URN, property dependencies."""
    return [(r.typ, r.inputs, None, *links(mocks, r)) for r in mocks.resources]


def everything(view: list[tuple[Any, ...]], config: PolicyConfig = CONFIG) -> list[str]:
    problems = [p for check in STACK_VALIDATORS for p in check(view, config)]
    return problems + [
        p for typ, props, *_ in view for check in RESOURCE_VALIDATORS for p in check(typ, props, config)
    ]


# ------------------------------------------------------------- item 4: the open-endpoint tag


OPEN = {"access": {"api_cidrs": ["0.0.0.0/0"], "allow_api_from_anywhere": True}}


def _open_stack() -> list[tuple[Any, ...]]:
    mocks, _ = _run({**_workload(), **OPEN})
    return policy_view(mocks)


def _foreign_sg(port: int = 443, **tags: str) -> tuple[Any, ...]:
    props = {
        "name": "foreign",
        "ingress": [{"protocol": "tcp", "fromPort": port, "toPort": port, "cidrBlocks": ["0.0.0.0/0"]}],
        "tags": {"gpufit:open-endpoint": "true", **tags},
    }
    return (SG, props, None, "urn:pulumi:s::p::aws:ec2/securityGroup:SecurityGroup::foreign", {})


def test_gpufits_own_open_load_balancer_group_passes_every_policy() -> None:
    view = _open_stack()
    lb_sg = next(p for t, p, *_ in view if t == SG and p.get("tags", {}).get("gpufit:open-endpoint"))
    assert lb_sg["ingress"][0]["cidrBlocks"] == ["0.0.0.0/0"]
    assert check_open_endpoint_structure(view) == []
    assert everything(view, OPTED_IN) == []  # the stack opted in to plain HTTP


def test_a_foreign_group_carrying_the_tag_is_refused() -> None:
    view = [*_open_stack(), _foreign_sg()]
    problems = check_open_endpoint_structure(view)
    assert problems == [
        "foreign carries gpufit:open-endpoint and admits the internet on port(s) 443, but no "
        "internet-facing load balancer of the stack uses it"
    ]
    assert any("foreign" in p for p in everything(view))
    assert check_open_endpoint_structure([_foreign_sg()[:3]])  # relations unknown: refused


def test_the_tag_on_a_group_that_also_guards_the_machines_is_refused() -> None:
    view = _open_stack()
    lb_urn = next(u for t, p, _, u, _ in view if t == SG and p.get("tags", {}).get("gpufit:open-endpoint"))
    view = [
        (t, p, r, u, {**d, "vpcSecurityGroupIds": [lb_urn]}) if t == LT else (t, p, r, u, d)
        for t, p, r, u, d in view
    ]
    (problem,) = check_open_endpoint_structure(view)
    assert "also guards aws:ec2/launchTemplate:LaunchTemplate" in problem


def test_the_tag_exempts_only_the_listeners_port() -> None:
    view = _open_stack()
    opened = []
    for t, p, r, u, d in view:
        if t == SG and p.get("tags", {}).get("gpufit:open-endpoint"):
            extra = {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}
            p = {**p, "ingress": [*p["ingress"], extra]}
        opened.append((t, p, r, u, d))
    (problem,) = check_open_endpoint_structure(opened)
    assert "port 443, where its load balancer has no listener" in problem


@pytest.mark.parametrize(
    ("resource_type", "props"),
    [
        (LT, {"networkInterfaces": [{"securityGroups": ["sg-0lb"], "associatePublicIpAddress": True}]}),
        (
            "aws:ec2/instance:Instance",
            {
                "networkInterfaces": [{"networkInterfaceId": "eni-1"}],
                "vpcSecurityGroupIds": [],
                "launchTemplate": {"id": "lt"},
                "nested": {"securityGroups": ["sg-0lb"]},
            },
        ),
        ("aws:ec2/networkInterface:NetworkInterface", {"subnetId": "subnet-1", "securityGroups": ["sg-0lb"]}),
        ("aws:ec2/spotInstanceRequest:SpotInstanceRequest", {"vpcSecurityGroupIds": ["sg-0lb"]}),
        (
            "aws:ec2/spotFleetRequest:SpotFleetRequest",
            {"launchSpecifications": [{"vpcSecurityGroupIds": ["sg-0lb"]}]},
        ),
    ],
)
def test_the_group_named_by_id_at_any_depth_is_seen(resource_type: str, props: dict[str, Any]) -> None:
    """An id from a lookup (``aws.ec2.get_security_group``) carries no engine dependency: the
    pack still finds it nested in a machine's network interfaces."""
    view = [
        (
            t,
            {**p, "id": "sg-0lb"} if t == SG and p.get("tags", {}).get("gpufit:open-endpoint") else p,
            r,
            u,
            d,
        )
        for t, p, r, u, d in _open_stack()
    ]
    assert check_open_endpoint_structure(view) == []
    machine = (resource_type, props, None, f"urn:pulumi:s::p::{resource_type}::m", {})
    (problem,) = check_open_endpoint_structure([*view, machine])
    assert f"also guards {resource_type}" in problem


def test_an_internal_load_balancer_does_not_earn_the_exemption() -> None:
    view = [(t, {**p, "internal": True} if t == ALB else p, r, u, d) for t, p, r, u, d in _open_stack()]
    assert check_open_endpoint_structure(view)


# ------------------------------------------------------------------ item 5: HTTPS or opt-in


def test_an_endpoint_with_neither_certificate_nor_opt_in_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_workload(allow_plain_http=None))
    (line,) = [str(p) for p in caught.value.problems]
    assert "serving.allow_plain_http" in line and "\n" not in line


def test_a_certificate_for_one_cloud_leaves_the_other_cloud_refused() -> None:
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    workload = {
        **_workload(allow_plain_http=None, certificate_arn=arn),
        "placement": {"clouds": ["aws", "gcp"]},
    }
    with pytest.raises(SpecError) as caught:
        parse_spec(workload)
    (line,) = [str(p) for p in caught.value.problems]
    assert line.startswith("serving.domain (or serving.certificate): the endpoint may run on GCP")


@pytest.mark.parametrize(
    ("serving", "problem"),
    [
        ({"domain": "api.example.com"}, "serving.allow_plain_http: the endpoint has a certificate"),
        ({"expose": "private"}, "serving.allow_plain_http is for serving.expose load_balancer"),
        ({"domain": "Api.Example.com"}, "serving.domain"),
        ({"domain": "localhost"}, "serving.domain"),
    ],
)
def test_contradictions_are_refused(serving: dict[str, Any], problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_workload(**serving))
    assert any(problem in str(p) for p in caught.value.problems), caught.value.problems


def test_aws_without_a_certificate_listens_on_80_only_by_the_opt_in() -> None:
    mocks, outputs = _run(_workload())
    listener = mocks.one(LISTENER).inputs
    assert (listener["port"], listener["protocol"], listener["tags"]["gpufit:plain-http"]) == (
        80,
        "HTTP",
        "true",
    )
    assert check_plain_http(LISTENER, listener, OPTED_IN) == []
    assert check_plain_http(LISTENER, listener, CONFIG)  # the tag alone, without the stack's opt-in
    assert outputs["endpoint"].startswith("http://")


def test_aws_refuses_a_deployment_that_reached_it_without_either() -> None:
    from dataclasses import replace

    from deployment import deployment_from_plan
    from providers.aws.endpoint import listener_port
    from selector.catalog import load_catalog
    from selector.select import plan

    d = deployment_from_plan(
        plan(parse_spec(_workload()), load_catalog()), stack="t", project="p", created_at=NOW
    )
    assert listener_port(d) == 80
    with pytest.raises(pulumi.RunError, match=r"serving\.allow_plain_http"):
        listener_port(replace(d, allow_plain_http=False))


def test_the_policy_refuses_plain_http_that_was_not_opted_in() -> None:
    plain = {"port": 80, "protocol": "HTTP", "defaultActions": [{"type": "fixed-response"}], "tags": {}}
    assert check_plain_http(LISTENER, plain, CONFIG)
    redirect = {**plain, "defaultActions": [{"type": "redirect", "redirect": {"protocol": "HTTPS"}}]}
    assert check_plain_http(LISTENER, redirect, CONFIG) == []
    assert check_plain_http(
        "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy", {"description": ""}, CONFIG
    )
    https = {"port": 443, "protocol": "HTTPS", "tags": {}}
    assert check_plain_http(LISTENER, https, CONFIG) == []
    assert check_plain_http(LISTENER, {**https, "protocol": "TLS"}, CONFIG) == []


FORWARD = [{"type": "forward", "targetGroupArn": "arn:tg"}]
GCP_HTTP_PROXY = "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy"
GCP_MARK = "gpufit llama8b-lb: plain HTTP (serving.allow_plain_http)"


@pytest.mark.parametrize(
    ("resource_type", "props", "config"),
    [
        # pulumi-aws lb.Listener: an ALB listener that names no protocol is HTTP
        (LISTENER, {"port": 80, "loadBalancerArn": "arn:x", "defaultActions": FORWARD}, CONFIG),
        (LISTENER, {"port": 80, "protocol": "TCP", "defaultActions": FORWARD}, CONFIG),  # NLB plaintext
        (LISTENER, {"port": 80, "protocol": "UDP", "defaultActions": FORWARD}, CONFIG),
        # a TCP listener redirects nothing, whatever its actions say
        (
            LISTENER,
            {
                "port": 80,
                "protocol": "TCP",
                "defaultActions": [{"type": "redirect", "redirect": {"protocol": "HTTPS"}}],
            },
            CONFIG,
        ),
        ("gcp:compute/regionTargetTcpProxy:RegionTargetTcpProxy", {"backendService": "bs"}, CONFIG),
        ("gcp:compute/targetTcpProxy:TargetTcpProxy", {"backendService": "bs"}, OPTED_IN),
        ("gcp:compute/targetHttpProxy:TargetHttpProxy", {"urlMap": "m"}, CONFIG),
        # a description that merely contains the words, even with the stack opted in
        (GCP_HTTP_PROXY, {"urlMap": "m", "description": "not serving.allow_plain_http at all"}, OPTED_IN),
        # gpufit's own marker but the stack did not opt in
        (GCP_HTTP_PROXY, {"urlMap": "m", "description": GCP_MARK}, CONFIG),
        (
            LISTENER,
            {
                "port": 80,
                "protocol": "HTTP",
                "defaultActions": FORWARD,
                "tags": {"gpufit:plain-http": "true"},
            },
            CONFIG,
        ),
        # the stack opted in but this listener is not gpufit's
        (LISTENER, {"port": 8080, "protocol": "HTTP", "defaultActions": FORWARD, "tags": {}}, OPTED_IN),
        # an external passthrough load balancer: nothing terminates TLS
        ("gcp:compute/forwardingRule:ForwardingRule", {"backendService": "bs", "portRange": "80"}, CONFIG),
        (
            "gcp:compute/forwardingRule:ForwardingRule",
            {"target": "projects/p/regions/r/targetPools/tp", "loadBalancingScheme": "EXTERNAL"},
            CONFIG,
        ),
    ],
)
def test_plain_http_evasions_are_refused(
    resource_type: str, props: dict[str, Any], config: PolicyConfig
) -> None:
    problems = [p for check in RESOURCE_VALIDATORS for p in check(resource_type, props, config)]
    assert any("plaintext" in p or "terminates TLS" in p for p in problems), problems


def test_the_opt_in_comes_from_the_stack_file() -> None:
    import yaml

    from policy.stack_config import policy_config

    files = {p.name: yaml.safe_load(p.read_text()) for p in (ROOT / "stacks").glob("Pulumi.*.yaml")}
    opted = {n for n, f in files.items() if policy_config(f)["gpufit-no-plain-http"]["allow_plain_http"]}
    assert opted == {"Pulumi.llama8b-lb.yaml"}
    quoted = {"config": {"gpufit:workload": {"serving": {"allow_plain_http": "true"}}}}
    assert policy_config(quoted) == {"gpufit-no-plain-http": {"allow_plain_http": False}}
    for workflow in ("plan.yml", "apply.yml"):
        text = (ROOT / ".github" / "workflows" / workflow).read_text()
        assert 'policy/stack_config.py "stacks/Pulumi.$STACK.yaml"' in text
        assert "--policy-pack-config" in text


def test_gcp_serves_https_with_a_google_managed_certificate_for_the_domain() -> None:
    mocks, outputs = _run(_gcp(domain="api.example.com"), **GCP)
    auth = mocks.one("gcp:certificatemanager/dnsAuthorization:DnsAuthorization")
    cert = mocks.one("gcp:certificatemanager/certificate:Certificate").inputs
    assert auth.inputs["domain"] == "api.example.com" and auth.inputs["location"] == cert["location"]
    assert cert["managed"] == {"domains": ["api.example.com"], "dnsAuthorizations": [f"{auth.name}-id"]}
    proxy = mocks.one("gcp:compute/regionTargetHttpsProxy:RegionTargetHttpsProxy").inputs
    (ref,) = proxy["certificateManagerCertificates"]
    assert ref.startswith("//certificatemanager.googleapis.com/")
    tls = mocks.one("gcp:compute/regionSslPolicy:RegionSslPolicy").inputs
    assert (tls["minTlsVersion"], tls["profile"]) == ("TLS_1_2", "MODERN")
    assert proxy["sslPolicy"].endswith("-tls-id")
    assert not mocks.of_type("gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy")
    assert mocks.one("gcp:compute/forwardingRule:ForwardingRule").inputs["portRange"] == "443"
    assert outputs["endpoint"] == "https://api.example.com/v1"
    assert everything(policy_view(mocks)) == []


def test_gcp_serves_https_with_a_certificate_of_ones_own() -> None:
    workload = _gcp(
        certificate="projects/my-project/locations/us-central1/certificates/api-cert",
        domain="api.example.com",
    )
    workload["placement"] = {"clouds": ["gcp"], "regions": ["us-central1"]}
    mocks, outputs = _run(workload, **GCP)
    assert not mocks.of_type("gcp:certificatemanager/certificate:Certificate")
    proxy = mocks.one("gcp:compute/regionTargetHttpsProxy:RegionTargetHttpsProxy").inputs
    assert proxy["certificateManagerCertificates"] == [
        "//certificatemanager.googleapis.com/projects/my-project/locations/us-central1/certificates/api-cert"
    ]
    assert outputs["endpoint"] == "https://api.example.com/v1"  # the name the certificate is for
    assert "endpoint_ip" in outputs  # the address the user's A record points at
    assert not mocks.of_type("gcp:certificatemanager/dnsAuthorization:DnsAuthorization")


@pytest.mark.parametrize(
    ("serving", "clouds", "problem"),
    [
        (
            {"certificate": "projects/my-project/locations/us-central1/certificates/api-cert"},
            ["gcp"],
            "serving.certificate: give serving.domain too",
        ),
        ({"domain": "api.example.com", "certificate_arn": ARN}, ["aws"], "serving.domain: GCP only"),
    ],
)
def test_gcp_certificate_fields_need_their_name_and_gcp(
    serving: dict[str, Any], clouds: list[str], problem: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**_workload(allow_plain_http=None, **serving), "placement": {"clouds": clouds}})
    assert [str(p) for p in caught.value.problems if problem in str(p)], caught.value.problems


def test_gcp_refuses_a_certificate_of_another_region() -> None:
    workload = _gcp(
        certificate="projects/my-project/locations/europe-west4/certificates/api-cert",
        domain="api.example.com",
    )
    workload["placement"] = {"clouds": ["gcp"], "regions": ["us-central1"]}
    with pytest.raises(pulumi.RunError, match=r"serving\.certificate: the certificate is in europe-west4"):
        _run(workload, **GCP)
    assert issubclass(ServingError, ValueError)


def test_gcp_plain_http_only_by_the_opt_in_and_marked_for_the_policy() -> None:
    mocks, outputs = _run(_gcp(allow_plain_http=True), **GCP)
    proxy = mocks.one("gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy").inputs
    assert "serving.allow_plain_http" in proxy["description"]
    assert check_plain_http("gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy", proxy, OPTED_IN) == []
    assert check_plain_http("gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy", proxy, CONFIG)
    assert mocks.one("gcp:compute/forwardingRule:ForwardingRule").inputs["portRange"] == "80"
    assert outputs["endpoint"].startswith("http://")


# ------------------------------------------------------------- item 10: the API key's strength

WEAK_KEYS = [
    "sk-gpufit-test-0123456789abcdef",  # 31 characters
    "a" * 40,
    "abcd" * 10,
    "password" * 4,
    "0123456789" * 4,  # a repeated pattern, 3.3 bits per character
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
    # guessable at 32 characters though their letters are varied (review i22e finding 4)
    "abcdefghijklmnopqrstuvwxyzABCDEF",  # an alphabet run
    "0123456789abcdefghijklmnopqrstuv",
    "qwertyuiopasdfghjklzxcvbnm123456",  # a keyboard walk
    "mysupersecretapikeyforgpufit2026",  # common words
    "password1password2password3passw",  # a repeated word
    "myapikeyforgpufitserver202612345",
    "correct-horse-battery-staple-2026",  # a four-word passphrase and a year
    "Correct-Horse-Battery-Staple-Pen",
]
STRONG_KEYS = [
    "3f9c0e7a51b2d48e6c1f0a9b7d3e5c2a",  # `openssl rand -hex 16`
    "9b1de0f47c2a5e8d3b6f0c1a7e4d9b2c5f8a0e3d6c9b1f4a",  # `openssl rand -hex 24`
    "Zq7LmX2pR9vK4tW8nB3cY6hJ1dF5gS0aEoUiPzQx",  # 40 letters and digits
    "paper-tiger-mountain-river-cloud-sunset-lake",  # seven words: 105 bits at 15 a word
]


@pytest.mark.parametrize("key", WEAK_KEYS)
def test_a_weak_api_key_is_refused_before_anything_is_created(key: str) -> None:
    from providers.secrets import api_key_problem

    problem = api_key_problem(key)
    assert problem is not None and problem.startswith("gpufit:apiKey: ") and "\n" not in problem
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"gpufit:apiKey: "):
        run_program({"gpufit:workload": _workload(), "gpufit:apiKey": key}, NOW, mocks=mocks)
    assert not [r for r in mocks.resources if not r.typ.startswith("pulumi:providers:")]


@pytest.mark.parametrize("key", STRONG_KEYS)
def test_a_strong_api_key_passes(key: str) -> None:
    from providers.secrets import api_key_problem

    assert api_key_problem(key) is None


def test_no_random_hex_key_is_refused() -> None:
    """The false-refusal rate over 100,000 keys as `openssl rand -hex 16` makes them (seeded) is 0."""
    import random

    from providers.secrets import api_key_problem

    rng = random.Random(20261204)
    refused = [k for k in (f"{rng.getrandbits(128):032x}" for _ in range(100_000)) if api_key_problem(k)]
    assert refused == []


@pytest.mark.parametrize("key", ["sk-gpufit-test-0123456789abcdef", "qwertyuiopasdfghjklzxcvbnm123456"])
def test_the_weak_key_message_measures_nothing_about_the_key(key: str) -> None:
    from providers.secrets import api_key_problem

    problem = api_key_problem(key) or ""
    assert problem and not any(str(n) in problem.split(";")[0] for n in (len(key), "bits per"))
    assert "bits" not in problem and str(len(key)) not in problem
