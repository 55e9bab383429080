"""Warm episodes: one Chromium and one replay front per worker, a fresh browser context per episode.

A cold episode starts its own replay proxy and its own Chromium and stops both at its end; on the
demo suite that start-up is most of an episode. A :class:`WarmWorker` (one per worker process, or
one for an inline run) keeps instead, for the whole run:

* **one replay front** (:class:`~ego2web_replay.replay.front.FrontServer`) on a port that does not
  change, whose :class:`~ego2web_replay.replay.responder.Responder` is switched between episodes.
  Each episode gets a new responder (:meth:`Replay.new_responder`): its own counts, replay log and
  sequencing of repeated captures, so its ``replay_stats.json`` is exactly its own; the front's
  ``refused`` counts are read as the difference over the episode;
* **the opened snapshots** (their match index, the costly part of opening), the last
  :data:`KEEP_OPEN` used, so the repeats and the tasks that replay a snapshot open it once;
* **one Chromium**, launched with the front as its proxy and the project CA's SPKI pin (both
  launch-level flags, so the browser is keyed by them and relaunched when either changes). Each
  episode gets a new browser context (Playwright's ``new_context``: its own cookies, storage, HTTP
  cache and service workers) with its snapshot's determinism script, closed when the episode ends.

A browser that died (its process killed, a crash) ends that episode as a ``browser_error``; the
worker then drops it and the next episode launches a new one.

Only step agents in frozen mode on the fast engine are warm: live episodes write their own archive
through their own recording proxy, program agents (``command:``, ``browser-use``) run their own
browser, and ``--engine mitmproxy`` / ``--miss live`` run mitmproxy, one per process; those keep
the cold path. ``run --cold`` (``RunSettings.warm = False``) turns warm episodes off.
"""

from __future__ import annotations

import atexit
import json
import logging
import multiprocessing.util
import os
import signal
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..browser import BrowserSession
from ..lifeline import die_with_parent
from ..models import ReplayConfig, ReplayStats
from ..proxy import ProjectCA
from ..replay.front import FrontServer
from ..replay.responder import Responder
from ..replay.session import Replay
from ..wire.budget import WireLimits
from .episode import EpisodeRequest, EpisodeSummary, run_episode

__all__ = ["KEEP_OPEN", "WarmWorker", "WarmReplay", "current_worker", "start_worker", "warm_worker", "warm_eligible",
           "run_in_worker", "process_worker"]

log = logging.getLogger(__name__)

KEEP_OPEN = 4  # opened snapshots a worker keeps (least recently used closed first)

_current: WarmWorker | None = None


def warm_eligible(mode: str, program: bool, config: ReplayConfig) -> bool:
    """Whether an episode can be warm: a step agent, frozen mode, the fast replay engine."""
    return mode == "frozen" and not program and config.engine == "fast"


class WarmReplay:
    """One episode's view of a kept replay: its own responder behind the worker's front."""

    def __init__(self, replay: Replay, responder: Responder, front: FrontServer) -> None:
        self.replay, self.responder, self.front = replay, responder, front
        self._refused_before = dict(front.refused)

    @property
    def proxy_url(self) -> str:
        return self.front.url

    @property
    def init_script(self) -> str:
        return self.replay.init_script

    @property
    def snapshots(self) -> list[Any]:
        """The kept replay's opened snapshots."""
        return self.replay.snapshots

    def stats(self) -> ReplayStats:
        """This episode's counts: its responder's, and what the front's bounds refused meanwhile."""
        stats = self.replay.stats(responder=self.responder)
        refused = {k: v - self._refused_before.get(k, 0) for k, v in self.front.refused.items()}
        stats.refused = {k: v for k, v in refused.items() if v > 0}
        return stats


class WarmWorker:
    """What a worker keeps across episodes: a replay front, opened snapshots, a Chromium."""

    def __init__(self, keep_open: int = KEEP_OPEN) -> None:
        self.keep_open = max(1, keep_open)
        self._replays: OrderedDict[tuple[str, ...], Replay] = OrderedDict()
        self._front: FrontServer | None = None
        self._front_key: tuple[Any, ...] | None = None
        self._browser: BrowserSession | None = None
        self._browser_key: tuple[str, str] | None = None
        self.launches = 0  # Chromium launches (tests and benchmarks read these)
        self.opens = 0  # snapshots opened

    # -- the replay --------------------------------------------------------------
    def replay(self, snapshot: Path | str, config: ReplayConfig, ca: ProjectCA,
               wire: WireLimits | None = None, share_pins: dict[str, str] | None = None) -> WarmReplay:
        """The replay of ``snapshot`` for one episode: opened once per worker, a new responder each time."""
        # the data folder is in the key: an opened snapshot reads the caches of the one it was opened in (a Ray
        # worker process's episodes all run in the same one, ray_executor.worker_home)
        pins = None if share_pins is None else json.dumps(share_pins, sort_keys=True)
        key = (str(snapshot), config.model_dump_json(), os.environ.get("EGO2WEB_REPLAY_HOME", ""), pins or "")
        replay = self._replays.pop(key, None)
        if replay is None:
            replay = Replay([snapshot], config, ca=ca, wire=wire, share_pins=share_pins)
            replay.open()
            self.opens += 1
        self._replays[key] = replay
        while len(self._replays) > self.keep_open:
            _key, old = self._replays.popitem(last=False)
            old.stop()
        responder = replay.new_responder()
        return WarmReplay(replay, responder, self._front_for(responder, ca, wire))

    def _front_for(self, responder: Responder, ca: ProjectCA, wire: WireLimits | None) -> FrontServer:
        key = (ca.spki, wire)
        if self._front is not None and (self._front_key != key or self._front.port is None):
            self._front.stop()
            self._front = None
        if self._front is None:
            front = FrontServer(responder, ca=ca, limits=wire)  # guard "open", as a cold episode's replay
            front.start()
            self._front, self._front_key = front, key
        else:
            self._front.responder = responder  # what reply() answers through from now on
        return self._front

    # -- the browser -------------------------------------------------------------
    def browser(self, proxy_url: str, spki: str) -> BrowserSession:
        """The worker's Chromium behind ``proxy_url`` trusting ``spki``: launched when there is none
        alive for that pair."""
        key = (proxy_url, spki)
        if self._browser is not None and (self._browser_key != key or not _connected(self._browser)):
            self.drop_browser()
        if self._browser is None:
            self._browser = BrowserSession(proxy_url=proxy_url, spki=spki).start()
            self._browser_key = key
            self.launches += 1
        return self._browser

    @contextmanager
    def context(self, proxy_url: str, spki: str, init_scripts: Sequence[str]) -> Iterator[Any]:
        """A fresh browser context of the worker's Chromium for one episode, closed when it ends."""
        ctx = self.browser(proxy_url, spki).new_context(init_scripts=init_scripts)
        try:
            yield ctx
        finally:
            try:
                ctx.close()
            except Exception:  # noqa: BLE001 - a dead browser's context is gone with it
                self.drop_browser()

    def drop_browser(self) -> None:
        """Close (or forget, when dead) the worker's Chromium; the next episode launches a new one."""
        browser, self._browser, self._browser_key = self._browser, None, None
        if browser is not None:
            try:
                browser.close()
            except Exception as e:  # noqa: BLE001 - a crashed browser cannot be closed cleanly
                log.debug("closing a dead browser: %s", e)

    def close(self) -> None:
        """Stop everything the worker keeps."""
        self.drop_browser()
        if self._front is not None:
            self._front.stop()
            self._front = None
        while self._replays:
            _key, replay = self._replays.popitem()
            replay.stop()


def _connected(session: BrowserSession) -> bool:
    try:
        return session.browser is not None and bool(session.browser.is_connected())
    except Exception:  # noqa: BLE001 - a driver that is gone: not connected
        return False


def current_worker() -> WarmWorker | None:
    """This process's warm worker, when an executor made one (else episodes run cold)."""
    return _current


_running = False  # whether this pool worker is running an episode (what SIGTERM interrupts: see start_worker)


def run_in_worker(req: EpisodeRequest) -> EpisodeSummary:
    """A pool worker's job: the episode, warm when it can be, with this process's worker."""
    global _running
    _running = True
    try:
        return run_episode(req, _current)
    finally:
        _running = False


def _stopped(signum: int, frame: object) -> None:
    """SIGTERM from the interrupted runner (it reaches the runner alone, where Ctrl-C reaches its whole
    process group; and a run started in the background ignores SIGINT): an episode under way ends as on
    Ctrl-C, its agent program killed and its browser closed; an idle worker exits, its exit hooks run."""
    if _running:
        raise KeyboardInterrupt
    raise SystemExit(0)


def start_worker(parent_pid: int | None = None) -> None:
    """A process pool's initializer: die with the parent, end on SIGTERM as on Ctrl-C (:func:`_stopped`), and
    keep a warm worker for this process (stopped when the process ends, by multiprocessing's exit hook)."""
    global _current
    die_with_parent(parent_pid)
    signal.signal(signal.SIGTERM, _stopped)
    _current = WarmWorker()
    multiprocessing.util.Finalize(None, _current.close, exitpriority=10)


def process_worker() -> WarmWorker:
    """This process's warm worker, made on first use and stopped when the process exits (a Ray
    worker process, which runs one episode after another)."""
    global _current
    if _current is None:
        _current = WarmWorker()
        atexit.register(_current.close)
    return _current


@contextmanager
def warm_worker() -> Iterator[WarmWorker]:
    """A warm worker for the episodes run in this process meanwhile (an inline run)."""
    global _current
    previous, _current = _current, WarmWorker()
    try:
        yield _current
    finally:
        worker, _current = _current, previous
        worker.close()
