"""scripts/preview_config.py: a pull request's preview gets the stack's config without the
production secrets provider and without any encrypted value, and the paths to set again as
placeholder secrets (plan.yml runs it before `pulumi stack init --secrets-provider passphrase`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scripts.preview_config import main, placeholder_config

STACK = """\
secretsprovider: awskms://alias/gpufit-state?region=us-east-1
encryptedkey: AQICAHh...
config:
  gpufit:workload:
    name: chat
    task: serve
  gpufit:apiKey:
    secure: v1:AAAA:apikeyciphertext
  gpufit:hfToken:
    secure: v1:BBBB:hftokenciphertext
  gpufit:secrets:
    wandb: {secure: "v1:CCCC:wandb"}
    "odd.key": {secure: "v1:DDDD:odd"}
    plain: visible
  gpufit:list:
    - {secure: "v1:EEEE:listed"}
    - kept
  aws:region: us-east-1
"""


def test_every_encrypted_value_and_the_provider_are_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "Pulumi.chat.yaml"
    path.write_text(STACK, encoding="utf-8")
    assert main([str(path)]) == 0
    out = path.read_text(encoding="utf-8")
    for gone in ("secure", "v1:", "ciphertext", "awskms", "encryptedkey", "secretsprovider"):
        assert gone not in out, gone
    doc = yaml.safe_load(out)
    assert doc["config"]["gpufit:workload"] == {"name": "chat", "task": "serve"}
    assert doc["config"]["gpufit:secrets"] == {"plain": "visible"}
    assert doc["config"]["gpufit:list"] == [None, "kept"]
    assert doc["config"]["aws:region"] == "us-east-1"
    printed = capsys.readouterr().out.split()
    assert printed == [
        "gpufit:apiKey",
        "gpufit:hfToken",
        "gpufit:secrets.wandb",
        'gpufit:secrets["odd.key"]',
        "gpufit:list[0]",
    ]


def test_a_stack_without_secrets_keeps_its_config() -> None:
    doc = {"encryptionsalt": "v1:salt", "config": {"gpufit:workload": {"name": "x"}}}
    cleaned, paths = placeholder_config(doc)
    assert cleaned == {"config": {"gpufit:workload": {"name": "x"}}} and paths == []


def test_the_repositorys_stacks_pass_through() -> None:
    from tests.conftest import ROOT

    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        cleaned, _ = placeholder_config(doc)
        if "secure:" not in path.read_text(encoding="utf-8"):
            assert cleaned["config"] == doc["config"], path.name
