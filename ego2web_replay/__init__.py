"""ego2web-replay: reproducible live-web agent evaluation.

Record each task's web once into a WARC snapshot, replay it frozen and hermetic
to any agent, run the same agent live and frozen, judge both, and track
everything in DuckDB.

The names below are loaded from their modules on first use, so importing the
package (and the CLI) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .errors import Ego2WebError
    from .models import (
        Action,
        AgentSpec,
        ReplayStats,
        Step,
        Task,
        TaskSuite,
        Trajectory,
        load_tasks,
    )

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

_HOME = {"Action": "actions", "Ego2WebError": "errors", "AgentSpec": "models", "ReplayStats": "models",
         "Step": "models", "Trajectory": "models", "Task": "tasks", "TaskSuite": "tasks", "load_tasks": "tasks"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
