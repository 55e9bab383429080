"""Volatility learned from an index without volatile.json: kept in index-cache/, so a second open
does not learn again and matches the same; a changed index, or a cache others can write, learns again."""

from __future__ import annotations

import json
import os

import pytest

from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots import learned_cache, volatility
from ego2web_replay.snapshots.learned_cache import learn_index_file, learned_file
from ego2web_replay.snapshots.snapshot import Snapshot, SnapshotWriter
from ego2web_replay.snapshots.volatility import VOLATILE_FILE, learn_from_index

_STOCK = (("id=4&tok=a81f", b'{"n": 4}'), ("id=4&tok=77c0", b'{"n": 4}'), ("id=5&tok=1b2e", b'{"n": 5}'))


@pytest.fixture
def old_snapshot(tmp_path, monkeypatch):
    """A snapshot as one written before learning existed: an index, no volatile.json."""
    monkeypatch.setattr(learned_cache, "MIN_BYTES", 0)  # this small index is cached too
    sw = SnapshotWriter(tmp_path, "cold")
    for query, body in _STOCK:
        sw.writer.write_exchange(url=f"https://shop.example/api/stock?{query}", method="GET", request_headers=[],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "application/json")], response_body=body)
    sw.writer.write_exchange(url="https://shop.example/", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                             response_body=b"<p>home</p>")
    sw.finalize()
    (sw.path / VOLATILE_FILE).unlink()
    return sw.path


def _open_and_match(snapshot, mode):
    """(learner runs during the open, what a request with a fresh token gets, what another id gets)."""
    before = volatility.LEARNS[0]
    replay = Replay([snapshot], index=mode, check=False)
    replay.open()
    try:
        session = replay.replayer.index.session()
        hit = session.match("GET", "https://shop.example/api/stock?tok=ffff&id=4")
        other = session.match("GET", "https://shop.example/api/stock?id=6&tok=ffff")
        return (volatility.LEARNS[0] - before, (hit.outcome, hit.capture and hit.capture.url, hit.key),
                other.outcome)
    finally:
        replay.stop()


@pytest.mark.parametrize("mode", ["memory", "mapped"])
def test_second_open_reads_what_the_first_learned(old_snapshot, mode, data_home):
    index = old_snapshot / "index.cdxj"
    learned_file(index).unlink(missing_ok=True)
    runs, first, other = _open_and_match(old_snapshot, mode)
    assert runs == 1 and learned_file(index).is_file()
    assert first[0] == "canonical" and "learned volatile: tok" in first[2]
    assert first[1] == "https://shop.example/api/stock?id=4&tok=a81f" and other == "miss"
    runs, second, other = _open_and_match(old_snapshot, mode)
    assert runs == 0 and second == first and other == "miss"  # from the cache, the very same answers
    cache = json.loads(learned_file(index).read_text())
    assert cache["paths"] == {"GET https://shop.example/api/stock": ["tok"]}


def test_streamed_learning_equals_learning_from_entries(old_snapshot):
    snap = Snapshot.open(old_snapshot)
    assert learn_index_file(old_snapshot / "index.cdxj") == learn_from_index(snap.entries())
    assert learn_index_file(old_snapshot / "index.cdxj") == {"GET https://shop.example/api/stock": ["tok"]}


def test_a_changed_index_learns_again(old_snapshot, data_home):
    index = old_snapshot / "index.cdxj"
    assert _open_and_match(old_snapshot, "memory")[1][0] == "canonical"
    kept = learned_file(index)
    # the second capture of the token goes: nothing shows tok not mattering any more
    lines = [line for line in index.read_text().splitlines() if "tok=77c0" not in line]
    index.write_text("\n".join(lines) + "\n")
    os.utime(index, ns=(1, 1))
    assert learned_file(index) != kept
    runs, hit, _ = _open_and_match(old_snapshot, "memory")
    assert runs == 1 and hit[0] == "miss"
    assert json.loads(learned_file(index).read_text())["paths"] == {}


def test_a_cache_others_can_write_is_not_loaded(old_snapshot, data_home):
    index = old_snapshot / "index.cdxj"
    _open_and_match(old_snapshot, "memory")
    cache = learned_file(index)
    forged = json.loads(cache.read_text())
    forged["paths"] = {"GET https://shop.example/api/stock": ["id", "tok"]}  # would serve id=6 from id=4
    cache.write_text(json.dumps(forged))
    os.chmod(cache, 0o666)
    runs, hit, other = _open_and_match(old_snapshot, "memory")
    assert runs == 1 and hit[0] == "canonical" and other == "miss"
    os.chmod(cache, 0o644)  # the forged one, now trusted (this user's, nobody else's): it is what replay reads
    cache.write_text(json.dumps(forged))
    runs, _, other = _open_and_match(old_snapshot, "memory")
    assert runs == 0 and other == "miss"  # read, not learned anew; yet `id` names content: never set aside


def test_a_snapshot_with_volatile_json_never_uses_the_cache(tmp_path, data_home, monkeypatch):
    monkeypatch.setattr(learned_cache, "MIN_BYTES", 0)
    sw = SnapshotWriter(tmp_path, "fresh")
    sw.writer.write_exchange(url="https://shop.example/a?x=1", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=[], response_body=b"a")
    sw.finalize()
    before = volatility.LEARNS[0]
    replay = Replay([sw.path], index="memory", check=True)
    replay.open()
    replay.stop()
    assert volatility.LEARNS[0] == before and not learned_file(sw.path / "index.cdxj").exists()


def test_learning_grouped_on_disk_equals_learning_in_memory(tmp_path, monkeypatch):
    """Many paths, tokens that are volatile on some and matter on others, POST bodies and revisits,
    sorted by path through dozens of runs (tiny runs forced): what is learned is what learning in
    memory learns, and something is learned and something is not."""
    import random

    from ego2web_replay.models.index import IndexEntry
    from ego2web_replay.snapshots.sortedfile import ExternalSorter
    from ego2web_replay.snapshots.volatility import learn_volatile

    rng = random.Random(9)
    entries = []
    for i in range(600):
        path = f"/api/p{rng.randrange(25)}"
        method = rng.choice(["GET", "GET", "POST"])
        query = f"id={rng.randrange(3)}&tok={rng.randrange(1000)}"
        digest = f"sha1:{path}{query[:4] if rng.random() < 0.9 else rng.randrange(9)}"
        entries.append(IndexEntry(surt=f"k{rng.randrange(50)}", timestamp=f"202601010000{i % 60:02d}",
                                  url=f"https://e.com{path}" + (f"?{query}" if method == "GET" else ""),
                                  mime="warc/revisit" if i % 7 == 0 else "application/json", digest=digest,
                                  offset=i, length=1, filename="a.warc.gz", method=method,
                                  request_body_query=query if method == "POST" else None,
                                  record_type="revisit" if i % 7 == 0 else "response"))
    index = tmp_path / "index.cdxj"
    index.write_text("\n".join(sorted(e.to_line() for e in entries)) + "\n")
    monkeypatch.setattr(ExternalSorter, "RUN_BYTES", 2048)
    learned = learn_index_file(index)
    assert learned == learn_volatile((e.method, e.url, e.request_body_query, e.digest) for e in entries)
    assert learned and len(learned) < 50 and all(names == ["tok"] for names in learned.values())
