"""What the validators read from a resource: the Pulumi type tokens and gpufit tag names they
check, the policy config, readers that accept any ``Mapping``/``Sequence`` the engine hands
over, and the two spellings of an expiry. No ``pulumi_policy`` import and no clock.

Constants mirror ``deployment`` and ``providers.aws.component`` (tests check they agree); they
are repeated rather than imported because those pull in the selector's planning code and
pydantic, while the pack only needs ``selector.catalog`` (and PyYAML) for prices."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from selector.reach import from_anywhere

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
TAG_ZONES = "gpufit:zones"  # AWS: the AZ IDs a resource's machines may launch in (deployment/tags.py)
LABEL_EXPIRES_AT = "gpufit-expires-at"
LABEL_DEADLINE_LAYER = "gpufit-deadline-layer"
"""On a GCP template made more than 120 days before its deadline, ``scheduler``: its cloud-side
deadline is the group's Cloud Scheduler job (``check_fleet_deadline``), not a VM-side one."""
DEADLINE_LAYER_SCHEDULER = "scheduler"
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
AWS_ZONE = re.compile(r"([a-z]{2}(?:-[a-z]+)+-\d+)[a-z]")
_AT_EXPRESSION = re.compile(r"at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)")


@dataclass(frozen=True)
class PolicyConfig:
    """What the validators need besides the resource: the present (``now``, timezone-aware), the
    stack's hourly budget in USD (None: no budget, the price policies pass), the catalog file
    to price against (None: the selector's embedded snapshot) and the stack's plain-HTTP opt-in."""

    now: datetime
    max_hourly_usd: float | None = None
    catalog: str | None = None
    allow_plain_http: bool = False
    """The stack's ``serving.allow_plain_http``, passed as policy config by the workflows
    (``policy/stack_config.py``): without it no plain-HTTP front end passes, whatever it is
    tagged."""

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
    plain = raw.get("allow_plain_http", False)
    if not isinstance(plain, bool):
        raise ValueError(f"allow_plain_http must be true or false, not {plain!r}")
    return PolicyConfig(now=now, max_hourly_usd=budget, catalog=catalog or None, allow_plain_http=plain)


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_seq(value: Any) -> Sequence[Any]:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return value
    return ()


def last_segment(value: Any) -> str:
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


def is_open(cidr: Any) -> bool:
    """True for a CIDR that alone admits the internet at large (``0.0.0.0/0``, ``::/0``, ``*``,
    or any block of more public addresses than ``selector.reach`` allows, such as
    ``0.0.0.0/1``)."""
    return cidr is not None and from_anywhere([cidr])


def instance_expiry(resource_type: str, props: Mapping[str, Any]) -> tuple[datetime | None, str | None]:
    """(expiry, None) from the instance's (or machine template's) gpufit expiry tag or label,
    or (None, why not). A launch template must also pass the tag to the instances it launches
    (``tagSpecifications`` of resource type ``instance``)."""
    if resource_type == AWS_LAUNCH_TEMPLATE:
        specs = [
            as_map(t)
            for t in as_seq(props.get("tagSpecifications"))
            if as_map(t).get("resourceType") == "instance"
        ]
        if not any(as_map(t.get("tags")).get(TAG_EXPIRES_AT) for t in specs):
            return None, f"tagSpecifications give launched instances no {TAG_EXPIRES_AT!r} tag"
    if resource_type in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
        key, value = TAG_EXPIRES_AT, as_map(props.get("tags")).get(TAG_EXPIRES_AT)
        parse = parse_iso
        where = f"tag {key!r}"
    else:
        key, value = LABEL_EXPIRES_AT, as_map(props.get("labels")).get(LABEL_EXPIRES_AT)
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


def as_count(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def duration_seconds(duration: Mapping[str, Any]) -> float | None:
    try:
        seconds = float(duration.get("seconds") or 0) + float(duration.get("nanos") or 0) / 1e9
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def fire_time(props: Mapping[str, Any]) -> datetime | None:
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


def stack_items(
    resources: Iterable[tuple[Any, ...]],
) -> list[tuple[str, Mapping[str, Any], str | None]]:
    items: list[tuple[str, Mapping[str, Any], str | None]] = []
    for entry in resources:
        typ, props = str(entry[0]), as_map(entry[1])
        region = entry[2] if len(entry) > 2 and isinstance(entry[2], str) else None
        items.append((typ, props, region))
    return items


def is_time(value: Any) -> bool:
    try:
        parse_iso(str(value))
    except ValueError:
        return False
    return True


EMBEDDED_FILE = re.compile(r"printf '%s' '([A-Za-z0-9+/=]+)' \| base64 -d \| gunzip")
"""How gpufit's bootstrap carries each file it writes (machine/boot.py): gzip, then base64."""


def with_embedded_files(text: str) -> str:
    """``text`` followed by every file its bootstrap writes, decoded: a secret in any of them is
    a secret in the boot data."""
    import base64
    import binascii
    import gzip

    parts = [text]
    for blob in EMBEDDED_FILE.findall(text):
        try:
            parts.append(gzip.decompress(base64.b64decode(blob)).decode("utf-8", "replace"))
        except (binascii.Error, OSError, EOFError):
            continue
    return "\n".join(parts)


def boot_data(resource_type: str, props: Mapping[str, Any]) -> str:
    """The boot script a machine or machine template carries (launch templates: base64), with
    the files it embeds."""
    return with_embedded_files(_boot_text(resource_type, props))


def _boot_text(resource_type: str, props: Mapping[str, Any]) -> str:
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
        metadata = as_map(props.get("metadata"))
        return str(metadata.get("startup-script") or "") + str(props.get("metadataStartupScript") or "")
    return ""
