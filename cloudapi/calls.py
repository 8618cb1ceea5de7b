"""What every cloud call reports, whichever cloud and caller (catalog refresh, sweep):
``AuthError`` when retrying cannot help, and a thread-safe ``CallCounter``."""

from __future__ import annotations

import threading


class AuthError(Exception):
    """Credentials are missing or lack a permission: retrying cannot help."""


class CallCounter:
    """Counts API calls across threads (for the report and the benchmark)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.count += n
