"""The machine's secrets on AWS: Secrets Manager secrets whose values only Pulumi state holds
(encrypted as secrets), named to the machine by ARN, readable by its instance role alone.

- the model server's API key (``gpufit:apiKey``, else generated) when gpufit starts a server;
- the Hugging Face token (``gpufit:hfToken``) for every task: the server and the job get it
  as ``HF_TOKEN``;
- the spec's ``secrets`` whose values come from the stack's secret config ``gpufit:secrets``;
  those naming an existing secret by ARN are only read (the role may read exactly those ARNs;
  a secret encrypted with a customer-managed KMS key also needs ``kms:Decrypt`` granted on
  that key, which gpufit does not do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from deployment import Deployment
from machine.serving import MachineSecrets
from providers.base import SecretInputs
from providers.secrets import api_key_input, warn_if_gated


@dataclass
class AwsMachineSecrets:
    """The secrets' ARNs (created or referenced) and the API key's value (a Pulumi secret)."""

    api_key: pulumi.Output[str] | None
    hf_token: pulumi.Output[str] | None
    job: list[tuple[str, pulumi.Output[str]]]
    existing: list[str]  # ARNs the spec names; read, not created
    api_key_value: pulumi.Output[str] | None

    def arns(self) -> pulumi.Output[list[str]]:
        """Every ARN the machine reads, in the order ``refs`` takes them."""
        return pulumi.Output.all(
            self.api_key or "", self.hf_token or "", *[arn for _, arn in self.job]
        ).apply(lambda v: [str(a) for a in v])

    def refs(self, d: Deployment, arns: list[str]) -> MachineSecrets:
        """What the boot script names, from ``arns()`` resolved."""
        return MachineSecrets(
            "aws",
            d.region,
            arns[0] or None,
            arns[1] or None,
            job=tuple((env, arn) for (env, _), arn in zip(self.job, arns[2:], strict=True)),
        )


def read_statements(arns: list[str], existing: list[str]) -> list[dict[str, Any]]:
    """The instance role's read of its own secrets, by ARN; an existing secret named without
    its six-character suffix matches with ``-??????`` (the suffix Secrets Manager appends)."""
    mine = [a for a in arns if a]
    if not mine:
        return []
    partial = [f"{a}-??????" for a in existing if a in mine]
    return [
        {
            "Sid": "ReadOwnSecrets",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue"],
            "Resource": mine + partial,
        }
    ]


def _secret(
    name: str,
    d: Deployment,
    key: str,
    what: str,
    value: pulumi.Input[str],
    tags: dict[str, str],
    child: pulumi.ResourceOptions,
) -> pulumi.Output[str]:
    secret = aws.secretsmanager.Secret(
        f"{name}-{key}",
        name_prefix=f"gpufit/{d.name}/{key}-",
        description=f"gpufit {d.workload} ({d.stack}): {what}",
        recovery_window_in_days=7,
        tags=tags,
        opts=child,
    )
    aws.secretsmanager.SecretVersion(
        f"{name}-{key}-value",
        secret_id=secret.id,
        secret_string=pulumi.Output.secret(value),
        opts=child,
    )
    return secret.arn


def machine_secrets(
    name: str, d: Deployment, given: SecretInputs | None, tags: dict[str, str], child: pulumi.ResourceOptions
) -> AwsMachineSecrets:
    """Create the deployment's secrets (see the module doc)."""
    given = given or SecretInputs()
    api_key_value: pulumi.Output[str] | None = None
    api_key = None
    if d.server is not None:
        key_input = api_key_input(name, given.api_key, child)
        api_key_value = pulumi.Output.secret(key_input)
        api_key = _secret(name, d, "api-key", "the endpoint's API key", key_input, tags, child)
        warn_if_gated(d, given.hf_token)
    hf_token = (
        _secret(name, d, "hf-token", "the Hugging Face token", given.hf_token, tags, child)
        if given.hf_token is not None
        else None
    )
    job: list[tuple[str, pulumi.Output[str]]] = []
    existing: list[str] = []
    for source in d.secrets:
        if source.kind == "config":
            value = given.config[source.ref]
            key = f"secret-{source.env.lower()}"
            job.append((source.env, _secret(name, d, key, f"secrets.{source.env}", value, tags, child)))
        else:
            existing.append(source.ref)
            job.append((source.env, pulumi.Output.from_input(source.ref)))
    return AwsMachineSecrets(api_key, hf_token, job, existing, api_key_value)
