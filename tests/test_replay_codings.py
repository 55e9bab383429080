"""A body recorded with a Content-Encoding is served in a coding the client takes, as a cache would.

A browser asks ``gzip, deflate, br, zstd`` and gets the recorded bytes. A program agent may send no
Accept-Encoding (curl without ``--compressed``) or only some codings (python-requests without
brotli). Where the recorded answer says it varies by Accept-Encoding (``Vary``), the live server would
have sent such a client another coding, so replay serves the recorded body decoded (Content-Length of
the decoded bytes, a strong ETag made weak) instead of bytes it cannot read; an answer that does not
vary by it (or says ``no-transform``) is the same for every client, as an HTTP cache serves it.
Checked with curl and raw requests, on both engines.
"""

from __future__ import annotations

import gzip
import http.client
import shutil
import subprocess
from datetime import datetime

import brotli
import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.httputil import accepts_coding
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.tasks import Task
from ego2web_replay.testing.thirdparty import NginxSite, nginx_binary

ENGINES = pytest.mark.parametrize("engine", ["fast", "mitmproxy"])  # both carry the same responder
PAGE, SCRIPT, CHUNKED = "http://shop.example/list.json", "http://shop.example/app.js", "http://shop.example/feed.txt"
STATIC, FIXED = "http://cdn.example/pre-gzipped.css", "http://cdn.example/no-transform.json"  # no Vary; no-transform
JSON = b'{"items": [' + b", ".join(b'{"name": "snack %d", "kcal": %d}' % (i, 100 + i) for i in range(200)) + b"]}"
JS = b"console.log('a script served br');\n" * 100
FEED = b"line of a feed\n" * 300
BROWSER = "gzip, deflate, br, zstd"


def test_accept_encoding_is_read_with_its_weights():
    assert accepts_coding(BROWSER, "br") and accepts_coding("gzip", "gzip") and accepts_coding("*", "br")
    assert not accepts_coding(None, "gzip") and not accepts_coding("", "gzip") and not accepts_coding("gzip", "br")
    assert not accepts_coding("br;q=0, gzip", "br") and accepts_coding("br;q=0.5", "br")
    assert not accepts_coding("*, br;q=0", "br") and accepts_coding("x-gzip", "gzip")
    assert not accepts_coding("identity", "gzip") and accepts_coding(None, "identity")


@pytest.fixture(scope="module")
def coded(tmp_path_factory):
    sw = SnapshotWriter(tmp_path_factory.mktemp("codings"), "codings")
    answers = [
        (PAGE, [("Content-Type", "application/json"), ("Content-Encoding", "gzip"), ("ETag", '"j1"'),
                ("Vary", "Accept-Encoding")], gzip.compress(JSON, mtime=0)),
        (SCRIPT, [("Content-Type", "application/javascript"), ("Content-Encoding", "br"), ("ETag", 'W/"s1"'),
                  ("Vary", "Origin, Accept-Encoding")], brotli.compress(JS)),
        (CHUNKED, [("Content-Type", "text/plain"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked"),
                   ("Vary", "accept-encoding")], gzip.compress(FEED, mtime=0)),
        (STATIC, [("Content-Type", "text/css"), ("Content-Encoding", "gzip")], gzip.compress(FEED, mtime=0)),
        (FIXED, [("Content-Type", "application/json"), ("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding"),
                 ("Cache-Control", "public, no-transform")], gzip.compress(JSON, mtime=0)),
    ]
    for i, (url, head, body) in enumerate(answers):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Accept-Encoding", BROWSER)],
                                 request_body=b"", status=200, reason="OK", response_headers=head,
                                 response_body=body, date=datetime(2026, 12, 1, 10, 0, i))
    sw.finalize()
    return sw.path


def _raw(proxy: Replay | LiveRecording, url: str, method: str = "GET", **headers: str) -> tuple[dict[str, str], bytes]:
    host, port = proxy.proxy_url.split("//")[1].rstrip("/").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest(method, url, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k.replace("_", "-"), v)
    conn.endheaders()
    resp = conn.getresponse()
    out = {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    assert resp.status == 200
    return out


@ENGINES
def test_a_coded_body_is_decoded_for_a_client_that_does_not_take_its_coding(coded, ca, engine):
    with Replay([coded], ca=ca, engine=engine, freeze=False) as replay:
        head, body = _raw(replay, PAGE, Accept_Encoding=BROWSER)  # a browser: the recorded bytes
        assert head["content-encoding"] == "gzip" and gzip.decompress(body) == JSON and head["etag"] == '"j1"'
        for _ in range(3):  # no Accept-Encoding: what a live server sends such a client (then a kept reply)
            head, body = _raw(replay, PAGE)
            assert body == JSON and "content-encoding" not in head and head["content-length"] == str(len(JSON))
            assert head["etag"] == 'W/"j1"' and head["vary"] == "Accept-Encoding"
            assert _raw(replay, PAGE, Accept_Encoding="gzip")[0]["content-encoding"] == "gzip"  # it takes gzip
        head, body = _raw(replay, SCRIPT, Accept_Encoding="gzip, deflate")  # requests without brotli
        assert body == JS and "content-encoding" not in head and head["etag"] == 'W/"s1"'
        assert _raw(replay, SCRIPT, Accept_Encoding="br")[1] == brotli.compress(JS)
        head, body = _raw(replay, CHUNKED)  # recorded chunked: served chunked, decoded
        assert body == FEED and head.get("transfer-encoding") == "chunked" and "content-length" not in head
        head, body = _raw(replay, PAGE, method="HEAD")
        assert body == b"" and head["content-length"] == str(len(JSON)) and "content-encoding" not in head
        for _ in range(2):  # a browser again, after clients that took it plain: the recorded bytes still
            assert _raw(replay, PAGE, Accept_Encoding=BROWSER)[0]["content-encoding"] == "gzip"
        # the same answer for every client (no Vary), or one a proxy may not transform: as recorded
        for ae in ({}, {"Accept_Encoding": "identity"}, {"Accept_Encoding": BROWSER}):
            head, body = _raw(replay, STATIC, **ae)
            assert (head["content-encoding"], body) == ("gzip", gzip.compress(FEED, mtime=0)), ae
        assert _raw(replay, FIXED)[1] == gzip.compress(JSON, mtime=0)
        if shutil.which("curl"):
            curl = ["curl", "-sS", "--noproxy", "", "-x", replay.proxy_url]
            assert subprocess.run([*curl, PAGE], capture_output=True, timeout=30, check=True).stdout == JSON
            assert subprocess.run([*curl, "--compressed", SCRIPT], capture_output=True, timeout=30,
                                  check=True).stdout == JS  # curl's own decoding of what it asked for
    assert replay.stats().miss == 0


@pytest.mark.skipif(nginx_binary() is None or shutil.which("curl") is None,
                    reason="needs nginx and curl (scripts/setup.sh installs them)")
def test_nginx_gzip_recorded_for_a_browser_replays_plain_to_curl(ca, tmp_path):
    """nginx compressing as sites do (gzip for clients that ask, ``Vary: Accept-Encoding``): recorded for
    a client that takes gzip, then, with nginx stopped, replayed to curl as curl got it live (plain),
    and to the browser-like client as recorded (gzip)."""
    css = b"body { color: #333; }\n" * 400
    with NginxSite(tmp_path / "www", {"site.css": css, "index.html": b"<p>hi</p>"}, gzip=True) as nginx:
        url = nginx.url + "/site.css"
        live_curl = subprocess.run(["curl", "-sS", "--noproxy", "*", url], capture_output=True, timeout=30,
                                   check=True).stdout
        task = Task(id="nginx-gzip", instruction="x", start_url=url)
        with LiveRecording(task, tmp_path / "snaps", RecordOptions(guard="loopback"), ca=ca) as live:
            recorded_head, recorded = _raw(live, url, Accept_Encoding=BROWSER)
        assert live.ok, live.error
    assert live_curl == css and recorded_head["content-encoding"] == "gzip" and gzip.decompress(recorded) == css
    assert "accept-encoding" in recorded_head["vary"].lower()
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        assert _raw(replay, url, Accept_Encoding=BROWSER)[1] == recorded  # the recorded bytes
        curl = subprocess.run(["curl", "-sS", "-D", "-", "--noproxy", "", "-x", replay.proxy_url, url],
                              capture_output=True, timeout=30, check=True).stdout
        head, _, body = curl.partition(b"\r\n\r\n")
        assert body == live_curl and b"content-encoding" not in head.lower()
    assert replay.stats().miss == 0
