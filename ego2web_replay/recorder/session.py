"""A recording session: the recording proxy plus Chromium, for one task at a time.

``record_task`` starts the proxy with ``record_addons()`` (upstream guard,
recorder), drives Chromium through the task's reference actions (or lets a
person browse, in interactive mode), saves a screenshot after each action, then
finalizes the snapshot (index + manifest, atomically). A task that fails leaves
its folder without a manifest, which ``snapshot verify`` reports as incomplete.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .. import __version__
from ..browser import BrowserSession, chromium_version, perform_action, take_screenshot
from ..errors import Ego2WebError, RecordingError
from ..guard import UpstreamGuard
from ..models import SnapshotManifest
from ..proxy import ProjectCA, ProxyServer, project_ca
from ..redaction import Redactor
from ..tasks import Task
from .addon import Recorder

__all__ = ["RecordOptions", "RecordResult", "LiveRecording", "record_addons", "record_task", "record_tasks",
           "tool_versions"]


def tool_versions() -> dict[str, str]:
    """Versions of everything that shapes a capture."""
    import mitmproxy.version
    import playwright

    out = {
        "ego2web-replay": __version__,
        "python": platform.python_version(),
        "mitmproxy": mitmproxy.version.VERSION,
        "chromium": chromium_version(),
    }
    try:
        from importlib.metadata import version

        out["playwright"] = version("playwright")
        out["warcio"] = version("warcio")
        out["zstandard"] = version("zstandard")
    except Exception:  # noqa: BLE001 - versions are informative only
        out.setdefault("playwright", getattr(playwright, "__version__", "unknown"))
    return out


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


@dataclass
class RecordResult:
    task_id: str
    ok: bool
    snapshot: Path | None = None
    manifest: SnapshotManifest | None = None
    error: str | None = None
    exchanges: int = 0
    blocked: dict[str, int] = field(default_factory=dict)


def record_addons(writer: Any, *, keep_credentials: bool = False, redactor: Redactor | None = None) -> list[Any]:
    """The recording proxy, in order: guard first, then the recorder."""
    return [UpstreamGuard(), Recorder(writer, keep_credentials=keep_credentials, redactor=redactor)]


def redactor_for(opts: RecordOptions) -> Redactor:
    """The credential redaction a recording with these options applies (see :mod:`..redaction`)."""
    return Redactor.make(keep_credentials=opts.keep_credentials, headers=opts.redact_headers,
                         params=opts.redact_params)


def _settings(opts: RecordOptions, **more: Any) -> dict[str, Any]:
    return {"compression": opts.compression, "guard": opts.guard, "keep_credentials": opts.keep_credentials,
            "redaction": redactor_for(opts).settings(), **more}


def proxy_options(opts: RecordOptions) -> dict[str, Any]:
    o: dict[str, Any] = {"guard_mode": opts.guard, "guard_allow": list(opts.allow), "guard_deny": list(opts.deny)}
    if opts.upstream_ca:
        o["ssl_verify_upstream_trusted_ca"] = str(opts.upstream_ca)
    return o


class LiveRecording:
    """The recording proxy for one task as a context manager (used by live runs).

    On exit the snapshot is finalized (index + manifest) unless the recorder
    failed; ``ok``, ``error`` and ``snapshot_path`` say how it went.
    """

    def __init__(self, task: Task, root: Path, opts: RecordOptions | None = None, *,
                 ca: ProjectCA | None = None) -> None:
        self.task, self.root, self.opts = task, Path(root), opts or RecordOptions(source="live-run")
        self.ca = ca or project_ca()
        self.proxy: ProxyServer | None = None
        self.writer: Any = None
        self.recorder: Recorder | None = None
        self.guard: UpstreamGuard | None = None
        self.snapshot_path: Path | None = None
        self.manifest: SnapshotManifest | None = None
        self.ok = False
        self.error: str | None = None

    @property
    def proxy_url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    def __enter__(self) -> LiveRecording:
        from ..snapshots.snapshot import SnapshotWriter

        o = self.opts
        settings = _settings(o)
        try:
            self.writer = SnapshotWriter(self.root, self.task.id, compression=o.compression, source=o.source,
                                         start_url=self.task.start_url, settings=settings, tools=tool_versions())
        except OSError as e:
            raise RecordingError(f"cannot create a snapshot under {self.root}: {e.strerror or e}") from None
        self.snapshot_path = self.writer.path
        self.guard, self.recorder = record_addons(self.writer.writer, keep_credentials=o.keep_credentials,
                                                  redactor=redactor_for(o))
        self.proxy = ProxyServer([self.guard, self.recorder], ca=self.ca, options=proxy_options(o))
        try:
            self.proxy.start()
        except BaseException:
            self.writer.writer.close()
            raise
        return self

    def pages_from(self, traj: Any) -> None:
        seen: set[str] = set()
        for step in traj.steps:
            if step.url and step.url not in seen and step.url.startswith("http"):
                seen.add(step.url)
                self.writer.add_page(step.url)

    def __exit__(self, *exc: object) -> None:
        assert self.proxy is not None and self.recorder is not None
        self.proxy.stop()
        if self.recorder.failed:
            self.error = self.recorder.failed
            self.writer.writer.close()
            return
        try:
            self.manifest = self.writer.finalize()
            self.ok = True
        except Exception as e:  # noqa: BLE001
            self.error = f"cannot finalize the snapshot: {e}"
            self.writer.writer.close()


def record_task(task: Task, root: Path, opts: RecordOptions | None = None, *, ca: ProjectCA | None = None,
                actions: Sequence[Any] | None = None) -> RecordResult:
    """Record one task into ``root/<task-id>/<snapshot-id>/``."""
    from ..snapshots.snapshot import SnapshotWriter

    opts = opts or RecordOptions()
    ca = ca or project_ca()
    settings = _settings(opts, interactive=opts.interactive)
    try:
        sw = SnapshotWriter(Path(root), task.id, compression=opts.compression, source=opts.source,
                            start_url=task.start_url, settings=settings, tools=tool_versions())
    except Ego2WebError:
        raise
    except OSError as e:
        raise RecordingError(f"cannot create a snapshot under {root}: {e.strerror or e}") from None
    addons = record_addons(sw.writer, keep_credentials=opts.keep_credentials, redactor=redactor_for(opts))
    guard, recorder = addons
    result = RecordResult(task_id=task.id, ok=False, snapshot=sw.path)
    try:
        with ProxyServer(addons, ca=ca, options=proxy_options(opts)) as proxy:
            with BrowserSession(proxy_url=proxy.url, spki=ca.spki, headless=not opts.interactive) as browser:
                context = browser.new_context()
                page = context.new_page()
                page.on("framenavigated", lambda f: sw.add_page(f.url) if f == page.main_frame and f.url.startswith("http") else None)
                if opts.interactive:
                    page.goto(task.start_url, wait_until="load")
                    page.wait_for_event("close", timeout=0)
                else:
                    _run_actions(page, task, actions if actions is not None else task.reference_actions,
                                 sw, opts, recorder)
                context.close()
        if recorder.failed:
            raise RecordingError(recorder.failed)
        result.manifest = sw.finalize()
        result.ok = True
    except Ego2WebError as e:
        result.error = str(e)
        sw.writer.close()
    except Exception as e:  # noqa: BLE001 - a failing task is reported and the others go on
        result.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        sw.writer.close()
    result.exchanges = recorder.exchanges
    result.blocked = dict(guard.counts)
    return result


def _run_actions(page: Any, task: Task, actions: Sequence[Any], sw: Any, opts: RecordOptions,
                 recorder: Recorder) -> None:
    steps = list(actions)
    if not steps or steps[0].kind != "goto":
        from ..actions import Action

        steps.insert(0, Action(kind="goto", url=task.start_url))
    for i, action in enumerate(steps):
        if action.kind in ("answer", "stop"):
            continue
        try:
            perform_action(page, action, timeout_s=opts.action_timeout_s)
        except Exception as e:  # noqa: BLE001
            raise RecordingError(f"task {task.id}: step {i} ({action.describe()}) failed: "
                                 f"{str(e).splitlines()[0]}") from None
        if recorder.failed:
            raise RecordingError(recorder.failed)
        if opts.screenshots:
            rel = f"screenshots/step-{i:03d}.png"
            take_screenshot(page, sw.path / rel)
            sw.add_screenshot(rel)


def record_tasks(tasks: Sequence[Task], root: Path, opts: RecordOptions | None = None, *,
                 progress: Callable[[RecordResult], None] | None = None) -> list[RecordResult]:
    """Record several tasks one after the other; failures are reported, the rest go on."""
    ca = project_ca()
    results = []
    for task in tasks:
        r = record_task(task, root, opts, ca=ca)
        results.append(r)
        if progress:
            progress(r)
    return results
