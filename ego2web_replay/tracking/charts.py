"""Small SVG charts for the static report: drawn here, inline, with no script and no network.

Every chart returns a self-contained ``<svg>`` string with axes, gridlines,
tick labels, a legend and a ``<title>`` on every mark (the browser shows it
as a tooltip), so the report needs no JavaScript charting library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape

__all__ = ["PALETTE", "bar_chart", "difference_chart", "line_chart"]

PALETTE = ("#2b6cb0", "#dd6b20", "#2f855a", "#9b2c2c", "#6b46c1", "#b7791f", "#2c7a7b", "#4a5568")
_FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def _y_axis(x0: float, y0: float, width: float, height: float) -> list[str]:
    parts = []
    for i in range(6):
        frac = i / 5
        y = y0 + height - frac * height
        parts.append(f'<line class="grid" x1="{x0}" y1="{y:.1f}" x2="{x0 + width}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{int(frac * 100)}%</text>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + height}" stroke="#4a5568"/>')
    parts.append(f'<line x1="{x0}" y1="{y0 + height}" x2="{x0 + width}" y2="{y0 + height}" stroke="#4a5568"/>')
    return parts


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    parts = []
    for i, name in enumerate(names):
        lx = x + i * 150
        parts.append(f'<rect x="{lx}" y="{y - 10}" width="12" height="12" fill="{PALETTE[i % len(PALETTE)]}"/>')
        parts.append(f'<text x="{lx + 18}" y="{y}" {_FONT}>{escape(name[:20])}</text>')
    return parts


def bar_chart(groups: Sequence[tuple[str, Sequence[float | None]]], series: Sequence[str], *, title: str,
              css_class: str = "chart-bars") -> str:
    """Grouped bars of shares in [0, 1]: ``groups`` are ``(label, one value per series)``."""
    x0, y0, height = 56.0, 36.0, 220.0
    slot = max(170.0, 40.0 * len(series) + 30)
    width = max(300.0, slot * len(groups))
    bar_w = (slot - 30) / max(1, len(series))
    total_w, total_h = x0 + width + 20, y0 + height + 70
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" role="img" width="{total_w:.0f}" '
             f'height="{total_h:.0f}" viewBox="0 0 {total_w:.0f} {total_h:.0f}">',
             f'<text x="{x0}" y="18" {_FONT} font-weight="bold">{escape(title)}</text>']
    parts += _y_axis(x0, y0, width, height)
    for gi, (label, values) in enumerate(groups):
        gx = x0 + gi * slot + 15
        for si, value in enumerate(values):
            color = PALETTE[si % len(PALETTE)]
            x = gx + si * bar_w
            if value is None:
                parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{y0 + height - 4}" text-anchor="middle" '
                             f'{_FONT}>n/a</text>')
                continue
            h = max(0.0, min(1.0, value)) * height
            parts.append(f'<rect class="bar" data-series="{escape(series[si])}" x="{x:.1f}" y="{y0 + height - h:.1f}" '
                         f'width="{bar_w - 4:.1f}" height="{h:.1f}" fill="{color}"><title>{escape(label)} · '
                         f'{escape(series[si])}: {value:.1%}</title></rect>')
            parts.append(f'<text x="{x + (bar_w - 4) / 2:.1f}" y="{y0 + height - h - 4:.1f}" text-anchor="middle" '
                         f'{_FONT}>{value:.0%}</text>')
        parts.append(f'<text x="{gx + (slot - 30) / 2:.1f}" y="{y0 + height + 16}" text-anchor="middle" '
                     f'{_FONT}>{escape(label[:28])}</text>')
    parts += _legend(series, x0, y0 + height + 50)
    parts.append("</svg>")
    return "\n".join(parts)


def line_chart(lines: Mapping[str, Sequence[tuple[datetime, float | None]]], *, title: str,
               css_class: str = "chart-lines", what: str = "changed", empty: str = "no probes yet") -> str:
    """Lines of shares in [0, 1] over time; ``lines`` maps a name to ``(time, value)`` points.

    ``what`` follows each point's value in its tooltip; ``empty`` is shown when there is no point."""
    x0, y0, width, height = 56.0, 36.0, 560.0, 220.0
    total_w, total_h = x0 + width + 70, y0 + height + 70
    times = sorted({t for pts in lines.values() for t, v in pts if v is not None})
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" role="img" width="{total_w:.0f}" '
             f'height="{total_h:.0f}" viewBox="0 0 {total_w:.0f} {total_h:.0f}">',
             f'<text x="{x0}" y="18" {_FONT} font-weight="bold">{escape(title)}</text>']
    parts += _y_axis(x0, y0, width, height)
    if not times:
        parts.append(f'<text x="{x0 + width / 2}" y="{y0 + height / 2}" text-anchor="middle" {_FONT}>{escape(empty)}</text>')
        parts.append("</svg>")
        return "\n".join(parts)
    t_min, t_max = times[0].timestamp(), times[-1].timestamp()
    span = (t_max - t_min) or 1.0

    def px(t: datetime) -> float:
        return x0 + (width / 2 if t_max == t_min else (t.timestamp() - t_min) / span * width)

    for t in (times[0], times[-1]) if len(times) > 1 else (times[0],):
        parts.append(f'<text x="{px(t):.1f}" y="{y0 + height + 16}" text-anchor="middle" {_FONT}>'
                     f'{t.strftime("%Y-%m-%d %H:%M")}</text>')
    for i, (name, pts) in enumerate(lines.items()):
        color = PALETTE[i % len(PALETTE)]
        coords = [(px(t), y0 + height - max(0.0, min(1.0, v)) * height, t, v) for t, v in pts if v is not None]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in coords)
            parts.append(f'<polyline class="line" data-series="{escape(name)}" points="{path}" fill="none" '
                         f'stroke="{color}" stroke-width="2"/>')
        for x, y, t, v in coords:
            parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>'
                         f'{escape(name)} {t:%Y-%m-%d %H:%M}: {v:.1%} {escape(what)}</title></circle>')
    parts += _legend(list(lines), x0, y0 + height + 50)
    parts.append("</svg>")
    return "\n".join(parts)


def difference_chart(rows: Sequence[tuple[str, float | None, float | None, float | None]], *, title: str,
                     level: float, css_class: str = "chart-diff") -> str:
    """Differences in [-1, 1] with their confidence intervals: ``rows`` are ``(label, value, low, high)``.

    A bar from 0 to the value and a whisker from ``low`` to ``high`` (none when the interval is undefined);
    a row without a value says n/a."""
    x0, y0, height = 56.0, 36.0, 220.0
    slot = 170.0
    width = max(300.0, slot * len(rows))
    total_w, total_h = x0 + width + 20, y0 + height + 40

    def py(v: float) -> float:
        return y0 + height / 2 - max(-1.0, min(1.0, v)) * height / 2

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" role="img" width="{total_w:.0f}" '
             f'height="{total_h:.0f}" viewBox="0 0 {total_w:.0f} {total_h:.0f}">',
             f'<text x="{x0}" y="18" {_FONT} font-weight="bold">{escape(title)}</text>']
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        y = py(tick)
        parts.append(f'<line class="grid" x1="{x0}" y1="{y:.1f}" x2="{x0 + width}" y2="{y:.1f}" '
                     f'stroke="{"#4a5568" if tick == 0 else "#e2e8f0"}"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{tick:+.0%}</text>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + height}" stroke="#4a5568"/>')
    for i, (label, value, low, high) in enumerate(rows):
        cx = x0 + i * slot + slot / 2
        parts.append(f'<text x="{cx:.1f}" y="{y0 + height + 16}" text-anchor="middle" {_FONT}>{escape(label[:28])}</text>')
        if value is None:
            parts.append(f'<text x="{cx:.1f}" y="{py(0) - 4:.1f}" text-anchor="middle" {_FONT}>n/a</text>')
            continue
        top, bottom = sorted((py(value), py(0)))
        interval = "" if low is None or high is None else f", {level:.0%} CI [{low:+.1%}, {high:+.1%}]"
        parts.append(f'<rect class="bar" x="{cx - 30:.1f}" y="{top:.1f}" width="60" height="{bottom - top:.1f}" '
                     f'fill="{PALETTE[0]}"><title>{escape(label)}: live - frozen {value:+.1%}{interval}</title></rect>')
        if low is not None and high is not None:
            y_lo, y_hi = py(low), py(high)
            parts.append(f'<g class="interval" data-low="{low:.6g}" data-high="{high:.6g}" stroke="#1a202c" '
                         f'stroke-width="1.5"><line x1="{cx:.1f}" y1="{y_lo:.1f}" x2="{cx:.1f}" y2="{y_hi:.1f}"/>'
                         f'<line x1="{cx - 8:.1f}" y1="{y_lo:.1f}" x2="{cx + 8:.1f}" y2="{y_lo:.1f}"/>'
                         f'<line x1="{cx - 8:.1f}" y1="{y_hi:.1f}" x2="{cx + 8:.1f}" y2="{y_hi:.1f}"/></g>')
    parts.append("</svg>")
    return "\n".join(parts)
