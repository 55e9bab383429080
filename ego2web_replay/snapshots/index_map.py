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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..config import data_dir
from ..errors import ArchiveError
from ..models.index import IndexEntry, IndexRow, index_row
from .index_cache import mark_used, stream_rows
from .sortedfile import ExternalSorter, SortedFile, key_bytes, write_sorted_stream

__all__ = ["IndexMap", "map_file", "build_index_map", "open_index_map", "exact_key_bytes", "add_map_hook",
           "run_map_hooks", "MapHook", "original_digest"]

log = logging.getLogger(__name__)

_VERSION = 2
_DIGEST = '"digest": "'
_REVISIT = '"mime": "warc/revisit"'
_POSITION = struct.Struct(">I")
_PAYLOAD = struct.Struct("<II")  # a capture while it is put in order: exact key and digest lengths, then the line

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


def build_index_map(index: Path, rows: Iterable[IndexRow] | None = None) -> Path:
    """Write the mapped form of ``index`` (from ``rows`` when the caller has parsed them, else read
    from the file line by line) and return its path. Memory stays bounded: the captures are put in
    recorded order and the keys sorted by :class:`~.sortedfile.ExternalSorter`, and the tables are
    written as they come (:func:`~.sortedfile.write_sorted_stream`)."""
    index = Path(index)
    target = map_file(index)
    if target is None:
        raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`")
    order, exact, digests = (ExternalSorter(target.parent) for _ in range(3))
    methods: set[str] = set()
    first: list[str] = []
    try:
        for seq, row in enumerate(stream_rows(index) if rows is None else rows):
            ts, offset, url, method, body, line = row
            methods.add(method)
            if not first or ts < first[0]:
                first[:] = [ts]
            key = exact_key_bytes(method, url, body)
            digest = (original_digest(line) or "").encode("utf-8", "surrogatepass")
            payload = _PAYLOAD.pack(len(key), len(digest)) + key + digest + line.encode("utf-8", "surrogatepass")
            order.add(ts.encode("utf-8", "surrogatepass") + b"\x00" + _offset_bytes(index, offset), seq, payload)
        if order.count >= 2**32:
            raise ArchiveError(f"{index}: {order.count} captures are more than one mapped index holds (2**32)")

        def lines() -> Iterator[tuple[bytes, int]]:
            for position, (_key, _seq, payload) in enumerate(order):
                klen, dlen = _PAYLOAD.unpack_from(payload)
                at = _PAYLOAD.size
                exact.add(payload[at:at + klen], position)
                if dlen:
                    digests.add(key_bytes(payload[at + klen:at + klen + dlen].decode("utf-8", "surrogatepass")),
                                position)
                yield _POSITION.pack(position) + payload[at + klen + dlen:], position

        meta = {"version": _VERSION, "index": str(index.resolve()), "count": order.count,
                "methods": sorted(methods), "first_timestamp": first[0] if first else None}
        write_sorted_stream(target, meta, {"lines": lines(), "exact": _pairs(exact), "digests": _pairs(digests)})
    except OSError as e:
        raise ArchiveError(f"{target}: cannot write the mapped index ({e.strerror})") from None
    finally:
        for sorter in (order, exact, digests):
            sorter.close()
    return target


def _pairs(sorter: ExternalSorter) -> Iterator[tuple[bytes, int]]:
    """A sorter's items as (key, value) pairs, read only when the first is asked for."""
    for key, value, _payload in sorter:
        yield key, value


def _offset_bytes(index: Path, offset: int) -> bytes:
    try:
        return (offset + 2**63).to_bytes(8, "big")  # ordered as the numbers are
    except OverflowError:
        raise ArchiveError(f"{index}: offset {offset} is out of range; rebuild it with "
                           "`ego2web-replay snapshot index`") from None


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
