"""The one versioned model tree: the contract between the stages, the files, the database and the report.

=====================  ====================================  ==========================
model                  file                                  module
=====================  ====================================  ==========================
:class:`Task`          the task suite (JSON / JSONL)         :mod:`.task`
:class:`Action`        inside tasks and trajectories         :mod:`.action`
:class:`Trajectory`    ``<episode>/trajectory.json``         :mod:`.trajectory`
:class:`RunManifest`   ``<run>/run.json``                    :mod:`.run`
:class:`ReplayStats`   ``<episode>/replay_stats.json``       :mod:`.replay`
:class:`ReplayConfig`  in ``run.json`` and replay stats     :mod:`.replay_config`
:class:`Verdict`       ``<episode>/verdicts/<judge>.json``   :mod:`.verdict`
:class:`SnapshotManifest`  ``<snapshot>/manifest.json``      :mod:`.snapshot`
:class:`IndexEntry`    one line of ``<snapshot>/index.cdxj`` :mod:`.index`
=====================  ====================================  ==========================

Every file model has a ``version`` (see :class:`FileModel`); files are read with
:func:`read_model` and written with :func:`save_model`. The tracking tables are
loaded from these models and the report is drawn from them.
"""

from __future__ import annotations

from .action import ACTION_KINDS, Action, ActionKind
from .base import (
    MAX_ID_LENGTH,
    FileModel,
    check_id,
    check_relative_path,
    describe_validation_error,
    parse_model,
    read_model,
    save_model,
)
from .index import IndexEntry, IndexRow, index_row
from .replay import MatchOutcome, ReplayLogEntry, ReplayStats, StoreRequests
from .replay_config import ReplayConfig
from .run import RUN_MANIFEST, InputSettings, RunManifest, RunSettings, end_reason_counts, load_run
from .snapshot import FileDigest, SnapshotManifest, SnapshotSource, UpstreamFailure
from .task import TASK_VERSION, Task, TaskSuite, TimeRange, load_tasks, parse_timestamp
from .trajectory import (
    DOM_MAX_CHARS,
    EPISODE_ERRORS,
    PAGE_TEXT_MAX_CHARS,
    AgentSpec,
    EndReason,
    Mode,
    PageCapture,
    Step,
    Trajectory,
    episode_dir,
    episode_folder_name,
    load_trajectory,
    parse_episode_folder,
)
from .verdict import JudgeSpec, Verdict

__all__ = [
    "MAX_ID_LENGTH",
    "check_id",
    "check_relative_path",
    "ACTION_KINDS",
    "DOM_MAX_CHARS",
    "PAGE_TEXT_MAX_CHARS",
    "Action",
    "ActionKind",
    "AgentSpec",
    "EPISODE_ERRORS",
    "EndReason",
    "FileDigest",
    "FileModel",
    "IndexEntry",
    "IndexRow",
    "InputSettings",
    "JudgeSpec",
    "MatchOutcome",
    "Mode",
    "PageCapture",
    "RUN_MANIFEST",
    "ReplayConfig",
    "ReplayLogEntry",
    "ReplayStats",
    "RunManifest",
    "RunSettings",
    "SnapshotManifest",
    "UpstreamFailure",
    "SnapshotSource",
    "Step",
    "StoreRequests",
    "TASK_VERSION",
    "Task",
    "TaskSuite",
    "TimeRange",
    "Trajectory",
    "Verdict",
    "describe_validation_error",
    "end_reason_counts",
    "episode_dir",
    "episode_folder_name",
    "parse_episode_folder",
    "index_row",
    "load_run",
    "load_tasks",
    "load_trajectory",
    "parse_timestamp",
    "read_model",
    "parse_model",
    "save_model",
]
