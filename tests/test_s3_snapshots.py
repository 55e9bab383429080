"""End to end on object storage: the demo site recorded to s3:// (a real moto server on 127.0.0.1),
listed, shown, verified, then replayed frozen from it with no local copy: every request served, no miss."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import load_trajectory
from ego2web_replay.tracking.db import read_connection

pytestmark = pytest.mark.slow

TASKS = ["shop-mug-price", "wiki-lighthouse-built"]


@pytest.fixture(scope="module")
def demo_suite(tmp_path_factory):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite

    site = DemoSite().start()
    yield write_demo_suite(tmp_path_factory.mktemp("s3demo") / "suite", site.url, TASKS)
    site.stop()


def test_record_to_s3_then_list_verify_and_replay_frozen_without_local_files(demo_suite, s3, tmp_path, data_home,
                                                                            capsys, ca):
    root = f"{s3}/demo"
    db = tmp_path / "t.duckdb"
    assert main(["record", str(demo_suite), "--snapshots", root, "--guard", "loopback", "--db", str(db),
                 "--no-progress"]) == 0
    assert f"recorded 2 task(s) into {root}" in capsys.readouterr().out
    assert not any((data_home / "upload-staging").rglob("manifest.json"))  # the staged copies are gone
    with read_connection(db) as con:
        paths = [r[0] for r in con.execute("SELECT path FROM snapshots ORDER BY task_id").fetchall()]
    assert len(paths) == 2 and all(p.startswith(f"{root}/") for p in paths)

    assert main(["snapshot", "list", "--snapshots", root, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(i["task_id"] for i in listed) == TASKS and all(i["complete"] for i in listed)
    for info in listed:
        assert main(["snapshot", "verify", info["path"]]) == 0
        assert capsys.readouterr().out.startswith(f"ok: {info['path']}")

    for name in ("object-cache", "remote-snapshots", "upload-staging"):  # nothing of the snapshots kept here
        shutil.rmtree(data_home / name, ignore_errors=True)
    assert main(["run", str(demo_suite), "--agent", "scripted", "--mode", "frozen", "--snapshots", root,
                 "--out", str(tmp_path / "runs"), "--run-id", "r1", "--guard", "loopback", "--no-db",
                 "--no-progress"]) == 0
    trajectories = [load_trajectory(f) for f in sorted((tmp_path / "runs" / "r1").glob("episodes/*/*/trajectory.json"))]
    assert [(t.task_id, t.end_reason) for t in trajectories] == [(t, "answered") for t in TASKS]
    for t in trajectories:
        assert t.replay is not None and t.replay.miss == 0 and t.replay.total > 0
        assert t.snapshot_path and t.snapshot_path.startswith(f"{root}/{t.task_id}/")
    # the rule judge reads the frozen episodes' archived pages from object storage too
    assert main(["judge", str(tmp_path / "runs" / "r1"), "--judge", "rule", "--tasks", str(demo_suite), "--no-db",
                 "--no-progress"]) == 0
    assert "frozen: 2/2 success" in capsys.readouterr().out


def test_a_store_that_stops_answering_is_one_line_in_record_and_a_setup_error_in_a_frozen_run(
        demo_suite, tmp_path, data_home, monkeypatch, capsys, ca):
    """A store frozen (SIGSTOP) at the recorder's first upload, then killed before a frozen run: one line
    naming the endpoint each time, nothing recorded lost, and the frozen episode a setup_error that says the
    store was unreachable (never "no snapshot ... record one")."""
    import ego2web_replay.recorder.upload as upload
    from ego2web_replay.testing.s3server import S3Server

    server = S3Server().start()
    try:
        for name, value in server.env(EGO2WEB_REPLAY_STORE_TIMEOUT="1", EGO2WEB_REPLAY_STORE_ATTEMPTS="2").items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        root = f"{server.create_bucket('stops')}/demo"
        assert main(["record", str(demo_suite), "--task", TASKS[0], "--snapshots", root, "--guard", "loopback",
                     "--no-progress"]) == 0
        capsys.readouterr()

        real = upload.record_task

        def record_then_freeze_the_store(*args, **kwargs):
            result = real(*args, **kwargs)
            server.pause()  # the store accepts connections from now on and never answers
            return result

        monkeypatch.setattr(upload, "record_task", record_then_freeze_the_store)
        assert main(["record", str(demo_suite), "--task", TASKS[1], "--snapshots", root, "--guard", "loopback",
                     "--no-progress"]) == 1
        err = capsys.readouterr().err
        failed = [line for line in err.splitlines() if f"{TASKS[1]}:" in line]
        assert len(failed) == 1 and f"the object store at {server.url} is unreachable" in failed[0], err
        staged = failed[0].split("the recorded snapshot stays in ")[1].strip()
        assert (Path(staged) / "manifest.json").is_file()  # nothing recorded is lost
        assert err.strip().splitlines()[-1] == "error: 1 of 1 task(s) failed to record"
    finally:
        server.stop()  # killed: connections refused from now on

    runs = tmp_path / "runs"
    assert main(["run", str(demo_suite), "--agent", "scripted", "--mode", "frozen", "--snapshots", root,
                 "--task", TASKS[0], "--out", str(runs), "--run-id", "r", "--guard", "loopback", "--no-db",
                 "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: every episode errored (1: setup_error)"), err
    traj = load_trajectory(runs / "r" / "episodes" / TASKS[0] / "frozen")
    assert traj.end_reason == "setup_error" and not traj.steps
    assert f"the object store at {server.url} is unreachable" in (traj.error or "")
    assert "record one" not in (traj.error or "") and "no snapshot" not in (traj.error or "")
    # no judge scores it: the verdict says why (the episode could not run), and it is counted apart
    from ego2web_replay.judge.verdicts import read_verdict

    assert main(["judge", str(runs / "r"), "--judge", "rule", "--tasks", str(demo_suite), "--no-db",
                 "--no-progress"]) == 1  # nothing could be judged
    captured = capsys.readouterr()
    assert "frozen: 0/0 success (n/a), 0 error(s), 1 episode error(s) (could not run; not judged)" in captured.out
    assert captured.err.strip().splitlines()[-1].startswith(
        "error: no episode could be judged: every one could not run (1: setup_error); first: not judged: ")
    verdict = read_verdict(runs / "r" / "episodes" / TASKS[0] / "frozen", "rule")
    assert verdict is not None and verdict.episode_error == "setup_error" and not verdict.success
    assert verdict.error and verdict.error.startswith("not judged: the episode could not run (setup_error: ")
    assert f"the object store at {server.url} is unreachable" in verdict.error
    assert main(["runs", "show", str(runs / "r")]) == 0
    assert "episode errors: 1 of 1 (setup_error 1)" in capsys.readouterr().out
