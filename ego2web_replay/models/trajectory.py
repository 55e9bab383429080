"""What an agent did in one episode, and which agent did it.

An episode is one task run by one agent in one mode. On disk it is a folder::

    <run>/episodes/<task-id>/<mode>/          repeat 0 (``run --repeats K``: <mode>-r1 ... <mode>-r<K-1>)
        trajectory.json      Trajectory (this module)
        screenshots/         step-NNN.png, one per step
        pages/               step-NNN.json (PageCapture: URL, title and visible text as rendered, after scripts
                             ran) and step-NNN.html (the DOM then, when it is at most DOM_MAX_CHARS), one per step
        replay_stats.json    ReplayStats (frozen runs)
        snapshot/            the live run's own archived snapshot (live runs)
        verdicts/<judge>.json  one Verdict per judge
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import Ego2WebError
from .action import Action
from .base import FileModel, read_model
from .replay import ReplayStats

__all__ = ["AgentSpec", "PageCapture", "Step", "PAGE_TEXT_MAX_CHARS", "DOM_MAX_CHARS", "EndReason", "EPISODE_ERRORS",
           "Trajectory", "Mode", "episode_dir", "episode_folder_name",
           "parse_episode_folder", "load_trajectory"]

Mode = Literal["live", "frozen"]
EndReason = Literal["answered", "stopped", "step_budget", "timeout", "agent_error", "browser_error", "setup_error", "no_actions",
                    "infra_error"]
#: End reasons that are not the agent's: the episode could not run (no snapshot, a corrupt one, the object store
#: unreachable), the runner's browser failed, or its worker or node was lost. No judge scores such an episode
#: (its verdict is an error saying why) and no success rate, pairing or pass@k counts it; it is counted on its
#: own, as an *episode error*. (``agent_error``, a crash of the agent itself, is the agent's.)
EPISODE_ERRORS: frozenset[str] = frozenset({"setup_error", "browser_error", "infra_error"})


class AgentSpec(BaseModel):
    """Which agent produced a trajectory, with every setting that affects it."""

    name: str = Field(description="Agent kind: scripted, command, openai, or a Python factory path.")
    settings: dict[str, Any] = Field(default_factory=dict, description="The agent's settings.")
    model: str | None = Field(default=None, description="The model driving the agent, if any.")
    input_modality: Literal["video", "keyframes", "captions", "none"] = Field(
        default="none", description="What the agent is shown of the task's video.")
    plugin: str | None = Field(default=None, description="The plugin it was built from (an entry point name or "
                                                         "module:factory); None for a built-in agent.")


PAGE_TEXT_MAX_CHARS = 400_000  # visible text kept of one page (Mind2Web 2's verifier reads up to as much)
DOM_MAX_CHARS = 2_000_000  # a larger DOM is not kept: its text is, and the capture says the DOM was left out


class PageCapture(BaseModel):
    """The page as the agent's browser rendered it after one step (``pages/step-NNN.json``).

    Judges that read a page read this: a value a script wrote into the page (a
    price, the stock, search results) is here, where the archived HTML lacks it.
    """

    step: int = Field(description="The step after which the page was captured.")
    url: str = Field(description="The page's URL at capture time.")
    title: str = Field(default="", description="The page's title at capture time.")
    text: str = Field(default="", description="Visible text of the page body (innerText), after scripts ran; "
                                              f"at most {PAGE_TEXT_MAX_CHARS:,} characters.")
    truncated: bool = Field(default=False, description="Whether ``text`` was cut at the limit.")
    dom: str | None = Field(default=None, description="The serialised DOM file (pages/step-NNN.html), relative "
                                                      "to the episode folder; None when not kept.")
    dom_note: str | None = Field(default=None, description="Why the DOM was not kept, when it was not.")
    captured_at: datetime | None = Field(default=None, description="When the page was captured (UTC).")
    error: str | None = Field(default=None, description="Why the page could not be read, when it could not "
                                                        "(``text`` is then empty and judges do not read it).")


class Step(BaseModel):
    """One action and what the page looked like after it."""

    index: int = Field(description="Position of the step in the episode.")
    action: Action = Field(description="What the agent did.")
    url: str | None = Field(default=None, description="Page URL after the action.")
    title: str | None = Field(default=None, description="Page title after the action.")
    started_at: datetime | None = Field(default=None, description="When the action started (UTC).")
    duration_s: float = Field(default=0.0, description="How long the action took, in seconds.")
    screenshot: str | None = Field(default=None, description="Screenshot path, relative to the episode folder.")
    page: str | None = Field(default=None, description="The rendered page after the action (a PageCapture file, "
                                                       "pages/step-NNN.json), relative to the episode folder; None "
                                                       "for episodes recorded before captures were kept.")
    error: str | None = Field(default=None, description="Why the action failed, if it did.")
    thought: str | None = Field(default=None, description="The agent's stated reasoning, if any.")


class Trajectory(FileModel):
    """Everything an agent did in one episode (``trajectory.json``)."""

    FORMAT_VERSION = 1

    version: int = Field(default=1, ge=1, description="Format version of the file.")
    task_id: str = Field(description="The task run.")
    instruction: str = Field(default="", description="The instruction the agent was given.")
    mode: Mode = Field(description="live (the real web) or frozen (a replayed snapshot).")
    repeat: int = Field(default=0, ge=0, description="Which run of this task and mode (0-based; ``run --repeats``).")
    snapshot_id: str | None = Field(default=None, description="Snapshot served (frozen) or written (live).")
    snapshot_path: str | None = Field(default=None, description="Folder of that snapshot.")
    agent: AgentSpec = Field(description="The agent and its settings.")
    steps: list[Step] = Field(default_factory=list, description="Every action, in order.")
    answer: str | None = Field(default=None, description="The agent's final answer, if it gave one.")
    end_reason: EndReason = Field(default="no_actions", description="Why the episode ended.")
    error: str | None = Field(default=None, description="What went wrong, when the episode failed.")
    started_at: datetime | None = Field(default=None, description="Episode start (UTC).")
    finished_at: datetime | None = Field(default=None, description="Episode end (UTC).")
    replay: ReplayStats | None = Field(default=None, description="Replay counts (frozen mode).")
    final_page_text: str | None = Field(default=None, description="Visible text of the page when the episode ended "
                                        "(as rendered, after scripts ran).")
    extra: dict[str, Any] = Field(default_factory=dict, description="Agent-specific data (exit code, stderr ...).")

    @property
    def episode_error(self) -> bool:
        """True when the episode ended for a reason that is not the agent's (:data:`EPISODE_ERRORS`)."""
        return self.end_reason in EPISODE_ERRORS

    @property
    def final_url(self) -> str | None:
        """The page URL after the last step that recorded one."""
        for step in reversed(self.steps):
            if step.url:
                return step.url
        return None


def episode_folder_name(mode: str, repeat: int = 0) -> str:
    """``frozen`` for repeat 0 (every run without ``--repeats``), ``frozen-r2`` for repeat 2."""
    return mode if repeat == 0 else f"{mode}-r{repeat}"


def parse_episode_folder(name: str) -> tuple[str, int] | None:
    """``(mode, repeat)`` of an episode folder's name; None for anything else (``frozen.partial``)."""
    mode, sep, rest = name.partition("-r")
    if mode not in ("live", "frozen"):
        return None
    if not sep:
        return mode, 0
    if not rest.isdigit() or rest.startswith("0"):
        return None
    return mode, int(rest)


def episode_dir(run_dir: Path, task_id: str, mode: str, repeat: int = 0) -> Path:
    """The folder of one episode (one repeat of a task in a mode) inside a run folder."""
    return Path(run_dir) / "episodes" / task_id / episode_folder_name(mode, repeat)


def load_trajectory(path: Path) -> Trajectory:
    """Read ``trajectory.json`` (or the folder holding it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "trajectory.json"
    try:
        return read_model(p, Trajectory, "trajectory")
    except FileNotFoundError:
        raise Ego2WebError(f"{p}: trajectory not found; is this an episode folder?") from None
