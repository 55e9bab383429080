"""Response bodies streamed through the recorder to the browser as they arrive, archived when they end.

A body that comes chunked or with a length (:func:`streamable`) is not read whole
before the browser is answered: its head goes to the browser at once and each piece
of its body as it comes from the origin (:mod:`ego2web_replay.wire.stream`); the
recorder's copy is kept in memory up to :data:`SPOOL_BYTES`, in a temporary file
beyond (at most the record cap, ``EGO2WEB_MAX_RECORD_BYTES``), and the exchange is
archived when the body ends. Until the record is written the browser does not have
the body's end (the last chunk, or the last piece of a body with a length): if the
record cannot be written, the browser's body is cut (the connection closed, an
HTTP/2 stream reset), so no body the browser takes as whole goes unrecorded. A body
that fails mid-way (the origin closes, bad framing, the record cap, the read limit)
is cut for the browser too and is not archived: an upstream error, as for a body read
whole. A browser that leaves a download early (as Chromium leaves a media file after
its first megabytes) does not end the recording of it: it is read on and archived
whole. A body that runs to the connection's end, or has a length past the record cap,
is read whole first (:mod:`.upstream`), as before.

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
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from ..snapshots.warc import LEFT_HEADER, TIMING_HEADER
from ..web import get_header
from .upstream import UpstreamPool, UpstreamResponse, max_response

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
    ctype = (get_header(resp.headers, "content-type") or "").split(";")[0].strip().lower()
    return ctype == "text/event-stream"


def streamable(resp: UpstreamResponse) -> bool:
    """A response streamed to the browser as it comes: server-sent events, and any body chunked or
    with a length the archive can hold (one running to the connection's end is read whole first, as
    is one with a length past the record cap: refused)."""
    if open_ended(resp):
        return True
    if "chunked" in (get_header(resp.headers, "transfer-encoding") or "").lower():
        return True
    length = get_header(resp.headers, "content-length")
    try:
        return length is not None and int(length.split(",")[0].strip()) <= max_response()
    except ValueError:
        return False


def timing_value(pieces: list[tuple[int, int]]) -> str:
    return " ".join(f"{offset}:{ms}" for offset, ms in pieces)


class _Cut(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RecordedStream:
    """One upstream body, yielded piece by piece and archived when it ends (see the module docstring).

    ``archive(body, warc_headers)`` writes the exchange and says whether it was written.
    ``ended`` is set once the record is written (or could not be).
    """

    def __init__(self, pool: UpstreamPool, resp: UpstreamResponse,
                 archive: Callable[[bytes, list[tuple[str, str]]], bool], *,
                 failed: Callable[[str], None] | None = None, open_ended: bool = True,
                 max_bytes: int | None = None, max_seconds: float | None = None) -> None:
        self.pool, self.resp, self.archive, self.failed = pool, resp, archive, failed
        self.open_ended = open_ended
        self.max_bytes = max_response() if max_bytes is None else max_bytes
        self.max_seconds = pool.read_timeout_s if max_seconds is None else max_seconds
        self.complete = False
        self.truncated: str | None = None
        loop = asyncio.get_running_loop()
        self._gone: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._started = time.monotonic()
        self._deadline = loop.time() + self.max_seconds
        self._body: Any = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed in _finish
        self._size = 0
        self._pieces: list[tuple[int, int]] = []
        self._iterated = False
        self._over = False
        self._last = b""  # held back until the record is written (a body with a length)
        self._left: str | None = None  # who ended it on the recorder's side (see close)
        te = (get_header(resp.headers, "transfer-encoding") or "").lower()
        resp.chunked = "chunked" in te
        # a body with a length may take as long as it keeps coming (the limit is between reads); any
        # other gets the limit in all (as recorder/upstream.py reads them)
        self._per_read = not open_ended and not resp.chunked

    def close(self, why: str = "client") -> None:
        """The browser went away (``client``) or the recording stops (``stopped``). An open-ended body
        is archived as it is, truncated; any other is read on to its end and archived whole when its
        browser left, and given up (not archived) when the recording stops."""
        if not self.open_ended and why == "client":
            self._left = why
            if not self._iterated:  # the head never went: read it all the same
                asyncio.ensure_future(self._drain())
            return
        if not self._gone.done():
            self._left = why
            self._gone.set_result(None)
        if not self._iterated:  # never sent (the client left before the head went): still archived
            self._iterated = True
            self._finish("disconnect")

    async def _drain(self) -> None:
        async for _ in self:
            pass

    async def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[misc]
        if self._iterated:
            return
        self._iterated = True
        reason: str | None = None
        try:
            async for piece in self._pieces_from_origin():
                yield piece
        except _Cut as cut:
            reason = cut.reason
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            reason = "disconnect"
        except (ValueError, asyncio.LimitOverrunError):
            reason = "unspecified"
        except BaseException:
            self._finish("disconnect")
            raise
        self._finish(reason)
        if self.complete and self._last:
            yield self._last

    def _finish(self, reason: str | None) -> None:
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
            self._body.seek(0)
            written = self.archive(self._body.read(), headers)
            self.complete = reason is None and written
        finally:
            self._body.close()
            self.ended.set_result(None)

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

    async def _read(self, coro: Coroutine[Any, Any, bytes]) -> bytes:
        """``coro``'s bytes, unless the browser goes away or the time runs out first."""
        read: asyncio.Future[Any] = asyncio.ensure_future(coro)
        waiting: set[asyncio.Future[Any]] = {read, self._gone}
        left = self.max_seconds if self._per_read else self._deadline - asyncio.get_running_loop().time()
        done, _ = await asyncio.wait(waiting, timeout=max(left, 0),
                                     return_when=asyncio.FIRST_COMPLETED)
        if read in done:
            return read.result()
        read.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await read
        raise _Cut("disconnect" if self._gone.done() else "time")

    async def _pieces_from_origin(self) -> AsyncIterator[bytes]:
        reader = self.resp.link.reader
        if self.resp.chunked:
            while True:
                line = await self._read(reader.readuntil(b"\r\n"))
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await self._read(reader.readuntil(b"\r\n"))) != b"\r\n":
                        pass  # trailers: not kept
                    return
                while size > 0:
                    data = await self._read(reader.read(min(size, _PIECE)))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", None)
                    size -= len(data)
                    yield self._keep(data)
                    self._check()
                if await self._read(reader.readexactly(2)) != b"\r\n":
                    raise ValueError("bad chunk framing")
        length = get_header(self.resp.headers, "content-length")
        left = int(length.split(",")[0].strip()) if length is not None else None
        while left is None or left > 0:
            data = await self._read(reader.read(_PIECE if left is None else min(left, _PIECE)))
            if not data:
                if left is None:
                    return  # the body ran to the connection's end
                raise asyncio.IncompleteReadError(b"", None)
            if left is not None:
                left -= len(data)
            data = self._keep(data)
            if left == 0 and not self._over:  # the last piece of a body with a length: sent once archived
                self._last = data
                return
            yield data
            self._check()
