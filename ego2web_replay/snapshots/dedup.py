"""Suite-level deduplication: each repeated payload stored once per suite, captures as revisit records.

:func:`dedup_snapshots` writes a deduplicated copy of some snapshots under a
new root. Every response whose payload (the stored bytes after the HTTP head)
occurs more than once in the suite, and is at least ``min_size`` bytes long,
is copied once into a shared store, ``<root>/.shared/<store-id>/``
(``archive.warc.zst``, ``index.cdxj``, ``store.json``), and each capture of it
becomes a WARC/1.1 ``revisit`` record with the identical-payload-digest
profile: its own WARC head (record id, date, target URI, IP, links to its
request), its own HTTP head, ``WARC-Refers-To`` / ``-Target-URI`` / ``-Date``
naming the store's copy, and no payload. Each snapshot's manifest lists the
stores its revisits refer to (``shared``, paths relative to the folder), so
:meth:`Snapshot.resolve`, replay, verify and export find the payloads.

All archives are written with one zstd frame per record, optionally with a
dictionary trained on the suite (:mod:`.dictionary`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import zstandard
from warcio.recordbuilder import RecordBuilder

from ..errors import ArchiveError, SnapshotError
from ..models import save_model
from .cdxj import IndexEntry, build_index, read_index, surt_key, write_index
from .dictionary import RecordFrameWriter, train_dictionary
from .digests import sha1_digest
from .export import materialize_revisit, serialize_record
from .framing import Unit, iter_units
from .index_cache import warm_cache
from .reader import ArchiveRecord, parse_record, read_record
from .snapshot import INDEX, MANIFEST, Snapshot, file_digest
from .storage import walk

__all__ = ["DedupResult", "SharedStore", "dedup_snapshots", "external_original", "open_store", "verify_store",
           "SHARED_DIR", "STORE_MANIFEST"]

SHARED_DIR = ".shared"
STORE_MANIFEST = "store.json"
STORE_ARCHIVE = "archive.warc.zst"
_REVISIT_DROP = {"warc-type", "warc-block-digest", "content-length", "content-type", "warc-truncated",
                 "warc-refers-to", "warc-refers-to-target-uri", "warc-refers-to-date", "warc-profile"}


class SharedStore:
    """An opened shared payload store: its index by payload digest and its records."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.archive_path = self.path / STORE_ARCHIVE
        self.index_path = self.path / INDEX
        if not self.archive_path.is_file() or not self.index_path.is_file():
            raise SnapshotError(f"{self.path}: shared payload store missing or incomplete "
                                f"({STORE_ARCHIVE} and {INDEX} expected); unpack the suite's pack again")
        self._by_digest: dict[str, list[IndexEntry]] = {}
        for entry in read_index(self.index_path):
            self._by_digest.setdefault(entry.digest, []).append(entry)

    def find(self, entry: IndexEntry) -> IndexEntry | None:
        """The store's capture with the revisit's payload digest (same target URI preferred)."""
        candidates = self._by_digest.get(entry.digest, [])
        if entry.refers_to_uri:
            key = surt_key(entry.refers_to_uri)
            same = [e for e in candidates if e.surt == key or e.url == entry.refers_to_uri]
            if same:
                return same[0]
        return candidates[0] if candidates else None

    def record(self, entry: IndexEntry) -> ArchiveRecord:
        return read_record(self.archive_path, entry.offset, entry.length)


_OPEN: dict[tuple[str, int, int], SharedStore] = {}


def open_store(path: Path) -> SharedStore:
    """Open a store once per process (many snapshots of a suite share it)."""
    path = Path(path).resolve()
    try:
        st = (path / INDEX).stat()
    except OSError:
        return SharedStore(path)  # raises the clear error
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _OPEN:
        _OPEN[key] = SharedStore(path)
    return _OPEN[key]


@dataclass
class DedupResult:
    """What :func:`dedup_snapshots` wrote."""

    root: Path
    snapshots: list[Path]
    store: Path
    captures: int = 0
    revisits: int = 0
    stored_payloads: int = 0
    dictionary_bytes: int = 0
    bytes_out: int = 0
    notes: list[str] = field(default_factory=list)


def _payload_key(record: ArchiveRecord, min_size: int) -> str | None:
    if record.rec_type != "response" or record.http_headers is None or record.http_status is None:
        return None
    stored = record.stored_payload
    if len(stored) < max(1, min_size):
        return None
    return hashlib.sha256(stored).hexdigest()


def _records(snap: Snapshot) -> Iterator[tuple[Unit, ArchiveRecord]]:
    """A snapshot's records as whole units; revisits of payloads outside it are made whole first."""
    by_offset = {e.offset: e for e in snap.entries()}
    with snap.storage.open(snap.manifest.archive) as fh:
        for unit in iter_units(fh, snap.archive_path):
            if not unit.data.strip():
                continue
            record = parse_record(unit, snap.archive_path)
            entry = by_offset.get(unit.offset)
            if record.rec_type == "revisit" and entry is not None and snap.find_original(entry) is None:
                data = materialize_revisit(record, snap.resolve(entry))
                unit = Unit(unit.offset, unit.length, data)
                record = parse_record(unit, snap.archive_path)
            else:
                data = unit.data[: record.warc_head_length + len(record.block)] + b"\r\n\r\n"
                unit = Unit(unit.offset, unit.length, data)
            yield unit, record


def _version(unit: Unit) -> str:
    line = unit.data.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("ascii", "replace").strip()
    return line if line.startswith("WARC/") else "WARC/1.1"


def _store_copy(unit: Unit, record: ArchiveRecord, key: str) -> tuple[bytes, str]:
    """The store's copy of a capture: same record but a new id and no links to its request."""
    new_id = f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'ego2web-replay-store:' + key)}>"
    headers = [("WARC-Record-ID", new_id) if k.lower() == "warc-record-id" else (k, v)
               for k, v in record.headers.items() if k.lower() != "warc-concurrent-to"]
    return serialize_record(headers, record.block, _version(unit)), new_id


def _revisit(record: ArchiveRecord, original: tuple[str, str, str]) -> bytes:
    """A revisit record for a capture whose payload is in the store (``original``: id, URL, date)."""
    head = record.block[: record.http_head_length]
    headers = [("WARC-Type", "revisit")]
    headers += [(k, v) for k, v in record.headers.items() if k.lower() not in _REVISIT_DROP]
    if not record.payload_digest:
        headers.append(("WARC-Payload-Digest", sha1_digest(record.stored_payload)))
    headers += [
        ("WARC-Profile", RecordBuilder.REVISIT_PROFILE_1_1),
        ("WARC-Refers-To", original[0]),
        ("WARC-Refers-To-Target-URI", original[1]),
        ("WARC-Refers-To-Date", original[2]),
        ("Content-Type", "application/http; msgtype=response"),
        ("WARC-Block-Digest", sha1_digest(head)),
        ("Content-Length", str(len(head))),
    ]
    return serialize_record(headers, head)


def _safe_store_id(value: str) -> str:
    if not value or not all(c.isalnum() or c in "._-" for c in value) or value[0] in ".-":
        raise SnapshotError(f"invalid store id {value!r}: use letters, digits, '.', '_' and '-' only")
    return value


def dedup_snapshots(
    sources: Sequence[Path],
    out_root: Path,
    *,
    store_id: str | None = None,
    min_size: int = 256,
    dictionary: bool = False,
    level: int = 3,
    map_indexes: bool = True,
) -> DedupResult:
    """Write deduplicated copies of ``sources`` under ``out_root`` (``<task>/<snapshot>/``) with one store.

    ``dictionary=True`` trains a zstd dictionary on the suite's records and
    writes every archive (store included) with it, in the IIPC layout.
    ``map_indexes``: build the mapped index of each large copy for replay (off when
    the copies are staged to be packed and moved).
    """
    snaps = [Snapshot.open(Path(p)) for p in sources]
    if not snaps:
        raise SnapshotError("nothing to deduplicate: no snapshots given")
    seen_ids = Counter((s.manifest.task_id, s.manifest.snapshot_id) for s in snaps)
    twice = [f"{t}/{i}" for (t, i), n in seen_ids.items() if n > 1]
    if twice:
        raise SnapshotError(f"snapshot given twice: {', '.join(twice)}")
    counts: Counter[str] = Counter()
    samples: list[bytes] = []
    for snap in snaps:
        for unit, record in _records(snap):
            key = _payload_key(record, min_size)
            if key:
                counts[key] += 1
            if dictionary and len(samples) < 4000 and record.rec_type in ("request", "response", "warcinfo"):
                samples.append(unit.data if key is None else unit.data[: record.warc_head_length
                                                                       + record.http_head_length])
    shared = {k for k, n in counts.items() if n > 1}
    digest = hashlib.sha256("|".join(sorted(shared) + [f"{s.manifest.task_id}/{s.manifest.snapshot_id}"
                                                        for s in snaps]).encode()).hexdigest()
    store_id = _safe_store_id(store_id or f"suite-{digest[:12]}")
    out_root = Path(out_root)
    store_dir = out_root / SHARED_DIR / store_id
    result = DedupResult(out_root, [], store_dir)
    zdict: zstandard.ZstdCompressionDict | None = train_dictionary(samples) if dictionary else None
    if dictionary and zdict is None:
        result.notes.append("too few records to train a zstd dictionary; written without one")
    result.dictionary_bytes = len(zdict.as_bytes()) if zdict is not None else 0
    targets = [out_root / s.manifest.task_id / s.manifest.snapshot_id for s in snaps]
    for target in targets:
        if target.exists():
            raise SnapshotError(f"{target}: already exists; deduplicate into an empty folder")
    stored: dict[str, tuple[str, str, str]] = {}
    try:
        store_dir.mkdir(parents=True)
    except FileExistsError:
        raise SnapshotError(f"{store_dir}: a store with this id already exists") from None
    try:
        with RecordFrameWriter(store_dir / STORE_ARCHIVE, dictionary=zdict, level=level) as store:
            for snap in snaps:
                result.snapshots.append(_write_snapshot(snap, out_root, store, stored, shared, min_size, zdict,
                                                        level, result))
        _finish_store(store_dir, store_id, len(stored), zdict)
        if map_indexes:
            for target in targets:
                warm_cache(target / INDEX)
    except BaseException:  # leave nothing half written behind
        for path in [*targets, store_dir]:
            shutil.rmtree(path, ignore_errors=True)
        raise
    result.stored_payloads = len(stored)
    result.bytes_out = sum(p.stat().st_size for p in out_root.rglob("*") if p.is_file())
    return result


def _write_snapshot(snap: Snapshot, out_root: Path, store: RecordFrameWriter,
                    stored: dict[str, tuple[str, str, str]], shared: set[str], min_size: int,
                    zdict: zstandard.ZstdCompressionDict | None, level: int, result: DedupResult) -> Path:
    m = snap.manifest
    folder = out_root / m.task_id / m.snapshot_id
    folder.mkdir(parents=True)
    archive = folder / STORE_ARCHIVE
    records: Counter[str] = Counter()
    with RecordFrameWriter(archive, dictionary=zdict, level=level) as out:
        for unit, record in _records(snap):
            key = _payload_key(record, min_size)
            data, kind = unit.data, record.rec_type
            if key in shared:
                assert key is not None
                if key not in stored:
                    copy, new_id = _store_copy(unit, record, key)
                    store.write(copy)
                    stored[key] = (new_id, record.url or "", record.date or "")
                data, kind = _revisit(record, stored[key]), "revisit"
                result.revisits += 1
            if record.rec_type in ("response", "revisit"):
                result.captures += 1
            records[kind] += 1
            out.write(data)
    write_index(build_index(archive), folder / INDEX)
    (folder / "screenshots").mkdir()
    for name in walk(snap.storage, "screenshots/"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(snap.storage.read(name))
    files = [file_digest(archive, folder), file_digest(folder / INDEX, folder)]
    files += [file_digest(p, folder) for p in sorted((folder / "screenshots").rglob("*")) if p.is_file()]
    rel = Path("..") / ".." / SHARED_DIR / store.path.parent.name
    manifest = m.model_copy(update={
        "archive": STORE_ARCHIVE, "records": dict(sorted(records.items())), "archive_bytes": archive.stat().st_size,
        "files": files, "shared": [rel.as_posix()],
        "settings": {**m.settings, "compression": "zst", "dedup": {"store": store.path.parent.name,
                                                                   "dictionary": zdict is not None}},
        "notes": [*m.notes, f"deduplicated against the suite store {store.path.parent.name}"],
    })
    save_model(folder / MANIFEST, manifest)
    return folder


def _finish_store(store_dir: Path, store_id: str, payloads: int,
                  zdict: zstandard.ZstdCompressionDict | None) -> None:
    write_index(build_index(store_dir / STORE_ARCHIVE), store_dir / INDEX)
    info = {
        "format": "ego2web-replay-shared-store", "version": 1, "store_id": store_id,
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "payloads": payloads,
        "dictionary_id": zdict.dict_id() if zdict is not None else None,
        "files": [file_digest(store_dir / n, store_dir).model_dump() for n in (STORE_ARCHIVE, INDEX)],
    }
    try:
        (store_dir / STORE_MANIFEST).write_text(json.dumps(info, indent=2) + "\n", "utf-8")
    except OSError as e:
        raise ArchiveError(f"{store_dir}: cannot write {STORE_MANIFEST} ({e.strerror})") from None


def external_original(snap: Snapshot, entry: IndexEntry) -> tuple[SharedStore, IndexEntry] | None:
    """Where a revisit's payload lies among the snapshot's shared stores, if anywhere."""
    for rel in snap.manifest.shared:
        store = open_store(snap.path / rel)
        found = store.find(entry)
        if found is not None:
            return store, found
    return None


def verify_store(path: Path) -> list[str]:
    """Problems with a shared store: missing files, or files that differ from ``store.json``."""
    path = Path(path)
    where = f"shared store {path.name}"
    try:
        info = json.loads((path / STORE_MANIFEST).read_text("utf-8"))
        files = [(str(f["path"]), str(f["sha256"]), int(f["size"])) for f in info["files"]]
    except FileNotFoundError:
        return [f"{where} ({path}) is missing; the snapshot's revisits cannot be replayed"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{where}: {STORE_MANIFEST} is unreadable ({e})"]
    problems = []
    for rel, sha256, size in files:
        target = path / rel
        if not target.is_file():
            problems.append(f"{where}: {rel} is missing")
            continue
        actual = file_digest(target, path)
        if (actual.sha256, actual.size) != (sha256, size):
            problems.append(f"{where}: {rel}: sha256 differs from {STORE_MANIFEST} (file changed)")
    return problems
