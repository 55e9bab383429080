"""The fast replay front end: every served response byte-exact against the archive (HTTP/1.1 and
HTTP/2, HTTP and HTTPS, the local site and the corpus WARCs), the same bytes as the mitmproxy
engine, Chromium over HTTP/2, and the HTTP/1.1 edge cases a proxy meets."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import re
import socket
import ssl
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from ego2web_replay.actions import Action
from ego2web_replay.browser import perform_action
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.httputil import clean_response_headers
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots import Snapshot, import_warc
from ego2web_replay.tasks import Task
from ego2web_replay.testing.h2client import H2Exchange, open_h2
from ego2web_replay.testing.site import TestSite

CORPUS = Path("/work/shared/corpus/warc")
CORPUS_FILES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and (".warc" in p.name or p.suffix == ".wacz"))
SHIFTED = {"date", "expires", "last-modified"}  # moved to today, lifetimes kept (tests/test_served_as_live.py)
_COOKIE_EXPIRES = re.compile(r"(?i)(;\s*expires\s*=\s*)[^;]*")  # a Set-Cookie's Expires: moved with Date too


def _unmoved(value: str) -> str:
    return _COOKIE_EXPIRES.sub(r"\1(moved)", value)


# -- what the archive says -------------------------------------------------------------------
def archived_gets(snap_path: Path) -> dict[str, list[tuple[int, list[tuple[str, str]], bytes]]]:
    """For every GET URL of the snapshot: each capture's (status, headers as served, wire body)."""
    snap = Snapshot.open(snap_path)
    out: dict[str, list[tuple[int, list[tuple[str, str]], bytes]]] = {}
    for entry in snap.entries():
        if entry.method != "GET" or entry.record_type not in ("response", "revisit", "resource"):
            continue
        try:
            rec = snap.resolve(entry)
        except Exception:  # noqa: BLE001 - an unreadable record is answered 502 (tests/test_replay.py)
            continue
        if rec.http_status is None:
            if rec.rec_type != "resource":
                continue
            status, headers = 200, [("Content-Type", rec.content_type or entry.mime or "application/octet-stream")]
        else:
            status, headers = rec.http_status, list(rec.http_headers or [])
        out.setdefault(entry.url, []).append((status, headers, rec.payload))
    return out


def _expected_names(headers: list[tuple[str, str]]) -> list[str]:
    """Served header names: hop-by-hop ones dropped, but a response archived chunked keeps its
    Transfer-Encoding where it stood (tests/test_served_as_live.py)."""
    chunked = any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers) and not any(
        k.lower() == "content-length" for k, _ in headers)
    names = [k.lower() for k, _ in clean_response_headers(headers, keep=("transfer-encoding",) if chunked else ())
             if k.lower() != "content-length"]
    return [n for i, n in enumerate(names) if n != "transfer-encoding" or "transfer-encoding" not in names[:i]]


def assert_same(url: str, served: tuple[int, list[tuple[str, str]], bytes],
                captures: list[tuple[int, list[tuple[str, str]], bytes]], *, h2: bool = False) -> None:
    """Status, body bytes and headers (names in order, values as archived but the shifted dates;
    HTTP/2 has no Transfer-Encoding)."""
    status, headers, body = served
    for a_status, a_headers, a_body in captures:
        if (status, body) != (a_status, a_body):
            continue
        got = [(k.lower(), v) for k, v in headers if k.lower() != "content-length"]
        assert [k for k, _ in got] == [n for n in _expected_names(a_headers)
                                       if not (h2 and n in ("transfer-encoding", "te"))], url
        want = [(k.lower(), _unmoved(v.encode("latin-1", "replace").decode("latin-1")))
                for k, v in clean_response_headers(a_headers) if k.lower() not in SHIFTED | {"content-length"}]
        assert [(k, _unmoved(v)) for k, v in got if k not in SHIFTED | {"transfer-encoding"}] == want, url
        length = [v for k, v in headers if k.lower() == "content-length"]
        assert length in ([str(len(body))], []), url
        return
    raise AssertionError(f"{url}: served {status} ({len(body)} bytes) is none of its {len(captures)} capture(s)")


# -- clients ---------------------------------------------------------------------------------
#: what Chromium asks: every recorded coding is taken, so every body is served as it was recorded
#: (a client that takes fewer gets the body decoded: tests/test_replay_codings.py)
BROWSER_CODINGS = "gzip, deflate, br, zstd"


class H1Client:
    """HTTP/1.1 through the proxy with keep-alive: absolute-form for http, CONNECT tunnels for https."""

    def __init__(self, replay: Replay) -> None:
        self.proxy = urlsplit(replay.proxy_url)
        self.ctx = ssl.create_default_context(cafile=str(replay.ca_file))
        self.conns: dict[str, http.client.HTTPConnection] = {}

    def get(self, url: str, headers: dict[str, str] | None = None, method: str = "GET",
            body: bytes | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
        parts = urlsplit(url)
        conn = self.conns.get(parts.netloc + parts.scheme)
        if conn is None:
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(self.proxy.hostname, self.proxy.port, context=self.ctx, timeout=20)
                conn.set_tunnel(parts.hostname or "", parts.port or 443)
            else:
                conn = http.client.HTTPConnection(self.proxy.hostname, self.proxy.port, timeout=20)
            self.conns[parts.netloc + parts.scheme] = conn
        target = url if parts.scheme == "http" else (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(method, target, body=body, headers={"Accept-Encoding": BROWSER_CODINGS, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def h2_get(client: httpx.Client, url: str) -> tuple[int, list[tuple[str, str]], bytes]:
    with client.stream("GET", url) as r:
        assert r.http_version == "HTTP/2", url
        return r.status_code, list(r.headers.multi_items()), b"".join(r.iter_raw())


def h2_client(replay: Replay) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(replay.ca_file))
    return httpx.Client(proxy=replay.proxy_url, verify=ctx, http2=True, timeout=20,
                        headers={"Accept-Encoding": BROWSER_CODINGS})


def check_every_capture(snap_path: Path) -> Counter[str]:
    """Fetch every GET capture through the fast engine (HTTP/1.1, and HTTP/2 for https): byte-exact."""
    captures = archived_gets(snap_path)
    seen: Counter[str] = Counter()
    if not captures:  # e.g. a file of request records only
        return seen
    with Replay([snap_path], freeze=False, check=False, engine="fast") as replay:
        h1, h2 = H1Client(replay), h2_client(replay)
        try:
            for url, caps in captures.items():
                if urlsplit(url).scheme not in ("http", "https") or "#" in url:
                    continue
                assert_same(url, h1.get(url), caps)
                seen["h1"] += 1
                if url.startswith("https://"):
                    assert_same(url, h2_get(h2, url), caps, h2=True)
                    seen["h2"] += 1
        finally:
            h1.close()
            h2.close()
        stats = replay.stats()
    assert stats.miss == 0, stats.missed_urls
    return seen


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus")
def test_every_corpus_capture_is_served_byte_exact(tmp_path):
    totals: Counter[str] = Counter()
    for n, src in enumerate(CORPUS_FILES):
        snap = import_warc(src, "corpus", tmp_path / str(n), snapshot_id="s")
        totals += check_every_capture(snap.path)
    assert totals["h1"] >= 30 and totals["h2"] >= 10, totals


# -- the local site, recorded by Chromium ----------------------------------------------------
@pytest.fixture(scope="module")
def site_snapshot(chromium, ca, tmp_path_factory):
    folder = tmp_path_factory.mktemp("front-site")
    site = TestSite(folder).start()
    task = Task(id="front", instruction="x", start_url=site.https_url + "/")
    actions = [Action(kind="goto", url=site.https_url + "/"), Action(kind="wait", selector="body[data-ready='1']"),
               Action(kind="click", selector="#product-link"), Action(kind="goto", url=site.http_url + "/"),
               Action(kind="wait", selector="body[data-ready='1']")]
    with LiveRecording(task, folder / "snapshots", RecordOptions(guard="loopback", upstream_ca=site.tls.ca_cert),
                       ca=ca) as live:
        ctx = chromium.new_context(proxy_url=live.proxy_url)
        page = ctx.new_page()
        for a in actions:
            perform_action(page, a, timeout_s=20)
        ctx.close()
    assert live.ok, live.error
    site.stop()
    assert live.snapshot_path is not None
    return live.snapshot_path, site


def test_every_site_capture_is_served_byte_exact(site_snapshot):
    seen = check_every_capture(site_snapshot[0])
    assert seen["h1"] >= 15 and seen["h2"] >= 8, seen


def test_both_engines_serve_the_same_bytes(site_snapshot):
    snap, _ = site_snapshot
    urls = sorted(archived_gets(snap))
    answers = {}
    for engine in ("fast", "mitmproxy"):
        with Replay([snap], engine=engine, guard_mode="loopback") as replay:
            client = H1Client(replay)
            answers[engine] = [client.get(u) for u in urls] + [client.get(urls[0] + "-missing")]
            client.close()
    for (s1, h1, b1), (s2, h2, b2) in zip(answers["fast"], answers["mitmproxy"], strict=True):
        assert (s1, b1) == (s2, b2)
        assert [(k.lower(), v) for k, v in h1 if k.lower() not in SHIFTED] == \
               [(k.lower(), v) for k, v in h2 if k.lower() not in SHIFTED]


def test_chromium_gets_the_archived_bytes_over_http2_and_http11(site_snapshot, chromium, ca):
    snap, site = site_snapshot
    captures = archived_gets(snap)
    digest = ("async u => Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', "
              "await (await fetch(u)).arrayBuffer()))).map(b => b.toString(16).padStart(2, '0')).join('')")
    with Replay([snap], ca=ca, guard_mode="loopback", engine="fast") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        page = ctx.new_page()
        for origin, protocol in ((site.https_url, "h2"), (site.http_url, "http/1.1")):
            page.goto(origin + "/", wait_until="load")
            page.wait_for_selector("body[data-ready='1']", state="attached")
            assert page.evaluate("performance.getEntriesByType('navigation')[0].nextHopProtocol") == protocol
            for path in ("/static/style.css", "/static/logo.png", "/big.bin", "/chunked"):
                url = origin + path
                got = page.evaluate(digest, url)
                assert got in {hashlib.sha256(c[2]).hexdigest() for c in captures[url]}, url  # identity-encoded
        ctx.close()
    assert replay.stats().miss <= 4  # the page's own /missing probe (and a favicon), per origin


# -- HTTP/1.1 edge cases ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from datetime import datetime

    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    sw = SnapshotWriter(tmp_path_factory.mktemp("front-small"), "small")
    for url, body in (("http://a.example/x", b"x" * 10), ("https://b.example/y", b"y" * 200_000),
                      ("http://127.0.0.1:9/z", b"zed")):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200,
                                 reason="OK", response_headers=[("Content-Type", "text/plain")], response_body=body,
                                 date=datetime(2026, 1, 2, 3, 4, 5))
    sw.writer.write_exchange(url="http://a.example/form", method="POST", request_headers=[
        ("Content-Type", "application/x-www-form-urlencoded")], request_body=b"q=1", status=200, reason="OK",
        response_headers=[("Content-Type", "text/plain")], response_body=b"posted", date=datetime(2026, 1, 2, 3, 4, 5))
    sw.finalize()
    with Replay([sw.path], engine="fast") as replay:
        yield replay


def _raw(replay: Replay, data: bytes, *, wait_close: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", urlsplit(replay.proxy_url).port), timeout=10) as s:
        s.sendall(data)
        if not wait_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_pipelined_requests_keep_alive_and_close(small):
    two = (b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n"
           b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
    out = _raw(small, two)
    assert out.count(b"HTTP/1.1 200 OK\r\n") == 2 and out.endswith(b"x" * 10)
    assert _raw(small, b"\r\n\r\n" + two).count(b"HTTP/1.1 200 OK\r\n") == 2  # empty lines first are ignored
    assert _raw(small, b"GET http://a.example/x HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 OK\r\n")


def test_chunked_and_100_continue_request_bodies(small):
    chunked = (b"POST http://a.example/form HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n\r\n2\r\nq=\r\n1\r\n1\r\n0\r\n\r\n")
    assert _raw(small, chunked).endswith(b"posted")
    with socket.create_connection(("127.0.0.1", urlsplit(small.proxy_url).port), timeout=10) as s:
        s.sendall(b"POST http://a.example/form HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nExpect: 100-continue\r\n"
                  b"Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n\r\n")
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(b"q=1")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b"posted")


@pytest.mark.parametrize("request_bytes, status", [
    (b"GARBAGE\r\n\r\n", b"400"), (b"GET / HTTP/2.0\r\n\r\n", b"505"),
    (b"GET http://a.example/x HTTP/1.1\r\nBad Header\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", b"501"),
    # RFC 9112 / 9110: what a proxy must refuse, or a second request or header hides in the first
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
     b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nX: a\nAuthorization: Bearer t\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nX: a\rAuthorization: Bearer t\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nX: a\x00b\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nX\x00: a\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\nHost: a.example\r\n\r\n", b"400"),
    (b"GET http://a.example/x\x01 HTTP/1.1\r\n\r\n", b"400"),
    # a "#" right after the authority: one reading would take a.example, another a.example#.b.example
    (b"GET http://a.example#.b.example/x HTTP/1.1\r\n\r\n", b"400"),
    (b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nq=1", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nq=1", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\nq=1", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nContent-Length: +3\r\n\r\nq=1", b"400"),
    ("POST http://a.example/form HTTP/1.1\r\nContent-Length: \u0663\r\n\r\nq=1".encode(), b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", b"413"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffff\r\n", b"413"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 5000, b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nqq\r\n", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\nY: b\r\n\r\n", b"400"),
    ("CONNECT \u00e9.example:443 HTTP/1.1\r\n\r\n".encode(), b"400"),  # an IDN goes as A-labels (xn--)
    (b"CONNECT a.example HTTP/1.1\r\n\r\n", b"400"), (b"CONNECT a.example:99999 HTTP/1.1\r\n\r\n", b"400"),
    # lines ended by LF alone: refused as they come, not when the head timeout ends the wait for CRLF CRLF
    (b"GET http://a.example/x HTTP/1.1\nHost: a.example\n\n", b"400"),
    (b"POST http://a.example/form HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nq=1\r\n0\r\n\n", b"400"),
    (b"GET alhost://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", b"400"),  # a scheme not carried
    (b"GET /x#top HTTP/1.1\r\nHost: a.example\r\n\r\n", b"400"),  # a fragment
    (b"POST http://a.example/form HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nq=1\r\n0\r\n\r\n", b"400"),
])
def test_malformed_requests_get_one_clear_answer_and_the_connection_closes(small, request_bytes, status):
    out = _raw(small, request_bytes, wait_close=False)
    assert out.startswith(b"HTTP/1.1 " + status) and b"Connection: close" in out


def test_tunnels_tls_by_ip_and_plain_http_inside(small):
    # an IP-literal host gets a certificate for its IP; the tunnel may also carry plain HTTP (ws://)
    client = H1Client(small)
    assert client.get("https://b.example/y")[2] == b"y" * 200_000
    with socket.create_connection(("127.0.0.1", urlsplit(small.proxy_url).port), timeout=10) as s:
        s.sendall(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n")
        assert s.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        ctx = ssl.create_default_context(cafile=str(small.ca_file))
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert tls.recv(100).startswith(b"HTTP/1.1 404 ")
    ws = (b"CONNECT a.example:80 HTTP/1.1\r\nHost: a.example:80\r\n\r\n"
          b"GET /x HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n\r\n")
    out = _raw(small, ws)
    assert b"HTTP/1.1 403 Forbidden\r\n" in out and b"websocket-refused" in out
    client.close()


def test_http2_head_and_flow_control(small):
    with h2_client(small) as c:
        r = c.head("https://b.example/y")
        assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "200000"
        assert c.get("https://b.example/y").content == b"y" * 200_000  # > the 64 KiB initial window
        assert c.get("https://b.example/missing").headers["x-ego2web-replay"] == "miss"


@contextlib.contextmanager
def _h2_tunnel(replay: Replay):
    """A TLS socket to ``b.example`` through a CONNECT tunnel of the proxy, with ALPN ``h2``."""
    with socket.create_connection(("127.0.0.1", urlsplit(replay.proxy_url).port), timeout=10) as raw:
        raw.sendall(b"CONNECT b.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n")
        assert raw.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        ctx = ssl.create_default_context(cafile=str(replay.ca_file))
        ctx.set_alpn_protocols(["h2"])
        with ctx.wrap_socket(raw, server_hostname="b.example") as s:
            yield s


def test_http2_request_body_over_the_limit_is_413_and_the_connection_goes_on(small, monkeypatch):
    from ego2web_replay.wire import h1

    monkeypatch.setattr(h1, "MAX_BODY", 100_000)
    s, conn = open_h2(urlsplit(small.proxy_url).port, small.ca_file, "b.example:443")
    with s:
        talk = H2Exchange(s, conn)
        conn.send_headers(1, [(":method", "POST"), (":path", "/upload"), (":scheme", "https"),
                              (":authority", "b.example")])
        sent = talk.upload_until_answered(1, 10_000_000)  # send until the proxy answers, as flow control allows
        assert talk.status[1] == "413" and sent < 10_000_000
        while "StreamReset" not in talk.events and "StreamEnded" not in talk.events:
            talk.pump()
        assert talk.get(3, "/y", "b.example") == "200"  # the same connection serves the next stream


def test_chunked_bodies_are_read_incrementally_and_a_large_chunk_is_refused_before_it_is_kept(monkeypatch):
    """1-byte chunks leave the buffer as they come (each byte looked at once: linear, not quadratic);
    a chunk declared past the cap is a 413 before any of it is buffered."""
    from ego2web_replay.wire import h1

    got: list[bytes] = []
    written: list[bytes] = []
    handler = h1.H1Handler(lambda req: (got.append(req.body), (None, True))[1], written.append, lambda: None)
    handler.feed(b"POST http://a.example/up HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n")
    most = 0
    for i in range(20_000):
        handler.feed(b"1\r\n" + bytes([97 + i % 26]) + b"\r\n")
        most = max(most, len(handler.buf))
    handler.feed(b"0\r\nX-Trailer: dropped\r\n\r\n")
    assert got == [bytes(97 + i % 26 for i in range(20_000))] and most == 0
    monkeypatch.setattr(h1, "MAX_BODY", 1000)
    closed: list[bool] = []
    handler = h1.H1Handler(lambda req: (None, True), written.append, lambda: closed.append(True))
    handler.feed(b"POST http://a.example/up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n")
    assert written[-1].startswith(b"HTTP/1.1 413 ") and closed and not handler.buf and not handler.chunks


def test_http2_requests_no_http11_line_may_hold_are_400_and_the_connection_goes_on(small):
    """h2 refuses CR, LF and NUL itself; a space in :path or :method, a non-ASCII :authority, the wire refuses."""
    import h2.config
    import h2.connection
    import h2.events

    with _h2_tunnel(small) as s:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False,
            normalize_outbound_headers=False))
        conn.initiate_connection()
        asks = {1: (b"GET", b"b.example", b"/y HTTP/1.1"), 3: (b"GET X", b"b.example", b"/y"),
                5: (b"GET", "b\u00e9.example".encode(), b"/y"), 7: (b"GET", b"b.example:99999", b"/y"),
                9: (b"GET", b"b.example", b"/y")}
        for stream, (method, authority, path) in asks.items():
            conn.send_headers(stream, [(b":method", method), (b":scheme", b"https"), (b":authority", authority),
                                       (b":path", path)], end_stream=True)
        s.sendall(conn.data_to_send())
        status: dict[int, bytes] = {}
        while len(status) < len(asks):
            for ev in conn.receive_data(s.recv(65536)):
                if isinstance(ev, h2.events.ResponseReceived):
                    status[ev.stream_id] = dict(ev.headers)[b":status"]
                if isinstance(ev, h2.events.DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            s.sendall(conn.data_to_send())
    assert status == {1: b"400", 3: b"400", 5: b"400", 7: b"400", 9: b"200"}


def test_a_url_is_checked_for_the_upstream_wire_as_the_wire_reads_it():
    """``malformed`` (every request the recorder forwards, HTTP/2's too): the authority ends where
    ``split_url`` ends it, so a "#" right after it is refused, not read as part of a host."""
    from ego2web_replay.wire import h1

    assert h1.malformed("GET", "http://a.example/x?y", [("Host", "a.example")]) is None
    assert h1.malformed("GET", "http://a.example#.b.example/x", []) is not None
    assert h1.malformed("GET", "http://a.example/x#y", [("Host", "a.example")]) is not None  # no fragment
    assert h1.malformed("GET", "http:///x", []) is not None and h1.malformed("GET", "http://:80/x", []) is not None
    assert h1.malformed("GET", "http://a.example/x", [("Host", "")]) is not None
    assert h1.malformed("GET", "http://a.example/x y", []) is not None


def test_a_head_whose_field_lines_were_read_before_has_its_request_line_read_as_strictly():
    """The field lines of a head read before are not read again (``wire.h1._BLOCKS``): a new request line
    with them is still refused for what the whole head would be, and parses as a fresh read does."""
    from ego2web_replay.wire import h1

    block = b"\r\nHost: a.example\r\nAccept: */*  \r\nX-Long: v"
    first = h1._parse_head(b"GET http://a.example/1 HTTP/1.1" + block)
    assert block in h1._BLOCKS
    for line, status in [(b"GET http://a.example/x y HTTP/1.1", 400), (b"GET http://a.example/\x01 HTTP/1.1", 400),
                         (b"G@T http://a.example/ HTTP/1.1", 400), (b"GET http://a.example/ HTTP/2.0", 505),
                         (b"GET http://a ex/ HTTP/1.1", 400), (b"GET http://a:99999/ HTTP/1.1", 400),
                         (b"CONNECT a.example HTTP/1.1", 400), (b"GET a.example/x HTTP/1.1", 400),
                         (b"GET http://a.example#.b.example/x HTTP/1.1", 400)]:
        with pytest.raises(h1.ParseError) as err:
            h1._parse_head(line + block)
        assert err.value.status == status, line
    again = h1._parse_head(b"GET http://a.example/2?q HTTP/1.1" + block)
    h1._BLOCKS.clear()
    fresh = h1._parse_head(b"GET http://a.example/3?q HTTP/1.1" + block)
    assert (again.method, again.target, again.version) == ("GET", "http://a.example/2?q", "HTTP/1.1")
    assert again.headers == fresh.headers == first.headers == [("Host", "a.example"), ("Accept", "*/*"), ("X-Long", "v")]
    assert again.lowered == fresh.lowered and again.header("host") == "a.example"
    again.headers.append(("X", "y"))  # each request its own list: the memo is not changed through one
    assert h1._parse_head(b"GET http://a.example/4 HTTP/1.1" + block).headers == first.headers


def test_methods_are_case_sensitive_in_replay(small):
    """``get`` is not ``GET`` (RFC 9110 9.1): a method no capture was recorded with is a counted miss."""
    before = small.stats().miss
    out = _raw(small, b"get http://a.example/x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 404") and b"X-Ego2Web-Replay: miss" in out
    assert small.stats().miss == before + 1 and small.stats().log[-1].method == "get"
    out = _raw(small, b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200")


def test_empty_elements_of_a_transfer_encoding_list_are_ignored(small):
    """RFC 9110 5.6.1: a list's empty elements are ignored, so ``, chunked`` is ``chunked``."""
    out = _raw(small, b"POST http://a.example/form HTTP/1.1\r\nHost: a.example\r\nContent-Type: "
                      b"application/x-www-form-urlencoded\r\nTransfer-Encoding: , chunked\r\nConnection: close\r\n"
                      b"\r\n3\r\nq=1\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"posted")


def test_a_bare_lf_is_seen_in_a_head_that_comes_in_pieces(small):
    """The check looks at each byte of an unfinished head once, a CR and its LF split across reads included."""
    with socket.create_connection(("127.0.0.1", urlsplit(small.proxy_url).port), timeout=10) as s:
        for piece in (b"GET http://a.example/x HTTP/1.1\r", b"\nHost: a.ex", b"ample\r\nAccept: */*", b"\nX: y"):
            s.sendall(piece)
            time.sleep(0.05)
        out = s.recv(65536)
    assert out.startswith(b"HTTP/1.1 400") and b"ends with LF alone" in out
