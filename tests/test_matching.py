"""MatchIndex / ReplaySession: the four stages, sequencing policies, threads, scale."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ego2web_replay.replay.matching import (
    MATCH_STAGES,
    Capture,
    MatchIndex,
    ReplaySession,
    describe_key,
    similarity,
)
from ego2web_replay.replay.rules import default_rules

RULES = default_rules()


def cap(url: str, method: str = "GET", body: bytes | None = None, ctype: str | None = None, ref: object = None) -> Capture:
    return Capture.of_request(url, method, body, ctype, timestamp="20240405100000", ref=url if ref is None else ref)


SHOP = [
    cap("https://shop.example/item?id=1&_=1712345678901"),
    cap("https://shop.example/search?q=red+shoes&page=1&sort=price"),
    cap("https://shop.example/search?q=blue+hats&page=2&sort=rating"),
]


def test_off_path_requests_miss_by_default():
    index = MatchIndex(SHOP, RULES)
    for url in ("https://shop.example/search?q=red+shoes&page=2&sort=price",  # another page
                "https://shop.example/search?q=red+hats&page=1&sort=price",  # another search term
                "https://shop.example/search?q=red+shoes&page=1&sort=rating",  # another sort order
                "https://shop.example/item?id=2"):  # another id
        assert index.match("GET", url).outcome == "miss", url
    assert index.match("GET", "https://shop.example/search?sort=price&page=1&q=red%20shoes").outcome == "canonical"
    assert index.match("GET", "https://shop.example/item?id=1&_=1799999999999").outcome == "canonical"


def test_exact_then_canonical_then_fuzzy_then_miss():
    index = MatchIndex(SHOP, RULES, fuzzy=True)
    exact = index.match("GET", "https://shop.example/item?id=1&_=1712345678901")
    assert exact.outcome == "exact" and exact.capture is not None and exact.score == 1.0
    assert exact.key == "GET https://shop.example/item?id=1&_=1712345678901"

    canonical = index.match("get", "https://SHOP.example:443/item?_=1719999999999&id=1&utm_source=mail")
    assert canonical.outcome == "canonical"
    assert canonical.capture is exact.capture
    assert canonical.key == "GET https://(example,shop,)/item?id=1"

    fuzzy = index.match("GET", "https://shop.example/search?q=red+shoes&page=2&sort=price")
    assert fuzzy.outcome == "fuzzy"
    assert fuzzy.capture is not None and fuzzy.capture.url.endswith("q=red+shoes&page=1&sort=price")
    # q and sort agree, page differs: (1 + 1 + 0.5) / 3
    assert fuzzy.score == pytest.approx(2.5 / 3, abs=1e-6)
    assert fuzzy.key == "GET https://(example,shop,)/search"

    below = index.match("GET", "https://shop.example/search?q=green&lang=de&view=grid")
    assert below.outcome == "miss" and below.capture is None and below.score is None
    assert index.match("GET", "https://shop.example/other").outcome == "miss"
    assert index.match("POST", "https://shop.example/item?id=1").outcome == "miss"
    assert index.match("GET", "http://shop.example/item?id=1").outcome == "miss"  # scheme matters


def test_fuzzy_threshold_configurable():
    captures = [cap("https://e.com/s?q=a&x=1&y=2&z=3")]
    request = "https://e.com/s?q=a&x=9&w=0"  # q equal, x differs, y z w one side: 1.5 / 5 = 0.3
    assert MatchIndex(captures, RULES, fuzzy=True).match("GET", request).outcome == "miss"
    assert MatchIndex(captures, RULES, fuzzy_threshold=0.25).match("GET", request).outcome == "miss"  # opt-in
    loose = MatchIndex(captures, RULES, fuzzy_threshold=0.25, fuzzy=True).match("GET", request)
    assert loose.outcome == "fuzzy" and loose.score == pytest.approx(0.3)


def test_fuzzy_ties_go_to_the_capture_closest_in_recorded_order():
    index = MatchIndex(
        [
            cap("https://e.com/api?page=1&k=a"),  # 0
            cap("https://e.com/other"),  # 1
            cap("https://e.com/other2"),  # 2
            cap("https://e.com/other3"),  # 3
            cap("https://e.com/api?page=2&k=a"),  # 4
        ],
        RULES,
        fuzzy=True,
    )
    request = "https://e.com/api?page=3&k=a"  # equally similar to 0 and 4
    assert index.match("GET", request).capture.url.endswith("page=1&k=a")  # cursor at start
    index.match("GET", "https://e.com/other3")  # cursor moves to position 3
    assert index.match("GET", request).capture.url.endswith("page=2&k=a")


def test_post_bodies_match_by_fields():
    form = "application/x-www-form-urlencoded"
    body = json.dumps({"query": "cats", "page": 1, "clientTime": 1712345678901, "nonce": "n1"}).encode()
    index = MatchIndex(
        [
            cap("https://api.e.com/search", "POST", body, "application/json"),
            cap("https://api.e.com/login", "POST", b"user=ann&csrf_token=abc", form),
        ],
        RULES,
        fuzzy=True,
    )
    assert index.match("POST", "https://api.e.com/search", body, "application/json").outcome == "exact"
    replayed = json.dumps({"nonce": "n2", "page": 1, "query": "cats", "clientTime": 1719999999999}).encode()
    assert index.match("POST", "https://api.e.com/search", replayed, "application/json").outcome == "canonical"
    page2 = json.dumps({"nonce": "n3", "page": 2, "query": "cats"}).encode()
    fuzzy = index.match("POST", "https://api.e.com/search", page2, "application/json")
    assert fuzzy.outcome == "fuzzy" and fuzzy.score == pytest.approx(0.75)
    assert index.match("POST", "https://api.e.com/login", b"csrf_token=zzz&user=ann", form).outcome == "canonical"
    assert index.match("POST", "https://api.e.com/login", b"user=bob", form).outcome == "fuzzy"
    strict = MatchIndex(index.captures, RULES)  # the default: another JSON field value is a miss
    assert strict.match("POST", "https://api.e.com/search", page2, "application/json").outcome == "miss"
    assert strict.match("POST", "https://api.e.com/search", replayed, "application/json").outcome == "canonical"


def test_sequence_policy_serves_in_recorded_order_then_repeats_last():
    captures = [cap("https://e.com/poll?_=1712345678901", ref=1), cap("https://e.com/poll?_=1712345679901", ref=2),
                cap("https://e.com/poll?_=1712345680901", ref=3)]
    index = MatchIndex(captures, RULES)
    results = [index.match("GET", f"https://e.com/poll?_={1719999999000 + i}") for i in range(5)]
    assert [r.capture.ref for r in results] == [1, 2, 3, 3, 3]
    # past the recorded series: said, with the series (the responder tells a changing one apart)
    assert [len(r.series) for r in results] == [0, 0, 0, 3, 3]
    index.reset()
    assert index.match("GET", "https://e.com/poll?_=1719999999000").capture.ref == 1
    # an independent session starts over; the policy can be chosen per session
    assert [index.session().match("GET", "https://e.com/poll").capture.ref for _ in range(2)] == [1, 1]
    first = index.session("first")
    assert [first.match("GET", "https://e.com/poll").capture.ref for _ in range(3)] == [1, 1, 1]
    last = MatchIndex(captures, RULES, policy="last")
    assert [last.match("GET", "https://e.com/poll").capture.ref for _ in range(2)] == [3, 3]
    with pytest.raises(ValueError, match="policy"):
        ReplaySession(index, "random")  # type: ignore[arg-type]


def test_exact_duplicates_are_sequenced_too():
    index = MatchIndex([cap("https://e.com/s", ref="a"), cap("https://e.com/s", ref="b")], RULES)
    assert [index.match("GET", "https://e.com/s").capture.ref for _ in range(3)] == ["a", "b", "b"]
    # a page asked for again with a single capture is not past a series; and only `sequence` has one
    once = MatchIndex([cap("https://e.com/one", ref="o")], RULES)
    assert [once.match("GET", "https://e.com/one").series for _ in range(3)] == [()] * 3
    last = MatchIndex([cap("https://e.com/s", ref="a"), cap("https://e.com/s", ref="b")], RULES, policy="last")
    assert [last.match("GET", "https://e.com/s").series for _ in range(3)] == [()] * 3


def test_sequence_skips_captures_served_by_another_stage():
    index = MatchIndex([cap("https://e.com/poll?_=1712345678901", ref=1), cap("https://e.com/poll?_=1712345679901", ref=2)], RULES)
    assert index.match("GET", "https://e.com/poll?_=1712345678901").outcome == "exact"
    second = index.match("GET", "https://e.com/poll?_=1719999999999")
    assert second.outcome == "canonical" and second.capture.ref == 2
    assert index.match("GET", "https://e.com/poll?_=1719999999999").capture.ref == 2


def test_head_falls_back_to_get():
    index = MatchIndex([cap("https://e.com/file.pdf")], RULES)
    result = index.match("HEAD", "https://e.com/file.pdf")
    assert result.outcome == "exact" and result.capture.method == "GET"
    with_head = MatchIndex([cap("https://e.com/file.pdf"), cap("https://e.com/x", "HEAD")], RULES)
    assert with_head.match("HEAD", "https://e.com/file.pdf").outcome == "miss"


def test_numbers_that_choose_content_are_never_taken_for_times():
    """A 10-digit value reads like an epoch time in seconds: under a name that chooses content (an id, a
    search, an ISBN, a phone number) another value is another page, a miss; under any other name it is a
    fresh id, answered and logged with the name set aside; under a timestamp name it is dropped by rule."""
    index = MatchIndex([cap("https://books.example/book?isbn=1491954248"),
                        cap("https://books.example/search?q=2125550199"),
                        cap("https://books.example/item?item_id=1700000000"),
                        cap("https://books.example/lookup", "POST", b'{"phone": "2125550199"}', "application/json"),
                        cap("https://books.example/feed?at=1712345678901"),
                        cap("https://books.example/list?ts=1712345678")], RULES)
    for method, url, body in (("GET", "https://books.example/book?isbn=1492056200", None),
                              ("GET", "https://books.example/search?q=2125550123", None),
                              ("GET", "https://books.example/item?item_id=1700000001", None),
                              ("POST", "https://books.example/lookup", b'{"phone": "2125550123"}')):
        assert index.match(method, url, body, "application/json").outcome == "miss", url
    flights = MatchIndex([cap("https://fly.example/search", "POST", b'{"departure": "2026-05-01T10:00:00", '
                                  b'"sentAt": "2026-12-07T19:00:00.120Z"}', "application/json")], RULES)
    other_flight = flights.match("POST", "https://fly.example/search", b'{"departure": "2026-05-01T18:30:00", '
                                 b'"sentAt": "2026-12-07T19:00:00.120Z"}', "application/json")
    assert other_flight.outcome == "miss"  # a departure time chooses content: never set aside
    again = flights.match("POST", "https://fly.example/search", b'{"departure": "2026-05-01T10:00:00", '
                          b'"sentAt": "2026-12-08T08:15:42.001Z"}', "application/json")
    assert (again.outcome, again.via, again.ignored) == ("canonical", "fresh-id", ("body:sentAt",))
    fresh = index.match("GET", "https://books.example/feed?at=1799999999999")
    assert (fresh.outcome, fresh.via, fresh.ignored) == ("canonical", "fresh-id", ("at",))
    by_rule = index.match("GET", "https://books.example/list?ts=1799999999")
    assert (by_rule.outcome, by_rule.via) == ("canonical", None)


def test_a_head_takes_nothing_from_the_gets_turn():
    index = MatchIndex([cap("https://e.com/poll", ref=0), cap("https://e.com/poll", ref=1)], RULES)
    session = index.session("sequence")
    assert session.match("HEAD", "https://e.com/poll").capture.ref == 0  # what the next GET gets
    assert [session.match("GET", "https://e.com/poll").capture.ref for _ in range(3)] == [0, 1, 1]


def test_sessions_are_thread_safe():
    captures = [cap(f"https://e.com/poll?_={1712345678901 + i}", ref=i) for i in range(200)]
    index = MatchIndex(captures, RULES)
    served: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            ref = index.match("GET", "https://e.com/poll?_=1").capture.ref
            with lock:
                served.append(ref)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(served) == list(range(200))  # each capture served exactly once


def test_similarity():
    assert similarity([], []) == 1.0
    assert similarity([("a", "1")], [("a", "1")]) == 1.0
    assert similarity([("a", "1")], [("a", "2")]) == 0.5
    assert similarity([("a", "1")], [("b", "1")]) == 0.0
    assert similarity([("a", "1"), ("a", "2")], [("a", "1")]) == pytest.approx(0.75)


def test_describe_key_and_stage_text():
    text = describe_key("GET", "https://www.e.com/p?b=1&a=2&utm_source=x")
    assert "canonical key: GET https://(com,e,www,)/p?a=2&b=1" in text
    assert "path group:    GET https://(com,e,www,)/p" in text
    assert "dropped:       utm_source" in text
    post = describe_key("POST", "https://e.com/f", b"a=1&nonce=2", "application/x-www-form-urlencoded")
    assert "fields:        body:a=1" in post
    assert "fresh ids:     (none)" in post
    ids = describe_key("GET", "https://e.com/p?q=hat&rid=550e8400-e29b-41d4-a716-446655440000"
                       "&product_id=6fa459ea-ee8a-4ca4-894e-db77e160355e")
    assert "fresh ids:     rid (set aside" in ids
    for stage in ("exact", "canonical", "fuzzy", "miss", "sequence"):
        assert stage in MATCH_STAGES


def test_100k_captures_build_fast_and_match_correctly():
    captures = [
        Capture(url=f"https://www.site{i % 50}.example/p/{i % 1000}?id={i}&_={1712345678901 + i}&utm_source=x",
                timestamp="20240405100000", ref=i)
        for i in range(100_000)
    ]
    start = time.perf_counter()
    index = MatchIndex(captures, RULES, fuzzy=True)
    built = time.perf_counter() - start
    start = time.perf_counter()
    canonical = index.match("GET", "https://www.site7.example/p/7?utm_source=y&id=7&_=1")
    first_lookup = time.perf_counter() - start
    print(f"\n100k captures: index built in {built:.3f}s; first non-exact lookup (one host, 2k captures) {first_lookup:.3f}s")
    assert len(index) == 100_000
    assert index.match("GET", captures[99_999].url).capture.ref == 99_999
    assert canonical.outcome == "canonical" and canonical.capture.ref == 7
    fuzzy = index.match("GET", "https://www.site7.example/p/7?id=99999999&extra=1")
    assert fuzzy.outcome == "miss"  # id differs (0.5 of 2 names) -> 0.25
    near = index.match("GET", "https://www.site7.example/p/7?id=99999")
    assert near.outcome == "fuzzy" and near.score == 0.5
