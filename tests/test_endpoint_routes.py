"""Which request paths a load-balanced endpoint lets reach the model servers, the same on both
clouds (issue 22, item 1).

vLLM checks ``--api-key`` on ``/v1`` paths only: ``/invocations`` (the same inference functions
as ``/v1``), ``/tokenize``, ``/score``, ``/rerank``, ``/pooling``, ``/classify``, ``/metrics``,
``/health`` … answer without it (https://docs.vllm.ai/en/latest/usage/security.html, "API Key
Authentication Limitations", which recommends a proxy that allowlists the endpoints to expose).
So only ``/v1/*`` may pass the load balancer; everything else gets a 404 from the load balancer
itself. The health checks probe the VMs directly (GCP: from Google's health-check ranges; AWS:
the target group's own check), not through the listener or URL map.

Each cloud's registered resources (under the Pulumi mocks) are evaluated as the load balancer
would route a request: AWS listener rules by priority with ALB path patterns (case-sensitive,
``*`` any characters, ``?`` one: https://docs.aws.amazon.com/elasticloadbalancing/latest/application/rule-condition-types.html#path-conditions),
then the default action; GCP URL map host rules, then the path matcher's path rules (longest
match; ``/*`` only at the end, after a ``/``: https://cloud.google.com/load-balancing/docs/url-map-concepts#wildcards-regx-dynamic),
then its default route action (a 100 % fault-injection abort answers its status).
Extra cases: ``tests/fixtures/routes/*.yaml``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pulumi_harness import RecordingMocks, Registered
from tests.test_serving import GCP_LB_WORKLOAD, TOKEN, _run, _workload

FORWARD = "forward"

ROUTES: list[tuple[str, bool, str]] = [
    ("/v1/chat/completions", True, "the OpenAI API, under the key"),
    ("/v1/completions", True, "the OpenAI API, under the key"),
    ("/v1/models", True, "the OpenAI API, under the key"),
    ("/v1/embeddings", True, "the OpenAI API, under the key"),
    ("/invocations", False, "vLLM: the /v1 inference functions without the key"),
    ("/tokenize", False, "vLLM: no key"),
    ("/detokenize", False, "vLLM: no key"),
    ("/score", False, "vLLM: inference without the key"),
    ("/rerank", False, "vLLM: inference without the key"),
    ("/pooling", False, "vLLM: inference without the key"),
    ("/classify", False, "vLLM: inference without the key"),
    ("/metrics", False, "Prometheus metrics, no key"),
    ("/health", False, "for the health checks only, which probe the VMs directly"),
    ("/ping", False, "vLLM: no key"),
    ("/version", False, "vLLM: no key"),
    ("/load", False, "vLLM: no key"),
    ("/v2/embed", False, "keyed in newer vLLM, but not an API gpufit serves"),
    ("/inference/v1/generate", False, "not an API gpufit serves"),
    ("/start_profile", False, "vLLM profiler control"),
    ("/", False, "nothing there"),
    ("/v1", False, "not under /v1/ (neither load balancer's pattern matches it)"),
    ("/V1/models", False, "paths match case-sensitively"),
    ("/v1x/models", False, "not under /v1/"),
]


def _extra_routes() -> list[tuple[str, bool, str]]:
    cases = []
    for file in sorted((Path(__file__).parent / "fixtures" / "routes").glob("*.yaml")):
        for case in yaml.safe_load(file.read_text()) or []:
            cases.append((str(case["path"]), bool(case["reaches"]), f"{file.name}: {case.get('why', '')}"))
    return cases


ALL_ROUTES = ROUTES + _extra_routes()


def _alb_pattern(pattern: str) -> re.Pattern[str]:
    """An ALB path pattern: ``*`` any characters, ``?`` exactly one, case-sensitive."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern))


def aws_route(mocks: RecordingMocks, path: str) -> str | int:
    """What the ALB does with ``path``: ``forward`` or the fixed response's status."""
    listener = mocks.one("aws:lb/listener:Listener").inputs
    rules = sorted(
        (r.inputs for r in mocks.of_type("aws:lb/listenerRule:ListenerRule")), key=lambda r: r["priority"]
    )
    for rule in rules:
        conditions = rule["conditions"]
        if all(any(_alb_pattern(p).fullmatch(path) for p in c["pathPattern"]["values"]) for c in conditions):
            return _aws_action(rule["actions"][0])
    return _aws_action(listener["defaultActions"][0])


def _aws_action(action: dict[str, Any]) -> str | int:
    if action["type"] == "forward":
        return FORWARD
    assert action["type"] == "fixed-response", action
    return int(action["fixedResponse"]["statusCode"])


def _gcp_path_matches(rule_path: str, path: str) -> bool:
    if rule_path.endswith("/*"):
        return path.startswith(rule_path[:-1])
    return path == rule_path


def _gcp_action(action: dict[str, Any] | None, service: str | None) -> str | int:
    if action:
        abort = (action.get("faultInjectionPolicy") or {}).get("abort")
        if abort and float(abort["percentage"]) >= 100.0:
            return int(abort["httpStatus"])
        assert action.get("weightedBackendServices"), action
        return FORWARD
    assert service, "a route with neither a service nor a route action"
    return FORWARD


GCP_PROXIES = (
    "gcp:compute/regionTargetHttpsProxy:RegionTargetHttpsProxy",
    "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy",
)


def _by_id(mocks: RecordingMocks, types: tuple[str, ...], ident: Any) -> Registered:
    """The resource whose id (the harness gives ``{name}-id``) a reference names."""
    (found,) = [r for t in types for r in mocks.of_type(t) if f"{r.name}-id" == ident]
    return found


def gcp_url_map(mocks: RecordingMocks) -> dict[str, Any]:
    """The URL map the internet reaches: the forwarding rule's ``target`` proxy, then that
    proxy's ``urlMap`` (not just any map of the stack)."""
    rule = mocks.one("gcp:compute/forwardingRule:ForwardingRule").inputs
    proxy = _by_id(mocks, GCP_PROXIES, rule["target"]).inputs
    return _by_id(mocks, ("gcp:compute/regionUrlMap:RegionUrlMap",), proxy["urlMap"]).inputs


def gcp_route(mocks: RecordingMocks, path: str) -> str | int:
    """What the URL map behind the forwarding rule does with ``path`` (any host): ``forward``
    or the status the load balancer answers itself."""
    url_map = gcp_url_map(mocks)
    matcher_name = next((h["pathMatcher"] for h in url_map.get("hostRules") or [] if "*" in h["hosts"]), None)
    if matcher_name is None:
        return _gcp_action(url_map.get("defaultRouteAction"), url_map.get("defaultService"))
    matcher = next(m for m in url_map["pathMatchers"] if m["name"] == matcher_name)
    assert not matcher.get("routeRules"), "route rules: extend this evaluator"
    best: tuple[int, dict[str, Any]] | None = None
    for rule in matcher.get("pathRules") or []:
        for rule_path in rule["paths"]:
            if _gcp_path_matches(rule_path, path) and (best is None or len(rule_path) > best[0]):
                best = (len(rule_path), rule)
    if best is not None:
        return _gcp_action(best[1].get("routeAction"), best[1].get("service"))
    return _gcp_action(matcher.get("defaultRouteAction"), matcher.get("defaultService"))


ARN = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def _https(workload: dict[str, Any], **certificate: str) -> dict[str, Any]:
    serving = {k: v for k, v in workload["serving"].items() if k != "allow_plain_http"}
    return {**workload, "serving": {**serving, **certificate}}


@pytest.fixture(scope="module", params=["plain-http-opt-in", "https"])
def aws_endpoint(request: pytest.FixtureRequest) -> RecordingMocks:
    workload = _workload("llama8b-lb", access={"api_cidrs": ["203.0.113.0/24"]})
    if request.param == "https":
        workload = _https(workload, certificate_arn=ARN)
    mocks, _ = _run(workload)
    (listener,) = [r.inputs for r in mocks.of_type("aws:lb/listener:Listener")]
    assert listener["protocol"] == ("HTTPS" if request.param == "https" else "HTTP")
    return mocks


@pytest.fixture(scope="module", params=["plain-http-opt-in", "https"])
def gcp_endpoint(request: pytest.FixtureRequest) -> RecordingMocks:
    workload = (
        GCP_LB_WORKLOAD if request.param != "https" else _https(GCP_LB_WORKLOAD, domain="api.example.com")
    )
    mocks, _ = _run(workload, **{"gcp:project": "my-project", "gpufit:hfToken": TOKEN})
    target = mocks.one("gcp:compute/forwardingRule:ForwardingRule").inputs["target"]
    assert _by_id(mocks, GCP_PROXIES, target).typ == GCP_PROXIES[request.param != "https"]
    return mocks


@pytest.mark.parametrize(("path", "reaches", "why"), ALL_ROUTES, ids=[r[0] for r in ALL_ROUTES])
def test_only_keyed_paths_reach_the_servers_on_both_clouds(
    aws_endpoint: RecordingMocks, gcp_endpoint: RecordingMocks, path: str, reaches: bool, why: str
) -> None:
    expected: str | int = FORWARD if reaches else 404
    assert aws_route(aws_endpoint, path) == expected, f"AWS {path}: {why}"
    assert gcp_route(gcp_endpoint, path) == expected, f"GCP {path}: {why}"


def test_gcp_health_reaches_the_servers_only_from_googles_checkers(
    gcp_endpoint: RecordingMocks,
) -> None:
    """``/health`` is for the health check: the LB answers 404 to it (above), the check probes
    the VMs directly, and the server ports admit only Google's checkers and the LB's proxies."""
    serve_fw = next(
        r for r in gcp_endpoint.of_type("gcp:compute/firewall:Firewall") if r.name.endswith("-serve")
    ).inputs
    assert sorted(serve_fw["sourceRanges"]) == ["10.129.0.0/23", "130.211.0.0/22", "35.191.0.0/16"]
    (health,) = [
        r.inputs
        for r in gcp_endpoint.of_type("gcp:compute/regionHealthCheck:RegionHealthCheck")
        if r.name.endswith("-health")
    ]
    assert health["httpHealthCheck"]["requestPath"] == "/health"
    assert gcp_route(gcp_endpoint, "/health") == 404


def test_the_evaluators_see_a_forward_everything_map_as_open() -> None:
    """The GCP evaluator is not vacuous: the URL map gpufit had before (``default_service``
    only) forwards ``/invocations``."""
    mocks = RecordingMocks()
    mocks.resources += [
        Registered("gcp:compute/forwardingRule:ForwardingRule", "fr", {"target": "p-id"}, None),
        Registered(GCP_PROXIES[0], "p", {"urlMap": "m-id"}, None),
        Registered("gcp:compute/regionUrlMap:RegionUrlMap", "m", {"defaultService": "backend-id"}, None),
    ]
    assert gcp_route(mocks, "/invocations") == FORWARD


def test_the_gcp_evaluator_follows_the_proxy_to_its_map(gcp_endpoint: RecordingMocks) -> None:
    """A proxy rewired to a second, forward-everything map is seen: the evaluator reads the map
    the forwarding rule's proxy names, not the stack's first map."""
    assert gcp_route(gcp_endpoint, "/invocations") == 404
    mocks = RecordingMocks()
    target = gcp_endpoint.one("gcp:compute/forwardingRule:ForwardingRule").inputs["target"]
    for r in gcp_endpoint.resources:
        inputs = {**r.inputs, "urlMap": "open-id"} if f"{r.name}-id" == target else r.inputs
        mocks.resources.append(Registered(r.typ, r.name, inputs, r.provider))
    open_map = {"defaultService": "backend-id"}
    mocks.resources.append(Registered("gcp:compute/regionUrlMap:RegionUrlMap", "open", open_map, None))
    assert gcp_route(mocks, "/invocations") == FORWARD
