"""Both recording engines archive the same exchange the same way.

One raw-socket origin on 127.0.0.1 answers a fixed set of awkward responses (duplicate
Set-Cookie, 204, 304, HEAD with a length, chunked with trailers, a body that runs to the
connection's end, gzip, a redirect, a form POST); the same requests go through the fast
engine and through mitmproxy, and the archived request and response records (heads and
payloads) must be equal, field for field. Trailers are the exception: mitmproxy 12 cannot
send an HTTP/1 response with trailers on (its connection fails), so only the fast engine is
asked for one (it drops the trailers; neither engine archives them).
"""

from __future__ import annotations

import gzip
import http.client
import socket
import socketserver
import threading

import pytest
from test_record_front import _BAD_HEADS

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.tasks import Task
from ego2web_replay.testing.rawsock import read_head

_GZ = gzip.compress(b'{"n": 1}' * 50, mtime=0)
ANSWERS: dict[str, bytes] = {
    "/cookies": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nSet-Cookie: a=1; Path=/\r\nX-Dup: one\r\n"
                b"Set-Cookie: b=2; Path=/; HttpOnly\r\nX-Dup: two\r\nContent-Length: 4\r\n\r\nmany",
    "/empty": b"HTTP/1.1 204 No Content\r\nX-Why: nothing\r\n\r\n",
    "/cond": b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\nCache-Control: max-age=60\r\n\r\n',
    "/trailers": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
                 b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 11\r\n\r\n",
    "/gz": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nVary: Accept-Encoding\r\n"
           b"Content-Length: %d\r\n\r\n%b" % (len(_GZ), _GZ),
    "/moved": b"HTTP/1.1 301 Moved Permanently\r\nLocation: /cookies\r\nContent-Length: 0\r\n\r\n",
    "/form": b"HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\ncreated",
    "/close": b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"to the end " * 40,
}
HEAD_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n"


class _Origin(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        buf = bytearray()
        while True:
            head = read_head(sock, buf)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = next((int(v) for k, _, v in (x.partition(":") for x in lines[1:])
                           if k.lower() == "content-length"), 0)
            while len(buf) < length:
                buf += sock.recv(65536)
            buf = buf[length:]
            sock.sendall(HEAD_ANSWER if method == "HEAD" else ANSWERS[path])
            if path == "/close":
                return


REQUESTS = [("GET", "/cookies", None), ("GET", "/empty", None), ("GET", "/cond", None), ("HEAD", "/head", None),
            ("GET", "/trailers", None), ("GET", "/gz", None), ("GET", "/moved", None),
            ("POST", "/form", b"name=a&qty=2"), ("GET", "/close", None)]


def _requests(engine: str) -> list[tuple[str, str, bytes | None]]:
    return [r for r in REQUESTS if engine == "fast" or r[1] != "/trailers"]


def _record(engine: str, base: str, root, ca) -> tuple[list[tuple[int, list[tuple[str, str]], bytes]], list]:
    task = Task(id=f"engines-{engine}", instruction="x", start_url=base + "/cookies")
    opts = RecordOptions(guard="loopback", engine=engine, dedup_min_size=None)  # type: ignore[arg-type]
    seen = []
    with LiveRecording(task, root, opts, ca=ca) as live:
        host, port = live.proxy_url.rsplit("/", 1)[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        for method, path, body in _requests(engine):
            extra = {"Content-Type": "application/x-www-form-urlencoded", "Expect": "100-continue"} if body else {}
            if path == "/cond":
                extra["If-None-Match"] = '"v1"'
            conn.request(method, base + path, body=body, headers={"Accept-Encoding": "gzip", **extra})
            resp = conn.getresponse()
            seen.append((resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() != "connection"],
                         resp.read()))
            if path == "/close":
                conn.close()
        conn.close()
    assert live.ok, live.error
    assert live.snapshot_path is not None
    archive = next(live.snapshot_path.glob("archive.warc*"))
    return seen, [r for r in iter_records(archive) if r.rec_type in ("request", "response")]


@pytest.fixture(scope="module")
def both(ca, tmp_path_factory):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Origin)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    root = tmp_path_factory.mktemp("engines")
    try:
        yield {engine: _record(engine, base, root, ca) for engine in ("fast", "mitmproxy")}
    finally:
        server.shutdown()
        server.server_close()


def _shape(record) -> tuple:
    return (record.rec_type, record.url, record.http_protocol, record.http_status, record.http_reason,
            record.http_method, record.http_target, record.http_headers, record.payload)


def test_both_engines_archive_the_same_records(both):
    fast = [r for r in both["fast"][1] if not r.url.endswith("/trailers")]
    mitm = both["mitmproxy"][1]
    assert len(fast) == len(mitm) == 2 * len(_requests("mitmproxy"))
    key = lambda r: (r.url, r.rec_type)  # noqa: E731 - the records' order within a pair may differ
    for a, b in zip(sorted(fast, key=key), sorted(mitm, key=key), strict=True):
        assert _shape(a) == _shape(b)


def test_both_engines_give_the_client_the_same_answers(both):
    fast = dict(zip([p for _, p, _ in REQUESTS], both["fast"][0], strict=True))
    mitm = dict(zip([p for _, p, _ in _requests("mitmproxy")], both["mitmproxy"][0], strict=True))
    for path, (status, headers, body) in mitm.items():
        if path == "/close":  # the fast engine frames it with a length and keeps the connection; mitmproxy closes
            headers = [*headers, ("Content-Length", str(len(body)))]
        assert (path, fast[path]) == (path, (status, headers, body))
    assert [v for k, v in fast["/cookies"][1] if k == "Set-Cookie"] == ["a=1; Path=/", "b=2; Path=/; HttpOnly"]
    status, headers, body = fast["/trailers"]
    assert (status, body) == (200, b"hello world")
    [response] = [r for r in both["fast"][1] if r.url.endswith("/trailers") and r.rec_type == "response"]
    assert response.http_header("Transfer-Encoding") == "chunked" and b"X-Sum" not in response.payload


class _HeadOrigin(socketserver.BaseRequestHandler):
    """Answers each path with its raw head from ``_BAD_HEADS`` and closes."""

    def handle(self) -> None:
        head = read_head(self.request, bytearray())
        if head is not None:
            self.request.sendall(_BAD_HEADS[head.split(b" ")[1].decode()])


def test_the_mitmproxy_engine_refuses_the_response_heads_the_fast_engine_refuses(ca, tmp_path):
    """One grammar for the origin's head in both engines (``recorder.upstream.refused_head``): each head
    the fast engine refuses is a 502 through mitmproxy too (mitmproxy's own checks or ours), kept among
    the recording's errors, nothing of it archived; the well-formed ones (a folded value, lines a bare LF
    ends) are archived. mitmproxy's h11 refuses white space before a chunk extension (``2 ;x``, which
    RFC 9112 7.1.1 allows): that one is a 502 through this engine (docs/limits.md says so)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _HeadOrigin)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    task = Task(id="heads", instruction="x", start_url=base + "/rh-fold")
    got: dict[str, tuple[int, str | None]] = {}
    try:
        with LiveRecording(task, tmp_path, RecordOptions(guard="loopback", engine="mitmproxy"), ca=ca) as live:
            host, port = live.proxy_url.rsplit("/", 1)[1].split(":")
            for path in _BAD_HEADS:
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
                conn.request("GET", base + path)
                resp = conn.getresponse()
                got[path] = (resp.status, resp.getheader("X-Folded") or resp.getheader("X-Lf"))
                resp.read()
                conn.close()
    finally:
        server.shutdown()
        server.server_close()
    kept = {"/rh-fold": "one two", "/rh-lf-all": "all", "/rh-lf-mixed": "some"}
    assert {p: got[p] for p in kept} == {p: (200, v) for p, v in kept.items()}
    refused = [p for p in _BAD_HEADS if p not in kept]
    assert {p: got[p][0] for p in refused} == dict.fromkeys(refused, 502)
    assert live.ok, live.error
    archive = next(live.snapshot_path.glob("archive.warc*"))
    responses = {r.url.removeprefix(base): r for r in iter_records(archive) if r.rec_type == "response"}
    assert sorted(responses) == sorted(kept)
    assert responses["/rh-fold"].http_header("X-Folded") == "one two"  # joined, as the browser got it
    assert len(live.recorder.errors) == len(refused), live.recorder.errors
    for path in ("/rh-cr", "/rh-nul", "/rh-te-gzip", "/rh-version"):  # the ones mitmproxy itself lets through
        assert any(e.startswith(base + path + ":") for e in live.recorder.errors), path
