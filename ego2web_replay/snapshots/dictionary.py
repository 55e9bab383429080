"""zstd dictionaries for WARC archives, in the IIPC warc-zstd layout.

A ``.warc.zst`` file may begin with a skippable frame (magic ``0x184D2A5D``,
a 4-byte little-endian size, then the dictionary, itself zstd-compressed or
raw); every following frame holds exactly one record, with its content size
and checksum, compressed with that dictionary. Readers that implement the
layout (ours: :mod:`.framing`; FastWARC, jwarc) find the dictionary in the
first frame and need nothing else.

A dictionary is trained per suite on the uncompressed records of its
snapshots (:func:`train_dictionary`); HTTP and WARC heads and the small text
payloads of one site repeat across records, which is where it pays.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import zstandard

from ..errors import ArchiveError
from .framing import DICT_MAGIC

__all__ = ["RecordFrameWriter", "train_dictionary", "dictionary_frame", "MIN_SAMPLES"]

MIN_SAMPLES = 16
_SAMPLE_CAP = 64 * 1024


def train_dictionary(samples: Iterable[bytes], *, size: int | None = None,
                     level: int = 3) -> zstandard.ZstdCompressionDict | None:
    """Train a dictionary on record bytes; ``None`` when there is too little to learn from.

    ``size`` defaults to about 1/50 of the sample bytes, between 4 KB and 110 KB
    (zstd's own rule of thumb is a dictionary ~100 times smaller than the data).
    Samples are cut to their first 64 KB: heads repeat, large bodies do not.
    """
    chunks = [s[:_SAMPLE_CAP] for s in samples if s]
    total = sum(len(c) for c in chunks)
    if len(chunks) < MIN_SAMPLES or total < 8 * 1024:
        return None
    size = size or max(4 * 1024, min(110 * 1024, total // 50))
    try:
        return zstandard.train_dictionary(size, chunks, level=level)  # type: ignore[arg-type]
    except zstandard.ZstdError:
        return None


def dictionary_frame(dictionary: zstandard.ZstdCompressionDict) -> bytes:
    """The skippable frame that opens a warc-zstd file: magic, size, the zstd-compressed dictionary."""
    content = zstandard.ZstdCompressor(level=19, write_checksum=True,
                                       write_content_size=True).compress(dictionary.as_bytes())
    return DICT_MAGIC.to_bytes(4, "little") + len(content).to_bytes(4, "little") + content


class RecordFrameWriter:
    """Write a ``.warc.zst`` one record per frame, optionally with a leading dictionary frame."""

    def __init__(self, path: Path, *, dictionary: zstandard.ZstdCompressionDict | None = None,
                 level: int = 3) -> None:
        self.path = Path(path)
        self._cctx = zstandard.ZstdCompressor(level=level, dict_data=dictionary, write_checksum=True,
                                              write_content_size=True, write_dict_id=dictionary is not None)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as e:
            raise ArchiveError(f"{self.path}: cannot write ({e.strerror})") from None
        if dictionary is not None:
            self._fh.write(dictionary_frame(dictionary))
        self.records = 0

    def write(self, record: bytes) -> tuple[int, int]:
        """Append one serialised record as its own frame; return its (offset, length)."""
        offset = self._fh.tell()
        frame = self._cctx.compress(record)
        self._fh.write(frame)
        self.records += 1
        return offset, len(frame)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> RecordFrameWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
