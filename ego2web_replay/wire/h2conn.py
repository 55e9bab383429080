"""HTTP/2 for the fast front end (what Chromium speaks over TLS when ALPN offers ``h2``), on the h2 library.

Each stream's request (pseudo-headers, headers, body) is answered as soon as the
client ends it; the reply's headers go lower-cased without the connection-specific
ones HTTP/2 forbids (Connection, Transfer-Encoding, Keep-Alive ...), and its body
as DATA frames within the peer's flow-control windows: what does not fit waits for
a WINDOW_UPDATE. A reply archived chunked keeps its bytes (HTTP/2 has no chunked
framing, so it goes without Content-Length, as mitmproxy sends it). A reply that
comes later (an awaitable: the recording proxy waits for the upstream) is sent when
it arrives; other streams go on meanwhile. A request body over :data:`~.h1.MAX_BODY`
is answered 413 at once and its stream reset (the rest of it is not read into memory).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from . import h1
from .h1 import error_reply, settle
from .reply import Reply
from .stream import MAX_UNSENT, pump

__all__ = ["H2Handler"]

_FORBIDDEN = frozenset({b"connection", b"transfer-encoding", b"keep-alive", b"proxy-connection", b"upgrade",
                        b"te"})
Answer = Callable[[str, str, list[tuple[str, str]], bytes], "Reply | Awaitable[Reply]"]


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


class H2Handler:
    """One HTTP/2 connection: ``answer(method, url, headers, body)`` gives each stream's reply.

    ``scheme``/``authority`` fill in what a request leaves out (the tunnel's host).
    """

    def __init__(self, answer: Answer, write: Callable[[bytes], None], close: Callable[[], None], *,
                 authority: str) -> None:
        self.answer, self.write, self.close, self.authority = answer, write, close, authority
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_outbound_headers=False))
        self.conn.initiate_connection()
        self.requests: dict[int, tuple[list[tuple[bytes, bytes]], bytearray]] = {}
        self.sending: dict[int, memoryview] = {}
        self.streams: dict[int, Any] = {}  # streams whose body is still coming (wire/stream.py)
        self.caught_up: dict[int, asyncio.Event] = {}  # set while a stream's unsent bytes are few
        self.writable: Callable[[], Awaitable[None]] | None = None  # waits while the connection is behind
        self.done = False
        self.write(self.conn.data_to_send())

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.write(self.conn.data_to_send())
            self._end()
            return
        for event in events:
            self._event(event)
        out = self.conn.data_to_send()
        if out:
            self.write(out)

    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.requests[event.stream_id] = (list(event.headers or []), bytearray())  # type: ignore[arg-type]
            if event.stream_ended is not None:
                self._respond(event.stream_id)
        elif isinstance(event, h2.events.DataReceived):
            entry = self.requests.get(event.stream_id)  # type: ignore[arg-type]
            if event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)  # type: ignore[arg-type]
            if entry is not None:
                entry[1].extend(event.data or b"")
                if len(entry[1]) > h1.MAX_BODY:
                    self._too_large(event.stream_id)  # type: ignore[arg-type]
        elif isinstance(event, h2.events.StreamEnded):
            if event.stream_id in self.requests:
                self._respond(event.stream_id)  # type: ignore[arg-type]
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            for stream_id in list(self.sending):
                self._flush(stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)  # type: ignore[arg-type]
            self.sending.pop(event.stream_id, None)  # type: ignore[arg-type]
            stream = self.streams.pop(event.stream_id, None)  # type: ignore[arg-type]
            if stream is not None:
                stream.close()
            self._caught_up(event.stream_id)  # type: ignore[arg-type]
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._end()

    def _respond(self, stream_id: int) -> None:
        raw, body = self.requests.pop(stream_id)
        pseudo = {_text(k): _text(v) for k, v in raw if k.startswith(b":")}
        headers = [(_text(k), _text(v)) for k, v in raw if not k.startswith(b":")]
        method = pseudo.get(":method", "GET").upper()
        authority = pseudo.get(":authority") or self.authority
        url = f"{pseudo.get(':scheme', 'https')}://{authority}{pseudo.get(':path', '/')}"
        reply = self.answer(method, url, headers, bytes(body))
        if not isinstance(reply, Reply) and inspect.isawaitable(reply):
            settle(reply, lambda r: self._late(stream_id, method, r))
            return
        self._send(stream_id, method, reply)

    def _too_large(self, stream_id: int) -> None:
        """Answer 413 and reset the stream: the client stops sending, nothing more is kept."""
        del self.requests[stream_id]
        self._send(stream_id, "POST", error_reply(413, "request body too large"))
        try:
            self.conn.reset_stream(stream_id)  # NO_ERROR: the answer is complete (RFC 9113, 8.1)
        except h2.exceptions.H2Error:
            pass

    def _late(self, stream_id: int, method: str, reply: Reply) -> None:
        if self.done:
            if reply.stream is not None:
                reply.stream.close()  # never sent: its source is let go
            return
        self._send(stream_id, method, reply)
        out = self.conn.data_to_send()
        if out:
            self.write(out)

    def _send(self, stream_id: int, method: str, reply: Reply) -> None:
        fields = [(b":status", str(reply.status).encode())]
        for k, v in reply.headers:
            name = k.lower().encode("latin-1", "replace")
            if name not in _FORBIDDEN:
                fields.append((name, v.encode("latin-1", "replace")))
        try:
            if reply.stream is not None and method != "HEAD":
                self.conn.send_headers(stream_id, fields)
                self._stream(stream_id, reply.stream)
                return
            if method == "HEAD" or not reply.body:
                self.conn.send_headers(stream_id, fields, end_stream=True)
                return
            self.conn.send_headers(stream_id, fields)
        except h2.exceptions.H2Error:  # the stream went away meanwhile
            if reply.stream is not None:
                reply.stream.close()
            return
        self.sending[stream_id] = memoryview(reply.body)
        self._flush(stream_id)

    def _stream(self, stream_id: int, stream: Any) -> None:
        """Send the stream's pieces as they come, within the windows; a cut body resets the stream."""
        self.streams[stream_id] = stream
        self.sending[stream_id] = memoryview(b"")

        def send(data: bytes) -> None:
            if self.done or stream_id not in self.sending:
                return
            self.sending[stream_id] = memoryview(self.sending[stream_id].tobytes() + data)
            self._flush(stream_id)
            self._out()

        caught_up = self.caught_up[stream_id] = asyncio.Event()
        caught_up.set()

        async def ready() -> None:
            await caught_up.wait()
            if self.writable is not None:
                await self.writable()

        def sent(fut: asyncio.Future[bool]) -> None:
            self.streams.pop(stream_id, None)
            self.caught_up.pop(stream_id, None)
            if self.done or stream_id not in self.sending:
                return
            if fut.cancelled() or not fut.result():
                self.sending.pop(stream_id, None)
                try:
                    self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
                except h2.exceptions.H2Error:
                    pass
            else:
                self._flush(stream_id)
            self._out()

        asyncio.ensure_future(pump(stream, send, ready)).add_done_callback(sent)

    def lost(self) -> None:
        """The connection is gone: every body still streaming on it is stopped."""
        for stream in list(self.streams.values()):
            stream.close()
        self.streams.clear()
        for event in self.caught_up.values():
            event.set()

    def _caught_up(self, stream_id: int) -> None:
        """Let a stream's next piece go when few of its bytes wait for the window (or it is gone)."""
        event = self.caught_up.get(stream_id)
        if event is not None:
            data = self.sending.get(stream_id)
            if data is None or len(data) <= MAX_UNSENT:
                event.set()
            else:
                event.clear()

    def _out(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.write(out)

    def _flush(self, stream_id: int) -> None:
        """Send as much of the stream's body as the windows allow; end it when all is sent."""
        data = self.sending[stream_id]
        try:
            while data:
                size = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size,
                           len(data))
                if size <= 0:
                    break
                self.conn.send_data(stream_id, data[:size].tobytes())
                data = data[size:]
            if not data and stream_id in self.streams:
                self.sending[stream_id] = data  # more to come
            elif not data:
                self.conn.end_stream(stream_id)
                del self.sending[stream_id]
            else:
                self.sending[stream_id] = data
        except h2.exceptions.H2Error:
            self.sending.pop(stream_id, None)
        self._caught_up(stream_id)

    def _end(self) -> None:
        self.done = True
        self.lost()
        self.close()
