"""The recorder's spool (recorder/spool.py): a streamed body's copy, hashed as it comes."""

from __future__ import annotations

import hashlib
import io
import os
import random
from pathlib import Path

from warcio.utils import Digester

from ego2web_replay.recorder.spool import HASH_STEP, Spool
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.warc import ArchiveWriter
from ego2web_replay.snapshots.warcstream import STREAM_MIN

PIECE = 64 * 1024


def _fill(spool: Spool, data: bytes) -> None:
    for at in range(0, len(data), PIECE):
        spool.write(data[at:at + PIECE])


def _expected(data: bytes) -> tuple[str, bytes]:
    sha1 = Digester("sha1")
    sha1.update(data)
    return str(sha1), hashlib.sha256(data).digest()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_large_body_is_hashed_while_it_comes_in_memory_and_on_disk():
    """Bodies past STREAM_MIN, kept in memory and moved to the file mid-way: their digests are those
    of the bytes, and all but the last step was hashed before the body was handed over."""
    rnd = random.Random(7)
    for size, memory in ((3 * HASH_STEP + 12345, 8 << 20), (5 * HASH_STEP + 1, 2 << 20)):
        data = rnd.randbytes(size)
        spool = Spool(memory)
        _fill(spool, data)
        assert spool.on_disk == (size > memory)
        assert spool._last is not None
        spool._last.result(timeout=30)  # the steps handed over while the body came
        assert spool._hashes is not None and spool._hashes.done >= size - HASH_STEP
        view = spool.handover()
        assert view.payload_digests() == _expected(data)
        assert view.read() == data  # the writer's view is untouched by the hashing
        view.close()
        spool.close()


def test_a_small_body_is_left_to_the_writer_and_a_cut_one_leaves_no_descriptor():
    small = Spool(1 << 20)
    _fill(small, b"x" * (STREAM_MIN - 1))
    view = small.handover()
    assert view.payload_digests() is None and small._hashes is None
    view.close()
    small.close()

    before = _open_fds()
    cut = Spool(1 << 20)  # on disk, hashing, then closed without a record (a body cut mid-way)
    _fill(cut, random.Random(3).randbytes(3 * HASH_STEP))
    cut.close()
    cut_hashes = cut._hashes
    assert cut_hashes is not None
    from ego2web_replay.recorder import spool as spool_module
    assert spool_module._hasher is not None
    spool_module._hasher.submit(lambda: None).result(timeout=30)  # everything handed to the hasher done
    assert cut_hashes.fd is None and _open_fds() == before


class _Counted(io.BytesIO):
    """A payload file that says its digests, counting how often it is asked."""

    def __init__(self, data: bytes, digests: tuple[str, bytes]) -> None:
        super().__init__(data)
        self.digests, self.asked = digests, 0

    def payload_digests(self) -> tuple[str, bytes]:
        self.asked += 1
        return self.digests


def _write(path: Path, bodies: list[io.BytesIO], chunked: bool = False) -> None:
    ids = iter(range(100))
    with ArchiveWriter(path, compression="zst", clock=lambda: __import__("datetime").datetime(2026, 1, 1),
                       id_factory=lambda: f"<urn:uuid:00000000-0000-0000-0000-{next(ids):012d}>",
                       dedup_min_size=256) as writer:
        for i, body in enumerate(bodies):
            headers = [("Transfer-Encoding", "chunked")] if chunked else [("Content-Type", "video/mp4")]
            writer.write_exchange(url=f"http://127.0.0.1:1/v{i}", method="GET", request_headers=[],
                                  request_body=b"", status=200, reason="OK", response_headers=headers,
                                  response_body=body)


def test_the_writer_takes_digests_taken_as_the_body_came(tmp_path):
    """A body with its digests known is written into the same bytes as one hashed by the writer (a
    response, then a revisit of the same payload), the digests asked for; a chunked body, whose
    payload digest covers its framing, is hashed by the writer."""
    data = random.Random(5).randbytes(STREAM_MIN + 777)
    known = [_Counted(data, _expected(data)) for _ in range(2)]
    _write(tmp_path / "k" / "a.warc.zst", list(known))
    _write(tmp_path / "p" / "a.warc.zst", [io.BytesIO(data), io.BytesIO(data)])
    assert (tmp_path / "k" / "a.warc.zst").read_bytes() == (tmp_path / "p" / "a.warc.zst").read_bytes()
    assert [k.asked for k in known] == [1, 1]
    types = [r.rec_type for r in iter_records(tmp_path / "k" / "a.warc.zst")]
    assert types == ["warcinfo", "response", "request", "revisit", "request"]

    wrong = _Counted(data, ("sha1:" + "A" * 32, b"\0" * 32))  # chunked: these would be wrong, never used
    _write(tmp_path / "c" / "a.warc.zst", [wrong], chunked=True)
    _write(tmp_path / "cp" / "a.warc.zst", [io.BytesIO(data)], chunked=True)
    assert (tmp_path / "c" / "a.warc.zst").read_bytes() == (tmp_path / "cp" / "a.warc.zst").read_bytes()
