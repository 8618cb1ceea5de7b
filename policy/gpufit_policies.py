"""gpufit's guardrails as plain functions: no ``pulumi_policy`` import, so they run (and are unit
tested) anywhere.

Each resource validator takes ``(resource_type, props, config)`` and returns the violation
messages, none when the resource complies or is not of a type it checks. ``resource_type`` is a
Pulumi type token (``aws:ec2/instance:Instance``) and ``props`` the resource's camelCase inputs
as the policy engine passes them: any ``Mapping`` of ``Sequence``/``Mapping`` values (the engine
hands over read-only proxies, not ``dict``/``list``), so nothing here relies on concrete types.
``check_stack`` and ``check_stack_budget`` take the whole stack as ``(type, props)`` or
``(type, props, region)`` tuples.

The clock is never read here: ``PolicyConfig.now`` is the present, which ``policy/__main__.py``
fills with ``datetime.now(UTC)`` (or the ``now`` policy-config key) and tests fix.

Constants mirror ``providers.base`` and ``providers.aws.component`` (tests check they agree);
they are repeated rather than imported because ``providers`` pulls in the selector's planning
code and pydantic, while the pack only needs ``selector.catalog`` (and PyYAML) for prices.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from selector.catalog import Catalog, Offer, load_catalog

AWS_INSTANCE = "aws:ec2/instance:Instance"
GCP_INSTANCE = "gcp:compute/instance:Instance"
GPU_INSTANCES = (AWS_INSTANCE, GCP_INSTANCE)
AWS_EBS_VOLUME = "aws:ebs/volume:Volume"
AWS_SCHEDULE = "aws:scheduler/schedule:Schedule"
AWS_SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
AWS_SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
AWS_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
AWS_ACL_TYPES = (
    "aws:s3/bucket:Bucket",
    "aws:s3/bucketV2:BucketV2",
    "aws:s3/bucketAcl:BucketAcl",
    "aws:s3/bucketAclV2:BucketAclV2",
)
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_GROUP = "aws:autoscaling/group:Group"
AWS_GROUP_SCHEDULE = "aws:autoscaling/schedule:Schedule"
GCP_TEMPLATES = (
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
    "gcp:compute/instanceTemplate:InstanceTemplate",
)
GCP_GROUPS = (
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager",
    "gcp:compute/instanceGroupManager:InstanceGroupManager",
)
GCP_SCHEDULER_JOB = "gcp:cloudscheduler/job:Job"
MACHINE_TEMPLATES = (AWS_LAUNCH_TEMPLATE, *GCP_TEMPLATES)
"""What a fleet group launches its GPU machines from: checked like the machines themselves."""
GCP_BUCKET = "gcp:storage/bucket:Bucket"
GCP_BUCKET_IAM_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
GCP_BUCKET_IAM_BINDING = "gcp:storage/bucketIAMBinding:BucketIAMBinding"

TAG_EXPIRES_AT = "gpufit:expires-at"
TAG_ZONES = "gpufit:zones"  # AWS: the AZ IDs a resource's machines may launch in (providers/base.py)
LABEL_EXPIRES_AT = "gpufit-expires-at"
TERMINATE_TARGET = "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"

DEADLINE_SLACK = timedelta(minutes=15)
"""How far a cloud-side deadline may fire after the expiry tag: gpufit's schedule fires a minute
late on purpose, and the program's clock and the policy's differ by the preview's duration."""

PRICE_TOLERANCE_USD = 1e-6
"""Float slack when comparing prices with the budget (n × price vs a sum of n prices)."""

PUBLIC_ACLS = frozenset({"public-read", "public-read-write", "authenticated-read"})
PUBLIC_MEMBERS = frozenset({"allUsers", "allAuthenticatedUsers"})
PUBLIC_ACCESS_BLOCK_FLAGS = (
    "blockPublicAcls",
    "blockPublicPolicy",
    "ignorePublicAcls",
    "restrictPublicBuckets",
)

_GCP_LABEL_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})t(\d{2})-(\d{2})-(\d{2})z")
_AWS_ZONE = re.compile(r"([a-z]{2}(?:-[a-z]+)+-\d+)[a-z]")
_AT_EXPRESSION = re.compile(r"at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)")


@dataclass(frozen=True)
class PolicyConfig:
    """What the validators need besides the resource: the present (``now``, timezone-aware), the
    stack's hourly budget in USD (None: no budget, the price policies pass) and the catalog file
    to price against (None: the selector's embedded snapshot)."""

    now: datetime
    max_hourly_usd: float | None = None
    catalog: str | None = None

    def __post_init__(self) -> None:
        if self.now.tzinfo is None:
            raise ValueError("PolicyConfig.now must be timezone-aware")


def config_from(raw: Mapping[str, Any], now: datetime) -> PolicyConfig:
    """A ``PolicyConfig`` from one policy's ``--policy-pack-config`` entry; ``now`` unless the
    entry pins ``now`` (ISO 8601 with a zone). ValueError names the bad key."""
    pinned = raw.get("now")
    if pinned is not None:
        if not isinstance(pinned, str):
            raise ValueError(f"now must be an ISO 8601 string, not {pinned!r}")
        now = parse_iso(pinned)
    budget = raw.get("max_hourly_usd")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0:
            raise ValueError(f"max_hourly_usd must be a positive number of USD, not {budget!r}")
        budget = float(budget)
    catalog = raw.get("catalog")
    if catalog is not None and (not isinstance(catalog, str) or not catalog):
        raise ValueError(f"catalog must be a catalog file path, not {catalog!r}")
    return PolicyConfig(now=now, max_hourly_usd=budget, catalog=catalog or None)


# -- helpers ----------------------------------------------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return value
    return ()


def _last_segment(value: Any) -> str:
    """``zones/us-central1-a/machineTypes/a2-highgpu-1g`` → ``a2-highgpu-1g``."""
    return str(value).rstrip("/").rsplit("/", 1)[-1]


def parse_iso(text: str) -> datetime:
    """An ISO 8601 instant with a zone (``2026-12-04T13:00:00Z``), in UTC; ValueError otherwise."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return value.astimezone(UTC)


def parse_gcp_label_time(text: str) -> datetime:
    """The label encoding of an instant (``2026-12-04t13-00-00z``) in UTC; ValueError otherwise."""
    match = _GCP_LABEL_TIME.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not of the form yyyy-mm-ddthh-mm-ssz")
    date, hh, mm, ss = match.groups()
    return parse_iso(f"{date}T{hh}:{mm}:{ss}Z")


def _is_open(cidr: Any) -> bool:
    """True for a CIDR that covers every address of its family (``0.0.0.0/0``, ``::/0``)."""
    try:
        return ipaddress.ip_network(str(cidr).strip(), strict=False).prefixlen == 0
    except ValueError:
        return False


def instance_expiry(resource_type: str, props: Mapping[str, Any]) -> tuple[datetime | None, str | None]:
    """(expiry, None) from the instance's (or machine template's) gpufit expiry tag or label,
    or (None, why not). A launch template must also pass the tag to the instances it launches
    (``tagSpecifications`` of resource type ``instance``)."""
    if resource_type == AWS_LAUNCH_TEMPLATE:
        specs = [
            _map(t) for t in _seq(props.get("tagSpecifications")) if _map(t).get("resourceType") == "instance"
        ]
        if not any(_map(t.get("tags")).get(TAG_EXPIRES_AT) for t in specs):
            return None, f"tagSpecifications give launched instances no {TAG_EXPIRES_AT!r} tag"
    if resource_type in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
        key, value = TAG_EXPIRES_AT, _map(props.get("tags")).get(TAG_EXPIRES_AT)
        parse = parse_iso
        where = f"tag {key!r}"
    else:
        key, value = LABEL_EXPIRES_AT, _map(props.get("labels")).get(LABEL_EXPIRES_AT)
        parse = parse_gcp_label_time
        where = f"label {key!r}"
    if value is None or value == "":
        return None, f"missing the {where}: every gpufit GPU instance must say when it expires"
    if not isinstance(value, str):
        return None, f"{where} is {value!r}, not a timestamp"
    try:
        return parse(value), None
    except ValueError as err:
        return None, f"{where} is malformed: {err}"


def _count(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _seconds(duration: Mapping[str, Any]) -> float | None:
    try:
        seconds = float(duration.get("seconds") or 0) + float(duration.get("nanos") or 0) / 1e9
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


# -- 1. expiry and cloud-side deadline ---------------------------------------------------------


def check_expiry(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """Every GPU instance carries a valid, present-or-future expiry (AWS tag ``gpufit:expires-at``
    in ISO 8601; GCP label ``gpufit-expires-at`` in its label encoding). A GCP VM must also carry
    its own deadline: ``scheduling.maxRunDuration`` with ``instanceTerminationAction`` DELETE,
    ending no later than the label (plus ``DEADLINE_SLACK``). The AWS deadline lives in a
    separate EventBridge schedule: ``check_stack`` checks it."""
    if resource_type not in (*GPU_INSTANCES, *MACHINE_TEMPLATES):
        return []
    problems: list[str] = []
    expiry, why = instance_expiry(resource_type, props)
    if why:
        problems.append(why)
    elif expiry is not None and expiry < config.now:
        problems.append(
            f"expired at {expiry.isoformat()} (now {config.now.astimezone(UTC).isoformat()}): "
            "an expired instance must be destroyed, not deployed"
        )
    if resource_type in GCP_TEMPLATES:
        problems += _template_deadline(_map(props.get("scheduling")), expiry, config)
    if resource_type == GCP_INSTANCE:
        scheduling = _map(props.get("scheduling"))
        seconds = _seconds(_map(scheduling.get("maxRunDuration")))
        if seconds is None:
            problems.append(
                "scheduling.maxRunDuration is not set: nothing deletes the VM at its deadline "
                "if nobody runs `pulumi destroy`"
            )
        action = scheduling.get("instanceTerminationAction")
        if action != "DELETE":
            problems.append(
                f"scheduling.instanceTerminationAction is {action!r}, not 'DELETE': at its deadline "
                "the VM must be deleted, not left stopped (and billed for its disk)"
            )
        if seconds is not None and expiry is not None and expiry >= config.now:
            ends = config.now + timedelta(seconds=seconds)
            if ends > expiry + DEADLINE_SLACK:
                problems.append(
                    f"scheduling.maxRunDuration ({seconds:.0f} s from now) runs until "
                    f"{ends.astimezone(UTC).isoformat()}, past the expiry label {expiry.isoformat()}"
                )
    return problems


def _template_deadline(
    scheduling: Mapping[str, Any], expiry: datetime | None, config: PolicyConfig
) -> list[str]:
    """A GCP instance template deletes its VMs at the deadline: an absolute ``terminationTime``
    no later than the expiry label (plus ``DEADLINE_SLACK``), or a ``maxRunDuration``; either
    with the DELETE action."""
    problems: list[str] = []
    action = scheduling.get("instanceTerminationAction")
    if action != "DELETE":
        problems.append(
            f"scheduling.instanceTerminationAction is {action!r}, not 'DELETE': at its deadline "
            "a VM must be deleted, not left stopped"
        )
    at = scheduling.get("terminationTime")
    if not at and _seconds(_map(scheduling.get("maxRunDuration"))) is None:
        problems.append("scheduling sets neither terminationTime nor maxRunDuration: no VM-side deadline")
    elif at:
        try:
            ends = parse_iso(str(at))
        except ValueError:
            return [*problems, f"scheduling.terminationTime {at!r} is not a timestamp"]
        if expiry is not None and ends > expiry + DEADLINE_SLACK:
            problems.append(
                f"scheduling.terminationTime {ends.isoformat()} is past the expiry label {expiry.isoformat()}"
            )
    del config
    return problems


def _fire_time(props: Mapping[str, Any]) -> datetime | None:
    """When a one-time ``at(...)`` schedule fires, in UTC; None for rate/cron or unreadable."""
    match = _AT_EXPRESSION.fullmatch(str(props.get("scheduleExpression") or "").strip())
    if not match:
        return None
    zone_name = props.get("scheduleExpressionTimezone") or "UTC"
    try:
        zone = ZoneInfo(str(zone_name))
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=zone).astimezone(UTC)


def _stack_items(
    resources: Iterable[tuple[Any, ...]],
) -> list[tuple[str, Mapping[str, Any], str | None]]:
    items: list[tuple[str, Mapping[str, Any], str | None]] = []
    for entry in resources:
        typ, props = str(entry[0]), _map(entry[1])
        region = entry[2] if len(entry) > 2 and isinstance(entry[2], str) else None
        items.append((typ, props, region))
    return items


def check_stack(resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None) -> list[str]:
    """Stack-level deadline: when the stack holds an AWS instance, it must also hold an enabled
    ``aws:scheduler/schedule:Schedule`` whose target is ``TERMINATE_TARGET`` (EC2 has no
    run-time limit of its own). A one-time ``at(...)`` schedule must fire no later than the
    earliest instance expiry plus ``DEADLINE_SLACK``. ``resources``: ``(type, props)`` tuples
    (a third element, the region, is accepted and ignored). ``config`` is unused: accepted so
    every stack check has one signature."""
    del config
    items = _stack_items(resources)
    instances = [props for typ, props, _ in items if typ == AWS_INSTANCE]
    if not instances:
        return []
    schedules = [
        props
        for typ, props, _ in items
        if typ == AWS_SCHEDULE and _map(props.get("target")).get("arn") == TERMINATE_TARGET
    ]
    enabled = [s for s in schedules if str(s.get("state") or "ENABLED").upper() != "DISABLED"]
    if not enabled:
        state = " (the one there is DISABLED)" if schedules else ""
        return [
            f"{len(instances)} AWS instance(s) but no enabled {AWS_SCHEDULE} targeting "
            f"{TERMINATE_TARGET}{state}: nothing terminates them at their deadline if nobody runs "
            "`pulumi destroy`"
        ]
    fires = [_fire_time(s) for s in enabled]
    if any(f is None for f in fires):
        return []  # a rate/cron schedule, or one whose time cannot be read: its existence suffices
    expiries = [e for e, _ in (instance_expiry(AWS_INSTANCE, p) for p in instances) if e is not None]
    if not expiries:
        return []  # check_expiry reports the missing or malformed tags
    first_fire = min(f for f in fires if f is not None)
    earliest_expiry = min(expiries)
    if first_fire > earliest_expiry + DEADLINE_SLACK:
        return [
            f"the terminate schedule fires at {first_fire.isoformat()}, more than "
            f"{DEADLINE_SLACK} after the earliest instance expiry {earliest_expiry.isoformat()}"
        ]
    return []


def check_fleet_deadline(
    resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None
) -> list[str]:
    """Stack-level deadline of fleet groups: every AWS Auto Scaling group has a scheduled action
    that sets its min, max and desired capacity to 0 no later than the earliest launch-template
    expiry (plus ``DEADLINE_SLACK``); every GCP managed instance group has an unpaused Cloud
    Scheduler job that resizes it to 0 (``.../instanceGroupManagers/NAME/resize?size=0``).
    Without them the group would relaunch machines after their own deadline deleted them."""
    del config
    items = _stack_items(resources)
    problems: list[str] = []
    expiries = [
        e
        for e, _ in (instance_expiry(AWS_LAUNCH_TEMPLATE, p) for t, p, _ in items if t == AWS_LAUNCH_TEMPLATE)
        if e is not None
    ]
    actions = [p for t, p, _ in items if t == AWS_GROUP_SCHEDULE]
    for typ, props, _ in items:
        if typ != AWS_GROUP:
            continue
        name = props.get("name")
        to_zero = [
            a
            for a in actions
            if a.get("autoscalingGroupName") == name
            and all(_count(a.get(k)) == 0 for k in ("minSize", "maxSize", "desiredCapacity"))
        ]
        if not to_zero:
            problems.append(
                f"Auto Scaling group {name!r} has no {AWS_GROUP_SCHEDULE} setting min, max and desired "
                "capacity to 0: nothing stops it relaunching machines after their deadline"
            )
            continue
        starts = [parse_iso(str(a["startTime"])) for a in to_zero if _is_time(a.get("startTime"))]
        if expiries and starts and min(starts) > min(expiries) + DEADLINE_SLACK:
            problems.append(
                f"group {name!r} is scaled to 0 at {min(starts).isoformat()}, more than {DEADLINE_SLACK} "
                f"after its machines' expiry {min(expiries).isoformat()}"
            )
    jobs = [p for t, p, _ in items if t == GCP_SCHEDULER_JOB and p.get("paused") is not True]
    for typ, props, _ in items:
        if typ not in GCP_GROUPS:
            continue
        name = props.get("name")
        suffix = f"/instanceGroupManagers/{name}/resize?size=0"
        if not any(str(_map(j.get("httpTarget")).get("uri") or "").endswith(suffix) for j in jobs):
            problems.append(
                f"managed instance group {name!r} has no Cloud Scheduler job resizing it to 0: nothing "
                "stops it recreating VMs after their deadline"
            )
    return problems


def _is_time(value: Any) -> bool:
    try:
        parse_iso(str(value))
    except ValueError:
        return False
    return True


# -- 2. hourly price within the budget ---------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _catalog(path: str | None) -> Catalog:
    return load_catalog(path)


def instance_market(resource_type: str, props: Mapping[str, Any]) -> str:
    """``spot`` or ``on-demand``, as the instance's own settings say."""
    if resource_type == AWS_INSTANCE:
        market = _map(props.get("instanceMarketOptions")).get("marketType")
        return "spot" if market == "spot" else "on-demand"
    scheduling = _map(props.get("scheduling"))
    model = str(scheduling.get("provisioningModel") or "").upper()
    return "spot" if model == "SPOT" or scheduling.get("preemptible") is True else "on-demand"


def instance_region(resource_type: str, props: Mapping[str, Any]) -> str | None:
    """The region from the instance's own zone (AWS ``availabilityZone``, GCP ``zone``), if set."""
    if resource_type == AWS_INSTANCE:
        match = _AWS_ZONE.fullmatch(str(props.get("availabilityZone") or ""))
        return match.group(1) if match else None
    zone = props.get("zone")
    if not zone:
        return None
    name = _last_segment(zone)
    return name.rsplit("-", 1)[0] if "-" in name else None


def _describe(resource_type: str, props: Mapping[str, Any]) -> str:
    if resource_type == AWS_INSTANCE:
        return f"aws {props.get('instanceType')}"
    accelerators = [
        f"{_last_segment(_map(a).get('type'))}x{_count(_map(a).get('count'))}"
        for a in _seq(props.get("guestAccelerators"))
    ]
    extra = f" + {', '.join(accelerators)}" if accelerators else ""
    return f"gcp {_last_segment(props.get('machineType'))}{extra}"


def _matches(offer: Offer, resource_type: str, props: Mapping[str, Any]) -> bool:
    it = offer.instance
    if resource_type == AWS_INSTANCE:
        return it.cloud == "aws" and it.machine_type == props.get("instanceType")
    if it.cloud != "gcp" or it.machine_type != _last_segment(props.get("machineType")):
        return False
    if it.attached_accelerator is None:
        return True  # accelerator-optimized series (A2, A3, G2, ...): the GPUs come with the type
    attached = [_map(a) for a in _seq(props.get("guestAccelerators"))]
    return any(
        _last_segment(a.get("type")) == it.attached_accelerator and _count(a.get("count")) == it.gpu_count
        for a in attached
    )


def resource_zones(resource_type: str, props: Mapping[str, Any]) -> frozenset[str]:
    """The zones a GPU resource may run in, where its properties say: AWS the ``gpufit:zones``
    tag (AZ IDs; a group's tags are a list), GCP an instance's zone or a MIG's distribution
    zones. Empty when unknown (anywhere in the region)."""
    if resource_type == GCP_INSTANCE or resource_type in GCP_GROUPS:
        raw = props.get("zone") if resource_type == GCP_INSTANCE else props.get("distributionPolicyZones")
        names = [raw] if isinstance(raw, str) else list(_seq(raw))
        return frozenset(_last_segment(z) for z in names if z)
    tags = props.get("tags")
    value: Any = None
    if isinstance(tags, Mapping):
        value = tags.get(TAG_ZONES)
    else:
        value = next((_map(t).get("value") for t in _seq(tags) if _map(t).get("key") == TAG_ZONES), None)
    return frozenset(z for z in str(value).split(",") if z) if value else frozenset()


def instance_offer(
    resource_type: str,
    props: Mapping[str, Any],
    config: PolicyConfig,
    region: str | None = None,
    zones: frozenset[str] = frozenset(),
) -> Offer | None:
    """The dearest catalog offer for this instance: same cloud and type (GCP N1: the attached
    GPUs too), same market (on-demand, else spot), in ``region`` (else the instance's own zone's
    region; when neither is known, any region), in ``zones`` when given (else the resource's
    own, ``resource_zones``). None when the catalog has no such offer.

    The dearest, because AWS spot is priced per zone and a group may land in any of its zones:
    a budget guardrail holds only if it holds in the zone that costs most. Offers whose zones
    are not known count in every zone."""
    where = region or instance_region(resource_type, props)
    market = instance_market(resource_type, props)
    offers = [
        o
        for o in _catalog(config.catalog).offers
        if o.market == market and (where is None or o.region == where) and _matches(o, resource_type, props)
    ]
    allowed = zones or resource_zones(resource_type, props)
    if allowed:
        offers = [
            o
            for o in offers
            if (o.zone in allowed if o.zone is not None else not o.zones or bool(allowed & set(o.zones)))
        ]
    return max(offers, key=lambda o: o.hourly_usd) if offers else None


def check_hourly_budget(
    resource_type: str, props: Mapping[str, Any], config: PolicyConfig, region: str | None = None
) -> list[str]:
    """A GPU instance's catalog hourly price must not exceed ``max_hourly_usd``; passes when no
    budget is configured. ``region`` is the region of the resource's provider, when known. An
    instance the catalog cannot price fails: the budget cannot be shown to hold."""
    if resource_type not in GPU_INSTANCES or config.max_hourly_usd is None:
        return []
    budget = config.max_hourly_usd
    market = instance_market(resource_type, props)
    where = region or instance_region(resource_type, props)
    label = _describe(resource_type, props)
    offer = instance_offer(resource_type, props, config, region)
    if offer is None:
        place = f" in {where}" if where else ""
        return [
            f"no {market} price in the catalog for {label}{place}: cannot show it is within the "
            f"budget max_hourly_usd ${budget:,.2f}/h (point the policy's `catalog` config at a "
            "refreshed catalog)"
        ]
    if offer.hourly_usd > budget + PRICE_TOLERANCE_USD:
        return [
            f"{label} ({market}, {offer.region}) costs ${offer.hourly_usd:,.4f}/h, over the budget "
            f"max_hourly_usd ${budget:,.2f}/h (catalog prices as of {offer.as_of})"
        ]
    return []


def check_stack_budget(resources: Iterable[tuple[Any, ...]], config: PolicyConfig) -> list[str]:
    """All of the stack's GPU instances together must cost no more than ``max_hourly_usd`` an
    hour (a multi-node plan's budget is for all of its nodes). Instances the catalog cannot
    price are left to ``check_hourly_budget``, which reports them. ``resources``: ``(type,
    props)`` or ``(type, props, region)`` tuples."""
    if config.max_hourly_usd is None:
        return []
    total, count = 0.0, 0
    for typ, props, region in _stack_items(resources):
        if typ not in GPU_INSTANCES:
            continue
        offer = instance_offer(typ, props, config, region)
        if offer is not None:
            total += offer.hourly_usd
            count += 1
    problems: list[str] = []
    templates = [props for typ, props, _ in _stack_items(resources) if typ in GCP_TEMPLATES]
    for typ, props, region in _stack_items(resources):
        if typ not in (AWS_GROUP, *GCP_GROUPS):
            continue
        worst, unpriced = group_hourly(typ, props, templates, config, region)
        if unpriced:
            problems.append(
                f"no catalog price for {', '.join(unpriced)} in {region or 'any region'}: cannot show "
                f"the group {props.get('name')!r} is within the budget"
            )
        total += worst
        count += 1
    if total > config.max_hourly_usd + PRICE_TOLERANCE_USD:
        problems.append(
            f"the stack's {count} GPU instance(s) and group(s) cost up to ${total:,.4f}/h together, over "
            f"the budget max_hourly_usd ${config.max_hourly_usd:,.2f}/h"
        )
    return problems


def group_hourly(
    resource_type: str,
    props: Mapping[str, Any],
    templates: Sequence[Mapping[str, Any]],
    config: PolicyConfig,
    region: str | None,
) -> tuple[float, list[str]]:
    """The most a fleet group can cost an hour, and the types the catalog cannot price: over the
    types it may launch, price × instances needed for its capacity (AWS: ⌈max size ÷ weight⌉,
    in the market its instances distribution says; GCP: target size, in the template's market,
    with its attached GPUs)."""
    worst, unpriced = 0.0, []
    if resource_type == AWS_GROUP:
        policy = _map(props.get("mixedInstancesPolicy"))
        distribution = _map(policy.get("instancesDistribution"))
        spot = _count(distribution.get("onDemandPercentageAboveBaseCapacity")) == 0
        capacity = _count(props.get("maxSize")) or 0
        for override in _seq(_map(policy.get("launchTemplate")).get("overrides")):
            o = _map(override)
            weight = _count(o.get("weightedCapacity")) or 1
            shape = {"instanceType": o.get("instanceType")}
            if spot:
                shape["instanceMarketOptions"] = {"marketType": "spot"}
            offer = instance_offer(AWS_INSTANCE, shape, config, region, resource_zones(AWS_GROUP, props))
            if offer is None:
                unpriced.append(f"aws {o.get('instanceType')}")
                continue
            worst = max(worst, offer.hourly_usd * -(-capacity // weight))
        return worst, unpriced
    template = templates[0] if templates else {}
    raw = _map(props.get("instanceFlexibilityPolicy")).get("instanceSelections")
    # Pulumi passes the selections as a list; the Compute API writes them as a map by name.
    selections = list(raw.values()) if isinstance(raw, Mapping) else list(_seq(raw))
    types = [t for sel in selections for t in _seq(_map(sel).get("machineTypes"))]
    if not types:
        types = [_last_segment(template.get("machineType"))]
    for machine_type in types:
        shape = {
            "machineType": machine_type,
            "guestAccelerators": template.get("guestAccelerators"),
            "scheduling": template.get("scheduling"),
        }
        offer = instance_offer(GCP_INSTANCE, shape, config, region, resource_zones(GCP_GROUPS[0], props))
        if offer is None:
            unpriced.append(f"gcp {machine_type}")
            continue
        worst = max(worst, offer.hourly_usd * (_count(props.get("targetSize")) or 0))
    return worst, unpriced


# -- 3. IMDSv2 -----------------------------------------------------------------------------------


def check_imdsv2(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """An AWS instance requires IMDSv2 session tokens (``metadataOptions.httpTokens`` = required):
    IMDSv1 hands the instance role's credentials to any SSRF."""
    del config
    if resource_type not in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
        return []
    tokens = _map(props.get("metadataOptions")).get("httpTokens")
    if tokens != "required":
        shown = "unset (defaults to optional)" if tokens is None else repr(tokens)
        return [f"metadataOptions.httpTokens is {shown}: IMDSv2 must be required"]
    return []


# -- 4. encrypted disks --------------------------------------------------------------------------


def check_disk_encryption(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """AWS disks are encrypted: an instance's ``rootBlockDevice`` and every ``ebsBlockDevices``
    entry, and every ``aws:ebs/volume:Volume``, set ``encrypted`` true (an absent root block
    device means the AMI's default, unencrypted unless the account defaults otherwise)."""
    del config
    if resource_type == AWS_EBS_VOLUME:
        if props.get("encrypted") is True:
            return []
        return ["EBS volume is not encrypted (encrypted must be true)"]
    if resource_type == AWS_LAUNCH_TEMPLATE:
        mappings = [_map(m) for m in _seq(props.get("blockDeviceMappings"))]
        if not mappings:
            return ["blockDeviceMappings is empty: the root volume takes the AMI's default encryption"]
        return [
            f"blockDeviceMappings[{i}] ({m.get('deviceName')}) is not encrypted (ebs.encrypted must be true)"
            for i, m in enumerate(mappings)
            if str(_map(m.get("ebs")).get("encrypted")).lower() != "true"
        ]
    if resource_type != AWS_INSTANCE:
        return []
    problems: list[str] = []
    if _map(props.get("rootBlockDevice")).get("encrypted") is not True:
        problems.append("rootBlockDevice is not encrypted (rootBlockDevice.encrypted must be true)")
    for index, entry in enumerate(_seq(props.get("ebsBlockDevices"))):
        device = _map(entry)
        if device.get("encrypted") is not True:
            name = device.get("deviceName") or f"#{index}"
            problems.append(f"ebsBlockDevices[{index}] ({name}) is not encrypted (encrypted must be true)")
    return problems


# -- 5. no ingress from anywhere ---------------------------------------------------------------------


def _open_cidrs(values: Iterable[Any]) -> list[str]:
    return [str(v) for v in values if _is_open(v)]


def check_no_open_ingress(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """No inbound rule admits the whole internet (``0.0.0.0/0``, ``::/0`` or any /0): security
    group inline ``ingress`` rules, ``SecurityGroupIngressRule``, ``SecurityGroupRule`` of type
    ingress, and GCP ``INGRESS`` firewalls that allow traffic (a GCP ingress rule with no
    source at all applies to 0.0.0.0/0 as well)."""
    del config
    problems: list[str] = []
    opened_on_purpose = _map(props.get("tags")).get(OPEN_ENDPOINT_TAG) == "true"
    if resource_type == AWS_SECURITY_GROUP:
        for index, entry in enumerate(_seq(props.get("ingress"))):
            rule = _map(entry)
            if opened_on_purpose and (_count(rule.get("fromPort")), _count(rule.get("toPort"))) in (
                (80, 80),
                (443, 443),
            ):
                continue  # a load balancer's listener the spec opened (access.allow_api_from_anywhere)
            opened = _open_cidrs([*_seq(rule.get("cidrBlocks")), *_seq(rule.get("ipv6CidrBlocks"))])
            problems += [f"ingress[{index}] admits {c} (ports {_ports(rule)})" for c in opened]
    elif resource_type == AWS_SG_INGRESS_RULE:
        opened = _open_cidrs([props.get("cidrIpv4"), props.get("cidrIpv6")])
        problems += [f"ingress rule admits {c} (ports {_ports(props)})" for c in opened]
    elif resource_type == AWS_SG_RULE and str(props.get("type") or "").lower() == "ingress":
        opened = _open_cidrs([*_seq(props.get("cidrBlocks")), *_seq(props.get("ipv6CidrBlocks"))])
        problems += [f"ingress rule admits {c} (ports {_ports(props)})" for c in opened]
    elif resource_type == GCP_FIREWALL and str(props.get("direction") or "INGRESS").upper() == "INGRESS":
        if not _seq(props.get("allows")) and _seq(props.get("denies")):
            return []  # a deny rule shuts traffic out, whatever its sources
        ranges = _seq(props.get("sourceRanges"))
        problems += [f"INGRESS firewall admits {c}" for c in _open_cidrs(ranges)]
        if not ranges and not _seq(props.get("sourceTags")) and not _seq(props.get("sourceServiceAccounts")):
            problems.append("INGRESS firewall names no source: Compute Engine applies it to 0.0.0.0/0")
    return problems


def _ports(rule: Mapping[str, Any]) -> str:
    low, high = _count(rule.get("fromPort")), _count(rule.get("toPort"))
    protocol = rule.get("protocol") or rule.get("ipProtocol") or "?"
    return f"{protocol} {low}-{high}" if low is not None else str(protocol)


# -- 6. private buckets ----------------------------------------------------------------------------------


def check_private_buckets(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """Buckets stay private: an S3 public access block sets all four flags; no S3 bucket or
    bucket ACL grants a canned public ACL; a GCS bucket enforces public access prevention and
    uniform bucket-level access; no GCS bucket IAM grant names allUsers/allAuthenticatedUsers."""
    del config
    if resource_type == AWS_PUBLIC_ACCESS_BLOCK:
        off = [flag for flag in PUBLIC_ACCESS_BLOCK_FLAGS if props.get(flag) is not True]
        return [f"public access block leaves {flag} off (all four flags must be true)" for flag in off]
    if resource_type in AWS_ACL_TYPES:
        acl = props.get("acl")
        return [f"acl {acl!r} makes the bucket public"] if acl in PUBLIC_ACLS else []
    if resource_type == GCP_BUCKET:
        problems: list[str] = []
        prevention = props.get("publicAccessPrevention")
        if prevention != "enforced":
            problems.append(f"publicAccessPrevention is {prevention!r}, not 'enforced'")
        if props.get("uniformBucketLevelAccess") is not True:
            problems.append("uniformBucketLevelAccess is not true: object ACLs could make objects public")
        return problems
    if resource_type == GCP_BUCKET_IAM_MEMBER:
        member = props.get("member")
        return [f"grants {props.get('role')} to {member}"] if member in PUBLIC_MEMBERS else []
    if resource_type == GCP_BUCKET_IAM_BINDING:
        public = [m for m in _seq(props.get("members")) if m in PUBLIC_MEMBERS]
        return [f"grants {props.get('role')} to {m}" for m in public]
    return []


# -- 7. endpoints and secrets -------------------------------------------------------------------

SECRET_PATTERNS = (
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "a Hugging Face token"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"(?:VLLM_API_KEY|HF_TOKEN|GPUFIT_API_KEY)=(?!%s|\$)\S+"), "a secret assigned in plain text"),
    (re.compile(r"--api-key[ =](?![\"']?\$)\S+"), "an API key on a command line"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
)
"""What a secret looks like in a boot script: a value, where gpufit writes only references (a
secret's ARN or name) and shell variables filled on the machine."""


def boot_data(resource_type: str, props: Mapping[str, Any]) -> str:
    """The boot script a machine or machine template carries (launch templates: base64)."""
    if resource_type == AWS_LAUNCH_TEMPLATE:
        import base64
        import binascii

        raw = str(props.get("userData") or "")
        try:
            return base64.b64decode(raw, validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return raw
    if resource_type == AWS_INSTANCE:
        return str(props.get("userData") or "")
    if resource_type in (GCP_INSTANCE, *GCP_TEMPLATES):
        metadata = _map(props.get("metadata"))
        return str(metadata.get("startup-script") or "") + str(props.get("metadataStartupScript") or "")
    return ""


def check_no_secrets_in_boot_data(
    resource_type: str, props: Mapping[str, Any], config: PolicyConfig
) -> list[str]:
    """No secret value in user data or a startup script: anyone who may describe the instance
    (or read the stack's state) could read it. Secrets go to Secrets Manager / Secret Manager
    and the boot script names them."""
    del config
    text = boot_data(resource_type, props)
    return [
        f"the boot script holds {what}: move it to the secret store"
        for rx, what in SECRET_PATTERNS
        if rx.search(text)
    ]


ALB = "aws:lb/loadBalancer:LoadBalancer"
GCP_SECURITY_POLICY = "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy"
OPEN_BY_CHOICE = "access.allow_api_from_anywhere"
OPEN_ENDPOINT_TAG = "gpufit:open-endpoint"
"""The marker gpufit writes (AWS tag ``gpufit:open-endpoint``, GCP description) when the spec
opted in to an endpoint open to the whole internet."""


def check_endpoint_access(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """An internet-facing endpoint admits named CIDRs only, unless the spec opted in: an AWS
    load balancer must have security groups (an ALB without one admits everyone), and a Cloud
    Armor policy may allow everyone (``*``, 0.0.0.0/0, ::/0) only when its description carries
    ``access.allow_api_from_anywhere``."""
    del config
    if resource_type == ALB and props.get("internal") is not True and not _seq(props.get("securityGroups")):
        return ["an internet-facing load balancer without a security group admits everyone"]
    if resource_type == GCP_SECURITY_POLICY and OPEN_BY_CHOICE not in str(props.get("description") or ""):
        problems = []
        for rule in _seq(props.get("rules")):
            r = _map(rule)
            ranges = _seq(_map(_map(r.get("match")).get("config")).get("srcIpRanges"))
            if str(r.get("action", "")).startswith("allow") and any(v == "*" or _is_open(v) for v in ranges):
                problems.append(f"rule {r.get('priority')} allows every address: name access.api_cidrs")
        return problems
    return []


RESOURCE_VALIDATORS = (
    check_expiry,
    check_hourly_budget,
    check_imdsv2,
    check_disk_encryption,
    check_no_open_ingress,
    check_private_buckets,
    check_no_secrets_in_boot_data,
    check_endpoint_access,
)
"""Every per-resource validator, each callable as ``check(resource_type, props, config)``."""

STACK_VALIDATORS = (check_stack, check_fleet_deadline, check_stack_budget)
"""Every stack validator, each callable as ``check(resources, config)``."""
