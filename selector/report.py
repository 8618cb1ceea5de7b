"""Plans and offers as plain data: the JSON contract of ``gpufit plan --json`` and ``offers --json``."""

from __future__ import annotations

from datetime import date
from typing import Any

from selector.attempt_pin import pin_note
from selector.capacity import capacity_to_dict
from selector.catalog import Offer
from selector.consumption import status as consumption_status, third_party_note
from selector.cost import Cost, cost_inputs, disk_parts, disk_size_gb, job_setup, outputs_note
from selector.fallbacks import Fallback, realised_text
from selector.freshness import age_text, as_of_date
from selector.obtainability import Obtainability, obtainability
from selector.refuge import refuge_note, worst_case_usd
from selector.select import Candidate, Plan, width
from selector.setup_time import SetupTime
from selector.sizing import GIB, Shape


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def obtainability_to_dict(obt: Obtainability) -> dict[str, Any]:
    return {
        "level": obt.level,
        "p_per_hour": _r(obt.p, 4),
        "expected_wait_hours": _r(obt.wait_hours, 3),
        "reasons": list(obt.reasons),
        "estimated": obt.estimated,
        "never_probability": _r(obt.never, 4),
    }


def offer_to_dict(offer: Offer, today: date | None = None) -> dict[str, Any]:
    """One offer as data; with ``today``, the price's age in days as well."""
    it = offer.instance
    gpu = it.gpu
    day = as_of_date(offer.as_of)
    return {
        "cloud": it.cloud,
        "region": offer.region,
        "zone": offer.zone,
        "instance_type": it.name,
        "machine_type": it.machine_type,
        "gpu": gpu.name,
        "gpu_count": it.gpu_count,
        "gpu_memory_gib": _r(gpu.memory_gib, 2),
        "bandwidth_gbps": gpu.bandwidth_gbps,
        "fp8": gpu.fp8,
        "nvlink": it.nvlink,
        "node_interconnect": it.node_interconnect,
        "vcpus": it.vcpus,
        "memory_gib": it.memory_gib,
        "market": offer.market,
        "hourly_usd": offer.hourly_usd,
        "hourly_usd_range": list(offer.hourly_usd_range) if offer.hourly_usd_range else None,
        "interruption_bucket": offer.interruption_bucket,
        "source": offer.source,
        "as_of": offer.as_of,
        "price_age_days": (today - day).days if today is not None and day is not None else None,
        "price_age": age_text(offer.as_of, today) if today is not None else None,
        "confidence": "low" if gpu.estimated or gpu.confidence == "low" else offer.confidence,
        "gpu_figures_estimated": list(gpu.estimated),
        "priced": not offer.unpriced,
        "unpriced_reason": offer.unpriced or None,
        "consumption": consumption_status(it.cloud, it.name, offer.market),
        "consumption_third_party_only": third_party_note(it.cloud, it.name, offer.market),
        "placement_score": offer.placement_score,
        "obtainability": obtainability_to_dict(obtainability(offer)),
        "notes": offer.notes,
    }


def cost_to_dict(cost: Cost) -> dict[str, Any]:
    return {
        "compute_usd": _r(cost.compute_usd, 2),
        "storage_usd": _r(cost.storage_usd, 2),
        "disk_usd": _r(cost.disk_usd, 2),
        "bucket_usd": _r(cost.bucket_usd, 2),
        "egress_usd": _r(cost.egress_usd, 2),
        "data_transfer_usd": _r(cost.data_transfer_usd, 2),
        "total_usd": _r(cost.total_usd, 2),
        "hours": _r(cost.hours, 3),
        "billed_hours": _r(cost.billed_hours, 4),
        "hourly_usd": _r(cost.hourly_usd, 4),
        "spot_overhead_factor": _r(cost.spot_factor, 6),
        "unpriced": list(cost.unpriced),
        "on_demand_base_instances": cost.on_demand_base,
        "expected_wait_hours": _r(cost.wait_hours, 3),
        "wait_value_per_hour": _r(cost.wait_value_per_hour, 4),
        "wait_usd": _r(cost.wait_usd, 2),
        "launch_failure_probability": _r(cost.launch_failure, 4),
        "launch_failure_usd": _r(cost.failure_usd, 2),
        "expected_usd": _r(cost.expected_usd, 2),
        "setup_hours": _r(cost.setup_hours, 3),
    }


def plan_setup(plan: Plan) -> SetupTime | None:
    """The chosen offer's job setup (``selector.setup_time``); None for a service or no choice."""
    if plan.choice is None:
        return None
    return job_setup(plan.choice.offer, cost_inputs(plan.spec, plan.requirements))


def setup_to_dict(plan: Plan) -> dict[str, Any] | None:
    """The ``setup`` block of ``plan --json``: each step's seconds, how they were found, and
    whether it rests on a gpufit estimate; the hours are inside ``cost.hours``."""
    setup = plan_setup(plan)
    if setup is None:
        return None
    return {
        "hours": _r(setup.hours, 3),
        "estimated": setup.estimated,
        "parts": [
            {
                "name": p.name,
                "seconds": _r(p.seconds, 1),
                "formula": p.formula,
                "estimate": p.estimate,
                "sources": [f.key for f in p.sources],
            }
            for p in setup.parts
        ],
        "sources": {f.key: {"title": f.source.split(": ", 1)[1], "url": f.url} for f in setup.sources},
    }


def shape_to_dict(shape: Shape) -> dict[str, Any]:
    return {
        "tensor_parallel": shape.tensor_parallel,
        "gpus_per_replica": shape.gpus_per_replica,
        "nodes_per_replica": shape.nodes_per_replica,
        "replicas_per_instance": shape.replicas_per_instance,
        "replicas": shape.replicas,
        "instances": shape.instances,
        "vram_gib_per_gpu": _r(shape.vram_gib_per_gpu, 2),
        "tokens_per_s_per_stream": _r(shape.tokens_per_s_per_stream, 2),
        "tokens_per_s_per_replica": _r(shape.tokens_per_s_per_replica, 2),
        "job_hours": _r(shape.job_hours, 3),
        "concurrency": shape.concurrency or None,
    }


def candidate_to_dict(candidate: Candidate, today: date | None = None) -> dict[str, Any]:
    out = offer_to_dict(candidate.offer, today)
    out["instances"] = candidate.shape.instances
    out["tokens_per_s_per_stream"] = _r(candidate.shape.tokens_per_s_per_stream, 2)
    out["shape"] = shape_to_dict(candidate.shape)
    out["cost"] = cost_to_dict(candidate.cost)
    return out


def fallback_to_dict(fallback: Fallback, choice: Candidate | None = None) -> dict[str, Any]:
    """One entry of ``choice.fallbacks``: what the fleet may launch instead of the choice, and
    whether it counts toward ``placement.min_fallbacks`` (``selector.breadth_choice.breadth_of``)."""
    offer = fallback.offer
    counts = choice is not None and width(choice, (fallback,)) == 1
    return {
        "counts_toward_min_fallbacks": counts,
        "instance_type": offer.instance.name,
        "machine_type": offer.instance.machine_type,
        "region": offer.region,
        "zone": offer.zone,
        "market": offer.market,
        "hourly_usd": offer.hourly_usd,
        "weighted_capacity": fallback.weighted_capacity,
        "tensor_parallel": fallback.shape.tensor_parallel,
        "instances": fallback.shape.instances,
        "idle_gpus_per_instance": fallback.idle_gpus,
        # GCP: "flexibility" (the choice's MIG), "group" (a MIG of its own); "attempt": a multi-node
        # replica's type, which `gpufit up` deploys on its own
        "realised": fallback.realised or None,
        "realised_how": realised_text(fallback) or None,
        "nodes_per_replica": fallback.shape.nodes_per_replica,
        "total_usd": _r(fallback.cost.total_usd, 2),
        "expected_usd": _r(fallback.cost.expected_usd, 2),
        "obtainability": obtainability_to_dict(obtainability(offer, fallback.shape.nodes_per_replica)),
        "source": offer.source,
        "as_of": offer.as_of,
    }


def plan_to_dict(plan: Plan, today: date | None = None) -> dict[str, Any]:
    """The ``plan --json`` document (keys other tools rely on are listed in the README);
    ``today`` dates the prices (``prices``: the age of the offers considered)."""
    req = plan.requirements
    choice = plan.choice
    shape = choice.shape if choice else None
    requirements: dict[str, Any] = {
        "vram_gib_per_replica": _r(shape.vram_gib_per_replica if shape else req.vram_gib_per_replica, 2),
        "gpus_per_replica": shape.gpus_per_replica if shape else None,
        "nodes": shape.nodes_per_replica if shape else None,
        "needs_fp8": req.needs_fp8,
        "needs_nvlink": shape.needs_nvlink if shape else None,
        "needs_node_interconnect": shape.needs_node_interconnect if shape else None,
        "min_bandwidth_gbps": _r(req.min_bandwidth_gbps or req.min_gpu_bandwidth_gbps or 0.0, 1),
        "host_memory_gib": _r(req.host_bytes / GIB, 2),
        "breakdown": [t.as_dict() for t in req.terms],
        "fit": [t.as_dict() for t in shape.terms] if shape else [],
    }
    spec = plan.spec
    excluded = [e.model_dump(exclude_none=True) for e in spec.placement.exclude]
    return {
        **({"excluded": excluded} if excluded else {}),
        **(
            {"pinned": {**pin.model_dump(exclude_none=True), "note": pin_note(pin)}}
            if (pin := spec.placement.attempt)
            else {}
        ),
        "status": plan.status,
        "workload": {
            "name": spec.name,
            "task": spec.task,
            "model": req.arch.name,
            "precision": spec.precision,
            "fault_tolerance": spec.fault_tolerance,
            "hf": (
                {"repo": req.arch.hf, "revision": spec.model.revision, "commit": req.arch.hf_commit}
                if req.arch.hf_commit
                else None
            ),
        },
        "requirements": requirements,
        "choice": (
            {
                **candidate_to_dict(choice, today),
                "weighted_capacity": choice.shape.replicas_per_instance,
                "fleet_units": plan.fleet_units,
                "fallbacks": [fallback_to_dict(f, plan.choice) for f in plan.fallbacks],
                "fleet_notes": [
                    n
                    for n in (plan.breadth_note, plan.weighted_leave_note, refuge_note(plan))
                    if n is not None
                ],
                "broader_region": (
                    {
                        "region": plan.broader_region.offer.region,
                        "fallbacks_at_least": plan.broader_region.fallbacks,
                        "premium_usd": _r(plan.broader_region.premium_usd, 2),
                    }
                    if plan.broader_region is not None
                    else None
                ),
                "breadth_choice": (
                    {
                        "passed_over": {
                            **offer_to_dict(taken.passed_over, today),
                            "instances": taken.passed_over_instances,
                        },
                        "passed_over_fallbacks": taken.passed_over_fallbacks,
                        "passed_over_obtainability": taken.passed_over_obtainability,
                        "fallbacks": taken.fallbacks,
                        "obtainability": taken.obtainability,
                        "min_fallbacks_reached": taken.reached,
                        "premium_usd": _r(taken.premium_usd, 2),
                        "min_fallbacks": taken.min_fallbacks,
                    }
                    if (taken := plan.breadth_choice) is not None
                    else None
                ),
            }
            if choice
            else None
        ),
        "cost": {**cost_to_dict(choice.cost), "worst_case_usd": _r(worst_case_usd(plan), 2)}
        if choice
        else None,
        "capacity": capacity_to_dict(choice.offer, choice.shape.instances) if choice else None,
        "disk": disk_to_dict(plan),
        "setup": setup_to_dict(plan),
        "alternatives": [candidate_to_dict(c, today) for c in plan.alternatives],
        "rejections": dict(sorted(plan.rejections.items())),
        "rejection_examples": dict(sorted(plan.rejection_examples.items())),
        "closest_misses": [
            {**offer_to_dict(m.offer), "filter": m.rejection.filter, "reason": m.rejection.reason}
            for m in plan.misses
        ],
        "serve": serve_to_dict(plan),
        "offers_considered": plan.considered,
        "offers_feasible": plan.feasible,
        "catalog": {
            "as_of": plan.catalog.as_of,
            "source": plan.catalog.source,
            "path": plan.catalog.path,
        },
        "prices": (
            plan.price_ages.as_dict(today) if plan.price_ages is not None and today is not None else None
        ),
    }


def disk_to_dict(plan: Plan) -> dict[str, Any]:
    """The boot disk per machine: its size, what it holds and the note on outputs."""
    spec, req = plan.spec, plan.requirements
    return {
        "gb": disk_size_gb(spec, req),
        "parts": [{"name": p.name, "gb": _r(p.gb, 1), "why": p.why} for p in disk_parts(spec, req)],
        "given": spec.storage.disk_gb is not None,
        "note": outputs_note(spec),
    }


def serve_to_dict(plan: Plan) -> dict[str, Any] | None:
    """The model server a serve plan launches: the engine build (release, tag, image with its
    digest when recorded, CUDA, the driver it needs and the machine image's), and the checkpoint
    (repo, why that one, FP8 handling, the context it allows)."""
    choice, spec = plan.choice, plan.spec
    if choice is None or choice.engine is None or spec.serving is None:
        return None
    from selector.images import boot_image

    it = choice.offer.instance
    image = boot_image(it.cloud, it.name)
    assert image is not None  # a choice's type boots an image (the plan's image filter)
    served = spec.served()
    return {
        **choice.engine.as_dict(),
        "machine_image": image.image or image.name_filter,
        "machine_image_verified": image.verified,
        "machine_image_driver": image.nvidia_driver,
        "repo": served.repo,
        "repo_why": served.why,
        # the revision the server is started with: the commit the plan sized, else the spec's
        "revision": (
            plan.requirements.arch.hf_commit
            if plan.requirements.arch.hf_commit and served.repo == plan.requirements.arch.hf
            else spec.model.revision
        ),
        "fp8": served.fp8 or None,
        "max_context": served.context_limit,
        "yarn": (
            {"factor": served.yarn.factor, "original_max_position_embeddings": served.yarn.original}
            if served.yarn
            else None
        ),
        "download_bytes": round(served.download_bytes),
        "download_note": served.download_note,
    }


def failure_summary(plan: Plan, misses: int = 3) -> list[str]:
    """Why a plan has no choice, in a few lines: the verdict, the rejection counts, the
    closest misses with their reasons (for the Pulumi program and other non-TTY callers)."""
    verdict = "over budget" if plan.status == "over-budget" else "nothing feasible"
    counts = ", ".join(f"{name} {n}" for name, n in sorted(plan.rejections.items(), key=lambda kv: -kv[1]))
    lines = [f"{plan.spec.name}: {verdict} among {plan.considered} offers (rejected: {counts})"]
    if "capacity" in plan.rejection_examples:  # the capacity section's reason, no offer's
        lines.append(f"  capacity: {plan.rejection_examples['capacity']}")
    for miss in plan.misses[:misses]:
        o = miss.offer
        lines.append(
            f"  closest: {o.instance.cloud} {o.instance.name} in {o.zone or o.region} ({o.market}, "
            f"${o.hourly_usd:,.2f}/h): {miss.rejection.filter}: {miss.rejection.reason}"
        )
    return lines
