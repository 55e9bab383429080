"""A second :class:`~ego2web_replay.snapshots.storage.Storage`: files held in memory.

It shows (and tests) that snapshot reading and writing need nothing of a local
disk beyond the storage interface: the shape an object-store backend takes.
Every write replaces a whole value at once, as an object store's PUT does.
"""

from __future__ import annotations

import io
from typing import BinaryIO

__all__ = ["MemoryStorage"]


class MemoryStorage:
    """Files in a dict, by ``/``-separated name; counts reads so tests can see ranged access."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.bytes_read = 0

    def __repr__(self) -> str:
        return f"MemoryStorage({len(self.files)} files)"

    def open(self, name: str) -> BinaryIO:
        if name not in self.files:
            raise FileNotFoundError(name)
        return _Counting(self.files[name], self)

    def read(self, name: str, offset: int = 0, length: int | None = None) -> bytes:
        with self.open(name) as fh:
            fh.seek(offset)
            return fh.read() if length is None else fh.read(length)

    def exists(self, name: str) -> bool:
        return name in self.files

    def list(self, prefix: str = "") -> list[str]:
        base = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        found = set()
        for name in self.files:
            if name.startswith(base):
                head, sep, _ = name[len(base):].partition("/")
                found.add(base + head + sep)
        return sorted(found)

    def write_atomic(self, name: str, data: bytes) -> None:
        self.files[name] = bytes(data)


class _Counting(io.BytesIO):
    def __init__(self, data: bytes, owner: MemoryStorage) -> None:
        super().__init__(data)
        self.owner = owner

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.owner.bytes_read += len(data)
        return data
