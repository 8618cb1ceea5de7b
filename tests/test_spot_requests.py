"""A stack's persistent Spot requests are cancelled before its nodes are replaced or destroyed
(deleting an ``aws.ec2.Instance`` leaves its persistent request open, which then launches another
instance: hashicorp/terraform-provider-aws#38142; "the Spot Instance request transitions to the
open state so that a new Spot Instance can be launched",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-requests.html).

The EC2 calls run against botocore's Stubber (moto 5.2.5 reports no ``SpotInstanceRequestId`` on
an instance, see test_sweep), each request checked against the installed ec2 service model
(``tests.contracts.aws_model``: types, required, max, enums, patterns) and its filter names
against those the model documents for the operation."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitops.failover import Attempt, UpSettings, run_up
from providers.aws.spot_requests import IDS_PER_CALL, SpotRequestCanceller, owner_tags
from tests.contracts.aws_model import problems, service_model

STACK = "ft-prod"
PROJECT = "gpufit"
WORKLOAD = "llama70b-ft"
OWNER = owner_tags(PROJECT, STACK, WORKLOAD)
TYPE = "p5.48xlarge"
REGION = "us-east-1"
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def documented_filters(operation: str) -> set[str]:
    """The filter names the model's documentation of ``operation``'s ``Filters`` lists."""
    doc = service_model("ec2").operation_model(operation).input_shape.members["Filters"].documentation
    return {html.unescape(n) for n in re.findall(r"<code>([a-z][a-z0-9.:&;-]*)</code> - ", doc)}


def documented_values(operation: str, name: str) -> set[str] | None:
    """The values the model's doc enumerates for filter ``name`` ("(<code>a</code> | ...)"), or
    None when it enumerates none."""
    doc = service_model("ec2").operation_model(operation).input_shape.members["Filters"].documentation
    entry = re.search(rf"<code>{re.escape(name)}</code> - (.*?)</p>", doc, re.S)
    listed = (
        re.search(r"\(((?:<code>[^<]+</code>\s*\|\s*)+<code>[^<]+</code>)\)", entry.group(1))
        if entry
        else None
    )
    return set(re.findall(r"<code>([^<]+)</code>", listed.group(1))) if listed else None


def test_the_state_filter_documents_no_disabled() -> None:
    """Why the requests' states are read from the answer: ``disabled`` is a request's state
    (``SpotInstanceState``) but not a value of the ``state`` filter."""
    assert documented_values("DescribeSpotInstanceRequests", "state") == {
        "open",
        "active",
        "closed",
        "cancelled",
        "failed",
    }
    assert "disabled" in service_model("ec2").shape_for("SpotInstanceState").enum


class Recorder:
    """The stubbed client's calls, each checked against the model as the service checks it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        operation = self.client.meta.method_to_api_mapping[name]

        def call(**params: Any) -> Any:
            assert problems("ec2", operation, params) == [], (operation, params)
            allowed = documented_filters(operation) if "Filters" in params else set()
            for entry in params.get("Filters", []):
                key = "tag:<key>" if entry["Name"].startswith("tag:") else entry["Name"]
                assert key in allowed, f"{operation}: filter {entry['Name']!r} is not documented"
                values = documented_values(operation, key)
                assert values is None or set(entry["Values"]) <= values, (operation, entry)
            if "MaxResults" in params:  # both operations: "5 to 1000" (API references)
                assert 5 <= params["MaxResults"] <= 1000
            self.calls.append((operation, params))
            return method(**params)

        return call


def _client() -> tuple[Any, Any]:
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    return client, Stubber(client)


def _tags(stack: str = STACK, **changes: str) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in {**owner_tags(PROJECT, stack, WORKLOAD), **changes}.items()]


def _instance(
    iid: str, request: str | None, stack: str = STACK, kind: str = TYPE, **tags: str
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "InstanceId": iid,
        "InstanceType": kind,
        "InstanceLifecycle": "spot",
        "Tags": _tags(stack, **tags),
    }
    if request:
        row["SpotInstanceRequestId"] = request
    return row


def _request(
    rid: str, kind: str, state: str, tags: bool = False, itype: str = TYPE, **changes: str
) -> dict[str, Any]:
    row = {"SpotInstanceRequestId": rid, "Type": kind, "State": state}
    if tags:
        row.update(Tags=_tags(**changes), LaunchSpecification={"InstanceType": itype})
    return row


def test_the_stacks_persistent_requests_are_cancelled_and_nothing_else() -> None:
    client, stub = _client()
    stub.add_response(
        "describe_instances",
        {
            "Reservations": [{"Instances": [_instance("i-0a", "sir-aaaa0001"), _instance("i-0b", None)]}],
            "NextToken": "page2",
        },
    )
    stub.add_response(
        "describe_instances",
        {
            "Reservations": [
                {
                    "Instances": [
                        _instance("i-0c", "sir-aaaa0002"),
                        _instance("i-0d", "sir-aaaa0003"),
                        _instance(
                            "i-0e", "sir-other001", stack="other"
                        ),  # a filter EC2 did not apply: checked here
                        # the same stack name in another Pulumi project: not this stack's
                        _instance("i-0f", "sir-other002", **{"gpufit:project": "other-repo"}),
                        _instance("i-0g", "sir-other003", kind="p4d.24xlarge"),  # a node that stays
                    ]
                }
            ]
        },
    )
    # a request whose instance is gone, found by its own tags (the EFA launch template tags it)
    stub.add_response(
        "describe_spot_instance_requests",
        {
            "SpotInstanceRequests": [
                _request("sir-aaaa0004", "persistent", "open", tags=True),
                _request("sir-aaaa0005", "persistent", "disabled", tags=True),  # no state filter drops it
                _request("sir-done0001", "persistent", "cancelled", tags=True),
                _request("sir-other004", "persistent", "open", tags=True, **{"gpufit:workload": "x"}),
                _request("sir-other005", "persistent", "open", tags=True, itype="p4d.24xlarge"),
            ]
        },
    )
    stub.add_response(
        "describe_spot_instance_requests",
        {
            "SpotInstanceRequests": [
                _request("sir-aaaa0001", "persistent", "active"),
                _request("sir-aaaa0002", "one-time", "active"),  # closes with its instance
                _request("sir-aaaa0003", "persistent", "disabled"),  # its instance stopped
                _request("sir-aaaa0004", "persistent", "open"),
                _request("sir-aaaa0005", "persistent", "disabled"),
            ]
        },
        {
            "SpotInstanceRequestIds": [
                "sir-aaaa0001",
                "sir-aaaa0002",
                "sir-aaaa0003",
                "sir-aaaa0004",
                "sir-aaaa0005",
            ]
        },
    )
    stub.add_response(
        "cancel_spot_instance_requests",
        {
            "CancelledSpotInstanceRequests": [
                {"SpotInstanceRequestId": r, "State": "cancelled"}
                for r in ("sir-aaaa0001", "sir-aaaa0003", "sir-aaaa0004", "sir-aaaa0005")
            ]
        },
        {"SpotInstanceRequestIds": ["sir-aaaa0001", "sir-aaaa0003", "sir-aaaa0004", "sir-aaaa0005"]},
    )
    recorder = Recorder(client)
    with stub:
        notes = SpotRequestCanceller(lambda region: recorder).release(OWNER, REGION, TYPE)
        stub.assert_no_pending_responses()
    assert notes == [
        f"cancelled the persistent spot requests of {STACK} in {REGION}: "
        "sir-aaaa0001, sir-aaaa0003, sir-aaaa0004, sir-aaaa0005"
    ]
    first = recorder.calls[0][1]["Filters"]
    for key, value in OWNER.items():  # every identifying tag, the project's too
        assert {"Name": f"tag:{key}", "Values": [value]} in first
    assert {"Name": "tag:gpufit:project", "Values": [PROJECT]} in first
    assert {"Name": "instance-lifecycle", "Values": ["spot"]} in first
    assert {"Name": "instance-type", "Values": [TYPE]} in first
    requests = recorder.calls[2][1]["Filters"]
    assert {"Name": "tag:gpufit:project", "Values": [PROJECT]} in requests
    assert not [f for f in requests if f["Name"] == "state"]
    assert recorder.calls[1][1]["NextToken"] == "page2"


def test_many_requests_are_cancelled_in_batches() -> None:
    client, stub = _client()
    ids = [f"sir-{i:08x}" for i in range(IDS_PER_CALL + 5)]
    stub.add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [_instance(f"i-{i:08x}", r) for i, r in enumerate(ids)]}]},
    )
    stub.add_response("describe_spot_instance_requests", {"SpotInstanceRequests": []})
    for batch in (ids[:IDS_PER_CALL], ids[IDS_PER_CALL:]):
        stub.add_response(
            "describe_spot_instance_requests",
            {"SpotInstanceRequests": [_request(r, "persistent", "active") for r in batch]},
            {"SpotInstanceRequestIds": batch},
        )
    for batch in (ids[:IDS_PER_CALL], ids[IDS_PER_CALL:]):
        stub.add_response(
            "cancel_spot_instance_requests",
            {"CancelledSpotInstanceRequests": [{"SpotInstanceRequestId": r} for r in batch]},
            {"SpotInstanceRequestIds": batch},
        )
    recorder = Recorder(client)
    with stub:
        notes = SpotRequestCanceller(lambda region: recorder).release(OWNER, REGION, TYPE)
        stub.assert_no_pending_responses()
    assert len(notes) == 2


def test_nothing_to_cancel_makes_no_cancel_call() -> None:
    client, stub = _client()
    stub.add_response("describe_instances", {"Reservations": []})
    stub.add_response("describe_spot_instance_requests", {"SpotInstanceRequests": []})
    with stub:
        assert SpotRequestCanceller(lambda region: Recorder(client)).release(OWNER, REGION, TYPE) == []
        stub.assert_no_pending_responses()


# ---------------------------------------------------------------------------- gpufit up


def _attempt(number: int, **changes: Any) -> Attempt:
    base: dict[str, Any] = {
        "number": number,
        "cloud": "aws",
        "region": REGION,
        "instance_type": "p5.48xlarge",
        "fleet_types": ["p5.48xlarge"],
        "market": "spot",
        "instances": 2,
        "hourly_usd": 1.0,
        "total_usd": 1.0,
        "nodes": 2,
    }
    return Attempt(**{**base, **changes})


def test_only_an_aws_multinode_spot_attempt_asks_aws() -> None:
    from cli.up_cmd import release_spot_requests

    asked: list[tuple[Any, ...]] = []

    class Canceller:
        def release(self, owner: Any, region: str, instance_type: str, ids: list[str]) -> list[str]:
            asked.append((dict(owner), region, instance_type, ids))
            return ["cancelled"]

    who = {"project": PROJECT, "workload": WORKLOAD}
    assert release_spot_requests(STACK, _attempt(1), Canceller(), **who) == ["cancelled"]
    for other in (
        _attempt(1, market="on-demand"),
        _attempt(1, nodes=1),
        _attempt(1, cloud="gcp", region="us-central1"),
    ):
        assert release_spot_requests(STACK, other, Canceller(), **who) == []
    assert asked == [(OWNER, REGION, TYPE, [])]


@pytest.fixture
def fixture15() -> tuple[Any, Any, Any]:
    from selector.catalog import load_catalog
    from selector.select import plan
    from selector.spec import parse_spec
    from tests.test_multinode_fallbacks import _doc

    catalog = load_catalog()
    doc = _doc("15-llama70b-full-ft")
    return doc, parse_spec(doc), lambda s: plan(s, catalog)


def _up(
    fixture15: tuple[Any, Any, Any],
    by_attempt: list[str],
    release_for: Callable[[Any], Callable[[str, Attempt], list[str]]],
    attempts: int | None = None,
    held: dict[str, Any] | None = None,
) -> Any:
    from tests.fakes.failover import FakeClock, FakeWatcher, FakeWorkspace

    doc, spec, planner = fixture15
    clock = FakeClock()
    workspace = FakeWorkspace(doc, planner, by_attempt=by_attempt, clock=clock, held=held or {})
    settings = UpSettings(attempts=attempts, wait=timedelta(minutes=5), destroy_when_exhausted=True)
    report = run_up(
        STACK,
        spec,
        planner,
        workspace,
        FakeWatcher(workspace),
        settings,
        clock.now,
        clock.sleep,
        release=release_for(workspace),
    )
    return report, workspace


def test_gpufit_up_releases_the_nodes_it_replaces_before_replacing_them(fixture15: Any) -> None:
    """Attempt 1 starts some of the choice's nodes and fails for capacity: the release of attempt 1 runs while
    those nodes are still the stack's (before attempt 2's ``pulumi up`` deletes them); when every
    attempt fails, each attempt's release runs before the next, the last one's before the destroy."""
    seen: list[tuple[int, dict[str, str], int]] = []

    def release_for(workspace: Any) -> Callable[[str, Attempt], list[str]]:
        def release(stack: str, attempt: Attempt) -> list[str]:
            assert stack == STACK
            seen.append((attempt.number, dict(workspace.live), workspace.destroyed))
            return [f"released attempt {attempt.number}"]

        return release

    report, workspace = _up(fixture15, ["deploy-partial", "ok"], release_for)
    assert report.verdict == "up"
    assert [n for n, _, _ in seen] == [1]
    first = fixture15[2](fixture15[1]).choice.offer.instance.name  # the plan's choice, tried first
    assert seen[0][1] and all(v.startswith(f"{first}@") for v in seen[0][1].values())

    seen.clear()
    report, workspace = _up(fixture15, ["deploy-partial"] * 12, release_for)
    assert report.verdict == "exhausted" and workspace.destroyed == 1 and workspace.live == {}
    assert len(report.attempts) > 2
    assert [n for n, _, _ in seen] == [a.number for a in report.attempts]
    assert all(live and destroyed == 0 for _, live, destroyed in seen)


def _held(fixture15: Any, **changes: Any) -> dict[str, Any]:
    """The outputs an earlier run left: the first plan's nodes, with ``changes``."""
    _doc, spec, planner = fixture15
    choice = planner(spec).choice
    o = choice.offer
    outputs = {
        "cloud": o.cloud,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance.name,
        "market": o.market,
        "nodes": choice.shape.instances,  # the program's output: machines in all
        "instance_ids": [f"i-{n:017x}" for n in range(choice.shape.instances)],
    }
    return {**outputs, **changes}


def _recording(seen: list[tuple[Attempt, int]]) -> Callable[[Any], Callable[[str, Attempt], list[str]]]:
    def release_for(workspace: Any) -> Callable[[str, Attempt], list[str]]:
        def release(stack: str, attempt: Attempt) -> list[str]:
            seen.append((attempt, len(workspace.deployed)))
            return []

        return release

    return release_for


def test_the_first_attempt_releases_the_nodes_an_earlier_run_left_when_it_replaces_them(
    fixture15: Any,
) -> None:
    """An earlier run left spot multi-node nodes of another type (a changed spec): the first
    attempt's ``pulumi up`` replaces them, so their requests are released before it runs."""
    seen: list[tuple[Attempt, int]] = []
    held = _held(fixture15, instance_type="p4d.24xlarge")
    report, _ = _up(fixture15, ["ok"], _recording(seen), held=held)
    assert report.verdict == "up"
    assert len(seen) == 1
    attempt, deployed_before = seen[0]
    assert deployed_before == 0  # before the first `pulumi up`
    assert (attempt.cloud, attempt.region, attempt.instance_type, attempt.market, attempt.nodes) == (
        held["cloud"],
        held["region"],
        "p4d.24xlarge",
        held["market"],
        held["nodes"],
    )
    assert attempt.nodes > 1 and attempt.market == "spot" and attempt.instances == len(held["instance_ids"])
    assert attempt.instance_ids == []  # all of them go


def test_a_shrink_releases_only_the_nodes_it_deletes(fixture15: Any) -> None:
    """The stack holds two more nodes than the first attempt deploys: Pulumi deletes
    ``<name>-node<index>`` past the new count and keeps the others with their requests."""
    seen: list[tuple[Attempt, int]] = []
    held = _held(fixture15)
    held = {
        **held,
        "nodes": held["nodes"] + 2,
        "instance_ids": [*held["instance_ids"], "i-0tail0", "i-0tail1"],
    }
    _up(fixture15, ["ok"], _recording(seen), held=held)
    assert [(a.number, a.instance_ids, n) for a, n in seen] == [(0, ["i-0tail0", "i-0tail1"], 0)]


@pytest.mark.parametrize("change", [{"market": "on-demand"}, {"region": "us-west-2"}, {"zone": "use1-az9"}])
def test_a_changed_market_region_or_zone_releases_the_held_nodes(
    fixture15: Any, change: dict[str, Any]
) -> None:
    seen: list[tuple[Attempt, int]] = []
    _up(fixture15, ["ok"], _recording(seen), held=_held(fixture15, **change))
    assert [(a.number, n) for a, n in seen] == [(0, 0)]


def test_cmd_ups_release_asks_only_for_the_deleted_nodes() -> None:
    from cli.up_cmd import release_spot_requests

    client, stub = _client()
    ids = ["i-0tail0", "i-0tail1"]
    stub.add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [_instance("i-0tail0", "sir-tail0001")]}]},
    )
    stub.add_response(
        "describe_spot_instance_requests",
        {
            "SpotInstanceRequests": [
                {**_request("sir-tail0002", "persistent", "open", tags=True), "InstanceId": "i-0tail1"},
                {**_request("sir-kept0001", "persistent", "active", tags=True), "InstanceId": "i-0kept"},
            ]
        },
    )
    stub.add_response(
        "describe_spot_instance_requests",
        {
            "SpotInstanceRequests": [
                _request(r, "persistent", "open") for r in ("sir-tail0001", "sir-tail0002")
            ]
        },
        {"SpotInstanceRequestIds": ["sir-tail0001", "sir-tail0002"]},
    )
    stub.add_response(
        "cancel_spot_instance_requests",
        {"CancelledSpotInstanceRequests": [{"SpotInstanceRequestId": "sir-tail0001"}]},
        {"SpotInstanceRequestIds": ["sir-tail0001", "sir-tail0002"]},
    )
    recorder = Recorder(client)
    with stub:
        release_spot_requests(
            STACK,
            _attempt(0, instance_ids=ids),
            SpotRequestCanceller(lambda region: recorder),
            project=PROJECT,
            workload=WORKLOAD,
        )
        stub.assert_no_pending_responses()
    assert {"Name": "instance-id", "Values": ids} in recorder.calls[0][1]["Filters"]


def test_nodes_the_first_attempt_keeps_keep_their_requests(fixture15: Any) -> None:
    """The stack already runs what the first attempt deploys: ``pulumi up`` keeps the nodes, and
    cancelling their persistent requests would lose stop-and-resume."""
    seen: list[tuple[Attempt, int]] = []
    report, _ = _up(fixture15, ["ok"], _recording(seen), held=_held(fixture15))
    assert report.verdict == "up" and seen == []
    _up(fixture15, ["ok"], _recording(seen), held={})  # a stack never deployed: nothing to release
    assert seen == []


def _refuse(workspace: Any) -> Callable[[str, Attempt], list[str]]:
    def release(stack: str, attempt: Attempt) -> list[str]:
        raise PermissionError("UnauthorizedOperation: ec2:CancelSpotInstanceRequests")

    return release


def test_a_failed_release_replaces_nothing(fixture15: Any) -> None:
    report, workspace = _up(fixture15, ["deploy-partial"] * 12, _refuse)
    assert report.verdict == "stopped" and len(report.attempts) == 2
    assert len(workspace.deployed_at) == 1 and workspace.destroyed == 0
    first = fixture15[2](fixture15[1]).choice.offer.instance.name
    assert workspace.live and all(v.startswith(f"{first}@") for v in workspace.live.values())
    assert "could not be cancelled" in report.note and "ec2:CancelSpotInstanceRequests" in report.note
    assert report.attempts[-1].outcome == "failed"


def test_a_failed_release_destroys_nothing(fixture15: Any) -> None:
    report, workspace = _up(fixture15, ["deploy-partial"], _refuse, attempts=1)
    assert report.verdict == "stopped" and workspace.destroyed == 0 and workspace.live
    assert "could not be cancelled" in report.note


# ---------------------------------------------------------------------------- the program


def test_a_spot_nodes_launch_template_tags_its_request() -> None:
    """Fixture 15 (checkpointed, spot, p5 × 3 nodes) under the Pulumi mocks: each node opens a
    persistent request (``stop``, valid until the deadline) and its launch template tags that
    request with the stack's tags, so ``gpufit up`` finds a request whose instance is gone. The
    resource type is one the model's enum holds and one a launch template takes (the documented
    list of LaunchTemplateTagSpecificationRequest.ResourceType)."""
    from tests.pulumi_harness import run_program
    from tests.test_multinode_fallbacks import NOW, _attempt_config

    mocks, outputs = run_program(_attempt_config(None), NOW, stack="dev")
    assert outputs["market"] == "spot" and outputs["nodes"] > 1
    templates = mocks.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    instances = mocks.of_type("aws:ec2/instance:Instance")
    assert len(templates) == len(instances) == outputs["nodes"]
    shape = service_model("ec2").shape_for("LaunchTemplateTagSpecificationRequest").members["ResourceType"]
    allowed = re.search(r"resource types only: (.*?)\. If", shape.documentation)
    assert allowed is not None
    template_types = set(re.findall(r"<code>([a-z-]+)</code>", allowed.group(1)))
    assert "spot-instances-request" in template_types
    for instance in instances:
        spot = instance.inputs["instanceMarketOptions"]["spotOptions"]
        assert (spot["spotInstanceType"], spot["instanceInterruptionBehavior"]) == ("persistent", "stop")
    for template in templates:
        specs = {s["resourceType"]: s["tags"] for s in template.inputs["tagSpecifications"]}
        assert set(specs) <= template_types and set(specs) <= set(shape.enum)
        request = specs["spot-instances-request"]
        assert request["gpufit:stack"] == "dev" and request["gpufit:managed"] == "true"
        owner = owner_tags(request["gpufit:project"], "dev", request["gpufit:workload"])
        assert request["gpufit:project"] and all(request[k] == v for k, v in owner.items())
    for instance in instances:  # what ``gpufit up`` filters the instances on: all there
        assert all(instance.inputs["tags"].get(k) == v for k, v in owner.items())


def test_an_on_demand_nodes_template_names_no_request() -> None:
    """ "If the instance does not include the resource type that you specify, the instance launch
    fails": an on-demand node makes no spot request."""
    import dataclasses

    from deployment.translate import deployment_from_plan
    from providers.aws.component import template_tagged
    from selector.catalog import load_catalog
    from selector.select import plan
    from selector.spec import parse_spec
    from tests.test_multinode_fallbacks import NOW, _doc

    result = plan(parse_spec(_doc("15-llama70b-full-ft")), load_catalog())
    d = deployment_from_plan(result, stack="dev", project="gpufit", created_at=NOW)
    assert d.spot and "spot-instances-request" in template_tagged(d)
    assert template_tagged(dataclasses.replace(d, market="on-demand")) == (
        "instance",
        "volume",
        "network-interface",
    )


def test_cmd_up_cancels_through_aws_before_the_next_attempt_and_the_destroy(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpufit up --destroy-when-exhausted`` on fixture 15 with every attempt partly started:
    the CLI's release asks AWS (``SpotRequestCanceller``, here over a recording client factory)
    for the stack's requests in each attempt's region before the next ``pulumi up`` and before the
    destroy, while the attempt's nodes are still the stack's."""
    import argparse

    import yaml

    from cli.up_cmd import cmd_up
    from selector.catalog import load_catalog
    from selector.select import plan
    from selector.spec import WorkloadSpec
    from tests.fakes.failover import FakeClock, FakeWatcher, FakeWorkspace
    from tests.test_multinode_fallbacks import _doc

    doc = _doc("15-llama70b-full-ft")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n")
    (tmp_path / "stacks" / f"Pulumi.{STACK}.yaml").write_text(
        yaml.safe_dump({"config": {"gpufit:workload": doc}})
    )
    catalog = load_catalog()

    def planner(spec: WorkloadSpec) -> Any:
        return plan(spec, catalog)

    clock = FakeClock()
    workspace = FakeWorkspace(doc, planner, by_attempt=["deploy-partial"] * 12, clock=clock)
    asked: list[tuple[str, str, int, int]] = []

    class Ec2:
        def describe_instances(self, **params: Any) -> dict[str, Any]:
            asked.append((STACK, "DescribeInstances", len(workspace.live), workspace.destroyed))
            assert problems("ec2", "DescribeInstances", params) == []
            owner = owner_tags(PROJECT, STACK, str(doc["name"]))
            assert all({"Name": f"tag:{k}", "Values": [v]} in params["Filters"] for k, v in owner.items())
            return {"Reservations": []}

        def describe_spot_instance_requests(self, **params: Any) -> dict[str, Any]:
            assert problems("ec2", "DescribeSpotInstanceRequests", params) == []
            return {"SpotInstanceRequests": []}

    regions: list[str] = []

    def client_for(region: str) -> Ec2:
        regions.append(region)
        return Ec2()

    import providers.aws.spot_requests as module

    monkeypatch.setattr(module, "_client", client_for)
    args = argparse.Namespace(
        stack=STACK,
        attempts=None,
        wait="15m",
        dry_run=False,
        json=True,
        log=str(tmp_path / "up.json"),
        destroy_when_exhausted=True,
        project_dir=str(tmp_path),
        catalog=None,
    )
    cmd_up(args, workspace, FakeWatcher(workspace), clock.now, clock.sleep)
    import json

    log = json.loads((tmp_path / "up.json").read_text())
    attempts = log["attempts"]
    assert log["verdict"] == "exhausted" and workspace.destroyed == 1
    spot_multinode = [a for a in attempts if a["market"] == "spot" and a["nodes"] > 1]
    assert spot_multinode and regions == [a["region"] for a in spot_multinode]
    assert all(live > 0 and destroyed == 0 for _, _, live, destroyed in asked)


def test_the_sweeps_lookup_reads_every_page_of_the_launched_instances() -> None:
    """EC2 may answer a page with a ``NextToken`` below ``MaxResults``: every page is read."""
    from providers.aws.spot_requests import request_launched

    requests = [
        {**_request(f"sir-{n:08x}", "persistent", "closed", tags=True), "InstanceId": f"i-{n:08x}"}
        for n in (1, 2)
    ]
    pages = [
        {"Reservations": [{"Instances": [{"InstanceId": "i-00000001"}]}], "NextToken": "p2"},
        {"Reservations": [{"Instances": [{"InstanceId": "i-00000002"}]}]},
    ]
    asked: list[dict[str, Any]] = []

    def describe_instances(**params: Any) -> dict[str, Any]:
        assert problems("ec2", "DescribeInstances", params) == []
        asked.append(params)
        return pages[len(asked) - 1]

    found = request_launched(lambda **_: {"SpotInstanceRequests": requests}, describe_instances, set())
    assert sorted(r for _, r in found) == ["sir-00000001", "sir-00000002"]
    assert asked[1]["NextToken"] == "p2"
