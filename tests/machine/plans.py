"""Deployments of the example stacks, as the Pulumi program makes them, for the machine tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

from deployment import Deployment, deployment_from_plan
from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.spec import load_spec, parse_spec
from tests.conftest import ROOT
from tests.pulumi_harness import stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
MULTI_NODE = {"placement": {"regions": ["us-west-2"], "instance_types": ["p5e.48xlarge"]}}
"""llama70b-full-ft kept on p5e.48xlarge, where its training state needs two nodes."""
ON_GCP = {"placement": {"clouds": ["gcp"]}}


@cache
def _planned(stack: str, changes: str) -> tuple[Deployment, Plan]:
    extra: dict[str, Any] = json.loads(changes)
    if extra:
        workload = stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"]
        spec = parse_spec({**workload, **extra})
    else:
        spec = load_spec(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    result = plan(spec, load_catalog())
    return deployment_from_plan(result, stack="dev", project="gpufit", created_at=NOW), result


def deployment(stack: str, **changes: Any) -> tuple[Deployment, Plan]:
    """The stack's deployment (with ``changes`` merged into its workload), planned once."""
    return _planned(stack, json.dumps(changes, sort_keys=True))


@cache
def fixture_deployment(path: str) -> tuple[Deployment, Plan]:
    """The deployment of a spec under ``tests/fixtures/`` (``realistic/09-...``), planned once."""
    result = plan(load_spec(ROOT / "tests" / "fixtures" / f"{path}.yaml"), load_catalog())
    return deployment_from_plan(result, stack="dev", project="gpufit", created_at=NOW), result
