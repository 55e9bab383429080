"""Writing WARC 1.1 archives record by record (``.warc.zst``, ``.warc.gz`` or ``.warc``).

Each record is serialised with warcio into memory, compressed on its own (one
zstd frame with content size and checksum, or one gzip member) and appended,
then flushed to the operating system, so a killed writer leaves every earlier
record whole. ``fsync`` (on by default for nothing but :meth:`flush` and
:meth:`close`; ``fsync_each=True`` for every record) also survives a machine crash.
Record ids and the clock are injectable, so the same input gives the same bytes.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Literal, NoReturn
from urllib.parse import urlsplit

import zstandard
from warcio.recordbuilder import RecordBuilder
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from ..errors import ArchiveError
from ..web import reason_phrase
from .warcstream import STREAM_MIN, Payload, digests, write_streamed

__all__ = ["ArchiveWriter", "RecordLocation", "Compression", "naive_utc", "chunk_body", "TIMING_HEADER",
           "LEFT_HEADER"]

Compression = Literal["zst", "gz", "none"]
#: On a response record whose body was streamed: when each piece came (see recorder/stream.py).
TIMING_HEADER = "WARC-Ego2Web-Stream-Timing"
#: On a streamed response cut on the recorder's side: ``client`` (the browser left) or ``stopped``.
LEFT_HEADER = "WARC-Ego2Web-Stream-Left"


@dataclass(frozen=True)
class RecordLocation:
    """Where a written record lies: its compressed span in the archive file."""

    record_id: str
    record_type: str
    url: str
    offset: int
    length: int
    payload_digest: str | None


def naive_utc(value: datetime) -> datetime:
    """A naive UTC datetime (warcio writes an invalid WARC-Date for aware ones)."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _default_clock() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _default_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"


def _drop_pseudo(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if not k.startswith(":")]


def _sent_chunked(headers: list[tuple[str, str]]) -> bool:
    """The message came with ``Transfer-Encoding: chunked`` (its length was not declared)."""
    return any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers)


def chunk_body(body: bytes) -> bytes:
    """``body`` in chunked transfer coding: one data chunk (none when empty), then the last chunk."""
    return (f"{len(body):x}\r\n".encode("ascii") + body + b"\r\n" if body else b"") + b"0\r\n\r\n"


def _fix_length(headers: list[tuple[str, str]], size: int, keep_length: bool) -> list[tuple[str, str]]:
    """Drop Transfer-Encoding (the body is stored de-chunked) and make Content-Length true."""
    out: list[tuple[str, str]] = []
    seen_length = False
    for name, value in headers:
        lower = name.lower()
        if lower == "transfer-encoding":
            continue
        if lower == "content-length":
            if seen_length:
                continue
            seen_length = True
            if not keep_length:
                value = str(size)
        out.append((name, value))
    if not seen_length and (size or not keep_length):
        out.append(("Content-Length", str(size)))
    return out


class ArchiveWriter:
    """Append WARC records to ``path``, one compression unit per record.

    The warcinfo record is written first when the file is new or empty. The
    writer is a context manager; :meth:`close` closes the file. With
    ``dedup_min_size`` set, a response whose stored payload (at least that many
    bytes) this writer already wrote is written as a ``revisit`` record
    (identical-payload-digest profile: the response's own HTTP head, no payload,
    ``WARC-Refers-To`` / ``-Target-URI`` / ``-Date`` naming the first capture),
    as warcprox does within a recording.
    """

    def __init__(
        self,
        path: Path,
        *,
        compression: Compression = "zst",
        warcinfo: dict[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        id_factory: Callable[[], str] | None = None,
        zstd_level: int = 3,
        fsync_each: bool = False,
        dedup_min_size: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.fsync_each = fsync_each
        # in-session deduplication: sha256 of a stored payload -> (record id, URL, WARC-Date, payload digest)
        self.dedup_min_size = dedup_min_size
        self._payloads: dict[bytes, tuple[str, str, str, str]] = {}
        self.revisits_written = 0
        self.compression: Compression = compression
        self._clock = clock or _default_clock
        self._new_id = id_factory or _default_id
        self._lock = threading.RLock()
        self._builder = RecordBuilder(warc_version="WARC/1.1")
        if compression == "zst":
            self._zstd = zstandard.ZstdCompressor(level=zstd_level, write_checksum=True, write_content_size=True)
        elif compression not in ("gz", "none"):
            raise ArchiveError(f"unknown archive compression {compression!r}; use zst, gz or none")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "ab")  # noqa: SIM115 - owned by the writer, closed in close()
            self._fh.seek(0, os.SEEK_END)
        except OSError as e:
            raise ArchiveError(f"{self.path}: cannot open the archive for writing ({e.strerror})") from None
        self.records_written = 0
        if self._fh.tell() == 0:
            fields = {"software": "ego2web-replay", "format": "WARC File Format 1.1"}
            fields.update(warcinfo or {})
            payload = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v).encode("utf-8")
            try:
                self.write_record(
                    "warcinfo",
                    "",
                    payload=payload,
                    content_type="application/warc-fields",
                    warc_headers=[("WARC-Filename", self.path.name)],
                )
            except ArchiveError:
                self._discard()
                raise

    def _discard(self) -> None:
        """Close the file after a failed write; what is still buffered cannot be written either."""
        try:
            self._fh.close()
        except OSError:
            pass

    # -- public API ------------------------------------------------------------

    def write_exchange(
        self,
        *,
        url: str,
        method: str,
        request_headers: list[tuple[str, str]],
        request_body: bytes,
        status: int,
        reason: str,
        response_headers: list[tuple[str, str]],
        response_body: bytes | BinaryIO,
        http_version: str = "HTTP/1.1",
        ip: str | None = None,
        date: datetime | None = None,
        warc_headers: list[tuple[str, str]] | None = None,
    ) -> list[RecordLocation]:
        """Write a response record and its request record; return ``[response, request]``.

        ``response_body`` is the wire payload (content-encoded bodies stay
        encoded, chunking already removed). A response that came chunked
        (``Transfer-Encoding: chunked``) is stored as it was framed on the wire:
        its headers unchanged (no Content-Length added) and its body re-chunked
        (:func:`chunk_body`), so the record block is the HTTP message as received
        (WARC 1.1) and replay can serve it chunked; its WARC-Payload-Digest is
        then over the chunked bytes, as warcio writes and checks it. Any other
        response gets a true Content-Length. HTTP/2 and HTTP/3 exchanges are
        written as HTTP/1.1 with the standard reason phrase and a Host header.
        ``warc_headers`` go on the response record (e.g. ``WARC-Truncated``).

        ``response_body`` may be a seekable binary file holding the payload (from its start to its
        end): one of :data:`~.warcstream.STREAM_MIN` bytes or more is written in pieces, never held
        whole in memory (:mod:`.warcstream`), into the same record bytes. A file with
        ``payload_digests()`` (the recorder's spool view) gives the payload's sha1 and sha256 taken
        as it came (None: not taken), so only the block digest is left to hash.
        """
        when = naive_utc(date) if date is not None else self._clock()
        if not http_version.upper().startswith("HTTP/1") or not reason:
            reason = reason_phrase(status, fallback=False) or reason
        statusline = f"{status} {reason}" if reason else str(status)
        keep_length = method.upper() == "HEAD" or status in (204, 304) or 100 <= status < 200
        resp_headers = _drop_pseudo(response_headers)
        payload: bytes | Payload
        if isinstance(response_body, bytes | bytearray):
            payload, size = bytes(response_body), len(response_body)
        else:
            size = response_body.seek(0, os.SEEK_END)
            response_body.seek(0)
            known = getattr(response_body, "payload_digests", None)  # hashed as it came (recorder/spool.py)
            payload = response_body.read() if size < STREAM_MIN else \
                Payload(response_body, size, known=known() if known is not None else None)
        chunked = not keep_length and _sent_chunked(resp_headers)
        if not chunked:
            resp_headers = _fix_length(resp_headers, size, keep_length)
        elif isinstance(payload, bytes):
            payload = chunk_body(payload)
        else:
            payload = Payload.chunked(payload.file, size)
        response_http = StatusAndHeaders(statusline, resp_headers, protocol="HTTP/1.1")

        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = next((v for k, v in request_headers if k.lower() == ":authority"), None)
        req_headers = _drop_pseudo(request_headers)
        if not any(k.lower() == "host" for k, _ in req_headers):
            req_headers.insert(0, ("Host", authority or parts.netloc))
        req_headers = _fix_length(req_headers, len(request_body), keep_length=not request_body)
        request_http = StatusAndHeaders(f"{target} HTTP/1.1", req_headers, protocol=method.upper())

        extra = ([("WARC-IP-Address", ip)] if ip else []) + list(warc_headers or [])
        with self._lock:
            resp_id = self._new_id()
            response = self._write_response(url, payload, response_http, extra, resp_id, when)
            request = self.write_record(
                "request", url, payload=request_body, http_headers=request_http,
                warc_headers=[("WARC-Concurrent-To", resp_id)], date=when,
            )
        return [response, request]

    def write_record(
        self,
        record_type: str,
        url: str,
        *,
        payload: bytes = b"",
        http_headers: StatusAndHeaders | None = None,
        content_type: str | None = None,
        warc_headers: list[tuple[str, str]] | None = None,
        record_id: str | None = None,
        date: datetime | None = None,
    ) -> RecordLocation:
        """Write one record of any type (warcinfo, response, request, resource, metadata, revisit).

        For a revisit, pass ``WARC-Refers-To-Target-URI``, ``WARC-Refers-To-Date``
        and ``WARC-Payload-Digest`` (the original's) in ``warc_headers`` and the
        revisit's HTTP head as ``http_headers``.
        """
        with self._lock:
            record_id = record_id or self._new_id()
            when = naive_utc(date) if date is not None else self._clock()
            fields = self._fields(record_type, url, warc_headers or [], record_id, when)
            record = self._builder.create_warc_record(
                url,
                record_type,
                payload=io.BytesIO(payload),
                length=len(payload),
                warc_content_type=content_type or "",
                warc_headers_dict=fields,
                http_headers=http_headers,
            )
            buf = io.BytesIO()
            WARCWriter(buf, gzip=False, warc_version="WARC/1.1").write_record(record)
            digest = record.rec_headers.get_header("WARC-Payload-Digest")
            return self._append(buf.getvalue(), record_type, record_id, url, digest)

    @staticmethod
    def _fields(record_type: str, url: str, warc_headers: list[tuple[str, str]], record_id: str,
                when: datetime) -> dict[str, str]:
        fields: dict[str, str] = {"WARC-Type": record_type, "WARC-Record-ID": record_id}
        fields["WARC-Date"] = datetime_to_iso_date(when, use_micros=True)
        if url:
            fields["WARC-Target-URI"] = url
        for name, value in warc_headers:
            fields[name] = value
        if record_type == "revisit" and "WARC-Profile" not in fields:
            fields["WARC-Profile"] = RecordBuilder.REVISIT_PROFILE_1_1
        return fields

    def _write_response(self, url: str, payload: bytes | Payload, http: StatusAndHeaders,
                        extra: list[tuple[str, str]], record_id: str, when: datetime) -> RecordLocation:
        """The response record, or a revisit of the first capture of the same payload (see the class)."""
        dedup_min = self.dedup_min_size
        if isinstance(payload, Payload):
            http.compute_headers_buffer()
            size = payload.length
            payload_digest, block_digest, key = digests(payload, http.headers_buff,
                                                        dedup_min is not None and size >= dedup_min)
        else:
            size = len(payload)
            key = hashlib.sha256(payload).digest() if dedup_min is not None and size >= dedup_min else b""
        dedup = dedup_min is not None and size > 0 and size >= dedup_min
        if dedup:
            original = self._payloads.get(key)
            if original is not None:
                refers = [("WARC-Refers-To", original[0]), ("WARC-Refers-To-Target-URI", original[1]),
                          ("WARC-Refers-To-Date", original[2]), ("WARC-Payload-Digest", original[3])]
                self.revisits_written += 1
                return self.write_record("revisit", url, http_headers=http, warc_headers=extra + refers,
                                         record_id=record_id, date=when)
        if isinstance(payload, Payload):
            location = self._write_streamed(url, payload, http, extra, (payload_digest, block_digest),
                                            record_id, when)
        else:
            location = self.write_record("response", url, payload=payload, http_headers=http,
                                         warc_headers=extra, record_id=record_id, date=when)
        if dedup and location.payload_digest:
            self._payloads[key] = (record_id, url, datetime_to_iso_date(when, use_micros=True), location.payload_digest)
        return location

    def _write_streamed(self, url: str, payload: Payload, http: StatusAndHeaders, extra: list[tuple[str, str]],
                        digest: tuple[str, str], record_id: str, when: datetime) -> RecordLocation:
        """A response record written in pieces (:mod:`.warcstream`), with the digests already taken."""
        fields = self._fields("response", url, extra + [("WARC-Payload-Digest", digest[0]),
                                                        ("WARC-Block-Digest", digest[1])], record_id, when)
        record = self._builder.create_warc_record(url, "response", payload=payload, length=payload.length,
                                                  warc_content_type="", warc_headers_dict=fields,
                                                  http_headers=http)
        if self._fh.closed:
            raise ArchiveError(f"{self.path}: the archive writer is closed; open a new one to append")
        offset = self._fh.tell()
        try:
            write_streamed(self._fh, record, payload, self.compression, getattr(self, "_zstd", None))
            self._sync()
        except OSError as e:
            self._undo(offset, e)
        self.records_written += 1
        return RecordLocation(record_id, "response", url, offset, self._fh.tell() - offset, digest[0])

    def write_raw(
        self, data: bytes, *, record_type: str, record_id: str, url: str, payload_digest: str | None
    ) -> RecordLocation:
        """Append an already serialised record (``WARC/1.x`` header to closing CRLF CRLF) unchanged."""
        with self._lock:
            return self._append(data, record_type, record_id, url, payload_digest)

    def flush(self) -> None:
        """Flush and fsync (every record is already flushed when written)."""
        with self._lock:
            self._sync(durable=True)

    def close(self) -> None:
        """Fsync and close the archive file."""
        with self._lock:
            if not self._fh.closed:
                try:
                    self._sync(durable=True)
                except OSError:
                    pass
                self._fh.close()

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------

    def _compress(self, data: bytes) -> bytes:
        if self.compression == "zst":
            return self._zstd.compress(data)
        if self.compression == "gz":
            gz = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
            return gz.compress(data) + gz.flush()
        return data

    def _sync(self, durable: bool = False) -> None:
        self._fh.flush()
        if durable or self.fsync_each:
            os.fsync(self._fh.fileno())

    def _undo(self, offset: int, e: OSError) -> NoReturn:
        try:  # leave no partial record behind
            self._fh.truncate(offset)
        except OSError:
            pass
        raise ArchiveError(
            f"{self.path}: cannot write to the archive ({e.strerror}); the recording stops here"
        ) from None

    def _append(
        self, data: bytes, record_type: str, record_id: str, url: str, digest: str | None
    ) -> RecordLocation:
        if self._fh.closed:
            raise ArchiveError(f"{self.path}: the archive writer is closed; open a new one to append")
        blob = self._compress(data)
        offset = self._fh.tell()
        try:
            self._fh.write(blob)
            self._sync()
        except OSError as e:
            self._undo(offset, e)
        self.records_written += 1
        return RecordLocation(record_id, record_type, url, offset, len(blob), digest)
