"""AWS resources every gpufit deployment has, whether its machines are plain instances or a
fleet group: the security group, the machine image, the checkpoint bucket and the instance
role. Secure by default: no inbound rule unless the spec lists SSH CIDRs (access is through SSM
Session Manager), a private encrypted TLS-only bucket with lifecycle expiry, and an instance
role that may touch that bucket only (plus what its component adds, such as leaving its own
group)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

from deployment import Deployment
from deployment.images import DLAMI_NAME_PATTERN

SSM_CORE_POLICY = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"


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
    as the model server's port from its load balancer, inline too: inline and separate rules
    on one group fight each other); all traffic between the job's own nodes when they form a
    multi-node replica; outbound open for packages and models."""
    sg = aws.ec2.SecurityGroup(
        f"{name}-sg",
        description=f"gpufit {d.workload}: no inbound unless access.ssh_cidrs lists it",
        vpc_id=vpc_id,
        ingress=[*_ssh_rules(d.ssh_cidrs), *extra_ingress],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(
                description="outbound for packages, models and the bucket",
                protocol="-1",
                from_port=0,
                to_port=0,
                cidr_blocks=["0.0.0.0/0"],
            )
        ],
        tags=tags,
        opts=child,
    )
    if d.needs_node_interconnect:
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-intra-cluster",
            description="all traffic between the job's nodes (NCCL, EFA)",
            security_group_id=sg.id,
            referenced_security_group_id=sg.id,
            ip_protocol="-1",
            tags=tags,
            opts=child,
        )
    return sg


def machine_image(d: Deployment, invoke: pulumi.InvokeOptions) -> Any:
    """The AMI: ``gpufit:image`` when set, else the newest x86-64 Deep Learning AMI. Its
    ``id`` and ``root_device_name`` (which a launch template's root volume must name)."""
    filters = (
        [aws.ec2.GetAmiFilterArgs(name="image-id", values=[d.image])]
        if d.image
        else [
            aws.ec2.GetAmiFilterArgs(name="name", values=[DLAMI_NAME_PATTERN]),
            aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
        ]
    )
    return aws.ec2.get_ami_output(
        most_recent=True, owners=None if d.image else ["amazon"], filters=filters, opts=invoke
    )


def checkpoint_bucket(
    name: str, d: Deployment, tags: dict[str, str], child: pulumi.ResourceOptions
) -> aws.s3.Bucket:
    """The private, encrypted, TLS-only checkpoint bucket whose objects expire after
    ``bucket_keep_days``."""
    keep = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=d.retain_bucket))
    bucket = aws.s3.Bucket(
        f"{name}-checkpoints",
        bucket_prefix=f"gpufit-{d.name[:30]}-",
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
    """The instance role and profile: SSM sessions, its bucket, and (``extra``, a policy
    document) whatever else the component grants it, such as leaving its own group."""
    role = aws.iam.Role(
        f"{name}-role",
        assume_role_policy=trust_policy("ec2.amazonaws.com"),
        description="gpufit instance: SSM sessions and its checkpoint bucket only",
        tags=tags,
        opts=child,
    )
    aws.iam.RolePolicyAttachment(f"{name}-ssm", role=role.name, policy_arn=SSM_CORE_POLICY, opts=child)
    aws.iam.RolePolicy(
        f"{name}-bucket-access", role=role.id, policy=bucket_arn.apply(bucket_policy_document), opts=child
    )
    if extra is not None:
        aws.iam.RolePolicy(f"{name}-fleet-access", role=role.id, policy=extra, opts=child)
    return aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=tags, opts=child)
