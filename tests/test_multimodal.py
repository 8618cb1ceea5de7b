"""Multimodal serving: the vision encoder's weights sit in memory but are not read per
decoded token, and each image adds its tokens to the KV cache (all layers for models that put
image tokens in the sequence; only the cross-attention layers for mllama)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from selector.hf_config import arch_from_config
from selector.sizing import image_kv_bytes, kv_bytes_per_token_layer, kv_cache_bytes, requirements
from selector.spec import SpecError, parse_spec

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
CLIP_336 = {
    "model_type": "clip_vision_model",
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "patch_size": 14,
    "image_size": 336,
}


def llava_config(tmp_path: Path) -> Path:
    text = json.loads((FIXTURES / "llama-3.1-8b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llava", "text_config": text, "vision_config": CLIP_336}))
    return path


def spec(config: Path, **serving: Any) -> dict[str, Any]:
    return {
        "name": "vision-chat",
        "task": "serve",
        "model": {"config": str(config)},
        "serving": {"context_tokens": 4096, "concurrency": 4, **serving},
    }


def test_images_add_their_tokens_to_the_kv_cache(tmp_path: Path) -> None:
    config = llava_config(tmp_path)
    plain = requirements(parse_spec(spec(config)))
    with_images = requirements(parse_spec(spec(config, images_per_request=2)))
    arch = with_images.arch
    per_token = kv_bytes_per_token_layer(arch, 2.0) * arch.layers
    assert with_images.kv_bytes - plain.kv_bytes == pytest.approx(per_token * 2 * 576 * 4)
    assert any("2 images × 576 tokens" in t.formula for t in with_images.terms)
    # a stated image size wins over the config's
    stated = requirements(parse_spec(spec(config, images_per_request=1, image_tokens=1000)))
    assert stated.kv_bytes - plain.kv_bytes == pytest.approx(per_token * 1000 * 4)


def test_the_vision_encoder_is_in_memory_but_not_read_per_token(tmp_path: Path) -> None:
    config = llava_config(tmp_path)
    req = requirements(parse_spec(spec(config)))
    text_only = requirements(
        parse_spec({**spec(config), "model": {"config": str(FIXTURES / "llama-3.1-8b.json")}})
    )
    vision_bytes = req.arch.vision_params * 2.0
    assert req.sharded_bytes - text_only.sharded_bytes == pytest.approx(vision_bytes)
    assert req.bytes_per_decode_step == pytest.approx(text_only.bytes_per_decode_step)
    assert req.flops_per_decode_step == pytest.approx(text_only.flops_per_decode_step)


def test_cross_attention_models_cache_image_tokens_in_those_layers_only(tmp_path: Path) -> None:
    llava = arch_from_config(json.loads(llava_config(tmp_path).read_text()), "m")
    arch = replace(llava, image_token_layers=8)
    assert image_kv_bytes(arch, 2.0, 4096, 6404, 1) == kv_bytes_per_token_layer(arch, 2.0) * 6404 * 8
    everywhere = replace(arch, image_token_layers=0)
    assert image_kv_bytes(everywhere, 2.0, 4096, 100, 1) == pytest.approx(
        kv_cache_bytes(everywhere, 2.0, 4196, 1) - kv_cache_bytes(everywhere, 2.0, 4096, 1)
    )


def test_images_need_a_vision_model_and_a_known_image_size(tmp_path: Path) -> None:
    text = FIXTURES / "llama-3.1-8b.json"
    with pytest.raises(SpecError, match=r"serving\.images_per_request: .* has no vision encoder"):
        parse_spec(spec(text, images_per_request=1))
    doc = json.loads(llava_config(tmp_path).read_text())
    doc["vision_config"] = {k: v for k, v in CLIP_336.items() if k != "image_size"}
    any_size = tmp_path / "any-size.json"
    any_size.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match=r"serving\.image_tokens: the model's config does not say"):
        parse_spec(spec(any_size, images_per_request=1))
    assert parse_spec(spec(any_size, images_per_request=1, image_tokens=1024)).serving is not None
