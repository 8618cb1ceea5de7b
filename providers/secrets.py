"""What both clouds' endpoints do with the secrets before storing them: generate the API key
when the stack gives none (``pulumi_random``, 48 letters and digits), and warn when a model
whose organisation gates its repos has no Hugging Face token."""

from __future__ import annotations

import pulumi
import pulumi_random as random

from deployment import Deployment
from providers.key_strength import estimated_bits

API_KEY_MIN_CHARS = 32
"""A given ``gpufit:apiKey`` has at least 32 characters (the generated one has 48 letters and
digits, about 285 bits): the key is the endpoint's only credential, tried over the internet."""
API_KEY_MIN_BITS = 90.0
"""And the guesses it costs an attacker who tries runs, sequences, keyboard walks, repeats and
common words first (``providers.key_strength``) are at least 2**90: a random hex key of 32
characters (``openssl rand -hex 16``, 128 bits) passes (tests/test_endpoint_tls.py checks
100,000 of them), ``qwertyuiop...`` or ``mysupersecretapikey...`` does not."""


def api_key_problem(key: str) -> str | None:
    """Why a given API key is too weak (one line naming ``gpufit:apiKey``, nothing measured about
    the key, which would land in CI logs), or None."""
    fix = (
        'set a random one with `pulumi config set --secret gpufit:apiKey "$(openssl rand -hex 24)"`, '
        "or unset it to have one generated"
    )
    if len(key) < API_KEY_MIN_CHARS:
        return f"gpufit:apiKey: too short (at least {API_KEY_MIN_CHARS} characters); {fix}"
    if estimated_bits(key) < API_KEY_MIN_BITS:
        return (
            f"gpufit:apiKey: too guessable (runs, sequences, keyboard walks, repeats or common words); {fix}"
        )
    return None


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
