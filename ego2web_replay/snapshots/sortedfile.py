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
:func:`key_bytes` is the one way keys of several parts are written, so that a prefix of parts is a
prefix of bytes and no two part lists share a key.
"""

from __future__ import annotations

import bisect
import json
import mmap
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..atomic import atomic_writer
from ..errors import ArchiveError

__all__ = ["MAGIC", "KeyTable", "SortedFile", "key_bytes", "write_sorted_file"]

MAGIC = b"E2RSORT1"
_RECORD = struct.Struct("<QII")
_LENGTH = struct.Struct("<Q")


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
    sorted_tables = {name: sorted(pairs) for name, pairs in tables.items()}
    layout: dict[str, list[int]] = {}
    header: dict[str, Any] = {"meta": dict(meta), "tables": layout, "blob": 0, "size": 0}
    # the header's length depends on the offsets it lists: reserve room for the widest numbers
    probe = dict(header, tables={n: [2**63, 2**32] for n in sorted_tables}, blob=2**63, size=2**63)
    room = len(json.dumps(probe).encode()) + 16
    offset = len(MAGIC) + _LENGTH.size + room
    for name, pairs in sorted_tables.items():
        layout[name] = [offset, len(pairs)]
        offset += _RECORD.size * len(pairs)
    header["blob"] = offset
    header["size"] = offset + sum(len(key) for pairs in sorted_tables.values() for key, _ in pairs)
    with atomic_writer(path) as fh:
        text = json.dumps(header).encode().ljust(room)
        fh.write(MAGIC + _LENGTH.pack(room) + text)
        blob_at = 0
        for pairs in sorted_tables.values():
            records = bytearray()
            for key, value in pairs:
                records += _RECORD.pack(blob_at, len(key), value)
                blob_at += len(key)
            fh.write(records)
        for pairs in sorted_tables.values():
            for i in range(0, len(pairs), 65536):
                fh.write(b"".join(key for key, _ in pairs[i:i + 65536]))


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

    def close(self) -> None:
        self._data.close()
