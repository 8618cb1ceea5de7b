"""Every pattern that guards an identifier matches it whole (issue 22, item 8): ``re.match``
with ``$`` admits a trailing newline (``$`` matches before a final ``\\n``:
https://docs.python.org/3/library/re.html#regular-expression-syntax), so ``name: "x\\n"`` would
pass the check and reach resource names, tags and scripts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from selector.spec import SpecError, parse_spec
from tests.pulumi_harness import ROOT, stack_config

ARN = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def _workload() -> dict[str, Any]:
    return dict(stack_config(ROOT / "stacks" / "Pulumi.llama8b-lb.yaml")["gpufit:workload"])


def _with(path: str, value: str) -> dict[str, Any]:
    workload = _workload()
    *parents, leaf = path.split(".")
    node = workload
    for key in parents:
        node[key] = dict(node.get(key) or {})
        node = node[key]
    node[leaf] = value
    if path in CERTIFICATES:  # the stack serves plain HTTP by the opt-in; a certificate replaces it
        del workload["serving"]["allow_plain_http"]
        if path != "serving.certificate_arn":
            workload["placement"] = {"clouds": ["gcp"]}
        if path == "serving.certificate":  # your own certificate names the host it is for
            workload["serving"]["domain"] = "api.example.com"
    return workload


CERTIFICATES = ("serving.certificate_arn", "serving.domain", "serving.certificate")


IDENTIFIERS = [
    ("name", "llama8b-lb"),
    ("model.hf", "meta-llama/Llama-3.1-8B-Instruct"),
    ("model.revision", "main"),
    ("serving.certificate_arn", ARN),
    ("serving.domain", "api.example.com"),
    ("serving.certificate", "projects/my-project/locations/us-central1/certificates/api-cert"),
]
TAILS = ["\n", "\nrm -rf /", " ", "\r", "\x00"]


@pytest.mark.parametrize(("path", "good"), IDENTIFIERS, ids=[p for p, _ in IDENTIFIERS])
@pytest.mark.parametrize("tail", TAILS, ids=[repr(t) for t in TAILS])
def test_an_identifier_with_anything_after_it_is_refused(path: str, good: str, tail: str) -> None:
    parse_spec(_with(path, good))
    with pytest.raises(SpecError) as err:
        parse_spec(_with(path, good + tail))
    assert any(path in str(p) for p in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:acm:x; rm -rf /",
        "arn:aws:acm:us-east-1:123456789012:certificate/abc",
        "arn:aws:iam::123456789012:server-certificate/x",
        "xarn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    ],
)
def test_a_certificate_is_an_acm_certificate_arn(arn: str) -> None:
    with pytest.raises(SpecError, match=r"serving\.certificate_arn"):
        parse_spec(_with("serving.certificate_arn", arn))


PRODUCT = (
    "selector",
    "deployment",
    "providers",
    "policy",
    "cli",
    "machine",
    "hub",
    "catalog",
    "cloudapi",
    "gitops",
)
PREFIX_MATCHES = {
    ("selector/units.py", "_SIZE_RE"): "a size with surrounding whitespace, parsed to a number",
    ("selector/units.py", "_COUNT_RE"): "a count with surrounding whitespace, parsed to a number",
    ("catalog/gcp/prices.py", "_GPU_SKU"): "reads the start of a SKU's free-text description",
    ("catalog/gcp/prices.py", "_VM_SKU"): "reads the start of a SKU's free-text description",
    ("catalog/gcp/prices.py", "_DWS_GPU_SKU"): "reads the start of a DWS SKU's free-text description",
    ("catalog/gcp/prices.py", "_DWS_VM_SKU"): "reads the start of a DWS SKU's free-text description",
}
"""The product's prefix matches, none of them guarding an identifier."""


def test_no_pattern_guards_an_identifier_with_a_prefix_match() -> None:
    found = set()
    for package in PRODUCT:
        for file in (ROOT / package).rglob("*.py"):
            text = file.read_text(encoding="utf-8")
            rel = file.relative_to(ROOT).as_posix()
            found |= {(rel, m) for m in re.findall(r"(\w+)\.match\(", text)}
            assert "re.match(" not in text, f"{rel}: re.match: use re.fullmatch"
    assert found == set(PREFIX_MATCHES), "a new prefix match: use fullmatch, or list it with the reason"
