"""The connection half of both fast proxies: asyncio, the standard library's TLS, HTTP/1.1 and HTTP/2.

Plain-HTTP requests come in absolute form (``GET http://host/path``); HTTPS comes
through a CONNECT tunnel, answered ``200`` at once (nothing is contacted yet), then
TLS with a leaf certificate for the tunnel's host (or the SNI name) minted from the
project CA (:mod:`.certs`), HTTP/2 when ALPN picks ``h2`` (:mod:`.h2conn`), else
HTTP/1.1 (:mod:`.h1`). A tunnel whose first byte is not a TLS handshake carries
plain HTTP (e.g. ``ws://``). Every request becomes ``reply(method, url, headers,
body)`` of the :class:`ProxyFront` subclass: the replay's (``replay/front.py``) or
the recorder's (``recorder/front.py``).

A :class:`ProxyFront` runs in a daemon thread (:meth:`ProxyFront.start`, the Python
API) or in the calling thread (:meth:`ProxyFront.serve_forever`, worker processes).

Every connection is held to the proxy's :class:`~.budget.WireLimits` (docs/limits.md): the
connection cap (the longest-silent connection with no request in progress makes room, else
a newcomer is answered 503), the total budget of request bodies held (the request whose
body would pass it is answered 503), the HTTP/1.1 pipelining cap and write backpressure
(a client that does not read its answers is not read either), the HTTP/2 stream cap, and
the head, idle and body-progress timeouts (:class:`~.budget.Sweeper`); ``refused`` counts
what each bound refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import socket
import ssl
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ProxyError
from ..guard import GuardPolicy
from ..proxy import ProjectCA
from .budget import BodyBudget, Sweeper, WireLimits, connection_cap, raise_nofile
from .certs import ALPN_H2, LeafCerts
from .h1 import H1Handler, Request
from .h2conn import H2Handler
from .loop import new_loop
from .pacing import Bounded
from .reply import Reply

__all__ = ["ProxyFront", "bind_socket", "split_authority", "split_url", "host_of"]

log = logging.getLogger(__name__)
_CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"
_DEFAULT_PORT = {"http": "80", "https": "443"}
_MEMO_URL = 2048  # absolute targets remembered (ProxyFront.urls) up to this length, this many of them
_MEMO_URLS = 8192
_MEMO_HEAD = 4096  # heads answered again (ProxyFront.repeats) up to this length, this many of them
_MEMO_REPEATS = 8192


def bind_socket(host: str, port: int, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port`` (listening unless ``listen`` is false); a busy port is one error line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(1024)
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ProxyError(f"port {port} on {host} is in use; choose another with --port") from None
        raise ProxyError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def split_authority(authority: str, scheme: str) -> tuple[str, str]:
    """``(host, authority)`` of ``host[:port]`` with the scheme's default port left out."""
    if authority.startswith("["):
        end = authority.find("]")
        host, rest = authority[: end + 1], authority[end + 1:]
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = authority.partition(":")
    if port and port != _DEFAULT_PORT.get(scheme):
        return host, f"{host}:{port}"
    return host, host


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, authority, target)`` of an absolute ``url``; the target in origin form (``/`` when
    empty, a bare ``?query`` given its ``/``), the scheme as written."""
    scheme, _, rest = url.partition("://")
    slash, query = rest.find("/"), rest.find("?")
    if 0 <= query and (slash < 0 or query < slash):  # a bare ?query: given its /
        return scheme, rest[:query], "/" + rest[query:]
    if slash < 0:
        return scheme, rest, "/"
    return scheme, rest[:slash], rest[slash:]


def host_of(url: str) -> str:
    """The host of an absolute ``url`` (no port, IPv6 brackets kept)."""
    return split_authority(split_url(url)[1], "http")[0]


def settle_future(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Tls:
    """Server-side TLS over memory buffers, so the connection decides when a tunnel turns to TLS."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.ready = False

    def receive(self, data: bytes) -> bytes | None:
        """Decrypted bytes (``b''`` while the handshake goes on); None when the session is over."""
        self.incoming.write(data)
        if not self.ready:
            try:
                self.obj.do_handshake()
                self.ready = True
            except ssl.SSLWantReadError:
                return b""
            except (ssl.SSLError, OSError):
                return None
        out: list[bytes] = []
        while True:
            try:
                chunk = self.obj.read(65536)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLError, OSError):
                return None if not out else b"".join(out)
            if not chunk:
                return None if not out else b"".join(out)
            out.append(chunk)
        return b"".join(out)

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.obj.write(view):]

    def pending(self) -> bytes:
        return self.outgoing.read()


def _repeatable(req: Request, reply: Reply) -> bool:
    """Whether the same head again can have ``reply.again``'s answer: a kept-alive GET with no body
    (no framing fields at all) and a whole answer of one piece (:func:`~.h1.write_reply`'s first case)."""
    return (req.method == "GET" and not req.body and 0 < len(req.raw) <= _MEMO_HEAD and req.keep_alive
            and "\ncontent-length:" not in req.lowered and "\ntransfer-encoding:" not in req.lowered
            and reply.head is not None and not reply.chunked and reply.stream is None and reply.tunnel is None)


class _Conn(Bounded):
    """One client connection: HTTP/1.1 (and CONNECT), then perhaps TLS, then HTTP/1.1 or HTTP/2;
    held to the proxy's bounds and timeouts by :class:`~.pacing.Bounded`."""

    def __init__(self, front: ProxyFront) -> None:
        self.front = front
        self.loop = asyncio.get_running_loop()
        self.transport: Any = None
        self.tls: _Tls | None = None
        self.app: Any = None
        self.scheme, self.tunnel = "http", ""
        self.sniff = False
        self.init_bounds()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self._writable = asyncio.Event()  # cleared while the transport's buffer is over its high-water mark
        self._writable.set()
        if self.admit(transport):
            self._app(H1Handler(self._answer_h1, self.write, self.close, self._connect))

    def _app(self, app: Any) -> None:
        """Speak ``app`` from now on; a body it streams waits while this client is behind."""
        self.app = app
        app.writable = self._can_write
        if isinstance(app, H1Handler):
            if self.front.answers_again:
                app.quick = self._quick
            if self.front.sends_early:
                app.early = functools.partial(self.front.early, self.scheme, self.tunnel)

    async def _can_write(self) -> None:
        await self._writable.wait()

    def pause_writing(self) -> None:
        self._writable.clear()
        super().pause_writing()

    def resume_writing(self) -> None:
        self._writable.set()
        super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._writable.set()  # nothing waits on a connection that is gone
        if not self.counted:
            return
        self.counted = False
        tunnel = getattr(self.app, "tunnel", None)
        if tunnel is not None:
            tunnel.close()
        self.stop_streams()
        self.release_all()

    def eof_received(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.tls is not None:
            self.tls.send(data)
            data = self.tls.pending()
        self.last_write = self.loop.time()
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.ended:
            return
        self.last_read = self.loop.time()
        if self.sniff:
            self.sniff = False
            if data[:1] == b"\x16":
                host, _ = split_authority(self.tunnel, "https")
                self.tls, self.scheme = _Tls(self.front.certs.context(host)), "https"
            else:  # plain HTTP through the tunnel (ws:// and the like)
                self._app(H1Handler(self._answer_h1, self.write, self.close, None))
        if self.tls is not None:
            was_ready = self.tls.ready
            plain = self.tls.receive(data)
            out = self.tls.pending()
            if out:
                self.transport.write(out)
            if plain is None:
                self.close()
                return
            if self.tls.ready and not was_ready:
                self._after_handshake()
            if not plain:
                return
            data = plain
        self.app.feed(data)
        self.account()

    def _after_handshake(self) -> None:
        assert self.tls is not None
        if self.tls.obj.selected_alpn_protocol() == ALPN_H2:
            self._app(H2Handler(self._answer_h2, self.write, self.close, authority=self.tunnel,
                                max_streams=self.front.limits.max_streams))
        else:
            self._app(H1Handler(self._answer_h1, self.write, self.close, None))

    def _connect(self, req: Request, rest: bytes) -> None:
        """CONNECT host:port: say yes (nothing is contacted), then read what the tunnel carries."""
        scheme = "http" if req.target.endswith(":80") else "https"
        self.tunnel = split_authority(req.target, scheme)[1]
        self.transport.write(_CONNECTED)
        self.sniff = True
        if rest:
            self.data_received(rest)

    def _answer_h1(self, req: Request) -> tuple[Reply | Awaitable[Reply] | None, bool]:
        reply = self.front.reply(req.method, self._url_h1(req), req.headers, req.body)
        if type(reply) is Reply and reply.again is not None and _repeatable(req, reply):
            self.front.keep_repeat((self.scheme, self.tunnel, req.raw), reply.again)
        return self.paced_h1(reply, len(req.body)), True

    def _quick(self, head: bytes) -> bool:
        """Answer an HTTP/1.1 request head this front answered before as then (:meth:`ProxyFront.repeat`),
        when it can go out now; whether it was answered (if not, nothing was done)."""
        repeats = self.front.repeats
        if not repeats:
            return False
        again = repeats.get((self.scheme, self.tunnel, head))
        if again is None or not self.may_answer():
            return False
        data = self.front.repeat(again)
        if data is None:
            return False
        self.answered()
        self.write(data)
        return True

    def _url_h1(self, req: Request) -> str:
        """The absolute URL an HTTP/1.1 request means (an absolute target's, the same again, is remembered)."""
        target = req.target
        host_header = req.header("host")
        lowered = target[:8].lower()
        absolute = lowered.startswith("http://") or lowered.startswith("https://")
        urls = self.front.urls
        if absolute:
            known = urls.get((target, host_header))
            if known is not None:
                return known
            scheme, authority, path = split_url(target)
            scheme = scheme.lower()
        else:
            scheme, authority, path = self.scheme, self.tunnel, target
        if host_header and not absolute:  # an absolute target names its host: Host is ignored (RFC 9112 3.2.2)
            authority = host_header
        # no host at all (no Host, an empty one, no tunnel): no URL (refused as malformed), never this
        # proxy's own address, which a recorder would forward to itself
        authority = split_authority(authority, scheme)[1] if authority else ""
        url = f"{scheme}://{authority}{path}"
        if absolute and len(target) <= _MEMO_URL:
            if len(urls) >= _MEMO_URLS:
                urls.clear()
            urls[(target, host_header)] = url
        return url

    def _answer_h2(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> Reply | Awaitable[Reply]:
        return self.paced_h2(self.front.reply(method, url, headers, body), len(body))


class ProxyFront(ABC):
    """A fast proxy on ``host:port`` (0: any free port); subclasses say what each request gets (:meth:`reply`).

    ``limits`` (default: :meth:`WireLimits.from_env`) bound what clients can hold; ``refused`` counts
    what the bounds refused or ended, by reason (``connections``, ``evicted``, ``body-budget``,
    ``timeout-head``, ``timeout-idle``, ``timeout-body``, ``timeout-stalled``, ``timeout-sending``,
    ``timeout-lingering``)."""

    #: whether a reply may carry ``again`` (an HTTP/1.1 head seen before answered as then, :meth:`repeat`);
    #: a front whose every answer is new (the recorder's) says no, and no head is looked up
    answers_again = True
    #: whether an HTTP/1.1 request may be sent on before its head is read (:meth:`early`: the recorder's)
    sends_early = False

    def __init__(self, *, ca: ProjectCA, guard: GuardPolicy, host: str = "127.0.0.1", port: int = 0,
                 http2: bool = True, limits: WireLimits | None = None) -> None:
        self.host, self.requested_port, self.ca, self.http2 = host, port, ca, http2
        self.guard = guard
        self._allowed: dict[str, tuple[bool, str]] = {}  # the guard's decision per host, made once
        self._hosts: dict[str, str] = {}  # host_of() of URLs asked for (the same few again and again)
        self._authorities: dict[str, str] = {}  # the host of each authority asked for (allowed_at)
        self.urls: dict[tuple[str, str | None], str] = {}  # HTTP/1.1: (absolute target, Host) -> the URL meant
        self.repeats: dict[tuple[str, str, bytes], Any] = {}  # HTTP/1.1: (scheme, tunnel, head) -> Reply.again
        self.limits = limits or WireLimits.from_env()
        self.certs = LeafCerts(ca, http2=http2, cache=self.limits.cert_cache)
        self.budget = BodyBudget(self.limits.body_budget)
        self.refused: Counter[str] = Counter()
        self.max_connections = self.limits.max_connections  # lowered at start to what the descriptors allow
        self.port: int | None = None
        self.connections: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping: asyncio.Future[None] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise ProxyError("the proxy is not running")
        return f"http://{self.host}:{self.port}"

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    def allowed(self, url: str) -> tuple[str, bool, str]:
        """``(host, ok, why)``: may the host of ``url`` be contacted (the guard policy, asked once per host)."""
        host = self._hosts.get(url)
        if host is None:
            host = host_of(url)
            if len(url) <= _MEMO_URL:
                if len(self._hosts) >= _MEMO_URLS:
                    self._hosts.clear()
                self._hosts[url] = host
        return self._decided(host)

    def allowed_at(self, authority: str) -> tuple[str, bool, str]:
        """:meth:`allowed` of a URL by its authority (``host[:port]``, as :func:`split_url` gives it)."""
        host = self._authorities.get(authority)
        if host is None:
            host = split_authority(authority, "http")[0]
            if len(self._authorities) >= _MEMO_URLS:
                self._authorities.clear()
            self._authorities[authority] = host
        return self._decided(host)

    def _decided(self, host: str) -> tuple[str, bool, str]:
        decided = self._allowed.get(host)
        if decided is None:
            decided = self._allowed[host] = self.guard.allowed(host)
        return host, decided[0], decided[1]

    def early(self, scheme: str, tunnel: str, head: bytes) -> Callable[[], None] | None:
        """Where :attr:`sends_early`: send on the request of an HTTP/1.1 ``head`` (on a connection of
        ``scheme`` through ``tunnel``) before it is read, returning what to call once it is answered, or
        None (nothing done). The base class sends nothing."""
        return None

    @abstractmethod
    def reply(self, method: str, url: str, headers: list[tuple[str, str]],
              body: bytes) -> Reply | Awaitable[Reply]:
        """The answer to one request (absolute ``url``): a :class:`Reply`, or an awaitable of one."""

    def keep_repeat(self, key: tuple[str, str, bytes], again: Callable[[], bytes | None]) -> None:
        """Remember ``again`` (:attr:`Reply.again`) for an HTTP/1.1 head (``key``: the connection's scheme
        and tunnel, the head's bytes), so that the same head is answered by :meth:`repeat`."""
        repeats = self.repeats
        if len(repeats) >= _MEMO_REPEATS and key not in repeats:
            repeats.clear()
        repeats[key] = again

    def repeat(self, again: Callable[[], bytes | None]) -> bytes | None:
        """The bytes answering again a request whose reply carried ``again``, or None (answer it anew)."""
        return again()

    def make_room(self) -> bool:
        """At the cap: close the connection silent the longest among those with no request in
        progress (idle, or no head read yet); whether there was one."""
        free = [c for c in self.connections if c.current_phase() in ("idle", "head")]
        if not free:
            return False
        min(free, key=lambda c: (max(c.last_read, c.last_write), c.opened)).expire("evicted")
        return True

    async def closing(self) -> None:  # noqa: B027 - an optional hook: most proxies hold nothing to close
        """Called in the loop when the proxy stops, before its connections close."""

    # -- in a thread (the Python API) ------------------------------------------
    def start(self, timeout: float = 20.0) -> ProxyFront:
        sock = bind_socket(self.host, self.requested_port)
        self._thread = threading.Thread(target=self._run, args=(sock,), name="ego2web-front", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            raise ProxyError(f"the proxy could not start: {self._error or 'timed out'}")
        logging.getLogger(type(self).__module__).info("proxy listening on %s", self.url)
        return self

    def _run(self, sock: socket.socket) -> None:
        loop = new_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(sock, loop.create_future(), self._ready.set))
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._error = e
            self._ready.set()
        finally:
            loop.close()

    def stop(self) -> None:
        """Stop serving, close every connection, free the port; safe to call twice."""
        loop, thread, stopping = self._loop, self._thread, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle_future, stopping)
        if thread is not None:
            thread.join(timeout=10)
        self._thread = self._loop = None
        self.port = None
        self.certs.close()

    # -- in the calling thread (worker processes) --------------------------------
    def serve_forever(self, sock: socket.socket, on_ready: Callable[[], None] | None = None,
                      until: Callable[[asyncio.Future[None]], None] | None = None) -> None:
        """Serve on ``sock`` until the future handed to ``until`` is set."""

        async def main() -> None:
            stopping = asyncio.get_running_loop().create_future()
            if until is not None:
                until(stopping)
            await self._serve(sock, stopping, on_ready or (lambda: None))

        asyncio.run(main(), loop_factory=new_loop)
        self.certs.close()

    async def _serve(self, sock: socket.socket, stopping: asyncio.Future[None], ready: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._stopping = stopping
        self.max_connections = connection_cap(self.limits, raise_nofile())
        server = await loop.create_server(lambda: _Conn(self), sock=sock)
        self.port = int(sock.getsockname()[1])
        sweeper = Sweeper(self.limits, lambda: self.connections)
        sweeper.start()
        ready()
        try:
            await stopping
        finally:
            sweeper.stop()
            server.close()
            await self.closing()
            for conn in list(self.connections):
                conn.close()
            await asyncio.sleep(0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
