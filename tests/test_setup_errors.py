"""Setup errors are setup errors: a corrupt snapshot fails a frozen episode as setup_error, and serve refuses it."""

from __future__ import annotations

import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import SnapshotError
from ego2web_replay.models import Task, load_trajectory
from ego2web_replay.replay.session import Replay
from ego2web_replay.runner.episode import EpisodeRequest, run_episode
from ego2web_replay.snapshots.snapshot import SnapshotWriter


@pytest.fixture()
def corrupt(tmp_path):
    sw = SnapshotWriter(tmp_path / "snaps", "t", snapshot_id="s1", compression="none")
    sw.writer.write_exchange(url="https://a.example/", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                             response_body=b"<html><body>hello</body></html>")
    sw.finalize()
    archive = next(sw.path.glob("archive.warc*"))
    data = bytearray(archive.read_bytes())
    at = data.index(b"hello")
    data[at:at + 5] = b"HELLO"  # same size, other bytes: only the digest can tell
    archive.write_bytes(bytes(data))
    return sw.path


def test_replay_refuses_a_snapshot_whose_archive_differs_from_its_manifest(corrupt):
    with pytest.raises(SnapshotError, match="corrupt snapshot: archive.warc: sha256 differs") as e:
        Replay([corrupt]).open()
    assert "\n" not in str(e.value)
    Replay([corrupt], check=False).open()  # asked to serve what it can


def test_serve_refuses_a_corrupt_snapshot_unless_asked(corrupt, capsys):
    assert main(["serve", str(corrupt), "--port", "0", "--duration", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert "corrupt snapshot" in err and "--allow-corrupt" in err and "\n" not in err


def test_a_frozen_episode_on_a_corrupt_snapshot_is_a_setup_error(corrupt, tmp_path, ca):
    task = Task(id="t", instruction="x", start_url="https://a.example/")
    summary = run_episode(EpisodeRequest(run_dir=tmp_path / "run", task=task, suite_dir=None, mode="frozen",
                                         agent_name="scripted", snapshots_root=corrupt.parent.parent))
    assert summary.end_reason == "setup_error" and "corrupt snapshot" in (summary.error or "")
    traj = load_trajectory(summary.path / "trajectory.json")
    assert traj.end_reason == "setup_error" and not traj.steps
