"""Serving adds nothing long-lived for the cyclic collector to walk: the replay log grows by one
entry per request and the response cache by one entry per capture served, so entries the collector
tracks made every full collection walk all of them (pauses of 100+ ms under load, BENCHMARKS.md
``tail``). And no burst of work when every cached response's dates go stale at once, each second.
The stats and the bytes served are unchanged."""

from __future__ import annotations

import gc
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from ego2web_replay.models import ReplayLogEntry
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.web import get_header

N = 400
HEADERS = [("Host", "api.example"), ("Accept", "application/json"), ("Sec-Fetch-Dest", "empty")]


def _snapshot(root):
    sw = SnapshotWriter(root, "logged")
    for i in range(N):
        sw.writer.write_exchange(url=f"http://api.example/item/{i}?utm_source=s{i}", method="GET", request_headers=[],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "application/json"), ("ETag", f'"e{i}"'),
                                                   ("Date", "Thu, 01 Jan 2026 00:00:00 GMT"),
                                                   ("Expires", "Thu, 01 Jan 2026 01:00:00 GMT")],
                                 response_body=b'{"item": %d}' % i, date=datetime(2026, 1, 1, 0, i // 60, i % 60))
    sw.finalize()
    return sw.path


def _tracked() -> int:
    """Objects the collector tracks, once it has looked at the new ones (a tuple of tuples is
    untracked from the inside out: a collection or two)."""
    for _ in range(3):
        gc.collect()
    return len(gc.get_objects())


class _OneSecond(datetime):
    """A clock that stays in one second: each new second re-dates every cached head once (new date
    pairs, by design; the test below this one), and how many seconds a round of answers spans is up
    to the scheduler. What is measured here is the serving itself."""

    @classmethod
    def now(cls, tz=None):  # noqa: ANN001, ANN206 - datetime's own signature
        return datetime(2026, 12, 1, 9, 0, 0, 250_000, tzinfo=UTC)


def _young(serve) -> int:  # noqa: ANN001
    """New objects for the young collector while ``serve()`` runs, with no other thread let in
    (a session fixture's server thread allocates too; under load more of it lands in the window)."""
    interval = sys.getswitchinterval()
    gc.disable()
    sys.setswitchinterval(600)  # cached answers do no I/O: the GIL stays with this thread
    try:
        young = gc.get_count()[0]
        serve()
        return gc.get_count()[0] - young
    finally:
        sys.setswitchinterval(interval)
        gc.enable()


def test_the_cache_and_the_log_leave_the_collector_nothing_to_walk(tmp_path, monkeypatch):
    from ego2web_replay.replay import responder as responder_module

    monkeypatch.setattr(responder_module, "datetime", _OneSecond)
    replay = Replay([_snapshot(tmp_path)], miss="404")
    replay.open()
    try:
        responder = replay.responder
        urls = [f"http://api.example/item/{i}?utm_source=s{i}" for i in range(N)]
        first = responder.answer("GET", urls[0], HEADERS, b"")
        before = _tracked()
        for url in urls[1:]:  # every other archived response read and cached
            responder.answer("GET", url, HEADERS, b"")
        for _ in range(2):
            for url in urls:
                responder.answer("GET", url, HEADERS, b"")
        grown = _tracked() - before
        # a cached answer leaves nothing behind for the young collector either: no collection is
        # set off by serving (each would walk the entries made since the last, under load)
        def serve() -> None:
            for url in urls:
                responder.answer("GET", url, HEADERS, b"")

        # one round first: the full collection of _tracked() empties the allocator's free lists, and
        # the replies built right after it count as new even though each is freed with its request
        serve()
        left = _young(serve)
        assert left < N // 20, f"{left} new objects for the collector after {N} cached answers"
        # 399 responses cached, 1,199 more log entries: none tracked (as lists and models: 4,000+ objects)
        assert grown < 100, f"{grown} more objects tracked by the collector after caching {N} responses"
        again = responder.answer("GET", urls[0], HEADERS, b"")
        def undated(reply):  # noqa: ANN001, ANN202
            return reply._replace(headers=[(k, v) for k, v in reply.headers if k not in ("Date", "Expires")],
                                  head=None, again=None)  # what a kept reply carries: its HTTP/1.1 head,
                                                          # serialised once, and its way to be given again

        assert undated(again) == undated(first)
        assert isinstance(again.headers, list) and ("ETag", '"e0"') in again.headers
        assert responder.answer("GET", urls[0], HEADERS + [("If-None-Match", '"e0"')], b"").status == 304
        assert responder.answer("HEAD", urls[0], HEADERS, b"").headers == again.headers

        responder.answer("GET", "http://api.example/item/3?utm_source=other", HEADERS, b"")  # canonical
        responder.answer("POST", "http://api.example/nowhere", HEADERS, b"x=1")  # miss
        stats = replay.stats()
    finally:
        replay.stop()
    served = 5 * N + 5
    assert (stats.exact, stats.canonical, stats.miss, stats.total) == (served - 2, 1, 1, served)
    assert stats.missed_urls == ["POST http://api.example/nowhere"]
    assert len(stats.log) == served and all(isinstance(e, ReplayLogEntry) for e in stats.log)
    assert stats.log[0] == ReplayLogEntry(method="GET", url=urls[0], outcome="exact", status=200,
                                          matched_url=urls[0], score=1.0, kind="content")
    assert stats.log[-3].method == "HEAD" and stats.log[-4].status == 304
    assert stats.log[-2].outcome == "canonical" and stats.log[-2].matched_url == urls[3]
    assert stats.log[-1] == ReplayLogEntry(method="POST", url="http://api.example/nowhere", outcome="miss",
                                           status=404, kind="content")


def test_a_cached_response_is_redated_each_second_without_parsing_its_dates(tmp_path, monkeypatch):
    """Every cached head goes stale at the same moment, each new second: moving its dates must then
    be formatting only, not parsing them again (``httputil.date_offsets`` once per head)."""
    from ego2web_replay.replay import httputil, responder

    clock = [datetime(2026, 12, 1, 9, 0, 0, 250_000, tzinfo=UTC)]

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ANN001, ANN206 - datetime's own signature
            return clock[0]

    monkeypatch.setattr(responder, "datetime", Clock)
    parsed: list[str] = []
    real_parse = httputil._http_date
    monkeypatch.setattr(httputil, "_http_date", lambda value: (value and parsed.append(value)) or real_parse(value))
    replay = Replay([_snapshot(tmp_path)], miss="404")
    replay.open()
    try:
        url = "http://api.example/item/5?utm_source=s5"
        archived = replay.responder.answer("GET", url, HEADERS, b"")  # read, cached, its Date parsed
        assert parsed == ["Thu, 01 Jan 2026 00:00:00 GMT", "Thu, 01 Jan 2026 01:00:00 GMT"]
        for step in range(1, 4):
            clock[0] += timedelta(seconds=1)
            before = len(parsed)
            reply = replay.responder.answer("GET", url, HEADERS, b"")
            assert len(parsed) == before, f"second {step}: dates parsed again: {parsed[before:]}"
            now = clock[0].replace(microsecond=0)
            assert get_header(reply.headers, "Date") == format_datetime(now, usegmt=True)
            assert get_header(reply.headers, "Expires") == format_datetime(now + timedelta(hours=1), usegmt=True)
            assert reply.headers == httputil.shift_dates(archived.headers, now)
            assert reply.body == archived.body
    finally:
        replay.stop()
