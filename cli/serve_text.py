"""What a serve plan launches, as the plan's ``Serve`` lines: the engine build and the machine
image's driver, the checkpoint and the server's numbers, and how the endpoint is reached."""

from __future__ import annotations

from selector.select import Plan


def serve_lines(plan: Plan) -> list[str]:
    """The model server gpufit will start, and how the endpoint is reached (with a warning
    when it is plain HTTP); a reason when the server cannot be started as planned."""
    from deployment import ServingError, server_launch

    spec = plan.spec
    try:
        launch = server_launch(plan)
    except ServingError as err:
        return [f"cannot start the server: {err}"]
    if launch is None or spec.serving is None:
        return []
    at = f" at {'commit' if plan.requirements.arch.hf_commit else 'revision'} {launch.revision}"
    lines = [
        *engine_lines(plan),
        f"{launch.model}{at if launch.revision else ''} ({spec.served().why}): TP {launch.tensor_parallel}, "
        f"max-model-len {launch.max_model_len}, max-num-seqs {launch.max_num_seqs}, "
        f"{launch.replicas} per machine on port{'s' if launch.replicas > 1 else ''} "
        f"{', '.join(str(p) for p in launch.ports())}; healthy within {launch.grace_seconds // 60} min",
    ]
    extras = [
        *(["FP8 quantised as it loads (" + launch.quantization + ")"] if launch.quantization else []),
        *(["--trust-remote-code"] if launch.trust_remote_code else []),
        *([f"YaRN to {spec.served().context_limit:,} tokens"] if launch.rope_override else []),
        *([f"engine_args {' '.join(launch.engine_args)}"] if launch.engine_args else []),
    ]
    if extras:
        lines.append("; ".join(extras))
    from deployment import ALWAYS_GATED, lifetime_hours

    if launch.grace_seconds >= lifetime_hours(plan) * 3600:
        lines.append(
            f"WARNING: loading may take {launch.grace_seconds // 60} min, longer than the machines live "
            f"({lifetime_hours(plan) * 60:.0f} min): `pulumi up` refuses it; give a longer duration"
        )
    if launch.model.startswith(ALWAYS_GATED):
        lines.append("gated model: `pulumi config set --secret gpufit:hfToken hf_...` before `pulumi up`")
    if spec.serving.expose == "load_balancer":
        https = not spec.serving.allow_plain_http
        lines.append(
            f"load balancer for {', '.join(spec.access.api_cidrs)} over {'HTTPS' if https else 'HTTP'}"
            + (
                ""
                if https
                else " (WARNING: serving.allow_plain_http: requests and the API key travel unencrypted)"
            )
        )
    else:
        lines.append("private: no inbound route; the stack's port_forward output brings it to localhost")
    return lines


def engine_lines(plan: Plan) -> list[str]:
    """The engine build the plan launches: release, tag (or digest) and CUDA, and the driver of
    the machine image it runs on."""
    from selector.images import boot_image

    choice = plan.choice
    build = choice.engine if choice is not None else None
    if build is None or choice is None:
        return []
    it = choice.offer.instance
    image = boot_image(it.cloud, it.name)
    assert image is not None  # a choice's type boots an image (the plan's image filter)
    pinned = f"digest {build.digest}" if build.digest else "tag (no digest recorded yet)"
    return [
        f"{build.label}, released {build.released}, pinned by {pinned}; needs driver ≥ "
        f"{build.min_driver}, the {it.cloud} image {image.label} ships {image.nvidia_driver}"
        + (
            ""
            if image.verified
            else " (unverified: no statement by the cloud found; selector/data/images.yaml)"
        )
    ]
