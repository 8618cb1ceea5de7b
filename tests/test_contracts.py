"""What `pulumi up` sends, the clouds accept, and a second `up` changes nothing.

Every stack file, example spec and adversarial spec (``tests/contracts/specs``) runs through
the Pulumi program under the mocks, whose every registration passes the clouds' contracts
(``tests/contracts``), under a short, a long, a 40-character and a not-DNS-safe stack name.
Then the same program runs again three hours later: every resource's inputs must equal the
first run's, except what its own ``ignoreChanges`` keeps."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pulumi
import pytest

from tests.contracts import ContractError
from tests.contracts.runs import STACK_NAMES, Case, cases, changes
from tests.pulumi_harness import RecordingMocks, run_component, run_program

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=3)
CASES = cases()


def _run(case: Case, stack: str, now: datetime) -> RecordingMocks | None:
    """The program's registrations; None when the case expects (and gets) a refusal."""
    mocks = RecordingMocks()
    if case.expect == "refused":
        with pytest.raises(pulumi.RunError, match=case.because):
            run_program(case.config, now, stack=stack, mocks=mocks)
        assert [r.typ for r in mocks.resources if not r.typ.startswith("pulumi:providers:")] == []
        return None
    run_program(case.config, now, stack=stack, mocks=mocks)
    return mocks


def test_the_cases_cover_what_the_issue_names() -> None:
    ids = {c.id for c in CASES}
    assert {"stacks/Pulumi.llama70b-chat", "stacks/Pulumi.llama8b-lb", "examples/guanaco-65b"} <= ids
    specs = [c for c in CASES if c.id.startswith("specs/")]
    types = {
        t for c in specs for t in c.config["gpufit:workload"].get("placement", {}).get("instance_types", [])
    }
    efa = {
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
    }
    assert efa | {"a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g"} <= types
    names = [c.config["gpufit:workload"]["name"] for c in specs]
    assert sum(len(n) >= 39 for n in names) >= 10
    assert max(len(s) for s in STACK_NAMES) >= 40


@pytest.mark.parametrize("stack", STACK_NAMES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_request_is_one_the_cloud_accepts(case: Case, stack: str) -> None:
    """The mocks raise ContractError, naming the rule and its source, on the first request
    the cloud would refuse; a clean run is the test passing."""
    mocks = _run(case, stack, NOW)
    if mocks is not None:
        assert mocks.contracts.stack.resources  # the contracts saw every registration


@pytest.mark.parametrize("stack", ["dev", "llama70b-chat-production"])
@pytest.mark.parametrize("case", [c for c in CASES if c.expect == "ok"], ids=lambda c: c.id)
def test_a_second_up_three_hours_later_changes_nothing(case: Case, stack: str) -> None:
    first = _run(case, stack, NOW)
    second = _run(case, stack, LATER)
    assert first is not None and second is not None
    assert list(changes(first, second)) == []


def test_a_changed_input_is_a_change() -> None:
    """The comparison sees what the engine would update: a re-planned disk size is one."""
    case = next(c for c in CASES if c.id == "stacks/Pulumi.sdxl-batch")
    first = _run(case, "dev", NOW)
    bigger = Case(
        case.id,
        {**case.config, "gpufit:workload": {**case.config["gpufit:workload"], "storage": {"disk_gb": 900}}},
    )
    second = _run(bigger, "dev", LATER)
    assert first is not None and second is not None
    found = list(changes(first, second))
    assert any(re.search(r"launchTemplate:LaunchTemplate .*blockDeviceMappings", f) for f in found), found


def test_a_refused_request_stops_the_program_with_the_rule_and_its_source() -> None:
    import pulumi_aws as aws

    def build() -> dict[str, object]:
        role = aws.iam.Role("r", assume_role_policy="{}", tags={"gpufit:zones": "use1-az1,use1-az2"})
        return {"arn": role.arn}

    with pytest.raises(ContractError) as refused:
        run_component(build)
    message = str(refused.value)
    assert "iam:CreateRole Tags[0].Value: 'use1-az1,use1-az2' does not match" in message
    assert "aws.api-model" in message and "https://" in message


@pytest.mark.parametrize(
    "case_id", ["specs/efa-p5", "stacks/Pulumi.sdxl-batch", "stacks/Pulumi.llama70b-chat"]
)
def test_a_newer_image_of_the_line_replaces_no_running_machine(case_id: str) -> None:
    """Deep Learning AMIs ship every few weeks and the lookup takes the newest: a later `up`
    that finds a newer one must leave the running instances and templates as they were
    (``ami`` forces a new instance), and an EFA node, should it ever be replaced, lets go of
    its pre-made primary interface first."""
    case = next(c for c in CASES if c.id == case_id)
    first = _run(case, "dev", NOW)
    later = RecordingMocks(ami_id="ami-0newer")
    run_program(case.config, LATER, stack="dev", mocks=later)
    assert first is not None
    images = [r.inputs.get("ami") or r.inputs.get("imageId") for r in later.resources]
    assert "ami-0newer" in images  # the lookup did find the newer image
    assert list(changes(first, later)) == []
    for key, request in later.requests.items():
        if key[0] == "aws:ec2/instance:Instance":
            assert request.deleteBeforeReplace, key


@pytest.mark.parametrize("case_id", ["stacks/Pulumi.sdxl-batch", "specs/gcp-finetune-lora"])
def test_a_bare_address_in_the_spec_reaches_the_cloud_with_its_prefix(case_id: str) -> None:
    """EC2 refuses an IpRange without a prefix length: the spec's ``203.0.113.7`` is sent as
    ``203.0.113.7/32``, and a block with host bits as the network the cloud applies."""
    case = next(c for c in CASES if c.id == case_id)
    workload = {**case.config["gpufit:workload"], "access": {"ssh_cidrs": ["203.0.113.7", "10.1.2.3/8"]}}
    mocks = RecordingMocks()
    run_program({**case.config, "gpufit:workload": workload}, NOW, stack="dev", mocks=mocks)
    sent = repr([r.inputs for r in mocks.resources])
    assert "203.0.113.7/32" in sent and "10.0.0.0/8" in sent
    assert "'203.0.113.7'" not in sent and "10.1.2.3/8" not in sent
