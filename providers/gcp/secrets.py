"""The machine's secrets on GCP: Secret Manager secrets that only the VMs' service account may
read (``roles/secretmanager.secretAccessor`` on each secret), named to the machine by id.

- the model server's API key (``gpufit:apiKey``, else generated) when gpufit starts a server;
- the Hugging Face token (``gpufit:hfToken``) for every task, ``HF_TOKEN`` to the server and
  the job alike;
- the spec's ``secrets`` whose values come from the stack's secret config ``gpufit:secrets``;
  those naming an existing secret (``projects/P/secrets/S``) get the same accessor grant on
  that secret (an additive IAM member, removed with the stack), nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment
from machine.serving import MachineSecrets
from providers.base import SecretInputs
from providers.secrets import api_key_input, warn_if_gated

SECRET_ACCESSOR = "roles/secretmanager.secretAccessor"


@dataclass
class GcpMachineSecrets:
    """The secrets' names (ours: secret ids in the project; existing: resource names)."""

    api_key: pulumi.Output[str] | None
    hf_token: pulumi.Output[str] | None
    job: list[tuple[str, pulumi.Output[str]]]
    api_key_value: pulumi.Output[str] | None

    def names(self) -> pulumi.Output[list[str]]:
        """Every name the machine reads, in the order ``refs`` takes them."""
        return pulumi.Output.all(self.api_key or "", self.hf_token or "", *[n for _, n in self.job]).apply(
            lambda v: [str(n) for n in v]
        )

    def refs(self, d: Deployment, names: list[str], project: str) -> MachineSecrets:
        return MachineSecrets(
            "gcp",
            d.region,
            names[0] or None,
            names[1] or None,
            project,
            tuple((env, name) for (env, _), name in zip(self.job, names[2:], strict=True)),
        )


def _secret(
    base: str, key: str, value: pulumi.Input[str], readers: Sequence[pulumi.Input[str]],
    labels: dict[str, str], child: pulumi.ResourceOptions,
) -> pulumi.Output[str]:  # fmt: skip
    secret = gcp.secretmanager.Secret(
        f"{base}-{key}",
        secret_id=f"{base[:40]}-{key}",
        replication=gcp.secretmanager.SecretReplicationArgs(
            auto=gcp.secretmanager.SecretReplicationAutoArgs()
        ),
        labels=labels,
        opts=child,
    )
    gcp.secretmanager.SecretVersion(
        f"{base}-{key}-value", secret=secret.id, secret_data=pulumi.Output.secret(value), opts=child
    )
    for n, reader in enumerate(readers):
        gcp.secretmanager.SecretIamMember(
            f"{base}-{key}-reader{n or ''}",
            secret_id=secret.id,
            role=SECRET_ACCESSOR,
            member=reader,
            opts=child,
        )
    return secret.secret_id


def uses_secret_manager(d: Deployment, given: SecretInputs | None) -> bool:
    """Whether the stack makes or grants Secret Manager secrets (an endpoint's API key, the
    Hugging Face token, the spec's secrets): then it must enable the API first."""
    return d.server is not None or (given is not None and given.hf_token is not None) or bool(d.secrets)


def machine_secrets(
    base: str,
    d: Deployment,
    readers: Sequence[pulumi.Input[str]],
    given: SecretInputs | None,
    labels: dict[str, str],
    child: pulumi.ResourceOptions,
) -> GcpMachineSecrets:
    """Create the deployment's secrets, each readable by ``readers`` (the VMs' service account
    members: a spot endpoint's on-demand groups' VMs have an account of their own) alone; grant
    them the spec's existing secrets."""
    given = given or SecretInputs()
    api_key = api_key_value = None
    if d.server is not None:
        key_input = api_key_input(base, given.api_key, child)
        api_key_value = pulumi.Output.secret(key_input)
        api_key = _secret(base, "api-key", key_input, readers, labels, child)
        warn_if_gated(d, given.hf_token)
    hf_token = (
        _secret(base, "hf-token", given.hf_token, readers, labels, child)
        if given.hf_token is not None
        else None
    )
    job: list[tuple[str, pulumi.Output[str]]] = []
    for source in d.secrets:
        key = f"secret-{source.env.lower().replace('_', '-')}"
        if source.kind == "config":
            job.append((source.env, _secret(base, key, given.config[source.ref], readers, labels, child)))
            continue
        project, name = source.ref.split("/")[1], source.ref.split("/")[3]
        for n, reader in enumerate(readers):
            gcp.secretmanager.SecretIamMember(
                f"{base}-{key}-reader{n or ''}",
                project=project,
                secret_id=name,
                role=SECRET_ACCESSOR,
                member=reader,
                opts=child,
            )
        job.append((source.env, pulumi.Output.from_input(source.ref)))
    return GcpMachineSecrets(api_key, hf_token, job, api_key_value)
