"""HTTP/2 for the fast front end (what Chromium speaks over TLS when ALPN offers ``h2``), on the h2 library.

Each stream's request (pseudo-headers, headers, body) is answered as soon as the
client ends it; the reply's headers go lower-cased without the connection-specific
ones HTTP/2 forbids (Connection, Transfer-Encoding, Keep-Alive ...), and its body
as DATA frames within the peer's flow-control windows: what does not fit waits for
a WINDOW_UPDATE. A reply archived chunked keeps its bytes (HTTP/2 has no chunked
framing, so it goes without Content-Length, as mitmproxy sends it). A reply that
comes later (an awaitable: the recording proxy waits for the upstream) is sent when
it arrives; other streams go on meanwhile, and a stream the client resets cancels its
answer (the recorder's upstream fetch with it). A request body over :data:`~.h1.MAX_BODY`
is answered 413 at once and its stream reset (the rest of it is not read into memory). A request
whose method, :path or :authority holds what no HTTP/1.1 request line may (a space, a control) is
answered 400 (h2 itself refuses CR, LF and NUL in fields, conflicting Content-Lengths and a Host
that differs from :authority). At most ``max_streams`` streams are open at once
(SETTINGS_MAX_CONCURRENT_STREAMS, in force from the first frame; a client that opens more is sent
GOAWAY, as h2 treats it).
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
import h2.settings

from . import h1
from .h1 import error_reply, malformed, settle
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

    ``authority`` fills in what a request leaves out (no :authority, no Host: the tunnel's host).
    """

    def __init__(self, answer: Answer, write: Callable[[bytes], None], close: Callable[[], None], *,
                 authority: str, max_streams: int = 100) -> None:
        self.answer, self.write, self.close, self.authority = answer, write, close, authority
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_outbound_headers=False))
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.conn.DEFAULT_MAX_HEADER_LIST_SIZE})
        self.conn.initiate_connection()
        self.requests: dict[int, tuple[list[tuple[bytes, bytes]], bytearray]] = {}
        self.sending: dict[int, memoryview] = {}
        self.waiting: dict[int, asyncio.Future[Reply]] = {}  # answers still to come, by stream
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
        if self._open_block() > h1.MAX_HEAD:  # a header block past what an HTTP/1.1 head may be (RFC 9113 10.5.1)
            self.conn.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
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
            waiting = self.waiting.pop(event.stream_id, None)  # type: ignore[arg-type]
            if waiting is not None:
                waiting.cancel()  # nobody will read the answer: stop making it
            stream = self.streams.pop(event.stream_id, None)  # type: ignore[arg-type]
            if stream is not None:
                stream.close()  # the body's recording ends as the client left it (wire/stream.py)
            self._caught_up(event.stream_id)  # type: ignore[arg-type]
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._end()

    def _respond(self, stream_id: int) -> None:
        raw, body = self.requests.pop(stream_id)
        pseudo = {_text(k): _text(v) for k, v in raw if k.startswith(b":")}
        headers = [(_text(k), _text(v)) for k, v in raw if not k.startswith(b":")]
        method = pseudo.get(":method", "")  # methods are case-sensitive (RFC 9110 9.1): as sent
        authority = pseudo.get(":authority") or next((v for k, v in headers if k == "host"), None) or self.authority
        path, scheme = pseudo.get(":path", ""), pseudo.get(":scheme", "")
        why: str | None = None
        if method == "CONNECT" or ":protocol" in pseudo:  # no tunnel in a tunnel; extended CONNECT not offered
            why = "CONNECT over HTTP/2"
        elif scheme not in ("http", "https"):  # what this proxy carries
            why = f"the scheme {scheme[:20]!r}"
        elif not path.startswith("/"):  # RFC 9113 8.3.1 (glued to the authority, it would name another)
            why = f"a :path that is not a path: {path[:40]!r}"
        url = f"{scheme}://{authority}{path}"
        why = why or malformed(method, url, headers)
        if why is not None:  # what h2 lets through but no HTTP/1.1 line may hold (a space in :path ...)
            self._send(stream_id, method, error_reply(400, f"bad request: {why}"))
            return
        reply = self.answer(method, url, headers, bytes(body))
        if isinstance(reply, asyncio.Future) or (not isinstance(reply, Reply) and inspect.isawaitable(reply)):
            future = self.waiting[stream_id] = reply if isinstance(reply, asyncio.Future) else asyncio.ensure_future(reply)
            settle(future, lambda r: self._late(stream_id, method, r))
            return
        self._send(stream_id, method, reply)

    def _too_large(self, stream_id: int) -> None:
        self.refuse(stream_id, error_reply(413, "request body too large"))

    def refuse(self, stream_id: int, reply: Reply) -> None:
        """Answer ``reply`` and reset the stream: the client stops sending, nothing more is kept."""
        del self.requests[stream_id]
        self._send(stream_id, "POST", reply)
        try:
            self.conn.reset_stream(stream_id)  # NO_ERROR: the answer is complete (RFC 9113, 8.1)
        except h2.exceptions.H2Error:
            pass

    def _late(self, stream_id: int, method: str, reply: Reply) -> None:
        self.waiting.pop(stream_id, None)
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

    # -- the seam of the wire's bounds and timeouts (wire/pacing.py) ------------------------------
    def phase(self) -> str:
        """``body`` (a stream's request still coming), ``answering`` (answers to come, or a streamed
        body waiting for its next piece), ``sending`` (answers waiting for the client's flow-control
        windows) or ``idle``."""
        if self.requests:
            return "body"
        if self.waiting:
            return "answering"
        if any(data or sid not in self.streams for sid, data in self.sending.items()):
            return "sending"
        return "answering" if self.streams else "idle"  # a streamed body all sent, more to come

    def buffered(self) -> int:
        """Bytes of request bodies held for streams still coming, and of a header block still open."""
        return sum(len(body) for _, body in self.requests.values()) + self._open_block()

    def _open_block(self) -> int:
        """Bytes of the header block h2 holds until its END_HEADERS (a HEADERS frame and its CONTINUATIONs)."""
        pending = getattr(self.conn.incoming_buffer, "_headers_buffer", None)  # (h2 4.x's frame buffer)
        return sum(len(f.data) for f in pending) if pending else 0

    def refuse_largest(self, reply: Reply) -> None:
        """Refuse (``reply``, then a reset) the stream holding the largest request body."""
        if self.requests:
            self.refuse(max(self.requests, key=lambda sid: len(self.requests[sid][1])), reply)
            self.write(self.conn.data_to_send())

    def goaway(self) -> None:
        """Tell the client this connection takes no more streams, and close it."""
        if not self.done:
            self.conn.close_connection()
            self.write(self.conn.data_to_send())
            self._end()

    def cancel(self) -> None:
        """The connection is gone: cancel every answer still to come."""
        for future in self.waiting.values():
            future.cancel()
        self.waiting.clear()
