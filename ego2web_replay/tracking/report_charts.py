"""The report's charts, and the files a reader can take away: the comparison as CSV, each chart as SVG.

The success chart shows each agent × judge's live and frozen rates on paired
tasks; the difference chart shows live - frozen with the paired bootstrap
interval ``compare`` computed (the same numbers as its table, CSV and JSON);
the runs chart every run over time (:mod:`.history`); the drift chart every probe over time. :func:`write_exports` writes them as
``comparison.csv``, ``runs.csv`` and ``charts/<name>.svg`` next to ``index.html``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ..atomic import atomic_write_text
from .charts import bar_chart, difference_chart, line_chart
from .compare import Comparison, csv_text
from .drift import DriftSeries
from .history import RunPoint, history_csv

__all__ = ["diff_chart", "drift_chart", "history_chart", "history_html", "success_chart", "write_exports"]


def success_chart(comp: Comparison) -> str:
    return bar_chart([(f"{g.agent} · {g.judge}", [g.live_rate, g.frozen_rate]) for g in comp.groups],
                     ["live", "frozen"], title="Success rate on paired tasks, live vs frozen")


def diff_chart(comp: Comparison) -> str:
    return difference_chart([(f"{g.agent} · {g.judge}", g.difference, g.ci_low, g.ci_high) for g in comp.groups],
                            title=f"Live - frozen success, with the {comp.level:.0%} paired bootstrap interval",
                            level=comp.level)


def drift_chart(drift: DriftSeries) -> str:
    lines: dict[str, list[tuple[datetime, float | None]]] = {}
    for scope in ("overall", "site"):
        for key, pts in drift.series(scope).items():
            lines[key if scope == "site" else "overall"] = [(p.probed_at, p.fraction_changed) for p in pts]
    return line_chart(lines, title="Share of recorded URLs changed since capture, per probe")


def history_chart(points: list[RunPoint]) -> str:
    lines: dict[str, list[tuple[datetime, float | None]]] = {}
    for p in points:
        if p.started_at is not None:
            lines.setdefault(f"{p.agent} · {p.judge} · {p.mode}", []).append((p.started_at, p.success_rate))
    return line_chart(lines, title="Success rate of every run (judged episodes), by the time it started",
                      css_class="chart-runs", what="success", empty="no judged runs yet")


def history_html(points: list[RunPoint]) -> str:
    if not points:
        return '<p class="note">No judged runs yet.</p>'
    return (f'<div class="chart" id="runs-chart">{history_chart(points)}</div><p>One point per run, judge and '
            "mode: the share of its judged episodes judged a success (judge errors and episodes that could not "
            "run are in no rate). The comparison above uses each task's newest episode; this shows them all "
            "(<code>runs.csv</code>).</p>")


def write_exports(out: Path, comp: Comparison, drift: DriftSeries, history: list[RunPoint]) -> list[Path]:
    """Write ``comparison.csv``, ``runs.csv`` and the charts as SVG files under ``out``; returns the paths."""
    files = {out / "comparison.csv": csv_text(comp), out / "runs.csv": history_csv(history)}
    if history:
        files[out / "charts" / "runs.svg"] = history_chart(history) + "\n"
    if comp.groups:
        files[out / "charts" / "success.svg"] = success_chart(comp) + "\n"
        files[out / "charts" / "difference.svg"] = diff_chart(comp) + "\n"
    if drift.points:
        files[out / "charts" / "drift.svg"] = drift_chart(drift) + "\n"
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    return list(files)
