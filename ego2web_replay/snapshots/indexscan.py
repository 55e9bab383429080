"""One read of a CDXJ index for everything a first open builds from it.

A snapshot opened without its caches needs three things from its index: the names learned volatile
(:mod:`.learned_cache`), the mapped index (:mod:`.index_map`) and, in the layer above, the canonical
match keys. Read phase by phase, that was three parses of every line; :func:`scan_index` reads the
file once, a block at a time, and gives each block's servable rows as columns (a :class:`Batch`)
that every builder takes its part of.

A line as :meth:`~ego2web_replay.models.index.IndexEntry.to_line` writes it without escapes (nearly
every line) is read by one regular-expression match (:data:`_FAST`, stricter than the line readers'
own, so whatever it accepts they would read alike; on a block without backslashes or control
characters, by the same expression with a looser class of value characters, which then matches
alike and faster: :data:`_LOOSE_LINES`); any other line by the line readers themselves
(:func:`~ego2web_replay.models.index.index_row`, :func:`~ego2web_replay.models.index.learn_row`,
:func:`~.index_map.original_digest`), so every value is the one they give. Where they would not
agree on a line (the learner skips a header or a line of blanks that the map refuses; a line
either refuses), or where the file is not UTF-8 or breaks lines other than by ``\\n`` (the readers
split those differently), :class:`IrregularIndex` is raised: the caller then builds phase by phase
with the line readers, as before, which gives the same files and the same errors.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import contains
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ArchiveError
from ..models.index import IndexEntry, index_row, learn_row, plain_line

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Batch", "IrregularIndex", "scan_index", "original_digest", "collector_paused", "BLOCK_BYTES"]

BLOCK_BYTES = 1 << 20
SERVABLE = ("response", "revisit", "resource")  # as index_cache.SERVABLE (not imported: index_cache imports us)
_TEACHING = ("response", "revisit")

_FAST = plain_line("([0-9]+)", "(?:[0-9]*|-)", "[0-9]+", r'([^"\\\x00-\x1f]+)')
"""A line in the writer's form that every line reader reads alike: the timestamp all ASCII digits,
length and status numbers, a method named when present (the readers differ on an empty one)."""
_FAST_LINES = re.compile(f"^(?:{_FAST.pattern})$", re.MULTILINE)
""":data:`_FAST` at each line of a block: as many matches as lines when every line is in the plain
form (a match cannot take in two lines then: each starts a line, and one running past its line's
end would leave the next line none), with the groups of each line's full match."""
_LOOSE_LINES = re.compile(_FAST_LINES.pattern.replace(r'[^"\\\x00-\x1f]', '[^"]'), re.MULTILINE)
""":data:`_FAST_LINES` with its values' class ``[^"\\\x00-\x1f]`` cut to ``[^"]`` (matched far faster: a
search for the next quote): the same matches on a block holding no backslash and no control
character but its line breaks (then a value cannot take in a line break but by running past its
line's end, which leaves fewer matches than lines, as above)."""
_ASCII_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e"  # the line breaks of str.splitlines but \n, all below 32
_WIDE_BREAKS = "\x85\u2028\u2029"  # and those beyond ASCII
_DIGEST = '"digest": "'
_REVISIT = '"mime": "warc/revisit"'


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


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while building from an index: a block's rows are tens of
    thousands of match objects and tuples, and collections triggered by allocating them would walk
    them again and again (a third of a build's time); none of them is in a cycle, so reference
    counting frees them all the same."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class IrregularIndex(Exception):  # noqa: N818 - a signal to the caller, not an error shown to anyone
    """The index has a line that the line readers treat differently (see the module docstring)."""


@dataclass
class Batch:
    """The servable rows of one block of the index, in file order, as columns."""

    timestamps: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    """Upper-cased, as :func:`~ego2web_replay.models.index.index_row` gives them."""
    bodies: list[str | None] = field(default_factory=list)
    digests: list[str | None] = field(default_factory=list)
    """:func:`~.index_map.original_digest` of each line (None for a revisit)."""
    starts: np.ndarray | None = None
    """Where each line starts in the file (bytes, int64)."""
    lengths: np.ndarray | None = None
    """Each line's length in bytes, without its line break (int64)."""
    numbers: Sequence[int] = field(default_factory=list)
    """The line number of each row, as the line readers number them (from 1)."""
    teaching: Sequence[int] = field(default_factory=list)
    """The rows (indexes into the columns) of the captures that can teach the learner (a response
    or revisit with a query or a body): a row's path group is ``path_group(method, url)``."""
    plain: bool = True
    """Every line of the block in the writer's plain form (no value needs escaping in a key)."""


def scan_index(index: Path) -> Iterator[Batch]:
    """The servable rows of the CDXJ file ``index``, a block of lines at a time (see the module
    docstring); :class:`IrregularIndex` for a file the line readers must read, ArchiveError when
    it cannot be read."""
    number = 0  # lines before this block, numbered as the line readers number them
    at = 0  # the block's first byte in the file
    rest = b""
    try:
        with Path(index).open("rb") as fh:
            while True:
                data = fh.read(BLOCK_BYTES)
                block = rest + data
                if not block:
                    return
                cut = block.rfind(b"\n") + 1 if data else len(block)
                if not cut:  # one line longer than a block: read on
                    rest = block
                    continue
                view, rest = memoryview(block)[:cut], block[cut:]
                try:
                    text = str(view, "utf-8")
                except UnicodeDecodeError:
                    raise IrregularIndex from None
                breaks, clean = _breaks(view, text)
                count = len(breaks) + (not text.endswith("\n"))  # lines, as text.split numbers them
                yield _batch(text, clean, *_places(breaks, cut, at, count), number, count)
                number += count
                at += cut
    except FileNotFoundError:
        raise ArchiveError(f"{index}: index not found; build it with `ego2web-replay snapshot index`") from None
    except OSError as e:
        raise ArchiveError(f"{index}: cannot read the index ({e})") from None


def _breaks(view: memoryview, text: str) -> tuple[np.ndarray, bool]:
    """Where the line breaks of a block are (``view``: its bytes, ``text``: decoded), and whether it
    holds no backslash and no control character but them (see :data:`_LOOSE_LINES`);
    :class:`IrregularIndex` when it breaks lines in another way too (as ``str.splitlines`` does)."""
    import numpy as np

    data = np.frombuffer(view, dtype=np.uint8)
    breaks = np.flatnonzero(data == 10)
    controls = int(np.count_nonzero(data < 32))  # (no byte of a character beyond ASCII is below 32)
    if controls != len(breaks) and any(c in text for c in _ASCII_BREAKS):
        raise IrregularIndex
    if len(text) != len(data) and any(c in text for c in _WIDE_BREAKS):
        raise IrregularIndex
    return breaks, controls == len(breaks) and "\\" not in text


def _places(breaks: np.ndarray, size: int, at: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each of the ``count`` lines of a block of ``size`` bytes (line breaks at ``breaks``)
    starts in the file (``at``: the block's start) and its length in bytes, without its line break."""
    import numpy as np

    ends = np.empty(count, dtype=np.int64)
    ends[:len(breaks)] = breaks[:count]
    if len(breaks) < count:
        ends[-1] = size  # the last line of the file, without a line break
    starts = np.empty(count, dtype=np.int64)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    return starts + at, ends - starts


def _batch(text: str, clean: bool, starts: np.ndarray, lengths: np.ndarray, number: int, count: int) -> Batch:
    """The batch of the ``count`` lines of ``text``: read by one search of the block when each of
    them is in the plain form (``clean``: by :data:`_LOOSE_LINES`), else line by line."""
    rows = (_LOOSE_LINES if clean else _FAST_LINES).findall(text)
    if len(rows) == count:
        return _plain_batch(rows, starts, lengths, number)
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return _mixed_batch(lines, list(map(_FAST.fullmatch, lines)), starts, lengths, number)


def _plain_batch(rows: list[tuple[str, ...]], starts: np.ndarray, lengths: np.ndarray, number: int) -> Batch:
    """Every line in the plain form (``rows``: the groups of :data:`_FAST` of each line, an empty
    string for a group that did not take part): the columns built a column at a time."""
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
    timestamps, urls, mimes, digests, offsets, methods, bodies, rtypes = columns or [()] * 8
    bodies = [b or None for b in bodies] if any(bodies) else [None] * len(bodies)  # an empty one as none
    numbers: range | list[int] = range(number + 1, number + 1 + len(rows))
    if not any(rtypes) and "warc/revisit" not in mimes:  # responses only (the common case)
        originals = list(digests) if "" not in digests else [d or None for d in digests]
        teaching = None
    else:
        kinds = [t or ("revisit" if m == "warc/revisit" else "response") for t, m in zip(rtypes, mimes, strict=True)]
        keep = [k in SERVABLE for k in kinds]
        if not all(keep):
            def pick(column: Sequence[Any]) -> list[Any]:
                return list(compress(column, keep))

            numbers, kinds = pick(numbers), pick(kinds)
            timestamps, urls, digests, offsets, methods, bodies = map(pick, (timestamps, urls, digests, offsets,
                                                                            methods, bodies))
            starts, lengths = starts[keep], lengths[keep]
        originals = [d if d and k != "revisit" else None for d, k in zip(digests, kinds, strict=True)]
        teaching = [k in _TEACHING for k in kinds]
    upper = ["GET"] * len(urls) if not any(methods) else [(m or "GET").upper() for m in methods]
    asks = list(map(contains, urls, repeat("?")))
    if any(bodies):
        asks = [a or bool(b) for a, b in zip(asks, bodies, strict=True)]
    if teaching is not None:
        asks = [a and t for a, t in zip(asks, teaching, strict=True)]
    return Batch(list(timestamps), list(map(int, offsets)), list(urls), upper, list(bodies), originals, starts,
                 lengths, numbers=numbers, teaching=range(len(urls)) if all(asks) else list(compress(range(len(asks)), asks)))


def _mixed_batch(lines: list[str], matches: list[re.Match[str] | None], starts: np.ndarray, lengths: np.ndarray,
                 number: int) -> Batch:
    """A block with lines not in the plain form: each line on its own, the odd ones by the line readers."""
    batch = Batch()
    teaching: list[int] = []
    batch.teaching = teaching
    kept = []
    for i, (line, m) in enumerate(zip(lines, matches, strict=True)):
        if m is not None:
            ts, url, mime, digest, offset, method, body, rtype = m.groups()
            kind = rtype or ("revisit" if mime == "warc/revisit" else "response")
            method = (method or "GET").upper()
            original = digest if digest and kind != "revisit" else None
            off = int(offset)
        elif not line:
            continue  # a blank line: skipped by every reader
        elif not line.strip() or line.startswith("!"):
            raise IrregularIndex  # the learner skips it, the map refuses it
        else:
            try:
                kind, (ts, off, url, method, body, _line) = index_row(line)
                lkind, lmethod, lurl, lbody, _digest = learn_row(line)
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                raise IrregularIndex from None
            if (lkind, lmethod.upper(), lurl, lbody) != (kind, method, url, body):
                raise IrregularIndex
            batch.plain = False  # values from JSON: may hold any character
            original = original_digest(line) if kind in SERVABLE else None
        if kind not in SERVABLE:
            continue
        batch.timestamps.append(ts)
        batch.offsets.append(off)
        batch.urls.append(url)
        batch.methods.append(method)
        batch.bodies.append(body)
        batch.digests.append(original)
        kept.append(i)
        if kind in _TEACHING and ("?" in url or body):
            teaching.append(len(batch.urls) - 1)
    batch.starts, batch.lengths = starts[kept], lengths[kept]
    batch.numbers = [number + 1 + i for i in kept]
    return batch
