"""The model tree: one model per file format, versioned, documented, shared by writer and readers."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from ego2web_replay import models
from ego2web_replay.cli import main
from ego2web_replay.errors import Ego2WebError, SnapshotError
from ego2web_replay.models import (
    FileModel,
    IndexEntry,
    RunManifest,
    RunSettings,
    end_reason_counts,
    index_row,
    load_run,
    load_tasks,
    load_trajectory,
    read_model,
)
from ego2web_replay.runner.run import run_suite
from ego2web_replay.snapshots.snapshot import load_manifest
from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_snapshot, make_suite
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.ingest import ingest, read_run_manifest, record_run

PYDANTIC_MODELS = [obj for obj in vars(models).values()
                   if isinstance(obj, type) and issubclass(obj, BaseModel) and obj not in (BaseModel, FileModel)]
FILE_MODELS = [m for m in PYDANTIC_MODELS if issubclass(m, FileModel)]


def test_the_tree_holds_every_file_format() -> None:
    names = {m.__name__ for m in FILE_MODELS}
    assert names == {"Task", "Trajectory", "RunManifest", "ReplayStats", "Verdict", "SnapshotManifest"}


@pytest.mark.parametrize("model", FILE_MODELS, ids=lambda m: m.__name__)
def test_file_models_write_their_current_version(model: type[FileModel]) -> None:
    assert model.model_fields["version"].default == model.FORMAT_VERSION


@pytest.mark.parametrize("model", PYDANTIC_MODELS, ids=lambda m: m.__name__)
def test_every_field_is_documented(model: type[BaseModel]) -> None:
    assert model.__doc__
    undocumented = [name for name, f in model.model_fields.items() if not f.description]
    assert undocumented == []


def test_every_index_entry_field_is_documented() -> None:
    tree = ast.parse(inspect.getsource(IndexEntry))
    body = tree.body[0].body  # type: ignore[attr-defined]
    fields = [n.target.id for n in body if isinstance(n, ast.AnnAssign)]
    documented = [n.target.id for n, after in zip(body, body[1:], strict=False)
                  if isinstance(n, ast.AnnAssign) and isinstance(after, ast.Expr)
                  and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)]
    assert fields and fields == documented


def test_old_import_paths_are_the_same_classes() -> None:
    from ego2web_replay.actions import Action
    from ego2web_replay.runner.run import RunManifest as RunnerManifest
    from ego2web_replay.snapshots.cdxj import CdxjEntry
    from ego2web_replay.tasks import Task
    from ego2web_replay.tasks import load_tasks as old_load_tasks

    assert (Action, Task, old_load_tasks, RunnerManifest, CdxjEntry) == \
           (models.Action, models.Task, load_tasks, RunManifest, IndexEntry)


def test_index_row_reads_the_line_as_the_entry_does() -> None:
    line = ('com,example)/form?__wb_method=post&q=mug 20260105120000 {"url": "https://example.com/form", '
            '"mime": "text/html", "status": "200", "digest": "sha1:X", "length": "10", "offset": "7", '
            '"filename": "a.warc.zst", "method": "POST", "requestBody": "q=mug"}')
    entry = IndexEntry.from_line(line)
    rtype, row = index_row(line)
    assert entry.to_line() == line
    assert (rtype, row) == (entry.record_type,
                            (entry.timestamp, entry.offset, entry.url, entry.method, entry.request_body_query, line))
    assert str(entry.captured_at) == "2026-01-05 12:00:00"


def test_run_json_written_by_the_runner_is_read_by_ingest(tmp_path: Path) -> None:
    suite = load_tasks(make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "knowledge"}))
    settings = RunSettings(mode="frozen", snapshots_root=str(tmp_path / "no-snapshots"), guard="loopback")
    run_dir, results = run_suite(suite, agent_name="scripted", out=tmp_path / "runs", settings=settings,
                                 run_id="r1", command=["ego2web-replay", "run"])
    assert [r.end_reason for r in results] == ["setup_error", "setup_error"]
    written = load_run(run_dir)
    read = read_run_manifest(run_dir)
    assert isinstance(read, RunManifest) and read == written
    assert (written.agent_name, written.modes, written.episodes) == ("scripted", ["frozen"], {"setup_error": 2})
    db = tmp_path / "t.duckdb"
    summary = record_run(db, run_dir)
    assert (summary.runs, summary.episodes) == (1, 2)
    with read_connection(db) as con:
        row = con.execute("SELECT run_id, suite_sha256, agent, modes FROM runs").fetchone()
        cats = con.execute("SELECT task_id, category FROM episodes ORDER BY task_id").fetchall()
    assert row == ("r1", suite.sha256, "scripted", '["frozen"]')
    assert cats == [("t1", "shopping"), ("t2", "knowledge")]
    (run_dir / "episodes/t2/frozen/trajectory.json").write_text("{not json")
    assert end_reason_counts(run_dir) == {"setup_error": 1, "unreadable": 1}


def _bump(path: Path, version: int = 99) -> None:
    data = json.loads(path.read_text("utf-8"))
    data["version"] = version
    path.write_text(json.dumps(data), "utf-8")


def test_a_file_of_a_newer_version_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping"})
    run = make_run(tmp_path / "runs", "r1", models.AgentSpec(name="scripted"),
                   [EpisodeSpec("t1", "frozen", {"rule": True})], suite=suite)
    snap = make_snapshot(tmp_path / "snaps", "t1", "s1", [("https://a.example/", 200, "sha1:A")])
    expected = "format version 99 is newer than this ego2web-replay reads (1); upgrade ego2web-replay"

    _bump(run / "run.json")
    with pytest.raises(Ego2WebError) as e:
        load_run(run)
    assert str(e.value) == f"{run / 'run.json'}: run manifest {expected}"
    assert main(["runs", "show", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {run / 'run.json'}: run manifest {expected}"

    traj = run / "episodes/t1/frozen/trajectory.json"
    _bump(traj)
    with pytest.raises(Ego2WebError, match=re.escape(f"trajectory {expected}")):
        load_trajectory(traj)

    _bump(snap / "manifest.json")
    with pytest.raises(SnapshotError, match=re.escape(f"snapshot manifest {expected}")):
        load_manifest(snap)

    summary = ingest(tmp_path / "t.duckdb", [tmp_path / "snaps", tmp_path / "runs"])
    assert (summary.snapshots, summary.runs) == (0, 0)
    assert any(expected in w for w in summary.warnings)

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"version": 7, "id": "T1", "instruction": "x", "start_url": "http://a/"}) + "\n")
    with pytest.raises(Ego2WebError, match="format version 7 is newer"):
        load_tasks(tasks)


def test_bad_files_name_the_field(tmp_path: Path) -> None:
    p = tmp_path / "run.json"
    p.write_text(json.dumps({"run_id": "r", "started_at": "yesterday"}))
    with pytest.raises(Ego2WebError) as e:
        read_model(p, RunManifest, "run manifest")
    message = str(e.value)
    assert message.startswith(f"{p}: not a valid run manifest (field 'started_at': ") and "\n" not in message
    p.write_text("{oops")
    with pytest.raises(Ego2WebError, match=r"not a valid run manifest \(not JSON"):
        read_model(p, RunManifest, "run manifest")
    with pytest.raises(FileNotFoundError):
        read_model(tmp_path / "none.json", RunManifest, "run manifest")
