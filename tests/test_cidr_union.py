"""CIDR sets that admit the internet at large need the explicit opt-in, however they are split
(issue 22, item 3): one rule (``selector.reach``) for the spec check and the policy pack.

Cases: ``CASES`` below and ``tests/fixtures/cidrs/*.yaml``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from policy.gpufit_policies import (
    PolicyConfig,
    check_endpoint_access,
    check_ingress_union,
    check_no_open_ingress,
)
from selector.reach import from_anywhere, public_addresses, too_broad
from selector.spec import SpecError, parse_spec
from tests.pulumi_harness import ROOT, stack_config

CASES: list[tuple[list[str], bool, str]] = [
    (["0.0.0.0/1", "128.0.0.0/1"], True, "the internet in two halves (the reported bypass)"),
    (["0.0.0.0/0"], True, "everything"),
    (["::/0"], True, "every IPv6 address"),
    (["203.0.113.0/24", "0.0.0.0/1", "128.0.0.0/1"], True, "halves hidden behind a real range"),
    (["2.0.0.0/7"], True, "one block of 2^25 public addresses"),
    (["3.0.0.0/8", "4.0.0.0/8"], True, "two /8s"),
    (["2600::/31"], True, "more than a /32 of public IPv6"),
    (["2000::/3"], True, "all of IPv6 global unicast"),
    (["3.0.0.0/8"], False, "one /8: the limit itself"),
    (["203.0.113.0/24"], False, "a documentation range"),
    (["198.51.100.7/32", "2001:db8::/48"], False, "one address of each family"),
    (["10.0.0.0/8"], False, "private"),
    (["0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/3"], False, "no public unicast address among them"),
    (["2600::/32"], False, "a /32 of IPv6: the limit itself"),
    (["fc00::/7", "fe80::/10"], False, "IPv6 private and link-local"),
    (["3.0.0.0/9", "3.128.0.0/9"], False, "a /8 in halves is still a /8"),
]


def _extra_cases() -> list[tuple[list[str], bool, str]]:
    cases = []
    for file in sorted((Path(__file__).parent / "fixtures" / "cidrs").glob("*.yaml")):
        for case in yaml.safe_load(file.read_text()) or []:
            cases.append(
                ([str(c) for c in case["cidrs"]], bool(case["anywhere"]), f"{file.name}: {case.get('why')}")
            )
    return cases


ALL = CASES + _extra_cases()
IDS = [",".join(c) for c, _, _ in ALL]
CONFIG = PolicyConfig(now=datetime(2026, 12, 4, tzinfo=UTC))


def _spec(**access: Any) -> Any:
    workload = dict(stack_config(ROOT / "stacks" / "Pulumi.llama8b-lb.yaml")["gpufit:workload"])
    return parse_spec({**workload, "access": {"api_cidrs": ["203.0.113.0/24"], **access}})


@pytest.mark.parametrize(("cidrs", "anywhere", "why"), ALL, ids=IDS)
def test_the_shared_rule(cidrs: list[str], anywhere: bool, why: str) -> None:
    assert from_anywhere(cidrs) is anywhere, why
    assert from_anywhere(list(reversed(cidrs))) is anywhere, "order does not matter"


@pytest.mark.parametrize(("cidrs", "anywhere", "why"), ALL, ids=IDS)
def test_the_spec_needs_the_opt_in(cidrs: list[str], anywhere: bool, why: str) -> None:
    for field, flag in (("api_cidrs", "allow_api_from_anywhere"), ("ssh_cidrs", "allow_ssh_from_anywhere")):
        if anywhere:
            with pytest.raises(SpecError) as err:
                _spec(**{field: cidrs})
            assert any(field in str(p) or flag in str(p) for p in err.value.problems), why
            assert all("\n" not in str(p) for p in err.value.problems)
        else:
            _spec(**{field: cidrs})
        _spec(**{field: cidrs, flag: True})  # the opt-in admits it


@pytest.mark.parametrize(("cidrs", "anywhere", "why"), ALL, ids=IDS)
def test_the_policy_pack_counts_the_union(cidrs: list[str], anywhere: bool, why: str) -> None:
    v4 = [c for c in cidrs if ":" not in c]
    v6 = [c for c in cidrs if ":" in c]
    group = {
        "ingress": [
            {
                "protocol": "tcp",
                "fromPort": 22,
                "toPort": 22,
                "cidrBlocks": [c] if c in v4 else [],
                "ipv6CidrBlocks": [c] if c in v6 else [],
            }
            for c in cidrs
        ]
    }
    firewall = {
        "direction": "INGRESS",
        "allows": [{"protocol": "tcp", "ports": ["22"]}],
        "sourceRanges": cidrs,
    }
    armor = {
        "description": "gpufit x: access.api_cidrs only",
        "rules": [
            {"action": "allow", "priority": 1000 + i, "match": {"config": {"srcIpRanges": [c]}}}
            for i, c in enumerate(cidrs)
        ],
    }
    split = [
        (
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
            {"securityGroupId": "sg-1", "cidrIpv4" if c in v4 else "cidrIpv6": c},
        )
        for c in cidrs
    ]
    split += [
        (
            "gcp:compute/firewall:Firewall",
            {"network": "net", "allows": [{"protocol": "tcp"}], "sourceRanges": [c]},
        )
        for c in cidrs
    ]
    found = {
        "security group": check_no_open_ingress("aws:ec2/securityGroup:SecurityGroup", group, CONFIG),
        "firewall": check_no_open_ingress("gcp:compute/firewall:Firewall", firewall, CONFIG),
        "armor": check_endpoint_access(
            "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy", armor, CONFIG
        ),
    }
    for what, problems in found.items():
        assert bool(problems) is anywhere, f"{what}: {why}: {problems}"
    single_open = any(from_anywhere([c]) for c in cidrs)
    union = check_ingress_union(split, CONFIG)
    # a CIDR open alone is the per-resource check's to report; the split ones are the stack's
    assert bool(union) is (anywhere and not single_open), f"split over resources: {why}: {union}"
    if anywhere and not single_open:
        assert {p.split(" together")[0] for p in union} == {
            "the ingress rules of security group sg-1",
            "the ingress rules of network net",
        }


def test_counts_only_public_addresses() -> None:
    assert public_addresses(["10.0.0.0/8"], 4) == 0
    assert public_addresses(["3.0.0.0/8", "3.0.0.0/9"], 4) == 1 << 24  # overlaps counted once
    assert public_addresses(["0.0.0.0/0"], 4) < 1 << 32
    assert [str(b) for b in too_broad(["0.0.0.0/1", "128.0.0.0/1"])] == [
        "about 2^31 public IPv4 addresses, more than a /8"
    ]


def test_the_spec_names_the_union_in_one_line() -> None:
    with pytest.raises(SpecError) as err:
        _spec(api_cidrs=["3.0.0.0/8", "4.0.0.0/8"])
    (problem,) = err.value.problems
    assert "api_cidrs: together they open the endpoint to the internet" in str(problem)
    assert "allow_api_from_anywhere" in str(problem)
