"""How each instance type is sold: the consumption options per cloud, as sourced data.

``data/consumption/<cloud>.csv`` holds one row per instance type or series (a glob, ``|`` for
alternatives, matched on the catalog's instance-type name) with a status for every option:
``yes`` (the cloud's documentation says it is sold that way), ``no`` (it says it is not), or
``unconfirmed`` (no source settles it). Every row names its sources (URLs) and the date of the
deciding source (a dated page, data snapshot or pull request; the day read when the cloud's
page is undated), lists in ``third_party_only`` the options whose status rests on third parties
alone (no page or data file of the cloud's own says so), and quotes the deciding sentence in
``notes``.

An offer exists only in a market its type is sold in: the snapshot build, the refresh and the
catalog loader drop offers whose market is ``no``. An ``unconfirmed`` market keeps its offers at
low confidence, and ``selector.obtainability`` lowers their chance of being had. A type with no
row (a type a refresh found that this table does not know) is ``unconfirmed`` in every option.

The options form an enum that grows: ``on-demand`` and ``spot`` carry list prices in the
catalog today; ``flex-start`` (GCP Dynamic Workload Scheduler), ``capacity-block`` (EC2
Capacity Blocks for ML), ``calendar-reservation`` (GCP future reservations in calendar mode)
and ``reservation`` (On-Demand Capacity Reservations, GCP reservations) are recorded for the
planner to grow into.
"""

from __future__ import annotations

import csv
import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

Status = Literal["yes", "no", "unconfirmed"]
STATUSES: tuple[Status, ...] = ("yes", "no", "unconfirmed")
OPTIONS: tuple[str, ...] = (
    "on-demand",
    "spot",
    "flex-start",
    "capacity-block",
    "calendar-reservation",
    "reservation",
)
CLOUDS: tuple[str, ...] = ("aws", "gcp")
DATA_DIR = Path(__file__).parent / "data" / "consumption"


class ConsumptionError(ValueError):
    """A consumption table that cannot be used, with the row and the reason."""


@dataclass(frozen=True, slots=True)
class ConsumptionRow:
    """How the instance types matching ``pattern`` are sold, and on whose word."""

    cloud: str
    pattern: str
    options: tuple[tuple[str, Status], ...]
    capacity_block_regions: tuple[str, ...]
    third_party_only: tuple[str, ...]  # options whose status no statement of the cloud's own gives
    sources: tuple[str, ...]
    as_of: str
    notes: str
    where: str

    def status(self, option: str) -> Status:
        return dict(self.options)[option]

    def matches(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.pattern.split("|"))

    @property
    def capacity_block_type(self) -> bool:
        """Sold through EC2 Capacity Blocks for ML (in some region): a type AWS rations."""
        return self.status("capacity-block") == "yes"


UNKNOWN_NOTE = "no consumption row for this type (gpufit's table does not list it): every option unconfirmed"


def _row(cloud: str, raw: dict[str, str], where: str) -> ConsumptionRow:
    options: list[tuple[str, Status]] = []
    for option in OPTIONS:
        value = (raw.get(option.replace("-", "_")) or "").strip()
        if value not in STATUSES:
            raise ConsumptionError(f"{where}: {option} is {value!r}, expected one of {', '.join(STATUSES)}")
        options.append((option, value))
    pattern = (raw.get("pattern") or "").strip()
    sources = tuple((raw.get("source_urls") or "").split())
    as_of = (raw.get("as_of") or "").strip()
    if not pattern or not sources or not all(s.startswith("https://") for s in sources):
        raise ConsumptionError(f"{where}: a row needs a pattern and https source URLs")
    if len(as_of) != 10 or as_of[4] != "-" or as_of[7] != "-":
        raise ConsumptionError(f"{where}: as_of {as_of!r} is not YYYY-MM-DD")
    third_party = tuple((raw.get("third_party_only") or "").split())
    for option in third_party:
        if option not in OPTIONS or dict(options)[option] == "unconfirmed":
            raise ConsumptionError(
                f"{where}: third_party_only names {option!r}, expected an option whose status is yes or no"
            )
    if not (raw.get("notes") or "").strip():
        raise ConsumptionError(f"{where}: notes must quote or explain the source")
    return ConsumptionRow(
        cloud=cloud,
        pattern=pattern,
        options=tuple(options),
        capacity_block_regions=tuple((raw.get("capacity_block_regions") or "").split()),
        third_party_only=third_party,
        sources=sources,
        as_of=as_of,
        notes=raw["notes"].strip(),
        where=where,
    )


@lru_cache(maxsize=4)
def load_consumption(directory: Path = DATA_DIR) -> tuple[ConsumptionRow, ...]:
    """Every cloud's rows, in file order."""
    rows: list[ConsumptionRow] = []
    for cloud in CLOUDS:
        path = directory / f"{cloud}.csv"
        with path.open(encoding="utf-8", newline="") as handle:
            for i, raw in enumerate(csv.DictReader(handle)):
                rows.append(_row(cloud, raw, f"{path.name}:{i + 2}"))
    return tuple(rows)


@lru_cache(maxsize=4096)
def row_for(cloud: str, name: str, directory: Path = DATA_DIR) -> ConsumptionRow | None:
    """The one row whose pattern matches ``name`` (None: the table does not know the type).
    ConsumptionError when two rows match: the table must say one thing per type."""
    found = [r for r in load_consumption(directory) if r.cloud == cloud and r.matches(name)]
    if len(found) > 1:
        raise ConsumptionError(
            f"{cloud} {name} matches {len(found)} consumption rows ({', '.join(r.where for r in found)})"
        )
    return found[0] if found else None


def status(cloud: str, name: str, option: str) -> Status:
    """Whether ``name`` is sold as ``option`` (``unconfirmed`` for a type the table lacks)."""
    row = row_for(cloud, name)
    return "unconfirmed" if row is None else row.status(option)


FIRST_PARTY_HOSTS = frozenset(
    {
        "aws.amazon.com",
        "docs.aws.amazon.com",
        "pricing.us-east-1.amazonaws.com",
        "spot-bid-advisor.s3.amazonaws.com",
        "cloud.google.com",
        "docs.cloud.google.com",
    }
)
"""The clouds' own hosts among the rows' sources (a third_party_only note cites another)."""


def third_party_note(cloud: str, name: str, market: str) -> str | None:
    """``only a third party says aws p5en.48xlarge is sold spot (aws.csv:9: https://...)``
    when no statement of the cloud's own gives the market's status (the row's
    ``third_party_only``), else None."""
    row = row_for(cloud, name)
    if row is None or market not in row.third_party_only:
        return None
    said = "sold" if row.status(market) == "yes" else "not sold"
    theirs = [u for u in row.sources if urlsplit(u).hostname not in FIRST_PARTY_HOSTS]
    cited = (theirs or row.sources)[0]
    return f"only a third party says {cloud} {name} is {said} {market} ({row.where}: {cited})"


def not_sold_reason(cloud: str, name: str, market: str) -> str | None:
    """Why an offer of ``name`` in ``market`` cannot exist (None when it may): the row's
    market is ``no``."""
    row = row_for(cloud, name)
    if row is None or row.status(market) != "no":
        return None
    return f"{cloud} {name} is not sold {market} ({row.where}: {row.sources[0]})"
