"""Retrying cloud API calls: exponential backoff with jitter on throttling and transient
errors, bounded in attempts and total time; never on authentication or permission errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one call. Defaults: 5 attempts within 60 s, waits of ~0.5, 1, 2, 4 s
    (doubling, with up to 0.5 s of jitter, capped at 8 s)."""

    max_attempts: int = 5
    max_seconds: float = 60.0
    initial_wait: float = 0.5
    max_wait: float = 8.0
    jitter: float = 0.5
    sleep: Callable[[float], None] = time.sleep


def call_with_retry(
    fn: Callable[[], T],
    *,
    transient: Callable[[BaseException], bool],
    policy: RetryPolicy,
    on_retry: Callable[[BaseException, int], None] | None = None,
) -> T:
    """Run ``fn``; retry it while it raises an error ``transient`` accepts, within ``policy``.
    Other errors (authentication, permission, bad request) propagate at once."""

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None and state.outcome is not None:
            error = state.outcome.exception()
            if error is not None:
                on_retry(error, state.attempt_number)

    retrying = Retrying(
        retry=retry_if_exception(transient),
        stop=stop_after_attempt(policy.max_attempts) | stop_after_delay(policy.max_seconds),
        wait=wait_exponential_jitter(
            multiplier=policy.initial_wait, max=policy.max_wait, jitter=policy.jitter
        ),
        sleep=policy.sleep,
        reraise=True,
        before_sleep=before_sleep,
    )
    return retrying(fn)
