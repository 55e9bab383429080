"""Replaying snapshots: the Python API and what ``serve`` runs.

::

    from ego2web_replay.replay import Replay

    with Replay(["snapshots/T1/20261130T071500Z"]) as replay:
        with replay.browser() as browser:          # Chromium wired to the replay
            page = browser.new_context().new_page()
            page.goto("https://shop.example/item/42")
        print(replay.stats().miss)

``Replay`` opens the snapshots, builds one match index over all of their
captures (in recorded order), starts the hermetic replay proxy on 127.0.0.1
(``replay_addons()``: upstream guard, replayer) and yields what a client
needs: ``proxy_url``, ``ca_file``, ``spki``, ``init_script`` (the determinism
script, for clients that add it themselves).

Two engines carry the requests to the same :class:`~.responder.Responder`: the
fast asyncio front end (:mod:`.front`, ``engine="fast"``) and mitmproxy
(``engine="mitmproxy"``, the only one that can forward a miss upstream with
``miss="live"``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ArchiveError, ReplayError, SnapshotError
from ..guard import UpstreamGuard
from ..models import ReplayStats, save_model
from ..models.replay_config import MISS_POLICIES, ReplayConfig
from ..proxy import ProjectCA, ProxyServer, project_ca
from ..redaction import Redactor
from ..snapshots.index_cache import index_rows
from ..snapshots.location import as_location, name_of
from ..validity import classify
from ..wire.budget import WireLimits
from . import gcfreeze
from .addon import Replayer
from .httputil import vary_names
from .matching import Capture, IndexBase, MatchIndex
from .responder import Responder
from .rules import load_rules
from .shared import SharedMatcher, SuiteIndex, SuitePaths, in_window, pinned_latest, root_latest
from .stream import StreamMeta, stream_meta

log = logging.getLogger(__name__)

__all__ = ["Replay", "ReplayConfig", "replay_addons", "load_captures", "load_learned", "index_mode", "MISS_POLICIES",
           "INDEX_MODES"]

INDEX_MODES = ("auto", "memory", "mapped")
MAPPED_MIN_BYTES = 512 * 1024  # about 2,000 index lines: below, parsing is quicker than mapping


def index_mode(snapshots: Sequence[Any], wanted: str | None = None) -> str:
    """How to hold the snapshots' indexes: ``memory`` (parsed into a :class:`MatchIndex`) or ``mapped``
    (a :class:`~.mapped.MappedMatchIndex` over sorted files). ``wanted`` (default: the environment's
    ``EGO2WEB_REPLAY_INDEX``, else ``auto``) ``auto`` maps the indexes once they hold 512 KiB of
    lines together. An index is mapped from its file on this machine: a local snapshot's, or the copy
    that a snapshot on object storage keeps in its local view (:mod:`~ego2web_replay.snapshots.location`)."""
    mode = (wanted or os.environ.get("EGO2WEB_REPLAY_INDEX") or "auto").strip().lower()
    if mode not in INDEX_MODES:
        raise ReplayError(f"unknown index mode {mode!r}; use {', '.join(INDEX_MODES)}")
    local = all(Path(s.index_path).is_file() for s in snapshots)
    if mode == "mapped" and not local:
        raise ReplayError("a mapped index needs the snapshots' index files on this machine; use the memory index")
    if mode == "auto":
        size = sum(Path(s.index_path).stat().st_size for s in snapshots) if local else 0
        mode = "mapped" if local and size >= MAPPED_MIN_BYTES else "memory"
    return mode


def load_captures(snapshots: Sequence[Any]) -> list[Capture]:
    """Captures of every indexed response/revisit/resource, snapshot by snapshot, in recorded order.

    The index is read in one pass into light tuples; an entry is parsed fully
    (:class:`~ego2web_replay.snapshots.cdxj.CdxjEntry`) only when it is served, so a
    100k-line index loads in well under a second. Request bodies stay in the index's
    POST form (``requestBody``); the matcher puts incoming bodies in the same form.
    """
    caps: list[Capture] = []
    new = tuple.__new__  # Capture is a named tuple; building it this way is 3x faster for big indexes
    for n, snap in enumerate(snapshots):
        for ts, _offset, url, method, body_query, line in index_rows(Path(snap.index_path)):
            caps.append(new(Capture, (url, method, body_query or None, ts, (n, line))))
    return caps


def load_learned(snapshots: Sequence[Any]) -> dict[str, frozenset[str]]:
    """The names learned volatile at record time, over all snapshots (``volatile.json``).

    A snapshot written before learning existed has no file: its index is read to learn them now, once
    per index version (:mod:`~ego2web_replay.snapshots.learned_cache` keeps them in ``index-cache/``).
    """
    from ..snapshots.learned_cache import learned_of_index
    from ..snapshots.volatility import VOLATILE_FILE, merge_volatile, read_volatile

    found = []
    for snap in snapshots:
        if (Path(snap.path) / VOLATILE_FILE).is_file():
            found.append(read_volatile(snap.path))
        else:
            found.append(learned_of_index(Path(snap.index_path), snap.entries))
    return merge_volatile(*found)


def _capture_time(snapshot: Any, first: str | None) -> dt.datetime:
    """When the first snapshot's pages were captured: the recording's start, or for an imported
    WARC (whose manifest dates the import) its earliest capture (``first``, 14 digits)."""
    if snapshot.manifest.source == "import" and first:
        try:
            return dt.datetime.strptime(first[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
        except ValueError:
            pass
    return snapshot.manifest.created_at


def _refuse_corrupt(path: Any, problems: list[str]) -> None:
    """SnapshotError naming what :func:`~ego2web_replay.snapshots.verify.integrity_problems` found."""
    if problems:
        raise SnapshotError(f"{path}: corrupt snapshot: {'; '.join(problems)} (run `ego2web-replay "
                            "snapshot verify`; `serve --allow-corrupt` serves what it can)")


def snapshots_redactor(snapshots: Sequence[Any]) -> Redactor | None:
    """The credential redaction to apply to incoming requests: the recording's (the union of the
    snapshots' extra names), or None when no snapshot was recorded with redaction."""
    found = [r for r in (Redactor.from_settings(s.manifest.settings) for s in snapshots) if r is not None]
    if not found:
        return None
    return Redactor.make(headers=[h for r in found for h in r.extra_headers],
                         params=[p for r in found for p in r.params])


def replay_addons(replayer: Replayer) -> list[Any]:
    """The replay proxy, in order: guard (browser background hosts), then the replayer."""
    return [UpstreamGuard(), replayer]


class Replay:
    """A running hermetic replay of one or more snapshots (see the module docstring)."""

    def __init__(self, snapshots: Sequence[str | Path], config: ReplayConfig | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, ca: ProjectCA | None = None, guard_mode: str = "open",
                 check: bool = True, index: str | None = None, processes: int = 1, wire: WireLimits | None = None,
                 share_root: Path | None = None, share_pins: dict[str, str] | None = None,
                 **overrides: Any) -> None:
        """``config`` (default: :class:`ReplayConfig` defaults) with ``overrides`` of its fields
        (``miss``, ``sequence`` or its old name ``policy``, ``freeze``, ``fuzzy``, ``fuzzy_threshold``,
        ``seed``, ``rules_files``). ``index`` is how the indexes are held (:func:`index_mode`).
        ``processes`` > 1 serves from that many worker processes on one port (:mod:`.workers`;
        fast engine only). ``wire``: the fast engine's bounds and timeouts (default: from the
        environment, docs/limits.md); they decide no answer of the snapshot's, so they are not in the
        replay configuration. ``share_root``: where the sources of shared captures are looked for when the
        configuration has a ``share_window_s`` (default: the first snapshot's grandparent, the snapshots
        root of ``<root>/<task>/<id>``; :mod:`.shared`). ``share_pins``: the snapshot of each task that
        may be a source (task id -> snapshot id, pinned when a run started) instead of each task's newest
        when the replay opens (None: the newest, as ``serve`` and ``replay`` do)."""
        if not snapshots:
            raise ReplayError("give at least one snapshot folder to replay")
        if "policy" in overrides:
            overrides["sequence"] = overrides.pop("policy")
        base = config or ReplayConfig()
        merged = {**base.model_dump(), **overrides}
        if "engine" not in overrides and str(overrides.get("miss", "")).strip().lower() == "live":
            merged.pop("engine")  # live misses pick the engine that can forward them
        self.config = ReplayConfig.make(**merged) if overrides else base
        self.paths = [as_location(p) for p in snapshots]  # folders, or object-storage URLs
        self.host, self.port = host, port
        self.guard_mode = guard_mode
        self.check = check  # compare archive and index with the manifest (size, sha256) before serving
        self.index_mode = index
        if processes < 1:
            raise ReplayError(f"processes must be at least 1, not {processes}")
        if processes > 1 and self.config.engine != "fast":
            raise ReplayError("several processes need the fast engine (not --engine mitmproxy or --miss live)")
        self.processes = processes
        self.wire = wire
        self.share_root = share_root
        self.share_pins = share_pins
        self.shared: SharedMatcher | None = None  # other tasks' snapshots (share_window_s), once open
        self._sources: list[Any] = []  # what a capture's ref resolves in: the own snapshots, then the shared ones
        self._refused: dict[str, int] = {}  # what the fast engine's bounds refused, kept when it stops
        self._final: ReplayStats | None = None  # the workers' counts, kept when they stop
        self.ca = ca
        self.snapshots: list[Any] = []
        self.proxy: Any = None  # a FrontServer (engine fast) or a ProxyServer (engine mitmproxy)
        self.responder: Responder | None = None
        self.index: IndexBase | None = None  # the opened match index (open())
        self._redactor: Redactor | None = None
        self.capture_time: dt.datetime | None = None
        self.init_script: str = ""
        self.load_seconds = 0.0
        self.captures = 0
        self._frozen = False

    @property
    def replayer(self) -> Responder | None:
        """The responder (its old name, from when only the mitmproxy addon answered)."""
        return self.responder

    @property
    def miss(self) -> str:
        return self.config.miss

    @property
    def policy(self) -> str:
        return self.config.sequence

    @property
    def freeze(self) -> bool:
        return self.config.freeze

    # -- what a client needs -------------------------------------------------
    @property
    def proxy_url(self) -> str:
        if self.proxy is None:
            raise ReplayError("the replay is not running")
        return self.proxy.url

    @property
    def ca_file(self) -> Path:
        assert self.ca is not None
        return self.ca.cert_path

    @property
    def spki(self) -> str:
        assert self.ca is not None
        return self.ca.spki

    def stats(self, responder: Responder | None = None) -> ReplayStats:
        """The counts so far, with the replay configuration they were served under (``responder``:
        those of one made by :meth:`new_responder` instead of the replay's own)."""
        from .workers import WorkerPool

        if responder is not None:
            stats = responder.snapshot_stats()
        elif isinstance(self.proxy, WorkerPool):
            stats = self.proxy.stats()
        elif self._final is not None:
            stats = self._final.model_copy(deep=True)
        elif self.responder is None:
            stats = ReplayStats(snapshots=[str(p) for p in self.paths])
        else:
            stats = self.responder.snapshot_stats()
            stats.refused = dict(getattr(self.proxy, "refused", None) or self._refused)  # (workers: their own)
        stats.config = self.config.model_dump(mode="json")
        stats.shared_sources = list(self.shared.suite.ids) if self.shared is not None else []
        stats.validity = classify(stats.log, stats.truncated, stats.again)
        return stats

    def write_stats(self, path: Path) -> None:
        save_model(path, self.stats())

    @contextmanager
    def browser(self, **kwargs: Any) -> Iterator[Any]:
        """A Chromium session through this replay; contexts get the determinism script."""
        from ..browser import BrowserSession

        session = BrowserSession(proxy_url=self.proxy_url, spki=self.spki, **kwargs).start()
        original = session.new_context

        def new_context(**kw: Any) -> Any:
            scripts = list(kw.pop("init_scripts", ())) + ([self.init_script] if self.init_script else [])
            return original(init_scripts=scripts, **kw)

        session.new_context = new_context  # type: ignore[method-assign]
        try:
            yield session
        finally:
            session.close()

    # -- lifecycle ---------------------------------------------------------------
    def open(self) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        from ..snapshots.location import open_snapshot

        t0 = time.perf_counter()
        # The archives are hashed on a thread while the indexes are read (hashing releases the GIL, so
        # it takes the other core): each index is checked first, as everything built now is read from
        # it; a corrupt archive is refused before anything is served, as before.
        hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") if self.check else None
        archives: list[tuple[Any, Future[list[str]]]] = []
        try:
            for p in self.paths:
                if isinstance(p, Path) and not p.exists():
                    raise SnapshotError(f"snapshot {p} not found")
                snap = open_snapshot(p)
                if hashing is not None:
                    from ..snapshots.verify import integrity_problems

                    _refuse_corrupt(p, integrity_problems(snap, archive=False))
                    archives.append((p, hashing.submit(integrity_problems, snap, index=False)))
                self.snapshots.append(snap)
            rules, index, first = self._build_index()
            for p, problems in archives:
                _refuse_corrupt(p, problems.result())
        finally:
            if hashing is not None:
                hashing.shutdown(wait=True, cancel_futures=True)
        cfg = self.config
        if not len(index):
            raise SnapshotError(f"nothing to replay: {', '.join(map(str, self.paths))} hold no responses")
        self.captures = len(index)
        self.capture_time = _capture_time(self.snapshots[0], first)
        if cfg.freeze:
            from .freeze import freeze_script

            seed = cfg.seed if cfg.seed is not None else int(
                hashlib.sha256(name_of(self.paths[0]).encode()).hexdigest()[:8], 16)
            self.init_script = freeze_script(self.capture_time, seed)
        self.shared = self._shared(rules)
        self._sources = self.snapshots + (self.shared.suite.snapshots if self.shared else [])
        self.index = index
        self._redactor = snapshots_redactor(self.snapshots)
        self.responder = self.new_responder()
        if not self._frozen:  # the index is long-lived: no collector pauses walking it (gcfreeze)
            self._frozen = gcfreeze.hold()
        self.load_seconds = time.perf_counter() - t0
        log.info("snapshot opened: %s (%d captures, %.2f s)", ", ".join(map(str, self.paths)), self.captures,
                 self.load_seconds)

    def _build_index(self) -> tuple[Any, IndexBase, str | None]:
        """The rules, the match index of the opened snapshots (what a first open lacks built, each
        index read once) and the first capture's timestamp."""
        cfg = self.config
        rules = load_rules(cfg.rules_paths()) if cfg.rules_files else None
        mapped = index_mode(self.snapshots, self.index_mode) == "mapped"
        if mapped:
            from .mapped import build_first_open

            build_first_open(self.snapshots, rules)
        options: dict[str, Any] = {"rules": rules, "policy": cfg.sequence, "fuzzy_threshold": cfg.fuzzy_threshold,
                                   "fuzzy": cfg.fuzzy, "learned": load_learned(self.snapshots)}
        index: IndexBase
        if mapped:
            from .mapped import MappedMatchIndex

            index = MappedMatchIndex.open([s.index_path for s in self.snapshots], **options)
            first = index.first_timestamp(0)
        else:
            captures = load_captures(self.snapshots)
            index = MatchIndex(captures, **options)
            first = min((c.timestamp for c in captures if c.ref[0] == 0), default=None)
        return rules, index, first

    def _shared(self, rules: Any) -> SharedMatcher | None:
        """The other tasks' snapshots that answer what the own snapshots lack (None: sharing is off, or the
        first snapshot is not a local ``<root>/<task>/<id>`` folder with other tasks beside it)."""
        window = self.config.share_window_s
        first = self.paths[0]
        if window is None or not isinstance(first, Path):
            return None
        own = {Path(p).resolve() for p in self.paths if isinstance(p, Path)}
        manifest, latest = (root_latest(first, self.share_root) if self.share_pins is None
                            else pinned_latest(first, self.share_pins, self.share_root))
        sources = [s for s in in_window(manifest, latest, window) if s.path.resolve() not in own]
        if not sources:
            return None
        suite = SuiteIndex(sources, rules, self.check)
        log.info("shared captures: %d snapshots within %g s of %s: %s", len(suite.sources), window, name_of(first),
                 ", ".join(suite.ids) or "none")
        if not suite.sources:
            return None
        return SharedMatcher(suite, self.config.sequence, ref_base=len(self.snapshots),
                             paths=SuitePaths.of(latest, rules))

    def new_responder(self) -> Responder:
        """A fresh :class:`Responder` over this replay's opened index: its own counts, log and
        sequencing of repeated captures, nothing of an earlier one's. Warm episodes
        (``runner/warm.py``) keep one opened replay of a snapshot and give each episode one of these."""
        if self.index is None:
            raise ReplayError("the replay is not open")
        cfg = self.config
        shared = self.shared.fresh() if self.shared is not None else None
        return Responder(self.index, self._resolve, miss=cfg.miss, shared=shared, freeze_script=self.init_script or None,
                         policy=cfg.sequence, snapshots=[str(p) for p in self.paths], redactor=self._redactor,
                         conversation=self._conversation if cfg.engine == "fast" else None)

    def _resolve(self, ref: tuple[int, str]) -> tuple[int, str, list[tuple[str, str]], bytes, StreamMeta | None,
                                                      list[tuple[str, str]] | None]:
        from ..snapshots.cdxj import CdxjEntry

        n, line = ref
        entry = CdxjEntry.from_line(line)
        record = self._sources[n].resolve(entry)
        if record.http_status is None:
            if record.rec_type != "resource":  # e.g. an 'HTTPX/1.1' status line or an empty block
                raise ArchiveError(f"the archived {record.rec_type} record of {entry.url} has no readable "
                                   "HTTP status line")
            # a resource record: no HTTP head of its own
            ctype = record.content_type or entry.mime or "application/octet-stream"
            return 200, "OK", [("Content-Type", ctype)], record.payload, None, None
        headers = list(record.http_headers or [])
        asked = None
        if vary_names(headers, record.http_status):  # chosen by request headers: what the recording client sent, to compare with
            asked = _request_of(self._sources[n], entry, record)
        return (record.http_status, record.http_reason or "", headers, record.payload, stream_meta(record.headers),
                asked)

    def _conversation(self, ref: tuple[int, str]) -> Any:
        """The websocket conversation archived with a ``101`` capture (a
        :class:`~ego2web_replay.snapshots.wsrecords.Conversation`; None: not a websocket, or none kept)."""
        from ..snapshots.cdxj import CdxjEntry
        from ..snapshots.wsrecords import conversation_of

        n, line = ref
        entry = CdxjEntry.from_line(line)
        return conversation_of(self._sources[n], entry) if entry.status == 101 else None

    def start(self) -> Replay:
        self.ca = self.ca or project_ca()
        if self.responder is None:
            self.open()
        assert self.responder is not None
        try:
            self.proxy = self._server(self.responder)
            self.proxy.start()
        except BaseException:
            self.proxy = None
            self.stop()  # gives back the collector freeze taken by open()
            raise
        return self

    def _server(self, responder: Responder) -> Any:
        """The engine that carries requests to ``responder``. The guard only answers browser
        background hosts here (or, in loopback mode, every non-loopback host): every other request
        is the responder's, and neither engine connects upstream (unless miss=live, mitmproxy only)."""
        assert self.ca is not None
        if self.processes > 1:
            from .workers import WorkerPool

            return WorkerPool(self.paths, self.config, ca=self.ca, host=self.host, port=self.port,
                              guard_mode=self.guard_mode, processes=self.processes, index=self.index_mode,
                              wire=self.wire)
        if self.config.engine == "fast":
            from ..guard import GuardPolicy
            from .front import FrontServer

            return FrontServer(responder, ca=self.ca, host=self.host, port=self.port,
                               guard=GuardPolicy(mode=self.guard_mode), limits=self.wire)
        return ProxyServer(replay_addons(Replayer(responder=responder)), host=self.host, port=self.port,
                           ca=self.ca, options={"guard_mode": self.guard_mode})

    def stop(self) -> None:
        from .workers import WorkerPool

        if isinstance(self.proxy, WorkerPool) and self.proxy.port is not None:
            self._final = self.proxy.stats()
        if self.proxy is not None:
            self.proxy.stop()
            self._refused = dict(getattr(self.proxy, "refused", None) or {})
            self.proxy = None
        if self._frozen:
            self._frozen = False
            gcfreeze.release()

    def __enter__(self) -> Replay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _request_of(snapshot: Any, entry: Any, response: Any) -> list[tuple[str, str]] | None:
    """The head of the request archived with ``response`` (the capture ``entry``): the record right after it
    when that is a request naming it (``WARC-Concurrent-To``), as this project's writer and warcprox lay
    them out; None when there is none, or it cannot be read."""
    from ..errors import ArchiveError

    try:
        record = snapshot.record_at(entry.offset + entry.length)
    except (ArchiveError, OSError, ValueError, EOFError):
        return None
    if record.rec_type != "request" or not response.record_id or response.record_id not in record.concurrent_to:
        return None
    return list(record.http_headers or [])
