"""A serve workload becomes an endpoint: the model server launched with the plan's own
numbers, secrets by reference only, reachable only as the spec allows."""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pulumi
import pytest

from cli.main import main
from deployment import SGLANG_IMAGE, VLLM_IMAGE, ServerLaunch, ServingError, server_launch
from machine.serving import MachineSecrets, docker_run
from policy.gpufit_policies import PolicyConfig, check_endpoint_access, check_no_secrets_in_boot_data
from selector.catalog import load_catalog
from selector.select import Plan, plan
from selector.spec import SpecError, parse_spec
from tests.machine.unpack import file_named
from tests.pulumi_harness import ROOT, RecordingMocks, is_secret_input, run_program, stack_config

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
# random: a run such as 0123456789abcdef is refused as guessable (providers/key_strength.py)
API_KEY = "sk-gpufit-test-cf2ce98e009d80c8daf7de231ecd69a3"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
SG = "aws:ec2/securityGroup:SecurityGroup"
CATALOG = load_catalog()


def _workload(stack: str, **changes: Any) -> dict[str, Any]:
    workload = dict(stack_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")["gpufit:workload"])
    workload.update(changes)
    return workload


def _plan(workload: dict[str, Any]) -> Plan:
    return plan(parse_spec(workload), CATALOG)


def _run(workload: dict[str, Any], **config: Any) -> tuple[RecordingMocks, dict[str, Any]]:
    mocks = RecordingMocks()
    _, outputs = run_program({"gpufit:workload": workload, **config}, NOW, mocks=mocks)
    return mocks, outputs


def user_data(mocks: RecordingMocks) -> str:
    return base64.b64decode(mocks.one(LT).inputs["userData"]).decode()


def docker_lines(script: str) -> list[list[str]]:
    """Every ``docker run`` the boot script's serve-start.sh runs, as argument lists."""
    return [
        shlex.split(line)
        for line in file_named(script, "/serve-start.sh").splitlines()
        if line.startswith("docker run")
    ]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# ---------------------------------------------------------------------------------- the launch


@pytest.mark.parametrize("stack", ["llama70b-chat", "llama8b-lb"])
def test_the_launch_carries_the_plans_numbers_and_no_secret(stack: str) -> None:
    workload = _workload(stack)
    expected = _plan(workload)
    assert expected.choice is not None
    mocks, outputs = _run(workload, **{"gpufit:hfToken": TOKEN, "gpufit:apiKey": API_KEY})
    script = user_data(mocks)
    (run,) = docker_lines(script)
    assert run[run.index("--restart") + 1] == "unless-stopped" and VLLM_IMAGE in run
    shape = expected.choice.shape
    assert int(flag(run, "--tensor-parallel-size")) == shape.tensor_parallel
    assert int(flag(run, "--max-model-len")) == workload["serving"]["context_tokens"]
    assert int(flag(run, "--max-num-seqs")) == workload["serving"]["concurrency"]
    assert flag(run, "--served-model-name") == workload["name"]
    assert flag(run, "--model") == workload["model"]["hf"]
    assert float(flag(run, "--gpu-memory-utilization")) == 0.9
    assert "--quantization" not in run and "--kv-cache-dtype" not in run  # bf16 plan
    # secrets: by reference in the boot script, values only in the secret versions (marked secret)
    for text in (script, json.dumps([r.inputs for r in mocks.resources if "secretVersion" not in r.typ])):
        assert TOKEN not in text and API_KEY not in text
    supervisor = file_named(script, "/gpufit-machine")
    assert re.search(r"^API_KEY_REF=arn:aws:secretsmanager:\S+api-key-AbCdEf$", supervisor, re.M)
    assert re.search(
        r"^SERVE_SECRETS=\(HF_TOKEN arn:aws:secretsmanager:\S+hf-token-AbCdEf\)$", supervisor, re.M
    )
    assert flag(run, "--env-file") == "/run/gpufit/serve.env"
    versions = [r for r in mocks.resources if r.typ == "aws:secretsmanager/secretVersion:SecretVersion"]
    assert len(versions) == 2
    for version in versions:
        assert is_secret_input(mocks.requests[(version.typ, version.name)], "secretString")
    role = next(r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("fleet-access"))
    reads = [s for s in json.loads(role.inputs["policy"])["Statement"] if s["Sid"] == "ReadOwnSecrets"]
    secrets = mocks.of_type("aws:secretsmanager/secret:Secret")
    assert reads[0]["Action"] == ["secretsmanager:GetSecretValue"]
    assert sorted(reads[0]["Resource"]) == sorted(
        f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{s.name}-AbCdEf" for s in secrets
    )
    assert outputs["api_key"] == API_KEY and outputs["endpoint"].endswith("/v1")


def test_the_api_key_is_generated_when_not_given_and_exported_as_a_secret() -> None:
    mocks, outputs = _run(_workload("llama8b-lb"))
    generator = mocks.one("random:index/randomPassword:RandomPassword").inputs
    assert generator["length"] == 48 and generator["special"] is False
    assert outputs["api_key"] == "generated-api-key-0123456789"
    captured: dict[str, bool] = {}
    pulumi.runtime.set_mocks(RecordingMocks(), project="gpufit", stack="t", preview=False)
    pulumi.runtime.set_all_config(
        {"gpufit:workload": json.dumps(_workload("llama8b-lb")), "gpufit:hfToken": "hf_" + "y" * 34}, []
    )
    from tests.pulumi_harness import load_program

    program = load_program()

    @pulumi.runtime.test
    def body() -> Any:
        outputs = program.main(now=lambda: NOW)
        return pulumi.Output.from_input(outputs["api_key"].is_secret()).apply(
            lambda s: captured.update(secret=s)
        )

    body()
    assert captured == {"secret": True}


def test_a_gated_model_without_a_token_stops_before_any_resource() -> None:
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match="gated on Hugging Face: set its token"):
        run_program({"gpufit:workload": _workload("llama8b-lb"), "gpufit:hfToken": None}, NOW, mocks=mocks)
    assert all(r.typ.startswith("pulumi:providers:") for r in mocks.resources)


def test_an_fp8_plan_launches_fp8_weights_and_kv_cache() -> None:
    serving = {**_workload("llama8b-lb")["serving"], "kv_cache_precision": "fp8"}
    quantise = _workload("llama8b-lb", precision="fp8", serving=serving)  # 16-bit repo: quantise it
    launch = server_launch(_plan(quantise))
    # vLLM 0.31+ takes online FP8 as fp8_per_tensor ("--quantization fp8 is deprecated for online
    # quantization", vllm/model_executor/model_loader/weight_utils.py)
    assert launch is not None and (launch.quantization, launch.kv_cache_dtype) == ("fp8_per_tensor", "fp8")
    run = shlex.split(docker_run(launch, 0))
    assert flag(run, "--quantization") == "fp8_per_tensor" and flag(run, "--kv-cache-dtype") == "fp8"
    # an FP8 checkpoint carries its own quantisation: vLLM refuses a second --quantization
    checkpoint = {"preset": "llama-3.1-8b", "hf": "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"}
    launch = server_launch(_plan(_workload("llama8b-lb", precision="fp8", model=checkpoint, serving=serving)))
    assert launch is not None and launch.quantization is None and launch.kv_cache_dtype == "fp8"
    # the preset alone: its published FP8 checkpoint, not an online quantisation
    launch = server_launch(_plan(_workload("llama8b-lb", precision="fp8", model={"preset": "llama-3.1-8b"})))
    assert launch is not None and launch.model == "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"
    assert launch.quantization is None


def test_replicas_sharing_a_machine_get_their_own_gpus_and_ports() -> None:
    workload = _workload(
        "llama8b-lb",
        serving={
            "context_tokens": 4096,
            "concurrency": 8,
            "tokens_per_s_total": 600,
            "engine": "vllm",
            "expose": "load_balancer",
            "allow_plain_http": True,
        },
        placement={"clouds": ["aws"], "instance_types": ["g6e.12xlarge"]},
        access={"api_cidrs": ["203.0.113.0/24"]},
        budget={},
    )
    expected = _plan(workload)
    assert expected.choice is not None and expected.choice.shape.replicas_per_instance == 4
    mocks, _ = _run(workload)
    runs = docker_lines(user_data(mocks))
    assert [flag(r, "--gpus") for r in runs] == ['"device=0"', '"device=1"', '"device=2"', '"device=3"']
    assert [flag(r, "--port") for r in runs] == ["8000", "8001", "8002", "8003"]
    assert len({flag(r, "--name") for r in runs}) == 4
    groups = mocks.of_type("aws:lb/targetGroup:TargetGroup")
    assert sorted(g.inputs["port"] for g in groups) == [8000, 8001, 8002, 8003]
    forward = mocks.one("aws:lb/listenerRule:ListenerRule").inputs["actions"][0]["forward"]["targetGroups"]
    assert len(forward) == 4 and {t["weight"] for t in forward} == {1}


def test_sglang_takes_the_same_numbers_and_its_key_from_a_root_only_file() -> None:
    launch = ServerLaunch(
        "sglang", "org/m", None, "w", 2, 4096, 8, 0.85, "fp8", "fp8_e4m3", 1, 8000, 16.0,
        health_path="/health_generate",
    )  # fmt: skip
    args = shlex.split(docker_run(launch, 0))
    assert SGLANG_IMAGE in args and flag(args, "--entrypoint") == "python3"
    inner = args[args.index(SGLANG_IMAGE) + 1 :]
    assert inner[:2] == ["-m", "sglang.launch_server"]
    assert flag(inner, "--tp-size") == "2" and flag(inner, "--context-length") == "4096"
    assert flag(inner, "--max-running-requests") == "8" and flag(inner, "--mem-fraction-static") == "0.85"
    assert flag(inner, "--kv-cache-dtype") == "fp8_e4m3"
    assert flag(inner, "--config") == "/etc/gpufit/sglang.yaml"
    # the key is on no command line: SGLang merges --config into its arguments inside Python;
    # the supervisor writes the file on tmpfs from the fetched secret (machine scenario
    # aws-group-serve-sglang-key-file)
    assert "--api-key" not in inner and "/run/gpufit/sglang.yaml:/etc/gpufit/sglang.yaml:ro" in args
    assert MachineSecrets.api_key_var("sglang") == ""  # no variable: the key is not in the env file


# ---------------------------------------------------------------------------------- reachability


def test_private_by_default_no_inbound_and_a_port_forward() -> None:
    mocks, outputs = _run(_workload("llama70b-chat"))
    assert mocks.one(SG).inputs["ingress"] == []
    assert not mocks.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert not mocks.of_type("aws:lb/loadBalancer:LoadBalancer")
    assert "AWS-StartPortForwardingSession" in outputs["port_forward"]
    assert outputs["endpoint"] == "http://127.0.0.1:8000/v1"
    assert mocks.one(ASG).inputs["healthCheckType"] == "EC2"


def test_a_load_balancer_admits_the_given_cidrs_and_health_checks_the_group() -> None:
    workload = _workload("llama8b-lb", access={"api_cidrs": ["203.0.113.0/24", "2001:db8::/48"]})
    mocks, outputs = _run(workload)
    lb = mocks.one("aws:lb/loadBalancer:LoadBalancer").inputs
    assert lb["loadBalancerType"] == "application" and lb["internal"] is False
    assert lb["subnets"] == ["subnet-0a", "subnet-0b"]  # the default subnets of two zones
    lb_sg = next(r for r in mocks.of_type(SG) if r.name.endswith("lb-sg")).inputs
    (rule,) = lb_sg["ingress"]
    assert (rule["fromPort"], rule["toPort"], rule["protocol"]) == (80, 80, "tcp")
    assert rule["cidrBlocks"] == ["203.0.113.0/24"] and rule["ipv6CidrBlocks"] == ["2001:db8::/48"]
    listener = mocks.one("aws:lb/listener:Listener").inputs
    assert (listener["port"], listener["protocol"]) == (80, "HTTP")
    (tg,) = mocks.of_type("aws:lb/targetGroup:TargetGroup")
    check = tg.inputs["healthCheck"]
    assert (check["path"], check["matcher"], tg.inputs["port"]) == ("/health", "200", 8000)
    group = mocks.one(ASG).inputs
    assert group["targetGroupArns"] == [f"arn:aws:elasticloadbalancing:::targetgroup/{tg.name}"]
    assert group["healthCheckType"] == "ELB"
    launch = server_launch(_plan(workload))
    assert launch is not None and group["healthCheckGracePeriod"] == launch.grace_seconds
    # only /v1 paths (where the engine checks the API key) reach the servers; the rest get 404
    assert listener["defaultActions"][0]["fixedResponse"]["statusCode"] == "404"
    rule = mocks.one("aws:lb/listenerRule:ListenerRule").inputs
    assert rule["conditions"][0]["pathPattern"]["values"] == ["/v1/*"]
    # the machines admit the server port from the load balancer's group only (an inline rule)
    (into,) = next(r for r in mocks.of_type(SG) if r.name == "llama8b-lb-test-sg").inputs["ingress"]
    assert into["securityGroups"] == ["llama8b-lb-test-lb-sg-id"]
    assert (into["fromPort"], into["toPort"]) == (8000, 8000)
    assert not mocks.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert outputs["endpoint"] == "http://llama8b-lb-test-lb-1234.elb.amazonaws.com/v1"


def test_https_with_a_certificate() -> None:
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    serving = {**_workload("llama8b-lb")["serving"], "certificate_arn": arn}
    del serving["allow_plain_http"]
    workload = _workload("llama8b-lb", serving=serving)
    mocks, outputs = _run(workload)
    listener = mocks.one("aws:lb/listener:Listener").inputs
    assert (listener["port"], listener["protocol"], listener["certificateArn"]) == (443, "HTTPS", arn)
    assert listener["sslPolicy"].startswith("ELBSecurityPolicy-TLS13")
    assert outputs["endpoint"].startswith("https://")


GCP_LB_WORKLOAD = {
    "name": "llama13b-api",
    "task": "serve",
    "model": {"preset": "llama-2-13b", "hf": "meta-llama/Llama-2-13b-chat-hf"},
    "serving": {
        "context_tokens": 4096,
        "concurrency": 8,
        "tokens_per_s_per_stream": 25,
        "expose": "load_balancer",
        "allow_plain_http": True,
    },
    "access": {"api_cidrs": ["203.0.113.0/24"]},
    "duration": "72h",
    "placement": {"clouds": ["gcp"]},
}
"""A load-balanced GCP endpoint open to one documentation range."""


def test_gcp_load_balancer_behind_cloud_armor_and_autohealing() -> None:
    workload = GCP_LB_WORKLOAD
    mocks, outputs = _run(workload, **{"gcp:project": "my-project", "gpufit:hfToken": TOKEN})
    armor = mocks.one("gcp:compute/regionSecurityPolicy:RegionSecurityPolicy").inputs
    allow, deny = armor["rules"]
    assert allow["action"] == "allow" and allow["match"]["config"]["srcIpRanges"] == ["203.0.113.0/24"]
    assert deny["action"] == "deny(403)" and deny["match"]["config"]["srcIpRanges"] == ["*"]
    backend = mocks.one("gcp:compute/regionBackendService:RegionBackendService").inputs
    assert backend["loadBalancingScheme"] == "EXTERNAL_MANAGED" and backend["securityPolicy"].endswith(
        "armor-id"
    )
    mig = mocks.one("gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager").inputs
    assert mig["namedPorts"] == [{"name": "serve0", "port": 8000}]
    healing = mig["autoHealingPolicies"]
    checks = {
        r.name.rsplit("-", 1)[1]: r.inputs
        for r in mocks.of_type("gcp:compute/regionHealthCheck:RegionHealthCheck")
    }
    # the load balancer asks the engine; autohealing asks the machine's readiness responder
    assert checks["health"]["httpHealthCheck"] == {"port": 8000, "requestPath": "/health"}
    assert backend["healthChecks"].endswith("-health-id")
    assert checks["alive"]["httpHealthCheck"] == {"port": 9321, "requestPath": "/gpufit/alive"}
    assert healing["healthCheck"].endswith("-alive-id") and healing["initialDelaySec"] == 900
    alive_fw = next(
        r for r in mocks.of_type("gcp:compute/firewall:Firewall") if r.name.endswith("-alive")
    ).inputs
    assert alive_fw["sourceRanges"] == ["35.191.0.0/16", "130.211.0.0/22"]
    assert alive_fw["allows"] == [{"protocol": "tcp", "ports": ["9321"]}]
    serve_fw = next(
        r for r in mocks.of_type("gcp:compute/firewall:Firewall") if r.name.endswith("-serve")
    ).inputs
    assert set(serve_fw["sourceRanges"]) == {"35.191.0.0/16", "130.211.0.0/22", "10.129.0.0/23"}
    assert mocks.one("gcp:compute/forwardingRule:ForwardingRule").inputs["portRange"] == "80"
    script = mocks.one("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate").inputs["metadata"][
        "startup-script"
    ]
    assert TOKEN not in script and re.search(
        r"^API_KEY_REF=\S+-api-key$", file_named(script, "/gpufit-machine"), re.M
    )
    assert (
        mocks.one("gcp:compute/regionInstanceTemplate:RegionInstanceTemplate").inputs["metadata"][
            "shutdown-script"
        ]
        == "#!/bin/bash\nexec /usr/local/sbin/gpufit-machine shutdown\n"
    )
    readers = mocks.of_type("gcp:secretmanager/secretIamMember:SecretIamMember")
    assert {r.inputs["role"] for r in readers} == {"roles/secretmanager.secretAccessor"} and len(readers) == 2
    assert outputs["endpoint"] == "http://198.51.100.20/v1"


# ---------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"job": {"command": "my-server"}}, "serving.engine vllm starts the server; leave job.command out"),
        ({"access": {}}, "serving.expose load_balancer needs access.api_cidrs"),
        ({"access": {"api_cidrs": ["0.0.0.0/0"]}}, "set allow_api_from_anywhere to mean it"),
        (
            {"model": {"hf": "org/name"}},
            "cannot reach the Hugging Face Hub at http://127.0.0.1:9",
        ),
    ],
)
def test_serving_spec_problems_are_one_line_each(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_workload("llama8b-lb", **changes))
    assert any(problem in str(p) for p in caught.value.problems), caught.value.problems


def test_an_open_endpoint_needs_the_opt_in_and_is_marked_for_the_policy() -> None:
    workload = _workload("llama8b-lb", access={"api_cidrs": ["0.0.0.0/0"], "allow_api_from_anywhere": True})
    mocks, _ = _run(workload)
    lb_sg = next(r for r in mocks.of_type(SG) if r.name.endswith("lb-sg")).inputs
    assert lb_sg["tags"]["gpufit:open-endpoint"] == "true"


def test_multi_node_serving_is_refused_with_the_reason() -> None:
    workload = {
        "name": "big",
        "task": "serve",
        "model": {"preset": "llama-3.1-405b"},
        "serving": {"context_tokens": 8192, "concurrency": 8},
        "placement": {"clouds": ["aws"], "instance_types": ["p4d.*"]},
    }
    result = _plan(workload)
    # the plan itself keeps an engine replica on one node, saying why the offers fail
    assert result.choice is None and "on one node" in result.rejection_examples["vram"]
    with pytest.raises(pulumi.RunError, match="nothing feasible"):
        run_program({"gpufit:workload": workload}, NOW)
    # a replica spanning nodes that reaches server_launch anyway is refused there too
    own = _plan({**workload, "serving": {**workload["serving"], "engine": "none"}})
    assert own.choice is not None and own.choice.shape.nodes_per_replica > 1
    forced = replace(own, spec=_plan(workload).spec)
    with pytest.raises(ServingError, match="pipeline parallel"):
        server_launch(forced)


def test_plan_shows_the_server_and_warns_about_plain_http(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "stacks" / "Pulumi.llama8b-lb.yaml"), "--explain"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^Serve     vLLM 0\.34\.0 \(vllm/vllm-openai:v0\.34\.0, CUDA 13\.0\)", out, re.M)
    assert re.search(r"^          meta-llama/Llama-3\.1-8B-Instruct \(model\.hf\): TP 1", out, re.M)
    assert "over HTTP (WARNING: serving.allow_plain_http" in out
    assert "health grace period" in out


# ---------------------------------------------------------------------------------- policy


def test_policy_finds_secrets_in_boot_data_but_not_in_gpufits() -> None:
    mocks, _ = _run(_workload("llama8b-lb"), **{"gpufit:hfToken": TOKEN})
    config = PolicyConfig(now=NOW)
    for r in mocks.resources:
        assert check_no_secrets_in_boot_data(r.typ, r.inputs, config) == [], r.typ
    leaky = base64.b64encode(
        f"#!/bin/bash\nexport HF_TOKEN={TOKEN}\nvllm serve m --api-key s3cret\n".encode()
    ).decode()
    found = check_no_secrets_in_boot_data(LT, {"userData": leaky}, config)
    assert any("Hugging Face token" in f for f in found) and any("command line" in f for f in found)
    # inside a file the bootstrap embeds (gzip + base64) as well
    from machine.boot import Bundle, MachineFile, bootstrap

    embedded = bootstrap(Bundle((MachineFile("/etc/gpufit/job.sh", f"HF_TOKEN={TOKEN} python x.py\n"),)))
    assert TOKEN not in embedded
    found = check_no_secrets_in_boot_data("aws:ec2/instance:Instance", {"userData": embedded}, config)
    assert any("Hugging Face token" in f for f in found)
    assert check_endpoint_access("aws:lb/loadBalancer:LoadBalancer", {"internal": False}, config)
    open_rule = {
        "rules": [{"action": "allow", "priority": 1000, "match": {"config": {"srcIpRanges": ["*"]}}}]
    }
    assert check_endpoint_access("gcp:compute/regionSecurityPolicy:RegionSecurityPolicy", open_rule, config)
    chosen = {**open_rule, "description": "x (access.allow_api_from_anywhere)"}
    assert (
        check_endpoint_access("gcp:compute/regionSecurityPolicy:RegionSecurityPolicy", chosen, config) == []
    )


def test_an_sglang_endpoint_is_health_checked_on_its_generating_route() -> None:
    workload = _workload("llama8b-lb", serving={**_workload("llama8b-lb")["serving"], "engine": "sglang"})
    mocks, _ = _run(workload)
    groups = mocks.of_type("aws:lb/targetGroup:TargetGroup")
    assert groups and {g.inputs["healthCheck"]["path"] for g in groups} == {"/health_generate"}
    script = user_data(mocks)
    supervisor = file_named(script, "/gpufit-machine")
    assert "HEALTH_PATH=/health_generate" in supervisor and "VLLM_API_KEY" not in script
    assert "SGLANG_CONFIG=/run/gpufit/sglang.yaml" in supervisor
    config = PolicyConfig(now=NOW)
    assert all(check_no_secrets_in_boot_data(r.typ, r.inputs, config) == [] for r in mocks.resources)
    leaky = base64.b64encode(b'#!/bin/bash\necho "api-key: s3cret" > /etc/gpufit/sglang.yaml\n').decode()
    assert any("config file" in f for f in check_no_secrets_in_boot_data(LT, {"userData": leaky}, config))
