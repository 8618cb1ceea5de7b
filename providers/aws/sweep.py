"""Sweep orphaned gpufit EC2 instances and Auto Scaling groups: list, decide, act.

Groups first: ``DescribeAutoScalingGroups`` filtered on the tag key ``gpufit:managed``; a group
whose own tags make it an orphan (``gitops.sweep.decide``) is set to 0 (min, max, desired)
and deleted with ``ForceDelete`` (which terminates its instances); a group without the gpufit
tags is never touched.

Tags alone prove nothing: a candidate must also have been made by gpufit for its stack and
workload (``providers.aws.provenance``: its instance profile, or its launch template created by
gpufit's deploy identity, says so; this reads them with ``ec2:DescribeLaunchTemplates`` and
``iam:GetInstanceProfile``, and the caller's identity with ``sts:GetCallerIdentity`` when no
deploy identity is given). Instances
that belong to a group (tag ``aws:autoscaling:groupName``) are left to their group:
terminating one would only make a live group launch another.

Per region, concurrently: ``DescribeInstances`` filtered server-side on the tag
``gpufit:managed=true`` and the states pending/running/stopping/stopped, one retried call per
page, then the live instances that gpufit-tagged Spot requests launched untagged, read with
their requests' tags (``spot_requests.request_launched``); each instance is checked again here
(managed tag exactly ``"true"``, state) before ``gitops.sweep.decide`` reads its expiry.
Acting, the spot requests of the chosen instances are cancelled first (AWS relaunches the
instance of a persistent request that is still open when its instance is terminated), then the
instances are terminated in batches; a batch that one instance spoils (gone, termination
protection) is retried one instance at a time so the others still go. Calls go through
``cloudapi.retry`` (botocore's own retries off); credential and permission errors raise
``AuthError`` at once, naming the permission. Endpoints come from the standard AWS
configuration (``AWS_ENDPOINT_URL_EC2``): a local server needs no code path.

Prices come from the catalog, whose AWS zones are availability-zone IDs (``use1-az6``, the same
physical zone in every account), while EC2 places a machine by zone name (``us-east-1a``,
mapped to IDs per account). A machine's zone is its AZ ID: ``Placement.AvailabilityZoneId`` (an
Auto Scaling instance's ``AvailabilityZoneId``) where the answer carries it, else its zone name
mapped by ``DescribeAvailabilityZones``, asked at most once per region and only when needed.
Its price is the catalog's offer for that AZ ID (AWS spot is priced per zone), else the
region-level offer. The zone lookup only prices: if it fails, the sweep goes on, priced by the
region-level offers, with a note, and shows the zone names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cloudapi.aws import PRICING_REGION, AwsApi
from cloudapi.calls import AuthError, CallCounter
from cloudapi.retry import RetryPolicy
from deployment import TAG_MANAGED
from gitops.sweep import Candidate, PriceFn, SweepResult, decide, read_expiry, stack_and_workload
from providers.aws.origins import OriginLookups
from providers.aws.provenance import group_template, instance_origin, prove
from providers.aws.spot_requests import request_launched

GROUP_TAG = "aws:autoscaling:groupName"
"""The tag EC2 Auto Scaling puts on the instances it launches."""
SWEPT_STATES = ("pending", "running", "stopping", "stopped")
"""States worth terminating; shutting-down and terminated instances are already going."""
BILLING_STATES = frozenset({"pending", "running"})
"""States that bill compute: a stopping or stopped instance bills only its volumes."""
PAGE_SIZE = 1000
"""DescribeInstances ``MaxResults`` (the API accepts 5 to 1000)."""
TERMINATE_BATCH = 100
"""Instance ids per TerminateInstances call (the API takes up to 1000)."""
DEFAULT_WORKERS = 16
PER_INSTANCE_CODES = frozenset(
    {
        "InvalidInstanceID.NotFound",
        "InvalidInstanceID.Malformed",
        "OperationNotPermitted",
        "IncorrectInstanceState",
        "UnsupportedOperation",
    }
)
"""Errors one instance of a batch causes for the whole batch: retried one instance a call."""
AWS_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-[0-9]+")  # fullmatch


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _error_code(error: BaseException) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _describe(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


@dataclass
class _RegionSweep:
    candidates: list[Candidate] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    auth_error: str | None = None
    error: str | None = None  # the region failed after its retries


class _ZoneIds:
    """A region's availability-zone IDs by zone name, asked for (``DescribeAvailabilityZones``)
    the first time a machine's answer lacks its AZ ID; one per region sweep (one thread)."""

    def __init__(self, ask: Callable[[], dict[str, str]]) -> None:
        self._ask = ask
        self._ids: dict[str, str] | None = None
        self.error: str | None = None

    def __call__(self, name: str | None, zone_id: str | None = None) -> str | None:
        """The AZ ID of the zone called ``name`` (``zone_id`` if the answer gave it), or None."""
        if zone_id:
            return zone_id
        if not name:
            return None
        if self._ids is None:
            try:
                self._ids = self._ask()
            except Exception as error:  # AuthError too: the zones only price, they decide nothing
                self._ids = {}
                self.error = _describe(error)
        return self._ids.get(name)

    def note(self) -> str | None:
        if self.error is None:
            return None
        return (
            f"availability-zone IDs unavailable ({self.error}): priced by the region's offers, "
            "zones shown by name"
        )


class AwsSweeper:
    """Finds and terminates orphaned gpufit instances with a boto3 session."""

    cloud = "aws"

    def __init__(
        self,
        session: Any = None,
        policy: RetryPolicy | None = None,
        counter: CallCounter | None = None,
        workers: int = DEFAULT_WORKERS,
        page_size: int = PAGE_SIZE,
        batch_size: int = TERMINATE_BATCH,
        deployers: Iterable[str] | None = None,
    ) -> None:
        if session is None:
            import boto3

            session = boto3.Session()
        self._session = session
        self._policy = policy or RetryPolicy()
        self.counter = counter or CallCounter()
        self._workers = max(1, workers)
        self._page_size = page_size
        self._batch_size = max(1, batch_size)
        self._api = AwsApi(session, self.counter, self._policy, max_pool=16)
        self._origins = OriginLookups(self._api, deployers)

    # -- calls -------------------------------------------------------------------------------
    def _client(self, region: str) -> Any:
        return self._api.client("ec2", region)

    def _call(self, operation: str, fn: Callable[[], Any]) -> Any:
        return self._api.call("ec2", operation, fn)

    def regions(self) -> list[str]:
        """Every region enabled for the account (needs ec2:DescribeRegions)."""
        ec2 = self._client(PRICING_REGION)
        answer = self._call(
            "DescribeRegions",
            lambda: ec2.describe_regions(
                Filters=[{"Name": "opt-in-status", "Values": ["opt-in-not-required", "opted-in"]}]
            ),
        )
        return sorted(r["RegionName"] for r in answer["Regions"])

    def zone_ids(self, region: str) -> dict[str, str]:
        """Zone name → availability-zone ID of every zone of ``region`` (ec2:DescribeAvailabilityZones)."""
        ec2 = self._client(region)
        answer = self._call(
            "DescribeAvailabilityZones",
            functools.partial(ec2.describe_availability_zones, AllAvailabilityZones=True),
        )
        return {
            str(z["ZoneName"]): str(z["ZoneId"])
            for z in answer.get("AvailabilityZones", [])
            if z.get("ZoneName") and z.get("ZoneId")
        }

    # -- sweep -------------------------------------------------------------------------------
    def sweep(self, regions: list[str] | None, now: datetime, act: bool, price: PriceFn) -> SweepResult:
        """List every region's orphans concurrently and, with ``act``, terminate them."""
        result = SweepResult(cloud=self.cloud, acted=act)
        start = self.counter.count
        try:
            if regions:
                wanted = sorted(dict.fromkeys(r for r in regions if AWS_REGION.fullmatch(r)))
                ignored = sorted(set(regions) - set(wanted))
                if ignored:
                    result.notes.append(f"ignored names that are not AWS regions: {', '.join(ignored)}")
            else:
                wanted = self.regions()
        except AuthError as error:
            result.auth_error = str(error)
            return result
        except Exception as error:
            result.regions_failed["*"] = f"listing the regions: {_describe(error)}"
            return result
        if not wanted:
            result.calls = self.counter.count - start
            return result
        with ThreadPoolExecutor(
            min(self._workers, len(wanted)), thread_name_prefix="gpufit-sweep-aws"
        ) as pool:
            jobs = {region: pool.submit(self._region, region, now, act, price) for region in wanted}
            for region, job in jobs.items():
                done = job.result()
                result.candidates.extend(done.candidates)
                result.actions.update(done.actions)
                result.failed.update(done.failed)
                result.notes.extend(f"{region}: {note}" for note in done.notes)
                if done.auth_error and result.auth_error is None:
                    result.auth_error = done.auth_error
                if done.error is not None:
                    result.regions_failed[region] = done.error
                elif done.auth_error is None:
                    result.regions_ok.add(region)
        result.sort()
        result.calls = self.counter.count - start
        return result

    def _region(self, region: str, now: datetime, act: bool, price: PriceFn) -> _RegionSweep:
        out = _RegionSweep()
        zones = _ZoneIds(functools.partial(self.zone_ids, region))
        step = "DescribeAutoScalingGroups"
        origins: dict[str, tuple[str | None, str | None]] = {}
        try:
            groups = self._find_groups(region, now, price, zones, origins)
            step = "DescribeInstances"
            found, spot_requests = self._find(region, now, price, zones, origins, out.notes)
            step = "the candidates' launch templates and instance profiles"
            groups, found = (
                self._proven(region, groups, origins, out),
                self._proven(region, found, origins, out),
            )
        except AuthError as error:
            out.auth_error = str(error)
            return out
        except Exception as error:
            out.error = f"{step}: {_describe(error)}"
            return out
        note = zones.note()
        if note is not None:
            out.notes.append(note)
        out.candidates = [*groups, *found]
        if act and groups:
            self._remove_groups(region, groups, out)
        if act and found:
            self._terminate_all(region, found, spot_requests, out)
        return out

    # -- groups ------------------------------------------------------------------------------
    def _find_groups(
        self,
        region: str,
        now: datetime,
        price: PriceFn,
        zones: _ZoneIds,
        origins: dict[str, tuple[str | None, str | None]],
    ) -> list[Candidate]:
        """The region's orphaned gpufit Auto Scaling groups (their own tags decide), each one's
        launch template id in ``origins``."""
        client = self._api.client("autoscaling", region)
        found: list[Candidate] = []
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Filters": [{"Name": "tag-key", "Values": [TAG_MANAGED]}]}
            if token:
                args["NextToken"] = token
            page = self._api.call(
                "autoscaling",
                "DescribeAutoScalingGroups",
                functools.partial(client.describe_auto_scaling_groups, **args),
            )
            for group in page.get("AutoScalingGroups", []):
                candidate = self._group_candidate(region, group, now, price, zones)
                if candidate is not None:
                    found.append(candidate)
                    origins[candidate.instance_id] = (group_template(group), None)
            token = page.get("NextToken")
            if not token:
                return found

    @staticmethod
    def _group_candidate(
        region: str, group: dict[str, Any], now: datetime, price: PriceFn, zones: _ZoneIds
    ) -> Candidate | None:
        tags = {str(t.get("Key")): str(t.get("Value", "")) for t in group.get("Tags") or []}
        reason = decide(tags, now, cloud="aws")
        if reason is None:
            return None
        expires_at, _ = read_expiry(tags, cloud="aws")
        stack, workload = stack_and_workload(tags, cloud="aws")
        policy = group.get("MixedInstancesPolicy") or {}
        distribution = policy.get("InstancesDistribution") or {}
        spot = policy and int(distribution.get("OnDemandPercentageAboveBaseCapacity", 100)) == 0
        market = "spot" if spot else "on-demand"
        overrides = (policy.get("LaunchTemplate") or {}).get("Overrides") or []
        types = [str(o.get("InstanceType")) for o in overrides if o.get("InstanceType")]
        running = [i for i in group.get("Instances") or [] if i.get("LifecycleState") != "Terminated"]
        costs = [
            price(
                "aws",
                str(i.get("InstanceType", "")),
                region,
                zones(i.get("AvailabilityZone"), i.get("AvailabilityZoneId")),
                market,
            )
            for i in running
        ]
        hourly = None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
        name = str(group["AutoScalingGroupName"])
        return Candidate(
            cloud="aws",
            region=region,
            zone=None,
            instance_id=name,
            name=tags.get("Name"),
            instance_type=",".join(types[:3]) + ("…" if len(types) > 3 else "") if types else "?",
            stack=stack,
            workload=workload,
            expires_at=expires_at,
            reason=reason,
            hourly_usd=hourly,
            market=market,
            state=f"{len(running)} instance(s), desired {group.get('DesiredCapacity', '?')}",
            billing=bool(running),
            kind="group",
        )

    def _remove_groups(self, region: str, groups: list[Candidate], out: _RegionSweep) -> None:
        """Set each group to 0 (so it launches nothing more), then delete it with its instances."""
        client = self._api.client("autoscaling", region)
        for group in groups:
            name = group.instance_id
            try:
                self._api.call(
                    "autoscaling",
                    "UpdateAutoScalingGroup",
                    functools.partial(
                        client.update_auto_scaling_group,
                        AutoScalingGroupName=name,
                        MinSize=0,
                        MaxSize=0,
                        DesiredCapacity=0,
                    ),
                )
                self._api.call(
                    "autoscaling",
                    "DeleteAutoScalingGroup",
                    functools.partial(
                        client.delete_auto_scaling_group, AutoScalingGroupName=name, ForceDelete=True
                    ),
                )
            except AuthError as error:
                out.auth_error = str(error)
                out.failed[name] = "not removed: permission denied"
                return
            except Exception as error:
                out.failed[name] = f"{_describe(error)}"
                continue
            out.actions[name] = "scaled to 0, deleting"

    def _find(
        self,
        region: str,
        now: datetime,
        price: PriceFn,
        zones: _ZoneIds,
        origins: dict[str, tuple[str | None, str | None]],
        notes: list[str],
    ) -> tuple[list[Candidate], dict[str, str]]:
        """The region's orphans, and the spot request id of each that has one; each one's launch
        template id and instance profile name in ``origins``."""
        ec2 = self._client(region)
        filters = [
            {"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
            {"Name": "instance-state-name", "Values": list(SWEPT_STATES)},
        ]
        found: dict[str, Candidate] = {}
        spot_requests: dict[str, str] = {}
        seen: set[str] = set()
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Filters": filters, "MaxResults": self._page_size}
            if token:
                args["NextToken"] = token
            page = self._call("DescribeInstances", functools.partial(ec2.describe_instances, **args))
            rows = [i for r in page.get("Reservations", []) for i in r.get("Instances", [])]
            seen.update(str(i["InstanceId"]) for i in rows)
            for instance in rows:
                candidate = self._candidate(region, instance, now, price, zones)
                if candidate is None:
                    continue
                found[candidate.instance_id] = candidate
                origins[candidate.instance_id] = instance_origin(instance)
                request = instance.get("SpotInstanceRequestId")
                if request:
                    spot_requests[candidate.instance_id] = str(request)
            token = page.get("NextToken")
            if not token:
                break
        try:
            launched = request_launched(
                lambda **kw: self._call(
                    "DescribeSpotInstanceRequests",
                    functools.partial(ec2.describe_spot_instance_requests, **kw),
                ),
                lambda **kw: self._call("DescribeInstances", functools.partial(ec2.describe_instances, **kw)),
                seen,
            )
        except AuthError as error:  # the tagged instances are still swept
            notes.append(f"instances launched by gpufit's spot requests not looked for: {error}")
            launched = []
        for instance, request_id in launched:  # untagged, launched by a tagged request: its tags
            candidate = self._candidate(region, instance, now, price, zones)
            if candidate is not None:
                found[candidate.instance_id] = candidate
                origins[candidate.instance_id] = instance_origin(instance)
                spot_requests[candidate.instance_id] = request_id
        return list(found.values()), spot_requests

    @staticmethod
    def _candidate(
        region: str, instance: dict[str, Any], now: datetime, price: PriceFn, zones: _ZoneIds
    ) -> Candidate | None:
        state = str(instance.get("State", {}).get("Name", ""))
        if state not in SWEPT_STATES:
            return None
        tags = {str(t.get("Key")): str(t.get("Value", "")) for t in instance.get("Tags") or []}
        if GROUP_TAG in tags:
            return None  # its group decides (and is swept itself when it is an orphan)
        reason = decide(tags, now, cloud="aws")  # checks the managed tag again, whatever the filter did
        if reason is None:
            return None
        expires_at, _ = read_expiry(tags, cloud="aws")
        stack, workload = stack_and_workload(tags, cloud="aws")
        lifecycle = instance.get("InstanceLifecycle")
        market = "on-demand" if not lifecycle else str(lifecycle)
        placement = instance.get("Placement") or {}
        zone_name = placement.get("AvailabilityZone") or None
        zone_id = zones(zone_name, placement.get("AvailabilityZoneId"))  # the catalog's zone key
        instance_type = str(instance.get("InstanceType", "?"))
        hourly = (
            price("aws", instance_type, region, zone_id, market) if market in ("on-demand", "spot") else None
        )
        return Candidate(
            cloud="aws",
            region=region,
            zone=zone_id or zone_name,
            instance_id=str(instance["InstanceId"]),
            name=tags.get("Name"),
            instance_type=instance_type,
            stack=stack,
            workload=workload,
            expires_at=expires_at,
            reason=reason,
            hourly_usd=hourly,
            market=market,
            state=state,
            billing=state in BILLING_STATES,
        )

    # -- provenance --------------------------------------------------------------------------
    def _proven(
        self,
        region: str,
        candidates: list[Candidate],
        origins: dict[str, tuple[str | None, str | None]],
        out: _RegionSweep,
    ) -> list[Candidate]:
        """The candidates gpufit made, each with its proof (``provenance.prove``)."""
        if not candidates:
            return []
        lookups = self._origins
        kept, notes = prove(
            candidates, origins, lookups.templates(region), lookups.profile_tags, lookups.deployers
        )
        out.notes.extend(notes)
        return kept

    # -- acting ------------------------------------------------------------------------------
    def _terminate_all(
        self, region: str, found: list[Candidate], spot_requests: dict[str, str], out: _RegionSweep
    ) -> None:
        ec2 = self._client(region)
        ids = [c.instance_id for c in found]
        if spot_requests:
            try:
                self._cancel_spot_requests(ec2, sorted(set(spot_requests.values())), out)
            except AuthError as error:
                # terminating now would let a persistent request launch a replacement: leave those
                out.auth_error = str(error)
                for instance_id in spot_requests:
                    out.failed[instance_id] = "not terminated: its spot request could not be cancelled"
                ids = [i for i in ids if i not in spot_requests]
        for batch in _chunks(ids, self._batch_size):
            try:
                self._terminate(ec2, batch, out)
            except AuthError as error:
                out.auth_error = str(error)
                left = [i for i in ids if i not in out.actions and i not in out.failed]
                for instance_id in left:
                    out.failed[instance_id] = "not terminated: permission denied"
                return
            except Exception as error:
                why = f"TerminateInstances: {_describe(error)}"
                out.error = out.error or why
                for instance_id in batch:
                    if instance_id not in out.actions:
                        out.failed[instance_id] = why

    def _cancel_spot_requests(self, ec2: Any, request_ids: list[str], out: _RegionSweep) -> None:
        for batch in _chunks(request_ids, self._batch_size):
            try:
                answer = self._call(
                    "CancelSpotInstanceRequests",
                    functools.partial(ec2.cancel_spot_instance_requests, SpotInstanceRequestIds=batch),
                )
            except AuthError:
                raise
            except Exception as error:
                out.notes.append(f"cancelling spot requests {', '.join(batch)} failed: {_describe(error)}")
                continue
            cancelled = [
                r.get("SpotInstanceRequestId") for r in answer.get("CancelledSpotInstanceRequests", [])
            ]
            out.notes.append(f"cancelled spot requests: {', '.join(str(r) for r in cancelled)}")

    def _terminate(self, ec2: Any, batch: list[str], out: _RegionSweep) -> None:
        try:
            answer = self._call(
                "TerminateInstances", functools.partial(ec2.terminate_instances, InstanceIds=batch)
            )
        except AuthError:
            raise
        except Exception as error:
            code = _error_code(error)
            if code not in PER_INSTANCE_CODES:
                raise
            if len(batch) > 1:
                for instance_id in batch:
                    self._terminate(ec2, [instance_id], out)
                return
            if code == "InvalidInstanceID.NotFound":
                out.actions[batch[0]] = "already gone"
            else:
                out.failed[batch[0]] = _describe(error)
            return
        states = {
            str(row.get("InstanceId")): str(row.get("CurrentState", {}).get("Name", ""))
            for row in answer.get("TerminatingInstances", [])
        }
        for instance_id in batch:
            state = states.get(instance_id)
            if state in ("shutting-down", "terminated"):
                out.actions[instance_id] = "terminating" if state == "shutting-down" else "terminated"
            else:
                out.failed[instance_id] = f"TerminateInstances answered state {state!r}"
