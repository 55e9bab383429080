"""One line of a snapshot's CDXJ index: ``<SURT key> <14-digit timestamp> {json}``.

The JSON keys follow pywb / cdxj-indexer: ``url, mime, status, digest,
length, offset, filename``, plus ``method`` and ``requestBody`` for non-GET
requests, ``recordType`` for resource records and ``refersToUri`` /
``refersToDate`` for revisits. :class:`IndexEntry` is the one model of such a
line: the indexer writes it, replay, verification and the tracker read it.
It is a frozen dataclass rather than a pydantic model because a snapshot
holds up to hundreds of thousands of them; :func:`index_row` reads only what
replay needs of a line, for the same reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["IndexEntry", "IndexRow", "index_row", "learn_row"]

IndexRow = tuple[str, int, str, str, "str | None", str]
"""What replay keeps of a line: timestamp, offset, url, method, body query, the line itself."""


@dataclass(frozen=True)
class IndexEntry:
    """One index line (one response, revisit or resource record of the archive)."""

    surt: str
    """The SURT key: the URL canonicalized (and, for non-GET, with ``__wb_method=...`` appended)."""
    timestamp: str
    """Capture time, 14 digits (``YYYYMMDDhhmmss``, UTC)."""
    url: str
    """The captured URL, as archived."""
    mime: str
    """The response's media type (``warc/revisit`` for revisits, ``unk`` when unknown)."""
    digest: str
    """Payload digest, ``sha1:<base32>``."""
    offset: int
    """Byte offset of the record in the archive file."""
    length: int
    """Byte length of the record in the archive file (compressed)."""
    filename: str
    """The archive file's name."""
    status: int | None = None
    """HTTP status of the response; None for revisits."""
    method: str = "GET"
    """HTTP method of the request."""
    request_body_query: str | None = None
    """A non-GET request's body in query form (``requestBody``), if any."""
    record_type: str = "response"
    """WARC-Type of the record: response, revisit or resource."""
    refers_to_uri: str | None = None
    """Revisits: the URL of the original capture."""
    refers_to_date: str | None = None
    """Revisits: the 14-digit time of the original capture."""

    @property
    def captured_at(self) -> datetime:
        """The capture time as a naive UTC datetime (missing digits read as zeros)."""
        return datetime.strptime(self.timestamp[:14].ljust(14, "0"), "%Y%m%d%H%M%S")

    def to_line(self) -> str:
        """The line as written to ``index.cdxj`` (without the newline)."""
        data: dict[str, str] = {"url": self.url, "mime": self.mime}
        if self.status is not None:
            data["status"] = str(self.status)
        data.update(digest=self.digest, length=str(self.length), offset=str(self.offset), filename=self.filename)
        if self.method != "GET":
            data["method"] = self.method
        if self.request_body_query:
            data["requestBody"] = self.request_body_query
        if self.record_type == "resource":
            data["recordType"] = self.record_type
        if self.refers_to_uri:
            data["refersToUri"] = self.refers_to_uri
        if self.refers_to_date:
            data["refersToDate"] = self.refers_to_date
        return f"{self.surt} {self.timestamp} {json.dumps(data)}"

    @classmethod
    def from_line(cls, line: str) -> IndexEntry:
        """Parse a line; ValueError, KeyError or TypeError when it is not a CDXJ line."""
        key, timestamp, blob = line.split(" ", 2)
        data = _blob(blob)
        if not isinstance(data, dict) or not timestamp.isdigit():
            raise ValueError("not a CDXJ line")
        mime = data.get("mime", "unk")
        status = data.get("status")
        return cls(
            surt=key,
            timestamp=timestamp,
            url=data["url"],
            mime=mime,
            digest=data.get("digest", ""),
            offset=int(data["offset"]),
            length=int(data["length"]),
            filename=data.get("filename", ""),
            status=int(status) if status not in (None, "", "-") else None,
            method=data.get("method", "GET"),
            request_body_query=data.get("requestBody"),
            record_type=_record_type(data),
            refers_to_uri=data.get("refersToUri"),
            refers_to_date=data.get("refersToDate"),
        )


def _blob(blob: str) -> Any:
    """The JSON of a CDXJ line; a ValueError (not a RecursionError) for one nested absurdly deep."""
    try:
        return json.loads(blob)
    except RecursionError:
        raise ValueError("CDXJ line nested too deep") from None


def _record_type(data: dict) -> str:
    return data.get("recordType") or ("revisit" if data.get("mime") == "warc/revisit" else "response")


_VALUE = r'[^"\\\x00-\x1f]*'  # a JSON string's text when it has no escape and no control character


def plain_line(ts: str, status: str, length: str, method: str) -> re.Pattern[str]:
    """A line exactly as :meth:`IndexEntry.to_line` writes it when no value needs a JSON escape, with
    the given patterns of its timestamp, status, length and method (groups or not); URL, media type,
    digest, offset, body and record type are groups, in this order after those that are."""
    return re.compile(
        rf'[^ ]* {ts} \{{"url": "({_VALUE})", "mime": "({_VALUE})"(?:, "status": "{status}")?, "digest": "({_VALUE})", '
        rf'"length": "{length}", "offset": "(-?[0-9]+)", "filename": "{_VALUE}"(?:, "method": "{method}")?'
        rf'(?:, "requestBody": "({_VALUE})")?(?:, "recordType": "({_VALUE})")?(?:, "refersToUri": "{_VALUE}")?'
        rf'(?:, "refersToDate": "{_VALUE}")?\}}')


_PLAIN_LINE = plain_line("([^ ]*)", f"({_VALUE})", f"({_VALUE})", f"({_VALUE})")
"""A line exactly as :meth:`IndexEntry.to_line` writes it when no value needs a JSON escape: its
fields are read by one match (the JSON parser is for every other line)."""


def index_row(line: str) -> tuple[str, IndexRow]:
    """The record type of a line and what replay keeps of it (:data:`IndexRow`), without
    building an :class:`IndexEntry`; same errors as :meth:`IndexEntry.from_line`.

    A line in the form :meth:`IndexEntry.to_line` writes without escapes (nearly every line) is
    read by :data:`_PLAIN_LINE`, with the very result the JSON parse gives (twice as fast)."""
    m = _PLAIN_LINE.fullmatch(line)
    if m is not None:
        ts, url, mime, _status, _digest, _length, offset, method, body, rtype = m.groups()
        return (rtype or ("revisit" if mime == "warc/revisit" else "response"),
                (ts, int(offset), url, (method or "GET").upper(), body, line))
    _key, ts, blob = line.split(" ", 2)
    d = _blob(blob)
    row = (ts, int(d["offset"]), d["url"], (d.get("method") or "GET").upper(), d.get("requestBody"), line)
    return _record_type(d), row


def learn_row(line: str) -> tuple[str, str, str, str | None, str]:
    """``(record type, method, url, body query, digest)`` of a line, each as :meth:`IndexEntry.from_line`
    reads it (the method as written), with its errors; the plain form read by one match."""
    m = _PLAIN_LINE.fullmatch(line)
    if m is None:
        e = IndexEntry.from_line(line)
        return e.record_type, e.method, e.url, e.request_body_query, e.digest
    ts, url, mime, status, digest, length, _offset, method, body, rtype = m.groups()
    if not ts.isdigit():
        raise ValueError("not a CDXJ line")
    int(length)
    if status not in (None, "", "-"):
        int(status)
    return (rtype or ("revisit" if mime == "warc/revisit" else "response"), "GET" if method is None else method,
            url, body, digest)
