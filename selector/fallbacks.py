"""The fleet's fallback list: the offers a cloud's fleet engine may launch when the choice has
no capacity.

A fleet (an AWS Auto Scaling group's mixed-instances overrides, a GCP managed instance group's
instance flexibility) launches one launch template or instance template on any of several
instance types. The plan hands it the choice first, then same-shape fallbacks in expected-cost
order. A fallback is an offer

- of the choice's cloud, region and market (a fleet lives in one region and one market), but
  for a stateless GCP endpoint on spot, whose on-demand offers of the types sold on demand
  there follow its spot fallbacks, each in a STANDARD group of its own (``on_demand_refuge``),
  so the endpoint survives a spot drought;
- offered where the fleet may launch: the choice's zone when the choice is zone-specific (its
  price holds there only, so the fleet launches only there), else the zones the choice's
  region-level offer is known in (a fallback whose own zones are not known counts there, but
  not for a zone-specific choice). A stateless or checkpointed spot choice whose zone holds
  fewer than two fallbacks is widened to every zone of its region that prices it, costed at
  the dearest (``spanning_offer``; ``selector.select``);
- costed at its dearest offer among those zones, since the group may start it in any of them;
- whose own fit runs a replica on one node;
- that holds, per instance, the replicas its ``weighted_capacity`` says. The fleet counts
  replicas (capacity units), each instance weighted by the replicas it holds (AWS
  ``WeightedCapacity``):
  - a batch job's fleet takes machines of any size (1, 2, 4 or 8 GPUs) of any GPU that runs
    the job, each at its own tensor parallelism: each machine runs ``GPUFIT_REPLICAS`` = its
    GPUs ÷ its type's TP workers of the job (``machine.boot`` looks the TP up by the
    machine's type), so a bigger machine does more of the shared work;
  - a served model's launch (ports, GPU ranges, TP) is rendered for the plan's replicas per
    machine, and a fine-tune is one job on one machine's GPUs: both keep the choice's GPUs and
    TP per replica and replicas per instance (a serving fallback must also reach the token
    rate with no more replicas than the choice runs);
  - on GCP a managed instance group counts VMs, not units, and its instance flexibility
    keeps one instance template (an instance selection overrides machine type, CPU platform
    and disks only: Compute discovery document). A fallback joins the choice's group by
    flexibility (``selector.gcp_flexibility``: the same GPUs in a series Google's code
    confirms, or any size of the choice's series when the spec opts in), costed as the
    choice's VM count of it (``vm_fleet_shape``: each VM runs the replicas its own GPUs hold),
    or a served model's launch on a bigger VM with GPUs idle (``idle_gpu_shape``, opted in);
    or, for a batch job, any type that runs it gets a group of its own (at most
    ``MAX_FALLBACK_GROUPS``), costed like a weighted fleet of it alone (``fleet_shape``), and
    so does, for a single-node checkpointed job (a fine-tune), a type with the choice's GPU
    count, at least its GPU memory and the choice's GPUs and TP per replica in its own fit, and,
    for a stateless served model, a type with at least its GPU memory whose fit at the choice's
    TP runs a replica on the choice's GPUs, each VM running the choice's launch with its other
    GPUs idle (``served_group_shape``), costed as the choice's VM count of it;
- that still meets the TTL and the budget when it runs the whole fleet.

Each type is listed once. Its cost is the workload's
expected total on that type alone (the worst case of a fleet made only of it): ``offer_cost``
of its fitted shape with as many instances as the replicas need, and for jobs the job's hours
scaled by the instances (work divides over replicas).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from selector.breadth import Late
from selector.catalog import Catalog, InstanceType, Offer
from selector.cost import Cost, CostInputs, offer_cost, with_wait
from selector.gcp_flexibility import (
    FLEXIBLE,
    MAX_FALLBACK_GROUPS,
    describe,
    realisation,
    serves_launch_machine,
)
from selector.obtainability import obtainability
from selector.rates import CloudRates
from selector.sizing import Rejection, Shape

MAX_FALLBACKS = 9
"""At most this many fallbacks after the choice: ten instance types in all, well inside an
Auto Scaling group's 40 overrides, and few enough for a reviewer to read in a plan."""


VM_COUNTED_CLOUDS = frozenset({"gcp"})
"""Clouds whose fleet counts machines, not weighted units (a GCP MIG's target size is VMs)."""

ACCELERATOR_BOUND_CLOUDS = frozenset({"gcp"})
"""Clouds whose fleet overrides only the machine type: a GCP MIG's instance flexibility keeps
the template's attached accelerators, so a fallback must attach the same GPUs as the choice (N1
+ ``guestAccelerators``), or carry them in its machine type as the choice does (A2/A3/G2)."""


def offered_in(offer: Offer, zone: str) -> bool:
    """Whether ``offer`` can be had in ``zone``: it is that zone's own offer, or a region-level
    one whose known zones include it."""
    if offer.zone is not None:
        return offer.zone == zone
    return zone in offer.zones


def spanning_offer(choice: Offer, catalog: Catalog) -> Offer | None:
    """A zone-specific spot choice widened to every zone of its region that prices the type in
    its market, costed at the dearest of them (the group may start it in any): a fleet pinned to
    one zone falls back only within it, the opposite of AWS's advice for
    ``price-capacity-optimized``, which "looks at both price and capacity to select the Spot
    Instance pools" across the group's zones
    (https://docs.aws.amazon.com/autoscaling/ec2/userguide/allocation-strategies.html). None
    when the choice is region-level or only one zone prices it. A placement score is kept only
    when every zone has one (the lowest: the group may land in any)."""
    if choice.zone is None:
        return None
    it = choice.instance
    zonal = [
        o
        for o in catalog.offers
        if o.instance.name == it.name
        and o.instance.cloud == it.cloud
        and o.region == choice.region
        and o.market == choice.market
        and o.zone is not None
        and not o.unpriced
    ]
    if len({o.zone for o in zonal}) < 2:
        return None
    dearest = max(zonal, key=lambda o: (o.hourly_usd, o.zone or ""))
    scores = [o.placement_score for o in zonal]
    zones = tuple(sorted({o.zone for o in zonal if o.zone is not None}))
    note = f"spans {', '.join(zones)}, priced at the dearest ({dearest.zone})"
    return replace(
        dearest,
        zone=None,
        zones=zones,
        notes=f"{dearest.notes}; {note}" if dearest.notes else note,
        placement_score=None if None in scores else min(s for s in scores if s is not None),
        hourly_usd_range=None,
    )


def same_accelerators(choice: InstanceType, other: InstanceType) -> bool:
    """Whether one instance template's accelerators serve both types."""
    if choice.attached_accelerator != other.attached_accelerator:
        return False
    return choice.attached_accelerator is None or choice.gpu_count == other.gpu_count


def same_series(choice: InstanceType, other: InstanceType) -> bool:
    """Whether ``other`` is a size of the choice's machine series with the same GPU
    (``a3-highgpu-1g`` and ``a3-highgpu-8g``): the only bigger VMs a served fleet takes with GPUs
    idle, so that a fallback is the same machine, larger, not another family at many times the
    price."""
    return (
        choice.gpu.name == other.gpu.name
        and choice.machine_type.rsplit("-", 1)[0] == other.machine_type.rsplit("-", 1)[0]
    )


@dataclass(frozen=True, slots=True)
class Fallback:
    """One fallback instance type: its offer, how the whole fleet would run on it alone, what
    that costs, and how many capacity units (replicas) one instance of it counts for."""

    offer: Offer
    shape: Shape
    cost: Cost
    weighted_capacity: int
    realised: str = ""  # GCP: "flexibility" (the choice's group), "group" (a MIG of its own); ATTEMPT
    refuge: bool = False  # an on-demand group of a spot endpoint (``on_demand_refuge``)

    @property
    def idle_gpus(self) -> int:
        """GPUs per machine no replica uses (a bigger VM running the choice's launch)."""
        used = self.shape.replicas_per_instance * self.shape.gpus_per_replica
        return max(self.offer.instance.gpu_count - used, 0)


def fleet_units(choice: Shape) -> int:
    """The fleet's desired capacity in replicas (capacity units): a service's replicas (what
    the token rate needs); for a job, every replica its instances hold, since all of them
    share the work (``sizing.fit.serving_shape`` times the job over the whole fleet)."""
    if choice.job_hours is None:
        return max(choice.replicas, 1)
    return max(choice.replicas, choice.replicas_per_instance * choice.instances // choice.nodes_per_replica)


def fleet_shape(own: Shape, units: int) -> Shape:
    """``own`` (a fallback type's fitted shape) resized to carry ``units`` replicas: instances
    ⌈units ÷ replicas per instance⌉; a job's hours scale inversely with the instances, since
    its work divides over replicas (``sizing.fit.serving_shape``: hours = work ÷ (GPUs × rate))."""
    instances = math.ceil(units / own.replicas_per_instance)
    hours = own.job_hours * own.instances / instances if own.job_hours is not None else None
    return replace(own, instances=instances, replicas=units, job_hours=hours)


def vm_fleet_shape(own: Shape, vms: int) -> Shape:
    """``own`` (a fallback type's fitted shape) as ``vms`` machines of it, each running the
    replicas it holds: a group that counts VMs (a GCP MIG's target size) keeps its VM count
    whichever machine type each VM gets; the job's work divides over the replicas, so its hours
    scale with ``own``'s instances ÷ ``vms``."""
    hours = own.job_hours * own.instances / vms if own.job_hours is not None else None
    return replace(own, instances=vms, replicas=vms * own.replicas_per_instance, job_hours=hours)


def _choice_launch_on(choice: Shape, own: Shape) -> Shape | None:
    """The choice's replicas (per VM, VMs, GPUs and TP each) run unchanged on a machine whose
    fit is ``own``; None when either is multi-node or a job, ``own`` runs a replica on other
    GPUs or TP, or serves it slower (the token rate was met with the choice's replicas)."""
    if choice.nodes_per_replica != 1 or own.nodes_per_replica != 1 or choice.job_hours is not None:
        return None
    if own.gpus_per_replica != choice.gpus_per_replica or own.tensor_parallel != choice.tensor_parallel:
        return None
    mine, theirs = own.tokens_per_s_per_replica, choice.tokens_per_s_per_replica
    if mine is None or theirs is None or mine < theirs:
        return None
    return replace(
        own,
        replicas_per_instance=choice.replicas_per_instance,
        instances=choice.instances,
        replicas=choice.replicas,
    )


def idle_gpu_shape(choice: Shape, own: Shape) -> Shape | None:
    """A served model's choice shape on a bigger machine of a group that counts VMs (a GCP
    MIG): the same replicas per VM, each at the choice's GPUs and TP, the machine's other GPUs
    idle, and as many VMs as the choice. The launch rendered for the choice (ports, GPU ranges,
    TP) runs there unchanged, so one instance template serves both; the VM is costed at its
    own price. None when ``own`` does not hold more replicas than the choice at the same GPUs
    and TP, or serves a replica slower (the token rate was met with the choice's replicas)."""
    if own.replicas_per_instance <= choice.replicas_per_instance:
        return None
    return _choice_launch_on(choice, own)


def served_group_shape(choice: Shape, own: Shape, gpus: int) -> Shape | None:
    """A stateless served model's choice shape on a VM of ``gpus`` GPUs in a group of its own
    (GCP): the choice's replicas per VM, each at the choice's GPUs and TP (its rendered launch:
    ports, GPU ranges, TP), as many VMs as the choice, the VM's other GPUs idle and paid for.
    One replica set per VM, not as many as its GPUs hold: the regional load balancer's backend
    service reaches one named port per group (``providers.gcp.endpoint``), so a replica on a
    second port would get no traffic. None when ``own`` (the type's fit at the choice's TP)
    runs a replica on other GPUs or TP, serves it slower (the token rate was met with the
    choice's replicas), or the VM lacks the GPUs the choice's replicas use."""
    if gpus < choice.replicas_per_instance * choice.gpus_per_replica:
        return None
    return _choice_launch_on(choice, own)


MAX_ON_DEMAND_GROUPS = 2
"""At most this many on-demand groups after a spot endpoint's spot ones (``on_demand_refuge``):
the cheapest on-demand type, and one more in case its capacity is short too."""


def on_demand_refuge(choice: Offer, shape: Shape, served: bool) -> bool:
    """Whether a stateless served model's spot choice on a cloud whose fleet counts VMs (a GCP
    MIG, one provisioning model per instance template: ``markets.ON_DEMAND_BASE_UNSUPPORTED``)
    also takes on-demand groups of its own after its spot fallbacks, so that the endpoint
    survives a spot drought in its region (issue 25; the AWS fleet keeps an on-demand base
    instead, ``serving.on_demand_base``). Each is an on-demand offer in the choice's region of a
    type the catalog sells on demand there (``selector.consumption`` drops the rest, such as
    a3-highgpu-1g/2g/4g, sold as Spot or Flex-start only), running the choice's launch
    (``served_group_shape``). Nothing moves a VM back to spot when spot capacity returns."""
    return (
        served
        and choice.market == "spot"
        and choice.cloud in VM_COUNTED_CLOUDS
        and shape.nodes_per_replica == 1
        and shape.job_hours is None
    )


@dataclass(frozen=True, slots=True)
class RefugeGap:
    """An on-demand group the budget alone turned away (``selector.refuge``): ``instance_type``
    in ``region``, ``total_usd`` for every VM of the fleet there the whole duration, and which
    limit it is ``over`` (worded as ``selector.select``'s budget rejection)."""

    instance_type: str
    region: str
    total_usd: float
    over: str


def over_budget(hourly: float, total: float, inputs: CostInputs) -> str:
    """Which limit of the spec's budget ``hourly``/``total`` exceeds."""
    if inputs.budget_hourly is not None and hourly > inputs.budget_hourly:
        return f"${hourly:,.2f}/h is over max_hourly_usd ${inputs.budget_hourly:,.2f}"
    return f"${total:,.2f} is over max_total_usd ${inputs.budget_total or 0:,.2f}"


def weight_in_fleet(choice: Shape, own: Shape, units: int, weighted: bool) -> int | None:
    """How many capacity units (replicas) one instance of a type whose fit is ``own`` counts
    for in the choice's fleet, or None when it cannot join it (see the module doc).
    ``weighted``: the fleet may mix sizes (a batch job, on a cloud that weights instances)."""
    if choice.nodes_per_replica != 1 or own.nodes_per_replica != 1:
        return None
    if weighted:
        return own.replicas_per_instance
    if own.gpus_per_replica != choice.gpus_per_replica or own.tensor_parallel != choice.tensor_parallel:
        return None
    if own.replicas_per_instance != choice.replicas_per_instance:
        return None
    serving_rate = own.job_hours is None and own.tokens_per_s_per_replica is not None
    if serving_rate and own.replicas > units:
        return None
    return own.replicas_per_instance


ATTEMPT = "attempt"
"""``Fallback.realised`` of a multi-node replica's fallback: ``gpufit up`` tries it as an attempt
of its own (``gitops.failover``), its nodes plain instances of its one type as the choice's are."""


def attempt_shape(choice: Shape, own: Shape, cloud: str) -> Shape | None:
    """A multi-node replica's fallback: ``own``, the type's shape as the selector plans it alone
    (its nodes, GPUs and TP per replica, each node reached by the node interconnect its fit
    requires: ``sizing.fit`` takes more than one node only on a type with EFA), or None when
    the choice is single-node or its cloud's fleet counts VMs (GCP is not realised so).

    Not an EC2 Fleet: an instant fleet is the one kind that launches all N nodes of one type
    in one zone or none (``SingleInstanceType``, ``SingleAvailabilityZone``, ``MinTargetCapacity``:
    "Supported only for fleets of type instant", botocore 1.43.11's
    ``botocore/data/ec2/2016-11-15/service-2.json``). For on-demand it would lose nothing (a
    follow-up). For spot it loses stop-on-interruption ("For EC2 Fleet or Spot Fleet, the request
    type must be maintain", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/interruption-behavior.html).
    And gpufit gives each node a pre-made EFA interface with an Elastic IP (its own choice: the
    default VPC has no NAT), which a launch template shared by N nodes cannot name. Each
    fallback is instead a plan of its own that ``gpufit up`` deploys, pinned as listed
    (``placement.attempt``), when the type before it had no capacity."""
    if choice.nodes_per_replica <= 1 or cloud in VM_COUNTED_CLOUDS:
        return None
    if own.nodes_per_replica > 1 and not own.needs_node_interconnect:
        return None
    return own


def multinode_note(choice: Offer, found: int) -> str:
    """Why a multi-node replica has fewer than two fallbacks: the types in its region and
    market that run it alone (``attempt_shape``) within the budget and ttl."""
    if choice.cloud in VM_COUNTED_CLOUDS:
        return f"a multi-node replica runs on plain {choice.cloud} VMs of one type"
    return (
        f"only {found} other type(s) run the multi-node replica in {choice.region}, {choice.market}, "
        "each as `gpufit up`'s next attempt, within the budget and ttl"
    )


def realised_text(fallback: Fallback) -> str:
    """How the cloud realises a fallback, for the plan: a multi-node replica's attempt of its
    own, or a GCP fallback's instance flexibility or group (``gcp_flexibility.describe``);
    "" for a member of an AWS group's overrides."""
    if fallback.realised == ATTEMPT:
        shape = fallback.shape
        nodes = shape.nodes_per_replica
        cost = fallback.cost
        return (
            f"a `gpufit up` attempt of its own: {nodes} node{'s' if nodes != 1 else ''}, "
            f"{shape.gpus_per_replica} GPUs per replica; launched as {shape.instances} × "
            f"{fallback.offer.instance.name} in {fallback.offer.zone or fallback.offer.region} at "
            f"${cost.hourly_usd:,.2f}/h, est. ${cost.total_usd:,.2f} in all"
        )
    if not fallback.realised:
        return ""
    text = describe(fallback.realised, fallback.offer.instance.machine_type)
    return f"{text}; {REFUGE_NOTE}" if fallback.refuge else text


REFUGE_NOTE = (
    "on-demand (STANDARD VMs), ranked after every spot fallback so that the endpoint survives a "
    "spot drought; nothing moves a VM back to spot when spot capacity returns: a VM moved here "
    "runs at the on-demand price until the deadline, a later `gpufit up` included (it keeps the "
    "groups' sizes), unless you resize this group to 0 and the choice's group back up; it needs "
    "the region's standard quota for its GPUs (NVIDIA_<GPU>_GPUS, which new projects often lack: "
    "`gcloud compute regions describe REGION`), not checked at plan time"
)
"""What an on-demand group of a spot endpoint costs in time, and the quota it needs
(``on_demand_refuge``; ``providers.gcp.rebalance.STANDARD_GPU_QUOTA``)."""


def same_shape(choice: Shape, own: Shape, units: int) -> bool:
    """Whether ``own`` can join the choice's fleet holding as many replicas per instance."""
    return weight_in_fleet(choice, own, units, weighted=False) is not None


def fallbacks(
    choice_offer: Offer,
    choice_shape: Shape,
    catalog: Catalog,
    fit_of: Callable[[InstanceType], Shape | Rejection],
    inputs: CostInputs,
    rates: dict[str, CloudRates],
    instance_patterns: list[str] | None,
    deadline_hours: float | None,
    within_budget: Callable[[float, float], bool],
    on_demand_base: tuple[int, float] = (0, 0.0),
    weighted: bool = False,
    wait_value: float = 0.0,
    rerun_usd: float | None = None,
    fit_at: Callable[[InstanceType, int], Shape | Rejection] | None = None,
    limit: int = MAX_FALLBACKS,
    vm_flexibility: bool | None = None,
    max_cost_ratio: float | None = None,
    checkpointed: bool = False,
    served: bool = False,
    late: list[Late] | None = None,
    refuge_gaps: list[RefugeGap] | None = None,
) -> tuple[Fallback, ...]:
    """The choice's fallbacks in its region and market (and in its zone when the choice is
    zone-specific), cheapest expected total first (ties: fewer GPUs, then the name), one per
    instance type, at most ``limit``. ``weighted``: a batch fleet that may mix machine sizes;
    ``on_demand_base``: the choice's instances kept on-demand (a spot serving fleet), costed
    the same in every fallback. Fallbacks rank by expected cost, their obtainability included,
    an hour of waiting worth ``wait_value``. ``fit_at`` (a served model) refits a type at the
    choice's tensor parallelism when its own fit chose another: the rendered launch fixes TP.
    ``vm_flexibility``: ``placement.gcp_instance_flexibility`` (None: the sourced allowlist,
    True: any size of the choice's series, False: none), see ``selector.gcp_flexibility``; a
    batch job's other GCP fallbacks each get a group of their own, and so do a single-node
    ``checkpointed`` job's that run its launch unchanged (``gcp_flexibility.realisation``).
    A stateless ``served`` model's other GCP fallbacks with at least its GPU memory get groups
    of their own too, each VM running the choice's launch (``served_group_shape``), and when
    its choice is spot, on-demand groups follow (at most ``MAX_ON_DEMAND_GROUPS``, by expected
    cost, after every fallback in the choice's market: ``on_demand_refuge``).
    ``max_cost_ratio``: a fallback whose billed total exceeds this many times the choice's is
    not taken (an unbudgeted on-demand service: nothing moves the group back to the choice).
    ``late`` collects the offers that ran the job within the budget but past the deadline;
    ``refuge_gaps`` the on-demand groups the budget alone turned away (``selector.refuge``)."""
    ceiling = (
        max_cost_ratio * offer_cost(choice_offer, choice_shape, inputs, rates, on_demand_base).total_usd
        if max_cost_ratio is not None
        else None
    )
    units = fleet_units(choice_shape)
    vm_counted = weighted and choice_offer.cloud in VM_COUNTED_CLOUDS
    cloud, region, market = choice_offer.cloud, choice_offer.region, choice_offer.market
    pinned = choice_offer.zone
    allowed = (pinned,) if pinned is not None else choice_offer.zones
    # A multi-node replica's fallback is an attempt of its own: placed in its own offer's zone.
    attempts = choice_shape.nodes_per_replica > 1 and cloud not in VM_COUNTED_CLOUDS
    # A spot endpoint's on-demand groups come after its spot fallbacks (``on_demand_refuge``).
    refuge = on_demand_refuge(choice_offer, choice_shape, served)
    markets = (market, "on-demand") if refuge else (market,)
    found: dict[tuple[str, str], tuple[tuple[object, ...], Fallback]] = {}
    for it, offers in catalog.by_instance_type:
        if it.cloud != cloud:
            continue
        for wanted in markets:
            if wanted == market and it.name == choice_offer.instance.name:
                continue
            realised: str | None
            if wanted != market:  # one template, one provisioning model: a group of its own
                realised = "group" if serves_launch_machine(choice_offer.instance, it) else None
            elif cloud in VM_COUNTED_CLOUDS:
                realised = realisation(
                    choice_offer.instance,
                    it,
                    vm_flexibility,
                    weighted,
                    checkpointed and choice_shape.nodes_per_replica == 1,
                    served and choice_shape.nodes_per_replica == 1,
                )
            else:
                realised = ""
            if realised is None:
                continue
            bound = realised in FLEXIBLE and cloud in ACCELERATOR_BOUND_CLOUDS
            if bound and not same_accelerators(choice_offer.instance, it):
                continue
            if instance_patterns is not None and not any(
                fnmatch.fnmatchcase(it.name, p) for p in instance_patterns
            ):
                continue
            here = [
                o
                for o in offers
                if o.region == region
                and o.market == wanted
                and (
                    attempts
                    or not allowed
                    or any(offered_in(o, zone) for zone in allowed)
                    or (pinned is None and o.zone is None and not o.zones)
                )
                and not o.unpriced
            ]
            if not here:
                continue
            if not attempts:
                # The group may launch this type in any zone it is allowed: cost it where it is dearest.
                here = [max(here, key=lambda o: o.hourly_usd)]
            own = fit_of(it)
            if (
                fit_at is not None
                and not isinstance(own, Rejection)
                and own.tensor_parallel != choice_shape.tensor_parallel
            ):
                own = fit_at(it, choice_shape.tensor_parallel)
            if isinstance(own, Rejection):
                continue
            weight = weight_in_fleet(choice_shape, own, units, weighted)
            if served and realised == "group":
                own_group = served_group_shape(choice_shape, own, it.gpu_count)
                if own_group is None:
                    continue
                own, weight = own_group, choice_shape.replicas_per_instance
            padded = (
                idle_gpu_shape(choice_shape, own)
                if realised in FLEXIBLE and weight is None and same_series(choice_offer.instance, it)
                else None
            )
            alone = attempt_shape(choice_shape, own, cloud)
            how: str = realised
            if alone is not None:
                shape, weight, how = alone, alone.replicas_per_instance, ATTEMPT
            elif padded is not None:
                shape, weight = padded, choice_shape.replicas_per_instance
            elif weight is None:
                continue
            elif realised in FLEXIBLE and vm_counted:
                shape = vm_fleet_shape(own, choice_shape.instances)
            else:
                shape = fleet_shape(own, units)
            for offer in here:
                billed = offer_cost(offer, shape, inputs, rates, on_demand_base)
                if ceiling is not None and billed.total_usd > ceiling * (1 + 1e-9):
                    continue
                window = deadline_hours if inputs.run_hours is None else None
                odds = obtainability(offer, shape.nodes_per_replica)
                cost = with_wait(billed, odds, wait_value, window, rerun_usd)
                if deadline_hours is not None and inputs.run_hours is None and cost.hours > deadline_hours:
                    if late is not None:  # the breadth note names what the deadline cost
                        late.append(Late(it.name, offer.region, shape.instances, cost.hours))
                    continue
                refuged = wanted != market
                if not within_budget(cost.hourly_usd, cost.total_usd):
                    if refuged and refuge_gaps is not None:
                        over = over_budget(cost.hourly_usd, cost.total_usd, inputs)
                        refuge_gaps.append(RefugeGap(it.name, offer.region, cost.total_usd, over))
                    continue
                key = (refuged, cost.expected_usd, it.gpu_count * shape.instances, it.name, offer.zone or "")
                best = found.get((it.name, wanted))
                if best is None or key < best[0]:
                    found[(it.name, wanted)] = (key, Fallback(offer, shape, cost, weight, how, refuged))
    # the choice's market first, each by expected cost; then a spot endpoint's on-demand groups
    ranked = [fallback for _, fallback in sorted(found.values(), key=lambda entry: entry[0])]
    groups = [f for f in ranked if f.realised == "group" and not f.refuge][:MAX_FALLBACK_GROUPS]
    refuges = [f for f in ranked if f.refuge][:MAX_ON_DEMAND_GROUPS]
    kept = [f for f in ranked if (f.realised != "group" and not f.refuge) or f in groups or f in refuges]
    return tuple(kept)[:limit]
