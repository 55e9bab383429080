"""One BrowserGym episode as one of ours: the proxy behind it, and the episode folder it writes.

:class:`BrowserGymEpisode` starts the replay (frozen) or the recording proxy (live),
writes each BrowserGym step as a :class:`~ego2web_replay.models.Step` with its
screenshot (``screenshots/step-NNN.png``) and rendered page (``pages/step-NNN.json``),
and at the end stops the proxy and writes ``trajectory.json`` and ``replay_stats.json``
through the runner's own :func:`~ego2web_replay.runner.episode.write_episode`, into
``<run>/episodes/<task>/<mode>[-r<repeat>]`` (a reset of the same environment is the
next repeat).
"""

from __future__ import annotations

import base64
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..browser import take_screenshot
from ..errors import Ego2WebError
from ..models import (
    Action,
    AgentSpec,
    InputSettings,
    ReplayConfig,
    Step,
    Task,
    TaskSuite,
    Trajectory,
    episode_dir,
)
from ..proxy import project_ca
from ..redaction import Redactor
from ..runner.episode import _capture, _page_text, find_snapshot, write_episode
from ..runner.inputs import AgentInputs, agent_task, apply_inputs, prepare_inputs
from .actions import to_action
from .run import BrowserGymRun

__all__ = ["EpisodeSpec", "BrowserGymEpisode", "goal_of"]


@dataclass
class EpisodeSpec:
    """What one registered gymnasium id runs: a task, a mode, where its snapshots are, how to replay."""

    task: Task
    suite: TaskSuite
    run: BrowserGymRun
    mode: str = "frozen"
    snapshots_root: Path | str | None = None
    snapshot_id: str | None = None
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    replay_options: dict[str, Any] = field(default_factory=dict)  # Replay(...) keywords: guard_mode, engine ...
    guard: str = "open"
    upstream_ca: Path | None = None
    keep_credentials: bool = False
    inputs: InputSettings = field(default_factory=InputSettings)


def _data_url(path: Path) -> str:
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}.get(
        path.suffix.lower(), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def goal_of(task: Task, inputs: AgentInputs) -> str | list[dict[str, Any]]:
    """BrowserGym's goal: the instruction, then what ``--modality`` sends of the video (frames as
    ``image_url`` parts holding the images themselves, captions as text); never the evidence.
    BrowserGym's goals have text and images only, so a video is sent as its frames."""
    if not inputs.frames and not inputs.captions:
        return task.instruction
    goal: list[dict[str, Any]] = [{"type": "text", "text": task.instruction}]
    if inputs.frames:
        goal.append({"type": "text", "text": f"Frames of the egocentric video ({len(inputs.frames)}, "
                                             "sampled over the whole video), with their times:"})
        for t, path in inputs.frames:
            goal.append({"type": "text", "text": f"t={t:.1f}s"})
            goal.append({"type": "image_url", "image_url": _data_url(path)})
    if inputs.captions:
        goal.append({"type": "text", "text": "Captions of the egocentric video:\n" + "\n".join(inputs.captions)})
    return goal


class BrowserGymEpisode:
    """One episode of a registered task (see the module docstring)."""

    def __init__(self, spec: EpisodeSpec, agent: AgentSpec) -> None:
        self.spec = spec
        self.agent = agent.model_copy(deep=True)
        apply_inputs(self.agent, spec.inputs)
        self.run_dir = spec.run.open()
        self.repeat = 0
        while (episode_dir(self.run_dir, spec.task.id, spec.mode, self.repeat) / "trajectory.json").exists():
            self.repeat += 1
        self.final = episode_dir(self.run_dir, spec.task.id, spec.mode, self.repeat)
        self.out = self.final.with_name(self.final.name + ".partial")
        if self.out.exists():
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        self.traj = Trajectory(task_id=spec.task.id, instruction=spec.task.instruction, mode=spec.mode,  # type: ignore[arg-type]
                               agent=self.agent, started_at=datetime.now(UTC), repeat=self.repeat)
        self.traj.extra["browsergym_actions"] = []
        self.replay: Any = None
        self.live: Any = None
        self.proxy_url = ""
        self.spki = ""
        self.init_script = ""
        self.inputs = AgentInputs("none")
        self.pending: Action | None = None  # the step being run (its answer ends the episode)
        self.ended = False  # the agent answered or gave up
        self.finished = False
        self._stopped = False
        self._redact = Redactor.make(keep_credentials=spec.keep_credentials).url

    # -- start -----------------------------------------------------------------
    def start(self) -> tuple[str, str]:
        """Start the proxy; returns its URL and the CA's SPKI pin. On failure the episode is written
        as a ``setup_error`` and the project's error is raised."""
        from contextlib import ExitStack

        spec = self.spec
        try:
            self.inputs = prepare_inputs(spec.task, spec.suite.base_dir, self.agent.input_modality, spec.inputs)
            self.traj.extra["inputs"] = self.inputs.record()
            ca = project_ca()
            with ExitStack() as stack:
                if spec.mode == "frozen":
                    from ..replay.session import Replay
                    from ..snapshots.location import name_of

                    snap = find_snapshot(spec.snapshots_root, spec.task.id, spec.snapshot_id)
                    self.traj.snapshot_path, self.traj.snapshot_id = str(snap), name_of(snap)
                    self.replay = stack.enter_context(Replay([snap], spec.replay, ca=ca, **spec.replay_options))
                    self.proxy_url, self.init_script = self.replay.proxy_url, self.replay.init_script
                else:
                    from ..recorder.session import LiveRecording, RecordOptions

                    opts = RecordOptions(guard=spec.guard, upstream_ca=spec.upstream_ca, source="live-run",
                                         keep_credentials=spec.keep_credentials, allow=spec.task.allowed_domains)
                    self.live = stack.enter_context(LiveRecording(spec.task, self.out / "snapshots", opts, ca=ca))
                    self.proxy_url = self.live.proxy_url
                stack.pop_all()  # running until finish()
        except Ego2WebError as e:
            self.fail("setup_error", str(e))
            raise
        self.spki = ca.spki
        return self.proxy_url, self.spki

    def agent_task(self) -> Task:
        """The task as the agent may see it (judge-only fields cleared)."""
        return agent_task(self.spec.task, video=None)

    # -- steps -------------------------------------------------------------------
    def record(self, raw: str, page: Any, error: str | None, started: datetime, duration_s: float) -> Step:
        """Write down one BrowserGym step, with the page after it (screenshot and rendered text)."""
        action = self.pending or to_action(raw)
        self.pending = None
        i = len(self.traj.steps)
        step = Step(index=i, action=action, started_at=started, duration_s=round(duration_s, 3), error=error or None)
        self.traj.extra["browsergym_actions"].append(raw)
        if action.kind not in ("answer", "stop"):
            rel = f"screenshots/step-{i:03d}.png"
            try:
                take_screenshot(page, self.out / rel)
                step.screenshot = rel
            except Exception as e:  # noqa: BLE001 - noted on the step
                step.error = (step.error or "") + f" (screenshot failed: {str(e).splitlines()[0]})"
        _capture(page, self.out, step, self._redact)  # the step's URL and title too
        self.traj.steps.append(step)
        if action.kind == "answer":
            self.traj.answer, self.traj.end_reason, self.ended = action.answer, "answered", True
        elif action.kind == "stop":
            self.traj.end_reason, self.ended = "stopped", True
        return step

    # -- end ---------------------------------------------------------------------
    def fail(self, end_reason: str, error: str) -> None:
        """The episode could not go on: write it with this end reason (``setup_error``, ``browser_error``)."""
        if not self.finished:
            self.traj.end_reason, self.traj.error = end_reason, error  # type: ignore[assignment]
            self.finish(None)

    def finish(self, page: Any) -> Trajectory:
        """Stop the proxy and write the episode (once; later calls return what was written)."""
        if self.finished:
            return self.traj
        self.finished = True
        if page is not None:
            self.traj.final_page_text = _page_text(page)
        if not self.ended and self.traj.end_reason == "no_actions" and self.traj.steps:
            self.traj.end_reason = "step_budget"
            self.traj.error = (f"the BrowserGym harness ended the episode after {len(self.traj.steps)} steps "
                               "without an answer")
        if self.live is not None:
            self.live.pages_from(self.traj)  # the pages the episode saw, in the live snapshot's manifest
        self.stop()
        self.traj = write_episode(self.out, self.final, self.traj, mode=self.spec.mode, replay=self.replay,
                                  live=self.live, keep_credentials=self.spec.keep_credentials)
        self.spec.run.episode_done()
        return self.traj

    def stop(self) -> None:
        """Stop the proxy (the live archive is finalized); idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.replay is not None:
            self.replay.stop()
        if self.live is not None:
            self.live.finish()
