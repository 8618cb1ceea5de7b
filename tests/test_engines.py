"""Engine versions as data: the plan picks an engine build that serves the model on the chosen
GPU with the machine image's driver, rejects offers where none does (the ``engine`` filter,
with the reason), shows the build, and pins it in the lock."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cli.main import main
from deployment import server_launch
from gitops.lock import make_lock, reviewed_difference
from machine.serving import docker_run
from selector import engines
from selector.catalog import load_catalog, load_gpus
from selector.engines import (
    EngineBuild,
    at_least,
    choose_build,
    engine_data,
    pinned_builds,
    trust_remote_code,
    version_key,
)
from selector.images import boot_image, load_image_lines
from selector.select import Plan, plan
from selector.spec import parse_spec
from tests.conftest import ROOT

CATALOG = load_catalog()
GPUS = load_gpus()
NOW = datetime(2026, 12, 4, tzinfo=UTC)


def serve(preset: str, engine: str = "vllm", **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "engine-check",
        "task": "serve",
        "model": {"preset": preset},
        "serving": {"context_tokens": 4096, "concurrency": 4, "engine": engine},
    }
    for key, value in changes.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and key in doc else value
    return doc


def planned(doc: dict[str, Any]) -> Plan:
    return plan(parse_spec(doc), CATALOG)


# ---------------------------------------------------------------------------------- the data


def test_release_numbers_order_as_the_engines_publish_them() -> None:
    assert version_key("0.5.0rc0") < version_key("0.5.0") < version_key("0.5.0.post1") < version_key("0.5.1")
    assert at_least("0.4.9.post6", "0.4.9.post2") and not at_least("0.10.2", "0.11.0")
    with pytest.raises(ValueError, match="cannot read release number"):
        version_key("v0.34")


def test_every_pinned_build_is_recorded_with_its_cuda_driver_and_sources() -> None:
    doc = engine_data()
    for engine in ("vllm", "sglang"):
        builds = [b for _, bs in pinned_builds(engine) for b in bs]
        assert builds, engine
        for build in builds:
            assert build.cuda.startswith("13.") and build.min_driver == 580  # CUDA 13.x needs R580
            assert build.digest is None and "pin_engine_digests" in build.digest_note
            assert build.image == build.tag and build.pinned_by == "tag"
        release = next(r for r in doc["engines"][engine]["releases"] if r.get("pinned"))
        assert release["released"] and release["torch"] and "no_cuda12_build" in release


def test_the_table_covers_every_gpu_generation_gpufit_offers() -> None:
    generations = {g["compute_capability"]: g["name"] for g in engine_data()["gpu_generations"]}
    assert set(generations.values()) == {"Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"}
    for gpu in GPUS.values():
        assert f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}" in generations, gpu.name


def test_every_family_gpufit_sizes_has_its_first_engine_releases() -> None:
    from selector.hf_config import FAMILIES

    families = engine_data()["model_families"]
    text_only = {
        "gemma3_text",
        "llama4_text",
        "mllama_text_model",
        "qwen2_vl_text",
        "qwen2_5_vl_text",
        "whisper",
    }
    text_only |= {"gemma3n_text"}
    for family in sorted(FAMILIES - text_only):
        assert family in families, family
        assert families[family]["vllm"]["since"] and families[family]["sglang"]["since"]


# ---------------------------------------------------------------------------------- the choice


def test_b200_never_gets_an_engine_that_predates_blackwell(monkeypatch: pytest.MonkeyPatch) -> None:
    b200 = GPUS["B200"]
    chosen = choose_build("vllm", "llama", b200, 580, "image")
    assert isinstance(chosen, EngineBuild) and at_least(chosen.version, "0.9.0")
    # a pin that predates Blackwell (vLLM 0.8.5, even with a build claiming sm_100) is refused
    old = replace(chosen, version="0.8.5", tag="vllm/vllm-openai:v0.8.5", cuda="12.4", min_driver=525)
    monkeypatch.setattr(engines, "pinned_builds", lambda engine: (("0.8.5", (old,)),))
    why = choose_build("vllm", "llama", b200, 580, "image")
    assert why == "B200 (Blackwell, compute capability 10.0) needs vLLM ≥ 0.9.0; the pinned vLLM is 0.8.5"
    # while an A100 takes it
    assert choose_build("vllm", "llama", GPUS["A100-80GB"], 580, "image") == old


def test_a_b200_plan_launches_the_pinned_blackwell_build() -> None:
    result = planned(serve("qwen3-32b", placement={"instance_types": ["p6-b200.48xlarge"]}))
    assert result.choice is not None and result.choice.offer.instance.gpu.name == "B200"
    build = result.choice.engine
    assert build is not None and build.version == "0.34.0" and (10, 0) in build.compute_capabilities
    launch = server_launch(result)
    assert launch is not None and launch.image == "vllm/vllm-openai:v0.34.0"


def test_volta_offers_fail_the_engine_filter_with_the_reason() -> None:
    # AWS's P3 types boot no supported image (the image filter); GCP's V100s boot the DLVM
    result = planned(serve("llama-3.2-3b", precision="fp16", placement={"instance_types": ["*v100*"]}))
    assert result.choice is None and set(result.rejections) - {"placement"} == {"engine"}
    assert result.rejection_examples["engine"] == (
        "vLLM ran on V100-16GB (Volta, compute capability 7.0) up to 0.8.5; the pinned vLLM is 0.34.0"
    )
    assert all(m.rejection.filter == "engine" for m in result.misses) and result.misses


def test_sglang_does_not_run_on_turing_while_vllm_does() -> None:
    t4 = {"precision": "fp16", "placement": {"instance_types": ["g4dn.xlarge"]}}
    sglang = planned(serve("llama-3.2-3b", "sglang", **t4))
    assert sglang.choice is None
    assert sglang.rejection_examples["engine"] == "SGLang does not run on T4 (Turing, compute capability 7.5)"
    vllm = planned(serve("llama-3.2-3b", "vllm", **t4))
    assert vllm.choice is not None and vllm.choice.engine is not None


def test_an_image_driver_below_the_builds_cuda_rejects_the_offer(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    import selector.engine_filter as engine_filter

    old = replace(
        boot_image("gcp", "a3-highgpu-8g"),  # type: ignore[type-var]
        image="projects/p/global/images/family/common-cu128-ubuntu-2204-nvidia-570",
        nvidia_driver=570,
    )
    monkeypatch.setattr(
        engine_filter, "boot_image", lambda cloud, name: old if cloud == "gcp" else boot_image(cloud, name)
    )
    result = planned(serve("qwen3-8b", placement={"clouds": ["gcp"]}))
    assert result.choice is None and set(result.rejections) - {"placement", "precision", "vram"} == {"engine"}
    assert result.rejection_examples["engine"] == (
        "vLLM 0.34.0 (vllm/vllm-openai:v0.34.0, CUDA 13.0) needs NVIDIA driver ≥ 580; "
        "the image common-cu128-ubuntu-2204-nvidia-570 ships 570"
    )


def test_the_images_gpufit_boots_ship_the_driver_the_builds_need() -> None:
    from providers.gcp.common import DLVM_IMAGE

    gcp, aws = boot_image("gcp", "a3-highgpu-8g"), boot_image("aws", "p5.48xlarge")
    assert gcp is not None and aws is not None
    assert gcp.image == DLVM_IMAGE and gcp.image.endswith("common-cu129-ubuntu-2204-nvidia-580")
    assert not gcp.verified  # no Google page found that lists the family: the plan says so
    assert gcp.nvidia_driver >= 580 and aws.nvidia_driver >= 580
    assert all(b.min_driver <= 580 for e in ("vllm", "sglang") for _, bs in pinned_builds(e) for b in bs)


def test_each_aws_image_lines_driver_cites_release_notes_of_that_very_line() -> None:
    """Review finding 2: the driver must come from the notes of the line gpufit boots (same OS
    release and architecture as the name filter), not from another line's notes."""
    import yaml

    from selector.images import IMAGES_FILE

    doc = yaml.safe_load(IMAGES_FILE.read_text())
    for entry in doc["aws"]:
        ubuntu = entry["name_filter"].split("(Ubuntu ")[1].split(")")[0]  # 24.04
        arm = entry["architecture"] == "arm64"
        for ref in entry["driver_source"]:
            title, url = doc["sources"][ref]["title"], doc["sources"][ref]["url"]
            assert f"(Ubuntu {ubuntu})" in title and f"ul{ubuntu.replace('.', '')}" in url, (
                ref,
                entry["line"],
            )
            stated = int(title.split("nvidia_driver ")[1].split(".")[0])
            assert ("arm64" in url) == arm and stated >= entry["nvidia_driver"], (ref, entry["line"])
    assert {x.line for x in load_image_lines() if x.cloud == "aws"} == {
        "pytorch-ubuntu-24.04-x86_64",
        "pytorch-ubuntu-24.04-arm64",
    }


def test_a_family_the_engine_dropped_is_refused_and_the_other_engine_serves_it() -> None:
    vllm = planned(serve("llama-3.2-11b-vision"))
    assert vllm.choice is None and vllm.rejection_examples["engine"] == (
        "vLLM served mllama models up to 0.10.2; the pinned vLLM 0.34.0 does not "
        "(serving.engine: sglang serves them)"
    )
    sglang = planned(serve("llama-3.2-11b-vision", "sglang", serving={"images_per_request": 2}))
    launch = server_launch(sglang)
    assert launch is not None and launch.model == "meta-llama/Llama-3.2-11B-Vision-Instruct"
    args = shlex.split(docker_run(launch, 0))
    assert args[args.index("--limit-mm-data-per-request") + 1] == '{"image": 2}'
    assert args[args.index("--context-length") + 1] == "4096"  # mllama's images are not in the sequence


def test_trust_remote_code_follows_the_release_and_the_family() -> None:
    # DeepSeek-V2's config is native in transformers from 4.54: old engines need remote code
    assert trust_remote_code("vllm", "0.8.5", "deepseek_v2") and trust_remote_code(
        "sglang", "0.4.7", "deepseek_v2"
    )
    assert not trust_remote_code("vllm", "0.34.0", "deepseek_v2")
    assert not trust_remote_code("sglang", "0.5.23", "deepseek_v2")
    assert trust_remote_code("vllm", "0.34.0", "kimi_k2") and trust_remote_code("sglang", "0.5.23", "kimi_k2")
    for engine in ("vllm", "sglang"):
        launch = server_launch(planned(serve("kimi-k2", engine)))
        assert (
            launch is not None and launch.trust_remote_code and "--trust-remote-code" in docker_run(launch, 0)
        )
        launch = server_launch(planned(serve("deepseek-v2.5", engine)))
        assert launch is not None and "--trust-remote-code" not in docker_run(launch, 0)


def test_fallbacks_take_the_choices_engine_build() -> None:
    # us-east-1: a region with several same-shape types (the cheapest spot offer elsewhere has none)
    where = {"clouds": ["aws"], "regions": ["us-east-1"]}
    result = planned(serve("qwen3-8b", fault_tolerance="stateless", placement=where))
    assert result.choice is not None and result.fallbacks
    assert all(
        result.choice.engine == choose_build("vllm", "qwen3", f.offer.instance.gpu, 580, "x")
        for f in result.fallbacks
    )


def test_a_recorded_digest_pins_the_image_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = "sha256:" + "ab" * 32
    (version, (build, *_)), *_ = pinned_builds("vllm")
    pinned = replace(build, digest=digest)
    monkeypatch.setattr(engines, "pinned_builds", lambda engine: ((version, (pinned,)),))
    result = planned(serve("qwen3-8b"))
    launch = server_launch(result)
    assert launch is not None and launch.image == f"vllm/vllm-openai:v0.34.0@{digest}"
    assert f"vllm/vllm-openai:v0.34.0@{digest}" in shlex.split(docker_run(launch, 0))
    assert result.choice is not None and result.choice.engine is not None
    assert result.choice.engine.as_dict()["pinned_by"] == "digest"


# ---------------------------------------------------------------------------------- shown and locked


def test_plan_text_json_and_markdown_name_the_engine_build(capsys: pytest.CaptureFixture[str]) -> None:
    stack = str(ROOT / "stacks" / "Pulumi.llama8b-lb.yaml")
    assert main(["plan", stack]) == 0
    text = capsys.readouterr().out
    assert "vLLM 0.34.0 (vllm/vllm-openai:v0.34.0, CUDA 13.0), released 2026-11-16, pinned by tag" in text
    assert "needs driver ≥ 580" in text
    assert main(["plan", stack, "--json"]) == 0
    serve_doc = json.loads(capsys.readouterr().out)["serve"]
    assert (serve_doc["engine"], serve_doc["version"], serve_doc["tag"], serve_doc["cuda"]) == (
        "vllm",
        "0.34.0",
        "vllm/vllm-openai:v0.34.0",
        "13.0",
    )
    assert (
        serve_doc["repo"] == "meta-llama/Llama-3.1-8B-Instruct" and serve_doc["machine_image_driver"] == 580
    )
    assert main(["plan", stack, "--format", "markdown"]) == 0
    assert "| serve | vLLM 0.34.0 (vllm/vllm-openai:v0.34.0, CUDA 13.0)" in capsys.readouterr().out


def test_the_lock_pins_the_engine_build_and_a_moved_pin_is_stale() -> None:
    stack = ROOT / "stacks" / "Pulumi.llama8b-lb.yaml"
    from selector.spec import load_spec

    result = plan(load_spec(stack), CATALOG)
    lock = make_lock(result, stack, NOW)
    assert lock["schema_version"] == 4
    assert lock["engine"]["version"] == "0.34.0" and lock["engine"]["image"] == "vllm/vllm-openai:v0.34.0"
    assert reviewed_difference(lock, result) is None
    moved = {**lock, "engine": {**lock["engine"], "version": "0.33.0", "image": "vllm/vllm-openai:v0.33.0"}}
    assert "the plan now launches vllm 0.34.0 (vllm/vllm-openai:v0.34.0)" in (
        reviewed_difference(moved, result) or ""
    )
    older = {k: v for k, v in lock.items() if k != "engine"}
    assert "predates engine pinning" in (reviewed_difference(older, result) or "")
