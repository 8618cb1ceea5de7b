"""Sizing any model from its Hugging Face config.json: the common families mapped to the
sizing inputs, parameter counts computed from the shapes and checked against the authors'
published counts, and clear errors for what gpufit cannot size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from selector.catalog import load_catalog
from selector.hf_config import ConfigError, arch_from_config
from selector.select import plan
from selector.sizing import kv_bytes_per_token
from selector.spec import SpecError, parse_spec

FIXTURES = Path(__file__).parent / "fixtures" / "hf"

# (file, published total, published active, billions): the model cards and papers
PUBLISHED = [
    ("llama-3.1-8b.json", 8.03, 8.03),  # Meta: 8.03B
    ("mistral-7b-v0.1.json", 7.24, 7.24),  # Mistral AI: 7.24B
    ("qwen2.5-7b.json", 7.61, 7.61),  # Qwen2.5 model card: 7.61B
    ("mixtral-8x7b-v0.1.json", 46.7, 12.9),  # Mistral AI, "Mixtral of experts": 46.7B, 12.9B per token
    ("deepseek-v3.json", 671, 37),  # DeepSeek-V3 report (arXiv 2412.19437): 671B, 37B activated
    ("gemma-2-9b.json", 9.24, 9.24),  # Gemma 2 report: 9.24B
    ("qwen3-8b.json", 8.2, 8.2),  # Qwen3-8B model card: 8.2B
    ("qwen3-30b-a3b.json", 30.5, 3.3),  # Qwen3-30B-A3B model card: 30.5B in total and 3.3B activated
    ("qwen2-57b-a14b.json", 57, 14),  # Qwen2 report (arXiv 2407.10671) Table 1: 57B in total, 14B active
    ("deepseek-v2.5.json", 236, 21),  # DeepSeek-V2 paper (arXiv 2405.04434): 236B, 21B activated
    ("phi-3-mini-4k-instruct.json", 3.8, 3.8),  # Phi-3-Mini-4K-Instruct model card: 3.8B
]


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize(("name", "total", "active"), PUBLISHED)
def test_parameter_counts_match_the_published_ones(name: str, total: float, active: float) -> None:
    arch = arch_from_config(load(name), name)
    assert arch.params / 1e9 == pytest.approx(total, rel=0.015)
    assert arch.params_active / 1e9 == pytest.approx(active, rel=0.03)


def test_families_map_their_attention_and_experts() -> None:
    llama = arch_from_config(load("llama-3.1-8b.json"), "l")
    assert (llama.layers, llama.kv_heads, llama.head_dim, llama.context) == (32, 8, 128, 131072)
    assert kv_bytes_per_token(llama, 2.0) == 128 * 1024  # 128 KiB, as the preset
    mixtral = arch_from_config(load("mixtral-8x7b-v0.1.json"), "m")
    assert (mixtral.experts, mixtral.experts_active) == (8, 2)
    v3 = arch_from_config(load("deepseek-v3.json"), "d")
    assert v3.is_mla and (v3.kv_lora_rank, v3.qk_rope_head_dim, v3.experts, v3.experts_active) == (
        512,
        64,
        256,
        8,
    )
    mistral = arch_from_config(load("mistral-7b-v0.1.json"), "m")
    assert (mistral.sliding_window, mistral.window_layers) == (4096, 32)
    gemma = arch_from_config(load("gemma-2-9b.json"), "g")
    assert (gemma.sliding_window, gemma.window_layers, gemma.head_dim) == (4096, 21, 256)  # alternating
    qwen = arch_from_config(load("qwen2.5-7b.json"), "q")
    assert qwen.sliding_window == 0  # use_sliding_window is false


def test_a_multimodal_config_adds_its_vision_encoder_to_the_text_model() -> None:
    text = load("llama-3.1-8b.json")
    from tests.test_multimodal import CLIP_336

    multimodal = {"model_type": "llava", "text_config": text, "vision_config": CLIP_336}
    arch = arch_from_config(multimodal, "v")
    text_only = arch_from_config(text, "t")
    # CLIP ViT-L/14-336: 24 × (4·1024² + 2·1024·4096) + 3·14²·1024 ≈ 302.6M, projector 1024·4096 + 4096²
    expected = 24 * (4 * 1024**2 + 2 * 1024 * 4096) + 3 * 14 * 14 * 1024 + 1024 * 4096 + 4096**2
    assert arch.vision_params == expected
    assert arch.params == text_only.params + expected
    assert arch.image_tokens == (336 // 14) ** 2 == 576
    with pytest.raises(ConfigError, match="vision_config lacks 'num_hidden_layers'"):
        arch_from_config({**multimodal, "vision_config": {"model_type": "clip_vision_model"}}, "v")


def test_an_unknown_family_names_the_fields_and_the_way_out() -> None:
    with pytest.raises(ConfigError) as caught:
        arch_from_config({"model_type": "rwkv", "hidden_size": 2048}, "r")
    message = str(caught.value)
    assert "'rwkv'" in message and "hidden_size" in message and "model.kind: custom" in message
    with pytest.raises(ConfigError, match="lacks 'num_hidden_layers'"):
        arch_from_config({"model_type": "llama", "hidden_size": 1, "num_attention_heads": 1}, "x")


@pytest.mark.parametrize("name", [n for n, _, _ in PUBLISHED])
def test_a_local_config_plans(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "from-config",
                "task": "serve",
                "model": {"config": str(FIXTURES / name)},
                "precision": "fp8",
                "serving": {"context_tokens": 4096, "concurrency": 8},
            }
        )
    )
    assert main(["plan", str(spec), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ok" and report["requirements"]["vram_gib_per_replica"] > 0


def test_config_spec_errors_are_one_line_each(tmp_path: Path) -> None:
    base = {"name": "bad-config", "task": "serve", "serving": {"context_tokens": 1024}}
    with pytest.raises(SpecError, match="no such file"):
        parse_spec({**base, "model": {"config": str(tmp_path / "missing.json")}})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not a readable JSON file"):
        parse_spec({**base, "model": {"config": str(bad)}})
    with pytest.raises(SpecError, match=r"give either model\.config or preset"):
        parse_spec(
            {**base, "model": {"config": str(FIXTURES / "llama-3.1-8b.json"), "preset": "llama-3.1-8b"}}
        )


def test_the_config_plans_like_the_preset() -> None:
    serving = {"context_tokens": 8192, "concurrency": 16, "tokens_per_s_per_stream": 20}
    base = {"name": "same-model", "task": "serve", "serving": serving}
    by_config = plan(
        parse_spec({**base, "model": {"config": str(FIXTURES / "llama-3.1-8b.json")}}), load_catalog()
    )
    by_preset = plan(parse_spec({**base, "model": {"preset": "llama-3.1-8b"}}), load_catalog())
    assert by_config.choice is not None and by_preset.choice is not None
    assert by_config.choice.offer.key == by_preset.choice.offer.key
    assert by_config.requirements.kv_bytes == by_preset.requirements.kv_bytes
