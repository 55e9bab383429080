"""The fast recording front end against real origins on 127.0.0.1: what reaches the client, what reaches
the archive, and what happens when the origin, the archive or the policy says no.

The origin here is a raw-socket server, so each test controls the bytes on the wire: a body that runs
to the connection's end, a kept-alive connection the origin drops, a websocket upgrade, a refused port.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import hashlib
import http.client
import logging
import os
import socket
import socketserver
import struct
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable

import pytest

from ego2web_replay.guard import GuardPolicy
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.snapshots.wsrecords import CONTENT_TYPE, decode_messages
from ego2web_replay.testing.aio import run_coro
from ego2web_replay.testing.rawsock import read_head
from ego2web_replay.wire.websocket import BINARY, CLOSE, TEXT, MessageReader, frame

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC11B85"


def _read_head(sock: socket.socket, buf: bytearray) -> tuple[str, dict[str, str]] | None:
    head = read_head(sock, buf)
    if head is None:
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    n = int(headers.get("content-length", "0"))
    while len(buf) < n:
        buf += sock.recv(65536)
    del buf[:n]
    return lines[0], headers


_BAD_HEADS = {
    "/rh-space": b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",  # white space before the colon
    "/rh-nocolon": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nthis is no field\r\n\r\nok",
    # a bare LF ends a line (RFC 9112 2.2, as Chromium reads it): here it uncovers a second Content-Length
    "/rh-lf": b"HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 9\r\nContent-Length: 2\r\n\r\nok",
    "/rh-cr": b"HTTP/1.1 200 OK\r\nX-A: 1\rSet-Cookie: a=b\r\nContent-Length: 2\r\n\r\nok",
    "/rh-nul": b"HTTP/1.1 200 OK\r\nX-A: 1\x00\r\nContent-Length: 2\r\n\r\nok",
    "/rh-te-cl": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "/rh-te-gzip": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "/rh-te-10": b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    # a folded line is its field's value, joined, read as that (RFC 9112 5.2): here "chunked gzip"
    "/rh-te-fold": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n gzip\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "/rh-status": "HTTP/1.1 2\u00b20 OK\r\nContent-Length: 2\r\n\r\nok".encode("latin-1"),  # a digit, to isdigit()
    "/rh-version": b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/rh-chunk-0x": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n",
    "/rh-chunk-sign": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\nok\r\n0\r\n\r\n",
    # well-formed, kept: a folded value is one value; a chunk size with an extension
    "/rh-fold": b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n  two\r\nContent-Length: 2\r\n\r\nok",
    "/rh-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2 ;name=v\r\nok\r\n0\r\n\r\n",
    # well-formed, kept: a head whose lines a bare LF ends, all of them or some (RFC 9112 2.2)
    "/rh-lf-all": b"HTTP/1.1 200 OK\nContent-Type: text/plain\nX-Lf: all\nContent-Length: 2\n\nok",
    "/rh-lf-mixed": b"HTTP/1.1 200 OK\r\nX-Lf: some\nContent-Length: 2\r\n\nok",
}
_KEPT_HEADS = ("/rh-fold", "/rh-chunked", "/rh-lf-all", "/rh-lf-mixed")


class _Origin(socketserver.BaseRequestHandler):
    """Answers by path; ``server.seen`` counts the requests and the connections that carried them."""

    def path_of(self, buf: bytearray) -> str | None:
        """The path of the request at the head of the connection (reading its head, not its body)."""
        sock: socket.socket = self.request
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                return None
            buf += data
        return bytes(buf).split(b" ", 2)[1].decode("latin-1")

    def handle(self) -> None:
        sock: socket.socket = self.request
        self.server.connections += 1  # type: ignore[attr-defined]
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.active += 1  # type: ignore[attr-defined]
            self.server.peak = max(self.server.peak, self.server.active)  # type: ignore[attr-defined]
        try:
            self.serve(sock)
        finally:
            with self.server.lock:  # type: ignore[attr-defined]
                self.server.active -= 1  # type: ignore[attr-defined]

    def serve(self, sock: socket.socket) -> None:
        buf = bytearray()
        served = 0  # requests answered on this connection
        while True:
            if self.path_of(buf) == "/early":  # answers before reading the body, then resets the connection
                sock.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
                self.server.seen.append(("POST /early", {}))  # type: ignore[attr-defined]
                time.sleep(0.1)
                sock.close()
                return
            got = _read_head(sock, buf)
            if got is None:
                return
            line, headers = got
            path = line.split(" ")[1]
            self.server.seen.append((line, headers))  # type: ignore[attr-defined]
            served += 1
            if path == "/partial" and served > 1:  # a kept connection that dies in the middle of the answer
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nthe first")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
                sock.close()
                return
            if path == "/vanish" and served > 1:  # a kept connection that takes a request and closes unanswered
                sock.close()
                return
            if path == "/slow":  # never answers; notes when the proxy closes the connection
                sock.settimeout(10)
                with contextlib.suppress(OSError):
                    if not sock.recv(1):
                        self.server.slow_closed.set()  # type: ignore[attr-defined]
                return
            if path == "/echo":  # the request head as the origin got it
                body = repr(headers).encode()
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            elif path == "/idle-408":  # as some servers close an idle kept connection: a 408 first
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
                time.sleep(0.1)
                sock.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                sock.close()
                return
            elif path.startswith("/rh-"):  # response heads a browser or the archive could read otherwise
                sock.sendall(_BAD_HEADS[path])
                if path in _KEPT_HEADS:
                    continue
                sock.close()
                return
            elif path.startswith("/cl-"):  # Content-Lengths that could hide another response
                length = {"/cl-two": b"2\r\nContent-Length: 9", "/cl-list": b"2, 9", "/cl-digits": "\u0662".encode(),
                          "/cl-same": b"2, 2"}[path]
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: " + length + b"\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n")
            elif path == "/unasked-101":  # switches protocols though nobody asked, then speaks something else
                sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
                             b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                time.sleep(0.2)
                sock.close()
                return
            elif path == "/head-body":  # answers HEAD with a body: bytes left over on a kept connection
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra")
            elif path == "/large":  # 3 MiB of random bytes
                body = os.urandom(3 << 20)
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
            elif path == "/hints":  # early hints, one every 0.2 s, and never the answer
                with contextlib.suppress(OSError):
                    for _ in range(50):
                        sock.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n")
                        time.sleep(0.2)
                return
            elif path.startswith("/drip"):  # a body that keeps coming for 3 s: its connection busy all along
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n")
                for _ in range(30):
                    time.sleep(0.1)
                    sock.sendall(b"d")
            elif path == "/trickle":  # a long body that keeps coming, slowly
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n")
                for byte in b"trickled":
                    time.sleep(0.1)
                    sock.sendall(bytes([byte]))
            elif path.startswith("/split"):  # the head in pieces, a byte at a time at its end (a blank line split)
                head = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" if path == "/split-103" else b""
                head += b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n"
                for piece in (head[:-3], head[-3:-2], head[-2:-1], head[-1:] + b"split"):
                    sock.sendall(piece)
                    time.sleep(0.02)
            elif path.startswith("/hold"):  # a slow answer on a kept connection
                time.sleep(0.2)
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nheld")
            elif path in ("/keep", "/partial", "/vanish"):
                body = b"kept alive"
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b"
                             % (len(body), body))
            elif path == "/drop":  # says keep-alive, then drops the connection anyway
                body = b"dropped after"
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
                time.sleep(0.05)
                sock.close()
                return
            elif path == "/to-close":  # no length: the body runs to the end of the connection
                sock.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"until close " * 100)
                sock.close()
                return
            elif path.startswith("/ws"):
                accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + WS_GUID).encode()).digest())
                sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
                if "bye" in line:  # the origin ends the websocket itself
                    sock.sendall(b"\x81\x03bye")
                    sock.close()
                    return
                reader = MessageReader()  # each message echoed as a frame of the same type
                with contextlib.suppress(OSError):
                    while data := (bytes(buf) if buf else sock.recv(65536)):
                        buf.clear()
                        for m in reader.feed(data):
                            if m.opcode == CLOSE:
                                sock.sendall(frame(CLOSE, m.data))
                            else:
                                sock.sendall(frame(m.opcode, b"echo:" + m.data))
                self.server.ws_closed.set()  # type: ignore[attr-defined]
                return
            else:
                sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


@pytest.fixture(scope="module")
def origin():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Origin)
    server.daemon_threads = True
    server.seen, server.connections = [], 0  # type: ignore[attr-defined]
    server.slow_closed, server.ws_closed = threading.Event(), threading.Event()  # type: ignore[attr-defined]
    server.lock, server.active, server.peak = threading.Lock(), 0, 0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


_OPEN: list[SnapshotWriter] = []


@pytest.fixture(autouse=True)
def _close_archives():
    """Each test's archive is closed after it, whether or not the test read it back."""
    yield
    while _OPEN:
        _OPEN.pop().writer.close()


class _Recording:
    def __init__(self, root, ca, writer: object | None = None, guard: str = "loopback") -> None:
        self.snap = SnapshotWriter(root, "T", compression="zst", source="record")
        _OPEN.append(self.snap)
        self.archive = ExchangeArchive(writer or self.snap.writer)
        self.front = RecordFront(self.archive, ca=ca, guard=GuardPolicy(mode=guard))

    def __enter__(self) -> _Recording:
        self.front.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.front.stop()

    def open(self, url: str, **kw) -> tuple[int, dict[str, str], bytes]:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": self.front.url}))
        try:
            with opener.open(urllib.request.Request(url, **kw), timeout=10) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def records(self) -> list:
        """Every record of the finished archive."""
        self.snap.finalize()
        return list(iter_records(self.snap.writer.path))


def _raw(proxy_port: int, data: bytes, until: Callable[[bytes], bool], timeout: float = 10) -> tuple[socket.socket, bytes]:
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    s.sendall(data)
    got = b""
    while not until(got):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return s, got


def _ws_upgrade(port: int, path: str) -> bytes:
    return (f"GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: MDEyMzQ1Njc4OWFiY2RlZg==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n").encode()


def test_kept_alive_connections_are_reused_and_a_dropped_one_is_retried(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        before = origin.connections
        for _ in range(3):
            assert rec.open(base + "/keep")[2] == b"kept alive"
        assert origin.connections - before == 1  # three requests, one upstream connection
        assert rec.open(base + "/drop")[2] == b"dropped after"
        time.sleep(0.2)  # the origin has closed the kept connection by now
        status, _, body = rec.open(base + "/keep")
        assert (status, body) == (200, b"kept alive")
    assert rec.archive.exchanges == 5 and not rec.archive.errors


def test_a_body_that_runs_to_the_connection_end_reaches_client_and_archive_whole(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        status, headers, body = rec.open(base + "/to-close")
    assert status == 200 and body == b"until close " * 100
    assert headers["content-length"] == str(len(body))  # the client gets a length the origin never sent
    [response] = [r for r in rec.records() if r.rec_type == "response"]
    assert response.payload == b"until close " * 100
    assert response.http_protocol == "HTTP/1.1"  # archived framed, as docs/matching.md says of HTTP/1.0
    assert response.http_header("Content-Length") is not None  # the archive frames it, as for any response


def test_websocket_passes_through_both_ways_and_its_conversation_is_archived(origin, ca, tmp_path):
    port = origin.server_address[1]
    key = base64.b64encode(b"0123456789abcdef").decode()
    upgrade = (f"GET http://127.0.0.1:{port}/ws?room=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               "Cookie: sid=secret\r\n\r\n").encode()
    with _Recording(tmp_path, ca) as rec:
        s, got = _raw(rec.front.port, upgrade, lambda b: b"\r\n\r\n" in b)
        with s:
            assert got.startswith(b"HTTP/1.1 101 ")
            expected = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest())
            assert b"Sec-WebSocket-Accept: " + expected in got
            reader = MessageReader()
            sent = [(TEXT, b"hello"), (BINARY, bytes(range(256)) * 300)]  # the second over 64 KiB
            answers = []
            for opcode, data in sent:
                s.sendall(frame(opcode, data, mask=True))  # passed through unchanged, mask and all
                while not (got := reader.feed(s.recv(65536))):
                    pass
                answers += got
            assert [(m.opcode, m.data) for m in answers] == [(op, b"echo:" + d) for op, d in sent]
            s.sendall(frame(CLOSE, struct.pack("!H", 1000), mask=True))
            assert reader.feed(s.recv(100))[0].opcode == CLOSE
        deadline = time.monotonic() + 5
        while rec.front._pipes and time.monotonic() < deadline:
            time.sleep(0.02)
    assert rec.archive.exchanges == 1 and not rec.archive.errors
    response, request, talk = rec.records()[1:]  # after the warcinfo record
    assert response.rec_type == "response" and response.http_status == 101
    assert request.rec_type == "request" and request.http_header("Upgrade") == "websocket"
    assert "secret" not in request.http_header("Cookie")  # redacted like any request
    assert talk.rec_type == "metadata" and talk.content_type == CONTENT_TYPE
    assert talk.url == f"http://127.0.0.1:{port}/ws?room=1" and talk.concurrent_to == [response.record_id]
    messages = decode_messages(talk.payload)
    assert [(m.side, m.kind, m.data) for m in messages] == [
        ("client", "text", b"hello"), ("server", "text", b"echo:hello"),
        ("client", "binary", sent[1][1]), ("server", "binary", b"echo:" + sent[1][1]),
        ("client", "close", struct.pack("!H", 1000)), ("server", "close", struct.pack("!H", 1000))]
    assert all(0 <= a.t <= b.t for a, b in zip(messages, messages[1:], strict=False))


def test_a_websocket_open_when_the_recording_stops_is_archived_up_to_there(origin, ca, tmp_path):
    with _Recording(tmp_path, ca) as rec:
        s, got = _raw(rec.front.port, _ws_upgrade(origin.server_address[1], "/ws"), lambda b: b"\r\n\r\n" in b)
        s.sendall(frame(TEXT, b"still here", mask=True))
        reader = MessageReader()
        while not (echoed := reader.feed(s.recv(65536))):
            pass
        assert echoed[0].data == b"echo:still here"
    s.close()  # the recording stopped first: the proxy closed the websocket and archived it
    talk = rec.records()[-1]
    assert talk.rec_type == "metadata"
    assert [(m.side, m.data) for m in decode_messages(talk.payload)] == [
        ("client", b"still here"), ("server", b"echo:still here")]


def test_a_conversation_over_the_bound_is_archived_up_to_there_and_marked_truncated(tmp_path):
    from ego2web_replay.recorder.websocket import WebsocketTap

    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    _OPEN.append(snap)
    tap = WebsocketTap(ExchangeArchive(snap.writer), url="http://ws.example/big", request_headers=[], status=101,
                       reason="Switching Protocols", response_headers=[], http_version="HTTP/1.1", ip=None,
                       started=time.time(), authority=None, max_bytes=2000)
    for n in range(5):
        tap.client(frame(BINARY, bytes([n]) * 500, mask=True))
    tap.finish()
    snap.finalize()
    talk = list(iter_records(snap.writer.path))[-1]
    assert talk.headers.get("WARC-Truncated") == "length"
    assert [m.data for m in decode_messages(talk.payload)] == [bytes([n]) * 500 for n in range(2)]


def test_an_origin_that_refuses_is_a_502_kept_among_the_errors(ca, tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _Recording(tmp_path, ca) as rec:
        status, headers, body = rec.open(f"http://127.0.0.1:{port}/x?token=secret")
    assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=connect"
    assert b"cannot connect to 127.0.0.1" in body
    assert rec.archive.exchanges == 0
    [error] = rec.archive.errors
    assert f"127.0.0.1:{port}/x" in error and "secret" not in error  # credentials redacted in the report


def test_hosts_outside_the_policy_are_answered_by_the_proxy_and_counted(origin, ca, tmp_path):
    with _Recording(tmp_path, ca) as rec:
        status, headers, body = rec.open("http://example.com/page")
        background = rec.open("http://update.googleapis.com/service/update2")
    assert status == 403 and headers["x-ego2web-replay"] == "blocked; reason=not-allowed"
    assert background[0] == 403
    assert dict(rec.front.counts) == {"not-allowed": 1, "background": 1}
    assert rec.front.blocked_urls == ["http://example.com/page", "http://update.googleapis.com/service/update2"]
    assert rec.archive.exchanges == 0


def test_a_failed_write_refuses_that_exchange_and_every_later_one(site, ca, tmp_path):
    """Nothing passes unrecorded: the exchange whose write failed is not delivered whole (its head and
    all but its last piece went as they came; the rest is withheld and the connection cut)."""

    class Broken:
        def write_exchange(self, **kw):
            raise OSError(28, "No space left on device")

    with _Recording(tmp_path, ca, writer=Broken()) as rec:
        with pytest.raises(http.client.IncompleteRead):
            rec.open(site.http_url + "/product/42")
        later = rec.open(site.http_url + "/")
    assert later[0] == 502 and later[1]["x-ego2web-replay"] == "recording-failed"
    assert rec.archive.failed and "No space left" in rec.archive.failed and rec.archive.exchanges == 0


def test_a_chunked_request_body_goes_upstream_with_its_length(site, ca, tmp_path):
    """A POST whose body the client sent chunked reaches the origin whole, with a Content-Length."""
    with _Recording(tmp_path, ca) as rec:
        port = rec.front.port
        target = site.http_url + "/api/cart"
        request = (f"POST {target} HTTP/1.1\r\nHost: {target.split('/')[2]}\r\nContent-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   "7\r\n{\"item\"\r\n6\r\n: 42}\n\r\n0\r\n\r\n").encode()
        s, got = _raw(port, request, lambda b: False)
        s.close()
    assert got.startswith(b"HTTP/1.1 200 "), got[:200]
    assert got.endswith(b'{"items": 0, "item": 42}')  # the origin read the whole body
    [request] = [r for r in rec.records() if r.rec_type == "request"]
    assert request.payload == b'{"item": 42}\n'


def test_a_kept_connection_that_dies_mid_answer_is_cut_never_a_resend(origin, ca, tmp_path):
    """Only a request nothing of whose answer came is sent again (as Chromium does): the POST goes once.
    Its answer was streamed as it came, so the client sees it cut (never whole); nothing is archived."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        assert rec.open(base + "/partial")[2] == b"kept alive"
        before = len(origin.seen)
        with pytest.raises(http.client.IncompleteRead):
            rec.open(base + "/partial", data=b"order=1", method="POST")
    assert [line for line, _ in origin.seen[before:]] == ["POST /partial HTTP/1.1"]
    assert rec.archive.exchanges == 1
    assert rec.archive.errors == [f"{base}/partial: the origin closed the connection in the middle of the body"]


def test_an_answer_sent_before_the_body_was_read_reaches_the_client(origin, ca, tmp_path):
    """An origin may refuse a large upload at once and reset the connection: its answer is the response."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        status, _, body = rec.open(base + "/early", data=os.urandom(16_000_000), method="POST")
    assert (status, body) == (413, b"too large")
    [response] = [r for r in rec.records() if r.rec_type == "response"]
    assert response.http_status == 413 and response.payload == b"too large"


def test_hop_by_hop_fields_and_expect_stay_on_the_client_hop(origin, ca, tmp_path):
    """Connection and the fields it names are not forwarded (RFC 9110 7.6.1); the proxy answers Expect itself
    and, as mitmproxy does, neither sends it upstream nor archives it."""
    port = origin.server_address[1]
    request = (f"POST http://127.0.0.1:{port}/echo HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
               "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-End: 2\r\nExpect: 100-continue\r\n"
               "Content-Length: 4\r\n\r\n").encode()
    with _Recording(tmp_path, ca) as rec:
        s, got = _raw(rec.front.port, request, lambda b: b"100 Continue\r\n\r\n" in b)
        with s:
            s.sendall(b"data")
            while b"x-end" not in got:
                got += s.recv(65536)
    seen = origin.seen[-1][1]
    assert seen["x-end"] == "2" and seen["content-length"] == "4"
    assert not {"connection", "x-hop", "expect"} & set(seen)
    [request_record] = [r for r in rec.records() if r.rec_type == "request"]
    assert request_record.http_header("Expect") is None and request_record.payload == b"data"


def test_stopping_closes_upstream_connections_in_flight(origin, ca, tmp_path, caplog):
    """Nothing left open or pending when the proxy stops: the origin sees its connection closed."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    origin.slow_closed.clear()
    gc.collect()  # what earlier tests left is not this test's
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.ERROR, logger="asyncio"):
        warnings.simplefilter("always", ResourceWarning)
        with _Recording(tmp_path, ca) as rec:
            rec.open(base + "/keep")  # one kept connection too
            waiting = threading.Thread(target=rec.open, args=(base + "/slow",), daemon=True)
            waiting.start()
            deadline = time.monotonic() + 5
            while not any(line.startswith("GET /slow") for line, _ in origin.seen) and time.monotonic() < deadline:
                time.sleep(0.02)
        assert origin.slow_closed.wait(5)
        waiting.join(5)
        gc.collect()
    assert not [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert "Task was destroyed" not in caplog.text
    assert rec.archive.errors == []  # the proxy's own stop cut that exchange, not the origin


def test_request_bytes_that_are_not_utf8_are_archived_not_fatal(origin, ca, tmp_path):
    """A header value a page set with a Latin-1 byte (fetch allows it) and a raw byte in the query: both
    are archived (the header as mitmproxy holds it, the URL percent-encoded) and the recording goes on."""
    host = f"127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        for head in (f"GET http://{host}/keep HTTP/1.1\r\nHost: {host}\r\nX-Name: caf".encode() + b"\xe9\r\n",
                     f"GET http://{host}/keep?q=".encode() + b"\xff HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"):
            s, got = _raw(rec.front.port, head + b"Connection: close\r\n\r\n", lambda b: False)
            s.close()
            assert got.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 404 ")), got[:80]
        assert rec.open(f"http://{host}/keep")[0] == 200
    assert rec.archive.failed is None and rec.archive.exchanges == 3
    requests = [r for r in rec.records() if r.rec_type == "request"]
    assert [r.http_header("X-Name") for r in requests if r.url.endswith("/keep")][:1] == ["caf%C3%A9"]
    assert f"http://{host}/keep?q=%FF" in [r.url for r in requests]


def test_connections_to_one_origin_are_bounded_as_a_browser_bounds_them(origin, ca, tmp_path):
    """Many requests at once (HTTP/2 streams, or many client connections) share at most PER_ORIGIN
    upstream connections, as Chromium talking HTTP/1.1 to a site would: a small origin is not flooded."""
    from ego2web_replay.recorder.upstream import PER_ORIGIN

    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        with origin.lock:
            origin.peak = before = origin.active  # connections earlier tests may still be closing
        answers: list[bytes] = []
        clients = [threading.Thread(target=lambda i=i: answers.append(rec.open(f"{base}/hold?{i}")[2]))
                   for i in range(3 * PER_ORIGIN)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(20)
    assert answers == [b"held"] * 3 * PER_ORIGIN
    assert origin.peak - before <= PER_ORIGIN


def test_a_websocket_tunnel_closes_when_either_side_closes(origin, ca, tmp_path):
    port = origin.server_address[1]

    def upgrade(path: str) -> bytes:
        return _ws_upgrade(port, path)

    with _Recording(tmp_path, ca) as rec:
        origin.ws_closed.clear()
        s, got = _raw(rec.front.port, upgrade("/ws"), lambda b: b"\r\n\r\n" in b)
        assert got.startswith(b"HTTP/1.1 101 ")
        s.close()  # the client goes: the proxy closes the origin's side
        assert origin.ws_closed.wait(5)
        s, got = _raw(rec.front.port, upgrade("/ws?bye"), lambda b: b"bye" in b)
        with s:  # the origin goes: the proxy closes the client's side
            assert got.endswith(b"bye")
            s.settimeout(5)
            assert s.recv(100) == b""
        deadline = time.monotonic() + 5
        while rec.front._pipes and time.monotonic() < deadline:  # both tunnels end: nothing left open
            time.sleep(0.02)
        assert not rec.front._pipes


def test_leaf_certificates_leave_nothing_on_disk(ca, tmp_path, monkeypatch):
    """Even while the proxy runs (a killed process never cleans up), no leaf or key stays in the temp folder."""
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    front = RecordFront(ExchangeArchive(None), ca=ca, guard=GuardPolicy(mode="loopback"))
    try:
        ctx = front.certs.context("leaf.example")
        assert ctx is front.certs.context("LEAF.example.")  # one context per host
        assert list(temp.iterdir()) == []
    finally:
        front.certs.close()


def test_a_408_on_a_reused_connection_is_the_origin_closing_it_not_the_answer(origin, ca, tmp_path):
    """Some servers send 408 before closing an idle kept connection; Chromium then sends again on a fresh
    one, and so does the recorder: the next request gets its own answer, not that 408."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        assert rec.open(base + "/idle-408")[2] == b"first"
        time.sleep(0.3)  # the 408 has come and the origin has closed
        assert rec.open(base + "/keep")[:3:2] == (200, b"kept alive")
    assert [r.http_status for r in rec.records() if r.rec_type == "response"] == [200, 200]


def test_a_body_that_keeps_coming_slowly_is_not_cut_by_the_read_timeout(origin, ca, tmp_path):
    """The read timeout is the longest wait between reads of a body with a length (a large download on a
    slow line takes as long as it takes); nothing at all for that long is a 502."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        rec.front.upstream.read_timeout_s = 0.5  # the trickle takes 0.8 s, 0.1 s between bytes
        assert rec.open(base + "/trickle")[:3:2] == (200, b"trickled")
        status, headers, _ = rec.open(base + "/slow")
    assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=timeout"


def test_waiting_for_a_connection_to_the_origin_is_bounded_too(origin, ca, tmp_path):
    """With every connection to an origin busy (downloads that keep coming), a further request waits its
    turn for at most the read timeout: then a 502 saying so, not a wait as long as the downloads take."""
    from ego2web_replay.recorder.upstream import PER_ORIGIN

    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        rec.front.upstream.read_timeout_s = 1.0
        drips: list[bytes] = []
        busy = [threading.Thread(target=lambda i=i: drips.append(rec.open(f"{base}/drip?{i}")[2]))
                for i in range(PER_ORIGIN)]
        for t in busy:
            t.start()
        time.sleep(0.5)  # every connection taken
        started = time.monotonic()
        status, headers, body = rec.open(base + "/keep")
        waited = time.monotonic() - started
        for t in busy:
            t.join(20)
    assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=timeout"
    assert b"connections came free within 1 s" in body and waited < 2.5  # the downloads take 3 s
    assert drips == [b"d" * 30] * PER_ORIGIN  # they went on, whole


def test_interim_answers_do_not_put_off_the_read_timeout(origin, ca, tmp_path):
    """The read timeout bounds the wait for the final head, however many 103s come before it."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        rec.front.upstream.read_timeout_s = 1.0
        started = time.monotonic()
        status, headers, _ = rec.open(base + "/hints")
        waited = time.monotonic() - started
    assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=timeout"
    assert waited < 5  # the origin would go on with its hints for 10 s



def test_a_post_on_a_reused_connection_that_got_no_answer_is_sent_again_as_chromium_does(origin, ca, tmp_path):
    """Nothing of an answer came on a reused kept-alive connection: the request, POST included, is sent once
    more on a fresh connection, which is Chromium's own rule (docs/ARCHITECTURE.md). The origin may then see
    it twice, exactly as it would from the browser without the recorder."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        assert rec.open(base + "/vanish")[2] == b"kept alive"
        before = len(origin.seen)
        assert rec.open(base + "/vanish", data=b"order=2", method="POST")[:3:2] == (200, b"kept alive")
    assert [line for line, _ in origin.seen[before:]] == ["POST /vanish HTTP/1.1"] * 2
    assert rec.archive.exchanges == 2 and not rec.archive.errors


def test_a_get_on_a_reused_connection_that_got_no_answer_is_sent_again(origin, ca, tmp_path):
    """A GET on a kept connection goes out at once and its head is read as it comes, with no task
    (``UpstreamPool.fetch_now``); a connection that ends unanswered is sent again on a fresh one, as
    for any request, and the client gets the answer, once, with nothing noted as an error."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        assert rec.open(base + "/vanish")[2] == b"kept alive"
        before = len(origin.seen)
        assert rec.open(base + "/vanish")[:3:2] == (200, b"kept alive")
        assert rec.open(base + "/keep")[:3:2] == (200, b"kept alive")  # on the fresh connection, kept
    assert [line for line, _ in origin.seen[before:]] == ["GET /vanish HTTP/1.1"] * 2 + ["GET /keep HTTP/1.1"]
    assert rec.archive.exchanges == 3 and not rec.archive.errors


def test_answers_on_a_kept_connection_are_given_without_a_task_and_others_as_before(origin, ca, tmp_path):
    """Over a kept connection: a body to stream is answered from the connection's own callback (no
    task); an answer read whole (to the connection's end), a HEAD, a refused head and a 101 nobody
    asked for go on as before, each as the tests above expect it, and the connection's slot is free
    after every one."""
    from ego2web_replay.recorder.upstream import PER_ORIGIN

    base = f"http://127.0.0.1:{origin.server_address[1]}"
    key = ("http", "127.0.0.1", origin.server_address[1])
    with _Recording(tmp_path, ca) as rec:
        made: list[object] = []
        reply = rec.front.reply

        def spy(*args: object) -> object:
            got = reply(*args)  # type: ignore[arg-type]
            made.append(got)
            return got

        rec.front.reply = spy  # type: ignore[method-assign]
        assert rec.open(base + "/keep")[2] == b"kept alive"  # the first: a connection is opened (a task)
        assert rec.open(base + "/keep")[2] == b"kept alive"
        assert isinstance(made[0], asyncio.Task) and not isinstance(made[1], asyncio.Task)
        assert rec.open(base + "/to-close")[2] == b"until close " * 100
        assert rec.open(base + "/keep")[2] == b"kept alive"
        assert rec.open(base + "/rh-nul")[0] == 502
        assert rec.open(base + "/keep")[2] == b"kept alive"
        assert rec.open(base + "/unasked-101")[0] == 502
        assert rec.open(base + "/keep", method="HEAD")[:3:2] == (200, b"")
        assert rec.open(base + "/split")[:3:2] == (200, b"split")  # a head that comes in pieces
        assert rec.open(base + "/split-103")[:3:2] == (200, b"split")  # an interim answer first
        assert rec.front.upstream._slots[key].free == PER_ORIGIN
    assert len(rec.archive.errors) == 2, rec.archive.errors  # the refused head and the 101


def test_a_client_gone_before_the_head_stops_the_exchange_on_a_kept_connection(origin, ca, tmp_path):
    """The client leaves while the origin has not answered: the exchange is stopped, its connection
    closed (the origin sees it go), its slot freed, the request counted as cancelled, nothing archived."""
    from ego2web_replay.recorder.upstream import PER_ORIGIN

    port = origin.server_address[1]
    base = f"http://127.0.0.1:{port}"
    with _Recording(tmp_path, ca) as rec:
        assert rec.open(base + "/keep")[2] == b"kept alive"

        async def leave() -> tuple[bool, int]:
            answer = rec.front.reply("GET", base + "/slow", [("Host", f"127.0.0.1:{port}")], b"")
            await asyncio.sleep(0.2)
            no_task = not isinstance(answer, asyncio.Task)
            assert isinstance(answer, asyncio.Future)
            answer.cancel()
            await asyncio.sleep(0.2)
            return no_task, rec.front.upstream._slots[("http", "127.0.0.1", port)].free

        origin.slow_closed.clear()
        assert rec.front._loop is not None
        no_task, free = asyncio.run_coroutine_threadsafe(leave(), rec.front._loop).result(10)
        assert no_task and free == PER_ORIGIN
        assert rec.front.cancelled == 1 and rec.front.cancelled_urls == [base + "/slow"]
        deadline = time.monotonic() + 5
        while not origin.slow_closed.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert origin.slow_closed.is_set()
    assert rec.archive.exchanges == 1 and not rec.archive.errors


def test_a_kept_connection_with_bytes_nobody_asked_for_is_not_reused(origin, ca, tmp_path):
    """An origin that answers HEAD with a body leaves bytes on the connection; reusing it would read them as
    the next answer. Like Chromium, the recorder does not reuse a connection that is not idle."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        assert rec.open(base + "/head-body", method="HEAD")[:2] == (200, {"content-length": "5"})
        time.sleep(0.2)
        assert rec.open(base + "/keep")[:3:2] == (200, b"kept alive")
    assert not rec.archive.errors


def test_stopping_while_connecting_to_an_origin_leaves_nothing_pending(ca, tmp_path):
    """An origin whose connect never completes (its accept queue is full) holds no task past the stop."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(full.getsockname())
        time.sleep(0.1)
        url = f"http://127.0.0.1:{full.getsockname()[1]}/never"
        with _Recording(tmp_path, ca) as rec:
            def ask() -> None:
                with contextlib.suppress(OSError):  # the proxy closes the connection as it stops
                    rec.open(url)

            waiting = threading.Thread(target=ask, daemon=True)
            waiting.start()
            time.sleep(0.5)
            assert len(rec.front._inflight) == 1  # still connecting
        waiting.join(5)
        for filler in fillers:
            filler.close()
    assert not rec.front._inflight  # ended with the proxy, not left pending in a closed loop
    assert rec.archive.errors == []


def test_a_body_past_the_record_cap_is_refused_not_archived_where_the_index_would_refuse_it(origin, ca, tmp_path,
                                                                                           monkeypatch):
    """The snapshot reader refuses a record over EGO2WEB_MAX_RECORD_BYTES; the recorder does not archive one,
    so the rest of the recording still finalizes."""
    monkeypatch.setenv("EGO2WEB_MAX_RECORD_BYTES", str(2 << 20))
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        status, headers, body = rec.open(base + "/large")
        assert rec.open(base + "/keep")[2] == b"kept alive"
    assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=protocol"
    assert b"too large to archive" in body
    assert [r.url for r in rec.records() if r.rec_type == "response"] == [base + "/keep"]


def test_an_origin_whose_content_lengths_differ_or_are_no_digits_is_a_502_and_nothing_is_archived(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        for path in ("/cl-two", "/cl-list", "/cl-digits"):
            status, headers, _ = rec.open(base + path)
            assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=protocol", path
        assert rec.open(base + "/cl-same")[:3:2] == (200, b"ok")  # equal values in a list are one length
    assert rec.archive.exchanges == 1


def test_a_response_head_read_otherwise_by_a_browser_or_the_archive_is_a_502_and_nothing_is_archived(
        origin, ca, tmp_path):
    """The recorder reads the origin's head strictly (RFC 9112): what Chromium, the archive's reader and
    the recorder could each frame differently is refused before any of it reaches the browser."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    refused = [p for p in _BAD_HEADS if not p.startswith("/rh-chunk") and p not in _KEPT_HEADS]
    with _Recording(tmp_path, ca) as rec:
        for path in refused:
            status, headers, body = rec.open(base + path)
            assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=protocol", path
            assert b"upstream 127.0.0.1" in body, path
        folded = rec.open(base + "/rh-fold")
        chunked = rec.open(base + "/rh-chunked")
        before = origin.connections
        lf_all, lf_mixed = rec.open(base + "/rh-lf-all"), rec.open(base + "/rh-lf-mixed")
        assert rec.open(base + "/keep")[2] == b"kept alive"
        assert origin.connections - before <= 1  # an origin that ends its lines with LF is kept alive all the same
    assert folded[0] == 200 and folded[1]["x-folded"] == "one two" and folded[2] == b"ok"
    assert chunked[0] == 200 and chunked[2] == b"ok"
    assert lf_all[:3:2] == (200, b"ok") and lf_all[1]["x-lf"] == "all" and lf_all[1]["content-type"] == "text/plain"
    assert lf_mixed[:3:2] == (200, b"ok") and lf_mixed[1]["x-lf"] == "some"
    responses = [r for r in rec.records() if r.rec_type == "response"]
    assert [r.url.removeprefix(base) for r in responses] == ["/rh-fold", "/rh-chunked", "/rh-lf-all", "/rh-lf-mixed",
                                                            "/keep"]
    assert ("X-Folded", "one two") in responses[0].http_headers  # the archive holds what the browser got
    assert ("X-Lf", "all") in responses[2].http_headers and ("Content-Length", "2") in responses[3].http_headers


def test_a_chunk_size_that_is_not_plain_hex_cuts_the_body_and_nothing_is_archived(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        for path in ("/rh-chunk-0x", "/rh-chunk-sign"):
            with pytest.raises((http.client.IncompleteRead, OSError, http.client.HTTPException)):
                rec.open(base + path)  # the head went out (a streamed body); the body is cut, never completed
        assert rec.open(base + "/rh-chunked")[2] == b"ok"
    assert [r.url for r in rec.records() if r.rec_type == "response"] == [base + "/rh-chunked"]
    assert len(rec.archive.errors) == 2 and all("chunk" in e for e in rec.archive.errors), rec.archive.errors


def test_a_recording_holds_the_wire_limits_it_was_given_and_reports_what_they_refused(tmp_path, ca):
    from ego2web_replay.recorder.session import LiveRecording, RecordOptions
    from ego2web_replay.tasks import Task
    from ego2web_replay.wire.budget import WireLimits

    task = Task(id="W", instruction="nothing", start_url="http://127.0.0.1:9/")
    opts = RecordOptions(guard="loopback", screenshots=False, wire=WireLimits(head_timeout_s=0.3))
    with LiveRecording(task, tmp_path, opts, ca=ca) as live:
        port = int(live.proxy_url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:  # says nothing
            out = b""
            while chunk := s.recv(65536):
                out += chunk
    assert out.startswith(b"HTTP/1.1 408 ") and b"within 0.3 s" in out
    assert live.ok and live.refused == {"timeout-head": 1}


def test_a_request_goes_upstream_within_the_call_that_received_it(ca, tmp_path):
    """The forwarding starts in ``reply`` itself (an eager task), not on a later turn of the loop: by the
    time ``reply`` returns, the origin's connection slot is taken and the connection is being opened."""
    from ego2web_replay.recorder.upstream import PER_ORIGIN
    from ego2web_replay.testing.aio import run_coro

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    writer = SnapshotWriter(tmp_path, "eager", compression="none", source="record")
    front = RecordFront(ExchangeArchive(writer.writer), ca=ca, guard=GuardPolicy(mode="loopback"))

    async def ask() -> int:
        task = front.reply("GET", f"http://127.0.0.1:{port}/x", [("Host", f"127.0.0.1:{port}")], b"")
        slots = front.upstream._slots.get(("http", "127.0.0.1", port))
        taken = PER_ORIGIN - slots.free if slots is not None else 0
        assert isinstance(task, asyncio.Task)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await front.upstream.aclose()
        return taken

    try:
        assert run_coro(ask(), timeout_s=30) == 1
    finally:
        listener.close()
        front.certs.close()
        writer.writer.close()


def test_a_head_ends_at_its_blank_line_whether_crlf_or_a_bare_lf_ends_its_lines():
    """The origin's head is read up to its first blank line, whichever line ends it: the same bytes
    whether they come at once or a byte at a time (an end split across reads), the body left unread
    (a blank line in the body never taken for the head's), a head past the limit refused."""
    from ego2web_replay.recorder import upstream

    async def read(data: bytes, step: int = 0) -> tuple[bytes, bytes]:
        reader = upstream.HeadReader(limit=upstream.MAX_HEAD)

        async def feed() -> None:
            for i in range(0, len(data), step):
                reader.feed_data(data[i:i + step])
                await asyncio.sleep(0)
            reader.feed_eof()

        if step:
            feeding = asyncio.ensure_future(feed())
        else:
            reader.feed_data(data)
            reader.feed_eof()
        head = await upstream.read_head_bytes(reader)
        rest = await reader.read()
        if step:
            await feeding
        return upstream.head_lines(head), rest

    crlf = b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2"
    for data in (crlf + b"\r\n\r\n", crlf.replace(b"\r\n", b"\n") + b"\n\n", b"HTTP/1.1 200 OK\nA: 1\r\nB: 2\n\r\n",
                 b"HTTP/1.1 200 OK\r\nA: 1\nB: 2\r\n\n"):
        for step in (0, 1, 2, 3):
            assert run_coro(read(data + b"body\n\nmore\r\n\r\n", step)) == (crlf, b"body\n\nmore\r\n\r\n"), (data, step)
    assert run_coro(read(b"HTTP/1.1 200 OK\r\nA: 1\r\rB\n\n"))[0] == b"HTTP/1.1 200 OK\r\nA: 1\r\rB"  # a lone CR stays
    for step in (0, 4096):
        with pytest.raises(asyncio.LimitOverrunError):
            run_coro(read(b"HTTP/1.1 200 OK\r\n" + b"X-Long: %b\r\n" % (b"x" * 1000) * 300 + b"\r\n", step))
    for step in (0, 1):
        with pytest.raises(asyncio.IncompleteReadError) as cut:  # closed within the head: what came is kept
            run_coro(read(b"HTTP/1.1 200 OK\r\nA: 1\r\n", step))
        assert cut.value.partial == b"HTTP/1.1 200 OK\r\nA: 1\r\n"  # not empty: the answer began, never a resend


def test_an_upgrade_other_than_a_websocket_stays_on_the_client_hop(origin, ca, tmp_path):
    """An h2c upgrade (``curl --http2`` on http) is not asked of the origin (tests/test_replay_clients.py
    records one from Hypercorn); a 101 the origin sends unasked would make the exchange a tunnel that
    nothing archives: it is a 502 among the errors."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        sent = []
        for connection in ("Upgrade, HTTP2-Settings", "keep-alive"):  # (an Upgrade the Connection fails to name)
            conn = http.client.HTTPConnection("127.0.0.1", rec.front.port, timeout=10)
            conn.request("GET", base + "/echo", headers={"Connection": connection, "Upgrade": "h2c",
                                                         "HTTP2-Settings": "AAMAAABkAAQAoAAA"})
            resp = conn.getresponse()
            sent.append((resp.status, resp.read().decode().lower()))
            conn.close()
        status, headers, body = rec.open(base + "/unasked-101")
    for code, head in sent:
        assert code == 200 and "h2c" not in head and "http2-settings" not in head and "upgrade" not in head, head
    assert status == 502 and headers["x-ego2web-replay"] == "upstream-error; kind=protocol"
    assert any("101 Switching Protocols nobody asked for" in e for e in rec.archive.errors), rec.archive.errors
    assert [r.url for r in rec.records() if r.rec_type == "response"] == [base + "/echo"] * 2


def test_a_request_is_forwarded_only_to_the_host_its_target_names(origin, ca, tmp_path):
    """An absolute target names its host (a Host that disagrees is ignored, RFC 9112 3.2.2); a target of
    another scheme, a fragment, Transfer-Encoding from an HTTP/1.0 client, or no host at all is a 400;
    a request that names the recording proxy itself is a 508, never forwarded back to it."""
    port = origin.server_address[1]
    with _Recording(tmp_path, ca) as rec:
        proxy = rec.front.port
        before = len(origin.seen)
        s, got = _raw(proxy, f"GET http://127.0.0.1:{port}/keep HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
                             "Connection: close\r\n\r\n".encode(), lambda b: b"kept alive" in b)
        s.close()
        assert got.startswith(b"HTTP/1.1 200") and origin.seen[-1][0] == "GET /keep HTTP/1.1"
        for bad, status in [
            (f"GET alhost://evil.example/p HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"400"),
            (f"GET http://127.0.0.1:{port}/keep#top HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"400"),
            (f"GET /keep#top HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n", b"400"),
            (f"POST http://127.0.0.1:{port}/form HTTP/1.0\r\nTransfer-Encoding: chunked\r\n"
             "Connection: keep-alive\r\n\r\n3\r\nq=1\r\n0\r\n\r\n", b"400"),
            ("GET /keep HTTP/1.1\r\n\r\n", b"400"),  # no Host and no tunnel: no host to go to
            ("GET /keep HTTP/1.1\r\nHost: \r\n\r\n", b"400"),
            ("GET /keep HTTP/1.1\r\nHost: :80\r\n\r\n", b"400"),
            (f"GET http://127.0.0.1:{proxy}/keep HTTP/1.1\r\nHost: 127.0.0.1:{proxy}\r\n\r\n", b"508"),
            (f"GET /keep HTTP/1.1\r\nHost: localhost:{proxy}\r\n\r\n", b"508"),
            # the same address in the other spellings a resolver takes
            *[(f"GET http://{host}:{proxy}/keep HTTP/1.1\r\nHost: {host}:{proxy}\r\n\r\n", b"508")
              for host in ("2130706433", "0x7f000001", "127.1", "0", "[::ffff:127.0.0.1]", "[::1]", "app.localhost")],
        ]:
            s, got = _raw(proxy, bad.encode(), lambda b: b"\r\n\r\n" in b)
            s.close()
            assert got.startswith(b"HTTP/1.1 " + status), (bad, got[:80])
        assert len(origin.seen) == before + 1  # none of them reached the origin
    assert rec.archive.exchanges == 1
