"""The agent interface.

Two kinds of agent, both typed protocols:

* a :class:`StepAgent` is Python code that sees an :class:`Observation` (the
  task, the page's URL/title/screenshot and its interactive elements, the
  video evidence its input modality allows) and returns one
  :class:`~ego2web_replay.actions.Action` at a time; the runner performs the
  action in Chromium, enforces the step budget and the episode timeout, and
  writes the trajectory;
* a :class:`ProgramAgent` drives its own browser or HTTP client through the
  proxy it is handed and reports its own trajectory (``command:<program>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ..models import Action, AgentSpec, Task, Trajectory

__all__ = ["Observation", "EpisodeEnv", "StepAgent", "ProgramAgent", "InputModality"]

InputModality = Literal["video", "keyframes", "captions", "none"]


@dataclass
class Observation:
    """What a step agent sees before choosing its next action.

    ``task`` is the task as agents see it (no evidence ranges, no judge references);
    ``video``, ``keyframes`` and ``captions`` hold what the input modality sends, all
    derived from the whole video.
    """

    task: Task
    step: int
    url: str
    title: str
    screenshot: Path | None
    elements: list[dict[str, Any]] = field(default_factory=list)
    video: Path | None = None
    keyframes: list[tuple[float, Path]] = field(default_factory=list)
    captions: list[str] = field(default_factory=list)
    last_error: str | None = None
    history: list[Action] = field(default_factory=list)


@dataclass
class EpisodeEnv:
    """What a program agent is handed: the proxy to use and where to write."""

    proxy_url: str
    ca_file: Path
    spki: str
    task_file: Path
    out_dir: Path
    mode: str
    max_steps: int
    timeout_s: float
    inputs: Path | None = None
    repeat: int = 0
    #: the destinations that go through the proxy: what the snapshot holds (frozen) or the task's sites
    #: (live); the agent's own services must not be among them (:mod:`.routing`)
    proxied: list[Any] = field(default_factory=list)
    proxied_from: str = "snapshot"
    #: what holds the evidence (the suite, the run folders, the snapshots): covered in a sealed program's view
    hidden: list[str] = field(default_factory=list)


@runtime_checkable
class StepAgent(Protocol):
    """A step agent; it may also set ``wants_elements = False`` (the scripted agent does) when it never
    reads ``Observation.elements``: the runner then leaves them empty and skips listing them each step
    (no ``data-e2w-id`` marks are set in its pages either)."""

    spec: AgentSpec

    def start(self, task: Task) -> None:
        """Called once before the first observation of an episode."""

    def act(self, obs: Observation) -> Action:
        """Return the next action; ``answer``/``stop`` end the episode."""


@runtime_checkable
class ProgramAgent(Protocol):
    spec: AgentSpec

    def run_episode(self, task: Task, env: EpisodeEnv) -> Trajectory:
        """Run a whole episode through ``env.proxy_url`` and return its trajectory."""
