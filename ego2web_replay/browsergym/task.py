"""The BrowserGym task of one ego2web-replay task: its proxy, its start page, its goal.

BrowserGym creates the task, then launches its browsers, then calls :meth:`setup` with
the page. The proxy must run before the browser starts, so :class:`Ego2WebEnv` asks the
task for it (:meth:`Ego2WebTask.start`) when it launches Chromium; :meth:`setup` opens
the start URL through it and hands the instruction (and the video's frames or captions,
by ``--modality``) over as the goal. Judging is ours (``ego2web-replay judge``):
:meth:`validate` gives no reward and ends the episode when the agent answered
(``send_msg_to_user``) or gave up (``report_infeasible``).
"""

from __future__ import annotations

from typing import Any

from browsergym.core.task import AbstractBrowserTask

from ..errors import Ego2WebError
from ..models import AgentSpec
from .episode import BrowserGymEpisode, EpisodeSpec, goal_of

__all__ = ["Ego2WebTask"]

VIEWPORT = {"width": 1280, "height": 800}  # the runner's (browser.BrowserSession.new_context)


class Ego2WebTask(AbstractBrowserTask):
    """``spec``: the task, mode and replay settings that :func:`~ego2web_replay.browsergym.register` froze."""

    def __init__(self, seed: int | None, spec: EpisodeSpec, agent: AgentSpec, slow_mo: int = 0,
                 timeout: int = 10000) -> None:
        super().__init__(seed)
        self.spec, self.agent_spec = spec, agent
        self.viewport = dict(VIEWPORT)
        self.slow_mo, self.timeout = slow_mo, timeout
        self.locale, self.timezone_id = "en-US", "UTC"
        self.episode: BrowserGymEpisode | None = None

    @classmethod
    def get_task_id(cls) -> str:
        return "ego2web"

    def start(self) -> tuple[str, str]:
        """Start this episode's proxy (once); returns its URL and the SPKI pin of the CA to trust."""
        if self.episode is None:
            self.episode = BrowserGymEpisode(self.spec, self.agent_spec)
            self.episode.start()
        return self.episode.proxy_url, self.episode.spki

    def setup(self, page: Any) -> tuple[str | list[dict[str, Any]], dict[str, Any]]:
        if self.episode is None:
            raise Ego2WebError("an ego2web task runs only in its own environment: "
                               f"gymnasium.make('browsergym/ego2web.{self.spec.task.id}') after "
                               "ego2web_replay.browsergym.register(...)")
        episode = self.episode
        if episode.init_script:  # frozen: the page clock and Math.random as at capture time
            page.context.add_init_script(episode.init_script)
        try:
            page.goto(self.spec.task.start_url, wait_until="load", timeout=max(self.timeout, 30000))
        except Exception as e:  # noqa: BLE001 - the episode is written as not run, then BrowserGym hears it
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            episode.fail("browser_error", f"start page {self.spec.task.start_url} did not open: {message}")
            raise
        task = episode.agent_task()
        info = {"task_id": task.id, "start_url": task.start_url, "allowed_domains": list(task.allowed_domains),
                "mode": self.spec.mode, "episode": str(episode.final), "inputs": episode.inputs.record()}
        return goal_of(task, episode.inputs), info

    def validate(self, page: Any, chat_messages: list[Any]) -> tuple[float, bool, str, dict[str, Any]]:
        done = self.episode is not None and (self.episode.ended or (
            self.episode.pending is not None and self.episode.pending.kind in ("answer", "stop")))
        return 0.0, done, "", {}

    def teardown(self) -> None:
        if self.episode is not None:
            self.episode.finish(None)  # written already unless the environment was left without close()
