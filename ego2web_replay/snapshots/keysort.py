"""Sorting a million byte keys without a million Python objects: keys in one buffer, ordered by numpy.

The tables of a :mod:`~.sortedfile` are sorted by key bytes, then by value. Sorting a list of
``(key, value)`` tuples costs two objects per key and, beyond memory, sorted runs merged in Python;
a :class:`KeyColumn` instead appends each key to one buffer (a temporary file once it grows past
:data:`KeyColumn.SPILL_BYTES`), every key padded with zeros to a multiple of 8 bytes, and
:meth:`KeyColumn.argsort` orders them with numpy: a stable least-significant-first sort over the
keys' first :data:`WIDTH` bytes read as big-endian 64-bit words (a word that is the same for every
key is skipped), after a stable sort by length and by value. A zero-padded word cannot tell ``ab``
from ``ab\\0``; the length sort puts the shorter first, as byte order does. Keys longer than
:data:`WIDTH` bytes that share their first :data:`WIDTH` bytes with another such key are put in
order by comparing their bytes in Python (rare: most keys are URLs shorter than that).

Two cheaper ways come first, each giving that very order: keys that already rise in the order of
their values (a recording's times against its offsets) or in the order they were added (an index's
keys, added in the index's order) are found so by a check a word at a time, and kept so; keys whose first
telling word differs between nearly any two (random digests: a million sha1 digests share a first
word now and then) are sorted by that word, the few that share it compared whole in Python.

:func:`sorted_chunks` gives the keys' bytes (unpadded) in a given order, a few thousand at a time,
for :func:`~.sortedfile.write_sorted_columns`.
"""

from __future__ import annotations

import tempfile
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

__all__ = ["KeyColumn", "WIDTH", "sorted_chunks", "ranks"]

WIDTH = 128  # bytes compared by numpy; longer keys with an equal start are compared in Python
_ZEROS = bytes(8)
_CHUNK = 2048  # keys gathered at a time when their bytes are written out
_FEW_TIES = 4096  # keys sharing their first telling word that are ordered in Python anyway
_TIE_SHARE = 256  # ... or one key in this many
_PROBE = 4096  # keys looked at first, to tell keys in no order quickly


class KeyColumn:
    """Byte keys appended one at a time (the ``i``-th added is key ``i``), then sorted at once.

    ``folder``: where the keys go once they pass :data:`SPILL_BYTES` (a temporary file, removed
    by :meth:`close`); without one they stay in memory.
    """

    SPILL_BYTES = 4 << 20

    def __init__(self, folder: Path | None = None) -> None:
        self._buf = bytearray()
        self._folder = folder
        self._spill: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._lengths = array("I")
        self._data: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, key: bytes) -> None:
        n = len(key)
        self._lengths.append(n)
        self._buf += key
        if n & 7:
            self._buf += _ZEROS[n & 7:]
        if self._folder is not None and len(self._buf) >= self.SPILL_BYTES:
            self._flush()

    def extend(self, keys: list[bytes]) -> None:
        """:meth:`add` of each of ``keys`` in turn."""
        self.extend_joined(b"".join(keys), np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)))

    def extend_joined(self, joined: bytes, lengths: np.ndarray) -> None:
        """:meth:`add` of each key in turn, given as the keys' bytes one after the other and the
        length of each; the padding done by numpy at once."""
        if not len(lengths):
            return
        lengths = lengths.astype(np.int64, copy=False)
        total = int(lengths.sum())
        if total != len(joined):
            raise ValueError(f"{len(joined)} bytes of keys, the lengths say {total}")
        padded = (lengths + 7) & ~7
        widest = int(padded.max())
        size = int(lengths[0])
        if size * len(lengths) == total and int(lengths.max()) == size:  # one length (timestamps, digests)
            if size == widest:
                self._add_padded(joined, lengths)
                return
            rows = np.zeros((len(lengths), widest), dtype=np.uint8)
            rows[:, :size] = np.frombuffer(joined, dtype=np.uint8).reshape(len(lengths), size)
            self._add_padded(rows.tobytes(), lengths)
            return
        if widest * len(lengths) <= 2 * int(padded.sum()) + 64:  # lengths alike: one row of bytes per key
            columns = np.arange(widest, dtype=np.int64)
            rows = np.zeros((len(lengths), widest), dtype=np.uint8)
            rows[columns < lengths[:, None]] = np.frombuffer(joined, dtype=np.uint8)
            block = rows[columns < padded[:, None]]
        else:
            at = np.cumsum(padded) - padded  # where each key starts in the padded block
            block = np.zeros(int(padded.sum()), dtype=np.uint8)
            if total:
                ends = np.cumsum(lengths)
                block[np.repeat(at - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)] = \
                    np.frombuffer(joined, dtype=np.uint8)
        self._add_padded(block.tobytes(), lengths)

    def _add_padded(self, block: bytes, lengths: np.ndarray) -> None:
        """Add keys of ``lengths`` given padded, one after the other, in ``block``."""
        self._lengths.frombytes(lengths.astype(np.uint32).tobytes())
        self._buf += block
        if self._folder is not None and len(self._buf) >= self.SPILL_BYTES:
            self._flush()

    def extend_text(self, texts: list[str], before: str = "", after: str = "") -> None:
        """:meth:`add` of ``before + text + after`` of each of ``texts`` (UTF-8, lone surrogates kept):
        one join and one encode when they are ASCII."""
        joined = (before + (after + before).join(texts) + after if texts else "").encode("utf-8", "surrogatepass")
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + len(before) + len(after)
        if len(joined) != int(lengths.sum()):  # not all ASCII: a length per key
            self.extend([(before + t + after).encode("utf-8", "surrogatepass") for t in texts])
        else:
            self.extend_joined(joined, lengths)

    def _flush(self) -> None:
        if self._spill is None:
            assert self._folder is not None
            self._folder.mkdir(parents=True, exist_ok=True)
            self._spill = tempfile.NamedTemporaryFile(dir=self._folder, prefix="keys-", suffix=".tmp")
        self._spill.write(self._buf)
        self._buf = bytearray()

    def data(self) -> np.ndarray:
        """Every key's padded bytes, as one array of bytes (read back from the spill file, until
        :meth:`release`)."""
        if self._data is None:
            if self._spill is None:
                self._data = np.frombuffer(self._buf, dtype=np.uint8)
            else:
                if self._buf:
                    self._flush()
                self._spill.flush()
                self._data = np.fromfile(self._spill.name, dtype=np.uint8)
        return self._data

    def release(self) -> None:
        """Let go of the keys read back from the spill file (read again when next needed)."""
        if self._spill is not None:
            self._data = None

    def starts(self) -> np.ndarray:
        """The byte offset of each key in :meth:`data` (each key padded to a multiple of 8 bytes)."""
        padded = (self.lengths().astype(np.int64) + 7) & ~7
        return np.cumsum(padded) - padded

    def lengths(self) -> np.ndarray:
        return np.frombuffer(self._lengths, dtype=np.uint32)

    def key(self, i: int, starts: np.ndarray | None = None) -> bytes:
        """Key ``i`` (``starts``: :meth:`starts`, when the caller has them)."""
        start = int((self.starts() if starts is None else starts)[i])
        return self.data()[start:start + self._lengths[i]].tobytes()

    def argsort(self, values: np.ndarray | None = None) -> np.ndarray:
        """The keys' indexes ordered by (key bytes, ``values[i]``, ``i``); ``values`` default to ``i``."""
        n = len(self)
        lengths = self.lengths()
        if not n:
            return np.arange(n, dtype=np.int64) if values is None else np.argsort(values, kind="stable").astype(np.int64)
        words = self.data().view(">u8")
        try:
            return self._argsort(words, self.starts() >> 3, lengths, values)
        finally:
            del words
            self.release()

    def _argsort(self, words: np.ndarray, first: np.ndarray, lengths: np.ndarray,
                 values: np.ndarray | None) -> np.ndarray:
        n = len(lengths)
        longest = int(lengths.max())
        alike = _alike(words, first, lengths, longest)
        order = np.arange(n, dtype=np.int64) if values is None else _value_order(values)
        if longest <= WIDTH:  # already in order, by value (a recording's times) or as added (an index's keys)?
            if _rising(words, first, lengths, order, alike) is not None:
                return order
            if values is not None:
                same = np.arange(n, dtype=np.int64)
                ties = _rising(words, first, lengths, same, alike)
                if ties is not None and bool((values[:-1][ties] <= values[1:][ties]).all()):
                    return same
        starts = first * 8
        settled = _told_apart(words, first, lengths, alike, lambda run: self._by_key(run, values, starts))
        if settled is not None:
            return settled
        order = order[np.argsort(lengths[order], kind="stable")]
        for c in range((min(longest, WIDTH) + 7) // 8 - 1, alike - 1, -1):
            col = _column(words, first, lengths, order, c)
            if (col == col[0]).all():
                continue
            order = order[np.argsort(col, kind="stable")]
        if longest > WIDTH:
            self._order_long(order, words, first, lengths)
        return order

    def _by_key(self, run: np.ndarray, values: np.ndarray | None, starts: np.ndarray) -> list[int]:
        """The indexes ``run`` in (key bytes, value, index) order, compared in Python (``starts``:
        :meth:`starts`)."""
        if values is None:
            return sorted(run.tolist(), key=lambda i: (self.key(i, starts), i))
        return sorted(run.tolist(), key=lambda i: (self.key(i, starts), values[i].item(), i))

    def _order_long(self, order: np.ndarray, words: np.ndarray, first: np.ndarray, lengths: np.ndarray) -> None:
        """Put in byte order, in place, each run of ``order`` whose keys share their first
        :data:`WIDTH` bytes and two or more of which are longer."""
        same = np.ones(len(order) - 1, dtype=bool)
        for c in range(WIDTH // 8):
            col = _column(words, first, lengths, order, c)
            same &= col[1:] == col[:-1]
        long = lengths[order] > WIDTH
        same &= long[1:] & long[:-1]
        edges = np.flatnonzero(np.diff(np.concatenate(([0], same.view(np.int8), [0]))))
        starts = first * 8
        for begin, end in zip(edges[::2], edges[1::2], strict=True):
            run = order[begin:end + 1]
            order[begin:end + 1] = sorted(run.tolist(), key=lambda i: self.key(i, starts))  # stable: value order kept

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._buf = bytearray()
        self._data = None
        self._lengths = array("I")


def _alike(words: np.ndarray, first: np.ndarray, lengths: np.ndarray, longest: int) -> int:
    """How many leading words (of those compared, :data:`WIDTH` bytes) are the same for every key."""
    words_compared = (min(longest, WIDTH) + 7) // 8
    for c in range(words_compared):
        col = _word(words, first, lengths, c)
        if not (col == col[0]).all():
            return c
    return words_compared


def _told_apart(words: np.ndarray, first: np.ndarray, lengths: np.ndarray, c: int,
                settle: Callable[[np.ndarray], list[int]]) -> np.ndarray | None:
    """The keys in (key bytes, value, index) order when their first word that is not the same for
    every key (the ``c``-th) differs between nearly any two of them (random digests, say): one
    sort of that word orders them all, but for the few that share it (a run of keys at most
    :data:`_FEW_TIES` in all, or one in :data:`_TIE_SHARE`), which ``settle`` puts in order. None
    when more share it (then every word from it on is sorted), or every word is the same."""
    if c >= (min(int(lengths.max()), WIDTH) + 7) // 8:
        return None
    col = _column(words, first, lengths, np.arange(len(lengths), dtype=np.int64), c)
    order = np.argsort(col).astype(np.int64)
    ranked = col[order]
    same = ranked[1:] == ranked[:-1]
    tied = int(np.count_nonzero(same))
    if tied > max(_FEW_TIES, len(lengths) // _TIE_SHARE):
        return None
    if tied:
        edges = np.flatnonzero(np.diff(np.concatenate(([0], same.view(np.int8), [0]))))
        for begin, end in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            order[begin:end + 1] = settle(order[begin:end + 1])
    return order


def _rising(words: np.ndarray, first: np.ndarray, lengths: np.ndarray, order: np.ndarray,
            alike: int) -> np.ndarray | None:
    """Whether the keys (none longer than :data:`WIDTH`; their first ``alike`` words the same for
    every key) never fall along ``order``, in byte order: None when one does, else where two in
    turn are equal (``ties[j]``: the keys ``order[j]`` and ``order[j + 1]``). The first few
    thousand are looked at first: keys in no such order fall there already."""
    if len(order) > 2 * _PROBE and _rising(words, first, lengths, order[:_PROBE], alike) is None:
        return None
    at, ordered = first[order], lengths[order]
    undecided = np.ones(max(len(order) - 1, 0), dtype=bool)
    for c in range(alike, (int(lengths.max()) + 7) // 8):
        col = _word(words, at, ordered, c)
        before, after = col[:-1], col[1:]
        if (undecided & (before > after)).any():
            return None
        undecided &= before == after
        if not undecided.any():
            return undecided
    # equal words: the shorter key first (a zero-padded word hides trailing NULs)
    if (undecided & (ordered[:-1] > ordered[1:])).any():
        return None
    return undecided & (ordered[:-1] == ordered[1:])


def _value_order(values: np.ndarray) -> np.ndarray:
    """The indexes of ``values`` in the order of their values, ties in index order: the inverse
    permutation when the values are one of 0..n-1 (a rank, as the tables' values often are), else
    a stable sort."""
    n = len(values)
    if values.dtype.kind in "iu" and int(values.min()) >= 0 and int(values.max()) < n:
        inverse = np.zeros(n, dtype=np.int64)
        inverse[values] = np.arange(n, dtype=np.int64)
        if (values[inverse] == np.arange(n)).all():  # each of 0..n-1 met: no value twice
            return inverse
    return np.argsort(values, kind="stable").astype(np.int64)


def _word(words: np.ndarray, first: np.ndarray, lengths: np.ndarray, c: int) -> np.ndarray:
    """The ``c``-th 8-byte word of the keys starting at word ``first`` (0 past a key's ``lengths``),
    as native integers."""
    at = first + c
    np.minimum(at, len(words) - 1, out=at)
    col = words[at].astype(np.uint64)
    col[lengths <= 8 * c] = 0
    return col


def _column(words: np.ndarray, first: np.ndarray, lengths: np.ndarray, order: np.ndarray, c: int) -> np.ndarray:
    """The ``c``-th 8-byte word of each key in ``order`` (0 past a key's end), as native integers."""
    at = first[order] + c
    np.minimum(at, len(words) - 1, out=at)
    col = words[at].astype(np.uint64)
    col[lengths[order] <= 8 * c] = 0
    return col


def ranks(order: np.ndarray) -> np.ndarray:
    """``rank[i]``: where item ``i`` stands in ``order`` (the inverse permutation)."""
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank


def sorted_chunks(column: KeyColumn, order: np.ndarray) -> Iterator[bytes]:
    """The unpadded bytes of ``column``'s keys in ``order``, concatenated, a few thousand keys a piece."""
    data = column.data()
    starts, lengths = column.starts(), column.lengths().astype(np.int64)
    words = data[:len(data) & ~7].view(np.uint64)  # every key starts on a word
    for at in range(0, len(order), _CHUNK):
        part = order[at:at + _CHUNK]
        yield gather_words(words, starts[part] >> 3, lengths[part]) or gather(data, starts[part], lengths[part])
    del data, words
    column.release()


def gather_words(words: np.ndarray, first: np.ndarray, lengths: np.ndarray) -> bytes | None:
    """:func:`gather` of keys that start on a word of ``words`` (``first``: that word), taking a
    row of whole words per key; None (nothing gathered) when a few keys are much longer than the
    rest, or there are none."""
    if not len(lengths):
        return None
    span = (lengths + 7) >> 3  # words per key
    widest = int(span.max())
    if widest * len(lengths) > 2 * int(span.sum()) + 8:
        return None
    at = first[:, None] + np.arange(widest, dtype=np.int64)
    np.minimum(at, len(words) - 1, out=at)  # past the last key: read, then left out below
    rows = words[at].view(np.uint8).reshape(len(lengths), 8 * widest)
    return rows[np.arange(8 * widest) < lengths[:, None]].tobytes()


def gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """``data[starts[0]:starts[0]+lengths[0]] + data[starts[1]:...] + ...`` as bytes."""
    total = int(lengths.sum())
    if not total:
        return b""
    ends = np.cumsum(lengths)
    index = np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)
    return data[index].tobytes()
