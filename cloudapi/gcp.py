"""Calling Google Cloud APIs, shared by the catalog refresh and the sweeper: endpoints (plain http
only on loopback), one-line errors, which errors deserve another try, the server's
Retry-After, ``AuthError`` naming the missing permission, and the credentials (anonymous on a
loopback emulator, else the application default credentials)."""

from __future__ import annotations

import ipaddress
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from cloudapi.calls import AuthError

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

COMPUTE_ENDPOINT_ENV = "GPUFIT_GCP_COMPUTE_ENDPOINT"
BILLING_ENDPOINT_ENV = "GPUFIT_GCP_BILLING_ENDPOINT"
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"

GCP_REGION = re.compile(r"[a-z]+(?:-[a-z]+)+[0-9]+")  # fullmatch
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


# ---------------------------------------------------------------------------------- endpoints


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(endpoint: str | None, what: str) -> tuple[str | None, bool]:
    """``(endpoint, loopback)``; plain http only for a loopback host, else ``ValueError``."""
    if not endpoint:
        return None, False
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"GCP {what} endpoint {endpoint!r}: expected https://HOST[:PORT] (or http:// on loopback)"
        )
    loopback = is_loopback(parts.hostname)
    if parts.scheme == "http" and not loopback:
        raise ValueError(
            f"GCP {what} endpoint {endpoint!r}: plain http is allowed only for loopback hosts "
            "(127.0.0.0/8, ::1, localhost); use https://"
        )
    return endpoint, loopback


# ---------------------------------------------------------------------------------- errors


def describe_error(error: BaseException) -> str:
    """One line: HTTP status, class and the server's message."""
    from google.api_core.exceptions import GoogleAPICallError

    if isinstance(error, GoogleAPICallError):
        text = f"{error.code} {type(error).__name__}: {error.message}"
    else:
        text = f"{type(error).__name__}: {error}"
    return " ".join(text.split())[:240]


def is_transient(error: BaseException) -> bool:
    """429, 5xx (not 501) and transport trouble deserve another try; nothing else does."""
    import requests
    from google.api_core.exceptions import DeadlineExceeded, GoogleAPICallError, ServiceUnavailable
    from google.auth.exceptions import TransportError

    if isinstance(error, DeadlineExceeded | ServiceUnavailable):
        return True
    if isinstance(error, GoogleAPICallError):
        code = error.code
        return isinstance(code, int) and (code in _TRANSIENT_STATUS or (code >= 500 and code != 501))
    return isinstance(
        error,
        requests.ConnectionError
        | requests.Timeout
        | requests.exceptions.ChunkedEncodingError
        | TransportError,
    )


def retry_after_seconds(error: BaseException) -> float | None:
    """The server's Retry-After (seconds form) on a 429/503, if it sent one."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Api:
    """One API method: how it is named in messages and the IAM permission it needs."""

    name: str
    permission: str
    grant: str


def auth_error(error: BaseException, api: Api, project: str) -> AuthError | None:
    """An ``AuthError`` for 401/403 and credential failures; None for anything else."""
    from google.api_core.exceptions import Forbidden, Unauthorized
    from google.auth.exceptions import DefaultCredentialsError, RefreshError

    said = describe_error(error)
    if isinstance(error, Forbidden):
        return AuthError(
            f"gcp: permission denied for {api.name} in project {project}: needs {api.permission} "
            f"({api.grant}); {said}"
        )
    if isinstance(error, Unauthorized | RefreshError | DefaultCredentialsError):
        return AuthError(
            f"gcp: credentials rejected calling {api.name} ({api.permission}): run "
            f"`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS; {said}"
        )
    return None


class CredentialSource:
    """Anonymous credentials against a loopback endpoint (as Google's emulators use), else the
    application default credentials, resolved once and shared across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._default: Credentials | None = None

    def get(self, loopback: bool) -> Credentials:
        if loopback:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()  # type: ignore[no-untyped-call]
        with self._lock:
            if self._default is None:
                import google.auth
                from google.auth.exceptions import DefaultCredentialsError

                try:
                    creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
                except DefaultCredentialsError as error:
                    raise AuthError(
                        "gcp: no credentials found: run `gcloud auth application-default login` "
                        f"or set GOOGLE_APPLICATION_CREDENTIALS ({describe_error(error)})"
                    ) from None
                self._default = creds
            return self._default
