"""Job setup time: what a machine waits through before the job's first useful step, per offer.

Boot, the model server's image, the weights (downloaded from the Hub onto the boot disk, then
loaded onto the GPUs, the engine's own start), and the dataset. Machines of one job set up in
parallel, so the time is one machine's. Figures come from ``data/setup_times.yaml``, each with
its source and date; those marked ``estimate`` are gpufit assumptions and the plan says so.
Pure arithmetic on the data file; ``selector.cost`` adds the result to a job's hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema

SETUP_FILE = Path(__file__).parent / "data" / "setup_times.yaml"
GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class SetupFigure:
    """One figure of the data file: its value, where it comes from, and whether it is a
    gpufit assumption rather than a measurement."""

    value: float
    key: str
    source: str
    url: str
    estimate: bool


@lru_cache(maxsize=1)
def setup_figures() -> dict[str, SetupFigure]:
    """The figures of ``data/setup_times.yaml``, by name, each with its source resolved."""
    doc: dict[str, Any] = load_yaml(SETUP_FILE)
    require_schema(doc, SETUP_FILE, 1)
    sources: dict[str, Any] = doc["sources"]
    out = {}
    for name, raw in doc["figures"].items():
        src = sources[raw["source"]]
        out[name] = SetupFigure(
            float(raw["value"]),
            str(raw["source"]),
            f"{raw['source']}: {src['title']}",
            str(src["url"]),
            bool(raw["estimate"]),
        )
    return out


@dataclass(frozen=True, slots=True)
class SetupPart:
    """One step of setting a machine up: its name, seconds and how they were found."""

    name: str
    seconds: float
    formula: str
    estimate: bool
    sources: tuple[SetupFigure, ...] = ()


@dataclass(frozen=True, slots=True)
class SetupTime:
    """The steps of a job's setup on one offer; ``hours`` is what a job's time and cost add."""

    parts: tuple[SetupPart, ...]

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts)

    @property
    def hours(self) -> float:
        return self.seconds / 3600.0

    @property
    def estimated(self) -> bool:
        """Whether any step rests on a gpufit assumption, not a measurement."""
        return any(p.estimate for p in self.parts)

    @property
    def sources(self) -> tuple[SetupFigure, ...]:
        """The figures the steps rest on, each once, in order of first use."""
        seen: dict[str, SetupFigure] = {}
        for part in self.parts:
            for fig in part.sources:
                seen.setdefault(fig.key, fig)
        return tuple(seen.values())


def _tag(fig: SetupFigure) -> str:
    return f" [{'estimate: ' if fig.estimate else ''}{fig.key}]"


@lru_cache(maxsize=1)
def hyperdisk_only_series() -> tuple[str, ...]:
    """GCP machine series whose boot disk is ``hyperdisk-balanced`` (others: ``pd-balanced``)."""
    doc: dict[str, Any] = load_yaml(SETUP_FILE)
    return tuple(str(s) for s in doc["gcp_hyperdisk_only_series"])


def disk_write_mib_per_s(cloud: str, disk_gb: float, machine_type: str) -> tuple[float, SetupFigure, str]:
    """The boot disk's write throughput as gpufit creates it: AWS gp3 at its default 125 MiB/s;
    GCP ``pd-balanced`` at 0.28 MiB/s per GiB of its size up to 1,200 MiB/s per instance, or
    ``hyperdisk-balanced`` at the 140 MiB/s it includes (https://cloud.google.com/compute/docs/disks/performance,
    https://cloud.google.com/compute/docs/disks/hd-types/hyperdisk-balanced)."""
    figs = setup_figures()
    if cloud == "aws":
        disk = figs["aws_root_volume_mib_per_s"]
        return disk.value, disk, f"gp3 root volume {disk.value:g} MiB/s{_tag(disk)}"
    if machine_type.startswith(hyperdisk_only_series()):
        disk = figs["gcp_hyperdisk_balanced_mib_per_s"]
        return disk.value, disk, f"hyperdisk-balanced boot disk {disk.value:g} MiB/s{_tag(disk)}"
    per_gib = figs["gcp_pd_balanced_mib_per_s_per_gib"]
    ceiling = figs["gcp_pd_balanced_max_write_mib_per_s"].value
    gib = disk_gb * 1e9 / GIB
    rate = min(per_gib.value * gib, ceiling)
    why = f"pd-balanced boot disk {per_gib.value:g} MiB/s × {gib:,.0f} GiB = {rate:,.0f} MiB/s{_tag(per_gib)}"
    return rate, per_gib, why


def download_gib_per_s(
    cloud: str, disk_gb: float, machine_type: str
) -> tuple[float, str, tuple[SetupFigure, ...]]:
    """Rate the weights reach the boot disk: the Hub's measured rate, capped by the boot disk's
    write throughput (``disk_write_mib_per_s``; gpufit provisions none above the default)."""
    figs = setup_figures()
    hub = figs["hub_download_gib_per_s"]
    rate, why = hub.value, f"Hub {hub.value:g} GiB/s{_tag(hub)}"
    used: tuple[SetupFigure, ...] = (hub,)
    disk_mib, disk, disk_why = disk_write_mib_per_s(cloud, disk_gb, machine_type)
    disk_gib = disk_mib * MIB / GIB
    if disk_gib < rate:
        rate, why = disk_gib, f"{disk_why}, below the {why}"
        used = (disk, hub)
    return rate, why, used


def setup_time(
    cloud: str,
    weights_bytes: float,
    engine_image: bool,
    engine_start: bool,
    dataset_gb: float,
    disk_gb: float,
    machine_type: str,
) -> SetupTime:
    """Setup of one machine of ``machine_type`` on ``cloud`` with a ``disk_gb`` boot disk: boot;
    the model server's image when one runs (``engine_image``); the weights downloaded at
    ``download_gib_per_s`` (capped by the boot disk's write rate) and loaded onto the GPUs
    at the measured load rate; the engine's own start (profile, KV cache, warm-up; a model server
    only, ``engine_start``); the dataset at the dataset rate."""
    figs = setup_figures()
    boot = figs["boot_s"]
    parts = [
        SetupPart("boot", boot.value, f"instance start to boot script{_tag(boot)}", boot.estimate, (boot,))
    ]
    if engine_image:
        img = figs["engine_image_s"]
        parts.append(SetupPart("engine image", img.value, f"pull and start{_tag(img)}", img.estimate, (img,)))
    if weights_bytes > 0:
        gib = weights_bytes / GIB
        rate, why, used = download_gib_per_s(cloud, disk_gb, machine_type)
        parts.append(
            SetupPart(
                "weights download", gib / rate, f"{gib:,.1f} GiB at {rate:.3g} GiB/s ({why})", False, used
            )
        )
        load = figs["weights_load_gib_per_s"]
        formula = f"{gib:,.1f} GiB at {load.value:g} GiB/s{_tag(load)}"
        parts.append(SetupPart("weights load", gib / load.value, formula, False, (load,)))
    if engine_start:
        init = figs["engine_init_s"]
        formula = f"profile, KV cache, warm-up{_tag(init)}"
        parts.append(SetupPart("engine init", init.value, formula, init.estimate, (init,)))
    if dataset_gb > 0:
        data = figs["dataset_gib_per_s"]
        gib = dataset_gb * 1e9 / GIB
        rate = data.value
        used_data: tuple[SetupFigure, ...] = (data,)
        disk_mib, disk, _ = disk_write_mib_per_s(cloud, disk_gb, machine_type)
        if disk_mib * MIB / GIB < rate:
            rate, used_data = disk_mib * MIB / GIB, (data, disk)
        formula = f"storage.dataset_gb {gib:,.1f} GiB at {rate:.3g} GiB/s{_tag(data)}"
        parts.append(SetupPart("dataset", gib / rate, formula, True, used_data))
    return SetupTime(tuple(parts))
