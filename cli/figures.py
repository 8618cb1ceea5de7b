"""The figures every terminal text shares: aligned tables, dollars, counts, where an offer is."""

from __future__ import annotations

from collections.abc import Sequence

from selector.catalog import Offer


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """A plain aligned table; columns listed in ``right`` are right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def money(value: float) -> str:
    return f"${value:,.2f}"


def where(offer: Offer) -> str:
    """The offer's zone, or its region where the price holds region-wide."""
    return offer.zone or offer.region


def number(value: float) -> str:
    """Four significant figures, thousands separated, no exponent below 10^15."""
    if value == 0 or abs(value) >= 1e15 or abs(value) < 1e-3:
        return f"{value:.4g}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"
