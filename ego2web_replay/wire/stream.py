"""A response body sent as it comes: what a :class:`~.reply.Reply` with a ``stream`` carries.

A stream is an async iterator of body bytes (transfer framing left to the wire) with
``close()``, called when the client goes away (its connection closed, its HTTP/2
stream reset), and ``complete``, read once the iteration is over: true when the body
ended as it should, false when it was cut (a limit, the origin gone, the client
gone). A cut body is never ended cleanly: HTTP/1.1 closes the connection without the
last chunk (the client sees an incomplete body), HTTP/2 resets the stream. Nothing
here holds more than one piece at a time.

A piece goes on only once the client can take more (``ready``: the connection's
transport is below its high-water mark and, on HTTP/2, the stream's unsent bytes are
under :data:`MAX_UNSENT`), so a client that stops reading (a media element that has
buffered enough) does not fill memory: the recorder reads the origin on into its spool
file (:mod:`ego2web_replay.recorder.stream`) and the client is fed from it at its pace.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

__all__ = ["BodyStream", "pump", "MAX_UNSENT"]

MAX_UNSENT = 1 << 20  # bytes of one HTTP/2 stream waiting for the client's flow-control window

log = logging.getLogger(__name__)


class BodyStream(Protocol):
    complete: bool

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


async def pump(stream: Any, send: Callable[[bytes], None],
               ready: Callable[[], Awaitable[None]] | None = None) -> bool:
    """Send every piece of ``stream`` (each through ``send``, the next once ``ready()`` says the client
    can take more); whether the body ended complete."""
    try:
        async for data in stream:
            if data:
                send(data)
                if ready is not None:
                    await ready()
    except Exception as e:  # noqa: BLE001 - a failing stream cuts its own response only
        log.error("ego2web-replay: a streamed response failed: %r", e)
        return False
    return bool(stream.complete)
