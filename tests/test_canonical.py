"""The canonical match key (match_key) and the one pywb POST form (snapshots.postform)."""

from __future__ import annotations

import base64
import json

import pytest

from ego2web_replay.replay.canonical import body_form, canonical_url, match_key
from ego2web_replay.replay.rules import default_rules
from ego2web_replay.snapshots.postform import post_query

RULES = default_rules()


def key(url: str, method: str = "GET", body: bytes | None = None, ctype: str | None = None) -> str:
    return match_key(method, url, body, ctype, RULES)


def test_surt_url_basics():
    assert key("HTTP://WWW.Example.COM:80/a/b?b=2&a=1#frag") == "GET http://(com,example,www,)/a/b?a=1&b=2"
    assert key("https://example.com:443") == "GET https://(com,example,)/"
    assert key("https://example.com:8443/x") == "GET https://(com,example,:8443)/x"
    assert key("https://user:pw@example.com/x") == "GET https://(com,example,)/x"
    assert key("http://127.0.0.1:8000/x") == "GET http://(127.0.0.1,:8000)/x"
    # path case is kept, escapes normalised (unreserved decoded, hex upper-cased)
    assert key("https://e.com/A%7eb%2fc%c3%a9") == "GET https://(com,e,)/A~b%2Fc%C3%A9"
    assert canonical_url("https://e.com/p?z=1&a=2", RULES) == "https://(com,e,)/p?a=2&z=1"


def test_query_encoding_is_normalised():
    assert key("https://e.com/s?q=a+b") == key("https://e.com/s?q=a%20b")
    assert key("https://e.com/s?q=%e2%82%ac") == key("https://e.com/s?q=%E2%82%AC")
    assert key("https://e.com/s?q=caf%C3%A9") == "GET https://(com,e,)/s?q=caf%C3%A9"
    # repeated parameters keep all values, sorted
    assert key("https://e.com/s?t=b&t=a") == "GET https://(com,e,)/s?t=a&t=b"


def test_volatile_parameters_are_dropped():
    base = key("https://e.com/api?id=5")
    for extra in (
        "_=1712345678901",
        "cb=abc123",
        "nocache=0.123",
        "utm_source=news&utm_medium=mail",
        "fbclid=IwAR0x",
        "gclid=Cj0K",
        "jsessionid=ABC",
        "PHPSESSID=xyz",
        "ts=1712345678",
        "t=1712345678901",
        "_t=1712345678.123",
    ):
        assert key(f"https://e.com/api?id=5&{extra}") == base, extra
    # an epoch-looking value under any other name stays in the key: an ISBN-10 or a phone number looks
    # like one, and a name that merely may hold a time is the fresh-id stage's, which says what it set aside
    for kept in ("whatever=1712345678901", "at=1712345678.123", "isbn=1491954248", "q=2125550199"):
        assert key(f"https://e.com/api?id=5&{kept}") != base, kept
    # not volatile: a short t (a YouTube start offset), v (a video id), an id that is no epoch
    assert key("https://www.youtube.com/watch?v=abc&t=42") == "GET https://(com,youtube,www,)/watch?t=42&v=abc"
    assert key("https://e.com/api?id=12345678901") != base



def test_engine_io_polls_set_their_random_t_aside():
    # Socket.IO's transport adds `t` (engine.io-client's randomString(), no epoch) to every poll
    poll = "https://e.com/socket.io/?EIO=4&transport=polling&t={}"
    assert key(poll.format("PZx3a1b")) == key(poll.format("PZx3q9z")) == \
        "GET https://(com,e,)/socket.io/?EIO=4&transport=polling"
    assert key("https://e.com/socket.io/?transport=polling&EIO=3&t=abc") == \
        key("https://e.com/socket.io/?transport=polling&EIO=3&t=xyz")
    # anywhere else, a `t` that is no epoch is content (a start offset, a tab, a type)
    assert key("https://e.com/s?t=PZx3a1b") != key("https://e.com/s?t=PZx3q9z")


def test_jsonp_callback_keeps_name_drops_value():
    a = key("https://e.com/feed?callback=jQuery1234_1712345678901&q=x")
    b = key("https://e.com/feed?callback=jQuery9876_1712345679999&q=x")
    assert a == b == "GET https://(com,e,)/feed?callback=&q=x"
    assert key("https://e.com/feed?q=x") != a


def test_session_id_path_parameter_is_dropped():
    assert key("https://e.com/cart;jsessionid=ABC123?x=1") == "GET https://(com,e,)/cart?x=1"
    assert key("https://e.com/a;type=b") == "GET https://(com,e,)/a;type=b"


def test_per_host_rules_apply():
    a = key("https://www.google.com/search?q=cats&ei=abc&ved=0ahUK")
    assert a == "GET https://(com,google,www,)/search?q=cats"
    assert key("https://example.com/search?q=cats&ved=1") == "GET https://(com,example,)/search?q=cats&ved=1"


def test_form_bodies_sorted_and_volatile_fields_ignored():
    form = "application/x-www-form-urlencoded"
    a = key("https://e.com/f", "POST", b"b=2&a=1&nonce=zz&timestamp=1712345678901", form)
    b = key("https://e.com/f", "POST", b"a=1&b=2&nonce=yy", form)
    assert a == b == "POST https://(com,e,)/f?__wb_method=post&a=1&b=2"
    # a time field is a fresh time only when it holds one: a booking's time, a timestamp of 1, are content
    assert key("https://e.com/f", "POST", b"a=1&b=2&timestamp=1", form) != a
    booked = json.dumps({"date": "2026-05-01", "time": "21:00"}).encode()
    assert key("https://e.com/slots", "POST", booked, "application/json") != \
        key("https://e.com/slots", "POST", booked.replace(b"21:00", b"18:00"), "application/json")
    assert key("https://e.com/f", "POST", b"a=1&b=3", form) != a
    assert key("https://e.com/f", "POST", b"q=a+b", form) == "POST https://(com,e,)/f?__wb_method=post&q=a%20b"


def test_json_bodies_flatten_to_leaves():
    body1 = json.dumps({"query": "cats", "meta": {"ts": 1712345678901, "requestId": "r-1", "page": 2},
                        "sent": "2024-04-05T10:00:00Z", "tags": ["a", "b"], "ok": True}).encode()
    body2 = json.dumps({"tags": ["a", "b"], "ok": True, "sent": "2025-01-01T00:00:00Z",
                        "meta": {"page": 2, "requestId": "r-2", "ts": 1712349999999}, "query": "cats"}).encode()
    k1 = key("https://api.e.com/v1/search", "POST", body1, "application/json; charset=utf-8")
    k2 = key("https://api.e.com/v1/search", "POST", body2, "application/json")
    # (a date-time stays in the key: a departure's is content; a fresh one is the fresh-id stage's, logged)
    assert k1 == "POST https://(com,e,api,)/v1/search?__wb_method=post&ok=True&page=2&query=cats" \
                 "&sent=2024-04-05T10:00:00Z&tags=a&tags.2_=b"
    assert k2 == k1.replace("2024-04-05T10:00:00Z", "2025-01-01T00:00:00Z")
    other = json.dumps({"query": "dogs", "meta": {"page": 2}, "tags": ["a", "b"], "ok": True}).encode()
    assert key("https://api.e.com/v1/search", "POST", other, "application/json") != k1


def test_multipart_fields_without_boundary():
    def multipart(boundary: str, text: str) -> bytes:
        return (
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"q\"\r\n\r\n{text}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
            f"Content-Type: text/plain\r\n\r\nfile body\r\n--{boundary}--\r\n"
        ).encode()

    a = key("https://e.com/up", "POST", multipart("AAA", "hi"), "multipart/form-data; boundary=AAA")
    b = key("https://e.com/up", "POST", multipart("----WebKitZZ", "hi"), "multipart/form-data; boundary=----WebKitZZ")
    assert a == b
    assert "file=file%20body" in a and "q=hi" in a and "AAA" not in a
    c = key("https://e.com/up", "POST", multipart("AAA", "ho"), "multipart/form-data; boundary=AAA")
    assert c != a


def test_opaque_bodies_are_base64_and_methods_distinguished():
    a = key("https://e.com/b", "POST", b"\x00\x01\x02", "application/octet-stream")
    assert a == "POST https://(com,e,)/b?__wb_method=post&__wb_post_data=AAEC"
    assert a != key("https://e.com/b", "POST", b"\x00\x01\x03", "application/octet-stream")
    assert key("https://e.com/b", "PUT", b"", None) == "PUT https://(com,e,)/b?__wb_method=put"
    assert key("https://e.com/b?x=1", "POST", None, None) == "POST https://(com,e,)/b?x=1&__wb_method=post"


@pytest.mark.parametrize(
    ("ctype", "body", "expected"),
    [
        ("application/x-www-form-urlencoded", b"a=1&b=hello+world", "__wb_method=post&a=1&b=hello world"),
        ("application/json", b'{"a": {"b": 1, "c": [true, null]}, "d": "x y"}', "__wb_method=post&b=1&c=True&c.2_=None&d=x+y"),
        ("application/octet-stream", b"\xff\x00", "__wb_method=post&__wb_post_data=" + base64.b64encode(b"\xff\x00").decode()),
        ("text/plain", b"not json", "__wb_method=post&__wb_post_data=" + base64.b64encode(b"not json").decode()),
    ],
)
def test_post_query_follows_pywb_convention(ctype: str, body: bytes, expected: str):
    assert post_query("POST", ctype, body) == expected


@pytest.mark.parametrize(
    ("url", "ctype", "body", "golden"),
    [
        # request bodies and index keys of pywb's sample_archive post-test.warc.gz / post-test.cdxj
        ("http://httpbin.org/post", "application/x-www-form-urlencoded", b"foo=bar&test=abc",
         "org,httpbin)/post?__wb_method=post&foo=bar&test=abc"),
        ("http://httpbin.org/post", "application/x-www-form-urlencoded", b"A=1&B=[]&C=3",
         "org,httpbin)/post?__wb_method=post&a=1&b=[]&c=3"),
        ("http://httpbin.org/post?foo=bar", "application/x-www-form-urlencoded", b"data=^",
         "org,httpbin)/post?__wb_method=post&data=^&foo=bar"),
    ],
)
def test_post_query_reproduces_pywb_index_keys(url: str, ctype: str, body: bytes, golden: str):
    surt = pytest.importorskip("surt")
    query = post_query("POST", ctype, body)
    assert surt.surt(url + ("&" if "?" in url else "?") + query) == golden


def test_body_form_for_get_and_empty_bodies():
    assert body_form("GET", None, b"a=1") is None
    assert body_form("PUT", None, None) is None
    assert body_form("POST", "application/json", b'{"q": "x"}') == "q=x"
