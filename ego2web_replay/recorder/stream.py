"""Response bodies streamed through the recorder to the browser as they arrive, archived when they end.

A body that comes chunked or with a length (:func:`streamable`) is not read whole
before the browser is answered: its head goes to the browser at once and each piece
of its body as it comes from the origin (:mod:`ego2web_replay.wire.stream`). The
origin is read at its own pace into a spool (memory up to :data:`SPOOL_BYTES`, a
temporary file beyond; at most the record cap, ``EGO2WEB_MAX_RECORD_BYTES``) and the
browser is fed from the spool at the browser's (what waits for a slow browser stays
in the spool, not in memory); the exchange is archived when the body ends, on the archive's writer
thread (:mod:`.writes`; the spool handed over whole, :mod:`.spool`), while the loop forwards
other exchanges. Until the record is written the browser does not have
the body's end (the last chunk, or the last piece of a body with a length): if the
record cannot be written, the browser's body is cut (the connection closed, an
HTTP/2 stream reset), so no body the browser takes as whole goes unrecorded. A body
that fails mid-way (the origin closes, bad framing, the record cap, the read limit)
is cut for the browser too and is not archived: an upstream error, as for a body read
whole. A browser that leaves a download early (as Chromium leaves a media file after
its first megabytes) does not end the recording of it: it is read on and archived
whole. A body that runs to the connection's end, or has a length past the record cap,
or Content-Lengths that differ or are not digits, is read whole first (:mod:`.upstream`),
as before (the last two refused there, a 502).

A body that may never end (``Content-Type: text/event-stream``, server-sent events)
is archived when it ends, however that is: the origin finished it, the browser went
away, the recording stopped, or a limit cut it. One that did not end as the origin
meant it is archived with ``WARC-Truncated`` (WARC 1.1 values): ``length`` (the record
cap), ``time`` (the recorder's read limit, 120 s from the response head),
``disconnect`` (the origin closed it mid-body, the browser went away, or the recording
stopped: then also ``WARC-Ego2Web-Stream-Left: client`` or ``stopped``) or
``unspecified`` (bad framing). The browser's copy is cut at the same byte. When each
piece came is kept on its response record as ``WARC-Ego2Web-Stream-Timing``:
space-separated ``offset:ms`` pairs, the byte offset of a piece in the payload
(transfer framing removed) and the milliseconds from the response head to its
arrival; at most :data:`MAX_PIECES` pairs (later pieces count with the last one).
Replay serves such a record at that pace (:mod:`ego2web_replay.replay.stream`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from ..snapshots.warc import LEFT_HEADER, TIMING_HEADER
from ..web import get_header
from .spool import Spool, SpoolFile
from .upstream import (
    UpstreamPool,
    UpstreamResponse,
    chunk_size,
    content_length,
    max_response,
    one_length,
    skip_trailers,
)

__all__ = ["RecordedStream", "open_ended", "streamable", "SPOOL_BYTES", "TIMING_HEADER", "MAX_PIECES", "timing_value"]

MAX_PIECES = 1000
_PIECE = 64 * 1024
SPOOL_BYTES = 4 << 20  # a body kept in memory up to this, in a temporary file beyond
_FAILURES = {"length": "response too large to archive (EGO2WEB_MAX_RECORD_BYTES)",
             "time": "no answer from the origin within {s:g} s",
             "disconnect": "the origin closed the connection in the middle of the body",
             "unspecified": "bad chunk framing from the origin"}


def open_ended(resp: UpstreamResponse) -> bool:
    """A response whose body may never end: server-sent events."""
    return _event_stream(get_header(resp.headers, "content-type"))


def _event_stream(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";")[0].strip().lower() == "text/event-stream"


def streamable(resp: UpstreamResponse, cap: int | None = None) -> bool:
    """A response streamed to the browser as it comes: server-sent events, and any body chunked or
    with a length the archive can hold (``cap``: the record cap, :func:`.max_response` when None; one
    running to the connection's end is read whole first, as is one with a length past the record cap:
    refused). The fields it needs are found in one pass over the head (it runs before every first
    byte): the first Transfer-Encoding and Content-Type, as :func:`.get_header` finds them, and every
    Content-Length value, as :func:`.content_length` reads them."""
    te = ctype = None
    lengths: list[str] = []
    for name, value in resp.headers:
        lower = name.lower()
        if lower == "content-length":
            lengths.append(value)
        elif lower == "transfer-encoding":
            te = value if te is None else te
        elif lower == "content-type":
            ctype = value if ctype is None else ctype
    if te is not None and "chunked" in te.lower():
        return True
    if lengths:
        try:
            if one_length(lengths) <= (max_response() if cap is None else cap):
                return True
        except ValueError:  # lengths that differ or are no digits: read whole, and refused there (a 502)
            return False
    return _event_stream(ctype)  # (open_ended) streamed with no length, or one past the cap (cut there)


def timing_value(pieces: list[tuple[int, int]]) -> str:
    return " ".join(f"{offset}:{ms}" for offset, ms in pieces)


class _Cut(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RecordedStream:
    """One upstream body, yielded piece by piece and archived when it ends (see the module docstring).

    ``archive(body, warc_headers)`` writes the exchange and says (awaited) whether it was written;
    ``body`` is the payload, a seekable file with a position of its own on the spool
    (:meth:`.Spool.handover`), read in pieces by the WARC writer and closed by it. ``ended`` is set once the record is written (or could not be).
    """

    def __init__(self, pool: UpstreamPool, resp: UpstreamResponse,
                 archive: Callable[[SpoolFile, list[tuple[str, str]]], Awaitable[bool]], *,
                 failed: Callable[[str], None] | None = None, open_ended: bool = True,
                 max_bytes: int | None = None, max_seconds: float | None = None, begin: bool = True) -> None:
        """``begin``: set up now (see :meth:`begin`); False leaves that to the caller, who calls
        :meth:`begin` before the loop runs anything else, once the head is on its way to the client."""
        self.pool, self.resp, self.archive, self.failed = pool, resp, archive, failed
        self.open_ended = open_ended
        self.max_bytes = max_response() if max_bytes is None else max_bytes
        self.max_seconds = pool.read_timeout_s if max_seconds is None else max_seconds
        self.complete = False
        self.truncated: str | None = None
        te = (get_header(resp.headers, "transfer-encoding") or "").lower()
        resp.chunked = "chunked" in te  # what the client's head says
        self._begun = False
        if begin:
            self.begin()

    def begin(self) -> None:
        """Set up the spool, the body's timer and its reading from the origin (once; :meth:`close`
        and the iteration begin it too, if nobody did). The recorder calls it after the client's head
        is written and the client was let read it (:mod:`.front`): none of it holds back a first byte."""
        if self._begun:
            return
        self._begun = True
        loop = asyncio.get_running_loop()
        self._gone: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._started = time.monotonic()
        self._deadline = loop.time() + self.max_seconds
        self._body = Spool(SPOOL_BYTES)  # closed in _release
        self._size = 0
        self._pieces: list[tuple[int, int]] = []
        self._over = False
        self._held: int | None = None  # bytes from here wait for the record (a body with a length: its last piece)
        self._left: str | None = None  # who ended it on the recorder's side (see close)
        self._more = asyncio.Event()  # set when the origin added bytes (or the end came, or the client left)
        self._client_gone = False
        self._iterating = False
        self._reader_done = False
        # a body with a length may take as long as it keeps coming (the limit is between reads); any
        # other gets the limit in all (as recorder/upstream.py reads them)
        self._per_read = not self.open_ended and not self.resp.chunked
        # the origin is read into the spool at its own pace; the client is fed from it at the client's.
        # The reading starts on the loop's next turn, after the head this stream belongs to has gone
        # to the client (the answer is written by the callbacks of the task that made this stream,
        # which run after a callback scheduled now): the first byte does not wait for the first read.
        self._fill_task: asyncio.Future[None] | None = None
        self._reading = False  # _fill is reading the origin (close() may cut that read short)
        self._timer: asyncio.Timeout | None = None
        loop.call_soon(self._start)

    def _start(self) -> None:
        self._fill_task = asyncio.ensure_future(self._fill())

    def close(self, why: str = "client") -> None:
        """The browser went away (``client``) or the recording stops (``stopped``). An open-ended body
        is archived as it is, truncated; any other is read on to its end and archived whole when its
        browser left, and given up (not archived) when the recording stops."""
        self.begin()
        if self._left is None:
            self._left = why
        self._client_gone = True
        self._more.set()
        if not self._iterating:
            self._reader_done = True
        if (self.open_ended or why == "stopped") and not self._gone.done():
            self._gone.set_result(None)
            if self._reading and self._fill_task is not None:
                self._fill_task.cancel()  # the read in progress ends now: a disconnect (see _fill)
        self._release()

    async def _fill(self) -> None:
        """Read the origin into the spool until the body ends, fails, runs out of time or is left.

        One timer for the whole body (rescheduled after each read where the limit is between reads)
        and a cancellation from :meth:`close` for a body left early: no task, no wait per piece."""
        reason: str | None = None
        if self._gone.done():  # left before the first read
            reason = "disconnect"
        else:
            self._reading = True
            try:
                async with asyncio.timeout_at(self._deadline) as timer:
                    self._timer = timer
                    async for _ in self._pieces_from_origin():
                        self._more.set()
            except _Cut as cut:
                reason = cut.reason
            except TimeoutError:  # the timer's, or the socket's own (ETIMEDOUT: the origin is gone)
                reason = "time" if self._timer is not None and self._timer.expired() else "disconnect"
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                reason = "disconnect"
            except (ValueError, asyncio.LimitOverrunError):
                reason = "unspecified"
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not self._gone.done() or task is None or task.uncancel() > 0:
                    await self._finish("disconnect")
                    raise  # cancelled by someone else (the loop closing): not ours to absorb
                reason = "disconnect"
            except BaseException:
                await self._finish("disconnect")
                raise
            finally:
                self._reading = False
        await self._finish(reason)

    async def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[misc]
        """What the origin sent so far, then more as it comes, while the client is there; the held
        bytes only once the record is written."""
        self.begin()
        if self._iterating or self._reader_done:
            return
        self._iterating, sent = True, 0
        try:
            while not self._client_gone:
                released = self.ended.done() and self.complete
                limit = self._size if self._held is None or released else self._held
                if sent < limit:
                    data = self._body.read_at(sent, min(limit - sent, _PIECE))
                    sent += len(data)
                    yield data
                    continue
                if self.ended.done():
                    return
                self._more.clear()
                await self._more.wait()
        finally:
            self._reader_done = True
            self._release()

    def _release(self) -> None:
        """Close the spool once the record is written and the client's side is over."""
        if self._reader_done and self.ended.done() and not self._body.closed:
            self._body.close()

    async def _finish(self, reason: str | None) -> None:
        if self.ended.done():
            return
        self.truncated = reason
        self.pool.done_with(self.resp, reusable=reason is None)
        try:
            if reason is not None and not self.open_ended:  # a failure, as for a body read whole
                if self._left != "stopped" and self.failed is not None:
                    self.failed(_FAILURES[reason].format(s=self.max_seconds))
                return
            headers = [(TIMING_HEADER, timing_value(self._pieces))] if self.open_ended and self._pieces else []
            if reason is not None:
                headers.insert(0, ("WARC-Truncated", reason))
            if reason == "disconnect" and self._left is not None:
                headers.append((LEFT_HEADER, self._left))
            written = await self.archive(self._body.handover(), headers)  # the body is over: no more writes
            self.complete = reason is None and written
        finally:
            self.ended.set_result(None)
            self._more.set()
            self._release()

    def _keep(self, data: bytes) -> bytes:
        """What of ``data`` fits under the record cap (kept, to be sent); past it, the cut is due."""
        room = self.max_bytes - self._size
        if len(data) > room:
            data, self._over = data[:max(room, 0)], True
        if data:
            self._note(data)
        return data

    def _check(self) -> None:
        if self._over:
            raise _Cut("length")

    def _note(self, data: bytes) -> None:
        if len(self._pieces) < MAX_PIECES:
            self._pieces.append((self._size, int((time.monotonic() - self._started) * 1000)))
        self._body.write(data)
        self._size += len(data)

    def _read_more(self) -> None:
        """A read came back: where the limit is between reads, the next one gets it afresh."""
        if self._per_read and self._timer is not None:
            self._timer.reschedule(asyncio.get_running_loop().time() + self.max_seconds)

    async def _pieces_from_origin(self) -> AsyncIterator[bytes]:
        reader = self.resp.link.reader
        if self.resp.chunked:
            while True:
                size = chunk_size(await reader.readuntil(b"\r\n"))
                if size == 0:
                    await skip_trailers(reader.readuntil)  # not kept
                    return
                while size > 0:
                    data = await reader.read(min(size, _PIECE))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", None)
                    size -= len(data)
                    yield self._keep(data)
                    self._check()
                if await reader.readexactly(2) != b"\r\n":
                    raise ValueError("bad chunk framing")
        left = content_length(self.resp)  # one valid length: streamable() streams no other
        while left is None or left > 0:
            data = await reader.read(_PIECE if left is None else min(left, _PIECE))
            if not data:
                if left is None:
                    return  # the body ran to the connection's end
                raise asyncio.IncompleteReadError(b"", None)
            self._read_more()
            if left is not None:
                left -= len(data)
                if left == 0:  # the last piece of a body with a length: sent once the record is written
                    self._held = self._size
            yield self._keep(data)
            self._check()
