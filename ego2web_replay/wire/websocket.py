"""RFC 6455 framing: whole messages read off a byte stream, frames written.

:class:`MessageReader` takes the bytes of one direction of a websocket as they
come and returns each whole message: fragments joined, the client's mask
removed, ``permessage-deflate`` (RFC 7692) undone when the handshake agreed it.
One inflater per direction is kept for the whole connection: it decodes
messages whether or not the sender kept its compression context. Control frames
(close, ping, pong) come back as messages of their own, between fragments if
they were sent there. :func:`frame` writes one unfragmented frame.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import zlib
from dataclasses import dataclass

__all__ = ["OPCODES", "Message", "MessageReader", "FrameError", "accept_key", "frame", "deflate_agreed",
           "close_payload"]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0, 1, 2, 8, 9, 10
OPCODES = {TEXT: "text", BINARY: "binary", CLOSE: "close", PING: "ping", PONG: "pong"}
MAX_MESSAGE = 64 * 1024 * 1024


class FrameError(ValueError):
    """The stream is not websocket framing (or a message exceeds the bound)."""


@dataclass(frozen=True)
class Message:
    """One whole message: ``opcode`` (:data:`OPCODES`) and its payload, uncompressed."""

    opcode: int
    data: bytes

    @property
    def kind(self) -> str:
        return OPCODES.get(self.opcode, str(self.opcode))


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` answering a ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1((key.strip() + GUID).encode()).digest()).decode()


def deflate_agreed(extensions: str | None) -> bool:
    """Whether a handshake response's ``Sec-WebSocket-Extensions`` agreed permessage-deflate."""
    return any(part.split(";")[0].strip().lower() == "permessage-deflate" for part in (extensions or "").split(","))


def close_payload(code: int | None, reason: str = "") -> bytes:
    return b"" if code is None else struct.pack("!H", code) + reason.encode()


def frame(opcode: int, data: bytes, *, mask: bool = False) -> bytes:
    """One final frame of ``opcode`` carrying ``data`` (masked, as a client sends it, when ``mask``)."""
    n = len(data)
    head = bytes([0x80 | opcode])
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + data
    key = os.urandom(4)
    return head + key + _unmask(data, key)


def _unmask(data: bytes, key: bytes) -> bytes:
    if not data:
        return data
    whole = (key * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(whole, "big")).to_bytes(len(data), "big")


class MessageReader:
    """Whole messages from one direction's bytes (see the module docstring)."""

    def __init__(self, *, deflate: bool = False, max_message: int = MAX_MESSAGE) -> None:
        self.buf = bytearray()
        self.max_message = max_message
        self._inflater = zlib.decompressobj(-15) if deflate else None
        self._parts: list[bytes] = []
        self._opcode = 0
        self._compressed = False

    def feed(self, data: bytes) -> list[Message]:
        """The messages completed by ``data`` (raises :class:`FrameError` on bad framing)."""
        self.buf += data
        out: list[Message] = []
        while (got := self._frame()) is not None:
            fin, rsv1, opcode, payload = got
            if opcode >= CLOSE:  # a control frame: whole by itself
                out.append(Message(opcode, payload))
                continue
            if opcode != CONT:
                if self._parts:
                    raise FrameError("a new message began before the last one ended")
                self._opcode, self._compressed = opcode, rsv1
            elif not self._parts and not self._opcode:
                raise FrameError("a continuation frame with no message to continue")
            self._parts.append(payload)
            if sum(map(len, self._parts)) > self.max_message:
                raise FrameError(f"a websocket message over {self.max_message} bytes")
            if fin:
                body = b"".join(self._parts)
                if self._compressed:
                    if self._inflater is None:
                        raise FrameError("a compressed frame without permessage-deflate")
                    body = self._inflater.decompress(body + b"\x00\x00\xff\xff", self.max_message + 1)
                    if len(body) > self.max_message:  # inflated past the bound (a bomb, say)
                        raise FrameError(f"a websocket message over {self.max_message} bytes")
                out.append(Message(self._opcode, body))
                self._parts, self._opcode, self._compressed = [], 0, False
        return out

    def _frame(self) -> tuple[bool, bool, int, bytes] | None:
        buf = self.buf
        if len(buf) < 2:
            return None
        b0, b1 = buf[0], buf[1]
        n, pos = b1 & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                return None
            n, pos = struct.unpack_from("!H", buf, 2)[0], 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n, pos = struct.unpack_from("!Q", buf, 2)[0], 10
        if n > self.max_message:
            raise FrameError(f"a websocket frame over {self.max_message} bytes")
        masked = bool(b1 & 0x80)
        key = bytes(buf[pos:pos + 4]) if masked else b""
        start = pos + (4 if masked else 0)
        if len(buf) < start + n:
            return None
        payload = bytes(buf[start:start + n])
        del buf[: start + n]
        opcode = b0 & 0x0F
        if opcode not in (CONT, *OPCODES):
            raise FrameError(f"unknown websocket opcode {opcode}")
        return bool(b0 & 0x80), bool(b0 & 0x40), opcode, _unmask(payload, key) if masked else payload
