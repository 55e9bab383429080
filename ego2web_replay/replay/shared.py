"""Shared captures: a frozen episode answered, for what its own snapshot lacks, from its suite's others.

Tasks of one suite on one site are recorded minutes apart; an agent that opens a page another task
recorded would miss it in its own snapshot. With a share window (``ReplayConfig.share_window_s``,
``--share-window``), a request the episode's own snapshots miss is looked up in the **sources**:
the latest complete snapshot of every *other* task under the same snapshots root whose recording
started within the window of the episode's snapshot (:func:`suite_sources`).

* **Own captures win.** The sources are asked only after every stage of the own snapshots missed
  (the own nearest capture too, when ``--fuzzy`` is on); the sources never answer by nearest capture,
  never a ``Range`` request, a websocket or a CORS preflight.
* **Rules per source.** Each source is matched by its own index, with its own learned volatile
  names and its own sequencing state (:class:`~.matching.ReplaySession`): repeated captures of one
  request are served in that source's recorded order. Sources are asked nearest in recording time
  first (then by task id); the first that holds the request answers.
* **The suite index** (:class:`SuiteIndex`) is each source's mapped index
  (:class:`~.mapped.MappedMatchIndex`, the sorted files of ``index-cache/``, built once per index
  version and kept on disk), each opened once per process and kept while its files are unchanged:
  a lookup is a bisection per table per source, never a scan, and a
  second episode of the same suite reopens nothing.
* **Never silent.** Such an answer is logged with outcome ``shared``, ``shared_from`` (the source,
  ``<task>/<snapshot id>``) and ``shared_stage``, counted in ``ReplayStats.shared`` and per source in
  ``shared_from``, and makes the episode ``degraded`` (:func:`~ego2web_replay.validity.classify`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ArchiveError, SnapshotError
from .matching import MatchResult, ReplaySession, SequencePolicy
from .rules import MatchRules

__all__ = ["Source", "SuiteIndex", "SharedMatcher", "suite_sources", "SUITE_CACHE_MAX"]

log = logging.getLogger(__name__)
SUITE_CACHE_MAX = 512  # sources whose indexes a process keeps open


@dataclass(frozen=True)
class Source:
    """A snapshot that may answer for another task's: its id (``<task>/<snapshot id>``), folder, start."""

    id: str
    path: Path
    created_at: datetime


def suite_sources(own: Path, window_s: float, root: Path | None = None) -> list[Source]:
    """The sources of ``own`` (a snapshot folder ``<root>/<task>/<id>``): the latest complete snapshot of
    every other task under ``root`` (default: ``own``'s grandparent) whose recording started within
    ``window_s`` seconds of ``own``'s, nearest first (then by task id). Empty when ``own`` does not lie
    in such a layout (its folder's parent is not named after its task)."""
    from ..snapshots.snapshot import list_snapshots, load_manifest

    own = Path(own)
    try:
        manifest = load_manifest(own)
    except SnapshotError:
        return []
    root = Path(root) if root is not None else own.parent.parent
    if own.parent.name != manifest.task_id or not root.is_dir():
        return []
    found: dict[str, Source] = {}
    for info in list_snapshots(root):  # tasks in name order, newest first
        if info.task_id == manifest.task_id or info.task_id in found or info.manifest is None:
            continue
        found[info.task_id] = Source(f"{info.task_id}/{info.snapshot_id}", info.path, info.manifest.created_at)
    at = manifest.created_at
    near = [s for s in found.values() if abs((s.created_at - at).total_seconds()) <= window_s]
    return sorted(near, key=lambda s: (abs((s.created_at - at).total_seconds()), s.id))


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
    for name in ("index.cdxj", VOLATILE_FILE, "manifest.json"):
        p = source.path / name
        try:
            st = p.stat()
            parts.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            parts.append((str(p), None))
    return tuple(parts)


def _open(source: Source, rules: MatchRules | None, check: bool) -> _Opened | None:
    from ..snapshots.location import open_snapshot
    from ..snapshots.verify import integrity_problems
    from .mapped import MappedMatchIndex
    from .session import load_learned

    try:
        snap = open_snapshot(source.path)
        problems = integrity_problems(snap) if check else []
        if problems:
            log.warning("shared captures: %s left out: corrupt snapshot: %s", source.id, "; ".join(problems))
            return None
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


class SharedMatcher:
    """One replay's lookups in a suite's sources: a sequencing session per source, nearest source first.

    ``ref_base`` is added to each answer's source number, so that the replay resolves ``(ref_base + n,
    line)`` in its list of snapshots (its own first, then the suite's)."""

    def __init__(self, suite: SuiteIndex, policy: SequencePolicy = "sequence", ref_base: int = 0) -> None:
        self.suite = suite
        self.ref_base = ref_base
        self.sessions: list[ReplaySession] = [ReplaySession(index, policy) for index in suite.indexes]

    def match(self, method: str, url: str, body: bytes | None = None,
              content_type: str | None = None) -> tuple[MatchResult, str] | None:
        """The first source's match of the request (exact or canonical, never nearest) and its id; None."""
        for n, session in enumerate(self.sessions):
            result = session.match(method, url, body, content_type)
            if result.capture is not None:
                _, line = result.capture.ref
                capture = result.capture._replace(ref=(self.ref_base + n, line))
                return (MatchResult(result.outcome, capture, result.score, result.key, result.via, result.ignored),
                        self.suite.sources[n].id)
        return None
