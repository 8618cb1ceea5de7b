"""GCP's half of ``gpufit status``: the stack bucket's ``status/`` objects, read through the
Cloud Storage JSON API (``objects.list`` with a prefix, then each object with ``alt=media``:
https://cloud.google.com/storage/docs/json_api/v1/objects/list,
https://cloud.google.com/storage/docs/json_api/v1/objects/get) with the application default
credentials. ``STORAGE_EMULATOR_HOST`` (the Cloud Storage clients' own variable) points it at
an emulator, anonymously."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from machine.status import PREFIX, StatusReadError

API = "https://storage.googleapis.com"
TIMEOUT_S = 30


def _session() -> tuple[Any, str]:
    import requests

    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        return requests.Session(), emulator.rstrip("/")
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_only"])
    except DefaultCredentialsError as err:
        raise StatusReadError(f"gcp: no credentials (gcloud auth application-default login): {err}") from None
    return AuthorizedSession(credentials), API  # type: ignore[no-untyped-call]


def read_objects(bucket: str) -> dict[str, str]:
    """Every object under ``status/``: name → text."""
    import requests

    session, base = _session()
    objects = f"{base}/storage/v1/b/{quote(bucket, safe='')}/o"
    found: dict[str, str] = {}
    token: str | None = None
    try:
        while True:
            params = {"prefix": PREFIX, "fields": "items(name),nextPageToken"}
            if token:
                params["pageToken"] = token
            listing = session.get(objects, params=params, timeout=TIMEOUT_S)
            _check(listing, bucket)
            page = listing.json()
            for item in page.get("items", []):
                name = item["name"]
                url = f"{objects}/{quote(name, safe='')}"
                media = session.get(url, params={"alt": "media"}, timeout=TIMEOUT_S)
                _check(media, bucket)
                found[name] = media.content.decode("utf-8", "replace")
            token = page.get("nextPageToken")
            if not token:
                return found
    except requests.RequestException as err:
        raise StatusReadError(f"gcp: gs://{bucket}: {err}") from None


def _check(answer: Any, bucket: str) -> None:
    if answer.status_code == 200:
        return
    try:
        message = answer.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = answer.text[:200]
    raise StatusReadError(f"gcp: gs://{bucket}: HTTP {answer.status_code}: {message}")
