"""Shared fixtures: a small hand-made catalog and spec builders."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from selector.catalog import Catalog, load_catalog
from selector.spec import WorkloadSpec, parse_spec

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
MINI_CATALOG = FIXTURES / "mini_catalog.json"

TODAY = "2026-12-04"
"""The date every test runs on (``GPUFIT_TODAY``): ages in the output are reproducible."""


@pytest.fixture(autouse=True)
def _frozen_today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFIT_TODAY", TODAY)


@pytest.fixture(autouse=True)
def _no_real_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the real Hugging Face Hub: ``model.hf`` alone goes to a loopback port
    where nothing listens (refused at once) unless a test serves its fake hub there, and the
    client the CLI installs is installed for every test, whatever ran before."""
    from hub.client import fetch_model
    from selector.spec import use_hub

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    use_hub(fetch_model)


SERVE_70B: dict[str, Any] = {
    "name": "llama70b-chat",
    "task": "serve",
    "model": {"preset": "llama-3.1-70b"},
    "precision": "bf16",
    "serving": {"context_tokens": 8192, "concurrency": 16, "tokens_per_s_per_stream": 20},
    "fault_tolerance": "none",
    "duration": "720h",
    "egress": {"gb": 500, "to": "internet"},
    "placement": {"clouds": ["aws", "gcp"]},
    "budget": {"max_hourly_usd": 60},
}

QLORA_65B: dict[str, Any] = {
    "name": "guanaco-65b",
    "task": "finetune-qlora",
    "model": {"preset": "llama-65b"},
    "precision": "nf4",
    "training": {
        "tokens": "5e7",
        "sequence_tokens": 512,
        "micro_batch": 1,
        "activation_checkpointing": True,
        "lora_rank": 64,
        "adapter_dtype": "bf16",  # the QLoRA paper's qlora.py casts its LoRA layers to bf16 under --bf16
    },
    "fault_tolerance": "checkpointed",
    "checkpoint_interval": "30m",
    "storage": {"dataset_gb": 5, "keep_days": 7},
    "data": {"cloud": "aws", "region": "us-east-1"},
    "teardown": {"ttl": "48h"},
}


def merged(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with top-level keys replaced (None deletes a key)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def spec_of(base: dict[str, Any], **changes: Any) -> WorkloadSpec:
    return parse_spec(merged(base, **changes))


@pytest.fixture(scope="session")
def mini_catalog() -> Catalog:
    return load_catalog(MINI_CATALOG)
