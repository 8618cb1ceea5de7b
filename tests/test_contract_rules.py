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
