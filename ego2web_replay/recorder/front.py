"""The fast recording front end: the proxy wire (:mod:`ego2web_replay.wire`) forwarding to the live web.

The same connection code as the fast replay (CONNECT answered at once, TLS with
leaves minted from the project CA, HTTP/1.1 and HTTP/2 to the client), with each
request sent upstream by :class:`~.upstream.UpstreamPool` (HTTP/1.1, kept alive)
and its response streamed to the client as it comes and archived by
:class:`~.addon.ExchangeArchive` when it ends, the client getting the body's end only
once the record is written (:mod:`.stream`), so nothing passes unrecorded. What the mitmproxy recording engine
(``--engine mitmproxy``) does, this does too: the upstream guard answers
Chromium's background hosts and hosts outside the policy itself, before any DNS or
TCP (``counts`` by reason, as the guard addon keeps them); after a failed write
every request is refused with a 502; an upstream failure is a 502 whose reason is
kept in ``errors`` (certificate failures also in ``untrusted``). Websockets are
passed through unchanged and archived when they close (:mod:`.websocket`); no other upgrade goes
upstream (an h2c upgrade is answered in HTTP/1.1 and archived), and a ``101`` for anything else is a 502. A request that could split a line on the upstream wire (a
control in a field, a space in the URL: the wire's parsers refuse these first) is answered 400 and
never sent. A request whose client goes away before its answer's head (an
HTTP/2 stream reset, a closed connection) has its upstream fetch cancelled, the origin's
connection closed, and nothing archived for it (``cancelled`` counts them, ``cancelled_urls``
keeps the first 1000); once the head is sent the body is streaming, and a client that leaves
then ends it as :mod:`.stream` says (a body with a length or chunks is read on and archived
whole, an open-ended one is archived as far as it came, marked left by the client). ``Expect: 100-continue`` is the proxy's to answer (the
wire reads the whole body first): it goes neither upstream nor into the archive, as
with mitmproxy. Stopping closes every upstream connection, in use or kept, and
every websocket passed through.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import re
import socket
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..guard import BLOCK_HEADER, GuardPolicy, blocked_response
from ..proxy import ProjectCA
from ..web import reason_phrase
from ..wire import Reply
from ..wire.budget import WireLimits
from ..wire.conn import ProxyFront, split_url
from ..wire.h1 import MAX_HEAD, error_reply, give, hand_over, malformed
from .addon import ExchangeArchive
from .spool import SpoolFile
from .stream import RecordedStream, open_ended, streamable
from .upstream import UpstreamError, UpstreamPool, UpstreamResponse, max_response
from .websocket import WebsocketTap, is_websocket

__all__ = ["RecordFront"]

_DEFAULT_PORT = {"http": 80, "https": 443}
#: A request line :meth:`RecordFront.early` may send on before its head is read: a GET in HTTP/1.1 whose
#: target is absolute with an ``http://`` authority and a path, or a path (origin form), in the characters
#: any target may hold (``wire.h1._REQUEST_LINE``); the authority as the wire's check reads it, up to the path.
_EARLY_LINE = re.compile(rb"GET (?:http://([^/?#\x00-\x20\x7f]+))?(/[!-~\x80-\xff]*) HTTP/1\.1")
#: field lines learned for early sends: at most this many (then forgotten), of heads of at most this length
_MEMO_SENDS, _MEMO_SEND_HEAD = 1024, 4096


def _client_reply(resp: UpstreamResponse, method: str) -> Reply:
    """The origin's response as the client gets it: its head as sent, its body framed as it came."""
    headers = resp.headers
    if not resp.chunked and method != "HEAD" and resp.status not in (204, 304) and resp.status >= 200 \
            and not any(k.lower() == "content-length" for k, _ in headers):
        headers = [*headers, ("Content-Length", str(len(resp.body)))]  # it ran to the connection's end
    return Reply(resp.status, resp.reason, headers, b"" if method == "HEAD" else resp.body, resp.chunked, "recorded")


def _let_the_client_read() -> None:
    """Called once a streamed answer's head is written: the proxy's thread gives up the CPU for a moment.

    Linux wakes a loopback reader on the CPU of the process that woke it, so the client (a browser on
    this machine, as in every recording) waits for the head it was sent until this thread blocks; but
    after a head the recorder has work at once (the body's first pieces, a small record written),
    which held the client's first byte back by about 0.1 ms (``benchmarks/trace_wall.py``; BENCHMARKS.md,
    "The first byte on 2026-12-07"). ``sched_yield`` lets a client woken here read first, and returns at once when nothing
    else is ready to run on this CPU (where the system has none, nothing is done)."""
    if _SCHED_YIELD is not None:
        _SCHED_YIELD()


_SCHED_YIELD = getattr(os, "sched_yield", None)  # Linux and most Unix; not macOS or Windows


def _port(authority: str, host: str, scheme: str) -> int:
    port_text = authority[len(host) + 1:] if authority.startswith(host + ":") else ""
    return int(port_text) if port_text.isdigit() else _DEFAULT_PORT.get(scheme, 80)


def _chain(task: asyncio.Future[Reply], future: asyncio.Future[Reply]) -> None:
    """``task``'s outcome given to ``future`` (unless that was cancelled meanwhile)."""
    if future.done():
        if not task.cancelled() and task.exception() is None and task.result().stream is not None:
            task.result().stream.close()
        return
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        future.set_result(task.result())


class _Pipe:  # the tunnel of a 101 Reply
    """A ``101`` connection passed through as raw bytes, both ways; a websocket's ``tap`` reads what passes."""

    def __init__(self, resp: UpstreamResponse, pipes: set[_Pipe], tap: WebsocketTap | None = None) -> None:
        assert resp.reader is not None and resp.writer is not None
        self.reader, self.writer, self.tap = resp.reader, resp.writer, tap
        self.task: asyncio.Task[None] | None = None
        self.pipes = pipes  # the open ones, closed when the proxy stops
        pipes.add(self)

    def start(self, write: Callable[[bytes], None], close: Callable[[], None]) -> None:
        async def pump() -> None:
            try:
                while data := await self.reader.read(65536):
                    if self.tap is not None:
                        self.tap.server(data)
                    write(data)
            except (ConnectionError, OSError):
                pass
            finally:
                if self.tap is not None:
                    await self.tap.finished()
                close()
                self.writer.close()
                with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
                    await self.writer.wait_closed()
                self.pipes.discard(self)

        self.task = asyncio.ensure_future(pump())

    def send(self, data: bytes) -> None:
        if not self.writer.is_closing():
            if self.tap is not None:
                self.tap.client(data)
            self.writer.write(data)

    def close(self) -> None:
        self.writer.close()


def _addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses ``host`` names: an IP literal in any spelling the resolver takes (``127.1``,
    ``2130706433``, ``0x7f000001``, ``::ffff:127.0.0.1``), else what the name resolves to (asked only of
    a request to this proxy's own port)."""
    with contextlib.suppress(ValueError):
        return [ipaddress.ip_address(host)]
    with contextlib.suppress(OSError):
        return [ipaddress.ip_address(socket.inet_aton(host))]
    if host == "localhost" or host.endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    try:
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in socket.getaddrinfo(host, None)]
    except (OSError, UnicodeError, ValueError):
        return []


def _is_this_machine(address: ipaddress.IPv4Address | ipaddress.IPv6Address, bound: str) -> bool:
    """Whether a connection to ``address`` (at this proxy's port) would reach this proxy, bound to ``bound``."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if address.is_loopback or address.is_unspecified or str(address) == bound:
        return True
    if bound in ("0.0.0.0", "::", ""):  # listening on every address: any of this machine's own
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((str(address), 0))
            except OSError:
                return False
            return True
    return False


class RecordFront(ProxyFront):
    """The fast recording proxy on ``host:port``: guard, upstream, archive (see the module docstring)."""

    answers_again = False  # every answer is the origin's anew: no HTTP/1.1 head is looked up to repeat

    def __init__(self, archive: ExchangeArchive, *, ca: ProjectCA, guard: GuardPolicy | None = None,
                 upstream_ca: Path | None = None, host: str = "127.0.0.1", port: int = 0,
                 http2: bool = True, limits: WireLimits | None = None) -> None:
        super().__init__(ca=ca, guard=guard or GuardPolicy(mode="loopback"), host=host, port=port, http2=http2,
                         limits=limits)
        self.archive = archive
        self.upstream = UpstreamPool(upstream_ca=upstream_ca)
        # the record cap (EGO2WEB_MAX_RECORD_BYTES), read once when the recorder starts
        self.max_body = max_response()
        # bodies go to the browser as they come (see .stream)
        self.upstream.stream_when = functools.partial(streamable, cap=self.max_body)
        self.upstream.on_early_dropped = self._early_dropped
        self.counts: Counter[str] = Counter()  # what the guard answered, by reason
        self.blocked_urls: list[str] = []
        self.cancelled = 0  # requests whose client went away first: fetch stopped, nothing archived
        self.cancelled_urls: list[str] = []
        self._inflight: set[asyncio.Future[Reply]] = set()  # answers still waiting for the upstream
        self._pipes: set[_Pipe] = set()
        self._streams: set[RecordedStream] = set()  # bodies streaming through, archived when they end
        # early(): (scheme, tunnel, the target's authority, field lines) -> (origin, the request after its line)
        self._sends: dict[tuple[str, str, bytes | None, bytes], tuple[tuple[str, str, int], bytes]] = {}
        self._learning: tuple[tuple[str, str, bytes | None, bytes], bytes] | None = None

    sends_early = True

    def early(self, scheme: str, tunnel: str, head: bytes) -> Callable[[], None] | None:
        """Send an HTTP/1.1 request upstream as soon as its head is whole, before it is read, where the
        same field lines (to the same authority, on the same kind of connection) were read before and went
        upstream as they would now: a GET with no body on a kept connection to the origin (what a browser
        sends for each resource of a site). The wire's strict reading then reads the head as usual, and
        :meth:`reply`'s :meth:`.UpstreamPool.fetch_now` takes the request up only where it would write the
        very same bytes to the same origin; the client gets no answer but the one of that path. The strict
        checks of these field lines were passed when they were first read (the very same bytes); the
        request line is read here by a pattern narrower than the wire's. Returns what the connection
        calls once the head is answered (:meth:`_early_over`), or None (nothing was done).

        Why: reading a head, the checks and building the upstream request take most of the time between
        the client's request and the origin's; sent first, that work is done while the origin answers
        (BENCHMARKS.md, "Sent before it is read")."""
        cut = head.find(b"\r\n")
        m = _EARLY_LINE.fullmatch(head, 0, cut) if 0 < cut and len(head) <= MAX_HEAD else None
        if m is None or self.archive.failed:
            return None
        authority, target = m.group(1, 2)
        seen = (scheme, tunnel, authority, head[cut:])
        known = self._sends.get(seen)
        if known is None:  # learned from what the request's own path writes, if it writes it at once
            if len(head) > _MEMO_SEND_HEAD:
                return None
            self._learning, self.upstream.sent = (seen, target), None
            return self._early_over
        if self.upstream.send_early(known[0], b"GET %b HTTP/1.1%b" % (target, known[1])):
            return self._early_over
        return None

    def _early_over(self) -> None:
        """After a head :meth:`early` saw has been read and answered or refused: a request it wrote that the
        head's own path did not take up is let go (its connection closed; counted, ``early-dropped``, and
        noted among the archive's upstream failures);
        what that path wrote for field lines not seen before is learned, where it is the same for any
        target (no body, so no length)."""
        learning, self._learning = self._learning, None
        sent, self.upstream.sent = self.upstream.sent, None
        self.upstream.drop_early()
        if learning is None or sent is None:
            return
        (seen, target), (origin, data) = learning, sent
        line = b"GET %b HTTP/1.1" % target
        block = seen[3].lower()
        if data.startswith(line + b"\r\n") and b"\ncontent-length:" not in block \
                and b"\ntransfer-encoding:" not in block:
            if len(self._sends) >= _MEMO_SENDS:
                self._sends.clear()
            self._sends[seen] = (origin, data[len(line):])

    def _itself(self, scheme: str, authority: str) -> bool:
        """Whether ``scheme://authority`` is this proxy's own listening address (on loopback)."""
        if authority.startswith("["):
            host, _, port = authority.partition("]")
            host, port = host + "]", port[1:]
        else:
            host, _, port = authority.partition(":")
        number = int(port) if port.isdigit() else 443 if scheme.lower() == "https" else 80
        if number != self.port:
            return False
        return any(_is_this_machine(a, self.host) for a in _addresses(host.lower().rstrip(".").strip("[]")))

    def reply(self, method: str, url: str, headers: list[tuple[str, str]],
              body: bytes) -> Reply | Awaitable[Reply]:
        parts = split_url(url)
        if not parts[1]:  # no host named (no Host, an empty one): nowhere to go, and nothing to block
            return error_reply(400, "bad request: no host (a Host field, or an absolute target)")
        if self._itself(parts[0], parts[1]):  # forwarded, it would come back here, again and again
            return error_reply(508, "loop detected: the request names this recording proxy itself")
        host, ok, why = self.allowed_at(parts[1])
        if not ok:
            self.counts[why] += 1
            if len(self.blocked_urls) < 1000:
                self.blocked_urls.append(url)
            status, head, text = blocked_response(host, why)
            return Reply(status, reason_phrase(status), head, b"" if method == "HEAD" else text, False, "blocked")
        bad = malformed(method, url, headers)
        if bad is not None:  # the wire refused these already: nothing that could split a line goes upstream
            return error_reply(400, f"bad request: {bad}")
        if self.archive.failed:
            return error_reply(502, f"recording stopped ({self.archive.failed})", [(BLOCK_HEADER, "recording-failed")])
        if any(k.lower() == "expect" for k, _ in headers):
            headers = [(k, v) for k, v in headers if k.lower() != "expect"]
        if not body:
            now = self._now(method, url, parts, host, headers)
            if now is not None:
                return now
        # started at once (eagerly), not on the loop's next turn: the request goes upstream within this
        # call, as soon as it is parsed, a turn of the loop earlier than a task scheduled to start
        task = asyncio.Task(self._forward(method, url, parts, host, headers, body), loop=asyncio.get_running_loop(),
                            eager_start=True)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    def _now(self, method: str, url: str, parts: tuple[str, str, str], host: str,
             headers: list[tuple[str, str]]) -> asyncio.Future[Reply] | None:
        """A request without a body sent on a kept connection at once and answered as its head comes
        (:meth:`.UpstreamPool.fetch_now`), with no task between; None where that cannot be (then
        :meth:`_forward`, which answers the same). ``parts``: the URL's scheme, authority and target."""
        started = time.time()
        scheme, authority, target = parts
        port = _port(authority, host, scheme)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()

        def done(got: UpstreamResponse | BaseException) -> None:
            if future.done():  # the client went away meanwhile: a body to stream is let go
                if isinstance(got, UpstreamResponse):
                    self.upstream.done_with(got, reusable=False)
                    if got.writer is not None:  # a 101's connection
                        got.writer.close()
                return
            try:
                if isinstance(got, UpstreamError):
                    reply: Reply | Awaitable[Reply] = self._failed(got, url, host, method)
                elif isinstance(got, BaseException):
                    raise got
                else:
                    reply = self._answer(url, host, method, headers, b"", got, started, authority)
            except Exception as e:  # a bug: the connection answers 502 (wire.h1.settle)
                future.set_exception(e)
                return
            if isinstance(reply, Reply):
                try:
                    give(future, reply)
                    if reply.stream is not None:
                        _let_the_client_read()
                finally:  # begun even where the head could not be given: its origin is read, then let go
                    if reply.stream is not None:
                        self._begin(reply.stream)
            else:  # archived whole first (a response fetch_now handed on)
                asyncio.ensure_future(reply).add_done_callback(lambda t: _chain(t, future))

        stop = self.upstream.fetch_now(scheme, host, port, method, target, headers, done)
        if stop is None:
            return None

        def ended(fut: asyncio.Future[Reply]) -> None:
            if fut.cancelled():
                assert stop is not None
                stop()
                self._note_cancelled(url)

        future.add_done_callback(ended)
        self._inflight.add(future)
        future.add_done_callback(self._inflight.discard)
        return future

    def _early_dropped(self, url: str, why: str) -> None:
        """A request sent early that its own path did not take up reached the origin unarchived: the
        snapshot says so among its upstream failures (none is expected: :meth:`early`)."""
        self.archive.note_error(url, f"sent upstream before it was read, then let go with its answer unread: {why}",
                                "GET")

    def _note_cancelled(self, url: str) -> None:
        if not self.upstream.closed:
            self.cancelled += 1
            if len(self.cancelled_urls) < 1000:
                self.cancelled_urls.append(url)

    def _failed(self, e: UpstreamError, url: str, host: str, method: str) -> Reply:
        if self.upstream.closed:  # cut by the proxy's own stop, not the origin's doing: no error to report
            return error_reply(502, "the recording stopped", [(BLOCK_HEADER, "recording-stopped")])
        if e.kind == "certificate":
            self.archive.note_untrusted(host, str(e))
        self.archive.note_error(url, str(e), method)
        return error_reply(502, f"upstream {host}: {e}", [(BLOCK_HEADER, f"upstream-error; kind={e.kind}")])

    async def _forward(self, method: str, url: str, parts: tuple[str, str, str], host: str,
                       headers: list[tuple[str, str]], body: bytes) -> Reply:
        started = time.time()
        scheme, authority, target = parts
        port = _port(authority, host, scheme)
        try:
            resp = await self.upstream.fetch(scheme, host, port, method, target, headers, body)
        except asyncio.CancelledError:
            self._note_cancelled(url)
            raise
        except UpstreamError as e:
            return self._failed(e, url, host, method)
        reply = self._answer(url, host, method, headers, body, resp, started, authority)
        if not isinstance(reply, Reply):
            return await reply
        if reply.stream is None:
            return reply
        try:
            hand_over(reply)
            _let_the_client_read()
        finally:  # as in _now: begun whatever happened to the head
            self._begin(reply.stream)
        return reply

    def _answer(self, url: str, host: str, method: str, headers: list[tuple[str, str]], body: bytes,
                resp: UpstreamResponse, started: float, authority: str) -> Reply | Awaitable[Reply]:
        """The client's answer to the origin's ``resp``: a websocket passed through, a body streamed as it
        comes, or (awaitable) a body read whole, once archived."""
        if resp.status == 101:
            if not is_websocket(headers):  # only a websocket's upgrade is passed on (UpstreamPool._head)
                assert resp.writer is not None
                resp.writer.close()
                why = "a 101 Switching Protocols nobody asked for"
                self.archive.note_error(url, why, method)
                return error_reply(502, f"upstream {host}: {why}", [(BLOCK_HEADER, "upstream-error; kind=protocol")])
            tap = WebsocketTap(self.archive, url=url, request_headers=headers, status=101, reason=resp.reason,
                               response_headers=resp.headers, http_version=resp.version, ip=resp.ip,
                               started=started, authority=authority)
            return Reply(101, resp.reason, resp.headers, b"", False, "recorded", tunnel=_Pipe(resp, self._pipes, tap))
        if resp.link is not None:
            return self._streamed(url, method, headers, body, resp, started, authority)
        return self._archived(url, method, headers, body, resp, started, authority)

    async def _archived(self, url: str, method: str, headers: list[tuple[str, str]], body: bytes,
                        resp: UpstreamResponse, started: float, authority: str) -> Reply:
        if not await self.archive.archive_async(
                url=url, method=method, request_headers=headers, request_body=body, status=resp.status,
                reason=resp.reason, response_headers=resp.headers, response_body=resp.body,
                http_version=resp.version, ip=resp.ip, started=started, authority=authority):
            return error_reply(502, f"recording stopped ({self.archive.failed})", [(BLOCK_HEADER, "recording-failed")])
        return _client_reply(resp, method)

    def _streamed(self, url: str, method: str, headers: list[tuple[str, str]], body: bytes,
                  resp: UpstreamResponse, started: float, authority: str) -> Reply:
        """An open-ended body: its head now, its pieces as they come, the record when it ends."""

        async def archive(payload: SpoolFile, warc_headers: list[tuple[str, str]]) -> bool:
            return await self.archive.archive_async(
                url=url, method=method, request_headers=headers, request_body=body, status=resp.status,
                reason=resp.reason, response_headers=resp.headers, response_body=payload,
                http_version=resp.version, ip=resp.ip, started=started, authority=authority,
                warc_headers=warc_headers)

        def failed(why: str) -> None:
            self.archive.note_error(url, why, method)

        stream = RecordedStream(self.upstream, resp, archive, failed=failed, open_ended=open_ended(resp),
                                max_bytes=self.max_body, begin=False)  # begun once the head is out: _begin
        return Reply(resp.status, resp.reason, resp.headers, b"", resp.chunked, "recorded", stream=stream)

    def _begin(self, stream: RecordedStream) -> None:
        """Set up a streamed body whose head was given to the client (:meth:`RecordedStream.begin`), and
        keep it until its record is written (:meth:`closing` waits for it)."""
        stream.begin()
        self._streams.add(stream)
        stream.ended.add_done_callback(lambda _: self._streams.discard(stream))

    async def closing(self) -> None:
        """Close the upstream side: every connection (an answer in flight ends as a 502) and websocket;
        an open-ended body still streaming is archived first, truncated; any other gets 2 s to end.
        Returns once every record handed to the archive's writer thread is written."""
        for pipe in list(self._pipes):
            pipe.close()
        streams = list(self._streams)
        for stream in streams:
            if stream.open_ended:  # archived now, as far as it came
                stream.close("stopped")
        if streams:  # any other body gets the time an answer in flight gets to end (and be archived)
            await asyncio.wait([stream.ended for stream in streams], timeout=2)
        for stream in streams:
            stream.close("stopped")
        await self.upstream.aclose()
        pending: list[asyncio.Future[Any]] = [*self._inflight, *(p.task for p in self._pipes if p.task)]
        if pending:
            _, late = await asyncio.wait(pending, timeout=2)
            for task in late:  # e.g. still connecting to an origin that does not answer
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=1)
        await self.archive.writes.drained()  # the records handed to the writer thread are all written
