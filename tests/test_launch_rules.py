"""Launches the engines accept and that run as planned: the context within the served model's
maximum (or a documented YaRN stretch, rendered the way each release takes it), FP8 from a
published checkpoint or sized for the engine's load peak, the chat checkpoint of a base preset,
SGLang's memory fraction and FP8 KV format, images limited per request."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from deployment import server_launch
from machine.serving import docker_run
from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.sizing import GIB
from selector.sizing.engine_memory import sglang_reserved_mib, sglang_static_fraction
from selector.spec import SpecError, parse_spec

CATALOG = load_catalog()


def spec_doc(preset: str, engine: str = "vllm", context: int = 4096, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "launch-rules",
        "task": "serve",
        "model": {"preset": preset},
        "serving": {"context_tokens": context, "concurrency": 4, "engine": engine},
    }
    for key, value in changes.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and key in doc else value
    return doc


def planned(doc: dict[str, Any]) -> Plan:
    return plan(parse_spec(doc), CATALOG)


def args_of(result: Plan) -> list[str]:
    launch = server_launch(result)
    assert launch is not None
    return shlex.split(docker_run(launch, 0))


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# ---------------------------------------------------------------------------------- context


@pytest.mark.parametrize(
    ("preset", "context", "message"),
    [
        (
            "phi-4",
            32768,
            "serving.context_tokens: 32,768 is above the maximum of microsoft/phi-4, 16,384 tokens",
        ),
        (
            "llama-2-7b",
            8192,
            "serving.context_tokens: 8,192 is above the maximum of meta-llama/Llama-2-7b-chat-hf, "
            "4,096 tokens",
        ),
        (  # the served Instruct repo's config says 32,768 where the base one says 131,072
            "qwen2.5-7b",
            65536,
            "serving.context_tokens: 65,536 is above the maximum of Qwen/Qwen2.5-7B-Instruct, 32,768 tokens",
        ),
    ],
)
def test_a_context_above_the_models_maximum_is_a_spec_error(
    preset: str, context: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(spec_doc(preset, context=context))
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec_doc(preset, context=context)))
    assert main(["plan", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_yarn_stretches_the_context_where_the_model_documents_it() -> None:
    rope = {"rope_scaling": {"type": "yarn"}}
    vllm = args_of(planned(spec_doc("qwen2.5-7b", context=65536, serving=rope)))
    assert flag(vllm, "--max-model-len") == "65536"
    assert json.loads(flag(vllm, "--hf-overrides")) == {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
            "rope_theta": 1000000.0,  # vLLM sets the dict whole: the base is repeated
        }
    }
    # vLLM's own limit follows the override (32,768 × 4): its switch that turns the length check
    # off stays off (review finding 6)
    assert "--env" not in vllm and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" not in vllm
    sglang = args_of(planned(spec_doc("qwen2.5-7b", "sglang", context=65536, serving=rope)))
    assert json.loads(flag(sglang, "--json-model-override-args"))["rope_scaling"]["factor"] == 4.0
    assert flag(sglang, "--env") == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    assert flag(sglang, "--context-length") == "65536"
    # a Qwen3 context inside the config's 40,960 with the opt-in needs no override of the maximum
    inside = args_of(planned(spec_doc("qwen3-8b", context=32768, serving=rope)))
    assert "--hf-overrides" in inside and "--env" not in inside


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (spec_doc("qwen2.5-7b", context=140000, serving={"rope_scaling": {"type": "yarn"}}),
         "140,000 is above the 131,072 tokens YaRN reaches (32,768 × 4)"),
        (spec_doc("phi-4", context=32768, serving={"rope_scaling": {"type": "yarn"}}),
         "phi-4 documents no YaRN recipe"),
        # review finding 6: a factor above the documented recipe is refused, not served
        (spec_doc("qwen2.5-7b", context=131072, serving={"rope_scaling": {"type": "yarn", "factor": 64}}),
         "serving.rope_scaling.factor: 64 is above the factor qwen2.5-7b documents (4 from 32,768 tokens)"),
    ],
)  # fmt: skip
def test_yarn_has_its_limits(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec(doc)


def test_a_model_outside_the_presets_states_its_yarn_recipe(tmp_path: Path) -> None:
    config = Path(__file__).parent / "fixtures" / "hf" / "qwen3-8b.json"
    doc = {
        "name": "own-yarn",
        "task": "serve",
        "model": {"config": str(config), "hf": "Qwen/Qwen3-8B"},
        "serving": {"context_tokens": 100000, "rope_scaling": {"type": "yarn"}},
    }
    with pytest.raises(SpecError, match="give factor and original_max_position_embeddings"):
        parse_spec(doc)
    doc["serving"]["rope_scaling"] = {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}
    assert parse_spec(doc).served().context_limit == 131072


# ---------------------------------------------------------------------------------- FP8


def test_fp8_prefers_the_published_fp8_checkpoint_and_sizes_its_download() -> None:
    result = planned(spec_doc("llama-4-scout-17b-16e-instruct", precision="fp8"))
    launch = server_launch(result)
    assert launch is not None and launch.model == "nvidia/Llama-4-Scout-17B-16E-Instruct-FP8"
    assert launch.quantization is None and result.requirements.load_bytes == 0
    arch = result.requirements.arch
    embeddings = arch.vocab * arch.hidden * 2
    assert result.requirements.weights_file_bytes == pytest.approx(arch.params - embeddings + 2 * embeddings)


def _online(preset: str, repo: str, engine: str, types: list[str]) -> Plan:
    return planned(
        # GCP sells a3-highgpu-1g/2g/4g as spot only: a stateless server may run there
        spec_doc(
            preset,
            engine,
            precision="fp8",
            model={"hf": repo},
            placement={"instance_types": types},
            fault_tolerance="stateless",
        )
    )


def test_online_fp8_is_sized_for_the_engines_load_peak() -> None:
    # qwen3-235b quantised as it loads, on 4×H100: SGLang 0.5.23 holds the 16-bit checkpoint first
    # (470 GB: 117.5 GB a GPU), vLLM 0.34 one 16-bit layer at a time
    sglang = _online("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "sglang", ["a3-highgpu-4g"])
    assert sglang.choice is None
    assert sglang.requirements.load_bytes == pytest.approx(235.09e9 * 2, rel=1e-3)
    assert (
        "while loading: 437.9 GiB as the 16-bit checkpoint is quantised to FP8"
        in (sglang.rejection_examples["vram"])
    )
    vllm = _online("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "vllm", ["a3-highgpu-4g"])
    assert vllm.choice is not None and vllm.choice.shape.tensor_parallel == 4
    arch = vllm.requirements.arch
    assert vllm.requirements.load_bytes == pytest.approx(arch.params + arch.params / arch.layers * 2)
    launch = server_launch(vllm)
    assert launch is not None and launch.quantization == "fp8_per_tensor"
    # the download is the 16-bit checkpoint the engine quantises, not an FP8 one
    assert vllm.requirements.weights_file_bytes == pytest.approx(arch.params * 2)
    # mixtral on one H100: 93.4 GB of 16-bit weights while SGLang loads; vLLM fits it
    assert (
        _online("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", "sglang", ["a3-highgpu-1g"]).choice
        is None
    )
    assert _online("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", "vllm", ["a3-highgpu-1g"]).choice


def test_the_load_peak_is_explained(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = spec_doc("qwen3-32b", "sglang", precision="fp8", model={"hf": "Qwen/Qwen3-32B"})
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(doc))
    assert main(["plan", str(path), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "load peak (FP8 quantised at load)" in out and "sglang 0.5.23 loads Qwen/Qwen3-32B" in out


def test_fp8_of_weights_published_in_mxfp4_is_refused_with_the_way_out() -> None:
    with pytest.raises(SpecError, match="publishes its experts in MXFP4 and no engine requantises"):
        parse_spec(spec_doc("gpt-oss-20b", precision="fp8"))


# ---------------------------------------------------------------------------------- what is served


def test_a_base_preset_serves_its_chat_checkpoint_and_the_plan_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    result = planned(spec_doc("llama-3.1-8b"))
    launch = server_launch(result)
    assert launch is not None and launch.model == "meta-llama/Llama-3.1-8B-Instruct"
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec_doc("llama-3.1-8b")))
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "meta-llama/Llama-3.1-8B-Instruct (the chat checkpoint of llama-3.1-8b (its config "
        "meta-llama/Llama-3.1-8B is the base model's))" in out
    )


def test_images_get_the_engines_limit_and_their_tokens_in_the_context() -> None:
    doc = spec_doc("gemma-3-12b-it", serving={"images_per_request": 2})
    args = args_of(planned(doc))
    assert json.loads(flag(args, "--limit-mm-per-prompt")) == {"image": 2}
    assert flag(args, "--max-model-len") == str(4096 + 2 * 256)  # 256 tokens an image
    sglang = args_of(planned(spec_doc("gemma-3-12b-it", "sglang", serving={"images_per_request": 2})))
    assert json.loads(flag(sglang, "--limit-mm-data-per-request")) == {"image": 2}


# ---------------------------------------------------------------------------------- SGLang memory


def test_sglangs_static_fraction_leaves_its_own_reserve() -> None:
    # H100 80 GB, TP 1, 16 requests: 512 + 8192 × 1.5 + 1/8 × 1024 + 16 × 2 + 58 prefill graphs × 8
    assert sglang_reserved_mib(81920, 1, 16, mla=False) == 512 + 12288 + 128 + 32 + 58 * 8
    assert sglang_static_fraction(81920, 1, 16, mla=False, multimodal=False) == 0.836
    # the 10 GiB floor on big GPUs, 1.5 GiB of prefill graphs with MLA, × 0.95 for a VLM
    assert sglang_reserved_mib(183359, 8, 512, mla=True) == 512 + 16384 * 1.5 + 1024 + 1024 + 1536
    assert sglang_static_fraction(81920, 1, 16, mla=False, multimodal=True) == round(0.836 * 0.95, 3)
    result = planned(
        spec_doc(
            "qwen3-8b",
            "sglang",
            serving={"concurrency": 16},
            placement={"instance_types": ["a3-highgpu-1g"]},
            fault_tolerance="stateless",
        )
    )
    args = args_of(result)
    assert flag(args, "--mem-fraction-static") == "0.836"
    req = result.requirements
    static = req.sharded_bytes - req.activation_bytes + req.kv_bytes
    assert static <= 0.836 * 80 * GIB  # the weights and KV cache fit SGLang's static pool


def test_sglang_caches_fp8_kv_in_the_format_its_attention_takes() -> None:
    fp8 = {"precision": "fp8", "serving": {"kv_cache_precision": "fp8"}}
    hopper = args_of(
        planned(
            spec_doc(
                "qwen3-8b",
                "sglang",
                **fp8,
                placement={"instance_types": ["a3-highgpu-1g"]},
                fault_tolerance="stateless",
            )
        )
    )
    assert flag(hopper, "--kv-cache-dtype") == "fp8_e4m3"  # FlashAttention 3 takes only e4m3
    ada = args_of(
        planned(spec_doc("qwen3-8b", "sglang", **fp8, placement={"instance_types": ["g6e.xlarge"]}))
    )
    assert flag(ada, "--kv-cache-dtype") == "fp8_e5m2"
    vllm = args_of(planned(spec_doc("qwen3-8b", **fp8)))
    assert flag(vllm, "--kv-cache-dtype") == "fp8"


@pytest.mark.parametrize(
    ("engine", "args", "message"),
    [
        # review finding 3: parallelism and memory layout the plan sizes
        ("vllm", ["--pipeline-parallel-size", "4"], "--pipeline-parallel-size is set by gpufit"),
        ("vllm", ["--data-parallel-size", "2"], "--data-parallel-size is set by gpufit"),
        ("vllm", ["--enable-expert-parallel"], "--enable-expert-parallel is set by gpufit"),
        ("vllm", ["--kv-cache-memory-bytes", "10G"], "--kv-cache-memory-bytes is set by gpufit"),
        ("vllm", ["--cpu-offload-gb", "10"], "--cpu-offload-gb is set by gpufit"),
        ("sglang", ["--pp-size", "2"], "--pp-size is set by gpufit"),
        ("sglang", ["--dp-size", "2"], "--dp-size is set by gpufit"),
        ("sglang", ["--enable-dp-attention"], "--enable-dp-attention is set by gpufit"),
        ("sglang", ["--max-total-tokens", "100000"], "--max-total-tokens is set by gpufit"),
        ("sglang", ["--chunked-prefill-size", "4096"], "--chunked-prefill-size is set by gpufit"),
        # review finding 4: vLLM's dotted and underscore forms name the same flags
        ("vllm", ["--hf-overrides.max_position_embeddings", "1000000"],
         "--hf-overrides.max_position_embeddings is set by gpufit; set it with serving.rope_scaling"),
        ("vllm", ["--max_model_len", "1000"],
         "--max_model_len is set by gpufit; set it with serving.context_tokens"),
        # review finding 5: vLLM refuses a .key form on a flag that takes no JSON object
        # ("vllm serve: error: argument --port: invalid int value: '{\"x\": 1}'")
        ("vllm", ["--port.x", "1"], "--port.x: --port takes no JSON object, so it has no .key form"),
        ("vllm", ["--max-num-batched-tokens.x", "1"],
         "--max-num-batched-tokens.x: --max-num-batched-tokens takes no JSON object"),
    ],
)  # fmt: skip
def test_engine_args_that_change_what_the_plan_sized_are_refused(
    engine: str, args: list[str], message: str
) -> None:
    from selector.engine_flags import check_engine_args

    problems = check_engine_args(engine, args)
    assert any(p.startswith(message) for p in problems), problems


def test_a_dotted_form_of_a_json_flag_is_accepted_as_vllm_accepts_it() -> None:
    from selector.engine_flags import check_engine_args

    assert check_engine_args("vllm", ["--speculative-config.method", "ngram"]) == []
    assert check_engine_args("vllm", ["--compilation-config.mode=3"]) == []


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("preset", ["deepseek-r1", "deepseek-v3"])
def test_deepseek_v3_and_r1_are_sized_at_their_fp8_checkpoint_and_fit_8_h200(
    preset: str, engine: str
) -> None:
    """Review finding 1: their repos publish FP8 block weights (quantization_config fp8), about
    642 GiB, which 8×H200 holds with room for the cache; sized as 16 bit they fitted nothing."""
    doc = spec_doc(preset, engine, context=8192, placement={"instance_types": ["p5en.48xlarge"]})
    result = planned(doc)
    assert result.choice is not None, result.rejection_examples
    assert result.choice.offer.instance.name == "p5en.48xlarge"  # 8×H200
    assert 600 < result.requirements.weights_file_bytes / 2**30 < 700  # 16 bit: 1,250 GiB
    args = args_of(result)
    assert "--quantization" not in args  # the checkpoint carries its own quantization_config
