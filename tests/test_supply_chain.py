"""What gpufit installs is pinned by content, not by name (issue 22 item 6): the Makefile's uv
bootstrap and the policy pack's requirements carry a sha256 for every file and are installed in
hash-checking mode; engine images run by digest once one is recorded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})\b")


def pinned(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, its sha256 set) of a pip requirements file; ValueError for a line that
    names a package without `==` or without a hash."""
    out: dict[str, tuple[str, set[str]]] = {}
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = REQUIREMENT.match(line)
        if not match:
            raise ValueError(f"not pinned with ==: {line[:60]!r}")
        hashes = set(HASH.findall(line))
        if not hashes:
            raise ValueError(f"{match.group(1)}: no --hash")
        out[match.group(1).lower()] = (match.group(2), hashes)
    return out


def test_the_parser_refuses_what_hash_checking_mode_refuses() -> None:
    with pytest.raises(ValueError, match="no --hash"):
        pinned("pulumi==3.272.0\n")
    with pytest.raises(ValueError, match="not pinned"):
        pinned("pulumi>=3 --hash=sha256:" + "0" * 64 + "\n")
    assert pinned("a==1 \\\n    --hash=sha256:" + "a" * 64 + "\n") == {"a": ("1", {"a" * 64})}


def test_the_makefile_installs_uv_hash_checked() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^\.tools/bin/uv:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "the Makefile's uv bootstrap rule"
    install = next(line for line in recipe.group(1).splitlines() if "pip install" in line)
    for flag in ("--require-hashes", "--only-binary :all:", "--requirement scripts/uv-requirements.txt"):
        assert flag in install, flag
    assert not re.search(r"pip install[^\n]*\buv==", makefile), "uv by name only"
    uv = pinned((ROOT / "scripts" / "uv-requirements.txt").read_text(encoding="utf-8"))
    assert set(uv) == {"uv"}
    version, hashes = uv["uv"]
    assert version == "0.13.9" and len(hashes) == 19, "every file PyPI serves for uv 0.13.9"
    # uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl, as PyPI's simple index
    # (https://pypi.org/simple/uv/) and `pip hash` of the downloaded wheel gave it on 2026-12-04.
    assert "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19" in hashes


def test_the_policy_pack_requirements_pin_every_package_by_hash() -> None:
    policy = ROOT / "policy"
    locked = pinned((policy / "requirements.txt").read_text(encoding="utf-8"))
    wanted = pinned_names(policy / "requirements.in")
    for name, version in wanted.items():
        assert locked.get(name, ("", set()))[0] == version, f"{name}=={version} not in requirements.txt"
    # The whole closure is there: pip's hash-checking mode refuses an unpinned dependency.
    assert {"protobuf", "grpcio", "pyyaml", "pulumi", "pulumi-policy"} <= set(locked)


def pinned_names(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = REQUIREMENT.match(line.strip())
        if match:
            out[match.group(1).lower()] = match.group(2)
    return out
