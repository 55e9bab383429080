"""benchmarks/_pyfloor.py: the thinnest forwarder relays whole answers over one kept upstream connection
and refuses any upstream that is not loopback itself."""

import asyncio
import http.server
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import _pyfloor  # noqa: E402


class _Origin(http.server.ThreadingHTTPServer):
    daemon_threads = True
    peers: set[tuple[str, int]]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        assert isinstance(self.server, _Origin)
        self.server.peers.add(self.client_address)
        n = int(self.path.rsplit("/", 1)[1])
        body = bytes(i % 251 for i in range(n))
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.send_header("X-Seen-Connection", self.headers.get("Connection", ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def ports() -> Iterator[tuple[_Origin, int]]:
    origin = _Origin(("127.0.0.1", 0), _Handler)
    origin.peers = set()
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(_pyfloor.serve())
    threading.Thread(target=loop.run_forever, daemon=True).start()
    try:
        yield origin, server.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        origin.shutdown()


def _get(port: int, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got


def test_relays_whole_answers_on_one_kept_connection(ports: tuple[_Origin, int]) -> None:
    origin, floor_port = ports
    origin_port = origin.server_address[1]
    for n in (0, 10, 3_000_000):
        head, _, body = _get(floor_port, f"http://127.0.0.1:{origin_port}/big/{n}").partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"X-Seen-Connection: keep-alive" in head
        assert body == bytes(i % 251 for i in range(n))
    assert len(origin.peers) == 1  # every request on the same kept upstream connection


def test_refuses_other_upstreams_itself(ports: tuple[_Origin, int]) -> None:
    _, floor_port = ports
    assert _get(floor_port, "http://192.0.2.1:80/big/1").startswith(b"HTTP/1.1 403")
    assert _get(floor_port, "/big/1").startswith(b"HTTP/1.1 403")  # origin form: not a proxy request
