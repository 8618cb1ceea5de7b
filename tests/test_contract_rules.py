"""Each contract rule names the page that states it, takes a value the cloud takes and refuses
one it refuses; the tools under the rules (pattern translation, the model and discovery
walkers, the data they read) hold on their own."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from providers.aws.efa import EFA_CARDS_FILE, efa_cards, efa_layout
from selector.catalog import load_catalog
from tests.contracts import RULES, Stack
from tests.contracts.aws_model import problems as model_problems
from tests.contracts.gcp_discovery import problems as discovery_problems
from tests.contracts.javaregex import matches, translate
from tests.contracts.model import STACK, Resource, autoname, plain, prefixed


def _context(rule: object) -> Stack:
    make = getattr(rule, "context", None)
    return make() if make is not None else Stack()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_each_rule_has_its_source_and_examples_either_way(rule) -> None:  # type: ignore[no-untyped-def]
    assert rule.source.startswith("https://"), rule.source
    if rule.whole_stack:
        assert rule.accepting_stack is not None and rule.refusing_stack is not None
        assert list(rule.check(STACK, rule.accepting_stack())) == []
        assert list(rule.check(STACK, rule.refusing_stack()))
        return
    assert rule.accepts and rule.refuses
    for accepted in rule.accepts:
        assert list(rule.check(accepted, _context(rule))) == [], (rule.id, accepted)
    for refused in rule.refuses:
        assert list(rule.check(refused, _context(rule))), (rule.id, refused)


def test_rule_ids_are_unique_and_numerous() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 45


# -- Java/Smithy patterns ------------------------------------------------------------------------

TAG_VALUE = r"[\p{L}\p{Z}\p{N}_.:/=+\-@]*"


@pytest.mark.parametrize(
    ("pattern", "value", "matched"),
    [
        (TAG_VALUE, "use1-az1 use1-az2", True),  # a space is \p{Z}
        (TAG_VALUE, "Zürich:2026", True),  # \p{L} is Unicode
        (TAG_VALUE, "use1-az1,use1-az2", False),  # no comma
        (TAG_VALUE, "a (b)", False),
        (r"[\w+=,.@-]+", "gpufit-role_1", True),
        (r"[\w+=,.@-]+", "rôle", False),  # Java's \w is ASCII
        (r"[\w+=,.@-]+", "", False),
        (r"^ami-[a-z0-9]{1,17}$", "ami-0abc", True),
        (r"[0-9a-zA-Z-_.]+", "a-b_c.d", True),  # a - after a range is literal
        (r"[0-9a-zA-Z-_.]+", "a[b", False),
        (r"[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]*", "tag 😀", True),
        (r"[\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]*", "bell\x07", False),
        (r"\d{3}", "١٢٣", False),  # Java's \d is ASCII
        (r"[a-z]+", "abc1", False),  # the whole value, as String.matches
    ],
)
def test_java_patterns_match_as_aws_matches_them(pattern: str, value: str, matched: bool) -> None:
    assert matches(pattern, value) is matched


def test_the_translation_spells_java_classes_out() -> None:
    assert translate(r"[\w+=]") == "[A-Za-z0-9_+=]"
    assert translate(r"\w+") == "[A-Za-z0-9_]+"
    assert translate(r"\uD800\uDC00-\uDBFF\uDFFF") == r"\U00010000-\U0010FFFF"
    with pytest.raises(ValueError, match="negated class inside a class"):
        translate(r"[\W]")


# -- the service model and the discovery document ---------------------------------------------


def test_the_model_walker_checks_what_botocore_does_not() -> None:
    ok = {"RoleName": "gpufit-role", "AssumeRolePolicyDocument": "{}"}
    assert model_problems("iam", "CreateRole", ok) == []
    assert any(
        "over the maximum 64" in p for p in model_problems("iam", "CreateRole", {**ok, "RoleName": "r" * 65})
    )
    assert any("does not match" in p for p in model_problems("iam", "CreateRole", {**ok, "RoleName": "a b"}))
    volume = {
        "LaunchTemplateName": "lt",
        "LaunchTemplateData": {"BlockDeviceMappings": [{"Ebs": {"VolumeType": "gp9"}}]},
    }
    assert any("'gp9' is not one of" in p for p in model_problems("ec2", "CreateLaunchTemplate", volume))
    assert any("Missing required" in p for p in model_problems("iam", "CreateRole", {"RoleName": "r"}))
    assert any("Unknown parameter" in p for p in model_problems("iam", "CreateRole", {**ok, "Colour": "x"}))


def test_the_discovery_walker_checks_names_enums_types_and_required_fields() -> None:
    body = {"name": "net", "mtu": 8896, "autoCreateSubnetworks": False}
    assert discovery_problems("compute.v1", "Network", body, "compute.networks.insert") == []
    assert discovery_problems("compute.v1", "Network", {"name": "net", "colour": 1})
    assert discovery_problems("compute.v1", "Network", {"name": "net", "mtu": "8896"})
    assert discovery_problems("compute.v1", "Firewall", {"name": "fw", "direction": "IN"})
    assert discovery_problems("compute.v1", "Firewall", {"name": "Fw"})  # the name pattern
    assert discovery_problems("compute.v1", "Instance", {"machineType": "x"}, "compute.instances.insert")
    assert discovery_problems("compute.v1", "Instance", {"name": "vm", "tags": {"items": ["Bad_Tag"]}})


def test_inputs_are_read_as_the_provider_reads_them() -> None:
    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": "hf_x"}
    assert plain({"a": 8000.0, "b": secret, "c": [1.5]}) == {"a": 8000, "b": "hf_x", "c": [1.5]}
    assert len(prefixed("gpufit-x-")) == len("gpufit-x-") + 26
    assert autoname("net") == autoname("net") and len(autoname("net")) == len("net") + 8


def test_a_resource_type_no_contract_knows_is_refused() -> None:
    from tests.contracts import check_resource

    found = check_resource(Resource("aws:ec2/vpc:Vpc", "v", {"cidrBlock": "10.0.0.0/16"}), Stack())
    assert [v.rule.id for v in found] == ["aws.contract-coverage"]


# -- the data the rules and the program share -----------------------------------------------------

MOTO_TYPES = Path(__import__("moto").__file__).parent / "ec2" / "resources" / "instance_types.json.gz"


def test_the_efa_cards_are_ec2s_own_figures() -> None:
    """providers/aws/efa_cards.yaml holds EC2's NetworkInfo for every GPU type with EFA."""
    with gzip.open(MOTO_TYPES) as handle:
        ec2 = json.loads(handle.read())
    ours = yaml.safe_load(EFA_CARDS_FILE.read_text())["types"]
    expected = {
        name: {
            "network_cards": it["NetworkInfo"]["MaximumNetworkCards"],
            "efa_interfaces": it["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"],
        }
        for name, it in ec2.items()
        if it.get("GpuInfo") and it["NetworkInfo"].get("EfaSupported")
    }
    assert ours == expected


def test_every_efa_type_the_planner_may_join_has_its_cards_listed() -> None:
    joined = {
        i.name for i in load_catalog().instance_types if i.cloud == "aws" and i.node_interconnect == "efa"
    }
    assert joined and joined <= set(efa_cards())
    assert {
        name: len(efa_layout(name))
        for name in ("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
    } == {
        "p4d.24xlarge": 4,
        "p5.48xlarge": 32,
        "p5en.48xlarge": 16,
        "p6-b200.48xlarge": 8,
    }
    # cards that do not all take EFA: the primary alone (which cards do is not in the data)
    assert [(e.network_card, e.interface_type) for e in efa_layout("p6-b300.48xlarge")] == [(0, "efa")]


# -- Java constructs the translation cannot carry over (review finding 11) -----------------------


@pytest.mark.parametrize(
    "pattern",
    [
        r"\p{Alnum}+",  # POSIX: ASCII in Java, Unicode in regex
        r"[\p{Punct}a-z]*",
        r"\p{IsAlphabetic}",
        r"[a-z&&[^aeiou]]+",  # intersection
        r"[a-z[0-9]]+",  # nested class (a union in Java)
        r"\Qa.b\E",
        r"a\z",
    ],
)
def test_a_java_construct_without_a_faithful_translation_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="not"):
        translate(pattern)


def test_unicode_categories_and_plain_escapes_still_translate() -> None:
    assert matches(r"\p{L}\pN[\p{Lu}&;]", "é1A")
    assert matches(r"[\\\[\]]+", "\\[]")  # escaped brackets are not a nested class
    assert matches(r"a&b", "a&b")


def test_every_pattern_of_the_installed_models_translates() -> None:
    """The models the contracts check against use only what the translation carries over: a
    botocore bump that brings a construct it does not (POSIX classes, intersections, ...)
    fails here rather than checking the new pattern more leniently than AWS does."""
    from tests.contracts.aws_model import API_REFERENCE, service_model
    from tests.contracts.javaregex import compiled

    patterns = {
        p
        for service in API_REFERENCE
        for name in service_model(service).shape_names
        if (p := service_model(service).shape_for(name).metadata.get("pattern"))
    }
    assert len(patterns) >= 70
    for pattern in patterns:
        compiled(pattern)


# -- nested inputs (review finding 2) --------------------------------------------------------------

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
GCP_INSTANCE = "gcp:compute/instance:Instance"
GCP_TEMPLATE = "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate"
GCP_MIG = "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"
GCP_SECRET = "gcp:secretmanager/secret:Secret"


def _coverage(resource: Resource) -> list[str]:
    from tests.contracts import check_resource

    return [v.detail for v in check_resource(resource, Stack()) if v.rule.id.endswith("contract-coverage")]


@pytest.mark.parametrize(
    ("resource", "path"),
    [
        (
            Resource(AWS_INSTANCE, "i", {"rootBlockDevice": {"volumeSize": 100, "kmsKeyId": "nokey"}}),
            "rootBlockDevice.kmsKeyId",
        ),
        (
            Resource(AWS_TEMPLATE, "lt", {"networkInterfaces": [{"deviceIndex": 0, "colour": "x"}]}),
            "networkInterfaces[0].colour",
        ),
        (
            Resource(
                AWS_TEMPLATE, "lt", {"metadataOptions": {"httpTokens": "required", "httpProtocolIpv6": "x"}}
            ),
            "metadataOptions.httpProtocolIpv6",
        ),
        (
            Resource(
                AWS_SG,
                "g",
                {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True, "colour": "x"}]},
            ),
            "ingress[0].colour",
        ),
        (
            Resource(
                GCP_INSTANCE, "vm", {"bootDisk": {"initializeParams": {"size": 100, "provisionedIops": -5}}}
            ),
            "bootDisk.initializeParams.provisionedIops",
        ),
        (
            Resource(GCP_MIG, "m", {"updatePolicy": {"maxSurgeFixed": 1, "replacementMethod": "TELEPORT"}}),
            "updatePolicy.replacementMethod",
        ),
        (
            Resource(
                GCP_SECRET,
                "s",
                {"replication": {"userManaged": {"replicas": [{"location": "mars-central1"}]}}},
            ),
            "replication.userManaged.replicas[0].location",
        ),
    ],
)
def test_a_nested_input_no_request_carries_is_refused(resource: Resource, path: str) -> None:
    found = _coverage(resource)
    assert any(repr(path) in f for f in found), found


def test_nested_inputs_the_requests_carry_pass() -> None:
    """Read one by one, passed on whole (labels), or ignored with a reason (the ports of a
    protocol -1 rule, which EC2 ignores)."""
    accepted = [
        Resource(
            AWS_SG,
            "g",
            {
                "description": "job",
                "ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}],
                "egress": [{"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}],
            },
        ),
        Resource(
            AWS_TEMPLATE,
            "lt",
            {
                "blockDeviceMappings": [
                    {"deviceName": "/dev/sda1", "ebs": {"volumeType": "gp3", "iops": 4000}}
                ]
            },
        ),
        Resource(
            GCP_INSTANCE,
            "vm",
            {
                "labels": {"gpufit-stack": "dev"},
                "bootDisk": {"mode": "READ_WRITE", "initializeParams": {"size": 100}},
            },
        ),
        Resource(GCP_SECRET, "s", {"replication": {"auto": {}}}),
    ]
    for resource in accepted:
        assert _coverage(resource) == [], resource


def test_the_ports_of_a_rule_that_names_them_are_not_ignored() -> None:
    """The ignore is for protocol -1 only: a tcp rule's ports reach the request (and its rules)."""
    from tests.contracts import aws_requests
    from tests.contracts.coverage import unread

    tcp = Resource(AWS_SG, "g", {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22}]})
    assert unread(tcp, Stack(), aws_requests.requests, ["ingress"]) == []
    everything = Resource(AWS_SG, "g", {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0}]})
    assert unread(everything, Stack(), aws_requests.requests, ["ingress"]) == [
        "ingress[0].fromPort",
        "ingress[0].toPort",
    ]
    assert unread(everything, Stack(), aws_requests.requests, ["ingress"], aws_requests.IGNORED[AWS_SG]) == []


def test_a_disk_mode_is_checked_against_the_discovery_document() -> None:
    from tests.contracts import check_resource

    sideways = Resource(GCP_TEMPLATE, "t", {"disks": [{"boot": True, "mode": "READ_SIDEWAYS"}]})
    found = [v.detail for v in check_resource(sideways, Stack())]
    assert any("'READ_SIDEWAYS' is not one of" in f for f in found), found
    fine = Resource(GCP_TEMPLATE, "t", {"disks": [{"boot": True, "mode": "READ_WRITE"}]})
    assert not any("mode" in v.detail for v in check_resource(fine, Stack()))


def test_the_mocks_refuse_a_nested_input_no_request_carries() -> None:
    import pulumi_aws as aws

    from tests.contracts import ContractError
    from tests.pulumi_harness import run_component

    def build() -> dict[str, object]:
        node = aws.ec2.Instance(
            "node",
            ami="ami-0abc",
            instance_type="g5.xlarge",
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(volume_size=100, kms_key_id="nokey"),
        )
        return {"id": node.id}

    with pytest.raises(ContractError, match=r"nested input 'rootBlockDevice.kmsKeyId'"):
        run_component(build)


# -- the EFA layouts AWS documents (review finding 4) -----------------------------------------------


def _p4d(*others: dict[str, object]) -> Stack:
    from tests.contracts.aws_rules import EFA_SELF, _efa_stack

    primary = {"networkCardIndex": 0, "deviceIndex": 0, "networkInterfaceId": "eni-id"}
    return _efa_stack([primary, *others], EFA_SELF)


def _nic(card: int, device: int, kind: str = "efa-only") -> dict[str, object]:
    return {
        "networkCardIndex": card,
        "deviceIndex": device,
        "interfaceType": kind,
        "securityGroups": ["g-id"],
        "subnetId": "subnet-1",
    }


EFA_LAYOUTS_ACCEPTED = {
    # docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html today
    "current: EFA-only at device 0": [_nic(c, 0) for c in (1, 2, 3)],
    "current: EFA-only at device 0 and ENA at device 1": [
        *(_nic(c, 0) for c in (1, 2, 3)),
        _nic(1, 1, "interface"),
    ],
    # the page's earlier wording, and what launches in production
    "earlier: EFA-only at device 1": [_nic(c, 1) for c in (1, 2, 3)],
    "earlier: EFA with ENA at device 1": [_nic(c, 1, "efa") for c in (1, 2, 3)],
}
EFA_LAYOUTS_REFUSED = {
    "two interfaces on one card and device": [_nic(1, 0), _nic(1, 0), _nic(2, 0), _nic(3, 0)],
    "a card index beyond the type's four": [_nic(c, 0) for c in (1, 2, 4)],
    "a card left without EFA": [_nic(c, 0) for c in (1, 2)],
    "EFA with ENA at device 0 of a further card": [_nic(c, 0, "efa") for c in (1, 2, 3)],
    "device index 2": [_nic(c, 2) for c in (1, 2, 3)],
}


@pytest.mark.parametrize("layout", EFA_LAYOUTS_ACCEPTED, ids=str)
def test_both_documented_efa_layouts_are_accepted(layout: str) -> None:
    from tests.contracts.aws_rules import check_efa_layout

    assert list(check_efa_layout(STACK, _p4d(*EFA_LAYOUTS_ACCEPTED[layout]))) == []


@pytest.mark.parametrize("layout", EFA_LAYOUTS_REFUSED, ids=str)
def test_a_wrong_efa_layout_is_refused(layout: str) -> None:
    from tests.contracts.aws_rules import check_efa_layout

    assert list(check_efa_layout(STACK, _p4d(*EFA_LAYOUTS_REFUSED[layout])))


# -- generated names (review finding 10) -----------------------------------------------------------


def test_a_template_name_prefix_gets_terraforms_26_character_suffix() -> None:
    from tests.contracts.gcp_requests import template_name
    from tests.contracts.model import TF_UNIQUE_SUFFIX

    prefix = "g" * 37
    assert template_name(Resource(GCP_TEMPLATE, "t", {"namePrefix": prefix})) == prefix + TF_UNIQUE_SUFFIX
    assert len(template_name(Resource(GCP_TEMPLATE, "t", {"namePrefix": prefix}))) == 63
    assert len(template_name(Resource(GCP_TEMPLATE, "t", {"namePrefix": "g" * 54}))) == 63
