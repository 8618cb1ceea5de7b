"""AWS prices without an account: the public Price List bulk files, the public spot feed and the
Spot Instance Advisor, against local servers in their recorded shapes (``tests.fakes.aws_public``);
each cloud's refresh independent of the other's credentials; spot placement scores with
credentials (botocore Stubber: moto implements no GetSpotPlacementScores)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
from botocore.stub import Stubber

from catalog.aws_public import (
    SOURCE_ADVISOR,
    SOURCE_BULK,
    SOURCE_SPOT_FEED,
    AwsPublicFetcher,
    default_regions,
    parse_price_file,
)
from catalog.aws_scores import OPERATION, placement_scores, request_groups
from catalog.refresh import FetchResult, refresh
from catalog.store import read_catalog_file
from cloudapi.aws import AwsApi
from cloudapi.calls import CallCounter
from cloudapi.lean_botocore import refresh_session
from cloudapi.public_http import PublicHttp
from cloudapi.retry import RetryPolicy
from selector.catalog import SNAPSHOT_FILE, catalog_from_doc, load_catalog
from selector.obtainability import obtainability
from tests.fakes.aws_public import PUBLISHED, PublicAwsServer, price_row, region_file

REGIONS = ["us-east-1", "us-east-2"]
TODAY = date(2026, 12, 4)
NO_SLEEP = RetryPolicy(sleep=lambda _: None)
SNAPSHOT_DOC = json.loads(SNAPSHOT_FILE.read_text())


@pytest.fixture
def public(monkeypatch: pytest.MonkeyPatch) -> Iterator[PublicAwsServer]:
    with PublicAwsServer(REGIONS) as server:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        yield server


def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)


def fetch(regions: list[str] | None = REGIONS, counter: CallCounter | None = None) -> FetchResult:
    counter = counter or CallCounter()
    fetcher = AwsPublicFetcher(
        SNAPSHOT_DOC, counter=counter, http=PublicHttp(counter, NO_SLEEP), today=lambda: TODAY
    )
    with ThreadPoolExecutor(8) as pool:
        return fetcher.fetch(regions, pool, lambda _: None)


def test_on_demand_prices_come_from_the_bulk_files_filtered_as_the_documented_rows(
    public: PublicAwsServer,
) -> None:
    counter = CallCounter()
    result = fetch(counter=counter)
    assert result.regions_ok == set(REGIONS) and not result.regions_failed
    on_demand = {(o["instance_type"], o["region"]): o for o in result.offers if o["market"] == "on-demand"}
    expected = {(n, r): usd for r, prices in public.on_demand.items() for n, usd in prices.items()}
    # Windows, dedicated, reserved, unused-reservation and pre-installed-software rows all skipped
    assert {k: o["hourly_usd"] for k, o in on_demand.items()} == pytest.approx(expected)
    first = next(iter(on_demand.values()))
    assert (first["source"], first["as_of"], first["zone"]) == (SOURCE_BULK, PUBLISHED[:10], None)
    # the zones the previous catalog knew for the type in the region
    p4d = on_demand[("p4d.24xlarge", "us-east-2")]
    assert p4d["zones"] == ["use2-az1", "use2-az2"]
    notes = " ".join(result.notes)
    assert "priced $0 on demand in the Price List (not sold on demand): p5e.48xlarge" in notes
    assert "g7e.2xlarge" in notes and "m5.large" not in notes
    # index + one file per region + the spot feed + the advisor; GovCloud and China left out
    assert counter.count == 1 + len(REGIONS) + 2 == result.calls
    assert not any("us-gov" in p or "cn-north" in p for p in public.requests)


def test_spot_prices_are_region_level_from_the_public_feed(public: PublicAwsServer) -> None:
    result = fetch()
    spot = {(o["instance_type"], o["region"]): o for o in result.offers if o["market"] == "spot"}
    assert spot and all(o["zone"] is None and o["source"] == SOURCE_SPOT_FEED for o in spot.values())
    assert all(o["as_of"] == TODAY.isoformat() for o in spot.values())
    for key, o in spot.items():
        assert o["hourly_usd"] == pytest.approx(round(public.spot[(key[1], key[0])], 4))
    assert ("g4ad.xlarge", "us-east-1") not in spot  # "N/A*" is no price


def test_interruption_buckets_come_from_the_spot_instance_advisor(public: PublicAwsServer) -> None:
    result = fetch()
    rows = result.spot_interruption
    assert rows is not None and {r["source"] for r in rows} == {SOURCE_ADVISOR}
    buckets = {(r["region"], r["instance_type"]): r["bucket"] for r in rows}
    assert buckets[("us-east-2", "g6e.xlarge")] == "<5%"  # r = 0 on the advisor's ranges
    assert all(b == ">20%" for (_, name), b in buckets.items() if not name.startswith("g6e."))
    assert {r for r, _ in buckets} <= set(REGIONS)


def test_gzip_and_retries_and_a_cut_off_body(public: PublicAwsServer) -> None:
    public.gzip = True
    east = public.file_path("us-east-1")
    public.fail[east] = 2
    public.truncate[public.file_path("us-east-2")] = 1
    result = fetch()
    assert result.regions_ok == set(REGIONS)
    assert public.requests.count(east) == 3
    baseline = {(o["instance_type"], o["region"], o["market"]): o["hourly_usd"] for o in result.offers}
    public.gzip = False
    again = fetch()
    assert baseline == {(o["instance_type"], o["region"], o["market"]): o["hourly_usd"] for o in again.offers}


def test_a_region_that_fails_for_good_keeps_its_previous_offers_marked_stale(public: PublicAwsServer) -> None:
    public.fail[public.file_path("us-east-2")] = 99
    counter = CallCounter()
    fetcher = AwsPublicFetcher(
        SNAPSHOT_DOC, counter=counter, http=PublicHttp(counter, NO_SLEEP), today=lambda: TODAY
    )
    report = refresh([fetcher], load_catalog(), SNAPSHOT_DOC, regions=REGIONS)
    assert "us-east-2" in report.results[0].regions_failed
    kept = [o for o in report.doc["offers"] if o["cloud"] == "aws" and o["region"] == "us-east-2"]
    assert kept and all(o.get("stale") for o in kept)
    fresh = [o for o in report.doc["offers"] if o["cloud"] == "aws" and o["region"] == "us-east-1"]
    assert fresh and {o["source"] for o in fresh} == {SOURCE_BULK, SOURCE_SPOT_FEED}
    assert report.doc["price_rules"] == 1
    catalog_from_doc(report.doc, "merged")  # it loads


def test_a_price_file_without_the_documented_columns_is_refused() -> None:
    text = region_file("us-east-1", {"g6e.xlarge": 1.861}).replace("CapacityStatus", "Capacity")
    with pytest.raises(ValueError, match="lacks the columns CapacityStatus"):
        parse_price_file(iter(text.splitlines(keepends=True)), {"g6e.xlarge"})
    row = price_row("g6e.xlarge", "us-east-1", 1.861)
    assert row.count('"') % 2 == 0 and ",," in row  # empty fields bare, as AWS writes them


def test_refresh_never_re_adds_an_offer_its_type_is_not_sold_as() -> None:
    """A fetcher that returns an a3-highgpu-4g on-demand price (Google's API lists one) and a
    p5e.48xlarge on-demand one: the merged catalog drops both, and says so."""
    result = FetchResult(cloud="gcp", regions_ok={"us-east4"})
    doc_types = {(t["cloud"], t["name"]): t for t in SNAPSHOT_DOC["instance_types"]}
    result.instance_types = [doc_types[("gcp", "a3-highgpu-4g")]]
    result.offers = [
        {
            "cloud": "gcp",
            "instance_type": "a3-highgpu-4g",
            "region": "us-east4",
            "zone": None,
            "zones": ["us-east4-a"],
            "market": market,
            "hourly_usd": usd,
            "source": "SC_GCP8",
            "as_of": "2026-12-04",
        }
        for market, usd in (("on-demand", 43.92), ("spot", 10.1))
    ]

    class Fixed:
        cloud = "gcp"

        def fetch(self, *_: Any) -> FetchResult:
            return result

    report = refresh([Fixed()], load_catalog(), SNAPSHOT_DOC)
    markets = {
        o["market"]
        for o in report.doc["offers"]
        if (o["instance_type"], o["region"]) == ("a3-highgpu-4g", "us-east4")
    }
    assert markets == {"spot"}
    assert report.rules["not-sold"] >= 1 and any("price rules:" in line for line in report.lines())


def test_cli_refresh_without_any_account_reads_the_public_files(
    public: PublicAwsServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No AWS credentials and no GCP project (defect 6): AWS is refreshed from its public files,
    GCP is skipped with the reason, the exit status is 0, and plans use the result."""
    from cli.main import main

    no_aws_credentials(monkeypatch, tmp_path)
    out = tmp_path / "catalog.json"
    code = main(["catalog", "refresh", "--regions", *REGIONS, "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "gcp: not refreshed (no GCP project: set GOOGLE_CLOUD_PROJECT or pass --project)" in printed.out
    assert "aws: 2 regions refreshed, 0 failed" in printed.out and f"wrote {out}" in printed.out
    catalog = read_catalog_file(out, require_checksum=True)
    fresh = [o for o in catalog.offers if o.cloud == "aws" and o.region in REGIONS]
    assert fresh and {o.source for o in fresh} == {SOURCE_BULK, SOURCE_SPOT_FEED}
    # the other regions and GCP keep the snapshot's offers
    assert any(o.cloud == "gcp" for o in catalog.offers)
    assert (
        main(
            [
                "plan",
                str(Path(__file__).parent.parent / "examples" / "llama70b-chat.yaml"),
                "--catalog",
                str(out),
            ]
        )
        == 0
    )


def test_cli_refresh_of_a_cloud_named_without_its_credentials_fails_the_others_still_run(
    public: PublicAwsServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cli.main import main

    no_aws_credentials(monkeypatch, tmp_path)
    out = tmp_path / "catalog.json"
    code = main(
        ["catalog", "refresh", "--cloud", "aws", "--cloud", "gcp", "--regions", *REGIONS, "--out", str(out)]
    )
    printed = capsys.readouterr()
    assert code == 7 and out.exists()  # AWS written; GCP, asked for by name, could not run
    assert "gcp: not refreshed" in printed.out
    code = main(["catalog", "refresh", "--cloud", "gcp", "--out", str(tmp_path / "g.json")])
    assert code == 7 and "no GCP project" in capsys.readouterr().err
    code = main(
        [
            "catalog",
            "refresh",
            "--cloud",
            "aws",
            "--aws-source",
            "account",
            "--regions",
            "us-east-1",
            "--out",
            str(tmp_path / "a.json"),
        ]
    )
    assert code == 7 and "no credentials" in capsys.readouterr().err


# ------------------------------------------------------------------ placement scores (credentials)


class StubSession:
    """A session whose EC2 client answers from a botocore Stubber (moto implements no
    GetSpotPlacementScores); the client is built from the refresh session's cut of the model."""

    def __init__(self) -> None:
        self.client_ = refresh_session().client(
            "ec2", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
        )
        self.stub = Stubber(self.client_)

    def client(self, service: str, region_name: str, config: Any = None) -> Any:
        return self.client_


def test_placement_scores_ask_per_gpu_count_class_and_are_stored_per_zone() -> None:
    types = [t for t in SNAPSHOT_DOC["instance_types"] if t["cloud"] == "aws"]
    groups = request_groups(types)
    assert len(groups) == 3 and all(len(g) >= 3 for g in groups)
    assert "p5.4xlarge" in groups[0] and "g6e.12xlarge" in groups[1] and "p6-b200.48xlarge" in groups[2]
    session = StubSession()
    for names in groups:
        session.stub.add_response(
            "get_spot_placement_scores",
            {"SpotPlacementScores": [{"Region": "us-east-1", "AvailabilityZoneId": "use1-az6", "Score": 3}]},
            {
                "InstanceTypes": names,
                "TargetCapacity": 1,
                "TargetCapacityUnitType": "units",
                "SingleAvailabilityZone": True,
                "RegionNames": REGIONS,
                "MaxResults": 1000,
            },
        )
    api = AwsApi(session, CallCounter(), NO_SLEEP)
    with session.stub:
        rows, notes = placement_scores(api, "us-east-1", types, REGIONS, TODAY.isoformat())
    session.stub.assert_no_pending_responses()
    assert len(rows) == 3 and notes == ["3 spot placement scores (per zone, per GPU-count class of types)"]
    assert rows[2] == {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "use1-az6",
        "instance_types": groups[2],
        "score": 3,
        "target_capacity": 1,
        "source": "AWS_SPOT_PLACEMENT_SCORE",
        "as_of": TODAY.isoformat(),
    }


def test_a_refused_placement_score_permission_is_a_note_not_a_failure() -> None:
    session = StubSession()
    session.stub.add_client_error("get_spot_placement_scores", "UnauthorizedOperation", "not allowed", 403)
    types = [t for t in SNAPSHOT_DOC["instance_types"] if t["cloud"] == "aws"]
    with session.stub:
        rows, notes = placement_scores(
            AwsApi(session, CallCounter(), NO_SLEEP), "us-east-1", types, REGIONS, "x"
        )
    assert rows == [] and notes[0].startswith("spot placement scores skipped:")
    assert OPERATION in notes[0]


def test_a_score_gives_its_zones_spot_offers_their_obtainability() -> None:
    doc = json.loads(SNAPSHOT_FILE.read_text())
    types = ["p6-b200.48xlarge", "p5.48xlarge", "p5en.48xlarge"]
    doc["spot_placement_scores"] = [
        {"cloud": "aws", "region": "us-east-1", "zone": "use1-az6", "instance_types": types, "score": 8},
        # a request of fewer than three types: "the returned placement score will always be low"
        {"cloud": "aws", "region": "us-east-2", "zone": "use2-az1", "instance_types": types[:1], "score": 1},
    ]
    catalog = catalog_from_doc(doc, "scored")
    b200 = {
        (o.zone or o.region): o for o in catalog.offers if o.instance.name == types[0] and o.market == "spot"
    }
    scored = b200["us-east-1"]  # region-level, known in use1-az6 only: that zone's score
    assert scored.placement_score == 8
    obt = obtainability(scored)
    # the group's score caps the type's own estimate, never lifts it (review of issue 25, finding 1)
    assert (obt.level, obt.estimated) == ("very low", True) and obt.p < 0.8
    assert "group placement score 8/10 (a cap, never a raise)" in obt.reasons
    assert b200["use2-az1"].placement_score is None  # ignored: asked for one type
    assert obtainability(b200["use2-az1"]).level == "very low"
    bad = {**doc, "spot_placement_scores": [{**doc["spot_placement_scores"][0], "score": 11}]}
    with pytest.raises(ValueError, match="score must be a whole number from 1 to 10"):
        catalog_from_doc(bad, "bad")


def test_a_refresh_without_regions_reads_only_the_regions_the_catalog_has_aws_offers_in(
    public: PublicAwsServer,
) -> None:
    """Each region's EC2 file is hundreds of MB: by default only the commercial regions where
    the catalog has AWS offers are read, and the summary says how many of how many."""
    doc = {**SNAPSHOT_DOC, "offers": [o for o in SNAPSHOT_DOC["offers"] if o.get("region") != "us-east-2"]}
    counter = CallCounter()
    fetcher = AwsPublicFetcher(doc, counter=counter, http=PublicHttp(counter, NO_SLEEP), today=lambda: TODAY)
    with ThreadPoolExecutor(8) as pool:
        result = fetcher.fetch(None, pool, lambda _: None)
    assert result.regions_ok == {"us-east-1"}
    assert counter.count == 1 + 1 + 2  # index, us-east-1's file, spot feed, advisor
    assert not any("us-east-2" in p for p in public.requests if "/offers/" in p and "index.json" not in p)
    assert (
        "read the price files of the 1 region(s) the catalog has AWS offers in, of 2 commercial"
        in " ".join(result.notes)
    )
    # an empty catalog: every commercial region of the index
    assert default_regions({"us-east-1": "a", "eu-west-1": "b", "us-gov-west-1": "c"}, set()) == [
        "eu-west-1",
        "us-east-1",
    ]


def test_each_public_file_logs_its_content_length(public: PublicAwsServer) -> None:
    """Review i25f nit 7: the refresh measures what it downloads: every file's Content-Length as
    its server sent it (gzip: the compressed size), kept by URL and logged as it arrives."""
    lines: list[str] = []
    counter = CallCounter()
    http = PublicHttp(counter, NO_SLEEP, log=lines.append)
    fetcher = AwsPublicFetcher(SNAPSHOT_DOC, counter=counter, http=http, today=lambda: TODAY)
    with ThreadPoolExecutor(8) as pool:
        fetcher.fetch(REGIONS, pool, lambda _: None)
    region_urls = [u for u in http.sizes if any(u.endswith(public.file_path(r)) for r in REGIONS)]
    assert len(region_urls) == len(REGIONS)
    for url in region_urls:
        assert http.sizes[url] == len(public.body(urlsplit(url).path) or b"") > 0
        size = http.sizes[url]
        assert f"{url}: {size:,} bytes (Content-Length), {http.received[url]:,} received" in lines
        assert http.received[url] == size  # the fake sends what it announces
    assert len(lines) == counter.count == len(http.sizes)  # one line per GET, index and feeds included


def test_a_retried_file_logs_its_size_once_after_it_was_read() -> None:
    """Review i25g nit 9: a file that fails once and then arrives prints one line, with the
    bytes received beside the announced Content-Length."""
    import io
    import urllib.error

    calls: list[str] = []

    class Response(io.BytesIO):
        headers: ClassVar[dict[str, str]] = {"Content-Length": "12"}

    def opener(request: object, timeout: float) -> Response:
        calls.append("get")
        if len(calls) == 1:
            raise urllib.error.URLError("reset")
        return Response(b'{"ok": true}')

    lines: list[str] = []
    http = PublicHttp(CallCounter(), NO_SLEEP, opener=opener, log=lines.append)
    assert http.json("https://example.com/f.json") == {"ok": True}
    assert calls == ["get", "get"]
    assert lines == ["https://example.com/f.json: 12 bytes (Content-Length), 12 received"]


def test_a_missing_or_malformed_content_length_is_said_not_guessed() -> None:
    from cloudapi.public_http import content_length, size_line

    assert content_length({"Content-Length": "2735507"}) == 2735507
    assert content_length({}) is None and content_length({"Content-Length": "x"}) is None
    assert content_length({"Content-Length": "-1"}) is None
    assert size_line("https://h/f", None) == "https://h/f: no Content-Length (streamed)"
    assert size_line("https://h/f", 922078) == "https://h/f: 922,078 bytes (Content-Length)"
    assert size_line("https://h/f", None, 5) == "https://h/f: no Content-Length (streamed), 5 received"


def test_cli_refresh_prints_each_files_size(
    public: PublicAwsServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cli.main import main

    no_aws_credentials(monkeypatch, tmp_path)
    assert (
        main(
            ["catalog", "refresh", "--cloud", "aws", "--regions", *REGIONS, "--out", str(tmp_path / "c.json")]
        )
        == 0
    )
    err = capsys.readouterr().err
    for region in REGIONS:
        assert re.search(rf"gpufit: aws: \S*/{region}/\S*: [\d,]+ bytes \(Content-Length\)", err), err
