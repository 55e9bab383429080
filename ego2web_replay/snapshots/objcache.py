"""A local, content-addressed cache for snapshots read from object storage.

A snapshot's manifest lists the sha256 and size of each of its files, so what
was downloaded once is kept by that digest in the data folder's
``object-cache/``:

* ``sha256/<ab>/<digest>``: whole files (the index, the learned volatility,
  screenshots), checked against the manifest's sha256 when downloaded;
* ``blocks/<digest>/<n>``: the archive, fetched by byte range in blocks of
  :data:`BLOCK` bytes as records are read (neighbouring missing blocks in one
  ranged GET), so a replay downloads only the records it serves;
* ``manifests/<key>.json``: each snapshot's manifest, with the object's ETag;
  a warm open asks the store only whether that ETag still holds (a HEAD, no
  body).

The same file in two snapshots (or two buckets) is kept once. The cache is never
the source of truth: a missing, partial or damaged entry is fetched again.
:class:`CachedStorage` is the read-only :class:`~.storage.Storage` of one remote
snapshot through this cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, cast

from ..config import data_dir
from ..models import FileDigest, SnapshotManifest
from .objstore import ObjectStorage, StorageError

__all__ = ["ObjectCache", "CachedStorage", "BLOCK"]

BLOCK = 1 << 20  # bytes per cached archive block (one ranged GET fetches one or more)
MANIFEST = "manifest.json"


def _put(path: Path, data: bytes) -> None:
    """Write a cache entry whole (temporary file, then rename); a crash leaves no partial entry."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ObjectCache:
    """Files and archive blocks by sha256, and manifests by URL and ETag, under ``root``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else data_dir() / "object-cache"

    def file_path(self, sha256: str) -> Path:
        return self.root / "sha256" / sha256[:2] / sha256

    def has_file(self, digest: FileDigest) -> bool:
        p = self.file_path(digest.sha256)
        return p.is_file() and p.stat().st_size == digest.size

    def fetch_file(self, digest: FileDigest, remote: ObjectStorage, name: str) -> Path:
        """The whole file, from the cache or downloaded once and checked against its sha256."""
        p = self.file_path(digest.sha256)
        if self.has_file(digest):
            return p
        data = remote.read(name, 0, digest.size)  # the size known: the download has a time limit
        if hashlib.sha256(data).hexdigest() != digest.sha256:
            raise StorageError(f"{remote.url}/{name}: the downloaded file's sha256 differs from the manifest "
                               "(changed since the snapshot was written?); `snapshot verify` says more")
        _put(p, data)
        return p

    def has_any(self, digest: FileDigest) -> bool:
        return self.has_file(digest) or (self.root / "blocks" / digest.sha256).is_dir()

    def read_range(self, digest: FileDigest, remote: ObjectStorage, name: str, offset: int,
                   length: int | None) -> bytes:
        """``length`` bytes of the file from ``offset``: from the whole cached file, else from cached
        blocks, fetching the missing ones by ranged GETs."""
        end = digest.size if length is None else min(digest.size, offset + length)
        if offset >= end:
            return b""
        if self.has_file(digest):
            with open(self.file_path(digest.sha256), "rb") as fh:
                fh.seek(offset)
                return fh.read(end - offset)
        first, last = offset // BLOCK, (end - 1) // BLOCK
        blocks: dict[int, bytes] = {}
        missing: list[int] = []
        for n in range(first, last + 1):
            data = self._block(digest, n)
            if data is None:
                missing.append(n)
            else:
                blocks[n] = data
        for run in _runs(missing):
            start, stop = run[0] * BLOCK, min(digest.size, (run[-1] + 1) * BLOCK)
            data = remote.read(name, start, stop - start)
            if len(data) != stop - start:
                raise StorageError(f"{remote.url}/{name}: the object is {len(data)} bytes short of the "
                                   f"manifest's size ({digest.size}); `snapshot verify` says more")
            for n in run:
                part = data[(n - run[0]) * BLOCK:(n - run[0] + 1) * BLOCK]
                _put(self._block_path(digest, n), part)
                blocks[n] = part
        joined = b"".join(blocks[n] for n in range(first, last + 1))
        return joined[offset - first * BLOCK:end - first * BLOCK]

    def _block_path(self, digest: FileDigest, n: int) -> Path:
        return self.root / "blocks" / digest.sha256 / str(n)

    def _block(self, digest: FileDigest, n: int) -> bytes | None:
        want = min(BLOCK, digest.size - n * BLOCK)
        try:
            data = self._block_path(digest, n).read_bytes()
        except OSError:
            return None
        return data if len(data) == want else None

    # -- manifests -----------------------------------------------------------------------
    def _manifest_path(self, url: str) -> Path:
        return self.root / "manifests" / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".json")

    def manifest(self, remote: ObjectStorage, etag: str | None = None) -> bytes:
        """The snapshot's manifest: the cached copy while its ETag holds, else downloaded (and kept).
        ``etag``: the manifest's token as a listing just gave it (:meth:`ObjectStorage.list_tree`), so the
        store is not asked for it again (default: asked, a HEAD)."""
        url = f"{remote.url}/{MANIFEST}"
        tag = remote.etag(MANIFEST) if etag is None else etag
        path = self._manifest_path(url)
        try:
            held = json.loads(path.read_text("utf-8"))
            if held.get("url") == url and held.get("etag") == tag:
                return str(held["manifest"]).encode("utf-8")
        except (OSError, ValueError, KeyError, TypeError):
            pass
        data = remote.read(MANIFEST)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data  # not a manifest; the parser says so
        _put(path, json.dumps({"url": url, "etag": tag, "manifest": text}).encode("utf-8"))
        return data


def _runs(numbers: list[int]) -> list[list[int]]:
    """Consecutive runs of sorted numbers: [1, 2, 4] -> [[1, 2], [4]]."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return runs


class CachedStorage:
    """One remote snapshot, read through an :class:`ObjectCache` (read-only)."""

    def __init__(self, remote: ObjectStorage, cache: ObjectCache, manifest: SnapshotManifest,
                 manifest_bytes: bytes) -> None:
        self.remote = remote
        self.cache = cache
        self.manifest_bytes = manifest_bytes
        self.digests = {d.path: d for d in manifest.files}

    def __repr__(self) -> str:
        return f"CachedStorage({self.remote.url!r})"

    def open(self, name: str) -> BinaryIO:
        digest = self.digests.get(name)
        if digest is None:
            return self.remote.open(name)
        if self.cache.has_file(digest):
            return open(self.cache.file_path(digest.sha256), "rb")  # noqa: SIM115 - the caller closes it
        return cast(BinaryIO, io.BufferedReader(_RangedFile(self, name, digest.size), buffer_size=1 << 16))

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        if name == MANIFEST:
            data = self.manifest_bytes
            return data[offset:] if length is None else data[offset:offset + length]
        digest = self.digests.get(name)
        if digest is None:
            return self.remote.read(name, offset, length)
        if offset == 0 and length is None and name != _archive(self):
            return self.fetch(name).read_bytes()
        return self.cache.read_range(digest, self.remote, name, offset, length)

    def fetch(self, name: str) -> Path:
        """The local cached copy of a whole file the manifest lists (downloaded once)."""
        return self.cache.fetch_file(self.digests[name], self.remote, name)

    def exists(self, name: str) -> bool:
        if name == MANIFEST:
            return True
        digest = self.digests.get(name)
        if digest is not None and self.cache.has_any(digest):
            return True
        return self.remote.exists(name)

    def list(self, prefix: str = "") -> list[str]:
        return self.remote.list(prefix)

    def write_atomic(self, name: str, data: bytes) -> None:
        raise StorageError(f"{self.remote.url}: a snapshot opened from object storage is read-only")


def _archive(storage: CachedStorage) -> str | None:
    return next((n for n in storage.digests if n.startswith("archive.warc")), None)


class _RangedFile(io.RawIOBase):
    """A seekable reader of one remote file whose reads go through the block cache."""

    def __init__(self, storage: CachedStorage, name: str, size: int) -> None:
        super().__init__()
        self.storage, self.name_, self.size, self.pos = storage, name, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        data = self.storage.read(self.name_, self.pos, n)
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)
