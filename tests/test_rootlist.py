"""A run's start lists its snapshots root once and finds every task's newest snapshot from that listing
(snapshots/rootlist.py), with what a lookup per task finds: the same snapshot (ties too), unfinished and
broken snapshots skipped alike, the same error for a task with none. Real folders; on s3:// a real moto
server on 127.0.0.1, whose own request log counts the listings."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from ego2web_replay.models import ReplayConfig, RunSettings
from ego2web_replay.runner.episode import find_snapshot
from ego2web_replay.runner.run import pin_share_sources, pin_snapshots
from ego2web_replay.snapshots import objstore
from ego2web_replay.snapshots.location import name_of, upload_snapshot
from ego2web_replay.snapshots.objcache import ObjectCache
from ego2web_replay.snapshots.rootlist import RootListing
from ego2web_replay.snapshots.snapshot import SnapshotWriter, list_snapshots

DAY1, DAY2, DAY5 = datetime(2026, 1, 1), datetime(2026, 1, 2), datetime(2026, 1, 5)
RUN_TASKS = ["tie", "plain", "broken", "empty", "absent", "unfinished"]  # not in name order


def _snapshot(root: Path, task: str, snapshot_id: str, at: datetime, *, finish: bool = True) -> Path:
    sw = SnapshotWriter(root, task, snapshot_id=snapshot_id, clock=lambda: at)
    sw.writer.write_exchange(url=f"http://{task}.example/", method="GET", request_headers=[("Accept", "*/*")],
                             request_body=b"", status=200, reason="OK",
                             response_headers=[("Content-Type", "text/plain")], response_body=task.encode(), date=at)
    if finish:
        sw.finalize()
    else:
        sw.writer.close()  # an archive and no manifest: a recording that did not finish
    return sw.path


def _root(root: Path) -> Path:
    """Tasks whose newest is decided by the creation time, then the id's numeric suffix (ties), with
    unfinished, broken and empty snapshot folders, and a task ("other") that no run asks for."""
    _snapshot(root, "plain", "20260101T000000Z", DAY1)
    _snapshot(root, "plain", "20260102T000000Z", DAY2)
    _snapshot(root, "plain", "20260109T000000Z", DAY5, finish=False)  # the newest id, unfinished
    for sid in ("20260105T000000Z", "20260105T000000Z-2", "20260105T000000Z-10", "20260105T000000Zb"):
        _snapshot(root, "tie", sid, DAY5)  # one creation time: -10 wins over -2 (a number, not text)
    broken = _snapshot(root, "broken", "20260105T000000Z", DAY5)
    (broken / "manifest.json").write_text("{not json", "utf-8")
    _snapshot(root, "unfinished", "20260101T000000Z", DAY1, finish=False)
    (root / "empty" / "20260101T000000Z").mkdir(parents=True)
    _snapshot(root, "other", "20260101T000000Z", DAY1)
    return root


def _per_task(root: Path | str, tasks: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """What a lookup per task (:func:`find_snapshot`, one at a time) finds."""
    pins, errors = {}, {}
    for task in tasks:
        try:
            pins[task] = name_of(find_snapshot(root, task, None))
        except Exception as e:  # noqa: BLE001 - its message is compared
            errors[task] = str(e)
    return pins, errors


def _settings(root: Path | str, share: bool = False) -> RunSettings:
    return RunSettings(mode="frozen", snapshots_root=str(root),
                       replay=ReplayConfig(share_window_s=3600.0 if share else None))


@pytest.fixture()
def scandirs(monkeypatch):
    """Every directory listing made (os.scandir, which Path.iterdir uses), by path."""
    seen: list[str] = []
    real = os.scandir

    def counting(path=".") -> object:  # noqa: ANN001
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    return seen


def test_a_local_start_lists_the_root_once_and_pins_what_per_task_lookups_find(tmp_path, scandirs):
    root = _root(tmp_path / "snapshots")
    want = _per_task(root, RUN_TASKS)
    assert want[0] == {"tie": "20260105T000000Z-10", "plain": "20260102T000000Z"}
    assert set(want[1]) == {"broken", "empty", "absent", "unfinished"}

    scandirs.clear()
    listing = RootListing(root)
    got = pin_snapshots(_settings(root, share=True), RUN_TASKS, listing=listing)
    assert got == want and list(got[0]) == ["tie", "plain"] and list(got[1]) == ["broken", "empty", "absent",
                                                                               "unfinished"]
    assert scandirs.count(str(root)) == 1
    assert not any(p.startswith(str(root / "other")) for p in scandirs)  # a task no run asks for: not read
    sources = pin_share_sources(_settings(root, share=True), got[0], listing)

    # the shared captures' sources from that same listing: every task's folder read once in all
    assert scandirs.count(str(root)) == 1
    assert all(scandirs.count(p) == 1 for p in scandirs), sorted(scandirs)
    expected: dict[str, str] = {}
    for info in list_snapshots(root):  # as pin_share_sources read the root before
        if info.manifest is not None and info.task_id not in expected:
            expected[info.task_id] = info.snapshot_id
    assert sources == expected == {"other": "20260101T000000Z", "plain": "20260102T000000Z",
                                   "tie": "20260105T000000Z-10"}


def test_a_local_lookup_reads_only_its_own_task(tmp_path, scandirs):
    """find_snapshot (an episode without a pin, ``serve``) no longer lists every task of the root."""
    root = _root(tmp_path / "snapshots")
    scandirs.clear()
    assert name_of(find_snapshot(root, "plain", None)) == "20260102T000000Z"
    assert str(root) not in scandirs and all(p.startswith(str(root / "plain")) for p in scandirs)


def test_a_missing_root_gives_each_task_the_per_task_error(tmp_path):
    root = tmp_path / "nowhere"
    assert pin_snapshots(_settings(root), ["a", "b"]) == _per_task(root, ["a", "b"])
    assert pin_share_sources(_settings(root, share=True), {}) is None


def _listings(s3_server) -> int:  # noqa: ANN001
    return sum(1 for method, _, query, _ in s3_server.requests() if method == "GET" and "list-type" in query)


@pytest.fixture()
def s3_root(s3, tmp_path):
    """The same tasks uploaded under ``<bucket>/snaps``."""
    local = _root(tmp_path / "local")
    root = f"{s3}/snaps"
    for task_dir in sorted(local.iterdir()):
        for snap in sorted(task_dir.iterdir()):
            if (snap / "manifest.json").exists():
                upload_snapshot(snap, f"{root}/{task_dir.name}/{snap.name}")
            else:  # an upload that did not finish: its files but no manifest
                store = objstore.ObjectStorage(f"{root}/{task_dir.name}/{snap.name}")
                for f in snap.iterdir():
                    store.put_file(f.name, f)
    return root


@pytest.mark.slow
def test_an_s3_start_lists_the_root_once_and_reads_no_manifest_twice(s3_root, s3_server, tmp_path):
    root = s3_root
    want = _per_task(root, RUN_TASKS)
    assert want[0] == {"tie": "20260105T000000Z-10", "plain": "20260102T000000Z"}

    s3_server.record_requests()
    cold = RootListing(root, ObjectCache(tmp_path / "cache"))
    assert pin_snapshots(_settings(root), RUN_TASKS, listing=cold) == want
    seen = s3_server.requests()
    assert _listings(s3_server) == 1
    bucket = "/" + root.removeprefix("s3://").split("/")[0]
    assert [path for method, path, _, _ in seen if path == bucket and method == "HEAD"] == [bucket]  # checked once
    gets = sorted(path for path, _ in s3_server.object_gets())
    manifests = [p for p in gets if p.endswith("/manifest.json")]
    assert len(manifests) == len(set(manifests)) == 2 + 4 + 1  # plain's two, tie's four, broken's one

    # warm: the bucket and one listing, nothing else (each manifest's ETag came with the listing)
    s3_server.record_requests()
    warm = RootListing(root, ObjectCache(tmp_path / "cache"))
    assert pin_snapshots(_settings(root), RUN_TASKS, listing=warm) == want
    assert _listings(s3_server) == 1 and s3_server.object_gets() == []
    assert len(s3_server.requests()) == 2


@pytest.mark.slow
def test_an_s3_listing_over_many_pages_is_dropped_for_per_task_lookups_and_finds_the_same(
        s3_root, s3_server, tmp_path, monkeypatch):
    """Pages of 2 keys: for as many lookups as it has pages the root's listing is used; for two it is
    dropped after two pages and each task's own folder is listed; every answer is the per-task one."""
    root = s3_root
    monkeypatch.setattr(objstore, "LIST_PAGE_KEYS", 2)
    keys = objstore.ObjectStorage(root).list_tree("")
    assert keys is not None and len(keys) > 2 * 2
    pages = -(-len(keys) // 2)

    want = _per_task(root, RUN_TASKS)
    s3_server.record_requests()
    listing = RootListing(root, ObjectCache(tmp_path / "c1"))
    listing.prepare(pages)  # as many lookups to answer as the listing has pages: it is used
    assert pin_snapshots(_settings(root), RUN_TASKS, listing=listing) == want
    assert _listings(s3_server) == pages

    two = ["tie", "absent"]
    s3_server.record_requests()
    want = _per_task(root, two)
    per_task = _listings(s3_server)  # each task's folder (an absent one's parent too: s3fs's check)
    s3_server.record_requests()
    assert pin_snapshots(_settings(root), two, listing=RootListing(root, ObjectCache(tmp_path / "c2"))) == want
    assert _listings(s3_server) == 2 + per_task  # two pages, dropped; then the per-task listings
