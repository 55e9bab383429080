"""The compact cache of an index (:func:`~.index_cache.index_rows`' pickle), written from the one read
that builds its map.

:func:`~.index_cache.index_rows` keeps the parsed rows as ``pickle.dumps(rows, HIGHEST_PROTOCOL)``:
a million rows are a million tuples and six million strings first, sorted, then pickled (over a
GiB held, and in a real recording's order, where the rows sort far from the index's, most of the
build's time). :class:`CompactRows` writes the very same bytes with none of them: it is fed the
rows of each block of the index by the read that builds the map (:mod:`.first_open`), turns each
row into the bytes pickle gives a row tuple, keeps them in a temporary file in file order, and once
the map says where each row stands in recorded order, reads them back in that order (sequentially,
by buckets, when the order is far from the file's: the map's own
:func:`~.index_map._lines_in_order`) into the pickle's list, cut into pickle's frames.

The bytes are pickle's own as long as no object of the rows is pickled twice (pickle would refer
back to it): every string of a parsed row is its own object, except those of one character or
none, which Python shares. A row with such a value (an empty request body, a one-character URL),
or with a value of 64 KiB or more (pickle writes those outside its frames), makes the table give
up (:attr:`CompactRows.done` stays false), and the caller pickles the parsed rows as before.
"""

from __future__ import annotations

import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..atomic import atomic_writer
from ..errors import ArchiveError
from .index_map import _lines_in_order
from .indexscan import Batch

if TYPE_CHECKING:
    import numpy as np

    from .index_map import IndexMap

__all__ = ["CompactRows", "row_bytes"]

FRAME_TARGET = 64 * 1024  # pickle's _FRAME_SIZE_TARGET: a frame ends where a save starts past it
_PROTO = b"\x80\x05"  # pickle.HIGHEST_PROTOCOL (5), as index_rows writes
_BATCH = 1000  # items a list's MARK ... APPENDS holds (pickle's batch size)
_LARGE = 1 << 16  # a string of this many bytes goes outside the frames: not written here
_SHORT = [b"\x8c" + bytes((n,)) for n in range(256)]  # SHORT_BINUNICODE with its length
_MEMO = b"\x94"  # MEMOIZE: after every string and every tuple
_END_ROW = b"t\x94"  # TUPLE, MEMOIZE (after the line's own MEMOIZE)
_MIN_ROW = 25  # bytes of the shortest row: MARK, six values (strings of two bytes), TUPLE, MEMOIZE
_BLANK_BODY = b'"requestBody": ""'  # an empty body: one the parsed row has as "", the scan as None


class _Unsafe(Exception):  # noqa: N818 - a signal inside this module
    """A row whose pickle this module cannot write (see the module docstring)."""


def _text(value: str) -> bytes:
    """The pickle of a string object seen once: SHORT_BINUNICODE or BINUNICODE, then MEMOIZE."""
    if len(value) <= 1:
        raise _Unsafe  # Python shares such strings: pickle would refer back to the first
    data = value.encode("utf-8", "surrogatepass")
    n = len(data)
    if n < 256:
        return _SHORT[n] + data + _MEMO
    if n >= _LARGE:
        raise _Unsafe
    return b"X" + n.to_bytes(4, "little") + data + _MEMO


def _int(value: int) -> bytes:
    """The pickle of an int: BININT1, BININT2, BININT, else LONG1 (or LONG4) of its two's complement."""
    if 0 <= value < 256:
        return b"K" + bytes((value,))
    if 0 <= value < 65536:
        return b"M" + value.to_bytes(2, "little")
    if -2**31 <= value < 2**31:
        return b"J" + value.to_bytes(4, "little", signed=True)
    size = (value.bit_length() >> 3) + 1
    data = value.to_bytes(size, "little", signed=True)
    if value < 0 and size > 1 and data[-1] == 0xFF and data[-2] & 0x80:
        data = data[:-1]
    if len(data) < 256:
        return b"\x8a" + bytes((len(data),)) + data
    return b"\x8b" + len(data).to_bytes(4, "little", signed=True) + data


def row_bytes(ts: str, offset: int, url: str, method: str, body: str | None, line: bytes | memoryview) -> bytes:
    """The pickle of the row tuple ``(ts, offset, url, method, body, line)`` as it stands in the
    rows' list (``line``: the line's UTF-8 bytes); :class:`_Unsafe` when it is not this module's to write."""
    n = len(line)
    if n <= 1 or n >= _LARGE:
        raise _Unsafe
    head = _SHORT[n] if n < 256 else b"X" + n.to_bytes(4, "little")
    return b"".join((b"(", _text(ts), _int(offset), _text(url), _text(method), b"N" if body is None else _text(body),
                     head, line, _MEMO, _END_ROW))


def _save_starts(row: bytes | memoryview) -> list[int]:
    """Where, within a row, pickle starts saving each of its six values (after the MARK, then after
    each value but the last): with the row's own start, the places where pickle may end a frame."""
    starts = [1]  # after the MARK
    at = 1
    for _ in range(5):
        op = row[at]
        if op == 0x8C:  # SHORT_BINUNICODE n, data, MEMOIZE
            at += 2 + row[at + 1] + 1
        elif op == 0x58:  # BINUNICODE n (4 bytes), data, MEMOIZE
            at += 5 + int.from_bytes(row[at + 1:at + 5], "little") + 1
        elif op == 0x4B:  # BININT1
            at += 2
        elif op == 0x4D:  # BININT2
            at += 3
        elif op == 0x4A:  # BININT
            at += 5
        elif op == 0x8A:  # LONG1
            at += 2 + row[at + 1]
        elif op == 0x8B:  # LONG4
            at += 5 + int.from_bytes(row[at + 1:at + 5], "little")
        elif op == 0x4E:  # NONE
            at += 1
        else:
            raise ValueError(f"unexpected opcode {op:#x} in a row")
        starts.append(at)
    return starts


def _ascii_rows(batch: Batch, data: bytes, starts: list[int], lengths: list[int]) -> tuple[bytes, list[int]]:
    """:func:`row_bytes` of every row of a batch of plain lines all in ASCII (``data``: the lines'
    bytes, each row's line at ``starts[i]``, ``lengths[i]`` bytes), built as one Latin-1 string:
    each value is ASCII, so its length is its UTF-8 length, and each opcode and length byte one
    character; the bytes of each row and its length."""
    texts = batch.timestamps, batch.urls, batch.methods
    if min(min(map(len, column)) for column in texts) <= 1 or max(max(map(len, column)) for column in texts) >= _LARGE:
        raise _Unsafe
    if min(lengths) <= 1 or max(lengths) >= _LARGE:
        raise _Unsafe
    sizes = {*map(len, batch.timestamps), *map(len, batch.urls), *lengths}
    if any(batch.bodies):
        shown = [b for b in batch.bodies if b is not None]
        if min(map(len, shown)) <= 1 or max(map(len, shown)) >= _LARGE:
            raise _Unsafe
        sizes.update(map(len, shown))
    head = {n: _head(n) for n in sizes}
    method = {m: head.get(len(m)) or _head(len(m)) for m in set(batch.methods)}
    method = {m: h + m + "\x94" for m, h in method.items()}
    body = ["N" if b is None else head[len(b)] + b + "\x94" for b in batch.bodies] if any(batch.bodies) else None
    text = data.decode("ascii")
    ints = _int_texts(batch.offsets)
    rows = [f"({head[len(t)]}{t}\x94{o}{head[len(u)]}{u}\x94{method[m]}N{head[n]}{text[s:s + n]}\x94t\x94"
            for t, o, u, m, s, n in zip(batch.timestamps, ints, batch.urls, batch.methods, starts, lengths,
                                        strict=True)] if body is None else \
        [f"({head[len(t)]}{t}\x94{o}{head[len(u)]}{u}\x94{method[m]}{b}{head[n]}{text[s:s + n]}\x94t\x94"
         for t, o, u, m, b, s, n in zip(batch.timestamps, ints, batch.urls, batch.methods, body, starts, lengths,
                                        strict=True)]
    return "".join(rows).encode("latin-1"), list(map(len, rows))


def _head(n: int) -> str:
    """The opcode and length of a string of ``n`` bytes (SHORT_BINUNICODE or BINUNICODE), as Latin-1 text."""
    return (_SHORT[n] if n < 256 else b"X" + n.to_bytes(4, "little")).decode("latin-1")


def _int_texts(offsets: list[int]) -> list[str]:
    """:func:`_int` of each of ``offsets``, as Latin-1 text: BININT, four bytes, made for every row at
    once by numpy; the few outside its range (under 65536, or past 31 bits) one by one."""
    import numpy as np

    try:
        values = np.array(offsets, dtype=np.int64)
    except OverflowError:
        return [_int(o).decode("latin-1") for o in offsets]
    ops = np.empty((len(values), 5), dtype=np.uint8)
    ops[:, 0] = ord("J")
    ops[:, 1:] = values.astype("<i4").view(np.uint8).reshape(-1, 4)
    text = ops.tobytes().decode("latin-1")
    out = [text[i:i + 5] for i in range(0, len(text), 5)]
    for i in np.flatnonzero((values < 65536) | (values >= 2**31)).tolist():
        out[i] = _int(offsets[i]).decode("latin-1")
    return out


class _Frames:
    """Pickle's framing (protocol 4 and up) of what is written: the bytes gathered into a frame until,
    when pickle starts to save an object (each row, each of its values), the frame holds
    :data:`FRAME_TARGET` bytes or more; then its FRAME header (opcode, 8-byte length) and the bytes
    go out. A frame of fewer than 4 bytes (only the last can be) is written without a header, as
    pickle does."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.held: list[bytes | memoryview] = []
        self.size = 0

    def plain(self, data: bytes) -> None:
        """Bytes written between saves (MARK, APPENDS, STOP): no frame ends before them."""
        self.held.append(data)
        self.size += len(data)

    def rows(self, data: memoryview, starts: np.ndarray) -> None:
        """Whole rows, one after the other (``starts``: where each starts in ``data``, ascending, from 0)."""
        import numpy as np

        at = 0
        stop = len(data)
        while True:
            want = at + FRAME_TARGET - self.size  # a frame ends at the first save's start from here
            if want >= stop:
                break
            j = int(np.searchsorted(starts, want, side="left"))  # the first row starting there or later
            cut = int(starts[j]) if j < len(starts) else None
            if j:  # or a save within the row before it
                begin = int(starts[j - 1])
                end = cut if cut is not None else stop
                cut = next((begin + p for p in _save_starts(data[begin:end]) if begin + p >= want), cut)
            if cut is None:
                break
            self.held.append(data[at:cut])
            self.size += cut - at
            self.commit()
            at = cut
        if at < stop:
            self.held.append(data[at:stop])
            self.size += stop - at

    def commit(self) -> None:
        """Write the frame gathered (a save started past the target, or the end of the pickle)."""
        if self.size >= 4:
            self.out.write(b"\x95" + self.size.to_bytes(8, "little"))
        self.out.write(b"".join(self.held))
        self.held.clear()
        self.size = 0


class CompactRows:
    """:func:`~.index_cache.index_rows`' cache file of an index, as a :class:`~.first_open.RowKeys`
    table: fed the rows of the read that builds the map, written once their recorded order is known.
    :attr:`done` says whether it was written (see the module docstring for when it is not)."""

    def __init__(self, index: Path, target: Path, folder: Path) -> None:
        self.index, self.target, self.folder = Path(index), Path(target), Path(folder)
        self.done = False
        self.count = 0  # rows fed
        self._ok = True
        self._source = self.index.open("rb")
        self._spill: BinaryIO | None = tempfile.TemporaryFile(dir=self.folder, prefix="rows-")
        self._at = 0
        self._starts, self._lengths = array("q"), array("q")

    def add_batch(self, batch: Batch) -> None:
        import numpy as np

        self.count += len(batch.urls)
        if not self._ok or not batch.urls:
            return
        assert batch.starts is not None and batch.lengths is not None and self._spill is not None
        first = int(batch.starts[0])
        data = self._read(first, int(batch.starts[-1] + batch.lengths[-1]) - first)
        if _BLANK_BODY in data:
            self._ok = False  # an empty request body: the scan gives None for it, the parsed row ""
            return
        starts = (batch.starts - first).tolist()
        lengths = batch.lengths.tolist()
        try:
            made = _ascii_rows(batch, data, starts, lengths) if batch.plain and data.isascii() else None
            if made is None:
                with memoryview(data) as view:
                    rows = [row_bytes(ts, off, url, method, body, view[s:s + n]) for ts, off, url, method, body, s, n in
                            zip(batch.timestamps, batch.offsets, batch.urls, batch.methods, batch.bodies, starts,
                                lengths, strict=True)]
                made = b"".join(rows), list(map(len, rows))
        except _Unsafe:
            self._ok = False
            return
        joined, sizes = made
        ends = np.cumsum(np.array(sizes, dtype=np.int64)) + self._at
        self._starts.frombytes((ends - np.array(sizes, dtype=np.int64)).tobytes())
        self._lengths.extend(sizes)
        self._at = int(ends[-1])
        self._spill.write(joined)

    def _read(self, at: int, size: int) -> bytes:
        self._source.seek(at)
        data = self._source.read(size)
        if len(data) != size:
            raise ArchiveError(f"{self.index}: the index changed while it was read; build it again")
        return data

    def finish(self, imap: IndexMap, rank: np.ndarray) -> None:
        """Write the cache file: the rows in recorded order (``rank[i]``: the place of the ``i``-th row fed)."""
        import numpy as np

        if not self._ok or self._spill is None:
            return
        count = self.count
        if len(self._lengths) != count or count != imap.count or count != len(rank):
            raise ArchiveError(f"{self.target}: {count} rows for {imap.count} captures")
        order = np.empty(count, dtype=np.int64)
        order[rank] = np.arange(count, dtype=np.int64)
        lengths = np.frombuffer(self._lengths, dtype=np.int64)[order]
        self._spill.flush()
        try:
            with atomic_writer(self.target) as out:
                out.write(_PROTO)
                frames = _Frames(out)
                frames.plain(b"]\x94")  # EMPTY_LIST, MEMOIZE
                pieces = _lines_in_order(self._spill.fileno(), self._starts, self._lengths, order, self.folder)
                for at, data, ends in _stripped(pieces, lengths):
                    _write_rows(frames, at, data, ends, count)
                frames.plain(b".")  # STOP
                frames.commit()
        except OSError as e:
            raise ArchiveError(f"{self.target}: cannot write the index cache ({e.strerror})") from None
        self.done = True

    def close(self) -> None:
        self._source.close()
        if self._spill is not None:
            self._spill.close()
            self._spill = None


def _stripped(pieces: Iterator[bytes], lengths: np.ndarray) -> Iterator[tuple[int, memoryview, np.ndarray]]:
    """The rows of :func:`~.index_map._lines_in_order`'s pieces (each row after its 4-byte position)
    as ``(first row's place, the rows' bytes, where each row ends in them)``."""
    import numpy as np

    at = 0
    for piece in pieces:
        view = memoryview(piece)
        lasts = np.cumsum(lengths[at:at + len(view) // (_MIN_ROW + 4) + 1] + 4)
        k = int(np.searchsorted(lasts, len(view), side="left")) + 1
        ends = lasts[:k]
        if int(ends[-1]) != len(view):
            raise ArchiveError("the rows read back do not have the lengths written")
        starts = ends - lengths[at:at + k]
        data = memoryview(b"".join([view[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]))
        view.release()
        yield at, data, np.cumsum(lengths[at:at + k])
        at += k


def _write_rows(frames: _Frames, at: int, data: memoryview, ends: np.ndarray, count: int) -> None:
    """Rows ``at`` to ``at + len(ends)`` of the list into ``frames``, with the MARK before each batch
    of :data:`_BATCH` and the APPENDS after it (as pickle writes a list of two items or more; one item
    is followed by APPEND)."""
    import numpy as np

    if count == 1:  # one item: no MARK, and APPEND
        frames.rows(data, np.zeros(1, dtype=np.int64))
        frames.plain(b"a")
        return
    done = 0
    while done < len(ends):
        place = at + done
        if place % _BATCH == 0:
            frames.plain(b"(")  # MARK
        take = min(len(ends) - done, _BATCH - place % _BATCH)
        base = int(ends[done - 1]) if done else 0
        part = ends[done:done + take] - base
        frames.rows(data[base:int(part[-1]) + base], np.concatenate(([0], part[:-1])))
        done += take
        if (place + take) % _BATCH == 0 or place + take == count:
            frames.plain(b"e")  # APPENDS
