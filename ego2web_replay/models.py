"""Versioned models shared by the runner, the judges and the tracker.

An episode is one task run by one agent in one mode. On disk it is a folder::

    <run>/episodes/<task-id>/<mode>/
        trajectory.json      Trajectory (this module)
        screenshots/         step-NNN.png, one per step
        replay_stats.json    ReplayStats (frozen runs)
        snapshot/            the live run's own archived snapshot (live runs)
        verdicts/<judge>.json  one Verdict per judge (ego2web_replay.judge)
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from .actions import Action
from .atomic import atomic_write_text

__all__ = [
    "MatchOutcome",
    "ReplayLogEntry",
    "ReplayStats",
    "AgentSpec",
    "Step",
    "EndReason",
    "Trajectory",
    "Mode",
    "JudgeSpec",
    "Verdict",
    "FileDigest",
    "SnapshotManifest",
    "episode_dir",
    "load_trajectory",
    "save_model",
]

MatchOutcome = Literal["exact", "canonical", "fuzzy", "miss", "blocked", "websocket", "live"]
Mode = Literal["live", "frozen"]
EndReason = Literal["answered", "stopped", "step_budget", "timeout", "agent_error", "browser_error", "setup_error", "no_actions"]


class ReplayLogEntry(BaseModel):
    """One request seen by the replay proxy and how it was answered."""

    method: str
    url: str
    outcome: MatchOutcome
    status: int | None = Field(default=None, description="Status served to the client.")
    matched_url: str | None = Field(default=None, description="URL of the capture served, if any.")
    score: float | None = Field(default=None, description="Fuzzy similarity of the capture served.")


class ReplayStats(BaseModel):
    """Counts of how every request of a replay session was answered."""

    version: int = 1
    snapshots: list[str] = Field(default_factory=list, description="Snapshot folders served.")
    exact: int = 0
    canonical: int = 0
    fuzzy: int = 0
    miss: int = 0
    blocked: int = Field(default=0, description="Browser background requests answered by the guard.")
    websocket: int = Field(default=0, description="Websocket upgrades refused.")
    live: int = Field(default=0, description="Misses forwarded to the live web (diagnosis only; not hermetic).")
    missed_urls: list[str] = Field(default_factory=list)
    log: list[ReplayLogEntry] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        """Requests answered by the replay (guard-blocked background requests not included)."""
        return self.exact + self.canonical + self.fuzzy + self.miss + self.websocket + self.live

    @property
    def hermetic(self) -> bool:
        return self.live == 0


class AgentSpec(BaseModel):
    """Which agent produced a trajectory, with every setting that affects it."""

    name: str = Field(description="Agent kind: scripted, command, openai, or a Python factory path.")
    settings: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    input_modality: Literal["video", "keyframes", "captions", "none"] = "none"


class Step(BaseModel):
    """One action and what the page looked like after it."""

    index: int
    action: Action
    url: str | None = Field(default=None, description="Page URL after the action.")
    title: str | None = Field(default=None, description="Page title after the action.")
    started_at: datetime | None = None
    duration_s: float = 0.0
    screenshot: str | None = Field(default=None, description="Screenshot path, relative to the episode folder.")
    error: str | None = Field(default=None, description="Why the action failed, if it did.")
    thought: str | None = Field(default=None, description="The agent's stated reasoning, if any.")


class Trajectory(BaseModel):
    """Everything an agent did in one episode."""

    version: int = 1
    task_id: str
    instruction: str = ""
    mode: Mode
    snapshot_id: str | None = Field(default=None, description="Snapshot served (frozen) or written (live).")
    snapshot_path: str | None = None
    agent: AgentSpec
    steps: list[Step] = Field(default_factory=list)
    answer: str | None = None
    end_reason: EndReason = "no_actions"
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    replay: ReplayStats | None = Field(default=None, description="Replay counts (frozen mode).")
    final_page_text: str | None = Field(default=None, description="Visible text of the page when the episode ended "
                                        "(as rendered, after scripts ran).")
    extra: dict[str, Any] = Field(default_factory=dict, description="Agent-specific data (exit code, stderr ...).")

    @property
    def final_url(self) -> str | None:
        for step in reversed(self.steps):
            if step.url:
                return step.url
        return None


def episode_dir(run_dir: Path, task_id: str, mode: str) -> Path:
    """The folder of one episode inside a run folder."""
    return Path(run_dir) / "episodes" / task_id / mode


def save_model(path: Path, model: BaseModel) -> None:
    """Write a model as indented JSON, atomically."""
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


def load_trajectory(path: Path) -> Trajectory:
    """Read ``trajectory.json`` (or the folder holding it)."""
    from .errors import Ego2WebError

    p = Path(path)
    if p.is_dir():
        p = p / "trajectory.json"
    try:
        return Trajectory.model_validate(json.loads(p.read_text("utf-8")))
    except FileNotFoundError:
        raise Ego2WebError(f"{p}: trajectory not found; is this an episode folder?") from None
    except (json.JSONDecodeError, ValueError) as e:
        raise Ego2WebError(f"{p}: not a valid trajectory ({str(e).splitlines()[0]})") from None


class JudgeSpec(BaseModel):
    """Which judge produced a verdict, with every setting that affects it."""

    name: str = Field(description="ego2web, webjudge, webvoyager, rule or rubric.")
    prompt_version: str | None = None
    model: str | None = None
    base_url: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class Verdict(BaseModel):
    """One judge's verdict on one episode, stored at ``<episode>/verdicts/<judge>.json``."""

    version: int = 1
    task_id: str
    mode: Mode
    judge: JudgeSpec
    success: bool
    score: float = Field(ge=0, le=1, description="1.0/0.0 for binary judges; partial credit for rubrics.")
    thoughts: str = ""
    key_points: list[str] = Field(default_factory=list)
    kept_screenshots: list[str] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list, description="Rule/rubric checks and their outcomes.")
    calls: list[dict[str, Any]] = Field(default_factory=list, description="LLM calls: prompt, raw reply, cache key, tokens.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_keys: list[str] = Field(default_factory=list)
    judged_at: datetime | None = None
    error: str | None = None


class FileDigest(BaseModel):
    path: str = Field(description="Path relative to the snapshot folder.")
    sha256: str
    size: int


class SnapshotManifest(BaseModel):
    """``manifest.json`` of a snapshot folder ``snapshots/<task-id>/<snapshot-id>/``."""

    version: int = 1
    task_id: str
    snapshot_id: str
    created_at: datetime = Field(description="Capture start (UTC).")
    finished_at: datetime | None = None
    source: Literal["record", "live-run", "probe", "import"] = "record"
    start_url: str | None = None
    pages: list[str] = Field(default_factory=list, description="Main-document URLs visited, in order.")
    archive: str = Field(description="Archive file name, e.g. archive.warc.zst.")
    index: str = "index.cdxj"
    records: dict[str, int] = Field(default_factory=dict, description="Record counts by WARC-Type.")
    exchanges: int = 0
    payload_bytes: int = 0
    archive_bytes: int = 0
    files: list[FileDigest] = Field(default_factory=list)
    tools: dict[str, str] = Field(default_factory=dict, description="Versions: python, mitmproxy, chromium, ...")
    settings: dict[str, Any] = Field(default_factory=dict, description="Recording settings (format, redaction ...).")
    screenshots: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
