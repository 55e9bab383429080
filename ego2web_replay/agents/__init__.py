"""Agents: built by :func:`make_agent` from a name.

* ``scripted``: the task's reference actions (the oracle path);
* ``explorer``: seeded random clicks and searches (recording coverage, ``record --explore``);
* ``command:<program>``: any program, handed the proxy, CA and task;
* ``openai``: a multimodal browsing agent over an OpenAI-compatible endpoint;
* ``browser-use``: the browser-use framework (the ``browser-use`` extra), its model over an
  OpenAI-compatible endpoint, its Chromium sealed behind our proxy;
* a plugin: the name of an ``ego2web_replay.agents`` entry point, or ``module.path:factory``
  (your own :class:`StepAgent`/:class:`ProgramAgent` factory; see :mod:`ego2web_replay.plugins`).
"""

from __future__ import annotations

from typing import Any

from ..errors import AgentError
from ..plugins import AGENT_GROUP, PluginError, build, find_factory, plugin_names
from .base import EpisodeEnv, Observation, ProgramAgent, StepAgent
from .command import CommandAgent
from .openai_agent import OpenAIAgent
from .scripted import ScriptedAgent

__all__ = ["make_agent", "KNOWN_AGENTS", "Observation", "EpisodeEnv", "StepAgent", "ProgramAgent",
           "ScriptedAgent", "CommandAgent", "OpenAIAgent"]

KNOWN_AGENTS = ("scripted", "command:<program>", "openai", "browser-use", "explorer", "<entry point>", "<module>:<factory>")


def make_agent(name: str, **settings: Any) -> StepAgent | ProgramAgent:
    """Build an agent from its name; unknown names raise :class:`AgentError` listing the known ones."""
    if name == "scripted":
        return ScriptedAgent()
    if name == "explorer":
        from .explorer import make_explorer

        return make_explorer(**{k: v for k, v in settings.items() if v is not None})
    if name.startswith("command:"):
        return CommandAgent(name[len("command:"):], base_url=settings.get("base_url"),
                            services=settings.get("services") or (), browser=bool(settings.get("browser")),
                            sandbox=settings.get("sandbox") or "auto")
    if name == "openai":
        return OpenAIAgent(**{k: v for k, v in settings.items() if v is not None})
    if name == "browser-use":
        from .browser_use_agent import BrowserUseAgent

        return BrowserUseAgent(**{k: v for k, v in settings.items() if v is not None})
    try:
        factory = find_factory(name, AGENT_GROUP, "agent")
        if factory is not None:
            agent = build(factory, name, settings, kind="agent")
            if not isinstance(agent, (StepAgent, ProgramAgent)):
                raise AgentError(f"agent {name!r} built a {type(agent).__name__}, which has neither act() "
                                 "(a step agent) nor run_episode() (a program agent)")
            return agent
    except PluginError as e:
        raise AgentError(str(e)) from None
    installed = plugin_names(AGENT_GROUP)
    raise AgentError(f"unknown agent {name!r}; known: {', '.join(KNOWN_AGENTS)}"
                     + (f"; installed plugins: {', '.join(installed)}" if installed else ""))
