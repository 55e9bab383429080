"""An episode folder as the judges read it: trajectory, screenshots, answer, archived pages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import Ego2WebError, JudgeError
from ..models import Trajectory, load_trajectory

__all__ = ["Episode", "Shot", "load_episode"]


@dataclass(frozen=True)
class Shot:
    """A screenshot of one step."""

    step: int
    path: Path
    rel: str
    url: str | None
    action: str


@dataclass
class Episode:
    """One episode on disk."""

    dir: Path
    trajectory: Trajectory
    screenshots: list[Shot]

    @property
    def answer(self) -> str | None:
        return self.trajectory.answer

    def action_history(self) -> list[str]:
        """One line per step: index, action, resulting URL and any error."""
        lines = []
        for s in self.trajectory.steps:
            line = f"{s.index}. {s.action.describe()}"
            if s.url:
                line += f" -> {s.url}"
            if s.error:
                line += f" (error: {s.error})"
            lines.append(line)
        return lines

    def snapshot_dirs(self) -> list[Path | str]:
        """Archived snapshots of this episode: the live run's own, then the frozen one served (a folder,
        or the URL of one on object storage)."""
        from ..snapshots.location import is_remote

        dirs: list[Path | str] = []
        own = self.dir / "snapshot"
        if own.is_dir():
            dirs.append(own)
        if self.trajectory.snapshot_path and is_remote(self.trajectory.snapshot_path):
            dirs.append(self.trajectory.snapshot_path)
        elif self.trajectory.snapshot_path:
            p = Path(self.trajectory.snapshot_path)
            if not p.is_absolute() and not p.is_dir():
                p = self.dir / p  # relative to the working folder, else to the episode
            dirs.append(p)
        return dirs


def load_episode(directory: str | Path) -> Episode:
    """Read an episode folder. Raises :class:`JudgeError` for missing files."""
    d = Path(directory)
    if not d.is_dir():
        raise JudgeError(f"{d}: episode folder not found")
    if not (d / "trajectory.json").is_file():
        raise JudgeError(f"{d}: trajectory.json missing; is this an episode folder (<run>/episodes/<task>/<mode>)?")
    try:
        traj = load_trajectory(d)
    except Ego2WebError as e:
        raise JudgeError(str(e)) from None
    shots = []
    for step in traj.steps:
        rel = step.screenshot
        if rel is None:
            guess = f"screenshots/step-{step.index:03d}.png"
            if (d / guess).is_file():
                rel = guess
        if rel is None:
            continue
        path = d / rel
        if not path.is_file():
            raise JudgeError(f"{path}: screenshot of step {step.index} missing from the episode folder")
        shots.append(Shot(step.index, path, rel, step.url, step.action.describe()))
    return Episode(d, traj, shots)
