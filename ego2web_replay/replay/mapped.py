"""Matching against memory-mapped indexes: large snapshots open in a blink and stay out of the heap.

:class:`MappedMatchIndex` answers what :class:`~.matching.ReplaySession` asks
(:class:`~.matching.IndexBase`) from sorted files searched by bisection instead of dictionaries
built at open:

* exact keys and the captures themselves from each snapshot's
  :class:`~ego2web_replay.snapshots.index_map.IndexMap` (built with the index);
* canonical keys from a second sorted file per snapshot and rule set (``canonical``: ``key_bytes(host,
  canonical key)`` -> position), kept in the data folder's ``index-cache/``, keyed by the index map,
  the rules and the canonicalisation code. Under the built-in rules it is written when the index is
  built (:func:`install_index_hook` registers :func:`build_default_canonical` as a map hook of
  :mod:`~ego2web_replay.snapshots.index_map`; importing :mod:`ego2web_replay.replay` installs it);
  for other rules, or an older snapshot, on the first mapped open;
* learned-volatile keys and fuzzy groups of one path are computed the first time a request of that
  path is not an exact or canonical match, from a prefix scan of the canonical file (a path's
  canonical keys are the group itself or the group followed by ``?``), and kept, like the in-memory
  index keeps a host's tables.

Positions run over the snapshots in order (the first snapshot's captures, then the second's), as
:func:`~.session.load_captures` lists them, so sequencing and fuzzy tie-breaks are the same.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import data_dir
from ..errors import ArchiveError
from ..snapshots.index_cache import mark_used
from ..snapshots.index_map import IndexMap, add_map_hook, map_file, open_index_map
from ..snapshots.indexscan import collector_paused
from ..snapshots.sortedfile import SortedFile, key_bytes, write_sorted_columns
from . import canonical as _canonical_module
from . import rules as _rules_module
from .canonical import KeyMaker, canonicalize
from .gcfreeze import refreeze
from .matching import Capture, IndexBase, ReplaySession, SequencePolicy, _Entry, add_secondary_keys
from .rules import MatchRules, default_rules

__all__ = ["MappedMatchIndex", "rules_fingerprint", "canonical_file", "build_default_canonical", "install_index_hook",
           "default_canonical_keys",
           "build_first_open", "CANONICAL_HOOK", "BUILDS"]

if TYPE_CHECKING:
    import numpy as np

    from ..snapshots.first_open import RowKeys
    from ..snapshots.indexscan import Batch

_VERSION = 1
MEMO_MAX = 20_000  # exact lookups and captures remembered, each (about 800 bytes a URL for both: 16 MiB at most)
_CODE: str | None = None
CANONICAL_HOOK = "replay.canonical"  # the name the commands' lazy wiring registers under too
BUILDS = [0]  # canonical files this process has written (read by tests: a first open builds none)


def rules_fingerprint(rules: MatchRules) -> str:
    """A digest of what canonical keys depend on: the rules and the code that applies them."""
    global _CODE
    if _CODE is None:
        code = hashlib.sha256()
        for module in (_canonical_module, _rules_module):
            code.update(Path(module.__file__ or "").read_bytes())
        _CODE = code.hexdigest()
    data = {"defaults": rules.defaults.model_dump(mode="json"),
            "hosts": {h: r.model_dump(mode="json") for h, r in sorted(rules.hosts.items())}}
    return hashlib.sha256(f"{_CODE}|{json.dumps(data, sort_keys=True)}|{_VERSION}".encode()).hexdigest()


def canonical_file(imap: IndexMap, rules: MatchRules) -> Path:
    """Where the canonical keys of ``imap`` under ``rules`` are kept."""
    st = imap.path.stat()
    key = hashlib.sha256(f"{imap.path}|{st.st_size}|{st.st_mtime_ns}|{rules_fingerprint(rules)}".encode())
    return data_dir() / "index-cache" / f"{key.hexdigest()[:32]}.canonical.sorted"


def _build_canonical(imap: IndexMap, rules: MatchRules, target: Path) -> None:
    """The canonical keys of ``imap`` under ``rules``, read from the map's lines."""
    BUILDS[0] += 1
    keys = _CanonicalKeys(rules, target.parent)
    try:
        row = imap.row
        with collector_paused():
            for start in range(0, imap.count, _ROWS_AT_ONCE):
                rows = [row(p) for p in range(start, min(start + _ROWS_AT_ONCE, imap.count))]
                keys.add([r[3] for r in rows], [r[2] for r in rows], [r[4] for r in rows])
                imap.file.drop_pages()  # the lines read so far: not resident for the rest of the build
        keys.write(target, imap.count, None)
    finally:
        keys.close()


_ROWS_AT_ONCE = 1 << 14


class _CanonicalKeys:
    """The ``canonical`` table of an index under some rules, gathered a block of rows at a time
    (from the map's lines, or from the first read of the index beside the map: :meth:`add_batch`)
    and written once the rows' places in recorded order are known."""

    def __init__(self, rules: MatchRules, folder: Path) -> None:
        from ..snapshots.keysort import KeyColumn  # numpy: only when keys are built

        self.rules = rules
        self._maker = KeyMaker(rules)
        self._keys = KeyColumn(folder)  # bounded memory: the keys in one buffer, spilled to a temporary file

    def add(self, methods: Sequence[str], urls: Sequence[str], bodies: Sequence[str | None]) -> None:
        texts = self._maker.texts(methods, urls, bodies)
        if texts is None:
            self._keys.extend(self._maker.keys(methods, urls, bodies))
        else:
            self._keys.extend_text(texts)

    def add_batch(self, batch: Batch) -> None:
        self.add(batch.methods, batch.urls, batch.bodies)

    def finish(self, imap: IndexMap, rank: np.ndarray) -> None:
        """Write the keys gathered in file order (``rank``: each row's position in recorded order)."""
        BUILDS[0] += 1
        self.write(canonical_file(imap, self.rules), imap.count, rank)

    def write(self, target: Path, count: int, rank: np.ndarray | None) -> None:
        """Write the table to ``target``: the keys by key, then position (``rank`` of the rows
        gathered; None when they were gathered in recorded order)."""
        from ..snapshots.keysort import sorted_chunks

        keys = self._keys
        if len(keys) != count:
            raise ArchiveError(f"{target}: {len(keys)} canonical keys for {count} captures")
        try:
            order = keys.argsort(rank)  # by key, then position
            values = order if rank is None else rank[order]
            write_sorted_columns(target, {"version": _VERSION, "count": count},
                                 {"canonical": (keys.lengths()[order], values, sorted_chunks(keys, order))})
        except OSError as e:
            raise ArchiveError(f"{target}: cannot write the canonical index ({e.strerror})") from None

    def close(self) -> None:
        self._keys.close()


def _open_canonical(imap: IndexMap, rules: MatchRules) -> SortedFile:
    target = canonical_file(imap, rules)
    for attempt in (0, 1):
        if attempt or not target.is_file():
            _build_canonical(imap, rules, target)
        try:
            file = SortedFile(target)
        except ArchiveError:
            continue
        mark_used(target)
        if file.meta.get("count") == imap.count and len(file.table("canonical")) == imap.count:
            return file
        file.close()
    raise ArchiveError(f"{target}: the canonical index does not match {imap.index}; delete it to rebuild")


def build_default_canonical(imap: IndexMap) -> None:
    """Write the canonical keys of ``imap`` under the built-in rules unless they are there already."""
    _open_canonical(imap, default_rules()).close()


def default_canonical_keys(folder: Path) -> RowKeys:
    """:func:`build_default_canonical`'s table gathered from the rows of the read that builds the map
    (spilling into ``folder``): the same file, from one read of the index."""
    return _CanonicalKeys(default_rules(), folder)


def build_first_open(snapshots: Sequence[Any], rules: MatchRules | None = None) -> None:
    """Build what a mapped open of ``snapshots`` needs and lacks, each index read once: for a
    snapshot whose index has no mapped form yet, the map, its canonical keys under ``rules`` and,
    when it has no ``volatile.json`` and nothing learned is kept for it, the names learned volatile
    (kept in ``index-cache/``). An index the one read leaves to the line readers
    (:class:`~ego2web_replay.snapshots.indexscan.IrregularIndex`) is left alone: the open then builds
    each of them from it in turn, as before."""
    from ..snapshots.first_open import build_first_open as build_index
    from ..snapshots.learned_cache import MIN_BYTES, cached_learned
    from ..snapshots.volatility import VOLATILE_FILE

    chosen = rules or default_rules()
    for snap in snapshots:
        index = Path(snap.index_path)
        target = map_file(index)
        if target is None or target.exists():
            continue
        learn = (not (Path(snap.path) / VOLATILE_FILE).is_file() and index.stat().st_size >= MIN_BYTES
                 and cached_learned(index) is None)
        build_index(index, learn=learn, keys=[_CanonicalKeys(chosen, target.parent)])


def install_index_hook() -> None:
    """Have every index built in this process get its canonical keys (built-in rules) with its map."""
    add_map_hook(CANONICAL_HOOK, build_default_canonical, rows=default_canonical_keys)


def _remember[K, V](memo: dict[K, V], key: K, value: V) -> V:
    """``memo[key] = value``, the memo emptied first when it holds :data:`MEMO_MAX` entries."""
    if len(memo) >= MEMO_MAX:
        memo.clear()
    memo[key] = value
    return value


@dataclass(slots=True)
class _PathTables:
    """The captures under one path prefix of one host: fuzzy groups and learned keys."""

    groups: dict[str, list[_Entry]]
    learned: dict[str, list[int]]
    fresh: dict[str, list[int]]


class MappedMatchIndex(IndexBase):
    """A match index over mapped snapshot indexes (see the module docstring); same answers as
    :class:`~.matching.MatchIndex` over the same captures."""

    def __init__(
        self,
        maps: Sequence[IndexMap],
        rules: MatchRules | None = None,
        policy: SequencePolicy = "sequence",
        fuzzy_threshold: float | None = None,
        *,
        fuzzy: bool = False,
        learned: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.maps = list(maps)
        self._configure(rules, policy, fuzzy_threshold, fuzzy, learned)
        self.bases: list[int] = []
        total = 0
        for imap in self.maps:
            self.bases.append(total)
            total += imap.count
        self._count = total
        self.methods = frozenset(m for imap in self.maps for m in imap.methods)
        self._files = [_open_canonical(imap, self.rules) for imap in self.maps]
        self.canonical = [f.table("canonical") for f in self._files]
        self._paths: dict[tuple[str, str], _PathTables] = {}
        self._build_lock = threading.Lock()
        # What the hot path looked up once: a replay asks for the same few hundred URLs again and
        # again (a page's resources, on every reload), and a bisection plus a row decoded costs
        # more than the rest of a cached answer. Tuples of strings and numbers only, so the
        # collector stops tracking them; bounded, emptied when full (see MEMO_MAX).
        self._exact_memo: dict[tuple[str, str, str], tuple[int, ...]] = {}
        self._capture_memo: dict[int, Capture] = {}
        self._default = ReplaySession(self, policy)

    @classmethod
    def open(cls, indexes: Sequence[Path], **kwargs: object) -> MappedMatchIndex:
        """Map the CDXJ ``indexes`` (building what is missing) and match over them."""
        return cls([open_index_map(Path(p)) for p in indexes], **kwargs)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self._count

    def first_timestamp(self, snapshot: int) -> str | None:
        """The earliest capture time of the ``snapshot``-th index."""
        return self.maps[snapshot].first_timestamp

    def capture(self, position: int) -> Capture:
        memo = self._capture_memo
        hit = memo.get(position)
        if hit is not None:
            return hit
        n = bisect.bisect_right(self.bases, position) - 1
        ts, _offset, url, method, body, line = self.maps[n].row(position - self.bases[n])
        return _remember(memo, position, Capture(url, method, body or None, ts, (n, line)))

    def _gather(self, found: Sequence[Sequence[int]]) -> list[int] | None:
        out = [self.bases[n] + p for n, positions in enumerate(found) for p in positions]
        return out or None

    def exact_positions(self, key: tuple[str, str, str]) -> Sequence[int] | None:
        memo = self._exact_memo
        hit = memo.get(key)
        if hit is None:
            method, url, body = key
            hit = _remember(memo, key, tuple(self._gather([imap.exact(method, url, body) for imap in self.maps]) or ()))
        return hit or None

    def canonical_positions(self, host: str, key: str) -> list[int] | None:
        wanted = key_bytes(host, key)
        return self._gather([table.find(wanted) for table in self.canonical])

    def learned_positions(self, host: str, group: str, key: str) -> list[int] | None:
        return self._path_tables(host, group).learned.get(key)

    def fresh_positions(self, host: str, group: str, key: str) -> list[int] | None:
        return self._path_tables(host, group).fresh.get(key)

    def group_entries(self, host: str, group: str) -> list[_Entry] | None:
        return self._path_tables(host, group).groups.get(group)

    def _path_tables(self, host: str, group: str) -> _PathTables:
        """The captures of ``host`` whose canonical key is ``P`` or starts with ``P?``, ``P`` being
        ``group`` up to its first ``?``: every capture of the group, and every capture whose learned
        key can equal a learned key of the group's requests (a learned key is ``group?kept pairs``)."""
        head = group.partition("?")[0]
        slot = (host, head)
        tables = self._paths.get(slot)
        if tables is not None:
            return tables
        with self._build_lock:
            tables = self._paths.get(slot)
            if tables is None:
                tables = self._build_path(host, head)
                self._paths[slot] = tables
                refreeze()
        return tables

    def _build_path(self, host: str, head: str) -> _PathTables:
        prefix = key_bytes(host, head)
        positions = []
        for n, table in enumerate(self.canonical):
            for key, position in table.scan(prefix):
                rest = key[len(prefix):]
                if not rest or rest[:1] == b"?":
                    positions.append(self.bases[n] + position)
        positions.sort()
        groups: dict[str, list[_Entry]] = {}
        learned: dict[str, list[int]] = {}
        fresh: dict[str, list[int]] = {}
        rules, volatile, compiled = self.rules, self.learned, self.rules.for_host(host)
        for position in positions:
            c = self.capture(position)
            canon = canonicalize(c.method, c.url, c.body, rules)
            groups.setdefault(canon.group, []).append(_Entry(position, c, canon.pairs))
            add_secondary_keys(learned, fresh, position, c, canon, volatile, compiled)
        return _PathTables(groups, learned, fresh)

    def prepare(self) -> None:
        """Nothing to compute up front: the tables are on disk (kept for :class:`~.matching.MatchIndex` parity)."""

    def close(self) -> None:
        """Unmap the files (the index must not be used afterwards)."""
        for imap in self.maps:
            imap.close()
        for file in self._files:
            file.close()
