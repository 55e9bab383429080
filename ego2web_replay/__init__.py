"""ego2web-replay: reproducible live-web agent evaluation.

Record each task's web once into a WARC snapshot, replay it frozen and hermetic
to any agent, run the same agent live and frozen, judge both, and track
everything in DuckDB.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .actions import Action
from .errors import Ego2WebError
from .models import AgentSpec, ReplayStats, Step, Trajectory
from .tasks import Task, TaskSuite, load_tasks

__all__ = [
    "__version__",
    "Action",
    "AgentSpec",
    "Ego2WebError",
    "ReplayStats",
    "Step",
    "Task",
    "TaskSuite",
    "Trajectory",
    "load_tasks",
]
