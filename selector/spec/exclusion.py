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


class ExcludeSpec(Strict):
    """One (cloud, region, instance type) the plan must not use: ``gpufit up`` appends one when
    a fleet stayed empty for lack of capacity there, with the cloud's words as ``reason``."""

    cloud: Cloud
    region: str = Field(..., description="region name or glob")
    instance_type: str = Field(..., description="instance type name or glob")
    market: Literal["on-demand", "spot"] | None = Field(None, description="only this market (default: both)")
    reason: str | None = Field(None, max_length=300, description="why (e.g. the cloud's capacity error)")
    at: str | None = Field(None, max_length=40, description="when it was excluded (ISO 8601 UTC)")

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
