"""One episode: one task, one agent, one mode, from proxy start to trajectory.json.

An episode is written into ``<mode>.partial/`` and renamed to ``<mode>/`` only
when complete, so a killed run never leaves a half episode that looks finished
(``--resume`` removes stale ``.partial`` folders and redoes only those).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agents import EpisodeEnv, Observation, ProgramAgent, make_agent
from ..agents.elements import list_elements
from ..agents.routing import live_archive_origins, note_own_services, proxied_destinations
from ..browser import BrowserSession, keep_page, perform_action, take_screenshot
from ..errors import Ego2WebError, ModelEndpointError, SnapshotError
from ..models import (
    EPISODE_ERRORS,
    Action,
    AgentSpec,
    ReplayConfig,
    ReplayStats,
    Step,
    StoreRequests,
    Task,
    Trajectory,
    check_id,
    episode_dir,
    save_model,
)
from ..proxy import project_ca
from ..redaction import Redactor
from ..snapshots.index_cache import stream_rows
from ..snapshots.objstore import is_remote, store_requests
from ..wire.budget import WireLimits
from .agent_folder import AgentFolder
from .inputs import (
    AgentInputs,
    InputSettings,
    agent_task,
    apply_inputs,
    prepare_inputs,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..replay.session import Replay
    from .warm import WarmReplay, WarmWorker

__all__ = ["EpisodeRequest", "EpisodeSummary", "run_episode", "write_episode", "find_snapshot", "ERROR_REASONS"]

# End reasons that mean the episode errored (``run`` fails when every episode did): the ones that are not the
# agent's (EPISODE_ERRORS: no judge scores them) and the agent's own crash.
ERROR_REASONS = EPISODE_ERRORS | {"agent_error"}


def _captured_urls(snapshots: Any) -> Iterator[str]:
    """The URL of every capture in the snapshots' indexes (snapshot objects or folders), streamed."""
    for snap in snapshots:
        index = Path(getattr(snap, "index_path", None) or Path(snap) / "index.cdxj")
        if index.is_file():
            yield from (row[2] for row in stream_rows(index))


@dataclass
class EpisodeRequest:
    """Everything a worker needs to run one episode (picklable)."""

    run_dir: Path
    task: Task
    suite_dir: Path | None
    mode: str
    agent_name: str
    agent_settings: dict[str, Any] = field(default_factory=dict)
    snapshots_root: Path | str | None = None  # a folder, or an object-storage URL
    suite_path: Path | None = None  # the suite's file (its tasks' answers and evidence): never a sealed program's
    snapshot_id: str | None = None  # the run pins it when it starts (run.pin_snapshots); None: the task's newest now
    snapshot_error: str | None = None  # why the task had no snapshot to replay when the run started
    share_pins: dict[str, str] | None = None  # shared captures' sources, pinned when the run started (None: newest)
    max_steps: int = 40
    timeout_s: float = 300.0
    action_timeout_s: float = 20.0
    guard: str = "open"
    upstream_ca: Path | None = None
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    keep_credentials: bool = False
    inputs: InputSettings = field(default_factory=InputSettings)
    repeat: int = 0
    wire: WireLimits | None = None  # the proxy's bounds and timeouts toward the agent (None: the environment's)
    warm: bool = True  # may run warm when its worker keeps a browser and replay front (runner/warm.py)

    @property
    def folder(self) -> Path:
        """Where this episode ends up: ``<run>/episodes/<task>/<mode>[-r<repeat>]``."""
        return episode_dir(self.run_dir, self.task.id, self.mode, self.repeat)


@dataclass
class EpisodeSummary:
    task_id: str
    mode: str
    ok: bool
    end_reason: str
    steps: int
    answer: str | None
    misses: int | None
    error: str | None
    path: Path
    repeat: int = 0


def _evidence_places(req: EpisodeRequest) -> list[str]:
    """Where the evidence of an episode lies, for a sealed program agent not to see (agents/sandbox.py):
    the suite (its answers, clips and keyframes), the run folder and the folder of runs (other episodes'
    trajectories), the snapshots, the data home and the tracking database."""
    from ..config import DEFAULT_DB, data_dir

    # (and the runner's own: its data home, with the caches and the CA key, and the tracking database)
    places = [req.run_dir, req.run_dir.parent, data_dir(), DEFAULT_DB]
    if req.suite_path is not None:
        places.append(req.suite_path)
    if req.suite_dir is not None:
        places.append(req.suite_dir)
    if isinstance(req.snapshots_root, Path):
        places.append(req.snapshots_root)
    return [str(p) for p in places]


def find_snapshot(root: Path | str | None, task_id: str, snapshot_id: str | None) -> Path | str:
    """The chosen snapshot of a task, or its newest (a folder, or a URL under a URL root);
    :class:`SnapshotError` when there is none."""
    from ..snapshots.location import as_location, join, latest

    if root is None:
        raise SnapshotError("frozen mode needs --snapshots (the folder holding recorded snapshots)")
    root = as_location(root)
    if snapshot_id:
        try:
            check_id("snapshot id", snapshot_id)  # '../other/ID' would replay another task's snapshot
        except ValueError as e:
            raise SnapshotError(str(e)) from None
        p = join(root, task_id, snapshot_id)
        if isinstance(p, Path) and not (p / "manifest.json").exists():
            raise SnapshotError(f"snapshot {p} not found (or has no manifest.json)")
        return p  # a URL is checked when the replay opens it
    return latest(root, task_id)


#: how long past the episode's timeout a step may still take before the watchdog ends it (the last step's
#: action is cut at the timeout; its screenshot and capture take a second or two)
TIMEOUT_GRACE_S = 10.0


_BROWSER_PIDS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class _Watchdog:
    """Ends an episode that outlives its timeout by ``TIMEOUT_GRACE_S`` where the step loop cannot: a page
    whose script never yields (every read of it waits for ever) has its Chromium killed, so each call
    waiting on it fails at once; the episode is then a ``timeout`` (and a warm worker launches a new
    browser for the next one). An agent whose ``act`` does not return is left behind (:func:`_act`)."""

    def __init__(self, page: Any, deadline_s: float) -> None:
        self.fired = False
        self.pid: int | None = None
        try:  # the browser's own process, as Chromium reports it (asked once per browser: a warm one serves many)
            browser = page.context.browser
            self.pid = _BROWSER_PIDS.get(browser)
            if self.pid is None:
                cdp = browser.new_browser_cdp_session()
                info = cdp.send("SystemInfo.getProcessInfo")
                cdp.detach()
                self.pid = next((p["id"] for p in info.get("processInfo", []) if p.get("type") == "browser"), None)
                if self.pid is not None:
                    _BROWSER_PIDS[browser] = self.pid
        except Exception as e:  # noqa: BLE001 - no pid: a hung page then holds its episode, as before
            log.debug("no browser pid for the episode's watchdog: %s", e)
        self._timer = threading.Timer(deadline_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        if self.pid is not None and _is_chromium(self.pid):  # (still the browser: never a pid since reused)
            log.warning("episode past its timeout: stopping its browser (pid %d)", self.pid)
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._timer.cancel()


def _is_chromium(pid: int) -> bool:
    """Whether process ``pid`` of this machine is a Chromium browser process."""
    try:
        first = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return b"chrom" in Path(first.decode("utf-8", "replace")).name.encode()


class _ActTimeout(Exception):
    """The agent's ``act`` did not return in time (:func:`_act`)."""


def _act(agent: Any, obs: Observation, within_s: float) -> Action:
    """``agent.act(obs)``, in a thread of its own so that an agent that never returns (a model call with no
    timeout of its own) cannot hold the episode: past ``within_s`` it is left behind (:class:`_ActTimeout`)."""
    got: list[Any] = []

    def call() -> None:
        try:
            got.append(("ok", agent.act(obs)))
        except BaseException as e:  # noqa: BLE001 - handed to the step loop as the agent's failure
            got.append(("error", e))

    thread = threading.Thread(target=call, name="agent-act", daemon=True)
    thread.start()
    thread.join(within_s)
    if not got:
        raise _ActTimeout(f"the agent did not act within {within_s:g} s")
    kind, value = got[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


def _step_loop(req: EpisodeRequest, agent: Any, page: Any, out: Path, traj: Trajectory, inputs: AgentInputs,
               seen: dict[str, str | None], proxy_down: Callable[[Any, str | None], bool] = lambda p, e: False) -> None:
    """The episode's steps, ended as a ``timeout`` by :class:`_Watchdog` when a page or the agent holds one
    past the episode's timeout. ``seen["text"]``: the page's visible text as the last capture read it, while
    nothing has been done to the page since (else None), so the episode's final text need not be read again.
    ``proxy_down(page, last error)``: whether the episode's proxy has stopped (asked before each step)."""
    dog = _Watchdog(page, req.timeout_s + TIMEOUT_GRACE_S)
    try:
        _steps(req, agent, page, out, traj, inputs, seen, proxy_down)
    except Exception:
        if not dog.fired:
            raise
    finally:
        dog.cancel()
    if dog.fired:
        traj.end_reason = "timeout"
        traj.error = (f"episode timeout ({req.timeout_s:g} s) passed by {TIMEOUT_GRACE_S:g} s inside step "
                      f"{len(traj.steps)}: the page did not answer, so its browser was stopped")


def _steps(req: EpisodeRequest, agent: Any, page: Any, out: Path, traj: Trajectory, inputs: AgentInputs,
           seen: dict[str, str | None], proxy_down: Callable[[Any, str | None], bool]) -> None:
    t0 = time.monotonic()
    task = agent_task(req.task, scripted=agent.spec.name == "scripted", video=inputs.video)
    agent.start(task)
    last_shot: Path | None = None
    last_error: str | None = None
    history: list[Action] = []
    redact = Redactor.make(keep_credentials=req.keep_credentials).url  # the capture's URL as the step's
    wants_elements = bool(getattr(agent, "wants_elements", True))  # the scripted agent never reads them
    title: str | None = "" if page.url == "about:blank" else None  # the title as last read (a new page: blank)
    crashed: list[bool] = []
    page.on("crash", lambda _page: crashed.append(True))  # the renderer died: the page object stays open
    for i in range(req.max_steps):
        if crashed or _page_gone(page):  # the browser or the tab crashed, or was killed: not the agent's failure
            traj.end_reason = "browser_error"
            traj.error = f"the {'tab (renderer)' if crashed else 'browser'} closed or crashed before step {i}"
            return
        if proxy_down(page, last_error):  # the episode's own proxy stopped: what the agent saw is not the site's
            traj.end_reason = "infra_error"
            traj.error = f"the episode's proxy stopped answering before step {i} ({last_error or page.url})"
            return
        remaining = req.timeout_s - (time.monotonic() - t0)
        if remaining <= 0:
            traj.end_reason = "timeout"
            traj.error = f"episode timeout ({req.timeout_s:g} s) reached after {i} steps"
            return
        obs = Observation(task=task, step=i, url=page.url, title=_title(page) if title is None else title,
                          screenshot=last_shot, elements=list_elements(page) if wants_elements else [], video=inputs.video, keyframes=inputs.frames,
                          captions=inputs.captions, last_error=last_error, history=list(history))
        started = datetime.now(UTC)
        s0 = time.monotonic()
        try:
            action = _act(agent, obs, remaining + TIMEOUT_GRACE_S / 2)  # (before the watchdog's turn)
        except _ActTimeout as e:  # the agent itself holds the episode past its timeout
            traj.end_reason = "timeout"
            traj.error = f"episode timeout ({req.timeout_s:g} s) passed at step {i}: {e}"
            return
        except ModelEndpointError as e:  # its model service did not answer: the episode could not run
            traj.end_reason = "infra_error"
            traj.error = f"the agent's model endpoint failed at step {i}: {e}"
            return
        except Exception as e:  # noqa: BLE001 - an agent failure ends this episode only
            traj.end_reason = "agent_error"
            traj.error = f"agent failed at step {i}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            return
        history.append(action)
        step = Step(index=i, action=action, started_at=started, thought=getattr(agent, "last_thought", None))
        if action.kind in ("answer", "stop"):
            _capture(page, out, step, redact, seen)  # the page the agent answered from, as rendered
            traj.steps.append(step)
            traj.answer = action.answer if action.kind == "answer" else None
            traj.end_reason = "answered" if action.kind == "answer" else "stopped"
            return
        remaining = req.timeout_s - (time.monotonic() - t0)  # (the agent took its time to act)
        if remaining <= 0:
            traj.end_reason = "timeout"
            traj.error = f"episode timeout ({req.timeout_s:g} s) reached while the agent chose step {i}"
            return
        last_error = None
        seen["text"] = title = None
        try:
            perform_action(page, action, timeout_s=max(1.0, min(req.action_timeout_s, remaining)))
        except Exception as e:  # noqa: BLE001 - recorded on the step; the agent sees it next turn
            last_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            step.error = last_error
        rel = f"screenshots/step-{i:03d}.png"
        try:
            last_shot = take_screenshot(page, out / rel)
            step.screenshot = rel
        except Exception as e:  # noqa: BLE001
            step.error = (step.error or "") + f" (screenshot failed: {str(e).splitlines()[0]})"
        title = _capture(page, out, step, redact, seen)
        step.duration_s = round(time.monotonic() - s0, 3)
        traj.steps.append(step)
    traj.end_reason = "step_budget"
    traj.error = f"step budget of {req.max_steps} exhausted without an answer"


def _capture(page: Any, out: Path, step: Step, redact: Callable[[str], str],
             seen: dict[str, str | None] | None = None) -> str | None:
    """The page as rendered after the step, beside its screenshot (what page-reading judges read); sets the
    step's URL and title (the capture's title: one round trip reads title, text and DOM) and ``seen["text"]``
    (its whole text, else None). Returns the title read with the capture, None when the page could not be
    captured (the title then read alone)."""
    step.url = page.url
    try:
        capture = keep_page(page, out, step.index, redact_url=redact)
    except Exception as e:  # noqa: BLE001 - a page that cannot be read now is noted on the step
        step.title = _title(page)
        step.error = ((step.error + " ") if step.error else "") + \
            f"(page text not captured: {str(e).splitlines()[0] if str(e) else type(e).__name__})"
        return None
    step.page, step.title = f"pages/step-{step.index:03d}.json", capture.title
    if seen is not None:
        seen["text"] = None if capture.truncated else capture.text
    return capture.title


#: what Chromium says of a proxy it cannot reach (net_error_list.h): the page's failure, or the proxy's
_PROXY_FAILURES = ("ERR_PROXY_", "ERR_TUNNEL_CONNECTION_FAILED", "ERR_EMPTY_RESPONSE", "ERR_CONNECTION_")


def proxy_check(proxy_url: str) -> Callable[[Any, str | None], bool]:
    """``proxy_down(page, last error)`` for a proxy at ``proxy_url``: after a step whose navigation failed as
    a proxy failure does (or left the page on Chromium's error page), whether the proxy still takes a
    connection. A proxy that answers costs nothing: it is asked only after such a failure."""
    from urllib.parse import urlsplit

    parts = urlsplit(proxy_url)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)

    def down(page: Any, last_error: str | None) -> bool:
        failed = last_error is not None and any(code in last_error for code in _PROXY_FAILURES)
        try:
            on_error_page = str(page.url).startswith("chrome-error://")
        except Exception:  # noqa: BLE001 - no page: _page_gone says so
            on_error_page = False
        if not (failed or on_error_page):
            return False
        try:
            socket.create_connection(address, timeout=2).close()
        except OSError:
            return True
        return False

    return down


def _page_gone(page: Any) -> bool:
    try:
        return bool(page.is_closed())
    except Exception:  # noqa: BLE001 - a driver that is gone took the page with it
        return True


_FINAL_TEXT_MAX = 100_000  # characters of the final page's text kept in the trajectory


def _page_text(page: Any, limit: int = _FINAL_TEXT_MAX) -> str | None:
    try:
        return str(page.inner_text("body", timeout=5000))[:limit]
    except Exception:  # noqa: BLE001 - no page, no text
        return None


def _title(page: Any) -> str:
    try:
        return str(page.title())
    except Exception:  # noqa: BLE001
        return ""


def run_episode(req: EpisodeRequest, warm: WarmWorker | None = None) -> EpisodeSummary:
    """Run one episode and write it; never raises for agent or site failures.

    ``warm``: the worker's kept browser and replay front (:mod:`.warm`), used when the episode can
    be warm (a step agent in frozen mode on the fast engine, ``req.warm``); else it runs cold."""
    final = req.folder
    out = final.with_name(final.name + ".partial")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    spec = AgentSpec(name=req.agent_name)
    traj = Trajectory(task_id=req.task.id, instruction=req.task.instruction, mode=req.mode,  # type: ignore[arg-type]
                      agent=spec, started_at=datetime.now(UTC), repeat=req.repeat)
    replay: Replay | WarmReplay | None = None
    live = None
    warm_here: WarmWorker | None = None
    store_before = store_requests()  # one episode at a time per process: the difference is this episode's
    try:
        agent = make_agent(req.agent_name, **req.agent_settings)
        apply_inputs(agent.spec, req.inputs)
        traj.agent = agent.spec
        inputs = prepare_inputs(req.task, req.suite_dir, agent.spec.input_modality, req.inputs)
        traj.extra["inputs"] = inputs.record()
        ca = project_ca()
        program = isinstance(agent, ProgramAgent) and not hasattr(agent, "act")
        if warm is not None and req.warm:
            from .warm import warm_eligible

            warm_here = warm if warm_eligible(req.mode, program, req.replay) else None
        with ExitStack() as stack:
            if req.mode == "frozen":
                from ..replay.session import Replay
                from ..snapshots.location import name_of

                if req.snapshot_error is not None:  # found when the run started: never looked for again
                    raise SnapshotError(req.snapshot_error)
                snap = find_snapshot(req.snapshots_root, req.task.id, req.snapshot_id)
                traj.snapshot_path, traj.snapshot_id = str(snap), name_of(snap)
                if warm_here is not None:
                    replay = warm_here.replay(snap, req.replay, ca, req.wire, share_pins=req.share_pins)
                else:
                    replay = stack.enter_context(Replay([snap], req.replay, ca=ca, wire=req.wire,
                                                        share_pins=req.share_pins))
                proxy_url, init_scripts = replay.proxy_url, [replay.init_script]
            else:
                from ..recorder.session import LiveRecording, RecordOptions

                opts = RecordOptions(guard=req.guard, upstream_ca=req.upstream_ca, source="live-run",
                                     keep_credentials=req.keep_credentials,
                                     allow=req.task.allowed_domains, wire=req.wire)
                live = stack.enter_context(LiveRecording(req.task, out / "snapshots", opts, ca=ca))
                proxy_url, init_scripts = live.proxy_url, []
            # the agent's own copies, in a private folder: no path it is given leads to the suite or the judge
            handed = stack.enter_context(AgentFolder(req.task, inputs, ca.cert_path, episode=out, program=program))
            if program and isinstance(agent, ProgramAgent):
                env = EpisodeEnv(proxy_url=proxy_url, ca_file=handed.ca_file, spki=ca.spki,
                                 task_file=handed.task_file, out_dir=handed.out_dir, mode=req.mode,
                                 max_steps=req.max_steps, timeout_s=req.timeout_s, inputs=handed.inputs_file,
                                 repeat=req.repeat, proxied=proxied_destinations(
                                     req.task, None if replay is None else _captured_urls(replay.snapshots)),
                                 proxied_from="snapshot" if replay is not None else "task",
                                 hidden=_evidence_places(req))
                got = agent.run_episode(req.task, env)
                handed.collect(got, redact_url=Redactor.make(keep_credentials=req.keep_credentials).url)
                got.started_at, got.snapshot_id, got.snapshot_path = traj.started_at, traj.snapshot_id, traj.snapshot_path
                got.extra.setdefault("inputs", traj.extra["inputs"])
                got.agent, got.repeat = traj.agent, req.repeat
                traj = got
            else:
                if warm_here is not None:  # a fresh context of the worker's Chromium, closed at the end
                    context = stack.enter_context(warm_here.context(proxy_url, ca.spki, init_scripts))
                else:
                    browser = stack.enter_context(BrowserSession(proxy_url=proxy_url, spki=ca.spki))
                    context = browser.new_context(init_scripts=init_scripts)
                page = context.new_page()
                seen: dict[str, str | None] = {"text": None}
                try:
                    _step_loop(req, agent, page, out, traj, handed.inputs, seen, proxy_check(proxy_url))
                finally:
                    text = seen["text"]  # the last capture's, when nothing was done to the page since
                    traj.final_page_text = _page_text(page) if text is None else text[:_FINAL_TEXT_MAX]
                    usage = getattr(agent, "usage", None)
                    if isinstance(usage, dict) and usage:
                        traj.extra["usage"] = dict(usage)  # model calls and tokens (openai agent)
                if warm_here is None:
                    try:
                        context.close()
                    except Exception:  # a browser the watchdog stopped has no context left to close
                        if traj.end_reason != "timeout":
                            raise
            if live is not None:
                live.pages_from(traj)
    except SnapshotError as e:
        traj.end_reason, traj.error = "setup_error", str(e)
    except Ego2WebError as e:
        traj.end_reason, traj.error = ("setup_error" if not traj.steps else "agent_error"), str(e)
    except Exception as e:  # noqa: BLE001 - one episode's crash never stops the run
        traj.end_reason = "browser_error"
        traj.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if warm_here is not None and traj.end_reason == "browser_error":
        warm_here.drop_browser()  # crashed or unusable: the next episode launches a new one
    store = None
    if traj.snapshot_path and is_remote(traj.snapshot_path):
        now = store_requests()
        store = StoreRequests(**{name: now[name] - store_before[name] for name in now})
    traj = write_episode(out, final, traj, mode=req.mode, replay=replay, live=live,
                         keep_credentials=req.keep_credentials, store=store)
    ok = traj.end_reason in ("answered", "stopped") and not traj.error
    return EpisodeSummary(task_id=req.task.id, mode=req.mode, ok=ok, end_reason=traj.end_reason,
                          steps=len(traj.steps), answer=traj.answer,
                          misses=traj.replay.miss if traj.replay else None, error=traj.error, path=final,
                          repeat=req.repeat)


def write_episode(out: Path, final: Path, traj: Trajectory, *, mode: str, replay: Any = None, live: Any = None,
                  keep_credentials: bool = False, store: StoreRequests | None = None) -> Trajectory:
    """Finish an episode folder: the replay's stats (``replay_stats.json``, frozen) or the live archive's
    place (live), the trajectory with credentials redacted, then ``out`` (``<mode>.partial``) renamed to
    ``final``. ``replay`` and ``live`` have stopped; ``store``: what the episode asked of object storage
    (a snapshot on ``s3://``), kept in the replay's stats. Returns the trajectory as written. The runner and
    :mod:`ego2web_replay.browsergym` end their episodes here, so both write the same folder."""
    redactor = Redactor.make(keep_credentials=keep_credentials)
    if replay is not None:
        traj.replay = ReplayStats.model_validate(redactor.strings(replay.stats().model_dump(mode="json")))
        traj.replay.store = store
        save_model(out / "replay_stats.json", traj.replay)
        note_own_services(traj.extra, traj.replay.missed_urls, "went to the replay")
    if live is not None and live.ok and live.snapshot_path is not None:
        note_own_services(traj.extra, live_archive_origins(
            traj.extra, lambda: _captured_urls([live.snapshot_path])),
                          "went through the recording proxy and are in the live archive")
    if live is not None and live.snapshot_path is not None:
        traj.snapshot_path = str(live.snapshot_path.relative_to(out).as_posix()) if live.ok else None
        traj.snapshot_id = live.snapshot_path.name if live.ok else None
        if live.error:
            traj.extra["live_archive_error"] = live.error
    if live is not None and live.refused:  # what the live proxy's bounds refused (docs/limits.md)
        traj.extra["proxy_refused"] = live.refused
    traj.finished_at = datetime.now(UTC)
    traj = Trajectory.model_validate(redactor.strings(traj.model_dump(mode="json")))  # URLs in steps, errors
    save_model(out / "trajectory.json", traj)
    if final.exists():
        shutil.rmtree(final)
    out.rename(final)
    if traj.snapshot_path and mode == "live":
        traj.snapshot_path = str(final / traj.snapshot_path)
        save_model(final / "trajectory.json", traj)
    return traj
