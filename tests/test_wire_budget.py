"""The bounds and timeouts of the proxy wire (ego2web_replay/wire/budget.py), held against the real fast
replay proxy by raw sockets and a raw HTTP/2 client: a client is served while 1,100 idle and trickling
connections are open; head, idle and body-progress timeouts end slow connections with a clear answer;
the connection cap makes room or answers 503; the total body budget answers 503 and is given back;
pipelined requests a client never reads stop being answered; the HTTP/2 stream cap; the bounded leaf
cache; the descriptor limit raised at start-up. Limits and timeouts are small so the tests are quick;
every wait is for an event (with a generous ceiling), never a measured time."""

from __future__ import annotations

import resource
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest

from ego2web_replay.errors import ProxyError
from ego2web_replay.replay.front import FrontServer
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.testing.h2client import H2Exchange, open_h2
from ego2web_replay.wire.budget import ENV, WireLimits, connection_cap, raise_nofile

BIG = b"b" * 200_000
GET_X = b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n"


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    sw = SnapshotWriter(tmp_path_factory.mktemp("wire-budget"), "budget")
    for url, body in (("http://a.example/x", b"x" * 10), ("http://a.example/big", BIG), ("https://b.example/y", b"y")):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200,
                                 reason="OK", response_headers=[("Content-Type", "text/plain")], response_body=body,
                                 date=datetime(2026, 1, 2, 3, 4, 5))
    sw.finalize()
    r = Replay([sw.path])
    r.open()
    yield r
    r.stop()


@contextmanager
def proxy(replay: Replay, ca, **limits) -> Iterator[FrontServer]:  # noqa: ANN001
    assert replay.responder is not None
    front = FrontServer(replay.responder, ca=ca, limits=WireLimits(**limits)).start()
    try:
        yield front
    finally:
        front.stop()


def wait_for(what: Callable[[], object], ceiling: float = 30.0) -> None:
    end = time.monotonic() + ceiling
    while not what():
        assert time.monotonic() < end, "gave up waiting"
        time.sleep(0.02)


def connect(front: FrontServer) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", front.port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def read_answer(s: socket.socket) -> bytes:
    """One response with a Content-Length, read off a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def well_behaved_get(front: FrontServer, path: str = "/x") -> bytes:
    with connect(front) as s:
        s.sendall(f"GET http://a.example{path} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n".encode())
        return read_all(s)


def test_a_client_is_served_while_1100_idle_and_trickling_connections_are_open(replay, ca):
    # 1,100 client sockets and as many accepted ones in this process: past a 1024 soft limit, which the
    # proxy raises to the hard limit when it starts (the test's sockets gain from it too)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    with proxy(replay, ca) as front:
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 2300
        silent = [connect(front) for _ in range(500)]
        kept = []
        for _ in range(300):  # one request answered each, then nothing: idle keep-alive
            s = connect(front)
            s.sendall(GET_X)
            assert read_answer(s).startswith(b"HTTP/1.1 200 ")
            kept.append(s)
        tricklers = [connect(front) for _ in range(300)]
        for s in tricklers:
            s.sendall(b"GET http://a.example/x HTTP/1.1\r\nX-Slow: ")
        wait_for(lambda: len(front.connections) == 1100)
        for _ in range(20):
            for s in tricklers:
                s.sendall(b"z")
            out = well_behaved_get(front)
            assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"x" * 10)
        assert len(front.connections) == 1100 and not front.refused
        for s in [*silent, *kept, *tricklers]:
            s.close()
        wait_for(lambda: not front.connections)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_head_idle_and_body_timeouts_end_slow_connections_and_the_rest_are_served(replay, ca):
    with proxy(replay, ca, head_timeout_s=1.0, idle_timeout_s=1.0, body_timeout_s=2.0) as front:
        silent = connect(front)
        partial = connect(front)
        partial.sendall(b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n")
        idle = connect(front)
        idle.sendall(GET_X)
        assert read_answer(idle).startswith(b"HTTP/1.1 200 ")
        stalled_body = connect(front)
        stalled_body.sendall(b"POST http://a.example/form HTTP/1.1\r\nHost: a.example\r\nContent-Length: 100\r\n\r\n"
                             + b"q" * 10)
        tunnel = connect(front)
        tunnel.sendall(b"CONNECT b.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n")
        assert tunnel.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"

        # a head that keeps coming, a byte at a time, is still held to its total time
        trickled_head = connect(front)
        trickled_head.sendall(b"GET http://a.example/x HTTP/1.1\r\nX-Slow: ")
        trickled_head.settimeout(0.2)
        got = b""
        while not got:
            try:
                trickled_head.sendall(b"z")
                got = trickled_head.recv(65536)
            except TimeoutError:
                continue
        trickled_head.settimeout(30)
        assert got.startswith(b"HTTP/1.1 408 ") and b"request head not received within 1 s" in got + read_all(trickled_head)

        # a body that keeps progressing is read to its end, however long it takes in all
        body = connect(front)
        body.sendall(b"POST http://a.example/x HTTP/1.1\r\nHost: a.example\r\nContent-Length: 12\r\n"
                     b"Connection: close\r\n\r\n")
        for _ in range(12):
            body.sendall(b"k")
            time.sleep(0.2)
        assert not read_all(body).startswith(b"HTTP/1.1 408 ")

        for s in (silent, partial):
            out = read_all(s)
            assert out.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"request head not received" in out
        assert read_all(idle) == b""  # a kept-alive connection closed between requests, as HTTP allows
        out = read_all(stalled_body)
        assert out.startswith(b"HTTP/1.1 408 ") and b"request body (no progress) not received within 2 s" in out
        assert read_all(tunnel) == b""  # no TLS handshake within the head timeout: closed
        assert well_behaved_get(front).startswith(b"HTTP/1.1 200 ")
        assert front.refused["timeout-head"] >= 4 and front.refused["timeout-idle"] >= 1
        assert front.refused["timeout-body"] >= 1
        for s in (silent, partial, idle, stalled_body, tunnel, trickled_head, body):
            s.close()


def test_the_connection_cap_makes_room_from_silent_connections_and_answers_503_when_none_is(replay, ca):
    with proxy(replay, ca, max_connections=20) as front:
        silent = [connect(front) for _ in range(20)]
        wait_for(lambda: len(front.connections) == 20)
        assert well_behaved_get(front).startswith(b"HTTP/1.1 200 ")  # the longest-silent one made room
        assert front.refused["evicted"] >= 1 and read_all(silent[0]) == b""
        for s in silent:
            s.close()
        wait_for(lambda: not front.connections)

        busy = []  # each with a request in progress: none can make room
        for _ in range(20):
            s = connect(front)
            s.sendall(b"POST http://a.example/form HTTP/1.1\r\nHost: a.example\r\nContent-Length: 100\r\n\r\nq")
            busy.append(s)
        wait_for(lambda: len(front.connections) == 20)
        with connect(front) as s:
            s.sendall(GET_X)
            out = read_all(s)
        assert out.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"too many connections (the cap is 20)" in out
        assert front.refused["connections"] == 1
        for s in busy:
            s.close()


def test_the_body_budget_answers_503_to_the_request_that_would_pass_it_and_is_given_back(replay, ca):
    head = b"POST http://a.example/form HTTP/1.1\r\nHost: a.example\r\nContent-Length: 800000\r\nConnection: close\r\n\r\n"
    with proxy(replay, ca, body_budget=1_000_000) as front:
        first = connect(front)
        first.sendall(head + b"a" * 700_000)
        wait_for(lambda: front.budget.used >= 700_000)
        second = connect(front)
        second.sendall(head + b"b" * 400_000)
        out = read_all(second)
        assert out.startswith(b"HTTP/1.1 503 ") and b"memory for request bodies" in out
        assert front.refused["body-budget"] == 1
        first.sendall(b"a" * 100_000)  # the first one, within the budget, is answered
        assert read_all(first).startswith(b"HTTP/1.1 404 ")  # a miss: nothing was recorded for it
        wait_for(lambda: front.budget.used == 0)
        with connect(front) as third:  # the budget is free again
            third.sendall(head + b"c" * 800_000)
            assert read_all(third).startswith(b"HTTP/1.1 404 ")
        second.close()
        first.close()


def test_pipelined_requests_a_client_does_not_read_stop_being_answered(replay, ca):
    with proxy(replay, ca, body_timeout_s=1.0) as front:
        greedy = connect(front)
        greedy.sendall(b"GET http://a.example/big HTTP/1.1\r\nHost: a.example\r\n\r\n" * 2000)  # never read
        wait_for(lambda: any(c.current_phase() == "stalled" for c in list(front.connections)))
        [held] = [c for c in list(front.connections) if c.current_phase() == "stalled"]
        assert held.requests < 500  # what the kernel's buffers took, not the 2,000 asked
        assert well_behaved_get(front, "/big").endswith(BIG)
        wait_for(lambda: front.refused["timeout-stalled"] == 1)  # no progress: ended
        greedy.close()

    # pacing keeps every answer, in order
    with proxy(replay, ca, max_pipelined=4) as front, connect(front) as s:
        s.sendall(GET_X * 49 + b"GET http://a.example/big HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
        out = read_all(s)
        assert out.count(b"HTTP/1.1 200 OK\r\n") == 50 and out.endswith(BIG)


def _h2(front: FrontServer, ca):  # noqa: ANN001, ANN202
    assert front.port is not None
    return open_h2(front.port, ca.cert_path, "b.example:443")


def test_http2_streams_are_capped_as_advertised(replay, ca):
    import h2.events
    import h2.settings

    with proxy(replay, ca, max_streams=4) as front:
        s, conn = _h2(front, ca)
        base = [(":scheme", "https"), (":authority", "b.example")]
        for sid in (1, 3, 5, 7):  # four at once, as advertised: all answered
            conn.send_headers(sid, [(":method", "GET"), (":path", "/y"), *base], end_stream=True)
        s.sendall(conn.data_to_send())
        done, advertised = set(), None
        while len(done) < 4:
            for ev in conn.receive_data(s.recv(65536)):
                if isinstance(ev, h2.events.RemoteSettingsChanged):
                    advertised = ev.changed_settings[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS].new_value
                if isinstance(ev, h2.events.StreamEnded):
                    done.add(ev.stream_id)
            s.sendall(conn.data_to_send())
        assert advertised == 4
        s.close()

        s, conn = _h2(front, ca)  # five open at once, sent before the proxy's settings were read
        for sid in (1, 3, 5, 7, 9):
            conn.send_headers(sid, [(":method", "POST"), (":path", "/y"), *base])
        s.sendall(conn.data_to_send())
        terminated = None
        while terminated is None:
            data = s.recv(65536)
            assert data, "closed without GOAWAY"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ConnectionTerminated):
                    terminated = ev
        assert terminated.error_code == 1  # PROTOCOL_ERROR: past the advertised limit
        s.close()


def test_http2_body_budget_refuses_the_largest_stream_and_the_connection_goes_on(replay, ca):
    with proxy(replay, ca, body_budget=300_000) as front:
        s, conn = _h2(front, ca)
        talk = H2Exchange(s, conn)
        conn.send_headers(1, [(":method", "POST"), (":path", "/upload"), (":scheme", "https"),
                              (":authority", "b.example")])
        sent = talk.upload_until_answered(1, 5_000_000)
        assert talk.status[1] == "503" and sent < 5_000_000 and front.refused["body-budget"] == 1
        assert talk.get(3, "/y", "b.example") == "200"  # the connection goes on
        wait_for(lambda: front.budget.used == 0)
        s.close()


def test_an_http2_client_that_never_opens_its_window_is_timed_out(replay, ca):
    import h2.events

    with proxy(replay, ca, body_timeout_s=0.5) as front:
        s, conn = _h2(front, ca)
        conn.send_headers(1, [(":method", "GET"), (":path", "/big"), (":scheme", "http"),  # what is archived
                              (":authority", "a.example")], end_stream=True)
        s.sendall(conn.data_to_send())
        got, terminated = 0, False
        while not terminated:  # data is read but never acknowledged: the window stays shut at 64 KiB
            data = s.recv(65536)
            assert data, "closed without GOAWAY"
            for ev in conn.receive_data(data):
                got += len(ev.data) if isinstance(ev, h2.events.DataReceived) else 0
                terminated = terminated or isinstance(ev, h2.events.ConnectionTerminated)
        assert got < len(BIG) and front.refused["timeout-sending"] == 1
        s.close()


def test_leaf_certificates_are_a_bounded_lru_cache(replay, ca):
    def handshake(front: FrontServer, name: str) -> None:
        with connect(front) as raw:
            raw.sendall(f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n".encode())
            assert raw.recv(100).startswith(b"HTTP/1.1 200 ")
            with ssl.create_default_context(cafile=str(ca.cert_path)).wrap_socket(raw, server_hostname=name) as tls:
                assert tls.getpeercert()["subjectAltName"] == (("DNS", name),)

    with proxy(replay, ca, cert_cache=3) as front:
        for i in range(8):
            handshake(front, f"h{i}.example")
        assert front.certs.minted == 8 and len(front.certs) == 3
        handshake(front, "h7.example")  # recent: kept
        assert front.certs.minted == 8
        handshake(front, "h0.example")  # dropped long ago: made again
        assert front.certs.minted == 9 and len(front.certs) == 3


def test_the_descriptor_limit_is_raised_at_start_and_the_cap_kept_under_it(replay, ca):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard > 1024:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    with proxy(replay, ca, max_connections=10**6) as front:
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert now == (hard if hard != resource.RLIM_INFINITY else 1 << 20) and now >= soft
        assert front.max_connections == connection_cap(front.limits, now) < now
    assert raise_nofile() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert connection_cap(WireLimits(), 1024) == 1024 - 128 and connection_cap(WireLimits(max_connections=10), 1024) == 10


def test_limits_come_from_the_environment_and_bad_values_are_one_line(monkeypatch):
    monkeypatch.setenv(ENV["idle_timeout_s"], "2.5")
    monkeypatch.setenv(ENV["max_streams"], "8")
    limits = WireLimits.from_env(max_streams=16, head_timeout_s=None)
    assert (limits.idle_timeout_s, limits.max_streams, limits.head_timeout_s) == (2.5, 16, 30.0)
    monkeypatch.setenv(ENV["body_budget"], "lots")
    with pytest.raises(ProxyError, match="EGO2WEB_WIRE_BODY_BUDGET='lots' is not a number"):
        WireLimits.from_env()
    monkeypatch.delenv(ENV["body_budget"])
    with pytest.raises(ProxyError, match="max_connections must be positive"):
        WireLimits.from_env(max_connections=0)


def test_an_http2_header_block_is_bounded_as_a_head_is(replay, ca):
    """A HEADERS frame whose END_HEADERS never comes, grown by CONTINUATION frames (each under h2's own
    limits): past 64 KiB, what an HTTP/1.1 head may be, the connection ends with ENHANCE_YOUR_CALM, and
    while it is open its bytes count in the body budget."""
    import h2.errors
    from hyperframe.frame import ContinuationFrame, GoAwayFrame, HeadersFrame

    with proxy(replay, ca) as front:
        s, conn = _h2(front, ca)
        s.sendall(conn.data_to_send())
        first = HeadersFrame(1)  # no END_HEADERS: the block stays open
        first.data = b"\x00" * 16_000
        s.sendall(first.serialize())
        for _ in range(3):
            more = ContinuationFrame(1)
            more.data = b"\x00" * 16_000
            s.sendall(more.serialize())
        wait_for(lambda: front.budget.used >= 60_000)  # held, and counted
        more = ContinuationFrame(1)
        more.data = b"\x00" * 16_000
        s.sendall(more.serialize())
        got = b""
        while True:
            data = s.recv(65536)
            if not data:
                break
            got += data
        s.close()
        wait_for(lambda: front.budget.used == 0)
    frames = []
    while len(got) >= 9:
        length = int.from_bytes(got[:3], "big")
        frame, _ = GoAwayFrame.parse_frame_header(memoryview(got[:9]))
        if isinstance(frame, GoAwayFrame):
            frame.parse_body(memoryview(got[9:9 + length]))
        frames.append(frame)
        got = got[9 + length:]
    [goaway] = [f for f in frames if isinstance(f, GoAwayFrame)]
    assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
