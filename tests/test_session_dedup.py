"""In-session deduplication: a recording stores each payload once, later captures as revisits, and
replays every exchange byte for byte as the live site sent it."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import datetime

import pytest

from ego2web_replay.judge.pages import SnapshotPages
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.served import served_entry
from ego2web_replay.snapshots.snapshot import Snapshot, SnapshotWriter
from ego2web_replay.snapshots.verify import verify_snapshot
from ego2web_replay.tasks import Task


def _exchange(sw: SnapshotWriter, url: str, body: bytes, *, status: int = 200, chunked: bool = False,
              method: str = "GET") -> None:
    headers = [("Content-Type", "text/plain"), ("X-Url", url)]
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
    sw.writer.write_exchange(url=url, method=method, request_headers=[], request_body=b"", status=status,
                             reason="OK", response_headers=headers, response_body=body,
                             date=datetime(2026, 1, 1, 0, 0, len(sw.pages)))
    sw.pages.append(url)


def test_writer_stores_each_payload_once(tmp_path):
    big, other = b"x" * 400, b"y" * 400
    sw = SnapshotWriter(tmp_path, "dedup", dedup_min_size=256)
    _exchange(sw, "http://a.example/one", big)
    _exchange(sw, "http://a.example/one", big)  # the same URL again
    _exchange(sw, "http://a.example/two", big, status=404)  # another URL, another status, same payload
    _exchange(sw, "http://a.example/three", other)
    _exchange(sw, "http://a.example/small", b"tiny")  # under the threshold: stored every time
    _exchange(sw, "http://a.example/small", b"tiny")
    _exchange(sw, "http://a.example/c", big, chunked=True)  # stored chunked: other stored bytes
    _exchange(sw, "http://a.example/c2", big, chunked=True)
    _exchange(sw, "http://a.example/one", b"", method="HEAD")  # no payload: a response
    manifest = sw.finalize()
    assert manifest.records == {"request": 9, "response": 6, "revisit": 3, "warcinfo": 1}
    assert sw.writer.revisits_written == 3
    snap = Snapshot.open(sw.path)
    records = {r.record_id: r for r in iter_records(snap.archive_path)}
    for entry in snap.entries():
        record = snap.record(entry)
        served = snap.resolve(entry)
        assert served.http_header("X-Url") == entry.url  # each capture keeps its own HTTP head
        if entry.record_type == "revisit":
            original = records[record.refers_to]
            assert record.payload == b"" and served.payload == original.payload
            assert record.refers_to_target_uri == original.url and record.refers_to_date == original.date
            assert entry.digest in (original.payload_digest or "")
    served = {(e.url, snap.resolve(e).http_status): snap.resolve(e) for e in snap.entries()}
    assert served[("http://a.example/two", 404)].payload == big
    c2 = served[("http://a.example/c2", 200)]
    assert c2.payload == big and c2.stored_payload.startswith(b"190\r\n") and c2.chunked
    assert verify_snapshot(sw.path).ok
    # judge pages and drift probes see a revisit as the response it replays, not as `warc/revisit`
    two = next(e for e in snap.entries() if e.url == "http://a.example/two")
    assert (two.mime, two.status) == ("warc/revisit", None)
    assert (served_entry(snap, two).mime, served_entry(snap, two).status) == ("text/plain", 404)
    assert SnapshotPages([sw.path]).get_text("http://a.example/c2") == "x" * 400


@pytest.fixture(scope="module")
def fetches(site):
    base = site.http_url
    return [("GET", base + p) for p in (
        "/static/font.ttf", "/static/font.ttf", "/static/font.ttf?v=2", "/chunked", "/chunked", "/static/data.json",
        "/static/data.json", "/big.bin", "/big.bin", "/static/logo.png", "/api/broken", "/api/broken",
        "/old-product")] + [("HEAD", base + "/static/font.ttf")]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _fetch(proxy_url: str, fetches: list[tuple[str, str]]) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_url}), _NoRedirect())
    out = []
    for method, url in fetches:
        try:
            req = urllib.request.Request(url, method=method, headers={"Accept-Encoding": "gzip"})  # as a browser
            with opener.open(req, timeout=10) as r:
                out.append((r.status, list(r.headers.items()), r.read()))
        except urllib.error.HTTPError as e:
            out.append((e.code, list(e.headers.items()), e.read()))
    return out


def _record(site, root, fetches, ca, dedup: int | None):
    task = Task(id="dedup", instruction="fetch", start_url=site.http_url + "/")
    live = LiveRecording(task, root, RecordOptions(guard="loopback", screenshots=False, dedup_min_size=dedup), ca=ca)
    with live:
        seen = _fetch(live.proxy_url, fetches)
    assert live.ok, live.error
    return live.snapshot_path, seen


@pytest.mark.parametrize("index", ["memory", "mapped"])
def test_recording_with_revisits_replays_byte_exact(site, ca, tmp_path, data_home, fetches, index):
    snap, live = _record(site, tmp_path / "on", fetches, ca, 256)
    plain, _ = _record(site, tmp_path / "off", fetches, ca, None)
    kinds = [r.rec_type for r in iter_records(next(snap.glob("archive.warc*")))]
    assert kinds.count("revisit") == 4  # font x2, chunked, big.bin; the gzip JSON and /api/broken are under 256 bytes
    assert verify_snapshot(snap).ok
    on, off = (next(p.glob("archive.warc*")).stat().st_size for p in (snap, plain))
    assert on < off - len(site.big) // 2  # the second big.bin is not stored again
    with Replay([snap], ca=ca, index=index) as replay:
        replayed = _fetch(replay.proxy_url, fetches)
    stats = replay.stats()
    assert stats.miss == 0 and stats.exact == len(fetches)
    # Date, Expires and Last-Modified are shifted to the replay's clock by design (httputil.shift_dates)
    drop = {"x-ego2web-replay", "connection", "keep-alive", "date", "expires", "last-modified"}
    for (method, url), (s1, h1, b1), (s2, h2, b2) in zip(fetches, live, replayed, strict=True):
        assert (s2, b2) == (s1, b1), (method, url)
        assert [h for h in h2 if h[0].lower() not in drop] == [h for h in h1 if h[0].lower() not in drop], url
