"""A scripted BrowserGym agent: reads BrowserGym's own observation, acts in its action space.

It has AgentLab's agent shape (``obs_preprocessor``, ``get_action(obs) -> (action,
info)``) and needs no model: it flattens the accessibility tree with BrowserGym's
``flatten_axtree_to_str``, clicks the link named ``link`` by its ``bid``, and on the product page
(``/item/`` in the URL) sends what matches ``answer`` in the tree to the user
(``send_msg_to_user``). Tests run it on ``browsergym/ego2web.<task>`` environments.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["LinkThenAnswerAgent", "run_agent"]


class LinkThenAnswerAgent:
    def __init__(self, link: str, answer: str) -> None:
        self.link, self.answer = link, re.compile(answer)
        self.seen: list[str] = []  # the goal texts it was given, for tests

    def obs_preprocessor(self, obs: dict[str, Any]) -> dict[str, Any]:
        from browsergym.utils.obs import flatten_axtree_to_str

        return {**obs, "axtree_txt": flatten_axtree_to_str(obs["axtree_object"])}

    def get_action(self, obs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.seen = [m["text"] for m in obs["goal_object"] if m["type"] == "text"]
        tree = obs["axtree_txt"]
        found = self.answer.search(tree)
        if found and "/item/" in obs["url"]:  # on the product's own page
            return f"send_msg_to_user({found.group(0)!r})", {"think": "the answer is on the page"}
        link = re.search(r"\[(\w+)\] link " + re.escape(repr(self.link)), tree)
        if link:
            return f"click({link.group(1)!r})", {"think": f"open {self.link}"}
        return "report_infeasible('the link is not on the page')", {"think": "lost"}


def run_agent(env: Any, agent: LinkThenAnswerAgent, max_steps: int = 6) -> list[str]:
    """The usual BrowserGym loop (reset, act until terminated or the budget), then ``close``; the actions."""
    actions = []
    try:
        obs, _ = env.reset()
        for _ in range(max_steps):
            action, _ = agent.get_action(agent.obs_preprocessor(obs))
            actions.append(action)
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    finally:
        env.close()
    return actions
