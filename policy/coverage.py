"""What the other policies cannot see: compute they do not know, a GCP backend no Cloud Armor
policy guards, an S3 bucket without a public access block (issue 22, item 4).

Every policy checks the resource types it knows (``aws:ec2/instance:Instance``, launch
templates, groups, GCP instances and templates). A machine made through another type (an
``aws:ec2/spotInstanceRequest:SpotInstanceRequest``, a ``gcp:compute/instanceFromTemplate:
InstanceFromTemplate``) escaped every one of them: no expiry, no IMDSv2, no disk encryption, no
secret scan. So compute is deny-by-default: a type that makes machines must be one the pack
checks."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from policy.resources import (
    AWS_GROUP,
    AWS_LAUNCH_TEMPLATE,
    AWS_PUBLIC_ACCESS_BLOCK,
    GCP_GROUPS,
    GPU_INSTANCES,
    MACHINE_TEMPLATES,
    PUBLIC_ACCESS_BLOCK_FLAGS,
    PolicyConfig,
    stack_items,
)

CHECKED_COMPUTE = frozenset({*GPU_INSTANCES, *MACHINE_TEMPLATES, AWS_GROUP, *GCP_GROUPS, AWS_LAUNCH_TEMPLATE})
"""The machine-making types the pack's policies check."""

KNOWN_UNCHECKED_COMPUTE = frozenset(
    {
        "aws:ec2/spotInstanceRequest:SpotInstanceRequest",
        "aws:ec2/spotFleetRequest:SpotFleetRequest",
        "aws:ec2/fleet:Fleet",
        "aws:ec2/launchConfiguration:LaunchConfiguration",
        "aws:opsworks/instance:Instance",
        "aws:lightsail/instance:Instance",
        "aws:batch/computeEnvironment:ComputeEnvironment",
        "aws:eks/nodeGroup:NodeGroup",
        "aws:sagemaker/notebookInstance:NotebookInstance",
        "aws:emr/cluster:Cluster",
        "gcp:compute/instanceFromTemplate:InstanceFromTemplate",
        "gcp:compute/instanceFromMachineImage:InstanceFromMachineImage",
        "gcp:container/nodePool:NodePool",
        "gcp:container/cluster:Cluster",
        "gcp:notebooks/instance:Instance",
        "gcp:workbench/instance:Instance",
        "gcp:tpu/node:Node",
        "gcp:tpu/v2Vm:V2Vm",
        "gcp:dataproc/cluster:Cluster",
    }
)
"""Types that launch machines outside what the pack checks (each provider's registry:
https://www.pulumi.com/registry/packages/aws/api-docs/, https://www.pulumi.com/registry/packages/gcp/api-docs/)."""

_COMPUTE_MODULES = re.compile(r"(?:aws:ec2|gcp:compute)/[^:]*:(?P<name>\w+)")
_MAKES_MACHINES = re.compile(r"(?:Instance|Fleet|Vm)(?:Request)?$|^Instance(?:From\w+)?$")
"""Within EC2 and Compute Engine, a type named for instances, fleets or VMs (not their IAM
bindings, settings or group memberships) is taken to make machines: deny-by-default for types
a provider adds later."""


def makes_unchecked_machines(resource_type: str) -> bool:
    if resource_type in CHECKED_COMPUTE:
        return False
    if resource_type in KNOWN_UNCHECKED_COMPUTE:
        return True
    found = _COMPUTE_MODULES.fullmatch(resource_type)
    return bool(found and _MAKES_MACHINES.search(found["name"]))


def check_known_compute(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """No machine through a type the pack does not check (deny-by-default)."""
    del props, config
    if makes_unchecked_machines(resource_type):
        return [
            f"{resource_type} launches machines the policy pack cannot check (expiry, IMDSv2, "
            "encrypted disks, secrets in boot data): use an instance, launch template or instance "
            "group the pack knows"
        ]
    return []


GCP_BACKENDS = (
    "gcp:compute/regionBackendService:RegionBackendService",
    "gcp:compute/backendService:BackendService",
)
EXTERNAL_SCHEMES = frozenset({"EXTERNAL", "EXTERNAL_MANAGED"})


def check_backend_armor(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """An internet-facing GCP backend service names a Cloud Armor policy: without one, every
    address reaches it and ``gpufit-endpoint-access`` has nothing to check. (External schemes:
    https://cloud.google.com/compute/docs/reference/rest/v1/backendServices, ``loadBalancingScheme``;
    its default is ``EXTERNAL``.)"""
    del config
    if resource_type not in GCP_BACKENDS:
        return []
    scheme = str(props.get("loadBalancingScheme") or "EXTERNAL").upper()
    if scheme in EXTERNAL_SCHEMES and not props.get("securityPolicy"):
        return [f"an {scheme} backend service without a Cloud Armor securityPolicy admits every address"]
    return []


S3_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")


def check_bucket_access_blocks(
    resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None
) -> list[str]:
    """Every S3 bucket of the stack has a public access block with all four flags: a bucket
    without one passed ``gpufit-private-buckets``, which only checks the blocks that exist.
    A block belongs to the bucket its ``bucket`` names; while a bucket's name is not known yet
    (a preview of a new ``bucket_prefix`` bucket), the blocks that name no known bucket must be
    at least as many as such buckets."""
    del config
    items = stack_items(resources)
    full = [
        str(p.get("bucket") or "")
        for t, p, _ in items
        if t == AWS_PUBLIC_ACCESS_BLOCK and all(p.get(f) is True for f in PUBLIC_ACCESS_BLOCK_FLAGS)
    ]
    buckets = [(str(p.get("bucket") or p.get("id") or ""), p) for t, p, _ in items if t in S3_BUCKETS]
    known = {name for name, _ in buckets if name}
    spare = len([b for b in full if b not in known])
    problems = []
    unnamed = 0
    for name, _ in buckets:
        if name and name not in full:
            problems.append(f"S3 bucket {name!r} has no public access block with all four flags true")
        elif not name:
            unnamed += 1
    if unnamed > spare:
        problems.append(
            f"{unnamed - spare} S3 bucket(s) without a public access block with all four flags true"
        )
    return problems
