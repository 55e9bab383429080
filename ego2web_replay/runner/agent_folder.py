"""The agent's private folder: what it is handed, and nothing that leads back to the suite or the judge.

The evidence firewall (:mod:`.inputs`) decides *what* an agent gets; this
module decides *where* it lies. The frames the runner samples are cached beside
the judge's keyframes, whose ``index.json`` lists the evidence ranges, and the
video lies in the suite folder beside the full task file: a path into either
leads an agent that walks up from it straight to the evidence. So every
episode's agent is handed its own copies, in a folder made by
:func:`tempfile.mkdtemp` (mode 0700) in the system's temporary folder, outside
the suite, the run and the judge's cache::

    ego2web-agent-<pid>-XXXXXXXX/   (0700)
      task.json                 the task as agents see it          $EGO2WEB_TASK_FILE
      inputs.json               modality, video, frames, captions  $EGO2WEB_INPUTS
      ca.pem                    the proxy CA's certificate         $EGO2WEB_CA_FILE
      <video file>              the video (``video`` modality)     $EGO2WEB_VIDEO
      frames/000.png ...        the frames the modality sends
      out/                      where a program writes             $EGO2WEB_OUT

Files are copied, never linked: a symbolic link names its target, a path back
into the suite, and a hard link would let the agent write through to the
suite's video or to the frame cache that judges and later episodes read. Step
agents (Python code in the runner) get the same copies in their observations.

A program agent's ``task.json`` and ``inputs.json`` are also copied into the
episode folder (the record of what was handed out; the paths in them name the
private folder). When the episode ends, what the program wrote in ``out/``
moves to ``<episode>/agent/`` and the folder is removed. The folder's name
holds the runner process's id: one left by a worker that was killed
mid-episode is removed when the next episode starts (:func:`sweep`).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import Ego2WebError
from ..models import Task, Trajectory
from .inputs import AgentInputs, agent_task, write_inputs_file

__all__ = ["AgentFolder", "PREFIX", "sweep"]

PREFIX = "ego2web-agent-"
HANDED_OUT = ("task.json", "inputs.json")


class AgentFolder:
    """``with AgentFolder(task, inputs, ca_cert, episode=out) as folder:`` hand out ``folder.inputs``,
    ``folder.task_file``, ``folder.inputs_file``, ``folder.ca_file`` and ``folder.out_dir``.

    ``program``: a program agent's output (``out/``) and the record of what it was handed are kept in
    ``episode`` when the folder is left, even when the episode failed.
    """

    def __init__(self, task: Task, inputs: AgentInputs, ca_cert: Path, *, episode: Path,
                 program: bool = False) -> None:
        self._task, self._source, self._ca, self.episode = task, inputs, ca_cert, episode
        self.root = self.task_file = self.inputs_file = self.ca_file = self.out_dir = Path()
        self.inputs = inputs
        self._program, self._moved = program, False

    def __enter__(self) -> AgentFolder:
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))  # 0700, ours alone
        sweep(self.root.parent)
        try:
            self._fill()
        except OSError as e:
            _remove(self.root)
            raise Ego2WebError(f"cannot copy the agent's inputs into its private folder {self.root} "
                               f"({e.strerror or e}); free space in {self.root.parent} or set TMPDIR") from None
        except BaseException:
            _remove(self.root)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._keep_output()  # what a program wrote before it failed is kept too
        finally:
            _remove(self.root)

    def _fill(self) -> None:
        src = self._source
        video = _copy(src.video, self.root / src.video.name) if src.video is not None else None
        frames: list[tuple[float, Path]] = []
        if src.frames:
            (self.root / "frames").mkdir()
        for i, (t, path) in enumerate(src.frames):
            frames.append((t, _copy(path, self.root / "frames" / f"{i:03d}{path.suffix}")))
        self.inputs = AgentInputs(src.modality, video=video, frames=frames, captions=list(src.captions),
                                  note=src.note)
        self.task_file = self.root / "task.json"
        self.task_file.write_text(agent_task(self._task, video=video).model_dump_json(indent=2), "utf-8")
        self.inputs_file = write_inputs_file(self.inputs, self.root)
        self.ca_file = _copy(self._ca, self.root / "ca.pem")
        self.out_dir = self.root / "out"
        self.out_dir.mkdir()
        if self._program:  # the record, copied before the program can change its own folder
            for name in HANDED_OUT:
                shutil.copyfile(self.root / name, self.episode / name)

    def collect(self, traj: Trajectory, *, redact_url: Callable[[str], str] = str) -> None:
        """Move the program's output to ``<episode>/agent/``; its screenshots and page captures are then
        named from the episode, and a capture's URL redacted with ``redact_url`` (as the trajectory's)."""
        self._keep_output()
        for step in traj.steps:
            step.screenshot = self._own(step, "screenshot", self._adopted(step.screenshot))
            page = self._own(step, "page capture", self._adopted(step.page))
            if page and page != step.page:
                self._adopt_capture(self.episode / page, redact_url)
            step.page = page

    def _own(self, step: Any, what: str, named: str | None) -> str | None:
        """``named`` where it is a file the program wrote (now in ``<episode>/agent/``); else None, and the
        step says why: a path elsewhere (the suite's keyframes, a file of this machine) is no evidence of what
        the program saw, and judges read only the episode's own files."""
        if not named:
            return named
        path = (self.episode / named).resolve()
        if path.is_relative_to((self.episode / "agent").resolve()) and path.is_file():
            return named
        note = f"({what} {named!r} refused: not a file the program wrote in $EGO2WEB_OUT)"
        step.error = f"{step.error} {note}" if step.error else note
        return None

    def _adopt_capture(self, path: Path, redact_url: Callable[[str], str]) -> None:
        """An adopted page capture: its DOM file named from the episode too (as its ``dom`` says) and its
        URL redacted; a capture that does not read is left as written (judges say what is wrong with it)."""
        from ..models import PageCapture, read_model, save_model

        try:
            capture = read_model(path, PageCapture, "page capture")
        except (Ego2WebError, OSError):
            return
        dom, url = self._adopted(capture.dom), redact_url(capture.url)
        if (dom, url) != (capture.dom, capture.url):
            capture.dom, capture.url = dom, url
            save_model(path, capture)

    def _adopted(self, written: str | None) -> str | None:
        """A file the program wrote (relative, or absolute inside ``out/``) as ``agent/...``, else unchanged."""
        if not written:
            return written
        path = Path(written)
        if path.is_absolute():
            if not path.is_relative_to(self.out_dir):
                return written
            path = path.relative_to(self.out_dir)
        return str(Path("agent") / path) if (self.episode / "agent" / path).is_file() else written

    def _keep_output(self) -> None:
        if not self._program or self._moved or not self.out_dir.name:
            return
        self._moved = True
        if self.out_dir.is_dir():
            shutil.move(self.out_dir, self.episode / "agent")


def sweep(base: Path) -> list[Path]:
    """Remove the folders that runner processes now gone left in ``base`` (a worker killed mid-episode
    cannot remove its own); a folder is named after the process that made it. Returns those removed."""
    removed = []
    for path in base.glob(f"{PREFIX}*-*"):
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            st = path.lstat()
            if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
                continue  # not ours, or not a folder
            os.kill(int(pid), 0)
        except ProcessLookupError:  # its process is gone
            _remove(path)
            removed.append(path)
        except OSError:  # alive (another user's process), or gone meanwhile
            continue
    return removed


def _remove(root: Path) -> None:
    """Remove the folder, also where the program took away its own write permission inside it."""
    def retry(func: Any, path: str, exc: BaseException) -> None:
        parent = Path(path).parent
        if parent.is_relative_to(root):  # never touch a mode outside the folder (its parent is /tmp)
            try:
                os.chmod(parent, 0o700)
                func(path)
            except OSError:
                pass

    if root.is_dir():
        shutil.rmtree(root, onexc=retry)


def _copy(src: Path, dest: Path) -> Path:
    shutil.copyfile(src, dest)
    return dest
