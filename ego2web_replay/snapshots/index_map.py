"""The memory-mapped form of a CDXJ index for replay: captures by recorded position, and by exact key.

Replay of a large snapshot must not turn a million index lines into a million Python objects before
it serves its first request. :func:`open_index_map` gives an :class:`IndexMap` over a
:mod:`~.sortedfile` of two tables, written once per index version into the data folder's
``index-cache/`` (keyed by the index's path, size and mtime, like the compact cache of
:mod:`.index_cache`) and then mapped, not read:

* ``lines``: the servable lines (responses, revisits, resources) in recorded order (by timestamp,
  then offset, as :func:`~.index_cache.parse_rows` orders them), each keyed by its position as four
  big-endian bytes, so record ``i`` is capture ``i``;
* ``exact``: :func:`~.sortedfile.key_bytes` of (method, URL, request body in the index's POST form)
  -> position, for the exact stage of matching;
* ``digests``: the payload digest of each capture that is not a revisit -> position, so a revisit
  finds its original (:meth:`~.snapshot.Snapshot.find_original`) without the whole index parsed.

The file is built when the index is built (``finalize``, ``snapshot index``, import; large indexes
only, through :func:`~.index_cache.warm_cache`) or on the first mapped open of an older snapshot.
It is never the source of truth: a missing, stale or unreadable one is rebuilt from the index.

A layer above may add what it derives from the map to that build: :func:`add_map_hook` registers a
function that :func:`run_map_hooks` calls with the freshly built :class:`IndexMap` (replay registers
the build of its canonical match keys, which this layer cannot compute: it may not import replay).
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable
from pathlib import Path

from ..config import data_dir
from ..errors import ArchiveError
from ..models.index import IndexEntry, IndexRow, index_row
from .index_cache import mark_used, parse_rows
from .sortedfile import SortedFile, key_bytes, write_sorted_file

__all__ = ["IndexMap", "map_file", "build_index_map", "open_index_map", "exact_key_bytes", "add_map_hook",
           "run_map_hooks", "MapHook", "original_digest"]

log = logging.getLogger(__name__)

_VERSION = 2
_DIGEST = '"digest": "'
_REVISIT = '"mime": "warc/revisit"'
_POSITION = struct.Struct(">I")

MapHook = Callable[["IndexMap"], None]
_HOOKS: dict[str, MapHook] = {}


def add_map_hook(name: str, hook: MapHook) -> None:
    """Have ``hook(index_map)`` run each time an index is built with its map; a hook registered
    under the same ``name`` replaces the earlier one (so a lazy and an eager wiring run it once)."""
    _HOOKS[name] = hook


def run_map_hooks(index: Path, target: Path) -> None:
    """Call the registered hooks with the map ``target`` of ``index``; a failing hook is logged and
    skipped (what it builds is a cache the replay builds itself when missing)."""
    if not _HOOKS:
        return
    imap = IndexMap(SortedFile(target), Path(index))
    try:
        for name, hook in list(_HOOKS.items()):
            try:
                hook(imap)
            except (ArchiveError, OSError, ValueError) as e:
                log.warning("%s: building %s with the index failed: %s", index, name, e)
    finally:
        imap.close()


def exact_key_bytes(method: str, url: str, body: str | None) -> bytes:
    """The ``exact`` table's key of a request (method upper-cased, body in the index's POST form)."""
    return key_bytes(method.upper(), url, body or "")


def map_file(index: Path) -> Path | None:
    """Where the mapped form of ``index`` is kept (None when the index cannot be read)."""
    try:
        st = Path(index).stat()
    except OSError:
        return None
    key = hashlib.sha256(f"{Path(index).resolve()}|{st.st_size}|{st.st_mtime_ns}|map{_VERSION}".encode()).hexdigest()
    return data_dir() / "index-cache" / f"{key[:32]}.sorted"


def build_index_map(index: Path, rows: list[IndexRow] | None = None) -> Path:
    """Write the mapped form of ``index`` (from ``rows`` when the caller has parsed them) and return its path."""
    index = Path(index)
    target = map_file(index)
    if target is None:
        raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`")
    if rows is None:
        rows = parse_rows(index)
    if len(rows) >= 2**32:
        raise ArchiveError(f"{index}: {len(rows)} captures are more than one mapped index holds (2**32)")
    lines = [(_POSITION.pack(i) + row[5].encode("utf-8", "surrogatepass"), i) for i, row in enumerate(rows)]
    exact = [(exact_key_bytes(row[3], row[2], row[4]), i) for i, row in enumerate(rows)]
    digests = [(key_bytes(d), i) for i, row in enumerate(rows) if (d := original_digest(row[5]))]
    meta = {"version": _VERSION, "index": str(index.resolve()), "count": len(rows),
            "methods": sorted({row[3] for row in rows}), "first_timestamp": rows[0][0] if rows else None}
    try:
        write_sorted_file(target, meta, {"lines": lines, "exact": exact, "digests": digests})
    except OSError as e:
        raise ArchiveError(f"{target}: cannot write the mapped index ({e.strerror})") from None
    return target


def original_digest(line: str) -> str | None:
    """The payload digest of an index line that can be a revisit's original (None for a revisit).

    Our index lines are ``json.dumps`` output, where a key's quotes are never escaped: a plain
    search finds them; any other form is parsed.
    """
    at = line.find(_DIGEST)
    if at < 0 or '"recordType"' in line:
        entry = IndexEntry.from_line(line)
        return entry.digest if entry.record_type != "revisit" and entry.digest else None
    if _REVISIT in line:
        return None
    start = at + len(_DIGEST)
    return line[start:line.index('"', start)] or None


class IndexMap:
    """The captures of one index, mapped: ``row(position)``, ``exact(method, url, body)``, ``count``."""

    def __init__(self, file: SortedFile, index: Path) -> None:
        self.file = file
        self.index = index
        self.path = file.path
        meta = file.meta
        self.count: int = meta["count"]
        self.methods: frozenset[str] = frozenset(meta["methods"])
        self.first_timestamp: str | None = meta["first_timestamp"]
        self._lines = file.table("lines")
        self._exact = file.table("exact")
        self._digests = file.table("digests")
        if len(self._lines) != self.count or len(self._exact) != self.count or len(self._digests) > self.count:
            raise ArchiveError(f"{self.path}: tables disagree with the header; delete it to rebuild")

    def __len__(self) -> int:
        return self.count

    def line(self, position: int) -> str:
        """The index line of the capture at ``position`` (recorded order)."""
        return self._lines.key(position)[_POSITION.size:].decode("utf-8", "surrogatepass")

    def row(self, position: int) -> IndexRow:
        """``(timestamp, offset, url, method, body query, line)`` of the capture at ``position``."""
        return index_row(self.line(position))[1]

    def exact(self, method: str, url: str, body: str | None) -> list[int]:
        """Positions (ascending) of the captures with exactly this method, URL and body."""
        return self._exact.find(exact_key_bytes(method, url, body))

    def originals(self, digest: str) -> list[int]:
        """Positions of the captures (not revisits) whose payload has this digest."""
        return self._digests.find(key_bytes(digest))

    def close(self) -> None:
        self.file.close()


def open_index_map(index: Path, *, build: bool = True) -> IndexMap:
    """The mapped form of ``index``, built first when missing or unreadable (unless ``build`` is false)."""
    index = Path(index)
    target = map_file(index)
    if target is None:
        raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`")
    if target.is_file():
        try:
            imap = IndexMap(SortedFile(target), index)
            mark_used(target)
            return imap
        except (ArchiveError, KeyError, TypeError):
            if not build:
                raise
    elif not build:
        raise ArchiveError(f"{index}: no mapped index yet")
    return IndexMap(SortedFile(build_index_map(index)), index)
