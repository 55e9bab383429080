"""A run pins each task's snapshot when it starts: every episode (resumed ones too) replays that one,
a snapshot recorded while the run goes on is not used, and on ``s3://`` no episode asks the store which
snapshot is the newest (a real moto server on 127.0.0.1)."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from ego2web_replay.models import (
    ReplayStats,
    RunSettings,
    load_run,
    load_trajectory,
    read_model,
    save_model,
)
from ego2web_replay.models.snapshot import SnapshotManifest
from ego2web_replay.replay.session import Replay
from ego2web_replay.runner.episode import find_snapshot
from ego2web_replay.runner.run import pin_snapshots, run_suite
from ego2web_replay.snapshots.location import name_of, upload_snapshot
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.ingest import record_run

pytestmark = pytest.mark.slow

TASK = "shop-mug-price"


def _newer_copy(snapshot: Path, dest_root: Path) -> Path:
    """A copy of ``snapshot`` under ``dest_root/<task>/`` as a newer snapshot (a later id and creation time)."""
    manifest = read_model(snapshot / "manifest.json", SnapshotManifest, "snapshot manifest")
    later = manifest.created_at + timedelta(days=1)
    new_id = later.strftime("%Y%m%dT%H%M%SZ")
    copy = dest_root / manifest.task_id / new_id
    shutil.copytree(snapshot, copy)
    save_model(copy / "manifest.json", manifest.model_copy(update={"snapshot_id": new_id, "created_at": later}))
    return copy


def _settings(root: Path | str, repeats: int) -> RunSettings:
    return RunSettings(mode="frozen", snapshots_root=str(root), guard="loopback", repeats=repeats, max_steps=8,
                       timeout_s=120)


def _episodes(run_dir: Path) -> list:
    return sorted((load_trajectory(f) for f in run_dir.glob("episodes/*/*/trajectory.json")), key=lambda t: t.repeat)


def test_a_snapshot_recorded_during_a_local_run_is_not_used_by_it_nor_by_its_resume(frozen_mug, tmp_path):
    root = tmp_path / "snapshots"
    shutil.copytree(frozen_mug["snapshots"], root)
    (first,) = (root / TASK).iterdir()
    added: list[Path] = []

    def record_a_newer_one(summary) -> None:  # noqa: ANN001 - called between episodes, in this process
        if not added:
            added.append(_newer_copy(first, root))

    run_dir, results = run_suite(frozen_mug["suite"], agent_name="scripted", out=tmp_path / "runs",
                                 settings=_settings(root, 3), on_episode=record_a_newer_one)
    assert [r.end_reason for r in results] == ["answered"] * 3
    assert name_of(find_snapshot(root, TASK, None)) == added[0].name != first.name  # the task's newest now
    assert [t.snapshot_id for t in _episodes(run_dir)] == [first.name] * 3
    assert load_run(run_dir).snapshots == {TASK: first.name}

    # a resumed run with a further repeat replays what the run started with, not the newest
    _, more = run_suite(frozen_mug["suite"], agent_name="scripted", out=tmp_path / "runs",
                        settings=_settings(root, 4), resume=run_dir)
    assert [(r.repeat, r.end_reason) for r in more] == [(3, "answered")]
    assert [t.snapshot_id for t in _episodes(run_dir)] == [first.name] * 4

    db = tmp_path / "t.duckdb"
    record_run(db, run_dir)
    with read_connection(db) as con:
        (pinned,) = con.execute("SELECT pinned_snapshots FROM runs").fetchone()
        ids = {r[0] for r in con.execute("SELECT snapshot_id FROM episodes").fetchall()}
    assert json.loads(pinned) == {TASK: first.name} and ids == {first.name}


def test_a_task_without_a_snapshot_at_the_start_stays_a_setup_error(frozen_mug, tmp_path):
    """The error found when the run started is each episode's: a snapshot recorded meanwhile is not used."""
    root = tmp_path / "snapshots"
    root.mkdir()
    added: list[Path] = []

    def record_one(summary) -> None:  # noqa: ANN001
        if not added:
            (snapshot,) = (frozen_mug["snapshots"] / TASK).iterdir()
            added.append(shutil.copytree(snapshot, root / TASK / snapshot.name))

    run_dir, results = run_suite(frozen_mug["suite"], agent_name="scripted", out=tmp_path / "runs",
                                 settings=_settings(root, 2), on_episode=record_one)
    assert [r.end_reason for r in results] == ["setup_error"] * 2 and added
    assert all(f"no snapshot of task '{TASK}'" in (r.error or "") for r in results)
    assert all(t.steps == [] and t.snapshot_id is None for t in _episodes(run_dir))
    assert load_run(run_dir).snapshots == {}


def test_pinning_looks_nothing_up_for_a_live_run_and_keeps_a_given_id(tmp_path):
    live = RunSettings(mode="live", snapshots_root=str(tmp_path / "nowhere"))
    assert pin_snapshots(live, [TASK]) == ({}, {})
    given = RunSettings(mode="frozen", snapshots_root=str(tmp_path / "nowhere"), snapshot_id="s1")
    assert pin_snapshots(given, [TASK, "other"]) == ({TASK: "s1", "other": "s1"}, {})
    pins, errors = pin_snapshots(RunSettings(mode="both"), [TASK])
    assert pins == {} and "frozen mode needs --snapshots" in errors[TASK]


def test_an_s3_run_asks_the_store_nothing_to_find_its_snapshot_and_ignores_one_uploaded_meanwhile(
        frozen_mug, s3, s3_server, tmp_path):
    """Every episode's ``store`` counts (replay_stats.json) hold no listing; after the first episode opened
    the snapshot (its manifest's ETag), none asks the store anything. The S3 server saw no listing after the run started, and
    a newer snapshot uploaded after the first episode is the task's newest but not the run's."""
    root = f"{s3}/snaps"
    (first,) = (frozen_mug["snapshots"] / TASK).iterdir()
    upload_snapshot(first, f"{root}/{TASK}/{first.name}")
    uploaded: list[str] = []

    def start(run_dir: Path, total: int, done: int) -> None:
        s3_server.record_requests()  # the run's own requests from here on: its episodes'

    def upload_a_newer_one(summary) -> None:  # noqa: ANN001
        if not uploaded:
            copy = _newer_copy(first, tmp_path / "newer")
            upload_snapshot(copy, f"{root}/{TASK}/{copy.name}")
            uploaded.append(copy.name)
            s3_server.record_requests()

    run_dir, results = run_suite(frozen_mug["suite"], agent_name="scripted", out=tmp_path / "runs",
                                 settings=_settings(root, 3), on_start=start, on_episode=upload_a_newer_one)
    assert [(r.end_reason, r.misses) for r in results] == [("answered", 0)] * 3
    later_requests = s3_server.requests()  # what episodes 2 and 3 asked of the store
    assert name_of(find_snapshot(root, TASK, None)) == uploaded[0] != first.name
    trajectories = _episodes(run_dir)
    assert [t.snapshot_path for t in trajectories] == [f"{root}/{TASK}/{first.name}"] * 3
    stores = [read_model(t_dir / "replay_stats.json", ReplayStats, "replay stats").store
              for t_dir in sorted(run_dir.glob("episodes/*/*"), key=lambda d: d.name)]
    assert all(s is not None and s.listings == 0 for s in stores), stores
    assert all(s is not None and s.lookups == 0 and s.gets == 0 for s in stores[1:]), stores
    assert later_requests == [], later_requests


def _other_task(root: Path, task: str, at, body: bytes) -> Path:  # noqa: ANN001 - a datetime
    """A one-page snapshot of another task recorded at ``at`` (a shared source within the window)."""
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    sw = SnapshotWriter(root, task, clock=lambda: at)
    sw.writer.write_exchange(url="http://other.example/", method="GET", request_headers=[("Accept", "*/*")],
                             request_body=b"", status=200, reason="OK",
                             response_headers=[("Content-Type", "text/plain")], response_body=body, date=at)
    sw.finalize()
    return sw.path


@pytest.mark.parametrize("warm", [False, True])
def test_shared_sources_are_pinned_when_the_run_starts_for_it_and_its_resume(frozen_mug, tmp_path, warm):
    """With --share-window every episode's replay draws on the other tasks' snapshots pinned when the run
    started (replay_stats ``shared_sources``): a newer snapshot of another task, or a first one of a new
    task, recorded mid-run within the window is no source for a later episode, nor for a resume."""
    from ego2web_replay.models import ReplayConfig

    root = tmp_path / "snapshots"
    shutil.copytree(frozen_mug["snapshots"], root)
    (first,) = (root / TASK).iterdir()
    at = read_model(first / "manifest.json", SnapshotManifest, "snapshot manifest").created_at
    other = _other_task(root, "other-task", at + timedelta(minutes=1), b"first")
    added: list[Path] = []

    def record_more(summary) -> None:  # noqa: ANN001 - called between episodes, in this process
        if not added:
            added.append(_other_task(root, "other-task", at + timedelta(minutes=2), b"newer"))
            added.append(_other_task(root, "new-task", at + timedelta(minutes=3), b"new"))

    settings = _settings(root, 3).model_copy(update={"replay": ReplayConfig(share_window_s=3600.0), "warm": warm})
    run_dir, results = run_suite(frozen_mug["suite"], agent_name="scripted", out=tmp_path / "runs",
                                 settings=settings, on_episode=record_more)
    assert [r.end_reason for r in results] == ["answered"] * 3 and len(added) == 2
    pinned = f"other-task/{other.name}"
    assert load_run(run_dir).shared_snapshots == {TASK: first.name, "other-task": other.name}

    def sources() -> list[list[str]]:
        return [read_model(d / "replay_stats.json", ReplayStats, "replay stats").shared_sources
                for d in sorted(run_dir.glob("episodes/*/*"), key=lambda d: d.name)]

    assert sources() == [[pinned]] * 3
    _, more = run_suite(frozen_mug["suite"], agent_name="scripted", out=tmp_path / "runs",
                        settings=settings.model_copy(update={"repeats": 4}), resume=run_dir)
    assert [r.end_reason for r in more] == ["answered"]
    assert sources() == [[pinned]] * 4
    db = tmp_path / "t.duckdb"
    record_run(db, run_dir)
    with read_connection(db) as con:
        (kept,) = con.execute("SELECT shared_snapshots FROM runs").fetchone()
    assert json.loads(kept) == {TASK: first.name, "other-task": other.name}

    # outside a run the replay draws on each task's newest, as before
    with Replay([first], ReplayConfig(share_window_s=3600.0)) as replay:
        assert replay.stats().shared_sources == [f"other-task/{added[0].name}", f"new-task/{added[1].name}"]


def test_start_lookups_run_concurrently_in_task_order_as_sequential_ones_would(frozen_mug, s3, tmp_path):
    """On s3:// the start's lookups (PIN_WORKERS at a time) give what one-at-a-time lookups give, in task
    order, each task without a snapshot its own error; progress is reported once per lookup."""
    import ego2web_replay.runner.run as run_module

    root = f"{s3}/concurrent"
    (first,) = (frozen_mug["snapshots"] / TASK).iterdir()
    tasks = [f"t{n:02d}" for n in range(12, 0, -1)]  # not in name order: the maps follow this order
    have = [t for i, t in enumerate(tasks) if i % 3]  # 4 of the 12 tasks have none
    for task in have:
        copy = shutil.copytree(first, tmp_path / "copies" / task / first.name)
        manifest = read_model(copy / "manifest.json", SnapshotManifest, "snapshot manifest")
        save_model(copy / "manifest.json", manifest.model_copy(update={"task_id": task}))
        upload_snapshot(copy, f"{root}/{task}/{first.name}")
    settings = _settings(root, 1)
    seen: list[tuple[int, int]] = []
    concurrent = pin_snapshots(settings, tasks, on_progress=lambda d, t: seen.append((d, t)))
    old = run_module.PIN_WORKERS
    run_module.PIN_WORKERS = 1
    try:
        sequential = pin_snapshots(settings, tasks)
    finally:
        run_module.PIN_WORKERS = old
    assert concurrent == sequential
    pins, errors = concurrent
    assert list(pins) == have and all(pins[t] == first.name for t in have)
    assert list(errors) == [t for t in tasks if t not in have]
    assert all(f"no snapshot of task '{t}'" in errors[t] for t in errors)
    assert seen == [(n, len(tasks)) for n in range(1, len(tasks) + 1)]


def test_run_says_how_long_slow_start_lookups_took_unless_quiet(frozen_mug, tmp_path, capsys, monkeypatch):
    """``run`` reports the start's lookups on stderr once they are slow (here: any), never with ``-q``."""
    import ego2web_replay.commands.run as run_command
    from ego2web_replay.cli import main

    monkeypatch.setattr(run_command, "PIN_SLOW_S", 0.0)
    common = ["run", str(frozen_mug["suite"].path), "--agent", "scripted", "--mode", "frozen", "--snapshots",
              str(frozen_mug["snapshots"]), "--out", str(tmp_path / "runs"), "--guard", "loopback", "--no-progress"]
    capsys.readouterr()
    assert main([*common, "--run-id", "loud"]) == 0
    assert "looked up 1 tasks' snapshots in" in capsys.readouterr().err
    assert main([*common, "--run-id", "quiet", "-q"]) == 0
    assert "looked up" not in capsys.readouterr().err
