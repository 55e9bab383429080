"""HTTP/1.1 for the fast front end: a small, strict request parser and the response writer.

A request head is read up to its blank line (at most :data:`MAX_HEAD` bytes);
the body by Content-Length or chunked framing (``Expect: 100-continue`` is
answered). Requests on one connection are answered in order (pipelining works);
HTTP/1.0 without keep-alive, or ``Connection: close``, closes after the answer.
Anything malformed is answered 400 (431 for an oversized head) and the connection
closed. Responses are written exactly as :class:`~.reply.Reply` says: its
status line, its headers in order and case, its body with Content-Length or, when
the reply is chunked, in one chunk and the last chunk.

An answer may come later: ``answer`` then returns an awaitable of the reply (the
recording proxy waits for the upstream), and the connection reads no further
request until it is written. A ``101`` reply with a ``tunnel`` hands the rest of
the connection to that tunnel as raw bytes (a websocket passed through).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..web import reason_phrase
from .reply import Reply
from .stream import pump

__all__ = ["H1Handler", "ParseError", "MAX_HEAD", "MAX_BODY", "head_bytes", "write_reply", "error_reply"]

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class ParseError(Exception):
    """A request this server will not read; ``status`` is the answer (400, 413, 431, 501)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Request:
    """One parsed request: method, target, version and headers (names as sent) and body."""

    __slots__ = ("method", "target", "version", "headers", "body")

    def __init__(self, method: str, target: str, version: str, headers: list[tuple[str, str]]) -> None:
        self.method, self.target, self.version, self.headers = method, target, version, headers
        self.body = b""

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


def _parse_head(head: bytes) -> Request:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or not parts[1] or not set(parts[0]) <= _TOKEN_CHARS:
        raise ParseError(400, "malformed request line")
    version = parts[2].decode("ascii", "replace")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise ParseError(505 if version.startswith("HTTP/") else 400, f"unsupported version {version!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or not set(name) <= _TOKEN_CHARS:  # also refuses obsolete line folding
            raise ParseError(400, "malformed header line")
        headers.append((name.decode("ascii"), value.strip(b" \t").decode("utf-8", "surrogateescape")))
    target = parts[1].decode("utf-8", "surrogateescape")
    return Request(parts[0].decode("ascii"), target, version, headers)


def head_bytes(reply: Reply) -> bytes:
    """The status line and header block of ``reply`` (HTTP/1.1)."""
    lines = [f"HTTP/1.1 {reply.status} {reply.reason}"]
    lines += [f"{k}: {v}" for k, v in reply.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def error_reply(status: int, message: str, extra: Sequence[tuple[str, str]] = ()) -> Reply:
    """A short plain-text answer of the proxy itself (``message`` is its one line; ``extra`` headers)."""
    body = f"ego2web-replay: {message}\n".encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), *extra, ("Content-Length", str(len(body)))]
    return Reply(status, reason_phrase(status), headers, body, False, "error")


def settle(reply: Awaitable[Reply], done: Callable[[Reply], None]) -> None:
    """Run ``done`` with the reply once ``reply`` has it (a 502 if it raised: a bug, logged)."""

    def finished(fut: asyncio.Future[Reply]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("ego2web-replay: answering a request failed: %r", exc)
            done(error_reply(502, f"the proxy failed to answer: {type(exc).__name__}"))
            return
        done(fut.result())

    asyncio.ensure_future(reply).add_done_callback(finished)


def write_reply(write: Callable[[bytes], None], reply: Reply, *, head: bool = False,
                chunks_ok: bool = True) -> None:
    """Send ``reply``: its head, then (unless answering HEAD) its body framed as the reply says.

    A chunked reply to an HTTP/1.0 client (``chunks_ok`` false) goes unframed, and the
    caller closes the connection after it.
    """
    if head:
        write(head_bytes(reply))
    elif reply.chunked and chunks_ok:
        last = b"0\r\n\r\n"
        write(head_bytes(reply) + (b"%x\r\n%b\r\n" % (len(reply.body), reply.body) if reply.body else b"") + last)
    elif reply.chunked:
        kept = [(k, v) for k, v in reply.headers if k.lower() != "transfer-encoding"]
        write(head_bytes(reply._replace(headers=kept)) + reply.body)
    else:
        write(head_bytes(reply) + reply.body)


Answer = Callable[["Request"], tuple["Reply | Awaitable[Reply] | None", bool]]


class H1Handler:
    """Reads requests from a byte stream and answers each with ``answer(request) -> (reply, keep)``.

    ``reply`` is a :class:`Reply`, an awaitable of one, or None (the answer was written already).

    ``write`` sends bytes; ``close`` ends the connection once written; ``on_connect``
    takes over the connection after a CONNECT (with any bytes already read past it).
    """

    def __init__(self, answer: Answer, write: Callable[[bytes], None],
                 close: Callable[[], None], on_connect: Callable[[Request, bytes], None] | None = None) -> None:
        self.answer, self.write, self.close, self.on_connect = answer, write, close, on_connect
        self.buf = bytearray()
        self.pending: Request | None = None  # head read, body still coming
        self.continued = False
        self.done = False
        self.waiting = False  # an answer is on its way: read no further request until it is written
        self.tunnel: Any = None  # after a 101 with a tunnel: every byte goes to it
        self.streaming: Any = None  # a reply's body stream being sent (closed if the client goes)
        self.writable: Callable[[], Awaitable[None]] | None = None  # waits while the client is behind

    def feed(self, data: bytes) -> None:
        if self.tunnel is not None:
            if data:
                self.tunnel.send(data)
            return
        if self.done:
            return
        self.buf += data
        if self.waiting:
            return
        try:
            while not self.done and not self.waiting and self._step():
                pass
        except ParseError as e:
            self._fail(e.status, str(e))

    def lost(self) -> None:
        """The client's connection is gone: a body still streaming to it is stopped."""
        if self.streaming is not None:
            self.streaming.close()

    def _fail(self, status: int, message: str) -> None:
        body = f"ego2web-replay: bad request: {message}\n".encode()
        self.write(f"HTTP/1.1 {status} {reason_phrase(status)}\r\nContent-Type: text/plain\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        self.done = True
        self.close()

    def _step(self) -> bool:
        """Handle at most one request from the buffer; False when more bytes are needed."""
        req = self.pending
        if req is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    raise ParseError(431, "request head too large")
                if self.buf[:2] == b"\r\n":  # stray empty lines between requests are allowed
                    del self.buf[:2]
                    return True
                return False
            if end > MAX_HEAD:
                raise ParseError(431, "request head too large")
            head = bytes(self.buf[:end])
            del self.buf[: end + 4]
            if not head:
                return True
            req = _parse_head(head)
            self.pending, self.continued = req, False
        if req.method == "CONNECT":
            self.pending, self.done = None, True
            rest = bytes(self.buf)
            self.buf.clear()
            if self.on_connect is None:
                raise ParseError(400, "CONNECT inside a tunnel")
            self.on_connect(req, rest)
            return False
        body = self._body(req)
        if body is None:
            return False
        req.body = body
        self.pending = None
        reply, keep = self.answer(req)
        if reply is not None and not isinstance(reply, Reply) and inspect.isawaitable(reply):
            self.waiting = True
            settle(reply, lambda r: self._answered(req, r, keep))
            return False
        return self._written(req, reply, keep)  # type: ignore[arg-type]

    def _written(self, req: Request, reply: Reply | None, keep: bool) -> bool:
        """Write ``reply`` to ``req``; whether the connection reads on."""
        if reply is not None and reply.stream is not None and req.method != "HEAD":
            self._stream(req, reply, keep)
            return False
        if reply is not None:
            write_reply(self.write, reply, head=req.method == "HEAD", chunks_ok=req.version == "HTTP/1.1")
            if reply.status == 101 and reply.tunnel is not None:
                self.done, self.tunnel = True, reply.tunnel
                rest = bytes(self.buf)
                self.buf.clear()
                reply.tunnel.start(self.write, self.close)
                if rest:
                    reply.tunnel.send(rest)
                return False
        if not keep or not req.keep_alive or (reply is not None and reply.chunked and req.version != "HTTP/1.1"):
            self.done = True
            self.close()
            return False
        return True

    def _stream(self, req: Request, reply: Reply, keep: bool) -> None:
        """Send the head, then each piece of the reply's stream as it comes (see :mod:`.stream`);
        read on after a complete body that had a length or chunks, else close."""
        chunked = reply.chunked and req.version == "HTTP/1.1"
        headers = reply.headers if chunked or not reply.chunked else \
            [(k, v) for k, v in reply.headers if k.lower() != "transfer-encoding"]
        delimited = chunked or any(k.lower() == "content-length" for k, _ in headers)
        self.write(head_bytes(reply._replace(headers=headers)))
        self.waiting, self.streaming = True, reply.stream

        def send(data: bytes) -> None:
            self.write(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)

        def sent(fut: asyncio.Future[bool]) -> None:
            self.streaming = None
            if fut.cancelled() or not fut.result() or not delimited:
                self.done = True
                self.close()
                return
            if chunked:
                self.write(b"0\r\n\r\n")
            self.waiting = False
            if self._written(req, None, keep):
                self.feed(b"")

        asyncio.ensure_future(pump(reply.stream, send, self.writable)).add_done_callback(sent)

    def _answered(self, req: Request, reply: Reply, keep: bool) -> None:
        """A late answer: write it, then read on with what arrived meanwhile."""
        self.waiting = False
        if self._written(req, reply, keep):
            self.feed(b"")

    def _body(self, req: Request) -> bytes | None:
        te = (req.header("transfer-encoding") or "").lower()
        if te:
            if te.split(",")[-1].strip() != "chunked":
                raise ParseError(501, f"unsupported transfer-encoding {te!r}")
            return self._chunked(req)
        length = req.header("content-length")
        if length is None:
            return b""
        if not length.strip().isdigit():
            raise ParseError(400, "bad content-length")
        n = int(length)
        if n > MAX_BODY:
            raise ParseError(413, "request body too large")
        if len(self.buf) < n:
            self._continue(req)
            return None
        body = bytes(self.buf[:n])
        del self.buf[:n]
        return body

    def _continue(self, req: Request) -> None:
        if not self.continued and (req.header("expect") or "").lower() == "100-continue":
            self.continued = True
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _chunked(self, req: Request) -> bytes | None:
        """The whole chunked body once it is all in the buffer (trailers dropped), else None."""
        pos, parts = 0, list[bytes]()
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size_text = bytes(buf[pos:eol]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ParseError(400, "bad chunk size") from None
            if size < 0:
                raise ParseError(400, "bad chunk size")
            if size == 0:
                end = buf.find(b"\r\n\r\n", eol)  # trailers, then the blank line
                if buf[eol:eol + 4] == b"\r\n\r\n":
                    end = eol
                if end < 0:
                    break
                del buf[: end + 4]
                return b"".join(parts)
            start, stop = eol + 2, eol + 2 + size
            if len(buf) < stop + 2:
                break
            if buf[stop:stop + 2] != b"\r\n":
                raise ParseError(400, "bad chunk framing")
            parts.append(bytes(buf[start:stop]))
            pos = stop + 2
            if pos > MAX_BODY:
                raise ParseError(413, "request body too large")
        self._continue(req)
        return None

