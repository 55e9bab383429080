"""A response body sent as it comes: what a :class:`~.reply.Reply` with a ``stream`` carries.

A stream is an async iterator of body bytes (transfer framing left to the wire) with
``close()``, called when the client goes away (its connection closed, its HTTP/2
stream reset), and ``complete``, read once the iteration is over: true when the body
ended as it should, false when it was cut (a limit, the origin gone, the client
gone). A cut body is never ended cleanly: HTTP/1.1 closes the connection without the
last chunk (the client sees an incomplete body), HTTP/2 resets the stream. Nothing
here holds more than one piece at a time.

Bytes written to a client are handed to its transport at once; the transport
buffers what a slow client has not yet taken (no backpressure to the origin).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

__all__ = ["BodyStream", "pump"]

log = logging.getLogger(__name__)


class BodyStream(Protocol):
    complete: bool

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


async def pump(stream: Any, send: Callable[[bytes], None]) -> bool:
    """Send every piece of ``stream`` (each through ``send``); whether the body ended complete."""
    try:
        async for data in stream:
            if data:
                send(data)
    except Exception as e:  # noqa: BLE001 - a failing stream cuts its own response only
        log.error("ego2web-replay: a streamed response failed: %r", e)
        return False
    return bool(stream.complete)
