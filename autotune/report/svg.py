"""A small inline SVG line chart (no external assets): a step line of the best so far against trials,
the individual trials as dots, failures as crosses, an optional horizontal reference, a log time
axis."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Sequence

WIDTH, HEIGHT = 640, 260
LEFT, RIGHT, TOP, BOTTOM = 70, 16, 14, 40
MAX_DOTS = 2000  # more trials than this: every k-th is drawn (the step line keeps every change)


@dataclass
class Chart:
    """Values in seconds against a 1-based x (trials); ``None`` in ``points`` is a failed trial."""

    title: str
    points: Sequence[float | None] = ()
    line: Sequence[float | None] = ()  # the best so far at each x (None: nothing valid yet)
    reference: float | None = None  # a horizontal line (e.g. the record compile takes)
    reference_label: str = ""
    x_label: str = "trials"
    line_label: str = "fastest so far"
    notes: list[str] = field(default_factory=list)


def _fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def _ticks(lo: float, hi: float) -> list[float]:
    """Decades and their 2x / 5x between lo and hi (at least the two ends)."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo <= v <= hi:
                out.append(v)
    if len(out) > 7:
        out = [v for v in out if f"{v:.0e}".startswith("1")]
    if len(out) < 3:  # a narrow range: its ends and their geometric mean too
        out = sorted(set(out) | {lo, math.sqrt(lo * hi), hi})
    return out


def render(chart: Chart) -> str:
    """The chart as an ``<svg>`` element."""
    values = [v for v in list(chart.points) + list(chart.line) if v is not None and v > 0]
    if chart.reference:
        values.append(chart.reference)
    n = max(len(chart.points), len(chart.line))
    title = f"<title>{escape(chart.title)}</title>"
    if not values or n == 0:
        return (f'<svg class="chart" width="{WIDTH}" height="60" role="img">{title}'
                f'<text x="10" y="30">no valid measurement to plot</text></svg>')
    lo, hi = min(values), max(values)
    if hi / lo < 2:
        lo, hi = lo / 1.5, hi * 1.5
    ly0, ly1 = math.log10(lo), math.log10(hi)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(i: int) -> float:  # i: 1-based
        return LEFT + (pw * (i - 1) / (n - 1) if n > 1 else pw / 2)

    def y_of(v: float) -> float:
        return TOP + ph * (1 - (math.log10(v) - ly0) / (ly1 - ly0))

    parts = [f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'role="img" xmlns="http://www.w3.org/2000/svg">{title}',
             f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fff" stroke="#bbb"/>']
    for v in _ticks(lo, hi):
        y = y_of(v)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
                     f'{_fmt_time(v)}</text>')
    for i in sorted({1, n, *(round(1 + k * (n - 1) / 4) for k in range(1, 4))}):
        parts.append(f'<text x="{x_of(i):.1f}" y="{TOP + ph + 16}" text-anchor="middle" '
                     f'class="tick">{i}</text>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
                 f'{escape(chart.x_label)}</text>')
    step = max(1, math.ceil(len(chart.points) / MAX_DOTS))
    for i, v in enumerate(chart.points, start=1):
        if (i - 1) % step:
            continue
        if v is None:
            x, y = x_of(i), TOP + ph - 4
            parts.append(f'<path d="M{x - 3:.1f},{y - 3:.1f}l6,6m0,-6l-6,6" stroke="#c0392b" '
                         'stroke-width="1.2" class="failed"/>')
        elif v > 0:
            parts.append(f'<circle cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="2.5" fill="#7f9fc4" '
                         'class="trial"/>')
    path, prev = [], None
    for i, v in enumerate(chart.line, start=1):
        if v is None or v <= 0:
            continue
        x, y = x_of(i), y_of(v)
        if prev is None:
            path.append(f"M{x:.1f},{y:.1f}")
        elif prev != v:
            path.append(f"H{x:.1f}V{y:.1f}")
        prev = v
    if path:
        path.append(f"H{x_of(n):.1f}")
        parts.append(f'<path d="{"".join(path)}" fill="none" stroke="#1f5fa8" stroke-width="2" '
                     'class="best"/>')
    if chart.reference:
        y = y_of(chart.reference)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#27ae60" '
                     f'stroke-dasharray="5,4" class="reference"/>'
                     f'<text x="{LEFT + pw - 4}" y="{y - 5:.1f}" text-anchor="end" fill="#1e8449">'
                     f'{escape(chart.reference_label)}</text>')
    parts.append(f'<text x="{LEFT + 6}" y="{TOP + 14}" fill="#1f5fa8">{escape(chart.line_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
