"""GCP machine types as the catalog knows them: the GPU families and N1 hosts wanted, the N1 + GPU
limits, what the Compute listings returned (``MachineType``, ``Listing``), and the instance
type entries built from them (a bundled GPU machine type, an N1 host with attached GPUs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from selector.catalog import GpuSpec

SOURCE_COMPUTE = "GCP_COMPUTE"
SOURCE_N1_LIMITS = "SKYN1"

BUNDLED_FAMILIES = ("a2", "a3", "a4", "g2")
"""Accelerator-optimized series whose machine types carry their GPUs."""
NVLINK_SERIES = frozenset({"a2", "a3", "a4"})
"""Series whose multi-GPU machine types join their GPUs with NVLink/NVSwitch (G2 is PCIe only)."""
FULL_HOST_INTERCONNECT = {
    "a3-highgpu": "gpudirect-tcpx",
    "a3-megagpu": "gpudirect-tcpxo",
    "a3-ultragpu": "gpudirect-rdma",
    "a4-highgpu": "gpudirect-rdma",
}
"""GPUDirect networking per machine series, claimed (as in the embedded snapshot) for the
8-GPU machine types only: GCP documents it for the full-host shapes."""
FULL_HOST_GPUS = 8

N1_HOSTS = ("n1-standard-4", "n1-standard-8", "n1-standard-16", "n1-standard-32", "n1-standard-64")
"""The N1 shapes combined with attached GPUs (the embedded snapshot's hosts)."""
N1_LIMITS: dict[str, dict[int, tuple[int, float]]] = {
    "nvidia-tesla-t4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "nvidia-tesla-v100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
}
"""Largest N1 VM (vCPUs, memory GiB) per attached GPU count, the table the snapshot builds
from (``selector/data/snapshot_src/gcp_n1_limits.csv``, source SKYN1). The API tells only
``maximumCardsPerInstance``; an accelerator type without a row here is reported, not combined."""

SOURCES_STATIC = {
    SOURCE_N1_LIMITS: {
        "title": "SkyPilot sky/clouds/service_catalog/gcp_catalog.py, table _NUM_ACC_TO_MAX_CPU_AND_MEMORY: "
        "maximum vCPUs and memory of an N1 VM per attached T4/V100 count (the code cites "
        "cloud.google.com/compute/docs/gpus)",
        "url": "https://github.com/skypilot-org/skypilot/blob/master/sky/clouds/service_catalog/gcp_catalog.py",
        "retrieved": "2026-12-02",
    }
}


@dataclass(frozen=True)
class MachineType:
    name: str
    zone: str
    vcpus: int
    memory_mib: int
    accelerators: tuple[tuple[str, int], ...]

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def shape(self) -> tuple[int, int, tuple[tuple[str, int], ...]]:
        return (self.vcpus, self.memory_mib, self.accelerators)


@dataclass
class Listing:
    """What one region's compute listings returned."""

    machine_types: list[MachineType] = field(default_factory=list)
    accelerators: dict[str, dict[str, int]] = field(default_factory=dict)  # zone -> type -> max cards
    zones: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    filter_rejected: bool = False


def compact(number: float) -> float | int:
    return int(number) if float(number).is_integer() else number


def bundled_type(mt: MachineType, spec: GpuSpec, accelerator: str, count: int) -> dict[str, Any]:
    series_variant = "-".join(mt.name.split("-")[:2])
    interconnect = FULL_HOST_INTERCONNECT.get(series_variant) if count >= FULL_HOST_GPUS else None
    return {
        "cloud": "gcp",
        "name": mt.name,
        "machine_type": mt.name,
        "gpu": spec.name,
        "gpu_count": count,
        "attached_accelerator": None,
        "vcpus": mt.vcpus,
        "memory_gib": compact(mt.memory_gib),
        "local_nvme_gb": None,
        "network_gbps": None,
        "nvlink": count > 1 and mt.name.split("-")[0] in NVLINK_SERIES,
        "node_interconnect": interconnect,
        "source": SOURCE_COMPUTE,
        "confidence": "high",
        "notes": (
            f"{count} x {accelerator}; vCPUs and memory from machineTypes; "
            "local SSD and network bandwidth are not in the API"
        ),
    }


def n1_type(
    name: str,
    host: MachineType,
    spec: GpuSpec,
    accelerator: str,
    count: int,
    limit: tuple[int, float],
) -> dict[str, Any]:
    note = (
        f"N1 host with {count} attached {accelerator}; within GCP's limit of {limit[0]} vCPUs / "
        f"{compact(limit[1])} GiB for this GPU count ({SOURCE_N1_LIMITS})"
    )
    if count > 1:
        note += "; NVLink between attached GPUs not claimed"
    return {
        "cloud": "gcp",
        "name": name,
        "machine_type": host.name,
        "gpu": spec.name,
        "gpu_count": count,
        "attached_accelerator": accelerator,
        "vcpus": host.vcpus,
        "memory_gib": compact(host.memory_gib),
        "local_nvme_gb": None,
        "network_gbps": None,
        "nvlink": False,
        "node_interconnect": None,
        "source": SOURCE_COMPUTE,
        "confidence": "high",
        "notes": note,
    }
