"""Raw-socket HTTP/1.1 helpers for the loopback origins tests write byte by byte."""

from __future__ import annotations

import socket

__all__ = ["read_head"]


def read_head(sock: socket.socket, buf: bytearray) -> bytes | None:
    """The next message head on ``sock`` (up to, not including, the blank line), taken off the front of
    ``buf`` (what was read past it stays there); None when the peer closes first."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    end = buf.index(b"\r\n\r\n")
    head = bytes(buf[:end])
    del buf[: end + 4]
    return head
