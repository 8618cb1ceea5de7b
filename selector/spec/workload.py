"""The spec's other sections (serving, training, work, placement, budget, storage, access, ...)
and ``WorkloadSpec``, which holds them and checks that they agree with the task."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from selector.breadth import MIN_FALLBACKS
from selector.model_arch import ModelArch
from selector.served import ServedModel, context_problem, published_weights_problem, served_model, yarn_for
from selector.spec.capacity import CapacitySpec, capacity_problems
from selector.spec.embed import EmbedSpec
from selector.spec.exclusion import AttemptSpec, ExcludeSpec
from selector.spec.fields import (
    ALL_CLOUDS,
    SERVING_TASKS,
    TRAINING_TASKS,
    Cloud,
    Count,
    EgressTarget,
    FaultTolerance,
    Hours,
    Precision,
    SizeGB,
    Strict,
    Task,
)
from selector.spec.model import ModelSpec
from selector.spec.secrets import secret_problems, secret_sources
from selector.spec.serving import RopeScalingSpec as RopeScalingSpec, ServingSpec as ServingSpec
from selector.spec.tls import tls_problems
from selector.spec.training import TrainingSpec as TrainingSpec

_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,38}[a-z0-9]")
"""``name``, matched whole (``fullmatch``: ``re.match`` with ``$`` admits a trailing newline)."""
WORKDIR_RE = re.compile(r"(?:/[A-Za-z0-9_][A-Za-z0-9._-]*)+")
"""``job.workdir``: an absolute path whose components start with a letter, digit or ``_``."""


class WorkSpec(Strict):
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
    steps: int | None = Field(
        None, gt=0, description="diffusion: denoising steps per image; default: the preset's measured run"
    )
    compile: bool = Field(False, description="diffusion: the pipeline runs under torch.compile")

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


class EgressSpec(Strict):
    gb: SizeGB = 0.0
    to: EgressTarget = "internet"


class PlacementSpec(Strict):
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
    spot_allocation: Literal["price-capacity-optimized", "cost-order"] = Field(
        "price-capacity-optimized",
        description="how a spot fleet picks among its types: AWS's price and capacity, or gpufit's "
        "cost order",
    )
    exclude: list[ExcludeSpec] = Field(
        default_factory=list,
        description="(cloud, region, instance type) the plan must not use, e.g. where capacity ran out",
        max_length=200,
    )
    attempt: AttemptSpec | None = Field(
        None,
        description="set by `gpufit up` while it tries a fallback the plan listed (a multi-node "
        "replica's next type): the plan uses only this offer",
    )
    gcp_instance_flexibility: bool | None = Field(
        None,
        description="how a GCP group takes other machine types of the choice's GPU (a regional MIG's "
        "instanceFlexibilityPolicy): unset, only sizes with the same GPUs of a series not refused "
        "by Google's Cluster Toolkit (selector/data/gcp_instance_flexibility.yaml); true, any size "
        "of the choice's series (unconfirmed); false, none. A batch job's other fallbacks get MIGs "
        "of their own either way",
    )
    max_fallback_cost_ratio: float = Field(
        2.0,
        ge=1,
        description="an on-demand served model with no budget falls back only to types whose cost "
        "for the plan is at most this many times the choice's (nothing moves a group back to it)",
    )
    min_fallbacks: int = Field(
        MIN_FALLBACKS,
        ge=0,
        le=9,  # selector.fallbacks.MAX_FALLBACKS: the most a fleet lists
        description="a stateless or checkpointed plan with no pinned type takes the cheapest offer "
        "whose fleet has at least this many fallbacks (at most 9) when the cheapest has fewer (the "
        "premium shown); 0 ranks by expected cost alone",
    )


class BudgetSpec(Strict):
    max_hourly_usd: float | None = Field(None, gt=0)
    max_total_usd: float | None = Field(None, gt=0)


class StorageSpec(Strict):
    dataset_gb: SizeGB = 0.0
    keep_days: float = Field(7, ge=0, description="days the checkpoint bucket keeps objects")
    retain_bucket: bool = Field(False, description="keep the bucket when the stack is destroyed")
    disk_gb: SizeGB | None = Field(None, description="override the boot disk size")
    outputs_gb: SizeGB | None = Field(
        None,
        description="what the job writes under outputs/ (kept on disk, synced to the bucket): the "
        "boot disk is sized to hold it; training checkpoints are counted without it",
    )


class DataSpec(Strict):
    cloud: Cloud
    region: str


class TeardownSpec(Strict):
    ttl: Hours = Field(..., description="hard deadline after creation")


class JobSpec(Strict):
    """What the machine runs once it boots (cloud-init). Without a command it boots ready for you."""

    command: str | None = Field(
        None,
        max_length=4096,
        description="shell command to run; on multi-node plans, a script and its arguments "
        "that torchrun launches on every node",
    )
    checkpoint_command: str | None = Field(
        None,
        max_length=4096,
        description="run before every stop the machine sees coming (interruption notice, deadline, "
        "scale-in, shutdown), then outputs/ is synced",
    )
    workdir: str = Field(
        "/var/lib/gpufit",
        max_length=200,
        description="working directory (an absolute path of letters, digits and . _ - /); outputs/ "
        "is synced to the bucket",
    )
    retries: int = Field(
        2, ge=0, le=10, description="times a failed command runs again on its machine before it is replaced"
    )

    @field_validator("workdir")
    @classmethod
    def _safe_path(cls, value: str) -> str:
        if not WORKDIR_RE.fullmatch(value):
            raise ValueError(
                f"got {value!r}; expected an absolute path of letters, digits and . _ - / "
                "(no component starting with a dot), such as /var/lib/gpufit"
            )
        return value


def _cidr_problems(
    cidrs: list[str], open_allowed: bool, malformed: str, too_open: str, together_open: str
) -> list[str]:
    """One problem per CIDR that does not parse or that alone opens to everyone, and one for a
    list whose CIDRs together do (``selector.reach``: more public addresses than a /8 of IPv4
    or a /32 of IPv6, so ``0.0.0.0/1`` + ``128.0.0.0/1`` counts as ``0.0.0.0/0``), unless
    opted in. ``malformed`` and ``too_open`` are formatted with the CIDR, ``together_open``
    with how many public addresses the list covers."""
    import ipaddress

    from selector.reach import too_broad

    problems = []
    for cidr in cidrs:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            problems.append(malformed.format(cidr))
            continue
        if too_broad([cidr]) and not open_allowed:
            problems.append(too_open.format(cidr))
    if not open_allowed and not any(too_broad([c]) for c in cidrs):
        problems += [together_open.format(breadth) for breadth in too_broad(cidrs)]
    return problems


class AccessSpec(Strict):
    """Inbound access. None by default: AWS SSM Session Manager / GCP OS Login through IAP."""

    ssh_cidrs: list[str] = Field(default_factory=list, description="CIDRs allowed to reach port 22")
    allow_ssh_from_anywhere: bool = Field(
        False,
        description="required to list 0.0.0.0/0, ::/0 or CIDRs covering more than a /8 (IPv6: /32) of "
        "public addresses",
    )
    api_cidrs: list[str] = Field(
        default_factory=list, description="CIDRs allowed to reach a load-balanced endpoint"
    )
    allow_api_from_anywhere: bool = Field(
        False,
        description="required to list 0.0.0.0/0, ::/0 or CIDRs covering more than a /8 (IPv6: /32) of "
        "public addresses in api_cidrs",
    )

    @field_validator("ssh_cidrs", "api_cidrs", mode="after")
    @classmethod
    def _canonical(cls, cidrs: list[str]) -> list[str]:
        """Each CIDR as the clouds take it: a bare address ``203.0.113.7`` becomes
        ``203.0.113.7/32`` (EC2 refuses an IpRange without a prefix length,
        https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpRange.html) and host bits
        are cleared (``10.1.2.3/8`` is ``10.0.0.0/8``, the block the cloud would apply).
        What does not parse is left for ``_cidrs`` to report."""
        import ipaddress

        canonical = []
        for cidr in cidrs:
            try:
                canonical.append(str(ipaddress.ip_network(cidr, strict=False)))
            except ValueError:
                canonical.append(cidr)
        return canonical

    @model_validator(mode="after")
    def _cidrs(self) -> AccessSpec:
        problems = _cidr_problems(
            self.api_cidrs,
            self.allow_api_from_anywhere,
            "api_cidrs: {!r} is not a CIDR such as 203.0.113.0/24",
            "api_cidrs: {} opens the endpoint to the whole internet; set allow_api_from_anywhere to mean it",
            "api_cidrs: together they open the endpoint to the internet ({}); "
            "set allow_api_from_anywhere to mean it",
        ) + _cidr_problems(
            self.ssh_cidrs,
            self.allow_ssh_from_anywhere,
            "{!r} is not a CIDR such as 203.0.113.7/32",
            "{} opens SSH to the whole internet; set allow_ssh_from_anywhere to mean it",
            "ssh_cidrs: together they open SSH to the internet ({}); set allow_ssh_from_anywhere to mean it",
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class TuningSpec(Strict):
    """Override the named efficiency defaults of the speed model."""

    bandwidth_efficiency: float | None = Field(None, gt=0, le=1)
    mfu: float | None = Field(None, gt=0, le=1)


class WorkloadSpec(Strict):
    name: str = Field(..., description="lowercase letters, digits and hyphens, 2-40 characters")
    task: Task
    model: ModelSpec
    precision: Precision = "bf16"
    serving: ServingSpec | None = None
    training: TrainingSpec | None = None
    work: WorkSpec | None = None
    embed: EmbedSpec | None = None
    fault_tolerance: FaultTolerance = "none"
    checkpoint_interval: Hours = Field(0.5, description="default 30m")
    restart_overhead: Hours = Field(
        1 / 6, description="time lost to boot and reload after an interruption; default 10m"
    )
    duration: Hours | None = Field(None, description="serving: how long it runs; default 730h")
    egress: EgressSpec = Field(default_factory=EgressSpec)
    placement: PlacementSpec = Field(default_factory=PlacementSpec)
    capacity: CapacitySpec = Field(default_factory=CapacitySpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    data: DataSpec | None = None
    teardown: TeardownSpec | None = None
    tuning: TuningSpec = Field(default_factory=TuningSpec)
    job: JobSpec = Field(default_factory=JobSpec)
    access: AccessSpec = Field(default_factory=AccessSpec)
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables for the job from a secret store: NAME: a key of the "
        "stack's secret config gpufit:secrets, a Secrets Manager ARN, or projects/P/secrets/S",
    )

    @field_validator("secrets")
    @classmethod
    def _secret_references(cls, value: dict[str, str]) -> dict[str, str]:
        problems = secret_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
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
        if self.training is not None and self.training.framework == "litgpt" and self.task == "pretrain":
            problems.append(
                "training.framework: litgpt is for fine-tuning here; LitGPT pretrains with FSDP "
                "HYBRID_SHARD (sharded within a node, copied across nodes), which gpufit does not size"
            )
        training = self.training
        if training and training.framework == "litgpt" and training.softcap_attention != "eager":
            problems.append(
                "training.softcap_attention: litgpt runs soft-capped attention eagerly (its model.py: "
                "'with softcapping we cannot use SDPA'): expected eager"
            )
        if training is not None and training.sharding_library == "deepspeed":
            if training.accumulation_sync == "last":
                problems.append(
                    "training.accumulation_sync: last is FSDP's no_sync; DeepSpeed ZeRO-3 "
                    "(sharding_library deepspeed) reduces every micro-batch: expected every"
                )
            if training.fsdp_frozen_gradients:
                problems.append(
                    "training.fsdp_frozen_gradients: true is FSDP1's; DeepSpeed ZeRO-3 (sharding_library "
                    "deepspeed) gives frozen weights no gradient: expected false"
                )
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
            if (
                self.task == "batch"
                and self.serving is not None
                and self.serving.tokens is not None
                and self.job.command is None
            ):
                problems.append(
                    "job.command: a task batch that generates serving.tokens needs the command that "
                    "sends the prompts (to the engine gpufit starts at GPUFIT_ENGINE_URL, or its own "
                    "with serving.engine none)"
                )
        clouds = {source.cloud for source in secret_sources(self.secrets)} - {None}
        if len(clouds) > 1:
            problems.append("secrets name both AWS and GCP secrets; a plan runs on one cloud")
        elif clouds and not clouds <= set(self.placement.clouds):
            problems.append(
                f"secrets name {', '.join(sorted(str(c) for c in clouds))} secrets: "
                f"placement.clouds must include it"
            )
        if (self.task == "embed") != (self.embed is not None):
            problems.append(
                "task embed needs an embed section (documents, tokens_per_document), and only it takes one"
            )
        elif self.task == "embed" and arch_kind != "transformer":
            problems.append(
                "task embed needs a transformer architecture (a preset, config or explicit layers)"
            )
        elif self.embed is not None:
            problems += self._embed_problems()
        problems += capacity_problems(self.capacity, list(self.placement.clouds), self.task)
        problems += self._work_problems(arch)
        problems += self._serving_problems(arch_kind)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _embed_problems(self) -> list[str]:
        """An embed job's longest document must fit the model's context, as a served sequence
        must: vLLM refuses a ``max_model_len`` above the config's ``max_position_embeddings``
        without a RoPE override (``_get_and_verify_max_len`` in vllm/config.py,
        https://github.com/vllm-project/vllm/blob/2ac6d0e75bc846998da56b50bf4f8853cb36d484/vllm/config.py#L1870)."""
        embed = self.embed
        assert embed is not None
        field = "embed.max_tokens" if embed.max_tokens is not None else "embed.tokens_per_document"
        problems: list[str] = []
        rope = self.serving.rope_scaling if self.serving is not None else None
        if rope is not None:
            _, why = yarn_for(self.model.preset, rope.factor, rope.original_max_position_embeddings)
            problems += [why] if why else []
        too_long = context_problem(embed.longest, self.served(), self.model.config or self.arch().name, field)
        return problems + ([too_long] if too_long else [])

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
            if serving is not None and serving.expose != "private":
                problems.append("serving.expose is for task serve")
            if serving is not None and serving.engine not in (None, "none") and self.batch_engine == "none":
                problems.append("serving.engine is for task serve, and batch that generates serving.tokens")
            elif self.batch_engine != "none" and arch_kind != "transformer":
                problems.append(
                    f"serving.engine {self.batch_engine} serves transformer models (set engine: none)"
                )
            elif self.batch_engine != "none":  # the engine gpufit starts for job.command refuses the same
                problems += self._launch_problems(self.batch_engine)
            elif serving is not None and (serving.engine_args or serving.rope_scaling is not None):
                problems.append(
                    "serving.engine_args and serving.rope_scaling need serving.engine vllm or sglang"
                )
            return problems
        if serving.engine in ("vllm", "sglang"):
            if self.job.command is not None:
                problems.append(f"serving.engine {serving.engine} starts the server; leave job.command out")
            if arch_kind != "transformer":
                problems.append(
                    f"serving.engine {serving.engine} serves transformer models (set engine: none)"
                )
        if self.server_engine in ("vllm", "sglang") and arch_kind == "transformer":
            problems += self._launch_problems(self.server_engine)
        elif serving.engine_args or serving.rope_scaling is not None:
            problems.append("serving.engine_args and serving.rope_scaling need serving.engine vllm or sglang")
        if serving.expose == "load_balancer" and not self.access.api_cidrs:
            problems.append("serving.expose load_balancer needs access.api_cidrs (who may call the endpoint)")
        problems += tls_problems(serving, list(self.placement.clouds))
        if serving.expose == "load_balancer" and self.server_engine == "none":
            problems.append(
                "serving.expose load_balancer fronts the server gpufit starts: set serving.engine "
                "(a job.command's own server stays private)"
            )
        return problems

    def _launch_problems(self, engine: str) -> list[str]:
        """What the engine would refuse: a context above the served model's maximum (without a
        YaRN opt-in it documents), FP8 asked of weights published in another 8-bit-or-less
        format, flags it does not take or that gpufit sets itself."""
        serving = self.serving
        assert serving is not None
        problems: list[str] = []
        arch = self.arch()
        rope = serving.rope_scaling
        if rope is not None:
            _, why = yarn_for(self.model.preset, rope.factor, rope.original_max_position_embeddings)
            if why:
                problems.append(why)
        served = self.served()
        too_long = context_problem(self.engine_context, served, self.model.config or arch.name)
        problems += [too_long] if too_long else []
        published = published_weights_problem(arch, self.precision)
        problems += [published] if published else []
        if serving.engine_args:
            from selector.engine_flags import check_engine_args

            problems += [f"serving.engine_args: {p}" for p in check_engine_args(engine, serving.engine_args)]
        return problems

    def served(self) -> ServedModel:
        """The checkpoint a serve plan launches, with the YaRN opt-in when one is asked."""
        from dataclasses import replace

        served = served_model(
            self.model.preset, self.model.hf, self.arch(), self.precision, self.model.sized_by_hub
        )
        rope = self.serving.rope_scaling if self.serving is not None else None
        if rope is None:
            return served
        yarn, _ = yarn_for(self.model.preset, rope.factor, rope.original_max_position_embeddings)
        return replace(served, yarn=yarn)

    @property
    def engine_context(self) -> int:
        """The context the engine must hold per sequence: the text, plus the images' tokens of a
        model that puts them in the sequence (not mllama's cross-attention ones)."""
        serving = self.serving
        if serving is None:
            return 0
        arch = self.arch()
        images = serving.images_per_request * (serving.image_tokens or arch.image_tokens)
        return serving.context_tokens + (0 if arch.image_token_layers else images)

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

    @property
    def batch_engine(self) -> str:
        """The engine gpufit starts on 127.0.0.1 for a batch that generates ``serving.tokens``
        (job.command, its client, at ``GPUFIT_ENGINE_URL``): the spec's, default vllm."""
        serving = self.serving
        if self.task != "batch" or serving is None or serving.tokens is None:
            return "none"
        return serving.engine or ("vllm" if self.model.resolve().kind == "transformer" else "none")

    @property
    def decode_engine(self) -> str:
        """The engine that decodes the tokens gpufit plans: the model server of a serve plan, the
        engine a token-generating batch starts on 127.0.0.1 for job.command (``batch_engine``,
        launched with a serving replica's own arguments: ``machine.serving.batch_engine_start``),
        else none. Its speed, memory budget, one-node rule and pinned build are the plan's."""
        return self.batch_engine if self.task == "batch" else self.server_engine

    def arch(self) -> ModelArch:
        return self.model.resolve()
