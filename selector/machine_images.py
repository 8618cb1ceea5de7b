"""The machine image gpufit boots on an instance type, and the NVIDIA driver it ships
(``data/machine_images.yaml``): the driver decides which engine containers can run there,
since a container built with CUDA 13 needs driver 580 or later (NVIDIA's minor-version
compatibility: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
The providers read their default image here as well, so an image and its driver change together.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema

_FILE = Path(__file__).parent / "data" / "machine_images.yaml"


@dataclass(frozen=True, slots=True)
class MachineImage:
    """One image line: ``image`` is a GCP image (family) path, ``name_pattern`` an AWS AMI name
    filter (the newest match of ``owner`` boots); ``nvidia_driver`` the driver's major version."""

    cloud: str
    families: tuple[str, ...]
    nvidia_driver: int
    source: tuple[str, ...]
    image: str | None = None
    name_pattern: str | None = None
    owner: str | None = None

    @property
    def label(self) -> str:
        """How the plan names it: the GCP image family or the AMI name pattern."""
        return (self.image or self.name_pattern or "").rsplit("/", 1)[-1]


@lru_cache(maxsize=1)
def _images() -> dict[str, tuple[MachineImage, ...]]:
    doc = load_yaml(_FILE)
    require_schema(doc, _FILE, 1)
    sources: dict[str, Any] = doc["sources"]
    out: dict[str, tuple[MachineImage, ...]] = {}
    for cloud, lines in doc["images"].items():
        images = []
        for line in lines:
            refs = line["source"] if isinstance(line["source"], list) else [line["source"]]
            for ref in refs:
                if ref not in sources:
                    raise ValueError(f"{_FILE}: {cloud} image names unknown source {ref!r}")
            images.append(
                MachineImage(
                    cloud=str(cloud),
                    families=tuple(str(f) for f in line["families"]),
                    nvidia_driver=int(line["nvidia_driver"]),
                    source=tuple(str(r) for r in refs),
                    image=line.get("image"),
                    name_pattern=line.get("name_pattern"),
                    owner=line.get("owner"),
                )
            )
        out[str(cloud)] = tuple(images)
    return out


def machine_image(cloud: str, instance_type: str) -> MachineImage:
    """The image an instance type of ``cloud`` boots: the first line whose globs match its name.
    KeyError when the cloud has none (a data error)."""
    for image in _images()[cloud]:
        if any(fnmatch.fnmatchcase(instance_type, glob) for glob in image.families):
            return image
    raise KeyError(f"{_FILE}: no image line for {cloud} {instance_type}")


def image_source(ref: str) -> dict[str, Any]:
    """A source entry of the images file (title, url, retrieved)."""
    doc = load_yaml(_FILE)
    entry: dict[str, Any] = doc["sources"][ref]
    return entry
