"""The CDXJ index of an archive: one sorted line per response, revisit and resource record.

A line is ``<SURT key> <14-digit timestamp> {json}``, one
:class:`~ego2web_replay.models.IndexEntry` (the model says what each key
holds). Non-GET requests fold their method and body into the key's query
(``__wb_method=post&...``) following the pywb / cdxj-indexer convention, so
captures of different POST bodies get different keys.
Lines are sorted bytewise, as ``LC_ALL=C sort`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import surt
from warcio.timeutils import iso_date_to_timestamp

from ..atomic import atomic_write_text
from ..errors import ArchiveError
from ..models.index import IndexEntry
from .postform import MAX_QUERY_LENGTH, post_query, request_body_query
from .reader import ArchiveRecord, iter_records, normalize_digest, sha1_digest

__all__ = [
    "IndexEntry", "CdxjEntry", "build_index", "write_index", "read_index", "parse_index", "index_text", "post_query",
    "request_body_query", "surt_key", "MAX_QUERY_LENGTH",
]

_INDEXED = ("response", "revisit", "resource")


CdxjEntry = IndexEntry  # the name this module used before the model tree; same class


def surt_key(url: str) -> str:
    """The canonical SURT key of a URL (as pywb computes it)."""
    try:
        return surt.surt(url)
    except Exception:  # surt raises assorted errors for odd URLs; fall back to the URL
        return url.lower()


def _key_url(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


def _mime(record: ArchiveRecord) -> str:
    if record.rec_type == "revisit":
        return "warc/revisit"
    value = record.http_header("Content-Type") if record.rec_type != "resource" else record.content_type
    value = (value or "").split(";", 1)[0].strip()
    return value or "unk"


def _timestamp(date: str | None) -> str:
    try:
        return iso_date_to_timestamp(date or "")[:14]
    except (ValueError, IndexError, TypeError, OverflowError):  # warcio's parser on a mangled WARC-Date
        return "00000000000000"


@dataclass
class _Item:
    """A record's place in the file, for pairing captures with their requests."""

    kind: str
    url: str | None
    record_id: str | None
    concurrent_to: list[str]
    request: tuple[str, str | None, bytes] | None = None  # method, content type, body
    record: ArchiveRecord | None = None


def build_index(archive: Path, filename: str | None = None) -> list[IndexEntry]:
    """Index every response, revisit and resource record of ``archive`` (sorted).

    Request records give their method and body to the capture they belong to:
    the nearest request linked by ``WARC-Concurrent-To`` (either direction),
    else an unlinked request for the same URL right before or after it.
    An incomplete tail (a killed recorder) is skipped: only whole records are indexed.
    """
    archive = Path(archive)
    name = filename or archive.name
    items: list[_Item] = []
    for record in iter_records(archive, tolerate_truncation=True):
        item = _Item(record.rec_type, record.url, record.record_id, record.concurrent_to)
        if record.rec_type == "request" and record.http_method:
            method = record.http_method.upper()
            body = record.payload if method not in ("GET", "HEAD") else b""
            item.request = (method, record.http_header("Content-Type"), body)
        elif record.rec_type in _INDEXED and record.url:
            record.block = b""  # the payload is all the index needs from here on
            item.record = record
        items.append(item)
    pairs = _pair_requests(items)
    entries = [
        _entry(item.record, name, items[pairs[i]].request if i in pairs else None)
        for i, item in enumerate(items)
        if item.record is not None
    ]
    entries.sort(key=lambda e: e.to_line().encode("utf-8"))
    return entries


def _pair_requests(items: list[_Item]) -> dict[int, int]:
    """Map each capture's position to its request's position."""
    by_id: dict[str, list[int]] = {}
    by_target: dict[str, list[int]] = {}
    for j, item in enumerate(items):
        if item.request is None:
            continue
        if item.record_id:
            by_id.setdefault(item.record_id, []).append(j)
        for target in item.concurrent_to:
            by_target.setdefault(target, []).append(j)
    pairs: dict[int, int] = {}
    for i, item in enumerate(items):
        if item.record is None:
            continue
        linked = list(by_target.get(item.record_id or "", []))
        for target in item.concurrent_to:
            linked += by_id.get(target, [])
        if linked:
            pairs[i] = min(linked, key=lambda j: abs(j - i))
    claimed = set(pairs.values())
    for i, item in enumerate(items):
        if item.record is None or i in pairs:
            continue
        for j in (i + 1, i - 1):
            if 0 <= j < len(items) and j not in claimed and items[j].request and items[j].url == item.url:
                pairs[i] = j
                claimed.add(j)
                break
    return pairs


def _entry(record: ArchiveRecord, filename: str, request: tuple[str, str | None, bytes] | None) -> IndexEntry:
    url = record.url or ""
    method, body_query, key_url = "GET", None, url
    if request and request[0].upper() != "GET":
        method = request[0].upper()
        query = post_query(method, request[1], request[2])
        key_url = _key_url(url, query)
        body_query = query.partition("&")[2] or None
    digest = record.payload_digest or sha1_digest(record.payload)
    refers_date = record.refers_to_date
    return IndexEntry(
        surt=surt_key(key_url),
        timestamp=_timestamp(record.date),
        url=url,
        mime=_mime(record),
        digest=normalize_digest(digest),
        offset=record.offset,
        length=record.length,
        filename=filename,
        status=record.http_status if record.rec_type == "response" else (200 if record.rec_type == "resource" else None),
        method=method,
        request_body_query=body_query,
        record_type=record.rec_type,
        refers_to_uri=record.refers_to_target_uri if record.rec_type == "revisit" else None,
        refers_to_date=_timestamp(refers_date) if record.rec_type == "revisit" and refers_date else None,
    )


def index_text(entries: list[IndexEntry]) -> str:
    """The CDXJ file of ``entries``: one line each, sorted bytewise."""
    lines = sorted((e.to_line() for e in entries), key=lambda s: s.encode("utf-8"))
    return "".join(line + "\n" for line in lines)


def write_index(entries: list[IndexEntry], path: Path) -> None:
    """Write entries to ``path`` (sorted bytewise), atomically."""
    try:
        atomic_write_text(path, index_text(entries))
    except OSError as e:
        raise ArchiveError(f"{path}: cannot write the index ({e.strerror})") from None


def read_index(path: Path) -> list[IndexEntry]:
    """Read a CDXJ index; a corrupt line raises :class:`ArchiveError` naming file and line."""
    path = Path(path)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise ArchiveError(f"{path}: index not found; build it with `ego2web-replay snapshot index`") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ArchiveError(f"{path}: cannot read the index ({e})") from None
    return parse_index(text, path)


def parse_index(text: str, path: Path | str) -> list[IndexEntry]:
    """The entries of CDXJ ``text`` (the content of ``path``); a corrupt line raises :class:`ArchiveError`."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("!"):  # blank, or a header line (!meta, !OpenWayback ...)
            continue
        try:
            entries.append(IndexEntry.from_line(line))
        except (ValueError, KeyError, TypeError):
            raise ArchiveError(
                f"{path}: line {number} is not a valid CDXJ line; rebuild with `ego2web-replay snapshot index`"
            ) from None
    return entries
