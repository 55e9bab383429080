"""The run folder BrowserGym episodes land in: ``<out>/<run-id>/run.json`` and ``episodes/``.

One :func:`~ego2web_replay.browsergym.register` call is one run: every gymnasium id it
registers writes its episodes into the same run folder, in the layout ``run`` writes
(``episodes/<task>/<mode>[-r<repeat>]``), so ``judge``, ``compare``, ``track`` and the
report read them as any run's. The manifest is written when the first episode starts
and its episode counts after each episode; registering again with the same ``run_id``
and the other mode adds that mode to the run (live and frozen paired, as ``--mode both``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..browser import chromium_version
from ..errors import Ego2WebError
from ..models import (
    AgentSpec,
    RunManifest,
    RunSettings,
    TaskSuite,
    end_reason_counts,
    load_run,
    save_model,
)
from ..runner.run import _git_commit, _machine, _new_run_id
from ..versions import tool_versions

__all__ = ["BrowserGymRun", "browsergym_version"]


def browsergym_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("browsergym-core")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class BrowserGymRun:
    """A run folder shared by the environments of one ``register`` call."""

    out: Path
    suite: TaskSuite
    agent: AgentSpec
    agent_name: str
    settings: RunSettings
    task_ids: list[str]
    run_id: str | None = None
    command: list[str] = field(default_factory=lambda: list(sys.argv))

    def __post_init__(self) -> None:
        self.run_id = self.run_id or _new_run_id(self.agent_name)
        self.dir = Path(self.out) / self.run_id

    def open(self) -> Path:
        """Write ``run.json`` if it is not there yet (or add this mode to it); returns the run folder."""
        path = self.dir / "run.json"
        if path.exists():
            manifest = load_run(self.dir)
            if manifest.suite_sha256 and manifest.suite_sha256 != self.suite.sha256:
                raise Ego2WebError(f"{self.dir} was run on a different version of the task file; "
                                   "register with another run_id")
            if manifest.agent_name != self.agent_name:
                raise Ego2WebError(f"{self.dir} was run with agent {manifest.agent_name!r}, not "
                                   f"{self.agent_name!r}; register with another run_id")
            changed = False
            if self.settings.mode not in manifest.modes:
                manifest.modes = sorted([*manifest.modes, self.settings.mode], key=("live", "frozen").index)
                manifest.settings.mode = "both"
                if self.settings.mode == "frozen":
                    manifest.settings.snapshots_root = self.settings.snapshots_root
                changed = True
            for task_id in self.task_ids:
                if task_id not in manifest.task_ids:
                    manifest.task_ids.append(task_id)
                    changed = True
            if changed:
                save_model(path, manifest)
            return self.dir
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Ego2WebError(f"cannot create the run folder {self.dir}: {e.strerror or e}") from None
        manifest = RunManifest(run_id=self.dir.name, started_at=datetime.now(UTC),
                               suite_path=str(self.suite.path) if self.suite.path else None,
                               suite_sha256=self.suite.sha256, task_ids=list(self.task_ids), agent=self.agent,
                               agent_name=self.agent_name, modes=[self.settings.mode], settings=self.settings,
                               versions=tool_versions({"chromium": chromium_version(),
                                                       "browsergym-core": browsergym_version()}),
                               git_commit=_git_commit(), machine=_machine(), command=self.command)
        save_model(path, manifest)
        return self.dir

    def episode_done(self) -> None:
        """Count the run's finished episodes by end reason into ``run.json``."""
        manifest = load_run(self.dir)
        manifest.finished_at = datetime.now(UTC)
        manifest.episodes = end_reason_counts(self.dir)
        save_model(self.dir / "run.json", manifest)
