"""The workload spec: what a user declares, validated into an immutable ``WorkloadSpec``.

A spec is a YAML file, or the ``gpufit:workload`` object of a Pulumi stack file. Quantities
take units (see ``selector.units``). Every problem becomes one ``SpecProblem`` line naming
the field, what was wrong and what was expected; loading never raises anything else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from selector import units
from selector.presets import (
    ModelArch,
    arch_from_preset,
    closest_presets,
    preset_names,
)

Task = Literal["serve", "batch", "finetune-lora", "finetune-qlora", "finetune-full", "pretrain"]
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4"]
FaultTolerance = Literal["none", "checkpointed", "stateless"]
Cloud = Literal["aws", "gcp"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd"]
EgressTarget = Literal["internet", "other-region", "other-cloud"]

ALL_CLOUDS: tuple[Cloud, ...] = ("aws", "gcp")
TRAINING_TASKS: frozenset[str] = frozenset({"finetune-lora", "finetune-qlora", "finetune-full", "pretrain"})
SERVING_TASKS: frozenset[str] = frozenset({"serve", "batch"})


def _parser(fn: Any) -> BeforeValidator:
    def run(value: object) -> object:
        try:
            return fn(value)
        except ValueError as err:
            raise ValueError(str(err)) from None

    return BeforeValidator(run)


SizeGB = Annotated[
    float,
    _parser(units.parse_size_gb),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": units.SIZE_PATTERN},
            ],
            "description": "size: a number of GB, or e.g. 200GB, 1.5TiB",
        }
    ),
]
Hours = Annotated[
    float,
    _parser(units.parse_duration_hours),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": units.DURATION_PATTERN,
            "description": "duration with a unit: 90s, 30m, 12h, 7d, 2w",
        }
    ),
]
Count = Annotated[
    float,
    _parser(units.parse_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": units.COUNT_PATTERN},
            ],
            "description": "count: a number, or e.g. 5e7, 50M, 2B",
        }
    ),
]


@lru_cache(maxsize=16)
def config_arch(path: str) -> ModelArch:
    """The architecture of a local config.json (read once per process); ValueError saying why
    it cannot be used."""
    from selector.hf_config import ConfigError, arch_from_config

    file = Path(path)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"model.config: no such file {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"model.config: {path} is not a readable JSON file ({err})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"model.config: {path} is not a config.json object")
    try:
        return arch_from_config(doc, file.parent.name or file.stem)
    except ConfigError as err:
        raise ValueError(f"model.config: {err}") from None


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
    Pulumi program install ``providers.hf_hub.fetch_model``; the selector does no network I/O
    of its own). ``None`` removes it."""
    _hub.clear()
    if fetcher is not None:
        _hub.append(fetcher)
    hub_arch.cache_clear()


@lru_cache(maxsize=16)
def hub_arch(repo: str, revision: str | None) -> ModelArch:
    """The architecture of a Hub repo, from its config.json, with the exact parameter count
    of its safetensors weights where the Hub has them (computed shares, such as the vision
    encoder's or the active experts', are scaled to it). ValueError says why not."""
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
        raise ValueError(f"model.hf: {at}: {err}") from None
    arch = replace(arch, hf=repo, source=f"Hugging Face {at} config.json")
    total = sum(model.parameters.values())
    if total <= 0:
        return arch
    scale = total / arch.params
    sizes = [SAFETENSORS_DTYPE_BYTES.get(dtype) for dtype in model.parameters]
    file_bytes = (
        sum(n * b for n, b in zip(model.parameters.values(), sizes, strict=True) if b is not None)
        if all(b is not None for b in sizes)
        else 0.0
    )
    dtypes = ", ".join(f"{dtype} {n:,}" for dtype, n in sorted(model.parameters.items()))
    return replace(
        arch,
        params=float(total),
        params_active=arch.params_active * scale,
        vision_params=arch.vision_params * scale,
        checkpoint_bytes=float(file_bytes),
        source=f"Hugging Face {at} config.json; safetensors {total:,} parameters ({dtypes})",
    )


_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
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
    revision: str | None = Field(None, max_length=200, description="branch, tag or commit of model.hf")

    @model_validator(mode="after")
    def _one_form(self) -> ModelSpec:
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
        )


class ServingSpec(_Strict):
    context_tokens: int = Field(4096, gt=0, description="tokens of context per sequence")
    concurrency: int = Field(1, gt=0, description="sequences resident at once per replica")
    tokens_per_s_per_stream: float | None = Field(None, gt=0)
    tokens_per_s_total: float | None = Field(None, gt=0, description="replicas follow from it")
    kv_cache_precision: Literal["fp32", "bf16", "fp16", "fp8", "int8"] | None = Field(
        None, description="default: bf16 (fp32 for fp32 models)"
    )
    tokens: Count | None = Field(None, description="batch: tokens to generate in all")
    engine: Literal["vllm", "sglang", "none"] | None = Field(
        None,
        description="model server gpufit starts (serve): default vllm for transformer models "
        "without a job.command, else none",
    )
    images_per_request: int = Field(
        0, ge=0, le=64, description="multimodal models: images in each sequence's context"
    )
    image_tokens: int | None = Field(
        None, gt=0, description="context tokens one image takes; default: from the model's config"
    )
    expose: Literal["private", "load_balancer"] = Field(
        "private", description="private: no inbound route (port-forward); load_balancer: an LB for api_cidrs"
    )
    port: int = Field(8000, ge=1024, le=65000, description="the server's port on the machine (first replica)")
    certificate_arn: str | None = Field(
        None, pattern=r"^arn:aws[a-z-]*:acm:", description="AWS: ACM certificate for an HTTPS listener"
    )


class TrainingSpec(_Strict):
    tokens: Count = Field(..., description="tokens processed by the whole job (all epochs)")
    sequence_tokens: int = Field(2048, gt=0)
    micro_batch: int = Field(1, gt=0, description="sequences per GPU per step")
    activation_checkpointing: bool = True
    lora_rank: int = Field(16, gt=0)
    optimizer: Optimizer = "adamw"


class WorkSpec(_Strict):
    """Batch work that is not token generation (images, audio): compute-bound items. A
    diffusion or audio preset knows what one item costs (a measured time on a named GPU);
    ``tflop_per_item`` states it instead, or overrides the preset's figure."""

    items: Count | None = Field(None, description="items to produce, e.g. 2e5 images (audio: seconds)")
    audio: Hours | None = Field(
        None, description="audio models: hours of audio to transcribe, e.g. 1000h (instead of items)"
    )
    tflop_per_item: float | None = Field(
        None, gt=0, description="TFLOP one item costs; default: the preset's measured cost per item"
    )
    batch: int = Field(1, gt=0, description="items resident at once per replica")

    @model_validator(mode="after")
    def _one_amount(self) -> WorkSpec:
        if (self.items is None) == (self.audio is None):
            raise ValueError("give work.items or work.audio (hours of audio), one of them")
        if self.items is not None and self.items <= 0:
            raise ValueError("work.items must be above 0")
        return self

    @property
    def item_count(self) -> float:
        """Items to produce: ``items``, or the seconds in ``audio``."""
        return self.items if self.items is not None else (self.audio or 0.0) * 3600.0


class EgressSpec(_Strict):
    gb: SizeGB = 0.0
    to: EgressTarget = "internet"


class PlacementSpec(_Strict):
    clouds: list[Cloud] = Field(default_factory=lambda: list(ALL_CLOUDS), min_length=1)
    regions: list[str] | None = Field(None, description="region names or globs")
    instance_types: list[str] | None = Field(None, description="instance type globs")
    allow_pcie_tensor_parallel: bool = Field(
        False, description="allow model-parallel work (TP, sharded training) over PCIe"
    )
    max_nodes: int = Field(16, gt=0, le=256)
    require_sourced: bool = Field(
        False, description="plan only on sourced GPU figures, never on estimates (e.g. the A10G's)"
    )


class BudgetSpec(_Strict):
    max_hourly_usd: float | None = Field(None, gt=0)
    max_total_usd: float | None = Field(None, gt=0)


class StorageSpec(_Strict):
    dataset_gb: SizeGB = 0.0
    keep_days: float = Field(7, ge=0, description="days the checkpoint bucket keeps objects")
    retain_bucket: bool = Field(False, description="keep the bucket when the stack is destroyed")
    disk_gb: SizeGB | None = Field(None, description="override the boot disk size")


class DataSpec(_Strict):
    cloud: Cloud
    region: str


class TeardownSpec(_Strict):
    ttl: Hours = Field(..., description="hard deadline after creation")


class JobSpec(_Strict):
    """What the machine runs once it boots (cloud-init). Without a command it boots ready for you."""

    command: str | None = Field(
        None,
        max_length=4096,
        description="shell command to run; on multi-node plans, a script and its arguments "
        "that torchrun launches on every node",
    )
    checkpoint_command: str | None = Field(
        None, max_length=4096, description="run when a spot interruption notice arrives"
    )
    workdir: str = Field("/var/lib/gpufit", description="working directory; outputs/ is synced to the bucket")


def _cidr_problems(cidrs: list[str], open_allowed: bool, malformed: str, too_open: str) -> list[str]:
    """One problem per CIDR that does not parse, or that opens to everyone (/0) without the
    opt-in; ``malformed`` and ``too_open`` are the messages, formatted with the CIDR."""
    import ipaddress

    problems = []
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            problems.append(malformed.format(cidr))
            continue
        if net.prefixlen == 0 and not open_allowed:
            problems.append(too_open.format(cidr))
    return problems


class AccessSpec(_Strict):
    """Inbound access. None by default: AWS SSM Session Manager / GCP OS Login through IAP."""

    ssh_cidrs: list[str] = Field(default_factory=list, description="CIDRs allowed to reach port 22")
    allow_ssh_from_anywhere: bool = Field(False, description="required to list 0.0.0.0/0 or ::/0")
    api_cidrs: list[str] = Field(
        default_factory=list, description="CIDRs allowed to reach a load-balanced endpoint"
    )
    allow_api_from_anywhere: bool = Field(
        False, description="required to list 0.0.0.0/0 or ::/0 in api_cidrs"
    )

    @model_validator(mode="after")
    def _cidrs(self) -> AccessSpec:
        problems = _cidr_problems(
            self.api_cidrs,
            self.allow_api_from_anywhere,
            "api_cidrs: {!r} is not a CIDR such as 203.0.113.0/24",
            "api_cidrs: {} opens the endpoint to the whole internet; set allow_api_from_anywhere to mean it",
        ) + _cidr_problems(
            self.ssh_cidrs,
            self.allow_ssh_from_anywhere,
            "{!r} is not a CIDR such as 203.0.113.7/32",
            "{} opens SSH to the whole internet; set allow_ssh_from_anywhere to mean it",
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class TuningSpec(_Strict):
    """Override the named efficiency defaults of the speed model."""

    bandwidth_efficiency: float | None = Field(None, gt=0, le=1)
    mfu: float | None = Field(None, gt=0, le=1)


class WorkloadSpec(_Strict):
    name: str = Field(..., description="lowercase letters, digits and hyphens, 2-40 characters")
    task: Task
    model: ModelSpec
    precision: Precision = "bf16"
    serving: ServingSpec | None = None
    training: TrainingSpec | None = None
    work: WorkSpec | None = None
    fault_tolerance: FaultTolerance = "none"
    checkpoint_interval: Hours = Field(0.5, description="default 30m")
    restart_overhead: Hours = Field(
        1 / 6, description="time lost to boot and reload after an interruption; default 10m"
    )
    duration: Hours | None = Field(None, description="serving: how long it runs; default 730h")
    egress: EgressSpec = Field(default_factory=EgressSpec)
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    data: DataSpec | None = None
    teardown: TeardownSpec | None = None
    tuning: TuningSpec = Field(default_factory=TuningSpec)
    job: JobSpec = Field(default_factory=JobSpec)
    access: AccessSpec = Field(default_factory=AccessSpec)

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError(
                f"got {value!r}; expected 2-40 lowercase letters, digits or hyphens, starting "
                "with a letter (it names cloud resources)"
            )
        return value

    @model_validator(mode="after")
    def _coherent(self) -> WorkloadSpec:
        problems: list[str] = []
        if self.task in TRAINING_TASKS and self.training is None:
            problems.append(f"task {self.task} needs a training section")
        if self.task == "serve" and self.serving is None:
            problems.append("task serve needs a serving section")
        batch_tokens = self.serving.tokens if self.serving is not None else None
        if self.task == "batch" and batch_tokens is None and self.work is None and self.duration is None:
            problems.append("task batch needs serving.tokens, work (items), or a duration")
        if self.task not in SERVING_TASKS and self.serving is not None:
            problems.append(f"task {self.task} takes no serving section")
        if self.task in SERVING_TASKS and self.training is not None:
            problems.append(f"task {self.task} takes no training section")
        if self.task == "finetune-qlora" and self.precision not in ("nf4", "int4"):
            problems.append("finetune-qlora quantises the base model: precision must be nf4 or int4")
        if self.task in ("finetune-full", "pretrain") and self.precision not in (
            "fp32",
            "bf16",
            "fp16",
            "fp8",
        ):
            problems.append(f"{self.task} trains every weight: precision must be fp32, bf16, fp16 or fp8")
        arch = self.model.resolve()
        arch_kind = arch.kind
        if self.task in TRAINING_TASKS and arch_kind != "transformer":
            problems.append("training needs a transformer architecture (a preset or explicit layers)")
        if self.work is not None and self.task != "batch":
            problems.append("work (items) is for task batch")
        if self.task in SERVING_TASKS and arch_kind == "transformer":
            if self.serving is None and self.task == "batch":
                problems.append(
                    "task batch with a transformer model needs a serving section "
                    "(context_tokens, concurrency, tokens)"
                )
            if self.work is not None:
                problems.append(
                    "work (items) is for diffusion or custom models; LLM batch jobs give serving.tokens"
                )
        problems += self._work_problems(arch)
        problems += self._serving_problems(arch_kind)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _work_problems(self, arch: ModelArch) -> list[str]:
        """Non-token work needs a cost per item (the preset's measurement or tflop_per_item);
        hours of audio need an audio model; images need a multimodal model whose image size
        in tokens is known."""
        problems: list[str] = []
        work = self.work
        if work is not None and self.task == "batch":
            if work.tflop_per_item is None and arch.item is None:
                problems.append(
                    f"work.tflop_per_item: {arch.name} has no measured cost per item; give the "
                    "TFLOP one item costs"
                )
            if work.audio is not None and arch.kind != "audio":
                problems.append("work.audio (hours of audio) is for audio models such as whisper-large-v3")
        serving = self.serving
        if serving is not None and serving.images_per_request:
            if not arch.is_multimodal:
                problems.append(f"serving.images_per_request: {arch.name} has no vision encoder")
            elif not (serving.image_tokens or arch.image_tokens):
                problems.append(
                    "serving.image_tokens: the model's config does not say how many tokens an "
                    "image takes (its encoder takes any resolution); give it"
                )
        return problems

    def _serving_problems(self, arch_kind: str | None) -> list[str]:
        """The model server and its endpoint: only for serve, only for transformer models, not
        together with a job.command; a load balancer needs the CIDRs it admits."""
        problems: list[str] = []
        serving = self.serving
        if serving is None or self.task != "serve":
            if serving is not None and (serving.engine not in (None, "none") or serving.expose != "private"):
                problems.append("serving.engine and serving.expose are for task serve")
            return problems
        if serving.engine in ("vllm", "sglang"):
            if self.job.command is not None:
                problems.append(f"serving.engine {serving.engine} starts the server; leave job.command out")
            if arch_kind != "transformer":
                problems.append(
                    f"serving.engine {serving.engine} serves transformer models (set engine: none)"
                )
        if serving.expose == "load_balancer" and not self.access.api_cidrs:
            problems.append("serving.expose load_balancer needs access.api_cidrs (who may call the endpoint)")
        if serving.expose == "load_balancer" and self.server_engine == "none":
            problems.append(
                "serving.expose load_balancer fronts the server gpufit starts: set serving.engine "
                "(a job.command's own server stays private)"
            )
        return problems

    @property
    def server_engine(self) -> str:
        """The model server gpufit starts: the spec's engine, else vllm for a transformer served
        without a job.command, else none."""
        serving = self.serving
        if self.task != "serve" or serving is None:
            return "none"
        if serving.engine is not None:
            return serving.engine
        kind = self.model.resolve().kind
        return "vllm" if kind == "transformer" and self.job.command is None else "none"

    def arch(self) -> ModelArch:
        return self.model.resolve()


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong with a spec: where, and what was expected."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def one_line(text: str) -> str:
    """``text`` with every line break and control character escaped (``\\x85``), so that a
    problem quoting the user's input stays one line however that input was written."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class SpecError(Exception):
    """A spec that cannot be used; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def _problems_from(err: ValidationError, prefix: str) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    for item in err.errors(include_url=False):
        loc = [str(part) for part in item["loc"]]
        path = ".".join(([prefix] if prefix else []) + loc)
        msg = str(item["msg"])
        msg = msg.removeprefix("Value error, ")
        kind = item["type"]
        if kind == "extra_forbidden":
            msg = "unknown field (see `gpufit schema` for the fields)"
        elif kind == "missing":
            msg = "required field is missing"
        elif kind in ("literal_error", "enum"):
            msg = f"got {item.get('input')!r}; {msg.lower()}"
        elif "input" in item and kind not in ("value_error", "assertion_error"):
            shown = item["input"]
            if not isinstance(shown, dict | list):
                msg = f"got {shown!r}; {msg.lower()}"
        problems.append(SpecProblem(path or prefix, msg))
    return problems


def parse_spec(data: object, source: str = "spec", prefix: str = "") -> WorkloadSpec:
    """Validate a decoded spec object; raise ``SpecError`` with one line per problem."""
    if not isinstance(data, dict):
        raise SpecError(
            source, [SpecProblem(prefix, f"expected a mapping of fields, got {type(data).__name__}")]
        )
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(source, _problems_from(err, prefix)) from None
    except (ValueError, TypeError, RecursionError) as err:  # defensive: never a traceback
        raise SpecError(source, [SpecProblem(prefix, f"could not read the spec: {err}")]) from None


STACK_KEY = "gpufit:workload"


def load_spec_text(text: str, source: str) -> WorkloadSpec:
    """Read a spec from YAML text: a plain spec or a Pulumi stack file holding one."""
    from selector.datafile import DuplicateKeyError, load_yaml_text

    try:
        doc = load_yaml_text(text)
    except DuplicateKeyError as err:
        raise SpecError(source, [SpecProblem(d.field, d.message) for d in err.duplicates]) from None
    except Exception as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(source, [SpecProblem("", f"{where}not valid YAML ({problem})")]) from None
    if isinstance(doc, dict) and isinstance(doc.get("config"), dict) and "name" not in doc:
        config = doc["config"]
        if STACK_KEY not in config:
            raise SpecError(
                source,
                [SpecProblem("config", f"a Pulumi stack file needs a {STACK_KEY!r} object")],
            )
        return parse_spec(config[STACK_KEY], source, prefix=f"config.{STACK_KEY}")
    return parse_spec(doc, source)


def load_spec(path: str | Path) -> WorkloadSpec:
    """Read a spec file (plain spec or Pulumi stack file)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(file), [SpecProblem("", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(file), [SpecProblem("", f"cannot read the file ({err})")]) from None
    return load_spec_text(text, str(file))


def json_schema() -> dict[str, Any]:
    schema = WorkloadSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpufit workload spec"
    return schema


def stack_json_schema() -> dict[str, Any]:
    """JSON Schema of a Pulumi stack file whose ``config`` holds a ``gpufit:workload``."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpufit Pulumi stack file",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": {
                    STACK_KEY: {"$ref": "workload.schema.json"},
                    "gpufit:catalog": {"type": "string"},
                    "gpufit:image": {"type": "string"},
                    "gpufit:subnetId": {"type": "string"},
                    "gpufit:expiresAt": {"type": "string", "format": "date-time"},
                },
                "required": [STACK_KEY],
            }
        },
        "required": ["config"],
    }
