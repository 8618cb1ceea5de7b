"""AWS prices without an account: the public data files, read with no credentials.

- **On-demand**: the AWS Price List bulk offer files, the documented route ("Getting price list
  files manually", https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-the-aws-price-list-bulk-api-fetching-price-list-files-manually.html):
  the EC2 region index (``/offers/v1.0/aws/AmazonEC2/current/region_index.json``) names each
  region's current file; its CSV form ("The first five rows of the CSV file contain the metadata
  ... The sixth row has the column names", https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html)
  is streamed line by line (hundreds of MB a region, never held whole) and filtered as
  SkyPilot's and gpuhunt's fetchers filter it: on-demand terms, Linux, shared tenancy, no
  pre-installed software, capacity status Used, hourly USD. The file's publication date is
  the prices' ``as_of``. A type priced 0 there (p5e.48xlarge) is reported: it is not sold on
  demand. The smaller JSON behind the EC2 pricing page (b0.p.awsstatic.com) is undocumented
  and not used.
- **Spot**: the feed behind https://aws.amazon.com/ec2/spot/pricing/
  (``website.spot.ec2.aws.a2z.com/spot.json``), one Linux price per region and type. It is
  undocumented (AWS may change it without notice) and region-level, so these spot offers are
  region-level (``zone`` null): a zone's own price needs ``DescribeSpotPriceHistory``, which
  needs credentials. The feed carries no date: its prices are dated the day they are read.
- **Interruption frequency**: the Spot Instance Advisor's data
  (``spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json``), the share of a pool's
  instances interrupted in the past month, per region and type (Linux), as ``spot_interruption``.

Specs are not in these files in the form gpufit needs (the GPU model is not a Price List
column), so a public refresh prices the instance types the previous catalog declares; GPU
types the Price List lists beyond them are reported, to be added by a refresh with
credentials (``DescribeInstanceTypes``) or to the snapshot tables. Endpoints can be pointed at
local servers (``GPUFIT_AWS_PRICE_LIST_URL``, ``GPUFIT_AWS_SPOT_FEED_URL``,
``GPUFIT_AWS_SPOT_ADVISOR_URL``; plain http only on loopback).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from catalog.refresh import FetchResult
from cloudapi.calls import CallCounter
from cloudapi.public_http import PublicDataError, PublicHttp, check_url
from selector.catalog import INTERRUPTION_BUCKETS

PRICE_LIST_ENV = "GPUFIT_AWS_PRICE_LIST_URL"
SPOT_FEED_ENV = "GPUFIT_AWS_SPOT_FEED_URL"
SPOT_ADVISOR_ENV = "GPUFIT_AWS_SPOT_ADVISOR_URL"
PRICE_LIST_BASE = "https://pricing.us-east-1.amazonaws.com"
REGION_INDEX_PATH = "/offers/v1.0/aws/AmazonEC2/current/region_index.json"
SPOT_FEED = "https://website.spot.ec2.aws.a2z.com/spot.json"
SPOT_ADVISOR = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"

SOURCE_BULK = "AWS_PRICE_LIST_BULK"
SOURCE_SPOT_FEED = "AWS_SPOT_PRICE_FEED"
SOURCE_ADVISOR = "AWS_SPOT_ADVISOR"

NON_COMMERCIAL_PREFIXES = ("us-gov-", "cn-", "us-iso", "eusc-")
"""Region index entries an ordinary account cannot use (GovCloud, China, isolated, sovereign
partitions): left out unless asked for by name."""

ON_DEMAND_ROW = {
    "TermType": "OnDemand",
    "Operating System": "Linux",
    "Tenancy": "Shared",
    "CapacityStatus": "Used",
    "Unit": "Hrs",
    "Currency": "USD",
}
"""The columns a Linux on-demand price row must hold (as SkyPilot's ``fetch_aws.py`` and
gpuhunt's ``aws.py`` filter the same files); plus ``Pre Installed S/W`` empty or ``NA`` and, where
the file has the column, ``MarketOption`` ``OnDemand``."""
PREFILTER = tuple(f'"{v}"' for v in ("OnDemand", "Linux", "Shared", "Used"))
"""Quoted values a candidate line must contain before it is parsed (most lines do not)."""


@dataclass
class RegionPrices:
    """What one region's Price List file says of the types wanted."""

    published: str = ""  # YYYY-MM-DD of the file's "Publication Date"
    prices: dict[str, float] = field(default_factory=dict)
    zero: set[str] = field(default_factory=set)  # listed at $0: not sold on demand
    other_gpu_types: set[str] = field(default_factory=set)


def default_regions(files: dict[str, str], known: set[str]) -> list[str]:
    """The regions a refresh without ``--regions`` reads: the commercial regions of the index
    that the catalog has AWS offers in (all commercial ones when it has none). Each region's EC2
    file is large (not measured here: no network; third-party reports put us-east-1's CSV at
    ~295 MB, an AWS sample Lambda says the on-demand file is "huge >1GB"), so regions with no
    GPU offer are not read by default."""
    commercial = sorted(r for r in files if not r.startswith(NON_COMMERCIAL_PREFIXES))
    return [r for r in commercial if r in known] if known else commercial


def region_files(index: dict[str, Any], base: str) -> dict[str, str]:
    """Region code → the URL of its current CSV price file, from the EC2 region index
    (``regions.<code>.currentVersionUrl``, the JSON file's path; the CSV sits beside it)."""
    out: dict[str, str] = {}
    for code, entry in (index.get("regions") or {}).items():
        path = str((entry or {}).get("currentVersionUrl") or "")
        if path.endswith(".json"):
            out[str(code)] = base.rstrip("/") + path[: -len(".json")] + ".csv"
    return out


def parse_price_file(lines: Iterator[str], wanted: set[str]) -> RegionPrices:
    """Stream one region's CSV price file (five metadata rows, then the header, then a row per
    price) into the Linux on-demand hourly price of each wanted type."""
    out = RegionPrices()
    for _ in range(5):
        meta = next(csv.reader([next(lines, "")]), [])
        if len(meta) >= 2 and meta[0].strip().lower() == "publication date":
            out.published = meta[1].strip()[:10]
    header = next(csv.reader([next(lines, "")]), [])
    column = {name: i for i, name in enumerate(header)}
    missing = [name for name in (*ON_DEMAND_ROW, "PricePerUnit", "Instance Type") if name not in column]
    if missing:
        raise ValueError(f"the price file lacks the columns {', '.join(missing)}")
    checks = [(column[name], value) for name, value in ON_DEMAND_ROW.items()]
    type_at, price_at = column["Instance Type"], column["PricePerUnit"]
    software_at, market_at = column.get("Pre Installed S/W"), column.get("MarketOption")
    gpu_at = column.get("GPU")
    for line in lines:
        if not all(token in line for token in PREFILTER):
            continue
        row = next(csv.reader([line]), [])
        if len(row) < len(header) or any(row[i] != value for i, value in checks):
            continue
        if software_at is not None and row[software_at] not in ("", "NA"):
            continue
        if market_at is not None and row[market_at] not in ("", "OnDemand"):
            continue
        name = row[type_at]
        if name not in wanted:
            if gpu_at is not None and row[gpu_at].strip() not in ("", "0", "NA"):
                out.other_gpu_types.add(name)
            continue
        price = float(row[price_at])
        if price <= 0:
            out.zero.add(name)
        else:
            out.prices[name] = max(out.prices.get(name, 0.0), price)
    return out


def parse_spot_feed(doc: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(region, type) → the Linux spot price of the public feed (values such as ``N/A*``, and
    the ``$0`` it shows where it has no price, are left out)."""
    out: dict[tuple[str, str], float] = {}
    for region in (doc.get("config") or {}).get("regions") or []:
        code = str(region.get("region", ""))
        for family in region.get("instanceTypes") or []:
            for size in family.get("sizes") or []:
                for column in size.get("valueColumns") or []:
                    if column.get("name") != "linux":
                        continue
                    try:
                        usd = float((column.get("prices") or {}).get("USD", ""))
                    except ValueError:
                        continue
                    if usd > 0:
                        out[(code, str(size.get("size", "")))] = usd
    return out


def parse_advisor(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(region, type) → the interruption-frequency bucket of the Spot Instance Advisor (Linux):
    ``r`` indexes ``ranges``, whose labels are the advisor's buckets (``<5%`` … ``>20%``)."""
    labels = {int(r["index"]): str(r["label"]) for r in doc.get("ranges") or [] if "index" in r}
    out: dict[tuple[str, str], str] = {}
    for region, systems in (doc.get("spot_advisor") or {}).items():
        for name, entry in ((systems or {}).get("Linux") or {}).items():
            label = labels.get(int(entry.get("r", -1)))
            if label in INTERRUPTION_BUCKETS:
                out[(str(region), str(name))] = label
    return out


def interruption_rows(
    job: Future[Any], result: FetchResult, regions: set[str], names: set[str], today: str
) -> None:
    """The Spot Instance Advisor's answer (``job``: its JSON) as ``result.spot_interruption``
    rows for ``regions`` and ``names``, with its source; a failure is noted and the previous
    rows stay."""
    try:
        buckets = parse_advisor(job.result())
    except (PublicDataError, ValueError, AttributeError, TypeError) as err:
        result.notes.append(f"Spot Instance Advisor failed ({err}); previous interruption rows kept"[:300])
        return
    result.sources[SOURCE_ADVISOR] = AwsPublicFetcher.sources(today)[SOURCE_ADVISOR]
    result.spot_interruption = [
        {
            "cloud": "aws",
            "region": region,
            "instance_type": name,
            "bucket": bucket,
            "source": SOURCE_ADVISOR,
            "as_of": today,
        }
        for (region, name), bucket in sorted(buckets.items())
        if region in regions and name in names
    ]


def advisor_url() -> str:
    return _url(SPOT_ADVISOR_ENV, SPOT_ADVISOR)


def _url(env: str, default: str) -> str:
    return check_url(os.environ.get(env) or default, env)


class AwsPublicFetcher:
    """The AWS part of a catalog from AWS's public files (see the module doc)."""

    cloud = "aws"

    def __init__(
        self,
        previous: dict[str, Any],
        counter: CallCounter | None = None,
        http: PublicHttp | None = None,
        today: Callable[[], date] | None = None,
    ) -> None:
        """``previous``: the catalog document being refreshed: its AWS instance types are the
        ones priced, and the zones its offers list for a type in a region are kept."""
        self.counter = counter or CallCounter()
        self._http = http or PublicHttp(self.counter)
        self._today = today or (lambda: datetime.now(UTC).date())
        self._types = {t["name"]: t for t in previous.get("instance_types", []) if t.get("cloud") == "aws"}
        self._zones: dict[tuple[str, str], set[str]] = {}
        for offer in previous.get("offers", []):
            if offer.get("cloud") == "aws":
                zones = self._zones.setdefault((offer["instance_type"], offer["region"]), set())
                zones.update(offer.get("zones") or ([offer["zone"]] if offer.get("zone") else []))
        self._base = _url(PRICE_LIST_ENV, PRICE_LIST_BASE)
        self._spot_feed = _url(SPOT_FEED_ENV, SPOT_FEED)
        self._advisor = _url(SPOT_ADVISOR_ENV, SPOT_ADVISOR)

    def fetch(
        self, regions: list[str] | None, pool: Executor, progress: Callable[[str], None]
    ) -> FetchResult:
        start = self.counter.count
        today = self._today().isoformat()
        result = FetchResult(cloud="aws", sources=self.sources(today))
        result.notes.append(
            "read without credentials: on-demand from the Price List bulk files (dated by their "
            "publication), spot from the public feed (one price per region, no zone), interruption "
            "frequency from the Spot Instance Advisor"
        )
        progress("aws: the Price List's region index (public, no credentials)")
        try:
            files = region_files(self._http.json(self._base + REGION_INDEX_PATH), self._base)
        except (PublicDataError, ValueError) as err:
            result.regions_failed["*"] = f"AWS Price List region index: {err}"[:300]
            result.calls = self.counter.count - start
            return result
        if regions:
            wanted = list(regions)
        else:
            wanted = default_regions(files, {region for _, region in self._zones})
            result.notes.append(
                f"read the price files of the {len(wanted)} region(s) the catalog has AWS offers in, of "
                f"{sum(not r.startswith(NON_COMMERCIAL_PREFIXES) for r in files)} commercial regions "
                "(each file is large: a third party measured us-east-1's EC2 CSV at ~295 MB; "
                "--regions names others)"
            )
        spot_job = pool.submit(self._http.json, self._spot_feed)
        advisor_job = pool.submit(self._http.json, self._advisor)
        names = set(self._types)
        jobs: dict[str, Future[RegionPrices]] = {}
        for region in wanted:
            if region not in files:
                result.regions_failed[region] = "not in the AWS Price List's EC2 region index"
                continue
            jobs[region] = pool.submit(self._http.read, files[region], lambda ls: parse_price_file(ls, names))
        priced = self._collect(jobs, result, progress)
        spot = self._spot(spot_job, result, priced)
        self._interruptions(advisor_job, result, set(priced))
        self._assemble(result, priced, spot, today)
        result.calls = self.counter.count - start
        return result

    def _collect(
        self, jobs: dict[str, Future[RegionPrices]], result: FetchResult, progress: Callable[[str], None]
    ) -> dict[str, RegionPrices]:
        priced: dict[str, RegionPrices] = {}
        zero: set[str] = set()
        others: set[str] = set()
        for region, job in jobs.items():
            try:
                priced[region] = job.result()
            except (PublicDataError, ValueError) as err:
                result.regions_failed[region] = f"price file: {err}"[:300]
                progress(f"aws: {region} failed, keeping its previous data")
                continue
            result.regions_ok.add(region)
            zero |= priced[region].zero
            others |= priced[region].other_gpu_types
            progress(f"aws: {region} done")
        if zero:
            result.notes.append(
                f"priced $0 on demand in the Price List (not sold on demand): {', '.join(sorted(zero))}"
            )
        if others:
            listed = ", ".join(sorted(others)[:8]) + (" …" if len(others) > 8 else "")
            result.notes.append(
                f"{len(others)} GPU instance types in the Price List that the catalog does not declare "
                f"(their GPU model needs DescribeInstanceTypes, with credentials): {listed}"
            )
        return priced

    def _spot(
        self, job: Future[Any], result: FetchResult, priced: dict[str, RegionPrices]
    ) -> dict[tuple[str, str], float]:
        try:
            return parse_spot_feed(job.result())
        except (PublicDataError, ValueError, AttributeError, TypeError) as err:
            reason = f"public spot price feed: {err}"[:200]
            result.notes.append(f"spot prices failed ({reason}); kept previous")
            for region in priced:
                for name in self._types:
                    result.kept[(region, name, "spot")] = reason
            return {}

    def _interruptions(self, job: Future[Any], result: FetchResult, regions: set[str]) -> None:
        interruption_rows(job, result, regions, set(self._types), self._today().isoformat())

    def _assemble(
        self,
        result: FetchResult,
        priced: dict[str, RegionPrices],
        spot: dict[tuple[str, str], float],
        today: str,
    ) -> None:
        used: set[str] = set()
        for region, prices in sorted(priced.items()):
            as_of = prices.published or today
            for name in sorted(self._types):
                zones = sorted(self._zones.get((name, region), set()))
                od = prices.prices.get(name)
                if od:
                    used.add(name)
                    result.offers.append(_offer(name, region, zones, "on-demand", od, SOURCE_BULK, as_of))
                usd = spot.get((region, name))
                if usd and (od or zones):  # a spot price where the type is sold in the region
                    used.add(name)
                    result.offers.append(_offer(name, region, zones, "spot", usd, SOURCE_SPOT_FEED, today))
        result.instance_types = [self._types[n] for n in sorted(used)]

    @staticmethod
    def sources(today: str) -> dict[str, dict[str, str]]:
        return {
            SOURCE_BULK: {
                "title": "AWS Price List bulk offer file for AmazonEC2, one per region (CSV): Linux, shared "
                "tenancy, no pre-installed software, capacity status Used, on-demand hourly; as_of is "
                "the file's publication date",
                "url": "https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/"
                "using-the-aws-price-list-bulk-api-fetching-price-list-files-manually.html",
                "retrieved": today,
            },
            SOURCE_SPOT_FEED: {
                "title": "The Linux spot prices behind the EC2 Spot pricing page "
                "(website.spot.ec2.aws.a2z.com/spot.json; undocumented, one price per region and "
                "type, no zone)",
                "url": "https://aws.amazon.com/ec2/spot/pricing/",
                "retrieved": today,
            },
            SOURCE_ADVISOR: {
                "title": "AWS Spot Instance Advisor data (spot-advisor-data.json): interruption-frequency "
                "bucket per region and type, Linux",
                "url": "https://aws.amazon.com/ec2/spot/instance-advisor/",
                "retrieved": today,
            },
        }


def _offer(
    name: str, region: str, zones: list[str], market: str, price: float, source: str, as_of: str
) -> dict[str, Any]:
    """A region-level offer (``zone`` null) listing the zones the previous catalog knew."""
    return {
        "cloud": "aws",
        "instance_type": name,
        "region": region,
        "zone": None,
        "zones": zones,
        "market": market,
        "hourly_usd": round(price, 6),
        "source": source,
        "as_of": as_of,
        "confidence": "high",
    }
