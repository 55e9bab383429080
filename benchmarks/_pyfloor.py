"""The floor of a Python proxy: the thinnest asyncio forwarder, with no recording, for ``--stream``.

    python benchmarks/_pyfloor.py   # prints its port, serves until killed

A plain-HTTP forward proxy on 127.0.0.1, on the event loop our proxies run on
(``ego2web_replay.wire.loop.new_loop``: uvloop when installed): protocols, no streams or tasks on the
path of a kept connection. It reads the client's head, turns the absolute-form request line into
origin form (``Connection: keep-alive`` upstream, whatever the client asked), writes it to an idle
kept connection to that origin (or opens one), and relays the bytes both ways with ``TCP_NODELAY``,
back-pressure passed along (a client that reads slowly pauses the upstream). The answer's end is
its ``Content-Length``; then the client's connection is closed and the upstream one goes back to the
pool. One request per client connection, as the benchmark's client sends; no chunked answers. Any
upstream that is not loopback is answered here with a 403 and never connected to.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
Origin = tuple[str, int]


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def request_head(head: bytes) -> tuple[Origin, bytes] | None:
    """``GET http://host:port/p HTTP/1.1`` + headers -> ((host, port), the head in origin form, kept
    alive); None for a request this forwarder does not carry (not absolute-form http, not loopback)."""
    line, _, rest = head.partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[1].startswith(b"http://"):
        return None
    url = urlsplit(parts[1].decode("latin-1"))
    if url.hostname not in _LOOPBACK:
        return None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    fields = [f for f in rest.split(b"\r\n") if f and not f.lower().startswith((b"connection:", b"proxy-connection:"))]
    out = b"\r\n".join([b" ".join([parts[0], path.encode("latin-1"), parts[2]]), *fields, b"Connection: keep-alive"])
    return (url.hostname, url.port or 80), out + b"\r\n\r\n"


def content_length(head: bytes) -> int:
    for field in head.split(b"\r\n")[1:]:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class Upstream(asyncio.Protocol):
    """A kept connection to one origin; relays one answer at a time to ``client``."""

    def __init__(self, pool: dict[Origin, list[Upstream]], origin: Origin) -> None:
        self.pool, self.origin = pool, origin
        self.client: Client | None = None
        self.transport: asyncio.Transport | None = None
        self.head, self.left = b"", -1  # bytes of the head so far; body bytes still to come (-1: head not read)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        client = self.client
        if client is None or client.transport is None:
            return
        if self.left < 0:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.left = content_length(self.head[:end]) - (len(self.head) - end - 4)
        else:
            self.left -= len(data)
        client.transport.write(data)
        if self.left <= 0:  # the answer is whole: the client's connection ends, this one is kept
            client.transport.close()
            if client.paused:  # the client's buffer was full at the end: reading goes on for the next one
                client.paused = False
                assert self.transport is not None
                self.transport.resume_reading()
            self.client, self.head, self.left = None, b"", -1
            self.pool.setdefault(self.origin, []).append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        idle = self.pool.get(self.origin, [])
        if self in idle:
            idle.remove(self)
        if self.client is not None and self.client.transport is not None:
            self.client.transport.close()


class Client(asyncio.Protocol):
    def __init__(self, pool: dict[Origin, list[Upstream]]) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.up: Upstream | None = None
        self.buf = b""
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        if self.up is not None:  # a request body: straight on
            assert self.up.transport is not None
            self.up.transport.write(data)
            return
        self.buf += data
        if b"\r\n\r\n" not in self.buf:
            return
        head, _, body = self.buf.partition(b"\r\n\r\n")
        got = request_head(head)
        assert self.transport is not None
        if got is None:
            self.transport.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            self.transport.close()
            return
        origin, out = got
        idle = self.pool.get(origin)
        if idle:
            self._send(idle.pop(), out + body)
        else:
            asyncio.get_running_loop().create_task(self._open(origin, out + body))

    async def _open(self, origin: Origin, out: bytes) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: Upstream(self.pool, origin), *origin)
        self._send(up, out)

    def _send(self, up: Upstream, out: bytes) -> None:
        self.up, up.client = up, self
        assert up.transport is not None
        up.transport.write(out)

    def pause_writing(self) -> None:  # the client reads slower than the origin writes
        if self.up is not None and self.up.client is self and self.up.transport is not None:
            self.paused = True
            self.up.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.paused and self.up is not None and self.up.client is self and self.up.transport is not None:
            self.paused = False
            self.up.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        up = self.up
        if up is not None and up.client is self and up.transport is not None:
            up.transport.close()  # gone mid-answer: the upstream connection cannot be reused


async def serve(port: int = 0) -> asyncio.Server:
    pool: dict[Origin, list[Upstream]] = {}
    return await asyncio.get_running_loop().create_server(lambda: Client(pool), "127.0.0.1", port)


def main() -> None:
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]
    from ego2web_replay.wire.loop import loop_name, new_loop

    loop = new_loop()
    server = loop.run_until_complete(serve())
    print(server.sockets[0].getsockname()[1], loop_name(), flush=True)
    loop.run_forever()


if __name__ == "__main__":
    main()
