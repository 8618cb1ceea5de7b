"""Which checkpoint a ``serve`` plan launches, and the limits that come with it.

A preset names the config it is sized from; what the server pulls can differ: the chat/instruct
repo when that config is a base checkpoint (a base model has no chat template, so the
OpenAI chat endpoint would answer 400), a published FP8 checkpoint of the same model when the
spec asks for FP8 (served as published, no quantisation at load), or the repo ``model.hf`` names.
The served repo's own maximum context bounds ``serving.context_tokens``; beyond it only a
documented YaRN recipe may stretch it (``serving.rope_scaling``), as far as original × factor
(Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models",
arXiv 2309.00071).
"""

from __future__ import annotations

from dataclasses import dataclass

from selector.hf_families import QUANTIZED_BYTES
from selector.model_arch import ModelArch
from selector.presets import preset_serving

FP8_REPO_MARKERS = ("fp8",)
"""A repo whose name says FP8 carries its own quantization_config (Red Hat AI, NVIDIA, Qwen,
Meta name theirs ``*-FP8*``): the engine reads it, and a second ``--quantization`` is refused."""


@dataclass(frozen=True, slots=True)
class Yarn:
    """A YaRN opt-in: RoPE stretched ``factor`` times from ``original`` positions."""

    factor: float
    original: int
    source: str

    @property
    def max_context(self) -> int:
        return int(self.original * self.factor)


@dataclass(frozen=True, slots=True)
class ServedModel:
    """What the model server pulls and how: ``fp8`` is ``checkpoint`` (a published FP8 repo),
    ``native`` (the repo's weights are published quantised), ``online`` (16-bit weights the
    engine quantises as it loads) or "" (served in 16 bit); ``download_bytes`` the weights'
    files, ``download_note`` how that figure was found."""

    repo: str | None
    why: str
    max_context: int
    fp8: str
    download_bytes: float
    download_note: str
    yarn: Yarn | None = None

    @property
    def context_limit(self) -> int:
        return self.yarn.max_context if self.yarn is not None else self.max_context


def sixteen_bit_bytes(arch: ModelArch) -> float:
    return arch.params * 2.0


def fp8_checkpoint_bytes(arch: ModelArch) -> float:
    """An FP8 checkpoint of a 16-bit model, estimated from the shapes: linear weights at one
    byte (with per-channel or block scales, under 0.1 %), embeddings and output head at two."""
    embeddings = arch.vocab * arch.hidden * 2.0
    return (arch.params - embeddings) + embeddings * 2.0


def published_quantized_bytes(arch: ModelArch) -> float:
    """The published weights of a natively quantised model: ``quantized_params`` in their
    format (MXFP4 4.25 bits, FP8 block one byte), the rest in 16 bit."""
    per = QUANTIZED_BYTES[arch.quantized_format]
    return arch.quantized_params * per + (arch.params - arch.quantized_params) * 2.0


def served_model(
    preset: str | None, hf: str | None, arch: ModelArch, precision: str, sized_by_hub: bool
) -> ServedModel:
    """The checkpoint a serve plan launches (see the module docstring)."""
    fp8 = precision == "fp8"
    serving = preset_serving(preset) if preset is not None else None
    quantized = bool(arch.quantized_format)
    native_bytes = published_quantized_bytes(arch) if quantized else 0.0
    files = arch.checkpoint_bytes
    hub_note = "the Hub's safetensors files" if files else ""
    if hf is not None and not sized_by_hub:
        named_fp8 = any(m in hf.lower() for m in FP8_REPO_MARKERS)
        mode = (
            ("checkpoint" if named_fp8 else "native" if quantized else "online")
            if fp8
            else ("native" if quantized else "")
        )
        estimate = (
            fp8_checkpoint_bytes(arch) if mode == "checkpoint" else native_bytes or sixteen_bit_bytes(arch)
        )
        return ServedModel(
            hf, "model.hf", arch.context, mode, files or estimate, hub_note or "estimated from the shapes"
        )
    if serving is not None and fp8 and serving.fp8_repo and not quantized:
        size = serving.fp8_bytes
        return ServedModel(
            serving.fp8_repo,
            f"the published FP8 checkpoint of {preset}",
            serving.max_context or arch.context,
            "checkpoint",
            size or fp8_checkpoint_bytes(arch),
            "its files" if size else "estimated from the shapes (its files were not read)",
        )
    mode = "native" if quantized else "online" if fp8 else ""
    if quantized:
        size, note = files or native_bytes, hub_note or f"{arch.quantized_format} weights, from the shapes"
    else:
        size, note = files or sixteen_bit_bytes(arch), hub_note or "16-bit weights, from the shapes"
    if serving is not None and serving.repo:
        return ServedModel(
            serving.repo,
            f"the chat checkpoint of {preset} (its config {arch.hf} is the base model's)",
            serving.max_context or arch.context,
            mode,
            size,
            note,
        )
    why = "model.hf" if sized_by_hub else f"the repo of {preset}" if preset else "the model's repo"
    return ServedModel(arch.hf, why, arch.context, mode, size, note)


def yarn_for(
    preset: str | None, factor: float | None, original: int | None
) -> tuple[Yarn | None, str | None]:
    """The YaRN opt-in ``serving.rope_scaling`` asks for, from the preset's documented recipe
    (factor and original may be restated) or, for a model that is not a preset, from both
    values given; else the problem."""
    serving = preset_serving(preset) if preset is not None else None
    if serving is not None:
        if serving.yarn_factor is None or serving.yarn_original is None:
            return None, (
                f"serving.rope_scaling: {preset} documents no YaRN recipe; its context cannot be "
                "stretched safely (lower serving.context_tokens)"
            )
        if factor is not None and factor > serving.yarn_factor:
            # vLLM's and SGLang's YaRN is static: every request would be served at that scaling
            return None, (
                f"serving.rope_scaling.factor: {factor:g} is above the factor {preset} documents "
                f"({serving.yarn_factor:g} from {serving.yarn_original:,} tokens); leave it out or lower it"
            )
        return Yarn(
            factor or serving.yarn_factor, original or serving.yarn_original, str(serving.yarn_source)
        ), None
    if factor is None or original is None:
        return None, (
            "serving.rope_scaling: give factor and original_max_position_embeddings as the model's "
            "card documents them (gpufit knows the recipe only for presets)"
        )
    return Yarn(factor, original, "serving.rope_scaling"), None


def context_problem(
    context: int, served: ServedModel, model_name: str, field: str = "serving.context_tokens"
) -> str | None:
    """Why ``context`` tokens cannot be served (None when they can): above the served repo's
    maximum without a YaRN opt-in, or above what the opt-in reaches. ``field`` names the spec
    field the context comes from (the serve context, or an embed job's longest document)."""
    limit = served.context_limit
    if not limit or context <= limit:
        return None
    repo = served.repo or model_name
    if served.yarn is not None:
        return (
            f"{field}: {context:,} is above the {limit:,} tokens YaRN reaches "
            f"({served.yarn.original:,} × {served.yarn.factor:g}) for {repo}"
        )
    return (
        f"{field}: {context:,} is above the maximum of {repo}, {limit:,} tokens "
        "(its config.json); lower it, or opt into YaRN with serving.rope_scaling where the model "
        "documents it"
    )


def published_weights_problem(arch: ModelArch, precision: str) -> str | None:
    """Why ``precision`` cannot serve the weights as the checkpoint publishes them, which an engine
    serves as published: MXFP4 experts at fp8 (no engine requantises them), or integer weights
    (AWQ, GPTQ, compressed-tensors W4A16/W8A16: ``ModelArch.integer_precision``) at any precision
    but theirs: at fp8 vLLM refuses a --quantization other than the checkpoint's method
    (``ModelConfig._verify_quantization``), at any other precision the plan would size weights it
    never loads. None when they agree."""
    if precision == "fp8" and arch.quantized_format == "mxfp4":
        return (
            f"precision fp8: {arch.name} publishes its experts in MXFP4 and no engine requantises "
            "them; set precision bf16 to serve the weights as published"
        )
    published = arch.integer_precision
    if not published or precision == published:
        return None
    why = (
        "vLLM refuses --quantization fp8 for another method's checkpoint"
        if precision == "fp8"
        else f"the plan would size {precision} weights it never loads"
    )
    return (
        f"precision {precision}: {arch.name} publishes {published} {arch.integer_method} weights, "
        f"served as published ({why}); set precision {published}"
    )
