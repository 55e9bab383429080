"""Loopback canaries for hermeticity tests: a TCP/HTTP server and a UDP socket that count what reaches them."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Canary", "UdpCanary"]


class Canary:
    """Answers every GET with ``ok``; :attr:`connections` counts TCP connections accepted."""

    def __init__(self) -> None:
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Canary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UdpCanary:
    """A loopback UDP socket that records every datagram sent to it (for WebRTC sealing tests)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.senders: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    @property
    def datagrams(self) -> int:
        return len(self.senders)

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                _, sender = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.senders.append(sender)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    def __enter__(self) -> UdpCanary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
