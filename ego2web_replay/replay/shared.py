"""Shared captures: a frozen episode answered, for what its own snapshot lacks, from its suite's others.

Tasks of one suite on one site are recorded minutes apart; an agent that opens a page another task
recorded would miss it in its own snapshot. With a share window (``ReplayConfig.share_window_s``,
``--share-window``), a request the episode's own snapshots miss is looked up in the **sources**:
the latest complete snapshot of every *other* task under the same snapshots root whose recording
started within the window of the episode's snapshot (:func:`suite_sources`). In a run, each task's
snapshot is the one pinned when the run started instead (:func:`pinned_latest`), never a newer one.

* **Own captures win.** The sources are asked only after every stage of the own snapshots missed
  (the own nearest capture too, when ``--fuzzy`` is on); the sources never answer by nearest capture,
  never a ``Range`` request, a websocket or a CORS preflight.
* **Rules per source.** Each source is matched by its own index, with its own learned volatile
  names and its own sequencing state (:class:`~.matching.ReplaySession`): repeated captures of one
  request are served in that source's recorded order. Sources are asked nearest in recording time
  first (then by task id); the first that holds the request answers.
* **The suite index** (:class:`SuitePaths`): one sorted file in ``index-cache/`` over the latest
  snapshot of every task of the root, saying which of them hold captures of each host and path;
  written once per state of the root (its snapshots' index files) and rules, then mapped. A request
  the own snapshots miss is looked up there once (a bisection); only the sources holding its path
  are then asked, each through its own mapped index (:class:`SuiteIndex` of
  :class:`~.mapped.MappedMatchIndex`, opened once per process and kept while its files are
  unchanged), so a second episode of the suite builds and reopens nothing.
* **Never silent.** Such an answer is logged with outcome ``shared``, ``shared_from`` (the source,
  ``<task>/<snapshot id>``) and ``shared_stage``, counted in ``ReplayStats.shared`` and per source in
  ``shared_from``; it is recorded truth (the same request, recorded by the same suite within the window),
  so it keeps the episode ``complete`` (:func:`~ego2web_replay.validity.classify`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ArchiveError, SnapshotError
from ..snapshots.index_cache import mark_used
from ..snapshots.sortedfile import ExternalSorter, SortedFile, key_bytes, write_sorted_stream
from .canonical import body_form, canonicalize, url_host
from .matching import MatchResult, ReplaySession, SequencePolicy
from .rules import MatchRules

__all__ = ["Source", "SuiteIndex", "SuitePaths", "SharedMatcher", "suite_sources", "root_latest", "pinned_latest",
           "in_window",
           "SUITE_CACHE_MAX", "BUILDS"]

log = logging.getLogger(__name__)
SUITE_CACHE_MAX = 512  # sources whose indexes a process keeps open
BUILDS = [0]  # suite indexes this process has written (read by tests: an unchanged root builds none)


@dataclass(frozen=True)
class Source:
    """A snapshot that may answer for another task's: its id (``<task>/<snapshot id>``), folder, start."""

    id: str
    path: Path
    created_at: datetime
    index: Path  # its CDXJ index file


def _own_layout(own: Path, root: Path | None) -> tuple[Any, Path | None]:
    """``own``'s manifest (None if unreadable) and the root its task folder lies in (``root``, default
    ``own``'s grandparent), or no root when ``own`` is not in a ``<root>/<task>/<id>`` layout."""
    from ..snapshots.snapshot import load_manifest

    own = Path(own)
    try:
        manifest = load_manifest(own)
    except SnapshotError:
        return None, None
    if own.parent.name != manifest.task_id:
        return manifest, None
    return manifest, Path(root) if root is not None else own.parent.parent


def root_latest(own: Path, root: Path | None = None) -> tuple[Any, list[Source]]:
    """``own``'s manifest and the latest complete snapshot of every task under ``root`` (default: ``own``'s
    grandparent), in task order; no snapshots when ``own`` does not lie in a ``<root>/<task>/<id>``
    layout (its folder's parent is not named after its task). None for an unreadable ``own``."""
    from ..snapshots.snapshot import list_snapshots

    manifest, root = _own_layout(own, root)
    if root is None or not root.is_dir():
        return manifest, []
    found: dict[str, Source] = {}
    for info in list_snapshots(root):  # tasks in name order, newest first
        if info.task_id not in found and info.manifest is not None:
            found[info.task_id] = Source(f"{info.task_id}/{info.snapshot_id}", info.path, info.manifest.created_at,
                                         info.path / info.manifest.index)
    return manifest, list(found.values())


def pinned_latest(own: Path, pins: dict[str, str], root: Path | None = None) -> tuple[Any, list[Source]]:
    """As :func:`root_latest`, but each task's snapshot is the one ``pins`` names (task id -> snapshot id,
    chosen when a run started, :func:`~ego2web_replay.runner.run.pin_snapshots`) instead of its newest now:
    a snapshot recorded since is not a source. A pinned snapshot gone or unfinished is left out, with a warning."""
    from ..snapshots.snapshot import load_manifest

    manifest, root = _own_layout(own, root)
    if root is None:
        return manifest, []
    found: list[Source] = []
    for task_id in sorted(pins):
        path = root / task_id / pins[task_id]
        try:
            m = load_manifest(path)
        except SnapshotError as e:
            log.warning("shared captures: pinned %s/%s left out: %s", task_id, pins[task_id], e)
            continue
        found.append(Source(f"{task_id}/{pins[task_id]}", path, m.created_at, path / m.index))
    return manifest, found


def in_window(manifest: Any, latest: Sequence[Source], window_s: float) -> list[Source]:
    """Of ``latest``, the other tasks' snapshots recorded within ``window_s`` seconds of ``manifest``'s,
    nearest first (then by id)."""
    if manifest is None:
        return []
    at = manifest.created_at
    near = [s for s in latest if s.id.partition("/")[0] != manifest.task_id
            and abs((s.created_at - at).total_seconds()) <= window_s]
    return sorted(near, key=lambda s: (abs((s.created_at - at).total_seconds()), s.id))


def suite_sources(own: Path, window_s: float, root: Path | None = None) -> list[Source]:
    """The sources of ``own`` (a snapshot folder ``<root>/<task>/<id>``): the latest complete snapshot of
    every other task under ``root`` (default: ``own``'s grandparent) whose recording started within
    ``window_s`` seconds of ``own``'s, nearest first (then by task id). Empty when ``own`` does not lie
    in such a layout (its folder's parent is not named after its task)."""
    manifest, latest = root_latest(own, root)
    return in_window(manifest, latest, window_s)


@dataclass
class _Opened:
    """One source, opened: its snapshot and its mapped match index (with its own learned names)."""

    source: Source
    snapshot: Any
    index: Any  # a MappedMatchIndex


_OPENED: dict[tuple[Any, ...], _Opened | None] = {}  # by what the source's index depends on (see _identity)
_OPENED_LOCK = threading.Lock()


def _identity(source: Source, rules: MatchRules | None, check: bool) -> tuple[Any, ...]:
    """What an opened source depends on: its index, volatility and manifest files (path, size, mtime), the rules."""
    from ..snapshots.volatility import VOLATILE_FILE
    from .mapped import rules_fingerprint
    from .rules import default_rules

    parts: list[Any] = [source.id, rules_fingerprint(rules or default_rules()), check]
    for p in (source.index, source.path / VOLATILE_FILE, source.path / "manifest.json"):
        try:
            st = p.stat()
            parts.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            parts.append((str(p), None))
    return tuple(parts)


def _open(source: Source, rules: MatchRules | None, check: bool) -> _Opened | None:
    from ..snapshots.location import open_snapshot
    from ..snapshots.verify import integrity_problems
    from .mapped import MappedMatchIndex, build_first_open
    from .session import load_learned

    try:
        snap = open_snapshot(source.path)
        problems = integrity_problems(snap) if check else []
        if problems:
            log.warning("shared captures: %s left out: corrupt snapshot: %s", source.id, "; ".join(problems))
            return None
        build_first_open([snap], rules)
        index = MappedMatchIndex.open([snap.index_path], rules=rules, learned=load_learned([snap]))
    except (SnapshotError, ArchiveError, OSError) as e:
        log.warning("shared captures: %s left out: %s", source.id, e)
        return None
    return _Opened(source, snap, index)


class SuiteIndex:
    """The opened sources of one replay, nearest first (those that could not be opened left out, with a
    warning). Each source is opened once per process and kept while its files are unchanged (at most
    :data:`SUITE_CACHE_MAX` sources; the oldest is dropped first), so the episodes of a suite share them."""

    def __init__(self, sources: Sequence[Source], rules: MatchRules | None = None, check: bool = True) -> None:
        opened: list[_Opened] = []
        for source in sources:
            key = _identity(source, rules, check)
            with _OPENED_LOCK:
                if key in _OPENED:
                    hit = _OPENED[key]
                else:
                    hit = _OPENED[key] = _open(source, rules, check)
                    while len(_OPENED) > SUITE_CACHE_MAX:  # dropped, not closed: a replay may still use it
                        _OPENED.pop(next(iter(_OPENED)))
            if hit is not None:
                opened.append(hit)
        self.sources: list[Source] = [o.source for o in opened]
        self.snapshots: list[Any] = [o.snapshot for o in opened]
        self.indexes: list[Any] = [o.index for o in opened]

    @property
    def ids(self) -> list[str]:
        """The sources' ids (``<task>/<snapshot id>``), nearest first."""
        return [s.id for s in self.sources]


_PATHS_VERSION = 1
_PATHS: dict[str, SuitePaths] = {}  # by file name: one per root state and rules
_PATHS_LOCK = threading.Lock()


def _path_key(host: str, group: str) -> bytes:
    """A capture's or request's place: host and ``scheme://(host)path`` (its fuzzy group without the method)."""
    return key_bytes(host, group.partition(" ")[2])


class SuitePaths:
    """The suite-level index: for every ``(host, scheme://host/path)`` of any capture of the latest snapshot
    of every task under a root, which of those snapshots hold one (any method). One sorted file in
    ``index-cache/``, keyed by those snapshots' index files (path, size, mtime) and the rules, written
    once from their canonical keys (bounded memory: :class:`~ego2web_replay.snapshots.sortedfile.ExternalSorter`)
    and mapped by every replay of the root while none of them changes: a request the own snapshot
    misses is looked up once here, and only the sources holding its path are asked."""

    def __init__(self, latest: Sequence[Source], rules: MatchRules | None, path: Path) -> None:
        from .rules import default_rules

        self.rules = rules or default_rules()
        self.ids = [s.id for s in latest]
        self.path = path
        if not path.is_file():
            self._build(latest)
        self.file = SortedFile(path)
        mark_used(path)
        self.table = self.file.table("paths")

    @staticmethod
    def target(latest: Sequence[Source], rules: MatchRules | None) -> Path:
        """Where the suite index of ``latest`` under ``rules`` is kept."""
        from ..config import data_dir
        from .mapped import rules_fingerprint
        from .rules import default_rules

        parts = [f"{_PATHS_VERSION}", rules_fingerprint(rules or default_rules())]
        for s in latest:
            st = s.index.stat()
            parts.append(f"{s.id}|{s.path.resolve()}|{st.st_size}|{st.st_mtime_ns}")
        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()
        return data_dir() / "index-cache" / f"{digest[:32]}.suite.sorted"

    def _build(self, latest: Sequence[Source]) -> None:
        from .mapped import MappedMatchIndex

        BUILDS[0] += 1
        places = ExternalSorter(self.path.parent)
        try:
            for n, source in enumerate(latest):
                index = MappedMatchIndex.open([source.index], rules=self.rules)
                try:
                    last = b""
                    for table in index.canonical:
                        for i in range(len(table)):
                            host, _, key = table.key(i).partition(b"\x00")
                            place = host + b"\x00" + key.partition(b"?")[0].partition(b" ")[2]
                            if place != last:
                                places.add(place, n)
                                last = place
                finally:
                    index.close()
            write_sorted_stream(self.path, {"version": _PATHS_VERSION, "sources": self.ids},
                                {"paths": ((k, v) for k, v, _ in places)})
        except OSError as e:
            raise ArchiveError(f"{self.path}: cannot write the suite index ({e.strerror})") from None
        finally:
            places.close()

    def holders(self, method: str, url: str, body: str | None) -> set[str]:
        """The ids of the snapshots holding a capture of the request's host and path."""
        group = canonicalize(method, url, body, self.rules).group
        return {self.ids[n] for n in self.table.find(_path_key(url_host(url), group))}

    @classmethod
    def of(cls, latest: Sequence[Source], rules: MatchRules | None) -> SuitePaths | None:
        """The suite index of ``latest``, built once and mapped once per process (None, with a warning, when
        it cannot be: every source is then asked)."""
        try:
            target = cls.target(latest, rules)
            with _PATHS_LOCK:
                hit = _PATHS.get(target.name)
                if hit is None or not target.is_file():
                    while len(_PATHS) >= 8:  # dropped, not closed: a replay may still use it
                        _PATHS.pop(next(iter(_PATHS)))
                    hit = _PATHS[target.name] = cls(latest, rules, target)
                return hit
        except (ArchiveError, OSError) as e:
            log.warning("shared captures: no suite index (%s); every source is asked", e)
            return None


class SharedMatcher:
    """One replay's lookups in a suite's sources: a sequencing session per source, nearest source first.

    ``ref_base`` is added to each answer's source number, so that the replay resolves ``(ref_base + n,
    line)`` in its list of snapshots (its own first, then the suite's). ``paths`` (the suite index) says
    which sources hold the request's path; without it every source is asked."""

    def __init__(self, suite: SuiteIndex, policy: SequencePolicy = "sequence", ref_base: int = 0,
                 paths: SuitePaths | None = None) -> None:
        self.suite = suite
        self.ref_base = ref_base
        self.paths = paths
        self.policy: SequencePolicy = policy
        self.sessions: list[ReplaySession] = [ReplaySession(index, policy) for index in suite.indexes]

    def fresh(self) -> SharedMatcher:
        """The same sources with sequencing started anew (a warm episode's responder: nothing of an
        earlier episode's order of repeated captures)."""
        return SharedMatcher(self.suite, self.policy, self.ref_base, self.paths)

    def match(self, method: str, url: str, body: bytes | None = None,
              content_type: str | None = None) -> tuple[MatchResult, str] | None:
        """The first source's match of the request (exact or canonical, never nearest) and its id; None."""
        holders = None
        if self.paths is not None:
            holders = self.paths.holders(method.upper(), url, body_form(method.upper(), content_type, body))
            if not holders:
                return None
        for n, session in enumerate(self.sessions):
            if holders is not None and self.suite.sources[n].id not in holders:
                continue
            result = session.match(method, url, body, content_type)
            if result.capture is not None:
                _, line = result.capture.ref
                capture = result.capture._replace(ref=(self.ref_base + n, line))
                return (MatchResult(result.outcome, capture, result.score, result.key, result.via, result.ignored),
                        self.suite.sources[n].id)
        return None
