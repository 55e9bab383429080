"""An episode folder as the judges read it: trajectory, screenshots, rendered pages, answer, archived pages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import Ego2WebError, JudgeError
from ..models import PageCapture, Trajectory, load_trajectory, read_model

__all__ = ["Episode", "Shot", "Render", "load_episode"]


@dataclass(frozen=True)
class Shot:
    """A screenshot of one step."""

    step: int
    path: Path
    rel: str
    url: str | None
    action: str


@dataclass(frozen=True)
class Render:
    """The page as rendered after one step (its ``pages/step-NNN.json``; the final page text of an
    episode recorded before per-step captures were kept)."""

    step: int
    url: str
    text: str
    rel: str


@dataclass
class Episode:
    """One episode on disk."""

    dir: Path
    trajectory: Trajectory
    screenshots: list[Shot]

    def renders(self) -> list[Render]:
        """Every rendered page the episode kept, in step order. An older episode without per-step
        captures offers its final page's text (``final_page_text``) for its final URL."""
        out: list[Render] = []
        for step in self.trajectory.steps:
            if not step.page:
                continue
            path = self.dir / step.page
            try:
                capture = read_model(path, PageCapture, "page capture", JudgeError)
            except FileNotFoundError:
                raise JudgeError(f"{path}: rendered page of step {step.index} missing from the episode "
                                 "folder") from None
            if capture.error is None:  # a page that could not be read offers no text
                out.append(Render(step.index, capture.url or step.url or "", capture.text, step.page))
        final = self.trajectory.final_url
        if not out and final and self.trajectory.final_page_text is not None:
            out.append(Render(self.trajectory.steps[-1].index, final, self.trajectory.final_page_text,
                              "trajectory.json#final_page_text"))
        return out

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
        if not path.resolve().is_relative_to(d.resolve()):  # a judge reads the episode's own files only
            raise JudgeError(f"{rel}: screenshot of step {step.index} lies outside the episode folder")
        if not path.is_file():
            raise JudgeError(f"{path}: screenshot of step {step.index} missing from the episode folder")
        shots.append(Shot(step.index, path, rel, step.url, step.action.describe()))
    return Episode(d, traj, shots)
