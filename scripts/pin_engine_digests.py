"""Record the registry digest of every pinned engine build in ``selector/data/engines.yaml``.

A tag can be moved; a digest cannot. On a machine that reaches Docker Hub:

    uv run python scripts/pin_engine_digests.py            # fill in every digest: null
    uv run python scripts/pin_engine_digests.py --check    # exit 1 when a recorded digest moved

For each build it asks the registry (Docker Registry HTTP API V2, the distribution spec's
``HEAD /v2/<name>/manifests/<reference>``; an anonymous pull token from Docker Hub's token
service first) for the digest of the tag's manifest list (or manifest), the
``Docker-Content-Digest`` header, and writes it beside the tag, in place, keeping the file's
comments. gpufit then launches ``tag@digest``. Only the standard library is used.
https://distribution.github.io/distribution/spec/api/ ,
https://docs.docker.com/docker-hub/api/latest/ (token: auth.docker.io/token).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path

ENGINES = Path(__file__).resolve().parent.parent / "selector" / "data" / "engines.yaml"
REGISTRY = "https://registry-1.docker.io"
AUTH = "https://auth.docker.io/token"
ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_LINE = re.compile(r'^(\s*)- tag: "([^"]+)"\s*$')


def resolve(tag: str, registry: str = REGISTRY, auth: str = AUTH, timeout: float = 30) -> str:
    """The digest ``repository:tag`` resolves to now; ValueError when the answer is not one."""
    repository, _, reference = tag.rpartition(":")
    scope = f"repository:{repository}:pull"
    query = urllib.parse.urlencode({"service": "registry.docker.io", "scope": scope})
    with urllib.request.urlopen(f"{auth}?{query}", timeout=timeout) as answer:
        token = json.load(answer)["token"]
    request = urllib.request.Request(
        f"{registry}/v2/{repository}/manifests/{reference}",
        method="HEAD",
        headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT},
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        digest = str(answer.headers.get("Docker-Content-Digest", ""))
    if not _DIGEST.match(digest):
        raise ValueError(f"{tag}: the registry answered no sha256 digest ({digest!r})")
    return digest


def pin(text: str, digests: dict[str, str]) -> str:
    """``text`` (engines.yaml) with each tag's ``digest:`` line set, its ``digest_note`` gone."""
    out: list[str] = []
    current: str | None = None
    for line in text.splitlines(keepends=True):
        match = _TAG_LINE.match(line)
        if match:
            current = match.group(2)
        elif current in digests and line.strip().startswith("digest:"):
            indent = line[: len(line) - len(line.lstrip())]
            line = f'{indent}digest: "{digests[current]}"\n'
        elif current in digests and line.strip().startswith("digest_note:"):
            continue
        out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, default=ENGINES)
    ap.add_argument("--registry", default=REGISTRY)
    ap.add_argument("--auth", default=AUTH)
    ap.add_argument("--check", action="store_true", help="compare recorded digests, change nothing")
    opts = ap.parse_args(argv)
    text = opts.file.read_text(encoding="utf-8")
    recorded: dict[str, str | None] = {}
    current = None
    for line in text.splitlines():
        match = _TAG_LINE.match(line)
        if match:
            current = match.group(2)
            recorded[current] = None
        elif current and line.strip().startswith("digest:"):
            value = line.split(":", 1)[1].strip().strip('"')
            recorded[current] = None if value == "null" else value
    found = {tag: resolve(tag, opts.registry, opts.auth) for tag in recorded}
    moved = [t for t, d in recorded.items() if d is not None and d != found[t]]
    for tag in moved:
        print(f"{tag}: recorded {recorded[tag]}, the registry now says {found[tag]}")
    if opts.check:
        return 1 if moved else 0
    new = {t: d for t, d in found.items() if recorded[t] is None}
    opts.file.write_text(pin(text, new), encoding="utf-8")
    for tag, digest in new.items():
        print(f"{tag}@{digest}")
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
