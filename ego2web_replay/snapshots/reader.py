"""Reading WARC records with their offsets, from ``.warc.zst``, ``.warc.gz`` or ``.warc``.

Reading is one loop: :func:`iter_records` splits the file into compression
units (:mod:`.framing`) and parses each into an :class:`ArchiveRecord` (WARC
headers via warcio's header parser, then the HTTP head, then the payload,
de-chunked when the stored response is chunked). :func:`read_record` reads one
record at an offset taken from the index. :func:`scan_archive` walks a whole
file without raising, for ``snapshot verify`` and for archives cut short by a
killed recorder.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from warcio.statusandheaders import StatusAndHeadersParser, StatusAndHeadersParserException

from ..errors import ArchiveError
from .digests import digest_problems, normalize_digest, sha1_digest
from .framing import Truncated, Unit, iter_units, read_unit

__all__ = [
    "ArchiveRecord",
    "WarcHeaders",
    "RecordStream",
    "RecordInfo",
    "ScanResult",
    "iter_records",
    "read_record",
    "read_record_at",
    "open_archive",
    "scan_archive",
    "parse_record",
    "digest_problems",
    "sha1_digest",
    "normalize_digest",
]

_WARC_PARSER = StatusAndHeadersParser(["WARC/1.1", "WARC/1.0", "WARC/0.17", "WARC/0.18"], verify=True)
_HTTP_PARSER = StatusAndHeadersParser([], verify=False)
_HTTP_RECORD_TYPES = ("response", "request", "revisit")


class WarcHeaders:
    """Ordered WARC headers with case-insensitive lookup (``headers["WARC-Type"]``)."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = list(items)

    def get(self, name: str, default: str | None = None) -> str | None:
        lower = name.lower()
        for key, value in self._items:
            if key.lower() == lower:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        lower = name.lower()
        return [value for key, value in self._items if key.lower() == lower]

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __repr__(self) -> str:
        return f"WarcHeaders({self._items!r})"


@dataclass
class ArchiveRecord:
    """One WARC record as read from an archive.

    ``payload`` is the HTTP entity as stored (content-encoded bodies stay
    encoded) but de-chunked when the stored response used chunked transfer
    coding; for records without HTTP headers it is the whole block.
    """

    offset: int
    length: int = field(metadata={"doc": "compressed span in the file"})
    rec_type: str
    record_id: str | None
    url: str | None
    date: str | None
    headers: WarcHeaders
    http_protocol: str | None = None
    http_status: int | None = None
    http_reason: str | None = None
    http_method: str | None = None
    http_target: str | None = None
    http_headers: list[tuple[str, str]] | None = None
    payload: bytes = b""
    block: bytes = field(default=b"", repr=False)
    http_head_length: int = 0
    chunked: bool = False
    warc_head_length: int = 0

    @property
    def payload_digest(self) -> str | None:
        return self.headers.get("WARC-Payload-Digest")

    @property
    def block_digest(self) -> str | None:
        return self.headers.get("WARC-Block-Digest")

    @property
    def refers_to(self) -> str | None:
        return self.headers.get("WARC-Refers-To")

    @property
    def refers_to_target_uri(self) -> str | None:
        return self.headers.get("WARC-Refers-To-Target-URI")

    @property
    def refers_to_date(self) -> str | None:
        return self.headers.get("WARC-Refers-To-Date")

    @property
    def concurrent_to(self) -> list[str]:
        return self.headers.get_all("WARC-Concurrent-To")

    @property
    def ip(self) -> str | None:
        return self.headers.get("WARC-IP-Address")

    @property
    def content_type(self) -> str | None:
        return self.headers.get("Content-Type")

    @property
    def stored_payload(self) -> bytes:
        """The payload exactly as stored (still chunked if it was stored chunked)."""
        return self.block[self.http_head_length :]

    def http_header(self, name: str) -> str | None:
        """The first HTTP header called ``name`` (case-insensitive), if any."""
        lower = name.lower()
        for key, value in self.http_headers or []:
            if key.lower() == lower:
                return value
        return None


@dataclass(frozen=True)
class RecordInfo:
    """A light summary of one record, kept by :func:`scan_archive`."""

    offset: int
    length: int
    rec_type: str
    record_id: str | None
    url: str | None
    date: str | None
    payload_digest: str | None


@dataclass
class ScanResult:
    """What a full walk over an archive found."""

    records: list[RecordInfo]
    whole_records: int
    truncated_at: int | None = None
    error: str | None = None
    digest_problems: list[str] = field(default_factory=list)
    size: int = 0


def _dechunk(data: bytes) -> bytes | None:
    """Decode chunked transfer coding; ``None`` if ``data`` is not validly chunked."""
    out = bytearray()
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return None
        size_text = data[pos:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return None
        pos = end + 1
        if size == 0:
            return bytes(out)
        if pos + size > len(data):
            return None
        out += data[pos : pos + size]
        pos += size
        if data[pos : pos + 2] == b"\r\n":
            pos += 2
        elif data[pos : pos + 1] == b"\n":
            pos += 1


def parse_record(unit: Unit, path: Path) -> ArchiveRecord:
    """Parse the uncompressed bytes of one unit into an :class:`ArchiveRecord`."""
    stream = io.BytesIO(unit.data)
    where = f"{path}: the record at byte {unit.offset}"
    try:
        warc = _WARC_PARSER.parse(stream)
    except (StatusAndHeadersParserException, EOFError, ValueError) as e:
        raise ArchiveError(f"{where} is not a WARC record ({str(e).splitlines()[0]})") from None
    headers = WarcHeaders(warc.headers)
    try:
        length = int(headers.get("Content-Length") or "")
    except ValueError:
        raise ArchiveError(f"{where} has no valid Content-Length") from None
    start = stream.tell()
    block = unit.data[start : start + length]
    if len(block) < length:
        raise ArchiveError(f"{where} is shorter than its Content-Length ({len(block)} < {length})")
    if unit.data[start + length :].strip():
        raise ArchiveError(
            f"{where} holds more than one record in one compression unit; "
            "recompress it record by record (e.g. `warcio recompress`)"
        )
    rec_type = headers.get("WARC-Type") or "unknown"
    url = headers.get("WARC-Target-URI")
    if url and url.startswith("<") and url.endswith(">"):
        url = url[1:-1]
    record = ArchiveRecord(
        offset=unit.offset,
        length=unit.length,
        rec_type=rec_type,
        record_id=headers.get("WARC-Record-ID"),
        url=url,
        date=headers.get("WARC-Date"),
        headers=headers,
        payload=block,
        block=block,
        warc_head_length=start,
    )
    content_type = (headers.get("Content-Type") or "application/http").lower()
    if (
        rec_type in _HTTP_RECORD_TYPES
        and block
        and url
        and url.lower().startswith(("http:", "https:"))
        and content_type.startswith("application/http")
    ):
        _parse_http(record)
    return record


def _parse_http(record: ArchiveRecord) -> None:
    stream = io.BytesIO(record.block)
    try:
        http = _HTTP_PARSER.parse(stream)
    except (StatusAndHeadersParserException, EOFError, ValueError):
        return
    first = http.protocol or ""
    rest = http.statusline or ""
    if record.rec_type == "request":
        target, _, protocol = rest.rpartition(" ")
        if not protocol.upper().startswith("HTTP/") or not first:
            return
        record.http_method, record.http_target, record.http_protocol = first, target, protocol
    else:
        if not first.upper().startswith("HTTP/"):
            return
        code, _, reason = rest.partition(" ")
        try:
            record.http_status = int(code)
        except ValueError:
            return
        record.http_protocol, record.http_reason = first, reason.strip()
    record.http_headers = list(http.headers)
    record.http_head_length = stream.tell()
    stored = record.block[record.http_head_length :]
    record.payload = stored
    te = (record.http_header("Transfer-Encoding") or "").lower()
    if "chunked" in te:
        decoded = _dechunk(stored)
        if decoded is not None:
            record.payload, record.chunked = decoded, True


class RecordStream(Iterator[ArchiveRecord]):
    """Iterator over the records of an archive; see :func:`iter_records`.

    After iteration, ``whole_records`` counts the records read and
    ``truncated_at`` is the byte offset where an incomplete tail begins (only
    set with ``tolerate_truncation=True``; otherwise truncation raises).
    """

    def __init__(self, path: Path, tolerate_truncation: bool = False, fh: BinaryIO | None = None) -> None:
        self.path = Path(path)
        self.tolerate_truncation = tolerate_truncation
        self.whole_records = 0
        self.truncated_at: int | None = None
        self._fh = fh if fh is not None else open_archive(lambda: open(self.path, "rb"), self.path)
        self._units = iter_units(self._fh, self.path)

    def __iter__(self) -> RecordStream:
        return self

    def __next__(self) -> ArchiveRecord:
        try:
            unit = next(self._units)
            while not unit.data.strip():  # empty gzip members / padding between records
                unit = next(self._units)
        except StopIteration:
            self.close()
            raise
        except Truncated as t:
            self.close()
            self.truncated_at = t.offset
            if self.tolerate_truncation:
                raise StopIteration from None
            raise ArchiveError(
                f"{self.path}: archive truncated at byte {t.offset} after {self.whole_records} "
                "whole records (a recording that did not finish?); "
                "`ego2web-replay snapshot verify` reports what is missing"
            ) from None
        except BaseException:
            self.close()
            raise
        record = parse_record(unit, self.path)
        self.whole_records += 1
        return record

    def close(self) -> None:
        self._fh.close()


def open_archive(opener: Callable[[], BinaryIO], path: Path) -> BinaryIO:
    """``opener()``, with a missing or unreadable archive turned into :class:`ArchiveError` naming ``path``."""
    try:
        return opener()
    except FileNotFoundError:
        raise ArchiveError(f"{path}: archive not found") from None
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read the archive ({e.strerror})") from None


def iter_records(path: Path, tolerate_truncation: bool = False, fh: BinaryIO | None = None) -> RecordStream:
    """Iterate over every record of an archive, in file order, with offsets (from ``fh`` when given;
    ``path`` then only names it in errors)."""
    return RecordStream(path, tolerate_truncation, fh)


def read_record(path: Path, offset: int, length: int | None = None) -> ArchiveRecord:
    """Read the record at ``offset`` (from the index); ``length`` is checked when given."""
    path = Path(path)
    with open_archive(lambda: open(path, "rb"), path) as fh:
        return read_record_at(fh, path, offset, length)


def read_record_at(fh: BinaryIO, path: Path, offset: int, length: int | None = None) -> ArchiveRecord:
    """Read the record at ``offset`` of the open archive ``fh`` (``path`` names it in errors)."""
    try:
        unit = read_unit(fh, path, offset)
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read the archive ({e.strerror})") from None
    if length is not None and unit.length != length:
        raise ArchiveError(
            f"{path}: the record at byte {offset} is {unit.length} bytes long, "
            f"the index says {length}; rebuild the index with `ego2web-replay snapshot index`"
        )
    return parse_record(unit, path)


def scan_archive(path: Path, check_digests: bool = False) -> ScanResult:
    """Walk a whole archive without raising for its content.

    Stops at the last whole record; ``truncated_at`` and ``error`` say why it
    stopped early. A missing file still raises :class:`ArchiveError`.
    """
    stream = iter_records(path, tolerate_truncation=True)
    result = ScanResult(records=[], whole_records=0, size=Path(path).stat().st_size)
    try:
        for rec in stream:
            result.records.append(
                RecordInfo(rec.offset, rec.length, rec.rec_type, rec.record_id, rec.url, rec.date, rec.payload_digest)
            )
            if check_digests:
                result.digest_problems.extend(digest_problems(rec, Path(path)))
    except ArchiveError as e:
        result.error = str(e)
    finally:
        stream.close()
    result.whole_records = len(result.records)
    result.truncated_at = stream.truncated_at
    return result
