"""Read a rendered bootstrap back into the files it writes (for tests that look at what the
components put in user data or a startup-script)."""

from __future__ import annotations

import base64
import gzip
import re

FILE = re.compile(r"^printf '%s' '([A-Za-z0-9+/=]+)' \| base64 -d \| gunzip > (\S+)\.new$", re.M)


def machine_files(bootstrap: str) -> dict[str, str]:
    """Each file the bootstrap writes: path → content."""
    return {path: gzip.decompress(base64.b64decode(blob)).decode() for blob, path in FILE.findall(bootstrap)}


def file_named(bootstrap: str, suffix: str) -> str:
    """The one file whose path ends with ``suffix``."""
    (found,) = [text for path, text in machine_files(bootstrap).items() if path.endswith(suffix)]
    return found


def settings(bootstrap: str) -> dict[str, str | list[str]]:
    """The supervisor's settings (``NAME=value`` lines before its fixed body), unquoted."""
    import shlex

    text = file_named(bootstrap, "/gpufit-machine").split("# --- gpufit machine supervisor")[0]
    found: dict[str, str | list[str]] = {}
    for line in text.splitlines():
        name, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[A-Z_]+", name):
            continue
        found[name] = (
            shlex.split(value[1:-1]) if value.startswith("(") else shlex.split(value)[0] if value else ""
        )
    return found
