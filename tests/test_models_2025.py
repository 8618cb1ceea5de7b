"""The 2025-2026 model families, sized from their published config.json: parameter counts
against the authors' published total and active counts (within 2 %), the KV cache or state of
each attention kind in ``--explain``, and the presets served by the engine releases that serve
them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from deployment import server_launch
from machine.serving import batch_engine_start, engine_argv
from selector.catalog import load_catalog
from selector.datafile import load_yaml
from selector.hf_config import arch_from_config
from selector.presets import CONFIGS_DIR, arch_from_preset
from selector.select import plan
from selector.sizing import kv_bytes_per_token, kv_cache_bytes
from selector.sizing.attention import linear_state_bytes_per_sequence
from selector.spec import parse_spec
from tests.conftest import ROOT

MODELS = load_yaml(ROOT / "selector" / "data" / "models.yaml")
NEW = [
    "gpt-oss-20b",
    "gpt-oss-120b",
    "qwen3-next-80b-a3b",
    "deepseek-v3.1",
    "deepseek-v3.2",
    "kimi-k2",
    "glm-4.5-air",
    "llama-4-maverick-17b-128e-instruct",
    "mistral-small-3.2-24b-instruct-2506",
]
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def active_as_published(preset: str) -> float:
    """Active parameters counted as the authors count them: OpenAI, DeepSeek and Moonshot leave
    the input embedding out (a lookup, not a matrix product), Z.ai both embedding and output
    layers (models.yaml ``active_count_excludes``)."""
    arch = arch_from_preset(preset)
    excludes = MODELS["models"][preset].get("active_count_excludes")
    embedding = arch.vocab * arch.hidden
    return arch.params_active - {"input_embedding": embedding, "embeddings": 2 * embedding}.get(excludes, 0)


@pytest.mark.parametrize("preset", NEW)
def test_parameter_counts_match_the_published_ones_within_2_percent(preset: str) -> None:
    entry = MODELS["models"][preset]
    arch = arch_from_preset(preset)
    assert arch.params / 1e9 == pytest.approx(entry["published_params_b"], rel=0.02)
    if entry.get("published_active_b") is None:
        return
    if entry.get("active_rounded"):
        # Qwen states "3B activated" (80B-A3B): one significant figure; 3.25B without embeddings
        assert active_as_published(preset) / 1e9 == pytest.approx(entry["published_active_b"], rel=0.1)
        return
    assert active_as_published(preset) / 1e9 == pytest.approx(entry["published_active_b"], rel=0.02)


def test_gemma_3n_counts_its_effective_parameters_as_google_does() -> None:
    # google/gemma3n-slicing-configs: E4B (35 layers, FFN 16,384) 3.98B effective, E2B (30
    # layers, FFN 8,192) 1.91B: the decoder without its two embedding tables
    doc = json.loads((FIXTURES / "gemma-3n-defaults.json").read_text())
    for layers, ffn, effective in ((35, 16384, 3.98), (30, 8192, 1.91)):
        doc["text_config"].update(num_hidden_layers=layers, intermediate_size=ffn)
        arch = arch_from_config(doc, "gemma-3n")
        decoder = arch.params - arch.per_layer_embedding_params - arch.vocab * arch.hidden
        assert decoder / 1e9 == pytest.approx(effective, rel=0.02)
    # with its MobileNet-V5-300M vision and Conformer audio towers, E4B's raw count: "8B" (Google,
    # ai.google.dev/gemma/docs/gemma-3n#parameters); the towers run at prefill only
    doc["text_config"].update(num_hidden_layers=35, intermediate_size=16384)
    doc["vision_config"] = {"model_type": "gemma3n_vision", "architecture": "mobilenetv5_300m_enc"}
    doc["audio_config"] = {"model_type": "gemma3n_audio", "hidden_size": 1536, "conf_num_hidden_layers": 12}
    arch = arch_from_config(doc, "gemma-3n-e4b")
    assert arch.params / 1e9 == pytest.approx(8, rel=0.02) and arch.image_tokens == 256
    assert arch.vision_params == 300e6 + 2048 * 2048 + 12 * 24 * 1536**2 + 1536 * 2048


def test_each_attention_kind_caches_what_it_keeps() -> None:
    context = 8192
    oss = arch_from_preset("gpt-oss-20b")
    # 24 layers × 2 × 8 kv heads × 64 × 2 B; half the layers keep a 128-token window
    assert kv_bytes_per_token(oss, 2.0) == 24 * 2 * 8 * 64 * 2
    assert kv_cache_bytes(oss, 2.0, context, 1) == 2 * 8 * 64 * 2 * (12 * context + 12 * 128)
    nxt = arch_from_preset("qwen3-next-80b-a3b")
    # only the 12 gated-attention layers of 48 keep a KV cache; the 36 Gated DeltaNet layers a
    # fixed state: value heads × key × value widths in float32 + the convolution's last 3 inputs
    assert (nxt.kv_layers, nxt.linear_layers) == (12, 36)
    assert kv_bytes_per_token(nxt, 2.0) == 12 * 2 * 2 * 256 * 2
    state = 36 * (32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2)
    assert linear_state_bytes_per_sequence(nxt) == state
    v32 = arch_from_preset("deepseek-v3.2")
    # MLA's latent and rope key per layer, plus the indexer's FP8 key (128 + 4 B of scale)
    assert kv_bytes_per_token(v32, 2.0) == 61 * (512 + 64) * 2 + 61 * 132
    kimi = arch_from_preset("kimi-k2")
    assert kv_bytes_per_token(kimi, 2.0) == 61 * (512 + 64) * 2 and kimi.experts == 384
    glm = arch_from_preset("glm-4.5-air")
    assert kv_bytes_per_token(glm, 2.0) == 46 * 2 * 8 * 128 * 2
    gemma = arch_from_config(json.loads((FIXTURES / "gemma-3n-defaults.json").read_text()), "g")
    # the last 15 of 35 layers reuse earlier caches; 16 of the other 20 keep a 512-token window
    assert (gemma.kv_layers, gemma.window_layers) == (20, 16)
    assert kv_cache_bytes(gemma, 2.0, context, 1) == 2 * 2 * 256 * 2 * (4 * context + 16 * 512)


def _spec(preset: str, **serving: Any) -> dict[str, Any]:
    return {
        "name": "families",
        "task": "serve",
        "model": {"preset": preset},
        "serving": {"context_tokens": 8192, "concurrency": 4, **serving},
    }


@pytest.mark.parametrize(
    ("preset", "needles"),
    [
        ("gpt-oss-120b", ["in mxfp4 × 0.5312 B", "attention sinks are one scalar", "min(context, 128)"]),
        ("qwen3-next-80b-a3b", ["12 full-attention layers (of 48; the rest", "36 Gated DeltaNet layers"]),
        ("deepseek-v3.2", ["multi-head latent attention", "61 layers × 132 B indexer key"]),
        ("kimi-k2", ["params in fp8 × 1 B", "(multi-head latent attention)"]),
    ],
)  # fmt: skip
def test_explain_shows_each_attention_kinds_arithmetic(
    preset: str, needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(_spec(preset)))
    assert main(["plan", str(path), "--explain"]) == 0
    out = capsys.readouterr().out
    for needle in needles:
        assert needle in out, needle


def test_gpt_oss_120b_fits_one_80_gb_gpu_as_its_card_says() -> None:
    result = plan(
        parse_spec(_spec("gpt-oss-120b", concurrency=1, context_tokens=4096)),
        load_catalog(),
    )
    arch = result.requirements.arch
    assert arch.quantized_format == "mxfp4"
    weights = arch.quantized_params * 4.25 / 8 + (arch.params - arch.quantized_params) * 2
    assert 60e9 < weights < 66e9  # MXFP4 experts: about 63 GB, not 234 GB of BF16
    one_h100 = plan(result.spec, load_catalog()).choice
    assert one_h100 is not None and one_h100.shape.gpus_per_replica == 1


@pytest.mark.parametrize(
    ("preset", "repo", "version"),
    [
        ("gpt-oss-20b", "openai/gpt-oss-20b", "0.34.0"),
        ("qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct", "0.34.0"),
        ("deepseek-v3.1", "deepseek-ai/DeepSeek-V3.1", "0.34.0"),
        ("kimi-k2", "moonshotai/Kimi-K2-Instruct", "0.34.0"),
        ("glm-4.5-air", "zai-org/GLM-4.5-Air", "0.34.0"),
    ],
)
def test_the_new_presets_serve_their_instruct_repos_on_the_pinned_engines(
    preset: str, repo: str, version: str
) -> None:
    for engine, pinned in (("vllm", version), ("sglang", "0.5.23")):
        result = plan(parse_spec(_spec(preset, engine=engine)), load_catalog())
        assert result.choice is not None and result.choice.engine is not None, (preset, engine)
        assert result.choice.engine.version == pinned
        launch = server_launch(result)
        assert launch is not None and launch.model == repo and launch.quantization is None


def test_every_preset_config_is_committed_with_its_source() -> None:
    sources = MODELS["sources"]
    for name, entry in MODELS["models"].items():
        if not entry.get("config"):
            continue
        assert (CONFIGS_DIR / entry["config"]).is_file(), name
        assert sources[entry["source"]]["url"].startswith("https://huggingface.co/"), name
    marked = [
        k for k in ("HF-QWEN3-NEXT", "HF-DSV31", "HF-GLM45-AIR", "HF-LLAMA4-MAVERICK", "HF-MISTRAL-SMALL-32")
    ]
    for key in marked:  # the copies that are not the Hub file itself say so
        assert "marked" in sources[key]["title"], key


def test_presets_list_what_serve_pulls_and_the_engines_that_serve_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["presets"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "Qwen/Qwen3-Next-80B-A3B-Instruct" in rows["qwen3-next-80b-a3b"]
    assert "vLLM 0.10.2+, SGLang 0.5.2+" in rows["qwen3-next-80b-a3b"]
    assert "meta-llama/Llama-3.1-8B-Instruct" in rows["llama-3.1-8b"]  # the chat repo, not the base
    assert "vLLM 0.8.0-0.10.2, SGLang 0.4.4+" in rows["llama-3.2-11b-vision"]


def test_sglang_holds_a_hybrid_models_state_slots_and_gpufit_sets_and_plans_them() -> None:
    """SGLang 0.5.23 with its radix cache keeps up to 5 recurrent-state slots per running request of
    a hybrid model (3, + 2 tracking slots under the overlap schedule) and, left alone, gives that
    pool 0.9/1.9 of the memory the weights leave: gpufit launches it with --max-mamba-cache-size
    = 5 × concurrency and plans those slots (+ the pool's padding slot); vLLM gets no such flag
    but holds up to 3 pages a stream with its prefix caching (align mode), 16-bit
    states padded to attention blocks, counted at the float32 size; a step reads one state per
    stream under either; a model without linear attention gets none under either."""
    for engine in ("sglang", "vllm"):
        result = plan(parse_spec(_spec("qwen3-next-80b-a3b", engine=engine, concurrency=16)), load_catalog())
        assert result.choice is not None
        per_sequence = linear_state_bytes_per_sequence(result.requirements.arch)
        launch = server_launch(result)
        assert launch is not None
        argv = engine_argv(launch, 0)
        if engine == "sglang":
            assert result.requirements.state_bytes == pytest.approx(per_sequence * (5 * 16 + 1))
            assert launch.state_slots == 80 and launch.state_slots_per_request == 5
            assert argv[argv.index("--max-mamba-cache-size") + 1] == "80"
        else:
            assert result.requirements.state_bytes == pytest.approx(per_sequence * 3 * 16)
            assert launch.state_slots == 0 and "--max-mamba-cache-size" not in argv
        assert result.requirements.state_bytes_per_decode_step == pytest.approx(per_sequence * 16)
    dense = plan(parse_spec(_spec("llama-3.1-8b", engine="sglang")), load_catalog())
    dense_launch = server_launch(dense)
    assert dense_launch is not None and "--max-mamba-cache-size" not in engine_argv(dense_launch, 0)


def test_a_batch_fleets_sglang_engine_sizes_the_state_slots_from_its_own_machines_sequences(
    tmp_path: Path,
) -> None:
    """A batch fleet mixes machine types, each with its own GPUFIT_MAX_NUM_SEQS: SGLang's
    --max-mamba-cache-size follows it (5 slots a sequence), not the chosen type's count."""
    spec = {
        "name": "hybrid-batch",
        "task": "batch",
        "model": {"preset": "qwen3-next-80b-a3b"},
        "serving": {"context_tokens": 4096, "prompt_tokens": 1024, "tokens": 1e8, "engine": "sglang"},
        "job": {"command": "python generate.py"},
    }
    result = plan(parse_spec(spec), load_catalog())
    launch = server_launch(result, batch=True)
    assert launch is not None and launch.state_slots_per_request == 5
    script = batch_engine_start(launch)
    assert '--max-mamba-cache-size "$((5 * GPUFIT_MAX_NUM_SEQS))"' in script
    assert f"--max-mamba-cache-size {launch.state_slots}" not in script
    if shutil.which("shellcheck"):
        path = tmp_path / "start.sh"
        path.write_text(script)
        run = subprocess.run(["shellcheck", "-S", "warning", "-s", "bash", str(path)], capture_output=True)
        assert run.returncode == 0, run.stdout.decode()
