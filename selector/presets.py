"""Model architectures: the presets file and the resolved form the sizing model reads."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from selector.datafile import load_yaml, require_schema

ModelKind = Literal["transformer", "diffusion", "audio", "custom"]

_DATA = Path(__file__).parent / "data"
_MODELS_FILE = _DATA / "models.yaml"
CONFIGS_DIR = _DATA / "configs"
"""Published config.json files the transformer presets are sized from (one per preset)."""


@dataclass(frozen=True, slots=True)
class WorkItem:
    """A preset's measured cost of one item of batch work (an image, a second of audio):
    ``seconds`` of wall time for one item on one ``gpu`` computing in ``precision``, as
    ``source`` measured it in ``setting``. Other GPUs scale by tensor throughput."""

    unit: str
    seconds: float
    gpu: str
    precision: str
    setting: str
    source: str
    memory_mb: float | None = None  # the whole pipeline's peak GPU memory in that run, where reported


@dataclass(frozen=True, slots=True)
class ModelArch:
    """What the arithmetic needs to know about a model.

    ``params_active`` differs from ``params`` for mixture-of-experts models (the parameters a
    token passes through). ``custom`` models carry their memory and bandwidth needs directly.
    """

    name: str
    kind: ModelKind
    params: float
    params_active: float
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    ffn: int = 0
    vocab: int = 0
    context: int = 0
    experts: int = 1
    experts_active: int = 1
    vram_gib: float | None = None
    min_bandwidth_gbps: float | None = None
    source: str = "spec"
    hf: str | None = None  # the Hugging Face repo a model server pulls
    kv_lora_rank: int = 0  # multi-head latent attention (DeepSeek-V2/V3): the compressed KV width
    qk_rope_head_dim: int = 0  # MLA: the decoupled RoPE key width cached beside the latent
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0: none)
    window_layers: int = 0  # how many layers use the sliding window (the rest attend globally)
    vision_params: float = 0.0  # multimodal: the vision encoder and projector (inside ``params``)
    image_tokens: int = 0  # multimodal: context tokens one image adds (0: not known from the config)
    image_token_layers: int = 0  # layers whose KV cache holds image tokens (0: all; mllama: cross-attention)
    encoder_layers: int = 0  # encoder-decoder (Whisper): encoder layers; ``layers`` are the decoder's
    encoder_positions: int = 0  # encoder-decoder: encoder states the decoder cross-attends to
    item: WorkItem | None = None  # diffusion and audio presets: the measured cost of one item
    checkpoint_bytes: float = 0.0  # bytes of the published weights files, when their dtypes are known

    @property
    def is_multimodal(self) -> bool:
        return self.vision_params > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_split_heads(self) -> int:
        """Ways tensor parallelism can split the KV cache: by KV heads, but not MLA's latent,
        which every head shares and every tensor-parallel rank holds whole."""
        return 1 if self.is_mla else self.kv_heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: kv_heads × head_dim."""
        return self.kv_heads * self.head_dim


@lru_cache(maxsize=1)
def _preset_table() -> dict[str, Any]:
    doc = load_yaml(_MODELS_FILE)
    require_schema(doc, _MODELS_FILE, 1)
    models: dict[str, Any] = doc["models"]
    sources: dict[str, Any] = doc["sources"]
    for name, entry in models.items():
        item = entry.get("item") or {}
        for key in (entry.get("source"), *([item.get("source")] if item else [])):
            if key not in sources:
                raise ValueError(f"{_MODELS_FILE}: model {name!r} names unknown source {key!r}")
    return doc


def preset_names() -> list[str]:
    return sorted(_preset_table()["models"])


def preset_entry(name: str) -> dict[str, Any]:
    """The raw preset with its source resolved; KeyError if unknown."""
    doc = _preset_table()
    entry = dict(doc["models"][name])
    entry["source_ref"] = doc["sources"][entry["source"]]
    return entry


def closest_presets(name: str, n: int = 3) -> list[str]:
    """Preset names that look like ``name``, for 'did you mean' hints."""
    names = preset_names()
    hits = difflib.get_close_matches(name.lower(), names, n=n, cutoff=0.4)
    if not hits:
        hits = [p for p in names if any(part in p for part in name.lower().split("-") if part)][:n]
    return hits


def _work_item(entry: dict[str, Any]) -> WorkItem | None:
    item = entry.get("item")
    if not item:
        return None
    return WorkItem(
        unit=str(item["unit"]),
        seconds=float(item["seconds"]),
        gpu=str(item["gpu"]),
        precision=str(item["precision"]),
        setting=str(item["setting"]),
        source=str(item["source"]),
        memory_mb=float(item["memory_mb"]) if item.get("memory_mb") is not None else None,
    )


@lru_cache(maxsize=64)
def arch_from_preset(name: str) -> ModelArch:
    """A preset's architecture: from its bundled config.json (``config:``) when it has one,
    else from the figures written in models.yaml."""
    entry = _preset_table()["models"][name]
    if entry.get("config"):
        import json

        from selector.hf_config import arch_from_config

        doc = json.loads((CONFIGS_DIR / entry["config"]).read_text(encoding="utf-8"))
        arch = arch_from_config(doc, name)
        return replace(
            arch, source=f"preset {name} ({entry['source']})", hf=entry.get("hf"), item=_work_item(entry)
        )
    params = float(entry["params_b"]) * 1e9
    heads = int(entry.get("heads", 0))
    hidden = int(entry.get("hidden", 0))
    return ModelArch(
        name=name,
        kind=entry["kind"],
        params=params,
        params_active=float(entry.get("params_active_b", entry["params_b"])) * 1e9,
        layers=int(entry.get("layers", entry.get("decoder_layers", 0))),
        hidden=hidden,
        heads=heads,
        kv_heads=int(entry.get("kv_heads", heads)),
        head_dim=int(entry.get("head_dim", hidden // heads if heads else 0)),
        ffn=int(entry.get("ffn", 0)),
        vocab=int(entry.get("vocab", 0)),
        context=int(entry.get("context", entry.get("max_target_positions", 0))),
        experts=int(entry.get("experts", 1)),
        experts_active=int(entry.get("experts_active", 1)),
        source=f"preset {name} ({entry['source']})",
        hf=entry.get("hf"),
        kv_lora_rank=int(entry.get("kv_lora_rank", 0)),
        qk_rope_head_dim=int(entry.get("qk_rope_head_dim", 0)),
        sliding_window=int(entry.get("sliding_window", 0)),
        window_layers=int(entry.get("window_layers", 0)),
        encoder_layers=int(entry.get("encoder_layers", 0)),
        encoder_positions=int(entry.get("max_source_positions", 0)),
        item=_work_item(entry),
    )
