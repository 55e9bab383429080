"""Building, writing and reading verdicts (``<episode>/verdicts/<judge>.json``)."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import JudgeError
from ..models import JudgeSpec, Mode, Verdict, read_model, save_model
from .client import ChatResult

__all__ = ["verdict_path", "write_verdict", "read_verdict", "error_verdict", "CallLog", "REPLACED", "replaced_by"]

#: the folder of an episode's ``verdicts/`` where a verdict another model or prompt version replaced is kept
REPLACED = "replaced"


def verdict_path(episode_dir: Path, judge: str) -> Path:
    return Path(episode_dir) / "verdicts" / f"{judge}.json"


def _identity(spec: JudgeSpec) -> tuple[str | None, str | None]:
    return spec.model, spec.prompt_version


def _replaced(path: Path, spec: JudgeSpec) -> tuple[bool, Verdict | None]:
    """Whether the verdict at ``path`` is one ``spec``'s would replace (made with another model or prompt
    version, or unreadable), and that verdict (None when unreadable)."""
    if not path.is_file():
        return False, None
    try:
        old = read_model(path, Verdict, "verdict", JudgeError)
    except JudgeError:
        return True, None
    return _identity(old.judge) != _identity(spec), old


def replaced_by(episode_dir: Path, spec: JudgeSpec) -> JudgeSpec | None:
    """The judge of the verdict ``spec``'s would replace in ``episode_dir``, when it was made with another model
    or prompt version (None when there is none, or it was made alike: judged again, as ``--resume`` is)."""
    replaced, old = _replaced(verdict_path(episode_dir, spec.name), spec)
    if not replaced:
        return None
    return old.judge if old is not None else JudgeSpec(name=spec.name, model="(unreadable verdict)")


def write_verdict(episode_dir: Path, verdict: Verdict) -> Path:
    """Write ``verdict``; one of the same judge made with another model or prompt version is not lost: it is
    moved to ``verdicts/replaced/<judge>-<model>-<when>.json`` (where ingest and compare do not read it)."""
    path = verdict_path(episode_dir, verdict.judge.name)
    replaced, old = _replaced(path, verdict.judge)
    if replaced:
        _keep(path, old)
    save_model(path, verdict)
    return path


def _keep(path: Path, old: Verdict | None) -> Path:
    model = (old.judge.model or "no-model") if old is not None else "unreadable"
    when = (old.judged_at if old is not None else None) or datetime.fromtimestamp(path.stat().st_mtime, UTC)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:60]
    folder = path.parent / REPLACED
    folder.mkdir(exist_ok=True)
    target = folder / f"{path.stem}-{slug}-{when.strftime('%Y%m%dT%H%M%SZ')}.json"
    n = 1
    while target.exists():
        n += 1
        target = target.with_name(f"{path.stem}-{slug}-{when.strftime('%Y%m%dT%H%M%SZ')}-{n}.json")
    os.replace(path, target)
    return target


def read_verdict(episode_dir: Path, judge: str) -> Verdict | None:
    path = verdict_path(episode_dir, judge)
    if not path.is_file():
        return None
    return read_model(path, Verdict, "verdict", JudgeError)


def error_verdict(spec: JudgeSpec, task_id: str, mode: Mode, error: str, *, episode_error: str | None = None) -> Verdict:
    """A failed judgment: success false, score 0, the reason in ``error`` (and, for an episode that could
    not run, its end reason in ``episode_error``)."""
    return Verdict(task_id=task_id, mode=mode, judge=spec, success=False, score=0.0, error=error,
                   episode_error=episode_error, judged_at=datetime.now(UTC))


class CallLog:
    """Collects the LLM calls of one judgment for the verdict."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cache_keys: list[str] = []

    def add[T](self, result: ChatResult[T]) -> T:
        self.calls.append(result.record())
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.cache_keys.append(result.cache_key)
        return result.parsed

    def fields(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cache_keys": self.cache_keys}
