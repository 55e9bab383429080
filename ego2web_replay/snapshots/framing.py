"""Compression units of a WARC file: one zstd frame, gzip member or plain record each.

A record-per-unit archive keeps record offsets usable: the offset of a record is
the offset of its unit, its length the unit's compressed size. This module
splits a file into units without understanding WARC beyond the record header of
an uncompressed file, and says exactly where an incomplete tail begins.

Three layouts are read, detected from the first bytes (not the file name):

* ``.warc.zst`` (IIPC warc-zstd): one zstd frame per record, optionally a
  leading dictionary in a skippable frame with magic ``0x184D2A5D``;
* ``.warc.gz``: one gzip member per record;
* ``.warc``: plain records, each ``header CRLF block CRLF CRLF``.

Reading is bounded (:mod:`ego2web_replay.limits`): a unit is inflated in
streaming steps and refused, with one line naming the file, the byte offset
and the limit, as soon as it passes the record size cap or the inflation
ratio; a declared length is checked against the cap and the file's size
before anything is read. The ratio applies only to what a unit inflates to beyond
the record its own WARC header declares (header, ``Content-Length`` bytes of block,
CRLF CRLF): a genuine record of very compressible bytes (100 MiB of one byte
compresses some 10000:1) is read, up to the record cap; a unit that inflates past
its declared record is corrupt, and past the ratio refused as a decompression bomb.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import zstandard

from ..errors import ArchiveError
from ..limits import InputLimitError, check_inflation, human, max_record_bytes

__all__ = ["Unit", "Truncated", "detect_format", "iter_units", "read_unit", "Format"]

Format = Literal["zst", "gz", "none", "empty"]

ZSTD_MAGIC = 0xFD2FB528
DICT_MAGIC = 0x184D2A5D
SKIPPABLE_MIN, SKIPPABLE_MAX = 0x184D2A50, 0x184D2A5F
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Unit:
    """One compression unit: where it lies in the file and its uncompressed bytes."""

    offset: int
    length: int
    data: bytes


class Truncated(Exception):  # noqa: N818 - a signal, not an error shown to users
    """The file ends inside the unit that starts at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def detect_format(head: bytes) -> Format:
    """Tell the layout from the first bytes of a file."""
    if not head:
        return "empty"
    if len(head) >= 4:
        magic = int.from_bytes(head[:4], "little")
        if magic == ZSTD_MAGIC or SKIPPABLE_MIN <= magic <= SKIPPABLE_MAX:
            return "zst"
    if head[:2] == b"\x1f\x8b":
        return "gz"
    return "none"


def iter_units(fh: BinaryIO, path: Path) -> Iterator[Unit]:
    """Yield the units of an open file; raise :class:`Truncated` at an incomplete tail.

    Corrupt data raises :class:`ArchiveError` naming ``path`` and the byte offset.
    """
    head = fh.read(4)
    fh.seek(0)
    fmt = detect_format(head)
    if fmt == "zst":
        yield from _zstd_units(fh, path)
    elif fmt == "gz":
        yield from _gzip_units(fh, path)
    elif fmt == "none":
        yield from _plain_units(fh, path)


def read_unit(fh: BinaryIO, path: Path, offset: int) -> Unit:
    """Read the single unit starting at ``offset`` (random access)."""
    fh.seek(0)
    head = fh.read(4)
    fmt = detect_format(head)
    dictionary = None
    if fmt == "zst" and int.from_bytes(head, "little") == DICT_MAGIC and offset > 0:
        dictionary = _read_skippable_dict(fh, path)
    fh.seek(offset)
    try:
        if fmt == "zst":
            units = _zstd_units(fh, path, start=offset, dictionary=dictionary)
        elif fmt == "gz":
            units = _gzip_units(fh, path, start=offset)
        elif fmt == "none":
            units = _plain_units(fh, path, start=offset)
        else:
            raise ArchiveError(f"{path}: the archive is empty; there is no record at byte {offset}")
        return next(iter(units))
    except StopIteration:
        raise ArchiveError(f"{path}: no record at byte {offset} (past the end of the archive)") from None
    except Truncated:
        raise ArchiveError(f"{path}: the record at byte {offset} is cut off at the end of the file") from None


# -- zstd --------------------------------------------------------------------


def _read_exact(fh: BinaryIO, n: int, unit_offset: int) -> bytes:
    if n > max_record_bytes():
        raise InputLimitError(f"{getattr(fh, 'name', 'the archive')}: the unit at byte {unit_offset} declares "
                              f"{n} bytes, over the record limit of {human(max_record_bytes())} "
                              "(EGO2WEB_MAX_RECORD_BYTES)")
    data = fh.read(n)
    if len(data) < n:
        raise Truncated(unit_offset)
    return data


def _load_dict(content: bytes, path: Path) -> zstandard.ZstdCompressionDict:
    try:
        if int.from_bytes(content[:4], "little") == ZSTD_MAGIC:  # the dictionary itself may be compressed
            content = zstandard.ZstdDecompressor().decompressobj().decompress(content)
        return zstandard.ZstdCompressionDict(content)
    except zstandard.ZstdError as e:
        raise ArchiveError(f"{path}: the zstd dictionary frame at byte 0 is corrupt ({e})") from None


_DICTS: dict[tuple[str, int, int], zstandard.ZstdCompressionDict] = {}


def _read_skippable_dict(fh: BinaryIO, path: Path) -> zstandard.ZstdCompressionDict:
    """The leading dictionary of a file, loaded once per file version (random reads reuse it)."""
    try:
        st = os.fstat(fh.fileno())
        key: tuple[str, int, int] | None = (str(path), st.st_size, st.st_mtime_ns)
    except (OSError, AttributeError, ValueError):  # not a real file
        key = None
    if key is not None and key in _DICTS:
        return _DICTS[key]
    fh.seek(4)
    size = int.from_bytes(_read_exact(fh, 4, 0), "little")
    dictionary = _load_dict(_read_exact(fh, size, 0), path)
    if key is not None:
        if len(_DICTS) >= 64:
            _DICTS.clear()
        _DICTS[key] = dictionary
    return dictionary


def _zstd_units(
    fh: BinaryIO,
    path: Path,
    start: int = 0,
    dictionary: zstandard.ZstdCompressionDict | None = None,
) -> Iterator[Unit]:
    offset = start
    dctx = zstandard.ZstdDecompressor(dict_data=dictionary) if dictionary else zstandard.ZstdDecompressor()
    while True:
        head = fh.read(4)
        if not head:
            return
        if len(head) < 4:
            raise Truncated(offset)
        magic = int.from_bytes(head, "little")
        if SKIPPABLE_MIN <= magic <= SKIPPABLE_MAX:
            size = int.from_bytes(_read_exact(fh, 4, offset), "little")
            content = _read_exact(fh, size, offset)
            if magic == DICT_MAGIC:
                dctx = zstandard.ZstdDecompressor(dict_data=_load_dict(content, path))
            offset += 8 + size
            continue
        if magic != ZSTD_MAGIC:
            raise ArchiveError(f"{path}: corrupt archive: no zstd frame at byte {offset}")
        frame = bytearray(head)
        frame += _frame_rest(fh, offset, path)
        data = _inflate_zstd(dctx, bytes(frame), path, offset)
        yield Unit(offset, len(frame), data)
        offset += len(frame)


class _Declared:
    """The size of the record a unit declares (its WARC header and Content-Length), from its first bytes."""

    def __init__(self) -> None:
        self.size: int | None = None
        self._head = b""
        self._looking = True

    def feed(self, chunk: bytes) -> None:
        if not self._looking:
            return
        self._head += chunk[:_MAX_HEAD]
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            self._looking = len(self._head) < _MAX_HEAD
            return
        self._looking = False
        for line in self._head[:end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                self.size = end + 4 + int(value.strip()) + 4
        self._head = b""

    def check(self, where: str, inflated: int, compressed: int) -> None:
        """The record cap always; the ratio only past the declared record (see the module docstring)."""
        if self.size is not None and inflated <= self.size:
            check_inflation(where, inflated, inflated)
        else:
            check_inflation(where, inflated, compressed)


_MAX_HEAD = 1 << 20


def _inflate_zstd(dctx: zstandard.ZstdDecompressor, frame: bytes, path: Path, offset: int) -> bytes:
    """One frame inflated in steps, stopped at the record cap or the inflation ratio."""
    parts: list[bytes] = []
    total = 0
    declared = _Declared()
    try:
        with dctx.stream_reader(frame, read_across_frames=False) as reader:
            while True:
                chunk = reader.read(_CHUNK)
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                declared.feed(chunk)
                declared.check(f"{path}: the zstd frame at byte {offset}", total, len(frame))
    except zstandard.ZstdError as e:
        raise ArchiveError(f"{path}: corrupt zstd frame at byte {offset} ({e})") from None
    return b"".join(parts)


def _frame_rest(fh: BinaryIO, offset: int, path: Path) -> bytes:
    """Read a zstd frame after its magic: header, blocks and optional checksum."""
    out = bytearray(_read_exact(fh, 1, offset))
    descriptor = out[0]
    fcs_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    checksum, dict_flag = (descriptor >> 2) & 1, descriptor & 3
    if descriptor & 0x08:
        raise ArchiveError(f"{path}: corrupt zstd frame header at byte {offset}")
    header_rest = (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    header_rest += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    out += _read_exact(fh, header_rest, offset)
    while True:
        block_header = _read_exact(fh, 3, offset)
        out += block_header
        value = int.from_bytes(block_header, "little")
        last, block_type, size = value & 1, (value >> 1) & 3, value >> 3
        if block_type == 3:
            raise ArchiveError(f"{path}: corrupt zstd block in the frame at byte {offset}")
        out += _read_exact(fh, 1 if block_type == 1 else size, offset)
        if len(out) > max_record_bytes():
            raise InputLimitError(f"{path}: the zstd frame at byte {offset} is over the record limit of "
                                  f"{human(max_record_bytes())} (EGO2WEB_MAX_RECORD_BYTES)")
        if last:
            break
    if checksum:
        out += _read_exact(fh, 4, offset)
    return bytes(out)


# -- gzip --------------------------------------------------------------------


def _gzip_units(fh: BinaryIO, path: Path, start: int = 0) -> Iterator[Unit]:
    offset = start
    buf = b""
    while True:
        if not buf:
            buf = fh.read(_CHUNK)
            if not buf:
                return
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        declared = _Declared()
        parts: list[bytes] = []
        total = 0
        fed = len(buf)  # compressed bytes handed to this member so far
        data = buf
        while True:  # inflate at most _CHUNK at a time, checking the limits after each step
            try:
                out = d.decompress(data, _CHUNK)
            except zlib.error as e:
                raise ArchiveError(f"{path}: corrupt gzip member at byte {offset} ({e})") from None
            parts.append(out)
            total += len(out)
            declared.feed(out)
            declared.check(f"{path}: the gzip member at byte {offset}", total, fed)
            if d.eof:
                buf = d.unused_data
                consumed = fed - len(buf)
                break
            if d.unconsumed_tail:
                data = d.unconsumed_tail
            elif len(out) == _CHUNK:
                data = b""  # output may still be pending inside zlib
            else:
                data = fh.read(_CHUNK)
                if not data:
                    raise Truncated(offset)
                fed += len(data)
        yield Unit(offset, consumed, b"".join(parts))
        offset += consumed


# -- plain WARC --------------------------------------------------------------

_MAX_LINE = 1 << 20


def _line(fh: BinaryIO, path: Path, offset: int) -> bytes:
    """One header line, refused past 1 MiB (a file without line ends is not read whole)."""
    line = fh.readline(_MAX_LINE + 1)
    if len(line) > _MAX_LINE:
        raise InputLimitError(f"{path}: a WARC header line in the record at byte {offset} is over the "
                              f"limit of {human(_MAX_LINE)}")
    return line


def _plain_units(fh: BinaryIO, path: Path, start: int = 0) -> Iterator[Unit]:
    offset = start
    pending = b""
    while True:
        # skip blank lines between records
        line = pending or _line(fh, path, offset)
        pending = b""
        while line and not line.strip():
            offset += len(line)
            line = _line(fh, path, offset)
        if not line:
            return
        if not line.startswith(b"WARC/"):
            raise ArchiveError(f"{path}: corrupt archive: no WARC record at byte {offset}")
        parts = [line]
        length: int | None = None
        while True:
            line = _line(fh, path, offset)
            if not line.endswith(b"\n"):
                raise Truncated(offset)
            parts.append(line)
            if not line.strip():
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise ArchiveError(f"{path}: bad Content-Length in the record at byte {offset}") from None
        if length is None:
            raise ArchiveError(f"{path}: the record at byte {offset} has no Content-Length")
        parts.append(_read_exact(fh, length, offset))
        # consume the record's closing CRLF CRLF (tolerate LF-only or missing at EOF)
        tail = b""
        while True:
            line = _line(fh, path, offset)
            if line and not line.strip():
                tail += line
                continue
            pending = line
            break
        data = b"".join(parts) + tail
        yield Unit(offset, len(data), data)
        offset += len(data)
