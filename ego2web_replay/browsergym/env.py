"""BrowserGym's environment with every Chromium it launches sealed behind the episode's proxy.

``BrowserEnv.reset`` launches two browsers through BrowserGym's global Playwright: the
task's and the chat window's, both Playwright's own downloaded Chromium, with arguments
it fixes itself (so ``pw_chromium_kwargs`` cannot carry the flags). :class:`Ego2WebEnv`
hands BrowserGym, for the length of each reset, a Playwright whose ``chromium.launch``
starts Debian's Chromium (``browser.chromium_executable``) with the project's quiet
flags, :func:`~ego2web_replay.browser.sealed_chromium_args` and the CA's SPKI pin,
through the proxy (Playwright adds ``<-loopback>``, so loopback sites go through it
too). The chat window (BrowserGym 0.14 cannot turn it off) is sealed the same way:
it loads nothing, and if it did, the proxy would count it. ``ignore_https_errors``, a
proxy or a browser of one's own are refused: they would unseal the episode.

Each ``step`` is written down by the task's :class:`~.episode.BrowserGymEpisode`;
the episode is written when the agent answers or gives up, at the next ``reset``, or
at ``close``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from browsergym.core.env import BrowserEnv

from ..browser import CHROMIUM_FLAGS, acquire_playwright, chromium_executable, sealed_chromium_args
from ..errors import BrowserError, Ego2WebError
from ..models import AgentSpec
from .actions import to_action
from .episode import BrowserGymEpisode, EpisodeSpec
from .task import Ego2WebTask

__all__ = ["Ego2WebEnv", "SEALED_LAUNCH_KEYS", "UNSEALING_CONTEXT_KEYS"]

SEALED_LAUNCH_KEYS = ("executable_path", "proxy", "args", "ignore_default_args", "env", "channel")
UNSEALING_CONTEXT_KEYS = ("ignore_https_errors", "proxy", "bypass_csp", "service_workers")
TASK_SETTINGS = ("slow_mo", "timeout")  # BrowserGym task settings a caller may give (milliseconds)


class _SealedChromium:
    """``playwright.chromium`` whose ``launch`` starts Debian's Chromium sealed behind ``proxy()``."""

    def __init__(self, chromium: Any, proxy: Any, launches: list[dict[str, Any]]) -> None:
        self._chromium, self._proxy, self.launches = chromium, proxy, launches

    def launch(self, **kwargs: Any) -> Any:
        proxy_url, spki = self._proxy()
        # BrowserGym shows scrollbars in its screenshots (it drops Playwright's --hide-scrollbars)
        args = [a for a in CHROMIUM_FLAGS if a != "--hide-scrollbars"] + sealed_chromium_args(proxy_url)
        args += [f"--ignore-certificate-errors-spki-list={spki}"] + list(kwargs.pop("args", None) or ())
        executable = chromium_executable()
        self.launches.append({"executable_path": executable, "proxy": proxy_url, "args": list(args),
                              "headless": kwargs.get("headless", True)})
        return self._chromium.launch(executable_path=executable, proxy={"server": proxy_url}, args=args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chromium, name)


class _SealedPlaywright:
    def __init__(self, playwright: Any, proxy: Any, launches: list[dict[str, Any]]) -> None:
        self._playwright = playwright
        self.chromium = _SealedChromium(playwright.chromium, proxy, launches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._playwright, name)


class Ego2WebEnv(BrowserEnv):
    """A :class:`browsergym.core.env.BrowserEnv` running one registered ego2web-replay task."""

    def __init__(self, spec: EpisodeSpec, agent: AgentSpec, *, slow_mo: int | None = None,
                 timeout: int | None = None, **kwargs: Any) -> None:
        bad = [k for k in SEALED_LAUNCH_KEYS if k in kwargs.get("pw_chromium_kwargs", {})]
        bad += [k for k in UNSEALING_CONTEXT_KEYS if k in kwargs.get("pw_context_kwargs", {})]
        if bad:
            raise BrowserError(f"{', '.join(bad)}: not allowed for an ego2web task; its browser is Debian's "
                               "Chromium sealed behind the replay (or recording) proxy, trusting only the "
                               "project CA")
        task_kwargs: dict[str, Any] = dict(kwargs.pop("task_kwargs", None) or {})  # AgentLab's EnvArgs may pass it
        unknown = sorted(set(task_kwargs) - set(TASK_SETTINGS))
        if unknown:
            raise Ego2WebError(f"task_kwargs {', '.join(unknown)}: an ego2web task takes only "
                               f"{' and '.join(TASK_SETTINGS)}; its task, mode and snapshots are set by register()")
        task_kwargs.update({k: v for k, v in (("slow_mo", slow_mo), ("timeout", timeout)) if v is not None})
        task_kwargs.update(spec=spec, agent=agent)
        super().__init__(Ego2WebTask, task_kwargs=task_kwargs, **kwargs)
        self.launches: list[dict[str, Any]] = []  # what each reset launched (tests and the trajectory read it)

    @property
    def episode(self) -> BrowserGymEpisode | None:
        """The episode now running (or last run)."""
        return self.task.episode if isinstance(self.task, Ego2WebTask) else None

    def _proxy(self) -> tuple[str, str]:
        assert isinstance(self.task, Ego2WebTask)
        return self.task.start()

    def reset(self, seed: int | None = None, *args: Any, **kwargs: Any) -> Any:
        import browsergym.core as bgym

        self._finish()
        if bgym._PLAYWRIGHT is None:  # share this thread's driver with the project's own sessions
            bgym._set_global_playwright(acquire_playwright())
        real = bgym._PLAYWRIGHT
        self.launches = []
        bgym._set_global_playwright(_SealedPlaywright(real, self._proxy, self.launches))
        try:
            result = super().reset(seed, *args, **kwargs)
        except Exception as e:
            episode = self.episode
            if episode is not None:
                episode.fail("browser_error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            raise
        finally:
            bgym._set_global_playwright(real)
        episode = self.episode
        if episode is not None:
            episode.traj.extra["browser"] = {"launches": self.launches, "ignore_https_errors": False,
                                             "version": self.browser.version}
        return result

    def step(self, action: str) -> Any:
        episode = self.episode
        if episode is None or episode.finished:
            return super().step(action)
        episode.pending = to_action(action)
        started, t0 = datetime.now(UTC), time.monotonic()
        obs, reward, terminated, truncated, info = super().step(action)
        episode.record(action, self.page, self.last_action_error, started, time.monotonic() - t0)
        if terminated:
            episode.finish(self.page)
        return obs, reward, terminated, truncated, info

    def _finish(self) -> None:
        episode = self.episode
        if episode is not None and not episode.finished:
            episode.finish(self.page if self.page is not None and not self.page.is_closed() else None)

    def close(self) -> None:
        self._finish()
        super().close()
