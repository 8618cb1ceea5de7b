"""AWS resources every gpufit deployment has, whether its machines are plain instances or a
fleet group: the security group, the machine image, the checkpoint bucket and the instance
role. Secure by default: no inbound rule unless the spec lists SSH CIDRs (access is through SSM
Session Manager), a private encrypted TLS-only bucket with lifecycle expiry, and an instance
role that may open Session Manager sessions and touch that bucket only (plus what its
component adds, such as leaving its own group)."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

from deployment import Deployment, fitted_name
from deployment.images import boot_image_line, unbootable_reason

SESSION_MANAGER_ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
"""What SSM Agent needs for Session Manager, and nothing else: AWS's "instance profile with
minimal Session Manager permissions"
(https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-create-iam-instance-profile.html).
Its other two statements are for options gpufit leaves at their defaults:
``s3:GetEncryptionConfiguration`` only when session logs go to an encrypted bucket
("required if you chose the Enforce S3 log encryption option") and ``kms:Decrypt`` only with
KMS-encrypted sessions. ``ec2messages:*`` serves Run Command, not sessions. The managed
``AmazonSSMManagedInstanceCore`` would also grant ``ssm:GetParameter(s)`` on every parameter.
None of these actions takes a resource-level restriction (IAM Service Authorization
Reference), hence ``*``."""

BUCKET_PREFIX_MAX = 37
"""terraform-provider-aws: ``bucket_prefix`` is at most 63 - 26 (its unique suffix) characters
(``internal/service/s3/bucket.go``)."""
BUCKET_STEM_MAX = BUCKET_PREFIX_MAX - len("gpufit-") - 1


def policy_document(statements: list[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def trust_policy(service: str, account: str | None = None) -> str:
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if account:
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": account}}
    return policy_document([statement])


def session_manager_policy() -> str:
    return policy_document([{"Effect": "Allow", "Action": list(SESSION_MANAGER_ACTIONS), "Resource": "*"}])


def bucket_policy_document(bucket_arn: str) -> str:
    """The instance role's only data access: list, read and write its own bucket."""
    return policy_document(
        [
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn]},
            {
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": [f"{bucket_arn}/*"],
            },
        ]
    )


def deny_insecure_transport(bucket_arn: str) -> str:
    """Refuse any request to the bucket that is not over TLS."""
    return policy_document(
        [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ]
    )


def _ssh_rules(cidrs: tuple[str, ...]) -> list[aws.ec2.SecurityGroupIngressArgs]:
    v4 = [c for c in cidrs if ipaddress.ip_network(c, strict=False).version == 4]
    v6 = [c for c in cidrs if ipaddress.ip_network(c, strict=False).version == 6]
    if not cidrs:
        return []
    return [
        aws.ec2.SecurityGroupIngressArgs(
            description="SSH from access.ssh_cidrs",
            protocol="tcp",
            from_port=22,
            to_port=22,
            cidr_blocks=v4 or None,
            ipv6_cidr_blocks=v6 or None,
        )
    ]


def security_group(
    name: str,
    d: Deployment,
    vpc_id: pulumi.Input[str],
    tags: dict[str, str],
    child: pulumi.ResourceOptions,
    extra_ingress: Sequence[aws.ec2.SecurityGroupIngressArgs] = (),
) -> aws.ec2.SecurityGroup:
    """No inbound rule unless ``access.ssh_cidrs`` lists some (or the component adds one, such
    as the model server's port from its load balancer); outbound open for packages and models;
    and, when the nodes form a multi-node replica, all traffic in from and out to the group
    itself, which EFA needs in both directions: "allow all outbound traffic to the security
    group itself" besides the inbound rule, the 0.0.0.0/0 rule does not stand in for it
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security).
    Every rule is inline: inline rules and separate rule resources on one group overwrite
    each other (pulumi-aws ``ec2.SecurityGroup``). Descriptions keep to EC2's character set
    (no apostrophe)."""
    cluster_in = []
    cluster_out = []
    if d.needs_node_interconnect:
        cluster_in.append(
            aws.ec2.SecurityGroupIngressArgs(
                description="all traffic from the job nodes (NCCL, EFA)",
                protocol="-1",
                from_port=0,
                to_port=0,
                self=True,
            )
        )
        cluster_out.append(
            aws.ec2.SecurityGroupEgressArgs(
                description="all traffic to the job nodes (EFA)",
                protocol="-1",
                from_port=0,
                to_port=0,
                self=True,
            )
        )
    return aws.ec2.SecurityGroup(
        f"{name}-sg",
        description=f"gpufit {d.workload}: no inbound unless access.ssh_cidrs lists it",
        vpc_id=vpc_id,
        ingress=[*_ssh_rules(d.ssh_cidrs), *extra_ingress, *cluster_in],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(
                description="outbound for packages, models and the bucket",
                protocol="-1",
                from_port=0,
                to_port=0,
                cidr_blocks=["0.0.0.0/0"],
            ),
            *cluster_out,
        ],
        tags=tags,
        opts=child,
    )


class ImageError(ValueError):
    """The machine image cannot boot the deployment: no supported image for its type, or a disk
    smaller than the image's root snapshot."""


def root_snapshot_gb(ami: Any) -> int | None:
    """The size of the image's root volume snapshot (its root device's EBS mapping), if known."""
    for mapping in getattr(ami, "block_device_mappings", None) or []:
        if mapping.device_name == ami.root_device_name and mapping.ebs:
            size = mapping.ebs.get("volume_size")
            if size not in (None, ""):
                return int(size)
    return None


def check_disk(d: Deployment, ami: Any) -> None:
    """ImageError when the root volume would be smaller than the image's snapshot (EC2 refuses
    it: "Volume of size N GB is smaller than snapshot, expect size >= M GB")."""
    root = root_snapshot_gb(ami)
    if root is not None and d.disk_gb < root:
        raise ImageError(
            f"storage.disk_gb {d.disk_gb} is smaller than the root snapshot of the machine image "
            f"{ami.id} ({root} GB): set storage.disk_gb to {root} or more"
        )


def machine_image(d: Deployment, invoke: pulumi.InvokeOptions) -> Any:
    """The AMI: ``gpufit:image`` when set, else the newest Deep Learning AMI of the line that
    supports the deployment's instance family (``selector/data/images.yaml``: x86-64 for G and
    P types, ARM64 for G5g). Its ``id`` and ``root_device_name`` (which a root volume must
    name), checked against the disk size. RunError when no supported image covers the type
    or the disk is too small for the image."""
    line = boot_image_line(d)
    if d.image:
        filters = [aws.ec2.GetAmiFilterArgs(name="image-id", values=[d.image])]
    elif line is None:
        raise pulumi.RunError(unbootable_reason(d))
    else:
        filters = [
            aws.ec2.GetAmiFilterArgs(name="name", values=[line.name_filter]),
            aws.ec2.GetAmiFilterArgs(name="architecture", values=[line.architecture]),
        ]
    owners = None if d.image else ["amazon"]
    ami = aws.ec2.get_ami(most_recent=True, owners=owners, filters=filters, opts=invoke)
    try:
        check_disk(d, ami)
    except ImageError as err:
        raise pulumi.RunError(str(err)) from None
    return ami


METADATA_HOP_LIMIT = 2
"""Instance metadata answers IMDSv2 only, over two hops (a container on the machine reaches it)."""


def template_metadata_options() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=METADATA_HOP_LIMIT
    )


def template_root_volume(d: Deployment, image: Any) -> list[aws.ec2.LaunchTemplateBlockDeviceMappingArgs]:
    """The root volume a launch template gives its machines: the image's root device, gp3,
    encrypted, deleted with the machine."""
    return [
        aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
            device_name=image.root_device_name,
            ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                volume_size=d.disk_gb, volume_type="gp3", encrypted="true", delete_on_termination="true"
            ),
        )
    ]


def bucket_prefix(d: Deployment) -> str:
    """``gpufit-<name>-`` in S3's characters (lowercase, digits, hyphens) and at most 37
    characters: a longer or changed name is cut with a digest of the whole, so it stays unique
    and the same on every run."""
    stem = re.sub(r"[^a-z0-9-]", "-", d.name).strip("-")
    return f"gpufit-{fitted_name(stem, BUCKET_STEM_MAX, d.name)}-"


def checkpoint_bucket(
    name: str, d: Deployment, tags: dict[str, str], child: pulumi.ResourceOptions
) -> aws.s3.Bucket:
    """The private, encrypted, TLS-only checkpoint bucket whose objects expire after
    ``bucket_keep_days``."""
    keep = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=d.retain_bucket))
    bucket = aws.s3.Bucket(
        f"{name}-checkpoints",
        bucket_prefix=bucket_prefix(d),
        force_destroy=not d.retain_bucket,
        tags=tags,
        opts=keep,
    )
    on_bucket = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[bucket]))
    aws.s3.BucketPublicAccessBlock(
        f"{name}-public-access-block",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=on_bucket,
    )
    aws.s3.BucketOwnershipControls(
        f"{name}-ownership",
        bucket=bucket.id,
        rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
        opts=on_bucket,
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-encryption",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="aws:kms"
                ),
                bucket_key_enabled=True,
            )
        ],
        opts=on_bucket,
    )
    aws.s3.BucketLifecycleConfiguration(
        f"{name}-lifecycle",
        bucket=bucket.id,
        rules=[
            aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="gpufit-retention",
                status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(days=d.bucket_keep_days),
                abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=1
                ),
            )
        ],
        opts=on_bucket,
    )
    aws.s3.BucketPolicy(
        f"{name}-tls-only",
        bucket=bucket.id,
        policy=bucket.arn.apply(deny_insecure_transport),
        opts=on_bucket,
    )
    return bucket


def instance_profile(
    name: str,
    bucket_arn: pulumi.Output[str],
    tags: dict[str, str],
    child: pulumi.ResourceOptions,
    extra: pulumi.Input[str] | None = None,
) -> aws.iam.InstanceProfile:
    """The instance role and profile: Session Manager sessions, its bucket, and (``extra``, a
    policy document) whatever else the component grants it, such as leaving its own group."""
    role = aws.iam.Role(
        f"{name}-role",
        assume_role_policy=trust_policy("ec2.amazonaws.com"),
        description="gpufit instance: SSM sessions and its checkpoint bucket only",
        tags=tags,
        opts=child,
    )
    aws.iam.RolePolicy(f"{name}-session-manager", role=role.id, policy=session_manager_policy(), opts=child)
    aws.iam.RolePolicy(
        f"{name}-bucket-access", role=role.id, policy=bucket_arn.apply(bucket_policy_document), opts=child
    )
    if extra is not None:
        aws.iam.RolePolicy(f"{name}-fleet-access", role=role.id, policy=extra, opts=child)
    return aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=tags, opts=child)
