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
import mmap
import struct
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import data_dir
from ..errors import ArchiveError
from ..models.index import IndexEntry, IndexRow, index_row
from .index_cache import mark_used, stream_rows
from .sortedfile import SortedFile, key_bytes, write_sorted_columns

if TYPE_CHECKING:
    import numpy as np

__all__ = ["IndexMap", "map_file", "build_index_map", "open_index_map", "exact_key_bytes", "add_map_hook",
           "run_map_hooks", "MapHook", "original_digest"]

log = logging.getLogger(__name__)

_VERSION = 2
_DIGEST = '"digest": "'
_REVISIT = '"mime": "warc/revisit"'
_POSITION = struct.Struct(">I")
_LINES_CHUNK = 1024  # lines copied at a time into the table

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
    from the file line by line) and return its path.

    One pass over the rows, each parsed once and kept as bytes only: the lines go to a temporary
    file, the keys (recorded order, exact key, digest) to :class:`~.keysort.KeyColumn` buffers
    that spill to temporary files; numpy then puts each table in order and
    :func:`~.sortedfile.write_sorted_columns` writes them. No Python object per capture outlives
    its row, so memory stays far below the index's size."""
    import numpy as np  # here, not at import: opening a map that exists needs none of it

    from .keysort import KeyColumn, ranks, sorted_chunks

    index = Path(index)
    target = map_file(index)
    if target is None:
        raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`")
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    times, exact, digests = KeyColumn(folder), KeyColumn(folder), KeyColumn(folder)
    offsets, digest_of = array("q"), array("Q")
    methods: set[str] = set()
    try:
        with _LineSpool(folder) as spool:
            for seq, row in enumerate(stream_rows(index) if rows is None else rows):
                ts, offset, url, method, body, line = row
                methods.add(method)
                times.add(ts.encode("utf-8", "surrogatepass"))
                if not -2**63 <= offset < 2**63:
                    _offset_bytes(index, offset)  # raises the error an out-of-range offset gets
                offsets.append(offset)
                exact.add(exact_key_bytes(method, url, body))
                digest = original_digest(line)
                if digest:
                    digest_of.append(seq)
                    digests.add(key_bytes(digest))
                spool.add(line.encode("utf-8", "surrogatepass"))
            count = len(times)
            if count >= 2**32:
                raise ArchiveError(f"{index}: {count} captures are more than one mapped index holds (2**32)")
            order = times.argsort(np.frombuffer(offsets, dtype=np.int64))
            first = times.key(int(order[0])).decode("utf-8", "surrogatepass") if count else None
            times.close()
            del offsets
            rank = ranks(order)
            exact_values = rank
            exact_order = exact.argsort(exact_values)
            digest_values = rank[np.frombuffer(digest_of, dtype=np.uint64).astype(np.int64)]
            del digest_of
            digest_order = digests.argsort(digest_values)
            del rank
            meta = {"version": _VERSION, "index": str(index.resolve()), "count": count,
                    "methods": sorted(methods), "first_timestamp": first}
            write_sorted_columns(target, meta, {
                "lines": (spool.lengths()[order] + _POSITION.size, np.arange(count, dtype=np.uint32),
                          spool.in_order(order)),
                "exact": (exact.lengths()[exact_order], exact_values[exact_order], sorted_chunks(exact, exact_order)),
                "digests": (digests.lengths()[digest_order], digest_values[digest_order],
                            sorted_chunks(digests, digest_order)),
            })
    except OSError as e:
        raise ArchiveError(f"{target}: cannot write the mapped index ({e.strerror})") from None
    finally:
        for column in (times, exact, digests):
            column.close()
    return target


class _LineSpool:
    """The lines of an index being mapped, in a temporary file, read back in recorded order."""

    def __init__(self, folder: Path) -> None:
        self._file = tempfile.TemporaryFile(dir=folder, prefix="lines-")
        self._buf = bytearray()
        self._at = 0
        self._starts, self._lengths = array("Q"), array("I")

    def __enter__(self) -> _LineSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def add(self, line: bytes) -> None:
        self._starts.append(self._at + len(self._buf))
        self._lengths.append(len(line))
        self._buf += line
        if len(self._buf) >= 1 << 20:
            self._file.write(self._buf)
            self._at += len(self._buf)
            self._buf.clear()

    def lengths(self) -> np.ndarray:
        import numpy as np

        return np.frombuffer(self._lengths, dtype=np.uint32)

    def in_order(self, order: np.ndarray) -> Iterator[bytes]:
        """The ``lines`` table's keys: position (4 bytes, big-endian) and line, in ``order``,
        a few thousand at a time; the pages read are dropped from this process as it goes (a
        million lines would otherwise stay mapped, counted in its resident memory)."""
        self._file.write(self._buf)
        self._buf = bytearray()
        self._file.flush()
        import numpy as np

        if not len(order):
            return
        starts = np.frombuffer(self._starts, dtype=np.uint64).astype(np.int64)
        lengths = self.lengths().astype(np.int64)
        with mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) as view:
            data = np.frombuffer(view, dtype=np.uint8)
            for at in range(0, len(order), _LINES_CHUNK):
                part = order[at:at + _LINES_CHUNK]
                heads = (np.arange(at, at + len(part), dtype=">u4")).view(np.uint8).reshape(-1, 4)
                sizes = lengths[part] + _POSITION.size
                ends = np.cumsum(sizes)
                out = np.empty(int(ends[-1]), dtype=np.uint8)
                index = np.repeat(starts[part] - _POSITION.size - (ends - sizes), sizes)
                index += np.arange(len(out), dtype=np.int64)
                np.maximum(index, 0, out=index)
                out[:] = data[index]
                for b in range(_POSITION.size):
                    out[ends - sizes + b] = heads[:, b]
                yield out.tobytes()
                view.madvise(mmap.MADV_DONTNEED)
            del data


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
