"""``gpufit up``: deploy a stack's plan, watch its fleet come into service for a bounded time,
and when the fleet stays empty for lack of capacity, exclude that (cloud, region, types), record
the exclusion in the stack's spec (and its lock) and try the next plan: first the fallbacks the
first plan listed as attempts of their own (a multi-node replica's other types), each exactly as
listed (``placement.attempt`` pins its type, zone and market), in the listed order; then a
re-plan of the spec with its exclusions.

Cloud-neutral: the stack is driven through ``StackWorkspace`` (``gitops.automation`` is the
Pulumi Automation API one) and the fleet read through ``FleetWatcher`` (the clouds' halves
live in ``providers``). The clock and the sleep are parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from deployment.capacity import calendar_refusal, capacity_target, purchase_refusal
from gitops.capacity import classify
from selector.fallbacks import ATTEMPT, MAX_FALLBACKS, Fallback
from selector.select import Plan
from selector.spec import AttemptSpec, ExcludeSpec, WorkloadSpec
from selector.spec.exclusion import REASON_MAX, clean_reason

Outcome = Literal["in-service", "capacity", "quota", "failed", "partial", "infeasible", "planned", "refused"]
Verdict = Literal["up", "exhausted", "stopped", "partial", "infeasible", "dry-run", "refused"]
DEFAULT_ATTEMPTS = 3
"""``--attempts`` when the first plan lists no attempt of its own (one plan and two re-plans);
with listed attempts the default is one more than them, at most ``1 + MAX_FALLBACKS``."""
POLL_S = 30.0
"""Seconds between two reads of the fleet: DescribeScalingActivities and the MIG's listErrors
are cheap reads, and a launch takes minutes."""


@dataclass(frozen=True)
class FleetState:
    desired: int  # capacity units the fleet wants (AWS: weighted units; GCP: VMs)
    in_service: int  # of them running and in service
    messages: tuple[str, ...] = ()  # the cloud's words on failed launches since the attempt began


class DeployError(Exception):
    """``pulumi up`` failed; the message carries the engine's diagnostics."""


class StackWorkspace(Protocol):
    def up(self, stack: str, log: Callable[[str], None]) -> dict[str, Any]: ...

    def record_exclusions(self, stack: str, exclusions: list[dict[str, str]]) -> None: ...

    def record_attempt(self, stack: str, attempt: dict[str, str] | None) -> None: ...

    def destroy(self, stack: str, log: Callable[[str], None]) -> None: ...

    def outputs(self, stack: str) -> dict[str, Any]: ...


class FleetWatcher(Protocol):
    def state(self, outputs: Mapping[str, Any], since: datetime) -> FleetState: ...


Release = Callable[[str, "Attempt"], list[str]]
"""Release what would outlive an attempt's nodes once Pulumi deletes them (stack, attempt →
notes): on AWS, a spot node's persistent request, which deleting the instance leaves open and
which then launches a new instance outside the stack (``providers.aws.spot_requests``). Raises
when it could not: the nodes are then left to the stack rather than deleted."""


@dataclass
class Attempt:
    number: int
    cloud: str
    region: str
    instance_type: str
    fleet_types: list[str]
    market: str
    instances: int
    hourly_usd: float
    total_usd: float
    zone: str | None = None
    nodes: int = 1  # nodes per replica: > 1, plain instances a multi-node job spans
    listed: int = 0  # the number of the first plan's fallback it is (0: a plan of its own)
    outcome: Outcome = "planned"
    reason: str = ""
    source: str = ""  # the rule that classified the reason (its doc)
    started: str | None = None
    ended: str | None = None
    in_service: int | None = None
    desired: int | None = None
    wait_s: float | None = None  # how long its fleet was (or would be) watched
    instance_ids: list[str] = field(default_factory=list)  # only these of its nodes go (none: all)
    # each of fleet_types' market (a GCP spot endpoint's on-demand groups); empty: the attempt's
    fleet_markets: list[str] = field(default_factory=list)

    @property
    def fleet_labels(self) -> list[str]:
        """``fleet_types``, each in another market than the attempt's marked with it."""
        markets = self.fleet_markets or [self.market] * len(self.fleet_types)
        return [t if m == self.market else f"{t} {m}" for t, m in zip(self.fleet_types, markets, strict=True)]

    @property
    def line(self) -> str:
        where = f"{self.region} {self.zone}" if self.zone else self.region
        which = f"; the plan's fallback {self.listed}" if self.listed else ""
        head = (
            f"attempt {self.number}: {self.cloud} {self.instance_type} × {self.instances} in {where} "
            f"({self.market}; fleet {', '.join(self.fleet_labels)}{which}), ${self.hourly_usd:,.2f}/h, "
            f"estimated ${self.total_usd:,.2f} in all"
        )
        return head + (f" — {self.outcome}: {self.reason}" if self.outcome != "planned" else "")


@dataclass
class UpReport:
    stack: str
    verdict: Verdict
    attempts: list[Attempt]
    exclusions: list[dict[str, str]]
    alternatives: list[str] = field(default_factory=list)
    note: str = ""
    not_recorded: list[dict[str, str]] = field(default_factory=list)  # the last attempt's exclusions
    skipped: list[str] = field(default_factory=list)  # clouds the stack cannot deploy to, and why

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "verdict": self.verdict,
            "attempts": [asdict(a) for a in self.attempts],
            "exclusions": self.exclusions,
            "alternatives": self.alternatives,
            "note": self.note,
            "not_recorded": self.not_recorded,
            "skipped": self.skipped,
        }


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _attempt(number: int, plan: Plan, listed: int = 0) -> Attempt:
    choice = plan.choice
    assert choice is not None
    offer = choice.offer
    return Attempt(
        number=number,
        cloud=offer.cloud,
        region=offer.region,
        instance_type=offer.instance.name,
        # A multi-node replica's fallbacks are attempts of their own, not members of its fleet.
        fleet_types=[
            offer.instance.name,
            *(f.offer.instance.name for f in plan.fallbacks if f.realised != ATTEMPT),
        ],
        fleet_markets=[offer.market, *(f.offer.market for f in plan.fallbacks if f.realised != ATTEMPT)],
        market=offer.market,
        instances=choice.shape.instances,
        hourly_usd=round(choice.cost.hourly_usd, 4),
        total_usd=round(choice.cost.total_usd, 2),
        zone=offer.zone,
        nodes=choice.shape.nodes_per_replica,
        listed=listed,
    )


def excluding(spec: WorkloadSpec, attempt: Attempt, reason: str, at: str | None) -> WorkloadSpec:
    """``spec`` with the attempt's fleet (every type it could launch, in its region and market)
    added to ``placement.exclude``: an empty fleet tried them all. A type the message names gets
    the message as its reason; the others say which type's message it was."""
    named = [name for name in attempt.fleet_types if name in reason]

    def why(name: str) -> str | None:
        if not reason:
            return None
        if name in named or not named:
            return clean_reason(reason)
        return clean_reason(f"in the same empty fleet as {named[0]}: {reason}")

    added = [
        ExcludeSpec(
            cloud=attempt.cloud,
            region=attempt.region,
            instance_type=name,
            market=attempt.market,
            reason=why(name),
            at=at,
        )
        for name in attempt.fleet_types
    ]
    placement = spec.placement.model_copy(update={"exclude": [*spec.placement.exclude, *added]})
    return spec.model_copy(update={"placement": placement})


def exclusions_of(spec: WorkloadSpec) -> list[dict[str, str]]:
    return [e.model_dump(exclude_none=True) for e in spec.placement.exclude]


def without_cloud(spec: WorkloadSpec, cloud: str, reason: str) -> WorkloadSpec:
    """``spec`` with every offer of ``cloud`` excluded (the stack cannot deploy there)."""
    rule = ExcludeSpec(cloud=cloud, region="*", instance_type="*", reason=clean_reason(reason))
    placement = spec.placement.model_copy(update={"exclude": [*spec.placement.exclude, rule]})
    return spec.model_copy(update={"placement": placement})


def deployable_plan(
    spec: WorkloadSpec,
    planner: Callable[[WorkloadSpec], Plan],
    unconfigured: Mapping[str, str],
    skipped: list[str],
) -> tuple[WorkloadSpec, Plan]:
    """The next plan on a cloud the stack can deploy to: a plan on a cloud in ``unconfigured``
    (cloud → what its config lacks) excludes that cloud and plans again (the Pulumi program
    would fail there, e.g. without ``gcp:project``); each skip is added to ``skipped``."""
    result = planner(spec)
    while result.choice is not None and result.choice.offer.cloud in unconfigured:
        cloud = result.choice.offer.cloud
        why = f"{cloud} is not configured for this stack: {unconfigured[cloud]}"
        skipped.append(why)
        spec = without_cloud(spec, cloud, why)
        result = planner(spec)
    return spec, result


def listed_attempts(plan: Plan) -> tuple[Fallback, ...]:
    """The fallbacks ``plan`` lists as attempts of their own, in the listed order."""
    return tuple(f for f in plan.fallbacks if f.realised == ATTEMPT)


def attempt_limit(requested: int | None, first: Plan) -> int:
    """``--attempts``, or by default one more than the first plan's listed attempts (so each is
    tried), at least ``DEFAULT_ATTEMPTS`` and at most ``1 + MAX_FALLBACKS``."""
    if requested is not None:
        return requested
    return max(DEFAULT_ATTEMPTS, 1 + min(len(listed_attempts(first)), MAX_FALLBACKS))


def with_attempt(spec: WorkloadSpec, pin: AttemptSpec | None) -> WorkloadSpec:
    """``spec`` whose plan may use only the pinned offer (None: any)."""
    if spec.placement.attempt == pin:
        return spec
    placement = spec.placement.model_copy(update={"attempt": pin})
    return spec.model_copy(update={"placement": placement})


def pin_of(fallback: Fallback) -> AttemptSpec:
    offer = fallback.offer
    market = offer.market
    assert market in ("on-demand", "spot"), market  # attempts are listed only in these markets
    return AttemptSpec(
        cloud=offer.cloud,
        region=offer.region,
        zone=offer.zone,
        instance_type=offer.instance.name,
        market=market,
    )


@dataclass
class AttemptWalk:
    """The plans ``gpufit up`` deploys, in order: the spec's plan; after a capacity failure, the
    next fallback that plan listed as an attempt of its own, pinned (``placement.attempt``) so
    it is deployed as listed; when the list is spent, a re-plan of the spec with its exclusions
    (whose own listed attempts come next). The first plan is the spec's without its pin: a pin
    a finished ``gpufit up`` left (its attempt in service) names that run's attempt, not this one's."""

    planner: Callable[[WorkloadSpec], Plan]
    unconfigured: Mapping[str, str]
    skipped: list[str]
    listed: tuple[Fallback, ...] = ()
    taken: int = 0

    def next(self, current: WorkloadSpec, first: bool) -> tuple[WorkloadSpec, WorkloadSpec, Plan, int]:
        """(``current`` as re-planned, unpinned; the spec to deploy; its plan; the number of the
        listed fallback it is, 0 for a plan of its own)."""
        while not first and self.taken < len(self.listed):
            fallback = self.listed[self.taken]
            self.taken += 1
            pin = pin_of(fallback)
            deployed = with_attempt(current, pin)
            result = self.planner(deployed)
            if result.choice is not None:
                return current, deployed, result, self.taken
            self.skipped.append(
                f"the plan's fallback {self.taken} ({pin.label}) no longer plans: {result.status}"
            )
        current = with_attempt(current, None)  # a pin is one attempt's; a new run starts unpinned
        current, result = deployable_plan(current, self.planner, self.unconfigured, self.skipped)
        self.listed, self.taken = (listed_attempts(result), 0) if result.choice is not None else ((), 0)
        return current, current, result, 0


def attempt_order(
    spec: WorkloadSpec,
    planner: Callable[[WorkloadSpec], Plan],
    attempts: int | None,
    unconfigured: Mapping[str, str] | None = None,
    skipped: list[str] | None = None,
    wait_of: Callable[[Plan], timedelta] | None = None,
) -> list[Attempt]:
    """The plans ``gpufit up`` would try, in order, if each fleet stayed empty for capacity
    (``--dry-run``): nothing is deployed, recorded or read from a cloud. Plans on a cloud the
    stack cannot deploy to are skipped the way ``run_up`` skips them (listed in ``skipped``).
    ``attempts``: None for ``attempt_limit``'s default."""
    order: list[Attempt] = []
    current = spec
    walk = AttemptWalk(planner, unconfigured or {}, skipped if skipped is not None else [])
    limit = attempts or 1
    number = 0
    while number < limit:
        number += 1
        current, _, result, listed = walk.next(current, first=number == 1)
        if result.choice is None:
            break
        if number == 1:
            limit = attempt_limit(attempts, result)
        attempt = _attempt(number, result, listed)
        attempt.wait_s = wait_of(result).total_seconds() if wait_of is not None else None
        order.append(attempt)
        current = excluding(current, attempt, "dry run: assumed out of capacity", None)
    return order


def watch(
    watcher: FleetWatcher,
    outputs: Mapping[str, Any],
    wait: timedelta,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    poll_s: float = POLL_S,
    since: datetime | None = None,
) -> FleetState:
    """Read the fleet until all of it is in service or ``wait`` has passed; the last state.
    ``since``: when the attempt began (its ``pulumi up`` created the group, which started
    launching then): the cloud's messages from before it belong to an earlier attempt.
    A stack without a ``group`` output runs plain instances, which ``pulumi up`` created."""
    if "group" not in outputs:
        nodes = int(outputs.get("nodes") or 1)
        return FleetState(desired=nodes, in_service=nodes)
    since = since or now()
    deadline = now() + wait
    while True:
        state = watcher.state(outputs, since)
        left = (deadline - now()).total_seconds()
        if state.in_service >= state.desired or left <= 0:
            return state
        sleep(min(poll_s, left))


@dataclass(frozen=True)
class UpSettings:
    attempts: int | None = None  # None: ``attempt_limit``'s default
    wait: timedelta = timedelta(minutes=15)
    poll_s: float = POLL_S
    destroy_when_exhausted: bool = False
    purchase_confirmed: bool = False  # the stack's gpufit:purchaseCapacityBlock
    calendar_confirmed: bool = False  # the stack's gpufit:createCalendarReservation
    unconfigured: Mapping[str, str] = field(default_factory=dict)  # cloud → what its config lacks
    wait_of: Callable[[Plan], timedelta] | None = None  # an attempt's wait from its plan (None: wait)


def _one_line(err: BaseException) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text[:REASON_MAX]


def left_deployed(last: Attempt) -> str:
    """What the last attempt left running when ``gpufit up`` gives up without destroying it."""
    where = f"{last.cloud} {last.region} {last.instance_type}"
    if last.nodes > 1:  # plain instances: `pulumi up` failed after starting some nodes, or none
        what = (
            f"the nodes of the last attempt ({where}) that started stay deployed until the stack's "
            "deadline: they do not launch the missing ones, their leader gives up after its "
            "rendezvous wait and powers off, and a stopped node's disks still bill"
        )
    else:
        what = (
            f"the last attempt's fleet ({where}) is still deployed and keeps launching until the "
            "stack's deadline"
        )
    return (
        f"{what}; run with --destroy-when-exhausted or `pulumi destroy` to stop it; its exclusion "
        "is not recorded in the stack (see not_recorded)"
    )


def held_replaced(held: Mapping[str, Any], attempt: Attempt) -> Attempt | None:
    """The nodes the stack already holds (its outputs, from an earlier run) that ``attempt``'s
    ``pulumi up`` replaces or deletes, as an attempt: all of them for another cloud or region
    (another provider), type (``replace_on_changes=["instanceType"]``), zone (an AZ ID: another
    subnet), market, or plain instances for a group or the other way; the nodes past the new
    count (``<name>-node<index>``) when only the count shrinks. None when it keeps them all: a
    kept node keeps its persistent request, and with it stop-and-resume."""
    if not held.get("cloud") or not held.get("instance_type"):
        return None
    zone, grouped = held.get("zone"), "group" in held
    total = int(held.get("nodes") or 1)  # machines in all
    ids = [str(i) for i in held.get("instance_ids") or []]
    same = (held["cloud"], held.get("region"), held["instance_type"], held.get("market"), grouped) == (
        attempt.cloud,
        attempt.region,
        attempt.instance_type,
        attempt.market,
        attempt.nodes == 1,
    ) and (zone is None or attempt.zone is None or zone == attempt.zone)
    if same and total <= attempt.instances:
        return None
    return Attempt(
        number=0,
        cloud=str(held["cloud"]),
        region=str(held.get("region")),
        instance_type=str(held["instance_type"]),
        fleet_types=[str(held["instance_type"])],
        market=str(held.get("market")),
        instances=total,
        hourly_usd=0.0,
        total_usd=0.0,
        zone=str(zone) if zone else None,
        nodes=1 if grouped else total,  # plain instances: a multi-node job's (its layout is not an output)
        instance_ids=ids[attempt.instances :] if same else [],
    )


def _released(
    stack: str, attempt: Attempt, release: Release, report: UpReport, log: Callable[[str], None]
) -> bool:
    """``release`` on ``attempt``, its notes logged; False (and why in the report) if it raised."""
    try:
        for note in release(stack, attempt):
            log(note)
    except Exception as err:
        where = f"{attempt.cloud} {attempt.region} {attempt.instance_type}"
        report.note = (
            f"the spot requests of attempt {attempt.number} ({where}) could not be cancelled "
            f"({_one_line(err)}); its nodes stay in the stack (deleting them would let the requests "
            "launch others outside it); allow the deploy identity to describe and cancel spot "
            "requests, then run `gpufit up` again"
        )
        log(report.note)
        return False
    return True


def run_up(
    stack: str,
    spec: WorkloadSpec,
    planner: Callable[[WorkloadSpec], Plan],
    workspace: StackWorkspace,
    watcher: FleetWatcher,
    settings: UpSettings,
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    relock: Callable[[Plan], None] | None = None,
    alternatives: Callable[[WorkloadSpec], list[str]] = lambda _: [],
    log: Callable[[str], None] = lambda _: None,
    report: UpReport | None = None,
    release: Release = lambda _stack, _attempt: [],
) -> UpReport:
    """Try the stack's plans in order until one's fleet is in service (see the module doc).
    The exclusions of a failed attempt are recorded (stack config, then lock) before the next
    ``pulumi up``, so what runs is always what the spec and lock say. ``report`` (filled as the
    attempts go) lets a caller keep what happened when something raises. ``release`` runs on
    the last deployed attempt before the next attempt's ``pulumi up`` replaces its nodes and
    before the stack is destroyed."""
    report = report if report is not None else UpReport(stack, "exhausted", [], [])
    report.exclusions = exclusions_of(spec)
    current = spec
    walk = AttemptWalk(planner, settings.unconfigured, report.skipped)
    limit, number = settings.attempts or 1, 0
    recorded = spec.placement.attempt  # the pin in the stack's config
    while number < limit:
        number += 1
        current, deployed_spec, result, listed = walk.next(current, first=number == 1)
        if result.choice is None:
            report.verdict = "infeasible" if number == 1 else "exhausted"
            report.note = f"no plan left ({result.status})"
            break
        if number == 1:
            limit = attempt_limit(settings.attempts, result)
        attempt = _attempt(number, result, listed)
        wait = settings.wait_of(result) if settings.wait_of is not None else settings.wait
        attempt.wait_s = wait.total_seconds()
        report.attempts.append(attempt)
        log(attempt.line)
        target = capacity_target(result.choice.offer)
        refusal = purchase_refusal(target, settings.purchase_confirmed) or calendar_refusal(
            target, settings.calendar_confirmed, now()
        )
        if refusal is not None:  # what the Pulumi program would raise, before anything changes
            attempt.outcome, attempt.reason = "refused", refusal
            report.verdict = "refused"
            report.not_recorded = exclusions_of(current)[len(report.exclusions) :]
            log(attempt.line)
            return report
        previous = (  # the first attempt replaces what an earlier run left in the stack
            report.attempts[-2]
            if len(report.attempts) > 1
            else held_replaced(workspace.outputs(stack), attempt)
        )
        if previous is not None and not _released(stack, previous, release, report, log):
            attempt.outcome, attempt.reason = "failed", "not deployed: " + report.note
            report.verdict = "stopped"
            return report
        if deployed_spec is not spec:
            workspace.record_exclusions(stack, exclusions_of(current))
            pin = deployed_spec.placement.attempt
            if pin != recorded:
                workspace.record_attempt(stack, pin.model_dump(exclude_none=True) if pin else None)
                recorded = pin
            if relock is not None:
                relock(result)
            report.exclusions = exclusions_of(current)
        started = now()
        attempt.started = _iso(started)
        deployed, state = False, None
        try:
            outputs = workspace.up(stack, log)
            deployed = True
            state = watch(watcher, outputs, wait, now, sleep, settings.poll_s, since=started)
        except DeployError as err:
            messages: tuple[str, ...] = (str(err),)
        except Exception as err:  # a cloud read that failed (credentials, permissions)
            attempt.ended = _iso(now())
            attempt.outcome, attempt.reason = "failed", _one_line(err)
            report.verdict = "stopped"
            where = f"{attempt.cloud} {attempt.region} {attempt.instance_type}"
            report.note = (
                f"stack {stack} is deployed in {where} (attempt {number}); `gpufit up` stopped: its fleet "
                "could not be read"
                if deployed
                else f"`pulumi up` of attempt {number} ({where}) raised; check the stack (`pulumi stack`)"
            )
            log(attempt.line)
            return report
        else:
            messages = state.messages
            attempt.in_service, attempt.desired = state.in_service, state.desired
        attempt.ended = _iso(now())
        if state is not None and state.in_service >= state.desired:
            attempt.outcome, attempt.reason = (
                "in-service",
                f"{state.in_service} of {state.desired} in service",
            )
            report.verdict = "up"
            log(attempt.line)
            return report
        if state is not None and state.in_service > 0:
            attempt.outcome = "partial"
            attempt.reason = (
                f"{state.in_service} of {state.desired} in service after {wait}; "
                "the group keeps launching the rest"
            )
            report.verdict = "partial"
            log(attempt.line)
            return report
        verdict = classify(attempt.cloud, messages)
        attempt.source = verdict.rule.source if verdict.rule else ""
        if verdict.verdict != "capacity":
            attempt.outcome = "quota" if verdict.verdict == "quota" else "failed"
            attempt.reason = verdict.message or f"no instance in service after {wait}, no error reported"
            report.verdict = "stopped"
            log(attempt.line)
            return report
        attempt.outcome, attempt.reason = "capacity", verdict.message
        log(attempt.line)
        current = excluding(current, attempt, verdict.message, attempt.ended)
    report.alternatives = alternatives(current)
    report.not_recorded = exclusions_of(current)[len(report.exclusions) :]
    if report.attempts and settings.destroy_when_exhausted:
        if not _released(stack, report.attempts[-1], release, report, log):
            report.verdict = "stopped"
            return report
        log(f"destroying {stack}: no attempt came into service")
        workspace.destroy(stack, log)
        report.note = "; ".join(filter(None, [report.note, "destroyed after the last attempt"]))
    elif report.attempts:
        report.note = "; ".join(filter(None, [report.note, left_deployed(report.attempts[-1])]))
    return report
