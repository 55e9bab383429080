"""HTTP servers from PyPI, each serving one small app, as origins for recording tests.

The recorder reads an origin's response head strictly (``recorder.upstream.parse_response_head``);
what real servers send must pass it, keep-alive, chunking and all. :data:`SERVERS` names eleven
servers as users meet them: WSGI on gunicorn (gthread), waitress, cheroot, Werkzeug and Twisted;
ASGI on uvicorn (its h11 and its httptools parser), Hypercorn and Granian (Rust, hyper); and
Tornado and aiohttp with their own handlers. Each serves the same routes (:data:`ROUTES` says what
each answers) from its own process on 127.0.0.1, over HTTP or (all but waitress) HTTPS with a test
CA's certificate; :class:`ServerSite` starts one and stops it.
The servers come with the ``dev`` extra; :func:`installed` says whether one is here.
"""

from __future__ import annotations

import importlib.util
import os
import ssl
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

from .thirdparty import AppProcess, _free_port
from .tls import TestCA

__all__ = ["SERVERS", "ROUTES", "PAGE", "PIECES", "BIG", "ETAG", "ServerSite", "client_context", "installed", "serves_tls", "wsgi",
           "asgi"]

PAGE = ("<!doctype html><title>served</title>" + "<p>a page recorded from a real server</p>" * 60).encode()
PIECES = [b"first piece\n", b"second piece\n", b"third piece\n"]  # /stream: sent one by one, no length
BIG = bytes(range(256)) * 1200  # 300 KiB with a length
ETAG = '"v1"'
ROUTES = {
    "/page": "200 text/html with a length, an ETag and two Set-Cookie fields (HEAD: the head only; "
             "If-None-Match the ETag: 304)",
    "/stream": "200 text/plain in three pieces without a length (chunked on HTTP/1.1)",
    "/empty": "204",
    "/moved": "302 to /page",
    "/echo": "POST: 200 with the request's body",
    "/big": "200, 300 KiB with a length",
}
_COOKIES = [("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/; HttpOnly")]


def _answer(method: str, path: str, if_none_match: str | None, body: bytes
            ) -> tuple[int, list[tuple[str, str]], bytes | list[bytes]]:
    """What every server's app answers: status, headers, body (a list: sent piece by piece, no length)."""
    if path == "/page":
        if if_none_match == ETAG:
            return 304, [("ETag", ETAG)], b""
        head = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(PAGE))), ("ETag", ETAG),
                *_COOKIES]
        return 200, head, b"" if method == "HEAD" else PAGE
    if path == "/stream":
        return 200, [("Content-Type", "text/plain")], list(PIECES)
    if path == "/empty":
        return 204, [], b""
    if path == "/moved":
        return 302, [("Location", "/page"), ("Content-Length", "0")], b""
    if path == "/echo" and method == "POST":
        return 200, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))], body
    if path == "/big":
        return 200, [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(BIG)))], BIG
    return 404, [("Content-Type", "text/plain"), ("Content-Length", "9")], b"not found"


_REASONS = {200: "OK", 204: "No Content", 302: "Found", 304: "Not Modified", 404: "Not Found"}


def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The app for WSGI servers."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    status, headers, out = _answer(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                                   environ.get("HTTP_IF_NONE_MATCH"), body)
    start_response(f"{status} {_REASONS[status]}", headers)
    return iter(out) if isinstance(out, list) else [out]


async def asgi(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    """The app for ASGI servers."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    fields = dict(scope["headers"])
    status, headers, out = _answer(scope["method"], scope["path"], (fields.get(b"if-none-match") or b"").decode()
                                   or None, body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.lower().encode(), v.encode()) for k, v in headers]})
    for piece in out if isinstance(out, list) else [out]:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def run_tornado(port: int, cert: str = "", key: str = "") -> None:
    """Tornado's own server and handler (HTTPS with ``cert`` and ``key``)."""
    import asyncio

    import tornado.web

    class Handler(tornado.web.RequestHandler):
        async def _serve(self) -> None:
            status, headers, out = _answer(self.request.method or "GET", self.request.path,
                                           self.request.headers.get("If-None-Match"), self.request.body)
            self.set_status(status)
            self.clear_header("Content-Type")
            for k, v in headers:
                if k != "Content-Length" or not isinstance(out, list):
                    self.add_header(k, v)
            if isinstance(out, list):
                for piece in out:
                    self.write(piece)
                    await self.flush()
            elif out:
                self.write(out)

        get = post = head = _serve

        def compute_etag(self) -> None:  # the app's own ETag, not Tornado's
            return None

    async def main() -> None:
        tls = {"certfile": cert, "keyfile": key} if cert else None
        tornado.web.Application([(r"/.*", Handler)]).listen(port, address="127.0.0.1", ssl_options=tls)
        await asyncio.Event().wait()

    asyncio.run(main())


def run_aiohttp(port: int, cert: str = "", key: str = "") -> None:
    """aiohttp's own server and handler (HTTPS with ``cert`` and ``key``)."""
    import ssl

    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        status, headers, out = _answer(request.method, request.path, request.headers.get("If-None-Match"),
                                       await request.read())
        if isinstance(out, list):
            resp = web.StreamResponse(status=status, headers=headers)
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for piece in out:
                await resp.write(piece)
            await resp.write_eof()
            return resp
        resp = web.Response(status=status, body=out or None)
        for k, v in headers:
            if k != "Content-Length":
                resp.headers.add(k, v)
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    tls = None
    if cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cert, key)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, ssl_context=tls)


_HERE = "ego2web_replay.testing.servers"


def _bin(name: str) -> str:
    exe = Path(sys.executable).parent / name
    return str(exe) if exe.exists() else name


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


Launch = Callable[[int, str, str], list[str] | None]  # (port, cert, key: "" for HTTP) -> command, None: no TLS


def _cheroot(p: int, cert: str, key: str) -> list[str]:
    tls = f"; s.ssl_adapter = BuiltinSSLAdapter({cert!r}, {key!r})" if cert else ""
    return _py(f"from cheroot.wsgi import Server; from cheroot.ssl.builtin import BuiltinSSLAdapter; "
               f"from {_HERE} import wsgi; s = Server(('127.0.0.1', {p}), wsgi){tls}; s.start()")


def _twisted(p: int, cert: str, key: str) -> list[str]:
    endpoint = f"ssl:{p}:interface=127.0.0.1:certKey={cert}:privateKey={key}" if cert \
        else f"tcp:{p}:interface=127.0.0.1"
    return [_bin("twist"), "web", "--listen", endpoint, "--wsgi", f"{_HERE}.wsgi"]


def _uvicorn(parser: str) -> Launch:
    def launch(p: int, cert: str, key: str) -> list[str]:
        tls = ["--ssl-certfile", cert, "--ssl-keyfile", key] if cert else []
        return [_bin("uvicorn"), "--host", "127.0.0.1", "--port", str(p), "--http", parser, "--no-access-log",
                "--log-level", "warning", *tls, f"{_HERE}:asgi"]
    return launch


#: name -> (the module that must be importable, the command for a port, its certificate and key)
SERVERS: dict[str, tuple[str, Launch]] = {
    "gunicorn": ("gunicorn", lambda p, c, k: [
        _bin("gunicorn"), "-b", f"127.0.0.1:{p}", "-w", "1", "--threads", "4", "--log-level", "warning",
        *(["--certfile", c, "--keyfile", k] if c else []), f"{_HERE}:wsgi"]),
    "waitress": ("waitress", lambda p, c, k: None if c else [_bin("waitress-serve"), f"--listen=127.0.0.1:{p}",
                                                              f"{_HERE}:wsgi"]),  # no TLS in waitress
    "cheroot": ("cheroot", _cheroot),
    "werkzeug": ("werkzeug", lambda p, c, k: _py(
        f"from werkzeug.serving import run_simple; from {_HERE} import wsgi; "
        f"run_simple('127.0.0.1', {p}, wsgi, threaded=True, ssl_context={(c, k) if c else None!r})")),
    "twisted": ("twisted", _twisted),
    "uvicorn-h11": ("uvicorn", _uvicorn("h11")),
    "uvicorn-httptools": ("httptools", _uvicorn("httptools")),
    "hypercorn": ("hypercorn", lambda p, c, k: [
        _bin("hypercorn"), "-b", f"127.0.0.1:{p}", *(["--certfile", c, "--keyfile", k] if c else []),
        f"{_HERE}:asgi"]),
    "granian": ("granian", lambda p, c, k: [
        _bin("granian"), "--interface", "asgi", "--host", "127.0.0.1", "--port", str(p), "--workers", "1",
        "--log-level", "warning", *(["--ssl-certificate", c, "--ssl-keyfile", k] if c else []), f"{_HERE}:asgi"]),
    "tornado": ("tornado", lambda p, c, k: _py(f"from {_HERE} import run_tornado; run_tornado({p}, {c!r}, {k!r})")),
    "aiohttp": ("aiohttp", lambda p, c, k: _py(f"from {_HERE} import run_aiohttp; run_aiohttp({p}, {c!r}, {k!r})")),
}


def installed(name: str) -> bool:
    """Whether server ``name`` of :data:`SERVERS` can run here."""
    return importlib.util.find_spec(SERVERS[name][0]) is not None


def serves_tls(name: str) -> bool:
    """Whether server ``name`` can serve HTTPS (waitress cannot)."""
    return SERVERS[name][1](1, "c", "k") is not None


def client_context(cafile: Path) -> ssl.SSLContext:
    """A client's TLS context trusting ``cafile``, verifying as browsers do (Python 3.13's extra RFC 5280
    strictness off, as the recorder's upstream client has it: the test CA's leaf names no authority key)."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return ctx


class ServerSite(AppProcess):
    """Server ``name`` of :data:`SERVERS` on ``http://127.0.0.1:<port>``, as its own process; with
    ``tls`` (a :class:`~.tls.TestCA`), on ``https://`` with its server certificate."""

    def __init__(self, name: str, tls: TestCA | None = None) -> None:
        self.name, self.tls = name, tls
        self.port = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.port = _free_port()
        root = str(Path(__file__).resolve().parents[2])  # where this package is, for servers that import it
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        cert, key = (str(self.tls.server_cert), str(self.tls.server_key)) if self.tls else ("", "")
        cmd = SERVERS[self.name][1](self.port, cert, key)
        if cmd is None:
            raise ValueError(f"{self.name} serves no HTTPS")
        self._launch(cmd, env, self.url + "/page", 60, context=client_context(self.tls.ca_cert) if self.tls else None)
        return self
