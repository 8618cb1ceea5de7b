"""The gpufit policy pack: ``pulumi preview --policy-pack policy [--policy-pack-config FILE]``.

Wires the plain validators of ``gpufit_policies`` into pulumi_policy policies, all MANDATORY.
The only clock read in the pack is here: each validation takes ``now`` = ``datetime.now(UTC)``
unless the policy's config pins ``now``.

The pack runs from the repository: ``selector`` (for catalog prices) and the pack's own
``policy.resources`` and ``policy.pricing`` are imported from the directory above this one, put
on ``sys.path`` below, rather than installed, because installing the gpufit project into the
pack's virtualenv would pull in google-cloud-billing, whose protobuf>=6.33 conflicts with
pulumi-policy's protobuf~=5.29 (see README.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _entry in (str(HERE), str(HERE.parent)):
    if _entry not in sys.path:
        sys.path.insert(0, _entry)

from gpufit_policies import (  # noqa: E402
    PolicyConfig,
    check_backend_armor,
    check_bucket_access_blocks,
    check_disk_encryption,
    check_endpoint_access,
    check_expiry,
    check_fleet_deadline,
    check_hourly_budget,
    check_imdsv2,
    check_ingress_union,
    check_known_compute,
    check_no_open_ingress,
    check_no_secrets_in_boot_data,
    check_open_endpoint_structure,
    check_plain_http,
    check_private_buckets,
    check_stack,
    check_stack_budget,
    config_from,
)
from pulumi_policy import (  # noqa: E402
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

ResourceCheck = Callable[[ResourceValidationArgs, PolicyConfig], list[str]]
StackCheck = Callable[[Sequence[tuple[Any, ...]], PolicyConfig], list[str]]

NOW_SCHEMA: dict[str, dict[str, Any]] = {
    "now": {"type": "string", "description": "Pin the present (ISO 8601 with a zone); default: the clock"},
}
NO_SCHEMA: dict[str, dict[str, Any]] = {}
BUDGET_SCHEMA: dict[str, dict[str, Any]] = {
    "max_hourly_usd": {"type": "number", "minimum": 0, "description": "The stack's hourly budget, USD"},
    "catalog": {"type": "string", "description": "Catalog file to price against; default the snapshot"},
}
PLAIN_HTTP_SCHEMA: dict[str, dict[str, Any]] = {
    "allow_plain_http": {
        "type": "boolean",
        "description": "The stack's serving.allow_plain_http (policy/stack_config.py); default false",
    },
}


def _provider_region(provider: Any) -> str | None:
    """The region of the resource's provider (aws/gcp provider ``region`` input), if known."""
    if provider is None:
        return None
    try:
        region = provider.props.get("region")
    except Exception:  # an unknown value during preview
        return None
    return region if isinstance(region, str) and region else None


def _property_dependencies(resource: Any) -> dict[str, list[str]]:
    """``{property: [urn, ...]}``: the resources each property's value came from
    (``PolicyResource.property_dependencies``, known in a preview where ids are not)."""
    deps = getattr(resource, "property_dependencies", None) or {}
    return {str(k): [str(getattr(d, "urn", d)) for d in v or []] for k, v in deps.items()}


def _config(raw: Mapping[str, Any], report_violation: ReportViolation) -> PolicyConfig | None:
    try:
        return config_from(raw, now=datetime.now(UTC))
    except ValueError as err:
        report_violation(f"invalid policy config: {err}", None)
        return None


def resource_policy(
    name: str, description: str, check: ResourceCheck, schema: dict[str, dict[str, Any]]
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        config = _config(args.get_config(), report_violation)
        if config is None:
            return
        for message in check(args, config):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties=schema),
    )


def stack_policy(
    name: str, description: str, check: StackCheck, schema: dict[str, dict[str, Any]]
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        config = _config(args.get_config(), report_violation)
        if config is None:
            return
        resources = [
            (r.resource_type, r.props, _provider_region(r.provider), r.urn, _property_dependencies(r))
            for r in args.resources
        ]
        for message in check(resources, config):
            report_violation(message, None)

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties=schema),
    )


POLICIES = [
    resource_policy(
        "gpufit-expiry",
        "GPU instances and machine templates carry a valid, unexpired gpufit expiry tag/label; GCP VMs "
        "and templates a DELETE deadline.",
        lambda args, config: check_expiry(args.resource_type, args.props, config),
        NOW_SCHEMA,
    ),
    stack_policy(
        "gpufit-aws-deadline-schedule",
        "A stack with AWS instances holds an EventBridge schedule that terminates them at the deadline.",
        check_stack,
        NOW_SCHEMA,
    ),
    stack_policy(
        "gpufit-fleet-deadline",
        "Every Auto Scaling group is scaled to 0 at its deadline; every managed instance group resized to 0.",
        check_fleet_deadline,
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-hourly-budget",
        "A GPU instance's catalog hourly price is within max_hourly_usd.",
        lambda args, config: check_hourly_budget(
            args.resource_type, args.props, config, region=_provider_region(args.provider)
        ),
        BUDGET_SCHEMA,
    ),
    stack_policy(
        "gpufit-stack-hourly-budget",
        "The stack's GPU instances and fleet groups (at their dearest type) cost at most max_hourly_usd.",
        check_stack_budget,
        BUDGET_SCHEMA,
    ),
    resource_policy(
        "gpufit-imdsv2",
        "AWS instances and launch templates require IMDSv2 (metadataOptions.httpTokens = required).",
        lambda args, config: check_imdsv2(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-encrypted-disks",
        "AWS root, EBS block devices, launch-template volumes and EBS volumes are encrypted.",
        lambda args, config: check_disk_encryption(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-no-open-ingress",
        "No security group or firewall admits the internet: a /0, or CIDRs whose union covers more "
        "than a /8 of public IPv4 (a /32 of IPv6) addresses.",
        lambda args, config: check_no_open_ingress(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    stack_policy(
        "gpufit-no-open-ingress-union",
        "Ingress rules split over several resources (one security group, one VPC network) do not admit "
        "the internet together.",
        check_ingress_union,
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-no-secrets-in-boot-data",
        "No secret value (token, key) in user data or a startup script: only secret references.",
        lambda args, config: check_no_secrets_in_boot_data(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-endpoint-access",
        "An internet-facing endpoint admits access.api_cidrs only, unless the spec opted in.",
        lambda args, config: check_endpoint_access(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-backend-armor",
        "An internet-facing GCP backend service names a Cloud Armor policy.",
        lambda args, config: check_backend_armor(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-known-compute",
        "Machines come only from resource types the pack checks (no spot requests, fleets, "
        "instances from templates ...).",
        lambda args, config: check_known_compute(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
    stack_policy(
        "gpufit-bucket-public-access-block",
        "Every S3 bucket has a public access block with all four flags true.",
        check_bucket_access_blocks,
        NO_SCHEMA,
    ),
    stack_policy(
        "gpufit-open-endpoint-structure",
        "The gpufit:open-endpoint tag exempts only the group of an internet-facing load balancer of the "
        "stack, used by nothing else, on its listeners' ports.",
        check_open_endpoint_structure,
        NO_SCHEMA,
    ),
    resource_policy(
        "gpufit-no-plain-http",
        "Endpoints serve HTTPS; plain HTTP only where the spec opted in (serving.allow_plain_http).",
        lambda args, config: check_plain_http(args.resource_type, args.props, config),
        PLAIN_HTTP_SCHEMA,
    ),
    resource_policy(
        "gpufit-private-buckets",
        "S3 and GCS buckets are private: public access blocked, no public ACL or IAM grant.",
        lambda args, config: check_private_buckets(args.resource_type, args.props, config),
        NO_SCHEMA,
    ),
]

if __name__ == "__main__":
    PolicyPack(name="gpufit", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
