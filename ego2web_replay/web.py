"""HTTP content helpers shared by replay, judges and drift probes: no proxy, no network.

Headers are ``(name, value)`` pairs (names compared case-insensitively) or any mapping.

* :func:`get_header` finds a header's first value;
* :func:`decode_body` undoes ``Content-Encoding``.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Mapping

__all__ = ["RequestHeaders", "decode_body", "get_header"]

RequestHeaders = Mapping[str, str] | Iterable[tuple[str, str]]


def get_header(headers: RequestHeaders, name: str) -> str | None:
    """The first value of header ``name`` (case-insensitive), or None."""
    name = name.lower()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in pairs:
        if key.lower() == name:
            return value
    return None


def decode_body(body: bytes, content_encoding: str | None) -> bytes | None:
    """``body`` with its Content-Encoding undone (gzip, deflate, br, zstd, identity).

    Returns None when an encoding is unknown or the body does not decode.
    """
    if not content_encoding:
        return body
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    try:
        for coding in reversed(codings):
            if coding in ("gzip", "x-gzip"):
                body = gzip.decompress(body)
            elif coding == "deflate":
                try:
                    body = zlib.decompress(body)
                except zlib.error:
                    body = zlib.decompress(body, -zlib.MAX_WBITS)
            elif coding == "br":
                import brotli  # type: ignore[import-untyped]

                body = brotli.decompress(body)
            elif coding == "zstd":
                import zstandard

                body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
            elif coding != "identity":
                return None
    except Exception:  # noqa: BLE001 - any decoder failure means "cannot decode"
        return None
    return body
