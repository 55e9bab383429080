"""Where snapshots are: a local folder or an object-storage URL, and opening, finding, uploading and
verifying snapshots in either.

A *location* is a :class:`~pathlib.Path` for a folder on disk and a ``str`` for a URL
(``s3://bucket/prefix``, any fsspec URL); :func:`as_location` makes one from what a user typed.
Commands take ``--snapshots`` as a location and choose the storage by its scheme.

A snapshot opened from object storage (:func:`open_snapshot`) reads its files through a
:class:`~.objcache.CachedStorage`: records by ranged GETs into the content-addressed cache, the
index and the learned volatility downloaded once. Those small files are also linked into a
local *view* folder under the data folder (``remote-snapshots/``), so replay code that reads an
index file by path works unchanged; the archive itself is never downloaded whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..atomic import atomic_write_bytes
from ..config import data_dir
from ..errors import SnapshotError
from ..models import SnapshotManifest, parse_model
from .objcache import CachedStorage, ObjectCache
from .objstore import ObjectStorage, StorageError, is_remote
from .snapshot import ARCHIVE_NAMES, MANIFEST, Snapshot, SnapshotInfo, _newest_key, latest_snapshot
from .storage import LocalStorage, Storage, walk
from .verify import VerifyReport, verify_snapshot

__all__ = ["Location", "as_location", "join", "name_of", "is_remote", "root_storage", "open_snapshot",
           "RemoteSnapshot", "latest", "newest_remote", "staging_root", "upload_snapshot", "require_local", "verify_location", "StorageError"]

Location = Path | str


def as_location(value: str | os.PathLike[str]) -> Location:
    """A URL stays a string (without a trailing ``/``); anything else is a local path."""
    if not isinstance(value, Path) and is_remote(str(value)):
        return str(value).rstrip("/")
    return Path(value)


def join(location: Location, *parts: str) -> Location:
    if isinstance(location, str):
        return "/".join([location.rstrip("/"), *parts])
    return location.joinpath(*parts)


def name_of(location: Location) -> str:
    """The last part of a location (a snapshot's id)."""
    return location.rstrip("/").rsplit("/", 1)[-1] if isinstance(location, str) else location.name


def root_storage(location: Location, *, write: bool = False) -> Storage:
    """The storage of a snapshots root, checked to be reachable (and writable with ``write``)."""
    if isinstance(location, str):
        store = ObjectStorage(location)
        store.check_root(write=write)
        return store
    return LocalStorage(location)


def require_local(location: Location, what: str) -> Path:
    """``location`` as a folder, or a one-line error saying ``what`` works on local folders only."""
    if isinstance(location, str):
        raise SnapshotError(f"{what} works on local folders only, not {location}; copy the snapshots down "
                            "first (for example `aws s3 sync`) or give a folder")
    return location


class RemoteSnapshot(Snapshot):
    """A snapshot read from object storage; ``location`` is its URL, ``path`` its local view folder."""

    location: str
    storage: CachedStorage


def open_snapshot(location: Location, cache: ObjectCache | None = None) -> Snapshot:
    """Open a snapshot folder or URL; :class:`SnapshotError` when it is not a finished snapshot."""
    if not isinstance(location, str):
        return Snapshot.open(Path(location))
    url = location.rstrip("/")
    remote = ObjectStorage(url)
    cache = cache or ObjectCache()
    try:
        data = cache.manifest(remote)
    except FileNotFoundError:
        unfinished = any(remote.exists(name) for name in ARCHIVE_NAMES.values())
        hint = " (the recording or its upload did not finish?)" if unfinished else ""
        raise SnapshotError(f"{url}: not a snapshot, {MANIFEST} is missing{hint}") from None
    manifest = parse_model(data, f"{url}/{MANIFEST}", SnapshotManifest, "snapshot manifest", SnapshotError)
    storage = CachedStorage(remote, cache, manifest, data)
    if not storage.exists(manifest.archive):
        raise SnapshotError(f"{url}: the archive {manifest.archive} is missing")
    snap = RemoteSnapshot(_view(url, manifest, storage, data), manifest, storage)
    snap.location = url
    return snap


def _view(url: str, manifest: SnapshotManifest, storage: CachedStorage, manifest_bytes: bytes) -> Path:
    """A local folder with the snapshot's manifest, index and learned volatility (linked from the cache)."""
    view = data_dir() / "remote-snapshots" / hashlib.sha256(url.encode()).hexdigest()[:24] / manifest.snapshot_id
    view.mkdir(parents=True, exist_ok=True)
    target = view / MANIFEST
    if not target.is_file() or target.read_bytes() != manifest_bytes:
        atomic_write_bytes(target, manifest_bytes)
    for name in storage.digests:
        if name == manifest.archive or "/" in name:
            continue  # the archive is read by range; screenshots only when asked for
        cached = storage.fetch(name)
        link = view / name
        try:
            if link.exists() and os.path.samefile(link, cached):
                continue
            tmp = view / f".{name}.link"
            tmp.unlink(missing_ok=True)
            try:
                os.link(cached, tmp)
            except OSError:
                shutil.copyfile(cached, tmp)
            os.replace(tmp, link)
        except OSError as e:
            raise SnapshotError(f"cannot prepare the local view of {url} in {view} ({e.strerror or e})") from None
    return view


def latest(root: Location, task_id: str, cache: ObjectCache | None = None) -> Location:
    """The newest finished snapshot of a task under a root (folder or URL)."""
    if not isinstance(root, str):
        return latest_snapshot(root, task_id)
    store = ObjectStorage(root)
    store.check_root()
    return newest_remote(root, store, task_id, cache or ObjectCache())


def newest_remote(root: str, store: ObjectStorage, task_id: str, cache: ObjectCache,
                  folders: Iterable[tuple[str, str | None]] | None = None) -> str:
    """The URL of a task's newest finished snapshot in ``store`` (the root ``root``'s). ``folders``: its
    snapshot folders as (snapshot id, the manifest's ETag token) when a listing of the root gave them
    (:class:`~.rootlist.RootListing`); by default the task's folder is listed and each manifest's token
    asked for. A folder without a manifest (an unfinished upload) or with a broken one is skipped."""
    if folders is None:
        folders = [(n.strip("/").rsplit("/", 1)[-1], None) for n in store.list(task_id) if n.endswith("/")]
    infos = []
    for snapshot_id, tag in folders:
        sub = store.child(f"{task_id}/{snapshot_id}")
        try:
            data = cache.manifest(sub) if tag is None else cache.manifest(sub, etag=tag)
            manifest = parse_model(data, sub.url, SnapshotManifest, "snapshot manifest", SnapshotError)
        except StorageError:
            raise  # the store failed: that is not "no snapshot"
        except (FileNotFoundError, SnapshotError):
            continue  # an unfinished upload or a broken manifest: not a snapshot to replay
        infos.append(SnapshotInfo(Path(task_id, snapshot_id), task_id, snapshot_id, manifest))
    if not infos:
        raise SnapshotError(f"no snapshot of task {task_id!r} under {root}; record one with "
                            f"`ego2web-replay record --snapshots {root}`")
    newest = max(infos, key=_newest_key)
    return f"{root}/{task_id}/{newest.snapshot_id}"


def staging_root() -> Path:
    """Where snapshots bound for object storage are recorded before their upload (the data folder's
    ``upload-staging/``)."""
    return data_dir() / "upload-staging"


def upload_snapshot(folder: Path, target: Location) -> list[str]:
    """Copy a finished local snapshot folder to ``target`` (a URL), every file before the manifest.

    Each object appears whole or not at all, and the manifest only after all the others, so a reader
    (or a failed or killed upload) never finds a manifest whose archive is missing. Returns the names.
    """
    if not (folder / MANIFEST).is_file():
        raise SnapshotError(f"{folder}: no {MANIFEST}; only a finished snapshot can be uploaded")
    store = ObjectStorage(str(target))
    names = [n for n in walk(LocalStorage(folder)) if n != MANIFEST and not n.rsplit("/", 1)[-1].startswith(".")]
    for name in [*names, MANIFEST]:
        store.put_file(name, folder / name)
    return [*names, MANIFEST]


def verify_location(location: Location) -> VerifyReport:
    """:func:`~.verify.verify_snapshot` for a folder or a URL (the URL's files are downloaded to a
    temporary folder and checked there, whatever state they are in)."""
    if not isinstance(location, str):
        return verify_snapshot(location)
    store = ObjectStorage(location)
    store.check_root()
    names = list(walk(store))
    if not names:
        raise SnapshotError(f"{location}: no such snapshot (nothing stored under it)")
    with tempfile.TemporaryDirectory(prefix="ego2web-verify-") as tmp:
        folder = Path(tmp) / name_of(location)
        for name in names:
            try:
                data = store.read(name)
            except FileNotFoundError:
                continue  # removed while we listed
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        report = verify_snapshot(folder)
        report.path = Path(name_of(location))
        report.problems = [p.replace(str(folder), location) for p in report.problems]
        report.warnings = [w.replace(str(folder), location) for w in report.warnings]
        return report

