"""Writing one large WARC record in pieces: memory bounded by a piece, not by the payload.

A payload held in a file (the recorder's spool of a streamed body) is read twice, a
piece at a time, and never whole: once for its digests (the WARC-Payload-Digest and
WARC-Block-Digest warcio would write, sha1 in base32, and the sha256 deduplication
compares, when it does), and once to write it through a streaming compressor straight
into the archive. The record's head (its WARC headers and the HTTP head) is made by warcio's own
writer, over blank bytes of the payload's length, which also counts the serialised record (the zstd
frame declares its content size before its data); the head, then the payload a piece at a time, then
the record's closing blank lines go through the compressor, so its bytes are those
:meth:`~.warc.ArchiveWriter.write_record` makes from the same payload held in memory: the same headers
in the same order, the same digests, one zstd frame (content size and checksum) or gzip member per
record (an archive's bytes the same: ``tests/test_warc.py``). warcio's writer, given the payload itself,
would read and pass it on 16 KiB at a time, and serialise the record a second time.

A payload whose sha1 and sha256 were taken while it arrived (``known``: the recorder's spool hashes a
streamed body as it comes, :mod:`ego2web_replay.recorder.spool`) is read once for the block digest
only, which covers the HTTP head too and so cannot be taken before the record's head is made.
"""

from __future__ import annotations

import hashlib
import io
import os
import zlib
from typing import Any, BinaryIO

import zstandard
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter

__all__ = ["Payload", "SizedReader", "STREAM_MIN", "PIECE", "digests", "write_streamed"]

#: A payload from a file at least this long is written in pieces; a shorter one is read into memory.
STREAM_MIN = 1 << 20
#: The piece read, hashed and compressed at a time.
PIECE = 1 << 20
_VERSION = "WARC/1.1"
_END = b"\r\n\r\n"  # after every record's block


class SizedReader(io.RawIOBase):
    """A read-only, seekable stream of ``length`` bytes with a position of its own; a subclass gives
    :meth:`read` (of at most ``length - tell()`` bytes)."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length, self._pos = length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.length}[whence]
        self._pos = min(max(base + pos, 0), self.length)
        return self._pos

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


class Payload(SizedReader):
    """A stored payload read from ``fh`` (``size`` bytes from its start) between ``prefix`` and ``suffix``
    (a chunked body's framing: :func:`~.warc.chunk_body` in pieces); seekable, so warcio can re-read it."""

    def __init__(self, fh: BinaryIO, size: int, prefix: bytes = b"", suffix: bytes = b"",
                 known: tuple[str, bytes] | None = None) -> None:
        super().__init__(len(prefix) + size + len(suffix))
        self.file, self._fh, self._size, self._prefix, self._suffix = fh, fh, size, prefix, suffix
        # (WARC-Payload-Digest, sha256) of these very bytes, taken before (see the module docstring)
        self.known = known if not prefix and not suffix else None

    @classmethod
    def chunked(cls, fh: BinaryIO, size: int) -> Payload:
        """The body of ``fh`` framed as one data chunk (none when empty) and the last chunk."""
        if size == 0:
            return cls(fh, 0, b"0\r\n\r\n")
        return cls(fh, size, f"{size:x}\r\n".encode("ascii"), b"\r\n0\r\n\r\n")

    def read(self, n: int | None = -1) -> bytes:
        want = self.length - self._pos if n is None or n < 0 else min(n, self.length - self._pos)
        out = bytearray()
        while len(out) < want:
            pos, need = self._pos, want - len(out)
            head, body_end = len(self._prefix), len(self._prefix) + self._size
            if pos < head:
                piece = self._prefix[pos:pos + need]
            elif pos < body_end:
                self._fh.seek(pos - head)
                piece = self._fh.read(min(need, body_end - pos))
                if not piece:
                    raise OSError(f"the payload file ended at byte {pos - head} of {self._size}")
            else:
                piece = self._suffix[pos - body_end:pos - body_end + need]
            out += piece
            self._pos += len(piece)
        return bytes(out)


def digests(payload: Payload, http_head: bytes, dedup: bool) -> tuple[str, str, bytes]:
    """One pass over ``payload``: its WARC-Payload-Digest, the block's (``http_head`` then the payload),
    both as warcio writes them, and with ``dedup`` the payload's sha256 (what deduplication compares;
    else ``b""``)."""
    block = Digester("sha1")
    block.update(http_head)
    payload.seek(0)
    if payload.known is not None:  # only the block is left to hash
        while piece := payload.read(PIECE):
            block.update(piece)
        payload.seek(0)
        return payload.known[0], str(block), payload.known[1] if dedup else b""
    sha1, sha256 = Digester("sha1"), hashlib.sha256() if dedup else None
    while piece := payload.read(PIECE):
        sha1.update(piece)
        block.update(piece)
        if sha256 is not None:
            sha256.update(piece)
    payload.seek(0)
    return str(sha1), str(block), sha256.digest() if sha256 is not None else b""


class _Blank(io.RawIOBase):
    """``length`` bytes of nothing in particular, for the counting pass (the payload is not read for it)."""

    _ZEROS = bytes(PIECE)

    def __init__(self, length: int) -> None:
        super().__init__()
        self._left = length
        self.started = False  # read from: what is written now is the payload

    def read(self, n: int | None = -1) -> bytes:
        self.started = True
        n = self._left if n is None or n < 0 else min(n, self._left)
        self._left -= n
        return self._ZEROS[:n] if n <= PIECE else bytes(n)


class _Head:
    """A sink for warcio's writer over a :class:`_Blank` payload: keeps what is written before the payload
    is read (the record's head) and counts every byte written."""

    def __init__(self, blank: _Blank) -> None:
        self.n, self.head, self._blank = 0, bytearray(), blank

    def write(self, data: bytes) -> int:
        if not self._blank.started:
            self.head += data
        self.n += len(data)
        return len(data)

    def flush(self) -> None:
        pass


class _Gzip:
    """Writes one gzip member to ``fh`` as the pieces come."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh, self._z = fh, zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)

    def write(self, data: bytes) -> int:
        self._fh.write(self._z.compress(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._fh.write(self._z.flush())


def write_streamed(fh: BinaryIO, record: Any, payload: Payload, compression: str,
                   zstd: zstandard.ZstdCompressor | None) -> None:
    """Append ``record`` (its digests set, its raw stream ``payload``) to ``fh`` as one compression unit."""
    record.raw_stream = blank = _Blank(payload.length)
    made = _Head(blank)
    WARCWriter(made, gzip=False, warc_version=_VERSION).write_record(record)
    record.raw_stream = payload
    head = bytes(made.head)
    if made.n != len(head) + payload.length + len(_END):
        raise ValueError(f"the record's head was not followed by its {payload.length}-byte payload and its end")
    out: Any
    if compression == "zst" and zstd is not None:
        out = zstd.stream_writer(fh, size=made.n, closefd=False)
    elif compression == "gz":
        out = _Gzip(fh)
    else:
        out = fh
    out.write(head)
    payload.seek(0)
    while piece := payload.read(PIECE):
        out.write(piece)
    if payload.tell() != payload.length:
        raise OSError(f"the payload ended at byte {payload.tell()} of {payload.length}")
    out.write(_END)
    if out is not fh:
        out.close()
