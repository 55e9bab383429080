"""A judge's verdict on one episode, and which judge (with which settings) gave it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from .base import FileModel
from .trajectory import Mode

__all__ = ["JudgeSpec", "Verdict"]


class JudgeSpec(BaseModel):
    """Which judge produced a verdict, with every setting that affects it."""

    name: str = Field(description="ego2web, webjudge, webvoyager, rule or rubric.")
    prompt_version: str | None = Field(default=None, description="Version of the judge's prompts.")
    model: str | None = Field(default=None, description="The judge model, for LLM judges.")
    base_url: str | None = Field(default=None, description="The model endpoint, for LLM judges.")
    settings: dict[str, Any] = Field(default_factory=dict, description="Every other setting of the judge.")
    plugin: str | None = Field(default=None, description="The plugin it was built from (an entry point name or "
                                                         "module:factory); None for a built-in judge.")


class Verdict(FileModel):
    """One judge's verdict on one episode, stored at ``<episode>/verdicts/<judge>.json``."""

    FORMAT_VERSION = 1

    version: int = Field(default=1, ge=1, description="Format version of the file.")
    task_id: str = Field(description="The task judged.")
    mode: Mode = Field(description="The episode's mode (live or frozen).")
    repeat: int = Field(default=0, ge=0, description="The episode's repeat index (``run --repeats``).")
    judge: JudgeSpec = Field(description="The judge and its settings.")
    success: bool = Field(description="Whether the judge found the task accomplished.")
    score: float = Field(ge=0, le=1, description="1.0/0.0 for binary judges; partial credit for rubrics.")
    thoughts: str = Field(default="", description="The judge's reasoning.")
    key_points: list[str] = Field(default_factory=list, description="Key points the judge checked.")
    kept_screenshots: list[str] = Field(default_factory=list, description="Screenshots shown to the judge.")
    checks: list[dict[str, Any]] = Field(default_factory=list, description="Rule/rubric checks and their outcomes.")
    calls: list[dict[str, Any]] = Field(default_factory=list, description="LLM calls: prompt, raw reply, cache key, tokens.")
    prompt_tokens: int = Field(default=0, description="Prompt tokens over all calls.")
    completion_tokens: int = Field(default=0, description="Completion tokens over all calls.")
    cache_keys: list[str] = Field(default_factory=list, description="Judge cache keys of the calls.")
    judged_at: datetime | None = Field(default=None, description="When the verdict was given (UTC).")
    error: str | None = Field(default=None, description="Why the episode could not be judged, if so.")
    episode_error: str | None = Field(default=None, description="The end reason of an episode that could not run "
                                      "(setup_error, browser_error, infra_error): not judged, and ``error`` says why.")
