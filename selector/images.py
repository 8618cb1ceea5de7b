"""The machine images gpufit boots, the instance families each supports, and the NVIDIA driver
each ships, from ``data/images.yaml``: a plan never chooses a machine no supported image runs
on, and launches only an engine build whose CUDA the image's driver runs (a container built
with CUDA 13 needs driver 580 or later, NVIDIA's minor-version compatibility:
https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from selector.datafile import load_yaml, require_schema

IMAGES_FILE = Path(__file__).parent / "data" / "images.yaml"


@dataclass(frozen=True, slots=True)
class ImageLine:
    """A line of images (the newest of which a stack boots) and the families it supports:
    ``name_filter`` an AWS AMI name filter (owner amazon), ``image`` a GCP image family path;
    ``nvidia_driver`` the driver's major version its release notes state (``driver_urls``);
    ``verified`` False when no statement by the cloud backs the line (said in the plan)."""

    cloud: str
    line: str
    name_filter: str
    architecture: str
    families: frozenset[str]
    source_url: str
    as_of: str
    nvidia_driver: int
    driver_urls: tuple[str, ...]
    image: str = ""
    verified: bool = True

    @property
    def label(self) -> str:
        """How the plan names it: the GCP image family or the AMI name filter."""
        return (self.image or self.name_filter).rsplit("/", 1)[-1]


def family(instance_type: str) -> str:
    """An AWS instance type's family: ``p5e.48xlarge`` → ``p5e``."""
    return instance_type.split(".", 1)[0]


@lru_cache(maxsize=2)
def load_image_lines(path: Path = IMAGES_FILE) -> tuple[ImageLine, ...]:
    doc = load_yaml(path)
    require_schema(doc, path, 2)
    sources = doc["sources"]
    lines = []
    for cloud in ("aws", "gcp"):
        for entry in doc[cloud]:
            for ref in (entry["source"], *entry["driver_source"]):
                if ref not in sources:
                    raise ValueError(
                        f"{path}: {cloud} image line {entry['line']} names unknown source {ref!r}"
                    )
            lines.append(
                ImageLine(
                    cloud=cloud,
                    line=str(entry["line"]),
                    name_filter=str(entry.get("name_filter", "")),
                    architecture=str(entry["architecture"]),
                    families=frozenset(str(f) for f in entry["families"]),
                    source_url=str(sources[entry["source"]]["url"]),
                    as_of=str(doc["as_of"]),
                    nvidia_driver=int(entry["nvidia_driver"]),
                    driver_urls=tuple(str(sources[r]["url"]) for r in entry["driver_source"]),
                    image=str(entry.get("image", "")),
                    verified=bool(entry.get("verified", True)),
                )
            )
    return tuple(lines)


def boot_image(cloud: str, instance_type: str) -> ImageLine | None:
    """The image line ``instance_type`` boots: on AWS the line listing its family (None: no
    supported image does), on GCP the Deep Learning VM family (its globs match every type)."""
    for line in load_image_lines():
        if line.cloud != cloud:
            continue
        if cloud == "aws" and family(instance_type) in line.families:
            return line
        if cloud != "aws" and any(fnmatch.fnmatchcase(instance_type, g) for g in line.families):
            return line
    return None


def image_line(cloud: str, instance_type: str) -> ImageLine | None:
    """The image line that supports ``instance_type`` on AWS (None: no supported image does);
    None on GCP too, where one Deep Learning VM family serves every GPU and is not restricted."""
    return boot_image(cloud, instance_type) if cloud == "aws" else None


def gcp_image() -> ImageLine:
    """The Deep Learning VM image family GCP machines boot unless ``gpufit:image`` names another."""
    line = boot_image("gcp", "*")
    if line is None:
        raise KeyError(f"{IMAGES_FILE}: no gcp image line")
    return line


def unsupported_reason(cloud: str, instance_type: str) -> str | None:
    """Why no image gpufit boots supports ``instance_type`` (None when one does, or on GCP)."""
    if cloud != "aws" or image_line(cloud, instance_type) is not None:
        return None
    lines = [x for x in load_image_lines() if x.cloud == "aws"]
    supported = ", ".join(sorted(set().union(*(x.families for x in lines))))
    return (
        f"{instance_type}: no AWS Deep Learning AMI that AWS still patches supports the "
        f"{family(instance_type)} family (supported: {supported}; {lines[0].as_of}, {lines[0].source_url})"
    )
