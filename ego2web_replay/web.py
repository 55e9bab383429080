"""HTTP content helpers shared by recording, replay, judges and drift probes: no proxy, no network.

Headers are ``(name, value)`` pairs (names compared case-insensitively) or any mapping.

* :func:`get_header` finds a header's first value;
* :func:`decode_body` undoes ``Content-Encoding``;
* :func:`reason_phrase` is the one table of HTTP reason phrases;
* :func:`html_to_text` is the one reading of an HTML page as the text a person sees.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from http import HTTPStatus

__all__ = ["RequestHeaders", "decode_body", "get_header", "html_to_text", "reason_phrase"]

RequestHeaders = Mapping[str, str] | Iterable[tuple[str, str]]


def get_header(headers: RequestHeaders, name: str) -> str | None:
    """The first value of header ``name`` (case-insensitive), or None."""
    name = name.lower()
    # a list of pairs (what the wire and the recorder pass) is not asked the ABC check a Mapping needs
    pairs = headers if type(headers) is list else headers.items() if isinstance(headers, Mapping) else headers
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

                # every frame: a zstd stream may be several frames one after another (RFC 8878 3.1)
                body = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(body)
            elif coding != "identity":
                return None
    except Exception:  # noqa: BLE001 - any decoder failure means "cannot decode"
        return None
    return body


_STATUS_CLASSES = {1: "Informational", 2: "Success", 3: "Redirection", 4: "Client Error", 5: "Server Error"}


def reason_phrase(status: int, *, fallback: bool = True) -> str:
    """The standard reason phrase of ``status`` (HTTP/2 responses carry none).

    For a code with no registered phrase: the name of its class (``Success``,
    ``Client Error`` ...; ``Unknown`` outside 100-599), or ``""`` when
    ``fallback`` is false.
    """
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return _STATUS_CLASSES.get(status // 100, "Unknown") if fallback else ""


class _Text(HTMLParser):
    _SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
              "header", "footer", "td", "th", "title", "ul", "ol", "table"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.title: list[str] = []
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in self._SKIP:
            self.skip += 1
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in self._SKIP and self.skip:
            self.skip -= 1
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The visible text of an HTML document: title first, then one line per block element,
    whitespace collapsed; scripts, styles, templates, SVG and the rest of the head left out."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in ("".join(parser.title) + "\n" + "".join(parser.parts)).splitlines()]
    return "\n".join(line for line in lines if line)
