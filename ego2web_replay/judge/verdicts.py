"""Building, writing and reading verdicts (``<episode>/verdicts/<judge>.json``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import JudgeError
from ..models import JudgeSpec, Mode, Verdict, read_model, save_model
from .client import ChatResult

__all__ = ["verdict_path", "write_verdict", "read_verdict", "error_verdict", "CallLog"]


def verdict_path(episode_dir: Path, judge: str) -> Path:
    return Path(episode_dir) / "verdicts" / f"{judge}.json"


def write_verdict(episode_dir: Path, verdict: Verdict) -> Path:
    path = verdict_path(episode_dir, verdict.judge.name)
    save_model(path, verdict)
    return path


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
