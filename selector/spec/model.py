"""The ``model`` section: a preset, an explicit architecture, a local config.json or a
Hugging Face repo, each resolved to the ``ModelArch`` the sizing arithmetic reads."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from selector.datafile import loads_json
from selector.model_arch import ModelArch
from selector.presets import arch_from_preset, closest_presets, preset_names
from selector.spec.fields import Strict

GIT_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
"""A git ref or commit of safe characters (see ``ModelSpec._git_ref``)."""


@lru_cache(maxsize=16)
def config_arch(path: str) -> ModelArch:
    """The architecture of a local config.json (read once per process); ValueError saying why
    it cannot be used."""
    from selector.hf_config import ConfigError, arch_from_config

    file = Path(path)
    try:
        doc = loads_json(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"model.config: no such file {path}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"model.config: {path} is not a readable JSON file ({err})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"model.config: {path} is not a config.json object")
    try:
        return arch_from_config(doc, file.parent.name or file.stem)
    except ConfigError as err:
        raise ValueError(each_line(f"model.config {path}: ", str(err))) from None


def each_line(prefix: str, text: str) -> str:
    """``prefix`` before every line of ``text`` (one problem a line; the spec loader splits them)."""
    return "\n".join(prefix + line for line in text.splitlines())


SAFETENSORS_DTYPE_BYTES: dict[str, float] = {
    "F64": 8,
    "I64": 8,
    "F32": 4,
    "I32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
"""Bytes per element of the safetensors dtypes (huggingface/safetensors, format docs)."""


SAFETENSORS_RATIO = 20
"""How far the Hub's safetensors count may stray from the count the config's shapes make
before the two are taken for different models, when the weights hold packed integer dtypes:
20x either way. Packed quantised weights count fewer elements (8 int4 values in one I32 for
GPTQ/AWQ, 16 2-bit ones, two FP4 values in one U8 for MXFP4/NVFP4) but embeddings, norms and
scales stay unpacked, so no real checkpoint is 20x off; a count of 1 would plan a model on
nothing (issue 22 item 9)."""

FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0"})
"""safetensors dtypes of one element per stored value (huggingface/safetensors, format docs):
a checkpoint of only these is not packed, so its count is the model's count."""

UNPACKED_DTYPES = FLOAT_DTYPES | {"I8", "I64", "BOOL"}
"""safetensors dtypes of one value an element: the floats, int8 weights (I8) and the I64 and BOOL
buffers (position ids, masks) some checkpoints save. Any other dtype may pack several weights into
an element (GPTQ's and AWQ's I32 hold eight int4 values, MXFP4's and bitsandbytes' U8 two, AQLM's
I16 codes a group each), so a repo holding one counts stored elements, not parameters, and its
count comes from the config's shapes: leaning that way costs a count's exactness, the other way a
plan several times too small."""

FLOAT_SAFETENSORS_RATIO = 1.5
"""The same bound when every dtype is a float one: 1.5x either way. The widest real gap between
the Hub's count and the shapes gpufit's reader adds up is where the reader sizes the text model
only: Gemma 3n, whose vision and audio encoders it does not count (E4B: "raw parameter count
8B", model card https://huggingface.co/google/gemma-3n-E4B-it, against 6.87e9 from the shapes,
1.17x; E2B: raw 5B against an estimated 3.9e9 or more of text shapes, its 1.91e9 effective
parameters plus 30 x 262,144 x 256 per-layer embeddings, so at most about 1.28x). DeepSeek-V3
stores 685B for a 671B main model, its 14B multi-token-prediction module and FP8 scales
(https://huggingface.co/deepseek-ai/DeepSeek-V3, README), 1.02x; the dense and MoE models of
tests/test_hf_config.py match their published counts within 1.5%. 1.5 leaves a sixth over the
widest gap; a config that hides more than about a third of the layers (Llama-3.3-70B with 5 of
80 is 16x off) is refused (review of i22h, should-fix 2)."""


@dataclass(frozen=True)
class HubModel:
    """What the Hub says of a model repo: its config.json and the safetensors weights' element
    counts per dtype (empty when the repo has no safetensors), at ``commit``."""

    repo: str
    revision: str | None
    commit: str | None
    config: dict[str, Any]
    parameters: dict[str, int] = field(default_factory=dict)


HubFetcher = Callable[[str, "str | None"], HubModel]
_hub: list[HubFetcher] = []


def use_hub(fetcher: HubFetcher | None) -> None:
    """Install the function that fetches a repo's config for ``model.hf`` (the CLI and the
    Pulumi program install ``hub.client.fetch_model``; the selector does no network I/O
    of its own). ``None`` removes it."""
    _hub.clear()
    if fetcher is not None:
        _hub.append(fetcher)
    hub_arch.cache_clear()


def pin_commit(repo: str, revision: str | None, commit: str) -> HubFetcher | None:
    """Size ``repo`` at ``revision`` from ``commit`` (the one a lock pinned) however the
    revision moved since: the installed fetcher is asked for that commit. Returns the fetcher
    it wraps, for ``use_hub`` to put back (None when none is installed)."""
    if not _hub:
        return None
    inner = _hub[0]

    def pinned(asked: str, rev: str | None) -> HubModel:
        if (asked, rev) != (repo, revision):
            return inner(asked, rev)
        return replace(inner(asked, commit), revision=rev)

    use_hub(pinned)
    return inner


@lru_cache(maxsize=16)
def hub_arch(repo: str, revision: str | None) -> ModelArch:
    """The architecture of a Hub repo, from its config.json, with the exact parameter count of
    its safetensors weights where the Hub has them and none is packed (computed shares, such as
    the vision encoder's or the active experts', are scaled to it). Packed weights (a dtype outside
    ``UNPACKED_DTYPES``: GPTQ/AWQ's I32, MXFP4's U8) count stored elements, not parameters (eight
    int4 values in one I32): the config's shapes keep the count, and the files' bytes are recorded
    as stored. ValueError says why not."""
    from selector.hf_config import ConfigError, arch_from_config

    if not _hub:
        raise ValueError(
            "model.hf alone needs the Hugging Face Hub client (the gpufit CLI and Pulumi program "
            "install it); give model.config (a local config.json) instead"
        )
    try:
        model = _hub[0](repo, revision)
    except ValueError as err:
        raise ValueError(f"model.hf: {err}") from None
    at = f"{repo}@{model.commit[:12]}" if model.commit else repo
    try:
        arch = arch_from_config(model.config, repo.rsplit("/", 1)[-1])
    except ConfigError as err:
        raise ValueError(each_line(f"model.hf {at}: ", str(err))) from None
    arch = replace(arch, hf=repo, hf_commit=model.commit or "", source=f"Hugging Face {at} config.json")
    total = sum(model.parameters.values())
    if total <= 0:
        return arch
    scale = total / arch.params
    floats = set(model.parameters) <= FLOAT_DTYPES
    bound = FLOAT_SAFETENSORS_RATIO if floats else SAFETENSORS_RATIO
    if not 1 / bound <= scale <= bound:
        kind = "float weights: " if floats else ""
        raise ValueError(
            f"model.hf {at}: the Hub's safetensors metadata counts {total:,} parameters, the config's "
            f"shapes {arch.params:,.0f}: expected the same model ({kind}within {bound:g}x either way)"
        )
    sizes = [SAFETENSORS_DTYPE_BYTES.get(dtype) for dtype in model.parameters]
    file_bytes = (
        sum(n * b for n, b in zip(model.parameters.values(), sizes, strict=True) if b is not None)
        if all(b is not None for b in sizes)
        else 0.0
    )
    dtypes = ", ".join(f"{dtype} {n:,}" for dtype, n in sorted(model.parameters.items()))
    if not set(model.parameters) <= UNPACKED_DTYPES:
        # Packed weights (GPTQ/AWQ int4 in I32, MXFP4/NVFP4 in U8): the Hub counts stored
        # elements, not parameters, so the config's shapes keep the count and the files' bytes
        # (packed weights, scales and zeros as stored) size the download.
        return replace(
            arch,
            checkpoint_bytes=float(file_bytes),
            source=(
                f"Hugging Face {at} config.json (parameters from its shapes: the safetensors count "
                f"{total:,} is of packed elements, {dtypes})"
            ),
        )
    return replace(
        arch,
        params=float(total),
        params_active=arch.params_active * scale,
        vision_params=arch.vision_params * scale,
        checkpoint_bytes=float(file_bytes),
        source=f"Hugging Face {at} config.json; safetensors {total:,} parameters ({dtypes})",
    )


class ModelSpec(Strict):
    """A preset, an explicit architecture, or ``kind: custom`` with needs stated directly."""

    preset: str | None = Field(None, description="a name from `gpufit presets`")
    kind: Literal["transformer", "diffusion", "audio", "custom"] | None = None
    params_b: float | None = Field(None, gt=0, description="parameters, in billions")
    params_active_b: float | None = Field(None, gt=0, description="MoE: parameters used per token")
    layers: int | None = Field(None, gt=0)
    hidden: int | None = Field(None, gt=0)
    heads: int | None = Field(None, gt=0)
    kv_heads: int | None = Field(None, gt=0)
    head_dim: int | None = Field(None, gt=0, description="default hidden / heads")
    ffn: int | None = Field(None, gt=0, description="MLP width; default 4 x hidden")
    vocab: int | None = Field(None, gt=0)
    experts: int | None = Field(None, gt=0)
    experts_active: int | None = Field(None, gt=0)
    vram_gib: float | None = Field(None, gt=0, description="custom: GPU memory one replica needs")
    min_bandwidth_gbps: float | None = Field(
        None, gt=0, description="custom: minimum GPU memory bandwidth, GB/s"
    )
    kv_lora_rank: int | None = Field(
        None, gt=0, description="multi-head latent attention (DeepSeek-V2/V3): the KV latent width"
    )
    qk_rope_head_dim: int | None = Field(None, gt=0, description="MLA: the RoPE key width cached per token")
    sliding_window: int | None = Field(None, gt=0, description="tokens a sliding-window layer attends to")
    attention_softcap: bool = Field(
        False,
        description="attention logits soft-capped (Gemma 2's attn_logit_softcapping): training runs "
        "attention eagerly and keeps each layer's scores",
    )
    post_norms: bool = Field(
        False,
        description="Gemma 2/3's norms, for training: one after attention and after the MLP too, and each "
        "keeping an fp32 normalised value for its weight's gradient",
    )
    qk_norm: bool = Field(
        False, description="a norm on each head's queries and keys (Qwen 3, Gemma 3, OLMo 2), for training"
    )
    window_layers: int | None = Field(
        None, ge=0, description="layers with the sliding window (default: all, when sliding_window is set)"
    )
    config: str | None = Field(
        None, description="a local Hugging Face config.json to size the model from (its path)"
    )
    hf: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Hugging Face repo id (org/name): alone, gpufit sizes the model from its config.json "
        "on the Hub (cached; HF_ENDPOINT, HF_TOKEN honoured); with a preset or config, what the server pulls",
    )
    revision: str | None = Field(
        None, max_length=200, description="branch, tag or commit of model.hf (letters, digits, . _ - /)"
    )

    @field_validator("revision")
    @classmethod
    def _git_ref(cls, value: str | None) -> str | None:
        """A branch, tag or commit as ``git check-ref-format`` allows them, narrowed to safe
        characters: components of letters, digits, ``.``, ``_`` and ``-`` joined by ``/``, none
        starting with ``.`` or ending with ``.lock``, no ``..``
        (https://git-scm.com/docs/git-check-ref-format). The server is started with it."""
        if value is None:
            return value
        if not GIT_REF.fullmatch(value) or ".." in value or value.endswith((".lock", ".")):
            raise ValueError(
                f"got {value!r}; expected a branch, tag or commit: letters, digits and . _ - / "
                "(such as main, v1.0 or a 40-character commit)"
            )
        return value

    @model_validator(mode="after")
    def _one_form(self) -> ModelSpec:
        shape = [n for n in ("attention_softcap", "post_norms", "qk_norm") if getattr(self, n)]
        if shape and (self.preset or self.config or self.hf) and self.params_b is None:
            raise ValueError(
                f"model.{', model.'.join(shape)}: for an explicit architecture only; a preset, "
                "model.config or model.hf reads them from config.json"
            )
        if self.config is not None:
            others = [
                n for n in ("preset", "kind", "params_b", "layers", "hidden", "heads") if getattr(self, n)
            ]
            if others:
                raise ValueError(f"give either model.config or {', '.join(others)}, not both")
            config_arch(self.config)  # reads and checks it: a bad file is a spec error
            return self
        if self.sized_by_hub:
            assert self.hf is not None
            hub_arch(self.hf, self.revision)  # fetches (or reads the cache) and checks it
            return self
        explicit = [
            name
            for name in ("params_b", "layers", "hidden", "heads", "kv_heads", "vocab")
            if getattr(self, name) is not None
        ]
        if self.preset is not None:
            if explicit or self.kind is not None or self.vram_gib is not None:
                raise ValueError("give either a preset or an explicit architecture, not both")
            if self.preset not in preset_names():
                hint = closest_presets(self.preset)
                tail = f"; did you mean {', '.join(hint)}?" if hint else ""
                raise ValueError(f"unknown preset {self.preset!r}{tail} (see `gpufit presets`)")
            return self
        if self.kind == "custom":
            if self.vram_gib is None or self.min_bandwidth_gbps is None:
                raise ValueError("kind: custom needs vram_gib and min_bandwidth_gbps")
            return self
        if self.kind in ("diffusion", "audio"):
            if self.params_b is None:
                raise ValueError(f"kind: {self.kind} needs params_b")
            return self
        missing = [n for n in ("params_b", "layers", "hidden", "heads") if getattr(self, n) is None]
        if missing:
            raise ValueError(
                "expected a preset, kind: custom (vram_gib, min_bandwidth_gbps), or an explicit "
                f"architecture; missing {', '.join(missing)}"
            )
        assert self.hidden is not None and self.heads is not None
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError("hidden must be a multiple of heads, or give head_dim")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError("multi-head latent attention needs both kv_lora_rank and qk_rope_head_dim")
        if self.window_layers is not None and (
            self.sliding_window is None or self.window_layers > (self.layers or 0)
        ):
            raise ValueError("window_layers needs sliding_window and at most as many layers as the model has")
        if (self.experts is None) != (self.experts_active is None):
            raise ValueError("MoE needs both experts and experts_active")
        if (
            self.experts is not None
            and self.experts_active is not None
            and self.experts_active > self.experts
        ):
            raise ValueError("experts_active cannot exceed experts")
        return self

    @property
    def sized_by_hub(self) -> bool:
        """``model.hf`` alone: the architecture comes from the repo's config.json on the Hub."""
        return (
            self.hf is not None
            and self.config is None
            and self.preset is None
            and self.params_b is None
            and self.kind is None
        )

    def resolve(self) -> ModelArch:
        """The architecture the sizing model reads."""
        if self.sized_by_hub:
            assert self.hf is not None
            return hub_arch(self.hf, self.revision)
        if self.config is not None:
            arch = config_arch(self.config)
            return replace(arch, hf=self.hf) if self.hf else arch
        if self.preset is not None:
            return arch_from_preset(self.preset)
        if self.kind == "custom":
            assert self.vram_gib is not None
            return ModelArch(
                name="custom",
                kind="custom",
                params=(self.params_b or 0.0) * 1e9,
                params_active=(self.params_active_b or self.params_b or 0.0) * 1e9,
                vram_gib=self.vram_gib,
                min_bandwidth_gbps=self.min_bandwidth_gbps,
            )
        assert self.params_b is not None
        params = self.params_b * 1e9
        if self.kind in ("diffusion", "audio"):
            return ModelArch(self.kind, self.kind, params, params)
        assert self.hidden is not None and self.heads is not None and self.layers is not None
        return ModelArch(
            name="explicit",
            kind="transformer",
            params=params,
            params_active=(self.params_active_b or self.params_b) * 1e9,
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads or self.heads,
            head_dim=self.head_dim or self.hidden // self.heads,
            ffn=self.ffn or 4 * self.hidden,
            vocab=self.vocab or 0,
            experts=self.experts or 1,
            experts_active=self.experts_active or 1,
            kv_lora_rank=self.kv_lora_rank or 0,
            qk_rope_head_dim=self.qk_rope_head_dim or 0,
            sliding_window=self.sliding_window or 0,
            window_layers=(self.layers if self.window_layers is None else self.window_layers)
            if self.sliding_window
            else 0,
            attention_softcap=self.attention_softcap,
            post_norms=self.post_norms,
            qk_norm=self.qk_norm,
            fp32_norms=self.post_norms,  # Gemma's norms multiply their weight in fp32
        )
