"""Calling AWS: one botocore client per service and region, every call retried by tenacity
alone (botocore's own retries off), counted, and permission errors turned into ``AuthError``
naming the missing permission. Shared by the catalog refresh and the sweeper."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from cloudapi.calls import AuthError, CallCounter
from cloudapi.pacing import TokenBucket
from cloudapi.retry import RetryPolicy, call_with_retry

NO_CREDENTIALS = "aws: no credentials found (set AWS_PROFILE, or run `aws configure`)"
PRICING_REGION = "us-east-1"
"""The Price List API is served from us-east-1 (also ap-south-1, eu-central-1)."""
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "Unavailable",
        "InternalError",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)
AUTH_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
        "OptInRequired",
    }
)


def is_transient(error: BaseException) -> bool:
    """Throttling, 5xx and connection trouble are worth another try; nothing else is."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return code in TRANSIENT_CODES or status >= 500
    return isinstance(
        error, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionClosedError
    )


def auth_error(error: BaseException, service: str, operation: str) -> AuthError | None:
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return AuthError(NO_CREDENTIALS)
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in AUTH_CODES:
            return AuthError(f"aws: {code}: the credentials lack permission {service}:{operation}")
    return None


class AwsApi:
    """Clients made once per (service, region) and shared across threads: building a boto3
    client costs far more CPU than a call, and clients (unlike sessions) are thread-safe."""

    def __init__(
        self,
        session: Any,
        counter: CallCounter,
        policy: RetryPolicy,
        max_pool: int = 32,
        validate_parameters: bool = True,
        quotas: Mapping[tuple[str, str], TokenBucket] | None = None,
    ) -> None:
        """``validate_parameters=False`` skips botocore's client-side check of each call's
        arguments (``Config(parameter_validation=False)``): for callers whose few calls have
        fixed shapes, exercised by the tests, where the check is only CPU. ``quotas`` paces
        each attempt of a (service, operation) to its published request quota."""
        self._session = session
        self._counter = counter
        self._policy = policy
        self._max_pool = max_pool
        self._validate = validate_parameters
        self._quotas = dict(quotas or {})
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def resolve_credentials(self) -> None:
        """Resolve the session's credentials once, before clients are built from several
        threads; missing credentials raise ``AuthError``, a failing provider its own error."""
        with self._lock:
            credentials = self._session.get_credentials()
            if credentials is None:
                raise AuthError(NO_CREDENTIALS)
            credentials.get_frozen_credentials()

    def client(self, service: str, region: str) -> Any:
        """The shared client for ``service`` in ``region``, built on first use. Building goes
        through the session, which is not thread-safe, so one thread builds at a time; a
        thread whose client exists takes it without waiting for that lock."""
        key = (service, region)
        client = self._clients.get(key)
        if client is not None:
            return client
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                from botocore.config import Config

                config = Config(
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=30,
                    max_pool_connections=self._max_pool,
                    parameter_validation=self._validate,
                )
                client = self._clients[key] = self._session.client(service, region_name=region, config=config)
            return client

    def call(self, service: str, operation: str, fn: Callable[[], Any]) -> Any:
        """``fn`` retried on throttling and transient errors; AuthError on permission errors."""

        quota = self._quotas.get((service, operation))

        def attempt() -> Any:
            if quota is not None:
                quota.acquire()
            self._counter.add()
            return fn()

        try:
            return call_with_retry(attempt, transient=is_transient, policy=self._policy)
        except Exception as error:
            auth = auth_error(error, service, operation)
            if auth is not None:
                raise auth from None
            raise

    def pages(self, client: Any, service: str, operation: str, method: str, **kwargs: Any) -> Iterator[Any]:
        """Each page is its own retried call, so a throttled page does not restart the listing."""
        token: str | None = None
        while True:
            args = dict(kwargs)
            if token:
                args["NextToken"] = token
            page = self.call(service, operation, functools.partial(getattr(client, method), **args))
            yield page
            token = page.get("NextToken")
            if not token:
                return
