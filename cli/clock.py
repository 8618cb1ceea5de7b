"""The date the commands read, once per command: today in UTC, or ``GPUFIT_TODAY``
(``YYYY-MM-DD``) to pin it, so that ages in the output are reproducible (the README's
examples, the tests)."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime

TODAY_ENV = "GPUFIT_TODAY"


def today() -> date:
    fixed = os.environ.get(TODAY_ENV, "").strip()
    if fixed:
        try:
            return date.fromisoformat(fixed)
        except ValueError:
            pass  # an unreadable pin is ignored: the real date is always a safe answer
    return datetime.now(UTC).date()


def now() -> datetime:
    """The current time, on the pinned date when ``GPUFIT_TODAY`` is set."""
    current = datetime.now(UTC)
    day = today()
    return current if day == current.date() else datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
