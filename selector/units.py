"""Parse quantities the way people write them in a spec: ``200GB``, ``1.5TiB``, ``30m``, ``2e9``.

Sizes become decimal gigabytes (the unit cloud storage and egress are priced in), durations
become hours, counts become floats. Every parser raises ``ValueError`` with a sentence that
says what was expected; the spec loader turns it into a one-line error naming the field.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?"

_SIZE_FACTORS_GB: dict[str, float] = {
    "b": 1e-9,
    "kb": 1e-6,
    "mb": 1e-3,
    "gb": 1.0,
    "tb": 1e3,
    "pb": 1e6,
    "kib": 1024 / 1e9,
    "mib": 1024**2 / 1e9,
    "gib": 1024**3 / 1e9,
    "tib": 1024**4 / 1e9,
    "pib": 1024**5 / 1e9,
}

_DURATION_FACTORS_H: dict[str, float] = {
    "s": 1 / 3600,
    "sec": 1 / 3600,
    "m": 1 / 60,
    "min": 1 / 60,
    "h": 1.0,
    "hr": 1.0,
    "d": 24.0,
    "w": 168.0,
}

_COUNT_FACTORS: dict[str, float] = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}

_SIZE_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zA-Z]*)\s*$")
_DURATION_PART_RE = re.compile(rf"({_NUMBER})\s*([a-zA-Z]+)")
_COUNT_RE = re.compile(rf"^\s*({_NUMBER})\s*([kKmMbBtT]?)\s*$")

SIZE_PATTERN = rf"^\s*{_NUMBER}\s*([kKmMgGtTpP]i?[bB]|[bB])?\s*$"
DURATION_PATTERN = rf"^(\s*{_NUMBER}\s*(s|sec|m|min|h|hr|d|w)\s*)+$"
COUNT_PATTERN = rf"^\s*{_NUMBER}\s*[kKmMbBtT]?\s*$"


def _finite_non_negative(value: float, what: str) -> float:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"expected a finite {what}")
    if value < 0:
        raise ValueError(f"expected a non-negative {what}")
    return value


def parse_size_gb(value: object) -> float:
    """A size in decimal GB. Plain numbers are GB; strings take B, KB…PB or KiB…PiB."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 200GB or 1.5TiB")
    if isinstance(value, int | float):
        return _finite_non_negative(float(value), "size")
    if not isinstance(value, str):
        raise ValueError("expected a size such as 200GB or 1.5TiB")
    match = _SIZE_RE.match(value)
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in _SIZE_FACTORS_GB):
        raise ValueError(f"could not read {value!r} as a size; expected e.g. 200GB, 1.5TiB, 512MB")
    factor = _SIZE_FACTORS_GB[unit] if unit else 1.0
    return _finite_non_negative(float(match.group(1)) * factor, "size")


def parse_duration_hours(value: object) -> float:
    """A duration in hours from ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or ``1h30m``.

    Bare numbers are refused: ``720`` could be seconds, minutes or hours.
    """
    if isinstance(value, str) and value.strip():
        text = value.strip().lower()
        parts = _DURATION_PART_RE.findall(text)
        rebuilt = "".join(f"{n}{u}" for n, u in parts)
        if parts and rebuilt == re.sub(r"\s+", "", text):
            total = 0.0
            for number, unit in parts:
                if unit not in _DURATION_FACTORS_H:
                    break
                total += float(number) * _DURATION_FACTORS_H[unit]
            else:
                return _finite_non_negative(total, "duration")
    raise ValueError(
        f"could not read {value!r} as a duration; expected a number with a unit, e.g. 90s, 30m, 12h, 7d"
    )


def parse_count(value: object) -> float:
    """A count such as ``2e9``, ``5e7``, ``50M``, ``1.5B`` or a plain number."""
    if isinstance(value, bool):
        raise ValueError("expected a number such as 5e7 or 50M")
    if isinstance(value, int | float):
        return _finite_non_negative(float(value), "number")
    if isinstance(value, str):
        match = _COUNT_RE.match(value)
        if match:
            factor = _COUNT_FACTORS[match.group(2).lower()]
            return _finite_non_negative(float(match.group(1)) * factor, "number")
    raise ValueError(f"could not read {value!r} as a number; expected e.g. 5e7, 50M, 2B")


def format_hours(hours: float) -> str:
    """Hours as a person reads them: ``45 s``, ``12.5 min``, ``3.2 h``, ``4.1 d``."""
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    if hours < 1:
        return f"{hours * 60:.1f} min"
    if hours < 72:
        return f"{hours:.1f} h"
    return f"{hours / 24:.1f} d"
