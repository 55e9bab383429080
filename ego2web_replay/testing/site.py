"""A local test site on 127.0.0.1 (HTTP and HTTPS) that exercises what a recorder must keep.

It serves HTML with CSS, JS, images and a web font; an XHR with a cache-buster
query; a JSON POST with a timestamp field; a 302 redirect; Set-Cookie; a
gzip-encoded response; chunked responses (plain, and a gzip page); a 5 MB binary; 404 and 500
responses; a clock page for determinism checks. Every response is logged in
:attr:`TestSite.wire` with the exact body bytes put on the wire (before
chunk framing), so tests can compare an archive against what was sent.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..png import png_bytes
from .tls import TestCA, make_test_ca

__all__ = ["TestSite", "WireEntry", "BIG_SIZE"]

BIG_SIZE = 5 * 1024 * 1024
_FONT_CANDIDATES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf")


def _font() -> bytes:
    for c in _FONT_CANDIDATES:
        p = Path(c)
        if p.exists():
            return p.read_bytes()
    return b"\x00\x01\x00\x00" + bytes(2048)  # a truncated TrueType header: still fetched by @font-face


INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>Test Shop</title>
<link rel="stylesheet" href="/static/style.css"><script src="/static/app.js" defer></script></head>
<body><h1>Test Shop</h1>
<img id="logo" src="/static/logo.png" width="40" height="20" alt="logo">
<p class="fancy">Welcome to the shop.</p>
<p>Price: <span id="price">loading</span></p>
<p>Cart: <span id="cart">empty</span></p>
<p id="extras">pending</p>
<a id="product-link" href="/old-product">Snack 42</a>
<a id="clock-link" href="/clock">Clock</a>
</body></html>
"""

CHUNKED_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Streamed</title></head>
<body><h1>Streamed page</h1><p>""" + "Sent in chunks, with no Content-Length. " * 60 + """</p></body></html>
"""

STYLE = """@font-face { font-family: "TestFont"; src: url("/static/font.ttf") format("truetype"); }
body { font-family: "TestFont", sans-serif; margin: 20px; background: #fafafa; }
.fancy { color: #335; } #logo { background: url("/static/bg.png"); }
"""

APP_JS = """(async () => {
  const price = await (await fetch('/api/price?id=42&_=' + Date.now())).json();
  document.getElementById('price').textContent = price.price;
  const cart = await (await fetch('/api/cart', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({item: 42, qty: 1, ts: Date.now()})})).json();
  document.getElementById('cart').textContent = cart.items + ' item(s)';
  const data = await (await fetch('/static/data.json')).json();
  const chunked = await (await fetch('/chunked')).text();
  const big = await (await fetch('/big.bin')).arrayBuffer();
  const missing = (await fetch('/missing')).status;
  const broken = (await fetch('/api/broken')).status;
  document.getElementById('extras').textContent =
    [data.name, chunked.length, big.byteLength, missing, broken].join(' ');
  document.body.setAttribute('data-ready', '1');
})();
"""

PRODUCT = """<!doctype html>
<html><head><meta charset="utf-8"><title>Snack 42</title><link rel="stylesheet" href="/static/style.css"></head>
<body><h1 id="name">Crunchy Snack 42</h1><p id="calories">150 kcal per serving</p>
<img src="/static/snack.png" width="60" height="60" alt="snack"><a href="/">Home</a></body></html>
"""

CLOCK = """<!doctype html>
<html><head><meta charset="utf-8"><title>Clock</title></head><body>
<pre id="out">waiting</pre>
<script>
setTimeout(() => {
  const a = new Uint32Array(4); crypto.getRandomValues(a);
  document.getElementById('out').textContent = [Date.now(), new Date().toISOString(), Math.random(),
    Array.from(a).join(','), typeof performance.now()].join('\\n');
  document.body.setAttribute('data-ready', '1');
}, 50);
</script></body></html>
"""


@dataclass
class WireEntry:
    """One response the site sent."""

    method: str
    path: str
    status: int
    body: bytes = field(repr=False)
    request_body: bytes = field(repr=False, default=b"")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "ego2web-test-site/1"
    site: TestSite

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def handle(self) -> None:
        """One connection, counted while open (:meth:`TestSite.settle`)."""
        self.site._connections(+1)
        try:
            super().handle()
        finally:
            self.site._connections(-1)

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None,
              chunked: bool = False, request_body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.site._log(WireEntry(self.command, self.path, status, body, request_body))
        if self.command != "HEAD":
            if chunked:
                for i in range(0, len(body), 1000):
                    part = body[i:i + 1000]
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        site = self.site
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        html = "text/html; charset=utf-8"
        if path == "/":
            self._send(200, site.index_html.encode(), html)
        elif path == "/static/style.css":
            self._send(200, STYLE.encode(), "text/css", {"Cache-Control": "max-age=60"})
        elif path == "/static/app.js":
            self._send(200, APP_JS.encode(), "application/javascript")
        elif path == "/static/logo.png":
            self._send(200, png_bytes(40, 20, (200, 30, 30)), "image/png", {"ETag": '"logo-v1"'})
        elif path == "/static/bg.png":
            self._send(200, png_bytes(4, 4, (240, 240, 200)), "image/png")
        elif path == "/static/snack.png":
            self._send(200, png_bytes(60, 60, (230, 160, 20)), "image/png")
        elif path == "/static/font.ttf":
            self._send(200, site.font, "font/ttf")
        elif path == "/api/price":
            body = json.dumps({"id": query.get("id", ["?"])[0], "price": site.price}).encode()
            self._send(200, body, "application/json", {"Cache-Control": "no-store"})
        elif path == "/static/data.json":
            self._send(200, gzip.compress(b'{"name": "gzipped data", "n": 3}', mtime=0), "application/json",
                       {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
        elif path == "/chunked":
            self._send(200, b"chunk-" * 700, "text/plain", chunked=True)
        elif path == "/chunked-page":  # a dynamic page as many servers send it: gzip, chunked, no length
            self._send(200, gzip.compress(CHUNKED_PAGE.encode(), mtime=0), html,
                       {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}, chunked=True)
        elif path == "/big.bin":
            self._send(200, site.big, "application/octet-stream")
        elif path == "/old-product":
            self._send(302, b"moved", "text/plain", {"Location": "/product/42"})
        elif path == "/product/42":
            self._send(200, PRODUCT.encode(), html, {"Set-Cookie": "session=abc123; Path=/; HttpOnly"})
        elif path == "/clock":
            self._send(200, CLOCK.encode(), html)
        elif path == "/api/broken":
            self._send(500, b'{"error": "boom"}', "application/json")
        elif path in site.extra:
            status, ctype, body = site.extra[path]
            self._send(status, body, ctype)
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if urlsplit(self.path).path == "/api/cart":
            try:
                req = json.loads(body or b"{}")
            except json.JSONDecodeError:
                self._send(400, b'{"error": "bad json"}', "application/json", request_body=body)
                return
            out = json.dumps({"items": int(req.get("qty", 0)), "item": req.get("item")}).encode()
            self._send(200, out, "application/json", request_body=body)
        else:
            self._send(404, b"not found", "text/plain", request_body=body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class TestSite:
    """The site over HTTP (``http_url``) and HTTPS (``https_url``) on 127.0.0.1.

    ``extra`` maps more paths to ``(status, content type, body)``. ``price``
    can be changed while running (to simulate drift).
    """

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, *, https: bool = True) -> None:
        self.folder = folder
        self.price = "$3.49"
        self.index_html = INDEX
        self.font = _font()
        self.big = hashlib.shake_256(b"ego2web big").digest(BIG_SIZE)
        self.extra: dict[str, tuple[int, str, bytes]] = {}
        self.wire: list[WireEntry] = []
        self._lock = threading.Lock()
        self._open = 0  # connections being served
        self._closed = threading.Condition(self._lock)
        self.want_https = https
        self.tls: TestCA | None = None
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self.http_url = ""
        self.https_url = ""

    def _log(self, entry: WireEntry) -> None:
        with self._lock:
            self.wire.append(entry)

    def _connections(self, change: int) -> None:
        with self._closed:
            self._open += change
            self._closed.notify_all()

    def settle(self, timeout: float = 60) -> bool:
        """Wait until no connection is being served (so :attr:`wire` holds every response sent), at
        most ``timeout`` seconds; whether it did. A condition, not a pause: it holds on a busy machine."""
        with self._closed:
            return self._closed.wait_for(lambda: self._open == 0, timeout)

    def clear_log(self) -> None:
        with self._lock:
            self.wire.clear()

    def _serve(self, server: _Server) -> None:
        t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        t.start()
        self._servers.append(server)
        self._threads.append(t)

    def start(self) -> TestSite:
        handler = type("SiteHandler", (_Handler,), {"site": self})
        http_server = _Server(("127.0.0.1", 0), handler)
        self._serve(http_server)
        self.http_url = f"http://127.0.0.1:{http_server.server_address[1]}"
        if self.want_https:
            self.tls = make_test_ca(self.folder / "tls")
            https_server = _Server(("127.0.0.1", 0), handler)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls.server_cert, self.tls.server_key)
            https_server.socket = ctx.wrap_socket(https_server.socket, server_side=True)
            self._serve(https_server)
            self.https_url = f"https://127.0.0.1:{https_server.server_address[1]}"
        return self

    def stop(self) -> None:
        for s in self._servers:
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> TestSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
