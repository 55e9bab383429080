"""Drift probes in the database: record_probe, the time series, latest task status, `drift report`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.tracking.db import read_connection, write_connection
from ego2web_replay.tracking.drift import (
    ProbeResult,
    drift_timeseries,
    latest_task_status,
    record_probe,
)

T = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _probe(pid: str, days: int, task: str, url: str, status: str, **kw: object) -> ProbeResult:
    return ProbeResult(probe_id=pid, probed_at=T + timedelta(days=days), task_id=task, url=url,
                       url_status=status, **kw)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "d.duckdb"
    record_probe(path, [
        _probe("p1", 0, "t1", "https://shop.example/a", "unchanged", status_then=200, status_now=200,
               digest_equal=True, text_similarity=1.0),
        _probe("p1", 0, "t1", "https://shop.example/b", "unchanged"),
        _probe("p1", 0, "t2", "https://wiki.example/x", "unchanged"),
        _probe("p1", 0, "t2", "https://wiki.example/y", "error", error="timeout"),
    ])
    record_probe(path, [
        _probe("p2", 10, "t1", "https://shop.example/a", "changed", digest_equal=False, text_similarity=0.7),
        _probe("p2", 10, "t1", "https://shop.example/b", "gone", status_now=404),
        _probe("p2", 10, "t2", "https://wiki.example/x", "unchanged"),
        _probe("p2", 10, "t2", "https://wiki.example/y", "blocked", task_status="blocked"),
    ])
    return path


def test_record_probe_is_idempotent_and_derives_host(db: Path) -> None:
    again = _probe("p2", 10, "t1", "https://shop.example/a", "changed", digest_equal=False, text_similarity=0.7)
    assert again.host == "shop.example"
    assert record_probe(db, [again]) == 1
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM probes").fetchone()[0] == 8
        row = con.execute("SELECT host, status_then, status_now, digest_equal, text_similarity FROM probes "
                          "WHERE probe_id='p1' AND url='https://shop.example/a'").fetchone()
    assert row == ("shop.example", 200, 200, True, 1.0)


def test_time_series_hand_computed(db: Path) -> None:
    s = drift_timeseries(db)
    assert s.probes == 2
    overall = [(p.probe_id, p.urls, p.errors, p.fraction_changed) for p in s.series("overall")["all"]]
    # p1: 0 of 3 probed (one error); p2: changed + gone + blocked = 3 of 4
    assert overall == [("p1", 4, 1, 0.0), ("p2", 4, 0, 0.75)]
    sites = {k: [p.fraction_changed for p in v] for k, v in s.series("site").items()}
    assert sites == {"shop.example": [0.0, 1.0], "wiki.example": [0.0, 0.5]}
    tasks = {k: [(p.fraction_changed, p.task_status) for p in v] for k, v in s.series("task").items()}
    assert tasks == {"t1": [(0.0, "unchanged"), (1.0, "gone")], "t2": [(0.0, "unchanged"), (0.5, "blocked")]}
    with read_connection(db) as con:
        latest = latest_task_status(con)
    assert {k: (v.probe_id, v.status) for k, v in latest.items()} == {"t1": ("p2", "gone"), "t2": ("p2", "blocked")}


def test_empty_series(tmp_path: Path) -> None:
    path = tmp_path / "e.duckdb"
    with write_connection(path):
        pass
    s = drift_timeseries(path)
    assert s.probes == 0 and s.points == []


def test_bad_probe_rows_are_rejected() -> None:
    with pytest.raises(ValueError):
        _probe("p", 0, "t", "https://a.example/", "weird")
    with pytest.raises(ValueError):
        _probe("p", 0, "t", "https://a.example/", "changed", text_similarity=1.5)


def test_drift_report_cli(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "drift.json"
    assert main(["drift", "report", "--db", str(db), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "drift since capture: per site" in text and "shop.example" in text and "75.0%" in text
    data = json.loads(out.read_text())
    assert data["probes"] == 2 and len(data["points"]) == 2 + 4 + 4
    assert main(["drift", "report", "--db", str(db), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == data  # only the JSON on stdout
    empty = tmp_path / "empty.duckdb"
    with write_connection(empty):
        pass
    assert main(["drift", "report", "--db", str(empty)]) == 0
    assert "no drift probes" in capsys.readouterr().out
    assert main(["drift", "report", "--db", str(tmp_path / "nope.duckdb")]) == 1
    err = capsys.readouterr().err
    assert "ingest" in err and err.count("\n") == 1
