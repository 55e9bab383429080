"""HTTP helpers of the replay proxy: hop-by-hop headers, ranges, 304s, preflights, misses, JSONP."""

from __future__ import annotations

import gzip

import pytest

from ego2web_replay.replay.httputil import (
    HOP_BY_HOP,
    apply_range,
    clean_response_headers,
    conditional,
    decode_body,
    get_header,
    miss_response,
    not_modified_response,
    preflight_response,
    reason_phrase,
    rewrite_jsonp,
)

BODY = bytes(range(100))
STORED = [("Content-Type", "application/octet-stream"), ("Content-Length", "100"), ("ETag", '"v1"'),
          ("Last-Modified", "Fri, 05 Apr 2024 10:00:00 GMT"), ("Cache-Control", "max-age=60")]


def test_clean_response_headers_drops_hop_by_hop_and_keeps_order_and_duplicates():
    headers = [
        ("Content-Type", "text/html"),
        ("Connection", "keep-alive, X-Private"),
        ("Set-Cookie", "a=1"),
        ("Keep-Alive", "timeout=5"),
        ("Transfer-Encoding", "chunked"),
        ("Proxy-Authenticate", "Basic"),
        ("Proxy-Foo", "1"),
        ("TE", "trailers"),
        ("Trailer", "X"),
        ("Upgrade", "h2c"),
        ("X-Private", "secret"),
        ("Set-Cookie", "b=2"),
        ("ETag", '"x"'),
    ]
    assert clean_response_headers(headers) == [("Content-Type", "text/html"), ("Set-Cookie", "a=1"),
                                               ("Set-Cookie", "b=2"), ("ETag", '"x"')]
    assert "transfer-encoding" in HOP_BY_HOP
    # a response served chunked keeps its Transfer-Encoding where it was
    assert clean_response_headers(headers, keep=("transfer-encoding",))[:3] == [
        ("Content-Type", "text/html"), ("Set-Cookie", "a=1"), ("Transfer-Encoding", "chunked")]


def test_a_range_of_a_chunked_capture_is_a_sized_slice():
    chunked = [("Content-Type", "application/octet-stream"), ("Transfer-Encoding", "chunked")]
    status, headers, body = apply_range(200, chunked, BODY, "bytes=10-19")
    assert (status, body) == (206, BODY[10:20])
    assert get_header(headers, "transfer-encoding") is None and get_header(headers, "content-length") == "10"


@pytest.mark.parametrize(
    ("spec", "first", "last"),
    [("bytes=0-9", 0, 9), ("bytes=90-", 90, 99), ("bytes=-10", 90, 99), ("bytes=95-200", 95, 99),
     ("bytes=-500", 0, 99), ("BYTES = 5 - 5", 5, 5)],
)
def test_single_ranges_give_206(spec: str, first: int, last: int):
    status, headers, body = apply_range(200, STORED, BODY, spec)
    assert status == 206
    assert body == BODY[first : last + 1]
    assert get_header(headers, "content-range") == f"bytes {first}-{last}/100"
    assert get_header(headers, "content-length") == str(last - first + 1)
    assert [k for k, _ in headers].count("Content-Length") == 1
    assert get_header(headers, "etag") == '"v1"'


@pytest.mark.parametrize("spec", ["bytes=100-", "bytes=150-160", "bytes=-0"])
def test_unsatisfiable_ranges_give_416(spec: str):
    status, headers, body = apply_range(200, STORED, BODY, spec)
    assert (status, body) == (416, b"")
    assert get_header(headers, "content-range") == "bytes */100"


@pytest.mark.parametrize("spec", [None, "", "bytes=0-1,5-6", "items=0-1", "bytes=9-2", "bytes=x-y", "bytes=-"])
def test_full_response_when_range_absent_multi_or_malformed(spec):
    assert apply_range(200, STORED, BODY, spec) == (200, STORED, BODY)


def test_range_only_applies_to_200_and_matching_if_range():
    assert apply_range(404, STORED, BODY, "bytes=0-1") == (404, STORED, BODY)
    assert apply_range(200, STORED, BODY, "bytes=0-1", if_range='"v2"')[0] == 200
    assert apply_range(200, STORED, BODY, "bytes=0-1", if_range='"v1"')[0] == 206
    assert apply_range(200, STORED, BODY, "bytes=0-1", if_range="Fri, 05 Apr 2024 10:00:00 GMT")[0] == 206


def test_conditional_etags_weak_comparison():
    assert conditional({"If-None-Match": '"v1"'}, 200, STORED)
    assert conditional([("if-none-match", 'W/"v1"')], 200, STORED)
    assert conditional({"If-None-Match": '"a", "v1"'}, 200, STORED)
    assert conditional({"If-None-Match": "*"}, 200, STORED)
    assert not conditional({"If-None-Match": '"v2"'}, 200, STORED)
    weak = [("ETag", 'W/"v1"')]
    assert conditional({"If-None-Match": '"v1"'}, 200, weak)
    assert not conditional({"If-None-Match": '"v1"'}, 200, [])
    assert not conditional({"If-None-Match": '"v1"'}, 404, STORED)
    # If-None-Match wins over If-Modified-Since
    assert not conditional({"If-None-Match": '"v2"', "If-Modified-Since": "Sat, 06 Apr 2024 00:00:00 GMT"}, 200, STORED)


def test_conditional_dates():
    assert conditional({"If-Modified-Since": "Fri, 05 Apr 2024 10:00:00 GMT"}, 200, STORED)
    assert conditional({"If-Modified-Since": "Sat, 06 Apr 2024 00:00:00 GMT"}, 200, STORED)
    assert not conditional({"If-Modified-Since": "Thu, 04 Apr 2024 00:00:00 GMT"}, 200, STORED)
    assert not conditional({"If-Modified-Since": "garbage"}, 200, STORED)
    assert not conditional({}, 200, STORED)


def test_not_modified_response_keeps_validators_only():
    status, reason, headers, body = not_modified_response(STORED)
    assert (status, reason, body) == (304, "Not Modified", b"")
    assert headers == [("ETag", '"v1"'), ("Last-Modified", "Fri, 05 Apr 2024 10:00:00 GMT"),
                       ("Cache-Control", "max-age=60")]


def test_preflight_echoes_the_request():
    request = {"Origin": "https://app.example", "Access-Control-Request-Method": "PUT",
               "Access-Control-Request-Headers": "content-type, x-token"}
    status, reason, headers, body = preflight_response(request)
    assert (status, reason, body) == (204, "No Content", b"")
    h = dict(headers)
    assert h["Access-Control-Allow-Origin"] == "https://app.example"
    assert h["Access-Control-Allow-Methods"] == "PUT"
    assert h["Access-Control-Allow-Headers"] == "content-type, x-token"
    assert h["Access-Control-Allow-Credentials"] == "true"
    assert h["X-Ego2Web-Replay"] == "preflight"
    anonymous = dict(preflight_response({"Access-Control-Request-Private-Network": "true"})[2])
    assert anonymous["Access-Control-Allow-Origin"] == "*" and "Access-Control-Allow-Credentials" not in anonymous
    assert anonymous["Access-Control-Allow-Private-Network"] == "true"
    archived = (200, "OK", [("Allow", "GET")], b"")
    assert preflight_response(request, archived) == archived


def test_miss_response():
    status, reason, headers, body = miss_response("https://e.com/x?a=<b>", "post")
    assert (status, reason) == (404, "Not Found")
    h = dict(headers)
    assert h["X-Ego2Web-Replay"] == "miss" and h["Cache-Control"] == "no-store"
    assert int(h["Content-Length"]) == len(body)
    assert b"POST https://e.com/x?a=&lt;b&gt;" in body
    assert miss_response("https://e.com/", status=504)[:2] == (504, "Gateway Timeout")


def test_reason_phrase():
    assert reason_phrase(200) == "OK"
    assert reason_phrase(418) == "I'm a Teapot"
    assert reason_phrase(299) == "Success"
    assert reason_phrase(799) == "Unknown"


def test_decode_body():
    assert decode_body(gzip.compress(b"abc"), "gzip") == b"abc"
    assert decode_body(b"abc", None) == b"abc"
    assert decode_body(b"abc", "identity") == b"abc"
    assert decode_body(b"abc", "gzip") is None
    assert decode_body(b"abc", "compress") is None
    import zstandard

    frames = zstandard.ZstdCompressor().compress(b"first frame, ") + zstandard.ZstdCompressor().compress(b"second")
    assert decode_body(frames, "zstd") == b"first frame, second"  # every frame, not the first alone
    assert decode_body(gzip.compress(b"one ") + gzip.compress(b"two"), "gzip") == b"one two"  # every member


def test_rewrite_jsonp():
    body = b'/**/ jQuery111_1712345678901({"a": 1});'
    out = rewrite_jsonp(body, "https://e.com/f?callback=jQuery111_1712345678901&q=1",
                        "https://e.com/f?q=1&callback=jQuery222_1700000000000")
    assert out == b'/**/ jQuery222_1700000000000({"a": 1});'
    maps = b'_xdc_._abc && _xdc_._abc( [1] )'
    assert rewrite_jsonp(b"_xdc_._abc( [1] )", "https://m.g/x?callback=_xdc_._abc",
                         "https://m.g/x?callback=_xdc_._def") == b"_xdc_._def( [1] )"
    # unchanged: same callback, no callback, body not a call of the old name, different parameter names
    assert rewrite_jsonp(body, "https://e.com/f?callback=a", "https://e.com/f?callback=a") == body
    assert rewrite_jsonp(body, "https://e.com/f", "https://e.com/f?callback=b") == body
    assert rewrite_jsonp(maps, "https://e.com/f?callback=other", "https://e.com/f?callback=b") == maps
    assert rewrite_jsonp(body, "https://e.com/f?callback=jQuery111_1712345678901", "https://e.com/f?jsonp=b") == body


def test_a_set_cookie_expiry_moves_with_the_date():
    from datetime import UTC, datetime

    from ego2web_replay.replay.httputil import shift_dates

    head = [("Date", "Wed, 01 Jan 2025 10:00:00 GMT"),
            ("Set-Cookie", "sid=abc; Expires=Wed, 01 Jan 2025 10:30:00 GMT; Path=/; HttpOnly"),
            ("Set-Cookie", "consent=yes; path=/; expires=Thu, 01-Jan-26 10:00:00 GMT"),  # the Netscape form
            ("Set-Cookie", "plain=1; Max-Age=60"), ("Set-Cookie", "bad=1; Expires=not a date; Path=/"),
            ("Set-Cookie", "x=expires=1; Path=/"), ("Set-Cookie", "far=1; Expires=Fri, 31 Dec 9999 23:59:59 GMT"),
            ("Expires", "Wed, 01 Jan 2025 11:00:00 GMT")]
    moved = shift_dates(head, datetime(2026, 12, 4, 12, 0, tzinfo=UTC))
    assert moved == [("Date", "Fri, 04 Dec 2026 12:00:00 GMT"),
                     ("Set-Cookie", "sid=abc; Expires=Fri, 04 Dec 2026 12:30:00 GMT; Path=/; HttpOnly"),
                     ("Set-Cookie", "consent=yes; path=/; expires=Sat, 04 Dec 2027 12:00:00 GMT"),
                     head[3], head[4], head[5], head[6],  # no Expires attribute, one that does not read, year 9999
                     ("Expires", "Fri, 04 Dec 2026 13:00:00 GMT")]


def test_an_expires_in_year_9999_is_served_as_it_is():
    """Some CDNs say "never expires" with the last day of year 9999: moved by a day, it would fall
    past the last date there is (an OverflowError for every request of it)."""
    from datetime import UTC, datetime

    from ego2web_replay.replay.httputil import shift_dates

    head = [("Date", "Wed, 01 Jan 2025 10:00:00 GMT"), ("Expires", "Fri, 31 Dec 9999 23:59:59 GMT")]
    assert shift_dates(head, datetime(2026, 12, 4, 12, 0, tzinfo=UTC)) == \
        [("Date", "Fri, 04 Dec 2026 12:00:00 GMT"), head[1]]
