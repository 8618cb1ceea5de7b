"""Public HTTP data files (no credentials): GET with retries, streamed line by line or read as
JSON. The AWS Price List bulk files run to hundreds of megabytes per region, so they are never
held whole: a caller reads lines as they arrive and keeps what it filters."""

from __future__ import annotations

import gzip
import http.client
import io
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit

from cloudapi.calls import CallCounter
from cloudapi.retry import RetryPolicy, call_with_retry

USER_AGENT = "gpufit-catalog-refresh"
TIMEOUT_S = 60.0


class PublicDataError(Exception):
    """A public data file that could not be had (after retries) or read."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, what: str) -> str:
    """``url`` when it is https (or plain http to a loopback host, as local fakes serve), else
    ValueError naming ``what``."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return url
    raise ValueError(f"{what} {url!r}: expected https:// (plain http only on loopback)")


def _transient(error: BaseException) -> bool:
    if isinstance(error, urllib.error.HTTPError):
        return error.code == 429 or error.code >= 500
    return isinstance(
        error,
        urllib.error.URLError
        | http.client.HTTPException
        | TimeoutError
        | ConnectionError
        | OSError
        | EOFError,
    )


def content_length(headers: Any) -> int | None:
    """The response's ``Content-Length`` in bytes (as sent: compressed when the body is gzip),
    None when the server streams without one or sends a malformed one (RFC 9110 §8.6)."""
    raw = headers.get("Content-Length") if headers is not None else None
    try:
        size = int(str(raw).strip()) if raw is not None else None
    except ValueError:
        return None
    return size if size is not None and size >= 0 else None


def size_line(url: str, size: int | None) -> str:
    """``<url>: 2,735,507 bytes (Content-Length)`` or ``<url>: no Content-Length (streamed)``."""
    return (
        f"{url}: {size:,} bytes (Content-Length)"
        if size is not None
        else f"{url}: no Content-Length (streamed)"
    )


class PublicHttp:
    """GETs of public files, each retried with backoff on throttling, 5xx and connection
    errors (``cloudapi.retry``), counted in ``counter``. Each file's ``Content-Length`` is kept
    in ``sizes`` (by URL, the last attempt's) and handed to ``log`` as it arrives, so a refresh
    measures what it downloads (the size of the public price files is otherwise unknown)."""

    def __init__(
        self,
        counter: CallCounter | None = None,
        policy: RetryPolicy | None = None,
        opener: Callable[..., Any] = urllib.request.urlopen,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.counter = counter or CallCounter()
        self._policy = policy or RetryPolicy()
        self._open = opener
        self._log = log
        self.sizes: dict[str, int | None] = {}

    @contextmanager
    def _response(self, url: str) -> Iterator[Any]:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"})
        self.counter.add()
        response = self._open(request, timeout=TIMEOUT_S)
        size = content_length(getattr(response, "headers", None))
        self.sizes[url] = size
        if self._log is not None:
            self._log(size_line(url, size))
        try:
            if response.headers.get("Content-Encoding", "").lower() == "gzip":
                yield gzip.GzipFile(fileobj=response)
            else:
                yield response
        finally:
            response.close()

    def read(self, url: str, consume: Callable[[Iterator[str]], Any]) -> Any:
        """``consume`` the file's decoded lines as they arrive; the whole GET and
        consumption are retried together when the transfer fails part way."""

        def attempt() -> Any:
            with self._response(url) as body:
                lines = io.TextIOWrapper(body, encoding="utf-8", newline="")
                return consume(iter(lines))

        try:
            return call_with_retry(attempt, transient=_transient, policy=self._policy)
        except (urllib.error.URLError, http.client.HTTPException, OSError, EOFError, ValueError) as err:
            raise PublicDataError(f"{url}: {type(err).__name__}: {err}"[:300]) from None

    def json(self, url: str) -> Any:
        """The file at ``url`` parsed as JSON."""
        return self.read(url, lambda lines: json.loads("".join(lines)))
