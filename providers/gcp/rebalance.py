"""The rebalancer of a GCP batch, checkpointed or stateless served fleet in several groups:
which VMs move, decided in one pure function (``decide``), and the Cloud Workflows source that
runs the same decision in the cloud (``workflow_source``), built here as data so that its
structure is tested, not hand-written.

Why a workflow. A regional MIG counts VMs of its own template, and its instance flexibility is
not refused by Google's Cluster Toolkit only for machine types with the choice's GPUs
(``selector.gcp_flexibility``): a batch fleet's other sizes and GPUs, and a single-node
checkpointed job's types with its GPU count and memory, and a stateless served model's types
with at least its GPU memory (each VM running the choice's launch, every group a backend of the
endpoint's one backend service), each get a MIG of their own, created at size 0
(``providers.gcp.fallback_groups``). A served VM holds the choice's replicas in every group, so
its weight is the same everywhere and a move trades VM for VM. Nothing in Compute Engine moves a
target from a MIG that cannot get capacity to another, and gpufit runs no controller. Cloud
Scheduler runs a workflow "automatically ... on a particular schedule, in this case every 5
minutes" (https://cloud.google.com/scheduler/docs/tut-workflows), so the decision runs in the
cloud until the deadline, with no machine of ours. Each run lists each group's managed
instances in ranked order (``regionInstanceGroupManagers.listManagedInstances``: "includes any
current actions that the group has scheduled for its instances"); at the first group with VMs
that do not exist yet and whose last attempt failed for want of capacity (``STARVED_ACTIONS``;
the codes and messages of ``gitops/capacity_errors.yaml``; in a spot fleet's on-demand group,
its standard GPU quota errors too: ``quota_pattern``) it waits ``GRACE_SECONDS``, lists
again, and moves the VMs starved in both lists: it resizes the next group of the ring by what
they held (``regionInstanceGroupManagers.resize``), never past the plan's replicas, then deletes
them from their group (``deleteInstances``: "reduces the targetSize of the managed instance
group by the number of instances that you delete"; a VM that exists is never touched).
Compute discovery document ``compute.v1``; the budget policy counts the groups at
``selector.gcp_flexibility.most_replicas``. It calls the REST APIs with ``http.get``/``http.post``
and ``auth: {type: OAuth2}`` (https://cloud.google.com/workflows/docs/authenticate-from-workflow),
each call retried (``RETRY``), as a service account that may only get and update these groups
and pause its own schedule; it reads its plan and deadline from user-defined environment
variables (``sys.get_env``, https://cloud.google.com/workflows/docs/use-environment-variables).
It grows no group from ``DEADLINE_MARGIN_SECONDS`` before the deadline on; at the deadline it
resizes every group to 0 and pauses its own Cloud Scheduler job, so the tick stops too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import yaml

from gitops.capacity import rules

PLAN_VARIABLE = "GPUFIT_REBALANCE"
DEADLINE_VARIABLE = "GPUFIT_DEADLINE"
"""The deadline (epoch seconds), apart from the plan so that a later ``pulumi up`` may update the
groups and replicas while keeping the deadline set at creation."""
"""The workflow's user-defined environment variable holding its plan (JSON): a key may not
start with GOOGLE or WORKFLOWS (discovery document ``workflows.v1``, ``Workflow.userEnvVars``)."""

EVERY_MINUTES = 5
"""How often Cloud Scheduler runs the workflow (Google's own tutorial runs one every 5 minutes)."""

COMPUTE = "https://compute.googleapis.com/compute/v1"
SCHEDULER = "https://cloudscheduler.googleapis.com/v1"

WORKFLOWS_LOCATIONS = frozenset(
    {
        *("northamerica-northeast1", "northamerica-northeast2", "northamerica-south1"),
        *("southamerica-east1", "southamerica-west1", "us-central1", "us-east1", "us-east4"),
        *("us-east5", "us-south1", "us-west1", "us-west2", "us-west3", "us-west4"),
        *("europe-central2", "europe-north1", "europe-north2", "europe-southwest1", "europe-west1"),
        *("europe-west2", "europe-west3", "europe-west4", "europe-west6", "europe-west8"),
        *("europe-west9", "europe-west10", "europe-west12", "asia-east1", "asia-east2"),
        *("asia-northeast1", "asia-northeast2", "asia-northeast3", "asia-south1", "asia-south2"),
        *("asia-southeast1", "asia-southeast2", "asia-southeast3", "australia-southeast1"),
        *("australia-southeast2", "me-central1", "me-central2"),
    }
)
"""Where Workflows runs (https://cloud.google.com/workflows/docs/locations, read 2026-12-04; the
page's list may hold more than these)."""

FALLBACK_LOCATION = "us-central1"


def workflow_location(region: str) -> str:
    """The fleet's region when Workflows runs there, else us-central1: a workflow's HTTP calls
    reach the Compute API of any region ("the HTTP call might not originate from the same
    region": the locations page)."""
    return region if region in WORKFLOWS_LOCATIONS else FALLBACK_LOCATION


STARVED_ACTIONS = ("CREATING", "RECREATING")
"""The managed-instance actions whose VM the rebalancer may take from a group, and only while the
VM does not exist: ``CREATING`` ("If the group fails to create this instance, it will try again
until it is successful") and ``RECREATING`` (a preempted spot VM the group recreates), with
``instanceStatus`` empty ("This field is empty when the instance does not exist") and a capacity
error as the last attempt (``ManagedInstance.currentAction``, ``instanceStatus``, ``lastAttempt``:
discovery document ``compute.v1`` rev. 20261106;
https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/listManagedInstances).
``CREATING_WITHOUT_RETRIES`` is left alone: the group itself gives such a VM up and lowers its
target size. A VM that exists (``PROVISIONING``, ``STAGING``, ``RUNNING`` ...) is never taken, even
when its record still carries an earlier capacity error."""

STARVED = (
    'map.get(mi, "instanceStatus") == null and map.get(mi, "currentAction") in ["'
    + '", "'.join(STARVED_ACTIONS)
    + '"] and text.match_regex(json.encode_to_string('
    'default(map.get(mi, ["lastAttempt", "errors"]), "")), '
    'default(map.get(plan.groups[i], "starved_by"), plan.capacity))'
)
"""``STARVED_ACTIONS`` as a Workflows expression over one managed instance ``mi`` of group
``i``: its last error matches the group's own ``starved_by`` (an on-demand group's,
``quota_pattern``) or else the plan's capacity errors (``map.get`` gives null for a missing key:
https://cloud.google.com/workflows/docs/reference/stdlib/map/get)."""

GRACE_SECONDS = 120
"""How long a VM must stay starved before it moves: the workflow lists a group, and only when some
VM is starved waits this long (``sys.sleep``) and lists it again; a VM moves only if both lists
show it starved. A stockout shorter than this moves nothing. Less than ``EVERY_MINUTES`` so that
one run ends before the next starts."""


def ring_wait(groups: int, boot: timedelta) -> timedelta:
    """How long a fleet with ``groups`` fallback groups may take to run a VM in its last group:
    each move waits at worst a whole Cloud Scheduler period (``EVERY_MINUTES``: the starvation
    began just after a run listed the group) plus ``GRACE_SECONDS`` of confirmed starvation, and
    the last group's VM then takes ``boot`` (``gpufit up``'s wait for one group). A create
    refused for capacity fails within seconds (``ZONE_RESOURCE_POOL_EXHAUSTED``), inside the
    ``EVERY_MINUTES`` - ``GRACE_SECONDS`` a moved VM has before the next run lists its group."""
    return boot + groups * timedelta(minutes=EVERY_MINUTES, seconds=GRACE_SECONDS)


DEADLINE_MARGIN_SECONDS = 60
"""The workflow grows no group from this long before the deadline on (checked right before each
resize call), so that no resize lands after a group's resize-to-0 deadline job."""


@dataclass(frozen=True)
class RebalancedGroup:
    """One MIG of the fleet, in the order the plan ranks them (the choice's group, then its
    fallbacks by expected cost), the replicas a VM of it holds (its GPUs ÷ the job's GPUs per
    replica), and its machine (for the budget policy's price)."""

    name: str
    weight: int
    machine_type: str = ""
    accelerator: str | None = None
    gpus: int = 0
    on_demand: bool = False  # a spot fleet's on-demand group (``selector.fallbacks.on_demand_refuge``)


@dataclass(frozen=True)
class GroupState:
    """What a run sees of one group: its target size and the VMs it is still trying to create
    after a capacity error in both of the run's lists, ``GRACE_SECONDS`` apart (their URLs)."""

    target: int
    starved: tuple[str, ...] = ()


@dataclass(frozen=True)
class Move:
    """Resize ``destination`` to ``target``, then delete ``delete`` from ``source``."""

    source: str
    delete: tuple[str, ...]
    destination: str
    target: int


def still_starved(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    """The VMs starved in both lists of a run (the grace period)."""
    return tuple(vm for vm in second if vm in first)


def decide(groups: Sequence[RebalancedGroup], states: Sequence[GroupState], units: int) -> Move | None:
    """The first group (in ranked order) with starved VMs gives them up to the next group in a
    ring: the last group's go back to the first, the choice's, so that replicas return to the
    preferred machine once its capacity is back, whatever the stockout that sent them away. The
    destination grows by the replicas they held (⌈moved ÷ its weight⌉ VMs) but never past what
    the plan's ``units`` replicas need beside every other group's target, and never shrinks.
    None when no group is starved. At most one move a run: the next run sees where it left the
    groups.

    Only VMs that do not exist move (``STARVED_ACTIONS``): a running VM stays in its group until
    it finishes and leaves, so replicas that found capacity in a less preferred group stay there
    (moving them back would stop work in progress for a machine that may still be short); the
    budget prices every replica at the dearest replica-hour of the set, so this drift costs no
    more than the budget counts."""
    if len(groups) < 2:
        return None
    total = sum(s.target * g.weight for g, s in zip(groups, states, strict=True))
    for i, (group, state) in enumerate(zip(groups, states, strict=True)):
        if not state.starved:
            continue
        j = (i + 1) % len(groups)
        nxt, there = groups[j], states[j]
        moved = len(state.starved) * group.weight
        others = total - moved - there.target * nxt.weight
        wanted = there.target + math.ceil(moved / nxt.weight)
        room = math.ceil(max(units - others, 0) / nxt.weight)
        return Move(group.name, state.starved, nxt.name, max(there.target, min(wanted, room)))
    return None


def capacity_pattern() -> str:
    """One RE2 expression (case-insensitive) matching a GCP capacity error's code or message, from
    ``gitops/capacity_errors.yaml`` (``text.match_regex`` takes RE2:
    https://cloud.google.com/workflows/docs/reference/stdlib/text/match_regex)."""
    return "(?i)" + "|".join(
        f"(?:{r.pattern.pattern})" for r in rules() if r.cloud == "gcp" and r.kind == "capacity"
    )


STANDARD_GPU_QUOTA = "Quota 'NVIDIA_[A-Z0-9_]+_GPUS' exceeded"
"""A regional standard (on-demand) GPU quota error: the message shape of
``gitops/capacity_errors.yaml``'s GCP quota rule ("Quota '[A-Z0-9_]+' exceeded") narrowed to the
standard GPU metrics of compute.v1 rev. 20261106 ``Quota.metric`` (``NVIDIA_<model>_GPUS``; the
preemptible ones are ``PREEMPTIBLE_NVIDIA_...``, the committed ``COMMITTED_NVIDIA_...``, the
global ``GPUS_ALL_REGIONS``). Quotas both markets may draw on (``CPUS``, ``SSD_TOTAL_GB``,
``IN_USE_ADDRESSES``, ``GPUS_ALL_REGIONS``) do not match: moving the VM to a spot group cannot
help there, so it stays, as a spot group's VM does."""


def quota_pattern() -> str:
    """``capacity_pattern`` and a standard GPU quota error (``STANDARD_GPU_QUOTA``): what starves a
    VM of a spot fleet's on-demand group. Its VMs count against the standard (on-demand) GPU
    quota, or the preemptible quota while the deadline is 7 days or less away ("GPU VMs that are
    configured to be automatically deleted after a predefined run time of 7 days or less can
    consume either preemptible or standard allocation quotas":
    https://cloud.google.com/compute/docs/instances/limit-vm-runtime,
    https://cloud.google.com/compute/docs/instance-groups/limit-vm-runtime-in-migs; the template
    carries the deadline's termination time). A project that runs spot on preemptible quota may
    lack standard GPU quota ("To prevent Spot VMs from consuming your quotas for standard VMs'
    CPUs, GPUs, and disks, consider requesting preemptible quota for Spot VMs":
    https://cloud.google.com/compute/docs/instances/create-use-spot), so a VM refused for it
    there moves on, round the ring to the spot choice's group, as one short of capacity does,
    rather than wait for quota for ever. A spot group's quota error is left as before."""
    return "(?i)" + "|".join(
        [
            *(f"(?:{r.pattern.pattern})" for r in rules() if r.cloud == "gcp" and r.kind == "capacity"),
            f"(?:{STANDARD_GPU_QUOTA})",
        ]
    )


def plan_variable(region: str, groups: Sequence[RebalancedGroup], units: int, tick_job: str) -> str:
    """The JSON the workflow reads from ``GPUFIT_REBALANCE`` (at most 4 KiB: discovery document):
    the groups, the plan's replicas, the capacity errors and its own Cloud Scheduler job (which
    it pauses at the deadline). The deadline is a variable of its own (``DEADLINE_VARIABLE``),
    the one value a later ``pulumi up`` keeps as it was."""
    doc = {
        "region": region,
        "units": units,
        "tick": tick_job,
        "capacity": capacity_pattern(),
        "groups": [
            {
                "name": g.name,
                "weight": g.weight,
                "machine_type": g.machine_type,
                "accelerator": g.accelerator,
                "gpus": g.gpus,
                **({"starved_by": quota_pattern()} if g.on_demand else {}),
            }
            for g in groups
        ],
    }
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > 4096:
        raise ValueError(f"the rebalancer's plan is {len(text.encode())} bytes, over userEnvVars' 4 KiB")
    return text


def _e(expression: str) -> str:
    """A Workflows expression: ``${...}`` (https://cloud.google.com/workflows/docs/reference/syntax/expressions)."""
    return "${" + expression + "}"


RETRY = _e("http.default_retry")
"""Retries 429, 502, 503, 504 and connection and timeout errors, 5 times with backoff
(https://cloud.google.com/workflows/docs/reference/stdlib/http/default_retry; ``try``/``retry``:
https://cloud.google.com/workflows/docs/reference/syntax/retrying). Every call retried is
idempotent: a GET, a list, a resize to an absolute size, a delete of named instances (an
instance already gone is skipped: ``skipInstancesOnValidationError``) and a pause."""


def _http(method: str, url: str, result: str, body: Any = None) -> dict[str, Any]:
    args: dict[str, Any] = {"url": _e(url), "auth": {"type": "OAuth2"}}
    if body is not None:
        args["body"] = body
    return {"try": {"call": f"http.{method}", "args": args, "result": result}, "retry": RETRY}


def _switch(condition: str, **then: Any) -> dict[str, Any]:
    return {"switch": [{"condition": _e(condition), **then}]}


def _scan(into: str, listed: str) -> dict[str, Any]:
    """The starved VMs of a ``listManagedInstances`` response, into the list ``into``."""
    return {
        "for": {
            "value": "mi",
            "in": _e(f'default(map.get({listed}.body, "managedInstances"), [])'),
            "steps": [
                {"starving": _switch(STARVED, assign=[{into: _e(f"list.concat({into}, mi.instance)")}])}
            ],
        }
    }


def _move() -> list[dict[str, Any]]:
    """Read every group's target size, then grow the next group and take the starved VMs from
    this one (the resize first: a failed delete leaves VMs that do not exist, never fewer
    replicas), unless the deadline is near."""
    return [
        {"reset_sizes": {"assign": [{"targets": []}, {"total": 0}]}},
        {
            "sizes": {
                "for": {
                    "value": "g",
                    "in": _e("plan.groups"),
                    "steps": [
                        {"get": _http("get", "base + g.name", "got")},
                        {
                            "add": {
                                "assign": [
                                    {"targets": _e("list.concat(targets, int(got.body.targetSize))")},
                                    {"total": _e("total + int(got.body.targetSize) * g.weight")},
                                ]
                            }
                        },
                    ],
                }
            }
        },
        {
            "amounts": {
                "assign": [
                    {"j": _e("(i + 1) % len(plan.groups)")},
                    {"nxt": _e("plan.groups[j]")},
                    {"moved": _e("len(starved) * plan.groups[i].weight")},
                    {"others": _e("total - moved - targets[j] * nxt.weight")},
                    {"wanted": _e("targets[j] + (moved + nxt.weight - 1) // nxt.weight")},
                    {"room": 0},
                ]
            }
        },
        {
            "roomy": _switch(
                "plan.units > others",
                assign=[{"room": _e("(plan.units - others + nxt.weight - 1) // nxt.weight")}],
            )
        },
        {"capped": _switch("room < wanted", assign=[{"wanted": _e("room")}])},
        {"kept": _switch("wanted < targets[j]", assign=[{"wanted": _e("targets[j]")}])},
        {
            "late": _switch(
                f"sys.now() >= deadline - {DEADLINE_MARGIN_SECONDS}",
                **{"return": "too close to the deadline to move"},
            )
        },
        {"grow": _http("post", 'base + nxt.name + "/resize?size=" + string(wanted)', "grown")},
        {
            "release_body": {
                "assign": [{"release": {"instances": _e("starved"), "skipInstancesOnValidationError": True}}]
            }
        },
        {
            "release": _http(
                "post", 'base + plan.groups[i].name + "/deleteInstances"', "released", _e("release")
            )
        },
        {
            "done": {
                "return": _e(
                    '"moved " + string(len(starved)) + " VM(s) of " + plan.groups[i].name + " to " + nxt.name'
                )
            }
        },
    ]


def _at_deadline() -> list[dict[str, Any]]:
    """Every group to 0 (again, idempotent: this also undoes a resize that raced the deadline
    jobs) and the workflow's own Cloud Scheduler job paused, so nothing keeps running past the
    deadline (``projects.locations.jobs.pause``: "the system will stop executing the job":
    https://cloud.google.com/scheduler/docs/reference/rest/v1/projects.locations.jobs/pause)."""
    return [
        {
            "zero": {
                "for": {
                    "value": "g",
                    "in": _e("plan.groups"),
                    "steps": [{"empty": _http("post", 'base + g.name + "/resize?size=0"', "emptied")}],
                }
            }
        },
        {"pause": _http("post", f'"{SCHEDULER}/" + plan.tick + ":pause"', "paused")},
    ]


def workflow_definition() -> dict[str, Any]:
    """The workflow as data: ``main`` with ``steps`` (``assign``, ``switch``, ``for`` with
    ``in`` and ``range``, ``call``, ``try``/``retry``, ``return``:
    https://cloud.google.com/workflows/docs/reference/syntax). It mirrors ``decide``: it lists
    the groups' managed instances in ranked order; at the first group with starved VMs it waits
    ``GRACE_SECONDS``, lists again, and moves the VMs starved in both lists to the next group
    in the ring. Variables a loop reads after it are created before it (a variable created in
    a ``for`` loop does not exist after it:
    https://cloud.google.com/workflows/docs/reference/syntax/iteration)."""
    rebalance_steps = [
        {"list": _http("post", 'base + plan.groups[i].name + "/listManagedInstances"', "listed")},
        {"reset": {"assign": [{"first": []}, {"starved": []}]}},
        {"scan": _scan("first", "listed")},
        {
            "short": _switch(
                "len(first) > 0",
                steps=[
                    {"grace": {"call": "sys.sleep", "args": {"seconds": GRACE_SECONDS}}},
                    {
                        "relist": _http(
                            "post", 'base + plan.groups[i].name + "/listManagedInstances"', "listed"
                        )
                    },
                    {"rescan": _scan("again", "listed")},
                    {
                        "both": {
                            "for": {
                                "value": "vm",
                                "in": _e("again"),
                                "steps": [
                                    {
                                        "kept": _switch(
                                            "vm in first",
                                            assign=[{"starved": _e("list.concat(starved, vm)")}],
                                        )
                                    }
                                ],
                            }
                        }
                    },
                    {"confirmed": _switch("len(starved) > 0", steps=_move())},
                ],
            )
        },
    ]
    # ``again`` is created before the loop it is filled in
    rebalance_steps[1]["reset"]["assign"].append({"again": []})
    return {
        "main": {
            "steps": [
                {
                    "init": {
                        "assign": [
                            {"plan": _e(f'json.decode(sys.get_env("{PLAN_VARIABLE}"))')},
                            {"deadline": _e(f'int(sys.get_env("{DEADLINE_VARIABLE}"))')},
                            {
                                "base": _e(
                                    f'"{COMPUTE}/projects/" + sys.get_env("GOOGLE_CLOUD_PROJECT_ID") + '
                                    '"/regions/" + plan.region + "/instanceGroupManagers/"'
                                )
                            },
                            {"targets": []},
                            {"total": 0},
                        ]
                    }
                },
                {
                    "deadline_reached": _switch(
                        "sys.now() >= deadline",
                        steps=[
                            *_at_deadline(),
                            {
                                "stopped": {
                                    "return": "past the deadline: every group at 0, the schedule paused"
                                }
                            },
                        ],
                    )
                },
                {
                    "rebalance": {
                        "for": {
                            "value": "i",
                            "range": [0, _e("len(plan.groups) - 1")],
                            "steps": rebalance_steps,
                        }
                    }
                },
                {"nothing": {"return": "no group is short of capacity"}},
            ]
        }
    }


def workflow_source() -> str:
    """The workflow's YAML source (``Workflow.sourceContents``)."""
    return yaml.safe_dump(workflow_definition(), sort_keys=False, width=200)
