"""The seeded explorer: an agent that wanders a site the way an agent might, for recording coverage.

``explorer`` (settings ``seed``, ``steps``, ``search_share``, ``words``) opens the task's start
page, then, each step, either types a word from its vocabulary into a text or search field of
the page and presses Enter (``search_share`` of the steps, when the page has such a field), or
clicks one of the page's same-site links at random; after ``steps`` such actions it stops. A
page without a link or field to use sends it back to the start page. Two explorers with the same
seed on the same pages do the same thing, so a recording made by explorer seeds 1..N can be
measured with fresh seeds (``record --explore``, ``benchmarks/bench_coverage.py``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from ..errors import AgentError
from ..models import Action, AgentSpec, Task
from .base import Observation

__all__ = ["ExplorerAgent", "WORDS"]

WORDS = ("mug", "tea", "kettle", "lamp", "red", "blue", "cup", "chair", "book", "shoe", "green", "glass")
_TEXT_TYPES = ("", "text", "search")
_DOWNLOADS = (".csv", ".tsv", ".zip", ".gz", ".tar", ".db", ".pdf", ".xlsx")


class ExplorerAgent:
    """Random clicks on same-site links and searches with varied words, seeded (see the module)."""

    def __init__(self, seed: int = 0, steps: int = 6, search_share: float = 0.4,
                 words: Sequence[str] | None = None) -> None:
        try:
            self.seed, self.steps, self.search_share = int(seed), int(steps), float(search_share)
        except (TypeError, ValueError):
            raise AgentError("explorer: seed and steps must be integers, search_share a number") from None
        if self.steps < 1 or not 0 <= self.search_share <= 1:
            raise AgentError("explorer: steps must be at least 1 and search_share between 0 and 1")
        self.words = tuple(words) if words else WORDS
        self.spec = AgentSpec(name="explorer", input_modality="none",
                              settings={"seed": self.seed, "steps": self.steps, "search_share": self.search_share,
                                        **({"words": list(self.words)} if words else {})})
        self.rng = random.Random(self.seed)
        self.origin = ""
        self.start_url = ""
        self.done = 0
        self.pending: Action | None = None

    def start(self, task: Task) -> None:
        self.rng = random.Random(f"{self.seed}:{task.id}")
        parts = urlsplit(task.start_url)
        self.origin, self.start_url = f"{parts.scheme}://{parts.netloc}", task.start_url
        self.done, self.pending = 0, None

    def act(self, obs: Observation) -> Action:
        if self.pending is not None:  # the Enter after typing a word
            action, self.pending = self.pending, None
            return action
        if obs.step == 0:
            return Action(kind="goto", url=self.start_url or obs.task.start_url)
        if self.done >= self.steps:
            return Action(kind="stop")
        self.done += 1
        fields = [e for e in obs.elements if e.get("tag") == "input" and str(e.get("type", "")).lower() in _TEXT_TYPES]
        links = [e for e in obs.elements if e.get("tag") == "a" and self._same_site(str(e.get("href", "")))]
        if fields and (self.rng.random() < self.search_share or not links):
            target = f'[data-e2w-id="{self.rng.choice(fields)["id"]}"]'
            self.pending = Action(kind="press", selector=target, key="Enter")
            return Action(kind="type", selector=target, value=self.rng.choice(self.words))
        if not links:
            return Action(kind="goto", url=self.start_url)
        return Action(kind="click", selector=f'[data-e2w-id="{self.rng.choice(links)["id"]}"]')

    def _same_site(self, href: str) -> bool:
        if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
            return False
        parts = urlsplit(href)
        if parts.netloc and f"{parts.scheme}://{parts.netloc}" != self.origin:
            return False
        return not parts.path.lower().endswith(_DOWNLOADS)


def make_explorer(**settings: Any) -> ExplorerAgent:
    """Build the explorer; unknown settings are an :class:`AgentError`."""
    known = {"seed", "steps", "search_share", "words"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise AgentError(f"explorer: unknown setting(s) {', '.join(unknown)}; it takes {', '.join(sorted(known))}")
    return ExplorerAgent(**settings)
