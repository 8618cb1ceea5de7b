"""Each GCP resource as the API request body it becomes.

pulumi-gcp is bridged from terraform-provider-google(-beta): a resource's create call sends the
body below (field names are the discovery document's; which input lands where follows the
provider's ``expand*`` functions, e.g. ``expandComputeInstance`` and
``expandInstanceTemplateProperties`` in
https://github.com/hashicorp/terraform-provider-google/tree/main/google/services). An unset
``name`` becomes Pulumi's autoname; a template's ``name_prefix`` the prefix plus the provider's
unique suffix.

Every input must be accounted for (mapped, or named in ``PROVIDER_ONLY``): one this module does
not know is reported.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.contracts.coverage import Ignored
from tests.contracts.model import TF_UNIQUE_SUFFIX, Resource, Stack, autoname

TEMPLATE_SUFFIX = TF_UNIQUE_SUFFIX
"""terraform-provider-google ``region_instance_template`` names a ``name_prefix`` of up to 37
characters with ``id.PrefixedUniqueId`` (the prefix and 26 characters, 63 in all); a longer
prefix (up to 54) gets a 9-character suffix instead
(https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/compute_region_instance_template#name_prefix-1)."""

IGNORED: dict[str, tuple[Ignored, ...]] = {}
"""Nested inputs no request carries, and why (none today: ``coverage.unread`` refuses every
nested input the bodies below do not read)."""


@dataclass(frozen=True)
class Body:
    api: str  # discovery document: compute.v1, storage.v1, ...
    schema: str
    method: str | None  # the method id whose required fields apply
    body: dict[str, Any]


def _some(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None and v != [] and v != {}}


def name_of(r: Resource) -> str:
    return str(r.get("name") or autoname(r.name))


def template_name(r: Resource) -> str:
    if r.get("name"):
        return str(r.get("name"))
    if r.get("namePrefix"):
        prefix = str(r.get("namePrefix"))
        return prefix + (TEMPLATE_SUFFIX if len(prefix) <= 37 else "abcdefghi")
    return autoname(r.name)


def _metadata(items: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return {"items": [{"key": k, "value": v} for k, v in items.items()]} if items else None


def _tags(tags: Any) -> dict[str, Any] | None:
    return {"items": list(tags)} if tags else None


def _nics(items: list[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        _some(
            network=n.get("network"),
            subnetwork=n.get("subnetwork"),
            networkIP=n.get("networkIp"),
            nicType=n.get("nicType"),
            queueCount=n.get("queueCount"),
            stackType=n.get("stackType"),
            accessConfigs=[
                _some(type="ONE_TO_ONE_NAT", natIP=a.get("natIp"), networkTier=a.get("networkTier"))
                for a in n.get("accessConfigs") or []
            ],
        )
        for n in items or []
    ]


def _accelerators(items: list[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    return [_some(acceleratorType=g.get("type"), acceleratorCount=g.get("count")) for g in items or []]


def _scheduling(s: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not s:
        return None
    duration = s.get("maxRunDuration")
    return _some(
        provisioningModel=s.get("provisioningModel"),
        preemptible=s.get("preemptible"),
        automaticRestart=s.get("automaticRestart"),
        onHostMaintenance=s.get("onHostMaintenance"),
        instanceTerminationAction=s.get("instanceTerminationAction"),
        maxRunDuration=_some(seconds=duration.get("seconds"), nanos=duration.get("nanos"))
        if duration
        else None,
        terminationTime=s.get("terminationTime"),
    )


def _service_accounts(account: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [_some(email=account.get("email"), scopes=account.get("scopes"))] if account else []


def _shielded(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not config:
        return None
    return _some(
        enableSecureBoot=config.get("enableSecureBoot"),
        enableVtpm=config.get("enableVtpm"),
        enableIntegrityMonitoring=config.get("enableIntegrityMonitoring"),
    )


def _list(value: Any) -> list[Any] | None:
    if value is None:
        return None
    return list(value) if isinstance(value, list) else [value]


def instance(r: Resource, s: Stack) -> list[Body]:
    boot = r.get("bootDisk") or {}
    params = boot.get("initializeParams") or {}
    body = _some(
        name=name_of(r),
        machineType=f"zones/{r.get('zone')}/machineTypes/{r.get('machineType')}",
        description=r.get("description"),
        disks=[
            _some(
                boot=True,
                autoDelete=boot.get("autoDelete"),
                mode=boot.get("mode"),
                initializeParams=_some(
                    sourceImage=params.get("image"),
                    diskSizeGb=params.get("size"),
                    diskType=params.get("type"),
                    labels=params.get("labels"),
                ),
            )
        ],
        guestAccelerators=_accelerators(r.get("guestAccelerators")),
        networkInterfaces=_nics(r.get("networkInterfaces")),
        scheduling=_scheduling(r.get("scheduling")),
        serviceAccounts=_service_accounts(r.get("serviceAccount")),
        shieldedInstanceConfig=_shielded(r.get("shieldedInstanceConfig")),
        metadata=_metadata(r.get("metadata")),
        resourcePolicies=_list(r.get("resourcePolicies")),
        labels=r.get("labels"),
        tags=_tags(r.get("tags")),
    )
    return [Body("compute.v1", "Instance", "compute.instances.insert", body)]


def region_instance_template(r: Resource, s: Stack) -> list[Body]:
    disks = [
        _some(
            boot=d.get("boot"),
            autoDelete=d.get("autoDelete"),
            mode=d.get("mode"),
            initializeParams=_some(
                sourceImage=d.get("sourceImage"),
                diskSizeGb=d.get("diskSizeGb"),
                diskType=d.get("diskType"),
                labels=d.get("labels"),
            ),
        )
        for d in r.get("disks") or []
    ]
    properties = _some(
        machineType=r.get("machineType"),
        description=r.get("instanceDescription"),
        disks=disks,
        guestAccelerators=_accelerators(r.get("guestAccelerators")),
        networkInterfaces=_nics(r.get("networkInterfaces")),
        scheduling=_scheduling(r.get("scheduling")),
        reservationAffinity=_reservation_affinity(r.get("reservationAffinity")),
        serviceAccounts=_service_accounts(r.get("serviceAccount")),
        shieldedInstanceConfig=_shielded(r.get("shieldedInstanceConfig")),
        metadata=_metadata(r.get("metadata")),
        resourcePolicies=_list(r.get("resourcePolicies")),
        labels=r.get("labels"),
        tags=_tags(r.get("tags")),
    )
    body = _some(name=template_name(r), description=r.get("description"), properties=properties)
    return [Body("compute.v1", "InstanceTemplate", "compute.regionInstanceTemplates.insert", body)]


def _reservation_affinity(a: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """terraform ``expandReservationAffinity``: ``type`` → consumeReservationType, the specific
    reservation's key and values."""
    if not a:
        return None
    specific = a.get("specificReservation") or {}
    return _some(consumeReservationType=a.get("type"), key=specific.get("key"), values=specific.get("values"))


def region_resize_request(r: Resource, s: Stack) -> list[Body]:
    """regionInstanceGroupManagerResizeRequests.insert (the group is a path parameter)."""
    duration = r.get("requestedRunDuration") or {}
    body = _some(
        name=name_of(r),
        description=r.get("description"),
        resizeBy=r.get("resizeBy"),
        requestedRunDuration=_some(seconds=duration.get("seconds"), nanos=duration.get("nanos")) or None,
    )
    return [
        Body(
            "compute.v1",
            "InstanceGroupManagerResizeRequest",
            "compute.regionInstanceGroupManagerResizeRequests.insert",
            body,
        )
    ]


def future_reservation(r: Resource, s: Stack) -> list[Body]:
    """futureReservations.insert (the zone is a path parameter): terraform's expanders map each
    input onto the field of the same name, ``specificSkuProperties.instanceProperties
    .guestAccelerators`` included."""
    window = r.get("timeWindow") or {}
    sku = r.get("specificSkuProperties") or {}
    props = sku.get("instanceProperties") or {}
    body = _some(
        name=name_of(r),
        description=r.get("description"),
        reservationMode=r.get("reservationMode"),
        planningStatus=r.get("planningStatus"),
        autoDeleteAutoCreatedReservations=r.get("autoDeleteAutoCreatedReservations"),
        specificReservationRequired=r.get("specificReservationRequired"),
        reservationName=r.get("reservationName"),
        timeWindow=_some(startTime=window.get("startTime"), endTime=window.get("endTime")),
        specificSkuProperties=_some(
            totalCount=sku.get("totalCount"),
            instanceProperties=_some(
                machineType=props.get("machineType"),
                guestAccelerators=[
                    _some(
                        acceleratorType=g.get("acceleratorType"), acceleratorCount=g.get("acceleratorCount")
                    )
                    for g in props.get("guestAccelerators") or []
                ],
            ),
        ),
    )
    return [Body("compute.v1", "FutureReservation", "compute.futureReservations.insert", body)]


def region_instance_group_manager(r: Resource, s: Stack) -> list[Body]:
    update = r.get("updatePolicy") or {}
    flexibility = r.get("instanceFlexibilityPolicy") or {}
    healing = _list(r.get("autoHealingPolicies")) or []
    body = _some(
        name=name_of(r),
        baseInstanceName=r.get("baseInstanceName"),
        description=r.get("description"),
        targetSize=r.get("targetSize"),
        versions=[
            _some(
                name=v.get("name"),
                instanceTemplate=v.get("instanceTemplate"),
                targetSize=_some(
                    fixed=(v.get("targetSize") or {}).get("fixed"),
                    percent=(v.get("targetSize") or {}).get("percent"),
                )
                or None,
            )
            for v in r.get("versions") or []
        ],
        distributionPolicy=_some(
            zones=[{"zone": f"zones/{z}"} for z in r.get("distributionPolicyZones") or []],
            targetShape=r.get("distributionPolicyTargetShape"),
        ),
        instanceFlexibilityPolicy=_some(
            instanceSelections={
                sel.get("name"): _some(rank=sel.get("rank"), machineTypes=sel.get("machineTypes"))
                for sel in flexibility.get("instanceSelections") or []
            }
        ),
        updatePolicy=_some(
            type=update.get("type"),
            minimalAction=update.get("minimalAction"),
            instanceRedistributionType=update.get("instanceRedistributionType"),
            maxSurge=_some(fixed=update.get("maxSurgeFixed"), percent=update.get("maxSurgePercent")),
            maxUnavailable=_some(
                fixed=update.get("maxUnavailableFixed"), percent=update.get("maxUnavailablePercent")
            ),
        ),
        namedPorts=[_some(name=p.get("name"), port=p.get("port")) for p in r.get("namedPorts") or []],
        autoHealingPolicies=[
            _some(healthCheck=h.get("healthCheck"), initialDelaySec=h.get("initialDelaySec")) for h in healing
        ],
        instanceLifecyclePolicy=_some(
            defaultActionOnFailure=(r.get("instanceLifecyclePolicy") or {}).get("defaultActionOnFailure")
        ),
    )
    return [Body("compute.v1", "InstanceGroupManager", "compute.regionInstanceGroupManagers.insert", body)]


def _simple(schema: str, method: str, fields: dict[str, str]) -> Callable[[Resource, Stack], list[Body]]:
    """A resource whose inputs map one-to-one onto fields (``fields``: input → field)."""

    def build(r: Resource, s: Stack) -> list[Body]:
        body = {"name": name_of(r), **{f: r.get(i) for i, f in fields.items() if r.get(i) is not None}}
        return [Body("compute.v1", schema, method, body)]

    return build


def firewall(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        name=name_of(r),
        network=r.get("network"),
        direction=r.get("direction"),
        priority=r.get("priority"),
        description=r.get("description"),
        allowed=[_some(IPProtocol=a.get("protocol"), ports=a.get("ports")) for a in r.get("allows") or []],
        denied=[_some(IPProtocol=a.get("protocol"), ports=a.get("ports")) for a in r.get("denies") or []],
        sourceRanges=r.get("sourceRanges"),
        sourceTags=r.get("sourceTags"),
        targetTags=r.get("targetTags"),
        destinationRanges=r.get("destinationRanges"),
    )
    return [Body("compute.v1", "Firewall", "compute.firewalls.insert", body)]


def health_check(r: Resource, s: Stack) -> list[Body]:
    http = r.get("httpHealthCheck") or {}
    body = _some(
        name=name_of(r),
        description=r.get("description"),
        type="HTTP" if http else None,
        httpHealthCheck=_some(port=http.get("port"), requestPath=http.get("requestPath")),
        checkIntervalSec=r.get("checkIntervalSec"),
        timeoutSec=r.get("timeoutSec"),
        healthyThreshold=r.get("healthyThreshold"),
        unhealthyThreshold=r.get("unhealthyThreshold"),
    )
    return [Body("compute.v1", "HealthCheck", "compute.regionHealthChecks.insert", body)]


def security_policy(r: Resource, s: Stack) -> list[Body]:
    rules = [
        _some(
            action=rule.get("action"),
            priority=rule.get("priority"),
            description=rule.get("description"),
            match=_some(
                versionedExpr=(rule.get("match") or {}).get("versionedExpr"),
                config=_some(srcIpRanges=((rule.get("match") or {}).get("config") or {}).get("srcIpRanges")),
            ),
        )
        for rule in r.get("rules") or []
    ]
    body = _some(name=name_of(r), description=r.get("description"), type=r.get("type"), rules=rules)
    return [Body("compute.v1", "SecurityPolicy", "compute.regionSecurityPolicies.insert", body)]


def backend_service(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        name=name_of(r),
        loadBalancingScheme=r.get("loadBalancingScheme"),
        protocol=r.get("protocol"),
        portName=r.get("portName"),
        timeoutSec=r.get("timeoutSec"),
        healthChecks=_list(r.get("healthChecks")),
        securityPolicy=r.get("securityPolicy"),
        backends=[
            _some(
                group=b.get("group"),
                balancingMode=b.get("balancingMode"),
                capacityScaler=b.get("capacityScaler"),
            )
            for b in r.get("backends") or []
        ],
    )
    return [Body("compute.v1", "BackendService", "compute.regionBackendServices.insert", body)]


def forwarding_rule(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        name=name_of(r),
        IPProtocol=r.get("ipProtocol"),
        portRange=r.get("portRange"),
        target=r.get("target"),
        network=r.get("network"),
        networkTier=r.get("networkTier"),
        IPAddress=r.get("ipAddress"),
        loadBalancingScheme=r.get("loadBalancingScheme"),
        labels=r.get("labels"),
    )
    return [Body("compute.v1", "ForwardingRule", "compute.forwardingRules.insert", body)]


def resource_policy(r: Resource, s: Stack) -> list[Body]:
    placement = r.get("groupPlacementPolicy") or {}
    body = _some(
        name=name_of(r),
        description=r.get("description"),
        groupPlacementPolicy=_some(
            collocation=placement.get("collocation"), vmCount=placement.get("vmCount")
        ),
    )
    return [Body("compute.v1", "ResourcePolicy", "compute.resourcePolicies.insert", body)]


def bucket_name(r: Resource) -> str:
    return name_of(r).lower()


def bucket(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        name=bucket_name(r),
        location=r.get("location"),
        storageClass=r.get("storageClass"),
        labels=r.get("labels"),
        iamConfiguration=_some(
            uniformBucketLevelAccess=_some(enabled=r.get("uniformBucketLevelAccess")),
            publicAccessPrevention=r.get("publicAccessPrevention"),
        ),
        lifecycle=_some(
            rule=[
                _some(
                    action=_some(type=(rule.get("action") or {}).get("type")),
                    condition=_some(age=(rule.get("condition") or {}).get("age")),
                )
                for rule in r.get("lifecycleRules") or []
            ]
        ),
    )
    return [Body("storage.v1", "Bucket", "storage.buckets.insert", body)]


def _binding(api: str) -> Callable[[Resource, Stack], list[Body]]:
    def build(r: Resource, s: Stack) -> list[Body]:
        condition = r.get("condition")
        binding = _some(
            role=r.get("role"),
            members=[r.get("member")] if r.get("member") else None,
            condition=_some(
                title=condition.get("title"),
                expression=condition.get("expression"),
                description=condition.get("description"),
            )
            if condition
            else None,
        )
        return [Body(api, "Policy", None, {"bindings": [binding]})]

    return build


def service_account(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        accountId=r.get("accountId"),
        serviceAccount=_some(displayName=r.get("displayName"), description=r.get("description")),
    )
    return [Body("iam.v1", "CreateServiceAccountRequest", None, body)]


def custom_role(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        roleId=r.get("roleId"),
        role=_some(
            title=r.get("title"),
            description=r.get("description"),
            includedPermissions=r.get("permissions"),
            stage=r.get("stage"),
        ),
    )
    return [Body("iam.v1", "CreateRoleRequest", None, body)]


def secret(r: Resource, s: Stack) -> list[Body]:
    replication = r.get("replication") or {}
    body = _some(
        replication=_some(automatic={} if "auto" in replication else None) or {"automatic": {}},
        labels=r.get("labels"),
    )
    return [Body("secretmanager.v1", "Secret", None, body)]


def secret_version(r: Resource, s: Stack) -> list[Body]:
    data = r.get("secretData")
    payload = {"data": base64.b64encode(str(data).encode()).decode()} if data is not None else {}
    return [Body("secretmanager.v1", "AddSecretVersionRequest", None, {"payload": payload})]


def https_proxy(r: Resource, s: Stack) -> list[Body]:
    """terraform-provider-google sends ``certificate_manager_certificates`` as the API's
    ``sslCertificates`` (the compute API has no other field for them: its discovery document's
    ``TargetHttpsProxy.sslCertificates`` takes "Certificate Manager Certificates", which "must
    include the certificatemanager API namespace")."""
    certificates = _list(r.get("certificateManagerCertificates")) or _list(r.get("sslCertificates"))
    body = _some(
        name=name_of(r),
        urlMap=r.get("urlMap"),
        sslCertificates=certificates,
        sslPolicy=r.get("sslPolicy"),
        description=r.get("description"),
    )
    return [Body("compute.v1", "TargetHttpsProxy", "compute.regionTargetHttpsProxies.insert", body)]


def dns_authorization(r: Resource, s: Stack) -> list[Body]:
    """``name`` is the create call's ``dnsAuthorizationId`` query parameter."""
    body = _some(
        domain=r.get("domain"), description=r.get("description"), labels=r.get("labels"), type=r.get("type")
    )
    return [Body("certificatemanager.v1", "DnsAuthorization", None, body)]


def cm_certificate(r: Resource, s: Stack) -> list[Body]:
    managed = r.get("managed") or {}
    body = _some(
        description=r.get("description"),
        labels=r.get("labels"),
        scope=r.get("scope"),
        managed=_some(domains=managed.get("domains"), dnsAuthorizations=managed.get("dnsAuthorizations"))
        or None,
    )
    return [Body("certificatemanager.v1", "Certificate", None, body)]


def scheduler_job(r: Resource, s: Stack) -> list[Body]:
    retry = r.get("retryConfig") or {}
    http = r.get("httpTarget") or {}
    token = http.get("oauthToken") or {}
    body = _some(
        name=f"projects/{s.project}/locations/{r.get('region')}/jobs/{name_of(r)}",
        description=r.get("description"),
        schedule=r.get("schedule"),
        timeZone=r.get("timeZone"),
        attemptDeadline=r.get("attemptDeadline"),
        retryConfig=_some(
            retryCount=retry.get("retryCount"),
            minBackoffDuration=retry.get("minBackoffDuration"),
            maxBackoffDuration=retry.get("maxBackoffDuration"),
            maxRetryDuration=retry.get("maxRetryDuration"),
            maxDoublings=retry.get("maxDoublings"),
        ),
        httpTarget=_some(
            uri=http.get("uri"),
            httpMethod=http.get("httpMethod"),
            headers=http.get("headers"),
            body=http.get("body"),
            oauthToken=_some(serviceAccountEmail=token.get("serviceAccountEmail"), scope=token.get("scope")),
        ),
    )
    return [Body("cloudscheduler.v1", "Job", None, body)]


def workflow(r: Resource, s: Stack) -> list[Body]:
    body = _some(
        name=f"projects/{s.project}/locations/{r.get('region')}/workflows/{name_of(r)}",
        description=r.get("description"),
        sourceContents=r.get("sourceContents"),
        serviceAccount=r.get("serviceAccount"),
        userEnvVars=r.get("userEnvVars"),
        callLogLevel=r.get("callLogLevel"),
        labels=r.get("labels"),
    )
    return [Body("workflows.v1", "Workflow", None, body)]


def project_service(r: Resource, s: Stack) -> list[Body]:
    return []  # services.enable takes the name in the path: gcp.api-service checks it


BUILDERS: dict[str, Callable[[Resource, Stack], list[Body]]] = {
    "gcp:compute/instance:Instance": instance,
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate": region_instance_template,
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": region_instance_group_manager,
    "gcp:compute/regionResizeRequest:RegionResizeRequest": region_resize_request,
    "gcp:compute/futureReservation:FutureReservation": future_reservation,
    "gcp:compute/network:Network": _simple(
        "Network",
        "compute.networks.insert",
        {
            "autoCreateSubnetworks": "autoCreateSubnetworks",
            "mtu": "mtu",
            "description": "description",
            "networkProfile": "networkProfile",
        },
    ),
    "gcp:compute/subnetwork:Subnetwork": _simple(
        "Subnetwork",
        "compute.subnetworks.insert",
        {
            "network": "network",
            "ipCidrRange": "ipCidrRange",
            "privateIpGoogleAccess": "privateIpGoogleAccess",
            "description": "description",
            "purpose": "purpose",
            "role": "role",
            "region": "region",
            "stackType": "stackType",
        },
    ),
    "gcp:compute/firewall:Firewall": firewall,
    "gcp:compute/address:Address": _simple(
        "Address",
        "compute.addresses.insert",
        {
            "addressType": "addressType",
            "purpose": "purpose",
            "subnetwork": "subnetwork",
            "networkTier": "networkTier",
            "description": "description",
            "address": "address",
            "labels": "labels",
            "region": "region",
        },
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": resource_policy,
    "gcp:compute/regionHealthCheck:RegionHealthCheck": health_check,
    "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy": security_policy,
    "gcp:compute/regionBackendService:RegionBackendService": backend_service,
    "gcp:compute/regionUrlMap:RegionUrlMap": _simple(
        "UrlMap",
        "compute.regionUrlMaps.insert",
        {
            "defaultService": "defaultService",
            "defaultRouteAction": "defaultRouteAction",
            "hostRules": "hostRules",
            "pathMatchers": "pathMatchers",
            "description": "description",
        },
    ),
    "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy": _simple(
        "TargetHttpProxy",
        "compute.regionTargetHttpProxies.insert",
        {"urlMap": "urlMap", "description": "description"},
    ),
    "gcp:compute/regionTargetHttpsProxy:RegionTargetHttpsProxy": https_proxy,
    "gcp:compute/regionSslPolicy:RegionSslPolicy": _simple(
        "SslPolicy",
        "compute.regionSslPolicies.insert",
        {"minTlsVersion": "minTlsVersion", "profile": "profile", "description": "description"},
    ),
    "gcp:certificatemanager/dnsAuthorization:DnsAuthorization": dns_authorization,
    "gcp:certificatemanager/certificate:Certificate": cm_certificate,
    "gcp:compute/forwardingRule:ForwardingRule": forwarding_rule,
    "gcp:storage/bucket:Bucket": bucket,
    "gcp:storage/bucketIAMMember:BucketIAMMember": _binding("storage.v1"),
    "gcp:serviceaccount/account:Account": service_account,
    "gcp:projects/iAMCustomRole:IAMCustomRole": custom_role,
    "gcp:projects/iAMMember:IAMMember": _binding("cloudresourcemanager.v1"),
    "gcp:secretmanager/secret:Secret": secret,
    "gcp:secretmanager/secretVersion:SecretVersion": secret_version,
    "gcp:secretmanager/secretIamMember:SecretIamMember": _binding("secretmanager.v1"),
    "gcp:cloudscheduler/job:Job": scheduler_job,
    "gcp:workflows/workflow:Workflow": workflow,
    "gcp:projects/service:Service": project_service,
}

PROVIDER_ONLY: dict[str, frozenset[str]] = {
    "gcp:compute/instance:Instance": frozenset({"zone", "allowStoppingForUpdate", "project"}),
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate": frozenset({"region", "project"}),
    "gcp:compute/regionResizeRequest:RegionResizeRequest": frozenset(
        {"region", "project", "instanceGroupManager"}
    ),
    "gcp:compute/futureReservation:FutureReservation": frozenset({"zone", "project"}),
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": frozenset(
        {"region", "waitForInstances", "project"}
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": frozenset({"region", "project"}),
    "gcp:compute/regionHealthCheck:RegionHealthCheck": frozenset({"region", "project"}),
    "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy": frozenset({"region", "project"}),
    "gcp:compute/regionBackendService:RegionBackendService": frozenset({"region", "project"}),
    "gcp:compute/regionUrlMap:RegionUrlMap": frozenset({"region", "project"}),
    "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy": frozenset({"region", "project"}),
    "gcp:compute/regionTargetHttpsProxy:RegionTargetHttpsProxy": frozenset({"region", "project"}),
    "gcp:compute/regionSslPolicy:RegionSslPolicy": frozenset({"region", "project"}),
    "gcp:certificatemanager/dnsAuthorization:DnsAuthorization": frozenset({"name", "location", "project"}),
    "gcp:certificatemanager/certificate:Certificate": frozenset({"name", "location", "project"}),
    "gcp:compute/forwardingRule:ForwardingRule": frozenset({"region", "project"}),
    "gcp:storage/bucket:Bucket": frozenset({"forceDestroy", "project"}),
    "gcp:storage/bucketIAMMember:BucketIAMMember": frozenset({"bucket"}),
    "gcp:serviceaccount/account:Account": frozenset({"project"}),
    "gcp:projects/iAMCustomRole:IAMCustomRole": frozenset({"project"}),
    "gcp:projects/iAMMember:IAMMember": frozenset({"project"}),
    "gcp:secretmanager/secret:Secret": frozenset({"secretId", "project"}),  # a query parameter
    "gcp:secretmanager/secretVersion:SecretVersion": frozenset({"secret"}),
    "gcp:secretmanager/secretIamMember:SecretIamMember": frozenset({"secretId", "project"}),
    "gcp:cloudscheduler/job:Job": frozenset({"region", "project"}),
    # the workflow id is a query parameter; deletion protection is the provider's own guard
    "gcp:workflows/workflow:Workflow": frozenset({"region", "project", "deletionProtection"}),
    "gcp:projects/service:Service": frozenset(
        {"service", "disableOnDestroy", "disableDependentServices", "project"}
    ),
}
"""Inputs that are path or query parameters, or the provider's own behaviour."""


MAPPED: dict[str, frozenset[str]] = {
    "gcp:compute/instance:Instance": frozenset(
        {
            "name",
            "machineType",
            "description",
            "bootDisk",
            "guestAccelerators",
            "networkInterfaces",
            "scheduling",
            "serviceAccount",
            "shieldedInstanceConfig",
            "metadata",
            "resourcePolicies",
            "labels",
            "tags",
        }
    ),
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate": frozenset(
        {
            "name",
            "namePrefix",
            "description",
            "instanceDescription",
            "machineType",
            "disks",
            "guestAccelerators",
            "networkInterfaces",
            "scheduling",
            "reservationAffinity",
            "serviceAccount",
            "shieldedInstanceConfig",
            "metadata",
            "resourcePolicies",
            "labels",
            "tags",
        }
    ),
    "gcp:compute/regionResizeRequest:RegionResizeRequest": frozenset(
        {"name", "description", "resizeBy", "requestedRunDuration"}
    ),
    "gcp:compute/futureReservation:FutureReservation": frozenset(
        {
            "name",
            "description",
            "reservationMode",
            "planningStatus",
            "autoDeleteAutoCreatedReservations",
            "specificReservationRequired",
            "reservationName",
            "timeWindow",
            "specificSkuProperties",
        }
    ),
    "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager": frozenset(
        {
            "name",
            "baseInstanceName",
            "description",
            "targetSize",
            "versions",
            "distributionPolicyZones",
            "distributionPolicyTargetShape",
            "instanceFlexibilityPolicy",
            "updatePolicy",
            "namedPorts",
            "autoHealingPolicies",
            "instanceLifecyclePolicy",
        }
    ),
    "gcp:compute/network:Network": frozenset(
        {"name", "autoCreateSubnetworks", "mtu", "description", "networkProfile"}
    ),
    "gcp:compute/subnetwork:Subnetwork": frozenset(
        {
            "name",
            "network",
            "ipCidrRange",
            "privateIpGoogleAccess",
            "description",
            "purpose",
            "role",
            "region",
            "stackType",
        }
    ),
    "gcp:compute/firewall:Firewall": frozenset(
        {
            "name",
            "network",
            "direction",
            "priority",
            "description",
            "allows",
            "denies",
            "sourceRanges",
            "sourceTags",
            "targetTags",
            "destinationRanges",
        }
    ),
    "gcp:compute/address:Address": frozenset(
        {
            "name",
            "addressType",
            "purpose",
            "subnetwork",
            "networkTier",
            "description",
            "address",
            "labels",
            "region",
        }
    ),
    "gcp:compute/resourcePolicy:ResourcePolicy": frozenset({"name", "description", "groupPlacementPolicy"}),
    "gcp:compute/regionHealthCheck:RegionHealthCheck": frozenset(
        {
            "name",
            "description",
            "httpHealthCheck",
            "checkIntervalSec",
            "timeoutSec",
            "healthyThreshold",
            "unhealthyThreshold",
        }
    ),
    "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy": frozenset(
        {"name", "description", "type", "rules"}
    ),
    "gcp:compute/regionBackendService:RegionBackendService": frozenset(
        {
            "name",
            "loadBalancingScheme",
            "protocol",
            "portName",
            "timeoutSec",
            "healthChecks",
            "securityPolicy",
            "backends",
        }
    ),
    "gcp:compute/regionUrlMap:RegionUrlMap": frozenset(
        {"name", "defaultService", "defaultRouteAction", "hostRules", "pathMatchers", "description"}
    ),
    "gcp:compute/regionTargetHttpProxy:RegionTargetHttpProxy": frozenset({"name", "urlMap", "description"}),
    "gcp:compute/regionTargetHttpsProxy:RegionTargetHttpsProxy": frozenset(
        {"name", "urlMap", "certificateManagerCertificates", "sslCertificates", "sslPolicy", "description"}
    ),
    "gcp:compute/regionSslPolicy:RegionSslPolicy": frozenset(
        {"name", "minTlsVersion", "profile", "description"}
    ),
    "gcp:certificatemanager/dnsAuthorization:DnsAuthorization": frozenset(
        {"domain", "description", "labels", "type"}
    ),
    "gcp:certificatemanager/certificate:Certificate": frozenset(
        {"description", "labels", "scope", "managed"}
    ),
    "gcp:compute/forwardingRule:ForwardingRule": frozenset(
        {
            "name",
            "ipProtocol",
            "portRange",
            "target",
            "network",
            "networkTier",
            "ipAddress",
            "loadBalancingScheme",
            "labels",
        }
    ),
    "gcp:storage/bucket:Bucket": frozenset(
        {
            "name",
            "location",
            "storageClass",
            "labels",
            "uniformBucketLevelAccess",
            "publicAccessPrevention",
            "lifecycleRules",
        }
    ),
    "gcp:storage/bucketIAMMember:BucketIAMMember": frozenset({"role", "member", "condition"}),
    "gcp:serviceaccount/account:Account": frozenset({"accountId", "displayName", "description"}),
    "gcp:projects/iAMCustomRole:IAMCustomRole": frozenset(
        {"roleId", "title", "description", "permissions", "stage"}
    ),
    "gcp:projects/iAMMember:IAMMember": frozenset({"role", "member", "condition"}),
    "gcp:secretmanager/secret:Secret": frozenset({"replication", "labels"}),
    "gcp:secretmanager/secretVersion:SecretVersion": frozenset({"secretData"}),
    "gcp:secretmanager/secretIamMember:SecretIamMember": frozenset({"role", "member", "condition"}),
    "gcp:cloudscheduler/job:Job": frozenset(
        {"name", "description", "schedule", "timeZone", "attemptDeadline", "retryConfig", "httpTarget"}
    ),
    "gcp:workflows/workflow:Workflow": frozenset(
        {"name", "description", "sourceContents", "serviceAccount", "userEnvVars", "callLogLevel", "labels"}
    ),
    "gcp:projects/service:Service": frozenset(),
}


def unmapped(r: Resource) -> list[str]:
    known = MAPPED.get(r.typ, frozenset()) | PROVIDER_ONLY.get(r.typ, frozenset())
    return sorted(k for k in r.inputs if k not in known)


def bodies(r: Resource, s: Stack) -> list[Body] | None:
    build = BUILDERS.get(r.typ)
    return build(r, s) if build is not None else None
