"""Replay's canonical keys are built with the index (finalize, `snapshot index`), so a first mapped open builds nothing."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from ego2web_replay.replay import mapped
from ego2web_replay.replay.mapped import MappedMatchIndex, canonical_file, install_index_hook
from ego2web_replay.replay.matching import MatchIndex
from ego2web_replay.replay.rules import default_rules
from ego2web_replay.replay.session import load_captures
from ego2web_replay.snapshots import index_map
from ego2web_replay.snapshots.index_map import map_file, open_index_map
from ego2web_replay.snapshots.snapshot import Snapshot, SnapshotWriter

COUNT = 2100  # finalize builds the mapped form from 2,000 lines on


def _record(root: Path, name: str) -> Path:
    sw = SnapshotWriter(root, name)
    for i in range(COUNT):
        url = f"https://shop.example/item/{i % 700}?utm_source=s{i}&id={i % 5}"
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "text/plain")], response_body=f"item {i}".encode(),
                                 date=datetime(2026, 1, 1, i // 3600, i // 60 % 60, i % 60))
    sw.finalize()
    return sw.path


def _stamps(*paths: Path) -> list[int]:
    return [p.stat().st_mtime_ns for p in paths]


@pytest.fixture
def recorded(tmp_path_factory, data_home):
    install_index_hook()  # what importing ego2web_replay.replay does; explicit here
    return Snapshot.open(_record(tmp_path_factory.mktemp("prebuild"), "fresh"))


def test_finalize_builds_the_keys_and_the_first_open_builds_nothing(recorded):
    index = recorded.index_path
    target = map_file(index)
    assert target is not None and target.is_file()
    imap = open_index_map(index, build=False)
    keys = canonical_file(imap, default_rules())
    imap.close()
    assert keys.is_file()  # on disk before any replay opened the snapshot
    before, stamps = mapped.BUILDS[0], _stamps(target, keys)
    index_ = MappedMatchIndex.open([index])
    assert mapped.BUILDS[0] == before and _stamps(target, keys) == stamps
    memory = MatchIndex(load_captures([recorded]))
    assert len(index_) == len(memory) == COUNT
    for method, url in (("GET", "https://shop.example/item/3?utm_source=s3&id=3"),  # exact
                        ("GET", "https://shop.example/item/5?id=0&utm_source=other"),  # canonical
                        ("GET", "https://shop.example/item/5?id=4"),  # miss
                        ("HEAD", "https://shop.example/item/9?utm_source=s9&id=4")):
        for _ in range(4):  # repeated requests walk the captures in order
            want, got = memory.match(method, url), index_.match(method, url)
            assert got == want, (method, url)
    assert {memory.match("GET", "https://shop.example/item/6?id=1&utm_source=x").outcome} == {"canonical"}
    index_.close()


def test_without_a_hook_the_first_open_builds_them(tmp_path, data_home, monkeypatch):
    monkeypatch.setattr(index_map, "_HOOKS", {})  # a process that never imported replay (older snapshots alike)
    snap = Snapshot.open(_record(tmp_path, "plain"))
    imap = open_index_map(snap.index_path, build=False)
    keys = canonical_file(imap, default_rules())
    assert not keys.exists()
    before = mapped.BUILDS[0]
    opened = MappedMatchIndex([imap])
    assert mapped.BUILDS[0] == before + 1 and keys.is_file()
    assert opened.match("GET", "https://shop.example/item/5?id=0&utm_source=other").outcome == "canonical"
    opened.close()


def test_snapshot_index_command_builds_the_keys(recorded, monkeypatch):
    from ego2web_replay.cli import main

    monkeypatch.setattr(index_map, "_HOOKS", {})  # only the command's own wiring
    folder = recorded.path
    (folder / "index.cdxj").touch()  # a new index version: new map, new keys
    assert main(["snapshot", "index", str(folder)]) == 0
    imap = open_index_map(folder / "index.cdxj", build=False)
    assert canonical_file(imap, default_rules()).is_file()
    before = mapped.BUILDS[0]
    MappedMatchIndex([imap]).close()
    assert mapped.BUILDS[0] == before
