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


def size_line(url: str, size: int | None, received: int | None = None) -> str:
    """``<url>: 2,735,507 bytes (Content-Length), 2,735,507 received`` or ``<url>: no
    Content-Length (streamed), N received``: the size the server announced (compressed when
    gzip) beside the bytes actually read off the wire."""
    got = f", {received:,} received" if received is not None else ""
    return (
        f"{url}: {size:,} bytes (Content-Length){got}"
        if size is not None
        else f"{url}: no Content-Length (streamed){got}"
    )


class _Counted(io.RawIOBase):
    """A response body that counts the bytes read from it."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.count = raw, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


class PublicHttp:
    """GETs of public files, each retried with backoff on throttling, 5xx and connection
    errors (``cloudapi.retry``), counted in ``counter``. Each file's ``Content-Length`` is kept
    in ``sizes`` (by URL, the successful attempt's) with the bytes read in ``received``, and
    handed to ``log`` once per file when it has been read, so a refresh shows how much it
    downloads (the size of the public price files is otherwise unknown)."""

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
        self.received: dict[str, int] = {}

    @contextmanager
    def _response(self, url: str) -> Iterator[Any]:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"})
        self.counter.add()
        response = self._open(request, timeout=TIMEOUT_S)
        size = content_length(getattr(response, "headers", None))
        counted = _Counted(response)
        raw = io.BufferedReader(counted)
        try:
            if response.headers.get("Content-Encoding", "").lower() == "gzip":
                yield gzip.GzipFile(fileobj=raw)
            else:
                yield raw
            self.sizes[url], self.received[url] = size, counted.count
        finally:
            response.close()

    def read(self, url: str, consume: Callable[[Iterator[str]], Any]) -> Any:
        """``consume`` the file's decoded lines as they arrive; the whole GET and
        consumption are retried together when the transfer fails part way. The file's size is
        logged once, after it was read."""

        def attempt() -> Any:
            with self._response(url) as body:
                lines = io.TextIOWrapper(body, encoding="utf-8", newline="")
                return consume(iter(lines))

        try:
            result = call_with_retry(attempt, transient=_transient, policy=self._policy)
        except (urllib.error.URLError, http.client.HTTPException, OSError, EOFError, ValueError) as err:
            raise PublicDataError(f"{url}: {type(err).__name__}: {err}"[:300]) from None
        if self._log is not None:
            self._log(size_line(url, self.sizes.get(url), self.received.get(url)))
        return result

    def json(self, url: str) -> Any:
        """The file at ``url`` parsed as JSON."""
        return self.read(url, lambda lines: json.loads("".join(lines)))
