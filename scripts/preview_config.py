"""Make a stack's config previewable by a pull request without any production secret.

A pull request's `pulumi preview` runs the pull request's own program, so whatever it can
decrypt it can print. Pulumi's "Stack Read" includes `stack:decrypt` ("Decrypt sensitive stack
data. This allows viewing encrypted configuration values and secrets",
https://www.pulumi.com/docs/administration/access-identity/rbac/scopes/stacks/), and a
self-managed backend decrypts with the secrets provider's KMS key. So the preview gets neither:
it runs against a throwaway local backend with a one-off passphrase, and this rewrites
`stacks/Pulumi.<stack>.yaml` in the runner's checkout for it:

- drops the production secrets provider (`secretsprovider`, `encryptedkey`, `encryptionsalt`,
  https://www.pulumi.com/docs/iac/concepts/secrets/#configuring-secrets-encryption), so that
  `pulumi stack init --secrets-provider passphrase` writes its own;
- removes every encrypted value (`{secure: v1:...}`, at any depth: `--path` secrets) and prints
  its `pulumi config set --path` path, one a line, for the workflow to set again as a secret
  holding a random placeholder (`Pulumi.yaml` declares apiKey and hfToken `secret: true`, so a
  plain value would be refused).

Usage: python scripts/preview_config.py stacks/Pulumi.<stack>.yaml  (rewrites it in place)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

PROVIDER_KEYS = ("secretsprovider", "encryptedkey", "encryptionsalt")
SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def path_of(top: str, steps: list[str | int]) -> str:
    """Pulumi's `--path` syntax: `ns:key.sub`, `ns:key[0]`, `ns:key["odd.key"]`
    (https://www.pulumi.com/docs/iac/concepts/config/#structured-configuration)."""
    out = top
    for step in steps:
        if isinstance(step, int):
            out += f"[{step}]"
        elif SIMPLE_KEY.fullmatch(step):
            out += f".{step}"
        else:
            out += "[" + '"' + step.replace("\\", "\\\\").replace('"', '\\"') + '"' + "]"
    return out


def strip_secrets(value: Any, top: str, steps: list[str | int], found: list[str]) -> Any:
    """``value`` without its encrypted leaves (removed from mappings, None in lists, so that
    list indexes stay), each leaf's path appended to ``found``."""
    if is_secure(value):
        found.append(path_of(top, steps))
        return None
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            cleaned = strip_secrets(item, top, [*steps, str(key)], found)
            if cleaned is not None or not is_secure(item):
                kept[key] = cleaned
        return kept
    if isinstance(value, list):
        return [strip_secrets(item, top, [*steps, i], found) for i, item in enumerate(value)]
    return value


def placeholder_config(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The stack file without its secrets provider and encrypted values, and the paths of those
    values."""
    found: list[str] = []
    config = {
        key: strip_secrets(value, str(key), [], found) for key, value in (doc.get("config") or {}).items()
    }
    cleaned = {k: v for k, v in doc.items() if k not in PROVIDER_KEYS and k != "config"}
    cleaned["config"] = {k: v for k, v in config.items() if v is not None or not is_secure(doc["config"][k])}
    return cleaned, found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: preview_config.py stacks/Pulumi.<stack>.yaml", file=sys.stderr)
        return 2
    path = Path(argv[0])
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    cleaned, paths = placeholder_config(doc)
    path.write_text(yaml.safe_dump(cleaned, sort_keys=False), encoding="utf-8")
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
