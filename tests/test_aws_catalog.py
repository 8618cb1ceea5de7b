"""AWS catalog refresh against moto as a real local server (EC2) and a local Price List API,
with throttling, permission errors and a timing-out region injected per call."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from catalog.aws import (
    FILTER_VALUE_MAX,
    PRICING_PAGE,
    PRICING_QUERIES,
    ZONES_OPERATION,
    AwsCatalogFetcher,
    normalise_gpu,
    pricing_batches,
)
from catalog.refresh import refresh
from catalog.store import read_catalog_file, write_catalog
from cloudapi.calls import AuthError, CallCounter
from cloudapi.lean_botocore import (
    READ_MEMBERS,
    REFRESH_OPERATIONS,
    SESSION_ENDPOINT_PREFIXES,
    SESSION_SERVICES,
    PlainJSONFileLoader,
    RefreshLoader,
    handler_applies,
    parse_timestamp,
    refresh_session,
    session_event_parts,
    trim_service_model,
)
from cloudapi.retry import RetryPolicy
from selector.catalog import SNAPSHOT_FILE, load_catalog, load_gpus
from tests.fakes.aws import Faults, PricingServer, aws_env, error_response, moto_server, operation, region_of
from tests.fakes.aws_public import PublicAwsServer

TODAY = date(2026, 12, 2)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
NO_SLEEP = RetryPolicy(sleep=lambda _: None)
REGIONS = ["us-east-1", "us-west-2"]


def snapshot_prices() -> dict[tuple[str, str], float]:
    """On-demand prices the fake Price List serves: the embedded snapshot's own figures."""
    return {
        (o.instance.name, o.region): o.hourly_usd
        for o in load_catalog().offers
        if o.cloud == "aws" and o.market == "on-demand"
    }


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, PricingServer]]:
    with moto_server() as ec2_url, PricingServer(snapshot_prices(), page_size=3) as pricing:
        yield ec2_url, pricing  # small pages, so the tests walk NextToken pagination


@pytest.fixture(scope="module")
def public_files() -> Iterator[PublicAwsServer]:
    """The public files a refresh with credentials still reads (the Spot Instance Advisor)."""
    with PublicAwsServer(REGIONS) as server:
        yield server


@pytest.fixture
def env(
    servers: tuple[str, PricingServer], public_files: PublicAwsServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    ec2_url, pricing = servers
    values = {**aws_env(ec2_url, pricing.url), **public_files.env()}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    return values


def fetcher(faults: Faults | None = None, counter: CallCounter | None = None) -> AwsCatalogFetcher:
    session = refresh_session()
    if faults is not None:
        session.events.register("before-send", faults)
    return AwsCatalogFetcher(
        session=session, counter=counter, policy=NO_SLEEP, today=lambda: TODAY, now=lambda: NOW, scores=False
    )


def run(f: AwsCatalogFetcher, regions: list[str] | None = REGIONS) -> Any:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        return f.fetch(regions, pool, lambda _: None)


def test_normalises_gpu_names_by_memory_and_family() -> None:
    gpus = load_gpus()
    assert normalise_gpu(gpus, "A100", 40960, "p4d").name == "A100-40GB"
    assert normalise_gpu(gpus, "A100", 81920, "p4de").name == "A100-80GB"
    assert normalise_gpu(gpus, "NVIDIA", 144384, "p5en").name == "H200"  # the API's wrong name
    assert normalise_gpu(gpus, "V100", 32768, "p3dn").name == "V100-32GB"
    assert normalise_gpu(gpus, "Radeon Pro V520", 8192, "g4ad") is None


def test_trimmed_model_keeps_the_operations_and_every_shape_they_reach() -> None:
    model = {
        "version": "2.0",
        "metadata": {"protocol": "ec2"},
        "documentation": "the service",
        "operations": {
            "Wanted": {
                "name": "Wanted",
                "input": {"shape": "In"},
                "output": {"shape": "Out"},
                "errors": [{"shape": "Oops"}],
                "documentation": "op docs",
            },
            "Other": {"name": "Other", "input": {"shape": "OtherIn"}},
        },
        "shapes": {
            "In": {"type": "structure", "members": {"Names": {"shape": "NameList", "documentation": "d"}}},
            "NameList": {"type": "list", "member": {"shape": "Name"}},
            "Name": {"type": "string"},
            "Out": {"type": "structure", "members": {"Tags": {"shape": "TagMap"}}},
            "TagMap": {"type": "map", "key": {"shape": "Key"}, "value": {"shape": "Out"}},  # a cycle
            "Key": {"type": "string"},
            "Oops": {"type": "structure", "members": {}},
            "OtherIn": {"type": "structure", "members": {"X": {"shape": "Unused"}}},
            "Unused": {"type": "integer"},
        },
    }
    trimmed = trim_service_model(model, ("Wanted",))
    assert list(trimmed["operations"]) == ["Wanted"]
    assert set(trimmed["shapes"]) == {"In", "NameList", "Name", "Out", "TagMap", "Key", "Oops"}
    assert "documentation" not in json.dumps(trimmed)
    assert trimmed["metadata"] == model["metadata"] and trimmed["version"] == "2.0"
    with pytest.raises(KeyError):
        trim_service_model(model, ("Missing",))
    narrowed = trim_service_model(model, ("Wanted",), {"Out": ()})  # the answer's Tags unread
    assert set(narrowed["shapes"]) == {"In", "NameList", "Name", "Out", "Oops"}
    assert narrowed["shapes"]["Out"]["members"] == {}
    assert model["shapes"]["Out"]["members"]  # the input is not modified
    with pytest.raises(KeyError):
        trim_service_model(model, ("Wanted",), {"Out": ("Missing",)})


class _Sent(Exception):
    """Raised from ``before-send`` to capture a request's URL without a network."""

    def __init__(self, url: str) -> None:
        self.url = url


def _url_of(session: Any, service: str, region: str, config: Any, call: str, **kwargs: Any) -> str:
    from botocore.config import Config

    client = session.client(service, region_name=region, config=Config(**config))

    def capture(request: Any, **_: Any) -> None:
        raise _Sent(request.url)

    client.meta.events.register("before-send", capture)
    try:
        getattr(client, call)(**kwargs)
    except _Sent as sent:
        return sent.url
    raise AssertionError("no request was sent")


def test_refresh_session_resolves_every_endpoint_as_botocore_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL_PRICING", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    lean, full = refresh_session(), boto3.Session()
    calls = {
        "ec2": ("describe_regions", {}),
        "pricing": ("describe_services", {}),
        "sts": ("get_caller_identity", {}),
        "sso": ("list_accounts", {"accessToken": "t"}),
        "sso-oidc": ("create_token", {"clientId": "c", "clientSecret": "s", "grantType": "g"}),
    }
    configs = [{}, {"use_fips_endpoint": True}, {"use_dualstack_endpoint": True}]
    regions = ["us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1"]
    for service, (call, kwargs) in calls.items():
        for region in regions if service not in ("pricing",) else ["us-east-1", "ap-south-1"]:
            for config in configs:
                assert _url_of(lean, service, region, config, call, **kwargs) == _url_of(
                    full, service, region, config, call, **kwargs
                ), (service, region, config)


def test_timestamps_parse_as_botocore_would() -> None:
    from botocore.utils import parse_timestamp as botocore_parse

    texts = ("2026-12-02T11:00:00.000Z", "2026-12-02T11:00:00Z", "2026-12-02T11:00:00+02:00", "1764673200")
    for text in texts:
        assert parse_timestamp(text) == botocore_parse(text)
    assert parse_timestamp("2026-12-02T11:00:00.000Z").tzinfo is not None


def test_shipped_botocore_data_is_the_installed_botocores_cut() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "scripts/trim_botocore_data.py", "--check"],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_refresh_session_builds_ec2_clients_from_the_cut_and_other_services_in_full() -> None:
    import boto3
    from botocore.config import Config

    config = Config(region_name="us-east-1")
    lean = refresh_session().client("ec2", config=config).meta.service_model
    full = boto3.Session().client("ec2", config=config).meta.service_model
    assert sorted(lean.operation_names) == sorted(REFRESH_OPERATIONS)
    assert len(full.operation_names) > 500
    for name in REFRESH_OPERATIONS:  # same wire format: the same requests and answer shapes
        for which in ("input_shape", "output_shape"):
            ours, theirs = (
                getattr(lean.operation_model(name), which),
                getattr(full.operation_model(name), which),
            )
            assert ours.name == theirs.name and list(ours.members) == list(theirs.members)
    answer = lean.operation_model("DescribeInstanceTypes").output_shape.members["InstanceTypes"].member
    assert tuple(answer.members) == READ_MEMBERS["InstanceTypeInfo"]  # only what the refresh reads
    pricing = refresh_session().client("pricing", config=config).meta.service_model
    assert "GetProducts" in pricing.operation_names


def test_handler_applies_drops_only_handlers_bound_to_another_plain_service() -> None:
    services, aliases = (
        frozenset({"ec2", "pricing"}),
        {"api.pricing": "pricing", "autoscaling": "auto-scaling"},
    )
    kept = [
        "before-call",  # every service
        "before-parameter-build.ec2.RunInstances",
        "before-parameter-build.*.*",
        "docs.*.ec2.CopySnapshot.complete-section",
        "before-call.api.pricing",  # an alias of one of ours
        "before-parameter-build.autoscaling.CreateLaunchConfiguration",  # aliased: kept, to be safe
    ]
    dropped = ["before-call.s3", "needs-retry.s3.*", "docs.*.s3.CopyObject.complete-section"]
    assert all(handler_applies(name, services, aliases) for name in kept)
    assert not any(handler_applies(name, services, aliases) for name in dropped)


def _handler_name(handler: Any) -> str:
    return getattr(handler, "__qualname__", type(handler).__qualname__)  # type: ignore[no-any-return]


def _handler_names(client: Any, event_name: str) -> list[str]:
    """The handlers botocore would run for ``event_name`` on ``client``, in order (botocore
    has no public way to list them; the test reads its emitter)."""
    emitter = client.meta.events
    found = emitter._emitter._handlers.prefix_search(emitter._alias_event_name(event_name))
    return [_handler_name(h) for h in found]


def test_events_named_by_endpoint_prefix_keep_their_handlers() -> None:
    parts = session_event_parts()
    for prefix in ("oidc", "portal.sso", "api.pricing"):  # creating-serializer.<endpoint prefix>
        assert handler_applies(f"creating-serializer.{prefix}", parts, {})
    assert not handler_applies("creating-serializer.oidc", SESSION_SERVICES, {})  # names alone miss it
    assert not handler_applies("creating-serializer.s3", parts, {})


def test_the_endpoint_prefixes_are_those_of_the_session_services() -> None:
    import botocore.session

    core = botocore.session.get_session()
    prefixes = {core.get_service_model(name).endpoint_prefix for name in SESSION_SERVICES}
    assert prefixes == SESSION_ENDPOINT_PREFIXES


def _trie_nodes(trie: Any) -> dict[str, tuple[list[str], ...]]:
    """Every node of a botocore handler trie that holds handlers, by event name, with its
    first, middle and last handlers' names (botocore's internals: no public way to list them)."""
    nodes: dict[str, tuple[list[str], ...]] = {}

    def walk(node: dict[str, Any], path: list[str]) -> None:
        if node["values"] is not None:
            nodes[".".join(path)] = tuple(
                [_handler_name(h) for h in section]
                for section in (node["values"].first, node["values"].middle, node["values"].last)
            )
        for chunk, child in node["children"].items():
            walk(child, [*path, chunk])

    walk(trie._root, [])
    return nodes


def test_the_refresh_session_holds_botocores_handlers_for_its_services_in_their_places() -> None:
    import boto3
    import botocore
    from botocore.handlers import BUILTIN_HANDLERS
    from botocore.hooks import EventAliaser, HierarchicalEmitter
    from botocore.utils import EVENT_ALIASES

    def nodes(session: Any) -> dict[str, tuple[list[str], ...]]:
        return _trie_nodes(session._session.get_component("event_emitter")._emitter._handlers)

    def plugin_handler(**_: Any) -> None:
        """A plugin's handler, on an event that has a built-in one."""

    def plugin(core: Any) -> None:
        core.register("before-parameter-build.ec2.RunInstances", plugin_handler)

    botocore.register_initializer(plugin)  # runs in every new session, after the built-ins
    try:
        ours, theirs = nodes(refresh_session()), nodes(boto3.Session())
    finally:
        botocore.unregister_initializer(plugin)
    assert ours["before-parameter-build.ec2.RunInstances"][1][-1].endswith("plugin_handler")
    aliaser = EventAliaser(HierarchicalEmitter())  # the trie holds names after aliasing
    dropped = {
        (aliaser._alias_event_name(spec[0]), _handler_name(spec[1]))
        for spec in BUILTIN_HANDLERS
        if not handler_applies(spec[0], session_event_parts(), EVENT_ALIASES)
    }
    kept = {
        name: sections
        for name, all_sections in theirs.items()
        if any(sections := tuple([h for h in hs if (name, h) not in dropped] for hs in all_sections))
    }
    assert ours == kept  # each event's first, middle and last handlers, in order
    assert any(first or last for first, _, last in kept.values())  # placement is in what is compared
    assert len(kept) < len(theirs)


def test_the_refresh_session_runs_every_handler_botocore_would_for_its_services() -> None:
    import boto3
    from botocore.handlers import BUILTIN_HANDLERS

    lean, full = refresh_session(), boto3.Session()
    kinds = sorted({spec[0].split(".")[0] for spec in BUILTIN_HANDLERS} - {"docs"})
    sections = ("request-params", "response-params", "request-example", "response-example")
    checked = 0
    for service in sorted(SESSION_SERVICES):
        ours = lean.client(service, region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
        theirs = full.client(
            service, region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
        )
        service_id = theirs.meta.service_model.service_id.hyphenize()
        assert service_id in SESSION_SERVICES  # the name its events carry
        for name_of_operation in theirs.meta.service_model.operation_names:
            names = [f"{kind}.{service_id}.{name_of_operation}" for kind in kinds]
            names += [
                f"docs.{section}.{service_id}.{name_of_operation}.complete-section" for section in sections
            ]
            names.append(f"creating-serializer.{theirs.meta.service_model.endpoint_prefix}")
            for name in names:
                assert _handler_names(ours, name) == _handler_names(theirs, name), name
                checked += 1
    assert checked > 1000
    assert len(
        lean._session.get_component("event_emitter")._emitter._handlers.prefix_search("before-call.s3")
    ) < len(
        full._session.get_component("event_emitter")._emitter._handlers.prefix_search("before-call.s3")
    )  # and it does leave out the handlers of services it does not serve


def test_refresh_loader_loads_what_botocores_loader_does() -> None:
    from botocore.exceptions import UnknownServiceError
    from botocore.loaders import Loader

    ours, theirs = RefreshLoader(file_loader=PlainJSONFileLoader()), Loader()
    cases = [
        ("ec2", "service-2", None),
        ("ec2", "service-2", "2015-03-01"),
        ("ec2", "paginators-1", None),  # has sdk-extras to merge
        ("pricing", "service-2", None),
        ("sts", "endpoint-rule-set-1", None),
        ("s3", "service-2", None),
    ]
    for service, type_name, version in cases:
        assert ours.load_service_model(service, type_name, version) == theirs.load_service_model(
            service, type_name, version
        ), (service, type_name, version)
    version = ours.determine_latest_version("ec2", "paginators-1")
    raw = PlainJSONFileLoader().load_file(f"{ours.BUILTIN_DATA_PATH}/ec2/{version}/paginators-1")
    assert ours.load_service_model("ec2", "paginators-1") != raw  # the extras were merged
    assert ours.load_data("endpoints") == theirs.load_data("endpoints")
    assert ours.is_builtin_path(ours.load_data_with_path("endpoints")[1])  # so not a custom endpoint
    for loader in (ours, theirs):
        with pytest.raises(UnknownServiceError, match="Unknown service: 'no-such-service'"):
            loader.load_service_model("no-such-service", "service-2")
        for path_like in ("./ec2", "ec2/", "ec2/..", "..", ".", "", "EC2"):  # not names a listing holds
            with pytest.raises(UnknownServiceError):
                loader.load_service_model(path_like, "service-2")


def test_a_json_file_holding_null_counts_as_absent_as_in_botocore(tmp_path: Path) -> None:
    import gzip

    from botocore.loaders import JSONFileLoader

    (tmp_path / "data.json").write_text("null")
    with gzip.open(tmp_path / "data.json.gz", "wt") as handle:
        handle.write('{"b": 1, "a": 2}')
    (tmp_path / "none.json").write_text("null")
    for loader in (PlainJSONFileLoader(), JSONFileLoader()):
        assert loader.load_file(str(tmp_path / "data")) == {"b": 1, "a": 2}
        assert loader.load_file(str(tmp_path / "none")) is None
    assert list(PlainJSONFileLoader().load_file(str(tmp_path / "data"))) == ["b", "a"]


def test_a_refresh_through_the_cut_data_equals_one_through_botocores_own(env: dict[str, str]) -> None:
    import boto3

    def fetched(session: Any) -> tuple[Any, ...]:
        f = AwsCatalogFetcher(session=session, policy=NO_SLEEP, today=lambda: TODAY, now=lambda: NOW)
        result = run(f)
        return result.instance_types, result.offers, result.regions_ok, result.notes

    lean, full = fetched(refresh_session()), fetched(boto3.Session())
    assert lean == full and lean[0] and lean[1]


def test_the_instance_types_are_asked_for_while_the_shared_pool_is_busy(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In an all-clouds refresh another cloud's jobs may fill the pool first: the instance
    types, which every later AWS call waits on, must not queue behind them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    f = fetcher()
    asked = threading.Event()
    specs = f._specs

    def observed_specs(*args: Any) -> Any:
        asked.set()
        return specs(*args)

    monkeypatch.setattr(f, "_specs", observed_specs)
    with ThreadPoolExecutor(1) as pool:
        other_cloud = pool.submit(asked.wait, 10)  # holds the pool's one worker until asked
        result = f.fetch(REGIONS, pool, lambda _: None)
        assert other_cloud.result() is True
    assert result.regions_ok == set(REGIONS) and result.instance_types


AZ_ID = re.compile(r"^[a-z]+[0-9]+-az[0-9]+$")


def moto_zone_ids(region: str) -> dict[str, str]:
    """Zone name → AZ ID in moto's account, asked with botocore's whole model."""
    import boto3

    zones = boto3.client("ec2", region).describe_availability_zones()["AvailabilityZones"]
    return {z["ZoneName"]: z["ZoneId"] for z in zones}


def offered_by_az_id(region: str, names: list[str]) -> set[tuple[str, str]]:
    """(type, AZ ID) pairs EC2 offers: its offerings by zone name, mapped to AZ IDs. (moto's
    offerings asked by AZ ID disagree with those by name for a few types: recorded apart.)"""
    import boto3

    answer = boto3.client("ec2", region).describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": names}]
    )
    ids = moto_zone_ids(region)
    return {(row["InstanceType"], ids[row["Location"]]) for row in answer["InstanceTypeOfferings"]}


def test_fetch_specs_availability_and_prices(env: dict[str, str]) -> None:
    result = run(fetcher())
    assert result.regions_ok == set(REGIONS) and not result.regions_failed
    types = {t["name"]: t for t in result.instance_types}
    p4d = types["p4d.24xlarge"]
    assert (p4d["gpu"], p4d["gpu_count"], p4d["nvlink"], p4d["node_interconnect"]) == (
        "A100-40GB",
        8,
        True,
        "efa",
    )
    g5 = types["g5.12xlarge"]
    assert (g5["gpu"], g5["gpu_count"], g5["nvlink"]) == ("A10G", 4, False)  # PCIe family
    assert types["g6.xlarge"]["node_interconnect"] is None  # EFA as the API reports it
    offers = {(o["instance_type"], o["region"], o["zone"], o["market"]): o for o in result.offers}
    assert offers[("p4d.24xlarge", "us-east-1", None, "on-demand")]["hourly_usd"] == round(
        snapshot_prices()[("p4d.24xlarge", "us-east-1")], 6
    )  # from GetProducts
    spot = [o for o in result.offers if o["market"] == "spot" and o["region"] == "us-east-1"]
    assert spot and all(o["zone"].startswith("use1-az") for o in spot)  # one per zone, by AZ ID
    assert all(o["as_of"] == "2026-12-02" and o["source"] in result.sources for o in result.offers)
    batches = len(pricing_batches(sorted(types), REGIONS))
    assert result.calls >= 1 + 3 * 2 + batches  # specs; per region offerings, zones, spot; pricing
    assert result.zone_ids == {region: moto_zone_ids(region) for region in REGIONS}


def test_zones_are_az_ids_region_level_on_demand_and_per_zone_spot(env: dict[str, str]) -> None:
    """The catalog's zone semantics (selector/data/SCHEMA.md): on-demand is one region-level
    offer listing the AZ IDs that offer the type; spot is one offer per AZ ID."""
    result = run(fetcher())
    names = sorted({t["name"] for t in result.instance_types})
    for region in REGIONS:
        offered = offered_by_az_id(region, names)
        here = [o for o in result.offers if o["region"] == region]
        on_demand = [o for o in here if o["market"] == "on-demand"]
        assert on_demand and all(o["zone"] is None for o in on_demand)
        for o in on_demand:
            assert o["zones"] == sorted(z for t, z in offered if t == o["instance_type"]), o
        spot = [o for o in here if o["market"] == "spot"]
        assert spot and all(AZ_ID.match(o["zone"]) and o["zones"] == [o["zone"]] for o in spot)
        assert {(o["instance_type"], o["zone"]) for o in spot} == {  # every offered zone has a row
            (t, z) for t, z in offered if any(o["instance_type"] == t for o in spot)
        }
    catalog = load_catalog()  # the fresh offers load as the catalog's own: zones checked
    report = refresh([_Fixed(result)], catalog, json.loads(SNAPSHOT_FILE.read_text()), now=NOW)
    assert report.useful and not report.stale_regions


def test_spot_offers_only_where_the_type_is_offered(env: dict[str, str]) -> None:
    result = run(fetcher())
    names = sorted({t["name"] for t in result.instance_types})
    offered = set()
    for region in REGIONS:
        offered |= offered_by_az_id(region, names)
    spot = {(o["instance_type"], o["zone"]) for o in result.offers if o["market"] == "spot"}
    assert spot and spot <= offered


def test_a_partly_failed_refresh_never_mixes_zone_names_and_ids(env: dict[str, str]) -> None:
    """us-west-2's spot prices fail (its previous spot offers are kept, stale) and eu-west-1
    times out (all its previous offers kept): every AWS zone of the merged catalog is an AZ ID."""
    from botocore.exceptions import ReadTimeoutError

    def timeout(request: Any) -> Any:
        raise ReadTimeoutError(endpoint_url=request.url)

    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeSpotPriceHistory" and region_of(r) == "us-west-2",
        lambda r: error_response(r, 503, "Unavailable"),
    )
    faults.fail(lambda r: region_of(r) == "eu-west-1", timeout)
    result = run(fetcher(faults), ["us-east-1", "us-west-2", "eu-west-1"])
    assert set(result.regions_failed) == {"eu-west-1"} and result.kept
    report = refresh([_Fixed(result)], load_catalog(), json.loads(SNAPSHOT_FILE.read_text()), now=NOW)
    aws = [o for o in report.doc["offers"] if o["cloud"] == "aws"]
    zones = {z for o in aws for z in [o.get("zone"), *o.get("zones", [])] if z is not None}
    assert zones and all(AZ_ID.match(z) for z in zones), sorted(z for z in zones if not AZ_ID.match(z))
    west_spot = [o for o in aws if o["region"] == "us-west-2" and o["market"] == "spot"]
    assert west_spot and all(o.get("stale") for o in west_spot)  # the snapshot's, kept
    fresh_west = [o for o in aws if o["region"] == "us-west-2" and o["market"] == "on-demand"]
    assert fresh_west and not any(o.get("stale") for o in fresh_west)


def test_a_region_whose_zone_ids_fail_keeps_its_previous_data(env: dict[str, str]) -> None:
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeAvailabilityZones" and region_of(r) == "us-west-2",
        lambda r: error_response(r, 503, "Unavailable"),
    )
    result = run(fetcher(faults))
    assert set(result.regions_failed) == {"us-west-2"} and "us-west-2" not in result.zone_ids
    assert not [o for o in result.offers if o["region"] == "us-west-2"]  # no zone names instead
    assert {o["region"] for o in result.offers} == {"us-east-1"}


def test_zone_ids_refused_names_the_permission(env: dict[str, str]) -> None:
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeAvailabilityZones",
        lambda r: error_response(r, 403, "UnauthorizedOperation"),
    )
    with pytest.raises(AuthError, match=r"permission ec2:DescribeAvailabilityZones"):
        run(fetcher(faults), ["us-east-1"])


def test_zone_ids_come_from_the_refresh_sessions_cut_of_the_ec2_model(env: dict[str, str]) -> None:
    """The refresh's cut of botocore's EC2 model has DescribeAvailabilityZones, so the zone IDs
    come through the session's own clients, as with botocore's whole model."""
    import boto3

    assert ZONES_OPERATION in REFRESH_OPERATIONS
    whole = AwsCatalogFetcher(session=boto3.Session(), policy=NO_SLEEP, today=lambda: TODAY, now=lambda: NOW)
    assert run(whole, ["us-east-1"]).zone_ids["us-east-1"] == moto_zone_ids("us-east-1")
    assert run(fetcher(), ["us-east-1"]).zone_ids["us-east-1"] == moto_zone_ids("us-east-1")


def test_price_list_queries_ask_for_the_wanted_regions_a_page_at_a_time(
    env: dict[str, str], servers: tuple[str, PricingServer]
) -> None:
    pricing = servers[1]
    pricing.queries.clear()
    result = run(fetcher(), ["us-west-2"])
    assert pricing.queries
    for filters in pricing.queries:
        fields = {f["Field"]: (f["Type"], f["Value"]) for f in filters}
        assert fields["regionCode"] == ("ANY_OF", "us-west-2")
        assert fields["instanceType"][0] == "ANY_OF"
        assert len(fields["instanceType"][1].split(",")) <= PRICING_PAGE
        assert {k: v for k, v in fields.items() if v[0] == "TERM_MATCH"} == {
            "operatingSystem": ("TERM_MATCH", "Linux"),
            "tenancy": ("TERM_MATCH", "Shared"),
            "preInstalledSw": ("TERM_MATCH", "NA"),
            "capacitystatus": ("TERM_MATCH", "Used"),
        }
    on_demand = [o for o in result.offers if o["market"] == "on-demand"]
    assert on_demand and {o["region"] for o in on_demand} == {"us-west-2"}
    snapshot = snapshot_prices()
    assert all(o["hourly_usd"] == round(snapshot[(o["instance_type"], "us-west-2")], 6) for o in on_demand)


def test_pricing_batches_fit_one_page_within_the_quota_and_the_filter_length() -> None:
    types = [f"t{i}" for i in range(41)]
    assert [len(b) for b in pricing_batches(types, ["r"] * 10)] == [10] * 4 + [1]  # a page each
    assert [len(b) for b in pricing_batches(types, ["r"] * 20)] == [6] * 6 + [5]  # ≤ 8 queries
    assert len(pricing_batches(types, ["r"] * 150)) <= PRICING_QUERIES
    assert pricing_batches(types, ["us-east-1"]) == [types]
    assert [t for batch in pricing_batches(types, ["r"] * 7) for t in batch] == types
    long_names = [f"p{i:03d}.metal-48xlarge-with-a-long-suffix" for i in range(100)]
    batches = pricing_batches(long_names, ["us-east-1"])
    assert all(len(",".join(b)) <= FILTER_VALUE_MAX for b in batches) and len(batches) > 1
    assert [t for batch in batches for t in batch] == long_names


def test_the_fake_price_list_rejects_an_over_long_filter(servers: tuple[str, PricingServer]) -> None:
    import urllib.error
    import urllib.request

    body = json.dumps({"Filters": [{"Type": "ANY_OF", "Field": "instanceType", "Value": "x" * 1025}]})
    request = urllib.request.Request(
        servers[1].url, data=body.encode(), headers={"X-Amz-Target": "AWSPriceListService.GetProducts"}
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=5)
    assert error.value.code == 400


def test_price_list_calls_are_paced_to_the_quota() -> None:
    from cloudapi.aws import AwsApi
    from cloudapi.pacing import TokenBucket

    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(round(seconds, 6))

    bucket = TokenBucket(10, 5.0, clock=lambda: now[0], sleep=sleep)
    api = AwsApi(None, CallCounter(), NO_SLEEP, quotas={("pricing", "GetProducts"): bucket})
    for _ in range(12):
        api.call("pricing", "GetProducts", lambda: None)
    api.call("ec2", "DescribeRegions", lambda: None)  # another operation is not paced
    assert waits == [0.2, 0.4]
    now[0] = 10.0  # the bucket refills, never beyond its size
    for _ in range(10):
        api.call("pricing", "GetProducts", lambda: None)
    assert waits == [0.2, 0.4]


def test_throttling_is_retried_and_recovered(env: dict[str, str]) -> None:
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeInstanceTypes",
        lambda r: error_response(r, 400, "RequestLimitExceeded"),
        times=3,
    )
    faults.fail(
        lambda r: operation(r) == "GetProducts",
        lambda r: error_response(r, 400, "ThrottlingException"),
        times=2,
    )
    baseline = run(fetcher())
    result = run(fetcher(faults))
    assert not result.regions_failed and not result.kept
    assert len(result.offers) == len(baseline.offers)
    assert result.calls == baseline.calls + 5  # every injected failure cost exactly one extra call


def test_access_denied_fails_fast_naming_the_permission(env: dict[str, str]) -> None:
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeInstanceTypes",
        lambda r: error_response(r, 403, "UnauthorizedOperation", "not authorized"),
    )
    counter = CallCounter()
    with pytest.raises(AuthError, match=r"permission ec2:DescribeInstanceTypes"):
        run(fetcher(faults, counter), ["us-east-1"])
    assert counter.count == 1  # no retry on a permission error


def test_a_region_that_times_out_keeps_its_previous_data(env: dict[str, str]) -> None:
    from botocore.exceptions import ReadTimeoutError

    def timeout(request: Any) -> Any:
        raise ReadTimeoutError(endpoint_url=request.url)

    faults = Faults()
    faults.fail(lambda r: region_of(r) == "us-west-2", timeout)
    result = run(fetcher(faults))
    assert (
        set(result.regions_failed) == {"us-west-2"}
        and "ReadTimeoutError" in result.regions_failed["us-west-2"]
    )
    previous_doc = json.loads(SNAPSHOT_FILE.read_text())
    report = refresh([_Fixed(result)], load_catalog(), previous_doc, now=NOW)
    kept = [o for o in report.doc["offers"] if o["cloud"] == "aws" and o["region"] == "us-west-2"]
    before = [o for o in previous_doc["offers"] if o["cloud"] == "aws" and o["region"] == "us-west-2"]
    assert len(kept) == len(before) and all(o["stale"] for o in kept)
    assert "aws:us-west-2" in report.stale_regions and report.useful
    fresh = [o for o in report.doc["offers"] if o["cloud"] == "aws" and o["region"] == "us-east-1"]
    assert fresh and all(o["as_of"] == "2026-12-02" and not o.get("stale") for o in fresh)
    gcp_before = [o for o in previous_doc["offers"] if o["cloud"] == "gcp"]
    assert [o for o in report.doc["offers"] if o["cloud"] == "gcp"] == gcp_before  # untouched


def test_spot_failing_in_a_region_keeps_its_availability_and_on_demand_prices(env: dict[str, str]) -> None:
    faults = Faults()
    faults.fail(
        lambda r: operation(r) == "DescribeSpotPriceHistory" and region_of(r) == "us-west-2",
        lambda r: error_response(r, 503, "Unavailable"),
    )
    result = run(fetcher(faults))
    assert not result.regions_failed and "us-west-2" in result.regions_ok
    west = [o for o in result.offers if o["region"] == "us-west-2"]
    assert west and {o["market"] for o in west} == {"on-demand"}
    kept = {key for key in result.kept if key[0] == "us-west-2"}
    assert kept and all(market == "spot" for _, _, market in kept)
    assert any("us-west-2: spot prices failed" in note for note in result.notes)
    assert any(o["market"] == "spot" and o["region"] == "us-east-1" for o in result.offers)


def test_a_permission_error_in_one_region_stops_the_refresh_without_the_queued_calls(
    env: dict[str, str],
) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    asked: list[str] = []
    released = threading.Event()

    def offerings(request: Any) -> bool:
        if operation(request) != "DescribeInstanceTypeOfferings":
            return False
        asked.append(region_of(request))
        if asked[-1] != "us-east-1":
            released.wait(10)  # a call in flight when the refresh stops
        return True

    faults = Faults()
    faults.fail(offerings, lambda r: error_response(r, 403, "UnauthorizedOperation"))
    regions = ["us-east-1", "us-east-2", "us-west-1", "us-west-2", "eu-west-1", "eu-central-1"]
    pool = ThreadPoolExecutor(1)
    try:
        with pytest.raises(AuthError, match="ec2:DescribeInstanceTypeOfferings"):
            fetcher(faults).fetch(regions, pool, lambda _: None)
    finally:
        released.set()
        pool.shutdown(wait=True)
    # at most the call already in flight besides the failing one; the queued ones were cancelled
    assert asked[0] == "us-east-1" and len(asked) <= 2


def test_nothing_fetched_is_not_useful(env: dict[str, str]) -> None:
    from botocore.exceptions import ReadTimeoutError

    def timeout(request: Any) -> Any:
        raise ReadTimeoutError(endpoint_url=request.url)

    faults = Faults()
    faults.fail(lambda r: True, timeout)
    result = run(fetcher(faults))
    assert set(result.regions_failed) == set(REGIONS)
    report = refresh([_Fixed(result)], load_catalog(), json.loads(SNAPSHOT_FILE.read_text()), now=NOW)
    assert not report.useful


def test_price_moves_are_kept_and_reported(env: dict[str, str], servers: tuple[str, PricingServer]) -> None:
    _, pricing = servers
    original = pricing.prices[("p4d.24xlarge", "us-east-1")]
    pricing.prices[("p4d.24xlarge", "us-east-1")] = original * 10
    try:
        result = run(fetcher(), ["us-east-1"])
    finally:
        pricing.prices[("p4d.24xlarge", "us-east-1")] = original
    report = refresh([_Fixed(result)], load_catalog(), json.loads(SNAPSHOT_FILE.read_text()), now=NOW)
    assert any(
        m.startswith("aws p4d.24xlarge us-east-1 on-demand: $21.96/h -> $219.6/h") for m in report.price_moves
    )
    kept = [
        o
        for o in report.doc["offers"]
        if o["instance_type"] == "p4d.24xlarge" and o["region"] == "us-east-1" and o["market"] == "on-demand"
    ]
    assert kept[0]["hourly_usd"] == pytest.approx(original * 10)


class _Fixed:
    """A fetcher that returns a result computed earlier (to test the merge on its own)."""

    cloud = "aws"

    def __init__(self, result: Any) -> None:
        self.result = result

    def fetch(self, regions: Any, pool: Any, progress: Any) -> Any:
        return self.result


def test_cli_refresh_writes_a_checked_catalog_that_plan_uses(
    env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    out = tmp_path / "catalog.json"
    code = main(
        [
            *("catalog", "refresh", "--cloud", "aws", "--regions", *REGIONS),
            *("--out", str(out), "--no-placement-scores"),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    # with credentials: per-zone spot from the API, interruption buckets from the public advisor
    rows = json.loads(out.read_text())["spot_interruption"]
    assert "AWS_SPOT_ADVISOR" in {e["source"] for e in rows if e["region"] in REGIONS}
    assert "aws: 2 regions refreshed, 0 failed" in printed.out and f"wrote {out}" in printed.out
    catalog = read_catalog_file(out, require_checksum=True)
    assert catalog.source.startswith("refresh aws")
    assert not list(tmp_path.glob(".catalog-*"))  # the temp file was renamed, not left behind
    code = main(
        [
            "plan",
            str(Path(__file__).parent.parent / "examples" / "guanaco-65b.yaml"),
            "--catalog",
            str(out),
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["catalog"]["path"] == str(out)
    chosen = doc["choice"]
    if chosen["cloud"] == "aws" and chosen["region"] in REGIONS:
        assert chosen["source"] in ("AWS_PRICE_LIST", "AWS_SPOT_HISTORY")


def test_cli_refresh_auth_error_exit_code(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code = main(
        [
            *("catalog", "refresh", "--cloud", "aws", "--aws-source", "account"),
            *("--regions", "us-east-1", "--out", str(tmp_path / "c.json")),
        ]
    )
    err = capsys.readouterr().err
    assert code == 7 and "no credentials" in err and not (tmp_path / "c.json").exists()
    assert os.environ.get("AWS_ENDPOINT_URL_EC2")


def test_cli_refresh_failing_credential_provider_is_one_line_not_a_traceback(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    config = tmp_path / "config"
    config.write_text("[profile broken]\ncredential_process = /bin/false\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "broken")
    code = main(
        ["catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", "--out", str(tmp_path / "c.json")]
    )
    out, err = capsys.readouterr()
    assert code == 6 and "Traceback" not in out + err
    assert "us-east-1" in out and "CredentialRetrievalError" in out  # why the region failed
    assert not (tmp_path / "c.json").exists()


def test_corrupt_cache_is_ignored_with_a_warning(tmp_path: Path) -> None:
    from catalog.store import resolve

    doc = json.loads(SNAPSHOT_FILE.read_text())
    doc["as_of"] = "2026-12-05"
    cache = write_catalog(doc, tmp_path / "catalog.json")
    now = datetime(2026, 12, 6, tzinfo=UTC)
    assert resolve(None, now=now, cache_path=cache).kind == "cache"
    text = cache.read_text().replace('"hourly_usd": 55.04', '"hourly_usd": 5.04', 1)
    cache.write_text(text)
    resolved = resolve(None, now=now, cache_path=cache)
    assert resolved.kind == "snapshot" and "checksum mismatch" in (resolved.warning or "")
    cache.write_text(cache.read_text()[:1000])  # a partial write
    resolved = resolve(None, now=now, cache_path=cache)
    assert resolved.kind == "snapshot" and "not a readable catalog" in (resolved.warning or "")


def test_cache_is_used_only_when_newer_and_fresh(tmp_path: Path) -> None:
    from catalog.store import resolve
    from selector.catalog import CatalogError

    doc = json.loads(SNAPSHOT_FILE.read_text())
    doc["as_of"] = "2026-12-05"
    cache = write_catalog(doc, tmp_path / "catalog.json")
    assert (
        resolve(None, now=datetime(2026, 12, 20, tzinfo=UTC), cache_path=cache).kind == "snapshot"
    )  # too old
    doc["as_of"] = "2026-11-01"
    write_catalog(doc, cache)
    older = resolve(None, now=datetime(2026, 12, 3, tzinfo=UTC), cache_path=cache)
    assert older.kind == "snapshot" and "older than the snapshot" in (older.warning or "")
    assert resolve("snapshot", cache_path=cache).kind == "snapshot"
    with pytest.raises(CatalogError):
        resolve("cache", cache_path=tmp_path / "missing.json")


def test_cache_dir_follows_platformdirs(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from platformdirs import user_cache_dir

    from catalog.store import cache_dir

    monkeypatch.delenv("GPUFIT_CACHE_DIR", raising=False)
    for xdg in (None, "/tmp/xdg-cache"):
        if xdg is None:
            monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert cache_dir() == Path(user_cache_dir("gpufit", appauthor=False)), sys.platform
