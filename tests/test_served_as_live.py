"""Served exactly as the live page saw it: no added header, chunked stays chunked, freshness as at capture."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path

import pytest

from ego2web_replay.replay.httputil import shift_dates
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots import import_warc
from ego2web_replay.snapshots.snapshot import SnapshotWriter
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
