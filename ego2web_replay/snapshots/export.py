"""Exporting a snapshot for other web-archive tools: a ``.warc.gz``, a WACZ or a HAR (:mod:`.har`).

The ``.warc.gz`` holds every record of the snapshot, byte for byte, each in
its own gzip member, followed by one ``metadata`` record carrying the
snapshot's manifest (start URL, pages, tools, settings). Revisits whose
original lies outside the snapshot (suite-level deduplication) are written
as whole ``response`` records, so the export replays on its own.

The WACZ (1.1.1) wraps that WARC (``archive/data.warc.gz``, stored, not
deflated) with a CDXJ index built on the exported file (``indexes/index.cdx``),
the manifest's pages (``pages/pages.jsonl``), the manifest itself
(``ego2web/manifest.json``), the screenshots, ``datapackage.json`` with a
sha256 per file and ``datapackage-digest.json``. ``wacz validate`` accepts it
and pywb replays it (``wb-manager add --unpack-wacz``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from warcio.timeutils import timestamp_to_iso_date

from .. import __version__
from ..errors import SnapshotError
from .cdxj import CdxjEntry, build_index
from .framing import iter_units
from .reader import ArchiveRecord, parse_record, sha1_digest
from .snapshot import MANIFEST, Snapshot
from .storage import walk

__all__ = ["ExportFormat", "ExportResult", "export_snapshot", "MANIFEST_RECORD_URI", "materialize_revisit",
           "serialize_record"]

ExportFormat = Literal["wacz", "warc.gz", "har"]
MANIFEST_RECORD_URI = "urn:ego2web-replay:manifest"
WACZ_VERSION = "1.1.1"
WARC_NAME = "data.warc.gz"
_REVISIT_ONLY = {"warc-refers-to", "warc-refers-to-target-uri", "warc-refers-to-date", "warc-profile",
                 "warc-truncated", "content-length", "warc-block-digest", "warc-type"}


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_snapshot` wrote."""

    path: Path
    format: ExportFormat
    records: int
    materialized: int
    bytes: int
    left_out: int = 0
    """Captures the format cannot hold (HAR: records with no HTTP response)."""


def serialize_record(headers: list[tuple[str, str]], block: bytes, version: str = "WARC/1.1") -> bytes:
    """A WARC record's bytes: version line, headers, blank line, block, CRLF CRLF."""
    head = version + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("utf-8") + block + b"\r\n\r\n"


def materialize_revisit(revisit: ArchiveRecord, resolved: ArchiveRecord) -> bytes:
    """A whole ``response`` record for a revisit: its own WARC and HTTP heads, the original's payload.

    ``resolved`` is what :meth:`Snapshot.resolve` gives for the revisit. The
    record id, date and payload digest stay the revisit's; Content-Length and
    WARC-Block-Digest are computed for the new block.
    """
    if revisit.http_headers is not None:
        head = revisit.block[: revisit.http_head_length]
    else:
        head = resolved.block[: resolved.http_head_length]
    block = head + resolved.stored_payload
    headers = [("WARC-Type", "response")]
    headers += [(k, v) for k, v in revisit.headers.items() if k.lower() not in _REVISIT_ONLY]
    if not revisit.payload_digest:
        headers.append(("WARC-Payload-Digest", sha1_digest(resolved.stored_payload)))
    headers += [("WARC-Block-Digest", sha1_digest(block)), ("Content-Length", str(len(block)))]
    return serialize_record(headers, block)


def _gzip(data: bytes) -> bytes:
    gz = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return gz.compress(data) + gz.flush()


def _manifest_record(snap: Snapshot, when: datetime) -> bytes:
    payload = snap.manifest.model_dump_json(indent=2).encode("utf-8")
    headers = [
        ("WARC-Type", "metadata"),
        ("WARC-Record-ID", f"<urn:sha1:{hashlib.sha1(payload).hexdigest()}>"),
        ("WARC-Date", when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
        ("WARC-Target-URI", f"{MANIFEST_RECORD_URI}:{snap.manifest.task_id}/{snap.manifest.snapshot_id}"),
        ("Content-Type", "application/json"),
        ("WARC-Block-Digest", sha1_digest(payload)),
        ("Content-Length", str(len(payload))),
    ]
    return serialize_record(headers, payload)


def _write_warc_gz(snap: Snapshot, out: Path, when: datetime) -> tuple[int, int]:
    """Write the snapshot's records as one gzip member each; return (records, materialized)."""
    by_offset = {e.offset: e for e in snap.entries()}
    records = materialized = 0
    with snap.storage.open(snap.manifest.archive) as src, open(out, "wb") as dst:
        for unit in iter_units(src, snap.archive_path):
            if not unit.data.strip():
                continue
            record = parse_record(unit, snap.archive_path)
            data = unit.data[: record.warc_head_length + len(record.block)] + b"\r\n\r\n"
            entry = by_offset.get(unit.offset)
            if record.rec_type == "revisit" and entry is not None and snap.find_original(entry) is None:
                data = materialize_revisit(record, snap.resolve(entry))
                materialized += 1
            dst.write(_gzip(data))
            records += 1
        dst.write(_gzip(_manifest_record(snap, when)))
        dst.flush()
        os.fsync(dst.fileno())
    return records + 1, materialized


def _iso(ts: str) -> str:
    return timestamp_to_iso_date(ts) if ts and ts != "00000000000000" else ""


def _pages_jsonl(snap: Snapshot, entries: list[CdxjEntry]) -> bytes:
    first_seen: dict[str, str] = {}
    for e in sorted(entries, key=lambda e: e.timestamp):
        first_seen.setdefault(e.url, e.timestamp)
    lines = [json.dumps({"format": "json-pages-1.0", "id": "pages", "title": "All Pages"})]
    for n, url in enumerate(snap.manifest.pages):
        page = {"id": f"page-{n:04d}", "url": url}
        ts = _iso(first_seen.get(url, ""))
        if ts:
            page["ts"] = ts
        lines.append(json.dumps(page))
    return ("\n".join(lines) + "\n").encode("utf-8")


def _write_wacz(snap: Snapshot, out: Path, warc: Path, when: datetime) -> None:
    entries = build_index(warc, filename=WARC_NAME)
    index = "".join(e.to_line() + "\n" for e in entries).encode("utf-8")
    members: list[tuple[str, Path | bytes, int]] = [
        (f"archive/{WARC_NAME}", warc, zipfile.ZIP_STORED),
        ("indexes/index.cdx", index, zipfile.ZIP_DEFLATED),
        ("pages/pages.jsonl", _pages_jsonl(snap, entries), zipfile.ZIP_DEFLATED),
        ("ego2web/manifest.json", snap.storage.read(MANIFEST), zipfile.ZIP_DEFLATED),
    ]
    for name in sorted(walk(snap.storage, "screenshots/")):
        if name.count("/") == 1:  # one folder deep, as WACZ validators expect
            members.append((name, snap.storage.read(name), zipfile.ZIP_STORED))
    stamp = when.timetuple()[:6]
    resources = []
    with zipfile.ZipFile(out, "w") as zf:
        for name, content, method in members:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = method
            h, size = hashlib.sha256(), 0
            with zf.open(info, "w") as dst:
                chunks = [content] if isinstance(content, bytes) else _chunks(content)
                for chunk in chunks:
                    h.update(chunk)
                    size += len(chunk)
                    dst.write(chunk)
            resources.append({"name": Path(name).name, "path": name, "hash": f"sha256:{h.hexdigest()}",
                              "bytes": size})
        m = snap.manifest
        package: dict[str, object] = {
            "profile": "data-package",
            "resources": resources,
            "wacz_version": WACZ_VERSION,
            "title": f"{m.task_id} {m.snapshot_id}",
            "description": f"ego2web-replay snapshot of task {m.task_id} ({m.source})",
            "created": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "software": f"ego2web-replay {__version__}",
        }
        if m.start_url:
            package["mainPageURL"] = m.start_url
            starts = sorted(e.timestamp for e in entries if e.url == m.start_url)
            if starts and _iso(starts[0]):
                package["mainPageDate"] = _iso(starts[0])
        data = json.dumps(package, indent=2).encode("utf-8")
        digest = {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(data).hexdigest()}
        for name, blob in (("datapackage.json", data),
                           ("datapackage-digest.json", json.dumps(digest, indent=2).encode("utf-8"))):
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, blob)


def _chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            yield chunk


def export_snapshot(
    path: Path | Snapshot,
    out: Path,
    fmt: ExportFormat = "wacz",
    *,
    clock: Callable[[], datetime] | None = None,
) -> ExportResult:
    """Export the snapshot folder ``path`` (or an opened :class:`Snapshot`, in any storage) to ``out``.

    ``out`` is written atomically; a failed export leaves nothing behind.
    """
    if fmt not in ("wacz", "warc.gz", "har"):
        raise SnapshotError(f"unknown export format {fmt!r}; use wacz, warc.gz or har")
    snap = path if isinstance(path, Snapshot) else Snapshot.open(Path(path))
    out = Path(out)
    if out.is_dir():
        raise SnapshotError(f"{out}: is a folder; give the file to write, e.g. {out / (snap.manifest.task_id + '.' + fmt)}")
    if fmt == "har":  # HAR 1.2 for Playwright's route_from_har and browser tools (see .har)
        from .har import export_har

        entries, left_out = export_har(snap, out)
        return ExportResult(out, fmt, entries, 0, out.stat().st_size, left_out)
    when = (clock or (lambda: datetime.now(UTC)))().astimezone(UTC).replace(tzinfo=None)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".export-", dir=out.parent) as tmp:
            warc = Path(tmp) / WARC_NAME
            records, materialized = _write_warc_gz(snap, warc, when)
            staged = warc
            if fmt == "wacz":
                staged = Path(tmp) / "export.wacz"
                _write_wacz(snap, staged, warc, when)
            os.replace(staged, out)
    except OSError as e:
        raise SnapshotError(f"{out}: cannot write the export ({e.strerror or e})") from None
    return ExportResult(out, fmt, records, materialized, out.stat().st_size)
