"""Refresh AWS GPU instance specs, availability and prices with boto3.

First the GPU instance types (``describe_instance_types``, GPU families, GpuInfo) in one
region; then, all concurrently: per region, where each type is offered
(``describe_instance_type_offerings`` by availability zone), the region's zone names and IDs
(``describe_availability_zones``) and the current spot price per zone of the types offered
(``describe_spot_price_history`` from now); per batch of types, on-demand prices in the wanted
regions from the Price List API (``pricing.get_products``: Linux, shared tenancy, no
pre-installed software, capacity status Used), paced to the API's request quota.

Zones are written as AZ IDs (``use1-az6``), as in the embedded snapshot and everywhere else in
gpufit: EC2 answers offerings and spot prices by zone name (``us-east-1a``), which names a
different physical zone in each account, so names are mapped to IDs with the region's
``DescribeAvailabilityZones``; a region whose mapping cannot be had fails (its previous offers
are kept), so that names never reach the catalog. On-demand offers are region-level
(``zone`` null) listing in ``zones`` the AZ IDs that offer the type; spot offers are one per
zone (``zone`` = its AZ ID, ``zones`` = ``[zone]``), since spot prices differ by zone.

GPU names are normalised through the selector's GPU facts (which add bandwidth, FP8 and
NVLink, the facts the API lacks); a GPU not in the table is reported, never guessed.
Endpoints come from the standard AWS configuration (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_EC2``, ``AWS_ENDPOINT_URL_PRICING``): a local server needs no code path.
The default session reads cuts of botocore's data (``lean_botocore``: the EC2 model with the
calls made here, the endpoints of the services used), which make each regional client cheap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from datetime import UTC, date, datetime
from typing import Any

from catalog.aws_public import advisor_url, interruption_rows
from catalog.aws_scores import SOURCE as SCORE_SOURCE, SOURCE_KEY as SCORE_SOURCE_KEY, placement_scores
from catalog.refresh import FetchResult
from cloudapi.aws import PRICING_REGION, AwsApi
from cloudapi.calls import AuthError, CallCounter
from cloudapi.lean_botocore import refresh_session
from cloudapi.pacing import TokenBucket
from cloudapi.public_http import PublicHttp
from cloudapi.retry import RetryPolicy
from selector.catalog import GpuSpec, load_gpus

SOURCE_KEY_PRICING = "AWS_PRICE_LIST"
SOURCE_KEY_SPOT = "AWS_SPOT_HISTORY"
SOURCE_KEY_EC2 = "AWS_EC2_API"
ZONES_OPERATION = "DescribeAvailabilityZones"
PRICING_PAGE = 100
"""Products per Price List page (the API's maximum ``MaxResults``)."""
PRICING_QUERIES = 8
"""At most this many Price List queries for one refresh, so they can all start at once."""
GET_PRODUCTS_QUOTA = (10, 5.0)
"""GetProducts is throttled by a token bucket of 10 calls refilled at 5 a second, per account
and region (AWS Billing User Guide, "Using the AWS Price List Query API", Quotas:
https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-pelong.html, read
2026-12-02): calls are paced to it rather than throttled and retried."""
FILTER_VALUE_MAX = 1024
"""Longest Price List filter value (``Filter.Value``, max 1024 in the pricing API model)."""

GPU_FAMILIES = ["g*", "p*"]
"""Instance-type patterns that hold every NVIDIA GPU family on EC2; others are filtered by GpuInfo."""

FAMILY_GPU = {"p5en": "H200", "p5e": "H200"}
"""EC2 reports p5e/p5en GPUs as plain "NVIDIA" in some API versions: their GPU by family."""

NO_NVLINK_FAMILIES = frozenset({"g4dn", "g5", "g6", "g6e", "g5g", "g4ad"})
"""Families whose multi-GPU sizes join GPUs over PCIe only (AWS accelerated-computing docs)."""


def parse_gbps(text: str | None) -> float | None:
    """ "Up to 25 Gigabit", "3200 Gigabit", "100 Gigabit" → Gbit/s."""
    if not text:
        return None
    match = re.search(r"([0-9.]+)\s*Gigabit", text)
    return float(match.group(1)) if match else None


def normalise_gpu(gpus: dict[str, GpuSpec], name: str, memory_mib: int, family: str) -> GpuSpec | None:
    """The GPU facts entry for an EC2 GPU: by family where the API's name is wrong, else by
    name (or alias) and the memory the API reports (A100 comes in 40 and 80 GB)."""
    if family in FAMILY_GPU:
        return gpus[FAMILY_GPU[family]]
    lowered = name.lower()
    candidates = [g for g in gpus.values() if lowered in (g.name.lower(), *(a.lower() for a in g.aliases))]
    candidates += [
        g for g in gpus.values() if g.name.lower().startswith(lowered + "-") and g not in candidates
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda g: abs(g.memory_mib - memory_mib))


class AwsCatalogFetcher:
    """Fetches the AWS part of a catalog with a boto3 session."""

    cloud = "aws"

    def __init__(
        self,
        session: Any = None,
        counter: CallCounter | None = None,
        policy: RetryPolicy | None = None,
        today: Callable[[], date] | None = None,
        now: Callable[[], datetime] | None = None,
        scores: bool = True,
        advisor: PublicHttp | None = None,
    ) -> None:
        """``scores``: ask for spot placement scores (``catalog.aws_scores``); ``advisor``: read
        the public Spot Instance Advisor data with it (interruption frequencies)."""
        if session is None:
            session = refresh_session()
        self._session = session
        self.counter = counter or CallCounter()
        self._policy = policy or RetryPolicy()
        self._today = today or (lambda: datetime.now(UTC).date())
        self._now = now or (lambda: datetime.now(UTC))
        self._scores = scores
        self._advisor = advisor
        self._gpus = load_gpus()
        self._unknown: set[str] = set()  # GPU types the facts table lacks (added from worker threads)
        self._skipped: set[str] = set()  # fractional-GPU types
        self._api = AwsApi(
            session,
            self.counter,
            self._policy,
            validate_parameters=False,
            quotas={("pricing", "GetProducts"): TokenBucket(*GET_PRODUCTS_QUOTA)},
        )

    # -- fetch -------------------------------------------------------------------------------
    def regions(self) -> list[str]:
        ec2 = self._api.client("ec2", PRICING_REGION)
        answer = self._api.call(
            "ec2",
            "DescribeRegions",
            lambda: ec2.describe_regions(
                Filters=[{"Name": "opt-in-status", "Values": ["opt-in-not-required", "opted-in"]}]
            ),
        )
        return sorted(r["RegionName"] for r in answer["Regions"])

    def fetch(
        self, regions: list[str] | None, pool: Executor, progress: Callable[[str], None]
    ) -> FetchResult:
        """Specs once, in us-east-1 (where every GPU family is offered) when it is wanted, else in
        the first wanted region; then, concurrently, per region where each type is offered, the
        zone IDs and its spot prices, and per batch of types their on-demand prices."""
        start = self.counter.count
        result = FetchResult(cloud="aws")
        result.sources = self._sources()
        wanted = regions or self.regions()
        home = PRICING_REGION if PRICING_REGION in wanted else wanted[0]
        progress(f"aws: {len(wanted)} regions")
        try:
            # Credentials first (a provider such as SSO or assume-role builds its own client
            # through the session), then the first client; then the instance types are asked
            # for, and while that answer is awaited the other regions' clients are built:
            # building is CPU work, waiting is not. The instance types are asked for on a thread
            # of their own, not the pool, where another cloud's jobs may be queued ahead of
            # them, and submitted before the builds, so that their thread starts first (the
            # builds then compete with it for the GIL). A client that fails to build is built,
            # and fails, again where it is used.
            self._api.resolve_credentials()
            self._api.client("ec2", home)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpufit-aws-specs") as own:
                specs_job = own.submit(self._specs, home, None)
                for region in wanted:
                    pool.submit(self._api.client, "ec2", region)
                pool.submit(self._api.client, "pricing", PRICING_REGION)
                specs = specs_job.result()
        except AuthError:
            raise
        except Exception as error:
            reason = f"instance types in {home}: {type(error).__name__}: {error}"[:300]
            result.regions_failed = dict.fromkeys(wanted, reason)
            result.calls = self.counter.count - start
            return result
        # Everything else needs only the type names: prices, where each type is offered and
        # its spot prices, all at once (a type a region lacks simply has no spot rows there).
        names = sorted(specs)
        advisor_job = pool.submit(self._advisor.json, advisor_url()) if self._advisor is not None else None
        region_jobs = {r: pool.submit(self._region, r, names) for r in wanted}
        price_jobs = {
            tuple(batch): pool.submit(self._on_demand_prices, batch, wanted)
            for batch in pricing_batches(names, wanted)
        }
        try:
            offered, spot = self._collect_regions(region_jobs, result, progress)
            progress(f"aws: {len(specs)} GPU instance types; on-demand prices")
            prices = self._collect_prices(price_jobs, offered, result)
        except AuthError:
            pending: list[Future[Any]] = [*region_jobs.values(), *price_jobs.values()]
            for job in pending:
                job.cancel()  # the calls not yet started: they would only fail the same way
            raise
        self._assemble(result, offered, specs, spot, prices)
        if advisor_job is not None:
            typed = {t["name"] for t in result.instance_types}
            interruption_rows(advisor_job, result, set(offered), typed, self._today().isoformat())
        if self._scores:
            progress("aws: spot placement scores")
            scores, notes = placement_scores(
                self._api, home, result.instance_types, sorted(offered), self._today().isoformat()
            )
            result.placement_scores = scores
            result.notes.extend(notes)
        result.calls = self.counter.count - start
        return result

    def _region(self, region: str, names: list[str]) -> tuple[dict[str, set[str]], Any, dict[str, str]]:
        """Where each of ``names`` is offered in ``region``, the region's zone IDs by name,
        then the spot prices of the types offered there, one after the other on the region's
        one connection (a new HTTPS connection costs a TLS handshake and, in urllib3, a reload
        of the CA bundle); zones as AZ IDs. Spot failing is returned, not
        raised, so the region's availability still counts; the zone IDs failing fails the
        region, whose previous offers are then kept (never zone names in their place)."""
        by_name = self._offerings(region, names)
        if not by_name:
            return by_name, {}, {}
        ids = self._zone_ids(region)
        offered = {name: _zone_ids_of(zones, ids, region) for name, zones in by_name.items()}
        try:
            spot = self._spot(region, sorted(offered))
        except AuthError:
            raise
        except Exception as error:
            return offered, error, ids
        by_id = {(name, _zone_id(zone, ids, region)): usd for (name, zone), usd in spot.items()}
        return offered, by_id, ids

    def _zone_ids(self, region: str) -> dict[str, str]:
        """Zone name → AZ ID of every zone of ``region`` (``ec2:DescribeAvailabilityZones``)."""
        api = self._api
        ec2 = api.client("ec2", region)
        answer = api.call(
            "ec2",
            ZONES_OPERATION,
            lambda: ec2.describe_availability_zones(AllAvailabilityZones=True),
        )
        return {
            str(z["ZoneName"]): str(z["ZoneId"])
            for z in answer.get("AvailabilityZones", [])
            if z.get("ZoneName") and z.get("ZoneId")
        }

    def _collect_regions(
        self,
        jobs: dict[str, Future[tuple[dict[str, set[str]], Any, dict[str, str]]]],
        result: FetchResult,
        progress: Callable[[str], None],
    ) -> tuple[dict[str, dict[str, set[str]]], dict[str, dict[tuple[str, str], float]]]:
        """Availability and spot prices per region. A region whose availability fails after its
        retries is recorded in ``regions_failed`` and keeps its previous data; one whose spot
        prices fail keeps its previous spot offers, marked stale."""
        offered: dict[str, dict[str, set[str]]] = {}
        spot: dict[str, dict[tuple[str, str], float]] = {}
        for region, job in jobs.items():
            try:
                offered[region], spot_or_error, result.zone_ids[region] = job.result()
            except AuthError:
                raise
            except Exception as error:
                result.regions_failed[region] = f"{type(error).__name__}: {error}"[:300]
                progress(f"aws: {region} failed, keeping its previous data")
                continue
            if isinstance(spot_or_error, Exception):
                reason = f"{type(spot_or_error).__name__}: {spot_or_error}"[:200]
                for name in offered[region]:
                    result.kept[(region, name, "spot")] = reason
                result.notes.append(
                    f"{region}: spot prices failed ({type(spot_or_error).__name__}); kept previous"
                )
            else:
                spot[region] = spot_or_error
            progress(f"aws: {region} done")
        return offered, spot

    def _collect_prices(
        self,
        jobs: dict[tuple[str, ...], Future[dict[str, dict[str, float]]]],
        offered: dict[str, dict[str, set[str]]],
        result: FetchResult,
    ) -> dict[str, dict[str, float]]:
        """On-demand prices by type and region; a batch that fails keeps its previous prices."""
        prices: dict[str, dict[str, float]] = {}
        for batch, job in jobs.items():
            try:
                prices.update(job.result())
            except AuthError:
                raise
            except Exception as error:
                result.notes.append(
                    f"on-demand prices for {', '.join(batch)} failed ({type(error).__name__}); kept previous"
                )
                for region in offered:
                    for name in batch:
                        result.kept[(region, name, "on-demand")] = str(error)[:200]
        return prices

    def _specs(self, region: str, names: list[str] | None) -> dict[str, dict[str, Any]]:
        """GPU instance types described in ``region``: the GPU families, or the named types."""
        ec2 = self._api.client("ec2", region)
        args: dict[str, Any] = (
            {"InstanceTypes": names}
            if names
            else {"Filters": [{"Name": "instance-type", "Values": GPU_FAMILIES}], "MaxResults": 100}
        )
        specs: dict[str, dict[str, Any]] = {}
        for page in self._api.pages(ec2, "ec2", "DescribeInstanceTypes", "describe_instance_types", **args):
            for info in page.get("InstanceTypes", []):
                spec = self._instance_type(info)
                if spec is not None:
                    specs[spec["name"]] = spec
        return specs

    def _offerings(self, region: str, names: list[str]) -> dict[str, set[str]]:
        """Instance type → the availability zones (names) of ``region`` that offer it."""
        ec2 = self._api.client("ec2", region)
        zones: dict[str, set[str]] = {}
        for chunk in _chunks(names, 100):
            for page in self._api.pages(
                ec2,
                "ec2",
                "DescribeInstanceTypeOfferings",
                "describe_instance_type_offerings",
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": chunk}],
            ):
                for row in page.get("InstanceTypeOfferings", []):
                    zones.setdefault(row["InstanceType"], set()).add(row["Location"])
        return zones

    def _spot(self, region: str, names: list[str]) -> dict[tuple[str, str], float]:
        """(instance type, zone name) → the latest Linux spot price, from now."""
        if not names:
            return {}
        ec2 = self._api.client("ec2", region)
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        for page in self._api.pages(
            ec2,
            "ec2",
            "DescribeSpotPriceHistory",
            "describe_spot_price_history",
            InstanceTypes=names,
            ProductDescriptions=["Linux/UNIX"],
            StartTime=self._now(),
        ):
            for row in page.get("SpotPriceHistory", []):
                key = (row["InstanceType"], row["AvailabilityZone"])
                stamp = row.get("Timestamp")
                stamp = stamp if isinstance(stamp, datetime) else self._now()
                if key not in latest or stamp > latest[key][0]:
                    latest[key] = (stamp, float(row["SpotPrice"]))
        return {key: price for key, (_, price) in latest.items()}

    def _instance_type(self, info: dict[str, Any]) -> dict[str, Any] | None:
        gpu_info = info.get("GpuInfo") or {}
        gpus = gpu_info.get("Gpus") or []
        if not gpus or any(g.get("Manufacturer", "NVIDIA") != "NVIDIA" for g in gpus):
            return None
        name = info["InstanceType"]
        family = name.split(".")[0]
        first = gpus[0]
        count = sum(int(g.get("Count", 0)) for g in gpus)
        if count < 1:  # a fraction of a GPU (g6f, gr6f): the sizing model plans whole GPUs
            self._skipped.add(name)
            return None
        memory = int(first.get("MemoryInfo", {}).get("SizeInMiB", 0))
        gpu = normalise_gpu(self._gpus, str(first.get("Name", "")), memory, family)
        if gpu is None:
            self._unknown.add(f"{name}: GPU {first.get('Name')!r} ({memory} MiB)")
            return None
        network = info.get("NetworkInfo") or {}
        storage = info.get("InstanceStorageInfo") or {}
        return {
            "cloud": "aws",
            "name": name,
            "machine_type": name,
            "gpu": gpu.name,
            "gpu_count": count,
            "attached_accelerator": None,
            "vcpus": int(info.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
            "memory_gib": round(int(info.get("MemoryInfo", {}).get("SizeInMiB", 0)) / 1024, 2),
            "local_nvme_gb": storage.get("TotalSizeInGB"),
            "network_gbps": parse_gbps(network.get("NetworkPerformance")),
            "nvlink": count > 1 and gpu.nvlink_gbps is not None and family not in NO_NVLINK_FAMILIES,
            "node_interconnect": "efa" if network.get("EfaSupported") else None,
            "source": SOURCE_KEY_EC2,
            "confidence": "high",
        }

    def _on_demand_prices(self, instance_types: list[str], regions: list[str]) -> dict[str, dict[str, float]]:
        """Instance type → region code → Linux on-demand $/h, for a batch of types in
        ``regions``: one paginated Price List query (``ANY_OF`` on instanceType and regionCode)."""
        pricing = self._api.client("pricing", PRICING_REGION)
        filters = [{"Type": "ANY_OF", "Field": "instanceType", "Value": ",".join(instance_types)}]
        if len(",".join(regions)) <= FILTER_VALUE_MAX:  # else every region is asked for, then dropped
            filters.append({"Type": "ANY_OF", "Field": "regionCode", "Value": ",".join(regions)})
        filters += [
            {"Type": "TERM_MATCH", "Field": field_name, "Value": value}
            for field_name, value in (
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
            )
        ]
        prices: dict[str, dict[str, float]] = {}
        for page in self._api.pages(
            pricing,
            "pricing",
            "GetProducts",
            "get_products",
            ServiceCode="AmazonEC2",
            Filters=filters,
            MaxResults=PRICING_PAGE,
        ):
            for item in page.get("PriceList", []):
                product = json.loads(item) if isinstance(item, str) else item
                attributes = product.get("product", {}).get("attributes", {})
                name, region = attributes.get("instanceType"), attributes.get("regionCode")
                price = _on_demand_usd(product)
                if name in instance_types and region in regions and price:
                    prices.setdefault(name, {})[region] = price
        return prices

    def _assemble(
        self,
        result: FetchResult,
        offered: dict[str, dict[str, set[str]]],
        specs: dict[str, dict[str, Any]],
        spot: dict[str, dict[tuple[str, str], float]],
        prices: dict[str, dict[str, float]],
    ) -> None:
        today = self._today().isoformat()
        used: set[str] = set()
        for region, zones_by_type in sorted(offered.items()):
            result.regions_ok.add(region)
            for name in sorted(n for n in zones_by_type if n in specs):
                zones = sorted(zones_by_type[name])
                od = prices.get(name, {}).get(region)
                if od:
                    used.add(name)
                    result.offers.append(
                        _offer(name, region, None, zones, "on-demand", od, SOURCE_KEY_PRICING, today)
                    )
                for zone in zones:
                    price = spot.get(region, {}).get((name, zone))
                    if price:
                        used.add(name)
                        result.offers.append(
                            _offer(name, region, zone, [zone], "spot", price, SOURCE_KEY_SPOT, today)
                        )
        result.instance_types = [specs[n] for n in sorted(used)]
        if self._skipped:
            result.notes.append(
                f"{len(self._skipped)} fractional-GPU instance types skipped: "
                + ", ".join(sorted(self._skipped))
            )
        if self._unknown:
            result.notes.append(
                f"{len(self._unknown)} GPU instance types skipped, GPU not in the facts table: "
                + "; ".join(sorted(self._unknown)[:5])
            )

    def _sources(self) -> dict[str, dict[str, str]]:
        today = self._today().isoformat()
        return {
            SOURCE_KEY_PRICING: {
                "title": "AWS Price List Query API, pricing:GetProducts (AmazonEC2, Linux, "
                "shared tenancy, capacity status Used)",
                "url": "https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/"
                "API_pricing_GetProducts.html",
                "retrieved": today,
            },
            SOURCE_KEY_SPOT: {
                "title": "EC2 DescribeSpotPriceHistory (Linux/UNIX), latest price per zone",
                "url": "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/"
                "API_DescribeSpotPriceHistory.html",
                "retrieved": today,
            },
            SCORE_SOURCE_KEY: {**SCORE_SOURCE, "retrieved": today},
            SOURCE_KEY_EC2: {
                "title": "EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings",
                "url": "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/"
                "API_DescribeInstanceTypes.html",
                "retrieved": today,
            },
        }


def _on_demand_usd(product: dict[str, Any]) -> float | None:
    """``terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD`` of an hourly rate."""
    for term in (product.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            if dimension.get("unit") not in (None, "Hrs"):
                continue
            usd = dimension.get("pricePerUnit", {}).get("USD")
            if usd is not None and float(usd) > 0:
                return float(usd)
    return None


def _offer(
    name: str,
    region: str,
    zone: str | None,
    zones: list[str],
    market: str,
    price: float,
    source: str,
    today: str,
) -> dict[str, Any]:
    """An offer in the catalog's schema: ``zone`` set only for a zone's own price (then
    ``zones`` is ``[zone]``), else region-level with the AZ IDs it is offered in."""
    return {
        "cloud": "aws",
        "instance_type": name,
        "region": region,
        "zone": zone,
        "zones": zones,
        "market": market,
        "hourly_usd": round(price, 6),
        "source": source,
        "as_of": today,
        "confidence": "high",
    }


class ZoneIdError(LookupError):
    """A zone name that the region's DescribeAvailabilityZones answer does not map."""


def _zone_id(name: str, ids: dict[str, str], region: str) -> str:
    try:
        return ids[name]
    except KeyError:
        raise ZoneIdError(f"zone {name} is not among {region}'s availability zones") from None


def _zone_ids_of(names: set[str], ids: dict[str, str], region: str) -> set[str]:
    return {_zone_id(name, ids, region) for name in names}


def pricing_batches(instance_types: list[str], regions: list[str]) -> list[list[str]]:
    """Instance types per Price List query. A type has one product per region under the
    query's filters, so ``PRICING_PAGE ÷ regions`` types fill one page, and one page per
    query takes the fewest round trips in a row; but never more than ``PRICING_QUERIES``
    queries (the API's quota would throttle them), and never a type list longer than a filter
    value may be (``FILTER_VALUE_MAX`` characters, comma-joined)."""
    size = max(1, PRICING_PAGE // max(1, len(regions)), -(-len(instance_types) // PRICING_QUERIES))
    batches: list[list[str]] = []
    for name in instance_types:
        last = batches[-1] if batches else None
        if last is None or len(last) == size or len(",".join([*last, name])) > FILTER_VALUE_MAX:
            batches.append([name])
        else:
            last.append(name)
    return batches


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
