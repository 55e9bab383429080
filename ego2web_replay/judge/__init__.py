"""Judges: turn an episode (trajectory, screenshots, answer) and the task's video
evidence into a :class:`~ego2web_replay.models.Verdict`.

- :func:`make_judge` / :data:`JUDGES` (``judge.registry``): ``ego2web`` (Ego2WebJudge),
  ``webjudge`` and ``webvoyager`` (baselines), ``rule`` (offline), ``rubric`` (Mind2Web 2 trees);
- :func:`judge_run` (``judge.run``): judge every episode of a run folder, verdicts written next to them;
- :class:`LLMClient` (``judge.client``): the OpenAI-compatible client with its content-hash call cache;
- :func:`agreement` (``judge.agreement``): a judge's agreement with human labels.

Importing this package is cheap: the names above are loaded from their modules
on first use (the OpenAI client is a heavy import the CLI must not pay for ``--help``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agreement import agreement
    from .client import LLMClient
    from .registry import JUDGES, Judge, make_judge
    from .run import judge_run

__all__ = ["JUDGES", "Judge", "LLMClient", "agreement", "judge_run", "make_judge"]

_HOME = {"JUDGES": "registry", "Judge": "registry", "make_judge": "registry", "LLMClient": "client",
         "agreement": "agreement", "judge_run": "run"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
