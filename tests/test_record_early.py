"""A request sent upstream before its head is read (``RecordFront.early``), against a real origin on
127.0.0.1 that keeps the raw bytes of every request it gets, through the real recorder.

The early path may only ever send what the request's own path (the wire's strict reading, the
guard, the checks, the upstream head) would send: the same bytes, to the same origin. These tests
show it sending, sending nothing the wire refuses, never learning what the guard refuses, and a
request its own path does not take up being let go and counted, never answered; and curl, on one
kept connection to nginx through the recorder; and Chromium browsing a plain-HTTP site through it.
"""

from __future__ import annotations

import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading

import httpx
import pytest

from ego2web_replay.guard import GuardPolicy
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.testing.rawsock import read_head
from ego2web_replay.testing.site import TestSite
from ego2web_replay.testing.thirdparty import NginxSite, nginx_binary
from ego2web_replay.wire import h1


class _RawOrigin(socketserver.BaseRequestHandler):
    """Keeps each request head as it came (``server.heads``) and answers ``ok <path>``, kept alive."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        buf = bytearray()
        while (head := read_head(sock, buf)) is not None:
            self.server.heads.append(head)  # type: ignore[attr-defined]
            body = b"ok " + head.split(b" ", 2)[1]
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b"
                         % (len(body), body))


@pytest.fixture(scope="module")
def raw_origin():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _RawOrigin)
    server.daemon_threads = True
    server.heads = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture()
def recording(tmp_path, ca):
    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    front = RecordFront(ExchangeArchive(snap.writer), ca=ca, guard=GuardPolicy(mode="loopback")).start()
    try:
        yield front, snap
    finally:
        front.stop()
        snap.writer.close()


def _ask(port: int, head: bytes) -> bytes:
    """One request on a fresh connection (``Connection: close`` in ``head``): the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def _head(port: int, target: str, line_end: str = " HTTP/1.1") -> bytes:
    return (f"GET {target}{line_end}\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: early-test\r\nAccept: */*\r\n"
            "Cookie: a=1\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\n\r\n").encode("latin-1")


def _recorded_urls(snap: SnapshotWriter) -> list[str]:
    snap.finalize()
    return [r.url for r in iter_records(snap.writer.path) if r.rec_type == "response"]


def test_a_get_whose_field_lines_were_read_before_goes_upstream_before_its_head_is_read(
        raw_origin, recording, monkeypatch):
    """The first GET to an origin opens its connection; the second, on the kept one, teaches the front
    what its field lines become upstream; from the third on, the request goes out before the wire has
    read its head. The origin gets the very same bytes either way (the target aside), the client the
    origin's answer, the archive every exchange."""
    front, snap = recording
    port = raw_origin.server_address[1]
    order: list[str] = []
    parse, send = h1._parse_head, front.upstream.send_early
    monkeypatch.setattr(h1, "_parse_head", lambda head: (order.append("read"), parse(head))[1])
    monkeypatch.setattr(front.upstream, "send_early", lambda *a: (order.append("sent"), send(*a))[1])
    before = len(raw_origin.heads)
    urls = [f"http://127.0.0.1:{port}/item/{i}?q={i}" for i in range(5)]
    for i, url in enumerate(urls):
        assert _ask(front.port, _head(port, url)).endswith(b"\r\n\r\nok /item/%d?q=%d" % (i, i))
    assert front.upstream.early_sent == 3 and front.upstream.early_dropped == 0
    assert order == ["read", "read", "sent", "read", "sent", "read", "sent", "read"]
    heads = raw_origin.heads[before:]
    expected = (b"\r\nHost: 127.0.0.1:%d\r\nUser-Agent: early-test\r\nAccept: */*\r\nCookie: a=1" % port)
    assert heads == [b"GET /item/%d?q=%d HTTP/1.1" % (i, i) + expected for i in range(5)]
    assert _recorded_urls(snap) == urls


def test_nothing_the_wire_refuses_is_sent_early(raw_origin, recording):
    """Once the field lines are known, heads that differ only in their request line, each refused by the
    wire's strict reading (a control in the target, a bad version, a head over the cap, an authority the
    wire refuses) or not a plain GET, go upstream early never: the wire answers them, the origin sees
    none of the refused ones."""
    front, _ = recording
    port = raw_origin.server_address[1]
    base = f"http://127.0.0.1:{port}"
    for i in range(3):
        assert b" 200 OK\r\n" in _ask(front.port, _head(port, f"{base}/warm/{i}"))
    sent_before, seen_before = front.upstream.early_sent, len(raw_origin.heads)
    refused = [
        _head(port, f"{base}/a\x01b"),  # a control in the target
        _head(port, f"{base}/a b"),  # a space: four parts in the request line
        _head(port, f"{base}/v", " HTTP/2.0"),
        _head(port, f"{base}/" + "x" * (h1.MAX_HEAD + 10)),  # past the head's cap: 431
        _head(port, "http://127.0.0.1:99999/p"),  # a port past 65535
        _head(port, "http://exa mple/p"),
    ]
    answers = [_ask(front.port, head).split(b"\r\n", 1)[0] for head in refused]
    assert all(a.split(b" ")[1] in (b"400", b"431", b"505") for a in answers), answers
    assert len(raw_origin.heads) == seen_before
    head_request = _head(port, f"{base}/head").replace(b"GET ", b"HEAD ", 1)
    assert _ask(front.port, head_request).startswith(b"HTTP/1.1 200 OK\r\n")
    assert raw_origin.heads[-1].startswith(b"HEAD /head HTTP/1.1\r\n")
    assert front.upstream.early_sent == sent_before and front.upstream.early_dropped == 0


def test_field_lines_the_guard_refuses_are_never_learned(recording):
    """A host outside the policy is answered by the proxy every time: nothing goes upstream, early or not."""
    front, _ = recording
    head = (b"GET http://example.com/p HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
    for _ in range(3):
        assert _ask(front.port, head).startswith(b"HTTP/1.1 403 ")
    assert front.counts["not-allowed"] == 3 and not front._sends and front.upstream.early_sent == 0


def test_a_request_sent_early_that_its_own_path_does_not_take_up_is_let_go_and_counted(raw_origin, recording):
    """Should what was sent early ever differ from what the head's own path writes (here the learned
    request is tampered with), that path does not take it up: its connection is closed, its answer never
    read, the drop counted, logged and noted among the archive's upstream failures; the client gets the
    answer to the request as its own path sends it."""
    front, snap = recording
    port = raw_origin.server_address[1]
    base = f"http://127.0.0.1:{port}"
    for i in range(2):
        _ask(front.port, _head(port, f"{base}/learn/{i}"))
    [(seen, (origin, rest))] = list(front._sends.items())
    front._sends[seen] = (origin, rest.replace(b"\r\nAccept: */*", b"\r\nAccept: tampered/*"))
    before = len(raw_origin.heads)
    assert _ask(front.port, _head(port, f"{base}/after")).endswith(b"ok /after")
    assert front.upstream.early_dropped == 1 and front.upstream.early_sent == 0
    assert front.upstream.early_dropped_urls == [f"{base}/after"]
    got = raw_origin.heads[before:]
    assert sorted(b"tampered" in h for h in got) == [False, True]  # the dropped one, and the one answered
    [error] = front.archive.errors  # the snapshot says that a request reached the origin unarchived
    assert error.startswith(f"{base}/after: sent upstream before it was read, then let go"), error
    assert _recorded_urls(snap) == [f"{base}/learn/0", f"{base}/learn/1", f"{base}/after"]


def _answer(sock: socket.socket, buf: bytearray) -> bytes:
    """The body of the next answer on a kept connection (a Content-Length, or chunks as the recorder sends them)."""
    head = read_head(sock, buf)
    assert head is not None
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])}
    if b"content-length" in fields:
        n = int(fields[b"content-length"])
        while len(buf) < n:
            buf += sock.recv(65536)
        body = bytes(buf[:n])
        del buf[:n]
        return body
    body = b""
    while True:  # chunked
        while b"\r\n" not in buf:
            buf += sock.recv(65536)
        size = int(bytes(buf[:buf.index(b"\r\n")]), 16)
        del buf[:buf.index(b"\r\n") + 2]
        while len(buf) < size + 2:
            buf += sock.recv(65536)
        body += bytes(buf[:size])
        del buf[:size + 2]
        if not size:
            return body


def test_a_head_that_came_while_an_answer_was_on_its_way_is_offered_too(raw_origin, recording):
    """A client that sends its next head before the connection has ended the answer before it (pipelined
    here; curl does it as soon as it has the last byte) has that head read once the answer ends, and
    offered to the early path as a head that comes whole then."""
    front, _ = recording
    port = raw_origin.server_address[1]
    head = "GET http://127.0.0.1:{}/kept/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: */*\r\n\r\n"
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as s:
        buf = bytearray()
        for i in range(3):
            s.sendall(head.format(port, i, port).encode())
            assert _answer(s, buf) == b"ok /kept/%d" % i
        assert front.upstream.early_sent == 1
        s.sendall((head.format(port, 3, port) + head.format(port, 4, port)).encode())  # two heads, one send
        assert [_answer(s, buf), _answer(s, buf)] == [b"ok /kept/3", b"ok /kept/4"]
    assert front.upstream.early_sent == 2 and front.upstream.early_dropped == 0


def test_https_requests_on_a_kept_tunnel_go_upstream_early(site, ca, tmp_path):
    """Inside a CONNECT tunnel, in TLS, an HTTP/1.1 client's kept connection: the origin-form requests
    after the first two go out early, and each answer is the site's."""
    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    front = RecordFront(ExchangeArchive(snap.writer), ca=ca, guard=GuardPolicy(mode="loopback"),
                        upstream_ca=site.tls.ca_cert).start()
    got: list[list[str]] = []

    def browse() -> None:
        ctx = ssl.create_default_context(cafile=str(ca.cert_path))
        with httpx.Client(proxy=front.url, verify=ctx, http2=False, timeout=20) as client:
            got.append([client.get(f"{site.https_url}/api/price?id={i}").json()["id"] for i in range(6)])

    try:
        thread = threading.Thread(target=browse)  # the session's Playwright may hold a loop in this one
        thread.start()
        thread.join(60)
        assert front.upstream.early_sent == 4 and front.upstream.early_dropped == 0
    finally:
        front.stop()
    assert got == [[str(i) for i in range(6)]]
    assert _recorded_urls(snap) == [f"{site.https_url}/api/price?id={i}" for i in range(6)]


@pytest.mark.skipif(shutil.which("curl") is None or nginx_binary() is None,
                    reason="needs curl and nginx (scripts/setup.sh installs both)")
def test_curl_on_one_kept_connection_through_the_recorder_to_nginx(recording, tmp_path):
    """Real third-party software at both ends: curl asks nginx for six files on one kept connection to
    the recorder. From the third on, each request goes upstream early; curl gets every file whole, the
    archive keeps every exchange, nothing is let go."""
    front, snap = recording
    files = {f"f{i}.bin": os.urandom(1000 + 700 * i) for i in range(6)}
    with NginxSite(tmp_path / "nginx", files) as nginx:
        argv = ["curl", "-sS", "--fail", "--proxy", front.url]
        for name in files:
            argv += [f"{nginx.url}/{name}", "-o", str(tmp_path / name)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        urls = [f"{nginx.url}/{name}" for name in files]
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
    assert front.upstream.early_sent == 4 and front.upstream.early_dropped == 0
    assert _recorded_urls(snap) == urls


def test_chromium_browsing_a_plain_http_site_through_the_recorder(chromium, ca, tmp_path):
    """Real Chromium over plain HTTP (HTTP/1.1 to the proxy): a share of its requests goes upstream early,
    none is let go, every page renders as the site serves it, and every exchange is archived."""
    site = TestSite(tmp_path / "site", https=False)
    snap = SnapshotWriter(tmp_path, "T", compression="zst", source="record")
    archive = ExchangeArchive(snap.writer)
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback")).start()
    try:
        with site:
            ctx = chromium.new_context(proxy_url=front.url)
            page = ctx.new_page()
            names = []
            for _ in range(2):
                page.goto(site.http_url + "/", wait_until="networkidle")
                page.goto(site.http_url + "/product/42", wait_until="networkidle")
                names.append(page.inner_text("#name"))
            ctx.close()
    finally:
        front.stop()
    assert names == ["Crunchy Snack 42"] * 2
    assert front.upstream.early_sent > 0 and front.upstream.early_dropped == 0, front.upstream.early_sent
    assert not archive.errors and archive.failed is None
    snap.finalize()
    responses = [r for r in iter_records(snap.writer.path) if r.rec_type in ("response", "revisit")]
    assert len(responses) == archive.exchanges
