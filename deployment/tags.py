"""The tags (AWS) and labels (GCP) on everything gpufit creates, and the two spellings of its
expiry: ISO 8601 in AWS tags, the label-safe form in GCP labels."""

from __future__ import annotations

import re
from datetime import UTC, datetime

TAG_MANAGED = "gpufit:managed"
TAG_STACK = "gpufit:stack"
TAG_WORKLOAD = "gpufit:workload"
TAG_EXPIRES_AT = "gpufit:expires-at"
TAG_ZONES = "gpufit:zones"
"""AWS: the AZ IDs the machines may launch in (comma-separated), so that a policy prices them
in those zones: AWS spot is priced per zone and a group's subnets do not name their AZ IDs."""


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
