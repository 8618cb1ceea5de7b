"""A fake Pulumi workspace and fleet watcher for ``gpufit up`` (``gitops.failover``).

``FakeWorkspace.up`` does what the Pulumi program does with the stack's config: it plans the
stack's spec with the exclusions recorded so far (``record_exclusions`` writes them the way the
Automation API writes ``--path`` keys, and the spec parser reads them back), and "deploys" that
plan's choice: outputs like the providers' (``cloud``, ``region``, ``group``, ...). So an
orchestrator that forgot to record an exclusion deploys the same region again.

``FakeWatcher`` answers for each deployment what the cloud would: a behaviour per attempt or
per ``cloud/region`` (``ok``, ``capacity``, ``quota``, ``partial``, ``silent``, ``slow`` or
``deploy-capacity``/``deploy-error``, which make ``pulumi up`` itself fail, ``deploy-partial``
after starting half the nodes), with the clouds'
real messages; ``ring``: a GCP fleet whose replica
comes up only in its last fallback group, moved there by the rebalancer. ``FakeClock`` is the
injected clock; its ``sleep`` advances it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gitops.automation import ATTEMPT_KEY, attempt_config, exclusion_config
from gitops.failover import DeployError, FleetState
from selector.select import Plan
from selector.spec import WorkloadSpec, parse_spec

# The clouds' own words (sources in gitops/capacity_errors.yaml).
MESSAGES = {
    ("aws", "capacity"): "Launching a new EC2 instance. Status Reason: We currently do not have sufficient "
    "{type} capacity in the Availability Zone you requested ({region}a). Our system will be working on "
    "provisioning additional capacity. Launching EC2 instance failed.",
    # An ASG with a mixed-instances policy that cannot get Spot capacity (repost.aws
    # knowledge-center/eks-troubleshoot-spot-instances): a different code than on-demand's.
    ("aws", "capacity-spot"): "Could not launch Spot Instances. UnfulfillableCapacity - Unable to fulfill "
    "capacity due to your request configuration. Please adjust your request and try again. Launching EC2 "
    "instance failed.",
    (
        "aws",
        "quota",
    ): "Launching a new EC2 instance. Status Reason: You have requested more vCPU capacity than "
    "your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs "
    "to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. "
    "Launching EC2 instance failed.",
    ("aws", "deploy-capacity"): "creating EC2 Instance: operation error EC2: RunInstances, api error "
    "InsufficientInstanceCapacity: We currently do not have sufficient {type} capacity in the "
    "Availability Zone you requested ({region}a).",
    ("gcp", "capacity"): "ZONE_RESOURCE_POOL_EXHAUSTED: The zone 'projects/p/zones/{region}-a' does not have "
    "enough resources available to fulfill the request.  Try a different zone, or try again later.",
    ("gcp", "quota"): "QUOTA_EXCEEDED: Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 1.0 globally.",
    ("gcp", "deploy-capacity"): "googleapi: Error 503: ZONE_RESOURCE_POOL_EXHAUSTED: The zone "
    "'projects/p/zones/{region}-a' does not have enough resources available to fulfill the request.",
}


@dataclass
class FakeClock:
    now_at: datetime = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    slept: list[float] = field(default_factory=list)

    def now(self) -> datetime:
        return self.now_at

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.slept.append(seconds)
        self.now_at += timedelta(seconds=seconds)


def behaviour_of(
    outputs: Mapping[str, Any], number: int, by_attempt: list[str], by_region: Mapping[str, str]
) -> str:
    where = f"{outputs['cloud']}/{outputs['region']}"
    if where in by_region:
        return by_region[where]
    return by_attempt[number - 1] if number <= len(by_attempt) else "ok"


@dataclass
class FakeWorkspace:
    workload: dict[str, Any]  # the stack file's ``gpufit:workload``, as written
    planner: Callable[[WorkloadSpec], Plan]
    by_attempt: list[str] = field(default_factory=list)
    by_region: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)  # the --path keys recorded
    attempt_keys: dict[str, str] = field(default_factory=dict)  # placement.attempt's --path keys
    attempt_recorded: bool = False
    deployed: list[dict[str, Any]] = field(default_factory=list)
    destroyed: int = 0
    clock: FakeClock | None = None
    deployed_at: list[datetime] = field(default_factory=list)
    live: dict[str, str] = field(default_factory=dict)  # the stack's nodes: name → type@zone
    held: dict[str, Any] = field(default_factory=dict)  # the outputs an earlier run left

    def _spec(self) -> WorkloadSpec:
        """The spec the program reads: the stack's, with the recorded exclusions."""
        raw = copy.deepcopy(self.workload)
        exclude: dict[int, dict[str, str]] = {}
        for key, value in self.config.items():
            index, name = key.removeprefix("gpufit:workload.placement.exclude[").split("].")
            exclude.setdefault(int(index), {})[name] = value
        if exclude:
            raw.setdefault("placement", {})["exclude"] = [exclude[i] for i in sorted(exclude)]
        attempt = {k.removeprefix(f"{ATTEMPT_KEY}."): v for k, v in self.attempt_keys.items()}
        if attempt:
            raw.setdefault("placement", {})["attempt"] = attempt
        elif self.attempt_recorded:
            raw.setdefault("placement", {}).pop("attempt", None)
        return parse_spec(raw, source="fake stack config", prefix="gpufit:workload")

    def up(self, stack: str, log: Callable[[str], None]) -> dict[str, Any]:
        if self.clock is not None:
            self.clock.sleep(120)  # `pulumi up` takes a while; the group starts launching meanwhile
            self.deployed_at.append(self.clock.now())
        result = self.planner(self._spec())
        choice = result.choice
        assert choice is not None, "the program would fail: nothing to deploy"
        outputs: dict[str, Any] = {
            "cloud": choice.offer.cloud,
            "region": choice.offer.region,
            "instance_type": choice.offer.instance.name,
            "market": choice.offer.market,
            "group": f"gpufit-{stack}",
            "desired_capacity": choice.shape.instances,
            "nodes": choice.shape.nodes_per_replica,
        }
        groups = [f for f in result.fallbacks if f.realised == "group"]
        if choice.offer.cloud == "gcp" and groups:  # the provider's own MIGs, created at size 0
            outputs["fallback_groups"] = [f"gpufit-{stack}-f{i}" for i in range(1, len(groups) + 1)]
        self.deployed.append(outputs)
        kind = behaviour_of(outputs, len(self.deployed), self.by_attempt, self.by_region)
        # Pulumi's own rule for a stack's resources: a node the new program does not declare is
        # deleted, one whose type or zone changed is replaced, before the new ones are created.
        program = {
            f"node-{i}": f"{choice.offer.instance.name}@{choice.offer.zone or choice.offer.region}"
            for i in range(choice.shape.instances)
        }
        self.live = {name: what for name, what in self.live.items() if program.get(name) == what}
        started = list(program)[: max(len(program) // 2, 1)] if kind == "deploy-partial" else list(program)
        if not kind.startswith("deploy-") or kind == "deploy-partial":
            self.live.update((name, program[name]) for name in started)
        if kind == "deploy-partial":  # some nodes run, RunInstances refused the others
            kind = "deploy-capacity"
        if kind.startswith("deploy-"):
            key = (outputs["cloud"], kind)
            text = MESSAGES.get(key, "error: creating resource: AccessDenied: not authorized")
            raise DeployError(text.format(type=outputs["instance_type"], region=outputs["region"]))
        log(f"deployed {outputs['instance_type']} in {outputs['region']}")
        return outputs

    def record_exclusions(self, stack: str, exclusions: list[dict[str, str]]) -> None:
        self.config = dict(exclusion_config(exclusions))

    def record_attempt(self, stack: str, attempt: dict[str, str] | None) -> None:
        self.attempt_keys = dict(attempt_config(attempt))
        self.attempt_recorded = True

    def destroy(self, stack: str, log: Callable[[str], None]) -> None:
        self.destroyed += 1
        self.live = {}
        self.held = {}

    def outputs(self, stack: str) -> dict[str, Any]:
        return dict(self.deployed[-1]) if self.deployed else dict(self.held)


@dataclass
class FakeWatcher:
    workspace: FakeWorkspace
    reads: int = 0
    boot: timedelta = timedelta(minutes=10)  # ``ring``: the last group's VM, from its move to serving

    def _ring_in_service(self, outputs: Mapping[str, Any]) -> bool:
        """``ring``: the choice's group and every fallback group but the last are out of
        capacity; the rebalancer (a Cloud Scheduler run every ``EVERY_MINUTES``, the first just
        before the VM starved) moves it one group per run after ``GRACE_SECONDS``."""
        from providers.gcp.rebalance import EVERY_MINUTES, GRACE_SECONDS

        ws = self.workspace
        assert ws.clock is not None and ws.deployed_at, "a ring needs the clock"
        moves = len(outputs.get("fallback_groups") or ())
        last_move = ws.deployed_at[-1] + timedelta(minutes=moves * EVERY_MINUTES, seconds=GRACE_SECONDS)
        return ws.clock.now() >= last_move + self.boot

    def state(self, outputs: Mapping[str, Any], since: datetime) -> FleetState:
        self.reads += 1
        ws = self.workspace
        if ws.deployed_at:  # the group's messages of this attempt began before `pulumi up` returned
            assert since < ws.deployed_at[-1], "the watch would drop what the cloud said during `pulumi up`"
        kind = behaviour_of(outputs, len(ws.deployed), ws.by_attempt, ws.by_region)
        desired = int(outputs["desired_capacity"])
        cloud, region, name = outputs["cloud"], outputs["region"], outputs["instance_type"]
        if kind == "ok":
            return FleetState(desired, desired)
        if kind == "slow":  # in service on the third read
            return FleetState(desired, desired if self.reads % 3 == 0 else 0)
        if kind == "partial":
            return FleetState(desired + 1, 1)
        if kind == "silent":
            return FleetState(desired, 0)
        if kind == "ring":
            if self._ring_in_service(outputs):
                return FleetState(desired, desired)
            kind = "capacity"
        if kind == "capacity" and outputs.get("market") == "spot" and (cloud, "capacity-spot") in MESSAGES:
            kind = "capacity-spot"  # the cloud says it in Spot's own words
        text = MESSAGES[(cloud, kind)].format(type=name, region=region)
        return FleetState(desired, 0, (text,))
