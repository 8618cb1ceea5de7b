"""Values the clouds document but their machine-readable models do not constrain: the botocore
model types these members as a plain String or Integer and states the allowed values in the
member's documentation (quoted below from the installed botocore 1.44.8 model, the text of the
linked API reference page), and Compute's discovery document leaves a firewall's ranges as
strings. Each rule names the page that states it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tests.contracts.model import Resource, Rule, Stack

SG = "aws:ec2/securityGroup:SecurityGroup"
SG_IN = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_OUT = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
INSTANCE = "aws:ec2/instance:Instance"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
FIREWALL = "gcp:compute/firewall:Firewall"


def R(typ: str, resource_name: str = "r", /, **inputs: Any) -> Resource:
    return Resource(typ, resource_name, inputs)


# -- launch template interfaces -------------------------------------------------------------------

INTERFACE_TYPES = frozenset({"interface", "efa", "efa-only"})
"""LaunchTemplateInstanceNetworkInterfaceSpecificationRequest.InterfaceType: "Valid values:
interface | efa | efa-only" (a plain String in the model)."""


def check_interface_type(r: Resource, s: Stack) -> Iterator[str]:
    for i, nic in enumerate(r.get("networkInterfaces") or []):
        kind = nic.get("interfaceType")
        if kind is not None and kind not in INTERFACE_TYPES:
            yield f"network_interfaces[{i}].interface_type {kind!r} is not one of {sorted(INTERFACE_TYPES)}"


# -- security group rules --------------------------------------------------------------------------

PROTOCOL_NUMBERS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}
"""IpPermission.IpProtocol: "The IP protocol name (tcp, udp, icmp, icmpv6) or number (see
Protocol Numbers). Use -1 to specify all protocols." """


def _sg_rules(r: Resource) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every rule a registration authorises, as (where, {protocol, from, to, v4, v6})."""
    if r.typ == SG:
        for direction in ("ingress", "egress"):
            for i, rule in enumerate(r.get(direction) or []):
                yield (
                    f"{direction}[{i}]",
                    {
                        "protocol": rule.get("protocol"),
                        "from": rule.get("fromPort"),
                        "to": rule.get("toPort"),
                        "v4": list(rule.get("cidrBlocks") or []),
                        "v6": list(rule.get("ipv6CidrBlocks") or []),
                    },
                )
    else:
        yield (
            "rule",
            {
                "protocol": r.get("ipProtocol"),
                "from": r.get("fromPort"),
                "to": r.get("toPort"),
                "v4": [r.get("cidrIpv4")] if r.get("cidrIpv4") else [],
                "v6": [r.get("cidrIpv6")] if r.get("cidrIpv6") else [],
            },
        )


def protocol_number(protocol: Any) -> int | None:
    """The protocol's number (-1 for all), None when EC2 would not take it."""
    text = str(protocol).strip().lower()
    if text in PROTOCOL_NUMBERS:
        return PROTOCOL_NUMBERS[text]
    try:
        number = int(text)
    except ValueError:
        return None
    return number if number == -1 or 0 <= number <= 255 else None


def check_sg_protocol(r: Resource, s: Stack) -> Iterator[str]:
    for where, rule in _sg_rules(r):
        if protocol_number(rule["protocol"]) is None:
            yield (
                f"{where}: protocol {rule['protocol']!r} is neither tcp, udp, icmp, icmpv6, -1 nor a "
                "protocol number 0-255"
            )


def check_sg_ports(r: Resource, s: Stack) -> Iterator[str]:
    for where, rule in _sg_rules(r):
        number = protocol_number(rule["protocol"])
        start, end = rule["from"], rule["to"]
        if number in (6, 17):
            if start is None or end is None:
                yield f"{where}: a tcp or udp rule takes a port range"
            elif not 0 <= int(start) <= int(end) <= 65535:
                yield f"{where}: ports {start}-{end}: 0-65535, from not above to"
        elif number in (1, 58):
            if number == 1 and (start is None or end is None):
                yield f"{where}: an icmp rule takes a type and a code (-1 for all)"
            for what, value in (("type", start), ("code", end)):
                if value is not None and not -1 <= int(value) <= 255:
                    yield f"{where}: ICMP {what} {value}: -1 (all) or 0-255"
            if start is not None and int(start) == -1 and end is not None and int(end) != -1:
                yield f"{where}: ICMP type -1 (all types) takes code -1 (all codes), not {end}"
        # -1 and other protocol numbers allow every port, "regardless of any port range you specify"


def check_sg_cidrs(r: Resource, s: Stack) -> Iterator[str]:
    for where, rule in _sg_rules(r):
        for family, key in ((ipaddress.IPv4Network, "v4"), (ipaddress.IPv6Network, "v6")):
            for cidr in rule[key]:
                text = str(cidr)
                try:
                    ok = "/" in text and isinstance(ipaddress.ip_network(text, strict=False), family)
                except ValueError:
                    ok = False
                if not ok:
                    version = "IPv4" if key == "v4" else "IPv6"
                    yield f"{where}: {text!r} is not an {version} CIDR block (an address and a prefix length)"


# -- instance metadata, volumes, lifecycle ----------------------------------------------------------


def check_hop_limit(r: Resource, s: Stack) -> Iterator[str]:
    limit = (r.get("metadataOptions") or {}).get("httpPutResponseHopLimit")
    if limit is not None and not 1 <= int(limit) <= 64:
        yield f"metadata_options.http_put_response_hop_limit {limit}: integers from 1 to 64"


def _ebs(r: Resource) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if r.typ == INSTANCE and r.get("rootBlockDevice"):
        yield "root_block_device", r.get("rootBlockDevice")
    for i, mapping in enumerate(r.get("blockDeviceMappings") or []):
        yield f"block_device_mappings[{i}].ebs", mapping.get("ebs") or {}


IOPS = {"gp3": (3000, 80000), "io1": (100, 64000), "io2": (100, 256000)}
"""EbsBlockDevice.Iops: "gp3: 3,000 - 80,000 IOPS; io1: 100 - 64,000 IOPS; io2: 100 - 256,000
IOPS ... supported for io1, io2, and gp3 volumes only"."""
GP3_THROUGHPUT = (125, 2000)
"""EbsBlockDevice.Throughput: "valid only for gp3 volumes. Valid Range: Minimum value of 125.
Maximum value of 2,000"."""


def check_volume_performance(r: Resource, s: Stack) -> Iterator[str]:
    for where, ebs in _ebs(r):
        kind = ebs.get("volumeType")
        iops, throughput = ebs.get("iops"), ebs.get("throughput")
        if iops is not None:
            low_high = IOPS.get(str(kind))
            if low_high is None:
                yield f"{where}.iops: set for a {kind} volume; only gp3, io1 and io2 take it"
            elif not low_high[0] <= int(iops) <= low_high[1]:
                yield f"{where}.iops {iops}: {kind} takes {low_high[0]:,}-{low_high[1]:,}"
        if throughput is not None:
            if kind != "gp3":
                yield f"{where}.throughput: set for a {kind} volume; only gp3 takes it"
            elif not GP3_THROUGHPUT[0] <= int(throughput) <= GP3_THROUGHPUT[1]:
                yield f"{where}.throughput {throughput} MiB/s: gp3 takes 125-2,000"


def check_expiration_days(r: Resource, s: Stack) -> Iterator[str]:
    for i, rule in enumerate(r.get("rules") or []):
        days = (rule.get("expiration") or {}).get("days")
        if days is not None and int(days) < 1:
            yield f"rules[{i}].expiration.days {days}: a non-zero positive integer"


# -- GCP firewall ranges ------------------------------------------------------------------------------


def check_firewall_ranges(r: Resource, s: Stack) -> Iterator[str]:
    for key in ("sourceRanges", "destinationRanges"):
        for i, text in enumerate(r.get(key) or []):
            try:
                ipaddress.ip_network(str(text), strict=False)
            except ValueError:
                yield f"{key}[{i}] {text!r} is not an IPv4 or IPv6 address or CIDR range"


# -- the rules -------------------------------------------------------------------------------------

EC2_API = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/"


def _rule(
    id: str,
    summary: str,
    source: str,
    applies: Iterable[str],
    check: Any,
    accepts: Iterable[Resource],
    refuses: Iterable[Resource],
) -> Rule:
    return Rule(id, summary, source, tuple(applies), check, tuple(accepts), tuple(refuses))


def _in(**inputs: Any) -> Resource:
    return R(SG_IN, "i", securityGroupId="g-id", **inputs)


RULES: tuple[Rule, ...] = (
    _rule(
        "aws.ec2.interface-type",
        "a launch template's interface type is interface, efa or efa-only",
        EC2_API + "API_LaunchTemplateInstanceNetworkInterfaceSpecificationRequest.html",
        (TEMPLATE,),
        check_interface_type,
        [
            R(
                TEMPLATE,
                "lt",
                networkInterfaces=[{"interfaceType": t} for t in ("interface", "efa", "efa-only")],
            )
        ],
        [R(TEMPLATE, "lt", networkInterfaces=[{"interfaceType": "efa-onli"}])],
    ),
    _rule(
        "aws.sg.protocol",
        "a security group rule's protocol is tcp, udp, icmp, icmpv6, -1 (all) or a protocol number",
        EC2_API + "API_IpPermission.html",
        (SG, SG_IN, SG_OUT),
        check_sg_protocol,
        [
            _in(ipProtocol="tcp", fromPort=22, toPort=22, cidrIpv4="10.0.0.0/8"),
            _in(ipProtocol="-1", referencedSecurityGroupId="g-id"),
            R(
                SG,
                "g",
                ingress=[{"protocol": "50", "fromPort": 0, "toPort": 0, "cidrBlocks": ["10.0.0.0/8"]}],
            ),
        ],
        [
            _in(ipProtocol="bogus", cidrIpv4="10.0.0.0/8"),
            _in(ipProtocol="all", cidrIpv4="10.0.0.0/8"),
            R(SG, "g", egress=[{"protocol": "256", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}]),
        ],
    ),
    _rule(
        "aws.sg.ports",
        "tcp and udp take ports 0-65535 (from not above to); icmp a type and code of -1 or 0-255; -1 "
        "allows every port",
        EC2_API + "API_IpPermission.html",
        (SG, SG_IN, SG_OUT),
        check_sg_ports,
        [
            _in(ipProtocol="tcp", fromPort=0, toPort=65535, cidrIpv4="10.0.0.0/8"),
            _in(ipProtocol="icmp", fromPort=-1, toPort=-1, cidrIpv4="10.0.0.0/8"),
            R(SG, "g", ingress=[{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]),
        ],
        [
            _in(ipProtocol="tcp", fromPort=22, toPort=70000, cidrIpv4="10.0.0.0/8"),
            _in(ipProtocol="udp", fromPort=9000, toPort=8000, cidrIpv4="10.0.0.0/8"),
            _in(ipProtocol="tcp", cidrIpv4="10.0.0.0/8"),
            _in(ipProtocol="icmp", fromPort=-1, toPort=4, cidrIpv4="10.0.0.0/8"),
            R(SG, "g", ingress=[{"protocol": "tcp", "fromPort": 70000, "toPort": 70000, "self": True}]),
        ],
    ),
    _rule(
        "aws.sg.cidr",
        "a security group rule's ranges are CIDR blocks of their IP version",
        EC2_API + "API_IpRange.html",
        (SG, SG_IN, SG_OUT),
        check_sg_cidrs,
        [
            _in(ipProtocol="tcp", fromPort=22, toPort=22, cidrIpv4="203.0.113.7/32"),
            _in(ipProtocol="tcp", fromPort=22, toPort=22, cidrIpv6="2001:db8::/32"),
            _in(ipProtocol="tcp", fromPort=22, toPort=22, cidrIpv4="100.68.0.18/18"),  # canonicalised
            R(SG, "g", egress=[{"protocol": "-1", "cidrBlocks": ["0.0.0.0/0"], "ipv6CidrBlocks": ["::/0"]}]),
        ],
        [
            R(
                SG,
                "g",
                ingress=[{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["not-a-cidr"]}],
            ),
            R(SG, "g", ingress=[{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["::/0"]}]),
            _in(ipProtocol="tcp", fromPort=22, toPort=22, cidrIpv4="203.0.113.7"),
            _in(ipProtocol="tcp", fromPort=22, toPort=22, cidrIpv6="10.0.0.0/8"),
        ],
    ),
    _rule(
        "aws.ec2.hop-limit",
        "the metadata PUT response hop limit is an integer from 1 to 64",
        EC2_API + "API_LaunchTemplateInstanceMetadataOptionsRequest.html",
        (INSTANCE, TEMPLATE),
        check_hop_limit,
        [R(TEMPLATE, "lt", metadataOptions={"httpTokens": "required", "httpPutResponseHopLimit": 2})],
        [
            R(TEMPLATE, "lt", metadataOptions={"httpPutResponseHopLimit": 99}),
            R(INSTANCE, "i", metadataOptions={"httpPutResponseHopLimit": 0}),
        ],
    ),
    _rule(
        "aws.ebs.performance",
        "gp3 takes 3,000-80,000 IOPS and 125-2,000 MiB/s; io1/io2 their IOPS ranges; no other type either",
        EC2_API + "API_EbsBlockDevice.html",
        (INSTANCE, TEMPLATE),
        check_volume_performance,
        [
            R(INSTANCE, "i", rootBlockDevice={"volumeType": "gp3", "iops": 16000, "throughput": 1000}),
            R(
                TEMPLATE,
                "lt",
                blockDeviceMappings=[{"ebs": {"volumeType": "gp3", "iops": 80000, "throughput": 2000}}],
            ),
        ],
        [
            R(TEMPLATE, "lt", blockDeviceMappings=[{"ebs": {"volumeType": "gp3", "iops": 999999}}]),
            R(TEMPLATE, "lt", blockDeviceMappings=[{"ebs": {"volumeType": "gp3", "throughput": 99999}}]),
            R(INSTANCE, "i", rootBlockDevice={"volumeType": "gp3", "iops": 1}),
            R(INSTANCE, "i", rootBlockDevice={"volumeType": "gp2", "throughput": 250}),
        ],
    ),
    _rule(
        "aws.s3.expiration-days",
        "a lifecycle expiration's days are a non-zero positive integer",
        "https://docs.aws.amazon.com/AmazonS3/latest/API/API_LifecycleExpiration.html",
        (LIFECYCLE,),
        check_expiration_days,
        [R(LIFECYCLE, "l", rules=[{"id": "expire", "status": "Enabled", "expiration": {"days": 1}}])],
        [R(LIFECYCLE, "l", rules=[{"id": "expire", "status": "Enabled", "expiration": {"days": 0}}])],
    ),
    _rule(
        "gcp.firewall-ranges",
        "a firewall's source and destination ranges are IPv4 or IPv6 addresses or CIDR ranges",
        "https://cloud.google.com/compute/docs/reference/rest/v1/firewalls",
        (FIREWALL,),
        check_firewall_ranges,
        [R(FIREWALL, "fw", sourceRanges=["35.191.0.0/16", "130.211.0.0/22", "203.0.113.7", "2001:db8::/32"])],
        [R(FIREWALL, "fw", sourceRanges=["banana"]), R(FIREWALL, "fw", destinationRanges=["10.0.0.0/33"])],
    ),
)
