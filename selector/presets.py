"""Model presets: the presets file (``data/models.yaml``) and the ``ModelArch`` of each preset."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema
from selector.model_arch import ModelArch, WorkItem

_DATA = Path(__file__).parent / "data"
_MODELS_FILE = _DATA / "models.yaml"
CONFIGS_DIR = _DATA / "configs"
"""Published config.json files the transformer presets are sized from (one per preset)."""


@lru_cache(maxsize=1)
def _preset_table() -> dict[str, Any]:
    doc = load_yaml(_MODELS_FILE)
    require_schema(doc, _MODELS_FILE, 1)
    models: dict[str, Any] = doc["models"]
    sources: dict[str, Any] = doc["sources"]
    for name, entry in models.items():
        item = entry.get("item") or {}
        serving = entry.get("serving") or {}
        keys = [entry.get("source"), *([item.get("source")] if item else [])]
        blocks = (serving, serving.get("fp8"), serving.get("yarn"))
        keys += [b["source"] for b in blocks if b and "source" in b]
        checkpoint = entry.get("checkpoint") or {}
        keys += [checkpoint[k] for k in ("source", "bytes_source") if k in checkpoint]
        for key in keys:
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
        steps=int(item["steps"]) if item.get("steps") is not None else None,
        item_memory_mb=float(item["item_memory_mb"]) if item.get("item_memory_mb") is not None else None,
        item_memory_source=str(item.get("item_memory_source", "")),
        compile_speedup=float(item["compile"]["eager_s"]) / float(item["compile"]["compiled_s"])
        if item.get("compile")
        else None,
        compile_source=str(item.get("compile_source", "")),
        compile_held_out=str(item.get("compile_held_out", "")),
        denoiser=str(item.get("denoiser", "")),
        denoiser_source=str(item.get("denoiser_source", "")),
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
        arch = _published_format(arch, entry)
        return replace(
            arch, source=f"preset {name} ({entry['source']})", hf=entry.get("hf"), item=_work_item(entry)
        )
    params = float(entry["params_b"]) * 1e9
    heads = int(entry.get("heads", 0))
    hidden = int(entry.get("hidden", 0))
    return _published_format(_arch_from_fields(name, entry, params, heads, hidden), entry)


def _published_format(arch: ModelArch, entry: dict[str, Any]) -> ModelArch:
    """The served repo's own weight format (``checkpoint.format``, e.g. DeepSeek's FP8 blocks)
    where the preset's figures or config lack it: every parameter but the input embedding and
    the output head in that format, so the plan sizes the files it really loads; and the
    checkpoint's published bytes (``checkpoint.bytes``, from the Hub's per-dtype safetensors
    counts, ``bytes_source``), which downloads and disks are sized from."""
    checkpoint = entry.get("checkpoint") or {}
    fmt = checkpoint.get("format")
    if checkpoint.get("bytes"):
        arch = replace(arch, checkpoint_bytes=float(checkpoint["bytes"]))
    if not fmt or arch.quantized_format:
        return arch
    embeddings = arch.vocab * arch.hidden * 2
    return replace(arch, quantized_format=str(fmt), quantized_params=arch.params - embeddings)


def _arch_from_fields(name: str, entry: dict[str, Any], params: float, heads: int, hidden: int) -> ModelArch:
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
        family=str(entry.get("family", "")),
    )


@dataclass(frozen=True, slots=True)
class PresetServing:
    """What ``serve`` launches for a preset: the chat/instruct repo when the preset's own repo
    is a base checkpoint (None: the preset's repo), that repo's maximum context where it differs
    from the preset's config, a published FP8 checkpoint of the same model (its files' bytes when
    read, else None), and a documented YaRN recipe (factor, original context) for long contexts."""

    repo: str | None
    max_context: int | None
    fp8_repo: str | None
    fp8_bytes: float | None
    yarn_factor: float | None
    yarn_original: int | None
    yarn_source: str | None
    source: str | None


def preset_serving(name: str) -> PresetServing:
    """A preset's serving data (all None when models.yaml gives none); KeyError if unknown."""
    block = _preset_table()["models"][name].get("serving") or {}
    fp8, yarn = block.get("fp8") or {}, block.get("yarn") or {}
    return PresetServing(
        repo=block.get("repo"),
        max_context=int(block["max_context"]) if block.get("max_context") else None,
        fp8_repo=fp8.get("repo"),
        fp8_bytes=float(fp8["bytes"]) if fp8.get("bytes") else None,
        yarn_factor=float(yarn["factor"]) if yarn else None,
        yarn_original=int(yarn["original"]) if yarn else None,
        yarn_source=yarn.get("source"),
        source=block.get("source"),
    )
