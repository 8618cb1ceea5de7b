"""What both clouds' endpoints do with the secrets before storing them: generate the API key
when the stack gives none (``pulumi_random``, 48 letters and digits), and warn when a model
whose organisation gates its repos has no Hugging Face token."""

from __future__ import annotations

import pulumi
import pulumi_random as random

from deployment import Deployment


def api_key_input(
    name: str, given: pulumi.Input[str] | None, opts: pulumi.ResourceOptions
) -> pulumi.Input[str]:
    """The stack's ``gpufit:apiKey``, else a generated one (a secret output either way)."""
    if given is not None:
        return given
    return random.RandomPassword(f"{name}-api-key-gen", length=48, special=False, opts=opts).result


def warn_if_gated(d: Deployment, hf_token: pulumi.Input[str] | None) -> None:
    """A warning for a model of a gating organisation served without a token (the repos of
    ``meta-llama`` are refused outright: ``deployment.missing_token``)."""
    if hf_token is None and d.hf_gated:
        pulumi.log.warn(
            f"{d.server.model if d.server else 'the model'} may be gated on Hugging Face: set its token "
            "with `pulumi config set --secret gpufit:hfToken hf_...` if the download is refused"
        )
