"""The ``secrets`` section: environment variables the job gets from a secret store, never from
the spec, user data, metadata, tags or logs.

Each entry maps a variable name to where its value lives:

- a key of the stack's secret config ``gpufit:secrets`` (``pulumi config set --secret --path
  'gpufit:secrets.wandb' ...``): gpufit stores it in the cloud's secret store;
- an existing AWS Secrets Manager secret, by ARN
  (``arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-xxxxxx``);
- an existing GCP Secret Manager secret, by resource name (``projects/PROJECT/secrets/NAME``).

The machine fetches every value at boot into a root-only file and exports it to the job. The
names and references are validated here so that none can change a script or a policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

MAX_SECRETS = 20

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
"""A POSIX-shell-safe variable name (upper case, as environment variables are by convention)."""

RESERVED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "SHELL",
        "PWD",
        "IFS",
        "ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "HF_TOKEN",
        "VLLM_API_KEY",
        "CUDA_VISIBLE_DEVICES",
    }
)
"""Names the machine sets itself (``HF_TOKEN`` comes from ``gpufit:hfToken``) or that would
change how the job's shell and Python start."""

RESERVED_PREFIXES = ("GPUFIT_", "AWS_", "LD_", "BASH_", "TORCHELASTIC_")

CONFIG_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")

AWS_SECRET_ARN = re.compile(
    r"arn:aws[a-z-]*:secretsmanager:[a-z]{2}(?:-[a-z]+)+-\d:\d{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}"
)
"""A Secrets Manager secret ARN (names: letters, digits and ``/_+=.@-``, per the
CreateSecret API's ``Name`` constraint,
https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html)."""

GCP_SECRET_NAME = re.compile(
    r"projects/(?:[a-z][a-z0-9-]{4,28}[a-z0-9]|\d{1,20})/secrets/[A-Za-z0-9_-]{1,255}"
)
"""A Secret Manager secret's resource name: a project id (6-30 characters, lower case) or
number, and a secret id of letters, digits, ``_`` and ``-`` up to 255
(https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets/create)."""

Kind = Literal["config", "aws", "gcp"]


@dataclass(frozen=True)
class SecretSource:
    """One job secret: the variable it becomes and where its value is."""

    env: str
    kind: Kind
    ref: str  # the config key, the ARN or the resource name

    @property
    def cloud(self) -> str | None:
        """The cloud an existing secret lives in (None for a config value, stored anywhere)."""
        return None if self.kind == "config" else self.kind


def secret_kind(ref: str) -> Kind | None:
    """What a reference names, or None when it is none of the accepted forms."""
    if AWS_SECRET_ARN.fullmatch(ref):
        return "aws"
    if GCP_SECRET_NAME.fullmatch(ref):
        return "gcp"
    if CONFIG_KEY.fullmatch(ref):
        return "config"
    return None


def secret_problems(secrets: dict[str, str]) -> list[str]:
    """One line per entry that is not a safe variable name with an accepted reference."""
    problems: list[str] = []
    if len(secrets) > MAX_SECRETS:
        problems.append(f"{len(secrets)} secrets; at most {MAX_SECRETS}")
    for env, ref in secrets.items():
        if not ENV_NAME.fullmatch(env):
            problems.append(f"{env!r}: expected an upper-case variable name such as WANDB_API_KEY")
        elif env in RESERVED_NAMES or env.startswith(RESERVED_PREFIXES):
            problems.append(
                f"{env}: reserved (the machine sets it"
                + ("; give the Hugging Face token as gpufit:hfToken" if env == "HF_TOKEN" else "")
                + ")"
            )
        if not isinstance(ref, str) or secret_kind(ref) is None:
            problems.append(
                f"{env}: got {ref!r}; expected a key of the stack's secret config gpufit:secrets "
                "(letters, digits, _ -), a Secrets Manager ARN, or projects/PROJECT/secrets/NAME"
            )
    return problems


def secret_sources(secrets: dict[str, str]) -> tuple[SecretSource, ...]:
    """The validated entries, by variable name."""
    found = []
    for env in sorted(secrets):
        kind = secret_kind(secrets[env])
        assert kind is not None, "validated by secret_problems"
        found.append(SecretSource(env, kind, secrets[env]))
    return tuple(found)
