"""Importing WARCs written by other tools (pywb, warcprox, wget, browsertrix ...) as a snapshot.

Accepts ``.warc``, ``.warc.gz``, ``.warc.zst`` and ``.wacz`` files, several at
once (so a URL-agnostic revisit and its original from another file end up in
one snapshot). Records are copied byte for byte (headers, ids and digests
unchanged), each recompressed into its own unit; revisits are kept and
resolved through the index.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from ..errors import ArchiveError, SnapshotError
from ..models import SnapshotManifest
from .export import MANIFEST_RECORD_URI
from .framing import Truncated, iter_units
from .reader import ArchiveRecord, parse_record
from .snapshot import Snapshot, SnapshotWriter
from .warc import Compression

__all__ = ["import_warc"]

_WARC_SUFFIXES = (".warc", ".warc.gz", ".warc.zst", ".arc.gz")


def import_warc(
    src: Path | Sequence[Path],
    task_id: str,
    root: Path,
    *,
    snapshot_id: str | None = None,
    compression: Compression = "zst",
) -> Snapshot:
    """Create a snapshot (``source="import"``) from one or more WARC/WACZ files."""
    sources = [Path(src)] if isinstance(src, (str, Path)) else [Path(s) for s in src]
    if not sources:
        raise SnapshotError("nothing to import: give at least one WARC or WACZ file")
    for path in sources:
        if not path.is_file():
            raise ArchiveError(f"{path}: file not found")
    writer = SnapshotWriter(
        Path(root), task_id, compression=compression, source="import", snapshot_id=snapshot_id,
        settings={"imported_from": [p.name for p in sources]},
    )
    try:
        for path in sources:
            if path.suffix.lower() == ".wacz" or zipfile.is_zipfile(path):
                _import_wacz(path, writer)
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
            with zf.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            _copy_records(target, writer)
        if any(n.startswith("exported snapshot") for n in writer.notes):  # our export: start URL, pages known
            return
        if "datapackage.json" in zf.namelist() and writer.start_url is None:
            try:
                writer.start_url = json.loads(zf.read("datapackage.json")).get("mainPageURL") or None
            except (json.JSONDecodeError, AttributeError):
                pass
        for name in sorted(n for n in zf.namelist() if n.startswith("pages/") and n.endswith(".jsonl")):
            for line in zf.read(name).decode("utf-8", "replace").splitlines():
                try:
                    page = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(page, dict) and isinstance(page.get("url"), str):
                    writer.add_page(page["url"])
