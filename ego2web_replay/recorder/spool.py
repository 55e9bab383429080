"""A streamed body's copy in the recorder: memory up to a bound, a temporary file beyond, read at offsets.

The origin's bytes are appended as they come (:meth:`Spool.write`); the browser is fed from it with
:meth:`Spool.read_at`, which keeps no file position, so the record can be written from the same copy
at the same time on the writer thread (:mod:`.writes`). :meth:`Spool.handover` gives the writer the
finished body as a :class:`SpoolFile` with a position of its own: over the bytes themselves while they
are in memory (no more are added once the body has ended), else over the file through a descriptor of
its own, read with ``os.pread``, so neither side moves the other's position and closing the spool
does not cut the write short.
"""

from __future__ import annotations

import os
import tempfile

from ..snapshots.warcstream import SizedReader

__all__ = ["Spool", "SpoolFile"]


class Spool:
    """Bytes appended in memory up to ``max_memory``, then moved to an unnamed temporary file."""

    def __init__(self, max_memory: int) -> None:
        self.max_memory = max_memory
        self.size = 0
        self.closed = False
        self._memory: bytearray | None = bytearray()
        self._fd: int | None = None

    @property
    def on_disk(self) -> bool:
        return self._fd is not None

    def write(self, data: bytes) -> None:
        if self._memory is not None and self.size + len(data) > self.max_memory:
            self._fd = _temporary_fd()
            _write_all(self._fd, self._memory)
            self._memory = None
        if self._memory is not None:
            self._memory += data
        else:
            assert self._fd is not None
            _write_all(self._fd, data)
        self.size += len(data)

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (no position kept)."""
        if self._memory is not None:
            return bytes(self._memory[offset:offset + n])
        assert self._fd is not None
        return os.pread(self._fd, min(n, self.size - offset), offset)

    def handover(self) -> SpoolFile:
        """The whole body for the writer (see the module docstring); nothing may be written after."""
        if self._memory is not None:
            return SpoolFile(self._memory, self.size)
        assert self._fd is not None
        return SpoolFile(os.dup(self._fd), self.size)

    def close(self) -> None:
        self.closed = True
        self._memory = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _temporary_fd() -> int:
    fd, path = tempfile.mkstemp(prefix="ego2web-spool-")
    os.unlink(path)  # gone with its last descriptor
    return fd


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class SpoolFile(SizedReader):
    """A read-only, seekable view with its own position of ``size`` bytes: ``source`` is the spool's
    memory (``in_memory``) or a descriptor of the view's own on the spool's file (closed with the view)."""

    def __init__(self, source: bytearray | int, size: int) -> None:
        super().__init__(size)
        self._source = source

    @property
    def in_memory(self) -> bool:
        return not isinstance(self._source, int)

    def read(self, n: int | None = -1) -> bytes:
        left = self.length - self._pos
        n = left if n is None or n < 0 else min(n, left)
        if isinstance(self._source, int):
            data = os.pread(self._source, n, self._pos) if n > 0 else b""
        else:
            data = bytes(self._source[self._pos:self._pos + n])
        self._pos += len(data)
        return data

    def close(self) -> None:
        if not self.closed and isinstance(self._source, int):
            os.close(self._source)
        super().close()
