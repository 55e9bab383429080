"""The tracking database: schema and migrations, ingest, atomicity, concurrent writers, bad files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import TrackingError
from ego2web_replay.models import AgentSpec, JudgeSpec, Verdict, episode_dir
from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_snapshot, make_suite
from ego2web_replay.tracking.db import read_connection, write_connection
from ego2web_replay.tracking.ingest import (
    ingest,
    parse_cdxj,
    record_episode,
    record_run,
    record_snapshot,
    record_verdict,
)
from ego2web_replay.tracking.schema import CURRENT_VERSION, MIGRATIONS, migrate, schema_version

REPO = Path(__file__).resolve().parents[1]
AGENT = AgentSpec(name="scripted")


def _count(db: Path, table: str) -> int:
    with read_connection(db) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "knowledge"})
    snaps = tmp_path / "snapshots"
    make_snapshot(snaps, "t1", "s1", [("https://a.example/", 200, "sha1:AAA"), ("https://a.example/x", 404, "sha1:B")])
    make_snapshot(snaps, "t2", "s1", [("https://b.example/", 200, "sha1:CCC")])
    runs = tmp_path / "runs"
    make_run(runs, "r1", AGENT, [
        EpisodeSpec("t1", "live", {"rule": True}), EpisodeSpec("t1", "frozen", {"rule": False}, miss=2),
        EpisodeSpec("t2", "live", {"rule": True}), EpisodeSpec("t2", "frozen", {"rule": True}),
    ], suite=suite)
    return snaps, runs


def test_fresh_database_has_every_migration(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    with write_connection(db):
        pass
    with read_connection(db) as con:
        assert schema_version(con) == CURRENT_VERSION
        versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
    assert versions == [m.version for m in MIGRATIONS]


def test_migration_from_version_1_keeps_rows(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, target=1)
    con.execute("INSERT INTO runs (run_id, agent, ingested_at) VALUES ('old-run', 'a', now())")
    con.execute("INSERT INTO episodes (run_id, task_id, mode, replay_miss, ingested_at) "
                "VALUES ('old-run', 't1', 'frozen', 3, now())")
    assert schema_version(con) == 1
    con.close()
    with read_connection(db) as con:
        assert schema_version(con) == CURRENT_VERSION
        assert con.execute("SELECT run_id, pinned_snapshots FROM runs").fetchall() == [("old-run", "{}")]
        row = con.execute("SELECT task_id, replay_miss, replay_blocked, missed_urls FROM episodes").fetchone()
        assert row == ("t1", 3, 0, "[]")
        assert con.execute("SELECT count(*) FROM probes").fetchone()[0] == 0


def test_parse_cdxj_and_bad_line(tmp_path: Path) -> None:
    d = make_snapshot(tmp_path, "t", "s", [("https://a.example/p", 200, "sha1:X"), ("https://a.example/q", 302, "d")])
    recs = list(parse_cdxj(d / "index.cdxj"))
    assert {(r.url, r.status, r.method) for r in recs} == {("https://a.example/p", 200, "GET"),
                                                           ("https://a.example/q", 302, "POST")}
    (d / "index.cdxj").write_text("com,a)/ 2026 {not json\n")
    with pytest.raises(TrackingError, match="line 1"):
        list(parse_cdxj(d / "index.cdxj"))


def test_ingest_loads_everything_and_is_idempotent(tmp_path: Path, data: tuple[Path, Path]) -> None:
    snaps, runs = data
    db = tmp_path / "e.duckdb"
    for _ in range(2):
        s = ingest(db, [snaps, runs])
        assert (s.snapshots, s.resources, s.runs, s.episodes, s.verdicts) == (2, 3, 1, 4, 4)
    assert _count(db, "snapshots") == 2 and _count(db, "resources") == 3
    assert _count(db, "runs") == 1 and _count(db, "episodes") == 4 and _count(db, "verdicts") == 4
    with read_connection(db) as con:
        row = con.execute("SELECT category, agent, replay_miss, replay_exact, missed_urls, steps FROM episodes "
                          "WHERE task_id='t1' AND mode='frozen'").fetchone()
        assert row[:4] == ("shopping", "scripted", 2, 10)
        assert "missing0" in row[4] and row[5] == 2
        res = con.execute("SELECT url, method, status, mime, digest, size FROM resources WHERE task_id='t1' "
                          "ORDER BY url").fetchall()
        assert res[0] == ("https://a.example/", "GET", 200, "text/html", "sha1:AAA", 100)
        assert res[1][1:3] == ("POST", 404)
    # single folders work as well as roots, and a run folder alone
    s = ingest(db, [snaps / "t1" / "s1", runs / "r1"])
    assert (s.snapshots, s.runs) == (1, 1) and _count(db, "episodes") == 4


def test_unknown_suite_gives_unknown_category(tmp_path: Path) -> None:
    rd = make_run(tmp_path, "r", AGENT, [EpisodeSpec("t9", "live", {"rule": True})], suite=tmp_path / "gone.json")
    db = tmp_path / "u.duckdb"
    record_run(db, rd)
    with read_connection(db) as con:
        assert con.execute("SELECT category FROM episodes").fetchone() == ("unknown",)


def test_record_functions(tmp_path: Path, data: tuple[Path, Path]) -> None:
    snaps, runs = data
    db = tmp_path / "r.duckdb"
    assert record_snapshot(db, snaps / "t1" / "s1") == 2
    ed = episode_dir(runs / "r1", "t1", "frozen")
    assert record_episode(db, runs / "r1", ed) == 1
    assert record_episode(db, runs / "r1", ed) == 1
    verdict = Verdict(task_id="t1", mode="frozen", judge=JudgeSpec(name="ego2web", model="gpt"), success=True, score=1)
    record_verdict(db, ed, verdict)
    record_verdict(db, ed, verdict)
    assert _count(db, "runs") == 1 and _count(db, "episodes") == 1 and _count(db, "verdicts") == 2
    with read_connection(db) as con:
        assert con.execute("SELECT run_id, judge_model FROM verdicts WHERE judge='ego2web'").fetchone() == ("r1", "gpt")


def test_failed_transaction_leaves_no_rows(tmp_path: Path, data: tuple[Path, Path]) -> None:
    _, runs = data
    db = tmp_path / "a.duckdb"
    with pytest.raises(RuntimeError):
        with write_connection(db) as con:
            con.execute("INSERT INTO runs (run_id, ingested_at) VALUES ('half', now())")
            raise RuntimeError("interrupted")
    assert _count(db, "runs") == 0
    # a corrupt verdict is skipped with a warning; the rest of the run is loaded
    (episode_dir(runs / "r1", "t2", "live") / "verdicts" / "bad.json").write_text("{nope")
    s = ingest(db, [runs])
    assert s.episodes == 4 and s.verdicts == 4 and any("bad.json" in w for w in s.warnings)


_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ego2web_replay.tracking.ingest import record_episode, record_verdict
    from ego2web_replay.models import JudgeSpec, Verdict
    db, run = Path(sys.argv[1]), Path(sys.argv[2])
    (db.parent / f"ready-{run.name}").touch()
    while not (db.parent / "go").exists():  # start together
        time.sleep(0.01)
    for ed in sorted((run / "episodes").glob("*/*")):
        record_episode(db, run, ed)
        record_verdict(db, ed, Verdict(task_id=ed.parent.name, mode=ed.name, judge=JudgeSpec(name="extra"),
                                       success=True, score=1.0))
""")


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    n = 12
    run_a = make_run(tmp_path / "runs", "ra", AGENT, [EpisodeSpec(f"a{i}", "live", {"rule": True}) for i in range(n)])
    run_b = make_run(tmp_path / "runs", "rb", AgentSpec(name="other"),
                     [EpisodeSpec(f"b{i}", "frozen", {"rule": False}) for i in range(n)])
    db = tmp_path / "c.duckdb"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(run)], env=env, cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for run in (run_a, run_b)]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{r}").exists() for r in ("ra", "rb")) and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with read_connection(db) as con:
        assert con.execute("SELECT run_id, count(*) FROM episodes GROUP BY 1 ORDER BY 1").fetchall() == [
            ("ra", n), ("rb", n)]
        assert con.execute("SELECT count(*) FROM verdicts").fetchone()[0] == 4 * n
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
        spans = dict((r[0], (r[1], r[2])) for r in con.execute(
            "SELECT run_id, min(ingested_at), max(ingested_at) FROM episodes GROUP BY 1").fetchall())
    # the two writers really ran at the same time: their write periods overlap
    assert spans["ra"][0] < spans["rb"][1] and spans["rb"][0] < spans["ra"][1]


def test_missing_and_corrupt_database_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TrackingError, match="ingest"):
        with read_connection(tmp_path / "none.duckdb"):
            pass
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(TrackingError, match="not a readable DuckDB database"):
        with read_connection(bad):
            pass
    with pytest.raises(TrackingError):
        with write_connection(bad):
            pass
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE x(a INT)").close()
    with pytest.raises(TrackingError, match="not a tracking database"):
        with read_connection(other):
            pass


def test_ingest_cli(tmp_path: Path, data: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    snaps, runs = data
    db = tmp_path / "cli.duckdb"
    assert main(["ingest", str(snaps), str(runs), "--db", str(db)]) == 0
    assert "2 snapshots (3 resources), 1 runs, 4 episodes, 4 verdicts" in capsys.readouterr().out
    assert main(["ingest", str(tmp_path / "nowhere"), "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(os.urandom(4096))
    assert main(["ingest", str(runs), "--db", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "not a readable DuckDB database" in err and err.count("\n") == 1


def test_writers_refuse_what_readers_refuse(tmp_path: Path) -> None:
    """Another program's DuckDB file and a newer schema are refused by writers too, untouched."""
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE x(a INT)").close()
    with pytest.raises(TrackingError, match="not a tracking database"):
        with write_connection(other):
            pass
    con = duckdb.connect(str(other))
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    finally:
        con.close()
    assert tables == {"x"}  # nothing was migrated into it

    newer = tmp_path / "newer.duckdb"
    with write_connection(newer):
        pass
    con = duckdb.connect(str(newer))
    con.execute("INSERT INTO schema_migrations VALUES (?, now(), 'from the future')", [CURRENT_VERSION + 50])
    con.close()
    with pytest.raises(TrackingError, match="newer than this program"):
        with write_connection(newer):
            pass


def test_lock_file_that_cannot_be_created_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the database folder should be")
    db = blocker / "sub" / "x.duckdb"
    with pytest.raises(TrackingError, match="cannot create its lock file"):
        with write_connection(db):
            pass
    assert main(["compare", "--db", str(tmp_path / "missing" / "x.duckdb")]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_version_10_database_gains_the_shared_sources_and_ingests_old_and_new_runs(tmp_path: Path) -> None:
    """Migration 11 (runs.shared_snapshots) on a real file at version 10: its run keeps its row with NULL
    (no sources pinned); a run.json with the map stores it as JSON, an older run.json without it NULL."""
    import json

    db = tmp_path / "v10.duckdb"
    con = duckdb.connect(str(db))
    migrate(con, target=10)
    con.execute("INSERT INTO runs (run_id, agent, ingested_at, pinned_snapshots) VALUES ('v10-run', 'a', now(), "
                "'{\"t1\": \"s1\"}')")
    con.close()
    runs = tmp_path / "runs"
    shared = make_run(runs, "shared", AGENT, [EpisodeSpec("t1", "frozen", {"rule": True})])
    manifest = json.loads((shared / "run.json").read_text("utf-8"))
    manifest.update(snapshots={"t1": "s1"}, shared_snapshots={"t2": "s9", "t1": "s1"})
    (shared / "run.json").write_text(json.dumps(manifest), "utf-8")
    older = make_run(runs, "older", AGENT, [EpisodeSpec("t1", "frozen", {"rule": True})])
    manifest = json.loads((older / "run.json").read_text("utf-8"))
    manifest.pop("shared_snapshots", None)  # as written before the sources were pinned
    (older / "run.json").write_text(json.dumps(manifest), "utf-8")

    assert ingest(db, [runs]).runs == 2
    with read_connection(db) as con:
        assert schema_version(con) == CURRENT_VERSION >= 11
        rows = dict((r[0], r[1:]) for r in con.execute(
            "SELECT run_id, pinned_snapshots, shared_snapshots FROM runs").fetchall())
    assert rows["v10-run"] == ('{"t1": "s1"}', None)
    assert json.loads(rows["shared"][0]) == {"t1": "s1"}
    assert json.loads(rows["shared"][1]) == {"t1": "s1", "t2": "s9"}
    assert rows["older"][1] is None
