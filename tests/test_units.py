"""Quantities as people write them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from selector import units


@pytest.mark.parametrize(
    ("text", "gb"),
    [
        ("200GB", 200.0),
        ("200 GB", 200.0),
        ("1.5TiB", 1.5 * 1024**4 / 1e9),
        ("512MB", 0.512),
        ("2TB", 2000.0),
        (500, 500.0),
        (0.5, 0.5),
        ("64GiB", 64 * 1024**3 / 1e9),
    ],
)
def test_sizes(text: object, gb: float) -> None:
    assert units.parse_size_gb(text) == pytest.approx(gb)


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("30m", 0.5),
        ("12h", 12.0),
        ("7d", 168.0),
        ("90s", 0.025),
        ("1h30m", 1.5),
        ("2w", 336.0),
        ("720h", 720.0),
        ("45min", 0.75),
    ],
)
def test_durations(text: str, hours: float) -> None:
    assert units.parse_duration_hours(text) == pytest.approx(hours)


@pytest.mark.parametrize(
    ("text", "count"),
    [("2e9", 2e9), ("5e7", 5e7), ("50M", 5e7), ("1.5B", 1.5e9), (1000, 1000.0), ("3k", 3000.0)],
)
def test_counts(text: object, count: float) -> None:
    assert units.parse_count(text) == pytest.approx(count)


@pytest.mark.parametrize("bad", ["720", 720, "12 parsecs", "", "h", "-3h", "nan h", True, None])
def test_durations_need_a_unit(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        units.parse_duration_hours(bad)


@pytest.mark.parametrize("bad", ["12 bananas", "-5GB", "GB", float("inf"), True, [1]])
def test_bad_sizes(bad: object) -> None:
    with pytest.raises(ValueError):
        units.parse_size_gb(bad)


@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.none(), st.booleans()))
def test_parsers_only_raise_value_error(value: object) -> None:
    for parse in (units.parse_size_gb, units.parse_duration_hours, units.parse_count):
        try:
            result = parse(value)
        except ValueError:
            continue
        assert math.isfinite(result) and result >= 0


def test_format_hours() -> None:
    assert units.format_hours(0.5) == "30.0 min"
    assert units.format_hours(5) == "5.0 h"
    assert units.format_hours(240) == "10.0 d"
