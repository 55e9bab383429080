"""What an agent is given: the evidence firewall and the four input modalities.

Agents never see a task's evidence ranges, nor anything derived from them, nor
the judge's references. :func:`agent_task` is the task as an agent sees it (the
judge-only fields cleared); :func:`prepare_inputs` turns the task's video into
what the chosen modality names, always from the **whole** video:

``video``      the video file itself (``video_transport="video_url"``: sent as a
               ``video_url`` part to endpoints that take video) or, by default,
               frames sampled densely at ``video_fps`` per second;
``keyframes``  ``keyframes`` frames sampled uniformly over the whole video;
``captions``   the timestamped captions stored beside the video
               (``ego2web-replay captions`` makes them);
``none``       nothing but the instruction.

Where the agent finds them is :mod:`.agent_folder`'s business: copies in a
private folder, never paths into the suite or the frames cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Ego2WebError
from ..models import InputSettings, Task

__all__ = ["InputSettings", "AgentInputs", "agent_task", "prepare_inputs", "apply_inputs", "MODALITIES",
           "JUDGE_ONLY_FIELDS", "write_inputs_file"]

MODALITIES = ("video", "keyframes", "captions", "none")

# Fields only judges read. reference_actions is the oracle path: only the scripted agent gets it.
JUDGE_ONLY_FIELDS = ("evidence", "expected_answer", "key_points", "answer_patterns", "url_patterns", "must_match",
                     "rubric", "why_video_dependent")  # the annotator's note says what the evidence shows


@dataclass
class AgentInputs:
    """What the runner hands the agent for one episode (and records in the trajectory)."""

    modality: str
    video: Path | None = None
    frames: list[tuple[float, Path]] = field(default_factory=list)
    captions: list[str] = field(default_factory=list)
    note: str | None = None

    def record(self) -> dict[str, Any]:
        """What the agent was sent, for ``trajectory.extra["inputs"]``."""
        out: dict[str, Any] = {"modality": self.modality, "frames": [round(t, 3) for t, _ in self.frames],
                               "captions": len(self.captions), "video": self.video.name if self.video else None}
        if self.note:
            out["note"] = self.note
        return out


def agent_task(task: Task, *, scripted: bool = False, video: Path | None = None) -> Task:
    """The task as an agent sees it: judge-only fields cleared, the video only where the modality sends it
    (``video``: the path the agent is handed), and none of the suite file's own extra fields (a source
    file's annotations may hold the answer)."""
    cleared: dict[str, Any] = {name: type(getattr(task, name))() if isinstance(getattr(task, name), list) else None
                               for name in JUDGE_ONLY_FIELDS}
    if not scripted:
        cleared["reference_actions"] = []
    cleared["video"] = str(video) if video is not None else None
    known = {name: getattr(task, name) for name in Task.model_fields}
    return Task.model_validate({**known, **cleared})


def prepare_inputs(task: Task, suite_dir: Path | None, modality: str, settings: InputSettings) -> AgentInputs:
    """The agent's inputs for ``modality``; :class:`Ego2WebError` when the video or captions cannot be read."""
    from ..media.keyframes import sample_video

    if modality not in MODALITIES:
        raise Ego2WebError(f"unknown input modality {modality!r}; use one of {', '.join(MODALITIES)}")
    video = task.video_path(suite_dir)
    if modality == "none":
        return AgentInputs(modality)
    if video is None:
        return AgentInputs(modality, note="the task has no video")
    if modality == "keyframes":
        frames = sample_video(video, frames=settings.keyframes, max_side=settings.max_side)
        return AgentInputs(modality, frames=[(f.timestamp, Path(f.path)) for f in frames])
    if modality == "video":
        if settings.video_transport == "video_url":
            if not video.is_file():
                raise Ego2WebError(f"{video}: video not found; fix the task's 'video' path or remove it")
            return AgentInputs(modality, video=video)
        frames = sample_video(video, fps=settings.video_fps, max_side=settings.max_side)
        return AgentInputs(modality, video=video, frames=[(f.timestamp, Path(f.path)) for f in frames])
    from ..media.captions import read_captions

    return AgentInputs(modality, captions=[c.line() for c in read_captions(video)])


def write_inputs_file(inputs: AgentInputs, out: Path) -> Path:
    """``<out>/inputs.json`` for program agents (``$EGO2WEB_INPUTS``): modality, video, frames, captions."""
    import json

    path = out / "inputs.json"
    data = {"modality": inputs.modality, "video": str(inputs.video) if inputs.video else None,
            "frames": [{"t": round(t, 3), "path": str(p)} for t, p in inputs.frames], "captions": inputs.captions}
    path.write_text(json.dumps(data, indent=1) + "\n", "utf-8")
    return path


def apply_inputs(spec: Any, settings: InputSettings) -> None:
    """Record the modality and input settings in an agent's spec (the run's, and each trajectory's)."""
    if settings.modality is not None:
        spec.input_modality = settings.modality
    spec.settings["inputs"] = settings.model_dump(exclude={"modality"})
