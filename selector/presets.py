"""Model architectures: the presets file and the resolved form the sizing model reads."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from selector.datafile import load_yaml, require_schema

ModelKind = Literal["transformer", "diffusion", "custom"]

_MODELS_FILE = Path(__file__).parent / "data" / "models.yaml"


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
        if entry.get("source") not in sources:
            raise ValueError(f"{_MODELS_FILE}: model {name!r} names unknown source {entry.get('source')!r}")
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


def arch_from_preset(name: str) -> ModelArch:
    entry = _preset_table()["models"][name]
    params = float(entry["params_b"]) * 1e9
    heads = int(entry.get("heads", 0))
    hidden = int(entry.get("hidden", 0))
    return ModelArch(
        name=name,
        kind=entry["kind"],
        params=params,
        params_active=float(entry.get("params_active_b", entry["params_b"])) * 1e9,
        layers=int(entry.get("layers", 0)),
        hidden=hidden,
        heads=heads,
        kv_heads=int(entry.get("kv_heads", heads)),
        head_dim=int(entry.get("head_dim", hidden // heads if heads else 0)),
        ffn=int(entry.get("ffn", 0)),
        vocab=int(entry.get("vocab", 0)),
        context=int(entry.get("context", 0)),
        experts=int(entry.get("experts", 1)),
        experts_active=int(entry.get("experts_active", 1)),
        source=f"preset {name} ({entry['source']})",
        hf=entry.get("hf"),
        kv_lora_rank=int(entry.get("kv_lora_rank", 0)),
        qk_rope_head_dim=int(entry.get("qk_rope_head_dim", 0)),
        sliding_window=int(entry.get("sliding_window", 0)),
        window_layers=int(entry.get("window_layers", 0)),
    )
