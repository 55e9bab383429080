"""Recording with agents: exploring agents run live after the reference path, their archives merged.

``record --explore N`` records each task's reference path first (its base snapshot), then runs
``N`` exploring agents over the recorded tasks, live, through the recording proxy: explorer ``i``
is its own run under the runs folder (``explore-<stamp>-<agent>-<i>``), so every live archive
keeps its episode, agent and settings (the built-in ``explorer`` gets seed ``seed + i``). Each
task's base is then extended with its explorers' archives within the window
(:func:`~ego2web_replay.snapshots.extend.extend_snapshot`: a new, newest snapshot of the task;
``provenance.json`` and the manifest's notes say which explorer recorded which capture).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..models import TaskSuite, parse_episode_folder
from ..replay.canonical import entry_key
from ..snapshots.extend import ExtendResult, extend_snapshot

__all__ = ["ExploreOptions", "TaskExploration", "explorer_settings", "run_explorers", "merge_explorers",
           "explorer_archives"]


@dataclass
class ExploreOptions:
    """How many exploring agents, which one, and how their episodes run."""

    count: int
    agent: str = "explorer"
    seed: int = 1
    steps: int = 8
    window: timedelta | None = timedelta(hours=1)
    runs: Path = Path("runs")
    guard: str = "open"
    upstream_ca: Path | None = None
    keep_credentials: bool = False
    action_timeout_s: float = 20.0
    timeout_s: float = 300.0


@dataclass
class TaskExploration:
    """What the explorers gave one task: the extended snapshot (None if none archived it)."""

    task_id: str
    base: Path
    archives: list[Path] = field(default_factory=list)
    extended: ExtendResult | None = None


def explorer_settings(opts: ExploreOptions, i: int) -> dict[str, Any]:
    """Agent settings of explorer ``i`` (0-based): the built-in explorer's seed and steps; none for others."""
    return {"seed": opts.seed + i, "steps": opts.steps} if opts.agent == "explorer" else {}


def run_explorers(suite: TaskSuite, task_ids: Sequence[str], opts: ExploreOptions,
                  on_episode: Callable[[Any], None] | None = None) -> list[Path]:
    """Run ``opts.count`` exploring agents live over ``task_ids``, one run folder each; returns the run folders."""
    from ..models import RunSettings
    from .run import run_suite

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    short = "".join(c if c.isalnum() else "-" for c in opts.agent.split(":")[0])[:16] or "agent"
    settings = RunSettings(mode="live", max_steps=2 * opts.steps + 2,  # a search is two steps (type, Enter)
                           timeout_s=opts.timeout_s,
                           action_timeout_s=opts.action_timeout_s, guard=opts.guard,
                           keep_credentials=opts.keep_credentials)
    runs = []
    for i in range(opts.count):
        run_dir, _ = run_suite(suite, agent_name=opts.agent, agent_settings=explorer_settings(opts, i),
                               out=opts.runs, settings=settings, task_ids=list(task_ids),
                               run_id=f"explore-{stamp}-{short}-{i + 1}", upstream_ca=opts.upstream_ca,
                               on_episode=on_episode)
        runs.append(run_dir)
    return runs


def explorer_archives(run_dirs: Sequence[Path], task_id: str) -> list[Path]:
    """The finished live archives of ``task_id`` in these run folders, run by run."""
    found = []
    for run_dir in run_dirs:
        for m in sorted(Path(run_dir).glob(f"episodes/{task_id}/live*/snapshots/{task_id}/*/manifest.json")):
            if (parse_episode_folder(m.parents[3].name) or ("",))[0] == "live":
                found.append(m.parent)
    return found


def merge_explorers(base: Path, run_dirs: Sequence[Path], task_id: str, window: timedelta | None,
                    root: Path | None = None) -> TaskExploration:
    """Extend ``base`` with the explorers' archives of its task (replay's canonical "same request"), into
    ``root`` (default: the base's own snapshots root)."""
    result = TaskExploration(task_id=task_id, base=Path(base), archives=explorer_archives(run_dirs, task_id))
    if result.archives:
        result.extended = extend_snapshot(base, result.archives, window=window, root=root,
                                          request_key=entry_key())
    return result
