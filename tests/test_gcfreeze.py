"""A running replay keeps its match index out of the cyclic collector (no full-collection pauses)."""

from __future__ import annotations

import gc
import socket
import urllib.request
from datetime import datetime

import pytest

from ego2web_replay.errors import ProxyError
from ego2web_replay.replay import gcfreeze
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter


def _snapshot(root):
    sw = SnapshotWriter(root, "frozen")
    for i in range(50):
        sw.writer.write_exchange(url=f"http://api.example/item/{i}?utm_source=s{i}", method="GET", request_headers=[],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "text/plain")], response_body=f"item {i}".encode(),
                                 date=datetime(2026, 1, 1, 0, 0, i % 60))
    sw.finalize()
    return sw.path


def _tracked(obj) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_index_frozen_while_serving_and_released_after(ca, tmp_path):
    snap = _snapshot(tmp_path)
    assert gcfreeze.holders() == 0
    with Replay([snap], ca=ca) as replay:
        index = replay.responder.index
        # the index's tables sit in the permanent generation: full collections do not walk them
        assert gcfreeze.holders() == 1 and gc.get_freeze_count() > 0
        assert gc.is_tracked(index.exact) and not _tracked(index.exact)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url}))
        # a canonical match (volatile `utm_source` differs) builds the host's tables lazily: frozen as well
        with opener.open("http://api.example/item/7?utm_source=other", timeout=10) as r:
            assert r.read() == b"item 7"
        tables = index.tables("api.example")
        assert not _tracked(tables.canonical)
        gc.collect()
        assert index.exact  # still alive and served from
    assert gcfreeze.holders() == 0 and gc.get_freeze_count() == 0
    assert _tracked(index.exact)  # handed back: collectable once unreferenced
    assert replay.stats().canonical == 1


def test_freeze_can_be_turned_off(ca, tmp_path, monkeypatch):
    monkeypatch.setenv("EGO2WEB_REPLAY_GC_FREEZE", "0")
    replay = Replay([_snapshot(tmp_path)], ca=ca)
    replay.open()
    assert gcfreeze.holders() == 0 and _tracked(replay.responder.index.exact)


def test_failed_start_gives_the_freeze_back(ca, tmp_path):
    snap = _snapshot(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(ProxyError, match="in use"):
            Replay([snap], ca=ca, port=sock.getsockname()[1]).start()
    assert gcfreeze.holders() == 0 and gc.get_freeze_count() == 0
