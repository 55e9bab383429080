"""A raw HTTP/2 client through a proxy, for tests that need frames a library client will not send
(resets at chosen moments, more streams than advertised, bodies past flow-control windows)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any

import h2.config
import h2.connection

__all__ = ["open_h2", "H2Exchange"]


def open_h2(proxy_port: int, ca_file: Path | str, authority: str,
            timeout: float = 20.0) -> tuple[ssl.SSLSocket, h2.connection.H2Connection]:
    """CONNECT ``authority`` (``host:port``) through the proxy on ``proxy_port``, TLS with ALPN ``h2``
    trusting ``ca_file``, and an HTTP/2 client connection whose preface is already sent."""
    raw = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    raw.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    answer = raw.recv(100)
    if answer != b"HTTP/1.1 200 Connection established\r\n\r\n":
        raw.close()
        raise AssertionError(f"CONNECT {authority} was answered {answer!r}")
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.set_alpn_protocols(["h2"])
    s = ctx.wrap_socket(raw, server_hostname=authority.rsplit(":", 1)[0])
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    s.sendall(conn.data_to_send())
    return s, conn


class H2Exchange:
    """Frames in and out of an :func:`open_h2` connection: ``status`` by stream, the names of the
    events seen in order, received data acknowledged (so the proxy's windows stay open)."""

    def __init__(self, sock: ssl.SSLSocket, conn: h2.connection.H2Connection) -> None:
        self.sock, self.conn = sock, conn
        self.status: dict[int, str] = {}
        self.events: list[str] = []

    def pump(self) -> None:
        """Send what is pending, then read once and take in what came."""
        import h2.events

        self.sock.sendall(self.conn.data_to_send())
        data = self.sock.recv(65536)
        if not data:
            raise AssertionError("the proxy closed the connection")
        for ev in self.conn.receive_data(data):
            self.events.append(type(ev).__name__)
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id is not None:
                fields: dict[Any, Any] = dict(ev.headers or [])  # str names: header_encoding is set
                self.status[ev.stream_id] = fields[":status"]
            if isinstance(ev, h2.events.DataReceived) and ev.stream_id is not None:
                self.conn.acknowledge_received_data(ev.flow_controlled_length or 0, ev.stream_id)

    def upload_until_answered(self, stream_id: int, most: int) -> int:
        """Send body bytes on ``stream_id`` as flow control allows (at most ``most``) until it is
        answered; how many were sent."""
        sent = 0
        while stream_id not in self.status:
            room = min(self.conn.local_flow_control_window(stream_id), 16_384) if stream_id in self.conn.streams else 0
            if room > 0 and sent < most:
                self.conn.send_data(stream_id, b"u" * room)
                sent += room
                self.sock.sendall(self.conn.data_to_send())
                continue
            self.pump()
        return sent

    def get(self, stream_id: int, path: str, authority: str) -> str:
        """A GET on ``stream_id``; its status once answered."""
        self.conn.send_headers(stream_id, [(":method", "GET"), (":path", path), (":scheme", "https"),
                                           (":authority", authority)], end_stream=True)
        while stream_id not in self.status:
            self.pump()
        return self.status[stream_id]
