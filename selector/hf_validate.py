"""A Hugging Face ``config.json`` checked like user input before anything is computed from it:
each field gpufit reads has a type and a range (``selector/data/hf_config_fields.yaml``, with
the published values the ranges are drawn from), and the fields that must agree do (heads
divisible by KV heads, the width by the heads when no head_dim is given, experts used per
token at most the experts there are, dense layers at most the layers).

A config comes from the Hub, a stranger's repo: ``hidden_size: 1e400`` parses as infinity,
``num_attention_heads: 0`` divides by zero, ``num_hidden_layers: 1e30`` is no model that runs.
Each problem is one line naming the field (its path inside the config: ``text_config.
num_attention_heads``, ``rope_scaling.factor``) and what was expected, so the spec error
shows all of them at once and no traceback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from selector.datafile import load_yaml, require_schema

FIELDS_FILE = Path(__file__).parent / "data" / "hf_config_fields.yaml"
NESTED = ("text_config", "vision_config", "audio_config")
"""The sub-configs of a multimodal or encoder-decoder config, checked with the same table."""
ROPE = ("rope_scaling", "rope_parameters")
MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"})
"""Multi-head latent attention: head_dim comes from qk_nope + qk_rope, not hidden / heads."""
EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")


@lru_cache(maxsize=1)
def field_table() -> dict[str, Any]:
    doc = load_yaml(FIELDS_FILE)
    require_schema(doc, FIELDS_FILE, 1)
    return doc


def limit(name: str) -> int:
    """A size limit of ``hf_config_fields.yaml`` (``config_bytes``, ``safetensors_count``,
    ``parameters``)."""
    return int(field_table()["limits"][name])


def shown(value: Any) -> str:
    """``value`` as JSON, on one line and at most 40 characters (a hostile value may be huge)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a number beyond a float (read as infinity)" if not math.isnan(value) else "NaN"
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(float(value))


def _range(rule: Mapping[str, Any]) -> str:
    low, high = rule.get("min"), rule.get("max")
    if low is None or high is None:
        return ""
    top = f"{high:,}" if _is_int(high) else f"{high:g}"
    return f" above {low:g}, at most {top}" if rule.get("exclusive_min") else f" from {low:,} to {top}"


def _in_range(value: float, rule: Mapping[str, Any]) -> bool:
    low, high = rule.get("min"), rule.get("max")
    if low is not None and (value <= low if rule.get("exclusive_min") else value < low):
        return False
    return high is None or value <= high


def check_value(value: Any, rule: Mapping[str, Any]) -> str | None:
    """What ``value`` should have been under ``rule``, or None when it is fine."""
    kind = rule["type"]
    if value is None:
        return None  # transformers reads null as "not set"; a needed field is asked for later
    if kind in ("int", "int_or_ints") and _is_int(value):
        return None if _in_range(value, rule) else f"expected an integer{_range(rule)}"
    if kind == "int_or_ints" and isinstance(value, list):
        good = len(value) <= 4096 and all(_is_int(v) and _in_range(v, rule) for v in value)
        return None if good else f"expected integers{_range(rule)}"
    if kind == "int":
        return f"expected an integer{_range(rule)}"
    if kind == "int_or_ints":
        return f"expected an integer{_range(rule)} or a list of them"
    if kind == "number":
        ok = _is_number(value) and _in_range(float(value), rule)
        return None if ok else f"expected a number{_range(rule)}"
    if kind == "bool":
        return None if isinstance(value, bool) else "expected true or false"
    if kind == "str":
        ok = isinstance(value, str) and 0 < len(value) <= rule["max_length"] and value.isprintable()
        return None if ok else f"expected a name of at most {rule['max_length']} characters"
    if kind == "mapping":
        return None if isinstance(value, Mapping) else "expected an object"
    if kind in ("ints", "strs"):
        most = rule["max_items"]
        if not isinstance(value, list) or len(value) > most:
            return f"expected a list of at most {most:,} {'integers' if kind == 'ints' else 'names'}"
        if kind == "ints" and not all(_is_int(v) and _in_range(v, rule) for v in value):
            return f"expected a list of integers{_range(rule)}"
        if kind == "strs" and not all(isinstance(v, str) and len(v) <= 64 for v in value):
            return "expected a list of names"
        return None
    raise ValueError(f"{FIELDS_FILE.name}: unknown type {kind!r}")


def _fields(cfg: Mapping[str, Any], table: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    for key, rule in table.items():
        if key in cfg:
            expected = check_value(cfg[key], rule)
            if expected:
                problems.append(f"{where}{key}: {expected}, got {shown(cfg[key])}")
    return problems


def _agreement(cfg: Mapping[str, Any], where: str) -> list[str]:
    """The rules between fields of one (text) config, for the fields that passed their own."""
    problems = []

    def count(key: str) -> int | None:
        value = cfg.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    heads, kv_heads, hidden = count("num_attention_heads"), count("num_key_value_heads"), count("hidden_size")
    if heads and kv_heads and heads % kv_heads:
        problems.append(
            f"{where}num_key_value_heads: expected a divisor of num_attention_heads ({heads}), got {kv_heads}"
        )
    mla = cfg.get("model_type") in MLA_FAMILIES if isinstance(cfg.get("model_type"), str) else False
    if heads and hidden and cfg.get("head_dim") is None and not mla and hidden % heads:
        problems.append(
            f"{where}hidden_size: expected a multiple of num_attention_heads ({heads}) when head_dim "
            f"is not given, got {hidden}"
        )
    experts = next((count(k) for k in EXPERT_KEYS if count(k)), None)
    per_token = count("num_experts_per_tok")
    if experts and per_token and per_token > experts:
        problems.append(
            f"{where}num_experts_per_tok: expected at most the {experts} experts there are, got {per_token}"
        )
    layers = count("num_hidden_layers")
    for key in ("first_k_dense_replace", "num_kv_shared_layers"):
        value = cfg.get(key)
        if layers and isinstance(value, int) and value >= layers:
            problems.append(f"{where}{key}: expected fewer than num_hidden_layers ({layers}), got {value}")
    kinds = cfg.get("layer_types")
    if layers and isinstance(kinds, list) and len(kinds) != layers:
        # transformers' layer_type_validation (configuration_utils.py) raises ValueError:
        # "`num_hidden_layers` (N) must be equal to the number of layer types (M)"
        problems.append(
            f"{where}layer_types: expected one entry per layer (num_hidden_layers {layers}), got {len(kinds)}"
        )
    for key in ("moe_layers", "mlp_only_layers"):
        value = cfg.get(key)
        if layers and isinstance(value, list) and any(isinstance(i, int) and i >= layers for i in value):
            beyond = next(i for i in value if isinstance(i, int) and i >= layers)
            problems.append(
                f"{where}{key}: expected layer indices below num_hidden_layers ({layers}), got {beyond}"
            )
    return problems


def config_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every problem of a decoded config.json, one line each (``field: expected …, got …``);
    ``[]`` when gpufit may compute with it."""
    table = field_table()
    problems = _check_one(doc, "", table)
    for key in NESTED:
        inner = doc.get(key)
        if isinstance(inner, Mapping):
            problems += _check_one(inner, f"{key}.", table)
    return problems


def _check_one(cfg: Mapping[str, Any], where: str, table: Mapping[str, Any]) -> list[str]:
    problems = _fields(cfg, table["fields"], where)
    for key in ROPE:
        rope = cfg.get(key)
        if isinstance(rope, Mapping):
            problems += _fields(rope, table["rope"], f"{where}{key}.")
    return problems + _agreement(cfg, where)
