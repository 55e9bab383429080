"""The compact cache written from the one read of the index (snapshots/compact_rows.py): byte for byte
``pickle.dumps`` of the parsed rows, in the index's order and in a recording's (scattered), with
frames cut at every kind of place; rows it must leave to pickle are left to it, and ``warm_cache``
still writes the same file then."""

from __future__ import annotations

import dataclasses
import io
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from test_first_open import _lines  # index lines of every kind, escaped and non-ASCII among them

from ego2web_replay.models.index import IndexEntry
from ego2web_replay.snapshots import compact_rows, index_cache, index_map, indexscan
from ego2web_replay.snapshots.compact_rows import CompactRows
from ego2web_replay.snapshots.first_open import build_first_open
from ego2web_replay.snapshots.index_cache import cache_dir, cache_file, parse_rows, warm_cache
from ego2web_replay.snapshots.keysort import KeyColumn


def _ascii_lines(rng: random.Random, n: int, order: str) -> list[str]:
    """Plain ASCII lines with values of every size pickle writes apart: offsets of one, two, four and
    more bytes (and negative), URLs and bodies past 255 bytes, lines under 256 bytes and over; the
    timestamps and offsets in the index's order, or scattered as a recording's are."""
    places = list(range(n))
    if order == "shuffled":
        rng.shuffle(places)
    lines = []
    for i in range(n):
        at = places[i]
        offset = rng.choice([at % 200, 300 + at, 70_000 + 37 * at, 2**31 + 11 * at, 2**40 + at, -5 - at])
        url = f"http://shop.example/i{i}" + ("?" + "q" * rng.choice([1, 40, 250]) if rng.random() < 0.5 else "")
        post = rng.random() < 0.2
        entry = IndexEntry(surt=f"k{i:07d}", timestamp=f"2026010100{at // 600 % 60:02d}{at // 10 % 60:02d}",
                           url=url, mime="text/html", digest=f"sha1:{'AB'[i % 2] * 32}", offset=offset,
                           length=rng.randint(1, 999), filename="a.warc.zst", status=200,
                           method="POST" if post else "GET",
                           request_body_query=("b=" + "x" * rng.choice([3, 300])) if post else None)
        line = entry.to_line()
        lines.append(line if rng.random() < 0.7 else line.replace('"mime": "text/html"', '"mime": "t"'))
    return sorted(lines, key=lambda s: s.encode("utf-8"))


def _index(tmp_path: Path, lines: list[str]) -> Path:
    index = tmp_path / "index.cdxj"
    index.write_text("".join(line + "\n" for line in lines), "utf-8")
    return index


def _compact(index: Path, tmp_path: Path) -> tuple[CompactRows, bytes | None]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    table = CompactRows(index, tmp_path / "got.pickle", cache_dir())
    try:
        assert build_first_open(index, learn=False, keys=[table])
    finally:
        table.close()
    return table, (tmp_path / "got.pickle").read_bytes() if table.done else None


def _frame_ends(data: bytes) -> list[bytes]:
    """The opcode each of the pickle's frames but the last ends before (what pickle saves next)."""
    ends, at = [], 2
    while at < len(data) and data[at] == 0x95:
        at += 9 + int.from_bytes(data[at + 1:at + 9], "little")
        if at < len(data):
            ends.append(data[at + 9:at + 10] if data[at] == 0x95 else data[at:at + 1])
    return ends


@pytest.mark.parametrize(("order", "count", "block", "bucket"), [("index", 3001, 1 << 20, 8 << 20),
                                                                 ("shuffled", 4000, 1 << 20, 8 << 20),
                                                                 ("shuffled", 2500, 4096, 16 << 10)])
def test_the_pickle_of_the_parsed_rows(tmp_path, data_home, monkeypatch, order, count, block, bucket):
    """Same bytes as ``pickle.dumps`` of the parsed rows: in the index's order (read back mapped)
    and scattered (read back by buckets, a few at a time or many), blocks of the index large and
    small, a last batch of the list of one row; frames cut before every kind of value."""
    monkeypatch.setattr(indexscan, "BLOCK_BYTES", block)
    monkeypatch.setattr(index_map, "_BUCKET_BYTES", bucket)
    index = _index(tmp_path, _ascii_lines(random.Random(count), count, order))
    want = pickle.dumps(parse_rows(index), protocol=pickle.HIGHEST_PROTOCOL)
    table, got = _compact(index, tmp_path)
    assert table.done and got == want
    assert len(_frame_ends(want)) >= 10


def test_frames_cut_before_every_kind_of_value():
    """Rows whose values are all of a size, so that pickle's frames end before each of them in turn:
    the rows' bytes (:func:`~.compact_rows.row_bytes`) framed as pickle frames them."""
    rng = random.Random(4)
    offsets = [5, 300, 70_000, -7, 2**31, 2**40, -2**63, 2**63 - 1, 255, 65535, 2**31 - 1, -2**31, -2**31 - 1]
    rows = []
    for i in range(60_000):
        size = rng.randint(2, 30)
        line = rng.choice(["x", "é"]) * rng.choice([size, 260])
        rows.append((str(i).zfill(size), rng.choice(offsets) + (i % 3 if i % 2 else 0), "u" * rng.randint(2, 30),
                     rng.choice(["get", "post", "head"]).upper(), rng.choice([None, "b=" + "y" * size]), line))
    data = b"".join(compact_rows.row_bytes(*row[:5], row[5].encode()) for row in rows)
    ends = np.cumsum([len(compact_rows.row_bytes(*row[:5], row[5].encode())) for row in rows])
    out = io.BytesIO()
    out.write(b"\x80\x05")
    frames = compact_rows._Frames(out)
    frames.plain(b"]\x94")
    compact_rows._write_rows(frames, 0, memoryview(data), ends, len(rows))
    frames.plain(b".")
    frames.commit()
    want = pickle.dumps(rows, protocol=5)
    assert out.getvalue() == want
    assert {b"(", b"\x8c", b"X", b"N", b"K", b"M", b"J", b"\x8a"} <= set(_frame_ends(want))


@pytest.mark.parametrize(("seed", "count", "block"), [(1, 2600, 1 << 20), (2, 2001, 900), (3, 3000, 4096)])
def test_lines_of_every_kind(tmp_path, data_home, monkeypatch, seed, count, block):
    """Escaped, non-ASCII, revisits, resources and request lines (not servable), GET/HEAD/POST, many
    captures at one time and offset: the same bytes (small blocks put ASCII blocks beside the others)."""
    monkeypatch.setattr(indexscan, "BLOCK_BYTES", block)
    monkeypatch.setattr(KeyColumn, "SPILL_BYTES", 4096)
    index = _index(tmp_path, _lines(random.Random(seed), count))
    rows = parse_rows(index)
    table, got = _compact(index, tmp_path)
    assert table.done and got == pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL) and len(rows) > count // 2


@pytest.mark.parametrize("count", [0, 1, 2, 1001])
def test_short_lists(tmp_path, data_home, count):
    """No row, one (APPEND, not a batch), two, a last batch of one: pickle's bytes."""
    index = _index(tmp_path, _ascii_lines(random.Random(count), count, "index"))
    rows = parse_rows(index)
    table, got = _compact(index, tmp_path)
    assert len(rows) == count and table.done and got == pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)


@pytest.mark.parametrize("odd", ["empty body", "one-character URL", "long URL"])
def test_rows_left_to_pickle(tmp_path, data_home, monkeypatch, odd):
    """An empty request body (the scan gives it as none), a value Python shares (pickle refers back to
    it), a value of 64 KiB (pickle writes it outside its frames): the table gives up, and warm_cache
    pickles the parsed rows: the same file as before."""
    lines = _ascii_lines(random.Random(5), 2100, "shuffled")
    entry = IndexEntry.from_line(lines[700])
    if odd == "empty body":
        line = dataclasses.replace(entry, method="POST", request_body_query="z=1").to_line()
        lines[700] = line.replace('"requestBody": "z=1"', '"requestBody": ""')
    elif odd == "one-character URL":
        lines[700] = dataclasses.replace(entry, url="x").to_line()
    else:
        lines[700] = dataclasses.replace(entry, url="http://shop.example/?" + "q" * 70_000).to_line()
    index = _index(tmp_path, lines)
    rows = parse_rows(index)
    assert "" in rows[[r[5] for r in rows].index(lines[700])] or odd != "empty body"
    table, got = _compact(index, tmp_path)
    assert not table.done and got is None
    warm_cache(index)
    cache = cache_file(index)
    assert cache is not None and cache.read_bytes() == pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)


def test_warm_cache_writes_the_compact_cache_without_parsing_rows(tmp_path, data_home, monkeypatch):
    """finalize's warm_cache: the compact cache from the one read, no row parsed; bytes as before;
    a cache already there is kept."""
    index = _index(tmp_path, _ascii_lines(random.Random(8), 2400, "shuffled"))
    want = pickle.dumps(parse_rows(index), protocol=pickle.HIGHEST_PROTOCOL)

    def refused(path):  # noqa: ANN001, ANN202
        raise AssertionError("the rows were parsed")

    monkeypatch.setattr(index_cache, "parse_rows", refused)
    warm_cache(index)
    cache = cache_file(index)
    assert cache is not None and cache.read_bytes() == want
    assert index_map.map_file(index).is_file()
    made = []
    monkeypatch.setattr(compact_rows.CompactRows, "finish", lambda self, imap, rank: made.append(self))
    index_map.map_file(index).unlink()
    warm_cache(index)
    assert not made and cache.read_bytes() == want and index_map.map_file(index).is_file()
