"""``gpufit sweep``: the decision on tags alone, AWS against moto as a real local server, GCP
against the local Compute Engine fake (``tests/gcp_fake.py``), and the command's output and
exit codes. No test sleeps: retries run with a policy whose sleep does nothing."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import boto3
import pytest

from cli.sweep_cmd import add_parser, cmd_sweep, render
from cloudapi.calls import CallCounter
from cloudapi.retry import RetryPolicy
from deployment import TAG_EXPIRES_AT, TAG_MANAGED, TAG_STACK, TAG_WORKLOAD
from gitops.sweep import EXPIRED, MALFORMED, NO_EXPIRY, Candidate, Pricer, SweepResult, decide, read_expiry
from providers.aws.sweep import AwsSweeper
from providers.gcp.sweep import GcpSweeper, instance_type
from selector.catalog import SNAPSHOT_FILE, load_catalog
from tests.fakes.aws import Faults, aws_env, error_response, moto_server, operation, region_of
from tests.gcp_fake import FakeGcpInstances, instance

NOW = datetime(2026, 12, 4, 13, 0, tzinfo=UTC)
PAST = "2026-12-01T00:00:00Z"
FUTURE = "2026-12-05T00:00:00Z"
PAST_LABEL = "2026-12-01t00-00-00z"
FUTURE_LABEL = "2026-12-05t00-00-00z"
NO_SLEEP = RetryPolicy(sleep=lambda _: None)
PROJECT = "gpufit-test"


@pytest.fixture(scope="module")
def prices() -> Pricer:
    return Pricer(load_catalog(SNAPSHOT_FILE).offers)


def snapshot_price(cloud: str, name: str, region: str, market: str, zone: str | None = None) -> float:
    """The snapshot's price: the region-level offer, or (``zone``) that zone's own offer."""
    for offer in load_catalog(SNAPSHOT_FILE).offers:
        if offer.key == (cloud, name, region, zone, market):
            return offer.hourly_usd
    raise KeyError((cloud, name, region, zone, market))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpufit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return parser.parse_args(["sweep", *argv])


# ---------------------------------------------------------------------------------- decide


AWS = {TAG_MANAGED: "true", TAG_STACK: "dev", TAG_WORKLOAD: "llama"}
GCP = {"gpufit-managed": "true", "gpufit-stack": "dev", "gpufit-workload": "llama"}


@pytest.mark.parametrize(
    ("tags", "reason"),
    [
        ({**AWS, TAG_EXPIRES_AT: PAST}, EXPIRED),
        ({**AWS, TAG_EXPIRES_AT: "2026-12-04T13:00:00Z"}, EXPIRED),  # the very second: gone
        ({**AWS, TAG_EXPIRES_AT: "2026-12-04T13:00:01Z"}, None),
        ({**AWS, TAG_EXPIRES_AT: FUTURE}, None),
        ({**AWS, TAG_EXPIRES_AT: "2026-12-04T14:30:00+02:00"}, EXPIRED),  # 12:30 UTC
        ({**AWS, TAG_EXPIRES_AT: "2026-12-04T10:00:00-05:00"}, None),  # 15:00 UTC
        ({**AWS, TAG_EXPIRES_AT: "2026-12-01T00:00:00"}, MALFORMED),  # no zone: could be any
        ({**AWS, TAG_EXPIRES_AT: "2099-01-01T00:00:00"}, MALFORMED),
        ({**AWS, TAG_EXPIRES_AT: "next tuesday"}, MALFORMED),
        ({**AWS, TAG_EXPIRES_AT: PAST_LABEL}, MALFORMED),  # the GCP form is not an AWS tag value
        ({**AWS, TAG_EXPIRES_AT: ""}, NO_EXPIRY),
        ({**AWS, TAG_EXPIRES_AT: "   "}, NO_EXPIRY),
        (AWS, NO_EXPIRY),
        ({**AWS, TAG_MANAGED: "false", TAG_EXPIRES_AT: PAST}, None),
        ({**AWS, TAG_MANAGED: "TRUE", TAG_EXPIRES_AT: PAST}, None),  # exactly "true", as filtered
        ({TAG_STACK: "dev", TAG_EXPIRES_AT: PAST}, None),
        ({}, None),
        ({"Name": "someone-elses-box"}, None),
        ({**GCP, "gpufit-expires-at": PAST_LABEL}, EXPIRED),
        ({**GCP, "gpufit-expires-at": FUTURE_LABEL}, None),
        ({**GCP, "gpufit-expires-at": "2026-12-01T00:00:00Z"}, MALFORMED),  # labels cannot carry ':'
        ({**GCP, "gpufit-expires-at": "2026-12-01t00-00-00"}, MALFORMED),  # no z
        ({**GCP, "gpufit-expires-at": ""}, NO_EXPIRY),
        (GCP, NO_EXPIRY),
        ({**GCP, "gpufit-managed": "false", "gpufit-expires-at": PAST_LABEL}, None),
    ],
)
def test_decide(tags: dict[str, str], reason: str | None) -> None:
    assert decide(tags, NOW) == reason


def test_decide_keeps_to_the_clouds_scheme() -> None:
    gcp_style_on_aws = {"gpufit-managed": "true", "gpufit-expires-at": PAST_LABEL}
    assert decide(gcp_style_on_aws, NOW) == EXPIRED
    assert decide(gcp_style_on_aws, NOW, cloud="aws") is None  # not AWS's managed tag
    assert decide({**AWS, TAG_EXPIRES_AT: PAST}, NOW, cloud="gcp") is None


def test_decide_takes_any_aware_clock_and_refuses_a_naive_one() -> None:
    tags = {**AWS, TAG_EXPIRES_AT: "2026-12-04T13:00:00Z"}
    assert decide(tags, datetime(2026, 12, 4, 21, 59, tzinfo=timezone(timedelta(hours=9)))) is None
    assert decide(tags, datetime(2026, 12, 4, 22, 0, tzinfo=timezone(timedelta(hours=9)))) == EXPIRED
    with pytest.raises(ValueError, match="time zone"):
        decide(tags, datetime(2026, 12, 4, 13, 0))


def test_read_expiry_parses_both_forms() -> None:
    assert read_expiry({TAG_EXPIRES_AT: PAST}) == (datetime(2026, 12, 1, tzinfo=UTC), None)
    assert read_expiry({"gpufit-expires-at": PAST_LABEL}, cloud="gcp") == (
        datetime(2026, 12, 1, tzinfo=UTC),
        None,
    )


def test_pricer_prefers_the_zones_own_price() -> None:
    class Offer:
        def __init__(self, zone: str | None, usd: float) -> None:
            self.key = ("aws", "g5.xlarge", "us-east-1", zone, "spot")
            self.hourly_usd = usd

    price = Pricer([Offer(None, 0.5), Offer("us-east-1b", 0.4)])
    assert price("aws", "g5.xlarge", "us-east-1", "us-east-1b", "spot") == 0.4
    assert price("aws", "g5.xlarge", "us-east-1", "us-east-1c", "spot") == 0.5
    assert price("aws", "g5.xlarge", "us-east-1", None, "on-demand") is None
    assert Pricer.empty()("aws", "g5.xlarge", "us-east-1", None, "spot") is None


def test_gcp_instance_type_names_match_the_catalog(prices: Pricer) -> None:
    assert instance_type("n1-standard-8", [("nvidia-tesla-t4", 1)]) == "n1-standard-8+t4x1"
    assert instance_type("g2-standard-4", [("nvidia-l4", 1)]) == "g2-standard-4"  # bundled GPU
    assert prices("gcp", "n1-standard-8+t4x1", "us-central1", None, "spot") is not None


# ---------------------------------------------------------------------------------- AWS (moto)


@pytest.fixture(scope="module")
def aws_session() -> Iterator[Any]:
    """moto as a local server, the standard AWS settings pointing at it, and one boto3 session
    for the module (a session's first EC2 client loads the service model: most of a second)."""
    import boto3

    with moto_server() as url, pytest.MonkeyPatch.context() as patch:
        for key, value in aws_env(url, "http://127.0.0.1:9").items():
            patch.setenv(key, value)
        for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
            patch.delenv(key, raising=False)
        session = boto3.Session()
        session.moto_url = url
        yield session


_CLIENTS: dict[str, Any] = {}
_AMIS: dict[str, str] = {}
LIVE = ["pending", "running", "stopping", "stopped"]


@pytest.fixture
def aws(aws_session: Any) -> Iterator[Any]:
    """The module's session, with every instance earlier tests left alive terminated (quicker
    than resetting moto, which rebuilds each region); hooks registered are undone after."""
    for region in REGIONS:
        if region not in _CLIENTS:
            _CLIENTS[region] = aws_session.client("ec2", region_name=region)
        live = [
            i["InstanceId"]
            for reservation in ec2(region).describe_instances(
                Filters=[{"Name": "instance-state-name", "Values": LIVE}]
            )["Reservations"]
            for i in reservation["Instances"]
        ]
        if live:
            ec2(region).terminate_instances(InstanceIds=live)
    hooks: list[Any] = []
    aws_session.hooks = hooks
    yield aws_session
    for hook in hooks:
        aws_session.events.unregister("before-send", hook)


REGIONS = ("us-east-1", "us-west-2")


def ec2(region: str) -> Any:
    """The tests' own client (made before any hook is registered: its calls are not counted)."""
    return _CLIENTS[region]


def az_id(region: str, zone_name: str) -> str:
    """The AZ ID moto's account maps ``zone_name`` to (as EC2 does per account)."""
    zones = ec2(region).describe_availability_zones(ZoneNames=[zone_name])["AvailabilityZones"]
    return str(zones[0]["ZoneId"])


def zone_of(region: str, instance_id: str) -> str:
    """The zone name EC2 placed an instance in."""
    (reservation,) = ec2(region).describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservation["Instances"][0]["Placement"]["AvailabilityZone"])


def ami(region: str) -> str:
    """An AMI of moto's defaults (filtered by name: the unfiltered listing serialises ~1300)."""
    if region not in _AMIS:
        images = ec2(region).describe_images(Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])
        _AMIS[region] = str(sorted(i["ImageId"] for i in images["Images"])[0])
    return _AMIS[region]


def gpufit_profile(stack: str, workload: str, managed: str = "true") -> str:
    """The instance profile gpufit makes for a workload, tagged as it tags it (made once)."""
    iam = boto3.client("iam", region_name="us-east-1")
    name = f"gpufit-{stack}-{workload}-profile"
    tags = [{"Key": TAG_MANAGED, "Value": managed}, {"Key": TAG_STACK, "Value": stack}]
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_instance_profile(
            InstanceProfileName=name, Tags=[*tags, {"Key": TAG_WORKLOAD, "Value": workload}]
        )
    return name


def launch(
    region: str,
    tags: list[dict[str, str]],
    kind: str = "g5.xlarge",
    spot: bool = False,
    zone: str | None = None,
    made_by_gpufit: bool = True,
) -> list[str]:
    """One reservation of ``len(tags)`` instances, each tagged with its own tags (in zone
    name ``zone``, else where EC2 puts them). An instance with gpufit's stack and workload tags
    runs with the instance profile gpufit makes for them, unless ``made_by_gpufit`` is False."""
    args: dict[str, Any] = {"ImageId": ami(region), "MinCount": len(tags), "MaxCount": len(tags)}
    args["InstanceType"] = kind
    if zone is not None:
        args["Placement"] = {"AvailabilityZone": zone}
    if spot:
        args["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time"},
        }
    ids = [str(i["InstanceId"]) for i in ec2(region).run_instances(**args)["Instances"]]
    for iid, own in zip(ids, tags, strict=True):
        if own:
            ec2(region).create_tags(Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in own.items()])
        if made_by_gpufit and own.get(TAG_STACK) and own.get(TAG_WORKLOAD):
            profile = gpufit_profile(own[TAG_STACK], own[TAG_WORKLOAD])
            ec2(region).associate_iam_instance_profile(IamInstanceProfile={"Name": profile}, InstanceId=iid)
    return ids


def managed(expiry: str | None, workload: str) -> dict[str, str]:
    tags = {TAG_MANAGED: "true", TAG_STACK: "dev", TAG_WORKLOAD: workload, "Name": f"gpufit-{workload}-0"}
    if expiry is not None:
        tags[TAG_EXPIRES_AT] = expiry
    return tags


def aws_world() -> dict[str, str]:
    """Instances in two regions, by role: us-east-1 holds three reservations, so that pages of
    one reservation make the listing walk NextToken."""
    east, west = REGIONS
    first = {
        "expired": managed(PAST, "expired"),
        "future": managed(FUTURE, "future"),
        "missing": managed(None, "missing"),
        "malformed": managed("next tuesday", "malformed"),
        "naive": managed("2026-12-01T00:00:00", "naive"),
    }
    second = {
        "unmanaged": {**managed(PAST, "unmanaged"), TAG_MANAGED: "false"},
        "untagged": {},
        "shouting": {**managed(PAST, "shouting"), TAG_MANAGED: "TRUE"},
        "terminated": managed(PAST, "terminated"),
        "stopped": managed(PAST, "stopped"),
    }
    west_on_demand = {
        "west-future": managed(FUTURE, "west-future"),
        "west-gcp-style": {"gpufit-managed": "true", "gpufit-expires-at": PAST_LABEL},
    }
    ids: dict[str, str] = {}
    for region, group, kind, spot in (
        (east, first, "g5.xlarge", False),
        (east, second, "g5.xlarge", False),
        (east, {"unpriced": managed(PAST, "unpriced")}, "t3.micro", False),
        (west, {"west-spot": managed(PAST, "west-spot")}, "g4dn.xlarge", True),
        (west, west_on_demand, "g4dn.xlarge", False),
    ):
        ids.update(zip(group, launch(region, list(group.values()), kind, spot), strict=True))
    ec2(east).terminate_instances(InstanceIds=[ids["terminated"]])
    ec2(east).stop_instances(InstanceIds=[ids["stopped"]])
    return ids


SWEPT = {"expired", "missing", "malformed", "naive", "stopped", "unpriced", "west-spot"}


def states(ids: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for region in REGIONS:
        answer = ec2(region).describe_instances(
            Filters=[{"Name": "instance-id", "Values": list(ids.values())}]
        )
        for reservation in answer["Reservations"]:
            for i in reservation["Instances"]:
                out[i["InstanceId"]] = i["State"]["Name"]
    return {role: out[iid] for role, iid in ids.items()}


class Calls:
    """A ``before-send`` hook that records (operation, region) and lets the call through."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, request: Any, **_: Any) -> None:
        self.seen.append((operation(request), region_of(request)))

    def count(self, op: str, region: str | None = None) -> int:
        return sum(1 for o, r in self.seen if o == op and (region is None or r == region))


# moto's CreatedBy of every launch template (moto/ec2/responses/launch_templates.py): the test
# account's root, which is therefore the deploy identity of the templates the tests make.
MOTO_CREATOR = "arn:aws:iam::123456789012:root"


def aws_sweeper(
    session: Any,
    *hooks: Any,
    batch_size: int = 2,
    page_size: int = 1,
    deployers: tuple[str, ...] | None = (MOTO_CREATOR,),
) -> AwsSweeper:
    """A sweeper on the module's session whose calls pass ``hooks``; retries do not sleep."""
    for hook in hooks:
        session.events.register("before-send", hook)
        session.hooks.append(hook)
    return AwsSweeper(
        session=session, policy=NO_SLEEP, batch_size=batch_size, page_size=page_size, deployers=deployers
    )


def test_aws_dry_run_lists_the_orphans_then_yes_terminates_exactly_them(aws: Any, prices: Pricer) -> None:
    ids = aws_world()
    before = states(ids)
    calls = Calls()
    sweeper = aws_sweeper(aws, calls)
    result = sweeper.sweep(list(REGIONS), NOW, act=False, price=prices)
    by_id = {c.instance_id: c for c in result.candidates}
    assert {role for role, iid in ids.items() if iid in by_id} == SWEPT
    assert {role: by_id[ids[role]].reason for role in SWEPT} == {
        "expired": "expired",
        "missing": "no expiry",
        "malformed": "malformed expiry",
        "naive": "malformed expiry",
        "stopped": "expired",
        "unpriced": "expired",
        "west-spot": "expired",
    }
    expired = by_id[ids["expired"]]
    east_zone = az_id("us-east-1", zone_of("us-east-1", ids["expired"]))  # an AZ ID, as in the catalog
    assert (expired.region, expired.zone, expired.instance_type, expired.market) == (
        "us-east-1",
        east_zone,
        "g5.xlarge",
        "on-demand",
    )
    assert (expired.stack, expired.workload, expired.name) == ("dev", "expired", "gpufit-expired-0")
    assert expired.expires_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert expired.hourly_usd == snapshot_price("aws", "g5.xlarge", "us-east-1", "on-demand")  # region-level
    spot = by_id[ids["west-spot"]]
    west_zone = az_id("us-west-2", zone_of("us-west-2", ids["west-spot"]))
    assert (spot.market, spot.zone, spot.hourly_usd) == (
        "spot",
        west_zone,
        snapshot_price("aws", "g4dn.xlarge", "us-west-2", "spot", zone=west_zone),  # its zone's own price
    )
    assert calls.count("DescribeAvailabilityZones", "us-east-1") == 1  # once a region, not per instance
    assert by_id[ids["unpriced"]].hourly_usd is None
    assert by_id[ids["stopped"]].billing is False and by_id[ids["stopped"]].state == "stopped"
    assert result.regions_ok == set(REGIONS) and not result.regions_failed
    assert not result.actions and not result.acted
    assert states(ids) == before  # the dry run touched nothing
    assert calls.count("TerminateInstances") == 0 and calls.count("CancelSpotInstanceRequests") == 0
    assert calls.count("DescribeInstances", "us-east-1") == 3  # one reservation a page: NextToken walked

    result = sweeper.sweep(list(REGIONS), NOW, act=True, price=prices)
    after = states(ids)
    assert {role for role in ids if after[role] == "terminated"} == SWEPT | {"terminated"}
    assert after["future"] == after["unmanaged"] == after["untagged"] == after["shouting"] == "running"
    assert after["west-future"] == after["west-gcp-style"] == "running"
    assert set(result.actions) == {ids[r] for r in SWEPT} and not result.failed
    assert calls.count("TerminateInstances", "us-east-1") == 3  # 6 instances in batches of 2
    assert calls.count("TerminateInstances", "us-west-2") == 1
    assert not sweeper.sweep(list(REGIONS), NOW, act=True, price=prices).candidates  # nothing left


def test_aws_every_enabled_region_by_default(
    aws: Any, prices: Pricer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeper = aws_sweeper(aws)
    assert {"us-east-1", "us-west-2", "eu-west-1"} <= set(sweeper.regions())  # DescribeRegions
    monkeypatch.setattr(sweeper, "regions", lambda: list(REGIONS))  # moto builds ~30 regions slowly
    ids = small_world()
    result = sweeper.sweep(None, NOW, act=False, price=prices)
    assert {c.instance_id for c in result.candidates} == {ids["east"], ids["west"]}
    assert result.regions_ok == set(REGIONS)
    assert sweeper.sweep(["us-central1"], NOW, act=False, price=prices).notes == [
        "ignored names that are not AWS regions: us-central1"
    ]


def test_cli_cloud_option_both_forms() -> None:
    assert parse("--cloud", "aws", "--cloud", "gcp").cloud == ["aws", "gcp"]  # as teardown.yml writes it
    assert parse("--cloud", "aws", "gcp", "--regions", "us-east-1", "us-central1").cloud == ["aws", "gcp"]
    assert parse().yes is False and parse("--yes").yes is True


def test_aws_a_protected_instance_fails_alone(aws: Any, prices: Pricer) -> None:
    roles = ["a", "b", "c"]
    ids = dict(zip(roles, launch("us-east-1", [managed(PAST, r) for r in roles]), strict=True))
    ec2("us-east-1").modify_instance_attribute(InstanceId=ids["b"], DisableApiTermination={"Value": True})
    result = aws_sweeper(aws, batch_size=100).sweep(["us-east-1"], NOW, act=True, price=prices)
    assert set(result.failed) == {ids["b"]} and "OperationNotPermitted" in result.failed[ids["b"]]
    assert set(result.actions) == {ids["a"], ids["c"]}
    after = states(ids)
    ec2("us-east-1").modify_instance_attribute(InstanceId=ids["b"], DisableApiTermination={"Value": False})
    assert after == {"a": "terminated", "b": "running", "c": "terminated"}


def test_aws_cancels_a_spot_request_before_terminating(aws: Any, prices: Pricer) -> None:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    client = ec2("us-east-1")
    answer = client.request_spot_instances(
        SpotPrice="1",
        InstanceCount=1,
        Type="persistent",
        LaunchSpecification={"ImageId": ami("us-east-1"), "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"][0]
    iid, request = answer["InstanceId"], answer["SpotInstanceRequestId"]
    client.create_tags(
        Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in managed(None, "sir").items()]
    )
    client.associate_iam_instance_profile(
        IamInstanceProfile={"Name": gpufit_profile("dev", "sir")}, InstanceId=iid
    )
    # moto launches the request's instance but does not report its request id: set it, as EC2 reports it
    moto_instance: Any = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(iid)
    moto_instance.spot_instance_request_id = request
    calls = Calls()
    result = aws_sweeper(aws, calls).sweep(["us-east-1"], NOW, act=True, price=prices)
    assert result.actions == {iid: "terminating"}
    order = [op for op, _ in calls.seen if op in ("CancelSpotInstanceRequests", "TerminateInstances")]
    assert order == ["CancelSpotInstanceRequests", "TerminateInstances"]
    assert client.describe_spot_instance_requests()["SpotInstanceRequests"] == []
    assert any(request in note for note in result.notes)


def test_aws_throttling_and_5xx_are_retried(aws: Any, prices: Pricer) -> None:
    roles = ["a", "b"]
    ids = dict(zip(roles, launch("us-east-1", [managed(PAST, r) for r in roles]), strict=True))
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeInstances",
        lambda r: error_response(r, 400, "RequestLimitExceeded"),
        times=2,
    )
    faults.fail(
        lambda r: operation(r) == "TerminateInstances",
        lambda r: error_response(r, 503, "Unavailable"),
        times=1,
    )
    calls = Calls()  # before the faults: a hook that answers hides the call from later ones
    result = aws_sweeper(aws, calls, faults).sweep(["us-east-1"], NOW, act=True, price=prices)
    assert not result.regions_failed and not result.failed and set(result.actions) == set(ids.values())
    assert calls.count("DescribeInstances") == 3  # throttled twice, then the one page
    assert calls.count("TerminateInstances") == 2
    assert states(ids) == {"a": "terminated", "b": "terminated"}


class _Offer:
    """The two fields ``Pricer`` reads of a catalog offer."""

    def __init__(self, name: str, region: str, zone: str | None, market: str, usd: float) -> None:
        self.key = ("aws", name, region, zone, market)
        self.hourly_usd = usd


def test_aws_prices_by_the_machines_az_id_else_the_regions_offer(aws: Any) -> None:
    """The catalog keys AWS zones by AZ ID; EC2 answers with the zone's account-specific name.
    A machine's price is its AZ ID's offer, else the region-level one, never a name's."""
    region = "us-east-1"
    priced, unpriced = "us-east-1a", "us-east-1e"
    ids = {
        "priced": launch(region, [managed(PAST, "priced")], spot=True, zone=priced)[0],
        "unpriced": launch(region, [managed(PAST, "unpriced")], spot=True, zone=unpriced)[0],
        "on-demand": launch(region, [managed(PAST, "on-demand")], zone=priced)[0],
    }
    price = Pricer(
        [
            _Offer("g5.xlarge", region, az_id(region, priced), "spot", 0.4),
            _Offer("g5.xlarge", region, unpriced, "spot", 9.99),  # keyed by a name: never matches
            _Offer("g5.xlarge", region, None, "spot", 0.5),
            _Offer("g5.xlarge", region, None, "on-demand", 1.0),
        ]
    )
    calls = Calls()
    result = aws_sweeper(aws, calls).sweep([region], NOW, act=False, price=price)
    by_id = {c.instance_id: c for c in result.candidates}
    assert {role: (by_id[iid].zone, by_id[iid].hourly_usd) for role, iid in ids.items()} == {
        "priced": (az_id(region, priced), 0.4),
        "unpriced": (az_id(region, unpriced), 0.5),  # no offer for its zone: the region's
        "on-demand": (az_id(region, priced), 1.0),
    }
    assert calls.count("DescribeAvailabilityZones") == 1 and not result.notes


def test_aws_an_answers_own_az_id_is_used_without_asking(aws: Any) -> None:
    """EC2 now also answers ``Placement.AvailabilityZoneId`` (moto does not: added here to its
    parsed answers); with it no zone lookup is made."""
    region = "us-east-1"
    (iid,) = launch(region, [managed(PAST, "with-id")], spot=True)

    def with_az_id(parsed: dict[str, Any], **_: Any) -> None:
        for reservation in parsed.get("Reservations", []):
            for machine in reservation.get("Instances", []):
                machine["Placement"]["AvailabilityZoneId"] = "use1-az9"

    aws.events.register("after-call.ec2.DescribeInstances", with_az_id)
    try:
        calls = Calls()
        price = Pricer([_Offer("g5.xlarge", region, "use1-az9", "spot", 0.3)])
        result = aws_sweeper(aws, calls).sweep([region], NOW, act=False, price=price)
    finally:
        aws.events.unregister("after-call.ec2.DescribeInstances", with_az_id)
    (candidate,) = [c for c in result.candidates if c.instance_id == iid]
    assert (candidate.zone, candidate.hourly_usd) == ("use1-az9", 0.3)
    assert calls.count("DescribeAvailabilityZones") == 0


def test_aws_a_refused_zone_lookup_prices_by_region_and_still_sweeps(aws: Any, prices: Pricer) -> None:
    region = "us-east-1"
    (iid,) = launch(region, [managed(PAST, "no-zones")], zone="us-east-1b")
    (spot,) = launch(region, [managed(PAST, "no-zones-spot")], spot=True, zone="us-east-1b")
    denied = Faults()
    denied.fail(
        lambda r: operation(r) == "DescribeAvailabilityZones",
        lambda r: error_response(r, 403, "UnauthorizedOperation"),
    )
    calls = Calls()
    result = aws_sweeper(aws, calls, denied).sweep([region], NOW, act=True, price=prices)
    by_id = {c.instance_id: c for c in result.candidates}
    assert by_id[iid].zone == "us-east-1b"  # by name: its AZ ID is unknown
    assert by_id[iid].hourly_usd == snapshot_price("aws", "g5.xlarge", region, "on-demand")
    assert by_id[spot].hourly_usd is None  # spot is priced per AZ ID only: unknown, not guessed
    assert set(result.actions) == {iid, spot} and not result.auth_error and not result.regions_failed
    assert any(
        "availability-zone IDs unavailable" in n and "UnauthorizedOperation" in n for n in result.notes
    )
    assert calls.count("DescribeAvailabilityZones") == 1  # a permission error is not retried


# ---------------------------------------------------------------------------------- GCP (fake)

ZONES = ["asia-east1-a", "europe-west4-a", "us-central1-a", "us-central1-b"]


def labels(expiry: str | None, workload: str, **changes: str) -> dict[str, str]:
    out = {"gpufit-managed": "true", "gpufit-stack": "dev", "gpufit-workload": workload}
    if expiry is not None:
        out["gpufit-expires-at"] = expiry
    return {**out, **changes}


def gcp_world() -> list[dict[str, Any]]:
    def vm(zone: str, name: str, lab: dict[str, str] | None, **kw: Any) -> dict[str, Any]:
        return instance(PROJECT, zone, name, lab, **kw)

    return [
        vm("us-central1-a", "expired", labels(PAST_LABEL, "expired")),
        vm("us-central1-a", "future", labels(FUTURE_LABEL, "future")),
        vm("us-central1-a", "missing", labels(None, "missing")),
        vm("us-central1-b", "malformed", labels("2026-12-01T00:00:00Z", "malformed")),
        vm("us-central1-b", "naive", labels("2026-12-01t00-00-00", "naive")),
        vm("us-central1-b", "unmanaged", labels(PAST_LABEL, "unmanaged", **{"gpufit-managed": "false"})),
        vm("us-central1-b", "shouting", labels(PAST_LABEL, "shouting", **{"gpufit-managed": "True"})),
        vm("us-central1-b", "unlabelled", None),
        vm("us-central1-a", "stopped", labels(PAST_LABEL, "stopped"), status="TERMINATED"),
        vm("us-central1-a", "stopping", labels(PAST_LABEL, "stopping"), status="STOPPING"),
        vm(
            "europe-west4-a",
            "eu-spot",
            labels(PAST_LABEL, "eu-spot"),
            machine="n1-standard-8",
            accelerators=(("nvidia-tesla-t4", 1),),
            spot=True,
        ),
        vm("europe-west4-a", "eu-odd", labels(PAST_LABEL, "eu-odd"), machine="e2-standard-4"),
        vm("asia-east1-a", "asia-expired", labels(PAST_LABEL, "asia-expired")),
    ]


GCP_SWEPT = {"expired", "missing", "malformed", "naive", "stopped", "eu-spot", "eu-odd"}
GCP_REGIONS = ["us-central1", "europe-west4"]


@pytest.fixture
def gcp(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcpInstances]:
    with FakeGcpInstances(PROJECT, ZONES, gcp_world(), per_page=2) as fake:
        monkeypatch.setenv("GPUFIT_GCP_COMPUTE_ENDPOINT", fake.url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        yield fake


def gcp_sweeper(fake: FakeGcpInstances, counter: CallCounter | None = None) -> GcpSweeper:
    return GcpSweeper(project=PROJECT, compute_endpoint=fake.url, policy=NO_SLEEP, counter=counter)


def test_gcp_dry_run_lists_exactly_the_orphans(gcp: FakeGcpInstances, prices: Pricer) -> None:
    result = gcp_sweeper(gcp).sweep(GCP_REGIONS, NOW, act=False, price=prices)
    by_name = {c.name: c for c in result.candidates}
    assert set(by_name) == GCP_SWEPT
    assert {n: c.reason for n, c in by_name.items()} == {
        "expired": "expired",
        "missing": "no expiry",
        "malformed": "malformed expiry",
        "naive": "malformed expiry",
        "stopped": "expired",
        "eu-spot": "expired",
        "eu-odd": "expired",
    }
    spot = by_name["eu-spot"]
    assert (spot.region, spot.zone, spot.instance_type, spot.market) == (
        "europe-west4",
        "europe-west4-a",
        "n1-standard-8+t4x1",
        "spot",
    )
    assert spot.hourly_usd == snapshot_price("gcp", "n1-standard-8+t4x1", "europe-west4", "spot")
    assert by_name["expired"].hourly_usd == snapshot_price("gcp", "g2-standard-4", "us-central1", "on-demand")
    assert by_name["eu-odd"].hourly_usd is None
    assert by_name["stopped"].billing is False  # TERMINATED: stopped, its disk still bills
    assert gcp.deletes == []
    assert result.regions_ok == set(GCP_REGIONS)
    filters = {q.get("filter") for q in gcp.lists}
    assert filters == {'labels.gpufit-managed = "true"'}
    assert len(gcp.lists) >= 3 and any(q.get("pageToken") for q in gcp.lists)  # pages of 2 walked


def test_gcp_yes_deletes_exactly_the_orphans(gcp: FakeGcpInstances, prices: Pricer) -> None:
    result = gcp_sweeper(gcp).sweep(GCP_REGIONS, NOW, act=True, price=prices)
    assert {name for _, name in gcp.deleted} == GCP_SWEPT
    assert len(gcp.deletes) == len(GCP_SWEPT)  # one DELETE each, none elsewhere
    assert {(d.zone, d.name) for d in gcp.deletes} == set(gcp.deleted)
    assert set(result.actions.values()) == {"deleting"} and len(result.actions) == len(GCP_SWEPT)
    left = {i["name"] for i in gcp.instances}
    assert {"future", "unmanaged", "shouting", "unlabelled", "stopping", "asia-expired"} <= left


def test_gcp_every_region_when_none_named(gcp: FakeGcpInstances, prices: Pricer) -> None:
    result = gcp_sweeper(gcp).sweep(None, NOW, act=False, price=prices)
    assert {c.name for c in result.candidates} == GCP_SWEPT | {"asia-expired"}


def test_gcp_refused_filter_is_checked_here(gcp: FakeGcpInstances, prices: Pricer) -> None:
    gcp.reject_filters = True
    result = gcp_sweeper(gcp).sweep(GCP_REGIONS, NOW, act=True, price=prices)
    assert {name for _, name in gcp.deleted} == GCP_SWEPT
    assert any("refused the filter" in n for n in result.notes)
    assert any(not q.get("filter") for q in gcp.lists)


def test_gcp_delete_retried_with_the_same_request_id(gcp: FakeGcpInstances, prices: Pricer) -> None:
    gcp.fail("delete", 503, times=1, name="expired")
    gcp.fail("instances", 429, times=1)
    result = gcp_sweeper(gcp).sweep(GCP_REGIONS, NOW, act=True, price=prices)
    tries = [d for d in gcp.deletes if d.name == "expired"]
    assert [d.status for d in tries] == [503, 200]
    assert tries[0].request_id and tries[0].request_id == tries[1].request_id
    assert gcp.deleted.count(("us-central1-a", "expired")) == 1
    assert not result.failed and not result.regions_failed


def test_gcp_a_refused_delete_fails_that_vm_only(
    gcp: FakeGcpInstances, capsys: pytest.CaptureFixture[str]
) -> None:
    gcp.fail("delete", 400, times=None, name="expired")  # as deletion protection answers
    assert cmd_sweep(parse("--cloud", "gcp", "--regions", *GCP_REGIONS, "--yes"), now=NOW) == 10
    captured = capsys.readouterr()
    assert {name for _, name in gcp.deleted} == GCP_SWEPT - {"expired"}
    assert "FAILED: compute instances.delete: 400" in captured.out and "1 failed" in captured.out
    assert "could not remove gcp:" in captured.err and "sweep incomplete" not in captured.err
    assert [d.status for d in gcp.deletes if d.name == "expired"] == [400]  # not retried


def test_gcp_gone_before_delete_is_fine(gcp: FakeGcpInstances, prices: Pricer) -> None:
    gcp.fail("delete", 404, times=1, name="missing")
    result = gcp_sweeper(gcp).sweep(GCP_REGIONS, NOW, act=True, price=prices)
    by_name = {c.name: c.instance_id for c in result.candidates}
    assert result.actions[by_name["missing"]] == "already gone" and not result.failed


# ---------------------------------------------------------------------------------- the command


def test_cli_aws_dry_run_then_yes(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    ids = aws_world()
    before = states(ids)
    regions = ["--regions", "us-east-1", "us-west-2"]
    sweepers = {"aws": aws_sweeper(aws, page_size=1000, batch_size=100)}
    assert cmd_sweep(parse("--cloud", "aws", *regions, "--catalog", "snapshot"), NOW, sweepers=sweepers) == 0
    out = capsys.readouterr().out
    g5 = snapshot_price("aws", "g5.xlarge", "us-east-1", "on-demand")
    west_zone = az_id("us-west-2", zone_of("us-west-2", ids["west-spot"]))
    spot = snapshot_price("aws", "g4dn.xlarge", "us-west-2", "spot", zone=west_zone)
    total = 4 * g5 + spot  # expired, missing, malformed, naive + the spot one; stopped bills no compute
    assert (
        f"dry run: would remove 7 instances, stopping ${total:,.2f}/h (+ 1 of unknown price); "
        "1 not running (disks only, not counted)"
    ) in out
    for role in SWEPT:
        assert ids[role] in out
    for role in set(ids) - SWEPT:
        assert ids[role] not in out
    assert f"${g5:,.2f}/h" in out and "?" in out and "no expiry" in out and "malformed expiry" in out
    assert "not running" in out  # the stopped one: its price not counted
    assert states(ids) == before  # a dry run touches nothing

    args = parse("--cloud", "aws", *regions, "--catalog", "snapshot", "--yes")
    assert cmd_sweep(args, NOW, sweepers=sweepers) == 0
    out = capsys.readouterr().out
    assert f"removed 7 instances: stopped ${total:,.2f}/h (+ 1 of unknown price); 1 not running" in out
    assert "terminating" in out and "dry run" not in out
    after = states(ids)
    assert {role for role in ids if after[role] == "terminated"} == SWEPT | {"terminated"}

    assert cmd_sweep(parse("--cloud", "aws", *regions, "--yes"), NOW, sweepers=sweepers) == 0
    assert "nothing to sweep" in capsys.readouterr().out


def test_cli_gcp_json(gcp: FakeGcpInstances, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--cloud", "gcp", "--regions", *GCP_REGIONS, "--json", "--catalog", "snapshot", "--yes")
    assert cmd_sweep(args, now=NOW) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "act" and report["instances"] == len(GCP_SWEPT) and report["unpriced"] == 1
    rows = report["clouds"][0]["candidates"]
    assert {r["name"] for r in rows} == GCP_SWEPT
    assert {r["result"] for r in rows} == {"deleting"}
    billed = [r["hourly_usd"] for r in rows if r["billing"] and r["hourly_usd"] is not None]
    assert report["hourly_usd_stopped"] == pytest.approx(sum(billed))
    assert {name for _, name in gcp.deleted} == GCP_SWEPT


def small_world() -> dict[str, str]:
    """One expired instance in each region, and one not expired."""
    (east, keep) = launch("us-east-1", [managed(PAST, "east"), managed(FUTURE, "keep")])
    (west,) = launch("us-west-2", [managed(PAST, "west")])
    return {"east": east, "keep": keep, "west": west}


def test_cli_aws_permission_denied_names_it(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    ids = small_world()
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "TerminateInstances",
        lambda r: error_response(r, 403, "UnauthorizedOperation", "You are not authorized"),
    )
    args = parse("--cloud", "aws", "--regions", "us-east-1", "--yes")
    assert cmd_sweep(args, now=NOW, sweepers={"aws": aws_sweeper(aws, faults)}) == 7
    captured = capsys.readouterr()
    assert "ec2:TerminateInstances" in captured.err and "UnauthorizedOperation" in captured.err
    assert "permission denied" in captured.out  # each instance's result says why it is still there
    assert set(states(ids).values()) == {"running"}

    denied = Faults()
    denied.fail(
        lambda r: operation(r) == "DescribeInstances",
        lambda r: error_response(r, 403, "UnauthorizedOperation"),
    )
    calls = Calls()
    args = parse("--cloud", "aws", "--regions", "us-east-1", "us-west-2")
    assert cmd_sweep(args, now=NOW, sweepers={"aws": aws_sweeper(aws, calls, denied)}) == 7
    captured = capsys.readouterr()
    assert "ec2:DescribeInstances" in captured.err
    assert calls.count("DescribeInstances", "us-east-1") == 1  # a permission error is not retried
    assert "incomplete: aws: permission or credentials missing" in captured.out
    assert "nothing to sweep:" not in captured.out  # a refused listing is not an empty one


def test_cli_gcp_permission_denied_names_it(
    gcp: FakeGcpInstances, capsys: pytest.CaptureFixture[str]
) -> None:
    gcp.fail("instances", 403, times=None)
    assert cmd_sweep(parse("--cloud", "gcp"), now=NOW) == 7
    err = capsys.readouterr().err
    assert "compute.instances.list" in err and PROJECT in err
    assert len(gcp.lists) == 1  # not retried

    gcp.faults.clear()
    gcp.fail("delete", 403, times=None)
    assert cmd_sweep(parse("--cloud", "gcp", "--yes"), now=NOW) == 7
    assert "compute.instances.delete" in capsys.readouterr().err
    assert gcp.deleted == []


def test_cli_a_failed_region_is_named(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    ids = small_world()
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeInstances" and region_of(r) == "us-west-2",
        lambda r: error_response(r, 503, "Unavailable"),
    )
    calls = Calls()
    args = parse("--cloud", "aws", "--regions", "us-east-1", "us-west-2", "--yes")
    assert cmd_sweep(args, now=NOW, sweepers={"aws": aws_sweeper(aws, calls, faults)}) == 10
    captured = capsys.readouterr()
    assert "aws:us-west-2" in captured.err and "region us-west-2 failed" in captured.out
    assert calls.count("DescribeInstances", "us-west-2") == NO_SLEEP.max_attempts  # retried, then given up
    assert states(ids) == {"east": "terminated", "keep": "running", "west": "running"}


def test_cli_gcp_unreachable_zone_fails_its_region(
    gcp: FakeGcpInstances, capsys: pytest.CaptureFixture[str]
) -> None:
    gcp.unreachable_zones = {"europe-west4-a"}
    assert cmd_sweep(parse("--cloud", "gcp", "--regions", *GCP_REGIONS, "--yes"), now=NOW) == 10
    captured = capsys.readouterr()
    assert "gcp:europe-west4" in captured.err
    assert {name for _, name in gcp.deleted} == GCP_SWEPT - {"eu-spot", "eu-odd"}


def test_cli_default_aws_settings_and_no_gcp_project(
    aws: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's own AwsSweeper finds moto through AWS_ENDPOINT_URL_EC2 alone; without a
    GCP project, GCP is skipped rather than failing the sweep."""
    (iid,) = launch("us-east-1", [managed(PAST, "expired")])
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    assert cmd_sweep(parse("--regions", "us-east-1", "--catalog", "snapshot"), now=NOW) == 0
    captured = capsys.readouterr()
    assert "gcp skipped" in captured.err and iid in captured.out and "dry run" in captured.out


def test_render_marks_failures() -> None:
    c = Candidate(
        cloud="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_id="i-1",
        name=None,
        instance_type="g5.xlarge",
        stack=None,
        workload=None,
        expires_at=None,
        reason="no expiry",
        hourly_usd=1.0,
        market="on-demand",
    )
    result = SweepResult(cloud="aws", acted=True, candidates=[c], failed={"i-1": "OperationNotPermitted"})
    text = render([result])
    assert (
        "FAILED: OperationNotPermitted" in text and "removed 0 instances: stopped $0.00/h; 1 failed" in text
    )


# ---------------------------------------------------------------------------------- AWS groups


def autoscaling(session: Any, region: str) -> Any:
    return session.client("autoscaling", region_name=region)


def make_group(
    session: Any, region: str, name: str, tags: dict[str, str], desired: int = 2, template_tags: Any = None
) -> None:
    """An Auto Scaling group as gpufit makes one: a launch template tagged like the group (or
    with ``template_tags``), mixed-instances overrides and tags propagated to its instances."""
    own = tags if template_tags is None else template_tags
    template = ec2(region).create_launch_template(
        LaunchTemplateName=f"{name}-lt",
        LaunchTemplateData={"ImageId": ami(region), "InstanceType": "g5.xlarge"},
        **(
            {
                "TagSpecifications": [
                    {
                        "ResourceType": "launch-template",
                        "Tags": [{"Key": k, "Value": v} for k, v in own.items()],
                    }
                ]
            }
            if own
            else {}
        ),
    )["LaunchTemplate"]["LaunchTemplateId"]
    subnets = ec2(region).describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    autoscaling(session, region).create_auto_scaling_group(
        AutoScalingGroupName=name,
        MinSize=0,
        MaxSize=desired,
        DesiredCapacity=desired,
        VPCZoneIdentifier=",".join(s["SubnetId"] for s in subnets["Subnets"][:2]),
        MixedInstancesPolicy={
            "LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
                "Overrides": [{"InstanceType": "g5.xlarge"}, {"InstanceType": "g5.2xlarge"}],
            },
            "InstancesDistribution": {
                "OnDemandBaseCapacity": 0,
                "OnDemandPercentageAboveBaseCapacity": 0,
                "SpotAllocationStrategy": "capacity-optimized-prioritized",
            },
        },
        Tags=[
            {
                "Key": k,
                "Value": v,
                "PropagateAtLaunch": True,
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
            }
            for k, v in tags.items()
        ],
    )


def groups(session: Any, region: str) -> dict[str, dict[str, Any]]:
    answer = autoscaling(session, region).describe_auto_scaling_groups()
    return {g["AutoScalingGroupName"]: g for g in answer["AutoScalingGroups"]}


def test_aws_orphaned_group_is_scaled_to_zero_and_deleted_others_untouched(aws: Any, prices: Pricer) -> None:
    region = "us-east-1"
    for name in list(groups(aws, region)):  # what an earlier test left
        autoscaling(aws, region).delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
    make_group(aws, region, "gpufit-orphan-dev", managed(PAST, "orphan"))
    make_group(aws, region, "gpufit-live-dev", managed(FUTURE, "live"))
    make_group(aws, region, "someone-elses", {"team": "search", TAG_EXPIRES_AT: PAST})
    make_group(aws, region, "edited-by-hand", {**managed(PAST, "edited"), TAG_MANAGED: "false"})
    before = groups(aws, region)
    assert before["gpufit-orphan-dev"]["Instances"]  # moto launched its machines
    calls = Calls()
    sweeper = aws_sweeper(aws, calls)

    result = sweeper.sweep([region], NOW, act=False, price=prices)
    grouped = [c for c in result.candidates if c.kind == "group"]
    assert [(c.instance_id, c.reason, c.market) for c in grouped] == [
        ("gpufit-orphan-dev", "expired", "spot")
    ]
    assert grouped[0].instance_type == "g5.xlarge,g5.2xlarge" and grouped[0].billing is True
    running = before["gpufit-orphan-dev"]["Instances"]
    assert grouped[0].hourly_usd == pytest.approx(  # each machine at its own zone's spot price
        sum(
            snapshot_price(
                "aws", i["InstanceType"], region, "spot", zone=az_id(region, i["AvailabilityZone"])
            )
            for i in running
        )
    )
    members = {i["InstanceId"] for g in before.values() for i in g["Instances"]}
    assert not members & {c.instance_id for c in result.candidates}  # machines are left to their group
    assert groups(aws, region).keys() == before.keys()  # the dry run touched nothing
    assert calls.count("UpdateAutoScalingGroup") == calls.count("DeleteAutoScalingGroup") == 0

    result = sweeper.sweep([region], NOW, act=True, price=prices)
    assert result.actions == {"gpufit-orphan-dev": "scaled to 0, deleting"} and not result.failed
    after = groups(aws, region)
    assert "gpufit-orphan-dev" not in after
    for name in ("gpufit-live-dev", "someone-elses", "edited-by-hand"):
        assert after[name]["DesiredCapacity"] == 2 and after[name]["MaxSize"] == 2, name
    assert calls.count("UpdateAutoScalingGroup", region) == calls.count("DeleteAutoScalingGroup", region) == 1
    assert json.loads(json.dumps(to_json_of(result)))["clouds"][0]["candidates"][0]["kind"] == "group"


def to_json_of(result: SweepResult) -> dict[str, Any]:
    from gitops.sweep import to_json

    return to_json([result])


# ---------------------------------------------------------------------------------- GCP groups


def test_gcp_orphaned_mig_is_resized_to_zero_and_deleted_instead_of_its_vms(prices: Pricer) -> None:
    orphan = f"projects/{PROJECT}/regions/us-central1/instanceGroupManagers/gpufit-orphan-dev"
    live = f"projects/{PROJECT}/regions/us-central1/instanceGroupManagers/gpufit-live-dev"
    vms = [
        instance(PROJECT, "us-central1-a", "orphan-a1", labels(PAST_LABEL, "orphan"), created_by=orphan),
        instance(PROJECT, "us-central1-b", "orphan-b1", labels(PAST_LABEL, "orphan"), created_by=orphan),
        instance(PROJECT, "us-central1-a", "live-a1", labels(FUTURE_LABEL, "live"), created_by=live),
        instance(PROJECT, "us-central1-a", "lone", labels(PAST_LABEL, "lone")),
    ]
    with FakeGcpInstances(PROJECT, ZONES, vms, per_page=2) as fake:
        fake.groups = {orphan.split("/", 2)[2]: 2, live.split("/", 2)[2]: 1}
        sweeper = gcp_sweeper(fake)
        result = sweeper.sweep(["us-central1"], NOW, act=False, price=prices)
        by_id = {c.instance_id: c for c in result.candidates}
        group_id = "regions/us-central1/instanceGroupManagers/gpufit-orphan-dev"
        assert set(by_id) == {group_id, next(c.instance_id for c in result.candidates if c.name == "lone")}
        group = by_id[group_id]
        assert (group.kind, group.name, group.region, group.zone, group.state) == (
            "group",
            "gpufit-orphan-dev",
            "us-central1",
            None,
            "2 VM(s)",
        )
        price = snapshot_price("gcp", "g2-standard-4", "us-central1", "on-demand")
        assert group.hourly_usd == pytest.approx(2 * price)
        assert fake.group_calls == [] and fake.deletes == []

        result = sweeper.sweep(["us-central1"], NOW, act=True, price=prices)
        assert result.actions[group_id] == "scaled to 0, deleting" and not result.failed
        assert fake.group_calls == [("POST", group_id), ("DELETE", group_id)]  # resized first
        assert {name for _, name in fake.deleted} == {"orphan-a1", "orphan-b1", "lone"}
        assert [d.name for d in fake.deletes] == ["lone"]  # the group's VMs went with the group
        assert fake.groups == {"regions/us-central1/instanceGroupManagers/gpufit-live-dev": 1}
        assert {i["name"] for i in fake.instances} == {"live-a1"}


# ---------------------------------------------------------------------------------- provenance


def launch_from_template(region: str, tags: dict[str, str], template_tags: dict[str, str]) -> str:
    """An instance launched from a launch template tagged ``template_tags`` (EC2 then marks the
    instance with aws:ec2launchtemplate:id), tagged ``tags`` itself; no instance profile."""
    spec = [
        {
            "ResourceType": "launch-template",
            "Tags": [{"Key": k, "Value": v} for k, v in template_tags.items()],
        }
    ]
    template = ec2(region).create_launch_template(
        LaunchTemplateName=f"lt-{len(tags)}-{'-'.join(sorted(template_tags.values()))}"[:120] or "lt",
        LaunchTemplateData={"ImageId": ami(region), "InstanceType": "g5.xlarge"},
        **({"TagSpecifications": spec} if template_tags else {}),
    )["LaunchTemplate"]["LaunchTemplateId"]
    iid = str(
        ec2(region).run_instances(LaunchTemplate={"LaunchTemplateId": template}, MinCount=1, MaxCount=1)[
            "Instances"
        ][0]["InstanceId"]
    )
    ec2(region).create_tags(Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return iid


def test_aws_a_foreign_instance_tagged_managed_is_not_swept(
    aws: Any, prices: Pricer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anyone who may tag an instance can mark it gpufit:managed with a past expiry: the sweep
    must not terminate it unless gpufit made it (its launch template or instance profile)."""
    region = "us-east-1"
    ids: dict[str, str] = {}
    (ids["real"],) = launch(region, [managed(PAST, "real")])
    (ids["impostor"],) = launch(region, [managed(PAST, "impostor")], made_by_gpufit=False)
    (ids["borrowed"],) = launch(region, [managed(PAST, "borrowed")], made_by_gpufit=False)
    ec2(region).associate_iam_instance_profile(  # gpufit's profile, but of another workload
        IamInstanceProfile={"Name": gpufit_profile("dev", "someone-else")}, InstanceId=ids["borrowed"]
    )
    (ids["disowned"],) = launch(region, [managed(PAST, "disowned")], made_by_gpufit=False)
    ec2(region).associate_iam_instance_profile(  # named like gpufit's, not tagged managed=true
        IamInstanceProfile={"Name": gpufit_profile("dev", "disowned", managed="false")},
        InstanceId=ids["disowned"],
    )
    (ids["nameless"],) = launch(region, [{TAG_MANAGED: "true", TAG_EXPIRES_AT: PAST}])
    ids["templated"] = launch_from_template(region, managed(PAST, "templated"), managed(FUTURE, "templated"))
    ids["foreign-template"] = launch_from_template(region, managed(PAST, "ft"), {"team": "search"})

    calls = Calls()
    result = aws_sweeper(aws, calls).sweep([region], NOW, act=False, price=prices)
    found = {c.instance_id: c for c in result.candidates}
    assert set(found) == {ids["real"], ids["templated"]}
    assert (
        found[ids["real"]].provenance
        == "runs with gpufit's instance profile gpufit-dev-real-profile of dev/real"
    )
    assert found[ids["templated"]].provenance.startswith("launched from gpufit's launch template lt-")
    for role in ("impostor", "borrowed", "disowned", "foreign-template"):
        assert any(
            ids[role] in n and "not made by gpufit" in n and "left alone" in n for n in result.notes
        ), role
    assert any(ids["nameless"] in n and "without gpufit:stack and gpufit:workload" in n for n in result.notes)
    assert calls.count("DescribeLaunchTemplates", region) == 1  # once per region

    result = aws_sweeper(aws).sweep([region], NOW, act=True, price=prices)
    assert set(result.actions) == {ids["real"], ids["templated"]}
    left = states({k: v for k, v in ids.items()})
    assert {k for k, v in left.items() if v == "running"} == {
        "impostor",
        "borrowed",
        "disowned",
        "nameless",
        "foreign-template",
    }
    print(render([result]))
    report = capsys.readouterr().out
    assert f"aws: {ids['real']}: expired; runs with gpufit's instance profile" in report


def test_aws_a_foreign_group_tagged_managed_is_not_swept(aws: Any, prices: Pricer) -> None:
    region = "us-east-1"
    for name in list(groups(aws, region)):
        autoscaling(aws, region).delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
    make_group(aws, region, "gpufit-orphan2-dev", managed(PAST, "orphan2"))
    make_group(aws, region, "tagged-by-hand", managed(PAST, "hand"), template_tags={})
    make_group(
        aws, region, "other-workload", managed(PAST, "other"), template_tags=managed(PAST, "elsewhere")
    )
    result = aws_sweeper(aws).sweep([region], NOW, act=True, price=prices)
    assert [c.instance_id for c in result.candidates if c.kind == "group"] == ["gpufit-orphan2-dev"]
    assert set(groups(aws, region)) == {"tagged-by-hand", "other-workload"}
    assert sum("left alone" in n and "group" in n for n in result.notes) == 2


def test_gcp_a_foreign_vm_labelled_managed_is_not_swept(prices: Pricer) -> None:
    """A VM anyone labelled gpufit-managed with a past expiry is left alone unless it runs as the
    service account gpufit makes for its stack and workload."""
    stranger = f"someone@{PROJECT}.iam.gserviceaccount.com"
    other = instance(PROJECT, "us-central1-a", "x", labels(PAST_LABEL, "other"))["serviceAccounts"][0][
        "email"
    ]
    vms = [
        instance(PROJECT, "us-central1-a", "real", labels(PAST_LABEL, "real")),
        instance(PROJECT, "us-central1-a", "no-account", labels(PAST_LABEL, "na"), service_account=None),
        instance(PROJECT, "us-central1-a", "stranger", labels(PAST_LABEL, "st"), service_account=stranger),
        instance(PROJECT, "us-central1-a", "borrowed", labels(PAST_LABEL, "borrowed"), service_account=other),
        instance(
            PROJECT, "us-central1-b", "nameless", {"gpufit-managed": "true", "gpufit-expires-at": PAST_LABEL}
        ),
    ]
    with FakeGcpInstances(PROJECT, ZONES, vms) as fake:
        result = gcp_sweeper(fake).sweep(["us-central1"], NOW, act=True, price=prices)
        assert [c.name for c in result.candidates] == ["real"]
        assert result.candidates[0].provenance.startswith("runs as gpufit's service account gf-real-")
        assert {name for _, name in fake.deleted} == {"real"}
        for name in ("no-account", "stranger", "borrowed", "nameless"):
            assert any(
                f"/{name} is labelled gpufit-managed" in n and "left alone" in n for n in result.notes
            ), name


def test_gcp_the_sweeps_account_digest_is_the_one_gpufit_names_accounts_with() -> None:
    from providers.gcp.common import service_account_id
    from providers.gcp.sweep import account_digest
    from tests.machine.plans import ON_GCP, deployment

    d, _ = deployment("sdxl-batch", **ON_GCP)
    assert d.project
    assert service_account_id(d).endswith("-" + account_digest(d.project, d.stack, d.workload))


def test_aws_a_retagged_foreign_launch_template_proves_nothing(aws: Any, prices: Pricer) -> None:
    """Tags on a launch template are set with ec2:CreateTags like any other ("To tag a resource
    after it has been created, see CreateTags",
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateTagSpecificationRequest.html),
    so the issue's attacker can re-tag a foreign template as gpufit's. moto ignores CreateTags on
    ``lt-`` ids, so the forged template is made here with gpufit's tags at creation (the state
    re-tagging leaves on AWS), and its ``CreatedBy`` (moto always says the account's root) is
    set to the stranger's role in the parsed answer (botocore's ``after-call`` event). Only a
    template created by the deploy identity proves anything; the caller's own identity is the
    default deploy identity."""
    region = "us-east-1"
    for name in list(groups(aws, region)):
        autoscaling(aws, region).delete_auto_scaling_group(AutoScalingGroupName=name, ForceDelete=True)
    stranger = "arn:aws:sts::123456789012:assumed-role/search-team/alice"
    real = launch_from_template(region, managed(PAST, "real"), managed(FUTURE, "real"))
    forged = launch_from_template(region, managed(PAST, "forged"), managed(FUTURE, "forged"))
    forged_template = next(
        t["Value"]
        for t in ec2(region).describe_instances(InstanceIds=[forged])["Reservations"][0]["Instances"][0][
            "Tags"
        ]
        if t["Key"] == "aws:ec2launchtemplate:id"
    )
    make_group(aws, region, "forged-group", managed(PAST, "fg"))
    group_template_id = autoscaling(aws, region).describe_auto_scaling_groups(
        AutoScalingGroupNames=["forged-group"]
    )["AutoScalingGroups"][0]["MixedInstancesPolicy"]["LaunchTemplate"]["LaunchTemplateSpecification"][
        "LaunchTemplateId"
    ]

    def created_by_stranger(parsed: dict[str, Any], **_: Any) -> None:
        for t in parsed.get("LaunchTemplates", []):
            if t["LaunchTemplateId"] in (forged_template, group_template_id):
                t["CreatedBy"] = stranger

    aws.events.register("after-call.ec2.DescribeLaunchTemplates", created_by_stranger)
    try:
        result = aws_sweeper(aws).sweep([region], NOW, act=True, price=prices)
        assert [c.instance_id for c in result.candidates] == [real]
        assert "(created by arn:aws:iam::123456789012:root)" in result.candidates[0].provenance
        assert states({"forged": forged})["forged"] == "running"
        assert set(groups(aws, region)) == {"forged-group"}
        assert any(forged in n and f"created by {stranger}" in n for n in result.notes)
        assert any("forged-group" in n and "left alone" in n for n in result.notes)

        # No deploy identity given: the caller's own (moto's STS: arn:aws:sts::123456789012:user/moto)
        # created none of these templates, so none is trusted.
        again = launch_from_template(region, managed(PAST, "again"), managed(FUTURE, "again"))
        result = aws_sweeper(aws, deployers=None).sweep([region], NOW, act=False, price=prices)
        assert again not in {c.instance_id for c in result.candidates}
        assert any(again in n and "user/moto" in n for n in result.notes)
    finally:
        aws.events.unregister("after-call.ec2.DescribeLaunchTemplates", created_by_stranger)


def test_aws_principal_spellings_of_one_role_agree() -> None:
    from providers.aws.provenance import principal

    role = principal("arn:aws:iam::123456789012:role/ci/gpufit-apply")
    assert role == principal("arn:aws:sts::123456789012:assumed-role/gpufit-apply/gpufit-preview-1")
    assert role != principal("arn:aws:sts::123456789012:assumed-role/gpufit-teardown/s")
    assert role != principal("arn:aws:sts::999999999999:assumed-role/gpufit-apply/s")
    assert principal("arn:aws:iam::123456789012:user/alice") == "arn:aws:iam::123456789012:user/alice"


def test_aws_an_untagged_instance_a_tagged_request_launched_is_swept(aws: Any, prices: Pricer) -> None:
    """A persistent request whose instance Pulumi deleted launches another one, untagged ("the
    instances and volumes that are launched by the Spot Instance request are not automatically
    tagged": concepts-spot-instances-request-tags.html); the node's launch template tagged the
    request (providers.aws.component.template_tagged). Past the request's deadline tag the sweep
    finds the instance through its request, cancels the request, then terminates it; an instance
    of a request whose deadline is ahead is left."""
    client = ec2("us-east-1")
    made = {}
    for workload, expiry in (("relaunched", "2026-11-30T00:00:00Z"), ("ahead", "2027-06-01T00:00:00Z")):
        answer = client.request_spot_instances(
            SpotPrice="1",
            InstanceCount=1,
            Type="persistent",
            LaunchSpecification={"ImageId": ami("us-east-1"), "InstanceType": "g5.xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "spot-instances-request",
                    "Tags": [{"Key": k, "Value": v} for k, v in managed(expiry, workload).items()],
                }
            ],
        )["SpotInstanceRequests"][0]
        iid = answer["InstanceId"]
        assert not client.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0].get("Tags")
        client.associate_iam_instance_profile(
            IamInstanceProfile={"Name": gpufit_profile("dev", workload)}, InstanceId=iid
        )
        made[workload] = (iid, answer["SpotInstanceRequestId"])
    calls = Calls()
    result = aws_sweeper(aws, calls).sweep(["us-east-1"], NOW, act=True, price=prices)
    iid, request = made["relaunched"]
    assert result.actions[iid] == "terminating" and made["ahead"][0] not in result.actions
    swept = [c for c in result.candidates if c.instance_id == iid]
    assert len(swept) == 1 and (swept[0].stack, swept[0].workload) == ("dev", "relaunched")
    order = [op for op, _ in calls.seen if op in ("CancelSpotInstanceRequests", "TerminateInstances")]
    assert order == ["CancelSpotInstanceRequests", "TerminateInstances"]
    assert any(request in note for note in result.notes)
    left = {
        r["SpotInstanceRequestId"] for r in client.describe_spot_instance_requests()["SpotInstanceRequests"]
    }
    assert request not in left and made["ahead"][1] in left
    client.cancel_spot_instance_requests(SpotInstanceRequestIds=[made["ahead"][1]])


def test_aws_a_refused_spot_request_lookup_still_sweeps_the_tagged(aws: Any, prices: Pricer) -> None:
    """A teardown role without ``ec2:DescribeSpotInstanceRequests`` still sweeps the tagged
    orphans; the note says what was not looked for."""
    region = "us-east-1"
    (iid,) = launch(region, [managed(PAST, "no-requests")])
    denied = Faults()
    denied.fail(
        lambda r: operation(r) == "DescribeSpotInstanceRequests",
        lambda r: error_response(r, 403, "UnauthorizedOperation"),
    )
    result = aws_sweeper(aws, denied).sweep([region], NOW, act=True, price=prices)
    assert result.actions[iid] == "terminating" and not result.auth_error and not result.regions_failed
    assert any("spot requests not looked for" in n and "UnauthorizedOperation" in n for n in result.notes)
