"""The machine images gpufit boots and the instance families each supports, from
``data/images.yaml``: a plan never chooses a machine no supported image runs on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from selector.datafile import load_yaml, require_schema

IMAGES_FILE = Path(__file__).parent / "data" / "images.yaml"


@dataclass(frozen=True, slots=True)
class ImageLine:
    """A line of images (the newest of which a stack boots) and the families it supports."""

    cloud: str
    line: str
    name_filter: str
    architecture: str
    families: frozenset[str]
    source_url: str
    as_of: str


def family(instance_type: str) -> str:
    """An AWS instance type's family: ``p5e.48xlarge`` → ``p5e``."""
    return instance_type.split(".", 1)[0]


@lru_cache(maxsize=2)
def load_image_lines(path: Path = IMAGES_FILE) -> tuple[ImageLine, ...]:
    doc = load_yaml(path)
    require_schema(doc, path, 1)
    sources = doc["sources"]
    return tuple(
        ImageLine(
            cloud="aws",
            line=str(entry["line"]),
            name_filter=str(entry["name_filter"]),
            architecture=str(entry["architecture"]),
            families=frozenset(str(f) for f in entry["families"]),
            source_url=str(sources[entry["source"]]["url"]),
            as_of=str(doc["as_of"]),
        )
        for entry in doc["aws"]
    )


def image_line(cloud: str, instance_type: str) -> ImageLine | None:
    """The image line that supports ``instance_type`` on AWS (None: no supported image does);
    None on GCP too, where one Deep Learning VM family serves every GPU and is not restricted."""
    if cloud != "aws":
        return None
    wanted = family(instance_type)
    return next((line for line in load_image_lines() if wanted in line.families), None)


def unsupported_reason(cloud: str, instance_type: str) -> str | None:
    """Why no image gpufit boots supports ``instance_type`` (None when one does, or on GCP)."""
    if cloud != "aws" or image_line(cloud, instance_type) is not None:
        return None
    lines = load_image_lines()
    supported = ", ".join(sorted(set().union(*(x.families for x in lines))))
    return (
        f"{instance_type}: no AWS Deep Learning AMI that AWS still patches supports the "
        f"{family(instance_type)} family (supported: {supported}; {lines[0].as_of}, {lines[0].source_url})"
    )
