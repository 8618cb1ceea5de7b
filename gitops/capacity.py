"""What a cloud's launch failure means for ``gpufit up``: no capacity there (fail over to the
next plan), an account quota (stop: another region needs its own quota increase) or something
else (stop and show it). The rules are data (``capacity_errors.yaml``), each written from the
cloud's own message with its source; no cloud SDK is imported here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from selector.datafile import load_yaml

RULES_FILE = Path(__file__).with_name("capacity_errors.yaml")
Verdict = Literal["capacity", "quota", "other"]


@dataclass(frozen=True)
class ErrorRule:
    cloud: str
    kind: Literal["capacity", "quota"]
    pattern: re.Pattern[str]
    quote: str
    source: str


@cache
def rules() -> tuple[ErrorRule, ...]:
    doc = load_yaml(RULES_FILE)
    found = []
    for i, raw in enumerate(doc["rules"]):
        if raw["kind"] not in ("capacity", "quota") or raw["cloud"] not in ("aws", "gcp"):
            raise ValueError(f"{RULES_FILE.name}: rules[{i}]: cloud aws|gcp and kind capacity|quota expected")
        found.append(
            ErrorRule(
                raw["cloud"], raw["kind"], re.compile(raw["pattern"], re.I), raw["quote"], raw["source"]
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class Classified:
    verdict: Verdict
    message: str  # the line that decided it, one line of at most 300 characters ("" when none)
    rule: ErrorRule | None = None


def classify(cloud: str, messages: list[str] | tuple[str, ...]) -> Classified:
    """Capacity when any message matches a capacity rule of ``cloud`` (the fleet tried several
    types and zones: one lacking capacity is the reason it is empty), else quota when one
    matches a quota rule, else other (the first message, if any)."""
    for kind in ("capacity", "quota"):
        for message in messages:
            for rule in rules():
                if rule.cloud == cloud and rule.kind == kind and rule.pattern.search(message):
                    return Classified(rule.kind, _line_of(message, rule.pattern), rule)
    return Classified("other", _one_line(messages[0]) if messages else "")


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _line_of(message: str, pattern: re.Pattern[str]) -> str:
    """The line of ``message`` that matched (a failed ``pulumi up`` prints pages), on one line."""
    line = next((ln for ln in message.splitlines() if pattern.search(ln)), message)
    return _one_line(line)
