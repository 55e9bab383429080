"""The fast engine's repeat path (``Reply.again``, ``ProxyFront.repeat``): an HTTP/1.1 head answered
before is answered again from the reply kept for its capture, without being parsed or matched anew.

Two replays of one snapshot on 127.0.0.1, one with the repeat path and one without it, get the same
requests over real sockets (plain HTTP, and HTTPS through CONNECT tunnels) in the same second of one
clock: every answer's bytes, every count and every log entry must be the same, and only plain GETs
seen before (no Range, no validators, no upgrade, no body, matched exactly) may take the repeat path.
"""

from __future__ import annotations

import socket
import ssl
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest

from ego2web_replay.replay import responder as responder_module
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter

WHEN = datetime(2026, 1, 2, 3, 4, 5)
PAGE = b"<!doctype html><html><head><title>p</title></head><body>page</body></html>"


class _Clock(datetime):
    """The responder's clock: one second until the test moves it on."""

    at = datetime(2026, 12, 1, 9, 0, 0, 250_000, tzinfo=UTC)

    @classmethod
    def now(cls, tz=None):  # noqa: ANN001, ANN206 - datetime's own signature
        return cls.at


@pytest.fixture
def snapshot(tmp_path):
    sw = SnapshotWriter(tmp_path, "repeat")
    dated = [("Content-Type", "text/plain"), ("Date", "Fri, 02 Jan 2026 03:04:05 GMT"), ("ETag", '"x1"')]
    for url, headers, body in (("http://a.example/x", dated, b"x" * 10),
                               ("http://a.example/seq", [("Content-Type", "text/plain")], b"one"),
                               ("http://a.example/seq", [("Content-Type", "text/plain")], b"two"),
                               ("http://a.example/page", [("Content-Type", "text/html")], PAGE),
                               ("https://b.example/y", [("Content-Type", "text/plain")], b"b" * 5000),
                               ("https://c.example/y", [("Content-Type", "text/plain")], b"c" * 7)):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200,
                                 reason="OK", response_headers=headers, response_body=body, date=WHEN)
    sw.writer.write_exchange(url="http://a.example/form", method="POST",
                             request_headers=[("Content-Type", "application/x-www-form-urlencoded")],
                             request_body=b"q=1", status=200, reason="OK",
                             response_headers=[("Content-Type", "text/plain")], response_body=b"posted", date=WHEN)
    sw.finalize()
    return sw.path


class _Client:
    """One kept-alive connection to a replay proxy, plain or through a CONNECT tunnel with TLS."""

    def __init__(self, replay: Replay, tunnel: str | None = None) -> None:
        self.sock: socket.socket = socket.create_connection(("127.0.0.1", urlsplit(replay.proxy_url).port), timeout=10)
        if tunnel is not None:
            self.sock.sendall(f"CONNECT {tunnel}:443 HTTP/1.1\r\nHost: {tunnel}:443\r\n\r\n".encode())
            assert self.sock.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            ctx = ssl.create_default_context(cafile=str(replay.ca_file))
            self.sock = ctx.wrap_socket(self.sock, server_hostname=tunnel)
        self.buf = b""

    def ask(self, request: bytes, *, bodiless: bool = False) -> bytes:
        """Send ``request``; the whole answer as it came (head and, by its Content-Length, body)."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        length = 0
        bodiless = bodiless or head.startswith(b"HTTP/1.1 304 ")
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length" and not bodiless:
                length = int(value)
        while len(self.buf) < length:
            self.buf += self._recv()
        body, self.buf = self.buf[:length], self.buf[length:]
        return head + b"\r\n\r\n" + body

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        assert chunk, "the proxy closed the connection"
        return chunk

    def close(self) -> None:
        self.sock.close()


def _get(target: str, *extra: str, host: str | None = "a.example", method: str = "GET") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", *([f"Host: {host}"] if host else []), "Accept: */*", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


X = _get("http://a.example/x")
NOT_PLAIN = [
    _get("http://a.example/x", "Range: bytes=0-3"),
    _get("http://a.example/x", 'If-None-Match: "x1"'),
    _get("http://a.example/x", "If-Modified-Since: Fri, 02 Jan 2026 03:04:05 GMT"),
    _get("http://a.example/x", "Upgrade: websocket", "Connection: Upgrade"),
    _get("http://a.example/x", "Content-Length: 0"),
    _get("http://a.example/x", method="HEAD"),
    _get("http://a.example/missing"),
    _get("http://a.example/form", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 3",
         method="POST") + b"q=1",
]


def _pair(snapshot, monkeypatch):  # noqa: ANN001, ANN202
    """Two replays of ``snapshot``: the second never keeps a head to answer again (the slow path
    only); the first counts the answers its repeat path gave."""
    monkeypatch.setattr(responder_module, "datetime", _Clock)
    fast, slow = Replay([snapshot], engine="fast").start(), Replay([snapshot], engine="fast").start()
    monkeypatch.setattr(slow.proxy, "keep_repeat", lambda key, again: None)
    given: list[bytes] = []
    repeat = fast.proxy.repeat

    def counted(again):  # noqa: ANN001, ANN202
        data = repeat(again)
        if data is not None:
            given.append(data)
        return data

    monkeypatch.setattr(fast.proxy, "repeat", counted)
    return fast, slow, given


def _same_stats(fast: Replay, slow: Replay) -> None:
    a, b = fast.stats(), slow.stats()
    assert a.log == b.log and len(a.log) > 0
    assert a.model_dump(exclude={"log"}) == b.model_dump(exclude={"log"})


def test_repeated_plain_gets_are_answered_and_logged_as_the_slow_path_answers_them(snapshot, monkeypatch):
    fast, slow, given = _pair(snapshot, monkeypatch)
    try:
        clients = {name: [_Client(r), _Client(r, "b.example"), _Client(r, "c.example"), _Client(r)]
                   for name, r in (("fast", fast), ("slow", slow))}

        def both(i: int, request: bytes, *, bodiless: bool = False) -> bytes:
            a = clients["fast"][i].ask(request, bodiless=bodiless)
            b = clients["slow"][i].ask(request, bodiless=bodiless)
            assert a == b, request
            return a

        plain = [(0, X), (0, _get("http://a.example/seq")), (0, _get("http://a.example/page")),
                 (1, _get("/y", host="b.example")), (2, _get("/y", host=None)), (3, X)]
        for _ in range(3):
            for i, request in plain:
                both(i, request)
        # the same head without a Host in two tunnels: each tunnel's own capture
        assert both(1, _get("/y", host=None)).endswith(b"b" * 5000)
        assert both(2, _get("/y", host=None)).endswith(b"\r\n\r\n" + b"c" * 7)
        # a sequence is served in order, the last capture again once all were
        assert [both(0, _get("http://a.example/seq"))[-3:] for _ in range(2)] == [b"two", b"two"]
        # x: 5 of 6 (two connections, one head), seq: none (past its recorded series each answer is
        # matched anew, to say whether the series changed), page, b and c: 2 of 3 each; then the head
        # without a Host: new in b's tunnel, seen in c's; seq none again
        assert len(given) == 5 + 0 + 2 + 2 + 2 + 0 + 1 + 0
        assert sum(1 for e in fast.stats().log if (e.volatile or "").startswith("again:")) == 3
        held = len(given)

        # nothing else takes the repeat path, however often it comes
        for _ in range(3):
            for request in NOT_PLAIN:
                both(0, request, bodiless=request.startswith(b"HEAD"))
        assert len(given) == held
        assert not any(key[2] + b"\r\n\r\n" in NOT_PLAIN for key in fast.proxy.repeats)

        # a new second: the kept reply is stale, the head is answered anew (new dates), then kept again
        old = both(0, X)
        _Clock.at = _Clock.at.replace(second=1)
        new = both(0, X)
        assert new != old and b"Date: Tue, 01 Dec 2026 09:00:01 GMT" in new
        assert len(given) == held + 1
        both(0, X)
        assert len(given) == held + 2
        both(0, _get("http://a.example/x", "Connection: close"))
        _same_stats(fast, slow)
    finally:
        _Clock.at = _Clock.at.replace(second=0)
        for cs in clients.values():
            for c in cs:
                c.close()
        fast.stop()
        slow.stop()


def test_another_responder_never_answers_through_the_old_ones_repeats(snapshot, monkeypatch):
    fast, slow, given = _pair(snapshot, monkeypatch)
    try:
        client = _Client(fast)
        first = client.ask(X)
        client.ask(X)
        assert len(given) == 1 and fast.proxy.repeats
        kept = next(iter(fast.proxy.repeats.values()))
        old = fast.proxy.responder
        fast.proxy.responder = fast.new_responder()  # a warm worker's next episode (runner/warm.py)
        assert not fast.proxy.repeats and fast.proxy.repeat(kept) is None
        assert client.ask(X) == first  # answered anew, in the new episode's log
        assert len(old.stats.log) == 2 and len(fast.proxy.responder.stats.log) == 1
        assert client.ask(X) == first and len(given) == 2 and len(old.stats.log) == 2
        client.close()
    finally:
        fast.stop()
        slow.stop()
