"""Solid-colour PNG images without an imaging library (demo pages, test sites, test screenshots)."""

from __future__ import annotations

import struct
import zlib

__all__ = ["png_bytes"]


def png_bytes(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid solid-colour PNG, made without any imaging library."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
