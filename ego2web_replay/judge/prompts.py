"""Versioned prompt files and the parsers of the replies they ask for.

Prompt sets live in ``ego2web_replay/judge/prompts/<judge>-v<N>/<stage>.txt``
(see the README there). A custom folder with the same files can be given
instead; its version is then ``custom-<sha256 of its files>`` so verdicts still
name exactly which prompt was used.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from string import Template
from typing import Literal

from pydantic import BaseModel, Field

from ..errors import JudgeError
from .client import ReplyFormatError

__all__ = ["PromptSet", "load_prompts", "KeyPoints", "ScreenshotScore", "FinalJudgment",
           "parse_key_points", "parse_screenshot_score", "parse_final", "PROMPTS_DIR",
           "ClaimCheck", "parse_claim"]

PROMPTS_DIR = Path(__file__).parent / "prompts"
_SPLIT = "=== user ==="


class PromptSet:
    """The stage files of one prompt version."""

    def __init__(self, directory: Path, version: str) -> None:
        self.directory = directory
        self.version = version

    def render(self, stage: str, **values: object) -> tuple[str, str]:
        """(system, user) text of ``stage`` with ``$placeholders`` filled."""
        path = self.directory / f"{stage}.txt"
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            raise JudgeError(f"{path}: prompt file missing for stage {stage!r}") from None
        system, _, user = text.partition(_SPLIT)
        subst = {k: str(v) for k, v in values.items()}
        try:
            return Template(system.strip()).substitute(subst), Template(user.strip()).substitute(subst)
        except (KeyError, ValueError) as e:
            raise JudgeError(f"{path}: bad placeholder {e}; known: {', '.join(sorted(subst))}") from None


def load_prompts(judge: str, version: str = "v1", directory: str | Path | None = None) -> PromptSet:
    """The packaged prompt set ``<judge>-<version>``, or a custom folder."""
    if directory is not None:
        d = Path(directory)
        files = sorted(d.glob("*.txt"))
        if not files:
            raise JudgeError(f"{d}: no prompt files (*.txt) in folder")
        digest = hashlib.sha256(b"".join(f.name.encode() + b"\0" + f.read_bytes() for f in files)).hexdigest()
        return PromptSet(d, f"custom-{digest[:12]}")
    d = PROMPTS_DIR / f"{judge}-{version}"
    if not d.is_dir():
        known = sorted(p.name for p in PROMPTS_DIR.iterdir() if p.is_dir())
        raise JudgeError(f"no prompt set {d.name!r}; packaged sets: {', '.join(known)}")
    return PromptSet(d, d.name)


class KeyPoints(BaseModel):
    points: list[str] = Field(min_length=1)


class ScreenshotScore(BaseModel):
    summary: str
    score: int = Field(ge=1, le=5)


class FinalJudgment(BaseModel):
    thoughts: str
    status: Literal["success", "failure"]


def _clean(text: str) -> str:
    return text.replace("**", "").replace("__", "")


def parse_key_points(text: str) -> KeyPoints:
    """Numbered or bulleted lines (after ``Key Points:`` when present)."""
    body = _clean(text)
    m = re.search(r"key\s*points\s*:", body, re.I)
    if m:
        body = body[m.end():]
    points = []
    for line in body.splitlines():
        item = re.match(r"^\s*(?:\d+[.)]|[-*•])\s+(.+?)\s*$", line)
        if item:
            points.append(item.group(1))
    if not points:
        raise ReplyFormatError("no numbered key points found")
    return KeyPoints(points=points)


def parse_screenshot_score(text: str) -> ScreenshotScore:
    """``Summary: ...`` and ``Score: N`` (N from 1 to 5)."""
    body = _clean(text)
    scores = re.findall(r"score\s*:\s*\[?\s*(\d+)", body, re.I)
    if not scores:
        raise ReplyFormatError("no 'Score: N' line")
    score = int(scores[-1])
    if not 1 <= score <= 5:
        raise ReplyFormatError(f"score {score} is not between 1 and 5")
    m = re.search(r"summary\s*:\s*(.+?)(?=\n\s*score\s*:|\Z)", body, re.I | re.S)
    summary = " ".join((m.group(1) if m else body.split("Score")[0]).split())
    return ScreenshotScore(summary=summary, score=score)


def parse_final(text: str) -> FinalJudgment:
    """``Thoughts: ...`` and ``Status: success|failure`` (the last Status line counts)."""
    body = _clean(text)
    statuses = re.findall(r"status\s*:\s*\"?'?\s*(success|failure|not\s+success|fail|failed)\b", body, re.I)
    if not statuses:
        raise ReplyFormatError("no 'Status: success' or 'Status: failure' line")
    status: Literal["success", "failure"] = "success" if statuses[-1].lower() == "success" else "failure"
    m = re.search(r"thoughts\s*:\s*(.+?)(?=\n\s*status\s*:|\Z)", body, re.I | re.S)
    thoughts = (m.group(1) if m else re.split(r"status\s*:", body, flags=re.I)[0]).strip()
    return FinalJudgment(thoughts=thoughts, status=status)


class ClaimCheck(BaseModel):
    reason: str
    supported: bool


def parse_claim(text: str) -> ClaimCheck:
    """``Reason: ...`` and ``Verdict: supported|unsupported``."""
    body = _clean(text)
    found = re.findall(r"verdict\s*:\s*\"?'?\s*(supported|unsupported|not\s+supported)\b", body, re.I)
    if not found:
        raise ReplyFormatError("no 'Verdict: supported' or 'Verdict: unsupported' line")
    m = re.search(r"reason\s*:\s*(.+?)(?=\n\s*verdict\s*:|\Z)", body, re.I | re.S)
    reason = " ".join((m.group(1) if m else "").split())
    return ClaimCheck(reason=reason, supported=found[-1].lower() == "supported")
