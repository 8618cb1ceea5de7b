"""The model servers gpufit launches, as data (``data/engines.yaml``): the pinned releases of
vLLM and SGLang and their container builds, which model families and GPU generations each
release serves, the NVIDIA driver each build needs, and how each release takes the flags gpufit
renders (online FP8, RoPE scaling, the FP8 KV cache, the image limit).

``choose_build`` is the plan's engine filter: the newest pinned release that serves the model's
family, on a build that runs on the GPU's compute capability with the driver of the machine
image the offer boots; otherwise the reason, naming the closest miss.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.catalog import GpuSpec
from selector.datafile import load_yaml, require_schema

_FILE = Path(__file__).parent / "data" / "engines.yaml"
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:rc(\d+))?(?:\.post(\d+))?")


def version_key(version: str) -> tuple[int, int, int, int, int]:
    """A sortable key for the engines' release numbers: ``0.5.0rc0`` < ``0.5.0`` <
    ``0.5.0.post1`` (PEP 440 order for the forms these projects use). ValueError otherwise."""
    match = _VERSION.fullmatch(version)
    if not match:
        raise ValueError(f"{_FILE}: cannot read release number {version!r}")
    major, minor, patch, rc, post = match.groups()
    stage = (0, int(rc)) if rc is not None else (1, int(post or 0))
    return (int(major), int(minor), int(patch), *stage)


def at_least(version: str, floor: str) -> bool:
    return version_key(version) >= version_key(floor)


@dataclass(frozen=True, slots=True)
class EngineBuild:
    """One container build of an engine release: its tag, the CUDA it was built with, the
    driver that CUDA needs, the compute capabilities it carries code for, and its digest when
    one has been recorded (``image`` is then ``tag@digest``)."""

    engine: str
    version: str
    released: str
    tag: str
    cuda: str
    min_driver: int
    compute_capabilities: tuple[tuple[int, int], ...]
    digest: str | None
    digest_note: str

    @property
    def image(self) -> str:
        """What ``docker pull`` and ``docker run`` name: the digest when recorded, else the tag."""
        return f"{self.tag}@{self.digest}" if self.digest else self.tag

    @property
    def pinned_by(self) -> str:
        return "digest" if self.digest else "tag"

    @property
    def label(self) -> str:
        """``vLLM 0.34.0 (vllm/vllm-openai:v0.34.0, CUDA 13.0)``."""
        return f"{ENGINE_NAMES[self.engine]} {self.version} ({self.tag}, CUDA {self.cuda})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "version": self.version,
            "released": self.released,
            "tag": self.tag,
            "image": self.image,
            "pinned_by": self.pinned_by,
            "digest": self.digest,
            "cuda": self.cuda,
            "min_driver": self.min_driver,
        }


def _cc(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def _cc_text(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


@lru_cache(maxsize=1)
def engine_data() -> dict[str, Any]:
    """The engines file, its source references checked."""
    doc = load_yaml(_FILE)
    require_schema(doc, _FILE, 1)
    sources = doc["sources"]

    def refs(value: Any) -> list[str]:
        return value if isinstance(value, list) else [value]

    def check(where: str, value: Any) -> None:
        for ref in refs(value):
            if ref not in sources:
                raise ValueError(f"{_FILE}: {where} names unknown source {ref!r}")

    for family, entry in doc["model_families"].items():
        check(f"model family {family}", entry["source"])
    for generation in doc["gpu_generations"]:
        check(f"GPU generation {generation['name']}", generation["source"])
    for name, engine in doc["engines"].items():
        for release in engine["releases"]:
            version_key(release["version"])
            check(f"{name} {release['version']}", release["source"])
            for build in release["builds"]:
                check(f"{name} {build['tag']}", build["source"])
        for rule in (*engine["online_fp8"], *engine["rope_scaling"]):
            check(f"{name} rule since {rule['since']}", rule["source"])
    return doc


def _engine(engine: str) -> dict[str, Any]:
    entry: dict[str, Any] = engine_data()["engines"][engine]
    return entry


def _build(engine: str, release: dict[str, Any], build: dict[str, Any]) -> EngineBuild:
    major = str(build["cuda"]).split(".")[0]
    floor = engine_data()["cuda_driver_floor"][major]["min_driver"]
    return EngineBuild(
        engine=engine,
        version=str(release["version"]),
        released=str(release["released"]),
        tag=str(build["tag"]),
        cuda=str(build["cuda"]),
        min_driver=int(floor),
        compute_capabilities=tuple(_cc(c) for c in build["compute_capabilities"]),
        digest=build.get("digest"),
        digest_note=str(build.get("digest_note", "")),
    )


@lru_cache(maxsize=4)
def pinned_builds(engine: str) -> tuple[tuple[str, tuple[EngineBuild, ...]], ...]:
    """(release, its builds) for every pinned release of ``engine``, newest first."""
    releases = sorted(
        (r for r in _engine(engine)["releases"] if r.get("pinned")),
        key=lambda r: version_key(r["version"]),
        reverse=True,
    )
    return tuple((str(r["version"]), tuple(_build(engine, r, b) for b in r["builds"])) for r in releases)


def pinned_versions(engine: str) -> list[str]:
    return [version for version, _ in pinned_builds(engine)]


def _serves(engine: str, family: str, version: str) -> str | None:
    """Why ``version`` does not serve ``family`` (None when it does, or when the family is not
    in the table: gpufit then has no claim to check)."""
    entry = engine_data()["model_families"].get(family)
    if entry is None:
        return None
    span = entry.get(engine)
    name = ENGINE_NAMES[engine]
    if span is None:
        return f"{name} does not serve {family} models"
    if not at_least(version, span["since"]):
        return f"{family} models need {name} ≥ {span['since']}; the pinned {name} is {version}"
    if span.get("until") and not at_least(span["until"], version):
        other = next((e for e in ENGINE_NAMES if e != engine and entry.get(e)), None)
        hint = f" (serving.engine: {other} serves them)" if other else ""
        return (
            f"{name} served {family} models up to {span['until']}; the pinned {name} {version} does not{hint}"
        )
    return None


def _generation(gpu: GpuSpec) -> dict[str, Any] | None:
    for generation in engine_data()["gpu_generations"]:
        if _cc(generation["compute_capability"]) == gpu.compute_capability:
            found: dict[str, Any] = generation
            return found
    return None


def _runs_on(engine: str, version: str, gpu: GpuSpec) -> str | None:
    """Why the release does not run on the GPU's generation (None when it does)."""
    generation = _generation(gpu)
    name = ENGINE_NAMES[engine]
    cc = _cc_text(gpu.compute_capability)
    if generation is None:
        return None
    span = generation.get(engine)
    label = f"{gpu.name} ({generation['name']}, compute capability {cc})"
    if span is None:
        return f"{name} does not run on {label}"
    if not at_least(version, span["since"]):
        return f"{label} needs {name} ≥ {span['since']}; the pinned {name} is {version}"
    if span.get("until") and not at_least(span["until"], version):
        return f"{name} ran on {label} up to {span['until']}; the pinned {name} is {version}"
    return None


def choose_build(engine: str, family: str, gpu: GpuSpec, driver: int, image: str) -> EngineBuild | str:
    """The build gpufit launches: the newest pinned release that serves ``family`` and runs on
    ``gpu``, in a build that carries code for its compute capability and whose CUDA the
    image's ``driver`` runs. Otherwise the reason, naming the closest miss."""
    reasons: list[str] = []
    for version, builds in pinned_builds(engine):
        why = _serves(engine, family, version) or _runs_on(engine, version, gpu)
        if why:
            reasons.append(why)
            continue
        for build in builds:
            if gpu.compute_capability not in build.compute_capabilities:
                span = (
                    f"{_cc_text(min(build.compute_capabilities))}–{_cc_text(max(build.compute_capabilities))}"
                )
                reasons.append(
                    f"{build.label} carries code for compute capability {span}; {gpu.name} is "
                    f"{_cc_text(gpu.compute_capability)}"
                )
                continue
            if driver < build.min_driver:
                reasons.append(
                    f"{build.label} needs NVIDIA driver ≥ {build.min_driver}; the image {image} "
                    f"ships {driver}"
                )
                continue
            return build
    return reasons[0] if reasons else f"no pinned {ENGINE_NAMES[engine]} release"


def _release_rule(engine: str, key: str, version: str) -> dict[str, Any]:
    """The first rule of ``key`` (newest first) whose ``since`` the release reaches."""
    for rule in _engine(engine)[key]:
        if at_least(version, rule["since"]):
            found: dict[str, Any] = rule
            return found
    raise ValueError(f"{_FILE}: {engine} has no {key} rule for {version}")


@dataclass(frozen=True, slots=True)
class OnlineFp8:
    """How a release quantises a 16-bit checkpoint to FP8 as it loads: the ``--quantization``
    value, and the load peak (``layerwise``: FP8 weights plus one 16-bit layer; ``full_16bit``:
    the whole 16-bit checkpoint first)."""

    quantization: str
    load_peak: str


def online_fp8(engine: str, version: str) -> OnlineFp8:
    rule = _release_rule(engine, "online_fp8", version)
    return OnlineFp8(str(rule["quantization"]), str(rule["load_peak"]))


def online_fp8_load_peaks(engine: str) -> list[str]:
    """The load peaks of every pinned release (the sizing takes the worst)."""
    return [online_fp8(engine, version).load_peak for version in pinned_versions(engine)]


@dataclass(frozen=True, slots=True)
class RopeStyle:
    """How a release takes a RoPE-scaling override: ``hf_overrides`` (vLLM ≥ 0.11.1,
    ``--hf-overrides '{"rope_parameters": …}'``), ``rope_scaling_flag`` (older vLLM,
    ``--rope-scaling``) or ``json_model_override_args`` (SGLang); and the environment variable
    that lets the context exceed the config's maximum."""

    style: str
    key: str
    long_context_env: str | None


def rope_style(engine: str, version: str) -> RopeStyle:
    rule = _release_rule(engine, "rope_scaling", version)
    return RopeStyle(str(rule["style"]), str(rule["key"]), rule.get("long_context_env"))


def trust_remote_code(engine: str, version: str, family: str) -> bool:
    """Whether the release needs ``--trust-remote-code`` for the family (engines.yaml
    ``model_families.*.trust_remote_code``)."""
    entry = engine_data()["model_families"].get(family) or {}
    rule = (entry.get("trust_remote_code") or {}).get(engine)
    if not rule:
        return False
    if rule.get("always"):
        return True
    return not at_least(version, rule["below"])


def fp8_kv_cache_dtype(engine: str, gpu: GpuSpec) -> str:
    """The FP8 KV cache format to ask for: SGLang's FlashAttention 3 (its Hopper default) takes
    only ``fp8_e4m3`` and falls back to Triton for ``fp8_e5m2``."""
    rule = _engine(engine)["fp8_kv_cache_dtype"]
    by_cc = rule.get("by_compute_capability") or {}
    return str(by_cc.get(_cc_text(gpu.compute_capability), rule["default"]))


def health_path(engine: str) -> str:
    return str(_engine(engine)["health_path"])


def images_flag(engine: str) -> str:
    return str(_engine(engine)["images_flag"]["flag"])


def owned_flags(engine: str) -> dict[str, str]:
    """Flags gpufit sets itself, by the parser's ``dest``, and the spec field that owns each."""
    owned: dict[str, str] = _engine(engine)["owned"]
    return owned


def api_key_delivery(engine: str) -> dict[str, Any]:
    """How the API key reaches the server: an environment variable (vLLM) or a root-only config
    file (SGLang, which has no variable for it)."""
    delivery: dict[str, Any] = _engine(engine)["api_key"]
    return delivery
