"""Everything of a resource a secret could hide in, decoded (issue 22, item 4): the boot data
(``policy.resources.boot_data``), and beyond it what the old scan missed: user data given as
base64 (``userDataBase64``) or gzip, every GCP metadata key (not only ``startup-script``), and
tag and label values of any resource, which anyone who may describe it reads. Base64 and gzip
found inside are opened too, a few layers deep (cloud-init accepts gzip user data and MIME parts
in base64: https://cloudinit.readthedocs.io/en/latest/explanation/format.html)."""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import re
from collections.abc import Mapping
from typing import Any

from policy.resources import as_map, as_seq, boot_data

BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")
"""A run of base64 long enough to hold a token (an ``hf_`` token is 37 characters)."""
MAX_DEPTH = 3
MAX_BYTES = 4 << 20
"""Decode no more than this (a gzip bomb stops here): user data is at most 16 KB on EC2, 256 KB a
metadata value on GCP."""


def _decoded(blob: str) -> str | None:
    try:
        raw = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return _opened(raw)


def _opened(raw: bytes) -> str | None:
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
                raw = f.read(MAX_BYTES)
        except (OSError, EOFError):
            return None
    text = raw.decode("utf-8", "replace")
    printable = sum(c.isprintable() or c in "\n\r\t" for c in text)
    return text if text and printable >= 0.9 * len(text) else None


def unwrapped(text: str, depth: int = 0) -> list[str]:
    """``text`` and whatever base64 / gzip inside it decodes to, recursively."""
    found = [text]
    if depth >= MAX_DEPTH:
        return found
    for blob in BASE64_RUN.findall(text[:MAX_BYTES]):
        inner = _decoded(blob)
        if inner is not None and inner != text:
            found += unwrapped(inner, depth + 1)
    return found


def _labels(props: Mapping[str, Any]) -> list[str]:
    values: list[str] = []
    for key in ("tags", "tagsAll", "labels", "userLabels"):
        tags = props.get(key)
        if isinstance(tags, Mapping):
            values += [f"{k}={v}" for k, v in tags.items()]
        else:  # an Auto Scaling group's [{key, value, ...}]
            values += [f"{as_map(t).get('key')}={as_map(t).get('value')}" for t in as_seq(tags)]
    for spec in as_seq(props.get("tagSpecifications")):
        values += [f"{k}={v}" for k, v in as_map(as_map(spec).get("tags")).items()]
    return values


def secret_bearing_texts(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every text of the resource a secret could be read from, decoded."""
    texts = [boot_data(resource_type, props), str(props.get("userData") or "")]
    if props.get("userDataBase64"):
        texts.append(_decoded(str(props["userDataBase64"])) or str(props["userDataBase64"]))
    texts += [str(v) for v in as_map(props.get("metadata")).values()]
    texts += _labels(props)
    return [t for text in texts if text for t in unwrapped(text)]
