"""Fresh ids from one recording: id-shaped values set aside only when nothing else differs."""

from __future__ import annotations

import json

import pytest

from ego2web_replay.replay.freshids import id_shape
from ego2web_replay.replay.matching import Capture, MatchIndex
from ego2web_replay.replay.rules import MatchRules, default_rules, load_rules

RULES = default_rules()
U1, U2, U3 = ("550e8400-e29b-41d4-a716-446655440000", "6fa459ea-ee8a-4ca4-894e-db77e160355e",
              "16fd2706-8baf-433b-82eb-8c7fb22e5b6e")
API = "https://shop.example/api/items"


@pytest.mark.parametrize(("value", "shape"), [
    (U1, "uuid"), (U1.upper(), "uuid"),
    ("4bf92f3577b34da6a3ce929d0e0e4736", "hex32"), ("00F067AA0BA902B7", "hex16"),
    ("aGVsbG8gV29ybGQhIDEyMzQ1Ng", "b64-26"), ("Zx9_qR2-Lm4pTt8vWw3yBb", "b64-22"),
    ("1234567890.1712345678", "ga-cid"), ("GA1.1.987654321.1712345678", "ga-cid"),
    ("1712345678901", "epoch13"), ("1712345678.25", "epoch10"),
    ("2026-01-02T03:04:05", "datetime"), ("2026-01-02T03:04:05.123Z", "datetime"), ("2026-01-02 03:04+02:00", "datetime"),
])
def test_id_shapes(value, shape):
    assert id_shape(value, RULES.for_host("shop.example")) == shape


@pytest.mark.parametrize("value", [
    "123", "42", "1234567", "12345678901234567890",  # numbers, even long ones (tweet-like ids), are not random ids
    "deadbeefcafebabe", "helloworldhelloworld", "Blue-Hat_Size_Large_XL", "red hat", "2026-01-02",
    "9999999999999",  # 13 digits outside the epoch window
])
def test_not_id_shapes(value):
    assert id_shape(value, RULES.for_host("shop.example")) is None


def _index(*captures: Capture, rules: MatchRules = RULES) -> MatchIndex:
    return MatchIndex(list(captures), rules=rules)


def test_one_capture_matches_a_request_differing_only_in_fresh_ids():
    index = _index(Capture(f"{API}?q=hat&cid=1234567890.1712345678&rid={U1}&trace=4bf92f3577b34da6a3ce929d0e0e4736"))
    got = index.match("GET", f"{API}?trace=0af7651916cd43dd8448eb211c80319c&q=hat&rid={U2}&cid=987654321.1712349999")
    assert got.outcome == "canonical" and got.via == "fresh-id"
    assert got.ignored == ("cid", "rid", "trace?")  # (a random id under a name no rule lists: marked)
    assert got.capture is not None and got.capture.url.startswith(f"{API}?q=hat")
    # the same request again is the same capture (sequence keeps serving the last)
    assert index.match("GET", f"{API}?q=hat&cid=111111111.1712345678&rid={U3}&trace=" + "a1" * 16).via == "fresh-id"


@pytest.mark.parametrize("url", [
    f"{API}?q=shoe&cid=1234567890.1712345679&rid={U2}",  # another search term
    f"{API}?q=hat&cid=1234567890.1712345679&rid={U2}&page=2",  # a parameter more
    f"{API}?q=hat&rid={U2}",  # a parameter fewer
    f"{API}?q=hat&cid=1234567890.1712345679&rid=abc",  # not an id any more
    f"{API}?q=hat&cid=1234567890.1712345679&rid=" + "4bf92f3577b34da6a3ce929d0e0e4736",  # another shape
    f"https://shop.example/api/other?q=hat&cid=1234567890.1712345679&rid={U2}",  # another path
    f"https://other.example/api/items?q=hat&cid=1234567890.1712345679&rid={U2}",  # another host
])
def test_any_other_difference_is_a_miss(url):
    index = _index(Capture(f"{API}?q=hat&cid=1234567890.1712345678&rid={U1}"))
    assert index.match("GET", url).outcome == "miss"


@pytest.mark.parametrize("name", ["id", "product_id", "productId", "itemId", "doc", "sha256Hash", "token", "q",
                                  "page", "sort", "v", "user_ids"])
def test_content_names_never_hold_fresh_ids(name):
    """Another product, document or query is another page even when its id is a random-looking UUID."""
    index = _index(Capture(f"{API}?{name}={U1}&cid={U3}"))
    assert index.match("GET", f"{API}?{name}={U2}&cid={U3}").outcome == "miss"
    assert index.match("GET", f"{API}?{name}={U1}&cid={U2}").via == "fresh-id"  # the tracking id alone may differ


def test_json_body_fresh_ids_are_set_aside_and_named():
    body = {"event": "view", "messageId": U1, "anonymousId": U3, "context": {"span": "00f067aa0ba902b7"}}
    index = _index(Capture.of_request("https://t.example/v1/track", "POST", json.dumps(body).encode(),
                                      "application/json"))
    fresh = dict(body, messageId=U2, context={"span": "b7ad6b7169203331"})
    got = index.match("POST", "https://t.example/v1/track", json.dumps(fresh).encode(), "application/json")
    assert got.outcome == "canonical" and got.via == "fresh-id"
    assert got.ignored == ("body:messageId", "body:span?")
    other = dict(fresh, event="purchase")
    assert index.match("POST", "https://t.example/v1/track", json.dumps(other).encode(),
                       "application/json").outcome == "miss"
    persisted = {"operationName": "Items", "extensions": {"sha256Hash": "ab12" * 16}, "requestId": U1}
    index = _index(Capture.of_request("https://g.example/graphql", "POST", json.dumps(persisted).encode(),
                                      "application/json"))
    another_query = dict(persisted, extensions={"sha256Hash": "cd34" * 16})
    assert index.match("POST", "https://g.example/graphql", json.dumps(another_query).encode(),
                       "application/json").outcome == "miss"


def test_form_body_fresh_ids():
    index = _index(Capture.of_request("https://t.example/collect", "POST", f"v=2&tid=G-ABC&cid=12345678.1712345678&"
                                      f"uid={U1}".encode(), "application/x-www-form-urlencoded"))
    got = index.match("POST", "https://t.example/collect", b"v=2&tid=G-ABC&cid=87654321.1712345999&uid=" + U1.encode(),
                      "application/x-www-form-urlencoded")
    assert got.via == "fresh-id" and got.ignored == ("body:cid",)


def test_a_random_id_under_an_unlisted_name_is_set_aside_but_never_taken_as_surely_fresh():
    """``owner``, ``node``, ``workspace``: a UUID under such a name may be a thing's key (another user's shelf).
    Set aside (the page still renders), but marked, and the episode at best degraded; an epoch time under it,
    or a UUID under a listed name, is surely fresh."""
    from ego2web_replay.models import ReplayLogEntry
    from ego2web_replay.validity import classify

    form = "application/json"
    shelf = Capture.of_request(f"{API}", "POST", json.dumps({"op": "Shelf", "owner": U1}).encode(), form)
    got = _index(shelf).match("POST", f"{API}", json.dumps({"op": "Shelf", "owner": U2}).encode(), form)
    assert (got.via, got.ignored) == ("fresh-id", ("body:owner?",))
    entry = ReplayLogEntry(method="POST", url=API, outcome="canonical", kind="content", volatile="fresh-id: body:owner?")
    assert classify([entry]) == "degraded"
    sure = ReplayLogEntry(method="POST", url=API, outcome="canonical", kind="content",
                          volatile="fresh-id: body:requestId, body:sentAt")
    assert classify([sure]) == "complete"
    timed = Capture.of_request(f"{API}", "POST", json.dumps({"op": "Shelf", "owner": 1712345678901}).encode(), form)
    got = _index(timed).match("POST", f"{API}", json.dumps({"op": "Shelf", "owner": 1712349999999}).encode(), form)
    assert got.ignored == ("body:owner",)


def test_rules_can_keep_a_name_or_turn_fresh_ids_off(tmp_path):
    capture = Capture(f"{API}?q=hat&trace={U1}")
    request = f"{API}?q=hat&trace={U2}"
    assert _index(capture).match("GET", request).via == "fresh-id"
    kept = tmp_path / "keep.yaml"
    kept.write_text("hosts:\n  shop.example:\n    keep_params: [trace]\n")
    assert _index(capture, rules=load_rules([kept])).match("GET", request).outcome == "miss"
    content = tmp_path / "content.yaml"
    content.write_text("hosts:\n  shop.example:\n    content_params: [trace]\n")
    assert _index(capture, rules=load_rules([content])).match("GET", request).outcome == "miss"
    off = tmp_path / "off.yaml"
    off.write_text("defaults:\n  fresh_ids: false\n")
    assert _index(capture, rules=load_rules([off])).match("GET", request).outcome == "miss"


def test_earlier_stages_win_and_learned_matches_name_their_parameters():
    exact = f"{API}?q=hat&rid={U1}"
    index = MatchIndex([Capture(exact), Capture(f"{API}?q=hat&tok=1&rid={U1}")],
                       learned={"GET https://shop.example/api/items": frozenset({"tok"})})
    assert index.match("GET", exact).outcome == "exact"
    assert index.match("GET", exact + "&_=1712345678901").via is None  # a rule-volatile cache-buster: plain canonical
    got = index.match("GET", f"{API}?q=hat&tok=2&rid={U1}")
    assert (got.via, got.ignored) == ("learned", ("tok",))



def test_a_fresh_id_match_never_crosses_another_difference():
    """Random captures and requests mutated at random (content values, fresh ids, shapes, names):
    whenever the fresh-id stage answers, every parameter it did not name is equal on both sides and
    every one it named is a fresh-id name holding an id of the same shape on both sides."""
    import random
    import uuid

    from ego2web_replay.replay.canonical import canonicalize
    from ego2web_replay.replay.freshids import display_name

    rng = random.Random(23)
    compiled = RULES.for_host("shop.example")

    def value() -> str:
        return rng.choice([str(uuid.UUID(int=rng.getrandbits(128))), f"{rng.getrandbits(128):032x}a",
                           f"{rng.randint(10**8, 10**9 - 1)}.1712345678", str(rng.randint(1, 99)), "hat", "shoe"])

    names = ["q", "id", "product_id", "page", "cid", "rid", "trace", "messageId", "sha256Hash", "token", "sort"]
    captures = []
    for _ in range(300):
        chosen = rng.sample(names, rng.randint(1, 4))
        captures.append(Capture(f"{API}?" + "&".join(f"{n}={value()}" for n in chosen)))
    index = MatchIndex(captures, rules=RULES)
    hits = 0
    for _ in range(3000):
        base = rng.choice(captures).url.partition("?")[2].split("&")
        mutated = [p.partition("=")[0] + "=" + value() if rng.random() < 0.4 else p for p in base]
        if rng.random() < 0.1:
            mutated.append(f"{rng.choice(names)}={value()}")
        got = index.match("GET", f"{API}?" + "&".join(mutated))
        if got.via != "fresh-id":
            continue
        hits += 1
        assert got.capture is not None
        mine = canonicalize("GET", f"{API}?" + "&".join(mutated), None, RULES).pairs
        theirs = canonicalize("GET", got.capture.url, None, RULES).pairs
        ignored = [n.removesuffix("?") for n in got.ignored]
        assert sorted(p for p in mine if display_name(p[0]) not in ignored) == \
            sorted(p for p in theirs if display_name(p[0]) not in ignored)
        for name in ignored:
            assert compiled.fresh_id_name(name.lower()) and name not in ("q", "id", "product_id", "sha256Hash")
            assert {id_shape(v, compiled) for k, v in mine if k == name} == \
                {id_shape(v, compiled) for k, v in theirs if k == name}
    assert hits > 20
