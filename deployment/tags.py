"""The tags (AWS) and labels (GCP) on everything gpufit creates, and the two spellings of its
expiry: ISO 8601 in AWS tags, the label-safe form in GCP labels."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

TAG_MANAGED = "gpufit:managed"
TAG_STACK = "gpufit:stack"
TAG_WORKLOAD = "gpufit:workload"
TAG_EXPIRES_AT = "gpufit:expires-at"
TAG_PROJECT = "gpufit:project"
"""AWS: the Pulumi project of a multi-node job's nodes (on the instances and, through their
launch template, on their Spot requests): a stack's name is unique only inside its project, so
``gpufit up`` cancels only the requests that carry all of managed, project, stack and workload."""
TAG_ZONES = "gpufit:zones"
r"""AWS: the AZ IDs the machines may launch in, separated by spaces (``use1-az1 use1-az2``), so
that a policy prices them in those zones: AWS spot is priced per zone and a group's subnets do
not name their AZ IDs. A space, not a comma: IAM and Elastic Load Balancing tag values take
only ``[\p{L}\p{Z}\p{N}_.:/=+\-@]`` (https://docs.aws.amazon.com/IAM/latest/APIReference/API_Tag.html),
and the same tags go on every resource."""
ZONE_SEPARATOR = " "


def zones_tag(zones: tuple[str, ...]) -> str:
    return ZONE_SEPARATOR.join(zones)


def parse_zones_tag(value: str) -> tuple[str, ...]:
    """The zones a ``gpufit:zones`` value names: spaces since the separator changed, commas in
    the state of stacks created before."""
    return tuple(z for z in re.split(r"[\s,]+", value) if z)


LABEL_DEADLINE_LAYER = "gpufit-deadline-layer"
"""GCP: on an instance template whose deadline lay more than Compute Engine's 120 days away
when it was made, ``scheduler``: the template carries no termination time and the group's
Cloud Scheduler resize job is its cloud-side deadline (the policy pack then requires that job
and does not ask the template for a VM-side one, on any later day of the stack's life)."""
DEADLINE_LAYER_SCHEDULER = "scheduler"


NAME_DIGEST_LENGTH = 8


def name_digest(seed: str) -> str:
    """A short stable digest that keeps two names apart once they are cut or changed."""
    return hashlib.sha256(seed.encode()).hexdigest()[:NAME_DIGEST_LENGTH]


def fitted_name(text: str, limit: int, seed: str | None = None) -> str:
    """``text`` when it fits ``limit`` and equals ``seed`` (the full name it stands for; default
    ``text``); else its head, ``-`` and a digest of ``seed``: two names that share a head, or
    that one sanitising made equal, stay apart, and the same name always becomes the same."""
    seed = text if seed is None else seed
    if len(text) <= limit and text == seed:
        return text
    head = text[: limit - NAME_DIGEST_LENGTH - 1].rstrip("-_")
    return f"{head}-{name_digest(seed)}" if head else name_digest(seed)[:limit]


def iso_utc(moment: datetime) -> str:
    """``2026-12-04T13:00:00Z``: the expiry as tags carry it."""
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso_utc(text: str) -> datetime:
    """The inverse of ``iso_utc`` (also accepts an explicit offset); ValueError if malformed."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return value.astimezone(UTC)


def gcp_label_time(moment: datetime) -> str:
    """GCP label values allow only lowercase letters, digits, ``-`` and ``_``:
    ``2026-12-04t13-00-00z``."""
    return iso_utc(moment).lower().replace(":", "-")


def parse_gcp_label_time(text: str) -> datetime:
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2})t(\d{2})-(\d{2})-(\d{2})z", text)
    if not match:
        raise ValueError(f"{text!r} is not a gpufit expiry label")
    date, hh, mm, ss = match.groups()
    return parse_iso_utc(f"{date}T{hh}:{mm}:{ss}Z")


def gcp_label(text: str) -> str:
    """A GCP label value: lowercase, [a-z0-9_-], at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:63]
