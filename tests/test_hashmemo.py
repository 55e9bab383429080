"""Replay's quick sha256 check remembers a file's digest only while the file provably did not change."""

from __future__ import annotations

import hashlib
import json
import time

from ego2web_replay.snapshots import hashmemo
from ego2web_replay.snapshots.hashmemo import remembered_sha256


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _forge(path, digest: str) -> None:
    memo = hashmemo._memo_file(path)
    data = json.loads(memo.read_text())
    data["sha256"] = digest
    memo.write_text(json.dumps(data))


def test_settled_file_is_hashed_once_and_any_change_rehashes(tmp_path, data_home, monkeypatch):
    monkeypatch.setattr(hashmemo, "SETTLE_SECONDS", 0.0)
    f = tmp_path / "archive.warc.zst"
    f.write_bytes(b"a" * 5000)
    assert remembered_sha256(f) == _sha(b"a" * 5000)
    _forge(f, "0" * 64)  # proves the next answer comes from the memo, not from reading the file
    assert remembered_sha256(f) == "0" * 64
    time.sleep(0.05)  # past the file clock's tick
    with open(f, "r+b") as fh:  # same size, same inode, other bytes
        fh.write(b"b")
    assert remembered_sha256(f) == _sha(b"b" + b"a" * 4999)
    st = f.stat()
    _forge(f, "1" * 64)
    time.sleep(0.05)
    f.chmod(0o600)  # metadata only: the ctime moves, so the memo no longer applies
    assert f.stat().st_mtime_ns == st.st_mtime_ns and remembered_sha256(f) == _sha(b"b" + b"a" * 4999)


def test_a_file_changed_just_before_hashing_is_not_trusted(tmp_path, data_home):
    f = tmp_path / "index.cdxj"
    f.write_bytes(b"line\n")
    assert remembered_sha256(f) == _sha(b"line\n")
    _forge(f, "2" * 64)
    assert remembered_sha256(f) == _sha(b"line\n")  # written within SETTLE_SECONDS of the hashing: read again
