"""Runs: a task suite × modes × one agent → a run folder of episodes.

``<out>/<run-id>/run.json`` is the run manifest (a reproducibility journal:
suite hash, agent spec, tool versions, git commit, machine). Episodes are run
in order (``--mode both``: live then frozen, paired per task), by ``workers``
processes at once; each worker keeps one Chromium and one replay front for
its warm episodes (``warm.py``; frozen, step agents) and starts a proxy and a
Chromium for each other episode (mitmproxy allows one proxy per process). A finished episode is a
``trajectory.json`` in its folder; ``resume`` skips those and redoes the rest.
With ``repeats`` K each task is run K times in each mode (repeat 0 in
``episodes/<task>/<mode>``, repeat r in ``<mode>-r<r>``); resume knows which
repeats are finished, and may raise K (never lower it).

Each task's snapshot is chosen once, when the run starts (:func:`pin_snapshots`: the task's newest
then, found from one listing of the root, or ``--snapshot-id``), kept in ``run.json`` (``snapshots``) and handed to every episode (a Ray
worker's too): a snapshot recorded while the run goes on changes nothing, a resumed run replays what
it started with, and no episode asks the store which snapshot is the newest.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import Ego2WebError, SnapshotError
from ..models import (
    RunManifest,
    RunSettings,
    TaskSuite,
    check_id,
    end_reason_counts,
    load_run,
    save_model,
)
from ..snapshots.location import as_location, name_of
from ..snapshots.rootlist import RootListing
from ..versions import tool_versions
from ..wire.budget import WireLimits
from .episode import EpisodeRequest, EpisodeSummary, find_snapshot
from .executor import Executor, default_executor
from .inputs import apply_inputs
from .locking import RunFolderLock

__all__ = ["RunManifest", "RunSettings", "run_suite", "list_runs", "load_run", "find_resumable_run",
           "pin_snapshots", "pin_share_sources", "start_listing", "PIN_WORKERS"]

log = logging.getLogger(__name__)

MODES = {"live": ("live",), "frozen": ("frozen",), "both": ("live", "frozen")}


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _machine() -> dict[str, Any]:
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "memory_bytes": mem, "hostname": platform.node()}


def _new_run_id(agent_name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    short = agent_name.split(":")[0].replace("/", "-")[:16]
    return f"{stamp}-{short}-{uuid.uuid4().hex[:6]}"


def list_runs(out: Path) -> list[tuple[Path, RunManifest]]:
    """Run folders under ``out``, newest first."""
    runs = []
    if Path(out).is_dir():
        for d in Path(out).iterdir():
            if (d / "run.json").exists():
                try:
                    runs.append((d, load_run(d)))
                except Ego2WebError:
                    continue
    return sorted(runs, key=lambda r: r[1].started_at, reverse=True)


def find_resumable_run(out: Path, suite: TaskSuite, agent_name: str) -> Path | None:
    """The newest run under ``out`` of the same suite file and agent."""
    for d, m in list_runs(out):
        if m.suite_sha256 == suite.sha256 and m.agent_name == agent_name:
            return d
    return None


PIN_WORKERS = 8  # lookups at once when a run starts (each about 3 store requests on s3://)


def start_listing(settings: RunSettings) -> RootListing | None:
    """The one listing of the run's snapshots root that its start's lookups share (None without a root)."""
    return RootListing(as_location(settings.snapshots_root)) if settings.snapshots_root else None


def pin_snapshots(settings: RunSettings, task_ids: Sequence[str], held: dict[str, str] | None = None,
                  on_progress: Callable[[int, int], None] | None = None,
                  listing: RootListing | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Each task's snapshot for the whole run, chosen once before any episode: ``(pins, errors)``.

    ``pins``: task id → snapshot id (``held``'s, a resumed run's, kept; else ``settings.snapshot_id``,
    which each episode checks as before; else the task's newest now). ``errors``: task id → why the
    task has none (no snapshot, no ``--snapshots``, the store unreachable): each of its frozen episodes
    is a ``setup_error`` saying so, as when it looked for itself. Nothing is looked up for a live run.
    The newest snapshots are found from one listing of the root (``listing``, default
    :func:`start_listing`'s; :class:`~ego2web_replay.snapshots.rootlist.RootListing`: the same answers
    as a lookup per task), each task's folder read :data:`PIN_WORKERS` at a time (a 500-task suite on
    ``s3://`` would otherwise wait on its requests in turn); both maps are in task order whatever order
    the answers came in. ``on_progress(done, total)`` is called, in this thread, as lookups finish.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    pins: dict[str, str] = {}
    errors: dict[str, str] = {}
    if "frozen" not in MODES[settings.mode]:
        return pins, errors
    listing = listing if listing is not None else start_listing(settings)
    todo = [t for t in task_ids if not (held and t in held) and not settings.snapshot_id]
    found: dict[str, str | SnapshotError] = {}

    def newest(task_id: str) -> str | SnapshotError:
        try:
            return name_of(find_snapshot(None, task_id, None) if listing is None else listing.newest(task_id))
        except SnapshotError as e:
            return e

    if todo:
        if listing is not None:
            listing.prepare(len(todo))  # the root listed once, before the lookups share it
        with ThreadPoolExecutor(max_workers=min(PIN_WORKERS, len(todo)), thread_name_prefix="pin") as pool:
            futures = {pool.submit(newest, t): t for t in todo}
            for n, future in enumerate(as_completed(futures), 1):
                found[futures[future]] = future.result()
                if on_progress:
                    on_progress(n, len(todo))
    for task_id in task_ids:
        if held and task_id in held:
            pins[task_id] = held[task_id]
        elif settings.snapshot_id:
            pins[task_id] = settings.snapshot_id
        else:
            got = found[task_id]
            if isinstance(got, SnapshotError):
                errors[task_id] = str(got)
            else:
                pins[task_id] = got
    return pins, errors


def pin_share_sources(settings: RunSettings, pins: dict[str, str],
                      listing: RootListing | None = None) -> dict[str, str] | None:
    """The snapshots shared captures may draw on for the whole run (``--share-window``), chosen once when
    it starts: task id → snapshot id of every task under the (local) snapshots root, the run's own pin for
    a task of the run, the newest finished snapshot then for any other task (the window reaches every task
    of the root, :func:`~ego2web_replay.replay.shared.root_latest`). A run's task without a finished
    snapshot under its pin is none. None when there is nothing to pin: sharing off, a live run, an
    object-storage root (shared captures are for local roots only). ``listing``: the start's listing of
    the root (:func:`start_listing`), so that :func:`pin_snapshots` and this read each task's folder once."""
    if "frozen" not in MODES[settings.mode] or settings.replay.share_window_s is None or not settings.snapshots_root:
        return None
    root = as_location(settings.snapshots_root)
    if not isinstance(root, Path) or not root.is_dir():
        return None
    if listing is None or listing.root != root:
        listing = RootListing(root)
    sources: dict[str, str] = {}
    for info in listing.infos():  # tasks in name order, newest first
        if info.manifest is None:
            continue
        if info.task_id in pins:
            if info.snapshot_id == pins[info.task_id]:
                sources[info.task_id] = info.snapshot_id
        else:
            sources.setdefault(info.task_id, info.snapshot_id)
    return sources


def _requests(run_dir: Path, suite: TaskSuite, task_ids: Sequence[str], agent_name: str,
              agent_settings: dict[str, Any], s: RunSettings,
              upstream_ca: Path | None, wire: WireLimits | None = None,
              pins: dict[str, str] | None = None, errors: dict[str, str] | None = None,
              share_pins: dict[str, str] | None = None) -> Iterator[EpisodeRequest]:
    pins, errors = pins or {}, errors or {}
    for task in suite.select(list(task_ids)):
        for repeat in range(s.repeats):
            for mode in MODES[s.mode]:
                yield EpisodeRequest(
                    run_dir=run_dir, task=task, suite_dir=suite.base_dir, suite_path=suite.path, mode=mode,
                    agent_name=agent_name,
                    agent_settings=agent_settings,
                    snapshots_root=as_location(s.snapshots_root) if s.snapshots_root else None,
                    snapshot_id=pins.get(task.id, s.snapshot_id), snapshot_error=errors.get(task.id),
                    share_pins=share_pins,
                    max_steps=s.max_steps, timeout_s=s.timeout_s, action_timeout_s=s.action_timeout_s, guard=s.guard,
                    upstream_ca=upstream_ca, replay=s.replay, keep_credentials=s.keep_credentials, inputs=s.inputs,
                    repeat=repeat, wire=wire, warm=s.warm)


def _lost_to_infrastructure(episode: Path) -> bool:
    """An episode recorded as ``infra_error`` (its worker or node died) is run again on resume."""
    try:
        return json.loads((episode / "trajectory.json").read_text("utf-8")).get("end_reason") == "infra_error"
    except (OSError, ValueError):
        return False


def run_suite(suite: TaskSuite, *, agent_name: str, out: Path, settings: RunSettings,
              agent_settings: dict[str, Any] | None = None, task_ids: Sequence[str] = (),
              resume: bool | Path = False, run_id: str | None = None, upstream_ca: Path | None = None,
              command: Sequence[str] = (),
              on_episode: Callable[[EpisodeSummary], None] | None = None,
              on_start: Callable[[Path, int, int], None] | None = None,
              on_pin: Callable[[int, int], None] | None = None,
              executor: Executor | None = None, wire: WireLimits | None = None) -> tuple[Path, list[EpisodeSummary]]:
    """Run (or resume) a suite; returns the run folder and the summaries of the episodes run now.

    Episodes run on ``executor`` (default: in this process for one worker, else a local process
    pool of ``settings.workers``); ``on_episode`` is called here, in the caller's process, with
    each summary as it comes back. ``wire``: the bounds and timeouts of each episode's proxy toward
    its agent (default: from the environment; docs/limits.md). ``on_pin(done, total)``: the
    progress of the start's snapshot lookups (:func:`pin_snapshots`).
    """
    from ..agents import make_agent
    from ..browser import chromium_version

    if settings.mode not in MODES:
        raise Ego2WebError(f"unknown mode {settings.mode!r}; use live, frozen or both")
    if run_id is not None:
        try:
            check_id("run id", run_id)  # '/tmp/x', '..' or 'a b' would write outside --out or collide
        except ValueError as e:
            raise Ego2WebError(str(e)) from None
    agent_settings = dict(agent_settings or {})
    agent = make_agent(agent_name, **agent_settings)  # validates the name and settings before any work
    apply_inputs(agent.spec, settings.inputs)
    out = Path(out)
    run_dir: Path | None = None
    if isinstance(resume, Path):
        run_dir = resume
    elif resume:
        run_dir = (out / run_id) if run_id else find_resumable_run(out, suite, agent_name)
        if run_dir is None:
            raise Ego2WebError(f"nothing to resume under {out} for this suite and agent; run without --resume")
    if run_dir is not None:
        held = RunFolderLock(run_dir).acquire()  # released when the run ends or this process dies
        manifest = load_run(run_dir)
        if manifest.suite_sha256 and manifest.suite_sha256 != suite.sha256:
            raise Ego2WebError(f"{run_dir} was run on a different version of the task file; not resuming")
        if manifest.agent_name != agent_name:
            raise Ego2WebError(f"{run_dir} was run with agent {manifest.agent_name!r}, not {agent_name!r}; not resuming")
        # the run's own settings keep its episodes comparable; only the parallelism (and warm or cold) may change, and
        # the number of repeats may grow (more samples of the same tasks; never fewer)
        settings = manifest.settings.model_copy(update={
            "workers": settings.workers, "warm": settings.warm,
            "repeats": max(settings.repeats, manifest.settings.repeats)})
        listing = start_listing(settings)
        pins, errors = pin_snapshots(settings, manifest.task_ids or [t.id for t in suite.select(list(task_ids))],
                                     held=manifest.snapshots, on_progress=on_pin, listing=listing)
        share_pins = manifest.shared_snapshots  # kept: a resume draws on the sources the run started with
        if share_pins is None:  # a run from before they were pinned
            share_pins = pin_share_sources(settings, pins, listing)
        if (settings.repeats != manifest.settings.repeats or pins != manifest.snapshots
                or share_pins != manifest.shared_snapshots):
            manifest.settings = manifest.settings.model_copy(update={"repeats": settings.repeats})
            manifest.snapshots, manifest.shared_snapshots = pins, share_pins
            save_model(run_dir / "run.json", manifest)
    else:
        chosen = [t.id for t in suite.select(list(task_ids))]
        listing = start_listing(settings)  # the root listed once for both
        pins, errors = pin_snapshots(settings, chosen, on_progress=on_pin, listing=listing)  # before any episode
        share_pins = pin_share_sources(settings, pins, listing)
        run_dir = out / (run_id or _new_run_id(agent_name))
        if (run_dir / "run.json").exists():
            raise Ego2WebError(f"run {run_dir} exists already; use --resume to finish it")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Ego2WebError(f"cannot create the run folder {run_dir}: {e.strerror or e}") from None
        held = RunFolderLock(run_dir).acquire()
        if (run_dir / "run.json").exists():  # another run took this id between the check and the lock
            held.release()
            raise Ego2WebError(f"run {run_dir} exists already; use --resume to finish it")
        manifest = RunManifest(run_id=run_dir.name, started_at=datetime.now(UTC),
                               suite_path=str(suite.path) if suite.path else None, suite_sha256=suite.sha256,
                               task_ids=chosen, snapshots=pins, shared_snapshots=share_pins, agent=agent.spec,
                               agent_name=agent_name, modes=list(MODES[settings.mode]), settings=settings,
                               versions=tool_versions({"chromium": chromium_version()}), git_commit=_git_commit(), machine=_machine(),
                               command=list(command))
        save_model(run_dir / "run.json", manifest)
    todo = []
    for req in _requests(run_dir, suite, manifest.task_ids or list(task_ids), agent_name, agent_settings, settings,
                         upstream_ca, wire, pins, errors, share_pins):
        final = req.folder
        if (final / "trajectory.json").exists() and not _lost_to_infrastructure(final):
            continue
        todo.append(req)
    total = len(list(_requests(run_dir, suite, manifest.task_ids or list(task_ids), agent_name, agent_settings,
                               settings, upstream_ca)))
    if on_start:
        on_start(run_dir, total, total - len(todo))
    results: list[EpisodeSummary] = []

    def done(summary: EpisodeSummary) -> None:
        misses = "" if summary.misses is None else f", {summary.misses} replay misses"
        log.info("episode end: %s %s%s: %s in %d steps%s%s", summary.task_id, summary.mode,
                 f" repeat {summary.repeat}" if summary.repeat else "", summary.end_reason,
                 summary.steps, misses, f" ({summary.error})" if summary.error else "")
        results.append(summary)
        if on_episode:
            on_episode(summary)

    for summary in (executor or default_executor(settings.workers, len(todo))).run(todo):
        done(summary)
    manifest = load_run(run_dir)
    manifest.finished_at = datetime.now(UTC)
    manifest.episodes = end_reason_counts(run_dir)
    save_model(run_dir / "run.json", manifest)
    held.release()  # on an exception the lock file closes with this frame (or with the process)
    return run_dir, results


