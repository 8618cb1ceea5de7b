"""A local stand-in for AWS's public price files, in their recorded shapes, served over HTTP:

- the EC2 region index (``/offers/v1.0/aws/AmazonEC2/current/region_index.json``: ``regions.
  <code>.currentVersionUrl``) and each region's CSV price file: five metadata rows, then the
  header of a real AmazonEC2 file of 2025-09-12 (as quoted in a public repository's notes on
  the Bulk API, every column in order), then one row per price, quoted as AWS quotes them
  (empty fields bare);
- the spot feed behind the EC2 Spot pricing page (``{"vers", "config": {"regions": [{"region",
  "instanceTypes": [{"type", "sizes": [{"size", "valueColumns": [{"name": "linux", "prices":
  {"USD"}}]}]}]}]}}``, values such as ``N/A*`` where there is no price);
- the Spot Instance Advisor's data (``ranges``, ``spot_advisor.<region>.Linux.<type>.{s, r}``).

Prices are the embedded snapshot's (on-demand; the cheapest zone's spot). Rows the refresh must
skip are mixed in: Windows, dedicated tenancy, reserved terms, unused-reservation capacity, a
non-GPU type, a GPU type the catalog does not declare, and p5e.48xlarge at $0. A region file can
be served gzip-compressed, fail (500) a number of times first, or be cut off part way.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from selector.catalog import load_catalog
from tests.fakes.http import FakeHandler, LocalServer

PUBLISHED = "2026-11-20T19:43:19Z"
VERSION = "20261120194319"
HEADER = (  # noqa: SIM905 (the header as one string, in its order)
    "SKU,OfferTermCode,RateCode,TermType,PriceDescription,EffectiveDate,StartingRange,EndingRange,Unit,"
    "PricePerUnit,Currency,RelatedTo,LeaseContractLength,PurchaseOption,OfferingClass,Product Family,"
    "serviceCode,Location,Location Type,Instance Type,Current Generation,Instance Family,vCPU,"
    "Physical Processor,Clock Speed,Memory,Storage,Network Performance,Processor Architecture,"
    "Storage Media,Volume Type,Max Volume Size,Max IOPS/volume,Max IOPS Burst Performance,"
    "Max throughput/volume,Provisioned,Tenancy,EBS Optimized,Operating System,License Model,Group,"
    "Group Description,Transfer Type,From Location,From Location Type,To Location,To Location Type,"
    "usageType,operation,AvailabilityZone,CapacityStatus,ClassicNetworkingSupport,"
    "Dedicated EBS Throughput,ECU,Elastic Graphics Type,Enhanced Networking Supported,From Region Code,"
    "GPU,GPU Memory,Instance,Instance Capacity - 10xlarge,Instance Capacity - 12xlarge,"
    "Instance Capacity - 16xlarge,Instance Capacity - 18xlarge,Instance Capacity - 24xlarge,"
    "Instance Capacity - 2xlarge,Instance Capacity - 32xlarge,Instance Capacity - 4xlarge,"
    "Instance Capacity - 8xlarge,Instance Capacity - 9xlarge,Instance Capacity - large,"
    "Instance Capacity - medium,Instance Capacity - metal,Instance Capacity - xlarge,instanceSKU,"
    "Intel AVX2 Available,Intel AVX Available,Intel Turbo Available,MarketOption,"
    "Normalization Size Factor,Physical Cores,Pre Installed S/W,Processor Features,Product Type,"
    "Region Code,Resource Type,serviceName,SnapshotArchiveFeeType,To Region Code,Volume API Name,"
    "VPCNetworkingSupport"
).split(",")


def _line(values: list[str]) -> str:
    """A CSV line as AWS writes it: every non-empty field quoted, empty ones bare."""
    return ",".join(f'"{v}"' if v != "" else "" for v in values)


def price_row(
    name: str,
    region: str,
    usd: float,
    *,
    term: str = "OnDemand",
    system: str = "Linux",
    tenancy: str = "Shared",
    capacity: str = "Used",
    software: str = "NA",
    gpus: int = 1,
    unit: str = "Hrs",
) -> str:
    row = dict.fromkeys(HEADER, "")
    row.update(
        {
            "SKU": f"SKU{abs(hash((name, region, term, system, tenancy, capacity))) % 10**10:010d}",
            "OfferTermCode": "JRTCKXETXF" if term == "OnDemand" else "38NPMPTW36",
            "TermType": term,
            "PriceDescription": f"${usd} per On Demand {system} {name} Instance Hour",
            "EffectiveDate": "2026-11-01",
            "StartingRange": "0",
            "EndingRange": "Inf",
            "Unit": unit,
            "PricePerUnit": f"{usd:.10f}",
            "Currency": "USD",
            "Product Family": "Compute Instance",
            "serviceCode": "AmazonEC2",
            "Location Type": "AWS Region",
            "Instance Type": name,
            "Tenancy": tenancy,
            "Operating System": system,
            "License Model": "No License required",
            "CapacityStatus": capacity,
            "GPU": str(gpus),
            "MarketOption": "OnDemand",
            "Pre Installed S/W": software,
            "Region Code": region,
            "serviceName": "Amazon Elastic Compute Cloud",
        }
    )
    return _line([row[h] for h in HEADER])


def region_file(region: str, prices: dict[str, float]) -> str:
    lines = [
        _line(["FormatVersion", "v1.0"]),
        _line(["Disclaimer", "This pricing list is for informational purposes only."]),
        _line(["Publication Date", PUBLISHED]),
        _line(["Version", VERSION]),
        _line(["OfferCode", "AmazonEC2"]),
        _line(HEADER),
    ]
    for name, usd in sorted(prices.items()):
        lines += [
            price_row(name, region, usd * 1.8, system="Windows"),
            price_row(name, region, usd * 1.1, tenancy="Dedicated"),
            price_row(name, region, usd * 0.6, term="Reserved"),
            price_row(name, region, usd, capacity="UnusedCapacityReservation"),
            price_row(name, region, usd * 1.3, software="SQL Web"),
            price_row(name, region, usd),
        ]
    lines.append(price_row("m5.large", region, 0.096, gpus=0))  # not a GPU type
    lines.append(price_row("g7e.2xlarge", region, 3.1, gpus=1))  # a GPU type the catalog lacks
    lines.append(price_row("p5e.48xlarge", region, 0.0, gpus=8))  # listed at $0: not on demand
    return "\n".join(lines) + "\n"


def snapshot_prices(regions: list[str]) -> tuple[dict[str, dict[str, float]], dict[tuple[str, str], float]]:
    """The snapshot's on-demand prices per region, and its cheapest spot price per region and type."""
    on_demand: dict[str, dict[str, float]] = {r: {} for r in regions}
    spot: dict[tuple[str, str], float] = {}
    for o in load_catalog().offers:
        if o.cloud != "aws" or o.region not in on_demand:
            continue
        if o.market == "on-demand":
            on_demand[o.region][o.instance.name] = max(
                on_demand[o.region].get(o.instance.name, 0.0), o.hourly_usd
            )
        else:
            key = (o.region, o.instance.name)
            spot[key] = min(spot.get(key, o.hourly_usd), o.hourly_usd)
    return on_demand, spot


def spot_feed(spot: dict[tuple[str, str], float]) -> dict[str, Any]:
    regions: dict[str, list[dict[str, Any]]] = {}
    for (region, name), usd in sorted(spot.items()):
        regions.setdefault(region, []).append(
            {
                "size": name,
                "valueColumns": [
                    {"name": "linux", "prices": {"USD": f"{usd:.4f}"}},
                    {"name": "mswin", "prices": {"USD": f"{usd * 2:.4f}"}},
                ],
            }
        )
    for sizes in regions.values():
        sizes.append({"size": "g4ad.xlarge", "valueColumns": [{"name": "linux", "prices": {"USD": "N/A*"}}]})
    return {
        "vers": 0.01,
        "config": {
            "rate": "perhr",
            "valueColumns": ["linux", "mswin"],
            "currencies": ["USD"],
            "regions": [
                {
                    "region": region,
                    "footnotes": {"*": "notAvailableForCCorCGPU"},
                    "instanceTypes": [{"type": "gpuCurrentGen", "sizes": sizes}],
                }
                for region, sizes in regions.items()
            ],
        },
    }


ADVISOR_RANGES = [
    {"index": 0, "label": "<5%", "dots": 0, "max": 5},
    {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
    {"index": 2, "label": "10-15%", "dots": 2, "max": 16},
    {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
    {"index": 4, "label": ">20%", "dots": 4, "max": 100},
]


def advisor(spot: dict[tuple[str, str], float]) -> dict[str, Any]:
    """Every spot pool's bucket: ``<5%`` for g6e, ``>20%`` for the rest (and a Windows row)."""
    rows: dict[str, dict[str, Any]] = {}
    for region, name in sorted(spot):
        r = 0 if name.startswith("g6e.") else 4
        rows.setdefault(region, {"Linux": {}, "Windows": {}})["Linux"][name] = {"s": 70, "r": r}
        rows[region]["Windows"][name] = {"s": 60, "r": 1}
    return {
        "instance_types": {},
        "ranges": ADVISOR_RANGES,
        "spot_advisor": rows,
        "global_rate": "<10%",
    }


class PublicAwsServer:
    """The region index, the region files, the spot feed and the advisor for ``regions`` (plus
    one region listed in the index with no file, and GovCloud and China entries)."""

    def __init__(self, regions: list[str]) -> None:
        self.regions = regions
        self.on_demand, self.spot = snapshot_prices(regions)
        self.requests: list[str] = []
        self.fail: dict[str, int] = {}  # path -> 500 answers still to give
        self.truncate: dict[str, int] = {}  # path -> bodies still to cut off half way
        self.gzip = False
        self._lock = threading.Lock()
        self._server = LocalServer(self._handler(), "fake-aws-public")

    def file_path(self, region: str) -> str:
        return f"/offers/v1.0/aws/AmazonEC2/{VERSION}/{region}/index.csv"

    def index(self) -> dict[str, Any]:
        listed = [*self.regions, "us-gov-west-1", "cn-north-1"]
        return {
            "formatVersion": "v1.0",
            "publicationDate": PUBLISHED,
            "regions": {
                r: {"regionCode": r, "currentVersionUrl": self.file_path(r).replace(".csv", ".json")}
                for r in listed
            },
        }

    def body(self, path: str) -> bytes | None:
        if path == "/offers/v1.0/aws/AmazonEC2/current/region_index.json":
            return json.dumps(self.index()).encode()
        if path == "/spot.json":
            return json.dumps(spot_feed(self.spot)).encode()
        if path == "/spot-advisor-data.json":
            return json.dumps(advisor(self.spot)).encode()
        for region in self.regions:
            if path == self.file_path(region):
                return region_file(region, self.on_demand[region]).encode()
        return None

    def _handler(self) -> type[FakeHandler]:
        server = self

        class Handler(FakeHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                with server._lock:
                    server.requests.append(path)
                    failing = server.fail.get(path, 0)
                    if failing:
                        server.fail[path] = failing - 1
                    cut = server.truncate.get(path, 0)
                    if cut:
                        server.truncate[path] = cut - 1
                if failing:
                    self.send_body(500, b"internal error", "text/plain")
                    return
                data = server.body(path)
                if data is None:
                    self.send_body(404, b"not found", "text/plain")
                    return
                headers = {}
                if server.gzip and "gzip" in self.headers.get("Accept-Encoding", ""):
                    data = gzip.compress(data)
                    headers["Content-Encoding"] = "gzip"
                if cut:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.close_connection = True
                    return
                self.send_body(200, data, "application/octet-stream", headers)

        return Handler

    @property
    def url(self) -> str:
        return self._server.url

    def env(self) -> dict[str, str]:
        return {
            "GPUFIT_AWS_PRICE_LIST_URL": self.url,
            "GPUFIT_AWS_SPOT_FEED_URL": f"{self.url}/spot.json",
            "GPUFIT_AWS_SPOT_ADVISOR_URL": f"{self.url}/spot-advisor-data.json",
        }

    def __enter__(self) -> PublicAwsServer:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


@contextmanager
def public_aws(regions: list[str]) -> Iterator[PublicAwsServer]:
    with PublicAwsServer(regions) as server:
        yield server


def read_csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))
