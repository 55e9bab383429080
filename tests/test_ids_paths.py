"""Ids and paths: run and snapshot ids like task ids, manifest paths inside the snapshot, report copies inside the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ego2web_replay.errors import Ego2WebError, SnapshotError, TaskFileError
from ego2web_replay.models import RunSettings, Task, TaskSuite, load_tasks
from ego2web_replay.runner.episode import find_snapshot
from ego2web_replay.runner.run import run_suite
from ego2web_replay.snapshots.snapshot import Snapshot, SnapshotWriter

SUITE = TaskSuite(tasks=[Task(id="t", instruction="x", start_url="http://127.0.0.1:9/")])


@pytest.mark.parametrize("run_id", ["/tmp/x", "../../x", "..", ".", "a b", "a/b", "x" * 300, ""])
def test_bad_run_ids_are_refused_before_anything_is_written(run_id, tmp_path):
    out = tmp_path / "runs" / "inner"
    with pytest.raises(Ego2WebError, match="run id") as e:
        run_suite(SUITE, agent_name="scripted", out=out, settings=RunSettings(), run_id=run_id)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "runs").exists() and not list(tmp_path.parent.glob("run.json"))


def _snapshot(root: Path, task: str, sid: str) -> Path:
    sw = SnapshotWriter(root, task, snapshot_id=sid)
    sw.writer.write_exchange(url="https://a.example/", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                             response_body=b"ok")
    sw.finalize()
    return sw.path


def test_snapshot_ids_cannot_reach_another_tasks_snapshot(tmp_path):
    _snapshot(tmp_path, "other", "ID")
    with pytest.raises(SnapshotError, match="snapshot id"):
        find_snapshot(tmp_path, "mine", "../other/ID")
    assert find_snapshot(tmp_path, "other", "ID") == tmp_path / "other" / "ID"


def test_long_task_ids_are_task_file_errors(tmp_path):
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps([{"id": "x" * 300, "instruction": "x", "start_url": "https://a.example/"}]))
    with pytest.raises(TaskFileError, match="over the limit of 200") as e:
        load_tasks(p)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("field,value", [("archive", "/etc/hostname"), ("archive", "../../etc/hostname"),
                                         ("index", "/etc/hostname"), ("task_id", "../x")])
def test_manifest_paths_must_stay_inside_the_snapshot(field, value, tmp_path):
    snap = _snapshot(tmp_path, "t", "s1")
    manifest = json.loads((snap / "manifest.json").read_text())
    manifest[field] = value
    (snap / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SnapshotError) as e:
        Snapshot.open(snap)
    assert "leaves its folder" in str(e.value) or "invalid id" in str(e.value)
    assert "\n" not in str(e.value)


def test_report_copies_only_files_inside_the_episode(tmp_path):
    from ego2web_replay.models import load_trajectory, save_model
    from ego2web_replay.testing.episodes import make_episode, make_run_manifest
    from ego2web_replay.tracking.ingest import record_run
    from ego2web_replay.tracking.report import build_report

    outside = tmp_path / "secret.png"
    outside.write_bytes(b"\x89PNG\r\n\x1a\n" + b"outside-the-run" * 10)
    run_dir = tmp_path / "runs" / "r1"
    make_run_manifest(run_dir)
    ep = make_episode(run_dir, "t", answer="a")
    traj = load_trajectory(ep / "trajectory.json")
    traj.steps[0].screenshot = str(outside)  # absolute
    traj.steps[-1].screenshot = "../../../../secret.png"  # relative, climbing out
    save_model(ep / "trajectory.json", traj)
    db = tmp_path / "t.duckdb"
    record_run(db, run_dir)
    out = tmp_path / "report"
    build_report(db, out, iterations=10)
    copied = [p for p in out.rglob("*") if p.is_file()]
    assert copied, "the report wrote nothing"
    assert not any(b"outside-the-run" in p.read_bytes() for p in copied)
