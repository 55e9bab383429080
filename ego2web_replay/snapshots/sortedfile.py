"""A sorted key file, read through ``mmap`` and searched by bisection (the way pywb searches a sorted CDXJ).

One file holds a JSON header and any number of named tables. A table is an array of fixed-width
records ``(key offset, key length, value)``, sorted by the key's bytes and then by the value, over
one blob of key bytes; :class:`KeyTable` finds every value of a key, or every key under a prefix, in
``O(log n)`` record reads without loading the table: opening a file of a million keys reads its
header only, and a lookup touches a few pages of the map. The page cache, not the Python heap,
holds what was read, so a large file costs neither start-up time nor collector work.

Layout (little-endian)::

    b"E2RSORT1"  u64 header length  header JSON  ...tables...  blob
    header: {"meta": {...}, "tables": {name: [offset, count]}, "blob": offset, "size": file length}
    record: u64 key offset (in the blob), u32 key length, u32 value

:func:`write_sorted_file` writes one atomically (temporary file, fsync, rename); the caller keys it
by whatever the content depends on (the cache of an index is keyed by the index's size and mtime).
:func:`write_sorted_stream` writes tables that come sorted without holding them, and
:class:`ExternalSorter` sorts more than memory should hold (sorted runs in temporary files, merged),
and :func:`write_sorted_columns` writes tables put in order by numpy (:mod:`.keysort`) from arrays,
so a million-line index is mapped in bounded memory without a Python object per key.
:func:`key_bytes` is the one way keys of several parts are written, so that a prefix of parts is a
prefix of bytes and no two part lists share a key.
"""

from __future__ import annotations

import bisect
import heapq
import json
import mmap
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..atomic import atomic_writer
from ..errors import ArchiveError

if TYPE_CHECKING:
    import numpy as np

    type Columns = (tuple[np.ndarray, np.ndarray, Iterable[bytes]]
                    | tuple[np.ndarray, np.ndarray, Iterable[bytes], np.ndarray])
    """A table for :func:`write_sorted_columns`: key lengths, values, key bytes, and optionally the keys' places."""

__all__ = ["MAGIC", "KeyTable", "SortedFile", "key_bytes", "write_sorted_file", "write_sorted_stream", "write_sorted_columns",
           "ExternalSorter"]

MAGIC = b"E2RSORT1"
_RECORD = struct.Struct("<QII")
_RECORDS_AT_ONCE = 1 << 16
_LENGTH = struct.Struct("<Q")
_ITEM = struct.Struct("<IQI")  # a sorted run's item: key length, value, payload length
_COPY = 1 << 20


def key_bytes(*parts: str) -> bytes:
    """The parts joined by NUL, each escaped (NUL -> 01 01, 01 -> 01 02) so that the joining is
    one-to-one and ``key_bytes(a, b)`` starts with ``key_bytes(a, b_prefix)``. UTF-8, lone surrogates kept."""
    out = []
    for part in parts:
        if "\x00" in part or "\x01" in part:
            part = part.replace("\x01", "\x01\x02").replace("\x00", "\x01\x01")
        out.append(part)
    return "\x00".join(out).encode("utf-8", "surrogatepass")


def write_sorted_file(path: Path, meta: Mapping[str, Any], tables: Mapping[str, Iterable[tuple[bytes, int]]]) -> None:
    """Write ``tables`` (name -> (key, value) pairs in any order; values 0..2**32-1) with ``meta``."""
    write_sorted_stream(path, meta, {name: sorted(pairs) for name, pairs in tables.items()})


def write_sorted_stream(path: Path, meta: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
                        tables: Mapping[str, Iterable[tuple[bytes, int]]]) -> None:
    """Write ``tables`` whose pairs come already sorted (by key, then value), one table after the
    other, holding none of them: records and keys go to temporary files next to ``path`` first, and
    are copied behind the header once the counts are known. ``meta`` may be a function called then
    (when what it says is learned while the tables are read)."""
    layout: dict[str, list[int]] = {}
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True)
    records: list[IO[bytes]] = []
    with tempfile.TemporaryFile(dir=folder) as blob:
        try:
            blob_at = 0
            for name, pairs in tables.items():
                out = tempfile.TemporaryFile(dir=folder)
                records.append(out)
                buf, count, last = bytearray(), 0, None
                for key, value in pairs:
                    item = (key, value)
                    if last is not None and item < last:
                        raise ValueError(f"table {name!r} is not sorted")
                    last = item
                    buf += _RECORD.pack(blob_at, len(key), value)
                    blob.write(key)
                    blob_at += len(key)
                    count += 1
                    if len(buf) >= _COPY:
                        out.write(buf)
                        buf.clear()
                out.write(buf)
                layout[name] = [0, count]
            counts = {name: count for name, (_at, count) in layout.items()}
            head = _head(meta() if callable(meta) else meta, counts, blob_at)
            with atomic_writer(path) as fh:
                fh.write(head)
                for part in (*records, blob):
                    part.seek(0)
                    shutil.copyfileobj(part, fh, _COPY)
        finally:
            for part in records:
                part.close()


def _head(meta: Mapping[str, Any], counts: Mapping[str, int], blob_bytes: int) -> bytes:
    """The magic, length and JSON header of a file of tables of ``counts`` records (in this order)
    and ``blob_bytes`` of keys; the records follow it directly."""
    # the header's length depends on the offsets it lists: reserve room for the widest numbers
    probe = {"meta": dict(meta), "tables": {n: [2**63, 2**32] for n in counts}, "blob": 2**63, "size": 2**63}
    room = len(json.dumps(probe).encode()) + 16
    offset = len(MAGIC) + _LENGTH.size + room
    layout = {}
    for name, count in counts.items():
        layout[name] = [offset, count]
        offset += _RECORD.size * count
    header = {"meta": dict(meta), "tables": layout, "blob": offset, "size": offset + blob_bytes}
    return MAGIC + _LENGTH.pack(room) + json.dumps(header).encode().ljust(room)


def write_sorted_columns(path: Path, meta: Mapping[str, Any], tables: Mapping[str, Columns]) -> None:
    """:func:`write_sorted_stream` of tables already in order given as arrays: per table the length
    of each key and its value (in table order), and the keys' bytes concatenated in that order, in
    pieces (:func:`~.keysort.sorted_chunks`); same file, written without a record per Python object.

    A table given a fourth array, where each key starts among the table's bytes (in table order),
    has its pieces taken in any order that puts each key there (a record names its key's place, so
    a table need not keep its keys' bytes in its own order: the index map's lines go in the order
    they are read)."""
    import numpy as np  # here, not at import: replay opens a mapped index without it

    record = np.dtype([("at", "<u8"), ("length", "<u4"), ("value", "<u4")])
    counts = {name: len(columns[0]) for name, columns in tables.items()}
    sizes = {name: int(columns[0].sum(dtype=np.uint64)) for name, columns in tables.items()}
    blob_at = sum(sizes.values())
    with atomic_writer(path) as fh:
        fh.write(_head(meta, counts, blob_at))
        at = 0
        for name, (lengths, values, _chunks, *placed) in tables.items():
            if len(values) != counts[name] or (placed and len(placed[0]) != counts[name]):
                raise ValueError(f"table {name!r}: {counts[name]} keys, {len(values)} values")
            for start in range(0, counts[name], _RECORDS_AT_ONCE):  # a few MiB of records at a time
                part = lengths[start:start + _RECORDS_AT_ONCE].astype(np.uint64)
                records = np.empty(len(part), dtype=record)
                if placed:
                    records["at"] = placed[0][start:start + _RECORDS_AT_ONCE].astype(np.uint64) + np.uint64(at)
                else:
                    ends = np.cumsum(part, dtype=np.uint64)
                    records["at"] = ends - part + np.uint64(at)
                records["length"] = part
                records["value"] = values[start:start + _RECORDS_AT_ONCE]
                fh.write(records.tobytes())
            at += sizes[name]
        written = 0
        for name, (_lengths, _values, chunks, *_placed) in tables.items():
            before = written
            for chunk in chunks:
                fh.write(chunk)
                written += len(chunk)
            if written - before != sizes[name]:
                raise ValueError(f"table {name!r}: {written - before} bytes of keys written, the lengths say {sizes[name]}")


class ExternalSorter:
    """``(key, value, payload)`` items in any order in, sorted out (by key, value, payload), holding
    about :data:`RUN_BYTES` of them in memory: beyond, each sorted run goes to a temporary file in
    ``folder`` and the runs are merged when read. Read once, then :meth:`close`."""

    RUN_BYTES = 32 << 20

    def __init__(self, folder: Path) -> None:
        self._folder = Path(folder)
        self._items: list[tuple[bytes, int, bytes]] = []
        self._held = 0
        self._runs: list[IO[bytes]] = []
        self.count = 0

    def add(self, key: bytes, value: int, payload: bytes = b"") -> None:
        self._items.append((key, value, payload))
        self._held += len(key) + len(payload) + 100  # the tuple and its objects
        self.count += 1
        if self._held >= self.RUN_BYTES:
            self._spill()

    def _spill(self) -> None:
        self._items.sort()
        self._folder.mkdir(parents=True, exist_ok=True)
        run = tempfile.TemporaryFile(dir=self._folder)
        self._runs.append(run)
        buf = bytearray()
        for key, value, payload in self._items:
            buf += _ITEM.pack(len(key), value, len(payload))
            buf += key
            buf += payload
            if len(buf) >= _COPY:
                run.write(buf)
                buf.clear()
        run.write(buf)
        run.seek(0)
        self._items, self._held = [], 0

    def __iter__(self) -> Iterator[tuple[bytes, int, bytes]]:
        if not self._runs:
            self._items.sort()
            return iter(self._items)
        if self._items:
            self._spill()
        return heapq.merge(*(_read_run(run) for run in self._runs))

    def close(self) -> None:
        for run in self._runs:
            run.close()
        self._runs, self._items = [], []


def _read_run(run: IO[bytes]) -> Iterator[tuple[bytes, int, bytes]]:
    while head := run.read(_ITEM.size):
        klen, value, plen = _ITEM.unpack(head)
        data = run.read(klen + plen)
        yield data[:klen], value, data[klen:]


class KeyTable:
    """One sorted table of a :class:`SortedFile`: bisection over its records, keys read from the map.

    Every :data:`STRIDE`-th key is read once into a list (for a million keys, 4,000 of them): a
    lookup bisects that list in C, then at most ``log2(STRIDE)`` records of the map, so it touches
    a couple of pages instead of twenty scattered ones (pywb's ZipNum summary, in memory).
    """

    STRIDE = 256

    def __init__(self, data: mmap.mmap, offset: int, count: int, blob: int) -> None:
        self._data, self._offset, self._blob = data, offset, blob
        self.count = count
        self._sample: list[bytes] | None = None

    def __len__(self) -> int:
        return self.count

    def key(self, i: int) -> bytes:
        at, length, _ = _RECORD.unpack_from(self._data, self._offset + i * _RECORD.size)
        start = self._blob + at
        return self._data[start:start + length]

    def value(self, i: int) -> int:
        return _RECORD.unpack_from(self._data, self._offset + i * _RECORD.size)[2]

    def item(self, i: int) -> tuple[bytes, int]:
        at, length, value = _RECORD.unpack_from(self._data, self._offset + i * _RECORD.size)
        start = self._blob + at
        return self._data[start:start + length], value

    def lower_bound(self, key: bytes) -> int:
        """The first record whose key is not below ``key`` (``count`` when there is none)."""
        sample = self._sample
        if sample is None:
            sample = self._sample = [self.key(i) for i in range(0, self.count, self.STRIDE)]
        j = bisect.bisect_left(sample, key)  # sample[:j] < key <= sample[j:]
        lo = (j - 1) * self.STRIDE + 1 if j else 0
        hi = min(j * self.STRIDE, self.count)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.key(mid) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def find(self, key: bytes) -> list[int]:
        """Every value stored under exactly ``key``, ascending (empty when absent)."""
        i = self.lower_bound(key)
        out = []
        while i < self.count:
            k, value = self.item(i)
            if k != key:
                break
            out.append(value)
            i += 1
        return out

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, int]]:
        """Every (key, value) whose key starts with ``prefix``, in key order."""
        i = self.lower_bound(prefix)
        while i < self.count:
            k, value = self.item(i)
            if not k.startswith(prefix):
                return
            yield k, value
            i += 1


class SortedFile:
    """A file written by :func:`write_sorted_file`, mapped read-only; ``meta`` and ``table(name)``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                self._data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ArchiveError(f"{self.path}: cannot map the sorted index ({e})") from None
        try:
            if self._data[:len(MAGIC)] != MAGIC:
                raise ValueError("not a sorted index file")
            (room,) = _LENGTH.unpack_from(self._data, len(MAGIC))
            start = len(MAGIC) + _LENGTH.size
            header = json.loads(self._data[start:start + room])
            self.meta: dict[str, Any] = header["meta"]
            self._tables: dict[str, list[int]] = header["tables"]
            self._blob: int = header["blob"]
            if header["size"] != len(self._data):
                raise ValueError(f"file cut short or grown: {len(self._data)} bytes, the header says {header['size']}")
        except (ValueError, KeyError, TypeError, struct.error) as e:
            self._data.close()
            raise ArchiveError(f"{self.path}: not a valid sorted index ({e}); delete it to rebuild") from None

    def table(self, name: str) -> KeyTable:
        offset, count = self._tables[name]
        return KeyTable(self._data, offset, count, self._blob)

    def drop_pages(self) -> None:
        """Unmap the pages read so far from this process (they stay in the page cache and come
        back when read again): a pass over a whole large file need not count it all as resident."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._data.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        self._data.close()
