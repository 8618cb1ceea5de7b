"""The policy config a stack's own file implies, for ``--policy-pack-config``: the pack cannot
read stack config, so the workflows derive it from ``stacks/Pulumi.<stack>.yaml``. Today one
key: ``gpufit-no-plain-http.allow_plain_http`` from the spec's ``serving.allow_plain_http``
(https://www.pulumi.com/docs/iac/using-pulumi/crossguard/configuration/)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def policy_config(stack_file: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{policy name: config}`` for a parsed stack file; plain HTTP is allowed only when the
    workload says ``serving.allow_plain_http: true`` (the literal boolean)."""
    config = stack_file.get("config")
    workload = config.get("gpufit:workload") if isinstance(config, Mapping) else None
    serving = workload.get("serving") if isinstance(workload, Mapping) else None
    plain = isinstance(serving, Mapping) and serving.get("allow_plain_http") is True
    return {"gpufit-no-plain-http": {"allow_plain_http": plain}}


if __name__ == "__main__":
    loaded = yaml.safe_load(Path(sys.argv[1]).read_text(encoding="utf-8"))
    print(json.dumps(policy_config(loaded if isinstance(loaded, Mapping) else {})))
