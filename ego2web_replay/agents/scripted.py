"""The scripted agent: performs the task's reference actions (the oracle path)."""

from __future__ import annotations

from ..models import Action, AgentSpec, Task
from .base import Observation

__all__ = ["ScriptedAgent"]


class ScriptedAgent:
    """Replays ``task.reference_actions`` in order, then stops."""

    #: it never reads the page, so the runner does not list the page's elements for it
    wants_elements = False

    def __init__(self) -> None:
        self.spec = AgentSpec(name="scripted", settings={}, input_modality="none")
        self._actions: list[Action] = []

    def start(self, task: Task) -> None:
        self._actions = list(task.reference_actions)
        if not self._actions or self._actions[0].kind != "goto":
            self._actions.insert(0, Action(kind="goto", url=task.start_url))

    def act(self, obs: Observation) -> Action:
        if obs.step < len(self._actions):
            return self._actions[obs.step]
        return Action(kind="stop")
