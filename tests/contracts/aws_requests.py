"""Each AWS resource as the API requests it becomes.

pulumi-aws is bridged from terraform-provider-aws: a resource's ``Create`` calls the AWS SDK
with the request below (the member names are the botocore model's; which input lands in which
member follows the provider's own create functions, e.g. ``resourceSecurityGroupCreate``,
``resourceLaunchTemplateCreate``, ``resourceInstanceCreate`` in
https://github.com/hashicorp/terraform-provider-aws/tree/main/internal/service). Names the
provider generates are simulated: an unset ``name`` becomes Pulumi's autoname, a
``name_prefix`` the prefix plus terraform's 26-character unique suffix.

Every input a resource sends must be accounted for here (mapped to a member, or named in
``PROVIDER_ONLY`` as an input the provider keeps to itself): an input this module does not know
is reported, so that a new property cannot slip past the contracts unchecked.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.contracts.coverage import Ignored
from tests.contracts.model import Resource, Stack, autoname, prefixed

MOCK_GROUP_ID = "sg-0123456789abcdef0"
MOCK_ALLOCATION_ID = "eipalloc-0123456789abcdef0"


@dataclass(frozen=True)
class Request:
    service: str
    operation: str
    params: dict[str, Any]


def _tags(tags: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"Key": k, "Value": v} for k, v in (tags or {}).items()]


def _tag_specs(kind: str, tags: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"TagSpecifications": [{"ResourceType": kind, "Tags": _tags(tags)}]} if tags else {}


def _some(**members: Any) -> dict[str, Any]:
    """The members that are set (an unset input sends no member)."""
    return {k: v for k, v in members.items() if v is not None and v != [] and v != {}}


def name_of(resource: Resource, key: str = "name", prefix_key: str = "namePrefix") -> str:
    """The name the provider gives: ``name``, else ``name_prefix`` + 26, else the autoname."""
    if resource.get(key):
        return str(resource.get(key))
    if resource.get(prefix_key):
        return prefixed(str(resource.get(prefix_key)))
    return autoname(resource.name)


def security_group_name(resource: Resource) -> str:
    return name_of(resource)


def _permission(rule: Mapping[str, Any], own_id: str) -> dict[str, Any]:
    """An inline SG rule (``ingress``/``egress`` item) as an ``IpPermission``."""
    description = rule.get("description")
    groups = [*rule.get("securityGroups", []), *([own_id] if rule.get("self") else [])]
    protocol = str(rule.get("protocol"))
    return _some(
        IpProtocol=protocol,
        FromPort=None if protocol == "-1" else rule.get("fromPort"),
        ToPort=None if protocol == "-1" else rule.get("toPort"),
        IpRanges=[_some(CidrIp=c, Description=description) for c in rule.get("cidrBlocks", [])],
        Ipv6Ranges=[_some(CidrIpv6=c, Description=description) for c in rule.get("ipv6CidrBlocks", [])],
        UserIdGroupPairs=[_some(GroupId=g, Description=description) for g in groups],
        PrefixListIds=[_some(PrefixListId=p, Description=description) for p in rule.get("prefixListIds", [])],
    )


def security_group(r: Resource, s: Stack) -> list[Request]:
    create = _some(
        GroupName=security_group_name(r),
        Description=r.get("description", "Managed by Pulumi"),
        VpcId=r.get("vpcId"),
        **_tag_specs("security-group", r.get("tags")),
    )
    requests = [Request("ec2", "CreateSecurityGroup", create)]
    for key, op in (("ingress", "AuthorizeSecurityGroupIngress"), ("egress", "AuthorizeSecurityGroupEgress")):
        for rule in r.get(key) or []:
            requests.append(
                Request(
                    "ec2", op, {"GroupId": MOCK_GROUP_ID, "IpPermissions": [_permission(rule, MOCK_GROUP_ID)]}
                )
            )
    return requests


def _rule_resource(op: str) -> Callable[[Resource, Stack], list[Request]]:
    def build(r: Resource, s: Stack) -> list[Request]:
        description = r.get("description")
        protocol = str(r.get("ipProtocol"))
        permission = _some(
            IpProtocol=protocol,
            FromPort=r.get("fromPort"),
            ToPort=r.get("toPort"),
            IpRanges=[_some(CidrIp=r.get("cidrIpv4"), Description=description)]
            if r.get("cidrIpv4")
            else None,
            Ipv6Ranges=[_some(CidrIpv6=r.get("cidrIpv6"), Description=description)]
            if r.get("cidrIpv6")
            else None,
            UserIdGroupPairs=[_some(GroupId=r.get("referencedSecurityGroupId"), Description=description)]
            if r.get("referencedSecurityGroupId")
            else None,
            PrefixListIds=[_some(PrefixListId=r.get("prefixListId"), Description=description)]
            if r.get("prefixListId")
            else None,
        )
        return [
            Request(
                "ec2",
                op,
                _some(
                    GroupId=r.get("securityGroupId"),
                    IpPermissions=[permission],
                    **_tag_specs("security-group-rule", r.get("tags")),
                ),
            )
        ]

    return build


def iam_role(r: Resource, s: Stack) -> list[Request]:
    return [
        Request(
            "iam",
            "CreateRole",
            _some(
                RoleName=name_of(r),
                AssumeRolePolicyDocument=r.get("assumeRolePolicy"),
                Description=r.get("description"),
                Path=r.get("path"),
                MaxSessionDuration=r.get("maxSessionDuration"),
                PermissionsBoundary=r.get("permissionsBoundary"),
                Tags=_tags(r.get("tags")),
            ),
        )
    ]


def _role_name(value: Any, s: Stack) -> str:
    """A role given by id (the mock's id) or name: the role's name."""
    found = s.referenced(value)
    return name_of(found) if found is not None else str(value)


def role_policy(r: Resource, s: Stack) -> list[Request]:
    params = _some(
        RoleName=_role_name(r.get("role"), s), PolicyName=name_of(r), PolicyDocument=r.get("policy")
    )
    return [Request("iam", "PutRolePolicy", params)]


def role_policy_attachment(r: Resource, s: Stack) -> list[Request]:
    params = {"RoleName": _role_name(r.get("role"), s), "PolicyArn": r.get("policyArn")}
    return [Request("iam", "AttachRolePolicy", params)]


def instance_profile(r: Resource, s: Stack) -> list[Request]:
    name = name_of(r)
    requests = [
        Request(
            "iam",
            "CreateInstanceProfile",
            _some(InstanceProfileName=name, Path=r.get("path"), Tags=_tags(r.get("tags"))),
        )
    ]
    if r.get("role"):
        requests.append(
            Request(
                "iam",
                "AddRoleToInstanceProfile",
                {"InstanceProfileName": name, "RoleName": _role_name(r.get("role"), s)},
            )
        )
    return requests


def bucket_name(r: Resource) -> str:
    return name_of(r, "bucket", "bucketPrefix")


def bucket(r: Resource, s: Stack) -> list[Request]:
    name = bucket_name(r)
    location = None if s.region == "us-east-1" else {"LocationConstraint": s.region}
    requests = [Request("s3", "CreateBucket", _some(Bucket=name, CreateBucketConfiguration=location))]
    if r.get("tags"):
        requests.append(
            Request("s3", "PutBucketTagging", {"Bucket": name, "Tagging": {"TagSet": _tags(r.get("tags"))}})
        )
    return requests


def _bucket_of(r: Resource, s: Stack) -> str:
    found = s.referenced(r.get("bucket"))
    return bucket_name(found) if found is not None else str(r.get("bucket"))


def public_access_block(r: Resource, s: Stack) -> list[Request]:
    flags = ("blockPublicAcls", "ignorePublicAcls", "blockPublicPolicy", "restrictPublicBuckets")
    config = {f[0].upper() + f[1:]: r.get(f) for f in flags if r.get(f) is not None}
    return [
        Request(
            "s3",
            "PutPublicAccessBlock",
            {"Bucket": _bucket_of(r, s), "PublicAccessBlockConfiguration": config},
        )
    ]


def ownership_controls(r: Resource, s: Stack) -> list[Request]:
    rule = r.get("rule") or {}
    controls = {"Rules": [{"ObjectOwnership": rule.get("objectOwnership")}]}
    return [
        Request(
            "s3", "PutBucketOwnershipControls", {"Bucket": _bucket_of(r, s), "OwnershipControls": controls}
        )
    ]


def encryption(r: Resource, s: Stack) -> list[Request]:
    rules = []
    for rule in r.get("rules") or []:
        default = rule.get("applyServerSideEncryptionByDefault") or {}
        rules.append(
            _some(
                ApplyServerSideEncryptionByDefault=_some(
                    SSEAlgorithm=default.get("sseAlgorithm"), KMSMasterKeyID=default.get("kmsMasterKeyId")
                ),
                BucketKeyEnabled=rule.get("bucketKeyEnabled"),
            )
        )
    config = {"Rules": rules}
    return [
        Request(
            "s3",
            "PutBucketEncryption",
            {"Bucket": _bucket_of(r, s), "ServerSideEncryptionConfiguration": config},
        )
    ]


def lifecycle(r: Resource, s: Stack) -> list[Request]:
    rules = []
    for rule in r.get("rules") or []:
        expiration = rule.get("expiration") or {}
        abort = rule.get("abortIncompleteMultipartUpload") or {}
        flt = rule.get("filter")
        rules.append(
            _some(
                ID=rule.get("id"),
                Status=rule.get("status"),
                Filter=_some(Prefix=flt.get("prefix")) if flt is not None else None,
                Expiration=_some(Days=expiration.get("days")),
                AbortIncompleteMultipartUpload=_some(DaysAfterInitiation=abort.get("daysAfterInitiation")),
            )
        )
    config = {"Rules": rules}
    return [
        Request(
            "s3",
            "PutBucketLifecycleConfiguration",
            {"Bucket": _bucket_of(r, s), "LifecycleConfiguration": config},
        )
    ]


def bucket_policy(r: Resource, s: Stack) -> list[Request]:
    return [Request("s3", "PutBucketPolicy", {"Bucket": _bucket_of(r, s), "Policy": r.get("policy")})]


def placement_group(r: Resource, s: Stack) -> list[Request]:
    params = _some(
        GroupName=name_of(r), Strategy=r.get("strategy"), **_tag_specs("placement-group", r.get("tags"))
    )
    return [Request("ec2", "CreatePlacementGroup", params)]


def network_interface(r: Resource, s: Stack) -> list[Request]:
    params = _some(
        SubnetId=r.get("subnetId"),
        Groups=r.get("securityGroups"),
        InterfaceType=r.get("interfaceType"),
        Description=r.get("description"),
        **_tag_specs("network-interface", r.get("tags")),
    )
    return [Request("ec2", "CreateNetworkInterface", params)]


def eip(r: Resource, s: Stack) -> list[Request]:
    requests = [
        Request(
            "ec2", "AllocateAddress", _some(Domain=r.get("domain"), **_tag_specs("elastic-ip", r.get("tags")))
        )
    ]
    if r.get("networkInterface") or r.get("instance"):
        association = _some(
            AllocationId=MOCK_ALLOCATION_ID,
            NetworkInterfaceId=r.get("networkInterface"),
            InstanceId=r.get("instance"),
        )
        requests.append(Request("ec2", "AssociateAddress", association))
    return requests


def _metadata_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not options:
        return None
    return _some(
        HttpEndpoint=options.get("httpEndpoint"),
        HttpTokens=options.get("httpTokens"),
        HttpPutResponseHopLimit=options.get("httpPutResponseHopLimit"),
        InstanceMetadataTags=options.get("instanceMetadataTags"),
    )


def _truthy(value: Any) -> bool | None:
    """A launch template's ``"true"``/``"false"`` string (terraform's tri-state) as the bool sent."""
    if value is None or value == "":
        return None
    return value if isinstance(value, bool) else str(value).lower() == "true"


def _encoded(user_data: Any) -> str | None:
    if user_data is None:
        return None
    return base64.b64encode(str(user_data).encode()).decode()


def instance(r: Resource, s: Stack) -> list[Request]:
    root = r.get("rootBlockDevice") or {}
    market = r.get("instanceMarketOptions")
    spot = (market or {}).get("spotOptions") or {}
    primary = r.get("primaryNetworkInterface")
    template = r.get("launchTemplate")
    tags: list[dict[str, Any]] = []
    if r.get("tags"):
        tags.append({"ResourceType": "instance", "Tags": _tags(r.get("tags"))})
    if root.get("tags"):
        tags.append({"ResourceType": "volume", "Tags": _tags(root.get("tags"))})
    params = _some(
        ImageId=r.get("ami"),
        InstanceType=r.get("instanceType"),
        MinCount=1,
        MaxCount=1,
        IamInstanceProfile=_some(Name=r.get("iamInstanceProfile")) or None,
        SubnetId=r.get("subnetId"),
        SecurityGroupIds=r.get("vpcSecurityGroupIds"),
        NetworkInterfaces=[{"DeviceIndex": 0, "NetworkInterfaceId": primary.get("networkInterfaceId")}]
        if primary
        else None,
        LaunchTemplate=_some(LaunchTemplateId=template.get("id"), Version=template.get("version"))
        if template
        else None,
        Placement=_some(GroupName=r.get("placementGroup"), AvailabilityZone=r.get("availabilityZone"))
        or None,
        MetadataOptions=_metadata_options(r.get("metadataOptions")),
        BlockDeviceMappings=[
            {
                "DeviceName": s.image_root_device or "/dev/sda1",
                "Ebs": _some(
                    VolumeSize=root.get("volumeSize"),
                    VolumeType=root.get("volumeType"),
                    Encrypted=root.get("encrypted"),
                    DeleteOnTermination=root.get("deleteOnTermination"),
                    Iops=root.get("iops"),
                    Throughput=root.get("throughput"),
                ),
            }
        ]
        if root
        else None,
        TagSpecifications=tags,
        InstanceMarketOptions=_some(
            MarketType=market.get("marketType"),
            SpotOptions=_some(
                SpotInstanceType=spot.get("spotInstanceType"),
                InstanceInterruptionBehavior=spot.get("instanceInterruptionBehavior"),
                ValidUntil=spot.get("validUntil"),
                MaxPrice=spot.get("maxPrice"),
            ),
        )
        if market
        else None,
        CapacityReservationSpecification=_reservation_spec(r.get("capacityReservationSpecification")),
        InstanceInitiatedShutdownBehavior=r.get("instanceInitiatedShutdownBehavior"),
        UserData=_encoded(r.get("userData")),
        AssociatePublicIpAddress=None,
    )
    if r.get("associatePublicIpAddress") is not None:
        # RunInstances takes it on the (created) primary interface only.
        params.setdefault("NetworkInterfaces", [{"DeviceIndex": 0, "SubnetId": params.pop("SubnetId", None)}])
        params["NetworkInterfaces"][0]["AssociatePublicIpAddress"] = r.get("associatePublicIpAddress")
        if "SecurityGroupIds" in params:
            params["NetworkInterfaces"][0]["Groups"] = params.pop("SecurityGroupIds")
    return [Request("ec2", "RunInstances", params)]


def _reservation_spec(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``capacity_reservation_specification`` as EC2's ``CapacityReservationSpecification``
    (terraform ``expandLaunchTemplateCapacityReservationSpecificationRequest``)."""
    if not spec:
        return None
    target = spec.get("capacityReservationTarget") or {}
    return _some(
        CapacityReservationPreference=spec.get("capacityReservationPreference"),
        CapacityReservationTarget=_some(
            CapacityReservationId=target.get("capacityReservationId"),
            CapacityReservationResourceGroupArn=target.get("capacityReservationResourceGroupArn"),
        )
        or None,
    )


def capacity_block_reservation(r: Resource, s: Stack) -> list[Request]:
    """terraform ``resourceCapacityBlockReservationCreate``: PurchaseCapacityBlock."""
    params = _some(
        CapacityBlockOfferingId=r.get("capacityBlockOfferingId"),
        InstancePlatform=r.get("instancePlatform"),
        **_tag_specs("capacity-reservation", r.get("tags")),
    )
    return [Request("ec2", "PurchaseCapacityBlock", params)]


def capacity_reservation_read(r: Resource, s: Stack) -> list[Request]:
    """gpufit only reads a held On-Demand Capacity Reservation (``aws.ec2.CapacityReservation.get``:
    DescribeCapacityReservations, which changes nothing); it never creates one, so a registration
    of the type (a harness that passes reads through as registrations) sends no create request."""
    return []


def template_network_interfaces(items: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        _some(
            NetworkCardIndex=nic.get("networkCardIndex"),
            DeviceIndex=nic.get("deviceIndex"),
            InterfaceType=nic.get("interfaceType"),
            Groups=nic.get("securityGroups"),
            SubnetId=nic.get("subnetId"),
            NetworkInterfaceId=nic.get("networkInterfaceId"),
            DeleteOnTermination=_truthy(nic.get("deleteOnTermination")),
            AssociatePublicIpAddress=_truthy(nic.get("associatePublicIpAddress")),
            Description=nic.get("description"),
        )
        for nic in items
    ]


def launch_template(r: Resource, s: Stack) -> list[Request]:
    profile = r.get("iamInstanceProfile") or {}
    placement = r.get("placement") or {}
    data = _some(
        ImageId=r.get("imageId"),
        InstanceType=r.get("instanceType"),
        IamInstanceProfile=_some(Arn=profile.get("arn"), Name=profile.get("name")) or None,
        SecurityGroupIds=r.get("vpcSecurityGroupIds"),
        NetworkInterfaces=template_network_interfaces(r.get("networkInterfaces") or []),
        MetadataOptions=_metadata_options(r.get("metadataOptions")),
        BlockDeviceMappings=[
            _some(
                DeviceName=m.get("deviceName"),
                Ebs=_some(
                    VolumeSize=(m.get("ebs") or {}).get("volumeSize"),
                    VolumeType=(m.get("ebs") or {}).get("volumeType"),
                    Encrypted=_truthy((m.get("ebs") or {}).get("encrypted")),
                    DeleteOnTermination=_truthy((m.get("ebs") or {}).get("deleteOnTermination")),
                    Iops=(m.get("ebs") or {}).get("iops"),
                    Throughput=(m.get("ebs") or {}).get("throughput"),
                ),
            )
            for m in r.get("blockDeviceMappings") or []
        ],
        Placement=_some(
            GroupName=placement.get("groupName"), AvailabilityZone=placement.get("availabilityZone")
        )
        or None,
        InstanceInitiatedShutdownBehavior=r.get("instanceInitiatedShutdownBehavior"),
        InstanceMarketOptions=_some(MarketType=(r.get("instanceMarketOptions") or {}).get("marketType"))
        or None,
        CapacityReservationSpecification=_reservation_spec(r.get("capacityReservationSpecification")),
        UserData=r.get("userData"),
        TagSpecifications=[
            {"ResourceType": spec.get("resourceType"), "Tags": _tags(spec.get("tags"))}
            for spec in r.get("tagSpecifications") or []
        ],
    )
    params = _some(
        LaunchTemplateName=name_of(r),
        VersionDescription=r.get("description"),
        LaunchTemplateData=data,
        **_tag_specs("launch-template", r.get("tags")),
    )
    return [Request("ec2", "CreateLaunchTemplate", params)]


def scheduler_schedule(r: Resource, s: Stack) -> list[Request]:
    window = r.get("flexibleTimeWindow") or {}
    target = r.get("target") or {}
    retry = target.get("retryPolicy")
    params = _some(
        Name=name_of(r),
        GroupName=r.get("groupName"),
        ScheduleExpression=r.get("scheduleExpression"),
        ScheduleExpressionTimezone=r.get("scheduleExpressionTimezone"),
        Description=r.get("description"),
        State=r.get("state"),
        ActionAfterCompletion=r.get("actionAfterCompletion"),
        FlexibleTimeWindow=_some(
            Mode=window.get("mode"), MaximumWindowInMinutes=window.get("maximumWindowInMinutes")
        ),
        Target=_some(
            Arn=target.get("arn"),
            RoleArn=target.get("roleArn"),
            Input=target.get("input"),
            RetryPolicy=_some(
                MaximumEventAgeInSeconds=retry.get("maximumEventAgeInSeconds"),
                MaximumRetryAttempts=retry.get("maximumRetryAttempts"),
            )
            if retry
            else None,
        ),
    )
    return [Request("scheduler", "CreateSchedule", params)]


def secret(r: Resource, s: Stack) -> list[Request]:
    params = _some(
        Name=name_of(r),
        Description=r.get("description"),
        KmsKeyId=r.get("kmsKeyId"),
        Tags=_tags(r.get("tags")),
    )
    return [Request("secretsmanager", "CreateSecret", params)]


def secret_version(r: Resource, s: Stack) -> list[Request]:
    params = _some(SecretId=r.get("secretId"), SecretString=r.get("secretString"))
    return [Request("secretsmanager", "PutSecretValue", params)]


def load_balancer(r: Resource, s: Stack) -> list[Request]:
    create = _some(
        Name=name_of(r),
        Subnets=r.get("subnets"),
        SecurityGroups=r.get("securityGroups"),
        Scheme="internal" if r.get("internal") else "internet-facing",
        Type=r.get("loadBalancerType"),
        Tags=_tags(r.get("tags")),
    )
    attributes = []
    if r.get("idleTimeout") is not None:
        attributes.append({"Key": "idle_timeout.timeout_seconds", "Value": str(r.get("idleTimeout"))})
    if r.get("dropInvalidHeaderFields") is not None:
        value = str(r.get("dropInvalidHeaderFields")).lower()
        attributes.append({"Key": "routing.http.drop_invalid_header_fields.enabled", "Value": value})
    requests = [Request("elbv2", "CreateLoadBalancer", create)]
    if attributes:
        arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/x/0123456789abcdef"
        requests.append(
            Request(
                "elbv2", "ModifyLoadBalancerAttributes", {"LoadBalancerArn": arn, "Attributes": attributes}
            )
        )
    return requests


def target_group(r: Resource, s: Stack) -> list[Request]:
    check = r.get("healthCheck") or {}
    create = _some(
        Name=name_of(r),
        Protocol=r.get("protocol"),
        Port=r.get("port"),
        VpcId=r.get("vpcId"),
        TargetType=r.get("targetType"),
        HealthCheckEnabled=check.get("enabled"),
        HealthCheckPath=check.get("path"),
        HealthCheckPort=check.get("port"),
        HealthCheckProtocol=check.get("protocol"),
        HealthCheckIntervalSeconds=check.get("interval"),
        HealthCheckTimeoutSeconds=check.get("timeout"),
        HealthyThresholdCount=check.get("healthyThreshold"),
        UnhealthyThresholdCount=check.get("unhealthyThreshold"),
        Matcher=_some(HttpCode=check.get("matcher")) or None,
        Tags=_tags(r.get("tags")),
    )
    requests = [Request("elbv2", "CreateTargetGroup", create)]
    if r.get("deregistrationDelay") is not None:
        arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/x/0123456789abcdef"
        attribute = {
            "Key": "deregistration_delay.timeout_seconds",
            "Value": str(r.get("deregistrationDelay")),
        }
        requests.append(
            Request(
                "elbv2", "ModifyTargetGroupAttributes", {"TargetGroupArn": arn, "Attributes": [attribute]}
            )
        )
    return requests


def _action(action: Mapping[str, Any]) -> dict[str, Any]:
    fixed = action.get("fixedResponse")
    forward = action.get("forward")
    return _some(
        Type=action.get("type"),
        TargetGroupArn=action.get("targetGroupArn"),
        FixedResponseConfig=_some(
            MessageBody=fixed.get("messageBody"),
            StatusCode=fixed.get("statusCode"),
            ContentType=fixed.get("contentType"),
        )
        if fixed
        else None,
        ForwardConfig=_some(
            TargetGroups=[
                _some(TargetGroupArn=g.get("arn"), Weight=g.get("weight"))
                for g in forward.get("targetGroups", [])
            ]
        )
        if forward
        else None,
    )


def listener(r: Resource, s: Stack) -> list[Request]:
    create = _some(
        LoadBalancerArn=r.get("loadBalancerArn"),
        Protocol=r.get("protocol"),
        Port=r.get("port"),
        SslPolicy=r.get("sslPolicy"),
        Certificates=[{"CertificateArn": r.get("certificateArn")}] if r.get("certificateArn") else None,
        DefaultActions=[_action(a) for a in r.get("defaultActions") or []],
        Tags=_tags(r.get("tags")),
    )
    return [Request("elbv2", "CreateListener", create)]


def listener_rule(r: Resource, s: Stack) -> list[Request]:
    conditions = []
    for condition in r.get("conditions") or []:
        if condition.get("pathPattern"):
            values = condition["pathPattern"].get("values", [])
            conditions.append({"Field": "path-pattern", "PathPatternConfig": {"Values": values}})
    create = _some(
        ListenerArn=r.get("listenerArn"),
        Priority=r.get("priority"),
        Conditions=conditions,
        Actions=[_action(a) for a in r.get("actions") or []],
        Tags=_tags(r.get("tags")),
    )
    return [Request("elbv2", "CreateRule", create)]


def autoscaling_group(r: Resource, s: Stack) -> list[Request]:
    policy = r.get("mixedInstancesPolicy") or {}
    template = policy.get("launchTemplate") or {}
    spec = template.get("launchTemplateSpecification") or {}
    distribution = policy.get("instancesDistribution") or {}
    name = str(r.get("name") or autoname(r.name))
    create = _some(
        AutoScalingGroupName=name,
        MinSize=r.get("minSize"),
        MaxSize=r.get("maxSize"),
        DesiredCapacity=r.get("desiredCapacity"),
        VPCZoneIdentifier=",".join(r.get("vpcZoneIdentifiers") or []) or None,
        MixedInstancesPolicy=_some(
            LaunchTemplate=_some(
                LaunchTemplateSpecification=_some(
                    LaunchTemplateId=spec.get("launchTemplateId"),
                    LaunchTemplateName=spec.get("launchTemplateName"),
                    Version=spec.get("version"),
                ),
                Overrides=[
                    _some(
                        InstanceType=o.get("instanceType"), WeightedCapacity=_str(o.get("weightedCapacity"))
                    )
                    for o in template.get("overrides") or []
                ],
            ),
            InstancesDistribution=_some(
                OnDemandAllocationStrategy=distribution.get("onDemandAllocationStrategy"),
                OnDemandBaseCapacity=distribution.get("onDemandBaseCapacity"),
                OnDemandPercentageAboveBaseCapacity=distribution.get("onDemandPercentageAboveBaseCapacity"),
                SpotAllocationStrategy=distribution.get("spotAllocationStrategy"),
                SpotInstancePools=distribution.get("spotInstancePools"),
                SpotMaxPrice=distribution.get("spotMaxPrice"),
            ),
        )
        or None,
        CapacityRebalance=r.get("capacityRebalance"),
        CapacityReservationSpecification=_group_reservation_spec(r.get("capacityReservationSpecification")),
        HealthCheckType=r.get("healthCheckType"),
        HealthCheckGracePeriod=r.get("healthCheckGracePeriod"),
        TargetGroupARNs=r.get("targetGroupArns"),
        LifecycleHookSpecificationList=[
            _some(
                LifecycleHookName=h.get("name"),
                LifecycleTransition=h.get("lifecycleTransition"),
                HeartbeatTimeout=h.get("heartbeatTimeout"),
                DefaultResult=h.get("defaultResult"),
                NotificationMetadata=h.get("notificationMetadata"),
                NotificationTargetARN=h.get("notificationTargetArn"),
                RoleARN=h.get("roleArn"),
            )
            for h in r.get("initialLifecycleHooks") or []
        ]
        or None,
        Tags=[
            _some(
                Key=t.get("key"),
                Value=t.get("value"),
                PropagateAtLaunch=t.get("propagateAtLaunch"),
                ResourceId=name,
                ResourceType="auto-scaling-group",
            )
            for t in r.get("tags") or []
        ],
    )
    requests = [Request("autoscaling", "CreateAutoScalingGroup", create)]
    if r.get("suspendedProcesses"):
        suspend = {"AutoScalingGroupName": name, "ScalingProcesses": r.get("suspendedProcesses")}
        requests.append(Request("autoscaling", "SuspendProcesses", suspend))
    return requests


def _group_reservation_spec(spec: Any) -> dict[str, Any] | None:
    """A group's ``capacity_reservation_specification`` as Auto Scaling's
    ``CapacityReservationSpecification`` (lists of ids or resource group ARNs, botocore
    ``autoscaling`` ``CapacityReservationTarget``)."""
    if not spec:
        return None
    target = spec.get("capacityReservationTarget") or {}
    return _some(
        CapacityReservationPreference=spec.get("capacityReservationPreference"),
        CapacityReservationTarget=_some(
            CapacityReservationIds=target.get("capacityReservationIds"),
            CapacityReservationResourceGroupArns=target.get("capacityReservationResourceGroupArns"),
        )
        or None,
    )


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def autoscaling_schedule(r: Resource, s: Stack) -> list[Request]:
    params = _some(
        AutoScalingGroupName=r.get("autoscalingGroupName"),
        ScheduledActionName=r.get("scheduledActionName"),
        MinSize=r.get("minSize"),
        MaxSize=r.get("maxSize"),
        DesiredCapacity=r.get("desiredCapacity"),
        StartTime=r.get("startTime"),
        EndTime=r.get("endTime"),
        Recurrence=r.get("recurrence"),
        TimeZone=r.get("timeZone"),
    )
    return [Request("autoscaling", "PutScheduledUpdateGroupAction", params)]


BUILDERS: dict[str, Callable[[Resource, Stack], list[Request]]] = {
    "aws:ec2/securityGroup:SecurityGroup": security_group,
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": _rule_resource(
        "AuthorizeSecurityGroupIngress"
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": _rule_resource("AuthorizeSecurityGroupEgress"),
    "aws:iam/role:Role": iam_role,
    "aws:iam/rolePolicy:RolePolicy": role_policy,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": role_policy_attachment,
    "aws:iam/instanceProfile:InstanceProfile": instance_profile,
    "aws:s3/bucket:Bucket": bucket,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": public_access_block,
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": ownership_controls,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": encryption,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": lifecycle,
    "aws:s3/bucketPolicy:BucketPolicy": bucket_policy,
    "aws:ec2/placementGroup:PlacementGroup": placement_group,
    "aws:ec2/networkInterface:NetworkInterface": network_interface,
    "aws:ec2/eip:Eip": eip,
    "aws:ec2/instance:Instance": instance,
    "aws:ec2/launchTemplate:LaunchTemplate": launch_template,
    "aws:scheduler/schedule:Schedule": scheduler_schedule,
    "aws:secretsmanager/secret:Secret": secret,
    "aws:secretsmanager/secretVersion:SecretVersion": secret_version,
    "aws:lb/loadBalancer:LoadBalancer": load_balancer,
    "aws:lb/targetGroup:TargetGroup": target_group,
    "aws:lb/listener:Listener": listener,
    "aws:lb/listenerRule:ListenerRule": listener_rule,
    "aws:autoscaling/group:Group": autoscaling_group,
    "aws:autoscaling/schedule:Schedule": autoscaling_schedule,
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation": capacity_block_reservation,
    "aws:ec2/capacityReservation:CapacityReservation": capacity_reservation_read,
}

PROVIDER_ONLY: dict[str, frozenset[str]] = {
    "aws:s3/bucket:Bucket": frozenset({"forceDestroy"}),
    "aws:autoscaling/group:Group": frozenset({"forceDelete", "waitForCapacityTimeout"}),
    "aws:ec2/instance:Instance": frozenset({"userDataReplaceOnChange"}),
    "aws:ec2/launchTemplate:LaunchTemplate": frozenset({"updateDefaultVersion"}),
    "aws:secretsmanager/secret:Secret": frozenset({"recoveryWindowInDays"}),  # used by DeleteSecret only
}
"""Inputs that reach no create request: terraform's own behaviour (force destroy, waiting),
or a request made later (``recovery_window_in_days`` is DeleteSecret's)."""

MAPPED: dict[str, frozenset[str]] = {
    "aws:ec2/securityGroup:SecurityGroup": frozenset(
        {"name", "namePrefix", "description", "vpcId", "tags", "ingress", "egress"}
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": frozenset(
        {
            "securityGroupId",
            "ipProtocol",
            "fromPort",
            "toPort",
            "cidrIpv4",
            "cidrIpv6",
            "referencedSecurityGroupId",
            "prefixListId",
            "description",
            "tags",
        }
    ),
    "aws:iam/role:Role": frozenset(
        {
            "name",
            "assumeRolePolicy",
            "description",
            "path",
            "maxSessionDuration",
            "permissionsBoundary",
            "tags",
        }
    ),
    "aws:iam/rolePolicy:RolePolicy": frozenset({"role", "name", "policy"}),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": frozenset({"role", "policyArn"}),
    "aws:iam/instanceProfile:InstanceProfile": frozenset({"name", "path", "role", "tags"}),
    "aws:s3/bucket:Bucket": frozenset({"bucket", "bucketPrefix", "tags"}),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": frozenset(
        {"bucket", "blockPublicAcls", "ignorePublicAcls", "blockPublicPolicy", "restrictPublicBuckets"}
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": frozenset({"bucket", "rule"}),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": frozenset(
        {"bucket", "rules"}
    ),
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": frozenset({"bucket", "rules"}),
    "aws:s3/bucketPolicy:BucketPolicy": frozenset({"bucket", "policy"}),
    "aws:ec2/placementGroup:PlacementGroup": frozenset({"name", "strategy", "tags"}),
    "aws:ec2/networkInterface:NetworkInterface": frozenset(
        {"subnetId", "securityGroups", "interfaceType", "description", "tags"}
    ),
    "aws:ec2/eip:Eip": frozenset({"domain", "tags", "networkInterface", "instance"}),
    "aws:ec2/instance:Instance": frozenset(
        {
            "ami",
            "instanceType",
            "iamInstanceProfile",
            "subnetId",
            "vpcSecurityGroupIds",
            "primaryNetworkInterface",
            "launchTemplate",
            "placementGroup",
            "availabilityZone",
            "metadataOptions",
            "rootBlockDevice",
            "tags",
            "instanceMarketOptions",
            "capacityReservationSpecification",
            "instanceInitiatedShutdownBehavior",
            "userData",
            "associatePublicIpAddress",
        }
    ),
    "aws:ec2/capacityBlockReservation:CapacityBlockReservation": frozenset(
        {"capacityBlockOfferingId", "instancePlatform", "tags"}
    ),
    "aws:ec2/launchTemplate:LaunchTemplate": frozenset(
        {
            "name",
            "namePrefix",
            "description",
            "imageId",
            "instanceType",
            "iamInstanceProfile",
            "vpcSecurityGroupIds",
            "networkInterfaces",
            "metadataOptions",
            "blockDeviceMappings",
            "placement",
            "instanceInitiatedShutdownBehavior",
            "instanceMarketOptions",
            "capacityReservationSpecification",
            "userData",
            "tagSpecifications",
            "tags",
        }
    ),
    "aws:scheduler/schedule:Schedule": frozenset(
        {
            "name",
            "groupName",
            "scheduleExpression",
            "scheduleExpressionTimezone",
            "description",
            "state",
            "actionAfterCompletion",
            "flexibleTimeWindow",
            "target",
        }
    ),
    "aws:secretsmanager/secret:Secret": frozenset({"name", "namePrefix", "description", "kmsKeyId", "tags"}),
    "aws:secretsmanager/secretVersion:SecretVersion": frozenset({"secretId", "secretString"}),
    "aws:lb/loadBalancer:LoadBalancer": frozenset(
        {
            "name",
            "namePrefix",
            "subnets",
            "securityGroups",
            "internal",
            "loadBalancerType",
            "tags",
            "idleTimeout",
            "dropInvalidHeaderFields",
        }
    ),
    "aws:lb/targetGroup:TargetGroup": frozenset(
        {
            "name",
            "namePrefix",
            "protocol",
            "port",
            "vpcId",
            "targetType",
            "healthCheck",
            "tags",
            "deregistrationDelay",
        }
    ),
    "aws:lb/listener:Listener": frozenset(
        {"loadBalancerArn", "protocol", "port", "sslPolicy", "certificateArn", "defaultActions", "tags"}
    ),
    "aws:lb/listenerRule:ListenerRule": frozenset(
        {"listenerArn", "priority", "conditions", "actions", "tags"}
    ),
    "aws:autoscaling/group:Group": frozenset(
        {
            "name",
            "minSize",
            "maxSize",
            "desiredCapacity",
            "vpcZoneIdentifiers",
            "mixedInstancesPolicy",
            "capacityRebalance",
            "capacityReservationSpecification",
            "healthCheckType",
            "healthCheckGracePeriod",
            "targetGroupArns",
            "initialLifecycleHooks",
            "tags",
            "suspendedProcesses",
        }
    ),
    "aws:autoscaling/schedule:Schedule": frozenset(
        {
            "autoscalingGroupName",
            "scheduledActionName",
            "minSize",
            "maxSize",
            "desiredCapacity",
            "startTime",
            "endTime",
            "recurrence",
            "timeZone",
        }
    ),
}
MAPPED["aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"] = MAPPED[
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
]


def _all_protocols(rule: Mapping[str, Any]) -> bool:
    return str(rule.get("protocol")) == "-1"


IGNORED: dict[str, tuple[Ignored, ...]] = {
    "aws:ec2/securityGroup:SecurityGroup": tuple(
        Ignored(
            f"{direction}[].{port}",
            'protocol -1 (all) allows every port "regardless of any port range you specify" '
            "(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpPermission.html); terraform "
            "takes the ports (0) and sends none",
            _all_protocols,
        )
        for direction in ("ingress", "egress")
        for port in ("fromPort", "toPort")
    ),
}
"""Nested inputs no request carries, and why (``coverage.unread`` refuses every other one)."""


def unmapped(r: Resource) -> list[str]:
    """Inputs this module does not know what becomes of."""
    known = MAPPED.get(r.typ, frozenset()) | PROVIDER_ONLY.get(r.typ, frozenset())
    return sorted(k for k in r.inputs if k not in known)


def requests(r: Resource, s: Stack) -> list[Request] | None:
    """The requests ``r`` becomes; None when this module has no mapping for its type."""
    build = BUILDERS.get(r.typ)
    return build(r, s) if build is not None else None
