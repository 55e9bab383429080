"""Volatility learned at record time (snapshots.volatility) and its use by the matcher."""

from __future__ import annotations

from ego2web_replay.replay.matching import Capture, MatchIndex
from ego2web_replay.replay.rules import default_rules
from ego2web_replay.snapshots.volatility import (
    learn_volatile,
    merge_volatile,
    path_group,
    read_volatile,
    write_volatile,
)

RULES = default_rules()


def test_path_group_ignores_query_and_fragment():
    assert path_group("get", "HTTP://Shop.Example:8080/api/stock?tok=1#x") == "GET http://shop.example:8080/api/stock"
    assert path_group("POST", "https://e.com") == "POST https://e.com/"


def test_token_with_same_response_is_learned():
    learned = learn_volatile([
        ("GET", "https://e.com/api/stock?id=4&tok=a81f", None, "sha1:X"),
        ("GET", "https://e.com/api/stock?id=4&tok=77c0", None, "sha1:X"),
        ("GET", "https://e.com/api/stock?id=5&tok=1b2e", None, "sha1:Y"),
        ("POST", "https://e.com/api/log", "event=view&rid=1", "sha1:Z"),
        ("POST", "https://e.com/api/log", "event=view&rid=2", "sha1:Z"),
    ])
    assert learned == {"GET https://e.com/api/stock": ["tok"], "POST https://e.com/api/log": ["rid"]}


def test_a_name_that_changed_the_response_is_not_learned():
    # page differs with the same response once (an empty last page) but also changed the response
    learned = learn_volatile([
        ("GET", "https://e.com/list?page=8", None, "sha1:EMPTY"),
        ("GET", "https://e.com/list?page=9", None, "sha1:EMPTY"),
        ("GET", "https://e.com/list?page=1", None, "sha1:P1"),
    ])
    assert learned == {}
    # one capture per path teaches nothing; different responses teach nothing
    assert learn_volatile([("GET", "https://e.com/s?q=a", None, "sha1:A"),
                           ("GET", "https://e.com/s?q=b", None, "sha1:B")]) == {}


def test_learned_names_file_roundtrip(tmp_path):
    write_volatile(tmp_path, {"GET https://e.com/a": ["tok"]})
    assert read_volatile(tmp_path) == {"GET https://e.com/a": ["tok"]}
    assert read_volatile(tmp_path / "missing") == {}
    merged = merge_volatile({"GET https://e.com/a": ["tok"]}, {"GET https://e.com/a": ["rid"]})
    assert merged == {"GET https://e.com/a": frozenset({"tok", "rid"})}


def test_matcher_drops_learned_names_for_their_path_only():
    captures = [Capture("https://e.com/api/stock?id=4&tok=a81f", ref=1),
                Capture("https://e.com/other?id=4&tok=a81f", ref=2)]
    learned = {"GET https://e.com/api/stock": frozenset({"tok"})}
    index = MatchIndex(captures, RULES, learned=learned)
    hit = index.match("GET", "https://e.com/api/stock?tok=ffff&id=4")
    assert hit.outcome == "canonical" and hit.capture.ref == 1 and "learned volatile: tok" in hit.key
    assert index.match("GET", "https://e.com/api/stock?id=5&tok=ffff").outcome == "miss"  # id still matters
    assert index.match("GET", "https://e.com/other?id=4&tok=ffff").outcome == "miss"  # other path: not learned
    assert MatchIndex(captures, RULES).match("GET", "https://e.com/api/stock?id=4&tok=ffff").outcome == "miss"


def test_a_content_name_learned_volatile_is_never_set_aside():
    """Two searches that both found nothing got the same bytes, so ``term`` looks volatile; it chose the answer
    all the same: a content name (``term*``, ``q``, ``*id`` ...) is never set aside by what was learned."""
    form = "application/json"
    empty = [Capture.of_request("https://e.com/graphql", "POST", b'{"op":"Search","term":"zzz"}', form, ref=1),
             Capture.of_request("https://e.com/graphql", "POST", b'{"op":"Search","term":"qqq"}', form, ref=2)]
    learned = learn_volatile([("POST", "https://e.com/graphql", c.body, "sha1:EMPTY") for c in empty])
    assert learned == {"POST https://e.com/graphql": ["term"]}  # (what record time learns, as it was)
    index = MatchIndex(empty, RULES, learned={g: frozenset(n) for g, n in learned.items()})
    asked = index.match("POST", "https://e.com/graphql", b'{"op":"Search","term":"walnut"}', form)
    assert asked.outcome == "miss"  # never the empty answer of another term
    tok = MatchIndex([Capture("https://e.com/api/stock?id=4&tok=a81f", ref=1)], RULES,
                     learned={"GET https://e.com/api/stock": frozenset({"tok"})})
    assert tok.match("GET", "https://e.com/api/stock?tok=ffff&id=4").outcome == "canonical"  # (tok is none)


def test_reloads_teach_and_survive_a_reindex(tmp_path):
    """A record-time second load's requests learn like captures, are kept in volatile.json, and
    re-indexing learns from them again; a name whose second value got another response is not learned."""
    from ego2web_replay.snapshots.snapshot import SnapshotWriter
    from ego2web_replay.snapshots.verify import reindex_snapshot
    from ego2web_replay.snapshots.volatility import read_reloads, reload_of

    sw = SnapshotWriter(tmp_path, "reload")
    for url, body in (("https://e.com/api/items?q=hat&rid=1", b'["hat"]'), ("https://e.com/api/other?q=a", b"a")):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "application/json")], response_body=body)
    sw.reloads = [reload_of("GET", "https://e.com/api/items?q=hat&rid=2", None, b"", b'["hat"]'),
                  reload_of("GET", "https://e.com/api/other?q=b", None, b"", b"b")]
    sw.finalize()
    assert read_volatile(sw.path) == {"GET https://e.com/api/items": ["rid"]}
    assert read_reloads(sw.path) == sw.reloads
    reindex_snapshot(sw.path)
    assert read_volatile(sw.path) == {"GET https://e.com/api/items": ["rid"]}
    assert read_reloads(sw.path) == sw.reloads
    assert reload_of("POST", "https://e.com/e", "application/json", b'{"a": 1}', b"x")[2] == "a=1"
