"""Every run over time (tracking/history.py): one point per run × judge × mode from a real DuckDB file,
the older runs included, errors in no rate; the report draws them and saves them as runs.csv and SVG."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from datetime import timedelta
from pathlib import Path

from ego2web_replay.models import AgentSpec
from ego2web_replay.testing.tracking import T0, EpisodeSpec, make_run, make_suite
from ego2web_replay.tracking.history import history_csv, run_history
from ego2web_replay.tracking.ingest import ingest
from ego2web_replay.tracking.report import build_report


def test_every_run_is_a_point_and_the_report_draws_and_saves_them(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping", "t3": "shopping"})
    runs = tmp_path / "runs"
    agent = AgentSpec(name="openai", model="gpt-x")
    make_run(runs, "old", agent, [
        EpisodeSpec("t1", "frozen", {"rule": True}), EpisodeSpec("t2", "frozen", {"rule": False}),
        EpisodeSpec("t3", "frozen", verdict_errors={"rule": "judge failed"}),
    ], suite=suite, started_at=T0 - timedelta(days=10))
    make_run(runs, "new", agent, [
        EpisodeSpec("t1", "frozen", {"rule": True}), EpisodeSpec("t2", "frozen", {"rule": True}),
        EpisodeSpec("t3", "frozen", {"rule": True}, answer=None, end_reason="setup_error", error="no snapshot"),
    ], suite=suite)
    db = tmp_path / "h.duckdb"
    ingest(db, [runs])
    points = run_history(db)
    assert [(p.run_id, p.mode, p.judged, p.successes, p.judge_errors, p.episode_errors) for p in points] == [
        ("old", "frozen", 2, 1, 1, 0), ("new", "frozen", 2, 2, 0, 1)]
    assert [p.success_rate for p in points] == [0.5, 1.0] and points[0].started_at < points[1].started_at

    out = tmp_path / "report"
    summary = build_report(db, out, iterations=50)
    assert out / "runs.csv" in summary.exports and out / "charts" / "runs.svg" in summary.exports
    rows = list(csv.DictReader((out / "runs.csv").read_text("utf-8").splitlines()))
    assert (out / "runs.csv").read_text("utf-8") == history_csv(points)
    assert [(r["run_id"], r["success_rate"]) for r in rows] == [("old", "0.5"), ("new", "1.0")]
    svg = ET.parse(out / "charts" / "runs.svg").getroot()
    titles = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert len(titles) == 2 and "50.0% success" in titles[0] and "100.0% success" in titles[1]
    index = (out / "index.html").read_text("utf-8")
    assert "Every run over time" in index and 'class="chart-runs"' in index
