"""How a GCP fleet realises each fallback: in the choice's managed instance group through
instance flexibility, or in a group of its own.

A regional MIG counts VMs and its ``instanceFlexibilityPolicy`` overrides only a VM's machine
type, CPU platform and disks (Compute discovery document ``compute.v1``, schema
``InstanceGroupManagerInstanceFlexibilityPolicyInstanceSelection``). Google's pages on the
policy show general-purpose types only; Google's own Cluster Toolkit emits it for GPU series
whose fallbacks have the same GPU model and count as the machine type, and refuses it for
a3-ultragpu, a4 and a4x (``data/gcp_instance_flexibility.yaml``, with its sources). So:

- ``flexibility``: the fallback is a machine type of the choice's series with the same GPUs
  (model and count), the series ``confirmed``, or any size of the choice's series and GPU model
  when the spec opts in (``placement.gcp_instance_flexibility: true``). It joins the choice's
  group as a ranked instance selection.
- ``group``: any other machine type that runs a batch job (any GPU, any size) gets a regional
  MIG of its own, created at size 0; a rebalancer (a Cloud Workflows workflow that Cloud
  Scheduler runs every 5 minutes until the deadline, when it empties every group and pauses its
  own schedule, ``providers.gcp.rebalance``) moves the
  VMs the choice's group cannot create for want of capacity to the next group. So does a
  single-node checkpointed job (a fine-tune) for a type with the choice's GPU count and at least
  its GPU memory, where its launch (GPUs, TP, command) runs unchanged and resumes from the
  bucket's checkpoint. So does a stateless served model for a type with at least the choice's
  GPU memory that runs its replicas at its TP: each VM runs the choice's launch (its replicas,
  ports and GPU ranges; a bigger VM's other GPUs idle), and every group is a backend of the one
  regional backend service. A multi-node replica runs on plain VMs of one type.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from selector.catalog import InstanceType
from selector.datafile import load_yaml, require_schema

DATA_FILE = Path(__file__).parent / "data" / "gcp_instance_flexibility.yaml"

Status = Literal["confirmed", "refused", "unknown"]
Realisation = Literal["flexibility", "opted-in flexibility", "group"]
FLEXIBLE: frozenset[str] = frozenset({"flexibility", "opted-in flexibility"})
"""The realisations that put a fallback in the choice's group."""

MAX_FLEXIBLE_TYPES = 10
"""Google's Cluster Toolkit: a policy "may reference at most 10 distinct machine types in
total" (``data/gcp_instance_flexibility.yaml``, CTK_OUTPUTS)."""

MAX_FALLBACK_GROUPS = 3
"""At most this many groups of their own besides the choice's: each is a template, a MIG at
size 0 and a deadline job, and the rebalancer walks them in order every few minutes."""


@dataclass(frozen=True)
class SeriesEvidence:
    """What the allowlist says of one machine series, and where it says it."""

    series: str
    status: Status
    source: str
    url: str


def series_of(machine_type: str) -> str:
    """``g2-standard`` of ``g2-standard-8``, ``a3-highgpu`` of ``a3-highgpu-8g``."""
    return machine_type.rsplit("-", 1)[0]


@lru_cache(maxsize=1)
def _allowlist(path: Path = DATA_FILE) -> dict[str, SeriesEvidence]:
    doc = load_yaml(path)
    require_schema(doc, path, 1)
    sources = doc["sources"]
    return {
        row["series"]: SeriesEvidence(
            row["series"], row["status"], row["source"], sources[row["source"]]["url"]
        )
        for row in doc["series"]
    }


def evidence(machine_type: str) -> SeriesEvidence:
    """The allowlist's word on the machine type's series (``unknown`` when it has none)."""
    series = series_of(machine_type)
    return _allowlist().get(series, SeriesEvidence(series, "unknown", "", ""))


def flexible(choice: InstanceType, other: InstanceType, opted_in: bool | None) -> Realisation | None:
    """How ``other`` joins the choice's group by instance flexibility, or None: the same
    series, GPU model and template accelerators, and either the same GPU count in a series
    Google's code confirms (``flexibility``, whatever ``opted_in`` says but False) or any size
    when the spec opts in (True: ``opted-in flexibility``). False never takes it
    (``placement.gcp_instance_flexibility: false``)."""
    if opted_in is False or series_of(choice.machine_type) != series_of(other.machine_type):
        return None
    if choice.gpu.name != other.gpu.name or choice.attached_accelerator != other.attached_accelerator:
        return None
    if choice.attached_accelerator is not None and choice.gpu_count != other.gpu_count:
        return None  # the template attaches the choice's GPUs to every VM
    status = evidence(choice.machine_type).status
    if status == "refused":
        return None  # Google's own code refuses it: not even opted in
    if other.gpu_count == choice.gpu_count and status == "confirmed":
        return "flexibility"
    return "opted-in flexibility" if opted_in else None


def same_launch_machine(choice: InstanceType, other: InstanceType) -> bool:
    """Whether a checkpointed job's launch runs unchanged on ``other``: as many GPUs per
    machine as the choice (the command, its GPUs and TP are the choice's) and at least its GPU
    memory; whether the GPU runs the job's precision is the fit's (``selector.sizing``)."""
    return other.gpu_count == choice.gpu_count and other.gpu.memory_mib >= choice.gpu.memory_mib


def serves_launch_machine(choice: InstanceType, other: InstanceType) -> bool:
    """Whether a served model's launch may run unchanged on ``other``: at least the choice's
    GPU memory per GPU (its replicas' GPU ranges, ports and TP are the choice's, the machine's
    other GPUs idle); whether ``other`` has the GPUs the replicas use and runs the precision at
    the choice's TP is the fit's (``selector.fallbacks.served_group_shape``)."""
    return other.gpu.memory_mib >= choice.gpu.memory_mib


def realisation(
    choice: InstanceType,
    other: InstanceType,
    opted_in: bool | None,
    batch: bool,
    checkpointed: bool = False,
    served: bool = False,
) -> Realisation | None:
    """How the fleet realises ``other`` as a fallback of ``choice``: ``flexibility`` in the
    choice's group, ``group`` of its own, or None (not taken). A group of its own takes any
    type for a batch job (each VM derives its replicas from its GPUs), for a single-node
    checkpointed job (a fine-tune) a type on which its launch runs unchanged
    (``same_launch_machine``): a VM the rebalancer moves there resumes from the bucket's
    checkpoint, and for a stateless served model (``served``) a type with at least the
    choice's GPU memory (``serves_launch_machine``): its VMs run the choice's launch, backends
    of the one regional backend service (``providers.gcp.endpoint``)."""
    joined = flexible(choice, other, opted_in)
    if joined is not None:
        return joined
    if batch or (checkpointed and same_launch_machine(choice, other)):
        return "group"
    if served and serves_launch_machine(choice, other):
        return "group"
    return None


def describe(realised: str, machine_type: str) -> str:
    """``instance flexibility (g2-standard with the same GPUs: not refused by Google's Cluster Toolkit)`` or
    ``its own MIG, rebalanced``."""
    if realised == "group":
        return "its own MIG at size 0, the rebalancer moves VMs to it"
    ev = evidence(machine_type)
    if realised == "flexibility":
        return (
            f"instance flexibility ({ev.series} with the same GPUs: not refused by Google's Cluster Toolkit)"
        )
    return f"instance flexibility (opted in: {ev.series} with other GPU counts is unconfirmed)"


def most_replicas(weights: list[int], units: int) -> int:
    """The most replicas a batch fleet's groups hold together, whatever its rebalancer did
    (``providers.gcp.rebalance.decide``): a move grows the next group to at most ⌈what the plan's
    ``units`` still need ÷ its weight⌉ VMs, so the groups never hold more than ``units`` plus
    one VM's rounding of the heaviest group. The budget counts the groups at this, priced at
    the dearest replica-hour among them (the rebalancer moves VMs, it never adds replicas)."""
    return units + max(weights, default=1) - 1
