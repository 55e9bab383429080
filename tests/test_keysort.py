"""Keys sorted by numpy (snapshots/keysort.py), the column writer, and the fast read of plain index lines:
each gives exactly what the Python sort, the pair writer and the JSON parse give."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from ego2web_replay.models.index import IndexEntry, index_row, learn_row
from ego2web_replay.snapshots import keysort
from ego2web_replay.snapshots.keysort import WIDTH, KeyColumn, ranks, sorted_chunks
from ego2web_replay.snapshots.sortedfile import write_sorted_columns, write_sorted_file


def _keys(rng: random.Random, n: int) -> list[bytes]:
    """Short keys over a tiny alphabet (NULs included: ``ab`` against ``ab\\0``), empty ones, and long
    ones sharing their first WIDTH bytes or more."""
    long_head = bytes(rng.randrange(3) for _ in range(WIDTH))
    out = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:
            out.append(b"")
        elif kind == 1:
            out.append(long_head + bytes(rng.randrange(3) for _ in range(rng.randrange(0, 20))))
        else:
            out.append(bytes(rng.randrange(3) for _ in range(rng.randrange(0, 12))))
    return out


@pytest.mark.parametrize("spill", [None, 64])
@pytest.mark.parametrize("python_ties", [True, False])
def test_key_column_orders_by_bytes_then_value(tmp_path, monkeypatch, spill, python_ties):
    """Either way of ordering keys that share their first telling word: compared in Python (few
    keys here), or every word sorted by numpy."""
    if not python_ties:
        monkeypatch.setattr(keysort, "_FEW_TIES", 0)
        monkeypatch.setattr(keysort, "_TIE_SHARE", 1 << 40)
    rng = random.Random(spill or 1)
    keys = _keys(rng, 3000)
    values = np.array([rng.randrange(5) for _ in keys], dtype=np.int64)
    if spill:
        monkeypatch.setattr(KeyColumn, "SPILL_BYTES", spill)
    column = KeyColumn(tmp_path if spill else None)
    for key in keys:
        column.add(key)
    assert [column.key(i) for i in range(len(keys))] == keys
    want = sorted(range(len(keys)), key=lambda i: (keys[i], int(values[i]), i))
    assert column.argsort(values).tolist() == want
    assert column.argsort().tolist() == sorted(range(len(keys)), key=lambda i: (keys[i], i))
    order = np.array(want)
    assert b"".join(sorted_chunks(column, order)) == b"".join(keys[i] for i in want)
    assert ranks(order)[order].tolist() == list(range(len(keys)))
    column.close()
    assert not list(tmp_path.iterdir())  # the spill file was temporary


def test_column_writer_writes_the_pair_writers_file(tmp_path):
    rng = random.Random(4)
    tables = {"a": [(k, rng.randrange(2**32)) for k in _keys(rng, 500)], "b": [], "c": [(b"x", 1), (b"", 0)]}
    write_sorted_file(tmp_path / "pairs.sorted", {"m": 1}, tables)
    columns = {}
    for name, pairs in tables.items():
        column = KeyColumn()
        for key, _value in pairs:
            column.add(key)
        values = np.array([v for _k, v in pairs], dtype=np.int64)
        order = column.argsort(values)
        columns[name] = (column.lengths()[order], values[order], sorted_chunks(column, order))
    write_sorted_columns(tmp_path / "columns.sorted", {"m": 1}, columns)
    assert (tmp_path / "columns.sorted").read_bytes() == (tmp_path / "pairs.sorted").read_bytes()


def _json_row(line: str):
    _key, ts, blob = line.split(" ", 2)
    d = json.loads(blob)
    rtype = d.get("recordType") or ("revisit" if d.get("mime") == "warc/revisit" else "response")
    return rtype, (ts, int(d["offset"]), d["url"], (d.get("method") or "GET").upper(), d.get("requestBody"), line)


def _outcome(read, line):
    try:
        return read(line)
    except (ValueError, KeyError, TypeError) as e:
        return type(e)


def _entry_fields(line: str):
    e = IndexEntry.from_line(line)
    return e.record_type, e.method, e.url, e.request_body_query, e.digest


LINES = [
    IndexEntry("k", "20260101000000", "http://a/x?q=1", "text/html", "sha1:X", 1, 2, "f", 200).to_line(),
    IndexEntry("k", "20260101000000", 'http://a/"q"', "text/html", "sha1:X", 1, 2, "f", 200).to_line(),
    IndexEntry("k", "20260101000000", "http://a/é", "warc/revisit", "sha1:X", 1, 2, "f", None, "POST", "a=b&c",
               "revisit", "http://a/", "20250101000000").to_line(),
    IndexEntry("k", "20260101000000", "http://a/", "text/html", "sha1:X", -5, 2, "f", None, "post", "", "resource").to_line(),
    IndexEntry("k", "20260101000000", "http://a/", "text/html", "", 5, 2, "f").to_line(),
    'k 2026 {"url": "http://a/\tb", "mime": "x", "digest": "d", "length": "1", "offset": "3", "filename": "f"}',
    'k 2026 {"url": "u", "mime": "x", "digest": "d", "length": "1", "offset": "3", "filename": "f", "recordType": ""}',
    'k 2026 {"url": "u", "mime": "x", "digest": "d", "length": "1", "offset": "3", "filename": "f", "method": ""}',
    'k 2026 {"url": "u", "mime": "x", "digest": "d", "length": "1", "offset": "3", "filename": "f", "method": "patch"}',
    'k 2026 {"url": "u", "mime": "x", "status": "abc", "digest": "d", "length": "1", "offset": "3", "filename": "f"}',
    'k 2026 {"url": "u", "mime": "x", "digest": "d", "length": "x", "offset": "3", "filename": "f"}',
    'k 20x6 {"url": "u", "mime": "x", "digest": "d", "length": "1", "offset": "3", "filename": "f"}',
    'k 2026 {"url": "u", "mime": "x", "status": 200, "digest": "d", "length": "1", "offset": "3", "filename": "f"}',
    'k 2026 {"url": "u", "mime": "x", "digest": "d", "length": "1", "offset": "3", "filename": "f"} ',
    'k 2026 {"url": "u", "mime": "x", "digest": "d", "length": "1", "offset": "", "filename": "f"}',
    'k 2026 {"url": "u", "mime": "x"}',
]


@pytest.mark.parametrize("line", LINES)
def test_plain_lines_read_as_the_json_parse_reads_them(line):
    assert _outcome(index_row, line) == _outcome(_json_row, line)
    assert _outcome(learn_row, line) == _outcome(_entry_fields, line)


def test_keys_told_apart_by_one_word_are_ordered_by_it():
    """Keys with a common head whose next word differs between any two (digests, say), some ending
    inside that word, some running on past it: the one-word sort gives byte order, values unused."""
    rng = random.Random(12)
    head = b"sha1:" + bytes(11)
    seen, keys = set(), []
    while len(keys) < 2000:
        word = bytes(rng.randrange(1, 256) for _ in range(rng.choice([3, 8, 8])))
        if word[:8] not in seen:
            seen.add(word[:8])
            keys.append(head + word + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 9))))
    column = KeyColumn()
    column.extend(keys)
    values = np.array([rng.randrange(3) for _ in keys], dtype=np.int64)
    assert column.argsort(values).tolist() == sorted(range(len(keys)), key=lambda i: keys[i])
    keys.append(keys[0])  # two alike: every word sorted, values deciding between them
    again = KeyColumn()
    again.extend(keys)
    values = np.append(values, -1)
    assert again.argsort(values).tolist() == sorted(range(len(keys)), key=lambda i: (keys[i], int(values[i]), i))


def test_keys_sharing_their_telling_word_now_and_then_are_ordered_by_bytes_then_value(monkeypatch):
    """Random digests whose first telling word two or three share (as a million sha1 digests do):
    the one-word sort orders the rest, the few that share it are compared whole, values deciding
    between equal keys; past the share of ties, every word is sorted, to the same order."""
    rng = random.Random(5)
    words = [bytes(rng.randrange(65, 91) for _ in range(8)) for _ in range(3000)]
    keys = [w + bytes(rng.randrange(65, 91) for _ in range(rng.choice([0, 4, 24]))) for w in words]
    keys += [words[i] + b"Q" * rng.randrange(3) for i in range(0, 3000, 50)]  # the word shared, the keys not
    keys += [keys[i] for i in range(1, 3000, 100)]  # the very key twice
    values = np.array([rng.randrange(4) for _ in keys], dtype=np.int64)
    want = sorted(range(len(keys)), key=lambda i: (keys[i], int(values[i]), i))
    column = KeyColumn()
    column.extend(keys)
    assert column.argsort(values).tolist() == want
    assert column.argsort().tolist() == sorted(range(len(keys)), key=lambda i: (keys[i], i))
    monkeypatch.setattr(keysort, "_FEW_TIES", 10)
    monkeypatch.setattr(keysort, "_TIE_SHARE", 1 << 40)
    assert column.argsort(values).tolist() == want


@pytest.mark.parametrize("ties_by", ["values rising", "values falling"])
def test_keys_already_in_order_keep_it_only_when_it_is_the_order(ties_by):
    """Keys added in byte order (an index's), or in the order of their values (a recording's times
    against its offsets), are not sorted again; equal keys in turn keep the order they came in only
    when their values say so."""
    rng = random.Random(9)
    stamps = sorted(f"2026120312{rng.randrange(10**4):04d}".encode() for _ in range(10_000))  # past the probe
    offsets = np.array(sorted(rng.sample(range(10**9), len(stamps))), dtype=np.int64)
    shuffle = rng.sample(range(len(stamps)), len(stamps))  # the same rows, taken in another order
    keys = [stamps[i] for i in shuffle]
    values = offsets[shuffle]
    column = KeyColumn()
    column.extend(keys)
    assert column.argsort(values).tolist() == sorted(range(len(keys)), key=lambda i: (keys[i], int(values[i]), i))
    urls = sorted({f"GET\x00http://a/{rng.randrange(10**6)}".encode() for _ in range(6000)})
    keys = [u for u in urls for _ in range(rng.choice([1, 1, 2, 3]))]  # in byte order, some twice or more
    rank = np.array(rng.sample(range(len(keys)), len(keys)), dtype=np.int64)
    start = 0
    for at in range(1, len(keys) + 1):  # each run of equal keys: its values rising (or falling), as asked
        if at == len(keys) or keys[at] != keys[start]:
            rank[start:at] = sorted(rank[start:at].tolist(), reverse=ties_by == "values falling")
            start = at
    column = KeyColumn()
    column.extend(keys)
    got = column.argsort(rank).tolist()
    assert got == sorted(range(len(keys)), key=lambda i: (keys[i], int(rank[i]), i))
    assert (got == list(range(len(keys)))) == (ties_by == "values rising")


@pytest.mark.parametrize("size", [0, 5, 8, 14, 32])
def test_keys_of_one_length_are_padded_as_one_at_a_time(size):
    """Keys all of one length (timestamps, digests): padded at once, as :meth:`KeyColumn.add` pads each."""
    rng = random.Random(size)
    keys = [bytes(rng.randrange(256) for _ in range(size)) for _ in range(300)]
    one, many, texts = KeyColumn(), KeyColumn(), KeyColumn()
    for key in keys:
        one.add(key)
    many.extend(keys)
    words = ["".join(rng.choice("0123456789") for _ in range(size)) for _ in range(300)]
    texts.extend_text(words)
    assert many.data().tobytes() == one.data().tobytes() and many.lengths().tolist() == one.lengths().tolist()
    assert [texts.key(i) for i in range(len(words))] == [w.encode() for w in words]
    assert texts.data().tobytes() == b"".join(w.encode() + bytes(-size & 7) for w in words)
