"""The sorted, memory-mapped index: bisection edge cases, and the same answers as the in-memory matcher."""

from __future__ import annotations

import json
import os
import random
import struct
import uuid
from pathlib import Path

import pytest

from ego2web_replay.errors import ArchiveError
from ego2web_replay.models.index import IndexEntry
from ego2web_replay.replay import mapped as mapped_module
from ego2web_replay.replay.mapped import MappedMatchIndex, canonical_file
from ego2web_replay.replay.matching import MatchIndex
from ego2web_replay.replay.rules import default_rules, load_rules
from ego2web_replay.replay.session import load_captures
from ego2web_replay.snapshots.index_map import map_file, open_index_map
from ego2web_replay.snapshots.sortedfile import SortedFile, key_bytes, write_sorted_file
from ego2web_replay.snapshots.volatility import path_group

RULES = default_rules()


# -- the sorted file ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def table(tmp_path_factory):
    pairs = [(b"b", 7), (b"a", 1), (b"b", 3), (b"ba", 4), (b"b?x", 5), (b"c", 9), (b"b", 5), (b"bb", 2), (b"z\xff", 0)]
    path = tmp_path_factory.mktemp("sorted") / "t.sorted"
    write_sorted_file(path, {"hello": "world"}, {"t": pairs, "empty": []})
    f = SortedFile(path)
    yield f
    f.close()


def test_find_first_last_duplicates_and_absent(table):
    t = table.table("t")
    assert table.meta == {"hello": "world"} and len(t) == 9
    assert t.find(b"a") == [1]  # first key
    assert t.find(b"z\xff") == [0]  # last key
    assert t.find(b"b") == [3, 5, 7]  # duplicates, values ascending
    for absent in (b"", b"0", b"aa", b"b\x00", b"bc", b"z", b"\xff\xff"):  # before, between, after
        assert t.find(absent) == []
    assert t.lower_bound(b"") == 0 and t.lower_bound(b"\xff") == len(t)
    assert table.table("empty").find(b"a") == [] and list(table.table("empty").scan(b"")) == []


def test_prefix_scans(table):
    t = table.table("t")
    assert [k for k, _ in t.scan(b"b")] == [b"b", b"b", b"b", b"b?x", b"ba", b"bb"]
    assert list(t.scan(b"b?")) == [(b"b?x", 5)]
    assert [v for _, v in t.scan(b"")] == [1, 3, 5, 7, 5, 4, 2, 9, 0]
    assert list(t.scan(b"y")) == [] and list(t.scan(b"zz")) == [] and list(t.scan(b"0")) == []
    assert list(t.scan(b"z")) == [(b"z\xff", 0)]


def test_key_bytes_is_one_to_one_and_keeps_prefixes():
    assert key_bytes("a", "b") != key_bytes("a\x00b") != key_bytes("a\x01\x01b")
    assert key_bytes("a\x01", "") != key_bytes("a", "\x02")
    assert key_bytes("host", "GET x?q=1").startswith(key_bytes("host", "GET x"))
    assert key_bytes("h", "\ud800") == b"h\x00\xed\xa0\x80"  # a lone surrogate from JSON survives


def test_broken_files_are_refused(tmp_path):
    bad = tmp_path / "bad.sorted"
    bad.write_bytes(b"not a sorted file at all")
    with pytest.raises(ArchiveError, match="not a valid sorted index"):
        SortedFile(bad)
    good = tmp_path / "good.sorted"
    write_sorted_file(good, {}, {"t": [(b"k" * 100, 1)]})
    good.write_bytes(good.read_bytes()[:-50])
    with pytest.raises(ArchiveError, match="cut short"):
        SortedFile(good)


# -- the same answers as the in-memory index ------------------------------------------------------

HOSTS = ["shop.example", "www.shop.example", "api.shop.example:8443", "other.example"]
PATHS = ["/", "/item", "/search", "/api/stock", "/poll", "/a", "/ab", "/a;jsessionid=1"]


_PRODUCTS = ["0b7e4f5a-1c2d-4e3f-8a9b-0c1d2e3f4a5b", "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"]


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _captures(rng: random.Random, n: int) -> list[tuple[str, str, str | None]]:
    out = []
    for i in range(n):
        host, path = rng.choice(HOSTS), rng.choice(PATHS)
        scheme = rng.choice(["https", "http"])
        params = [f"id={rng.randint(1, 6)}", f"q={rng.choice(['red', 'blue+hat', 'x%20y'])}",
                  f"_={1712345678901 + i}", f"utm_source=s{i}", f"tok={rng.randint(0, 3)}", f"page={rng.randint(1, 3)}",
                  f"cid={_uuid(rng)}", f"product_id={rng.choice(_PRODUCTS)}"]
        query = "&".join(rng.sample(params, rng.randint(0, 4)))
        url = f"{scheme}://{host}{path}" + (f"?{query}" if query else "")
        method = rng.choice(["GET", "GET", "GET", "POST", "HEAD"]) if path != "/poll" else "GET"
        body = None
        if method == "POST":
            body = "__wb_method=post&" + rng.choice([f"q={rng.randint(1, 3)}&ts=1712345678", "a=1&b=2", f"n={i}"])
        out.append((url, method, body))
    for _ in range(5):  # a page polling one URL
        out.append(("https://shop.example/poll?since=1", "GET", None))
    return out


def _write_cdxj(path: Path, captures: list[tuple[str, str, str | None]], start: int = 0) -> None:
    lines = []
    for i, (url, method, body) in enumerate(captures):
        entry = IndexEntry(surt=f"k{i}", timestamp=f"2026010100{(start + i) // 60 % 60:02d}{(start + i) % 60:02d}",
                           url=url, mime="text/plain", digest="sha1:X", offset=1000 + i, length=10,
                           filename="archive.warc.gz", status=200, method=method, request_body_query=body)
        lines.append(entry.to_line())
    lines.append(IndexEntry(surt="zz", timestamp="20260101000000", url="https://shop.example/gone", mime="warc/revisit",
                            digest="sha1:X", offset=5, length=5, filename="archive.warc.gz", record_type="revisit",
                            refers_to_uri="https://shop.example/item").to_line())
    path.write_text("\n".join(sorted(lines)) + "\n")


def _requests(rng: random.Random, captures: list[tuple[str, str, str | None]]) -> list[tuple[str, str, bytes | None]]:
    out: list[tuple[str, str, bytes | None]] = []
    for url, method, body in rng.sample(captures, min(len(captures), 150)):
        raw = body.partition("&")[2].encode() if body else None
        out.append((method, url, raw))  # exact
        base, _, query = url.partition("?")
        parts = [p for p in query.split("&") if p]
        rng.shuffle(parts)
        changed = [p if not p.startswith(("_=", "utm_source=", "tok=")) else p.split("=")[0] + "=9" for p in parts]
        changed = [f"cid={_uuid(rng)}" if p.startswith("cid=") else p for p in changed]
        out.append((method, base + ("?" + "&".join(changed) if changed else ""), raw))  # canonical, learned, fresh
        other = [f"product_id={_PRODUCTS[p.endswith(_PRODUCTS[0])]}" if p.startswith("product_id=") else p
                 for p in changed]
        out.append((method, base + ("?" + "&".join(other) if other else ""), raw))  # another product: never fresh
        out.append((method, base + "?" + "&".join(parts + ["page=77"]), raw))  # a miss, or fuzzy
        out.append(("HEAD", url, None))
        if method == "POST":
            out.append((method, url, b"q=2&ts=1799999999"))
    out.append(("GET", "https://nowhere.example/", None))
    out.append(("GET", "not a url?x=1", None))
    return out


@pytest.mark.parametrize(("seed", "memo_max"), [(1, None), (2, None), (3, 7)])
def test_mapped_and_memory_answer_alike(tmp_path, data_home, monkeypatch, seed, memo_max):
    """Every request asked twice (the second time from the mapped index's memo of lookups and
    captures; with ``memo_max`` 7 the memo is emptied again and again, and the map and canonical keys
    are built through dozens of sorted runs): the same answers throughout."""
    if memo_max is not None:
        from ego2web_replay.snapshots.sortedfile import ExternalSorter

        monkeypatch.setattr(mapped_module, "MEMO_MAX", memo_max)
        monkeypatch.setattr(ExternalSorter, "RUN_BYTES", 2048)
    rng = random.Random(seed)
    snaps = []
    for n in range(2):  # two snapshots replayed together
        index = tmp_path / f"s{n}" / "index.cdxj"
        index.parent.mkdir()
        _write_cdxj(index, _captures(rng, 250), start=n * 1000)
        snaps.append(type("Snap", (), {"index_path": index})())
    learned = {path_group(m, f"{scheme}://{host}{path}"): frozenset({"tok"} if path != "/search" else {"tok", "page"})
               for m in ("GET", "POST", "HEAD") for scheme in ("http", "https") for host in HOSTS[:3] for path in PATHS}
    requests = _requests(rng, [c for s in snaps for c in _captures(random.Random(seed), 250)])
    captures = load_captures(snaps)
    for policy in ("sequence", "first", "last"):
        for fuzzy in (False, True):
            options = {"rules": RULES, "policy": policy, "fuzzy": fuzzy, "learned": learned}
            memory = MatchIndex(captures, **options)
            mapped = MappedMatchIndex.open([s.index_path for s in snaps], **options)
            assert len(mapped) == len(memory) and mapped.methods == memory.methods
            assert [mapped.capture(i) for i in range(len(mapped))] == captures
            outcomes = set()
            learned_hits = fresh_hits = 0
            for method, url, body in requests + requests:
                ctype = "application/x-www-form-urlencoded" if body else None
                want = memory.match(method, url, body, ctype)
                got = mapped.match(method, url, body, ctype)
                assert got == want, (policy, fuzzy, method, url, body)
                outcomes.add(want.outcome)
                learned_hits += "learned volatile" in want.key
                fresh_hits += want.via == "fresh-id"
                assert "product_id" not in want.ignored
            assert len(mapped._exact_memo) <= mapped_module.MEMO_MAX
            assert len(mapped._capture_memo) <= mapped_module.MEMO_MAX
            mapped.close()
            assert outcomes >= {"exact", "canonical", "miss"} | ({"fuzzy"} if fuzzy else set())
            assert learned_hits and fresh_hits


def test_index_built_on_open_for_an_old_snapshot_and_reused(tmp_path, data_home):
    index = tmp_path / "index.cdxj"
    _write_cdxj(index, _captures(random.Random(3), 40))
    target = map_file(index)
    assert target is not None and not target.exists()  # an old snapshot: no mapped form yet
    first = MappedMatchIndex.open([index])
    assert target.is_file() and canonical_file(first.maps[0], RULES).is_file()
    stamp = target.stat().st_mtime_ns
    again = MappedMatchIndex.open([index])
    assert target.stat().st_mtime_ns == stamp and len(again) == len(first) == 40 + 5 + 1
    assert again.match("GET", "https://shop.example/poll?since=1").outcome == "exact"
    # other rules: their own canonical keys, the map itself is shared
    extra = tmp_path / "rules.yaml"
    extra.write_text("defaults:\n  volatile_params: [id]\n")
    other = MappedMatchIndex.open([index], rules=load_rules([extra]))
    assert canonical_file(other.maps[0], other.rules) != canonical_file(first.maps[0], RULES)
    # an edited index is mapped anew; a damaged map is rebuilt
    _write_cdxj(index, _captures(random.Random(4), 10))
    os.utime(index, ns=(1, 1))
    assert map_file(index) != target and len(MappedMatchIndex.open([index])) == 16
    fresh = map_file(index)
    assert fresh is not None
    fresh.write_bytes(b"garbage")
    assert len(open_index_map(index)) == 16


def test_corrupt_index_line_is_one_clear_error(tmp_path, data_home):
    index = tmp_path / "index.cdxj"
    _write_cdxj(index, _captures(random.Random(5), 3))
    with index.open("a") as fh:
        fh.write("com,x)/ 2026 " + json.dumps({"url": "https://x/"}) + "\n")  # no offset
    with pytest.raises(ArchiveError, match=r"index.cdxj: line 10 is not a valid CDXJ line"):
        MappedMatchIndex.open([index])


# -- through the real replay proxy ----------------------------------------------------------------

def test_replay_serves_from_the_mapped_index(ca, tmp_path, data_home, monkeypatch):
    import urllib.request
    from datetime import datetime

    from ego2web_replay.errors import ReplayError
    from ego2web_replay.replay.session import Replay, index_mode
    from ego2web_replay.snapshots.snapshot import Snapshot, SnapshotWriter

    sw = SnapshotWriter(tmp_path, "mapped")
    bodies = {}
    for i in range(30):
        body = f"item {i} ".encode() * (i + 1)
        url = f"http://api.example/item/{i}?utm_source=s{i}"
        bodies[i] = body
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "text/plain"), ("X-N", str(i))],
                                 response_body=body, date=datetime(2026, 1, 1, 0, 0, i))
    sw.finalize()
    snap = Snapshot.open(sw.path)
    assert index_mode([snap]) == "memory"  # a small index is parsed
    monkeypatch.setenv("EGO2WEB_REPLAY_INDEX", "mapped")
    assert index_mode([snap]) == "mapped"
    with pytest.raises(ReplayError, match="unknown index mode"):
        index_mode([snap], "disk")
    with Replay([sw.path], ca=ca) as replay:
        assert isinstance(replay.replayer.index, MappedMatchIndex) and replay.captures == 30
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url}))
        for i, query in ((3, "utm_source=s3"), (7, "utm_source=other"), (29, "utm_source=s29")):
            with opener.open(f"http://api.example/item/{i}?{query}", timeout=10) as r:
                assert r.read() == bodies[i] and r.headers["X-N"] == str(i)
        with pytest.raises(urllib.error.HTTPError):
            opener.open("http://api.example/item/99", timeout=10)
    stats = replay.stats()
    assert (stats.exact, stats.canonical, stats.miss) == (2, 1, 1)


def test_bisection_across_sample_strides(tmp_path, monkeypatch):
    from ego2web_replay.snapshots.sortedfile import KeyTable

    monkeypatch.setattr(KeyTable, "STRIDE", 4)  # the sampled first level over a table of 3 words per key
    keys = [f"k{i:03d}".encode() for i in range(0, 60, 2) for _ in range(3)]
    write_sorted_file(tmp_path / "s.sorted", {}, {"t": [(k, i) for i, k in enumerate(keys)]})
    t = SortedFile(tmp_path / "s.sorted").table("t")
    for i in range(-1, 61):
        key = f"k{i:03d}".encode()
        want = [n for n, k in enumerate(keys) if k == key]
        assert t.find(key) == want, key
        assert t.lower_bound(key) == next((n for n, k in enumerate(keys) if k >= key), len(keys))
    assert [k for k, _ in t.scan(b"k01")] == [k for k in keys if k.startswith(b"k01")]


# -- revisits find their originals through the digest table ---------------------------------------

def test_revisits_resolve_through_the_digest_table_without_parsing_the_index(tmp_path, data_home):
    """A revisit's original comes from the map's digest table (the index stays unparsed), and it is
    the same capture that the parsed index gives: same URL, URL-agnostic, and several candidates."""
    from datetime import datetime

    from ego2web_replay.snapshots.index_map import build_index_map, original_digest
    from ego2web_replay.snapshots.snapshot import Snapshot, SnapshotWriter

    sw = SnapshotWriter(tmp_path, "T", compression="zst", source="record", dedup_min_size=16)
    shared, other = b"shared payload " * 10, b"other payload " * 10
    plan = [("http://a.test/x", shared), ("http://a.test/y", other), ("http://b.test/z", shared),
            ("http://a.test/x", shared), ("http://a.test/y", other), ("http://c.test/w", other)]
    for n, (url, body) in enumerate(plan):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200,
                                 reason="OK", response_headers=[("Content-Type", "text/plain")], response_body=body,
                                 date=datetime(2026, 1, 1, 0, 0, n))
    sw.finalize()
    build_index_map(sw.path / "index.cdxj")

    parsed = Snapshot.open(sw.path)
    entries = parsed.entries()
    revisits = [e for e in entries if e.record_type == "revisit"]
    assert len(revisits) == 4
    assert [original_digest(e.to_line()) for e in revisits] == [None] * 4
    assert {original_digest(e.to_line()) for e in entries if e.record_type != "revisit"} == {e.digest for e in revisits}

    mapped = Snapshot.open(sw.path)
    for revisit in revisits:
        expected = parsed.find_original(revisit)
        assert expected is not None and expected.record_type == "response"
        assert mapped.find_original(revisit) == expected
        assert mapped.resolve(revisit).payload == parsed.resolve(expected).payload
    assert mapped._entries is None  # no revisit made it read the whole index


# -- building the map by streaming ----------------------------------------------------------------

def _map_as_before(index: Path, target: Path) -> None:
    """The mapped index the way it was built before streaming: every row parsed into lists, sorted in memory."""
    import struct

    from ego2web_replay.snapshots.index_cache import parse_rows
    from ego2web_replay.snapshots.index_map import _VERSION, exact_key_bytes, original_digest

    rows = parse_rows(index)
    lines = [(struct.pack(">I", i) + row[5].encode("utf-8", "surrogatepass"), i) for i, row in enumerate(rows)]
    exact = [(exact_key_bytes(row[3], row[2], row[4]), i) for i, row in enumerate(rows)]
    digests = [(key_bytes(d), i) for i, row in enumerate(rows) if (d := original_digest(row[5]))]
    meta = {"version": _VERSION, "index": str(index.resolve()), "count": len(rows),
            "methods": sorted({row[3] for row in rows}), "first_timestamp": rows[0][0] if rows else None}
    write_sorted_file(target, meta, {"lines": lines, "exact": exact, "digests": digests})



def map_contents(path: Path) -> tuple[dict, dict[str, list[tuple[bytes, int]]]]:
    """A sorted file's header meta and every table's (key, value) records in table order: what a
    reader sees, whatever order the keys' bytes are laid in."""
    file = SortedFile(path)
    try:
        tables = {name: [file.table(name).item(i) for i in range(len(file.table(name)))] for name in file._tables}
        return dict(file.meta), {name: [(bytes(k), v) for k, v in items] for name, items in tables.items()}
    finally:
        file.close()


def assert_same_map(got: Path, want: Path, index: Path | None) -> None:
    """``got`` holds the tables ``want`` holds and, given the ``index`` it was read from, lays its
    lines' bytes in the index's order (the servable lines one after the other as the file has
    them, each after its position)."""
    from ego2web_replay.snapshots.index_cache import parse_rows

    assert map_contents(got) == map_contents(want)
    if index is None:
        return
    file = SortedFile(got)
    try:
        lines = file.table("lines")
        places = sorted((struct.unpack_from("<Q", file._data, lines._offset + i * 16)[0], i) for i in range(len(lines)))
        laid = [bytes(lines.key(i))[4:].decode("utf-8", "surrogatepass") for _at, i in places]
    finally:
        file.close()
    rows = parse_rows(index)  # recorded order; the file's order is their lines' order in the index
    in_file = [line for line in index.read_text("utf-8").split("\n") if line in {r[5] for r in rows}]
    assert laid == in_file


def test_streamed_map_build_equals_the_in_memory_one(tmp_path, data_home, monkeypatch):
    """Built line by line with its keys spilled to temporary files (tiny buffers forced), the map is
    byte for byte the one the in-memory build wrote: recorded order with ties kept in file order,
    keys, digests, header."""
    from ego2web_replay.snapshots.index_cache import parse_rows
    from ego2web_replay.snapshots.index_map import build_index_map
    from ego2web_replay.snapshots.keysort import KeyColumn

    rng = random.Random(11)
    lines = []
    for i, (url, method, body) in enumerate(_captures(rng, 400)):
        kind = rng.choice(["response"] * 6 + ["revisit", "resource", "request"])
        data = {"url": url + ("&é=ü" if i % 50 == 0 else ""), "mime": "warc/revisit" if kind == "revisit" else "text/plain",
                "digest": f"sha1:{rng.randint(0, 40)}", "length": "10", "offset": str(rng.randint(0, 60)),
                "filename": "archive.warc.gz"}
        if method != "GET":
            data["method"] = method
        if body:
            data["requestBody"] = body
        if kind in ("resource", "request"):
            data["recordType"] = kind
        lines.append(f"k{rng.randint(0, 99)} 2026010100{rng.randint(0, 3):02d}{rng.randint(0, 5):02d} "
                     f"{json.dumps(data)}")  # few timestamps and offsets: many ties, kept in file order
    index = tmp_path / "index.cdxj"
    index.write_text("\n".join(sorted(lines)) + "\n\n")
    before = tmp_path / "before.sorted"
    _map_as_before(index, before)
    monkeypatch.setattr(KeyColumn, "SPILL_BYTES", 256)  # keys spilled many times over
    streamed = build_index_map(index)
    assert_same_map(streamed, before, index)
    streamed_bytes = streamed.read_bytes()
    from_rows = build_index_map(index, parse_rows(index))  # what finalize passes: the parsed rows
    assert_same_map(from_rows, before, None)  # its lines laid in the order given: recorded order
    assert build_index_map(index).read_bytes() == streamed_bytes  # the same bytes from the same read
    imap = open_index_map(index, build=False)
    assert [imap.row(i) for i in range(len(imap))] == parse_rows(index) and len(imap) > 300
    imap.close()


def _recorded_index(tmp_path: Path, n: int, shuffled: bool) -> Path:
    """An index as a recording writes one: ``n`` captures appended to the archive in browsing order
    (offsets and timestamps rising along it, a few captures a second), the index sorted by URL. In
    browsing order ``shuffled`` (a fixed random order), else in the URLs' order."""
    rng = random.Random(27)
    urls = sorted(f"https://shop{i % 7}.example/p/{i}?q={rng.randint(0, 9)}" + "x" * rng.randint(0, 400)
                  for i in range(n))
    browsing = list(range(n))
    if shuffled:
        rng.shuffle(browsing)
    lines = []
    for at, i in enumerate(browsing):
        data = {"url": urls[i], "mime": "text/html", "digest": f"sha1:{i % 97}", "length": "300",
                "offset": str(1000 + 300 * at), "filename": "archive.warc.gz"}
        lines.append(f"k{urls[i]} 20260101{at // 3600:02d}{at // 60 % 60:02d}{at // 3 % 60:02d} {json.dumps(data)}")
    index = tmp_path / "index.cdxj"
    index.write_text("\n".join(sorted(lines)) + "\n")
    return index


@pytest.mark.parametrize(("shuffled", "bucket"), [(True, 1), (True, 3000), (True, 40_000), (True, 8 << 20),
                                                  (False, 3000)])
def test_lines_of_a_shuffled_index_are_copied_in_one_read(tmp_path, data_home, monkeypatch, shuffled, bucket):
    """An index whose recorded order is unrelated to its (URL) order, and one in nearly its own
    order: the lines are copied in the index's order, reads of one line to all at once, never by
    bucket passes; the map holds what the in-memory build writes, and is the same file whether
    built from the index file (the one read) or from its rows in file order (the lines spooled first)."""
    from ego2web_replay.snapshots import index_map
    from ego2web_replay.snapshots.index_cache import parse_rows, stream_rows
    from ego2web_replay.snapshots.index_map import build_index_map

    index = _recorded_index(tmp_path, 700, shuffled)
    before = tmp_path / "before.sorted"
    _map_as_before(index, before)
    monkeypatch.setattr(index_map, "_BUCKET_BYTES", bucket)
    monkeypatch.setattr(index_map, "_READ_BYTES", bucket)
    bucketed = []

    def spy(*args):
        bucketed.append(len(args[3]))
        yield from real(*args)

    real = index_map._lines_bucketed
    monkeypatch.setattr(index_map, "_lines_bucketed", spy)
    built = build_index_map(index)
    assert_same_map(built, before, index)
    built_bytes = built.read_bytes()
    assert build_index_map(index, stream_rows(index)).read_bytes() == built_bytes  # in file order
    assert bucketed == []  # the lines go in the index's order: no bucket passes, whatever the recorded order
    imap = open_index_map(index, build=False)
    rows = parse_rows(index)
    assert [imap.row(i) for i in range(len(imap))] == rows
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)  # recorded order: by time, then offset
    imap.close()


def test_external_sorter_sorts_across_runs(tmp_path, monkeypatch):
    from ego2web_replay.snapshots.sortedfile import ExternalSorter

    rng = random.Random(5)
    items = [(bytes(rng.randrange(4) for _ in range(rng.randrange(4))), rng.randrange(9), rng.randbytes(3))
             for _ in range(3000)]
    for run_bytes in (ExternalSorter.RUN_BYTES, 500):
        monkeypatch.setattr(ExternalSorter, "RUN_BYTES", run_bytes)
        sorter = ExternalSorter(tmp_path)
        for item in items:
            sorter.add(*item)
        assert list(sorter) == sorted(items) and sorter.count == 3000
        sorter.close()
    assert not list(tmp_path.iterdir())  # the runs were temporary
