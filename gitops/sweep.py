"""``gpufit sweep``: the cloud-neutral part: which gpufit instances are orphans, and the report.

Every machine gpufit provisions carries its expiry (AWS tags ``gpufit:managed``,
``gpufit:expires-at``, ...; GCP labels ``gpufit-managed``, ``gpufit-expires-at``, ...), and
its own deadline (an EventBridge schedule, Compute Engine's ``max_run_duration``) normally
removes it. A machine whose stack was lost, whose deadline failed, or whose tags were edited
is an orphan that no stack may remember: ``decide`` picks, from its tags alone, the managed
ones whose expiry has passed or that carry no valid expiry. An instance without the managed
tag/label set to exactly ``"true"`` is never a candidate, whatever else it carries; and tags
are not proof on their own (anyone who may tag an instance could tag it ``gpufit:managed``): the
providers also require the stack and workload tags and evidence that gpufit made the machine
(``Candidate.provenance``, reported with the reason), and leave the rest alone with a note.

The clouds' listings and actions live in ``providers.aws.sweep`` and ``providers.gcp.sweep``;
they return a ``SweepResult`` each, which ``render`` and ``to_json`` report. Prices come from a
``Pricer`` built on the catalog in use. No cloud SDK is imported here; nothing reads the clock
(``now`` is always passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from deployment import (
    TAG_EXPIRES_AT,
    TAG_MANAGED,
    TAG_STACK,
    TAG_WORKLOAD,
    iso_utc,
    parse_gcp_label_time,
    parse_iso_utc,
)

LABEL_MANAGED = "gpufit-managed"
LABEL_STACK = "gpufit-stack"
LABEL_WORKLOAD = "gpufit-workload"
LABEL_EXPIRES_AT = "gpufit-expires-at"

Reason = Literal["expired", "no expiry", "malformed expiry"]
EXPIRED: Reason = "expired"
NO_EXPIRY: Reason = "no expiry"
MALFORMED: Reason = "malformed expiry"

PriceFn = Callable[[str, str, str, str | None, str], float | None]
"""``price(cloud, instance_type, region, zone, market)``: USD an hour, or None if unknown."""


# ---------------------------------------------------------------------------------- decision


def _keys(tags: Mapping[str, str], cloud: str | None) -> tuple[str, str, str, str, Callable[[str], datetime]]:
    """The managed, stack, workload and expiry keys of the cloud's scheme, and the expiry's
    parser: AWS tags (``gpufit:...``, ISO 8601) or GCP labels (``gpufit-...``, label form).
    Without ``cloud`` the scheme is the one whose managed key the tags carry (AWS first)."""
    aws = (TAG_MANAGED, TAG_STACK, TAG_WORKLOAD, TAG_EXPIRES_AT, parse_iso_utc)
    gcp = (LABEL_MANAGED, LABEL_STACK, LABEL_WORKLOAD, LABEL_EXPIRES_AT, parse_gcp_label_time)
    if cloud == "aws":
        return aws
    if cloud == "gcp":
        return gcp
    return aws if TAG_MANAGED in tags or LABEL_MANAGED not in tags else gcp


def is_managed(tags: Mapping[str, str], cloud: str | None = None) -> bool:
    """The managed tag/label is present and exactly ``"true"``."""
    return tags.get(_keys(tags, cloud)[0]) == "true"


def read_expiry(tags: Mapping[str, str], cloud: str | None = None) -> tuple[datetime | None, Reason | None]:
    """``(expiry, None)`` for a valid expiry; ``(None, "no expiry")`` when the tag is missing or
    blank; ``(None, "malformed expiry")`` when it does not parse, a time without a zone included
    (gpufit always writes UTC with ``Z``; a zone-less time could be any zone)."""
    *_, key, parse = _keys(tags, cloud)
    text = tags.get(key)
    if text is None or not text.strip():
        return None, NO_EXPIRY
    try:
        return parse(text.strip()), None
    except ValueError:
        return None, MALFORMED


def decide(tags: Mapping[str, str], now: datetime, cloud: str | None = None) -> Reason | None:
    """Why a machine with these tags (AWS) or labels (GCP) is to be swept, or None to leave it:
    not managed by gpufit (never touched), or its expiry still ahead. ``now`` must be aware."""
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone")
    if not is_managed(tags, cloud):
        return None
    expiry, problem = read_expiry(tags, cloud)
    if problem is not None:
        return problem
    assert expiry is not None
    return EXPIRED if expiry <= now else None


def stack_and_workload(tags: Mapping[str, str], cloud: str | None = None) -> tuple[str | None, str | None]:
    _, stack, workload, _, _ = _keys(tags, cloud)
    return tags.get(stack), tags.get(workload)


# ---------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Candidate:
    """One orphan to stop: a machine, or a fleet group (an Auto Scaling group, a managed
    instance group) that would otherwise relaunch machines; a group's ``hourly_usd`` is what its
    running machines cost together. ``hourly_usd`` is the catalog's price of its instance type in its
    region and market (None: not in the catalog); ``billing`` is whether it is running, so
    that stopping it stops that hourly cost (a stopped machine bills only its disk)."""

    cloud: str
    region: str
    zone: str | None
    instance_id: str
    name: str | None
    instance_type: str
    stack: str | None
    workload: str | None
    expires_at: datetime | None
    reason: Reason
    hourly_usd: float | None
    market: str
    state: str = "running"
    billing: bool = True
    kind: str = "instance"  # or "group": a fleet group (``instance_id`` is then its name)
    provenance: str = ""  # why it is gpufit's beyond its tags (the launch template, the profile, ...)

    @property
    def stops_usd(self) -> float | None:
        """The hourly cost that removing it stops: 0 when it is not running, None if unknown."""
        if not self.billing:
            return 0.0
        return self.hourly_usd


@dataclass
class SweepResult:
    """What one cloud's sweep found and did. ``actions`` maps an instance id to what happened
    to it (``terminating``, ``deleting``, ``already gone``); ``failed`` to why its removal failed.
    ``regions_failed`` names the regions whose listing or actions failed after their retries
    (``"*"``: every region). ``auth_error`` is set when credentials or a permission are missing."""

    cloud: str
    acted: bool = False
    candidates: list[Candidate] = field(default_factory=list)
    actions: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    regions_ok: set[str] = field(default_factory=set)
    regions_failed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    auth_error: str | None = None
    calls: int = 0

    def sort(self) -> None:
        self.candidates.sort(key=lambda c: (c.region, c.zone or "", c.name or "", c.instance_id))


# ---------------------------------------------------------------------------------- prices


class Pricer:
    """Hourly prices from a catalog's offers, by cloud, instance type, region, zone and market:
    the offer for the machine's own zone if the catalog has zone prices (AWS spot), else the
    region's zone-less offer; None when neither exists."""

    def __init__(self, offers: Iterable[Any]) -> None:
        self._prices: dict[tuple[str, str, str, str | None, str], float] = {}
        for offer in offers:
            self._prices[offer.key] = float(offer.hourly_usd)

    @classmethod
    def empty(cls) -> Pricer:
        return cls(())

    def __call__(
        self, cloud: str, instance_type: str, region: str, zone: str | None, market: str
    ) -> float | None:
        if zone is not None:
            found = self._prices.get((cloud, instance_type, region, zone, market))
            if found is not None:
                return found
        return self._prices.get((cloud, instance_type, region, None, market))


# ---------------------------------------------------------------------------------- report


def totals(results: Iterable[SweepResult], done_only: bool) -> tuple[float, int, int]:
    """(USD an hour stopped, candidates counted, candidates of unknown price): over every
    candidate, or (``done_only``) those whose removal was accepted."""
    usd, count, unknown = 0.0, 0, 0
    for result in results:
        for c in result.candidates:
            if done_only and c.instance_id not in result.actions:
                continue
            count += 1
            stops = c.stops_usd
            if stops is None:
                unknown += 1
            else:
                usd += stops
    return usd, count, unknown


def to_json(results: list[SweepResult]) -> dict[str, Any]:
    acted = any(r.acted for r in results)
    usd, count, unknown = totals(results, done_only=acted)
    return {
        "mode": "act" if acted else "dry-run",
        "instances": count,
        "hourly_usd_stopped": round(usd, 6),
        "unpriced": unknown,
        "clouds": [
            {
                "cloud": r.cloud,
                "regions_ok": sorted(r.regions_ok),
                "regions_failed": dict(sorted(r.regions_failed.items())),
                "auth_error": r.auth_error,
                "notes": r.notes,
                "candidates": [
                    {
                        "cloud": c.cloud,
                        "region": c.region,
                        "zone": c.zone,
                        "instance_id": c.instance_id,
                        "name": c.name,
                        "instance_type": c.instance_type,
                        "market": c.market,
                        "state": c.state,
                        "stack": c.stack,
                        "workload": c.workload,
                        "expires_at": iso_utc(c.expires_at) if c.expires_at else None,
                        "reason": c.reason,
                        "hourly_usd": c.hourly_usd,
                        "billing": c.billing,
                        "kind": c.kind,
                        "provenance": c.provenance,
                        "result": r.actions.get(c.instance_id),
                        "error": r.failed.get(c.instance_id),
                    }
                    for c in r.candidates
                ],
            }
            for r in results
        ],
    }
