"""The tracking sink: each stage's results reach the database; a broken database warns once, files stay."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ego2web_replay.errors import TrackingError
from ego2web_replay.models import AgentSpec, JudgeSpec, Verdict, episode_dir
from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_snapshot, make_suite
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.drift import ProbeResult
from ego2web_replay.tracking.sink import TrackingSink


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping"})
    return make_run(tmp_path / "runs", "r1", AgentSpec(name="scripted"),
                    [EpisodeSpec("t1", "live", {"rule": True}), EpisodeSpec("t1", "frozen")], suite=suite)


def _verdict(ok: bool) -> Verdict:
    return Verdict(task_id="t1", mode="frozen", judge=JudgeSpec(name="rule"), success=ok, score=float(ok),
                   judged_at=datetime(2026, 1, 5, tzinfo=UTC))


def test_each_result_reaches_the_database(tmp_path: Path, run_dir: Path) -> None:
    db = tmp_path / "t.duckdb"
    sink = TrackingSink(db)
    sink.snapshot_recorded(make_snapshot(tmp_path / "snaps", "t1", "s1", [("https://a.example/", 200, "sha1:A")]))
    sink.run_started(run_dir)
    sink.episode_finished(run_dir, episode_dir(run_dir, "t1", "frozen"))
    sink.verdict_made(episode_dir(run_dir, "t1", "frozen"), _verdict(True), judge="rule")
    sink.probed([ProbeResult(probe_id="p1", probed_at=datetime(2026, 1, 6, tzinfo=UTC), task_id="t1",
                             url="https://a.example/", url_status="changed")])
    with read_connection(db) as con:
        assert con.execute("SELECT task_id, snapshot_id FROM snapshots").fetchall() == [("t1", "s1")]
        assert con.execute("SELECT mode FROM episodes ORDER BY mode").fetchall() == [("frozen",), ("live",)]
        assert con.execute("SELECT mode, judge, success FROM verdicts ORDER BY mode").fetchall() == [
            ("frozen", "rule", True), ("live", "rule", True)]
        assert con.execute("SELECT url_status FROM probes").fetchall() == [("changed",)]
    assert sink.error is None


def test_a_broken_database_warns_once_and_the_files_stay(tmp_path: Path, run_dir: Path) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(os.urandom(4096))
    warnings: list[str] = []
    sink = TrackingSink(bad, warn=warnings.append)
    sink.run_started(run_dir)
    sink.episode_finished(run_dir, episode_dir(run_dir, "t1", "live"))
    sink.verdict_made(episode_dir(run_dir, "t1", "live"), _verdict(False))
    assert len(warnings) == 1 and "the run not recorded in" in warnings[0] and "`ingest` later" in warnings[0]
    assert sink.error and (episode_dir(run_dir, "t1", "live") / "trajectory.json").exists()
    with pytest.raises(TrackingError):  # probe rows live only in the database: losing them is an error
        sink.probed([ProbeResult(probe_id="p1", probed_at=datetime(2026, 1, 6, tzinfo=UTC), task_id="t1",
                                 url="https://a.example/", url_status="gone")])
