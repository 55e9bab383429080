"""Checking and repairing a snapshot folder: ``verify_snapshot`` and ``reindex_snapshot``.

Verification recomputes every record's block and payload digests, checks
that each index entry points at a whole record with the same URL and digest,
that every capture is indexed, and that the files match the manifest's
sha256s; a websocket handshake without its conversation is a warning. An archive cut short by a killed recorder is reported as
"archive truncated at byte N after K whole records"; a missing manifest as an
unfinished recording.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ArchiveError, SnapshotError
from ..models import SnapshotManifest, save_model
from .cdxj import IndexEntry, build_index, read_index, write_index
from .dedup import external_original, verify_store
from .reader import normalize_digest, scan_archive
from .snapshot import INDEX, MANIFEST, Snapshot, file_digest, find_archive, load_manifest
from .storage import LocalStorage
from .volatility import learn_from_index, read_reloads, write_volatile
from .wsrecords import conversation_of

__all__ = ["VerifyReport", "verify_snapshot", "reindex_snapshot", "integrity_problems"]


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_snapshot`; ``ok`` is true when there are no problems."""

    path: Path
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    records: int = 0
    entries: int = 0
    truncated_at: int | None = None
    manifest: SnapshotManifest | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_snapshot(path: Path) -> VerifyReport:
    """Check a snapshot folder thoroughly; a missing folder raises :class:`SnapshotError`."""
    folder = Path(path)
    if not folder.is_dir():
        raise SnapshotError(f"{folder}: no such snapshot folder")
    report = VerifyReport(folder)
    try:
        report.manifest = load_manifest(folder)
    except SnapshotError as e:
        if (folder / MANIFEST).exists():
            report.problems.append(str(e))
        else:
            report.problems.append(f"{MANIFEST} is missing: the recording did not finish (or was killed)")
    manifest = report.manifest
    archive = folder / manifest.archive if manifest else find_archive(folder)
    if archive is None or not archive.is_file():
        report.problems.append(f"archive {archive.name if archive else 'archive.warc.*'} is missing")
        return report

    scan = scan_archive(archive, check_digests=True)
    report.records = scan.whole_records
    report.truncated_at = scan.truncated_at
    report.problems.extend(scan.digest_problems)
    if scan.truncated_at is not None:
        report.problems.append(
            f"archive truncated at byte {scan.truncated_at} after {scan.whole_records} whole records"
        )
    if scan.error:
        report.problems.append(scan.error)

    index = folder / (manifest.index if manifest else INDEX)
    entries: list[IndexEntry] = []
    index_ok = False
    if not index.is_file():
        report.problems.append(f"{index.name} is missing; rebuild it with `ego2web-replay snapshot index`")
    else:
        try:
            entries = read_index(index)
            index_ok = True
        except ArchiveError as e:
            report.problems.append(str(e))
    report.entries = len(entries)
    by_offset = {info.offset: info for info in scan.records}
    for entry in entries:
        info = by_offset.get(entry.offset)
        where = f"index entry {entry.url} at byte {entry.offset}"
        if info is None:
            report.problems.append(f"{where}: no whole record starts there")
        elif info.length != entry.length or info.url != entry.url:
            report.problems.append(f"{where}: the record there is {info.rec_type} {info.url} ({info.length} bytes)")
        elif info.payload_digest and normalize_digest(info.payload_digest) != entry.digest:
            report.problems.append(f"{where}: digest differs from the record's")
    indexed = {e.offset for e in entries}
    unindexed = [i for i in scan.records if i.rec_type in ("response", "revisit", "resource") and i.url
                 and i.offset not in indexed]
    if index_ok and unindexed:
        report.problems.append(f"{len(unindexed)} records are not in the index (first at byte {unindexed[0].offset})")

    if manifest:
        for digest in manifest.files:
            target = folder / digest.path
            if not target.is_file():
                report.problems.append(f"{digest.path} is listed in the manifest but missing")
                continue
            actual = file_digest(target, folder)
            if (actual.sha256, actual.size) != (digest.sha256, digest.size):
                report.problems.append(f"{digest.path}: sha256 differs from the manifest (file changed)")
        for rel in manifest.shared:
            report.problems.extend(verify_store(folder / rel))
        if entries and not report.problems:
            _check_revisits(Snapshot(folder, manifest), entries, report)
            _check_websockets(Snapshot(folder, manifest), entries, report)
    return report


def _check_websockets(snap: Snapshot, entries: list[IndexEntry], report: VerifyReport) -> None:
    for entry in entries:
        if entry.status == 101 and conversation_of(snap, entry) is None:
            report.warnings.append(f"websocket {entry.url} at {entry.timestamp}: no readable conversation follows "
                                   "its handshake (docs/matching.md#websockets); replay refuses it")


def _check_revisits(snap: Snapshot, entries: list[IndexEntry], report: VerifyReport) -> None:
    snap._entries = entries
    for entry in entries:
        if entry.record_type == "revisit" and snap.find_original(entry) is None \
                and not (snap.manifest.shared and external_original(snap, entry)):
            report.warnings.append(
                f"revisit of {entry.url} at {entry.timestamp}: its original (digest {entry.digest}) "
                "is not in this snapshot; it cannot be replayed"
            )


def reindex_snapshot(path: Path) -> int:
    """Rebuild ``index.cdxj`` from the archive (whole records only); return the entry count.

    If the folder has a manifest, its index digest is updated too.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise SnapshotError(f"{folder}: no such snapshot folder")
    manifest: SnapshotManifest | None = None
    if (folder / MANIFEST).exists():
        manifest = load_manifest(folder)
    archive = folder / manifest.archive if manifest else find_archive(folder)
    if archive is None or not archive.is_file():
        raise SnapshotError(f"{folder}: no archive to index (archive.warc.zst / .warc.gz / .warc)")
    index = folder / (manifest.index if manifest else INDEX)
    entries = build_index(archive)
    write_index(entries, index)
    if len(entries) >= 2000:
        from .index_cache import warm_cache

        warm_cache(index)
    reloads = read_reloads(folder)
    volatile = write_volatile(folder, learn_from_index(entries, reloads), reloads)
    if manifest:
        files = list(manifest.files)
        for fresh in (file_digest(index, folder), file_digest(volatile, folder)):
            files = [fresh if d.path == fresh.path else d for d in files]
            if fresh.path not in {d.path for d in files}:
                files.append(fresh)
        try:
            save_model(folder / MANIFEST, manifest.model_copy(update={"files": files}))
        except OSError as e:
            raise SnapshotError(f"{folder}: cannot update the manifest ({e.strerror})") from None
    return len(entries)


def integrity_problems(snap: Snapshot, *, archive: bool = True, index: bool = True) -> list[str]:
    """What differs between a snapshot's archive and index files and its manifest (size, then sha256);
    ``archive`` or ``index`` false leaves that file out.

    The quick check made before a snapshot is replayed; :func:`verify_snapshot` checks much more.
    Files read through a storage other than the local folder are not checked here. A file unchanged
    since it was last hashed here is not read again (:func:`~.hashmemo.remembered_sha256`).
    """
    from .hashmemo import remembered_sha256

    if not isinstance(snap.storage, LocalStorage):
        return []
    wanted = {name for name, on in ((snap.manifest.archive, archive), (snap.manifest.index, index)) if on}
    problems = []
    for digest in snap.manifest.files:
        if digest.path not in wanted:
            continue
        p = snap.path / digest.path
        if not p.is_file():
            problems.append(f"{digest.path} is missing")
        elif p.stat().st_size != digest.size:
            problems.append(f"{digest.path} is {p.stat().st_size} bytes, the manifest says {digest.size}")
        elif remembered_sha256(p) != digest.sha256:
            problems.append(f"{digest.path}: sha256 differs from the manifest (file changed)")
    return problems
