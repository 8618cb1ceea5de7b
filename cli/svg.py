"""Charts as inline SVG, written here rather than pulled from a charting library.

Why our own: the pages must be self-contained (no CDN, no network when viewed) and small, and
the charts are two kinds only (a scatter with an optional frontier line, a stacked bar). A
library whose output is self-contained (Plotly's HTML embeds ~3.5 MB of JavaScript; Vega-Lite
needs its runtime too) would dwarf the data, add a dependency to pin and audit, and change
its output between versions; the SVG below is a few hundred lines of plain markup that any
browser draws, that tests can read as a DOM (one ``circle.mark`` per point), and that hovering
explains through each mark's ``<title>``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
)  # fmt: skip
"""Tableau's ten colours and two darker ones: distinct on screen and in print."""


@dataclass(frozen=True)
class Point:
    """One mark: where, what it is (its hover text), its colour group, and the key that ties it
    to the table rows it stands for (filters hide a mark whose rows are all hidden)."""

    x: float
    y: float
    label: str
    series: str
    key: str = ""
    highlight: bool = False


def colours(series: Sequence[str]) -> dict[str, str]:
    """A colour per series name, in sorted order (stable across runs)."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(series)))}


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2 or 5 × 10^k."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    value = math.floor(low / step) * step
    ticks = [round(value, 10)]
    while value < high - step * 1e-9:  # the last tick is at or beyond ``high``
        value += step
        ticks.append(round(value, 10))
    return ticks


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 × 10^k ticks between ``low`` and ``high`` (both > 0)."""
    ticks: list[float] = []
    for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        ticks += [m * 10**k for m in (1, 2, 5) if low <= m * 10**k <= high]
    return ticks or [low, high]


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.2g}"


def scatter(
    points: Sequence[Point],
    *,
    chart_id: str,
    title: str,
    x_label: str,
    y_label: str,
    log_y: bool = False,
    frontier: Sequence[Point] = (),
    width: int = 640,
    height: int = 380,
) -> str:
    """A scatter chart: one ``circle.mark`` per point (``data-series``, ``data-key`` where the
    point has a key, a ``<title>`` for hovering), the highlighted point as
    ``circle.mark.choice``, a legend of the series' colours, and the ``frontier`` as a
    ``polyline.frontier``."""
    left, right, top, bottom = 64, 150, 28, 48
    plot_w, plot_h = width - left - right, height - top - bottom
    if not points:
        return f'<svg id="{chart_id}" class="chart" viewBox="0 0 {width} {height}"><text x="20" y="40">no data</text></svg>'
    xs = [p.x for p in points]
    ys = [p.y for p in points]
    x_ticks = nice_ticks(min(0.0, min(xs)), max(xs))
    x_lo, x_hi = x_ticks[0], x_ticks[-1]
    if log_y:
        y_lo, y_hi = min(ys) / 1.2, max(ys) * 1.2
        y_ticks = log_ticks(y_lo, y_hi)

        def y_of(v: float) -> float:
            return top + plot_h * (
                1 - (math.log10(v) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
            )
    else:
        y_ticks = nice_ticks(min(0.0, min(ys)), max(ys))
        y_lo, y_hi = y_ticks[0], y_ticks[-1]

        def y_of(v: float) -> float:
            return top + plot_h * (1 - (v - y_lo) / ((y_hi - y_lo) or 1))

    def x_of(v: float) -> float:
        return left + plot_w * (v - x_lo) / ((x_hi - x_lo) or 1)

    palette = colours([p.series for p in points])
    out = [
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text class="chart-title" x="{left}" y="18">{html.escape(title)}</text>',
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>',
    ]
    for t in x_ticks:
        x = x_of(t)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}"/>')
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{_fmt(t)}</text>'
        )
    for t in y_ticks:
        y = y_of(t)
        out.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(
        f'<text class="axis-label" x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle">'
        f"{html.escape(x_label)}</text>"
    )
    out.append(
        f'<text class="axis-label" transform="translate(14 {top + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{html.escape(y_label)}</text>'
    )
    if frontier:
        line = " ".join(f"{x_of(p.x):.1f},{y_of(p.y):.1f}" for p in sorted(frontier, key=lambda p: p.x))
        out.append(f'<polyline class="frontier" points="{line}"/>')
    for p in sorted(points, key=lambda p: p.highlight):  # the choice last, on top
        cls = "mark choice" if p.highlight else "mark"
        radius = 7 if p.highlight else 4
        key = f' data-key="{html.escape(p.key)}"' if p.key else ""  # only marks that filters hide
        out.append(
            f'<circle class="{cls}" cx="{x_of(p.x):.1f}" cy="{y_of(p.y):.1f}" r="{radius}" '
            f'fill="{palette[p.series]}"{key} data-series="{html.escape(p.series)}">'
            f"<title>{html.escape(p.label)}</title></circle>"
        )
    for i, (name, colour) in enumerate(palette.items()):
        y = top + 14 * i
        out.append(
            f'<g class="legend"><circle cx="{width - right + 16}" cy="{y + 4}" r="4" fill="{colour}"/>'
            f'<text x="{width - right + 26}" y="{y + 8}">{html.escape(name)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def stacked_bar(parts: Sequence[tuple[str, float]], *, chart_id: str, title: str, width: int = 640) -> str:
    """One horizontal bar split into ``parts`` (label, USD), each a ``rect.part`` with its share
    and a ``<title>``, and a legend beneath."""
    total = sum(v for _, v in parts) or 1.0
    bar_w, height = width - 40, 96
    palette = colours([label for label, _ in parts])
    out = [
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text class="chart-title" x="20" y="18">{html.escape(title)}</text>',
    ]
    x = 20.0
    for label, value in parts:
        w = bar_w * value / total
        out.append(
            f'<rect class="part" x="{x:.1f}" y="28" width="{w:.2f}" height="26" fill="{palette[label]}" '
            f'data-part="{html.escape(label)}"><title>{html.escape(label)}: ${value:,.2f} '
            f"({value / total:.1%})</title></rect>"
        )
        x += w
    for i, (label, value) in enumerate(parts):
        lx = 20 + (bar_w / max(len(parts), 1)) * i
        out.append(
            f'<g class="legend"><rect x="{lx:.0f}" y="66" width="10" height="10" fill="{palette[label]}"/>'
            f'<text x="{lx + 14:.0f}" y="75">{html.escape(label)} ${value:,.2f}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def pareto(points: Sequence[Point], *, more_x_is_better: bool) -> list[Point]:
    """The points no other beats on both axes: lower y (cost), and lower x (hours) or, with
    ``more_x_is_better``, higher x (tokens/s)."""
    ordered = sorted(points, key=lambda p: (-p.x if more_x_is_better else p.x, p.y))
    front: list[Point] = []
    best = math.inf
    for p in ordered:
        if p.y < best:
            front.append(p)
            best = p.y
    return front
