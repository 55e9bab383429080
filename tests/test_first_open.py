"""A first open built from one read of the index (snapshots/first_open.py, indexscan.py): the mapped
index, the canonical keys and the learned volatility are byte for byte what the builders that read
the index line by line, each on its own, give; an index those readers treat differently is left to
them, with their results and errors."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_mapped_index import (  # the map as the line-by-line build writes it
    _map_as_before,
    assert_same_map,
)

from ego2web_replay.errors import ArchiveError
from ego2web_replay.models.index import IndexEntry
from ego2web_replay.replay import mapped
from ego2web_replay.replay.canonical import KeyMaker, canonicalize, url_host
from ego2web_replay.replay.mapped import (
    MappedMatchIndex,
    build_first_open,
    canonical_file,
    install_index_hook,
)
from ego2web_replay.replay.matching import MatchIndex
from ego2web_replay.replay.rules import default_rules, load_rules
from ego2web_replay.replay.session import load_captures, load_learned
from ego2web_replay.snapshots import first_open, indexscan, learned_cache
from ego2web_replay.snapshots.cdxj import read_index
from ego2web_replay.snapshots.index_cache import cache_dir, index_rows, parse_rows, warm_cache
from ego2web_replay.snapshots.index_map import (
    build_index_map,
    map_file,
    open_index_map,
    run_map_hooks,
)
from ego2web_replay.snapshots.keysort import KeyColumn
from ego2web_replay.snapshots.learned_cache import learned_file
from ego2web_replay.snapshots.sortedfile import key_bytes, write_sorted_file
from ego2web_replay.snapshots.volatility import learn_from_index

RULES = default_rules()

HOSTS = ["shop.example", "WWW.Shop.Example", "api.shop.example:8443", "shop.example:443", "user@a@b.example",
         "[2001:db8::1]:8080", "trailing.example.", "127.0.0.1:9"]
PATHS = ["/", "/item", "/a;jsessionid=XYZ/b", "/caf%C3%A9", "/%7euser/x", "/with space", "/ünï", "/p#frag/x",
         "/api/stock", "", "/Item", "/item/", "/item//"]  # the last three fold as /item: read again, apart


def _url(rng: random.Random, i: int) -> str:
    host, path = rng.choice(HOSTS), rng.choice(PATHS)
    scheme = rng.choice(["https", "http", "HTTP", "wss"])
    params = [f"tok={rng.randint(0, 3)}", f"id={rng.randint(1, 4)}", f"_={1712345678901 + i}", f"utm_source=s{i}",
              "q=blue+hat", "q=x%20y", "callback=jQuery123", "é=ü", "a=&b", "", "x=1?y=2"]
    query = "&".join(rng.sample(params, rng.randint(0, 3)))
    url = f"{scheme}://{host}{path}" + (f"?{query}" if query or rng.random() < 0.05 else "")
    return url if rng.random() > 0.02 else rng.choice(["not a url?x=1", "mailto:a@b.example", "http://a?q=1#x"])


def _lines(rng: random.Random, n: int) -> list[str]:
    """Index lines of every kind a snapshot's index can hold: responses with and without a status,
    revisits, resources, request lines, GET/HEAD/POST (bodies in the POST form), repeated captures of
    one URL with the same and with other payloads, escaped and non-ASCII values."""
    lines = []
    digests = [f"sha1:{c * 32}" for c in "ABCDEFG"]
    for i in range(n):
        url = _url(rng, i)
        method = rng.choice(["GET"] * 6 + ["POST", "HEAD", "post"])
        body = None
        if method.upper() == "POST":
            body = rng.choice([f"q={rng.randint(1, 3)}&ts=1712345678", "a=1&b=2", f"n={i}", "x=%00", None])
        kind = rng.choice(["response"] * 8 + ["revisit", "resource", "request"])
        entry = IndexEntry(
            surt=rng.choice([f"k{i % 50}", "com,example)/", "x\"y", "1,0,0,127:9)/r"]),
            timestamp=f"2026010100{rng.randint(0, 2):02d}{rng.randint(0, 9):02d}",
            url=url, mime="warc/revisit" if kind == "revisit" else rng.choice(["text/html", "application/json"]),
            digest=rng.choice(digests), offset=rng.randint(0, 40), length=rng.randint(1, 999),
            filename="archive.warc.zst", status=rng.choice([200, 404, None]) if kind != "revisit" else None,
            method=method, request_body_query=body, record_type=kind if kind != "request" else "response",
            refers_to_uri="https://shop.example/item" if kind == "revisit" else None,
            refers_to_date="20260101000000" if kind == "revisit" and rng.random() < 0.5 else None)
        line = entry.to_line()
        if kind == "request":
            line = line[:-1] + ', "recordType": "request"}'
        if rng.random() < 0.03:
            line = line.replace('"status": "200"', '"status": "-"')
        lines.append(line)
    return sorted(lines, key=lambda s: s.encode("utf-8"))


def _snapshot(tmp_path: Path, lines: list[str], tail: str = "\n") -> SimpleNamespace:
    folder = tmp_path / "snap"
    folder.mkdir()
    (folder / "index.cdxj").write_text("\n".join(lines) + tail, "utf-8")
    return SimpleNamespace(path=folder, index_path=folder / "index.cdxj", entries=lambda: read_index(folder / "index.cdxj"))


def _canonical_as_before(index: Path, rules, target: Path) -> None:
    """The canonical keys as they were built: canonicalize() of every row, in recorded order."""
    rows = parse_rows(index)
    pairs = [(key_bytes(url_host(url), canonicalize(method, url, body or None, rules).key), i)
             for i, (_ts, _off, url, method, body, _line) in enumerate(rows)]
    write_sorted_file(target, {"version": 1, "count": len(rows)}, {"canonical": pairs})


@pytest.mark.parametrize(("seed", "block", "spill"), [(1, 1 << 20, 4 << 20), (2, 700, 256), (3, 4096, 64)])
def test_one_read_writes_what_each_builder_writes(tmp_path, data_home, monkeypatch, seed, block, spill):
    """Tiny blocks (lines cut at block ends, blocks of plain lines beside blocks with escaped ones)
    and keys spilled many times over: the same bytes for the map and the canonical keys (built-in
    and other rules), the same learned names, and the same answers as the in-memory index."""
    monkeypatch.setattr(indexscan, "BLOCK_BYTES", block)
    monkeypatch.setattr(KeyColumn, "SPILL_BYTES", spill)
    monkeypatch.setattr(learned_cache, "MIN_BYTES", 0)
    rng = random.Random(seed)
    snap = _snapshot(tmp_path, _lines(rng, 900), tail="\n\n")
    index = snap.index_path
    rules = RULES if seed != 3 else load_rules([_rules_file(tmp_path)])
    want = tmp_path / "want"
    want.mkdir()
    _map_as_before(index, want / "map")
    learned = learn_from_index(read_index(index))
    assert learned, "the sample teaches something"

    build_first_open([snap], rules)

    target = map_file(index)
    assert target is not None
    assert_same_map(target, want / "map", index)
    imap = open_index_map(index, build=False)
    _canonical_as_before(index, rules, want / "canonical")
    assert canonical_file(imap, rules).read_bytes() == (want / "canonical").read_bytes()
    cached = json.loads(learned_file(index).read_text())
    assert cached["paths"] == learned
    imap.close()

    builds = mapped.BUILDS[0]
    options = {"rules": rules, "learned": load_learned([snap]), "fuzzy": True}
    got = MappedMatchIndex.open([index], **options)
    assert mapped.BUILDS[0] == builds  # nothing left to build
    memory = MatchIndex(load_captures([snap]), **options)
    asked = 0
    for capture in memory.captures[::7]:
        base, _, query = capture.url.partition("?")
        for url in (capture.url, base + "?tok=9&" + query, base):
            body = capture.body.encode() if capture.body else None
            ctype = "application/x-www-form-urlencoded" if body else None
            assert got.match(capture.method, url, body, ctype) == memory.match(capture.method, url, body, ctype)
            asked += 1
    got.close()
    assert asked > 100


def _rules_file(tmp_path: Path) -> Path:
    extra = tmp_path / "rules.yaml"
    extra.write_text("defaults:\n  volatile_params: [id]\nhosts:\n  shop.example:\n    volatile_params: [q]\n")
    return extra


def test_key_maker_gives_canonicalize_keys(tmp_path):
    rng = random.Random(9)
    urls = [_url(rng, i) for i in range(3000)] + ["http://a?x=1/b", "http://a#f/b?x=1", "HTTP://EX.com:80/P?b=2&a=1",
                                                  "https://x.example:443", "ftp://x/y", "h://x/\x00?\x01=1"]
    methods = [rng.choice(["GET", "HEAD", "POST", "get"]) for _ in urls]
    bodies = [rng.choice([None, "a=1&ts=1712345678", "x=%00"]) if m == "POST" else None for m in methods]
    for rules in (RULES, load_rules([_rules_file(tmp_path)])):
        maker = KeyMaker(rules)
        want = [key_bytes(url_host(u), canonicalize(m, u, b, rules).key) for m, u, b in zip(methods, urls, bodies, strict=True)]
        assert maker.keys(methods, urls, bodies) == want
        assert maker.keys(methods, urls, bodies) == want  # from its memos
        half = len(urls) // 2  # a batch without the NUL: the texts themselves
        texts = maker.texts(methods[:half], urls[:half], bodies[:half])
        assert texts is not None and [t.encode() for t in texts] == want[:half]
    assert KeyMaker(RULES).texts(["GET"], ["h://x/\x00"], [None]) is None


def test_key_maker_gives_canonicalize_keys_of_plain_gets(tmp_path):
    """GETs of URLs without a character that sends a path the general way: taken a run of one origin
    at a time (sorted, as an index keeps them, and shuffled), with the keys canonicalize gives."""
    rng = random.Random(10)
    hosts = ["shop.example", "WWW.Shop.Example", "api.shop.example:8443", "shop.example:443", "user@a.example",
             "[2001:db8::1]:8080", "trailing.example.", "127.0.0.1:9", "a?b", ""]
    paths = ["/", "/item", "/Item/", "/x//", "/a/b/c", ""]
    params = ["tok=1", "id=2", "_=1712345678901", "utm_source=s", "q=blue+hat", "callback=jQuery123", "a=&b", "",
              "x=1?y=2", "z"]
    urls = []
    for _ in range(3000):
        query = "&".join(rng.sample(params, rng.randint(0, 3)))
        scheme = rng.choice(["https", "http", "HTTP", "wss", "ftp"])
        urls.append(f"{scheme}://{rng.choice(hosts)}{rng.choice(paths)}" + (f"?{query}" if query else ""))
    urls += ["notaurl?x=1", "mailto:a@b.example", "http://a?q=1", "http://a", "//x/y", "http:/x/y"]
    for rules in (RULES, load_rules([_rules_file(tmp_path)])):
        for batch in (sorted(urls), rng.sample(urls, len(urls))):
            maker = KeyMaker(rules)
            assert maker._plain_gets(batch) is not None  # the way under test
            want = [f"{url_host(u)}\x00{canonicalize('GET', u, None, rules).key}" for u in batch]
            assert maker.texts(["GET"] * len(batch), batch, [None] * len(batch)) == want
            assert maker.texts(["GET"] * len(batch), batch, [None] * len(batch)) == want  # from its memos
    assert KeyMaker(RULES)._plain_gets(["http://a/b c"]) is None


@pytest.mark.parametrize("odd", ["!meta {}", "   ", "\r\n", "bad line"])
def test_an_index_the_line_readers_treat_apart_is_left_to_them(tmp_path, data_home, monkeypatch, odd):
    """A header line (the learner skips it, the map refuses it), a line of blanks, CRLF line ends, a
    corrupt line: nothing is built from the one read, and the open gives what it gave before."""
    monkeypatch.setattr(learned_cache, "MIN_BYTES", 0)
    lines = _lines(random.Random(4), 60)
    if odd == "\r\n":
        snap = _snapshot(tmp_path, [line + "\r" for line in lines])
    else:
        snap = _snapshot(tmp_path, [odd, *lines])
    index = snap.index_path
    build_first_open([snap], RULES)
    assert not map_file(index).exists() and not learned_file(index).exists()
    if odd in ("!meta {}", "   ", "bad line"):
        with pytest.raises(ArchiveError, match="line 1 is not a valid CDXJ line"):
            MappedMatchIndex.open([index], learned=load_learned([snap]))
        return
    got = MappedMatchIndex.open([index], learned=load_learned([snap]))
    want = tmp_path / "want"
    _map_as_before(index, want)
    assert_same_map(map_file(index), want, index)
    assert len(got) == len(parse_rows(index))
    got.close()


def _new_cache_files(before: set[Path]) -> dict[str, bytes]:
    """The files of ``index-cache/`` not in ``before``, by name (a canonical keys file by its kind: its
    name holds the map file's mtime), with their bytes (then removed)."""
    out = {}
    for path in set(cache_dir().iterdir()) - before:
        out["canonical" if path.name.endswith(".canonical.sorted") else path.name] = path.read_bytes()
        path.unlink()
    return out


def _warm_as_before(index: Path) -> None:
    """``warm_cache`` as it was: the rows parsed (and their compact cache), the map from the rows, the hooks."""
    rows = index_rows(index)
    target = build_index_map(index, rows)
    run_map_hooks(index, target)


@pytest.mark.parametrize("odd", [None, "\r\n"])
def test_warm_cache_writes_what_it_wrote_from_the_parsed_rows(tmp_path, data_home, odd):
    """finalize and `snapshot index` warm the caches from one read of the index: the same files (the
    compact cache, the map, replay's canonical keys) with the same bytes; CRLF lines (left to the line
    readers) the same as well."""
    install_index_hook()
    lines = _lines(random.Random(11), 2600)
    snap = _snapshot(tmp_path, [line + "\r" for line in lines] if odd else lines)
    index = snap.index_path
    cache_dir().mkdir(parents=True, exist_ok=True)
    before = set(cache_dir().iterdir())
    _warm_as_before(index)
    want = _new_cache_files(before)
    assert len(want) == 3, sorted(want)  # the compact cache, the map, the canonical keys
    scans = []
    real_scan = indexscan.scan_index

    def counted(path):  # noqa: ANN001, ANN202
        scans.append(path)
        return real_scan(path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(first_open, "scan_index", counted)
        warm_cache(index)
    got = _new_cache_files(before)
    assert sorted(got) == sorted(want)
    for name, data in got.items():
        if data.startswith(b"E2RSORT1") and name != "canonical":  # the map: its lines laid in the order read
            (tmp_path / "got.sorted").write_bytes(data)
            (tmp_path / "want.sorted").write_bytes(want[name])
            assert_same_map(tmp_path / "got.sorted", tmp_path / "want.sorted", None if odd else index)
        else:
            assert data == want[name], name
    assert len(scans) == 1  # the one read was tried (and, with CRLF, left to the line readers)


def _batch_fields(batch: indexscan.Batch) -> tuple:
    return (batch.timestamps, list(batch.offsets), batch.urls, batch.methods, batch.bodies, batch.digests,
            batch.starts.tolist(), batch.lengths.tolist(), list(batch.numbers), list(batch.teaching), batch.plain)


def test_a_block_is_read_by_the_loose_expression_as_by_the_strict_one(monkeypatch):
    """Blocks of plain lines, some spoilt (a quote dropped, so a value could run on into the next line;
    a tab or a backslash in a value; a blank line): each block gives the batch the strict expression
    gives, whichever of the two reads it (the loose one only where no backslash or control character is)."""
    rng = random.Random(21)
    plain = [line for line in _lines(rng, 3000) if indexscan._FAST.fullmatch(line)]
    loose = strict = 0
    for trial in range(300):
        lines = rng.sample(plain, rng.randint(1, 12))
        for _ in range(rng.choice([0, 0, 1, 2])):
            at = rng.randrange(len(lines))
            line = lines[at]
            if not line:
                continue
            spoil = rng.choice(["quote", "quote", "tab", "backslash", "blank"])
            if spoil == "quote":
                quotes = [i for i, c in enumerate(line) if c == '"']
                cut = rng.choice(quotes)
                line = line[:cut] + line[cut + 1:]
            elif spoil == "blank":
                line = ""
            else:
                cut = rng.randrange(line.index("{") + 10, len(line) - 2)
                line = line[:cut] + ("\t" if spoil == "tab" else "\\\\") + line[cut:]
            lines[at] = line
        text = "\n".join(lines) + ("\n" if trial % 3 else "")
        block = text.encode()
        count = text.count("\n") + (not text.endswith("\n"))

        def read(expression: object, text: str = text, block: bytes = block, count: int = count) -> tuple:
            monkeypatch.setattr(indexscan, "_LOOSE_LINES", expression)
            try:
                breaks, clean = indexscan._breaks(memoryview(block), text)
                places = indexscan._places(breaks, len(block), 0, count)
                return _batch_fields(indexscan._batch(text, clean, *places, 5, count))
            except indexscan.IrregularIndex:
                return ("irregular",)

        real = indexscan._LOOSE_LINES
        got = read(real)
        assert got == read(indexscan._FAST_LINES), text
        monkeypatch.setattr(indexscan, "_LOOSE_LINES", real)
        if indexscan._breaks(memoryview(block), text)[1]:
            loose += 1
        else:
            strict += 1
    assert loose > 100 and strict > 30


@pytest.mark.parametrize("char", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\t", "\\",
                                  "é", None])
def test_a_block_breaking_lines_as_splitlines_does_is_irregular(char):
    """A block holding a line break of str.splitlines other than \\n is left to the line readers; a
    tab or a backslash only keeps the block from the loose expression."""
    line = IndexEntry("k", "20260101000000", "http://a/x?q=1", "text/html", "sha1:X", 1, 2, "f", 200).to_line()
    text = f"{line}\n{line[:30]}{char or ''}{line[30:]}\n{line}"
    view = memoryview(text.encode())
    if char is not None and char not in "\t\\é":
        with pytest.raises(indexscan.IrregularIndex):
            indexscan._breaks(view, text)
        return
    breaks, clean = indexscan._breaks(view, text)
    assert breaks.tolist() == [i for i, b in enumerate(view.tobytes()) if b == 10]
    assert clean == (char in (None, "é"))
