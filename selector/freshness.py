"""How old the prices are: read from the offers' own ``as_of`` dates, never from the date a
catalog file was written (the embedded snapshot, built on one day, holds prices observed 18
months before).

An ``as_of`` is a day (``2026-12-02``) or a month (``2025-06``, taken as its first day, so the
age is never understated). ``PriceAges`` summarises the offers a command considered: the
oldest, median and newest dates; ``describe`` and ``warning`` say it for a person, with the
clock passed in (commands read it once; tests freeze it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date

STALE_AFTER_DAYS = 30
"""Prices older than this (median) earn a warning: spot prices move daily and list prices
change several times a year (AWS cut P4/P5 prices in June 2025; Capacity Block prices are
reviewed every quarter)."""

REFRESH_HINT = (
    "`gpufit catalog refresh` fetches today's prices (AWS from its public price files, no account "
    "needed; GCP with a project)"
)


def as_of_date(as_of: str) -> date | None:
    """``2025-06`` → 2025-06-01; ``2026-12-02`` → that day; None when unreadable."""
    try:
        if len(as_of) == 7:
            return date(int(as_of[:4]), int(as_of[5:7]), 1)
        return date.fromisoformat(as_of[:10])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class PriceAges:
    """The dates of the prices a command used: oldest, median and newest ``as_of``."""

    oldest: str
    median: str
    newest: str
    offers: int

    def age_days(self, today: date) -> int:
        """Days since the median price was observed."""
        day = as_of_date(self.median)
        return (today - day).days if day is not None else 0

    def span(self) -> str:
        return self.oldest if self.oldest == self.newest else f"{self.oldest}..{self.newest}"

    def describe(self, today: date) -> str:
        """``prices from 2025-05..2025-06, 18 months old``."""
        return f"prices from {self.span()}, {age_text(self.median, today)}"

    def stale(self, today: date) -> bool:
        return self.age_days(today) > STALE_AFTER_DAYS

    def warning(self, today: date) -> str | None:
        """A warning when the median price is past ``STALE_AFTER_DAYS``, with the way out."""
        if not self.stale(today):
            return None
        return (
            f"the prices used are {age_text(self.median, today)} (median as of {self.median}, "
            f"{self.offers} offers); {REFRESH_HINT}"
        )

    def as_dict(self, today: date) -> dict[str, object]:
        return {
            "oldest_as_of": self.oldest,
            "median_as_of": self.median,
            "newest_as_of": self.newest,
            "offers": self.offers,
            "age_days": self.age_days(today),
            "age": age_text(self.median, today),
            "stale": self.stale(today),
            "warning": self.warning(today),
        }


def age_text(as_of: str, today: date) -> str:
    """``3 days old``; past two months, whole months (``18 months old``)."""
    day = as_of_date(as_of)
    if day is None:
        return "of unknown age"
    days = (today - day).days
    if days < 0:
        return "dated in the future"
    if days < 61:
        return f"{days} day{'s' if days != 1 else ''} old"
    months = (today.year - day.year) * 12 + today.month - day.month - (today.day < day.day)
    return f"{months} months old"


def price_ages_counted(counts: Mapping[str, int]) -> PriceAges | None:
    """``price_ages`` of dates given with how many offers carry each (as a plan tallies them)."""
    ordered = sorted(d for d, n in counts.items() if n > 0)
    total = sum(counts[d] for d in ordered)
    if not total:
        return None
    middle, seen, median = (total - 1) // 2, 0, ordered[0]
    for day in ordered:
        seen += counts[day]
        if seen > middle:
            median = day
            break
    return PriceAges(ordered[0], median, ordered[-1], total)


def price_ages(dates: Iterable[str]) -> PriceAges | None:
    """The summary of ``as_of`` dates (None when there are none). Dates sort as text: both
    forms are ISO prefixes, and a month sorts before its days."""
    ordered = sorted(dates)
    if not ordered:
        return None
    return PriceAges(ordered[0], ordered[(len(ordered) - 1) // 2], ordered[-1], len(ordered))
