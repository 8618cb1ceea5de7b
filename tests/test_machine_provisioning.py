"""What the components provision for the machine's lifecycle: secrets for every task (the token
and the spec's ``secrets``, created or referenced, readable by the machines alone), the GCP
shutdown-script, the refusals that stop a program before anything is created, and the disk
sized for what the job writes."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pulumi
import pytest

from providers.base import SecretInputs, unknown_secret_keys
from selector.catalog import load_catalog
from selector.cost import disk_parts, disk_size_gb, outputs_note
from selector.report import plan_to_dict
from selector.select import plan
from selector.spec import SecretSource, SpecError, parse_spec
from tests.machine.plans import MULTI_NODE, deployment
from tests.machine.unpack import settings
from tests.pulumi_harness import (
    ROOT,
    TEST_HF_TOKEN,
    RecordingMocks,
    RecordingMonitor,
    is_secret_input,
    load_program,
    stack_config,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:team/db-password-Q1w2E3"
SECRET = "aws:secretsmanager/secret:Secret"
VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
AWS_INSTANCE = "aws:ec2/instance:Instance"


def workload(stack: str, **changes: Any) -> dict[str, Any]:
    return {**stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"], **changes}


def run(
    stack: str, changes: dict[str, Any], config: dict[str, Any], secret_keys: tuple[str, ...] = ()
) -> tuple[RecordingMocks, dict[str, Any]]:
    """The Pulumi program for the stack (``changes`` in its workload) with ``config``; the keys in
    ``secret_keys`` are secret config, as ``pulumi config set --secret`` makes them."""
    merged = {
        "gpufit:hfToken": TEST_HF_TOKEN,
        **stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml"),
        "gpufit:workload": workload(stack, **changes),
        **config,
    }
    merged = {k: v for k, v in merged.items() if v is not None}
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(
        mocks, project="gpufit", stack="test", preview=False, monitor=RecordingMonitor(mocks)
    )
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in merged.items()},
        [*secret_keys, *(["gpufit:hfToken"] if "gpufit:hfToken" in merged else [])],
    )
    program = load_program()
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def body() -> Any:
        outputs = program.main(now=lambda: NOW)
        return pulumi.Output.all(**outputs).apply(resolved.update)

    body()
    return mocks, resolved


def only_providers(mocks: RecordingMocks) -> bool:
    return all(r.typ.startswith("pulumi:providers:") for r in mocks.resources)


# ------------------------------------------------------------------------- secrets, AWS


def test_a_multi_node_job_reads_its_token_and_declared_secrets() -> None:
    """Plain instances (no group) get the same secret path as serve: the token and a config
    secret become Secrets Manager secrets, an existing one is only read, and the role reads
    exactly those."""
    secrets = {"WANDB_API_KEY": "wandb", "DB_PASSWORD": ARN}
    mocks, outputs = run(
        "llama70b-full-ft",
        {**MULTI_NODE, "secrets": secrets},
        {"gpufit:secrets": {"wandb": "wandb-value-0123456789"}},
        ("gpufit:secrets",),
    )
    made = {r.name: r for r in mocks.of_type(SECRET)}
    assert sorted(made) == ["llama70b-sft-test-hf-token", "llama70b-sft-test-secret-wandb_api_key"]
    assert made["llama70b-sft-test-secret-wandb_api_key"].inputs["namePrefix"] == (
        "gpufit/llama70b-sft-test/secret-wandb_api_key-"
    )
    for version in mocks.of_type(VERSION):
        assert is_secret_input(mocks.requests[(version.typ, version.name)], "secretString")
    role = next(r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("fleet-access"))
    (read,) = json.loads(role.inputs["policy"])["Statement"]
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:{}-AbCdEf"
    assert sorted(read["Resource"]) == sorted(
        [
            arn.format("llama70b-sft-test-hf-token"),
            arn.format("llama70b-sft-test-secret-wandb_api_key"),
            ARN,
            ARN + "-??????",
        ]
    )
    for node in mocks.of_type(AWS_INSTANCE):
        text = node.inputs["userData"]
        found = settings(text)
        assert found["SECRET_VARS"] == ["HF_TOKEN", "DB_PASSWORD", "WANDB_API_KEY"]
        assert found["SECRET_REFS"][1] == ARN
        assert "wandb-value-0123456789" not in text and TEST_HF_TOKEN not in text
    assert outputs["status"] == f"gpufit status --bucket s3://{outputs['bucket']}"


def test_secrets_in_plain_config_are_refused_before_anything_is_created() -> None:
    with pytest.raises(pulumi.RunError, match=r"gpufit:secrets is plain text .* --secret --path"):
        run("sdxl-batch", {"secrets": {"WANDB_API_KEY": "wandb"}}, {"gpufit:secrets": {"wandb": "v"}})


def test_a_missing_config_key_is_named_before_anything_is_created() -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"secrets.WANDB_API_KEY: no key 'wandb' in the stack's secret"):
        run(
            "sdxl-batch",
            {"secrets": {"WANDB_API_KEY": "wandb"}},
            {"gpufit:secrets": {"other": "v"}},
            ("gpufit:secrets",),
        )
    del mocks


def test_a_secret_of_the_other_cloud_is_refused() -> None:
    d, _ = deployment("sdxl-batch")
    gcp = replace(d, cloud="gcp", secrets=(SecretSource("DB", "aws", ARN),))
    assert unknown_secret_keys(gcp, SecretInputs()) == [
        f"secrets.DB: {ARN} is in AWS but the plan runs on GCP; set placement.clouds: [aws]"
    ]


def test_a_server_that_cannot_load_before_its_deadline_is_refused() -> None:
    with pytest.raises(
        pulumi.RunError, match=r"may take 53 min to load its weights, longer than the machines live"
    ):
        run("llama70b-chat", {"duration": "30m"}, {})


# ------------------------------------------------------------------------- secrets, GCP


def test_a_gcp_job_reads_its_token_and_an_existing_secret(tmp_path: Any) -> None:
    secrets = {"DB_PASSWORD": "projects/team-project/secrets/db-password"}
    mocks, _ = run(
        "guanaco-65b",
        {"placement": {"clouds": ["gcp"]}, "secrets": secrets},
        {"gcp:project": "my-project"},
    )
    readers = {r.name: r.inputs for r in mocks.of_type("gcp:secretmanager/secretIamMember:SecretIamMember")}
    existing = readers["guanaco-65b-test-secret-db-password-reader"]
    assert (existing["project"], existing["secretId"]) == ("team-project", "db-password")
    assert existing["role"] == "roles/secretmanager.secretAccessor"
    assert existing["member"].startswith("serviceAccount:gf-guanaco-65b-test-")
    assert readers["guanaco-65b-test-hf-token-reader"]["member"] == existing["member"]
    # The choice's template and every fallback group's (a checkpointed GCP plan keeps groups of
    # its own for its fallbacks): each machine reads the same secrets by reference.
    templates = mocks.of_type("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate")
    assert templates
    for template in templates:
        found = settings(template.inputs["metadata"]["startup-script"])
        assert found["SECRET_VARS"] == ["HF_TOKEN", "DB_PASSWORD"]
        refs = ["guanaco-65b-test-hf-token", "projects/team-project/secrets/db-password"]
        assert found["SECRET_REFS"] == refs
        assert template.inputs["metadata"]["shutdown-script"].endswith("gpufit-machine shutdown\n")


# ------------------------------------------------------------------------- spec rules


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        (
            {"job": {"workdir": "/var/lib/gpufit\nGPUFIT_SCRIPT_EOF\ntouch /pwned"}},
            "job.workdir",
            "an absolute path",
        ),
        ({"job": {"workdir": "outputs"}}, "job.workdir", "an absolute path"),
        ({"job": {"workdir": "/srv/../etc"}}, "job.workdir", "no component starting with a dot"),
        ({"job": {"workdir": "/srv/$(id)"}}, "job.workdir", "letters, digits"),
        (
            {"model": {"preset": "sdxl-base-1.0", "revision": "main\nGPUFIT_SCRIPT_EOF"}},
            "model.revision",
            "branch, tag or commit",
        ),
        (
            {"model": {"preset": "sdxl-base-1.0", "revision": "v1;reboot"}},
            "model.revision",
            "branch, tag or commit",
        ),
        (
            {"model": {"preset": "sdxl-base-1.0", "revision": "a..b"}},
            "model.revision",
            "branch, tag or commit",
        ),
        ({"secrets": {"hf_token": "x"}}, "secrets", "upper-case variable name"),
        ({"secrets": {"PATH": "x"}}, "secrets", "PATH: reserved"),
        ({"secrets": {"AWS_KEY": "x"}}, "secrets", "AWS_KEY: reserved"),
        ({"secrets": {"TOKEN": "x y"}}, "secrets", "a Secrets Manager ARN"),
        ({"secrets": {"A": ARN, "B": "projects/my-project/secrets/b"}}, "secrets", "both AWS and GCP"),
        (
            {"secrets": {"B": "projects/my-project/secrets/b"}, "placement": {"clouds": ["aws"]}},
            "secrets",
            "placement.clouds",
        ),
    ],
)
def test_unsafe_values_are_one_line_spec_errors(changes: dict[str, Any], field: str, expected: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(workload("sdxl-batch", **changes))
    (problem,) = caught.value.problems
    line = str(problem)
    assert line.startswith(field) and expected in line and "\n" not in line, line


def test_safe_values_pass() -> None:
    spec = parse_spec(
        workload(
            "sdxl-batch",
            model={"preset": "sdxl-base-1.0", "revision": "refs/pr/12"},
            job={"command": "python x.py", "workdir": "/data/run_1.v2", "retries": 0},
            secrets={"WANDB_API_KEY": "wandb", "DB_PASSWORD": ARN},
            placement={"clouds": ["aws"]},
        )
    )
    assert spec.job.retries == 0 and spec.model.revision == "refs/pr/12"
    commit = "0123456789abcdef0123456789abcdef01234567"
    assert parse_spec(workload("sdxl-batch", model={"preset": "sdxl-base-1.0", "revision": commit}))


def test_the_deployment_carries_the_lifecycle_inputs() -> None:
    d, _ = deployment("llama70b-full-ft")
    assert (d.job_retries, d.checkpoint_interval_s) == (2, 3600)  # checkpoint_interval: 1h
    assert d.checkpoint_gb == pytest.approx(988.4, abs=0.1)
    serve, _ = deployment("llama70b-chat")
    assert serve.checkpoint_gb == 0.0 and serve.secrets == ()


# ------------------------------------------------------------------------- the disk


def test_the_disk_holds_two_checkpoints_and_the_declared_outputs() -> None:
    catalog = load_catalog()
    ft = plan(parse_spec(workload("llama70b-full-ft")), catalog)
    parts = {p.name: p.gb for p in disk_parts(ft.spec, ft.requirements)}
    assert parts["checkpoints"] == pytest.approx(2 * 988.4, abs=0.2)
    assert disk_size_gb(ft.spec, ft.requirements) == 2270 >= 2 * 988.4 + 141 + 50 + 100
    d, _ = deployment("llama70b-full-ft")
    assert d.disk_gb == 2270  # was 300: the checkpoint alone did not fit
    batch = plan(parse_spec(workload("sdxl-batch")), catalog)
    assert {p.name: p.gb for p in disk_parts(batch.spec, batch.requirements)}["outputs"] == 300
    assert disk_size_gb(batch.spec, batch.requirements) == 410 and outputs_note(batch.spec) is None
    uncounted = plan(parse_spec(workload("sdxl-batch", storage={})), catalog)
    assert "set storage.outputs_gb" in (outputs_note(uncounted.spec) or "")
    doc = plan_to_dict(uncounted)["disk"]
    assert doc["gb"] == 110 and doc["note"].startswith("outputs/ is synced") and not doc["given"]
