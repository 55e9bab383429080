"""Where snapshot files live: one small interface for reading and writing them.

A :class:`Storage` holds files under ``/``-separated names relative to its
root (``manifest.json``, ``archive.warc.zst``, ``screenshots/step-000.png``).
It can open a file for reading with random access (records are read by byte
range, from the index's offsets), read a range, list a folder, and write a
file atomically (readers see the old file or the new one, never a part).
:class:`LocalStorage` is a folder on disk; an object store (S3 and the like)
implements the same five methods with ranged GETs, delimiter listings and
single PUTs.

Recording always assembles a snapshot in a local folder (the WARC is appended
and flushed record by record, so a killed recorder loses nothing);
:func:`copy_snapshot` then copies a finished snapshot into any storage, the
manifest last, so a reader never finds a manifest whose archive is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from ..atomic import atomic_write_bytes

__all__ = ["Storage", "LocalStorage", "SubStorage", "walk", "copy_snapshot"]

MANIFEST = "manifest.json"


@runtime_checkable
class Storage(Protocol):
    """Files under a root; names are relative and ``/``-separated."""

    def open(self, name: str) -> BinaryIO:
        """A seekable binary reader (``FileNotFoundError`` if there is no such file)."""
        ...

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes from ``offset`` (to the end when None)."""
        ...

    def exists(self, name: str) -> bool: ...

    def list(self, prefix: str = "") -> list[str]:
        """Names directly under the folder ``prefix`` (``""``: the root), sorted; folders end in ``/``."""
        ...

    def write_atomic(self, name: str, data: bytes) -> None:
        """Create or replace ``name`` with ``data``, all or nothing (folders are made as needed)."""
        ...


class LocalStorage:
    """A folder on the local disk."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    def path(self, name: str) -> Path:
        """The local path of ``name``; names may not leave the root."""
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"{name!r}: storage names are relative and stay under the root")
        return self.root / name if name else self.root

    def open(self, name: str) -> BinaryIO:
        return open(self.path(name), "rb")  # noqa: SIM115 - the caller closes it

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        with self.open(name) as fh:
            fh.seek(offset)
            return fh.read() if length is None else fh.read(length)

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def list(self, prefix: str = "") -> list[str]:
        folder = self.path(prefix.rstrip("/"))
        if not folder.is_dir():
            return []
        base = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        return sorted(base + p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())

    def write_atomic(self, name: str, data: bytes) -> None:
        target = self.path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data)


class SubStorage:
    """The folder ``prefix`` of another storage, as a storage of its own (one snapshot of a root)."""

    def __init__(self, base: Storage, prefix: str) -> None:
        self.base = base
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def __repr__(self) -> str:
        return f"{self.base!r}/{self.prefix}"

    def open(self, name: str) -> BinaryIO:
        return self.base.open(self.prefix + name)

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        return self.base.read(self.prefix + name, offset, length)

    def exists(self, name: str) -> bool:
        return self.base.exists(self.prefix + name)

    def list(self, prefix: str = "") -> list[str]:
        inner = self.prefix + (prefix.strip("/") + "/" if prefix.strip("/") else "")
        return [name[len(self.prefix):] for name in self.base.list(inner)]

    def write_atomic(self, name: str, data: bytes) -> None:
        self.base.write_atomic(self.prefix + name, data)


def walk(storage: Storage, prefix: str = "") -> Iterator[str]:
    """Every file name under ``prefix``, depth first, in name order."""
    for name in storage.list(prefix):
        if name.endswith("/"):
            yield from walk(storage, name)
        else:
            yield name


def copy_snapshot(source: Storage, target: Storage) -> list[str]:
    """Copy every file of the snapshot in ``source`` into ``target``, ``manifest.json`` last.

    Returns the names copied. Each file is read whole and written atomically.
    """
    names = [n for n in walk(source) if n != MANIFEST]
    if not source.exists(MANIFEST):
        raise FileNotFoundError(f"{source}: no {MANIFEST}; only a finished snapshot can be copied")
    for name in [*names, MANIFEST]:
        target.write_atomic(name, source.read(name))
    return [*names, MANIFEST]
