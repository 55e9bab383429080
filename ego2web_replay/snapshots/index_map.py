"""The memory-mapped form of a CDXJ index for replay: captures by recorded position, and by exact key.

Replay of a large snapshot must not turn a million index lines into a million Python objects before
it serves its first request. :func:`open_index_map` gives an :class:`IndexMap` over a
:mod:`~.sortedfile` of two tables, written once per index version into the data folder's
``index-cache/`` (keyed by the index's path, size and mtime, like the compact cache of
:mod:`.index_cache`) and then mapped, not read:

* ``lines``: the servable lines (responses, revisits, resources) in recorded order (by timestamp,
  then offset, as :func:`~.index_cache.parse_rows` orders them), each keyed by its position as four
  big-endian bytes, so record ``i`` is capture ``i``; the lines' bytes are kept in the index's own
  order (each record names where its key is), so the build copies them in one sequential read;
* ``exact``: :func:`~.sortedfile.key_bytes` of (method, URL, request body in the index's POST form)
  -> position, for the exact stage of matching;
* ``digests``: the payload digest of each capture that is not a revisit -> position, so a revisit
  finds its original (:meth:`~.snapshot.Snapshot.find_original`) without the whole index parsed.

The file is built when the index is built (``finalize``, ``snapshot index``, import; large indexes
only, through :func:`~.index_cache.warm_cache`) or on the first mapped open of an older snapshot.
It is never the source of truth: a missing, stale or unreadable one is rebuilt from the index.

A layer above may add what it derives from the map to that build: :func:`add_map_hook` registers a
function that :func:`run_map_hooks` calls with the freshly built :class:`IndexMap` (replay registers
the build of its canonical match keys, which this layer cannot compute: it may not import replay),
and, optionally, the same table fed from the one read of the index that builds the map
(:func:`row_tables`, :mod:`.first_open`), so ``finalize`` and ``snapshot index`` read the index once.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import struct
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import data_dir
from ..errors import ArchiveError
from ..models.index import IndexRow, index_row
from .index_cache import mark_used, stream_rows
from .indexscan import Batch, IrregularIndex, collector_paused, original_digest, scan_index
from .sortedfile import SortedFile, key_bytes, write_sorted_columns

if TYPE_CHECKING:
    import numpy as np

    from .first_open import RowKeys

__all__ = ["IndexMap", "map_file", "build_index_map", "open_index_map", "exact_key_bytes", "add_map_hook", "row_tables",
           "run_map_hooks", "MapHook", "original_digest"]

log = logging.getLogger(__name__)

_VERSION = 2
_POSITION = struct.Struct(">I")
_LINES_CHUNK = 1024  # lines copied at a time into the table
_BUCKET_BYTES = 8 << 20  # lines held at a time when they are put in recorded order by buckets
_READ_BYTES = 1 << 20  # lines read at a time when they are copied in file order (each held twice, and a view of each)

MapHook = Callable[["IndexMap"], None]
RowsHook = Callable[[Path], "RowKeys"]
_HOOKS: dict[str, MapHook] = {}
_ROW_HOOKS: dict[str, RowsHook] = {}


def add_map_hook(name: str, hook: MapHook, rows: RowsHook | None = None) -> None:
    """Have ``hook(index_map)`` run each time an index is built with its map; a hook registered
    under the same ``name`` replaces the earlier one (so a lazy and an eager wiring run it once).
    ``rows(folder)``: the same table as a :class:`~.first_open.RowKeys` (its spill files in
    ``folder``), built from the rows of the read that builds the map, writing what ``hook`` writes."""
    _HOOKS[name] = hook
    if rows is None:
        _ROW_HOOKS.pop(name, None)
    else:
        _ROW_HOOKS[name] = rows


def row_tables(folder: Path) -> list[RowKeys] | None:
    """The registered hooks as tables fed by the read that builds the map (:func:`add_map_hook`'s
    ``rows``); None when a hook has no such form (then :func:`run_map_hooks` must run them)."""
    if set(_ROW_HOOKS) != set(_HOOKS):
        return None
    return [make(folder) for make in _ROW_HOOKS.values()]


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
    from the file once, a block at a time, by :func:`~.indexscan.scan_index`; line by line when the
    file needs the line readers) and return its path. See :class:`MapBuilder`."""
    index = Path(index)
    if rows is None:
        try:
            return build_from_scan(index)[0]
        except IrregularIndex:
            rows = stream_rows(index)
    with MapBuilder(index) as builder:
        for row in rows:
            builder.add_row(row)
        return builder.write()[0]


def build_from_scan(index: Path) -> tuple[Path, np.ndarray]:
    """:func:`build_index_map` of ``index`` read by :func:`~.indexscan.scan_index`: the map's path
    and the rank in recorded order of each servable row (in file order).
    :class:`~.indexscan.IrregularIndex` when the file needs the line readers (nothing is written then)."""
    with MapBuilder(index) as builder, collector_paused():
        for batch in scan_index(index):
            builder.add_batch(batch)
        return builder.write()


class MapBuilder:
    """The tables of one index's map, gathered row by row (:meth:`add_row`) or a block of rows at a
    time (:meth:`add_batch`), then put in order and written (:meth:`write`).

    Each row is kept as bytes only: the keys (recorded order, exact key, digest) in
    :class:`~.keysort.KeyColumn` buffers that spill to temporary files, the lines in a temporary
    file (rows) or as their places in the index file itself (batches); numpy then puts each table in
    order and :func:`~.sortedfile.write_sorted_columns` writes them. No Python object per capture
    outlives its block, so memory stays far below the index's size."""

    def __init__(self, index: Path) -> None:
        from .keysort import KeyColumn  # numpy: only when a map is built

        self.index = Path(index)
        target = map_file(self.index)
        if target is None:
            raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`")
        self.target = target
        self.folder = target.parent
        self.folder.mkdir(parents=True, exist_ok=True)
        self._times, self._exact, self._digests = KeyColumn(self.folder), KeyColumn(self.folder), KeyColumn(self.folder)
        self._offsets, self._digest_of = array("q"), array("Q")
        self._all_digests = True  # every row so far has a digest: _digest_of left empty until one has not
        self._methods: set[str] = set()
        self._spool: _LineSpool | None = None
        self._starts, self._lengths = array("q"), array("q")  # the lines' places in the index file (batches)

    def __enter__(self) -> MapBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def count(self) -> int:
        """The rows added so far."""
        return len(self._times)

    def add_row(self, row: IndexRow) -> None:
        ts, offset, url, method, body, line = row
        if self._spool is None:
            self._spool = _LineSpool(self.folder)
        seq = len(self._offsets)
        self._methods.add(method)
        self._times.add(ts.encode("utf-8", "surrogatepass"))
        if not -2**63 <= offset < 2**63:
            _offset_bytes(self.index, offset)  # raises the error an out-of-range offset gets
        self._offsets.append(offset)
        self._exact.add(exact_key_bytes(method, url, body))
        digest = original_digest(line)
        if digest:
            if not self._all_digests:
                self._digest_of.append(seq)
            self._digests.add(key_bytes(digest))
        elif self._all_digests:
            self._all_digests = False
            self._digest_of.extend(range(seq))
        self._spool.add(line.encode("utf-8", "surrogatepass"))

    def add_batch(self, batch: Batch) -> None:
        """The rows of ``batch``, as :meth:`add_row` of each would add them."""
        seq = len(self._offsets)
        self._methods.update(batch.methods)
        try:
            self._offsets.extend(batch.offsets)
        except OverflowError:
            for offset in batch.offsets:
                _offset_bytes(self.index, offset)  # raises the error an out-of-range offset gets
            raise
        if None in batch.digests:
            if self._all_digests:
                self._all_digests = False
                self._digest_of.extend(range(seq))
            found = [(seq + i, d) for i, d in enumerate(batch.digests) if d]
            self._digest_of.extend(i for i, _d in found)
            digests = [d for _i, d in found]
        else:  # every row an original (no revisit)
            if not self._all_digests:
                self._digest_of.extend(range(seq, seq + len(batch.digests)))
            digests = batch.digests  # type: ignore[assignment]
        if batch.plain:  # no value holds NUL or \x01: the keys need no escapes
            self._times.extend_text(batch.timestamps)
            if not any(batch.bodies) and batch.methods.count("GET") == len(batch.methods):
                self._exact.extend_text(batch.urls, "GET\x00", "\x00")
            else:
                self._exact.extend_text([f"{m}\x00{u}\x00{b or ''}" for m, u, b in
                                         zip(batch.methods, batch.urls, batch.bodies, strict=True)])
            self._digests.extend_text(digests)
        else:
            self._times.extend([ts.encode("utf-8", "surrogatepass") for ts in batch.timestamps])
            self._exact.extend([exact_key_bytes(m, u, b) for m, u, b in
                                zip(batch.methods, batch.urls, batch.bodies, strict=True)])
            self._digests.extend([key_bytes(d) for d in digests])
        assert batch.starts is not None and batch.lengths is not None
        self._starts.frombytes(batch.starts.tobytes())
        self._lengths.frombytes(batch.lengths.tobytes())

    def write(self) -> tuple[Path, np.ndarray]:
        """Write the map; its path, and the rank in recorded order of each row added (in order)."""
        import numpy as np

        from .keysort import ranks, sorted_chunks

        index, times, exact, digests = self.index, self._times, self._exact, self._digests
        count = len(times)
        if count >= 2**32:
            raise ArchiveError(f"{index}: {count} captures are more than one mapped index holds (2**32)")
        try:
            order = times.argsort(np.frombuffer(self._offsets, dtype=np.int64))
            first = times.key(int(order[0])).decode("utf-8", "surrogatepass") if count else None
            times.close()
            self._offsets = array("q")
            lines = self._spool or _FileLines(index, self._starts, self._lengths, self.folder)
            sizes = lines.lengths() + _POSITION.size  # of each line's key, in file order
            places = np.cumsum(sizes)
            places -= sizes  # where each key goes among the table's bytes: in file order
            line_places = places[order]
            del places
            line_sizes = sizes[order].astype(np.uint32)  # (as a record holds it: 4 bytes)
            del sizes
            rank = ranks(order)
            exact_order = exact.argsort(rank)
            digest_values = rank.copy() if self._all_digests else \
                rank[np.frombuffer(self._digest_of, dtype=np.uint64).astype(np.int64)]
            self._digest_of = array("Q")
            digest_order = digests.argsort(digest_values)
            meta = {"version": _VERSION, "index": str(index.resolve()), "count": count,
                    "methods": sorted(self._methods), "first_timestamp": first}
            write_sorted_columns(self.target, meta, {
                "lines": (line_sizes, np.arange(count, dtype=np.uint32), lines.in_file_order(rank), line_places),
                "exact": (exact.lengths()[exact_order], rank[exact_order], sorted_chunks(exact, exact_order)),
                "digests": (digests.lengths()[digest_order], digest_values[digest_order],
                            sorted_chunks(digests, digest_order)),
            })
        except OSError as e:
            raise ArchiveError(f"{self.target}: cannot write the mapped index ({e.strerror})") from None
        return self.target, rank

    def close(self) -> None:
        for column in (self._times, self._exact, self._digests):
            column.close()
        if self._spool is not None:
            self._spool.close()


class _LineSpool:
    """The lines of an index being mapped, in a temporary file, in the order added."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._file = tempfile.TemporaryFile(dir=folder, prefix="lines-")
        self._buf = bytearray()
        self._at = 0
        self._starts, self._lengths = array("q"), array("q")

    def close(self) -> None:
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

        return np.frombuffer(self._lengths, dtype=np.int64)

    def in_file_order(self, rank: np.ndarray) -> Iterator[bytes]:
        """The ``lines`` table's keys in the order the lines were added (see :func:`_lines_in_file_order`)."""
        self._file.write(self._buf)
        self._buf = bytearray()
        self._file.flush()
        return _lines_in_file_order(self._file.fileno(), self._starts, self._lengths, rank)


class _FileLines:
    """The lines of an index being mapped, where they are in the index file."""

    def __init__(self, index: Path, starts: array[int], lengths: array[int], folder: Path) -> None:
        self.index, self._starts, self._lengths, self._folder = index, starts, lengths, folder

    def lengths(self) -> np.ndarray:
        import numpy as np

        return np.frombuffer(self._lengths, dtype=np.int64)

    def in_file_order(self, rank: np.ndarray) -> Iterator[bytes]:
        with self.index.open("rb") as fh:
            yield from _lines_in_file_order(fh.fileno(), self._starts, self._lengths, rank)


def _lines_in_file_order(fileno: int, starts_at: array[int], lengths_of: array[int], rank: np.ndarray) -> Iterator[bytes]:
    """The ``lines`` table's keys in file order: each line (``lengths_of[i]`` bytes at ``starts_at[i]``
    of the file ``fileno``, rising) after its position in recorded order (``rank[i]``, 4 bytes,
    big-endian), from one sequential read of the file, a few MiB at a time.

    Whatever the recorded order, every read is in turn (a recording's index is sorted by URL, its
    recorded order the order of browsing: copied in recorded order, nearly every line would be on
    another page than the one before, see :func:`_lines_in_order`)."""
    import numpy as np

    starts = np.frombuffer(starts_at, dtype=np.int64)
    ends = starts + np.frombuffer(lengths_of, dtype=np.int64)
    count, at = len(starts), 0
    while at < count:
        stop = min(max(int(np.searchsorted(ends, starts[at] + _READ_BYTES, side="left")), at + 1), count)
        base = int(starts[at])
        block = os.pread(fileno, int(ends[stop - 1]) - base, base)
        yield _keyed(rank[at:stop], block, (starts[at:stop] - base).tolist(), (ends[at:stop] - base).tolist())
        del block
        at = stop


def _lines_in_order(fileno: int, starts_at: array[int], lengths_of: array[int], order: np.ndarray,
                    folder: Path) -> Iterator[bytes]:
    """The ``lines`` table's keys: position (4 bytes, big-endian) and line (``lengths_of[i]`` bytes
    at ``starts_at[i]`` of the file ``fileno``, the lines in file order), in ``order``, a few
    thousand at a time.

    When ``order`` keeps near the file's order (each run of lines taken in turn mostly on the pages
    the one before took), the lines are copied from the file mapped, the pages read dropped from
    this process as it goes (a million lines would otherwise stay mapped, counted in its resident
    memory). When it does not (a real snapshot: the index sorted by URL, recorded order the order
    of browsing), that would read a page of the file for nearly every line, a million pages mapped
    and dropped again, so the lines go by :func:`_lines_bucketed` instead: every read sequential."""
    import numpy as np

    if not len(order):
        return
    starts = np.frombuffer(starts_at, dtype=np.int64)
    lengths = np.frombuffer(lengths_of, dtype=np.int64)
    if _scattered(starts[order], int(lengths.sum())):
        yield from _lines_bucketed(fileno, starts, lengths, order, folder)
        return
    ends = starts + lengths
    with mmap.mmap(fileno, 0, access=mmap.ACCESS_READ) as view:
        data = memoryview(view)
        try:
            for at in range(0, len(order), _LINES_CHUNK):
                part = order[at:at + _LINES_CHUNK]
                yield _keyed(np.arange(at, at + len(part)), data, starts[part].tolist(), ends[part].tolist())
                view.madvise(mmap.MADV_DONTNEED)
        finally:
            data.release()


def _scattered(starts: np.ndarray, total: int) -> bool:
    """Whether lines starting at ``starts`` (in the order they are to be read) would be read from
    the pages of their file in a far worse order than once each in turn: the number of times the
    next line lies on another page than the one before, against the number of pages."""
    import numpy as np

    pages = starts >> 12
    jumps = int(np.count_nonzero(pages[1:] != pages[:-1]))
    return jumps > 4 * (total // mmap.PAGESIZE + 1) + 64


def _keyed(positions: np.ndarray, data: memoryview | bytes, starts: list[int], ends: list[int]) -> bytes:
    """Keys of the ``lines`` table: each position (``positions[i]``, 4 bytes, big-endian) then the
    line ``data[starts[i]:ends[i]]``."""
    heads = positions.astype(">u4").tobytes()
    pieces: list[bytes | memoryview] = [b""] * (2 * len(starts))
    pieces[0::2] = [heads[i:i + 4] for i in range(0, len(heads), 4)]
    view = memoryview(data)
    try:
        pieces[1::2] = [view[s:e] for s, e in zip(starts, ends, strict=True)]
        return b"".join(pieces)
    finally:
        del pieces
        view.release()


def _lines_bucketed(fileno: int, starts: np.ndarray, lengths: np.ndarray, order: np.ndarray,
                    folder: Path) -> Iterator[bytes]:
    """:func:`_lines_in_order` by buckets: ``order`` cut into runs of positions of about
    :data:`_BUCKET_BYTES` of lines each; one read of the file from start to end, a few MiB at a
    time, puts each line in its run's region of a temporary file (in ``folder``); then each
    region is read in turn and its lines given in order. Two reads and a write of the lines, each
    sequential; about one region held at a time."""
    import numpy as np

    count, total = len(order), int(lengths.sum())
    per = max(1, min(count, count * _BUCKET_BYTES // max(total, 1)))  # positions per bucket
    bucket = np.empty(count, dtype=np.int64)
    bucket[order] = np.arange(count, dtype=np.int64) // per  # each line's bucket, in file order
    sizes = np.bincount(bucket, weights=lengths, minlength=(count + per - 1) // per).astype(np.int64)
    cursor = np.cumsum(sizes) - sizes  # where each bucket's region starts in the spill
    regions = cursor.copy()
    ends = starts + lengths
    with tempfile.TemporaryFile(dir=folder, prefix="lines-") as spill:
        out = spill.fileno()
        at = 0
        while at < count:  # the file read once, in order, a few MiB of lines at a time
            stop = int(np.searchsorted(ends, starts[at] + _BUCKET_BYTES, side="left")) + 1
            stop = min(max(stop, at + 1), count)
            base = int(starts[at])
            block = os.pread(fileno, int(ends[stop - 1]) - base, base)
            part = bucket[at:stop]
            grouped = np.argsort(part, kind="stable")
            rows = grouped + at
            heads = np.searchsorted(part[grouped], np.unique(part))
            view = memoryview(block)
            try:
                for first, last in zip(heads.tolist(), [*heads[1:].tolist(), len(rows)], strict=True):
                    chosen = rows[first:last]
                    b = int(bucket[chosen[0]])
                    piece = b"".join([view[s:e] for s, e in zip((starts[chosen] - base).tolist(),
                                                                 (ends[chosen] - base).tolist(), strict=True)])
                    os.pwrite(out, piece, int(cursor[b]))
                    cursor[b] += len(piece)
            finally:
                view.release()
            del block
            at = stop
        for b in range(len(sizes)):  # each region: its lines in file order, given in recorded order
            positions = order[b * per:(b + 1) * per]
            held = np.sort(positions)  # the lines of the region, in the order they were written
            local = np.cumsum(lengths[held]) - lengths[held]
            region = os.pread(out, int(sizes[b]), int(regions[b]))
            where = local[np.searchsorted(held, positions)]
            taken = lengths[positions]
            for at in range(0, len(positions), _LINES_CHUNK):
                s = where[at:at + _LINES_CHUNK]
                yield _keyed(np.arange(b * per + at, b * per + at + len(s)), region, s.tolist(),
                             (s + taken[at:at + _LINES_CHUNK]).tolist())
            del region


def _offset_bytes(index: Path, offset: int) -> bytes:
    try:
        return (offset + 2**63).to_bytes(8, "big")  # ordered as the numbers are
    except OverflowError:
        raise ArchiveError(f"{index}: offset {offset} is out of range; rebuild it with "
                           "`ego2web-replay snapshot index`") from None


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
