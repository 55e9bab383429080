"""A recording session: the recording proxy plus Chromium, for one task at a time.

``record_task`` starts the recording proxy (by default the fast front end,
:class:`~.front.RecordFront`; ``engine="mitmproxy"`` the mitmproxy master with
``record_addons()``: upstream guard, recorder), drives Chromium through the task's reference actions (or lets a
person browse, in interactive mode), saves a screenshot after each action, then
finalizes the snapshot (index + manifest, atomically). A task that fails leaves
its folder without a manifest, which ``snapshot verify`` reports as incomplete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ..browser import BrowserSession, chromium_version, perform_action, take_screenshot
from ..errors import Ego2WebError, RecordingError
from ..guard import GuardPolicy, UpstreamGuard
from ..models import SnapshotManifest, Task, UpstreamFailure
from ..proxy import ProjectCA, ProxyServer, project_ca
from ..redaction import Redactor
from ..versions import tool_versions
from ..wire.budget import WireLimits
from .addon import ExchangeArchive, Recorder
from .front import RecordFront

log = logging.getLogger(__name__)

__all__ = ["RecordOptions", "RecordResult", "LiveRecording", "record_addons", "record_task"]


@dataclass
class RecordOptions:
    """How to record. ``guard`` is the upstream policy (tests use ``loopback``)."""

    compression: Literal["zst", "gz", "none"] = "zst"
    guard: str = "open"
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    upstream_ca: Path | None = None
    keep_credentials: bool = False
    redact_headers: Sequence[str] = ()
    redact_params: Sequence[str] = ()
    interactive: bool = False
    screenshots: bool = True
    action_timeout_s: float = 30.0
    source: str = "record"
    engine: Literal["fast", "mitmproxy"] = "fast"
    """``fast``: the asyncio front end (:mod:`.front`); ``mitmproxy``: the mitmproxy master with the addons."""
    second_load: bool = False
    """After the actions, load each recorded document once more in a throw-away browser context; its
    requests are not archived, only noted in ``volatile.json`` for learning (see ``LiveRecording.second_load``)."""
    dedup_min_size: int | None = 256
    """Identical payloads of at least this many bytes are stored once per recording, later captures as
    revisit records; None stores every payload (a revisit's own head costs about 250 bytes)."""
    wire: WireLimits | None = None
    """The fast engine's bounds and timeouts toward clients (default: from the environment; docs/limits.md)."""


@dataclass
class RecordResult:
    task_id: str
    ok: bool
    snapshot: Path | None = None
    manifest: SnapshotManifest | None = None
    error: str | None = None
    exchanges: int = 0
    blocked: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    """What the proxy's bounds refused or ended (docs/limits.md); ``cancelled``: requests whose client
    went away before the answer (fetch stopped, nothing archived); ``early-dropped``: requests sent
    upstream before their head was read that their own path did not take up (``RecordFront.early``:
    none are expected; their answers were never read)."""
    location: str | None = None  # the snapshot's URL when it was uploaded to object storage


def record_addons(writer: Any, *, keep_credentials: bool = False, redactor: Redactor | None = None) -> list[Any]:
    """The recording proxy, in order: guard first, then the recorder."""
    return [UpstreamGuard(), Recorder(writer, keep_credentials=keep_credentials, redactor=redactor)]


def redactor_for(opts: RecordOptions) -> Redactor:
    """The credential redaction a recording with these options applies (see :mod:`..redaction`)."""
    return Redactor.make(keep_credentials=opts.keep_credentials, headers=opts.redact_headers,
                         params=opts.redact_params)


def proxy_options(opts: RecordOptions) -> dict[str, Any]:
    o: dict[str, Any] = {"guard_mode": opts.guard, "guard_allow": list(opts.allow), "guard_deny": list(opts.deny)}
    if opts.upstream_ca:
        o["ssl_verify_upstream_trusted_ca"] = str(opts.upstream_ca)
    return o


def _settings(opts: RecordOptions) -> dict[str, Any]:
    return {"compression": opts.compression, "guard": opts.guard, "keep_credentials": opts.keep_credentials,
            "redaction": redactor_for(opts).settings(), "interactive": opts.interactive,
            "dedup_min_size": opts.dedup_min_size, "engine": opts.engine, "second_load": opts.second_load}


class LiveRecording:
    """The recording proxy for one task as a context manager (live runs, probes, and :func:`record_task`).

    :meth:`open` creates the snapshot folder, :meth:`start` the proxy,
    :meth:`finish` stops it and finalizes the snapshot (index + manifest) unless
    something failed; ``ok``, ``error`` and ``snapshot_path`` say how it went.
    As a context manager it does all three, finalizing on exit.
    """

    def __init__(self, task: Task, root: Path, opts: RecordOptions | None = None, *,
                 ca: ProjectCA | None = None) -> None:
        self.task, self.root, self.opts = task, Path(root), opts or RecordOptions(source="live-run")
        self.ca = ca or project_ca()
        self.proxy: ProxyServer | RecordFront | None = None
        self.writer: Any = None
        self.recorder: ExchangeArchive | None = None
        self.guard: UpstreamGuard | RecordFront | None = None  # ``counts``: what the guard answered, by reason
        self.snapshot_path: Path | None = None
        self.manifest: SnapshotManifest | None = None
        self.ok = False
        self.error: str | None = None
        self.refused: dict[str, int] = {}  # the fast proxy's bounds (docs/limits.md), when it stops

    @property
    def proxy_url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    def open(self) -> None:
        """Create the snapshot folder and its archive; :class:`RecordingError` if it cannot be."""
        from ..snapshots.snapshot import SnapshotWriter

        o = self.opts
        try:
            self.writer = SnapshotWriter(self.root, self.task.id, compression=o.compression, source=o.source,
                                         start_url=self.task.start_url, settings=_settings(o),
                                         tools=tool_versions({"chromium": chromium_version()}),
                                         dedup_min_size=o.dedup_min_size)
        except OSError as e:
            raise RecordingError(f"cannot create a snapshot under {self.root}: {e.strerror or e}") from None
        self.snapshot_path = self.writer.path
        if o.engine == "mitmproxy":
            self.guard, self.recorder = record_addons(self.writer.writer, keep_credentials=o.keep_credentials,
                                                      redactor=redactor_for(o))
            return
        self.recorder = ExchangeArchive(self.writer.writer, keep_credentials=o.keep_credentials,
                                        redactor=redactor_for(o))
        self.guard = RecordFront(self.recorder, ca=self.ca, guard=GuardPolicy(o.guard, tuple(o.allow), tuple(o.deny)),
                                 upstream_ca=o.upstream_ca, limits=o.wire)

    def start(self) -> None:
        """Start the recording proxy (:class:`~ego2web_replay.errors.ProxyError` if it cannot start)."""
        assert self.guard is not None and self.recorder is not None
        if isinstance(self.guard, RecordFront):
            self.guard.start()
            self.proxy = self.guard
            return
        proxy = ProxyServer([self.guard, self.recorder], ca=self.ca, options=proxy_options(self.opts))
        proxy.start()
        self.proxy = proxy

    def finish(self, error: str | None = None) -> None:
        """Stop the proxy; finalize the snapshot, or, after ``error`` or a recorder failure,
        close the archive and leave the folder without a manifest."""
        assert self.recorder is not None
        if self.proxy is not None:
            self.proxy.stop()
            if isinstance(self.proxy, RecordFront):
                dropped = self.proxy.upstream.early_dropped
                self.refused = {**self.proxy.refused, **({"cancelled": self.proxy.cancelled}
                                                         if self.proxy.cancelled else {}),
                                **({"early-dropped": dropped} if dropped else {})}
        elif isinstance(self.guard, RecordFront):
            self.guard.certs.close()  # made, never started
        self.recorder.drain()  # every record handed to the writer thread written (or the recording failed)
        if error or self.recorder.failed:
            self.error = error or self.recorder.failed
            self.writer.writer.close()
            return
        self.writer.upstream_failures = [
            UpstreamFailure(method=m, url=u, error=why, at=datetime.fromtimestamp(t, UTC))
            for m, u, why, t in self.recorder.failures]
        try:
            self.manifest = self.writer.finalize()
            self.ok = True
        except Ego2WebError as e:
            self.error = str(e)
            self.writer.writer.close()
        except Exception as e:  # noqa: BLE001 - reported through ``error``
            self.error = f"cannot finalize the snapshot: {e}"
            self.writer.writer.close()

    def second_load(self, new_context: Callable[[], Any], urls: Sequence[str] | None = None,
                    timeout_s: float = 15.0) -> int:
        """Load each recorded document (``urls``, else the snapshot's pages) once more, each in a
        throw-away context from ``new_context`` (through this recording's proxy), and note what its
        requests got in the snapshot's ``volatile.json`` instead of archiving them: what changes
        between the two loads while the response does not is learned volatile
        (:mod:`~ego2web_replay.snapshots.volatility`). A load that fails is skipped. Returns the
        requests noted."""
        assert self.recorder is not None
        pages = list(dict.fromkeys(u for u in (urls if urls is not None else self.writer.pages) if u.startswith("http")))
        noted: list[Any] = []
        self.recorder.divert = noted
        try:
            for url in pages:
                context = new_context()
                try:
                    page = context.new_page()
                    page.goto(url, wait_until="load", timeout=timeout_s * 1000)
                    page.wait_for_load_state("networkidle", timeout=timeout_s * 1000)
                except Exception as e:  # noqa: BLE001 - learning only: the recording stands without it
                    log.warning("ego2web-replay: second load of %s: %s", url, str(e).splitlines()[0] if str(e) else e)
                finally:
                    context.close()
        finally:
            self.recorder.divert = None
        self.writer.reloads.extend(noted)
        return len(noted)

    def pages_from(self, traj: Any) -> None:
        seen: set[str] = set()
        for step in traj.steps:
            if step.url and step.url not in seen and step.url.startswith("http"):
                seen.add(step.url)
                self.writer.add_page(step.url)

    def __enter__(self) -> LiveRecording:
        self.open()
        try:
            self.start()
        except BaseException:
            self.writer.writer.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def record_task(task: Task, root: Path, opts: RecordOptions | None = None, *, ca: ProjectCA | None = None,
                actions: Sequence[Any] | None = None) -> RecordResult:
    """Record one task into ``root/<task-id>/<snapshot-id>/``."""
    opts = opts or RecordOptions()
    live = LiveRecording(task, root, opts, ca=ca)
    live.open()
    assert live.recorder is not None and live.guard is not None
    error: str | None = None
    try:
        live.start()
        _browse(live, task, opts, actions)
    except Ego2WebError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - a failing task is reported and the others go on
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    live.finish(error)
    return RecordResult(task_id=task.id, ok=live.ok, snapshot=live.snapshot_path, manifest=live.manifest,
                        error=live.error, exchanges=live.recorder.exchanges, blocked=dict(live.guard.counts),
                        refused=live.refused)


def _browse(live: LiveRecording, task: Task, opts: RecordOptions, actions: Sequence[Any] | None) -> None:
    """Chromium through the recording proxy: the task's actions, or a person until the window closes."""
    assert live.recorder is not None
    sw = live.writer
    with BrowserSession(proxy_url=live.proxy_url, spki=live.ca.spki, headless=not opts.interactive) as browser:
        context = browser.new_context()
        page = context.new_page()
        page.on("framenavigated", lambda f: sw.add_page(f.url) if f == page.main_frame and f.url.startswith("http") else None)
        if opts.interactive:
            page.goto(task.start_url, wait_until="load")
            page.wait_for_event("close", timeout=0)
        else:
            _run_actions(page, task, actions if actions is not None else task.reference_actions,
                         sw, opts, live.recorder)
        context.close()
        if opts.second_load:
            live.second_load(browser.new_context, timeout_s=opts.action_timeout_s)


def _check_trust(task: Task, recorder: ExchangeArchive) -> None:
    """Stop with the certificate problem itself, not a click timeout on an error page."""
    if recorder.untrusted:
        raise RecordingError(
            f"task {task.id}: the recorder does not trust the certificate of {recorder.untrusted[0]}; "
            "if the site is yours or a test site, pass --upstream-ca CA.pem (the CA that signed its "
            "certificate) to trust it")


def _run_actions(page: Any, task: Task, actions: Sequence[Any], sw: Any, opts: RecordOptions,
                 recorder: ExchangeArchive) -> None:
    steps = list(actions)
    if not steps or steps[0].kind != "goto":
        from ..models import Action

        steps.insert(0, Action(kind="goto", url=task.start_url))
    for i, action in enumerate(steps):
        if action.kind in ("answer", "stop"):
            continue
        try:
            perform_action(page, action, timeout_s=opts.action_timeout_s)
        except Exception as e:  # noqa: BLE001
            _check_trust(task, recorder)
            raise RecordingError(f"task {task.id}: step {i} ({action.describe()}) failed: "
                                 f"{str(e).splitlines()[0]}") from None
        _check_trust(task, recorder)
        if recorder.failed:
            raise RecordingError(recorder.failed)
        if opts.screenshots:
            rel = f"screenshots/step-{i:03d}.png"
            take_screenshot(page, sw.path / rel)
            sw.add_screenshot(rel)

