"""An exploring agent for the coverage benchmark: random clicks and searches with varied words, seeded.

Load it as ``explorer_agent:make`` (``benchmarks/`` on the import path) with ``seed`` in the agent
settings. Each step it searches the demo shop for a word drawn from a small vocabulary (40%) or
clicks a random same-site link of the page (60%); after ``steps`` actions it stops. Two agents
with the same seed do the same thing on the same pages.
"""

from __future__ import annotations

import random
from urllib.parse import quote_plus, urlsplit

from ego2web_replay.actions import Action
from ego2web_replay.agents.base import Observation
from ego2web_replay.models import AgentSpec
from ego2web_replay.tasks import Task

WORDS = ["mug", "tea", "kettle", "lamp", "red", "blue", "cup", "chair", "book", "shoe", "green", "glass"]


class Explorer:
    def __init__(self, seed: int = 0, steps: int = 6) -> None:
        self.seed, self.steps = int(seed), int(steps)
        self.spec = AgentSpec(name="explorer_agent:make", settings={"seed": self.seed, "steps": self.steps})
        self.rng = random.Random(self.seed)
        self.origin = ""

    def start(self, task: Task) -> None:
        self.rng = random.Random(f"{self.seed}:{task.id}")
        parts = urlsplit(task.start_url)
        self.origin = f"{parts.scheme}://{parts.netloc}"

    def act(self, obs: Observation) -> Action:
        if obs.step == 0:
            return Action(kind="goto", url=obs.task.start_url)
        if obs.step > self.steps:
            return Action(kind="stop")
        links = [e for e in obs.elements if e.get("tag") == "a" and str(e.get("href", "")).startswith("/")]
        if self.rng.random() < 0.4 or not links:
            word = self.rng.choice(WORDS)
            return Action(kind="goto", url=f"{self.origin}/shop/search?q={quote_plus(word)}")
        pick = self.rng.choice(links)
        return Action(kind="click", selector=f'[data-e2w-id="{pick["id"]}"]')


def make(seed: int = 0, steps: int = 6) -> Explorer:
    return Explorer(seed=seed, steps=steps)
