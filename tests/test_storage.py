"""The snapshot storage interface: the local folder, and a snapshot read whole from another storage."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from ego2web_replay.errors import SnapshotError
from ego2web_replay.snapshots import Snapshot, SnapshotWriter, list_snapshots
from ego2web_replay.snapshots.storage import LocalStorage, Storage, SubStorage, copy_snapshot, walk
from ego2web_replay.testing.storage import MemoryStorage

BIG = os.urandom(300_000)  # incompressible, so the archive is large and one small record is a small range


def _snapshot(root: Path) -> Path:
    w = SnapshotWriter(root, "shop", clock=lambda: datetime(2026, 11, 30, 7, 15))
    w.add_page("http://127.0.0.1:8000/")
    w.writer.write_exchange(url="http://127.0.0.1:8000/", method="GET", request_headers=[], request_body=b"",
                            status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                            response_body=b"<h1>home</h1>")
    w.writer.write_exchange(url="http://127.0.0.1:8000/big.bin", method="GET", request_headers=[],
                            request_body=b"", status=200, reason="OK",
                            response_headers=[("Content-Type", "application/octet-stream")], response_body=BIG)
    (w.path / "screenshots" / "step-000.png").write_bytes(b"\x89PNG not really")
    w.add_screenshot("screenshots/step-000.png")
    w.finalize()
    return w.path


def test_local_storage_reads_ranges_lists_and_writes_atomically(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path / "s")
    assert isinstance(store, Storage) and isinstance(MemoryStorage(), Storage)
    store.write_atomic("a/b/c.txt", b"0123456789")
    store.write_atomic("a/b/c.txt", b"abcdefghij")  # replaced whole, no temporary file left beside it
    store.write_atomic("top.json", b"{}")
    assert store.read("a/b/c.txt", 2, 3) == b"cde" and store.read("a/b/c.txt", 7) == b"hij"
    assert store.list() == ["a/", "top.json"] and store.list("a/b") == ["a/b/c.txt"]
    assert list(walk(store)) == ["a/b/c.txt", "top.json"]
    assert store.exists("top.json") and not store.exists("a/b") and not store.exists("nope")
    with pytest.raises(FileNotFoundError):
        store.read("nope")
    with pytest.raises(ValueError):
        store.path("../escape")


def test_a_snapshot_reads_the_same_from_another_storage(tmp_path: Path) -> None:
    folder = _snapshot(tmp_path)
    local = Snapshot.open(folder)
    mem = MemoryStorage()
    copied = copy_snapshot(LocalStorage(folder), mem)
    assert copied[-1] == "manifest.json" and "archive.warc.zst" in copied and "screenshots/step-000.png" in copied
    remote = Snapshot.open(Path("memory/shop") / folder.name, storage=mem)
    assert remote.manifest == local.manifest and remote.entries() == local.entries()
    for entry in local.entries():
        a, b = local.resolve(entry), remote.resolve(entry)
        assert (b.url, b.http_status, b.payload) == (a.url, a.http_status, a.payload)
    assert [r.rec_type for r in remote.records()] == [r.rec_type for r in local.records()]
    # a record is read by its byte range, not by reading the archive
    home = next(e for e in local.entries() if e.url.endswith("/"))
    mem.bytes_read = 0
    assert remote.record(home).payload == b"<h1>home</h1>"
    assert 0 < mem.bytes_read < len(mem.files["archive.warc.zst"]) // 10


def test_storage_errors_name_the_snapshot(tmp_path: Path) -> None:
    folder = _snapshot(tmp_path)
    mem = MemoryStorage()
    copy_snapshot(LocalStorage(folder), mem)
    del mem.files["manifest.json"]
    with pytest.raises(SnapshotError, match=r"memory/x: not a snapshot, manifest.json is missing \(the recording "
                                            r"did not finish\?\)"):
        Snapshot.open(Path("memory/x"), storage=mem)
    mem.files["manifest.json"] = b"{not json"
    with pytest.raises(SnapshotError, match=r"memory/x/manifest.json: not a valid snapshot manifest"):
        Snapshot.open(Path("memory/x"), storage=mem)
    copy_snapshot(LocalStorage(folder), mem)
    del mem.files["archive.warc.zst"]
    with pytest.raises(SnapshotError, match="the archive archive.warc.zst is missing"):
        Snapshot.open(Path("memory/x"), storage=mem)
    with pytest.raises(FileNotFoundError, match="only a finished snapshot"):
        copy_snapshot(MemoryStorage(), mem)


def test_a_snapshots_root_is_listed_and_opened_through_its_storage(tmp_path: Path) -> None:
    folder = _snapshot(tmp_path)
    unfinished = SnapshotWriter(tmp_path, "shop", clock=lambda: datetime(2026, 12, 1))  # killed: no manifest
    unfinished.writer.close()
    mem = MemoryStorage()
    for name in walk(LocalStorage(tmp_path)):
        mem.write_atomic(name, LocalStorage(tmp_path).read(name))
    local, remote = list_snapshots(tmp_path), list_snapshots(Path("memory"), storage=mem)
    assert [(i.task_id, i.snapshot_id, i.complete) for i in remote] == \
        [(i.task_id, i.snapshot_id, i.complete) for i in local] == \
        [("shop", unfinished.snapshot_id, False), ("shop", folder.name, True)]
    assert remote[1].manifest == local[1].manifest and remote[1].path == Path("memory/shop") / folder.name
    snap = Snapshot.open(remote[1].path, storage=SubStorage(mem, f"shop/{folder.name}"))
    assert [e.url for e in snap.entries()] == [e.url for e in Snapshot.open(folder).entries()]
