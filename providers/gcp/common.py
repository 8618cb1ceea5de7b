"""What GCP's plain VMs (``component``) and managed instance groups (``fleet``) share: resource
names, the boot image and disk and network interface types, the stack's VPC and firewall rules,
its private checkpoint bucket and the VMs' service account."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_gcp as gcp

from deployment import Deployment, fitted_name, iso_utc, parse_gcp_label_time
from deployment.images import DLVM_IMAGE as DLVM_IMAGE  # the boot image component and fleet use

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
SCHEDULER_ATTEMPT_DEADLINE = "320s"
SCHEDULER_RETRIES = 5
"""The scope Google recommends for service-account VMs: IAM, not OAuth scopes, does the limiting."""

BUCKET_ROLE = "roles/storage.objectUser"
"""Read, write, list and delete objects in the one bucket it is granted on; no bucket admin."""

SUBNET_CIDR = "10.64.0.0/20"
"""The stack's own subnet: any private range will do, the VPC holds nothing else."""

JUMBO_MTU = 8896
"""The largest VPC MTU: Google recommends it for GPU VMs exchanging NCCL traffic."""

HYPERDISK_ONLY_SERIES = ("a3-ultragpu-", "a4-", "a4x-", "g4-")
"""Machine series that attach Hyperdisk only: their boot disk cannot be a Persistent Disk."""

GVNIC_REQUIRED_SERIES = ("a3-", "a4-", "a4x-", "g4-")
"""Machine series whose VMs boot only with a gVNIC network interface."""


def gce_name(text: str) -> str:
    """A Compute Engine resource name stem: lowercase letters, digits and ``-``, starting with a
    letter (names derived from a stack may carry ``_`` or start with a digit)."""
    stem = re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")
    return stem if stem[:1].isalpha() else f"g-{stem}".rstrip("-")


AUTONAME_SUFFIX = 8
"""Pulumi names a resource ``<resource name>-<7 hex>`` when no ``name`` is given."""
COMPUTE_NAME_MAX = 63
"""Compute Engine names: 1-63 characters of ``[a-z]([-a-z0-9]*[a-z0-9])?`` (RFC 1035;
https://cloud.google.com/compute/docs/naming-resources#resource-name-format)."""


def resource_name(base: str, suffix: str) -> str:
    """The Pulumi name of a resource whose cloud name Pulumi makes from it (``<name>-<7
    hex>``): short enough that the cloud name stays within 63 characters, cut with a digest of
    the whole when it is not, so it stays unique in the project."""
    full = f"{base}-{suffix}"
    return fitted_name(full, COMPUTE_NAME_MAX - AUTONAME_SUFFIX)


BUCKET_FORBIDDEN = re.compile(r"g[o0]{2,}g(?:[l1]e)?")
"""Cloud Storage: "Bucket names cannot begin with the goog prefix" and "cannot contain google
or close misspellings, such as g00gle" (https://cloud.google.com/storage/docs/buckets#naming)."""


def bucket_resource_name(base: str) -> str:
    """The checkpoint bucket's Pulumi name (its bucket name is this plus ``-<7 hex>``): the
    stack's base name, with any ``goog``-like run (a workload named ``google-gemma``) replaced,
    since Cloud Storage refuses those in bucket names."""
    stem = BUCKET_FORBIDDEN.sub("g", base)
    return resource_name(stem, "ckpt") if stem == base else fitted_name(f"{stem}-ckpt", 55, f"{base}-ckpt")


API_SERVICES = {
    "compute": "compute.googleapis.com",
    "iam": "iam.googleapis.com",
    "storage": "storage.googleapis.com",
    "cloudresourcemanager": "cloudresourcemanager.googleapis.com",
    "secretmanager": "secretmanager.googleapis.com",
    "cloudscheduler": "cloudscheduler.googleapis.com",
    "certificatemanager": "certificatemanager.googleapis.com",
    "workflows": "workflows.googleapis.com",
}
"""The APIs a stack's resources are created through: Compute Engine (VMs, templates, groups,
networks, firewalls, load balancers), IAM (service accounts, the custom role), Cloud Storage
(the bucket), Resource Manager (project IAM bindings), Secret Manager (the machines' secrets),
Cloud Scheduler (a group's deadline), Certificate Manager (an endpoint's Google-managed
certificate), Workflows (a batch fleet's rebalancer)."""


def enabled_apis(base: str, apis: Sequence[str], opts: pulumi.ResourceOptions) -> list[gcp.projects.Service]:
    """Enable ``apis`` in the project (idempotent: an enabled API stays as it is) and leave
    them on when the stack is destroyed, since other stacks and users of the project share
    them (``disable_on_destroy=False``). Everything the stack creates depends on these.
    Managing them needs the Service Usage API, which new projects have on."""
    return [
        gcp.projects.Service(
            resource_name(base, f"{api}-api"), service=API_SERVICES[api], disable_on_destroy=False, opts=opts
        )
        for api in apis
    ]


def network_tag(deployment: Deployment) -> str:
    """The tag that firewall rules target: only this stack's VMs carry it."""
    return f"gpufit-{gce_name(deployment.name)}"[:63].rstrip("-")


def service_account_id(deployment: Deployment) -> str:
    """A service account id (6-30 characters, ``[a-z][-a-z0-9]*[a-z0-9]``, unique in the
    project): the deployment name, cut short, plus a digest of project, stack and workload so
    two long names that share a prefix do not collide."""
    digest = hashlib.sha256(
        f"{deployment.project}/{deployment.stack}/{deployment.workload}".encode()
    ).hexdigest()[:6]
    stem = f"gf-{gce_name(deployment.name)}"[:23].rstrip("-")
    return f"{stem}-{digest}"


def boot_disk_type(machine_type: str) -> str:
    """``pd-balanced``, or ``hyperdisk-balanced`` where the machine series takes Hyperdisk only."""
    return "hyperdisk-balanced" if machine_type.startswith(HYPERDISK_ONLY_SERIES) else "pd-balanced"


def nic_type(deployment: Deployment) -> str | None:
    """gVNIC where the machine series requires it or the default image (which supports it) is
    used; otherwise the image's default, since a custom image may lack the gVNIC driver."""
    if deployment.machine_type.startswith(GVNIC_REQUIRED_SERIES) or deployment.image is None:
        return "GVNIC"
    return None


def ssh_source_ranges(cidrs: Sequence[str]) -> list[list[str]]:
    """The SSH CIDRs grouped by IP version: one firewall rule cannot mix IPv4 and IPv6 sources."""
    groups: dict[int, list[str]] = {}
    for cidr in cidrs:
        groups.setdefault(ipaddress.ip_network(cidr, strict=False).version, []).append(cidr)
    return [groups[v] for v in sorted(groups)]


def label_expiry(labels: Mapping[str, str] | None, d: Deployment) -> str:
    raw = (labels or {}).get("gpufit-expires-at")
    try:
        return iso_utc(parse_gcp_label_time(raw)) if raw else iso_utc(d.expires_at)
    except ValueError:
        return iso_utc(d.expires_at)


def network(
    base: str, d: Deployment, child: pulumi.ResourceOptions, invoke: pulumi.InvokeOutputOptions
) -> tuple[pulumi.Input[str], pulumi.Input[str]]:
    """(network, subnetwork): the configured subnet and its network, or a VPC of our own."""
    if d.subnet_id:
        existing = (
            gcp.compute.get_subnetwork_output(self_link=d.subnet_id, opts=invoke)
            if "/" in d.subnet_id
            else gcp.compute.get_subnetwork_output(name=d.subnet_id, region=d.region, opts=invoke)
        )
        return existing.network, existing.self_link
    network = gcp.compute.Network(
        resource_name(base, "net"),
        auto_create_subnetworks=False,
        mtu=JUMBO_MTU if d.nodes_per_replica > 1 else None,
        description=f"gpufit {d.workload} ({d.stack}): no ingress unless access.ssh_cidrs lists it",
        opts=child,
    )
    subnet = gcp.compute.Subnetwork(
        resource_name(base, "subnet"),
        network=network.self_link,
        region=d.region,
        ip_cidr_range=SUBNET_CIDR,
        private_ip_google_access=True,
        description=f"gpufit {d.workload} ({d.stack})",
        opts=child,
    )
    return network.self_link, subnet.self_link


def firewalls(
    base: str, d: Deployment, tag: str, network: pulumi.Input[str], child: pulumi.ResourceOptions
) -> list[gcp.compute.Firewall]:
    """SSH from exactly ``access.ssh_cidrs``, and all TCP/UDP between the job's own VMs when
    they form distributed groups; nothing else gets in (a VPC's implied rule denies all
    other ingress)."""
    rules: list[gcp.compute.Firewall] = []
    for ranges in ssh_source_ranges(d.ssh_cidrs):
        suffix = "ssh" if ipaddress.ip_network(ranges[0], strict=False).version == 4 else "ssh-v6"
        rules.append(
            gcp.compute.Firewall(
                resource_name(base, suffix),
                network=network,
                direction="INGRESS",
                allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
                source_ranges=ranges,
                target_tags=[tag],
                description="gpufit: SSH from access.ssh_cidrs",
                opts=child,
            )
        )
    if d.nodes_per_replica > 1:
        rules.append(
            gcp.compute.Firewall(
                resource_name(base, "intra-cluster"),
                network=network,
                direction="INGRESS",
                allows=[
                    gcp.compute.FirewallAllowArgs(protocol="tcp"),
                    gcp.compute.FirewallAllowArgs(protocol="udp"),
                ],
                source_tags=[tag],
                target_tags=[tag],
                description="gpufit: torchrun rendezvous and NCCL between the job's VMs",
                opts=child,
            )
        )
    return rules


def checkpoint_bucket(
    base: str, d: Deployment, labels: dict[str, str], child: pulumi.ResourceOptions
) -> gcp.storage.Bucket:
    """The private checkpoint bucket: uniform access, public access prevented, objects
    expire after ``bucket_keep_days``. Cloud Storage encrypts every object with
    Google-managed keys by default, so no encryption block is needed."""
    opts = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=d.retain_bucket))
    return gcp.storage.Bucket(
        bucket_resource_name(base),
        location=d.region.upper(),
        storage_class="STANDARD",
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        force_destroy=not d.retain_bucket,
        lifecycle_rules=[
            gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=d.bucket_keep_days),
            )
        ],
        labels=labels,
        opts=opts,
    )


def vm_identity(
    base: str, d: Deployment, bucket: gcp.storage.Bucket, child: pulumi.ResourceOptions, market: str = ""
) -> tuple[gcp.serviceaccount.Account, gcp.storage.BucketIAMMember]:
    """The VMs' service account and its only grant: object access on the checkpoint bucket.
    ``market``: the account of the VMs of a fleet's groups in another market than the choice's
    (a spot endpoint's on-demand groups, ``gf-on-demand-<digest>``), so that each account's
    group grant names its own market's groups only (``providers.gcp.fleet``)."""
    suffix = f"-{market}" if market else ""
    account = gcp.serviceaccount.Account(
        f"{base}-sa{suffix}",
        account_id=f"gf{suffix}-{service_account_id(d)[-6:]}" if market else service_account_id(d),
        display_name=f"gpufit {d.workload} ({d.stack}){suffix}"[:100],
        description="gpufit VM identity: object access on its checkpoint bucket only",
        opts=child,
    )
    access = gcp.storage.BucketIAMMember(
        f"{base}-sa{suffix}-bucket",
        bucket=bucket.name,
        role=BUCKET_ROLE,
        member=account.member,
        opts=child,
    )
    return account, access


def resize_to_zero_job(
    name: str,
    region: str,
    group: str,
    deadline: str,
    schedule: str,
    uri: str,
    account_email: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> gcp.cloudscheduler.Job:
    """The Cloud Scheduler job that resizes a MIG to 0 at its deadline (``schedule``, a cron of
    the deadline's minute), through the Compute API's resize (``uri``) with an OAuth token of the
    deadline's service account; retried 5 times, 30 s to 10 min apart."""
    return gcp.cloudscheduler.Job(
        name,
        region=region,
        description=f"gpufit: resize {group} to 0 at its deadline {deadline}",
        schedule=schedule,
        time_zone="Etc/UTC",
        attempt_deadline=SCHEDULER_ATTEMPT_DEADLINE,
        retry_config=gcp.cloudscheduler.JobRetryConfigArgs(
            retry_count=SCHEDULER_RETRIES, min_backoff_duration="30s", max_backoff_duration="600s"
        ),
        http_target=gcp.cloudscheduler.JobHttpTargetArgs(
            http_method="POST",
            uri=uri,
            oauth_token=gcp.cloudscheduler.JobHttpTargetOauthTokenArgs(
                service_account_email=account_email, scope=CLOUD_PLATFORM_SCOPE
            ),
        ),
        opts=opts,
    )
