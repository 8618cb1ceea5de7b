"""The rebalancer of a GCP batch fleet in several groups: which VMs move, decided in one pure
function (``decide``), and the Cloud Workflows source that runs the same decision in the cloud
(``workflow_source``), built here as data so that its structure is tested, not hand-written.

Why a workflow. A regional MIG counts VMs of its own template, and its instance flexibility is
confirmed by Google's code only for machine types with the choice's GPUs
(``selector.gcp_flexibility``): a batch fleet's other sizes and GPUs each get a MIG of their
own, created at size 0 (``providers.gcp.fallback_groups``). Nothing in Compute Engine moves a
target from a MIG that cannot get capacity to another, and gpufit runs no controller. Cloud
Scheduler runs a workflow "automatically ... on a particular schedule, in this case every 5
minutes" (https://cloud.google.com/scheduler/docs/tut-workflows), so the decision runs in the
cloud for as long as the stack lives, with no machine of ours: each run lists each group's
managed instances (``regionInstanceGroupManagers.listManagedInstances``: "includes any current
actions that the group has scheduled for its instances"), takes those still ``CREATING`` whose
last attempt failed for want of capacity (``lastAttempt.errors``; the codes and messages of
``gitops/capacity_errors.yaml``), deletes them from their group (``deleteInstances``: "reduces
the targetSize of the managed instance group by the number of instances that you delete"; a
running VM is never touched) and resizes the next group by what they held
(``regionInstanceGroupManagers.resize``), never past the plan's replicas (Compute discovery
document ``compute.v1``; the budget policy counts the groups at ``selector.gcp_flexibility.
most_replicas``). It calls the Compute REST API with ``http.get``/``http.post`` and
``auth: {type: OAuth2}`` (https://cloud.google.com/workflows/docs/authenticate-from-workflow)
as a service account that may only get and update these groups, reads its plan from a
user-defined environment variable (``sys.get_env``,
https://cloud.google.com/workflows/docs/use-environment-variables) and stops acting at the
deadline (``sys.now``), when the deadline's own jobs bring every group to 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gitops.capacity import rules

PLAN_VARIABLE = "GPUFIT_REBALANCE"
"""The workflow's user-defined environment variable holding its plan (JSON): a key may not
start with GOOGLE or WORKFLOWS (discovery document ``workflows.v1``, ``Workflow.userEnvVars``)."""

EVERY_MINUTES = 5
"""How often Cloud Scheduler runs the workflow (Google's own tutorial runs one every 5 minutes)."""

COMPUTE = "https://compute.googleapis.com/compute/v1"

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


STARVED = (
    'mi.currentAction == "CREATING" and text.match_regex('
    'json.encode_to_string(default(map.get(mi, ["lastAttempt", "errors"]), {})), plan.capacity)'
)
"""A managed instance the group is still creating whose last attempt failed with a capacity error
(``ManagedInstance.currentAction``, ``lastAttempt.errors``: discovery document ``compute.v1``)."""


@dataclass(frozen=True)
class RebalancedGroup:
    """One MIG of the fleet, in the order the plan prefers them, the replicas a VM of it holds
    (its GPUs ÷ the job's GPUs per replica), and its machine (for the budget policy's price)."""

    name: str
    weight: int
    machine_type: str = ""
    accelerator: str | None = None
    gpus: int = 0


@dataclass(frozen=True)
class GroupState:
    """What a run sees of one group: its target size and the managed instances it is still
    trying to create after a capacity error (their URLs)."""

    target: int
    starved: tuple[str, ...] = ()


@dataclass(frozen=True)
class Move:
    """Delete ``delete`` from ``source`` and resize ``destination`` to ``target``."""

    source: str
    delete: tuple[str, ...]
    destination: str
    target: int


def decide(groups: Sequence[RebalancedGroup], states: Sequence[GroupState], units: int) -> Move | None:
    """The first group (in preference order, the last excepted) with starved VMs gives them up
    to the next group, which grows by the replicas they held (⌈moved ÷ its weight⌉ VMs) but
    never past what the plan's ``units`` replicas need beside every other group's target, and
    never shrinks. None when no group is starved (or only the last one is). At most one move a
    run: the next run sees where it left the groups."""
    total = sum(s.target * g.weight for g, s in zip(groups, states, strict=True))
    for i, (group, state) in enumerate(zip(groups[:-1], states[:-1], strict=False)):
        if not state.starved:
            continue
        nxt, there = groups[i + 1], states[i + 1]
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


def plan_variable(region: str, groups: Sequence[RebalancedGroup], units: int, deadline_epoch_s: int) -> str:
    """The JSON the workflow reads from ``GPUFIT_REBALANCE`` (at most 4 KiB: discovery document)."""
    doc = {
        "region": region,
        "units": units,
        "deadline": deadline_epoch_s,
        "capacity": capacity_pattern(),
        "groups": [
            {
                "name": g.name,
                "weight": g.weight,
                "machine_type": g.machine_type,
                "accelerator": g.accelerator,
                "gpus": g.gpus,
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


def _http(method: str, url: str, result: str, body: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"url": _e(url), "auth": {"type": "OAuth2"}}
    if body is not None:
        args["body"] = _e(body)
    return {"call": f"http.{method}", "args": args, "result": result}


def workflow_definition() -> dict[str, Any]:
    """The workflow as data: ``main`` with ``steps`` (``assign``, ``switch``, ``for`` with
    ``in`` and ``range``, ``call``, ``return``: https://cloud.google.com/workflows/docs/reference/syntax).
    It mirrors ``decide``: a first pass reads every group's target size, a second lists the
    groups' managed instances in order until one has starved VMs, and moves them."""
    scan = {
        "for": {
            "value": "mi",
            "in": _e('default(map.get(listed.body, "managedInstances"), [])'),
            "steps": [
                {
                    "starving": {
                        "switch": [
                            {
                                "condition": _e(STARVED),
                                "assign": [{"starved": _e("list.concat(starved, mi.instance)")}],
                            }
                        ]
                    }
                }
            ],
        }
    }
    move = [
        {
            "amounts": {
                "assign": [
                    {"nxt": _e("plan.groups[i + 1]")},
                    {"moved": _e("len(starved) * plan.groups[i].weight")},
                    {"others": _e("total - moved - targets[i + 1] * nxt.weight")},
                    {"wanted": _e("targets[i + 1] + int((moved + nxt.weight - 1) / nxt.weight)")},
                    {"room": 0},
                ]
            }
        },
        {
            "roomy": {
                "switch": [
                    {
                        "condition": _e("plan.units > others"),
                        "assign": [{"room": _e("int((plan.units - others + nxt.weight - 1) / nxt.weight)")}],
                    }
                ]
            }
        },
        {"capped": {"switch": [{"condition": _e("room < wanted"), "assign": [{"wanted": _e("room")}]}]}},
        {
            "kept": {
                "switch": [
                    {"condition": _e("wanted < targets[i + 1]"), "assign": [{"wanted": _e("targets[i + 1]")}]}
                ]
            }
        },
        {
            "release": _http(
                "post",
                'base + plan.groups[i].name + "/deleteInstances"',
                "released",
                '{"instances": starved, "skipInstancesOnValidationError": true}',
            )
        },
        {"grow": _http("post", 'base + nxt.name + "/resize?size=" + string(wanted)', "grown")},
        {
            "done": {
                "return": _e(
                    '"moved " + string(len(starved)) + " VM(s) of " + plan.groups[i].name + " to " + nxt.name'
                )
            }
        },
    ]
    return {
        "main": {
            "steps": [
                {
                    "init": {
                        "assign": [
                            {"plan": _e(f'json.decode(sys.get_env("{PLAN_VARIABLE}"))')},
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
                    "deadline": {
                        "switch": [
                            {"condition": _e("sys.now() >= plan.deadline"), "return": "past the deadline"}
                        ]
                    }
                },
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
                    "rebalance": {
                        "for": {
                            "value": "i",
                            "range": [0, _e("len(plan.groups) - 2")],
                            "steps": [
                                {
                                    "list": _http(
                                        "post",
                                        'base + plan.groups[i].name + "/listManagedInstances"',
                                        "listed",
                                    )
                                },
                                {"reset": {"assign": [{"starved": []}]}},
                                {"scan": scan},
                                {"short": {"switch": [{"condition": _e("len(starved) > 0"), "steps": move}]}},
                            ],
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
