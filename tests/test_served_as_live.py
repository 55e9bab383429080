"""Served exactly as the live page saw it: no added header, chunked stays chunked, freshness as at capture."""

from __future__ import annotations

import gzip
import http.client
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ego2web_replay.models import Task
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.httputil import shift_dates
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots import Snapshot, import_warc, iter_records, verify_snapshot
from ego2web_replay.snapshots.export import export_snapshot
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.testing.site import CHUNKED_PAGE
from ego2web_replay.testing.thirdparty import proxy_get

CORPUS = Path("/work/shared/corpus/warc")
CAPTURED = datetime(2025, 3, 4, 5, 6, 7)


def test_shift_dates_keeps_every_lifetime():
    archived = [("Date", "Tue, 04 Mar 2025 05:06:07 GMT"), ("Expires", "Tue, 04 Mar 2025 06:06:07 GMT"),
                ("Last-Modified", "Mon, 03 Mar 2025 05:06:07 GMT"), ("Cache-Control", "public")]
    now = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    served = dict(shift_dates(archived, now))
    assert [k for k, _ in shift_dates(archived, now)] == [k for k, _ in archived]  # nothing added or dropped
    date, expires, modified = (parsedate_to_datetime(served[k]) for k in ("Date", "Expires", "Last-Modified"))
    assert date == now and expires - date == timedelta(hours=1) and date - modified == timedelta(days=1)
    assert served["Cache-Control"] == "public"
    assert shift_dates([("Expires", "0")], now) == [("Expires", "0")]  # no Date: left as it is


@pytest.mark.parametrize("engine", ["fast", "mitmproxy"])
def test_headers_as_archived_and_dates_moved_together(tmp_path, ca, engine):
    sw = SnapshotWriter(tmp_path, "served")
    archived = [("Content-Type", "text/css"), ("Date", format_datetime(CAPTURED.replace(tzinfo=UTC), usegmt=True)),
                ("Expires", format_datetime((CAPTURED + timedelta(hours=2)).replace(tzinfo=UTC), usegmt=True)),
                ("Last-Modified", "Sat, 01 Mar 2025 00:00:00 GMT"), ("ETag", '"v1"'), ("Server", "origin/1")]
    sw.writer.write_exchange(url="http://assets.example/site.css", method="GET", request_headers=[],
                             request_body=b"", status=200, reason="OK", response_headers=archived,
                             response_body=b"body { color: red }", date=CAPTURED)
    sw.finalize()
    with Replay([sw.path], ca=ca, freeze=False, engine=engine) as replay:
        before = datetime.now(UTC).replace(microsecond=0)
        status, headers, body = proxy_get(replay.proxy_url, "http://assets.example/site.css")
    names = [k.lower() for k in headers]
    assert status == 200 and body == b"body { color: red }"
    assert "x-ego2web-replay" not in names  # a hit gains no header
    # as archived (the recorder wrote the true Content-Length into the archived head)
    assert sorted(names) == sorted([k.lower() for k, _ in archived] + ["content-length"])
    got = headers
    date, expires = parsedate_to_datetime(got["Date"]), parsedate_to_datetime(got["Expires"])
    assert date >= before - timedelta(seconds=1) and expires - date == timedelta(hours=2)  # fresh, as at capture


@pytest.mark.skipif(not (CORPUS / "warcio/example-iana.org-chunked.warc").exists(), reason="shared corpus")
@pytest.mark.parametrize("engine", ["fast", "mitmproxy"])
def test_a_chunked_capture_is_served_chunked(tmp_path, ca, engine):
    snap = import_warc(CORPUS / "warcio/example-iana.org-chunked.warc", "chunked", tmp_path)
    (entry,) = snap.entries()
    with Replay([snap.path], ca=ca, freeze=False, engine=engine) as replay:
        status, headers, body = proxy_get(replay.proxy_url, entry.url)
    names = {k.lower(): v for k, v in headers.items()}
    assert status == 200 and body.startswith(b"<!doctype html>")
    assert names.get("transfer-encoding") == "chunked" and "content-length" not in names


def _wire_get(proxy_url: str, url: str) -> tuple[int, list[tuple[str, str]], bytes, bool]:
    """GET ``url`` through an HTTP proxy as a browser would: status, headers in wire order, the body as
    delivered (chunking undone, content-encoding kept) and whether it came chunked."""
    proxy = urlsplit(proxy_url)
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
    try:
        conn.request("GET", url, headers={"Accept-Encoding": "gzip, br"})
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read(), bool(resp.chunked)
    finally:
        conn.close()


def _names(headers: list[tuple[str, str]]) -> list[str]:
    return [k.lower() for k, _ in headers]


def test_a_chunked_response_recorded_here_is_served_chunked(site, ca, tmp_path):
    """Recorded through the real recorder proxy, replayed through the real replay proxy: a response that
    came chunked (no Content-Length) is served chunked with the same headers and bytes; verify and WACZ pass."""
    paths = ["/chunked", "/chunked-page", "/static/style.css"]  # plain chunked, gzip chunked HTML, a sized file
    task = Task(id="chunked", instruction="open the streamed page", start_url=site.http_url + "/chunked-page")
    with LiveRecording(task, tmp_path / "snaps", RecordOptions(guard="loopback", screenshots=False), ca=ca) as rec:
        live = {p: _wire_get(rec.proxy_url, site.http_url + p) for p in paths}
    assert rec.ok and rec.snapshot_path is not None, rec.error
    snap = rec.snapshot_path
    assert live["/chunked"][3] and live["/chunked-page"][3] and not live["/static/style.css"][3]

    # the archive holds the message as received: its head unchanged, its body chunked again
    stored = {urlsplit(r.url).path: r for r in iter_records(Snapshot.open(snap).archive_path)
              if r.rec_type == "response"}
    for p in ("/chunked", "/chunked-page"):
        assert stored[p].chunked and stored[p].http_header("Content-Length") is None
        assert stored[p].payload == live[p][2] and stored[p].stored_payload.endswith(b"\r\n0\r\n\r\n")
    assert stored["/static/style.css"].http_header("Content-Length") == str(len(live["/static/style.css"][2]))
    report = verify_snapshot(snap)
    assert report.ok, report.problems

    with Replay([snap], ca=ca, freeze=False) as replay:
        replayed = {p: _wire_get(replay.proxy_url, site.http_url + p) for p in paths}
    for p in paths:
        status, headers, body, chunked = replayed[p]
        l_status, l_headers, l_body, l_chunked = live[p]
        assert (status, body, chunked) == (l_status, l_body, l_chunked), p  # same bytes, same framing
        assert _names(headers) == _names(l_headers), p  # not one header added, dropped or moved
        assert [h for h in headers if h[0].lower() != "date"] == [h for h in l_headers if h[0].lower() != "date"]
    assert dict(replayed["/chunked"][1])["Transfer-Encoding"] == "chunked"
    assert "content-length" not in _names(replayed["/chunked-page"][1])
    assert gzip.decompress(replayed["/chunked-page"][2]).decode() == CHUNKED_PAGE  # encoding kept byte-exact

    with Replay([snap], ca=ca, freeze=True) as replay:  # the page with the determinism script: still chunked
        status, headers, body, chunked = _wire_get(replay.proxy_url, site.http_url + "/chunked-page")
    assert status == 200 and chunked and "content-length" not in _names(headers)
    assert b"<script>" in body and b"Streamed page" in body

    wacz = tmp_path / "chunked.wacz"
    export_snapshot(snap, wacz, "wacz")
    run = subprocess.run([Path(sys.executable).parent / "wacz", "validate", "-f", wacz], capture_output=True, text=True)
    assert run.returncode == 0 and "is valid" in run.stdout, run.stdout + run.stderr


@pytest.mark.slow
def test_chromium_keeps_a_capture_fresh_as_it_was_at_capture_time(tmp_path, ca, chromium):
    """A stylesheet archived over a year ago, fresh for two hours after its capture: in frozen replay
    Chromium finds it fresh in its cache on the next page, as live browsing did, and makes no second
    request (with its archived Date and Expires kept, it would be stale and fetched again)."""
    sw = SnapshotWriter(tmp_path, "cache")
    captured = format_datetime(CAPTURED.replace(tzinfo=UTC), usegmt=True)
    for name in ("one", "two"):
        page = f'<html><head><link rel="stylesheet" href="/site.css"></head><body><p id="p">{name}</p></body></html>'
        sw.writer.write_exchange(url=f"http://assets.example/{name}.html", method="GET", request_headers=[],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "text/html"), ("Date", captured)],
                                 response_body=page.encode(), date=CAPTURED)
    sw.writer.write_exchange(
        url="http://assets.example/site.css", method="GET", request_headers=[], request_body=b"", status=200,
        reason="OK", response_headers=[
            ("Content-Type", "text/css"), ("Date", captured),
            ("Expires", format_datetime((CAPTURED + timedelta(hours=2)).replace(tzinfo=UTC), usegmt=True)),
            ("Last-Modified", "Sat, 01 Mar 2025 00:00:00 GMT")],
        response_body=b"p { color: rgb(200, 0, 0) }", date=CAPTURED)
    sw.finalize()
    with Replay([sw.path], ca=ca) as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        try:
            page = ctx.new_page()
            for name in ("one", "two"):
                page.goto(f"http://assets.example/{name}.html")
                assert page.eval_on_selector("#p", "e => getComputedStyle(e).color") == "rgb(200, 0, 0)"
        finally:
            ctx.close()
        log = replay.stats().log
    css = [e for e in log if e.url.endswith("/site.css")]
    assert len([e for e in log if e.url.endswith(".html")]) == 2 and [e.outcome for e in css] == ["exact"]
