"""A recorded stream (server-sent events) replayed at its recorded pace.

The recorder keeps, on the response record of a body it streamed, when each piece
arrived (``WARC-Ego2Web-Stream-Timing``, see :mod:`ego2web_replay.recorder.stream`) and,
when the body was cut, why (``WARC-Truncated``). Replay sends the archived payload in
the same pieces, each after the same delay from the one before (at most
:data:`MAX_GAP_S`), so a page sees its events in the order and rhythm it saw them live;
the bytes are always the archived ones, whatever the clock does. A capture that was
complete ends cleanly after its last piece; one cut by a limit (``length``, ``time``) or a
failure is cut there (HTTP/1.1: no last chunk; HTTP/2: the stream reset), as the live
page's copy was; one that ended because its client left or the recording stopped
(``WARC-Ego2Web-Stream-Left``) stays open after its last piece, as it was live, until the client
leaves (at most :data:`MAX_GAP_S`, then cut). Answering from a
truncated capture is counted (``ReplayStats.truncated``) and makes the episode at best
``degraded`` (:func:`ego2web_replay.validity.classify`). The mitmproxy replay engine
sends the same bytes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..snapshots.warc import LEFT_HEADER, TIMING_HEADER

__all__ = ["StreamMeta", "ReplayedStream", "stream_meta", "MAX_GAP_S", "TIMING_HEADER"]

MAX_GAP_S = 30.0


@dataclass(frozen=True)
class StreamMeta:
    """What the record says of a streamed body: why it was cut (None: it was not) and its pieces."""

    truncated: str | None
    pieces: tuple[tuple[int, int], ...]  # (byte offset in the payload, ms after the response head)
    left: str | None = None  # the recorder's side ended it: client (the browser left) or stopped


def stream_meta(warc_headers: Any) -> StreamMeta | None:
    """The stream facts of a response record's WARC headers (``.get(name)``); None for a plain record."""
    truncated = warc_headers.get("WARC-Truncated")
    timing = warc_headers.get(TIMING_HEADER)
    if truncated is None and timing is None:
        return None
    pieces = []
    for pair in (timing or "").split():
        offset, _, ms = pair.partition(":")
        if offset.isdigit() and ms.isdigit():
            pieces.append((int(offset), int(ms)))
    return StreamMeta(truncated, tuple(sorted(pieces)), warc_headers.get(LEFT_HEADER))


class ReplayedStream:
    """``body`` in its recorded pieces at their recorded pace (a wire stream: see ``wire/stream.py``)."""

    def __init__(self, body: bytes, meta: StreamMeta, max_gap_s: float = MAX_GAP_S) -> None:
        self.body, self.meta, self.max_gap_s = body, meta, max_gap_s
        self.complete = False
        self._gone: asyncio.Event | None = None

    def close(self) -> None:
        if self._gone is not None:
            self._gone.set()

    async def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[misc]
        self._gone = asyncio.Event()
        pieces = [p for p in self.meta.pieces if p[0] < len(self.body)] or [(0, 0)]
        if pieces[0][0] != 0:
            pieces.insert(0, (0, pieces[0][1]))
        before = 0
        for i, (offset, ms) in enumerate(pieces):
            gap = min(max(ms - before, 0) / 1000, self.max_gap_s)
            before = ms
            if gap > 0:
                try:
                    await asyncio.wait_for(self._gone.wait(), gap)
                    return  # the client went away
                except TimeoutError:
                    pass
            end = pieces[i + 1][0] if i + 1 < len(pieces) else len(self.body)
            yield self.body[offset:end]
        if self.meta.left is not None:  # live, the stream was still open when it ended: so here
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._gone.wait(), self.max_gap_s)
        self.complete = self.meta.truncated is None
