"""Obtainability: whether an offer's capacity can be had, and what waiting for it costs.

A price row says nothing about whether a machine can be had: a spot price of a type AWS rations
through Capacity Blocks, or of a pool that is reclaimed every month, may never come with
capacity. Each offer gets ``p``, the chance that the fleet obtains its capacity within an hour
of asking (``data/obtainability.yaml``; an estimate from public signals unless an AWS Spot
placement score gives it), and a level (high, medium, low, very low) with its reasons.

It enters the expected cost as the expected wait. Assuming each hour of asking succeeds with
probability ``p`` independently (a geometric number of failed hours), the fleet waits
``(1 − p) ÷ p`` hours before its capacity comes, once at launch and again after each spot
interruption (the replacement asks anew); a job's wait is truncated at its deadline (it cannot
wait past its TTL: ``expected_wait_hours``). An hour of waiting is valued at ``value_per_hour``,
the lowest hourly spend of any feasible plan for the workload: the least its owner pays for an
hour of the work, so that equal waits weigh the same whichever machine waits. So

    expected cost = billed cost + (1 + expected interruptions) × (1 − p) ÷ p × value_per_hour

The billed cost (what budgets limit) is unchanged; plans rank by the expected cost. Nothing is
billed while a fleet waits (``wait_for_capacity_timeout = 0``: the group keeps asking), so the
wait costs time, not money; pricing that time at the cheapest plan's rate is a gpufit
assumption, a lower bound (it decides between offers whose billed costs are close: a 30-minute
fine-tune on spot B200s that would wait half a day against a day's run on an L40S that can be
had now).

Failure to launch. A market no source confirms (``status: unconfirmed`` in
``data/consumption``: p6-b200 spot, p5e spot) may not exist at all: waiting longer does not
help. Such an offer carries ``never``, the chance its capacity never comes, whatever the
wait (``data/obtainability.yaml`` ``never_obtainable``; a gpufit ESTIMATE: "no source says
it is sold" is taken as even odds). With a window of ``W`` hours to wait (a job's TTL less its
expected run; a service has no deadline, so only ``never`` counts), the chance of no machine
before the deadline (for a confirmed market, never = 0: the geometric tail past the window,
which the truncated wait leaves out) is

    f = never + (1 − never) × (1 − p)^W

and the outcome then is the window lost (``W × value_per_hour``) and the job re-run on the
next plan whose market is confirmed, at that plan's expected cost (``rerun_usd``; the offer's
own when there is none). So

    expected cost = (1 − f) × (billed + wait) + f × (W × value_per_hour + rerun_usd)

(the added term kept at or above 0).

(a two-outcome expectation, the standard decision-analysis form; the odds are estimates and
``gpufit plan`` says so).

A Spot placement score (a refresh with credentials) is asked for a GPU-count group of types
(AWS scores a request, ``catalog.aws_scores``): "likely to succeed" when any type of the
group may be taken. The chance of one type is at most the group's, so the score caps an
offer's estimate (``p = min(score ÷ 10, estimate)``) and never raises it: a 9 earned by
abundant g5/g6 machines says nothing about a p6-b200 in the same group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.catalog import CAPACITY_MARKETS, Offer
from selector.consumption import row_for
from selector.datafile import load_yaml, require_schema

DATA_FILE = Path(__file__).parent / "data" / "obtainability.yaml"
P_MAX = 0.99
LEVELS: tuple[str, ...] = ("high", "medium", "low", "very low")


@dataclass(frozen=True, slots=True)
class Obtainability:
    """The chance ``p`` of getting the capacity within an hour, its level and why."""

    p: float
    level: str
    reasons: tuple[str, ...]
    estimated: bool  # False only when an AWS Spot placement score gives p
    never: float = 0.0  # the chance the capacity never comes, whatever the wait (an estimate)

    @property
    def wait_hours(self) -> float:
        """Expected hours of asking before the capacity comes: (1 − p) ÷ p."""
        return (1.0 - self.p) / self.p

    def describe(self) -> str:
        """``low (no placement score; capacity-block type)``."""
        why = "; ".join(self.reasons)
        return f"{self.level} ({why})" if why else self.level


@lru_cache(maxsize=2)
def _data(path: Path = DATA_FILE) -> dict[str, Any]:
    doc = load_yaml(path)
    require_schema(doc, path, 1)
    return doc


def level_of(p: float) -> str:
    levels = _data()["levels"]
    for name in ("high", "medium", "low"):
        if p >= float(levels[name]):
            return name
    return "very low"


@lru_cache(maxsize=8192)
def _judge(
    cloud: str, name: str, gpu: str, market: str, bucket: str | None, score: int | None
) -> Obtainability:
    own = _estimate(cloud, name, gpu, market, bucket)
    if market != "spot" or score is None:
        return own
    capped = score / 10.0
    if capped >= own.p:
        reasons = (f"group placement score {score}/10 (a cap, never a raise)", *own.reasons[1:])
        return replace(own, reasons=reasons)
    return Obtainability(
        capped,
        level_of(capped),
        (f"Spot placement score {score}/10 of its group of types", *own.reasons[1:]),
        estimated=False,
        never=own.never,
    )


def _estimate(cloud: str, name: str, gpu: str, market: str, bucket: str | None) -> Obtainability:
    """The offer's p from public signals alone (``data/obtainability.yaml``)."""
    data = _data()
    base, factors = data["base"], data["factors"]
    reasons: list[str] = []
    row = row_for(cloud, name)
    if market == "on-demand":
        p = float(base["on-demand"])
    elif cloud == "aws":
        reasons.append("no placement score")
        if bucket is not None:
            p = float(base["spot_by_bucket"][bucket])
            reasons.append(f"interrupted {bucket} a month")
        else:
            p = float(base["spot_no_advisor_row"])
            reasons.append("no Spot Instance Advisor data")
        if row is not None and row.capacity_block_type:
            p *= float(factors["capacity_block_type_spot"])
            reasons.append("capacity-block type")
    else:
        p = float(base["spot_gcp"])
        reasons.append("no public spot signal")
    never = 0.0
    if row is None or row.status(market) == "unconfirmed":
        p *= float(factors["unconfirmed_market"])
        never = float(data["never_obtainable"]["unconfirmed_market"])
        reasons.append(f"{market} sale unconfirmed")
    scarcity = float(data["gpu_scarcity"][market].get(gpu, 1.0))
    if scarcity < 1.0:
        p *= scarcity
        reasons.append(f"{gpu} in high demand")
    p = min(P_MAX, p)
    return Obtainability(p, level_of(p), tuple(reasons), estimated=True, never=never)


def obtainability(offer: Offer, nodes: int = 1) -> Obtainability:
    """The offer's obtainability (see the module doc and ``data/obtainability.yaml``). A
    replica spanning ``nodes`` machines starts only when all of them are had at once: p^nodes
    (independent draws, an assumption; machines of a fleet's separate replicas start as each
    is had, so they do not compound)."""
    it = offer.instance
    if offer.market in CAPACITY_MARKETS:
        return _capacity(offer)
    score = offer.placement_score if offer.market == "spot" else None
    bucket = offer.interruption_bucket if offer.market == "spot" else None
    one = _judge(it.cloud, it.name, it.gpu.name, offer.market, bucket, score)
    if nodes <= 1:
        return one
    p = one.p**nodes
    return Obtainability(p, level_of(p), (*one.reasons, f"{nodes} nodes at once"), one.estimated, one.never)


def expected_wait_hours(obt: Obtainability, interruptions: float, window_hours: float | None = None) -> float:
    """Expected hours of waiting for capacity: (1 + interruptions) × (1 − p) ÷ p, and for a job
    with a window of ``W`` hours before its deadline (its TTL less its run), never more than
    the window: each ask waits E[min(X, W)] = (1 − p) ÷ p × (1 − (1 − p)^W) hours (X the
    geometric number of failed hours, truncated at the deadline, when the group is resized to
    0 and asks no more), and all of them together at most ``W``. A service (no window) keeps
    asking: untruncated."""
    per_ask = obt.wait_hours
    if window_hours is None:
        return (1.0 + interruptions) * per_ask
    window = max(window_hours, 0.0)
    per_ask *= 1.0 - float((1.0 - obt.p) ** window)
    return min((1.0 + interruptions) * per_ask, window)


def wait_usd(
    obt: Obtainability, interruptions: float, value_per_hour: float, window_hours: float | None = None
) -> float:
    """The expected wait's value: ``expected_wait_hours`` × value per hour."""
    return expected_wait_hours(obt, interruptions, window_hours) * value_per_hour


def launch_failure(obt: Obtainability, window_hours: float | None) -> float:
    """The chance of no capacity before the deadline: never + (1 − never) × (1 − p)^W, for a
    confirmed market too (its wait is truncated at the window: ``expected_wait_hours``, so the
    tail past it is a failure, not a wait); a service (no window) fails only when the market
    never gives capacity."""
    if window_hours is None:
        return obt.never  # a service keeps asking: only a market that never sells fails
    return float(obt.never + (1.0 - obt.never) * (1.0 - obt.p) ** max(window_hours, 0.0))


def failure_usd(
    obt: Obtainability,
    window_hours: float | None,
    value_per_hour: float,
    launched_usd: float,
    rerun_usd: float | None,
) -> float:
    """What failure to launch adds to the expected cost (see the module doc):
    f × (W × value per hour + re-run − launched), ``launched`` = billed + wait; never below 0
    (a failure never makes an offer look cheaper: one dearer than its re-run loses anyway)."""
    f = launch_failure(obt, window_hours)
    if f <= 0.0:
        return 0.0
    lost = (window_hours or 0.0) * value_per_hour
    rerun = launched_usd if rerun_usd is None else rerun_usd
    return f * max(lost + rerun - launched_usd, 0.0)


def flex_queue_hours() -> float:
    """The expected flex-start queue, (1 − p) ÷ p of ``capacity.flex-start`` (an ESTIMATE)."""
    p = float(_data()["capacity"]["flex-start"])
    return (1.0 - p) / p


def _capacity(offer: Offer) -> Obtainability:
    """A capacity option's p (``data/obtainability.yaml`` ``capacity``): a Capacity Block from a
    reference price may find no offering for its window (an estimate); a live offering can be
    bought, and then the capacity is held; flex-start queues, then runs uninterrupted; a held
    reservation's machines are the user's. The machines of one block, request or reservation
    come together, so nodes do not compound."""
    table = _data()["capacity"]
    market = offer.market
    if market == "capacity-block":
        live = getattr(offer.capacity, "offering_id", None) is not None
        p = float(table["capacity-block_offering" if live else "capacity-block_reference"])
        why = ("a live offering, held once bought",) if live else ("no offering read: a reference price",)
        return Obtainability(min(P_MAX, p), level_of(p), why, estimated=not live)
    if market == "flex-start":
        p = float(table["flex-start"])
        queued = ("queued until capacity, then guaranteed for the run", "queue time unknown: an ESTIMATE")
        return Obtainability(p, level_of(p), queued, True)
    if market == "calendar-reservation":
        p = float(table["calendar-reservation"])
        return Obtainability(
            p, level_of(p), ("held from its start once Google approves it (ESTIMATE)",), True
        )
    p = float(table["reservation"])
    return Obtainability(p, level_of(p), ("capacity held by the reservation",), estimated=False)
