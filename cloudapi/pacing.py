"""Pace calls to an API's published request quota, so a burst of concurrent calls waits its
turn instead of being throttled and backing off."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """The token-bucket quota AWS documents for its APIs: up to ``capacity`` calls at once,
    refilled at ``per_second``. ``acquire`` takes one token, sleeping until one is free.
    Thread-safe; the clock and sleep are injectable for tests."""

    def __init__(
        self,
        capacity: float,
        per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if capacity < 1 or per_second <= 0:
            raise ValueError("a token bucket needs capacity >= 1 and a positive refill rate")
        self.capacity = capacity
        self.per_second = per_second
        self._clock = clock
        self._sleep = sleep
        self._tokens = capacity
        self._stamp = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take a token; returns the seconds waited for it."""
        with self._lock:  # callers queue here: each reserves its token, then waits for it
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.per_second)
            self._stamp = now
            self._tokens -= 1
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.per_second
        if wait > 0:
            self._sleep(wait)
        return wait
