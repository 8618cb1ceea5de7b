"""The plan-to-deployment translation: a selector ``Plan``'s choice becomes a ``Deployment``
(machine, place, market, disk, deadline, tags, fleet, model server)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from deployment.capacity import capacity_target
from deployment.launch import ServerLaunch
from deployment.model import GATED_ORGS, Deployment, FleetMember
from deployment.tags import iso_utc
from selector.capacity import block_deadline
from selector.cost import DEFAULT_SERVING_HOURS, cost_inputs
from selector.engines import (
    fp8_kv_cache_dtype,
    health_path,
    online_fp8,
    pinned_versions,
    rope_style,
    trust_remote_code,
)
from selector.fallbacks import ATTEMPT
from selector.select import Plan
from selector.sizing import USABLE_MEMORY_FRACTION, Shape
from selector.sizing.engine_memory import SGLANG_STATE_SLOTS_PER_REQUEST, sglang_static_fraction
from selector.spec import TRAINING_TASKS, WorkloadSpec, secret_sources

JOB_DEADLINE_FACTOR = 1.5
"""A job without a TTL expires after its expected hours × 1.5 + ``JOB_DEADLINE_SLACK_H``: room
for a slower run than planned, yet nothing outlives its purpose by more than half again."""
JOB_DEADLINE_SLACK_H = 1.0


def lifetime_hours(plan: Plan) -> float:
    """How long the machines may live: the TTL if the spec sets one; else the service's
    duration; else the job's expected hours × ``JOB_DEADLINE_FACTOR`` + slack."""
    spec = plan.spec
    if spec.teardown is not None:
        return spec.teardown.ttl
    if spec.task == "serve" or plan.choice is None or plan.choice.shape.job_hours is None:
        return spec.duration if spec.duration is not None else DEFAULT_SERVING_HOURS
    return plan.choice.cost.hours * JOB_DEADLINE_FACTOR + JOB_DEADLINE_SLACK_H


class ServingError(ValueError):
    """A serve spec whose model server gpufit cannot start as planned, with the reason."""


def server_launch(plan: Plan, batch: bool = False) -> ServerLaunch | None:
    """The model server of a serve plan from its own numbers: the engine build the plan chose
    for its GPU and image, the checkpoint ``spec.served()`` names (the chat repo of a base
    preset, a published FP8 checkpoint), tensor parallelism and replicas per machine from the
    shape, ``--max-model-len`` = the context (with in-sequence image tokens), ``--max-num-seqs``
    = ``serving.concurrency``, the memory fraction the sizing plans with (SGLang's static pool
    as SGLang would size it), FP8 weights and KV cache in the release's own spelling, the flags
    the release needs for the model (trust-remote-code, the image limit, a YaRN override).
    ServingError when it cannot be started as planned; None when the spec starts no server.
    ``batch``: the engine of a token-generating batch job (``spec.batch_engine``), on
    127.0.0.1 for job.command, at the plan's chosen concurrency per machine type."""
    spec, choice = plan.spec, plan.choice
    engine = spec.batch_engine if batch else spec.server_engine
    if engine == "none" or choice is None or spec.serving is None:
        return None
    shape, arch, serving = choice.shape, spec.arch(), spec.serving
    if shape.nodes_per_replica > 1:
        raise ServingError(
            f"serving.engine {engine}: the plan spreads a replica over {shape.nodes_per_replica} nodes "
            "(pipeline parallel), which gpufit does not launch; give job.command"
            f"{' with serving.engine none' if batch else ''}, or placement.instance_types that hold the "
            "model on one node"
        )
    served = spec.served()
    repo = served.repo
    if repo is None:
        other = ", or serving.engine none (job.command runs its own)" if batch else ""
        raise ServingError(f"serving.engine {engine}: model.hf must name the repo to serve{other}")
    if spec.precision in ("int8", "int4", "nf4") and spec.model.hf is None:
        raise ServingError(
            f"serving.engine {engine}: precision {spec.precision} needs a quantised checkpoint; "
            f"name one in model.hf ({repo} holds 16-bit weights)"
        )
    build = choice.engine
    version = build.version if build is not None else pinned_versions(engine)[0]
    gpu = choice.offer.instance.gpu
    seqs = _max_num_seqs(spec, shape) if batch else serving.concurrency
    if engine == "sglang":
        fraction = sglang_static_fraction(
            gpu.memory_mib, shape.tensor_parallel, seqs, arch.is_mla, arch.is_multimodal
        )
    else:
        fraction = USABLE_MEMORY_FRACTION
    rope, env = _rope(plan, engine, version)
    rope_flag = ROPE_FLAGS[rope_style(engine, version).style] if rope else None
    return ServerLaunch(
        engine=engine,
        model=repo,
        # sized from the Hub: served at the commit the plan sized, not the (movable) revision
        revision=arch.hf_commit if arch.hf_commit and repo == arch.hf else spec.model.revision,
        served_name=spec.name,
        tensor_parallel=shape.tensor_parallel,
        max_model_len=spec.engine_context,
        max_num_seqs=seqs,
        gpu_memory_utilization=fraction,
        quantization=online_fp8(engine, version).quantization if served.fp8 == "online" else None,
        kv_cache_dtype=fp8_kv_cache_dtype(engine, gpu) if serving.kv_cache_precision == "fp8" else None,
        replicas=shape.replicas_per_instance,
        base_port=serving.port,
        weights_gb=served.download_bytes / 1e9,
        image_ref=build.image if build is not None else "",
        engine_version=version,
        trust_remote_code=trust_remote_code(engine, version, arch.family),
        images_per_prompt=serving.images_per_request,
        rope_override=rope,
        rope_flag=rope_flag,
        env=env,
        engine_args=tuple(serving.engine_args),
        health_path=health_path(engine),
        loopback=batch,
        state_slots_per_request=SGLANG_STATE_SLOTS_PER_REQUEST
        if engine == "sglang" and arch.linear_layers
        else 0,
    )


ROPE_FLAGS = {
    "hf_overrides": "--hf-overrides",
    "rope_scaling_flag": "--rope-scaling",
    "json_model_override_args": "--json-model-override-args",
}
"""The flag each RoPE-override style (engines.yaml ``rope_scaling``) is passed with."""


def _rope(plan: Plan, engine: str, version: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The YaRN override in the release's own form (vLLM ≥ 0.11.1: ``--hf-overrides`` with the
    whole ``rope_parameters``, rope_theta repeated since the dict replaces the config's; SGLang:
    ``--json-model-override-args`` with ``rope_scaling``, merged), and the variable that lets the
    context pass the config's maximum."""
    spec = plan.spec
    served = spec.served()
    if served.yarn is None:
        return None, ()
    style = rope_style(engine, version)
    payload: dict[str, object] = {
        "rope_type": "yarn",
        "factor": served.yarn.factor,
        "original_max_position_embeddings": served.yarn.original,
    }
    theta = spec.arch().rope_theta
    if theta:
        payload["rope_theta"] = theta
    body = payload if style.style == "rope_scaling_flag" else {style.key: payload}
    env: tuple[tuple[str, str], ...] = ()
    # vLLM derives its own limit from the override (original × factor, vllm/config/model.py
    # _get_and_verify_max_len), which the spec check already holds the context to: its switch
    # that turns the check off stays off. SGLang's limit ignores a factor given with
    # original_max_position_embeddings, so it needs its switch above the config's maximum.
    reach = served.yarn.original * served.yarn.factor if style.style == "hf_overrides" else served.max_context
    if style.long_context_env and spec.engine_context > reach:
        env = ((style.long_context_env, "1"),)
    return json.dumps(body, separators=(",", ":")), env


def _served_repo(spec: WorkloadSpec) -> str | None:
    return spec.served().repo if spec.serving is not None else spec.model.hf or spec.arch().hf


def _gcp_certificate(spec: WorkloadSpec, cloud: str, region: str) -> str | None:
    """``serving.certificate`` when the plan serves from its region: a regional load balancer
    takes only a certificate of its own region
    (https://cloud.google.com/certificate-manager/docs/deploy-google-managed-regional)."""
    ref = spec.serving.certificate if spec.serving is not None else None
    if ref is None or cloud != "gcp":
        return ref
    location = ref.split("/")[3]
    if location != region:
        raise ServingError(
            f"serving.certificate: the certificate is in {location} and the plan serves from {region}; "
            f"give a certificate of {region} or restrict placement.regions to {location}"
        )
    return ref


def _max_num_seqs(spec: WorkloadSpec, shape: Shape) -> int:
    """A batch generation job's sequences per replica on a machine type: the concurrency the
    plan chose for the type (``selector.batch_concurrency``), else the spec's; 0 for other
    tasks. The machine exports it to ``job.command`` as ``GPUFIT_MAX_NUM_SEQS``."""
    if spec.task != "batch" or spec.serving is None:
        return 0
    return shape.concurrency or spec.serving.concurrency


def deployment_from_plan(
    plan: Plan,
    *,
    stack: str,
    project: str,
    created_at: datetime,
    expires_at: datetime | None = None,
    image: str | None = None,
    subnet_id: str | None = None,
) -> Deployment:
    """Translate the plan's choice into a ``Deployment``; ValueError if the plan has none."""
    choice = plan.choice
    if choice is None:
        raise ValueError(f"plan for {plan.spec.name} has no choice ({plan.status})")
    spec, offer, shape = plan.spec, choice.offer, choice.shape
    inputs = cost_inputs(spec, plan.requirements)
    created = created_at.astimezone(UTC)
    expiry = expires_at or created + timedelta(hours=lifetime_hours(plan))
    capacity = capacity_target(choice.offer)
    if capacity is not None and capacity.kind == "flex-start":  # issue 26: a duration stable across runs
        capacity = replace(capacity, run_hours=lifetime_hours(plan))
    if capacity is not None and capacity.block_end is not None and expires_at is None:
        # The deadline is the block's end (AWS terminates its machines then), a little before it.
        expiry = block_deadline(choice.offer)
    if expiry <= created:
        raise ValueError(f"expires_at {iso_utc(expiry)} is not after the creation time {iso_utc(created)}")
    it = offer.instance
    return Deployment(
        stack=stack,
        project=project,
        workload=spec.name,
        task=spec.task,
        cloud=it.cloud,
        region=offer.region,
        zone=offer.zone,
        zones=(offer.zone,) if offer.zone is not None else offer.zones,
        instance_type=it.name,
        machine_type=it.machine_type,
        attached_accelerator=it.attached_accelerator,
        gpu=it.gpu.name,
        gpu_count=it.gpu_count,
        nodes=shape.instances,
        nodes_per_replica=shape.nodes_per_replica,
        deadline_pinned=expires_at is not None,
        market=offer.market,
        fault_tolerance=spec.fault_tolerance,
        disk_gb=math.ceil(inputs.disk_gb),
        bucket_keep_days=max(1, math.ceil(spec.storage.keep_days)),
        retain_bucket=spec.storage.retain_bucket,
        ssh_cidrs=tuple(spec.access.ssh_cidrs),
        created_at=created,
        expires_at=expiry,
        hourly_usd=choice.cost.hourly_usd,
        estimated_total_usd=choice.cost.total_usd,
        needs_node_interconnect=shape.needs_node_interconnect,
        command=spec.job.command,
        checkpoint_command=spec.job.checkpoint_command,
        workdir=spec.job.workdir,
        image=image,
        subnet_id=subnet_id,
        server=server_launch(plan),
        batch_engine=server_launch(plan, batch=True),
        expose=spec.serving.expose if spec.serving is not None else "private",
        api_cidrs=tuple(spec.access.api_cidrs),
        certificate_arn=spec.serving.certificate_arn if spec.serving is not None else None,
        tls_domain=spec.serving.domain if spec.serving is not None else None,
        tls_certificate=_gcp_certificate(spec, it.cloud, offer.region),
        allow_plain_http=spec.serving.allow_plain_http if spec.serving is not None else False,
        hf_gated=(_served_repo(spec) or "").split("/")[0] in GATED_ORGS,
        secrets=secret_sources(spec.secrets),
        job_retries=spec.job.retries,
        checkpoint_interval_s=max(60, round(spec.checkpoint_interval * 3600)),
        checkpoint_gb=plan.requirements.checkpoint_bytes / 1e9 if spec.task in TRAINING_TASKS else 0.0,
        fleet=(
            FleetMember(
                it.name,
                it.machine_type,
                it.attached_accelerator,
                it.gpu_count,
                shape.replicas_per_instance,
                offer.hourly_usd,
                shape.tensor_parallel,
                _max_num_seqs(spec, shape),
                it.gpu.name,
            ),
            *(
                FleetMember(
                    f.offer.instance.name,
                    f.offer.instance.machine_type,
                    f.offer.instance.attached_accelerator,
                    f.offer.instance.gpu_count,
                    f.weighted_capacity,
                    f.offer.hourly_usd,
                    f.shape.tensor_parallel,
                    _max_num_seqs(spec, f.shape),
                    f.offer.instance.gpu.name,
                    f.realised,
                    f.offer.market if f.offer.market != offer.market else "",
                )
                for f in plan.fallbacks
                if f.realised != ATTEMPT  # a multi-node replica's: a `gpufit up` attempt of its own
            ),
        ),
        tensor_parallel=shape.tensor_parallel,
        max_num_seqs=_max_num_seqs(spec, shape),
        fleet_units=plan.fleet_units if shape.nodes_per_replica == 1 else 0,
        # a reservation's machines are held, not an on-demand base
        on_demand_base=choice.cost.on_demand_base if offer.market == "spot" else 0,
        spot_allocation=spec.placement.spot_allocation,
        capacity=capacity,
        gcp_instance_flexibility=spec.placement.gcp_instance_flexibility,
    )
