"""Finding the two sides of a pair diff in a run folder.

A live episode keeps its own archive under ``<episode>/snapshots/<task>/<id>/``
(its trajectory's ``snapshot_path``); a frozen episode names the snapshot it
replayed. :func:`diff_run` diffs, for every task of a run with a live episode,
that archive against the snapshot the task's frozen episode replayed, or,
for a task without one, against the newest snapshot of the task under
``snapshots_root``; or against any one snapshot of a task (``against``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Ego2WebError, SnapshotError
from ..models import Trajectory, episode_dir, load_trajectory
from .pairdiff import PairDiff, diff_pair

__all__ = ["RunDiff", "live_archive", "frozen_snapshot", "diff_run"]


@dataclass
class RunDiff:
    """The pair diffs of one run, and why some tasks had none."""

    run_id: str
    diffs: list[PairDiff] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _snapshot_dir(path: Path) -> Path | None:
    return path if (path / "manifest.json").is_file() else None


def live_archive(episode: Path, traj: Trajectory) -> Path | None:
    """The live episode's own archive folder, if it was written."""
    found = sorted(p.parent for p in (episode / "snapshots").glob("*/*/manifest.json"))
    if found:
        return found[-1]
    if traj.snapshot_path:
        p = Path(traj.snapshot_path)
        return _snapshot_dir(p if p.is_absolute() else episode / p)
    return None


def frozen_snapshot(episode: Path, traj: Trajectory, snapshots_root: Path | None = None) -> Path | None:
    """The snapshot folder a frozen episode replayed (as recorded, or found under ``snapshots_root``)."""
    if traj.snapshot_path:
        p = Path(traj.snapshot_path)
        for cand in ([p] if p.is_absolute() else [p, episode.parents[3] / p]):
            if _snapshot_dir(cand):
                return cand
    if snapshots_root is not None and traj.snapshot_id:
        return _snapshot_dir(Path(snapshots_root) / traj.task_id / traj.snapshot_id)
    return None


def diff_run(run_dir: Path, *, snapshots_root: Path | None = None, task_ids: Sequence[str] = (),
             against: Path | None = None) -> RunDiff:
    """Pair diffs of every task of ``run_dir`` that has a live episode (see the module docstring).

    ``against`` (a snapshot folder) replaces the frozen side for the live episode of its own task,
    which alone is diffed then.
    """
    from .ingest import read_run_manifest, run_id_of

    run_dir = Path(run_dir)
    if against is not None:
        from ..snapshots import Snapshot

        try:
            task_ids = [Snapshot.open(against).manifest.task_id]
        except SnapshotError as e:
            raise SnapshotError(f"cannot diff against {against}: {e}") from None
    run_id = run_id_of(read_run_manifest(run_dir), run_dir)
    out = RunDiff(run_id=run_id)
    tasks = sorted(p.name for p in (run_dir / "episodes").iterdir() if p.is_dir()) \
        if (run_dir / "episodes").is_dir() else []
    for task in tasks:
        if task_ids and task not in task_ids:
            continue
        live_ep = episode_dir(run_dir, task, "live")
        if not (live_ep / "trajectory.json").is_file():
            continue
        try:
            traj = load_trajectory(live_ep)
        except Ego2WebError as e:
            out.skipped.append(f"{task}: {e}")
            continue
        archive = live_archive(live_ep, traj)
        if archive is None:
            out.skipped.append(f"{task}: the live episode has no archive of its own")
            continue
        snap = Path(against) if against is not None else None
        frozen_ep = episode_dir(run_dir, task, "frozen")
        if snap is None and (frozen_ep / "trajectory.json").is_file():
            try:
                snap = frozen_snapshot(frozen_ep, load_trajectory(frozen_ep), snapshots_root)
            except Ego2WebError:
                snap = None
        if snap is None and snapshots_root is not None:
            from ..snapshots import latest_snapshot

            try:
                snap = Path(latest_snapshot(Path(snapshots_root), task))
            except SnapshotError:
                snap = None
        if snap is None:
            hint = "" if snapshots_root else " (give --snapshots to diff against the task's newest snapshot)"
            out.skipped.append(f"{task}: no frozen snapshot to diff against{hint}")
            continue
        out.diffs.append(diff_pair(archive, snap, final_url=traj.final_url, task_id=task, run_id=run_id))
    return out
