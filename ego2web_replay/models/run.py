"""The run manifest, ``<run>/run.json``: a reproducibility journal of one run.

The runner writes it when a run starts and again when it ends; the judge reads
the suite from it; the tracker loads it into the ``runs`` table.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import Ego2WebError
from .base import FileModel, read_model
from .replay_config import ReplayConfig
from .trajectory import AgentSpec

__all__ = ["InputSettings", "RunSettings", "RunManifest", "load_run", "end_reason_counts", "RUN_MANIFEST"]

RUN_MANIFEST = "run.json"


class InputSettings(BaseModel):
    """How the task's video reaches the agent (recorded in the run manifest and the agent spec)."""

    modality: Literal["video", "keyframes", "captions", "none"] | None = Field(default=None, description="None: the agent's own default.")
    keyframes: int = Field(default=8, ge=1, description="keyframes: frames sampled over the whole video.")
    video_fps: float = Field(default=1.0, gt=0, description="video: frames per second when sent as frames.")
    video_transport: Literal["frames", "video_url"] = Field(
        default="frames", description="video: dense frames, or the file as a video_url content part.")
    max_side: int = Field(default=512, ge=16, description="Longest side of the frames sent, in pixels.")


class RunSettings(BaseModel):
    """How the episodes of a run are run; a resumed run keeps them (only ``workers`` may change)."""

    mode: str = Field(default="frozen", description="live, frozen or both.")
    max_steps: int = Field(default=40, description="Step budget of an episode.")
    timeout_s: float = Field(default=300.0, description="Time budget of an episode, in seconds.")
    action_timeout_s: float = Field(default=20.0, description="Time budget of one action, in seconds.")
    workers: int = Field(default=1, description="Episodes run at once (one process each).")
    snapshots_root: str | None = Field(default=None, description="Where frozen episodes find their snapshots.")
    snapshot_id: str | None = Field(default=None, description="The snapshot to replay (default: each task's latest).")
    guard: str = Field(default="open", description="Upstream guard mode of the live proxy.")
    replay: ReplayConfig = Field(default_factory=ReplayConfig, description="How frozen episodes are replayed "
                                 "(rules, repeated captures, freeze, miss policy, opt-in nearest capture).")
    keep_credentials: bool = Field(default=False, description="Keep credentials in live archives and "
                                                              "trajectories instead of redacting them.")
    inputs: InputSettings = Field(default_factory=InputSettings, description="What agents get of the video.")
    repeats: int = Field(default=1, ge=1, description="Times each task is run in each mode (agents are stochastic).")
    warm: bool = Field(default=True, description="Frozen episodes of step agents share their worker's Chromium "
                                                 "(a fresh context each) and replay front (runner/warm.py).")


class RunManifest(FileModel):
    """``run.json``."""

    FORMAT_VERSION = 1

    version: int = Field(default=1, ge=1, description="Format version of the file.")
    run_id: str = Field(description="The run's id (its folder name).")
    started_at: datetime = Field(description="When the run started (UTC).")
    finished_at: datetime | None = Field(default=None, description="When it last finished (UTC); None while running.")
    suite_path: str | None = Field(default=None, description="The task file run.")
    suite_sha256: str | None = Field(default=None, description="sha256 of the task file's bytes.")
    task_ids: list[str] = Field(default_factory=list, description="The tasks run (all of the suite when empty).")
    agent: AgentSpec = Field(description="The agent and its settings.")
    agent_name: str = Field(description="The --agent value as given.")
    modes: list[str] = Field(description="The modes run, in order (live, frozen).")
    settings: RunSettings = Field(description="How the episodes are run.")
    versions: dict[str, str] = Field(default_factory=dict, description="Versions of the tools (python, mitmproxy ...).")
    git_commit: str | None = Field(default=None, description="Commit of the ego2web-replay checkout, if any.")
    machine: dict[str, Any] = Field(default_factory=dict, description="Platform, CPUs, memory, host name.")
    command: list[str] = Field(default_factory=list, description="The command line that started the run.")
    snapshots: dict[str, str] = Field(default_factory=dict, description=(
        "The snapshot each task's frozen episodes replay (task id -> snapshot id), chosen when the run started "
        "(the task's newest then, or --snapshot-id): a snapshot recorded during the run changes nothing. A task "
        "with none then is absent (its frozen episodes are setup errors)."))
    shared_snapshots: dict[str, str] | None = Field(default=None, description=(
        "With --share-window on a local snapshots folder: the snapshots shared captures may answer from, for the "
        "whole run and its resumes (task id -> snapshot id), chosen when it started: the run's own tasks' pins "
        "and every other task's newest finished snapshot then. None: sharing off, or nothing to pin."))
    episodes: dict[str, int] = Field(default_factory=dict, description="Counts by end reason.")


def load_run(run_dir: Path) -> RunManifest:
    """Read ``<run_dir>/run.json``; one-line :class:`Ego2WebError` when missing or invalid."""
    p = Path(run_dir) / RUN_MANIFEST
    try:
        return read_model(p, RunManifest, "run manifest")
    except FileNotFoundError:
        raise Ego2WebError(f"{run_dir}: not a run folder (no {RUN_MANIFEST})") from None


def end_reason_counts(run_dir: Path) -> dict[str, int]:
    """How the run's finished episodes ended: counts by ``end_reason`` (``unreadable`` for a
    trajectory that cannot be read), from the ``trajectory.json`` files as they are now."""
    counts: dict[str, int] = {}
    for path in Path(run_dir).glob("episodes/*/*/trajectory.json"):
        try:
            data = json.loads(path.read_text("utf-8"))
            reason = str(data.get("end_reason", "?")) if isinstance(data, dict) else "unreadable"
        except (OSError, ValueError):
            reason = "unreadable"
        counts[reason] = counts.get(reason, 0) + 1
    return counts
