"""``placement.exclude``: the (cloud, region, instance type) triples a plan must not use."""

from __future__ import annotations

import fnmatch
import re
from typing import Literal

from pydantic import Field, field_validator

from selector.spec.fields import Cloud, Strict

_PLACE_RE = re.compile(r"[a-z0-9*?][a-z0-9.*?-]{0,62}")
"""An excluded region or instance type: a name or glob of lower-case letters, digits, ``.``,
``-`` and the glob marks ``*`` ``?`` (AWS and GCP region and type names are all of that form)."""

REASON_MAX = 300
_REASON_RE = re.compile(r"[\x20-\x7e]{1,300}")
_REASON_MARKUP = frozenset("<>`")
"""A reason is one line of printable ASCII (the clouds' error messages are), without the marks
that open an HTML tag or a Markdown code span; it is shown in the plan's pull-request comment,
where the other Markdown marks are escaped (cli/render.py)."""
_PULUMI_TYPED = re.compile(r"true|false|-?[0-9]+")
"""Values ``pulumi config set --path`` stores as a boolean or an integer, not a string (pulumi
sdk/go/common/resource/config ``adjustObjectValue``): a reason must survive the round trip."""
_AT_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def clean_reason(text: str) -> str:
    """A cloud's message as a valid ``reason``: one line, printable, no markup marks, bounded."""
    flat = " ".join(text.split())
    kept = "".join(c if " " <= c <= "~" and c not in _REASON_MARKUP else "?" for c in flat)
    kept = kept[:REASON_MAX].strip()
    return kept if kept and not _PULUMI_TYPED.fullmatch(kept) else f"cloud said: {kept}"[:REASON_MAX]


class ExcludeSpec(Strict):
    """One (cloud, region, instance type) the plan must not use: ``gpufit up`` appends one when
    a fleet stayed empty for lack of capacity there, with the cloud's words as ``reason``."""

    cloud: Cloud
    region: str = Field(..., description="region name or glob")
    instance_type: str = Field(..., description="instance type name or glob")
    market: (
        Literal["on-demand", "spot", "capacity-block", "flex-start", "reservation", "calendar-reservation"]
        | None
    ) = Field(None, description="only this market (default: all)")
    reason: str | None = Field(
        None,
        max_length=REASON_MAX,
        description="why (e.g. the cloud's capacity error): one line of printable ASCII, no < > `",
    )
    at: str | None = Field(None, description="when it was excluded (ISO 8601 UTC, YYYY-MM-DDTHH:MM:SSZ)")

    @field_validator("reason")
    @classmethod
    def _one_printable_line(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _REASON_RE.fullmatch(value):
            raise ValueError(
                f"expected one line of printable ASCII (at most {REASON_MAX} characters), "
                "no line break or control character"
            )
        if _REASON_MARKUP & set(value):
            raise ValueError(
                "expected no < > or ` (they open HTML tags and code spans in the plan's PR comment)"
            )
        if _PULUMI_TYPED.fullmatch(value):
            raise ValueError(
                f"{value!r}: expected words, not a bare number or true/false (Pulumi would type it)"
            )
        return value

    @field_validator("at")
    @classmethod
    def _iso_utc(cls, value: str | None) -> str | None:
        if value is not None and not _AT_RE.fullmatch(value):
            raise ValueError(f"{value[:40]!r}: expected an ISO 8601 UTC time like 2026-12-04T12:00:00Z")
        return value

    @field_validator("region", "instance_type")
    @classmethod
    def _name_or_glob(cls, value: str) -> str:
        if not _PLACE_RE.fullmatch(value):
            raise ValueError(f"{value!r}: expected a name or glob of a-z 0-9 . - * ? (at most 63)")
        return value

    def matches(self, cloud: str, region: str, instance_type: str, market: str) -> bool:
        return (
            cloud == self.cloud
            and self.market in (None, market)
            and fnmatch.fnmatchcase(region, self.region)
            and fnmatch.fnmatchcase(instance_type, self.instance_type)
        )

    @property
    def label(self) -> str:
        return f"{self.cloud} {self.region} {self.instance_type}" + (f" {self.market}" if self.market else "")


class AttemptSpec(Strict):
    """The one offer a plan may use while ``gpufit up`` tries a fallback its first plan listed
    (a multi-node replica's next type): written to the stack's config with that attempt, so the
    Pulumi program plans exactly it; kept after that attempt came into service (a plain
    ``pulumi up`` keeps its nodes), removed when ``gpufit up`` re-plans and when a new
    ``gpufit up`` run starts."""

    cloud: Cloud
    region: str
    zone: str | None = Field(None, description="the offer's zone (AWS AZ ID); none: a region-level offer")
    instance_type: str
    market: Literal["on-demand", "spot"]

    @field_validator("region", "zone", "instance_type")
    @classmethod
    def _plain_name(cls, value: str | None) -> str | None:
        if value is not None and (not _PLACE_RE.fullmatch(value) or set(value) & set("*?")):
            raise ValueError(f"{value!r}: expected a name of a-z 0-9 . - (at most 63), no glob")
        return value

    def holds(self, cloud: str, region: str, zone: str | None, instance_type: str, market: str) -> bool:
        return (cloud, region, zone, instance_type, market) == (
            self.cloud,
            self.region,
            self.zone,
            self.instance_type,
            self.market,
        )

    @property
    def label(self) -> str:
        return f"{self.cloud} {self.instance_type} {self.market} in {self.zone or self.region}"
