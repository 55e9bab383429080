"""The recording front end's upstream client: HTTP/1.1 to origins, kept alive, bytes as they came.

One request in, one response out, with the body exactly as the origin sent it
(content-encoding kept; a chunked body is read out of its chunks and the response
is marked ``chunked``, so the archive stores it chunked again and the client gets
it chunked). A response :attr:`UpstreamPool.stream_when` picks comes back after its
head, its body unread on ``link``, its connection and slot held until
:meth:`UpstreamPool.done_with` (the caller streams it: :mod:`.stream`). Connections are kept per origin (scheme, host, port) and reused, at
most :data:`PER_ORIGIN` at a time, in use or kept, as Chromium opens to a site over
HTTP/1.1 (a client on HTTP/2 may ask a hundred things at once: the rest wait); a
kept connection that the origin closed meanwhile is retried once, on a fresh one,
when nothing of the response had come (or only a ``408``, which some servers send
before closing an idle connection), whatever the method: what Chromium itself does
with a reused connection (a connection that dies after the response began is a
failure, never a resend). An origin that answers before it has read the whole
request body (a 413, a redirect) and then resets the connection gets its answer
through. HTTPS verifies the origin's certificate
against the system's CAs plus ``upstream_ca`` (a test site's CA), with ALPN
``http/1.1``. A ``101 Switching Protocols`` hands the connection back to the caller
(a websocket: passed through, its conversation archived by the front end, :mod:`.websocket`).

Failures are :class:`UpstreamError` with a ``kind``: ``connect`` (refused, no
route, name not found), ``tls`` (handshake failed), ``certificate`` (verification
failed), ``timeout``, ``protocol`` (a response head read strictly and refused,
:func:`parse_response_head`; bad chunk framing; Content-Lengths that differ or are not ASCII digits) or
``closed``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..limits import max_record_bytes
from ..web import get_header
from ..wire.h1 import CHUNK_LINE, CTL_RE, FIELD_LINE, TOKEN_RE

__all__ = ["UpstreamPool", "UpstreamError", "UpstreamResponse", "HOP_BY_HOP", "PER_ORIGIN", "content_length",
           "parse_response_head", "read_back_head", "read_head_bytes", "HeadReader", "head_lines", "chunk_size",
           "skip_trailers"]

log = logging.getLogger(__name__)

MAX_HEAD = 256 * 1024
_HEAD_ROOM = 1 << 20  # a record's WARC and HTTP heads, and chunk framing, beside its payload


def max_response() -> int:
    """The largest body archived (read whole, as mitmproxy does): what the snapshot reader accepts as
    one record (``EGO2WEB_MAX_RECORD_BYTES``), so a recording never holds a record its index refuses."""
    return max(max_record_bytes() - _HEAD_ROOM, _HEAD_ROOM)
_NO_BODY_STATUS = frozenset({204, 304})
#: Headers that describe the client's connection to the proxy, never forwarded upstream.
HOP_BY_HOP = frozenset({"proxy-connection", "proxy-authorization", "keep-alive", "te", "trailer",
                        "transfer-encoding"})
#: never sent upstream as the client sent them: the hop's own fields and the body's length (written anew)
_NOT_FORWARDED = HOP_BY_HOP | {"content-length", "connection"}
_UPGRADE_FIELDS = frozenset({"upgrade", "http2-settings"})  # passed on only for a websocket's upgrade
PER_ORIGIN = 6  # connections to one origin at a time, kept or in use: what Chromium opens over HTTP/1.1


class UpstreamError(Exception):
    """The origin could not be asked or did not answer; ``kind`` says how (see the module docstring)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class UpstreamResponse:
    """The origin's answer: status line, headers as sent, and the body without transfer framing."""

    status: int
    reason: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    chunked: bool = False
    ip: str | None = None
    reader: asyncio.StreamReader | None = field(default=None, repr=False)  # a 101's connection
    writer: asyncio.StreamWriter | None = field(default=None, repr=False)
    link: Any = field(default=None, repr=False)  # a streamed body's connection (its body not read yet)
    release: Any = field(default=None, repr=False)  # frees the origin's slot once a streamed body is read
    key: tuple[str, str, int] = ("", "", 0)



def _authority(scheme: str, host: str, port: int) -> str:
    """``host[:port]``, the port left out where it is the scheme's default."""
    return host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"


def _tokens(value: str | None) -> set[str]:
    return {t.strip().lower() for t in (value or "").split(",") if t.strip()}


class _Slots:
    """The connections one origin may have at a time: taken now (:meth:`take_now`) or awaited in turn
    (:meth:`take`), a slot handed straight to the next in line when one is released."""

    __slots__ = ("free", "_waiters")

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_now(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.take_now():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot, then cancelled before it could be used: passed on
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class _Link:
    """One connection to an origin."""

    __slots__ = ("reader", "writer", "ip", "reused", "protocol")

    def __init__(self, reader: HeadReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.protocol: _LinkProtocol = writer._protocol  # type: ignore[attr-defined]
        peer = writer.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else None
        self.reused = False

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        """Close at once, dropping what is still to be sent (a close would wait to send it first)."""
        self.writer.transport.abort()


class UpstreamPool:
    """Kept-alive HTTP/1.1 connections to origins; :meth:`fetch` asks one request."""

    def __init__(self, *, upstream_ca: Path | None = None, connect_timeout_s: float = 30.0,
                 read_timeout_s: float = 120.0, per_origin: int = PER_ORIGIN) -> None:
        self.connect_timeout_s, self.read_timeout_s, self.per_origin = connect_timeout_s, read_timeout_s, per_origin
        self._slots: dict[tuple[str, str, int], _Slots] = {}
        self._tls = ssl.create_default_context()
        # Python 3.13 adds RFC 5280 strictness (e.g. a leaf must name its authority key) that
        # browsers and mitmproxy do not ask of a site: verify as they do.
        self._tls.verify_flags &= ~ssl.VERIFY_X509_STRICT
        if upstream_ca is not None:
            self._tls.load_verify_locations(cafile=str(upstream_ca))
        self._tls.set_alpn_protocols(["http/1.1"])
        self._idle: dict[tuple[str, str, int], list[_Link]] = {}
        self._busy: set[_Link] = set()  # links with an exchange in flight (closed too by :meth:`aclose`)
        self.closed = False  # after :meth:`close`: no new connection, no resend
        # Which responses come back with their body unread, to be streamed (``link`` set: see
        # :mod:`.stream`); the connection and its slot stay taken until :meth:`done_with` is called.
        self.stream_when: Callable[[UpstreamResponse], bool] | None = None
        # A request written by :meth:`send_early`, for the :meth:`fetch_now` that follows it in the same call
        # to take up: (key, bytes, link, slots); and what :meth:`fetch_now` last wrote itself, (key, bytes).
        self._early: tuple[tuple[str, str, int], bytes, _Link, _Slots] | None = None
        self.sent: tuple[tuple[str, str, int], bytes] | None = None
        self.early_sent = 0  # requests written by send_early and taken up by their fetch_now
        self.early_dropped = 0  # requests written by send_early that their fetch_now did not take up
        self.early_dropped_urls: list[str] = []  # the first 1000 of those
        # told (url, why) of each such request: it reached the origin, its answer was never read
        self.on_early_dropped: Callable[[str, str], None] | None = None

    async def fetch(self, scheme: str, host: str, port: int, method: str, target: str,
                    headers: list[tuple[str, str]], body: bytes) -> UpstreamResponse:
        """Send one request (``target``: origin-form path and query) and read its response
        (whole, unless :attr:`stream_when` picks it)."""
        key = (scheme, host, port)
        data = self._head(method, target, headers, body, host, port, scheme) + body
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = _Slots(self.per_origin)
        if not slots.take_now():  # its connections all busy: wait in turn, as a browser does, but not for ever
            try:
                await asyncio.wait_for(slots.take(), self.read_timeout_s)
            except TimeoutError:
                raise UpstreamError("timeout", f"none of the origin's {self.per_origin} connections came free "
                                               f"within {self.read_timeout_s:g} s") from None
        return await self._resume(key, data, method, slots)

    async def _resume(self, key: tuple[str, str, int], data: bytes, method: str, slots: _Slots,
                      link: _Link | None = None) -> UpstreamResponse:
        """:meth:`_fetch` with the origin's slot taken (``link``: the request went out on it already)."""
        try:
            resp = await self._fetch(key, data, method, link)
        except BaseException:
            slots.release()
            raise
        if resp.link is None:
            slots.release()
        else:
            resp.release = slots.release
        return resp

    def fetch_now(self, scheme: str, host: str, port: int, method: str, target: str,
                  headers: list[tuple[str, str]], done: Callable[[UpstreamResponse | BaseException], None],
                  ) -> Callable[[], None] | None:
        """:meth:`fetch` of a request without a body, sent at once on a kept connection to the origin and
        its response head read as it arrives, with no task, await or turn of the loop between (what a
        first byte waits for: ``benchmarks/trace_record.py``). None when it cannot be (no kept connection
        free, the origin's slots taken, the pool closed, nothing to stream): :meth:`fetch` then. Else
        ``done`` gets the response (a body to stream: :attr:`stream_when`) or the :class:`UpstreamError`,
        once; anything but a response to stream as it comes (an interim or ``101`` answer, a ``408``, a
        ``HEAD``, a body read whole, a connection that ended first) goes on as :meth:`fetch` would from
        there, the same bytes read again. Returns what to call when the answer is no longer wanted (the
        client went away): the exchange is stopped and its connection closed."""
        key = (scheme, host, port)
        if self._early is not None:  # written already (send_early): taken up if it is what would be written now
            early, self._early = self._early, None
            if early[0] == key and early[1] == self._head(method, target, headers, b"", host, port, scheme) \
                    and method != "HEAD":
                self.early_sent += 1
                return self._await_head(key, early[2], early[1], method, early[3], done)
            self._drop(early, "its own request, once read, was another")
        slots = self._slots.get(key)
        if self.closed or self.stream_when is None or method == "HEAD" or slots is None or not self._idle.get(key):
            return None
        data = self._head(method, target, headers, b"", host, port, scheme)
        if not slots.take_now():
            return None
        link = self._take(key)
        if link is None:
            slots.release()
            return None
        link.writer.write(data)  # first: what follows is done while the request travels (no callback of
        self.sent = (key, data)  # the link's runs before we return)
        self._busy.add(link)
        return self._await_head(key, link, data, method, slots, done)

    def _await_head(self, key: tuple[str, str, int], link: _Link, data: bytes, method: str, slots: _Slots,
                    done: Callable[[UpstreamResponse | BaseException], None]) -> Callable[[], None]:
        """The exchange of a request written on ``link``: its head read as it comes (:meth:`fetch_now`)."""
        exchange = _Exchange(self, key, link, data, method, slots, done)
        link.protocol.exchange = exchange
        exchange.timer = asyncio.get_running_loop().call_later(self.read_timeout_s, exchange.timed_out)
        return exchange.cancel

    def send_early(self, key: tuple[str, str, int], data: bytes) -> bool:
        """Write ``data``, a request without a body, on a kept connection to ``key`` now, before the request
        it stands for is read (:meth:`.RecordFront.early`); whether it was. The :meth:`fetch_now` of that
        request, in the same call, takes it up if it would write the very same bytes to the same origin;
        anything else drops it (:meth:`drop_early`): its connection closed, its answer never read."""
        slots = self._slots.get(key)
        if self.closed or self.stream_when is None or slots is None or not self._idle.get(key) \
                or self._early is not None or not slots.take_now():
            return False
        link = self._take(key)
        if link is None:
            slots.release()
            return False
        link.writer.write(data)
        self._busy.add(link)
        self._early = (key, data, link, slots)
        return True

    def drop_early(self) -> bool:
        """Let go of a request :meth:`send_early` wrote that no :meth:`fetch_now` took up; whether there was one."""
        early, self._early = self._early, None
        if early is None:
            return False
        self._drop(early, "its own request, once read, was answered otherwise (refused, or not sent)")
        return True

    def _drop(self, early: tuple[tuple[str, str, int], bytes, _Link, _Slots], why: str) -> None:
        (scheme, host, port), data, link, slots = early
        link.abort()
        self._busy.discard(link)
        slots.release()
        self.early_dropped += 1
        target = data[4:data.find(b" HTTP/1.1\r\n")].decode("utf-8", "surrogateescape")  # after "GET "
        url = f"{scheme}://{_authority(scheme, host, port)}{target}"
        if len(self.early_dropped_urls) < 1000:
            self.early_dropped_urls.append(url)
        log.warning("ego2web-replay: a request sent upstream before it was read was let go, its answer unread "
                    "(%s): GET %s", why, url)
        if self.on_early_dropped is not None:
            self.on_early_dropped(url, why)

    def done_with(self, resp: UpstreamResponse, reusable: bool) -> None:
        """A streamed body is over (``reusable``: read whole, the connection may serve again)."""
        link, resp.link = resp.link, None
        if link is None:
            return
        self._busy.discard(link)
        if reusable and not self.closed:
            self._settle(resp.key, link, resp)
        else:
            link.abort()
        if resp.release is not None:
            resp.release()
            resp.release = None

    async def _fetch(self, key: tuple[str, str, int], data: bytes, method: str,
                     sent_on: _Link | None = None) -> UpstreamResponse:
        """One exchange, once more on a fresh connection where a kept one turned out closed (``sent_on``: a
        kept connection the request went out on already, :meth:`fetch_now`)."""
        scheme, host, port = key
        retried = False
        while True:
            link, sent_on = sent_on, None
            if self.closed:
                if link is not None:
                    link.close()
                    self._busy.discard(link)
                raise UpstreamError("closed", "the recording proxy is stopping")
            sent = link is not None
            if link is None:
                link = None if retried else self._take(key)
            fresh = link is None
            if link is None:
                link = await self._open(scheme, host, port)
            if self.closed:
                link.close()
                raise UpstreamError("closed", "the recording proxy is stopping")
            self._busy.add(link)
            try:
                resp = await self._exchange(link, data, method, sent)
            except _Stale:
                link.close()
                if fresh:
                    raise UpstreamError("closed", "the origin closed the connection without answering") from None
                retried = True
                continue  # a kept connection the origin had closed: once more on a fresh one
            except BaseException:
                link.close()
                raise
            finally:
                self._busy.discard(link)
            resp.ip = link.ip
            if resp.link is not None:  # a body to stream: the connection stays the caller's for now
                self._busy.add(link)
                resp.key = key
            elif resp.status == 101:
                resp.reader, resp.writer = link.reader, link.writer
            else:
                self._settle(key, link, resp)
            return resp

    def _settle(self, key: tuple[str, str, int], link: _Link, resp: UpstreamResponse) -> None:
        """After a response read whole: keep the connection for the next request, or close it."""
        if self._reusable(resp) and not link.writer.is_closing():
            link.reused = True
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.per_origin:
                idle.append(link)
                return
        link.close()

    def close(self) -> None:
        """Close every connection, kept or in use (an exchange in flight then fails as ``closed``)."""
        self.closed = True
        for link in [*self._busy, *(link for links in self._idle.values() for link in links)]:
            link.close()
        self._idle.clear()

    async def aclose(self, timeout: float = 2.0) -> None:
        """:meth:`close`, then wait (at most ``timeout``) until the transports are closed for good."""
        links = [*self._busy, *(link for links in self._idle.values() for link in links)]
        self.close()
        if links:
            await asyncio.wait([asyncio.ensure_future(_closed(link.writer)) for link in links], timeout=timeout)

    # -- internals -------------------------------------------------------------
    def _take(self, key: tuple[str, str, int]) -> _Link | None:
        idle = self._idle.get(key)
        while idle:
            link = idle.pop()
            if not link.writer.is_closing() and not link.reader.at_eof() and not getattr(link.reader, "_buffer", b""):
                return link  # (bytes nobody asked for, on an idle connection: it is not idle, as Chromium judges)
            link.close()
        return None

    async def _open(self, scheme: str, host: str, port: int) -> _Link:
        bare = host.strip("[]")
        tls = self._tls if scheme == "https" else None
        try:
            reader, writer = await asyncio.wait_for(_connect(bare, port, tls), self.connect_timeout_s)
        except ssl.SSLCertVerificationError as e:
            raise UpstreamError("certificate", f"certificate verify failed: {e.verify_message or e}") from None
        except ssl.SSLError as e:
            raise UpstreamError("tls", f"TLS handshake with {host} failed: {e.reason or e}") from None
        except TimeoutError:
            raise UpstreamError("timeout", f"connecting to {host}:{port} timed out") from None
        except OSError as e:
            raise UpstreamError("connect", f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        return _Link(reader, writer)

    @staticmethod
    def _head(method: str, target: str, headers: list[tuple[str, str]], body: bytes, host: str, port: int,
              scheme: str) -> bytes:
        out = [f"{method} {target} HTTP/1.1"]
        names = [k.lower() for k, _ in headers]  # each name lowered once
        # Connection and the fields it names describe the client's hop (RFC 9110 7.6.1): not forwarded,
        # except a websocket's upgrade, which asks the origin for the same. Any other upgrade (curl
        # --http2's h2c) stays on the client's hop: passed on, the origin's 101 would turn the exchange
        # into a tunnel of frames nothing archives; without it, the origin answers in HTTP/1.1.
        fields = list(zip(names, headers, strict=True))
        named = _tokens(", ".join(v for name, (_, v) in fields if name == "connection")) \
            if "connection" in names else set()
        upgrade = "upgrade" in named and "upgrade" in names \
            and headers[names.index("upgrade")][1].strip().lower() == "websocket"
        if upgrade:
            out.append("Connection: Upgrade")
        cookies: list[str] = []
        cookie_at = 0
        has_host = False
        for name, (k, v) in fields:
            if name in _NOT_FORWARDED or (named and name in named and not (upgrade and name == "upgrade")) \
                    or (name in _UPGRADE_FIELDS and not upgrade) or name.startswith(":"):
                continue
            if name == "host":
                has_host = True
            elif name == "cookie":  # HTTP/2 may split it in several fields; HTTP/1.1 wants one
                if not cookies:
                    out.append("")
                    cookie_at = len(out) - 1
                cookies.append(v)
                out[cookie_at] = f"{k}: {'; '.join(cookies)}"
                continue
            out.append(f"{k}: {v}")
        if not has_host:  # (one the client named in Connection is the hop's: the origin's own is sent)
            out.insert(1, f"Host: {_authority(scheme, host, port)}")
        if body or "transfer-encoding" in names or "content-length" in names:
            out.append(f"Content-Length: {len(body)}")  # the body was read whole: always a length upstream
        return ("\r\n".join(out) + "\r\n\r\n").encode("utf-8", "surrogateescape")

    async def _exchange(self, link: _Link, data: bytes, method: str, sent: bool = False) -> UpstreamResponse:
        if not sent:
            link.writer.write(data)
        # The head is read while the request is still being sent: an origin may answer (and reset the
        # connection) before it has read the whole body, and its answer is the response. A request the
        # socket took whole at once (a head, most bodies) has nothing to wait for: no task for it.
        sending = None if sent or link.writer.transport.get_write_buffer_size() == 0 \
            else asyncio.ensure_future(link.writer.drain())
        started = False  # some of the response came: from then on a failure is never a resend
        # one deadline for the final head, however many interim heads come first (a 103 every few seconds
        # would otherwise hold the request, and its connection, for ever)
        deadline = asyncio.get_running_loop().time() + self.read_timeout_s
        try:
            while True:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise TimeoutError
                resp = await self._read_head(link, first=not started, timeout=left)
                if resp.status == 408 and link.reused and not started:
                    raise _Stale()  # an idle connection the origin closed with a 408 (Chromium sends again too)
                started = True
                if 100 <= resp.status < 200 and resp.status != 101:
                    continue  # interim answers (100 Continue, 103 Early Hints) are not the response
                break
            if method != "HEAD" and resp.status not in _NO_BODY_STATUS and resp.status != 101:
                if self.stream_when is not None and self.stream_when(resp):
                    resp.link = link
                    return resp
                resp.body = await self._read_body(link, resp)
        except TimeoutError:
            raise UpstreamError("timeout", f"no answer from the origin within {self.read_timeout_s:g} s") from None
        except ConnectionError as e:
            if link.reused and not started:
                raise _Stale() from None
            raise UpstreamError("closed", f"the origin closed the connection: {e}") from None
        finally:
            if sending is not None and (not sending.done() or sending.cancelled() or sending.exception() is not None):
                sending.cancel()
                link.abort()  # the request did not go out whole (answered early): never reused
        return resp

    async def _read_head(self, link: _Link, first: bool = True, timeout: float | None = None) -> UpstreamResponse:
        try:
            raw = await asyncio.wait_for(read_head_bytes(link.reader), timeout or self.read_timeout_s)
        except asyncio.IncompleteReadError as e:
            if not e.partial and link.reused and first:
                raise _Stale() from None
            raise UpstreamError("closed", "the origin closed the connection before answering") from None
        except asyncio.LimitOverrunError:
            raise UpstreamError("protocol", "the origin's response head is too large") from None
        return parse_response_head(head_lines(raw))

    async def _read_body(self, link: _Link, resp: UpstreamResponse) -> bytes:
        """The body. One with a length may take as long as it keeps coming (``read_timeout_s`` between
        reads: a large download on a slow line); one without may never end (a stream of events), so it
        gets ``read_timeout_s`` in all."""
        reader = link.reader
        te = _tokens(get_header(resp.headers, "transfer-encoding"))
        try:
            if "chunked" in te:
                resp.chunked = True
                return await asyncio.wait_for(self._read_chunks(reader), self.read_timeout_s)
            n = content_length(resp)
            if n is not None:
                if n > max_response():
                    raise UpstreamError("protocol", f"response too large to archive ({n} bytes; "
                                                    "EGO2WEB_MAX_RECORD_BYTES)")
                return await self._read_exactly(reader, n)
            return await asyncio.wait_for(self._read_to_end(reader), self.read_timeout_s)
        except asyncio.IncompleteReadError:
            raise UpstreamError("closed", "the origin closed the connection in the middle of the body") from None
        except asyncio.LimitOverrunError:
            raise UpstreamError("protocol", "bad chunk framing from the origin") from None
        except ValueError:
            raise UpstreamError("protocol", "bad Content-Length from the origin") from None

    async def _read_exactly(self, reader: asyncio.StreamReader, n: int) -> bytes:
        parts: list[bytes] = []
        while n > 0:
            data = await asyncio.wait_for(reader.read(min(n, 1 << 20)), self.read_timeout_s)
            if not data:
                raise asyncio.IncompleteReadError(b"".join(parts), None)
            parts.append(data)
            n -= len(data)
        return b"".join(parts)

    @staticmethod
    async def _read_to_end(reader: asyncio.StreamReader) -> bytes:
        """A body without a length: it runs to the end of the connection."""
        parts: list[bytes] = []
        total, limit = 0, max_response()
        while data := await reader.read(1 << 20):
            total += len(data)
            if total > limit:
                raise UpstreamError("protocol", "response too large to archive (EGO2WEB_MAX_RECORD_BYTES)")
            parts.append(data)
        return b"".join(parts)

    @staticmethod
    async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
        parts: list[bytes] = []
        total, limit = 0, max_response()
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                size = chunk_size(line)
            except ValueError:
                raise UpstreamError("protocol", "bad chunk size from the origin") from None
            if size == 0:
                try:
                    await skip_trailers(reader.readuntil)  # not kept (mitmproxy's recorder kept none either)
                except ValueError:
                    raise UpstreamError("protocol", "a trailer section past the head limit") from None
                return b"".join(parts)
            total += size
            if total > limit:
                raise UpstreamError("protocol", "response too large to archive (EGO2WEB_MAX_RECORD_BYTES)")
            parts.append(await reader.readexactly(size))
            if await reader.readexactly(2) != b"\r\n":
                raise UpstreamError("protocol", "bad chunk framing from the origin")

    @staticmethod
    def _reusable(resp: UpstreamResponse) -> bool:
        conn = _tokens(get_header(resp.headers, "connection"))
        if "close" in conn:
            return False
        if resp.version == "HTTP/1.0" and "keep-alive" not in conn:
            return False
        te = _tokens(get_header(resp.headers, "transfer-encoding"))
        return "chunked" in te or get_header(resp.headers, "content-length") is not None \
            or resp.status in _NO_BODY_STATUS or 100 <= resp.status < 200


def content_length(resp: UpstreamResponse) -> int | None:
    """The response's one Content-Length (None: it has none); ValueError as :func:`one_length` says."""
    fields = [value for k, value in resp.headers if k.lower() == "content-length"]
    return one_length(fields) if fields else None


def one_length(fields: list[str]) -> int:
    """The one length of a response's Content-Length field values, as sent (RFC 9110 8.6: equal values in
    a list are one); ValueError for values that differ or are not ASCII digits (a response that could
    hide another)."""
    values = {v.strip() for field in fields for v in field.split(",")}
    if len(values) != 1:
        raise ValueError("conflicting Content-Lengths")
    text = values.pop()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ValueError("a Content-Length that is not digits")
    return int(text)


#: where a head ends: a blank line, after a line that CRLF or a bare LF ended (RFC 9112 2.2); CRLF CRLF
#: ends in ``\n\r\n``
_HEAD_END = re.compile(rb"\n\r?\n")


class HeadReader(asyncio.StreamReader):
    """The reader of a connection to an origin: a :class:`asyncio.StreamReader` that also reads a
    response head up to its blank line (:meth:`read_head`) by looking only as far as that line.

    ``readuntil`` with the two ends a head may have (3.13) looks for each through the whole buffer,
    the body's first bytes included (up to 256 KiB of them read with the head of a large answer: tens
    of microseconds on the first byte's path); a line at a time (3.12) awaits once per line. One
    regular expression finds the first blank line, whichever ends it, and stops there. It reads the
    base class's buffer, limit and end as ``readuntil`` does (the same attributes on 3.12 to 3.14)."""

    # the base class's own state, which typeshed does not declare (annotations only: nothing is set here)
    _buffer: bytearray
    _limit: int
    _eof: bool
    _exception: BaseException | None
    _wait_for_data: Callable[[str], Awaitable[None]]
    _maybe_resume_transport: Callable[[], None]

    async def read_head(self) -> bytes:
        """The head's bytes up to and with its blank line, however its lines end (CRLF or a bare LF);
        :class:`asyncio.LimitOverrunError` past the limit, :class:`asyncio.IncompleteReadError` (with
        what came) if the connection ends first."""
        offset = 0
        while True:
            if self._exception is not None:
                raise self._exception
            buffer = self._buffer
            m = _HEAD_END.search(buffer, offset)
            if m is not None:
                end = m.end()
                if m.start() > self._limit:
                    raise asyncio.LimitOverrunError("the head is past the limit", m.start())
                head = bytes(buffer[:end])
                del buffer[:end]
                self._maybe_resume_transport()
                return head
            if len(buffer) > self._limit:
                raise asyncio.LimitOverrunError("the head is past the limit", len(buffer))
            if self._eof:
                partial = bytes(buffer)
                buffer.clear()
                raise asyncio.IncompleteReadError(partial, None)
            offset = max(0, len(buffer) - 2)  # an end split across two reads is found whole
            await self._wait_for_data("read_head")


class _LinkProtocol(asyncio.StreamReaderProtocol):
    """A connection to an origin: its bytes go to its :class:`HeadReader`, and to the exchange of
    :meth:`UpstreamPool.fetch_now` waiting on it for a head, if any, as they come."""

    exchange: _Exchange | None = None

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is not None and not exchange.link.reader._buffer:
            rest = exchange.head_first(data)
            if rest is not None:  # the head went to the client before the bytes after it are copied
                exchange.link.reader.feed_data(rest)
                return
        super().data_received(data)
        if self.exchange is not None:
            self.exchange.received()

    def eof_received(self) -> bool | None:
        keep = super().eof_received()
        if self.exchange is not None:
            self.exchange.resume()  # what fetch does with a connection that ended (a kept one: sent again)
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.exchange is not None:
            self.exchange.resume()


class _Exchange:
    """A request :meth:`UpstreamPool.fetch_now` sent, its response head awaited on the connection itself."""

    __slots__ = ("pool", "key", "link", "data", "method", "slots", "done", "timer", "task", "over")

    def __init__(self, pool: UpstreamPool, key: tuple[str, str, int], link: _Link, data: bytes, method: str,
                 slots: _Slots, done: Callable[[UpstreamResponse | BaseException], None]) -> None:
        self.pool, self.key, self.link, self.data, self.method, self.slots = pool, key, link, data, method, slots
        self.done = done
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[UpstreamResponse] | None = None  # the exchange gone on as fetch would
        self.over = False  # done called, or the answer no longer wanted

    def _detach(self) -> None:
        self.link.protocol.exchange = None
        if self.timer is not None:
            self.timer.cancel()

    def head_first(self, data: bytes) -> memoryview | None:
        """The first bytes of the answer, holding its whole head: a response to stream goes to ``done``
        now, before the bytes after its head are copied to the reader (up to 256 KiB of a large body
        come with the head), and those bytes are returned, for the reader; None for anything else
        (the bytes then go to the reader as any do, :meth:`received`)."""
        m = _HEAD_END.search(data)
        if m is None:
            return None
        end = m.end()
        resp = self._to_stream(data[:end])
        if resp is None:
            return None
        self._give(resp)
        return memoryview(data)[end:]

    def received(self) -> None:
        """Bytes came: once the head is whole, a response to stream goes to ``done`` now; any other
        answer goes on as :meth:`UpstreamPool.fetch` would, from its head."""
        buffer = self.link.reader._buffer
        m = _HEAD_END.search(buffer)
        if m is None:
            if len(buffer) > MAX_HEAD:
                self.resume()  # read there, and refused as too large
            return
        end = m.end()
        resp = self._to_stream(bytes(buffer[:end]))
        if resp is None:
            self.resume()  # read there again: an interim answer, a 101, a body read whole, a refused head
            return
        del buffer[:end]
        self.link.reader._maybe_resume_transport()
        self._give(resp)

    def _to_stream(self, head: bytes) -> UpstreamResponse | None:
        """The response of ``head`` when it is one to stream as it comes (what fetch would stream), else None."""
        try:
            resp = parse_response_head(head_lines(head))
        except UpstreamError:
            return None  # refused where fetch reads it, the same way, after the same checks
        stream_when = self.pool.stream_when
        if resp.status < 200 or resp.status in _NO_BODY_STATUS or resp.status == 408 \
                or stream_when is None or not stream_when(resp):
            return None
        return resp

    def _give(self, resp: UpstreamResponse) -> None:
        self.link.protocol.exchange = None
        resp.ip, resp.link, resp.key, resp.release = self.link.ip, self.link, self.key, self.slots.release
        self.over = True
        try:
            self.done(resp)  # the head on its way to the client first; the timer is let go after
        finally:
            if self.timer is not None:
                self.timer.cancel()

    def resume(self) -> None:
        """Go on as :meth:`UpstreamPool.fetch` does after sending, the bytes that came read again."""
        if self.over or self.task is not None:
            return
        self._detach()
        self.task = asyncio.ensure_future(self.pool._resume(self.key, self.data, self.method, self.slots, self.link))
        self.task.add_done_callback(self._resumed)

    def _resumed(self, task: asyncio.Task[UpstreamResponse]) -> None:
        if self.over or task.cancelled():
            return
        self.over = True
        exc = task.exception()
        self.done(exc if exc is not None else task.result())

    def timed_out(self) -> None:
        if self.over or self.task is not None:
            return
        self._detach()
        self.over = True
        self._let_go()
        self.done(UpstreamError("timeout", f"no answer from the origin within {self.pool.read_timeout_s:g} s"))

    def cancel(self) -> None:
        """The answer is no longer wanted: the exchange stops, its connection is closed."""
        if self.task is not None:
            self.task.cancel()  # fetch closes the connection and frees the slot
        elif not self.over:
            self._detach()
            self._let_go()
        self.over = True

    def _let_go(self) -> None:
        self.link.close()
        self.pool._busy.discard(self.link)
        self.slots.release()


async def _connect(host: str, port: int, tls: ssl.SSLContext | None) -> tuple[HeadReader, asyncio.StreamWriter]:
    """:func:`asyncio.open_connection` with a :class:`HeadReader` (limit :data:`MAX_HEAD`), its bytes also
    offered to a waiting :class:`_Exchange`."""
    loop = asyncio.get_running_loop()
    reader = HeadReader(limit=MAX_HEAD, loop=loop)
    protocol = _LinkProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(lambda: protocol, host, port, ssl=tls,
                                                server_hostname=host if tls else None)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def read_head_bytes(reader: HeadReader) -> bytes:
    """A response head's bytes up to and with its blank line (:meth:`HeadReader.read_head`)."""
    return await reader.read_head()


_BARE_LF = re.compile(rb"(?<!\r)\n")


def head_lines(raw: bytes) -> bytes:
    """A head read by :func:`read_head_bytes`, less its blank line, its lines ended by CRLF. A recipient
    may take a bare LF for the end of a line (RFC 9112 2.2), and Chromium does: so does the recorder,
    and the archive and the browser get CRLF. A lone CR is still a control in a value, refused."""
    head = raw[:-4] if raw.endswith(b"\r\n\r\n") else raw[:-2] if raw[-3:-2] not in (b"\r", b"\n") \
        else raw[:-3]
    if head.count(b"\n") != head.count(b"\r\n"):
        head = _BARE_LF.sub(b"\r\n", head)
    return head


_VALUE = rb"[\t\x20-\x7e\x80-\xff]*"  # a field value's bytes, as the wire's FIELD_LINE allows them
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] [0-9]{3}(?: " + _VALUE + rb")?")
#: a whole response head as :func:`parse_response_head` accepts it: one pass in C over the common case
_HEAD = re.compile(_STATUS_LINE.pattern + rb"(?:\r\n" + FIELD_LINE + rb"(?:\r\n[ \t]" + _VALUE + rb")*)*")


def parse_response_head(head: bytes) -> UpstreamResponse:
    """The origin's response head (its bytes up to, not with, the blank line), read strictly.

    The recorder is a boundary between the origin and both the browser and the archive: a head that
    one of them could read otherwise than the recorder does is refused, an :class:`UpstreamError` of
    kind ``protocol`` (the browser gets a 502; nothing is archived). Refused: a status line that is not
    ``HTTP/1.0`` or ``HTTP/1.1``, three digits and a reason without controls; a field line whose name is
    not a token, with white space before its colon, or with no colon at all; a value with a control
    character (a lone CR that would end a line for one reader and not another, NUL; a bare LF ends
    its line, :func:`head_lines`); a
    ``Transfer-Encoding`` beside a ``Content-Length`` (RFC 9112 6.3: a response that could hide
    another), one that is not exactly ``chunked`` (no other coding is read here), or one on an HTTP/1.0
    response. A folded line (``obs-fold``, a line that starts with white space) is joined to the value
    before it with one space, as RFC 9112 5.2 lets a proxy do, so the browser and the archive see one
    value. Content-Length values are checked where the body is read (:func:`content_length`)."""
    if _HEAD.fullmatch(head) is None:
        _refuse(head)
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0]
    version, code, reason = status_line[:8], status_line[9:12], status_line[13:]
    headers: list[tuple[str, str]] = []
    te: list[str] = []
    lengths = False
    for line in lines[1:]:
        if line[0] in " \t":  # obs-fold: one value with the line before (the first line is a field: _HEAD)
            name, value = headers[-1]
            more = line.strip(" \t")
            value = f"{value} {more}" if value and more else value or more
            headers[-1] = (name, value)
            if name.lower() == "transfer-encoding":
                te[-1] = value  # checked below as joined, as the browser and the archive get it
            continue
        name, _, value = line.partition(":")
        value = value.strip(" \t")
        lower = name.lower()
        if lower == "transfer-encoding":
            te.append(value)
        elif lower == "content-length":
            lengths = True
        headers.append((name, value))
    if te:
        if lengths:
            raise UpstreamError("protocol", "both Transfer-Encoding and Content-Length in the origin's response")
        if [t.strip(" \t").lower() for t in ",".join(te).split(",")] != ["chunked"]:
            raise UpstreamError("protocol", f"a Transfer-Encoding other than chunked: {', '.join(te)[:60]!r}")
        if version == "HTTP/1.0":
            raise UpstreamError("protocol", "a Transfer-Encoding in an HTTP/1.0 response")
    return UpstreamResponse(int(code), reason, version, headers)


def read_back_head(version: str, status: int, reason: str, headers: list[tuple[str, str]]) -> UpstreamResponse:
    """A head that another parser has read already (the mitmproxy engine's, its fields as Latin-1
    text), written back as its lines and read by :func:`parse_response_head`: the same
    :class:`UpstreamError` for what it refuses, and the fields as the fast engine would pass them on (a
    folded value joined). One grammar for both engines."""
    status_line = f"{version} {status:03d} {reason}" if reason else f"{version} {status:03d}"
    try:
        raw = "\r\n".join([status_line, *(f"{k}: {v}" for k, v in headers)]).encode("latin-1")
    except UnicodeEncodeError:  # not from bytes read as Latin-1: nothing an origin sent
        raise UpstreamError("protocol", "a response head that is not bytes") from None
    return parse_response_head(raw)


def _refuse(head: bytes) -> NoReturn:
    """Say what in a response head :data:`_HEAD` did not match is wrong, as an UpstreamError."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    if _STATUS_LINE.fullmatch(status_line.encode("latin-1")) is None:
        raise UpstreamError("protocol", f"not an HTTP/1.x response: {status_line[:80]!r}")
    if lines and lines[0][:1] in (" ", "\t"):
        raise UpstreamError("protocol", "a folded line before any field in the origin's response head")
    for line in lines:
        name, sep, _ = line.partition(":")
        if line[:1] not in (" ", "\t") and (not sep or TOKEN_RE.fullmatch(name.encode("latin-1")) is None):
            raise UpstreamError("protocol", "a field line that is no name: value in the origin's response "
                                            f"head: {line[:60]!r}")
    bad = next((line for line in lines if CTL_RE.search(line)), "")  # what is left: a control in a line
    raise UpstreamError("protocol", f"a control character in the origin's response head: {bad[:60]!r}")


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (with its CRLF): hex digits, then white space and extensions
    if any; ValueError for anything else (a sign, ``0x``, ``_``, a space inside, a control)."""
    m = CHUNK_LINE.fullmatch(line, 0, len(line) - 2) if line.endswith(b"\r\n") else None
    if m is None:
        raise ValueError(f"bad chunk size line: {line[:40]!r}")
    return int(m.group(1), 16)


async def skip_trailers(readline: Callable[[bytes], Awaitable[bytes]]) -> None:
    """Read past a chunked body's trailer section (not kept), at most :data:`MAX_HEAD` bytes of it;
    ValueError beyond (an origin that never ends its trailers)."""
    total = 0
    while (line := await readline(b"\r\n")) != b"\r\n":
        total += len(line)
        if total > MAX_HEAD:
            raise ValueError("a trailer section past the head limit")


async def _closed(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError, ssl.SSLError):
        pass


class _Stale(Exception):
    """A kept connection turned out closed before any of the response came."""
