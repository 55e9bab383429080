"""Kept for old imports: the task models live in :mod:`ego2web_replay.models.task`."""

from __future__ import annotations

from .models.task import TASK_VERSION, Task, TaskSuite, TimeRange, load_tasks, parse_timestamp

__all__ = ["TimeRange", "Task", "TaskSuite", "load_tasks", "parse_timestamp", "TASK_VERSION"]
