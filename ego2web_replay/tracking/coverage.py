"""Coverage of a frozen run: which documents and content fetches missed, and which live runs hold them.

:func:`run_coverage` reads a run's frozen episodes (their ``replay_stats.json``
log), keeps the misses that matter for validity (documents, scripts,
fetch/XHR; see :mod:`ego2web_replay.validity`), and looks each up in the
archives live runs keep of the same task (``episodes/<task>/live/snapshots/``,
and ``live-r<r>/`` for the repeats of ``run --repeats``, under the runs folder),
matched the way replay matches (exact or canonical, learned volatility
included). Every repeat's frozen episode is listed. ``snapshot extend`` then
merges those archives.

:func:`coverage_shares` sums one or more runs up per task (``snapshot coverage``): how many
frozen episodes stayed complete, degraded or went off the snapshot, and how many of their
documents and content fetches missed (which ones, most missed first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import Ego2WebError
from ..models import load_trajectory, parse_episode_folder
from ..validity import is_content

__all__ = ["MissedRequest", "TaskCoverage", "TaskShares", "run_coverage", "coverage_shares", "live_archives"]

_MISSED = ("miss", "fuzzy", "live")


class MissedRequest(BaseModel):
    method: str
    url: str
    kind: str | None = None
    held_by: list[str] = Field(default_factory=list, description="Live-run archives (snapshot folders) that hold it.")


class TaskCoverage(BaseModel):
    task_id: str
    repeat: int = Field(default=0, description="The repeat of the frozen episode (run --repeats).")
    validity: str | None
    snapshot: str | None
    missed: list[MissedRequest] = Field(default_factory=list)


def live_archives(runs_root: Path, task_id: str) -> list[Path]:
    """Every finished live-run archive of ``task_id`` under a runs folder, oldest first."""
    found = {m.parent for m in Path(runs_root).glob(f"*/episodes/{task_id}/live*/snapshots/{task_id}/*/manifest.json")
             if (parse_episode_folder(m.parents[3].name) or ("",))[0] == "live"}
    return sorted(found)


def _holders(archives: list[Path]) -> list[tuple[Path, Any]]:
    from ..replay.matching import MatchIndex
    from ..replay.session import load_captures, load_learned
    from ..snapshots.snapshot import Snapshot

    out: list[tuple[Path, Any]] = []
    for path in archives:
        try:
            snap = Snapshot.open(path)
            out.append((path, MatchIndex(load_captures([snap]), learned=load_learned([snap]))))
        except Ego2WebError:
            continue
    return out


def run_coverage(run_dir: Path, runs_root: Path | None = None) -> list[TaskCoverage]:
    """Per frozen episode of ``run_dir``: its validity and the content requests it missed, with their holders."""
    run_dir = Path(run_dir)
    if not (run_dir / "episodes").is_dir():
        raise Ego2WebError(f"{run_dir}: not a run folder (no episodes/); give a folder under runs/")
    root = Path(runs_root) if runs_root is not None else run_dir.parent
    report = []
    frozen = [f for f in run_dir.glob("episodes/*/frozen*/trajectory.json")
              if (parse_episode_folder(f.parent.name) or ("",))[0] == "frozen"]
    for traj_file in sorted(frozen, key=lambda f: (f.parent.parent.name, parse_episode_folder(f.parent.name))):
        traj = load_trajectory(traj_file)
        stats = traj.replay
        entries = [e for e in (stats.log if stats else []) if e.outcome in _MISSED
                   and is_content(e.kind, e.url)]
        seen: set[tuple[str, str]] = set()
        missed = []
        indexes = _holders(live_archives(root, traj.task_id)) if entries else []
        for e in entries:
            if (e.method, e.url) in seen:
                continue
            seen.add((e.method, e.url))
            held = [str(path) for path, index in indexes
                    if index.session().match(e.method, e.url).outcome in ("exact", "canonical")]
            missed.append(MissedRequest(method=e.method, url=e.url, kind=e.kind, held_by=held))
        report.append(TaskCoverage(task_id=traj.task_id, repeat=traj.repeat, validity=stats.validity if stats else None,
                                   snapshot=traj.snapshot_path, missed=missed))
    return report


class TaskShares(BaseModel):
    """How a task's frozen episodes (of one or more runs) fared."""

    task_id: str
    episodes: int = 0
    complete: int = 0
    degraded: int = 0
    off_snapshot: int = Field(default=0, description="Off-snapshot episodes.")
    unknown: int = Field(default=0, description="Episodes without replay stats (they ended before any replay).")
    shared: int = Field(default=0, description="Answers from another task's snapshot (suite sharing).")
    content_requests: int = Field(default=0, description="Documents and content fetches the episodes sent.")
    content_misses: int = Field(default=0, description="Those missed, answered by the nearest capture or forwarded.")
    missed: dict[str, int] = Field(default_factory=dict, description="Missed content requests (METHOD URL), "
                                                                     "most missed first.")

    def share(self, count: int) -> float:
        return count / self.episodes if self.episodes else 0.0


def _frozen_trajectories(run_dir: Path) -> list[Path]:
    if not (run_dir / "episodes").is_dir() or not (run_dir / "run.json").is_file():
        raise Ego2WebError(f"{run_dir}: not a run folder (no run.json and episodes/)")
    return sorted(f for f in run_dir.glob("episodes/*/frozen*/trajectory.json")
                  if (parse_episode_folder(f.parent.name) or ("",))[0] == "frozen")


def coverage_shares(run_dirs: list[Path]) -> list[TaskShares]:
    """Per task, over the frozen episodes of ``run_dirs``: complete, degraded and off-snapshot counts and the
    content requests that missed. :class:`Ego2WebError` for a folder that is not a run, or no frozen episode."""
    tasks: dict[str, TaskShares] = {}
    found = 0
    for run_dir in {Path(r).resolve(): Path(r) for r in run_dirs}.values():  # a run named twice counts once
        for traj_file in _frozen_trajectories(run_dir):
            found += 1
            traj = load_trajectory(traj_file)
            t = tasks.setdefault(traj.task_id, TaskShares(task_id=traj.task_id))
            t.episodes += 1
            stats = traj.replay
            validity = stats.validity if stats else None
            if validity == "off-snapshot":
                t.off_snapshot += 1
            elif validity in ("complete", "degraded"):
                setattr(t, validity, getattr(t, validity) + 1)
            else:
                t.unknown += 1
            for e in stats.log if stats else []:
                t.shared += e.outcome == "shared"
                if is_content(e.kind, e.url):
                    t.content_requests += 1
                    if e.outcome in _MISSED:
                        t.content_misses += 1
                        key = f"{e.method} {e.url}"
                        t.missed[key] = t.missed.get(key, 0) + 1
    if not found:
        raise Ego2WebError(f"no frozen episode in {', '.join(map(str, run_dirs))}; coverage is measured on "
                           "frozen runs (run --mode frozen)")
    for t in tasks.values():
        t.missed = dict(sorted(t.missed.items(), key=lambda kv: (-kv[1], kv[0])))
    return [tasks[k] for k in sorted(tasks)]
