"""A server-sent-events site on real third-party software: sse-starlette on uvicorn, on 127.0.0.1.

``/`` is a page whose ``EventSource`` shows each event as a list item. ``/events`` sends
:data:`EVENTS` events (the first with a ``retry`` of ten minutes, so the browser does not
ask again soon) and ends the stream; ``/ticker`` sends an event every 50 ms and never
ends. The page marks ``body[data-ended]`` when its stream ends or fails, and
``?stream=ticker`` listens to the ticker instead. For the recorder's stream tests.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any, Self

__all__ = ["SseSite", "EVENTS", "PAGE"]

EVENTS = 5
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>events</title>
<link rel="icon" href="data:,"></head><body><ul id="log"></ul><script>
const which = new URLSearchParams(location.search).get('stream') || 'events';
const es = new EventSource('/' + which);
es.onmessage = e => { const li = document.createElement('li'); li.textContent = e.data;
  document.getElementById('log').append(li); };
es.onerror = () => { es.close(); document.body.dataset.ended = '1'; };
</script></body></html>"""


def _app() -> Any:
    from sse_starlette.sse import EventSourceResponse, ServerSentEvent
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    async def page(request: Any) -> HTMLResponse:
        return HTMLResponse(PAGE)

    async def events(request: Any) -> EventSourceResponse:
        async def gen() -> AsyncIterator[ServerSentEvent]:
            for n in range(EVENTS):
                yield ServerSentEvent(data=f"event {n}", id=str(n), retry=600_000 if n == 0 else None)
                await asyncio.sleep(0.05)

        return EventSourceResponse(gen())

    async def ticker(request: Any) -> EventSourceResponse:
        async def gen() -> AsyncIterator[ServerSentEvent]:
            n = 0
            while True:
                yield ServerSentEvent(data=f"tick {n}", retry=600_000 if n == 0 else None)
                n += 1
                await asyncio.sleep(0.05)

        return EventSourceResponse(gen())

    return Starlette(routes=[Route("/", page), Route("/events", events), Route("/ticker", ticker)])


class SseSite:
    """The site in a thread of this process (uvicorn's server); a context manager. With ``tls`` (a
    :class:`~.tls.TestCA`) it speaks HTTPS with that CA's server certificate."""

    def __init__(self, tls: Any = None) -> None:
        self.tls = tls
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> Self:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        cert, key = (str(self.tls.server_cert), str(self.tls.server_key)) if self.tls else (None, None)
        self._server = uvicorn.Server(uvicorn.Config(_app(), log_level="warning", lifespan="off",
                                                     ssl_certfile=cert, ssl_keyfile=key))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        for _ in range(200):
            if self._server.started:
                return self
            self._thread.join(0.05)
        raise RuntimeError("the SSE site did not start")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # open event streams do not hold it up
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
