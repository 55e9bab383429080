"""Task and task-suite models, loaded from JSON or JSONL.

Besides our own field names, the Ego2Web task-generation names are accepted:
``timestamps`` (``"00:55-01:00"`` or a list of them), ``allowed_domains``,
``must_match``, ``difficulty`` and ``why_video_dependent``; ``task_id``,
``task``/``question`` and ``url``/``web_url``/``website`` are aliases of
``id``, ``instruction`` and ``start_url``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import TaskFileError
from ..limits import InputLimitError, human, loads, max_json_bytes
from .action import Action
from .base import FileModel, check_id, describe_validation_error

__all__ = ["TimeRange", "Task", "TaskSuite", "load_tasks", "parse_timestamp", "TASK_VERSION"]

TASK_VERSION = 1
_ALIASES = {
    "task_id": "id",
    "task": "instruction",
    "question": "instruction",
    "web_url": "start_url",
    "url": "start_url",
    "website": "start_url",
    "video_path": "video",
    "key_points": "key_points",
    "answer": "expected_answer",
    "timestamps": "evidence",
}
_TS = re.compile(r"^\s*(?:(\d+):)?(\d{1,2}):(\d{1,2}(?:\.\d+)?)\s*$|^\s*(\d+(?:\.\d+)?)\s*s?\s*$")


def parse_timestamp(text: str | float | int) -> float:
    """``"01:02:03"``, ``"00:55"``, ``"12.5"`` or a number of seconds → seconds."""
    if isinstance(text, int | float):
        return float(text)
    m = _TS.match(str(text))
    if not m:
        raise ValueError(f"cannot read time {text!r}; write it as MM:SS, HH:MM:SS or seconds")
    if m.group(4) is not None:
        return float(m.group(4))
    hours = int(m.group(1) or 0)
    return hours * 3600 + int(m.group(2)) * 60 + float(m.group(3))


class TimeRange(BaseModel):
    """A range of the task's video (seconds) that holds the visual evidence."""

    model_config = ConfigDict(extra="forbid")

    start: float = Field(ge=0, description="Start, in seconds from the start of the video.")
    end: float = Field(ge=0, description="End, in seconds; not before start.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            if "-" not in value:
                t = parse_timestamp(value)
                return {"start": t, "end": t}
            a, b = value.split("-", 1)
            return {"start": parse_timestamp(a), "end": parse_timestamp(b)}
        if isinstance(value, list | tuple) and len(value) == 2:
            return {"start": parse_timestamp(value[0]), "end": parse_timestamp(value[1])}
        if isinstance(value, dict):
            return {k: parse_timestamp(v) if k in ("start", "end") else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        return self


class Task(FileModel):
    """One benchmark task (Ego2Web style); a suite file holds a list of them."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    FORMAT_VERSION = TASK_VERSION

    version: int = Field(default=TASK_VERSION, ge=1, description="Schema version of this model.")
    id: str = Field(min_length=1, description="Unique task id; also the snapshot folder name.")
    instruction: str = Field(min_length=1, description="What the agent is asked to do.")
    category: str = Field(default="general", description="Task category (e.g. shopping, knowledge).")
    start_url: str = Field(description="Where the agent starts.")
    allowed_domains: list[str] = Field(default_factory=list, description="Sites the task may use.")
    video: str | None = Field(default=None, description="Path of the egocentric video, relative to the suite file.")
    evidence: list[TimeRange] = Field(default_factory=list, description="Video time ranges holding the evidence.")
    must_match: list[str] = Field(default_factory=list, description="Cues the result must match (brand, colour ...).")
    expected_answer: str | None = Field(default=None, description="Reference answer, if known.")
    key_points: list[str] = Field(default_factory=list, description="Reference key points, if known.")
    answer_patterns: list[str] = Field(default_factory=list, description="Regexes the final answer must match (rule judge).")
    url_patterns: list[str] = Field(default_factory=list, description="Regexes the final URL must match (rule judge).")
    reference_actions: list[Action] = Field(default_factory=list, description="The oracle path, replayed by the scripted agent.")
    difficulty: str | None = Field(default=None, description="Ego2Web difficulty label.")
    why_video_dependent: str | None = Field(default=None, description="Why the video is needed.")
    rubric: dict[str, Any] | str | None = Field(default=None, description="A Mind2Web 2 rubric tree, inline or a file path.")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for alias, name in _ALIASES.items():
            if alias in out and alias != name and name not in out:
                out[name] = out.pop(alias)
        ev = out.get("evidence")
        if isinstance(ev, str | dict):
            out["evidence"] = [ev]
        for key in ("allowed_domains", "must_match", "key_points"):
            if isinstance(out.get(key), str):
                out[key] = [out[key]]
        if isinstance(out.get("id"), int):
            out["id"] = str(out["id"])
        return out

    @field_validator("id")
    @classmethod
    def _safe_id(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", v) or v in (".", ".."):
            raise ValueError("task ids may hold only letters, digits, '.', '_' and '-'")
        return check_id("task id", v)

    @field_validator("start_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://", v):
            raise ValueError(f"start_url must be an http(s) URL, got {v!r}")
        return v

    def video_path(self, base: Path | None) -> Path | None:
        """The video's path, resolved against the suite file's folder."""
        if not self.video:
            return None
        p = Path(self.video)
        return p if p.is_absolute() or base is None else base / p


class TaskSuite(BaseModel):
    """A list of tasks and where they came from."""

    path: Path | None = Field(default=None, description="The suite file, if read from one.")
    sha256: str | None = Field(default=None, description="sha256 of the suite file's bytes.")
    tasks: list[Task] = Field(description="The tasks, in file order.")

    def __iter__(self) -> Iterator[Task]:  # type: ignore[override]
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def base_dir(self) -> Path | None:
        return self.path.parent if self.path else None

    def get(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise TaskFileError(f"{self.path}: no task with id {task_id!r}")

    def select(self, ids: list[str] | tuple[str, ...] | None) -> list[Task]:
        """The tasks named in ``ids`` (all when empty), in suite order."""
        if not ids:
            return list(self.tasks)
        known = {t.id for t in self.tasks}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise TaskFileError(f"{self.path}: no task with id {', '.join(map(repr, unknown))}")
        return [t for t in self.tasks if t.id in set(ids)]


def _describe(err: ValidationError) -> str:
    text = describe_validation_error(err)
    return text if text.startswith("field '") else f"field '(task)': {text}"


def load_tasks(path: str | Path) -> TaskSuite:
    """Load a suite from a JSON list, a JSON object with ``tasks``, or JSONL.

    Raises :class:`TaskFileError` naming the file, the task and the field.
    """
    p = Path(path)
    try:
        if p.stat().st_size > max_json_bytes():
            raise TaskFileError(f"{p}: the task file is over the limit of {human(max_json_bytes())} "
                                "(EGO2WEB_MAX_JSON_BYTES)")
        raw = p.read_bytes()
    except FileNotFoundError:
        raise TaskFileError(f"{p}: task file not found") from None
    except OSError as e:
        raise TaskFileError(f"{p}: cannot read task file ({e.strerror})") from None
    text = raw.decode("utf-8", errors="replace")
    items: list[tuple[str, Any]] = []
    stripped = text.lstrip()
    if not stripped:
        raise TaskFileError(f"{p}: task file is empty")
    if p.suffix == ".jsonl" or (stripped[0] == "{" and "\n{" in stripped and not stripped.rstrip().endswith("]")
                                and _looks_jsonl(stripped)):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            items.append((f"line {n}", _loads(line, f"{p}: line {n}")))
    else:
        data = _loads(text, str(p))
        if isinstance(data, dict) and "tasks" in data:
            data = data["tasks"]
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise TaskFileError(f"{p}: expected a list of tasks or an object with 'tasks'")
        items = [(f"task #{i + 1}", d) for i, d in enumerate(data)]
    tasks: list[Task] = []
    seen: set[str] = set()
    for where, obj in items:
        name = obj.get("id") or obj.get("task_id") if isinstance(obj, dict) else None
        label = f"{where} (id {name!r})" if name else where
        if not isinstance(obj, dict):
            raise TaskFileError(f"{p}: {label}: a task must be a JSON object")
        try:
            task = Task.model_validate(obj)
        except ValidationError as e:
            raise TaskFileError(f"{p}: {label}: {_describe(e)}") from None
        if task.id in seen:
            raise TaskFileError(f"{p}: {label}: duplicate task id {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
    if not tasks:
        raise TaskFileError(f"{p}: no tasks in file")
    return TaskSuite(path=p.resolve(), sha256=hashlib.sha256(raw).hexdigest(), tasks=tasks)


def _loads(text: str, what: str) -> Any:
    try:
        return loads(text, what, TaskFileError)
    except InputLimitError as e:
        raise TaskFileError(str(e)) from None


def _looks_jsonl(text: str) -> bool:
    try:
        json.loads(text)
        return False
    except (ValueError, RecursionError):
        return True
