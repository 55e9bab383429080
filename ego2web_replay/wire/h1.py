"""HTTP/1.1 for the fast front end: a small, strict request parser and the response writer.

A request head is read up to its blank line (at most :data:`MAX_HEAD` bytes);
the body by Content-Length or chunked framing (``Expect: 100-continue`` is
answered). Requests on one connection are answered in order (pipelining works);
HTTP/1.0 without keep-alive, or ``Connection: close``, closes after the answer.

Strict as RFC 9112 and 9110 ask of a proxy, so that no second request or header can
hide inside the first: a method and field names that are tokens; CR, LF, NUL and the
other controls refused in the target and in every field (no bare CR or LF, no
obsolete line folding); a target in origin-, absolute- or (CONNECT only) authority-form, every
authority (a CONNECT's, an absolute target's, the Host) ``host[:port]`` in ASCII; one Host at most; one Content-Length at most, of ASCII
digits; Transfer-Encoding only as one final ``chunked`` (400 otherwise, 501 for
another coding before it), never beside a Content-Length. Chunked bodies are read
incrementally (each byte looked at once), a chunk's declared size checked against
:data:`MAX_BODY` before any of it is kept; trailers are checked, then dropped.
Anything refused is answered 400 (413 past the body cap, 431 for an oversized head,
501, 505) and the connection closed. Responses are written exactly as :class:`~.reply.Reply` says: its
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
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..web import reason_phrase
from .reply import Reply
from .stream import pump

__all__ = ["H1Handler", "ParseError", "MAX_HEAD", "MAX_BODY", "head_bytes", "write_reply", "error_reply", "malformed"]

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
#: HTTP/1.1 grammar (RFC 9110 5.1, 5.5; RFC 9112 7.1), shared with the recorder's reading of responses
#: (:func:`ego2web_replay.recorder.upstream.parse_response_head`): a token, a field line, a chunk-size line.
TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
FIELD_LINE = TOKEN + rb":[\t\x20-\x7e\x80-\xff]*"
#: A request line: a token method, a target of visible characters (obs-text kept), a version.
_REQUEST_LINE = re.compile(rb"(" + TOKEN + rb") ([!-~\x80-\xff]+) (HTTP/[0-9]\.[0-9])")
#: A whole head: that request line, then field lines (RFC 9110 5.1, 5.5): a token name, a colon, a value
#: of visible characters, spaces, tabs and obs-text. CR, LF, NUL and the other controls are refused
#: anywhere (no bare CR or LF, no obsolete line folding).
_HEAD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [!-~\x80-\xff]+ HTTP/[0-9]\.[0-9](?:\r\n" + FIELD_LINE + rb")*")
_FIELD_LINES = re.compile(rb"(?:" + FIELD_LINE + rb"\r\n)*")
_FIELD = re.compile(r"([^:]+):[ \t]*([^\r]*)\r\n")
CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[\t\x20-\x7e\x80-\xff]*)?")
_MAX_CHUNK_LINE = 4096
_BARE_LF = re.compile(rb"(?<!\r)\n")
_MAX_DIGITS = 19  # a Content-Length longer than this is past any cap (and past int()'s digit limit)
#: An authority (RFC 3986 3.2): a reg-name of ASCII (an IDN as A-labels) or an IP literal, then perhaps a port.
_AUTHORITY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::([0-9]{0,5}))?")
#: A target's scheme and authority in absolute-form (the rest is checked as any target is).
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


def valid_authority(text: str, *, port: bool = False) -> bool:
    """Whether ``text`` is ``host[:port]`` in ASCII with a port of at most 65535 (``port``: one is required)."""
    m = _AUTHORITY.fullmatch(text)
    if m is None or (port and not (m.group(2) and m.group(1))):
        return False
    return not m.group(2) or int(m.group(2)) <= 65535


def _valid_target(method: str, target: str) -> bool:
    """Origin-form (``/path``), absolute-form (``scheme://authority/path``), ``*`` for OPTIONS, and for
    CONNECT only ``host:port`` (RFC 9112 3.2)."""
    if method == "CONNECT":
        return valid_authority(target, port=True)
    if "#" in target:  # a request target holds no fragment (RFC 9112 3.2); one read into an authority misleads
        return False
    if target.startswith("/"):
        return True
    m = _ABSOLUTE.match(target)
    if m is not None:  # only what this proxy carries: http and https (RFC 9112 3.2.2), to a host
        return target[:m.start(1)].lower() in ("http://", "https://") and _has_host(m.group(1))
    return target == "*" and method == "OPTIONS"


def _has_host(authority: str) -> bool:
    """Whether ``authority`` is a valid ``host[:port]`` with a host (not empty, not only a port)."""
    m = _AUTHORITY.fullmatch(authority)
    return m is not None and bool(m.group(1)) and valid_authority(authority)
TOKEN_RE = re.compile(TOKEN)
CTL_RE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


_TARGET_RE = re.compile(r"[^\x00-\x20\x7f]+")


def malformed(method: str, url: str, headers: Sequence[tuple[str, str]]) -> str | None:
    """Why a request (from HTTP/1.1 or HTTP/2) cannot go on the HTTP/1.1 wire as it is, or None.

    A method that is not a token, a URL with a space or a control (or no ASCII ``host[:port]``), a field
    name that is not a token or a value with CR, LF, NUL or another control (bytes that would end the line
    they stand in), more than one Host or one that is no ``host[:port]``.
    """
    if TOKEN_RE.fullmatch(method.encode("utf-8", "surrogateescape")) is None:
        return "a method that is not a token"
    m = _ABSOLUTE.match(url)
    if _TARGET_RE.fullmatch(url) is None or m is None or not _has_host(m.group(1)):
        return "a space or a control character in the URL, or no host[:port] in ASCII"
    if "#" in url:  # a request target holds no fragment (RFC 9112 3.2)
        return "a fragment (#) in the request target"
    hosts = 0
    for k, v in headers:
        if TOKEN_RE.fullmatch(k.encode("utf-8", "surrogateescape")) is None:
            return f"a field name that is not a token: {k[:40]!r}"
        if CTL_RE.search(v) is not None:
            return f"CR, LF, NUL or another control in the field {k[:40]!r}"
        if k.lower() == "host":
            hosts += 1
            if hosts > 1 or not _has_host(v):
                return "more than one Host, or one that is no host[:port] in ASCII"
    return None


class ParseError(Exception):
    """A request this server will not read; ``status`` is the answer (400, 413, 431, 501)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Request:
    """One parsed request: method, target, version and headers (names as sent) and body.

    ``lowered`` is the head's field lines in lower case, each after a ``\n`` (values hold none): what
    :meth:`header` looks in first, so asking for a field the request lacks costs one substring search.
    ``raw`` is the head's bytes as read (up to, not with, its blank line), when it was read from the wire.
    """

    __slots__ = ("method", "target", "version", "headers", "lowered", "body", "raw")

    def __init__(self, method: str, target: str, version: str, headers: list[tuple[str, str]],
                 lowered: str | None = None, raw: bytes = b"") -> None:
        self.method, self.target, self.version, self.headers = method, target, version, headers
        self.lowered = lowered if lowered is not None else "".join(f"\n{k.lower()}:" for k, _ in headers)
        self.body = b""
        self.raw = raw

    def header(self, name: str) -> str | None:
        """The first value of the field ``name`` (lower case), or None."""
        if f"\n{name}:" not in self.lowered:
            return None
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def values(self, name: str) -> list[str]:
        """Every value of the field ``name`` (lower case), in order."""
        if f"\n{name}:" not in self.lowered:
            return []
        return [v for k, v in self.headers if k.lower() == name]

    def count(self, name: str) -> int:
        """How many fields ``name`` (lower case) the request has."""
        return self.lowered.count(f"\n{name}:")

    @property
    def keep_alive(self) -> bool:
        if "\nconnection:" not in self.lowered:
            return self.version != "HTTP/1.0"
        tokens = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


#: Heads read and found valid, by their bytes: a client asks for the same URL with the same head
#: again and again (a page load, a benchmark), and the same bytes parse the same way. Kept for heads
#: of at most :data:`_MEMO_HEAD` bytes, :data:`_MEMO_HEADS` of them (then cleared); as tuples of
#: strings (untracked by the collector). A refused head is never kept: it is refused each time.
_HEADS: dict[bytes, tuple[str, str, str, tuple[tuple[str, str], ...], str]] = {}
_MEMO_HEAD = 4096
_MEMO_HEADS = 4096


#: The field lines of heads read and found valid (from the CRLF ending the request line), by their bytes:
#: what a client sends with each request to one site is mostly the same lines, the request line
#: (the URL) aside, so a new URL with those lines has only its request line read. As :data:`_HEADS`.
_BLOCKS: dict[bytes, tuple[tuple[tuple[str, str], ...], str]] = {}


def _parse_head(head: bytes) -> Request:
    """The request of one head (up to, not with, its blank line), refused as RFC 9112 and 9110 say."""
    known = _HEADS.get(head)
    if known is not None:
        method, target, version, fields, lowered = known
        return Request(method, target, version, list(fields), lowered, head)
    cut = head.find(b"\r\n")
    block = _BLOCKS.get(head[cut:]) if cut > 0 else None
    req = _read_head(head) if block is None else _read_line(head[:cut], block)
    req.raw = head
    if len(head) <= _MEMO_HEAD:
        if len(_HEADS) >= _MEMO_HEADS:
            _HEADS.clear()
        _HEADS[head] = (req.method, req.target, req.version, tuple(req.headers), req.lowered)
        if block is None and cut > 0:
            if len(_BLOCKS) >= _MEMO_HEADS:
                _BLOCKS.clear()
            _BLOCKS[head[cut:]] = (tuple(req.headers), req.lowered)
    return req


def _read_line(line: bytes, block: tuple[tuple[tuple[str, str], ...], str]) -> Request:
    """:func:`_read_head` of a head whose field lines were read before (``block``: as they were read then,
    valid as a whole, Host included): its request line is read as the whole head's would be."""
    if _REQUEST_LINE.fullmatch(line) is None:
        raise ParseError(400, "malformed request line")
    method, target, version = line.decode("utf-8", "surrogateescape").split(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise ParseError(505, f"unsupported version {version!r}")
    if not _valid_target(method, target):
        raise ParseError(400, "CONNECT wants host:port (an ASCII host, an IDN as A-labels, or an IP)"
                         if method == "CONNECT" else "malformed request target")
    return Request(method, target, version, list(block[0]), block[1])


def _read_head(head: bytes) -> Request:
    """:func:`_parse_head` the first time these bytes come."""
    if _HEAD.fullmatch(head) is None:
        if _REQUEST_LINE.fullmatch(head.partition(b"\r\n")[0]) is None:
            raise ParseError(400, "malformed request line")
        raise ParseError(400, "malformed header line (a name that is not a token, or CR, LF or NUL in a field)")
    text = head.decode("utf-8", "surrogateescape")
    line, _, block = text.partition("\r\n")
    method, target, version = line.split(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise ParseError(505, f"unsupported version {version!r}")
    headers: list[tuple[str, str]] = _FIELD.findall(block + "\r\n") if block else []
    if " \r" in block or "\t\r" in block or text.endswith((" ", "\t")):  # trailing whitespace: not the value
        headers = [(k, v.rstrip(" \t")) for k, v in headers]
    req = Request(method, target, version, headers, "\n" + block.lower())  # values hold no LF: each "\n" starts a line
    if not _valid_target(method, target):
        raise ParseError(400, "CONNECT wants host:port (an ASCII host, an IDN as A-labels, or an IP)"
                         if method == "CONNECT" else "malformed request target")
    hosts = req.count("host")
    if hosts > 1:
        raise ParseError(400, "more than one Host")
    if hosts and not valid_authority(req.header("host") or ""):
        raise ParseError(400, "a Host that is no host[:port] (an ASCII host, an IDN as A-labels, or an IP)")
    return req


def _content_length(req: Request) -> int | None:
    """The request's Content-Length (None: none); conflicting or non-digit values are refused."""
    values = req.values("content-length")
    if not values:
        return None
    if len(values) > 1:
        raise ParseError(400, "more than one Content-Length")
    text = values[0]
    if not text or not text.isascii() or not text.isdigit():
        raise ParseError(400, "bad content-length")
    if len(text) > _MAX_DIGITS:
        raise ParseError(413, "request body too large")
    return int(text)


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


_TAKERS: dict[asyncio.Future[Reply], Callable[[Reply], None]] = {}


def settle(reply: Awaitable[Reply], done: Callable[[Reply], None]) -> None:
    """Run ``done`` with the reply once ``reply`` has it (a 502 if it raised: a bug, logged)."""
    future = reply if isinstance(reply, asyncio.Future) else asyncio.ensure_future(reply)
    given = False

    def take(r: Reply) -> None:
        nonlocal given
        given = True
        done(r)

    _TAKERS[future] = take

    def finished(fut: asyncio.Future[Reply]) -> None:
        _TAKERS.pop(fut, None)
        if given or fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("ego2web-replay: answering a request failed: %r", exc)
            done(error_reply(502, f"the proxy failed to answer: {type(exc).__name__}"))
            return
        done(fut.result())

    future.add_done_callback(finished)


def hand_over(reply: Reply) -> Reply:
    """Inside the task computing a late answer: give ``reply`` to its connection now, not a turn later."""
    task = asyncio.current_task()
    take = _TAKERS.pop(task, None) if task is not None else None  # type: ignore[call-overload]
    if take is not None:
        take(reply)
    return reply


def give(future: asyncio.Future[Reply], reply: Reply) -> None:
    """Answer with ``reply`` a future answer that no task computes: to its connection now (the taker
    :func:`settle` left), then as the future's result."""
    take = _TAKERS.pop(future, None)
    if take is not None:
        take(reply)
    if not future.done():
        future.set_result(reply)


def write_reply(write: Callable[[bytes], None], reply: Reply, *, head: bool = False,
                chunks_ok: bool = True) -> None:
    """Send ``reply``: its head, then (unless answering HEAD) its body framed as the reply says.

    A chunked reply to an HTTP/1.0 client (``chunks_ok`` false) goes unframed, and the
    caller closes the connection after it.
    """
    if reply.head is not None and not reply.chunked:  # serialised once (the replay's reply cache)
        write(reply.head if head else reply.head + reply.body)
    elif head:
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
    ``quick``, when set, is offered each head's bytes before they are parsed: it answers the request
    itself (an answer given before to the very same head, ``Reply.again``) and says True, or says
    False having done nothing, and the head is read and answered as usual. ``early``, when set, is
    offered them too (after ``quick``): it may send the request on before it is read (the recorder's
    upstream request, :meth:`.RecordFront.early`) and return what to call once the head has been read
    and answered or refused; the head is read and answered as usual either way.
    """

    def __init__(self, answer: Answer, write: Callable[[bytes], None],
                 close: Callable[[], None], on_connect: Callable[[Request, bytes], None] | None = None) -> None:
        self.answer, self.write, self.close, self.on_connect = answer, write, close, on_connect
        self.buf = bytearray()
        self.scanned = 0  # bytes of an unfinished head looked at for a bare LF
        self.pending: Request | None = None  # head read, body still coming
        self.continued = False
        self.chunks: list[bytes] = []  # a chunked body so far (whole chunks), its size, and what the current
        self.chunk_total, self.chunk_left = 0, -1  # chunk still needs (-1: its size line next; -2: trailers)
        self.done = False
        self.waiting = False  # an answer is on its way: read no further request until it is written
        self.tunnel: Any = None  # after a 101 with a tunnel: every byte goes to it
        self.streaming: Any = None  # a reply's body stream being sent (closed if the client goes)
        self.writable: Callable[[], Awaitable[None]] | None = None  # waits while the client is behind
        self.quick: Callable[[bytes], bool] | None = None  # answers a head seen before, or says False
        # sends a head's request on before it is read, or says None; else what to call once it is answered
        self.early: Callable[[bytes], Callable[[], None] | None] | None = None

    # -- the seam of the wire's bounds and timeouts (wire/pacing.py) ------------------------------
    def phase(self) -> str:
        """``tunnel``, ``done``, ``answering`` (an answer on its way), ``body`` (a head read, its body
        coming), ``head`` (bytes of a head read) or ``idle`` (nothing held)."""
        if self.tunnel is not None:
            return "tunnel"
        if self.done:
            return "done"
        if self.waiting:
            return "answering"
        if self.pending is not None:
            return "body"
        return "head" if self.buf else "idle"

    def buffered(self) -> int:
        """Bytes read and held, not yet handed on (a body coming, pipelined requests)."""
        return len(self.buf)

    def feed(self, data: bytes) -> None:
        if self.tunnel is not None:
            if data:
                self.tunnel.send(data)
            return
        if self.done:
            return
        over = None
        if (not self.buf and self.pending is None and not self.waiting
                and data.find(b"\r\n\r\n") == len(data) - 4 > 0 and not data.startswith(b"\r\n")):
            if self.quick is not None and self.quick(data[:-4]):
                return  # one whole head, answered as before (what a kept-alive client mostly sends)
            if self.early is not None:
                over = self.early(data[:-4])
        self.buf += data
        try:
            while not self.done and not self.waiting and self._step():
                pass
        except ParseError as e:
            self._fail(e.status, str(e))
        finally:
            if over is not None:
                over()

    def lost(self) -> None:
        """The client's connection is gone: a body still streaming to it is stopped."""
        if self.streaming is not None:
            self.streaming.close()

    def _fail(self, status: int, message: str) -> None:
        body = f"ego2web-replay: bad request: {message}\n".encode()
        self.write(f"HTTP/1.1 {status} {reason_phrase(status)}\r\nContent-Type: text/plain\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        self.done = True
        self.buf.clear()  # nothing more is read from a refused connection: what came is let go at once
        self.chunks = []
        self.close()

    def _step(self) -> bool:
        """Handle at most one request from the buffer; False when more bytes are needed."""
        req = self.pending
        if req is None:
            while self.buf[:2] == b"\r\n":  # empty lines before a request line are ignored (RFC 9112 2.2)
                del self.buf[:2]
                self.scanned = max(0, self.scanned - 2)
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    raise ParseError(431, "request head too large")
                # a line ended by LF alone: refused now, not when the head times out (each byte looked at once)
                if _BARE_LF.search(self.buf, max(0, self.scanned - 1)):
                    raise ParseError(400, "a line of the request head ends with LF alone")
                self.scanned = len(self.buf)
                return False
            self.scanned = 0
            if end > MAX_HEAD:
                raise ParseError(431, "request head too large")
            head = bytes(self.buf[:end])
            del self.buf[: end + 4]
            if not head:
                return True
            if self.quick is not None and self.quick(head):
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
        if isinstance(reply, asyncio.Future) or (reply is not None and not isinstance(reply, Reply) and inspect.isawaitable(reply)):
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
        if chunked or not reply.chunked:
            headers = reply.headers
            self.write(head_bytes(reply))
        else:  # chunks to an HTTP/1.0 client: the body goes unframed, to the connection's end
            headers = [(k, v) for k, v in reply.headers if k.lower() != "transfer-encoding"]
            self.write(head_bytes(reply._replace(headers=headers)))
        self.waiting, self.streaming = True, reply.stream
        delimited = chunked or any(k.lower() == "content-length" for k, _ in headers)  # (after the head: it waits)

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
                self._read_on()

        asyncio.ensure_future(pump(reply.stream, send, self.writable)).add_done_callback(sent)

    def _answered(self, req: Request, reply: Reply, keep: bool) -> None:
        """A late answer: write it, then read on with what arrived meanwhile."""
        self.waiting = False
        if self._written(req, reply, keep):
            self._read_on()

    def _read_on(self) -> None:
        """After an answer: read what came meanwhile as if it came now, so that a client's next head, sent
        as soon as it had the answer's last byte (before the loop's turn that ends the answer here), is
        offered to ``quick`` and ``early`` as any head that comes whole."""
        held, self.buf = self.buf, bytearray()
        self.feed(bytes(held))

    def _body(self, req: Request) -> bytes | None:
        if "\ntransfer-encoding:" not in req.lowered and "\ncontent-length:" not in req.lowered:
            return b""  # no framing field: no body (what most requests are)
        te = req.values("transfer-encoding")
        length = _content_length(req)
        if te:
            if req.version == "HTTP/1.0":  # RFC 9112 6.1: faulty framing from a 1.0 client; the connection ends
                raise ParseError(400, "Transfer-Encoding in an HTTP/1.0 request")
            codings = [t.strip().lower() for t in ",".join(te).split(",") if t.strip()]  # (empty elements: none)
            if codings != ["chunked"]:  # RFC 9112 6.3: no final chunked is a 400; another coding before it, 501
                known = codings[-1:] == ["chunked"] and codings.count("chunked") == 1
                raise ParseError(501 if known else 400, f"unsupported transfer-encoding {', '.join(te)!r}")
            if length is not None:  # RFC 9112 6.1: a request with both is how requests are smuggled
                raise ParseError(400, "both Transfer-Encoding and Content-Length")
            return self._chunked(req)
        if length is None:
            return b""
        if length > MAX_BODY:
            raise ParseError(413, "request body too large")
        if len(self.buf) < length:
            self._continue(req)
            return None
        body = bytes(self.buf[:length])
        del self.buf[:length]
        return body

    def _continue(self, req: Request) -> None:
        if not self.continued and (req.header("expect") or "").lower() == "100-continue":
            self.continued = True
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _chunked(self, req: Request) -> bytes | None:
        """The whole chunked body once it has all come (trailers checked, then dropped), else None.

        Incremental: whole chunks leave the buffer as they come and are kept in ``self.chunks``,
        so every byte is looked at once (1-byte chunks cost what one large chunk does). A chunk's
        declared size is checked against :data:`MAX_BODY` before any of it is kept.
        """
        buf = self.buf
        while True:
            if self.chunk_left == -2:  # the last chunk came: its trailer section is next
                return self._trailers()
            if self.chunk_left == -1:  # the chunk-size line comes next
                eol = buf.find(b"\r\n", 0, _MAX_CHUNK_LINE + 2)
                if eol < 0:
                    if len(buf) > _MAX_CHUNK_LINE:
                        raise ParseError(400, "bad chunk size")
                    break
                m = CHUNK_LINE.fullmatch(buf, 0, eol)
                if m is None:
                    raise ParseError(400, "bad chunk size")
                size = int(m.group(1), 16)
                if size > MAX_BODY - self.chunk_total:
                    raise ParseError(413, "request body too large")
                del buf[: eol + 2]
                self.chunk_left = size if size else -2
                continue
            if len(buf) < self.chunk_left + 2:
                break
            if buf[self.chunk_left:self.chunk_left + 2] != b"\r\n":
                raise ParseError(400, "bad chunk framing")
            self.chunks.append(bytes(buf[: self.chunk_left]))
            self.chunk_total += self.chunk_left
            del buf[: self.chunk_left + 2]
            self.chunk_left = -1
        self._continue(req)
        return None

    def _trailers(self) -> bytes | None:
        """After the last chunk: the trailer section (checked as header lines are) and its blank line."""
        buf = self.buf
        end = 0 if buf[:2] == b"\r\n" else buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise ParseError(431, "request trailers too large")
            if _BARE_LF.search(buf):
                raise ParseError(400, "a trailer line ends with LF alone")
            return None
        if end and _FIELD_LINES.fullmatch(buf, 0, end + 2) is None:
            raise ParseError(400, "malformed trailer line")
        del buf[: end + (2 if end == 0 else 4)]
        body = b"".join(self.chunks)
        self.chunks, self.chunk_total, self.chunk_left = [], 0, -1
        return body
