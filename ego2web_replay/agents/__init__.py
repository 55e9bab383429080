"""Agents: built by :func:`make_agent` from a name.

* ``scripted``: the task's reference actions (the oracle path);
* ``command:<program>``: any program, handed the proxy, CA and task;
* ``openai``: a multimodal browsing agent over an OpenAI-compatible endpoint;
* ``module.path:factory``: your own :class:`StepAgent`/:class:`ProgramAgent` factory.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import AgentError
from .base import EpisodeEnv, Observation, ProgramAgent, StepAgent
from .command import CommandAgent
from .openai_agent import OpenAIAgent
from .scripted import ScriptedAgent

__all__ = ["make_agent", "KNOWN_AGENTS", "Observation", "EpisodeEnv", "StepAgent", "ProgramAgent",
           "ScriptedAgent", "CommandAgent", "OpenAIAgent"]

KNOWN_AGENTS = ("scripted", "command:<program>", "openai", "<module>:<factory>")


def make_agent(name: str, **settings: Any) -> StepAgent | ProgramAgent:
    """Build an agent from its name; unknown names raise :class:`AgentError` listing the known ones."""
    if name == "scripted":
        return ScriptedAgent()
    if name.startswith("command:"):
        return CommandAgent(name[len("command:"):])
    if name == "openai":
        return OpenAIAgent(**{k: v for k, v in settings.items() if v is not None})
    if ":" in name and not name.startswith(("http:", "https:")):
        mod, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise AgentError(f"cannot load agent factory {name!r}: {e}") from None
        return factory(**settings)
    raise AgentError(f"unknown agent {name!r}; known: {', '.join(KNOWN_AGENTS)}")
