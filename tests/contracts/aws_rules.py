"""AWS's rules, each with the page that states it: the service models (every request checked
against botocore's model, patterns and maxima included) and the documented limits the models
do not carry (tag characters, name rules, security-group character sets, EFA layout, ...)."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from providers.aws.efa import efa_cards
from selector.images import family, image_line
from tests.contracts import aws_requests as api
from tests.contracts.aws_model import problems
from tests.contracts.coverage import unread
from tests.contracts.javaregex import matches
from tests.contracts.model import Resource, Rule, Stack

SG = "aws:ec2/securityGroup:SecurityGroup"
SG_IN = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_OUT = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
BUCKET = "aws:s3/bucket:Bucket"
INSTANCE = "aws:ec2/instance:Instance"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ENI = "aws:ec2/networkInterface:NetworkInterface"
GROUP = "aws:autoscaling/group:Group"
GROUP_SCHEDULE = "aws:autoscaling/schedule:Schedule"
SCHEDULE = "aws:scheduler/schedule:Schedule"
SECRET = "aws:secretsmanager/secret:Secret"
LB = "aws:lb/loadBalancer:LoadBalancer"
TG = "aws:lb/targetGroup:TargetGroup"

TAG_CHARS = r"[\p{L}\p{Z}\p{N}_.:/=+\-@]*"
"""The tag characters AWS services share: "letters, numbers, and spaces representable in UTF-8,
and the following characters: + - = . _ : / @" (the IAM and ELB models carry it as a pattern)."""


def R(typ: str, resource_name: str = "r", /, **inputs: Any) -> Resource:
    return Resource(typ, resource_name, inputs)


def tag_maps(r: Resource) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every tag map a resource sends, named by where it sits."""
    tags = r.get("tags")
    if isinstance(tags, Mapping):
        yield "tags", dict(tags)
    elif isinstance(tags, list):  # an Auto Scaling group: [{key, value, propagateAtLaunch}]
        yield "tags", {t.get("key"): t.get("value") for t in tags}
    for i, spec in enumerate(r.get("tagSpecifications") or []):
        yield f"tagSpecifications[{i}].tags", dict(spec.get("tags") or {})
    root = r.get("rootBlockDevice") or {}
    if root.get("tags"):
        yield "rootBlockDevice.tags", dict(root["tags"])


# -- every request against the service model --------------------------------------------------


def check_model(r: Resource, s: Stack) -> Iterator[str]:
    built = api.requests(r, s)
    if built is None:
        return
    for request in built:
        yield from problems(request.service, request.operation, request.params)


def check_coverage(r: Resource, s: Stack) -> Iterator[str]:
    if r.typ not in api.BUILDERS:
        yield f"no contract knows what {r.typ} sends: map it in tests/contracts/aws_requests.py"
        return
    for key in api.unmapped(r):
        yield (
            f"input {key!r} reaches no request the contracts know: map it in tests/contracts/aws_requests.py"
        )
    top_level = api.MAPPED.get(r.typ, frozenset())
    for path in unread(r, s, api.requests, top_level, api.IGNORED.get(r.typ, ())):
        yield (
            f"nested input {path!r} reaches no request the contracts know: map it in "
            "tests/contracts/aws_requests.py, or list it in IGNORED with the reason"
        )


# -- tags ----------------------------------------------------------------------------------------


def check_tag_limits(r: Resource, s: Stack) -> Iterator[str]:
    for where, tags in tag_maps(r):
        if len(tags) > 50:
            yield f"{where}: {len(tags)} tags, over 50"
        for key, value in tags.items():
            if not 1 <= len(str(key)) <= 128:
                yield f"{where}: key {key!r} is not 1-128 characters"
            if len(str(value)) > 256:
                yield f"{where}[{key!r}]: value over 256 characters"
            if str(key).lower().startswith("aws:"):
                yield f"{where}: key {key!r} uses the reserved aws: prefix"


def check_tag_characters(r: Resource, s: Stack) -> Iterator[str]:
    for where, tags in tag_maps(r):
        for key, value in tags.items():
            for part, text in (("key", key), ("value", value)):
                if not matches(TAG_CHARS, str(text)):
                    yield f"{where}: {part} {text!r} has characters outside {TAG_CHARS}"


# -- security groups -----------------------------------------------------------------------------

SG_TEXT = r"[a-zA-Z0-9 ._\-:/()#,@\[\]+=&;{}!$*]*"
SG_RULE_TEXT = r"[a-zA-Z0-9 ._\-:/()#,@\[\]+=;{}!$*]*"
"""EC2's set for rule descriptions; ``&`` is listed for CIDR ranges but not for group pairs, so
it is refused in both."""


def check_sg_text(r: Resource, s: Stack) -> Iterator[str]:
    name = api.security_group_name(r)
    if name.startswith("sg-"):
        yield f"name {name!r} starts with sg-"
    for what, text in (("name", name), ("description", r.get("description", "Managed by Pulumi"))):
        if len(text) > 255 or not re.fullmatch(SG_TEXT, text):
            yield f"{what} {text!r}: up to 255 of a-z, A-Z, 0-9, spaces and ._-:/()#,@[]+=&;{{}}!$*"


def _rule_descriptions(r: Resource) -> Iterator[tuple[str, Any]]:
    if r.typ == SG:
        for key in ("ingress", "egress"):
            for i, rule in enumerate(r.get(key) or []):
                yield f"{key}[{i}].description", rule.get("description")
    else:
        yield "description", r.get("description")


def check_sg_rule_text(r: Resource, s: Stack) -> Iterator[str]:
    for where, text in _rule_descriptions(r):
        if text is not None and (len(str(text)) > 255 or not re.fullmatch(SG_RULE_TEXT, str(text))):
            yield f"{where} {text!r}: rule descriptions take up to 255 of a-zA-Z0-9. _-:/()#,@[]+=;{{}}!$*"


def check_sg_rule_shape(r: Resource, s: Stack) -> Iterator[str]:
    sources = [k for k in ("cidrIpv4", "cidrIpv6", "prefixListId", "referencedSecurityGroupId") if r.get(k)]
    if len(sources) != 1:
        yield (
            "a rule names exactly one of cidr_ipv4, cidr_ipv6, prefix_list_id, "
            f"referenced_security_group_id ({sources})"
        )
    if str(r.get("ipProtocol")) == "-1" and (r.get("fromPort") is not None or r.get("toPort") is not None):
        yield "ip_protocol -1 (all) takes no from_port/to_port"


def _inline(group: Resource) -> bool:
    return "ingress" in group.inputs or "egress" in group.inputs


def check_sg_one_style(r: Resource, s: Stack) -> Iterator[str]:
    separate = [x for x in s.resources if x.typ in (SG_IN, SG_OUT)]
    for group in s.of_type(SG):
        if not _inline(group):
            continue
        ids = {group.name + "-id", *(k for k, v in s.by_id.items() if v is group)}
        mixed = [x.name for x in separate if str(x.get("securityGroupId")) in ids]
        if mixed:
            yield (
                f"group {group.name} has inline ingress/egress and separate rules {mixed}: they overwrite "
                "each other"
            )


# -- names and buckets ---------------------------------------------------------------------------

BUCKET_PREFIX_MAX = 37  # 63 - terraform's 26-character unique suffix


def check_bucket_prefix(r: Resource, s: Stack) -> Iterator[str]:
    prefix = r.get("bucketPrefix")
    if prefix is None:
        return
    if len(prefix) > BUCKET_PREFIX_MAX:
        yield f"bucket_prefix {prefix!r} is {len(prefix)} characters, over {BUCKET_PREFIX_MAX}"
    if not re.fullmatch(r"[0-9a-z.-]*", prefix):
        yield f"bucket_prefix {prefix!r}: lowercase letters, digits, dots and hyphens only"


def bucket_name_problems(name: str) -> Iterator[str]:
    if not 3 <= len(name) <= 63:
        yield f"bucket name {name!r} is {len(name)} characters, not 3-63"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*[a-z0-9]", name):
        yield f"bucket name {name!r}: lowercase letters, digits, dots, hyphens; a letter or digit at each end"
    if ".." in name:
        yield f"bucket name {name!r} has two adjacent periods"
    try:
        ipaddress.IPv4Address(name)
        yield f"bucket name {name!r} is an IP address"
    except ValueError:
        pass
    for prefix in ("xn--", "sthree-", "amzn-s3-demo-"):
        if name.startswith(prefix):
            yield f"bucket name {name!r} starts with the reserved {prefix}"
    for suffix in ("-s3alias", "--ol-s3", ".mrap", "--x-s3"):
        if name.endswith(suffix):
            yield f"bucket name {name!r} ends with the reserved {suffix}"


def check_bucket_name(r: Resource, s: Stack) -> Iterator[str]:
    yield from bucket_name_problems(api.bucket_name(r))


def check_lb_names(r: Resource, s: Stack) -> Iterator[str]:
    prefix = r.get("namePrefix")
    if prefix is not None and (len(prefix) > 6 or not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z-]*", prefix)):
        yield f"name_prefix {prefix!r}: at most 6 letters, digits or hyphens, not starting with a hyphen"
    name = api.name_of(r)
    if len(name) > 32 or not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?", name):
        yield f"name {name!r}: at most 32 letters, digits or hyphens, none at either end"
    if r.typ == LB and name.startswith("internal-"):
        yield f"name {name!r} starts with internal-"


def check_alb_subnets(r: Resource, s: Stack) -> Iterator[str]:
    if r.get("loadBalancerType", "application") == "application" and len(r.get("subnets") or []) < 2:
        yield f"an Application Load Balancer needs subnets in two zones at least ({r.get('subnets')})"


def check_elb_attributes(r: Resource, s: Stack) -> Iterator[str]:
    idle = r.get("idleTimeout")
    if idle is not None and not 1 <= idle <= 4000:
        yield f"idle_timeout {idle}: 1-4000 seconds"
    delay = r.get("deregistrationDelay")
    if delay is not None and not 0 <= int(delay) <= 3600:
        yield f"deregistration_delay {delay}: 0-3600 seconds"
    matcher = (r.get("healthCheck") or {}).get("matcher")
    if matcher is not None and r.get("protocol") in ("HTTP", "HTTPS"):
        for code in re.split(r"[,-]", str(matcher)):
            if not code.isdigit() or not 200 <= int(code) <= 499:
                yield f"health check matcher {matcher!r}: HTTP codes 200-499 for an Application Load Balancer"


def check_asg_name(r: Resource, s: Stack) -> Iterator[str]:
    name = str(r.get("name") or "")
    if name and (":" in name or not all(33 <= ord(c) <= 126 for c in name)):
        yield f"group name {name!r}: ASCII 33-126 and no colon"


SCALING_PROCESSES = frozenset(
    {
        "Launch",
        "Terminate",
        "AddToLoadBalancer",
        "AlarmNotification",
        "AZRebalance",
        "HealthCheck",
        "InstanceRefresh",
        "ReplaceUnhealthy",
        "ScheduledActions",
    }
)


def check_suspended_processes(r: Resource, s: Stack) -> Iterator[str]:
    for process in r.get("suspendedProcesses") or []:
        if process not in SCALING_PROCESSES:
            yield f"suspended process {process!r} is not one of {sorted(SCALING_PROCESSES)}"


def _timestamp(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def check_scheduled_action(r: Resource, s: Stack) -> Iterator[str]:
    start = r.get("startTime")
    if start is None:
        return
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", str(start)):
        yield f"start_time {start!r}: YYYY-MM-DDThh:mm:ssZ in UTC"
        return
    moment = _timestamp(str(start))
    if s.now is not None and moment is not None and moment <= s.now:
        yield f"start_time {start} is not in the future (now {s.now.isoformat()})"


# -- instances and launch templates --------------------------------------------------------------

USER_DATA_MAX = 16 * 1024


def check_user_data(r: Resource, s: Stack) -> Iterator[str]:
    data = r.get("userData")
    if data is None:
        return
    raw: bytes
    if r.typ == TEMPLATE:
        try:
            raw = base64.b64decode(str(data), validate=True)
        except binascii.Error:
            yield "user_data of a launch template must be base64"
            return
    else:
        raw = str(data).encode()
    if len(raw) > USER_DATA_MAX:
        yield f"user data is {len(raw)} bytes, over 16 KB"


LT_TAG_KINDS = frozenset({"instance", "volume", "network-interface", "spot-instances-request"})


def check_lt_tag_specs(r: Resource, s: Stack) -> Iterator[str]:
    for spec in r.get("tagSpecifications") or []:
        if spec.get("resourceType") not in LT_TAG_KINDS:
            yield (
                f"tag specification for {spec.get('resourceType')!r}: a launch template tags "
                f"{sorted(LT_TAG_KINDS)}"
            )


def check_lt_groups(r: Resource, s: Stack) -> Iterator[str]:
    nics = r.get("networkInterfaces") or []
    if nics and r.get("vpcSecurityGroupIds"):
        yield "vpc_security_group_ids with network_interfaces: groups go on each interface"
    for i, nic in enumerate(nics):
        if not nic.get("networkInterfaceId") and not nic.get("securityGroups"):
            yield f"network_interfaces[{i}] has no security group"


def check_public_ip(r: Resource, s: Stack) -> Iterator[str]:
    nics = r.get("networkInterfaces") or []
    if any(str(n.get("associatePublicIpAddress")).lower() == "true" for n in nics) and len(nics) > 1:
        yield "associate_public_ip_address with more than one network interface"


def check_spot_options(r: Resource, s: Stack) -> Iterator[str]:
    spot = (r.get("instanceMarketOptions") or {}).get("spotOptions") or {}
    kind = spot.get("spotInstanceType", "one-time")
    behaviour = spot.get("instanceInterruptionBehavior", "terminate")
    if kind == "persistent" and behaviour not in ("stop", "hibernate"):
        yield f"a persistent spot request takes interruption behaviour stop or hibernate, not {behaviour!r}"
    if spot.get("validUntil") and kind != "persistent":
        yield "valid_until applies to persistent spot requests only"
    if kind == "persistent" and r.get("instanceInitiatedShutdownBehavior") == "terminate":
        yield "a persistent spot instance cannot terminate on shutdown"
    until = _timestamp(str(spot.get("validUntil") or ""))
    if until is not None and s.now is not None and until <= s.now:
        yield f"valid_until {spot.get('validUntil')} is not in the future"


def _volumes(r: Resource) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if r.typ == INSTANCE and r.get("rootBlockDevice"):
        yield "root_block_device", r.get("rootBlockDevice")
    for i, mapping in enumerate(r.get("blockDeviceMappings") or []):
        yield f"block_device_mappings[{i}]", mapping.get("ebs") or {}


def check_volume_size(r: Resource, s: Stack) -> Iterator[str]:
    for where, ebs in _volumes(r):
        size = ebs.get("volumeSize")
        if size is None:
            continue
        if ebs.get("volumeType", "gp3") in ("gp2", "gp3") and not 1 <= size <= 65536:
            yield f"{where}.volume_size {size}: gp3 takes 1-65,536 GiB"
        if s.image_root_gb is not None and size < s.image_root_gb:
            yield (
                f"{where}.volume_size {size} is smaller than the image's root snapshot ({s.image_root_gb} GB)"
            )


def _launched_types(r: Resource) -> Iterator[str]:
    if r.get("instanceType"):
        yield str(r.get("instanceType"))
    policy = (r.get("mixedInstancesPolicy") or {}).get("launchTemplate") or {}
    for override in policy.get("overrides") or []:
        if override.get("instanceType"):
            yield str(override["instanceType"])


def check_image_support(r: Resource, s: Stack) -> Iterator[str]:
    for machine in _launched_types(r):
        if image_line("aws", machine) is None:
            yield (
                f"{machine}: the {family(machine)} family is not among the Deep Learning AMIs' supported "
                "instances"
            )


# -- EFA ------------------------------------------------------------------------------------------


def _template_of(instance: Resource, s: Stack) -> Resource | None:
    ref = instance.get("launchTemplate") or {}
    return s.referenced(ref.get("id"))


def _interfaces(instance: Resource, s: Stack) -> list[dict[str, Any]]:
    """The interfaces an instance launches with: its launch template's, or its primary ENI."""
    template = _template_of(instance, s)
    if template is not None and template.get("networkInterfaces"):
        found = []
        for nic in template.get("networkInterfaces"):
            kind = nic.get("interfaceType")
            eni = s.referenced(nic.get("networkInterfaceId"))
            if eni is not None:
                kind = eni.get("interfaceType", "interface")
            groups = nic.get("securityGroups") or (eni.get("securityGroups") if eni is not None else [])
            found.append(
                {
                    "card": nic.get("networkCardIndex", 0),
                    "device": nic.get("deviceIndex", 0),
                    "type": kind or "interface",
                    "groups": list(groups or []),
                }
            )
        return found
    primary = s.referenced((instance.get("primaryNetworkInterface") or {}).get("networkInterfaceId"))
    if primary is not None:
        return [
            {
                "card": 0,
                "device": 0,
                "type": primary.get("interfaceType", "interface"),
                "groups": primary.get("securityGroups", []),
            }
        ]
    return [
        {
            "card": 0,
            "device": 0,
            "type": "interface",
            "groups": list(instance.get("vpcSecurityGroupIds") or []),
        }
    ]


def _efa_instances(s: Stack) -> Iterator[tuple[Resource, list[dict[str, Any]]]]:
    for instance in s.of_type(INSTANCE):
        nics = _interfaces(instance, s)
        if any(n["type"] in ("efa", "efa-only") for n in nics):
            yield instance, nics


SECONDARY_CARD_SLOTS = frozenset({(0, "efa-only"), (1, "interface"), (1, "efa"), (1, "efa-only")})
"""What a network card after the first may carry, by (device index, interface type). AWS's
current page (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html):
"For each additional network interface, use the next unused network card index, device index
0, for EFA-only network interface, and/or device index 1 for ENA"; its earlier wording, still
served at docs.amazonaws.cn and what launches in production use (dstackai/dstack PR #2271
launches P5 so): "use the next unused network card index, device index 1, and either an EFA
(EFA with ENA) or EFA-only network interface". Both are accepted."""


def check_efa_layout(r: Resource, s: Stack) -> Iterator[str]:
    cards = efa_cards()
    for instance, nics in _efa_instances(s):
        machine = str(
            instance.get("instanceType") or (_template_of(instance, s) or instance).get("instanceType")
        )
        known = cards.get(machine)
        slots = [(n["card"], n["device"]) for n in nics]
        if len(set(slots)) != len(slots):
            yield f"{instance.name}: two interfaces on one (network card, device index): {slots}"
        primary = [n for n in nics if (n["card"], n["device"]) == (0, 0)]
        if not primary or primary[0]["type"] == "efa-only":
            yield (
                f"{instance.name}: the primary interface (card 0, device 0) must be ENA or EFA with ENA, "
                "not EFA-only"
            )
        efas = [n for n in nics if n["type"] in ("efa", "efa-only")]
        if known is None:
            yield f"{instance.name}: {machine} does not support EFA"
            continue
        if any(n["card"] >= known.network_cards for n in nics):
            yield f"{instance.name}: a network card index beyond {machine}'s {known.network_cards} cards"
        if len(efas) > known.efa_interfaces:
            yield f"{instance.name}: {len(efas)} EFA interfaces, {machine} takes {known.efa_interfaces}"
        if (
            known.efa_interfaces == known.network_cards
            and len({n["card"] for n in efas}) < known.network_cards
        ):
            yield (
                f"{instance.name}: EFA on {len({n['card'] for n in efas})} of {machine}'s "
                f"{known.network_cards} "
                "network cards: the bandwidth the plan counts on needs one per card"
            )
        for n in nics:
            if n["card"] == 0 or (n["device"], n["type"]) in SECONDARY_CARD_SLOTS:
                continue
            yield (
                f"{instance.name}: {n['type']} at device index {n['device']} on network card {n['card']}: "
                "a card after the first takes EFA-only at device 0 and/or an interface at device 1"
            )


def _self_rules(group: Resource, s: Stack, direction: str) -> bool:
    """Whether ``group`` lets all traffic in (or out) to and from itself."""
    own_ids = {k for k, v in s.by_id.items() if v is group}
    for rule in group.get(direction) or []:
        if str(rule.get("protocol")) == "-1" and (
            rule.get("self") or own_ids & set(rule.get("securityGroups") or [])
        ):
            return True
    typ = SG_IN if direction == "ingress" else SG_OUT
    return any(
        str(x.get("securityGroupId")) in own_ids
        and str(x.get("referencedSecurityGroupId")) in own_ids
        and str(x.get("ipProtocol")) == "-1"
        for x in s.of_type(typ)
    )


def check_efa_security_group(r: Resource, s: Stack) -> Iterator[str]:
    for instance, nics in _efa_instances(s):
        for nic in nics:
            if nic["type"] not in ("efa", "efa-only"):
                continue
            groups = [s.referenced(g) for g in nic["groups"]]
            if not any(
                g is not None and _self_rules(g, s, "ingress") and _self_rules(g, s, "egress") for g in groups
            ):
                yield (
                    f"{instance.name}: the EFA on card {nic['card']} has no security group allowing all "
                    "traffic in from and out to itself"
                )
                break


# -- EventBridge Scheduler, Secrets Manager, IAM --------------------------------------------------


def check_schedule_expression(r: Resource, s: Stack) -> Iterator[str]:
    expression = str(r.get("scheduleExpression") or "")
    at = re.fullmatch(r"at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)", expression)
    if not at and not re.fullmatch(r"(rate|cron)\(.+\)", expression):
        yield f"schedule_expression {expression!r}: at(yyyy-mm-ddThh:mm:ss), rate(...) or cron(...)"
    if at and s.now is not None:
        moment = datetime.fromisoformat(at.group(1) + "+00:00")
        if moment <= s.now:
            yield f"a one-time schedule at {at.group(1)} is in the past"


def check_secret_name(r: Resource, s: Stack) -> Iterator[str]:
    prefix = r.get("namePrefix")
    if prefix is not None and (len(prefix) > 512 - 26 or not re.fullmatch(r"[0-9A-Za-z/_+=.@-]+", prefix)):
        yield f"name_prefix {prefix!r}: up to 486 of 0-9A-Za-z/_+=.@-"
    name = r.get("name")
    if name is not None:
        if not re.fullmatch(r"[0-9A-Za-z/_+=.@-]{1,512}", name):
            yield f"name {name!r}: 1-512 of 0-9A-Za-z/_+=.@-"
        if re.search(r"-[^-]{6}$", name):
            yield f"name {name!r} ends with a hyphen and six characters (Secrets Manager's own suffix)"


TRUST_POLICY_MAX = 2048
INLINE_POLICIES_MAX = 10240


def check_policy_sizes(r: Resource, s: Stack) -> Iterator[str]:
    for role in s.of_type(ROLE):
        trust = "".join(str(role.get("assumeRolePolicy") or "").split())
        if len(trust) > TRUST_POLICY_MAX:
            yield f"{role.name}: trust policy of {len(trust)} characters, over {TRUST_POLICY_MAX}"
        ids = {k for k, v in s.by_id.items() if v is role} | {api.name_of(role)}
        inline = [p for p in s.of_type(ROLE_POLICY) if str(p.get("role")) in ids]
        total = sum(len("".join(str(p.get("policy") or "").split())) for p in inline)
        if total > INLINE_POLICIES_MAX:
            yield f"{role.name}: inline policies of {total} characters in all, over {INLINE_POLICIES_MAX}"


# -- the rules -------------------------------------------------------------------------------------

TAGS_OK = {"gpufit:zones": "use1-az1 use1-az2", "gpufit:expires-at": "2026-12-04T13:00:00Z"}
TAGS_COMMA = {"gpufit:zones": "use1-az1,use1-az2"}
POLICY = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "*"}]}
)
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
)


def _efa_stack(layout: list[dict[str, Any]], rules: dict[str, Any]) -> Stack:
    s = Stack()
    group = R(SG, "g", description="efa", vpcId="vpc-1", **rules)
    s.add(group, "g-id")
    eni = R(ENI, "eni", subnetId="subnet-1", securityGroups=["g-id"], interfaceType="efa")
    s.add(eni, "eni-id")
    s.add(R(TEMPLATE, "lt", networkInterfaces=layout), "lt-id")
    s.add(
        R(
            INSTANCE,
            "node0",
            instanceType="p4d.24xlarge",
            launchTemplate={"id": "lt-id", "version": "$Latest"},
        ),
        "node0-id",
    )
    return s


EFA_SELF = {
    "ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True, "description": "job"}],
    "egress": [
        {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True, "description": "job"},
        {"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]},
    ],
}
P4D_LAYOUT = [
    {"networkCardIndex": 0, "deviceIndex": 0, "networkInterfaceId": "eni-id"},
    *(
        {
            "networkCardIndex": c,
            "deviceIndex": 1,
            "interfaceType": "efa-only",
            "securityGroups": ["g-id"],
            "subnetId": "subnet-1",
        }
        for c in (1, 2, 3)
    ),
]
ONE_EFA = [{"networkCardIndex": 0, "deviceIndex": 0, "networkInterfaceId": "eni-id"}]


def check_reservation_preference(r: Resource, s: Stack) -> Iterator[str]:
    spec = r.get("capacityReservationSpecification") or {}
    preference = spec.get("capacityReservationPreference")
    if preference in ("open", "none") and spec.get("capacityReservationTarget"):
        yield f"capacity reservation preference {preference!r} takes no capacityReservationTarget"
    if r.typ == GROUP and preference not in (None, *GROUP_RESERVATION_PREFERENCES):
        allowed = ", ".join(GROUP_RESERVATION_PREFERENCES)
        yield f"a group's capacity reservation preference {preference!r}: one of {allowed}"


GROUP_RESERVATION_PREFERENCES = (
    "capacity-reservations-only",
    "capacity-reservations-first",
    "none",
    "default",
)


def _rule(
    id: str, summary: str, source: str, applies: Iterable[str], check: Any, *examples: Any, **extra: Any
) -> Rule:
    """A rule; ``examples`` are the accepted and the refused registrations (two lists) or, for
    a whole-stack rule, the two stack factories."""
    if extra.get("whole_stack"):
        accepting, refusing = examples
        return Rule(
            id,
            summary,
            source,
            tuple(applies),
            check,
            accepting_stack=accepting,
            refusing_stack=refusing,
            **extra,
        )
    accepts, refuses = examples
    return Rule(id, summary, source, tuple(applies), check, tuple(accepts), tuple(refuses), **extra)


ALL = ("aws:*",)
SG_RULES = (SG, SG_IN, SG_OUT)

RULES: tuple[Rule, ...] = (
    _rule(
        "aws.api-model",
        "every request matches the service model: types, required members, lengths, enums, patterns",
        "https://github.com/boto/botocore/tree/1.44.8/botocore/data (the models behind each API reference "
        "page)",
        ALL,
        check_model,
        [R(ROLE, "role", assumeRolePolicy=TRUST, tags=TAGS_OK)],
        [R(ROLE, "role", assumeRolePolicy=TRUST, tags=TAGS_COMMA), R(ROLE, "r" * 60, assumeRolePolicy=TRUST)],
    ),
    _rule(
        "aws.contract-coverage",
        "every resource type and input, nested ones included, maps to the API requests it becomes (or is "
        "listed as ignored, with the reason)",
        "https://github.com/hashicorp/terraform-provider-aws/tree/main/internal/service",
        ALL,
        check_coverage,
        [R(BUCKET, "b", bucketPrefix="gpufit-x-", forceDestroy=True)],
        [
            R("aws:ec2/vpc:Vpc", "v", cidrBlock="10.0.0.0/16"),
            R(BUCKET, "b", bucketPrefix="x-", objectLockEnabled=True),
            R(INSTANCE, "i", rootBlockDevice={"volumeSize": 100, "kmsKeyId": "nokey"}),
            R(SG, "g", ingress=[{"protocol": "tcp", "fromPort": 22, "toPort": 22, "colour": "x"}]),
        ],
    ),
    _rule(
        "aws.tags.limits",
        "at most 50 tags; keys 1-128 characters, values up to 256; no aws: prefix",
        "https://docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html#tag-conventions",
        ALL,
        check_tag_limits,
        [R(SG, "g", tags=TAGS_OK)],
        [R(SG, "g", tags={f"k{i}": "v" for i in range(51)}), R(SG, "g", tags={"aws:owner": "x"})],
    ),
    _rule(
        "aws.tags.characters",
        "S3 tags take letters, digits, spaces and _ . : / = + - @ only (IAM and ELB carry it in their "
        "models)",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/tagging-managing.html",
        (BUCKET,),
        check_tag_characters,
        [R(BUCKET, "b", bucketPrefix="gpufit-x-", tags=TAGS_OK)],
        [R(BUCKET, "b", bucketPrefix="gpufit-x-", tags=TAGS_COMMA)],
    ),
    _rule(
        "aws.sg.text",
        "security group names and descriptions: up to 255 of a-zA-Z0-9 ._-:/()#,@[]+=&;{}!$*; no sg- name",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSecurityGroup.html",
        (SG,),
        check_sg_text,
        [R(SG, "g", description="gpufit llama: no inbound unless access.ssh_cidrs lists it")],
        [R(SG, "g", description="the job's nodes"), R(SG, "g", name="sg-mine", description="x")],
    ),
    _rule(
        "aws.sg.rule-text",
        "rule descriptions: up to 255 of a-zA-Z0-9. _-:/()#,@[]+=;{}!$*",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_UserIdGroupPair.html",
        SG_RULES,
        check_sg_rule_text,
        [R(SG_IN, "i", description="all traffic between the job nodes (NCCL, EFA)")],
        [R(SG_IN, "i", description="all traffic between the job's nodes (NCCL, EFA)")],
    ),
    _rule(
        "aws.sg.rule-shape",
        "a rule resource names exactly one source; protocol -1 takes no ports",
        "https://www.pulumi.com/registry/packages/aws/api-docs/vpc/securitygroupingressrule/",
        (SG_IN, SG_OUT),
        check_sg_rule_shape,
        [R(SG_IN, "i", securityGroupId="g-id", referencedSecurityGroupId="g-id", ipProtocol="-1")],
        [R(SG_IN, "i", securityGroupId="g-id", ipProtocol="-1", fromPort=0, toPort=0, cidrIpv4="10.0.0.0/8")],
    ),
    _rule(
        "aws.sg.one-style",
        "one group never has inline rules and separate rule resources: they overwrite each other",
        "https://www.pulumi.com/registry/packages/aws/api-docs/ec2/securitygroup/",
        (SG, SG_IN, SG_OUT),
        check_sg_one_style,
        lambda: _stack_of((R(SG, "g", ingress=[], egress=[]), "g-id")),
        lambda: _stack_of(
            (R(SG, "g", ingress=[], egress=[]), "g-id"),
            (
                R(SG_IN, "i", securityGroupId="g-id", referencedSecurityGroupId="g-id", ipProtocol="-1"),
                "i-id",
            ),
        ),
        whole_stack=True,
    ),
    _rule(
        "aws.s3.bucket-prefix",
        "bucket_prefix: at most 37 characters (63 less terraform's 26-character suffix), lowercase",
        "https://github.com/hashicorp/terraform-provider-aws/blob/main/internal/service/s3/bucket.go",
        (BUCKET,),
        check_bucket_prefix,
        [R(BUCKET, "b", bucketPrefix="gpufit-llama70b-chat-production-")],
        [
            R(BUCKET, "b", bucketPrefix="gpufit-llama70b-chat-production-2026x-"),
            R(BUCKET, "b", bucketPrefix="gpufit-a_b-"),
        ],
    ),
    _rule(
        "aws.s3.bucket-name",
        "bucket names: 3-63 lowercase letters, digits, dots, hyphens; no IP form or reserved affix",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html",
        (BUCKET,),
        check_bucket_name,
        [R(BUCKET, "b", bucket="gpufit-llama-dev-0a1b2c3d")],
        [
            R(BUCKET, "b", bucket="Gpufit_llama"),
            R(BUCKET, "b", bucket="xn--gpufit"),
            R(BUCKET, "b", bucket="data-s3alias"),
        ],
    ),
    _rule(
        "aws.elb.names",
        "load balancer and target group names: at most 32 letters, digits, hyphens; prefixes at most 6",
        "https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateLoadBalancer.html",
        (LB, TG),
        check_lb_names,
        [R(LB, "lb", name="gpufit-llama-dev"), R(TG, "tg", namePrefix="gf0-")],
        [R(LB, "lb", namePrefix="gpufit-"), R(TG, "tg", name="internal-gpufit-llama-dev-serving-0")],
    ),
    _rule(
        "aws.elb.alb-subnets",
        "an Application Load Balancer takes subnets in two zones at least",
        "https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateLoadBalancer.html",
        (LB,),
        check_alb_subnets,
        [R(LB, "lb", loadBalancerType="application", subnets=["subnet-a", "subnet-b"])],
        [R(LB, "lb", loadBalancerType="application", subnets=["subnet-a"])],
    ),
    _rule(
        "aws.elb.attributes",
        "idle timeout 1-4000 s, deregistration delay 0-3600 s, ALB matchers 200-499",
        "https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_LoadBalancerAttribute.html",
        (LB, TG),
        check_elb_attributes,
        [
            R(LB, "lb", idleTimeout=600),
            R(TG, "tg", protocol="HTTP", deregistrationDelay=30, healthCheck={"matcher": "200"}),
        ],
        [R(LB, "lb", idleTimeout=4001), R(TG, "tg", protocol="HTTP", healthCheck={"matcher": "200-599"})],
    ),
    _rule(
        "aws.asg.name",
        "Auto Scaling group names: ASCII 33-126, no colon",
        "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html",
        (GROUP,),
        check_asg_name,
        [R(GROUP, "g", name="gpufit-llama-dev")],
        [R(GROUP, "g", name="gpufit:llama"), R(GROUP, "g", name="gpufit llama")],
    ),
    _rule(
        "aws.asg.processes",
        "suspended processes are Auto Scaling's named processes",
        "https://docs.aws.amazon.com/autoscaling/ec2/userguide/as-suspend-resume-processes.html",
        (GROUP,),
        check_suspended_processes,
        [R(GROUP, "g", suspendedProcesses=["AZRebalance"])],
        [R(GROUP, "g", suspendedProcesses=["AzRebalance"])],
    ),
    _rule(
        "aws.asg.scheduled-action",
        "a scheduled action starts at YYYY-MM-DDThh:mm:ssZ in the future",
        "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_PutScheduledUpdateGroupAction.html",
        (GROUP_SCHEDULE,),
        check_scheduled_action,
        [R(GROUP_SCHEDULE, "s", startTime="2026-12-04T13:00:00Z")],
        [
            R(GROUP_SCHEDULE, "s", startTime="2026-12-01T13:00:00Z"),
            R(GROUP_SCHEDULE, "s", startTime="2026-12-04 13:00"),
        ],
        context=lambda: Stack(now=datetime.fromisoformat("2026-12-02T12:00:00+00:00")),
    ),
    _rule(
        "aws.ec2.user-data",
        "user data is at most 16 KB (a launch template's base64-encoded)",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RequestLaunchTemplateData.html",
        (INSTANCE, TEMPLATE),
        check_user_data,
        [
            R(TEMPLATE, "lt", userData=base64.b64encode(b"#!/bin/bash\n").decode()),
            R(INSTANCE, "i", userData="#!/bin/bash\n"),
        ],
        [R(TEMPLATE, "lt", userData="#!/bin/bash"), R(INSTANCE, "i", userData="x" * 16385)],
    ),
    _rule(
        "aws.ec2.template-tag-kinds",
        "a launch template tags instances, volumes, network interfaces and spot requests only",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateTagSpecificationRequest.html",
        (TEMPLATE,),
        check_lt_tag_specs,
        [R(TEMPLATE, "lt", tagSpecifications=[{"resourceType": "instance", "tags": TAGS_OK}])],
        [R(TEMPLATE, "lt", tagSpecifications=[{"resourceType": "elastic-ip", "tags": TAGS_OK}])],
    ),
    _rule(
        "aws.ec2.template-interface-groups",
        "a launch template with network interfaces sets security groups per interface, not template-wide",
        "https://docs.aws.amazon.com/pcs/latest/userguide/working-with_networking_efa_create-lt.html",
        (TEMPLATE,),
        check_lt_groups,
        [R(TEMPLATE, "lt", networkInterfaces=P4D_LAYOUT)],
        [R(TEMPLATE, "lt", vpcSecurityGroupIds=["g-id"], networkInterfaces=P4D_LAYOUT)],
    ),
    _rule(
        "aws.ec2.public-ip",
        "a public IPv4 address is auto-assigned to a single network interface only",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceNetworkInterfaceSpecification.html",
        (TEMPLATE,),
        check_public_ip,
        [R(TEMPLATE, "lt", networkInterfaces=[{"deviceIndex": 0, "associatePublicIpAddress": "true"}])],
        [
            R(
                TEMPLATE,
                "lt",
                networkInterfaces=[{"deviceIndex": 0, "associatePublicIpAddress": "true"}, *P4D_LAYOUT[1:]],
            )
        ],
    ),
    _rule(
        "aws.ec2.spot-options",
        "persistent spot requests stop or hibernate and may have valid_until (in the future); one-time "
        "ones may not",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SpotMarketOptions.html",
        (INSTANCE,),
        check_spot_options,
        [
            R(
                INSTANCE,
                "i",
                instanceMarketOptions={
                    "spotOptions": {
                        "spotInstanceType": "persistent",
                        "instanceInterruptionBehavior": "stop",
                        "validUntil": "2026-12-09T12:00:00Z",
                    }
                },
            )
        ],
        [
            R(
                INSTANCE,
                "i",
                instanceMarketOptions={
                    "spotOptions": {
                        "spotInstanceType": "persistent",
                        "instanceInterruptionBehavior": "terminate",
                    }
                },
            ),
            R(
                INSTANCE,
                "i",
                instanceMarketOptions={
                    "spotOptions": {"spotInstanceType": "one-time", "validUntil": "2026-12-09T12:00:00Z"}
                },
            ),
        ],
        context=lambda: Stack(now=datetime.fromisoformat("2026-12-02T12:00:00+00:00")),
    ),
    _rule(
        "aws.ec2.volume-size",
        "a gp3 volume is 1-65,536 GiB and at least the image's root snapshot",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EbsBlockDevice.html",
        (INSTANCE, TEMPLATE),
        check_volume_size,
        [R(INSTANCE, "i", rootBlockDevice={"volumeSize": 300, "volumeType": "gp3"})],
        [
            R(INSTANCE, "i", rootBlockDevice={"volumeSize": 40, "volumeType": "gp3"}),
            R(TEMPLATE, "lt", blockDeviceMappings=[{"ebs": {"volumeSize": 70000}}]),
        ],
        context=lambda: Stack(image_root_gb=75),
    ),
    _rule(
        "aws.ec2.image-support",
        "every instance type launched is one the Deep Learning AMI lists among its supported instances",
        "https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html",
        (INSTANCE, TEMPLATE, GROUP),
        check_image_support,
        [
            R(
                GROUP,
                "g",
                mixedInstancesPolicy={"launchTemplate": {"overrides": [{"instanceType": "p5.48xlarge"}]}},
            )
        ],
        [
            R(
                GROUP,
                "g",
                mixedInstancesPolicy={"launchTemplate": {"overrides": [{"instanceType": "p3dn.24xlarge"}]}},
            )
        ],
    ),
    _rule(
        "aws.efa.interfaces",
        "an EFA instance gets one EFA per EFA network card: EFA with ENA at card 0 device 0; on each "
        "further card EFA-only at device 0 and/or an interface at device 1 (or, as AWS wrote before, an "
        "EFA at device 1)",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html",
        (INSTANCE,),
        check_efa_layout,
        lambda: _efa_stack(P4D_LAYOUT, EFA_SELF),
        lambda: _efa_stack(ONE_EFA, EFA_SELF),
        whole_stack=True,
    ),
    _rule(
        "aws.efa.security-group",
        "an EFA's security group allows all traffic in from and out to itself",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security",
        (INSTANCE,),
        check_efa_security_group,
        lambda: _efa_stack(P4D_LAYOUT, EFA_SELF),
        lambda: _efa_stack(P4D_LAYOUT, {"ingress": EFA_SELF["ingress"], "egress": EFA_SELF["egress"][1:]}),
        whole_stack=True,
    ),
    _rule(
        "aws.scheduler.expression",
        "a one-time schedule is at(yyyy-mm-ddThh:mm:ss), in the future",
        "https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html",
        (SCHEDULE,),
        check_schedule_expression,
        [R(SCHEDULE, "s", scheduleExpression="at(2026-12-04T13:01:00)")],
        [
            R(SCHEDULE, "s", scheduleExpression="at(2026-12-04T13:01:00Z)"),
            R(SCHEDULE, "s", scheduleExpression="at(2026-11-04T13:01:00)"),
        ],
        context=lambda: Stack(now=datetime.fromisoformat("2026-12-02T12:00:00+00:00")),
    ),
    _rule(
        "aws.secrets.name",
        "secret names: 0-9A-Za-z/_+=.@- (prefix up to 486), never ending in a hyphen and six characters",
        "https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_CreateSecret.html",
        (SECRET,),
        check_secret_name,
        [R(SECRET, "s", namePrefix="gpufit/llama-dev/api-key-")],
        [R(SECRET, "s", namePrefix="gpufit/llama dev/"), R(SECRET, "s", name="gpufit/key-abcdef")],
    ),
    _rule(
        "aws.capacity-reservation.preference",
        "a Capacity Reservation preference of open or none names no target; a group's preference is "
        "capacity-reservations-only, capacity-reservations-first, none or default",
        "https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CapacityReservationSpecification.html",
        (INSTANCE, TEMPLATE, GROUP),
        check_reservation_preference,
        [
            R(INSTANCE, "i", capacityReservationSpecification={"capacityReservationPreference": "none"}),
            R(
                GROUP,
                "g",
                capacityReservationSpecification={
                    "capacityReservationPreference": "capacity-reservations-first",
                    "capacityReservationTarget": {"capacityReservationIds": ["cr-0123456789abcdef0"]},
                },
            ),
        ],
        [
            R(
                INSTANCE,
                "i",
                capacityReservationSpecification={
                    "capacityReservationPreference": "none",
                    "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"},
                },
            ),
            R(GROUP, "g", capacityReservationSpecification={"capacityReservationPreference": "open"}),
        ],
    ),
    _rule(
        "aws.iam.policy-size",
        "a role's trust policy is at most 2,048 characters and its inline policies 10,240 in all",
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html",
        (ROLE, ROLE_POLICY),
        check_policy_sizes,
        lambda: _stack_of(
            (R(ROLE, "role", assumeRolePolicy=TRUST), "role-id"),
            (R(ROLE_POLICY, "p", role="role-id", policy=POLICY), "p-id"),
        ),
        lambda: _stack_of(
            (R(ROLE, "role", assumeRolePolicy=TRUST), "role-id"),
            *(
                (R(ROLE_POLICY, f"p{i}", role="role-id", policy=POLICY.replace("*", "*" * 2100)), f"p{i}-id")
                for i in range(5)
            ),
        ),
        whole_stack=True,
    ),
)


def _stack_of(*entries: tuple[Resource, str]) -> Stack:
    s = Stack()
    for resource, resource_id in entries:
        s.add(resource, resource_id)
    return s
