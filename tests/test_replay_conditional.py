"""A recorded 304 answers only the revalidation it can answer.

A 304 tells the client that recorded it that its cached copy is still current. In replay another
client may ask the same URL with nothing cached (a fresh browser context, the next episode on a
replay kept open), or with another validator: a 304 would leave it with no body at all, logged as an
exact hit. Such a request gets the whole body recorded for the same URL, or is a counted miss; only a
request whose validators the 304's match gets the 304.
"""

from __future__ import annotations

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
