"""The one PNG encoder: valid chunks, the pixels given, equal bytes from arrays and solid colours."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from ego2web_replay.png import encode_png, png_bytes, png_from_array


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + data)
        out.append((kind, data))
        pos += 12 + length
    return out


def test_pixels_round_trip() -> None:
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    chunks = _chunks(png_from_array(pixels))
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    assert struct.unpack(">IIBBBBB", chunks[0][1]) == (3, 2, 8, 2, 0, 0, 0)
    raw = zlib.decompress(chunks[1][1])
    assert raw == b"\x00" + pixels[0].tobytes() + b"\x00" + pixels[1].tobytes()


def test_array_and_solid_colour_give_the_same_bytes() -> None:
    colour = (200, 30, 30)
    assert png_from_array(np.full((5, 7, 3), colour, dtype=np.uint8)) == png_bytes(7, 5, colour)
    # a non-contiguous view encodes its pixels, not its memory
    wide = np.zeros((5, 14, 3), dtype=np.uint8)
    wide[:, ::2] = colour
    assert png_from_array(wide[:, ::2]) == png_bytes(7, 5, colour)


def test_wrong_pixel_count_is_refused() -> None:
    with pytest.raises(ValueError, match="expected 2x2 RGB pixels"):
        encode_png(2, 2, b"\x00" * 11)
