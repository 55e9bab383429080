"""A snapshot folder as a unit: ``snapshots/<task-id>/<snapshot-id>/``.

The folder holds ``archive.warc.zst`` (or ``.warc.gz``), ``index.cdxj``,
``manifest.json`` (written atomically, last) and ``screenshots/``. A folder
without a manifest is a recording that did not finish.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal

from .. import __version__
from ..errors import ArchiveError, SnapshotError
from ..models import FileDigest, SnapshotManifest, UpstreamFailure, check_id, parse_model
from ..redaction import NO_REDACTION, Redactor
from ..versions import tool_versions
from .cdxj import IndexEntry, build_index, index_text, parse_index, surt_key
from .index_map import IndexMap, open_index_map
from .reader import ArchiveRecord, iter_records, open_archive, read_record_at
from .storage import LocalStorage, Storage, SubStorage
from .volatility import VOLATILE_FILE, Reload, learn_from_index, volatile_text
from .warc import ArchiveWriter, Compression, naive_utc

__all__ = [
    "Snapshot",
    "SnapshotWriter",
    "SnapshotInfo",
    "list_snapshots",
    "task_snapshots",
    "latest_snapshot",
    "file_digest",
    "ARCHIVE_NAMES",
    "MANIFEST",
]

MANIFEST = "manifest.json"
INDEX = "index.cdxj"
ARCHIVE_NAMES = {"zst": "archive.warc.zst", "gz": "archive.warc.gz", "none": "archive.warc"}
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def file_digest(path: Path, root: Path) -> FileDigest:
    """sha256 and size of a file, with its path relative to ``root``."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return FileDigest(path=path.relative_to(root).as_posix(), sha256=h.hexdigest(), size=path.stat().st_size)


def find_archive(folder: Path) -> Path | None:
    """The archive file of a snapshot folder, whatever its compression."""
    for name in ARCHIVE_NAMES.values():
        if (folder / name).is_file():
            return folder / name
    return None


def load_manifest(folder: Path, storage: Storage | None = None) -> SnapshotManifest:
    """Read ``manifest.json`` (through ``storage``, default the folder on disk); :class:`SnapshotError`
    if missing or invalid."""
    path = folder / MANIFEST
    store = storage or LocalStorage(folder)
    try:
        data = store.read(MANIFEST)
    except FileNotFoundError:
        if storage is None and not folder.exists():
            raise SnapshotError(f"{folder}: no such snapshot folder") from None
        unfinished = any(store.exists(name) for name in ARCHIVE_NAMES.values())
        hint = " (the recording did not finish?)" if unfinished else ""
        raise SnapshotError(
            f"{folder}: not a snapshot, {MANIFEST} is missing{hint}; "
            "`ego2web-replay snapshot verify` tells what is there"
        ) from None
    except OSError as e:
        raise SnapshotError(f"{path}: cannot read the snapshot manifest ({e.strerror or e})") from None
    return parse_model(data, path, SnapshotManifest, "snapshot manifest", SnapshotError)


class Snapshot:
    """An opened snapshot folder: manifest, index entries and records."""

    def __init__(self, path: Path, manifest: SnapshotManifest, storage: Storage | None = None) -> None:
        self.path = Path(path)
        self.storage: Storage = storage or LocalStorage(self.path)
        self.manifest = manifest
        self.archive_path = self.path / manifest.archive
        self.index_path = self.path / manifest.index
        self._entries: list[IndexEntry] | None = None
        self._imap: IndexMap | Literal[False] | None = None  # None: not looked for; False: there is none

    @classmethod
    def open(cls, path: Path, storage: Storage | None = None) -> Snapshot:
        """Open a snapshot folder (its files read through ``storage``, default the folder on disk;
        ``path`` then names it in messages); :class:`SnapshotError` if it is not one."""
        path = Path(path)
        if storage is None and path.is_file() and path.name == MANIFEST:
            path = path.parent
        manifest = load_manifest(path, storage)
        snap = cls(path, manifest, storage)
        if not snap.storage.exists(manifest.archive):
            raise SnapshotError(f"{path}: the archive {manifest.archive} is missing")
        return snap

    def entries(self) -> list[IndexEntry]:
        """The index entries (read once, sorted)."""
        if self._entries is None:
            try:
                text = self.storage.read(self.manifest.index).decode("utf-8")
            except FileNotFoundError:
                raise ArchiveError(f"{self.index_path}: index not found; build it with "
                                   "`ego2web-replay snapshot index`") from None
            except (OSError, UnicodeDecodeError) as e:
                raise ArchiveError(f"{self.index_path}: cannot read the index ({e})") from None
            self._entries = parse_index(text, self.index_path)
        return self._entries

    def _open_archive(self) -> BinaryIO:
        return open_archive(lambda: self.storage.open(self.manifest.archive), self.archive_path)

    def record(self, entry: IndexEntry) -> ArchiveRecord:
        """The record an index entry points at (read by its byte range)."""
        with self._open_archive() as fh:
            return read_record_at(fh, self.archive_path, entry.offset, entry.length)

    def record_at(self, offset: int) -> ArchiveRecord:
        """The record that starts at byte ``offset`` of the archive."""
        with self._open_archive() as fh:
            return read_record_at(fh, self.archive_path, offset)

    def records(self) -> list[ArchiveRecord]:
        """Every record of the archive, in file order (small snapshots, tests)."""
        return list(iter_records(self.archive_path, fh=self._open_archive()))

    def find_original(self, entry: IndexEntry) -> IndexEntry | None:
        """The capture a revisit entry refers to, or ``None`` if it is not in this snapshot.

        Looks first at ``WARC-Refers-To-Target-URI`` / ``-Date`` (URL-agnostic
        revisits), then at earlier captures of the same URL with the same
        payload digest, then at any capture with that digest; among equals, a
        capture made with the revisit's method and with an HTTP status wins.
        The captures with that digest come from the mapped index's digest table
        when the snapshot has one and its index is not parsed yet (a large
        snapshot under replay), else from :meth:`entries`; both give them in
        index order, so the choice is the same.
        """
        candidates = self._same_payload(entry.digest)
        # prefer captures made with the revisit's own method and with an HTTP status
        candidates.sort(key=lambda e: (e.method != entry.method, e.status is None))
        if entry.refers_to_uri:
            key = surt_key(entry.refers_to_uri)
            same = [e for e in candidates if e.surt == key or e.url == entry.refers_to_uri]
            exact = [e for e in same if e.timestamp == entry.refers_to_date]
            if exact or same:
                return (exact or same)[0]
        same_url = [e for e in candidates if e.surt == entry.surt]
        if same_url:
            earlier = [e for e in same_url if e.timestamp <= entry.timestamp]
            return earlier[-1] if earlier else same_url[0]
        return candidates[0] if candidates else None

    def _same_payload(self, digest: str) -> list[IndexEntry]:
        """The captures (not revisits) whose payload has ``digest``, in index order."""
        imap = self._index_map() if self._entries is None else None
        if imap is None:
            return [e for e in self.entries() if e.record_type != "revisit" and e.digest == digest]
        lines = sorted(imap.line(i) for i in imap.originals(digest))  # the index file's (sorted) order
        return [e for e in map(IndexEntry.from_line, lines) if e.record_type != "revisit"]

    def _index_map(self) -> IndexMap | None:
        """The mapped form of the snapshot's index file on this machine (a local snapshot's, or the
        local view's copy of a remote one), when one was built (never built here)."""
        if self._imap is None:
            self._imap = False
            if self.index_path.is_file():
                try:
                    self._imap = open_index_map(self.index_path, build=False)
                except (ArchiveError, OSError, KeyError, TypeError, ValueError):
                    pass
        return self._imap or None

    def resolve(self, entry: IndexEntry) -> ArchiveRecord:
        """The record to serve for an entry; a revisit is resolved to its original.

        For a revisit, the result carries the original's payload, and the
        revisit's own HTTP status and headers when it has them (else the
        original's); its ``url`` and ``date`` stay the revisit's.
        """
        record = self.record(entry)
        if record.rec_type != "revisit":
            return record
        original_entry = self.find_original(entry)
        if original_entry is not None:
            original = self.record(original_entry)
        else:
            original = self._shared_original(entry)
        body: dict[str, Any] = {"payload": original.payload, "block": original.block, "chunked": original.chunked,
                "http_head_length": original.http_head_length}
        if record.http_headers is not None:  # the revisit's own HTTP head is served
            return replace(record, **body)
        return replace(record, **body, http_protocol=original.http_protocol, http_status=original.http_status,
                       http_reason=original.http_reason, http_headers=original.http_headers)


    def _shared_original(self, entry: IndexEntry) -> ArchiveRecord:
        """A revisit's original from the suite's shared stores (suite-level deduplication)."""
        if self.manifest.shared:
            from .dedup import external_original

            found = external_original(self, entry)
            if found is not None:
                return found[0].record(found[1])
        raise ArchiveError(
            f"{self.path}: the revisit of {entry.url} at {entry.timestamp} refers to a capture "
            f"(digest {entry.digest}) that is not in this snapshot"
            + (" nor in its shared stores" if self.manifest.shared else "")
        )


def _snapshot_id(now: datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%SZ")


def _check_id(kind: str, value: str) -> str:
    if not _SAFE_ID.match(value):
        raise SnapshotError(f"invalid {kind} {value!r}: use letters, digits, '.', '_' and '-' only")
    try:
        return check_id(kind, value)
    except ValueError as e:
        raise SnapshotError(str(e)) from None


_SOURCES = ("record", "live-run", "probe", "import", "extend")


class SnapshotWriter:
    """Create a snapshot folder and write its archive; :meth:`finalize` writes index and manifest."""

    def __init__(
        self,
        root: Path,
        task_id: str,
        *,
        compression: Compression = "zst",
        source: str = "record",
        start_url: str | None = None,
        snapshot_id: str | None = None,
        settings: dict[str, Any] | None = None,
        tools: dict[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        id_factory: Callable[[], str] | None = None,
        dedup_min_size: int | None = None,
    ) -> None:
        """``dedup_min_size``: store identical payloads of at least that many bytes once, later captures
        of them as revisit records (:class:`~.warc.ArchiveWriter`); None stores every payload."""
        self._clock = clock or (lambda: datetime.now(UTC).replace(tzinfo=None))
        self.created_at = naive_utc(self._clock())
        if source not in _SOURCES:
            raise SnapshotError(f"unknown snapshot source {source!r}; use one of {', '.join(_SOURCES)}")
        task_dir = Path(root) / _check_id("task id", task_id)
        base = _check_id("snapshot id", snapshot_id) if snapshot_id else _snapshot_id(self.created_at)
        try:
            task_dir.mkdir(parents=True, exist_ok=True)
            self.path, self.snapshot_id = self._claim(task_dir, base, exact=snapshot_id is not None)
            (self.path / "screenshots").mkdir()
            self.storage = LocalStorage(self.path)  # the archive is appended here; index and manifest go through it
        except OSError as e:
            raise SnapshotError(f"cannot create a snapshot folder under {task_dir} ({e.strerror}); "
                                "check that the snapshots folder is writable") from None
        self.task_id = task_id
        self.source = source
        self.start_url = start_url
        self.settings = {"compression": compression, **(settings or {})}
        self.tools = tool_versions(tools)
        self.pages: list[str] = []
        self.screenshots: list[str] = []
        self.notes: list[str] = []
        self.upstream_failures: list[UpstreamFailure] = []  # origins that could not be reached (the recorder's)
        self.extra_files: list[str] = []  # more files of the folder the manifest lists with their digests
        self.shared: list[str] = []  # shared payload stores its revisits refer to (relative to the folder)
        self.reloads: list[Reload] = []  # requests of the record-time second load (learning only; volatility.py)
        self.writer = ArchiveWriter(
            self.path / ARCHIVE_NAMES[compression],
            compression=compression,
            warcinfo={
                "software": f"ego2web-replay/{__version__}",
                "format": "WARC File Format 1.1",
                "description": f"task {task_id}, snapshot {self.snapshot_id} ({source})",
            },
            clock=clock,
            id_factory=id_factory,
            dedup_min_size=dedup_min_size,
        )

    @staticmethod
    def _claim(task_dir: Path, base: str, exact: bool) -> tuple[Path, str]:
        for n in range(1, 1000):
            sid = base if n == 1 else f"{base}-{n}"
            try:
                (task_dir / sid).mkdir()
                return task_dir / sid, sid
            except FileExistsError:
                if exact:
                    raise SnapshotError(f"{task_dir / sid}: a snapshot with this id already exists") from None
        raise SnapshotError(f"{task_dir}: too many snapshots with id {base}")

    def add_page(self, url: str) -> None:
        """Note a main-document URL visited (in order)."""
        self.pages.append(url)
        if self.start_url is None:
            self.start_url = url

    def add_screenshot(self, rel_path: str) -> None:
        """Note a screenshot saved under the snapshot folder (path relative to it)."""
        self.screenshots.append(Path(rel_path).as_posix())

    def add_note(self, note: str) -> None:
        self.notes.append(note)

    def finalize(self) -> SnapshotManifest:
        """Close the archive, build the index, hash every file and write the manifest atomically."""
        self.writer.close()
        archive = self.writer.path
        entries = build_index(archive)
        self._write(INDEX, index_text(entries).encode("utf-8"), "the index")
        if len(entries) >= 2000:
            from .index_cache import warm_cache

            warm_cache(self.path / INDEX)
        counts: Counter[str] = Counter()
        payload_bytes = 0
        truncated: list[str] = []
        for record in iter_records(archive):
            counts[record.rec_type] += 1
            if record.rec_type in ("response", "resource"):
                payload_bytes += len(record.payload)
            if record.rec_type in ("response", "resource", "metadata"):  # (metadata: a websocket conversation)
                cut = record.headers.get("WARC-Truncated")
                if cut is not None and len(truncated) < 1000:
                    truncated.append(f"{record.url} ({cut})" if record.rec_type != "metadata"
                                     else f"{record.url} (websocket conversation, {cut})")
        self._write(VOLATILE_FILE, volatile_text(learn_from_index(entries, self.reloads), self.reloads),
                    "the learned volatility")
        files = [file_digest(archive, self.path), file_digest(self.path / INDEX, self.path),
                 file_digest(self.path / VOLATILE_FILE, self.path)]
        files += [file_digest(self.path / name, self.path) for name in self.extra_files]
        for shot in sorted((self.path / "screenshots").rglob("*")):
            if shot.is_file():
                files.append(file_digest(shot, self.path))
        # credentials in page URLs go the way the recorder's redaction sent them (settings["redaction"])
        red = Redactor.from_settings(self.settings) or NO_REDACTION
        manifest = SnapshotManifest(
            task_id=self.task_id,
            snapshot_id=self.snapshot_id,
            created_at=self.created_at.replace(tzinfo=UTC),
            finished_at=naive_utc(self._clock()).replace(tzinfo=UTC),
            source=self.source,  # type: ignore[arg-type]
            start_url=red.url(self.start_url) if self.start_url else self.start_url,
            pages=[red.url(p) for p in self.pages],
            archive=archive.name,
            index=INDEX,
            records=dict(sorted(counts.items())),
            exchanges=counts["response"] + counts["revisit"],
            payload_bytes=payload_bytes,
            archive_bytes=archive.stat().st_size,
            files=files,
            tools=self.tools,
            settings=self.settings,
            screenshots=self.screenshots,
            notes=[red.text(n) for n in self.notes],
            upstream_failures=self.upstream_failures,
            truncated=truncated,
            shared=self.shared,
        )
        self._write(MANIFEST, (manifest.model_dump_json(indent=2) + "\n").encode("utf-8"), "the manifest")
        return manifest

    def _write(self, name: str, data: bytes, what: str) -> None:
        try:
            self.storage.write_atomic(name, data)
        except OSError as e:
            raise SnapshotError(f"{self.path}: cannot write {what} ({e.strerror or e})") from None

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.finalize()
        else:  # leave the folder without a manifest: verify reports the unfinished recording
            self.writer.close()


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot folder found under the snapshots root (``manifest`` is None if unfinished, or if its manifest
    cannot be read: ``problem`` then says why)."""

    path: Path
    task_id: str
    snapshot_id: str
    manifest: SnapshotManifest | None
    problem: str | None = None

    @property
    def complete(self) -> bool:
        return self.manifest is not None


def list_snapshots(root: Path, storage: Storage | None = None) -> list[SnapshotInfo]:
    """Every snapshot folder under ``root`` (read through ``storage``, default the folder on disk):
    tasks in name order, newest snapshot first."""
    root = Path(root)
    if storage is None and not root.is_dir():
        raise SnapshotError(f"{root}: snapshots folder not found")
    store = storage or LocalStorage(root)
    found: list[SnapshotInfo] = []
    for task in (n for n in store.list() if n.endswith("/")):
        found.extend(task_snapshots(root, task.strip("/"), storage))
    return found


def task_snapshots(root: Path, task_id: str, storage: Storage | None = None) -> list[SnapshotInfo]:
    """The snapshot folders of one task under ``root`` (as :func:`list_snapshots` finds them), newest first:
    its folder listed, each snapshot folder listed, each manifest read; none for a task without a folder."""
    root = Path(root)
    if task_id in ("", ".", "..") or "/" in task_id:
        return []  # not a folder name: no task of the root
    store = storage or LocalStorage(root)
    infos = []
    for snap in (n for n in store.list(f"{task_id}/") if n.endswith("/")):
        files = {name.rsplit("/", 1)[-1] for name in store.list(snap)}
        if MANIFEST not in files and not files & set(ARCHIVE_NAMES.values()):
            continue
        task, snapshot_id = snap.strip("/").split("/")
        problem = None
        try:
            manifest: SnapshotManifest | None = load_manifest(root / task / snapshot_id,
                                                              SubStorage(store, snap) if storage else None)
        except SnapshotError as e:
            manifest = None
            if MANIFEST in files:  # there, but unreadable: no unfinished recording, a damaged one
                problem = f"corrupt manifest: {e}"
        infos.append(SnapshotInfo(root / task / snapshot_id, task, snapshot_id, manifest, problem))
    infos.sort(key=_newest_key, reverse=True)
    return infos


def _newest_key(info: SnapshotInfo) -> tuple[str, int, str]:
    base, _, suffix = info.snapshot_id.partition("-")
    created = info.manifest.created_at.strftime("%Y%m%dT%H%M%S.%f") if info.manifest else base
    return created, int(suffix) if suffix.isdigit() else 0, info.snapshot_id


def latest_snapshot(root: Path, task_id: str, infos: Sequence[SnapshotInfo] | None = None) -> Path:
    """The newest complete snapshot of a task; :class:`SnapshotError` if there is none. ``infos``: the task's
    snapshots as :func:`task_snapshots` found them already (default: its folder is read now)."""
    if infos is None:
        infos = task_snapshots(Path(root), task_id) if (Path(root) / task_id).is_dir() else []
    for info in infos:  # newest first
        if info.complete:
            return info.path
    raise SnapshotError(
        f"no snapshot of task {task_id!r} under {root}; record one with `ego2web-replay record` "
        "or import a WARC with `ego2web-replay snapshot import`"
    )
