"""One listing of a snapshots root for many tasks: how a run's start finds every task's newest snapshot.

:func:`~.location.latest` answers for one task. A run's start asks it for every task of its suite
(:func:`~ego2web_replay.runner.run.pin_snapshots`), and for a shared-capture run every task of the
root too (:func:`~ego2web_replay.runner.run.pin_share_sources`); :class:`RootListing` lists the root
once and answers each of them from that listing, with :func:`~.location.latest`'s answer: the same
snapshot (by the same newest-first key, so ties go the same way), unfinished uploads and broken
manifests skipped alike, the same error for a task with none.

* **A folder.** The root is listed once (its task folders); the folder of each task asked for, and
  each of its snapshot folders, is listed and its manifests read once
  (:func:`~.snapshot.task_snapshots`), whether for the task's own pin or for :meth:`RootListing.infos`
  (every snapshot of the root: the shared captures' sources).
* **Object storage** (``s3://``). The bucket is checked once; then the root is listed without a
  delimiter (:meth:`~.objstore.ObjectStorage.list_tree`, a request per 1,000 keys), which gives each
  manifest's ETag, so a task's manifests are read through the cache without a HEAD each (a warm cache:
  no request at all). A per-task lookup asks at least a listing of its task and a HEAD per snapshot,
  so the root's listing is used only while it takes no more requests than the tasks it answers for
  (:meth:`RootListing.prepare`); past that, or when it fails, it is dropped and each task's folder is
  listed on its own, as :func:`~.location.latest` does (without asking for the bucket again).
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..errors import SnapshotError
from .location import Location, newest_remote
from .objcache import ObjectCache
from .objstore import ObjectStorage, StorageError
from .snapshot import MANIFEST, SnapshotInfo, latest_snapshot, task_snapshots
from .storage import LocalStorage

__all__ = ["RootListing"]


class RootListing:
    """A snapshots root (a folder or a URL) listed at most once; :meth:`newest` for each task from it."""

    def __init__(self, root: Location, cache: ObjectCache | None = None) -> None:
        self.root = root
        self.cache = cache
        self._lock = threading.Lock()
        self._names: list[str] | None = None  # a folder's task folders, in the listing's order
        self._known: set[str] = set()
        self._tasks: dict[str, list[SnapshotInfo]] = {}  # a folder's tasks read so far, newest first
        self._store: ObjectStorage | None = None
        self._failed: StorageError | None = None  # the bucket's check failed: every task's answer
        self._tree: dict[str, dict[str, str]] | None = None  # task -> snapshot id -> its manifest's ETag

    def prepare(self, lookups: int) -> None:
        """List the root once (later calls do nothing), for ``lookups`` tasks to answer: on object storage
        the listing stops, and each task is listed on its own, once it would take more than ``lookups``
        requests. Called before :meth:`newest` is called from several threads."""
        with self._lock:
            if isinstance(self.root, Path):
                self._local_names()
            elif self._store is None:
                self._list_remote(self.root, max(1, lookups))

    def newest(self, task_id: str) -> Location:
        """The task's newest finished snapshot, as :func:`~.location.latest` finds it; its
        :class:`SnapshotError` when there is none (or the store failed)."""
        self.prepare(1)
        if isinstance(self.root, Path):
            return latest_snapshot(self.root, task_id, self._task(task_id) if task_id in self._known else [])
        if self._failed is not None:
            raise self._failed
        assert self._store is not None
        cache = self.cache or ObjectCache()
        if self._tree is None:  # the root's listing was dropped: the task's own folder
            return newest_remote(self.root, self._store, task_id, cache)
        return newest_remote(self.root, self._store, task_id, cache, sorted(self._tree.get(task_id, {}).items()))

    def infos(self) -> list[SnapshotInfo]:
        """Every snapshot folder of a local root, as :func:`~.snapshot.list_snapshots` gives them (tasks in
        name order, newest first), each task's folder read once for this and :meth:`newest` together."""
        if not isinstance(self.root, Path):
            raise SnapshotError(f"{self.root}: only a local snapshots folder lists its snapshots here")
        self.prepare(1)
        return [info for name in self._local_names() for info in self._task(name)]

    # -- a folder ---------------------------------------------------------------------
    def _local_names(self) -> list[str]:
        if self._names is None:  # the one listing of the root
            assert isinstance(self.root, Path)
            self._names = [n.strip("/") for n in LocalStorage(self.root).list() if n.endswith("/")]
            self._known = set(self._names)
        return self._names

    def _task(self, task_id: str) -> list[SnapshotInfo]:
        with self._lock:
            held = self._tasks.get(task_id)
        if held is None:
            assert isinstance(self.root, Path)
            held = task_snapshots(self.root, task_id)
            with self._lock:
                self._tasks[task_id] = held
        return held

    # -- object storage -----------------------------------------------------------------
    def _list_remote(self, root: str, max_pages: int) -> None:
        store = ObjectStorage(root)
        self._store = store
        try:
            store.check_root()
        except StorageError as e:
            self._failed = e
            return
        try:
            names = store.list_tree("", max_pages=max_pages)
        except StorageError:
            names = None  # each task then asks for its own folder, and says how that fails
        if names is None:
            return
        tree: dict[str, dict[str, str]] = {}
        for name, tag in names:
            parts = name.split("/")
            if len(parts) == 3 and parts[2] == MANIFEST and parts[0] and parts[1]:
                tree.setdefault(parts[0], {})[parts[1]] = tag
        self._tree = tree
