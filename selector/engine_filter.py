"""The engine filter: the build of the model server a plan starts on a machine (a serve plan's, or
the engine a token-generating batch starts for job.command), or why none of the pinned builds
serves the model on that machine's GPU with the driver of the image it boots."""

from __future__ import annotations

from selector.catalog import InstanceType
from selector.engines import EngineBuild, choose_build
from selector.images import boot_image
from selector.sizing import Rejection, Requirements
from selector.spec import WorkloadSpec


def engine_rejection(
    spec: WorkloadSpec,
    req: Requirements,
    it: InstanceType,
    builds: dict[tuple[str, str], EngineBuild | None],
) -> Rejection | None:
    """The engine filter of a plan that starts a model server (a serve plan's, or the engine a
    token-generating batch starts for job.command): the build it launches on ``it`` (recorded in
    ``builds``), or why no pinned build serves the model on its GPU with the driver of the image it
    boots (``selector.engines.choose_build``)."""
    engine = spec.decode_engine
    if engine not in ("vllm", "sglang"):
        return None
    image = boot_image(it.cloud, it.name)
    if image is None:  # no image boots it: the image filter says so
        return None
    chosen = choose_build(engine, req.arch.family, it.gpu, image.nvidia_driver, image.label)
    if isinstance(chosen, str):
        builds[(it.cloud, it.name)] = None
        return Rejection("engine", chosen)
    builds[(it.cloud, it.name)] = chosen
    return None
