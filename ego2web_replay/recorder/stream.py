"""Open-ended responses (server-sent events) streamed through the recorder as they arrive.

A response whose body may never end (``Content-Type: text/event-stream``) is not
read whole before the browser is answered: its head goes to the browser at once and
each piece of its body as it comes from the origin (:mod:`ego2web_replay.wire.stream`),
kept meanwhile in memory (at most the record cap, ``EGO2WEB_MAX_RECORD_BYTES``). The
exchange is archived when the body ends: the origin finished it, the browser went
away, the recorder stopped, or a limit cut it. Until then the browser has not got the
body's end: if the archive cannot be written the browser's body is cut (its last
chunk withheld, an HTTP/2 stream reset), so no body the browser takes as whole goes
unrecorded.

A body that did not end as the origin meant it is archived with ``WARC-Truncated``
(WARC 1.1 values): ``length`` (the record cap), ``time`` (the recorder's read limit,
120 s from the response head), ``disconnect`` (the origin closed it mid-body, the
browser went away, or the recording stopped: then also ``WARC-Ego2Web-Stream-Left:
client`` or ``stopped``) or ``unspecified`` (bad framing). The browser's copy is cut at
the same byte. When each piece came is kept on the response
record as ``WARC-Ego2Web-Stream-Timing``: space-separated ``offset:ms`` pairs, the
byte offset of a piece in the payload (transfer framing removed) and the milliseconds
from the response head to its arrival; at most :data:`MAX_PIECES` pairs (later pieces
count with the last one). Replay serves such a record at that pace
(:mod:`ego2web_replay.replay.stream`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from ..snapshots.warc import LEFT_HEADER, TIMING_HEADER
from ..web import get_header
from .upstream import UpstreamPool, UpstreamResponse, max_response

__all__ = ["RecordedStream", "open_ended", "TIMING_HEADER", "MAX_PIECES", "timing_value"]

MAX_PIECES = 1000
_PIECE = 64 * 1024


def open_ended(resp: UpstreamResponse) -> bool:
    """A response streamed through rather than read whole: server-sent events."""
    ctype = (get_header(resp.headers, "content-type") or "").split(";")[0].strip().lower()
    return ctype == "text/event-stream"


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
                 max_bytes: int | None = None, max_seconds: float | None = None) -> None:
        self.pool, self.resp, self.archive = pool, resp, archive
        self.max_bytes = max_response() if max_bytes is None else max_bytes
        self.max_seconds = pool.read_timeout_s if max_seconds is None else max_seconds
        self.complete = False
        self.truncated: str | None = None
        loop = asyncio.get_running_loop()
        self._gone: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._started = time.monotonic()
        self._deadline = loop.time() + self.max_seconds
        self._body = bytearray()
        self._pieces: list[tuple[int, int]] = []
        self._iterated = False
        self._over = False
        self._left: str | None = None  # who ended it on the recorder's side (see close)
        te = (get_header(resp.headers, "transfer-encoding") or "").lower()
        resp.chunked = "chunked" in te

    def close(self, why: str = "client") -> None:
        """The browser went away (``client``) or the recording stops (``stopped``): archive what came,
        marked truncated."""
        if not self._gone.done():
            self._left = why
            self._gone.set_result(None)
        if not self._iterated:  # never sent (the client left before the head went): still archived
            self._iterated = True
            self._finish("disconnect")

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

    def _finish(self, reason: str | None) -> None:
        if self.ended.done():
            return
        self.truncated = reason
        self.pool.done_with(self.resp, reusable=reason is None)
        headers = [(TIMING_HEADER, timing_value(self._pieces))] if self._pieces else []
        if reason is not None:
            headers.insert(0, ("WARC-Truncated", reason))
        if reason == "disconnect" and self._left is not None:
            headers.append((LEFT_HEADER, self._left))
        written = self.archive(bytes(self._body), headers)
        self.complete = reason is None and written
        self._body = bytearray()
        self.ended.set_result(None)

    def _keep(self, data: bytes) -> bytes:
        """What of ``data`` fits under the record cap (kept, to be sent); past it, the cut is due."""
        room = self.max_bytes - len(self._body)
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
            self._pieces.append((len(self._body), int((time.monotonic() - self._started) * 1000)))
        self._body += data

    async def _read(self, coro: Coroutine[Any, Any, bytes]) -> bytes:
        """``coro``'s bytes, unless the browser goes away or the time runs out first."""
        read: asyncio.Future[Any] = asyncio.ensure_future(coro)
        waiting: set[asyncio.Future[Any]] = {read, self._gone}
        left = self._deadline - asyncio.get_running_loop().time()
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
            yield self._keep(data)
            self._check()
