"""Byte ranges in replay: answers cut from the recorded bytes only, in any order, else a counted miss.

At the replay level with raw HTTP (crafted snapshots holding 200s, 206s and a multipart 206), and
against a real nginx recorded through the recording proxy and replayed with nginx stopped.
"""

from __future__ import annotations

import email
import http.client
import random
import ssl
import urllib.error
import urllib.request
from datetime import datetime

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.ranges import parse_range, resolve_ranges
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.tasks import Task
from ego2web_replay.testing.thirdparty import NginxSite, nginx_binary
from ego2web_replay.validity import classify

pytestmark = pytest.mark.slow
ENGINES = pytest.mark.parametrize("engine", ["fast", "mitmproxy"])  # both carry the same responder

RNG = random.Random(23)
A = RNG.randbytes(4096)  # recorded only in parts
B = RNG.randbytes(1000)  # recorded whole, and one part
OLD, NEW = RNG.randbytes(300), RNG.randbytes(300)  # two versions of one URL, a part of each
A_URL, B_URL, C_URL = "http://media.example/a.bin", "http://media.example/b.bin", "http://media.example/c.bin"
BOUNDARY = "3d6b6a416f9b5"
MULTI = (f"\r\n--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 2000-2099/4096\r\n\r\n"
         ).encode() + A[2000:2100] + (f"\r\n--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n"
                                      "Content-Range: bytes 3600-3699/4096\r\n\r\n").encode() + A[3600:3700] + \
    f"\r\n--{BOUNDARY}--\r\n".encode()


def _part(first: int, last: int, total: bytes, etag: str) -> tuple[int, list[tuple[str, str]], bytes]:
    return 206, [("Content-Type", "application/octet-stream"), ("ETag", etag), ("Accept-Ranges", "bytes"),
                 ("Content-Range", f"bytes {first}-{last}/{len(total)}")], total[first:last + 1]


@pytest.fixture(scope="module")
def ranged_snapshot(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranges")
    sw = SnapshotWriter(root, "ranges")
    exchanges = [
        (A_URL, *_part(0, 999, A, '"a1"')), (A_URL, *_part(500, 1999, A, '"a1"')),  # overlapping parts
        (A_URL, *_part(3000, 3499, A, '"a1"')), (A_URL, *_part(3900, 4095, A, '"a1"')),
        (A_URL, 206, [("Content-Type", f"multipart/byteranges; boundary={BOUNDARY}"), ("ETag", '"a1"')], MULTI),
        (B_URL, 200, [("Content-Type", "application/octet-stream"), ("ETag", '"b1"'), ("Accept-Ranges", "bytes")], B),
        (B_URL, *_part(0, 99, B, '"b1"')),
        (C_URL, *_part(0, 99, OLD, '"old"')), (C_URL, *_part(0, 99, NEW, '"new"')),
    ]
    for i, (url, status, headers, body) in enumerate(exchanges):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Range", "bytes=x")], request_body=b"",
                                 status=status, reason="", response_headers=headers, response_body=body,
                                 date=datetime(2026, 1, 2, 3, 4, i))
    sw.finalize()
    return sw.path


def _opener(replay: Replay) -> urllib.request.OpenerDirector:
    ctx = ssl.create_default_context(cafile=str(replay.ca_file))
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url,
                                                                    "https": replay.proxy_url}),
                                       urllib.request.HTTPSHandler(context=ctx))


def _get(opener, url, headers=None, method="GET"):
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _parts(headers, body: bytes) -> list[tuple[str, bytes]]:
    """A multipart/byteranges body read with the standard library's MIME parser: (Content-Range, bytes)."""
    msg = email.message_from_bytes(f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode() + body)
    assert msg.is_multipart()
    return [(p["Content-Range"], p.get_payload(decode=True)) for p in msg.get_payload()]


def test_range_headers_are_read_as_rfc_9110_says():
    assert parse_range("bytes=0-9, 20-, -5") == [(0, 9), (20, None), (None, 5)]
    assert parse_range("bytes=9-0") is None and parse_range("items=0-9") is None and parse_range("bytes=x") is None
    assert resolve_ranges([(0, 9), (20, None), (None, 5)], 100) == [(0, 9), (20, 99), (95, 99)]
    assert resolve_ranges([(100, None), (None, 0)], 100) == []  # nothing satisfiable: a 416
    assert resolve_ranges([(None, 5)], None) is None  # a suffix needs the size


@ENGINES
def test_ranges_are_cut_from_recorded_bytes_only(ranged_snapshot, ca, engine):
    with Replay([ranged_snapshot], ca=ca, engine=engine) as replay:
        op = _opener(replay)
        # inside the union of overlapping parts (0-999, 500-1999) and a multipart part (2000-2099)
        status, headers, got = _get(op, A_URL, {"Range": "bytes=200-2050"})
        assert (status, got, headers["Content-Range"]) == (206, A[200:2051], "bytes 200-2050/4096")
        assert headers["ETag"] == '"a1"' and int(headers["Content-Length"]) == len(got)
        # a suffix inside the recorded tail, one outside it
        status, headers, got = _get(op, A_URL, {"Range": "bytes=-150"})
        assert (status, got, headers["Content-Range"]) == (206, A[-150:], "bytes 3946-4095/4096")
        assert _get(op, A_URL, {"Range": "bytes=-500"})[0] == 404
        # two ranges: multipart/byteranges cut from the map; the two recorded ones: the recorded answer
        status, headers, got = _get(op, A_URL, {"Range": "bytes=0-9, 3000-3009"})
        assert status == 206 and headers["Content-Type"].startswith("multipart/byteranges")
        assert _parts(headers, got) == [("bytes 0-9/4096", A[0:10]), ("bytes 3000-3009/4096", A[3000:3010])]
        status, headers, got = _get(op, A_URL, {"Range": "bytes=2000-2099,3600-3699"})
        assert (status, got) == (206, MULTI) and BOUNDARY in headers["Content-Type"]
        # bytes never recorded are a miss, never other bytes; past the end is a 416
        status, headers, got = _get(op, A_URL, {"Range": "bytes=1900-2200"})
        assert status == 404 and headers["X-Ego2Web-Replay"] == "miss"
        status, headers, _ = _get(op, A_URL, {"Range": "bytes=5000-"})
        assert (status, headers["Content-Range"]) == (416, "bytes */4096")
        # no Range (or one that cannot be read): the whole body, only where a 200 was recorded
        assert _get(op, A_URL)[0] == 404
        assert _get(op, A_URL, {"Range": "lines=1-2"})[0] == 404
        status, _, got = _get(op, B_URL)
        assert (status, got) == (200, B)
        assert _get(op, B_URL, {"Range": "bytes=-10"})[2] == B[-10:]
        assert _get(op, B_URL, {"Range": "bytes=-10"}, method="HEAD")[:1] == (206,)
        # If-Range names a version: its bytes; names none: the whole body, recorded whole or a miss
        assert _get(op, C_URL, {"Range": "bytes=0-49", "If-Range": '"old"'})[2] == OLD[:50]
        assert _get(op, C_URL, {"Range": "bytes=0-49", "If-Range": '"new"'})[2] == NEW[:50]
        assert _get(op, C_URL, {"Range": "bytes=0-49", "If-Range": '"gone"'})[0] == 404
        assert _get(op, B_URL, {"Range": "bytes=0-49", "If-Range": '"b1"'})[:1] == (206,)
        assert _get(op, B_URL, {"Range": "bytes=0-49", "If-Range": '"b0"'})[2] == B
        assert _get(op, B_URL, {"Range": "bytes=0-49", "If-None-Match": '"b1"'})[0] == 304
        _get(op, A_URL, {"Range": "bytes=2100-2199", "Sec-Fetch-Dest": "video"})
    stats = replay.stats()
    assert stats.miss == 6
    assert "GET http://media.example/a.bin (Range: bytes=1900-2200)" in stats.missed_urls
    seek = stats.log[-1]
    assert (seek.outcome, seek.range, seek.kind) == ("miss", "bytes=2100-2199", "subresource")
    assert classify([seek]) == "degraded"  # a failed media range alone: not complete
    assert stats.validity == "off-snapshot"  # the .bin fetches without Sec-Fetch-Dest read as content


def test_the_same_ranges_in_any_order_and_page_load_get_the_same_bytes(ranged_snapshot, ca):
    asks = [(A_URL, "bytes=0-99"), (A_URL, "bytes=600-1500"), (A_URL, "bytes=-96"), (A_URL, "bytes=3000-"),
            (A_URL, "bytes=50-60,1990-2010"), (C_URL, "bytes=0-99"), (B_URL, "bytes=10-20")]

    def fetch(order):
        with Replay([ranged_snapshot], ca=ca) as replay:
            op = _opener(replay)
            got = {(url, spec): _get(op, url, {"Range": spec}) for url, spec in order}
        return {k: (s, h.get("Content-Range"), b) for k, (s, h, b) in got.items()}, replay.stats()

    first, s1 = fetch(asks)
    again, s2 = fetch(asks[::-1] + asks)  # reversed, then again: no order counter decides the bytes
    assert first == again
    assert first[(A_URL, "bytes=600-1500")][2] == A[600:1501] and first[(A_URL, "bytes=-96")][2] == A[-96:]
    assert first[(A_URL, "bytes=3000-")][0] == 404  # 3500-3899 was never recorded
    assert first[(C_URL, "bytes=0-99")][2] == OLD[:100]  # two versions, neither named: the first recorded
    assert first[(B_URL, "bytes=10-20")][2] == B[10:21]
    assert s1.miss == 1 and s2.miss == 2


# -- nginx, recorded through the proxy, replayed with nginx stopped ---------------------------------

NEEDS_NGINX = pytest.mark.skipif(nginx_binary() is None,
                                 reason="nginx not installed (apt-get install -y nginx-light; scripts/setup.sh does)")


def _raw(host: str, port: int, target: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=20)
    conn.request("GET", target, headers=headers)
    resp = conn.getresponse()
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    return out


def _addr(url: str) -> tuple[str, int]:
    host, _, port = url.partition("://")[2].partition(":")
    return host, int(port.rstrip("/"))


@NEEDS_NGINX
def test_nginx_ranges_recorded_then_replayed_right_or_missed(ca, tmp_path):
    blob = random.Random(5).randbytes(20_000)
    with NginxSite(tmp_path / "www", {"blob.bin": blob}) as nginx:
        url = nginx.url + "/blob.bin"
        task = Task(id="nginx-ranges", instruction="x", start_url=url)
        asks = [{"Range": "bytes=100-199"}, {"Range": "bytes=150-4999"}, {"Range": "bytes=0-9,19990-"}]
        with LiveRecording(task, tmp_path / "snaps", RecordOptions(guard="loopback"), ca=ca) as live:
            recorded = [_raw(*_addr(live.proxy_url), url, h) for h in asks]
        assert live.ok, live.error
        etag = recorded[0][1]["etag"]
    assert [r[0] for r in recorded] == [206, 206, 206]
    assert recorded[2][1]["content-type"].startswith("multipart/byteranges")  # nginx's own multipart answer
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        host, port = _addr(replay.proxy_url)
        status, headers, got = _raw(host, port, url, {"Range": "bytes=120-4000"})
        assert (status, got, headers["content-range"]) == (206, blob[120:4001], "bytes 120-4000/20000")
        assert headers["etag"] == etag
        assert _raw(host, port, url, {"Range": "bytes=0-9,19990-"})[2] == recorded[2][2]  # as nginx sent it
        assert _raw(host, port, url, {"Range": "bytes=-10"})[2] == blob[-10:]
        assert _raw(host, port, url, {"Range": "bytes=100-150", "If-Range": etag})[2] == blob[100:151]
        assert _raw(host, port, url, {"Range": "bytes=100-150", "If-Range": '"other"'})[0] == 404  # never whole
        assert _raw(host, port, url, {"Range": "bytes=5000-5100"})[0] == 404
        assert _raw(host, port, url, {})[0] == 404
        assert _raw(host, port, url, {"Range": "bytes=150-199"})[2] == blob[150:200]
    stats = replay.stats()
    assert stats.miss == 3 and stats.exact == 5, stats.missed_urls


FULL = RNG.randbytes(10240)  # the file; its capture was cut short after 4000 bytes
V1, V2 = RNG.randbytes(1000), RNG.randbytes(2000)  # two versions recorded whole
T_URL, G_URL, V_URL = "http://media.example/cut.mp4", "http://media.example/packed.js", "http://media.example/v.bin"
P_URL = "http://media.example/poll"
F_URL = "http://media.example/f.bin?rid=0b0a8f46-7c8e-4a5e-9f6a-2d4c1e8b9a01"
F_ASKED = "http://media.example/f.bin?rid=5d1c2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


@pytest.fixture(scope="module")
def edge_snapshot(tmp_path_factory):
    import gzip

    sw = SnapshotWriter(tmp_path_factory.mktemp("range-edges"), "edges")
    octet = ("Content-Type", "application/octet-stream")
    exchanges = [
        # cut by the recorder's bound: the first 4000 bytes kept (the archive's Content-Length says 4000)
        (T_URL, 200, [("Content-Type", "video/mp4"), ("ETag", '"t1"')],
         FULL[:4000], [("WARC-Truncated", "length")]),
        (G_URL, 200, [("Content-Type", "text/javascript"), ("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")],
         gzip.compress(b"var packed = 1;\n" * 20, mtime=0), None),
        (V_URL, 200, [octet, ("ETag", '"v1"')], V1, None), (V_URL, 200, [octet, ("ETag", '"v2"')], V2, None),
        (P_URL, 200, [("Content-Type", "text/plain")], b"first", None),
        (P_URL, 200, [("Content-Type", "text/plain")], b"second", None),
        (F_URL, 200, [octet], B, None),
    ]
    for i, (url, status, headers, body, warc) in enumerate(exchanges):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[], request_body=b"", status=status,
                                 reason="", response_headers=headers, response_body=body,
                                 date=datetime(2026, 1, 2, 3, 4, i), warc_headers=warc)
    sw.finalize()
    return sw.path


def test_ranges_at_the_edges_of_what_was_recorded(edge_snapshot, ca):
    """A capture cut short holds its first bytes only; a coded body is not the bytes of a client that cannot
    decode it; a range past one version's end is answered by the version holding it; a HEAD takes nothing
    from the GETs' turn; an answer through a fresh id says so."""
    with Replay([edge_snapshot], ca=ca) as replay:
        op = _opener(replay)
        # the kept bytes are served as what they are, of a size unknown; what lies past them was never kept
        status, headers, got = _get(op, T_URL, {"Range": "bytes=0-99"})
        assert (status, got, headers["Content-Range"]) == (206, FULL[:100], "bytes 0-99/*")
        assert _get(op, T_URL, {"Range": "bytes=-100"})[0] == 404
        assert _get(op, T_URL, {"Range": "bytes=5000-"})[0] == 404  # not a 416: the file is longer than kept
        assert _get(op, T_URL, {"Range": "bytes=0-"})[0] == 404
        # gzip bytes for a client that takes none (as a media element asks): a miss, never coded bytes
        status, headers, got = _get(op, G_URL, {"Range": "bytes=-3", "Accept-Encoding": "identity"})
        assert status == 404 and "Content-Encoding" not in headers
        assert _get(op, G_URL, {"Range": "bytes=-3", "Accept-Encoding": "gzip"})[:1] == (206,)
        # past the end of v1, inside v2
        status, headers, got = _get(op, V_URL, {"Range": "bytes=1500-1599"})
        assert (status, got, headers["Content-Range"]) == (206, V2[1500:1600], "bytes 1500-1599/2000")
        assert _get(op, V_URL, {"Range": "bytes=3000-"})[0] == 416  # past the end of both
        # a HEAD tells about the resource without taking the first answer from the page's GETs
        assert _get(op, P_URL, method="HEAD")[0] == 200
        assert [_get(op, P_URL)[2] for _ in range(3)] == [b"first", b"second", b"second"]
        status, _, got = _get(op, F_ASKED, {"Range": "bytes=0-9"})
        assert (status, got) == (206, B[:10])
    stats = replay.stats()
    assert stats.miss == 4 and stats.fresh_id == 1
    fresh = next(e for e in stats.log if e.url == F_ASKED)
    assert (fresh.outcome, fresh.volatile, fresh.range) == ("canonical", "fresh-id: rid", "bytes=0-9")


def test_a_body_cut_short_has_the_size_its_live_length_says_else_none():
    """Another recorder's WARC may keep the live ``Content-Length`` on a record it cut: that is the size;
    without it the size is unknown (never the bytes kept)."""
    from ego2web_replay.replay.ranges import build_map

    head = [("Content-Type", "video/mp4"), ("Content-Length", "10240")]
    [rep] = build_map([("r", 200, head, FULL[:4000])], cut=lambda ref: True)
    assert (rep.size, rep.whole, rep.covers((0, 3999)), rep.covers((0, 4000))) == (10240, None, True, False)
    [rep] = build_map([("r", 200, head[:1], FULL[:4000])], cut=lambda ref: True)
    assert rep.size is None
    [rep] = build_map([("r", 200, head[:1], FULL[:4000])])
    assert (rep.size, rep.whole) == (4000, "r")
