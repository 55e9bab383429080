"""Byte ranges in replay: what was recorded of a URL's bytes, and answers cut only from those bytes.

A URL's captures hold its bytes whole (a ``200``) or in part (a ``206``: one range, or several as
``multipart/byteranges``). :func:`build_map` groups them by representation (the same strong ETag,
else Last-Modified, total size and content coding: bytes of two versions of a file never mix) and
keeps, for each, where every recorded byte lies: the :class:`Representation`'s segments (offsets
into the captures' bodies, not the bytes themselves). :func:`answer_range` answers a ``Range``
request from that map alone:

* a range (or several) lying inside the recorded bytes of one representation gets exactly those
  bytes: ``206`` with ``Content-Range`` (several ranges: ``multipart/byteranges``); a request for
  exactly what one recorded ``206`` answered gets that answer as it was recorded;
* a range starting past the end of a representation of known size is a ``416`` (when no other
  representation holds its bytes);
* a body the recorder cut short (``WARC-Truncated``) holds its first bytes only: its size is its
  ``Content-Length``, else unknown, so a range counted from the end of it is a miss;
* anything else is a miss: bytes that were never recorded are never replaced by other bytes;
* ``If-Range`` picks the representation whose validator it names; when it names none (the
  client's copy changed) the request is a whole-body request, as is one whose ``Range`` header
  cannot be read (RFC 9110 §14.2 lets a server ignore it): whole only where a ``200`` was recorded.

Nothing here depends on what was served before: the same request gets the same bytes in any
order, in any page load.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..web import get_header, reason_phrase

__all__ = ["Representation", "RangeAnswer", "build_map", "answer_range", "parse_range", "resolve_ranges",
           "parse_content_range", "split_byteranges"]

Head = Sequence[tuple[str, str]]
Read = Callable[[Any], tuple[int, str, Head, bytes]]  # a capture's ref -> its (status, reason, headers, body)
Span = tuple[int, int]  # first and last byte, inclusive

_SPEC = re.compile(r"\s*(\d*)\s*-\s*(\d*)\s*")
_CONTENT_RANGE = re.compile(r"\s*bytes\s+(\d+)\s*-\s*(\d+)\s*/\s*(\d+|\*)\s*", re.I)
_RESLICED = {"content-length", "content-range", "transfer-encoding"}


def parse_range(header: str) -> list[tuple[int | None, int | None]] | None:
    """The byte-range specs of a ``Range`` header (``(first, last)``; ``(None, n)`` is the suffix
    ``-n``, ``(n, None)`` the open ``n-``), or None when the header is not one replay can honour
    (another unit, a malformed or reversed spec): such a header is ignored (RFC 9110 §14.2)."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes":
        return None
    out: list[tuple[int | None, int | None]] = []
    for part in spec.split(","):
        if not part.strip():
            continue
        m = _SPEC.fullmatch(part)
        if m is None or (not m.group(1) and not m.group(2)):
            return None
        first = int(m.group(1)) if m.group(1) else None
        last = int(m.group(2)) if m.group(2) else None
        if first is not None and last is not None and last < first:
            return None
        out.append((first, last))
    return out or None


def resolve_ranges(specs: Sequence[tuple[int | None, int | None]], size: int | None) -> list[Span] | None:
    """The specs as byte spans of a representation of ``size`` bytes, unsatisfiable ones dropped
    (an empty list: none satisfiable, a ``416``); None when the size is needed but unknown."""
    out: list[Span] = []
    for first, last in specs:
        if first is None:  # suffix: the last `last` bytes
            if size is None:
                return None
            if last:
                out.append((max(size - last, 0), size - 1))
            continue
        if size is None:
            if last is None:
                return None
            out.append((first, last))
        elif first < size:
            out.append((first, size - 1 if last is None else min(last, size - 1)))
    return out


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """``bytes 10-19/100`` as ``(10, 19, 100)`` (total None for ``/*``); None when unreadable."""
    m = _CONTENT_RANGE.fullmatch(value or "")
    if m is None or int(m.group(2)) < int(m.group(1)):
        return None
    return int(m.group(1)), int(m.group(2)), None if m.group(3) == "*" else int(m.group(3))


def _boundary(content_type: str) -> str | None:
    m = re.search(r'boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))', content_type, re.I)
    return (m.group(1) or m.group(2)) if m else None


def split_byteranges(body: bytes, content_type: str) -> list[tuple[int, int, int | None, int, str | None]] | None:
    """The parts of a ``multipart/byteranges`` body: ``(first, last, total, offset, content type)``,
    ``offset`` being where the part's bytes start in ``body``; None when it cannot be read whole."""
    boundary = _boundary(content_type)
    if not boundary:
        return None
    delimiter = b"--" + boundary.encode("latin-1")
    parts: list[tuple[int, int, int | None, int, str | None]] = []
    pos = body.find(delimiter)
    while pos >= 0:
        pos += len(delimiter)
        if body[pos:pos + 2] == b"--":
            return parts or None
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            return None
        ctype, crange = None, None
        for line in body[pos:head_end].decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-range":
                crange = parse_content_range(value)
            elif name.strip().lower() == "content-type":
                ctype = value.strip()
        start = head_end + 4
        if crange is None or len(body) < start + crange[1] - crange[0] + 1:
            return None
        parts.append((crange[0], crange[1], crange[2], start, ctype))
        pos = body.find(delimiter, start + crange[1] - crange[0] + 1)
    return None


@dataclass(slots=True)
class _Segment:
    first: int
    last: int
    ref: Any
    offset: int  # where byte `first` lies in the capture's body


@dataclass(slots=True)
class Representation:
    """The recorded bytes of one version of a URL (see the module docstring)."""

    etag: str | None
    last_modified: str | None
    size: int | None
    coding: str = ""  # its Content-Encoding (lower case; "" for none)
    whole: Any = None  # ref of the first recorded 200 holding it whole, if any
    heads: list[tuple[Any, int, int, Head, str | None]] = field(default_factory=list)
    # (ref, first, last, headers, part type) of each 206 part, recorded order (the 200 as (ref, 0, size-1, ...))
    answers: list[tuple[tuple[Span, ...], Any]] = field(default_factory=list)  # each 206's spans, and its ref
    segments: list[_Segment] = field(default_factory=list)
    singles: list[tuple[Any, int, int, Head, str | None]] = field(default_factory=list)  # heads of one-range 206s
    kept: dict[int, Head] = field(default_factory=dict)  # a recorded head without its length and range, by id
    _starts: list[int] = field(default_factory=list)
    _reach: list[int] = field(default_factory=list)  # index of the segment reaching furthest among [0..i]

    def seal(self) -> None:
        """Sort the segments and index how far they reach (after the last capture is added)."""
        self.segments.sort(key=lambda s: (s.first, -s.last))
        self.singles = [h for h in self.heads if h[4] is None and get_header(h[3], "content-range") is not None]
        self.kept = {id(h[3]): [(k, v) for k, v in h[3] if k.lower() not in _RESLICED] for h in self.heads}
        self._starts = [s.first for s in self.segments]
        best = -1
        self._reach = []
        for i, s in enumerate(self.segments):
            if best < 0 or s.last > self.segments[best].last:
                best = i
            self._reach.append(best)

    def _covering(self, at: int) -> _Segment | None:
        i = bisect.bisect_right(self._starts, at) - 1
        if i < 0:
            return None
        seg = self.segments[self._reach[i]]
        return seg if seg.last >= at else None

    def covers(self, span: Span) -> bool:
        """Whether every byte of ``span`` was recorded."""
        at = span[0]
        while at <= span[1]:
            seg = self._covering(at)
            if seg is None:
                return False
            at = seg.last + 1
        return True

    def cut(self, span: Span, read: Read) -> bytes:
        """The recorded bytes of ``span`` (which :meth:`covers`), read from the captures holding them."""
        pieces, at = [], span[0]
        while at <= span[1]:
            seg = self._covering(at)
            assert seg is not None
            end = min(seg.last, span[1])
            body = read(seg.ref)[3]
            pieces.append(body[seg.offset + at - seg.first: seg.offset + end - seg.first + 1])
            at = end + 1
        return b"".join(pieces)


def _validators(headers: Head) -> tuple[str | None, str | None]:
    etag = get_header(headers, "etag")
    return (etag.strip() if etag else None), (get_header(headers, "last-modified") or "").strip() or None


def _cut_size(headers: Head, kept: int) -> int | None:
    """The size of a body the recorder cut short after ``kept`` bytes: its ``Content-Length`` when that says
    more, else unknown (never the bytes kept: a range counted from the end would get other bytes)."""
    try:
        size = int((get_header(headers, "content-length") or "").strip())
    except ValueError:
        return None
    return size if size > kept else None


def build_map(captures: Iterable[tuple[Any, int, Head, bytes]], cut: Callable[[Any], bool] | None = None,
              ) -> list[Representation]:
    """The byte map of a URL's captures, ``(ref, status, headers, body)`` in recorded order: one
    :class:`Representation` per version, in the order their first capture was recorded. Captures
    that are neither a ``200`` nor a readable ``206`` hold no bytes of the map. ``cut(ref)``: whether a
    capture's body was cut short (``WARC-Truncated``): its ``200`` holds the bytes kept, the first ones,
    not the whole (its size is what its ``Content-Length`` says, else unknown)."""
    reps: dict[tuple[str | None, str | None, int | None, str], Representation] = {}
    for ref, status, headers, body in captures:
        if status == 200:
            size = _cut_size(headers, len(body)) if cut is not None and cut(ref) else len(body)
            parts: list[tuple[int, int, int | None, int, str | None]] = [(0, len(body) - 1, size, 0, None)]
        elif status == 206:
            ctype = get_header(headers, "content-type") or ""
            crange = parse_content_range(get_header(headers, "content-range"))
            if crange is not None:
                parts = [(crange[0], crange[1], crange[2], 0, None)] \
                    if len(body) == crange[1] - crange[0] + 1 else []
            elif ctype.lower().startswith("multipart/byteranges"):
                parts = split_byteranges(body, ctype) or []
            else:
                parts = []
        else:
            continue
        if not parts:
            continue
        etag, modified = _validators(headers)
        size = parts[0][2]
        coding = (get_header(headers, "content-encoding") or "").strip().lower()
        key = (etag, None if etag else modified, size, coding)
        rep = reps.get(key)
        if rep is None:
            rep = reps[key] = Representation(etag, modified, size, coding)
        if status == 200:
            if rep.whole is None and size == len(body):
                rep.whole = ref
            if body:
                rep.segments.append(_Segment(0, len(body) - 1, ref, 0))
            rep.heads.append((ref, 0, len(body) - 1, headers, None))
            continue
        rep.answers.append((tuple((p[0], p[1]) for p in parts), ref))
        for first, last, _total, offset, ptype in parts:
            rep.segments.append(_Segment(first, last, ref, offset))
            rep.heads.append((ref, first, last, headers, ptype))
    for rep in reps.values():
        rep.seal()
    return list(reps.values())


def _if_range_names(if_range: str, rep: Representation) -> bool:
    """Whether ``If-Range`` names this representation (strong comparison: a weak tag names none)."""
    value = if_range.strip()
    if value.startswith(("W/", '"')):
        return not value.startswith("W/") and rep.etag is not None and not rep.etag.startswith("W/") \
            and rep.etag == value
    return rep.last_modified is not None and rep.last_modified == value


@dataclass(frozen=True, slots=True)
class RangeAnswer:
    """What :func:`answer_range` decided: ``kind`` is ``reply`` (status, reason, headers, body set),
    ``whole`` (answer as a request without ``Range``) or ``miss`` (``why`` says what was missing);
    ``rep`` is the representation answering (its headers decide a ``304``)."""

    kind: str
    status: int = 0
    reason: str = ""
    headers: Head = ()
    body: bytes = b""
    why: str = ""
    rep: Representation | None = None


def _head_for(rep: Representation, span: Span) -> tuple[Head, str | None]:
    """The recorded head to answer ``span`` with: a single-range 206 holding it, else the whole
    200's, else any single-range 206's, else a multipart 206's (with its part's type)."""
    single = rep.singles
    for _ref, first, last, headers, _ in single:
        if first <= span[0] and span[1] <= last:
            return headers, None
    for ref, _f, _l, headers, _ in rep.heads:
        if ref == rep.whole:
            return headers, None
    if single:
        return single[0][3], None
    head = rep.heads[0]
    return head[3], head[4]


def _total(rep: Representation) -> str:
    return "*" if rep.size is None else str(rep.size)


def answer_range(reps: Sequence[Representation], range_header: str, if_range: str | None, read: Read) -> RangeAnswer:
    """The answer to a ``Range`` request from a URL's byte map (see the module docstring)."""
    specs = parse_range(range_header)
    if specs is None:
        return RangeAnswer("whole")
    chosen = [r for r in reps if _if_range_names(if_range, r)] if if_range is not None else list(reps)
    if not chosen:
        return RangeAnswer("whole")
    unsatisfiable: Representation | None = None
    for rep in chosen:
        spans = resolve_ranges(specs, rep.size)
        if spans is None:
            continue
        if not spans:  # nothing satisfiable in this version: a 416, unless another version holds the bytes
            unsatisfiable = unsatisfiable or rep
            continue
        if not all(rep.covers(s) for s in spans):
            continue
        for recorded, ref in rep.answers:  # asked exactly what the server answered once: that answer
            if list(recorded) == spans:
                status, reason, head, body = read(ref)
                return RangeAnswer("reply", status, reason, head, body, rep=rep)
        return _cut(rep, spans, read)
    if unsatisfiable is not None:  # the size is known and the range starts past it: a 416
        rep = unsatisfiable
        base, _ = _head_for(rep, (0, 0))
        headers = [*rep.kept[id(base)], ("Content-Range", f"bytes */{_total(rep)}")]
        return RangeAnswer("reply", 416, reason_phrase(416), headers, b"", rep=rep)
    return RangeAnswer("miss", why=f"bytes not recorded: {range_header.strip()}")


def _cut(rep: Representation, spans: list[Span], read: Read) -> RangeAnswer:
    base, part_type = _head_for(rep, spans[0])
    kept = rep.kept[id(base)]
    if len(spans) == 1:
        first, last = spans[0]
        headers = [(k, v) for k, v in kept if k.lower() != "content-type"] + [("Content-Type", part_type)] \
            if part_type else list(kept)
        headers.append(("Content-Range", f"bytes {first}-{last}/{_total(rep)}"))
        return RangeAnswer("reply", 206, reason_phrase(206), headers, rep.cut(spans[0], read), rep=rep)
    ctype = part_type or get_header(base, "content-type")
    # a boundary made of what is answered, so that two replays send the same bytes
    tag = hashlib.sha1(repr((rep.etag, rep.last_modified, rep.size, spans)).encode()).hexdigest()[:24]
    boundary = f"ego2web-replay-{tag}"
    chunks = []
    for first, last in spans:
        head = f"\r\n--{boundary}\r\n" + (f"Content-Type: {ctype}\r\n" if ctype else "") + \
               f"Content-Range: bytes {first}-{last}/{_total(rep)}\r\n\r\n"
        chunks += [head.encode("latin-1"), rep.cut((first, last), read)]
    chunks.append(f"\r\n--{boundary}--\r\n".encode("latin-1"))
    headers = [(k, v) for k, v in kept if k.lower() != "content-type"] + \
              [("Content-Type", f"multipart/byteranges; boundary={boundary}")]
    return RangeAnswer("reply", 206, reason_phrase(206), headers, b"".join(chunks), rep=rep)
