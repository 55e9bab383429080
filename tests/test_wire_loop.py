"""The fast engine's loop (uvloop when installed, asyncio's with ``EGO2WEB_REPLAY_UVLOOP=0``) and its
reply cache for plain GETs: the same bytes on both loops, and whatever a request adds to a plain
GET (HEAD, validators, a Range, another second) still answered as before the cache."""

from __future__ import annotations

import asyncio
import re
import socket
from datetime import datetime
from urllib.parse import urlsplit

import pytest

from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.wire import loop as wire_loop

BODY = bytes(range(256)) * 40  # 10 KiB
GET = b"GET http://a.example/data HTTP/1.1\r\nHost: a.example\r\n\r\n"


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    sw = SnapshotWriter(tmp_path_factory.mktemp("loop"), "loop")
    sw.writer.write_exchange(url="http://a.example/data", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK",
                             response_headers=[("Content-Type", "application/octet-stream"), ("ETag", '"v1"'),
                                               ("Date", "Fri, 02 Jan 2026 03:04:05 GMT")],
                             response_body=BODY, date=datetime(2026, 1, 2, 3, 4, 5))
    sw.finalize()
    return sw.path


def _exchange(port: int, data: bytes, answers: int) -> list[bytes]:
    """Send ``data`` on one connection; the raw bytes of ``answers`` responses (each head + its body)."""
    out, buf = [], b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        while len(out) < answers:
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            head, _, rest = buf.partition(b"\r\n\r\n")
            m = re.search(rb"(?im)^content-length: (\d+)", head)
            size = int(m.group(1)) if m and not head.startswith(b"HTTP/1.1 304") else 0
            if data.startswith(b"HEAD") and len(out) == 0:
                size = 0
            while len(rest) < size:
                rest += s.recv(65536)
            out.append(head + b"\r\n\r\n" + rest[:size])
            buf = rest[size:]
    return out


def _undated(raw: bytes) -> bytes:
    return re.sub(rb"(?m)^Date: [^\r]*\r\n", b"", raw)


def test_the_loop_is_uvloop_when_installed_and_asyncio_when_turned_off(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(wire_loop.ENV, raising=False)
    loop = wire_loop.new_loop()
    try:
        assert type(loop).__module__.startswith("uvloop") and wire_loop.loop_name().startswith("uvloop ")
    finally:
        loop.close()
    monkeypatch.setenv(wire_loop.ENV, "0")
    loop = wire_loop.new_loop()
    try:
        assert type(loop) is type(asyncio.new_event_loop()) and wire_loop.loop_name() == "asyncio"
    finally:
        loop.close()


@pytest.mark.parametrize("uvloop", ["1", "0"])
def test_plain_gets_are_served_the_same_bytes_on_either_loop_and_from_the_reply_cache(snap, monkeypatch, uvloop):
    if uvloop == "1":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(wire_loop.ENV, uvloop)
    with Replay([snap], engine="fast") as replay:
        port = urlsplit(replay.proxy_url).port
        assert port is not None
        first, second, third = _exchange(port, GET * 3, 3)  # the second and third: the kept reply
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"\r\n\r\n" + BODY)
        assert b"Content-Length: 10240\r\n" in first and b'ETag: "v1"\r\n' in first
        assert _undated(second) == _undated(first) == _undated(third)
        # what a request adds to the plain GET is still answered: validators, HEAD, a Range
        (cond,) = _exchange(port, b'GET http://a.example/data HTTP/1.1\r\nHost: a.example\r\n'
                                  b'If-None-Match: "v1"\r\n\r\n', 1)
        assert cond.startswith(b"HTTP/1.1 304 ") and cond.endswith(b"\r\n\r\n")
        (head,) = _exchange(port, b"HEAD http://a.example/data HTTP/1.1\r\nHost: a.example\r\n\r\n", 1)
        assert _undated(head) == _undated(first)[: -len(BODY)]
        (part,) = _exchange(port, b"GET http://a.example/data HTTP/1.1\r\nHost: a.example\r\n"
                                  b"Range: bytes=10-19\r\n\r\n", 1)
        assert part.startswith(b"HTTP/1.1 206 ") and part.endswith(b"\r\n\r\n" + BODY[10:20])
        again, = _exchange(port, GET, 1)
        assert _undated(again) == _undated(first)
        stats = replay.stats()
    assert stats.exact == 7 and stats.miss == 0 and len(stats.log) == 7
    assert [e.status for e in stats.log] == [200, 200, 200, 304, 200, 206, 200]
