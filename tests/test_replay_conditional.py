"""Answers made for what the recording client had cached answer only a client that has it too.

A 304 tells the client that recorded it that its cached copy is still current; a body compressed
with a shared dictionary (``dcb``, ``dcz``, RFC 9842) decodes only with the dictionary that client
held. In replay another client may ask the same URL with nothing cached (a fresh browser context,
the next episode on a replay kept open), or with another validator or dictionary: either answer
would leave it with no usable body, logged as an exact hit. Such a request gets the whole body
recorded for the same URL, or is a counted miss; only a request whose validators the 304's match
gets the 304, and only one whose ``Available-Dictionary`` names the body's dictionary gets that body.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
import urllib.error
import urllib.request
from datetime import datetime

import pytest

from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter

ENGINES = pytest.mark.parametrize("engine", ["fast", "mitmproxy"])  # both carry the same responder
PAGE, ONLY_304 = "http://shop.example/app.js", "http://shop.example/cached.css"
BODY = b"console.log('the whole script');"


@pytest.fixture(scope="module")
def revalidated(tmp_path_factory):
    """A page recorded 200, then revalidated (304) twice, as a browser reloading it does; and a URL of
    which only a 304 was recorded (the recording browser had it cached already)."""
    sw = SnapshotWriter(tmp_path_factory.mktemp("conditional"), "conditional")
    js = [("Content-Type", "application/javascript")]
    exchanges = [
        (PAGE, [], 200, [*js, ("ETag", '"v1"'), ("Last-Modified", "Tue, 01 Dec 2026 10:00:00 GMT")], BODY),
        (PAGE, [("If-None-Match", '"v1"')], 304, [("ETag", '"v1"')], b""),
        (PAGE, [("If-None-Match", '"v1"')], 304, [("ETag", '"v1"')], b""),
        (ONLY_304, [("If-None-Match", '"c1"')], 304, [("ETag", '"c1"')], b""),
    ]
    for i, (url, req, status, head, body) in enumerate(exchanges):
        sw.writer.write_exchange(url=url, method="GET", request_headers=req, request_body=b"", status=status,
                                 reason="", response_headers=head, response_body=body,
                                 date=datetime(2026, 12, 1, 10, 0, i))
    sw.finalize()
    return sw.path


def _get(replay: Replay, url: str, headers: dict[str, str] | None = None) -> tuple[int, str | None, bytes]:
    ctx = ssl.create_default_context(cafile=str(replay.ca_file))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url}),
                                         urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.headers.get("X-Ego2Web-Replay"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-Ego2Web-Replay"), e.read()


@ENGINES
def test_a_recorded_304_never_answers_a_client_with_nothing_cached(revalidated, ca, engine):
    with Replay([revalidated], ca=ca, engine=engine, freeze=False) as replay:
        # three plain loads in a row (as three fresh episodes make): the recorded whole each time, though
        # the second and third recorded exchanges of this URL were 304s
        for _ in range(3):
            assert _get(replay, PAGE)[::2] == (200, BODY)
        assert _get(replay, PAGE, {"If-None-Match": '"v1"'})[::2] == (304, b"")  # a copy that is current
        assert _get(replay, PAGE, {"If-None-Match": '"v0"'})[::2] == (200, BODY)  # another copy: the whole
        since = {"If-Modified-Since": "Mon, 30 Nov 2026 10:00:00 GMT"}  # before the recorded Last-Modified
        assert _get(replay, PAGE, since)[::2] == (200, BODY)
        # only a 304 recorded: it answers the revalidation it matches; anything else is a miss, counted
        assert _get(replay, ONLY_304, {"If-None-Match": '"c1"'})[::2] == (304, b"")
        status, marker, _ = _get(replay, ONLY_304)
        assert (status, marker) == (404, "miss")
        assert _get(replay, ONLY_304, {"If-None-Match": '"c0"'})[0] == 404
    stats = replay.stats()
    assert stats.miss == 2 and stats.missed_urls == [f"GET {ONLY_304}"] * 2 and stats.validity == "degraded"
    served = [(e.url, e.status) for e in stats.log if e.outcome != "miss"]
    assert (ONLY_304, 304) in served and (PAGE, 304) in served and served.count((PAGE, 200)) == 5


DICT = b"console.log('version one of the app'); function helper(a, b) { return a + b; }\n" * 20
APP_V2 = DICT.replace(b"version one", b"version two")
APP_URL, ONLY_DCB = "https://shop.example/app.v2.js", "https://shop.example/only.js"


def _dcz(data: bytes, dictionary: bytes) -> bytes:
    """A ``dcz`` body (RFC 9842 4.2): the fixed header, the dictionary's SHA-256, then Zstandard with the
    dictionary as raw content."""
    import zstandard

    raw = zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return b"\x5e\x2a\x4d\x18\x20\x00\x00\x00" + hashlib.sha256(dictionary).digest() + \
        zstandard.ZstdCompressor(dict_data=raw).compress(data)


@pytest.fixture(scope="module")
def dictionary_coded(tmp_path_factory):
    """app.v2.js recorded twice: first as brotli (no dictionary held), then as dcz against the dictionary
    the browser had kept from version one; only.js recorded only as dcb."""
    import brotli

    sw = SnapshotWriter(tmp_path_factory.mktemp("dictionaries"), "dictionaries")
    held = ":" + base64.b64encode(hashlib.sha256(DICT).digest()).decode() + ":"
    js = ("Content-Type", "application/javascript")
    exchanges = [
        (APP_URL, [], [js, ("Content-Encoding", "br"), ("Vary", "Accept-Encoding")], brotli.compress(APP_V2)),
        (APP_URL, [("Available-Dictionary", held)], [js, ("Content-Encoding", "dcz"),
                                                     ("Vary", "Accept-Encoding, Available-Dictionary")],
         _dcz(APP_V2, DICT)),
        (ONLY_DCB, [("Available-Dictionary", held)], [js, ("Content-Encoding", "dcb")],
         b"\xff\x44\x43\x42" + hashlib.sha256(DICT).digest() + b"brotli with the dictionary"),
    ]
    for i, (url, req, head, body) in enumerate(exchanges):
        sw.writer.write_exchange(url=url, method="GET", request_headers=req, request_body=b"", status=200,
                                 reason="OK", response_headers=head, response_body=body,
                                 date=datetime(2026, 12, 1, 11, 0, i))
    sw.finalize()
    return sw.path, held


def _coded(replay: Replay, url: str, **headers: str) -> tuple[int, str | None, bytes]:
    import http.client

    host, port = replay.proxy_url.split("//")[1].rstrip("/").split(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=10,
                                       context=ssl.create_default_context(cafile=str(replay.ca_file)))
    conn.set_tunnel("shop.example", 443)
    conn.putrequest("GET", url.split("shop.example", 1)[1], skip_accept_encoding=True)
    conn.putheader("Accept-Encoding", "gzip, deflate, br, zstd, dcb, dcz")
    for k, v in headers.items():
        conn.putheader(k.replace("_", "-"), v)
    conn.endheaders()
    resp = conn.getresponse()
    out = resp.status, resp.getheader("Content-Encoding"), resp.read()
    conn.close()
    return out


@ENGINES
def test_a_dictionary_compressed_body_answers_only_the_client_holding_its_dictionary(dictionary_coded, ca, engine):
    import zstandard

    snap, held = dictionary_coded
    other = ":" + base64.b64encode(hashlib.sha256(b"another dictionary").digest()).decode() + ":"
    with Replay([snap], ca=ca, engine=engine, freeze=False) as replay:
        for _ in range(3):  # fresh clients, nothing kept: brotli, though the second recorded answer was dcz
            assert _coded(replay, APP_URL)[:2] == (200, "br")
        status, coding, body = _coded(replay, APP_URL, Available_Dictionary=held)
        assert (status, coding) == (200, "dcz") and body[8:40] == hashlib.sha256(DICT).digest()
        raw = zstandard.ZstdCompressionDict(DICT, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        assert zstandard.ZstdDecompressor(dict_data=raw).decompress(body[40:]) == APP_V2  # what it decodes to
        assert _coded(replay, APP_URL, Available_Dictionary=other)[:2] == (200, "br")  # another dictionary
        assert _coded(replay, ONLY_DCB, Available_Dictionary=held)[:2] == (200, "dcb")
        assert _coded(replay, ONLY_DCB)[0] == 404  # no dictionary held, none other recorded: a miss
    stats = replay.stats()
    assert stats.miss == 1 and stats.missed_urls == [f"GET {ONLY_DCB}"]
