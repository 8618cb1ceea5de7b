"""The Pulumi program: read the stack's workload, plan it, provision the choice, export.

Composition root only. An invalid spec, an infeasible or over-budget plan fails the program
with the selector's message before any resource is registered.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pulumi

from catalog.store import resolve
from deployment import Deployment, ServingError, deployment_from_plan, parse_iso_utc
from deployment.capacity import block_wait_refusal, calendar_refusal, purchase_refusal
from gitops.lock import (
    lock_path,
    locked_catalog,
    pin_locked_model,
    read_lock,
    reviewed_difference,
    spec_hash,
)
from hub.client import fetch_model
from providers.base import GpuProvider, SecretInputs
from selector.block_lock import expired_offering, locked_quotes
from selector.catalog import Catalog, CatalogError
from selector.report import failure_summary
from selector.select import Plan, plan
from selector.spec import STACK_KEY, SpecError, WorkloadSpec, parse_spec, use_hub

use_hub(fetch_model)  # model.hf alone: sized from the Hub's config.json (cached), as in the CLI


def build_plan(config: pulumi.Config, today: date | None = None) -> Plan:
    """The selector's plan for this stack's ``gpufit:workload``; RunError when unusable."""
    raw = config.get_object("workload")
    if raw is None:
        raise pulumi.RunError(f"{STACK_KEY} is not set: add it under config: in the stack file")
    lock_file = lock_path(
        Path(__file__).parent / (config.get("lockDir") or "stacks") / f"Pulumi.{pulumi.get_stack()}.yaml"
    )
    if lock_file.exists():
        with contextlib.suppress(ValueError):  # an unreadable lock is refused below, with its reason
            pin_locked_model(read_lock(lock_file))  # the model at the reviewed commit
    try:
        spec = parse_spec(raw, source=f"stack {pulumi.get_stack()}", prefix=STACK_KEY)
    except SpecError as err:
        raise pulumi.RunError(
            "invalid workload spec:\n" + "\n".join(f"  {p}" for p in err.problems)
        ) from None
    try:
        resolved = resolve(config.get("catalog") or None)
    except CatalogError as err:
        raise pulumi.RunError(f"catalog: {err}") from None
    if resolved.warning:
        pulumi.log.warn(resolved.warning)
    catalog = resolved.catalog
    if lock_file.exists():
        catalog = _locked(lock_file, spec, catalog)
    else:
        pulumi.log.info(
            f"no {lock_file.name}: planning against the current catalog (`gpufit lock` pins a choice)"
        )
    # A live Capacity Block offering the lock holds is re-planned, and bought, as reviewed.
    quotes = locked_quotes(read_lock(lock_file)) if lock_file.exists() else None
    result = plan(spec, catalog, today=today, block_quotes=quotes)
    if result.choice is None:
        raise pulumi.RunError("\n".join(failure_summary(result)))
    if lock_file.exists():
        _same_as_reviewed(lock_file, result)
    return result


def _same_as_reviewed(lock_file: Path, result: Plan) -> None:
    """The plan of the locked offers must be the one the review saw: same machines, market,
    price and fallback list."""
    difference = reviewed_difference(read_lock(lock_file), result)
    if difference is not None:
        raise pulumi.RunError(
            f"{lock_file.name}: {difference}; run `gpufit lock {pulumi.get_stack()}` and review the change"
        )


def _locked(lock_file: Path, spec: WorkloadSpec, catalog: Catalog) -> Catalog:
    """The reviewed choice from the stack's lock, or RunError if the spec changed since."""
    try:
        lock = read_lock(lock_file)
    except ValueError as err:
        raise pulumi.RunError(str(err)) from None
    if lock["spec_sha256"] != spec_hash(spec):
        raise pulumi.RunError(
            f"{lock_file.name} was made for a different spec: the workload changed since it was reviewed; "
            f"run `gpufit lock {pulumi.get_stack()}` and commit the new lock"
        )
    offer = lock["offer"]
    pulumi.log.info(
        f"provisioning the locked choice of {lock['locked_at']}: {offer['cloud']} {offer['instance_type']} "
        f"in {offer['zone'] or offer['region']} ({offer['market']}, ${offer['hourly_usd']}/h)"
    )
    return locked_catalog(lock, catalog.gpus)


def _expired_block(config: pulumi.Config, now: datetime, region: str) -> str | None:
    """One line when the lock's Capacity Block offering has started (it cannot be bought) and
    the stack has not bought it; a stack that holds it runs on (a later up or preview)."""
    lock_file = lock_path(
        Path(__file__).parent / (config.get("lockDir") or "stacks") / f"Pulumi.{pulumi.get_stack()}.yaml"
    )
    lock = read_lock(lock_file) if lock_file.exists() else {}
    refusal = expired_offering(lock, now)
    if refusal is None:
        return None
    from providers.aws.capacity import block_bought

    return None if block_bought(str(lock["capacity_block"]["offering_id"]), region) else refusal


def job_secrets() -> dict[str, Any]:
    """The values of ``gpufit:secrets`` (``pulumi config set --secret --path
    'gpufit:secrets.KEY' VALUE``), each a Pulumi secret; RunError when the key holds plain
    text (it would sit in the stack file) or is not a mapping of strings."""
    key = "gpufit:secrets"
    raw = pulumi.runtime.get_config(key)
    if raw is None:
        return {}
    if not pulumi.runtime.is_config_secret(key):
        raise pulumi.RunError(
            f"{key} is plain text in the stack's config: set each value with "
            f"`pulumi config set --secret --path '{key}.NAME' VALUE`"
        )
    try:
        values = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        values = None
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise pulumi.RunError(f"{key} must map names to strings (`--path '{key}.NAME'`)")
    return {name: pulumi.Output.secret(value) for name, value in values.items()}


def cloud_provider(deployment: Deployment) -> GpuProvider:
    """The chosen cloud's provider, with an explicit Pulumi provider for the plan's region."""
    if deployment.cloud == "aws":
        import pulumi_aws as aws

        from providers.aws.component import AwsProvider

        return AwsProvider(aws.Provider(f"aws-{deployment.region}", region=deployment.region))
    import pulumi_gcp as gcp

    from providers.gcp.component import GcpProvider

    project = pulumi.Config("gcp").require("project")
    return GcpProvider(
        gcp.Provider(f"gcp-{deployment.region}", project=project, region=deployment.region), project=project
    )


def main(now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> dict[str, Any]:
    config = pulumi.Config("gpufit")
    created = now()
    result = build_plan(config, created.date())
    pinned = config.get("expiresAt") or None
    try:
        expires_at = parse_iso_utc(pinned) if pinned else None
        deployment = deployment_from_plan(
            result,
            stack=pulumi.get_stack(),
            project=pulumi.get_project(),
            created_at=created,
            expires_at=expires_at,
            image=config.get("image") or None,
            subnet_id=config.get("subnetId") or None,
        )
    except ServingError as err:
        raise pulumi.RunError(str(err)) from None
    except ValueError as err:
        raise pulumi.RunError(f"gpufit:expiresAt: {err}") from None
    # A Capacity Block is money paid up front, not refundable: bought only when confirmed.
    refusal = purchase_refusal(deployment.capacity, config.get_bool("purchaseCapacityBlock") is True)
    refusal = refusal or block_wait_refusal(deployment.capacity, deployment.grouped)
    refusal = refusal or _expired_block(config, created, deployment.region)
    refusal = refusal or calendar_refusal(
        deployment.capacity, config.get_bool("createCalendarReservation") is True, deployment.created_at
    )
    if refusal is not None:
        raise pulumi.RunError(refusal)
    if deployment.zone is not None:
        pulumi.log.info(
            f"{deployment.instance_type} {deployment.market} is priced for {deployment.zone}: "
            f"the machines launch in {deployment.zone} only"
        )
    given_key = config.get("apiKey")  # read to check its strength only; it moves as a secret
    if given_key is not None and deployment.server is not None:
        from providers.secrets import api_key_problem

        weak = api_key_problem(given_key)
        if weak:
            raise pulumi.RunError(weak)
    secrets = SecretInputs(
        api_key=config.get_secret("apiKey"), hf_token=config.get_secret("hfToken"), config=job_secrets()
    )
    outputs = cloud_provider(deployment).provision(deployment, secrets)
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs


if __name__ == "__main__":
    main()
