"""Importing WARCs written by other tools (pywb, warcprox, wget, browsertrix ...) as a snapshot.

Accepts ``.warc``, ``.warc.gz``, ``.warc.zst``, ``.wacz`` and HAR 1.2 files (see
:mod:`.har`; HAR files are imported on their own, not mixed with WARCs), several at
once (so a URL-agnostic revisit and its original from another file end up in
one snapshot). Records are copied byte for byte (headers, ids and digests
unchanged), each recompressed into its own unit; revisits are kept and
resolved through the index.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ..errors import ArchiveError, SnapshotError
from ..limits import RATIO_FLOOR, InputLimitError, human, loads, max_inflation, max_json_bytes
from ..models import SnapshotManifest
from ..redaction import Redactor
from .export import MANIFEST_RECORD_URI
from .framing import Truncated, iter_units
from .har import import_har, looks_like_har
from .reader import ArchiveRecord, parse_record
from .snapshot import Snapshot, SnapshotWriter
from .warc import Compression

__all__ = ["import_warc"]

_WARC_SUFFIXES = (".warc", ".warc.gz", ".warc.zst", ".arc.gz")
_GZIP = b"\x1f\x8b"
_ZSTD = (b"\x28\xb5\x2f\xfd", b"\x5d\x2a\x4d\x18")  # a zstd frame; the skippable frame of a dictionary


def _kind(path: Path) -> str:
    """``wacz``, ``warc`` or ``har`` by the file's first bytes (and name); a one-line error for anything else."""
    if not path.is_file():
        raise ArchiveError(f"{path}: file not found")
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read ({e.strerror})") from None
    if path.suffix.lower() == ".wacz" or zipfile.is_zipfile(path):
        return "wacz"
    if head.lstrip(b"\r\n")[:5] == b"WARC/" or head[:2] == _GZIP or head[:4] in _ZSTD \
            or path.name.lower().endswith(_WARC_SUFFIXES):
        return "warc"
    if looks_like_har(path, head):
        return "har"
    raise ArchiveError(f"{path}: not a WARC, WACZ or HAR file (starts with {head[:16]!r})")


def import_warc(
    src: Path | Sequence[Path],
    task_id: str,
    root: Path,
    *,
    snapshot_id: str | None = None,
    compression: Compression = "zst",
    keep_credentials: bool = False,
) -> Snapshot:
    """Create a snapshot (``source="import"``) from one or more WARC/WACZ files, or HAR files.

    WARC records are copied as they are; HAR entries are archived with credentials redacted
    (unless ``keep_credentials``), and the manifest records the redaction for the replay.
    """
    sources = [Path(src)] if isinstance(src, (str, Path)) else [Path(s) for s in src]
    if not sources:
        raise SnapshotError("nothing to import: give at least one WARC, WACZ or HAR file")
    kinds = [_kind(path) for path in sources]
    if "har" in kinds and set(kinds) != {"har"}:
        raise SnapshotError(f"{sources[kinds.index('har')]}: a HAR file is imported on its own, "
                            "not together with WARC or WACZ files")
    red = Redactor.make(keep_credentials=keep_credentials or "har" not in kinds)
    settings: dict[str, object] = {"imported_from": [p.name for p in sources]}
    if red.settings() is not None:
        settings["redaction"] = red.settings()
    writer = SnapshotWriter(
        Path(root), task_id, compression=compression, source="import", snapshot_id=snapshot_id,
        settings=settings,
    )
    try:
        for path, kind in zip(sources, kinds, strict=True):
            if kind == "wacz":
                _import_wacz(path, writer)
            elif kind == "har":
                import_har(path, writer, red)
            else:
                _copy_records(path, writer)
        writer.add_note(f"imported from {', '.join(p.name for p in sources)}")
        writer.finalize()
    except BaseException:
        writer.writer.close()
        shutil.rmtree(writer.path, ignore_errors=True)
        raise
    return Snapshot.open(writer.path)


def _copy_records(path: Path, writer: SnapshotWriter) -> int:
    count = 0
    try:
        with open(path, "rb") as fh:
            for unit in iter_units(fh, path):
                if not unit.data.strip():
                    continue
                record = parse_record(unit, path)
                if _restore_manifest(record, writer):
                    continue
                data = unit.data[: record.warc_head_length + len(record.block)] + b"\r\n\r\n"
                writer.writer.write_raw(
                    data,
                    record_type=record.rec_type,
                    record_id=record.record_id or "",
                    url=record.url or "",
                    payload_digest=record.payload_digest,
                )
                count += 1
    except Truncated as t:
        raise ArchiveError(f"{path}: archive truncated at byte {t.offset} after {count} whole records; "
                           "nothing was imported") from None
    except OSError as e:
        raise ArchiveError(f"{path}: cannot read ({e.strerror})") from None
    return count


def _restore_manifest(record: ArchiveRecord, writer: SnapshotWriter) -> bool:
    """Take start URL and pages from the manifest record of our own export (not copied as a record)."""
    if record.rec_type != "metadata" or not (record.url or "").startswith(MANIFEST_RECORD_URI):
        return False
    try:
        manifest = SnapshotManifest.model_validate_json(record.block)
    except ValueError:
        return False
    writer.start_url = manifest.start_url
    writer.pages = list(manifest.pages)
    writer.add_note(f"exported snapshot {manifest.task_id}/{manifest.snapshot_id}")
    return True


def _copy_member(zf: zipfile.ZipFile, name: str, dst: BinaryIO, path: Path, limit: int | None) -> int:
    """Inflate one zip member into ``dst`` in steps, within ``limit`` bytes and the inflation ratio."""
    info = zf.getinfo(name)
    where = f"{path}: the WACZ member {name}"
    total = 0
    try:
        with zf.open(info) as src:
            while chunk := src.read(1 << 20):
                total += len(chunk)
                if limit is not None and total > limit:
                    raise InputLimitError(f"{where} is over the limit of {human(limit)} (EGO2WEB_MAX_JSON_BYTES)")
                if total > RATIO_FLOOR and total > max_inflation() * max(info.compress_size, 1):
                    raise InputLimitError(f"{where} inflates past the ratio limit of {max_inflation()}:1 "
                                          "(EGO2WEB_MAX_INFLATION); the WACZ may be a decompression bomb")
                dst.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise ArchiveError(f"{where} is corrupt ({e})") from None
    return total


def _read_member(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    buf = io.BytesIO()
    _copy_member(zf, name, buf, path, limit=max_json_bytes())
    return buf.getvalue()


@contextmanager
def _open_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    try:
        with zipfile.ZipFile(path) as zf:
            yield zf
    except zipfile.BadZipFile:
        raise ArchiveError(f"{path}: not a valid WACZ (zip) file") from None


def _import_wacz(path: Path, writer: SnapshotWriter) -> None:
    with _open_zip(path) as zf, tempfile.TemporaryDirectory(prefix="wacz-") as tmp:
        names = sorted(n for n in zf.namelist() if n.startswith("archive/") and n.lower().endswith(_WARC_SUFFIXES))
        if not names:
            raise ArchiveError(f"{path}: the WACZ has no archive/*.warc* files")
        for name in names:
            target = Path(tmp) / PurePosixPath(name).name
            with open(target, "wb") as dst:
                _copy_member(zf, name, dst, path, limit=None)
            _copy_records(target, writer)
        if any(n.startswith("exported snapshot") for n in writer.notes):  # our export: start URL, pages known
            return
        if "datapackage.json" in zf.namelist() and writer.start_url is None:
            try:
                package = loads(_read_member(zf, "datapackage.json", path), f"{path}: datapackage.json", ValueError)
                writer.start_url = package.get("mainPageURL") or None
            except (ValueError, AttributeError):
                pass
        for name in sorted(n for n in zf.namelist() if n.startswith("pages/") and n.endswith(".jsonl")):
            for n, line in enumerate(_read_member(zf, name, path).decode("utf-8", "replace").splitlines(), 1):
                try:
                    page = loads(line, f"{path}: {name} line {n}", ValueError)
                except ValueError:
                    continue
                if isinstance(page, dict) and isinstance(page.get("url"), str):
                    writer.add_page(page["url"])
