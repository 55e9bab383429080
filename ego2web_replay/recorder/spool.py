"""A streamed body's copy in the recorder: memory up to a bound, a temporary file beyond, read at offsets.

The origin's bytes are appended as they come (:meth:`Spool.write`); the browser is fed from it with
:meth:`Spool.read_at`, which keeps no file position, so the record can be written from the same copy
at the same time on the writer thread (:mod:`.writes`). :meth:`Spool.handover` gives the writer the
finished body as a :class:`SpoolFile` with a position of its own: over the bytes themselves while they
are in memory (no more are added once the body has ended), else over the file through a descriptor of
its own, read with ``os.pread``, so neither side moves the other's position and closing the spool
does not cut the write short.

A body of :data:`~ego2web_replay.snapshots.warcstream.STREAM_MIN` bytes or more is hashed while it
comes: once past :data:`HASH_STEP`, each further step of bytes is hashed (sha1, the
WARC-Payload-Digest, and sha256, what deduplication compares) on one hashing thread shared by all
spools, in order, read from the spool's copy (its memory under the spool's lock, or the file through
a descriptor of the hasher's own), so that when the body ends only its last step is left to hash
(:meth:`SpoolFile.payload_digests`) and the writer does not read a hundred megabytes twice before it
can write the record (:mod:`ego2web_replay.snapshots.warcstream`). hashlib lets go of the GIL while
it hashes, so this runs beside the event loop.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import os
import tempfile
import threading

from ..snapshots.warcstream import STREAM_MIN, SizedReader

__all__ = ["Spool", "SpoolFile", "HASH_STEP"]

#: A body is hashed while it comes in steps of this many bytes (one hand-off to the hasher each).
HASH_STEP = 1 << 20
_hasher: concurrent.futures.ThreadPoolExecutor | None = None
_hasher_lock = threading.Lock()


def _hashing() -> concurrent.futures.ThreadPoolExecutor:
    """The one hashing thread (started with the first large body): steps of every spool, in order."""
    global _hasher
    with _hasher_lock:
        if _hasher is None:
            _hasher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ego2web-spool-hash")
        return _hasher


class _Hashes:
    """A spool's running digests, advanced on the hashing thread only."""

    def __init__(self) -> None:
        self.sha1, self.sha256 = hashlib.sha1(), hashlib.sha256()
        self.done = 0  # bytes hashed
        self.fd: int | None = None  # the hasher's own descriptor on the spool's file, once it has one

    def result(self) -> tuple[str, bytes]:
        """(WARC-Payload-Digest as warcio writes it, sha256)."""
        return "sha1:" + base64.b32encode(self.sha1.digest()).decode("ascii"), self.sha256.digest()


class Spool:
    """Bytes appended in memory up to ``max_memory``, then moved to an unnamed temporary file."""

    def __init__(self, max_memory: int) -> None:
        self.max_memory = max_memory
        self.size = 0
        self.closed = False
        self._memory: bytearray | None = bytearray()
        self._fd: int | None = None
        self._lock = threading.Lock()  # the memory and the switch to the file, against the hasher's reads
        self._hashes: _Hashes | None = None  # once the body passed HASH_STEP
        self._asked = 0  # bytes handed to the hasher so far
        self._last: concurrent.futures.Future[None] | None = None

    @property
    def on_disk(self) -> bool:
        return self._fd is not None

    def write(self, data: bytes) -> None:
        if self._memory is not None and self.size + len(data) > self.max_memory:
            fd = _temporary_fd()
            _write_all(fd, self._memory)
            with self._lock:
                self._fd, self._memory = fd, None
        if self._memory is not None:
            with self._lock:
                self._memory += data
        else:
            assert self._fd is not None
            _write_all(self._fd, data)
        self.size += len(data)
        if self.size - self._asked >= HASH_STEP:
            self._hash_to(self.size)

    def _hash_to(self, end: int) -> concurrent.futures.Future[None]:
        """Have the hasher hash up to ``end`` (after what it was asked before)."""
        if self._hashes is None:
            self._hashes = _Hashes()
        self._asked = end
        self._last = _hashing().submit(self._hash_step, self._hashes, end)
        return self._last

    def _hash_step(self, hashes: _Hashes, end: int) -> None:  # on the hashing thread
        while hashes.done < end:
            n = min(end - hashes.done, HASH_STEP)
            with self._lock:
                if self.closed:
                    break
                if self._memory is not None:
                    piece = bytes(self._memory[hashes.done:hashes.done + n])
                else:
                    if hashes.fd is None:
                        assert self._fd is not None
                        hashes.fd = os.dup(self._fd)
                    piece = b""
            if not piece:
                assert hashes.fd is not None
                piece = os.pread(hashes.fd, n, hashes.done)
                if not piece:
                    raise OSError(f"the spool file ended at byte {hashes.done} of {end}")
            hashes.sha1.update(piece)
            hashes.sha256.update(piece)
            hashes.done += len(piece)

    def _hasher_done(self, hashes: _Hashes) -> None:  # on the hashing thread, after the last step
        if hashes.fd is not None:
            os.close(hashes.fd)
            hashes.fd = None

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (no position kept)."""
        if self._memory is not None:
            return bytes(self._memory[offset:offset + n])
        assert self._fd is not None
        return os.pread(self._fd, min(n, self.size - offset), offset)

    def handover(self) -> SpoolFile:
        """The whole body for the writer (see the module docstring); nothing may be written after.
        A body of ``STREAM_MIN`` bytes or more comes with its digests on the way (the last step handed
        to the hasher now)."""
        digests: concurrent.futures.Future[tuple[str, bytes]] | None = None
        if self.size >= STREAM_MIN:
            if self._asked < self.size or self._last is None:
                self._hash_to(self.size)
            hashes = self._hashes
            assert hashes is not None
            digests = _hashing().submit(self._digests, hashes, self.size)
        if self._memory is not None:
            return SpoolFile(self._memory, self.size, digests)
        assert self._fd is not None
        return SpoolFile(os.dup(self._fd), self.size, digests)

    def _digests(self, hashes: _Hashes, size: int) -> tuple[str, bytes]:  # on the hashing thread, in turn
        self._hasher_done(hashes)
        if hashes.done != size:
            raise OSError(f"the spool was hashed to byte {hashes.done} of {size}")
        return hashes.result()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._memory = None
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        if self._hashes is not None:  # the hasher's descriptor is closed in turn, after its last step
            _hashing().submit(self._hasher_done, self._hashes)


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

    def __init__(self, source: bytearray | int, size: int,
                 digests: concurrent.futures.Future[tuple[str, bytes]] | None = None) -> None:
        super().__init__(size)
        self._source = source
        self._digests = digests

    def payload_digests(self) -> tuple[str, bytes] | None:
        """(sha1 WARC-Payload-Digest, sha256) of the whole view, hashed while the body came (waits for
        the hasher's last step), or None when it was not (a small body: hashed when written)."""
        return None if self._digests is None else self._digests.result()

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
