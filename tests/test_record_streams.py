"""Open-ended responses (server-sent events) through the fast recorder: streamed to the client as they
come, archived when they end, marked ``WARC-Truncated`` when cut (recorder/stream.py).

The origin is a raw-socket server that waits on events the test sets, so "the first piece reached the
client before the origin finished" is an ordering, never a timing, assertion.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
import time
from urllib.parse import urlsplit

import pytest

from ego2web_replay.guard import GuardPolicy
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.snapshots.warc import LEFT_HEADER, TIMING_HEADER
from ego2web_replay.tasks import Task
from ego2web_replay.testing.aio import run_coro
from ego2web_replay.testing.rawsock import read_head
from ego2web_replay.testing.sse_site import EVENTS, SseSite
from ego2web_replay.testing.thirdparty import available
from ego2web_replay.testing.tls import make_test_ca

BIG = os.urandom(6 << 20)
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class _Origin(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        head = read_head(sock, bytearray())
        if head is None:
            return
        path = head.split(b" ", 2)[1].decode()
        srv = self.server
        with contextlib.suppress(OSError):
            if path == "/events":  # two events, the second only once the test says so
                sock.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunk(b"data: one\n\n"))
                srv.go.wait(10)  # type: ignore[attr-defined]
                sock.sendall(_chunk(b"data: two\n\n") + b"0\r\n\r\n")
                srv.done.set()  # type: ignore[attr-defined]
            elif path == "/forever":  # an event every 20 ms until the proxy goes away
                sock.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
                n = 0
                while True:
                    sock.sendall(_chunk(b"data: %d\n\n" % n))
                    n += 1
                    time.sleep(0.02)
            elif path == "/flood":  # 3 MiB of events, as fast as they go, no length
                sock.sendall(SSE_HEAD + b"Connection: close\r\n\r\n")
                line = b"data: " + b"x" * 1000 + b"\n\n"
                for _ in range(3 << 10):
                    sock.sendall(line)
                sock.close()
            elif path in ("/trickle", "/stall"):  # a body with a length in 6 pieces, 0.15 s apart (/stall: 1 s)
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 60\r\n\r\n")
                for i in range(6):
                    time.sleep(0.15 if path == "/trickle" or i < 3 else 1.0)
                    sock.sendall(b"%d" % i * 10)
            elif path in ("/half", "/big"):  # a body with a length, its end only once the test says so
                first, rest = (b"first half", b"and the end") if path == "/half" else (BIG[:5 << 20], BIG[5 << 20:])
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                             b"Content-Length: %d\r\n\r\n%b" % (len(first) + len(rest), first))
                srv.go.wait(10)  # type: ignore[attr-defined]
                sock.sendall(rest)
                srv.done.set()  # type: ignore[attr-defined]
            elif path == "/broken":  # the origin dies in the middle of the stream
                sock.sendall(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunk(b"data: last\n\n"))
                sock.close()


@pytest.fixture(scope="module")
def origin():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Origin)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


class _Recording:
    def __init__(self, root, ca, writer: object | None = None) -> None:
        self.snap = SnapshotWriter(root, "T", compression="zst", source="record")
        self.archive = ExchangeArchive(writer or self.snap.writer)
        self.front = RecordFront(self.archive, ca=ca, guard=GuardPolicy(mode="loopback"))

    def __enter__(self) -> _Recording:
        self.front.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.front.stop()
        with contextlib.suppress(Exception):
            self.snap.writer.close()

    def ask(self, url: str) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.front.port), timeout=10)
        s.sendall(f"GET {url} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\nAccept: text/event-stream\r\n\r\n".encode())
        return s

    def responses(self) -> list:
        self.snap.finalize()
        return [r for r in iter_records(self.snap.writer.path) if r.rec_type == "response"]


def _until(s: socket.socket, got: bytes, want: bytes) -> bytes:
    while want not in got:
        data = s.recv(65536)
        if not data:
            break
        got += data
    return got


def _to_close(s: socket.socket) -> bytes:
    got = b""
    while data := s.recv(65536):
        got += data
    return got


def _wait(check, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _left_after(rec: _Recording, url: str, want: bytes) -> bytes:
    """Ask for ``url``, leave once ``want`` came, wait until the recorder archived the stream."""
    s = rec.ask(url)
    got = _until(s, b"", want)
    s.close()
    _wait(lambda: rec.archive.exchanges == 1, "the stream was not archived when its client left")
    return got


def _first_then_rest(origin, rec: _Recording, url: str, first: bytes, last: bytes) -> bytes:
    """Ask for ``url``; once ``first`` reached the client (the origin still waiting, nothing archived yet)
    let the origin finish; read until ``last``; wait until the exchange is archived."""
    origin.go, origin.done = threading.Event(), threading.Event()
    s = rec.ask(url)
    got = _until(s, b"", first)
    assert not origin.done.is_set() and rec.archive.exchanges == 0
    origin.go.set()
    got = _until(s, got, last)
    s.close()
    _wait(lambda: rec.archive.exchanges == 1, "the exchange was not archived")
    return got


def test_the_first_event_reaches_the_client_before_the_origin_finishes(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        got = _first_then_rest(origin, rec, base + "/events", b"data: one", b"0\r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower() and body.endswith(b"0\r\n\r\n")
    assert b"data: one\n\n" in body and b"data: two\n\n" in body
    (record,) = rec.responses()
    assert record.payload == b"data: one\n\ndata: two\n\n"
    assert record.headers.get("WARC-Truncated") is None
    pieces = [p.split(":") for p in record.headers.get(TIMING_HEADER).split()]
    assert [int(off) for off, _ in pieces] == [0, len(b"data: one\n\n")]
    assert int(pieces[1][1]) >= int(pieces[0][1])


def test_a_client_that_goes_away_ends_the_recording_of_its_stream(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        got = _left_after(rec, base + "/forever", b"data: 2\n\n")
        assert not rec.front._streams and not rec.front.upstream._busy  # the origin's connection let go
    assert b"data: 0\n\n" in got
    (record,) = rec.responses()
    assert record.headers.get("WARC-Truncated") == "disconnect" and record.headers.get(LEFT_HEADER) == "client"
    assert record.payload.startswith(b"data: 0\n\ndata: 1\n\ndata: 2\n\n")
    assert rec.archive.truncated == [base + "/forever: disconnect"]


def test_a_stream_past_the_time_limit_is_cut_and_archived_truncated_time(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        rec.front.upstream.read_timeout_s = 0.3
        got = _to_close(rec.ask(base + "/forever"))  # the proxy closes the client's connection at the cut
    body = got.partition(b"\r\n\r\n")[2]
    assert b"data: 0\n\n" in body and not body.endswith(b"0\r\n\r\n")  # no last chunk: the client sees a cut
    (record,) = rec.responses()
    assert record.headers.get("WARC-Truncated") == "time"
    assert record.payload.startswith(b"data: 0\n\n") and record.payload.count(b"data: ") == body.count(b"data: ")


def test_a_body_with_a_length_has_the_time_limit_between_reads_not_in_all(origin, ca, tmp_path):
    """A download that keeps coming may take longer than the limit in all (0.9 s against 0.4 s); one that
    stops for longer than the limit between two reads is cut there and not archived."""
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        rec.front.upstream.read_timeout_s = 0.4
        kept = _until(rec.ask(base + "/trickle"), b"", b"5" * 10)
        cut = _to_close(rec.ask(base + "/stall"))
    assert kept.partition(b"\r\n\r\n")[2] == b"".join(b"%d" % i * 10 for i in range(6))
    assert cut.partition(b"\r\n\r\n")[2] == b"000000000011111111112222222222"  # the three pieces before it
    (record,) = rec.responses()
    assert record.url == base + "/trickle" and len(record.payload) == 60
    assert rec.archive.errors == [f"{base}/stall: no answer from the origin within 0.4 s"]


def test_a_stream_past_the_record_cap_is_cut_at_the_cap_and_archived_truncated_length(origin, ca, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("EGO2WEB_MAX_RECORD_BYTES", str(2 << 20))  # 1 MiB of payload (recorder/upstream.py)
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        got = _to_close(rec.ask(base + "/flood"))
    body = got.partition(b"\r\n\r\n")[2]
    (record,) = rec.responses()
    assert record.headers.get("WARC-Truncated") == "length"
    assert len(record.payload) == 1 << 20 and body == record.payload  # the client got exactly what was kept


def test_an_origin_that_dies_mid_stream_is_archived_truncated_disconnect(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        got = _to_close(rec.ask(base + "/broken"))
    assert b"data: last" in got and not got.endswith(b"0\r\n\r\n")
    (record,) = rec.responses()
    assert record.headers.get("WARC-Truncated") == "disconnect" and record.payload == b"data: last\n\n"
    assert record.headers.get(LEFT_HEADER) is None


def test_stopping_the_recorder_archives_an_open_stream(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        s = rec.ask(base + "/forever")
        _until(s, b"", b"data: 1\n\n")
    s.close()
    (record,) = rec.responses()
    assert record.headers.get("WARC-Truncated") == "disconnect" and record.payload.startswith(b"data: 0")
    assert record.headers.get(LEFT_HEADER) == "stopped"


def test_a_stream_whose_record_cannot_be_written_never_ends_cleanly_for_the_client(origin, ca, tmp_path):
    origin.go, origin.done = threading.Event(), threading.Event()
    origin.go.set()

    class Failing:
        def write_exchange(self, **kw):
            raise OSError("disk full")

    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca, writer=Failing()) as rec:
        got = _to_close(rec.ask(base + "/events"))
    assert b"data: two" in got and not got.endswith(b"0\r\n\r\n")  # the last chunk is withheld: a cut body
    assert rec.archive.failed and "disk full" in rec.archive.failed


# -- any other body: streamed too, archived whole -----------------------------------------------------
def test_a_body_with_a_length_reaches_the_client_before_the_origin_finishes(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        got = _first_then_rest(origin, rec, base + "/half", b"first half", b"and the end")
    assert got.partition(b"\r\n\r\n")[2] == b"first halfand the end"
    (record,) = rec.responses()
    assert record.payload == b"first halfand the end" and record.headers.get("WARC-Truncated") is None
    assert record.headers.get(TIMING_HEADER) is None  # timing is kept for open-ended bodies only


def test_a_download_the_client_leaves_is_still_archived_whole_from_a_spool_file(origin, ca, tmp_path):
    """As Chromium leaves a media file after its first megabytes: the recorder reads on and archives the
    whole response (replay can then serve any range of it); past SPOOL_BYTES the copy is in a file."""
    origin.go, origin.done = threading.Event(), threading.Event()
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        s = rec.ask(base + "/big")
        got = b""
        while len(got) < 5 << 20:
            got += s.recv(1 << 20)
        (stream,) = rec.front._streams
        assert stream._body.on_disk  # the recorder's copy went to disk, not memory
        s.close()
        origin.go.set()
        _wait(lambda: rec.archive.exchanges == 1, "the download was not archived")
    (record,) = rec.responses()
    assert record.payload == BIG and record.headers.get("WARC-Truncated") is None
    assert rec.archive.errors == []


def test_a_client_that_stops_reading_holds_nothing_in_memory_the_origin_reads_on_into_the_spool(
        origin, ca, tmp_path):
    origin.go, origin.done = threading.Event(), threading.Event()
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        s = rec.ask(base + "/big")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        _wait(lambda: rec.front._streams, "no stream")
        (stream,) = rec.front._streams
        _wait(lambda: stream._size >= 5 << 20, "the origin's bytes did not reach the spool")
        (conn,) = rec.front.connections
        assert conn.transport.get_write_buffer_size() < 512 << 10  # what waits for the client stays small
        origin.go.set()
        got = b""
        while len(got.partition(b"\r\n\r\n")[2]) < len(BIG):
            got += s.recv(1 << 20)
        s.close()
        _wait(lambda: rec.archive.exchanges == 1, "not archived")
    assert got.partition(b"\r\n\r\n")[2] == BIG


# -- replay of what was recorded ---------------------------------------------------------------
def _replayed(snap_path, url: str) -> tuple[bytes, object]:
    """What the fast replay of ``snap_path`` sends for ``url`` (read to the connection's end), and its stats."""
    with Replay([snap_path], freeze=False, guard_mode="loopback", engine="fast") as replay:
        port = urlsplit(replay.proxy_url).port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"GET {url} HTTP/1.1\r\nHost: {url.split('/')[2]}\r\nAccept: text/event-stream\r\n"
                      "Sec-Fetch-Dest: empty\r\nConnection: close\r\n\r\n".encode())
            got = _to_close(s)
        stats = replay.stats()
    return got, stats


def test_a_recorded_stream_is_replayed_in_its_pieces_and_ends_as_it_did(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        _first_then_rest(origin, rec, base + "/events", b"data: one", b"0\r\n\r\n")
    rec.snap.finalize()
    got, stats = _replayed(rec.snap.path, base + "/events")
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
    # the archived pieces, each its own chunk, then the last chunk: a stream that ended as it did live
    assert body == _chunk(b"data: one\n\n") + _chunk(b"data: two\n\n") + b"0\r\n\r\n"
    assert stats.truncated == 0 and stats.validity == "complete"


def test_a_capture_the_origin_cut_is_replayed_cut_counted_and_degrades_validity(origin, ca, tmp_path):
    base = f"http://127.0.0.1:{origin.server_address[1]}"
    with _Recording(tmp_path, ca) as rec:
        _to_close(rec.ask(base + "/broken"))
    rec.snap.finalize()
    got, stats = _replayed(rec.snap.path, base + "/broken")
    assert got.partition(b"\r\n\r\n")[2] == _chunk(b"data: last\n\n")  # no last chunk: cut as it was live
    assert stats.truncated == 1 and stats.truncated_urls == [f"GET {base}/broken (disconnect)"]
    assert stats.validity == "degraded"


# -- a real SSE server (sse-starlette on uvicorn), recorded and replayed by Chromium ---------------------
def _shown(page) -> list[str]:
    page.wait_for_selector("body[data-ended='1']", state="attached", timeout=20_000)
    return page.locator("#log li").all_text_contents()


@pytest.mark.slow
@pytest.mark.skipif(not available("sse_starlette"), reason="sse-starlette is not installed")
@pytest.mark.parametrize("scheme", ["http", "https"])  # HTTP/1.1 and HTTP/2 from Chromium to the proxies
def test_chromium_sees_sse_starlette_events_live_through_the_recorder_and_frozen(chromium, ca, tmp_path, scheme):
    tls = make_test_ca(tmp_path / "tls") if scheme == "https" else None
    with SseSite(tls) as sse:
        task = Task(id="sse", instruction="x", start_url=sse.url + "/")
        opts = RecordOptions(guard="loopback", upstream_ca=tls.ca_cert if tls else None)
        with LiveRecording(task, tmp_path / "rec", opts, ca=ca) as live:
            ctx = chromium.new_context(proxy_url=live.proxy_url)
            page = ctx.new_page()
            page.goto(sse.url + "/")
            assert _shown(page) == [f"event {n}" for n in range(EVENTS)]  # the whole stream, then its end
            page.goto(sse.url + "/?stream=ticker")
            page.wait_for_function("document.querySelectorAll('#log li').length >= 3")
            protocol = page.evaluate("performance.getEntriesByType('navigation')[0].nextHopProtocol")
            page.goto("about:blank")  # the browser leaves the ticker: its record ends there
            _wait(lambda: not live.proxy._streams, "the ticker was not archived when the browser left it")
            ctx.close()
        assert live.ok, live.error
    assert protocol == ("h2" if tls else "http/1.1")
    records = {r.url: r for r in iter_records(live.writer.writer.path) if r.rec_type == "response"}
    events, ticker = records[sse.url + "/events"], records[sse.url + "/ticker"]
    assert events.headers.get("WARC-Truncated") is None and len(events.headers.get(TIMING_HEADER).split()) >= EVENTS
    assert ticker.headers.get("WARC-Truncated") == "disconnect" and ticker.headers.get(LEFT_HEADER) == "client"
    assert live.manifest.truncated == [f"{sse.url}/ticker (disconnect)"]  # the snapshot says so too
    ticks = [line.split(": ", 1)[1] for line in ticker.payload.decode().splitlines() if line.startswith("data: ")]
    assert len(ticks) >= 3
    # the site is gone: the frozen replay alone shows the same events, a truncated stream counted as such
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback", engine="fast") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        page = ctx.new_page()
        page.goto(sse.url + "/")
        assert _shown(page) == [f"event {n}" for n in range(EVENTS)]
        page.goto(sse.url + "/?stream=ticker")
        page.wait_for_function(f"document.querySelectorAll('#log li').length >= {len(ticks)}")
        assert page.locator("#log li").all_text_contents() == ticks  # every recorded tick, the stream still open
        assert page.evaluate("document.body.dataset.ended") is None
        ctx.close()
        stats = replay.stats()
    assert stats.miss == 0, stats.missed_urls
    assert stats.truncated == 1 and stats.truncated_urls == [f"GET {sse.url}/ticker (disconnect)"]
    assert stats.validity == "degraded"


def test_an_http2_stream_between_its_pieces_is_answering_not_sending_so_no_body_timeout_cuts_it():
    """The bounds branch times out HTTP/2 answers waiting for a window (``sending``); a streamed body all
    sent whose next piece is still to come from the origin (an event stream between events) waits on
    the origin, not the client: ``answering``, which has no timeout on the wire (docs/limits.md)."""
    import asyncio

    import h2.config
    import h2.connection

    from ego2web_replay.wire.h2conn import H2Handler
    from ego2web_replay.wire.reply import Reply

    class _Stream:
        complete = False

        def __init__(self) -> None:
            self.more = asyncio.Event()

        async def __aiter__(self):  # one piece, then the origin is quiet until told
            yield b"data: one\n\n"
            await self.more.wait()

        def close(self) -> None:
            self.more.set()

    async def main() -> None:
        stream, out = _Stream(), bytearray()
        handler = H2Handler(lambda *_: Reply(200, "OK", [("Content-Type", "text/event-stream")], b"", False,
                                             "recorded", stream=stream), out.extend, lambda: None, authority="e.example")
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        client.send_headers(1, [(":method", "GET"), (":path", "/events"), (":scheme", "https"),
                                (":authority", "e.example")], end_stream=True)
        handler.feed(client.data_to_send())
        for _ in range(20):
            await asyncio.sleep(0)
        got = b"".join(getattr(e, "data", b"") or b"" for e in client.receive_data(bytes(out)))
        assert got == b"data: one\n\n" and handler.phase() == "answering"
        stream.close()  # the origin ends it (cut): the stream is reset, nothing is left to send
        for _ in range(20):
            await asyncio.sleep(0)
        assert handler.phase() == "idle"

    run_coro(main(), timeout_s=30)  # in a thread of its own: Playwright's sync API may hold this thread's loop


@pytest.mark.parametrize(("headers", "streamed"), [
    ([("Content-Length", "60")], True),
    ([("Content-Length", "60, 60")], True),  # equal values in a list are one length
    ([("Content-Length", "60"), ("content-length", "60")], True),
    ([("Content-Length", "60"), ("Content-Length", "61")], False),  # differ: read whole, refused there
    ([("Content-Length", "+60")], False),
    ([("Content-Length", "101")], False),  # past the cap: read whole, refused there
    ([("Content-Length", "100")], True),
    ([("Transfer-Encoding", "chunked")], True),
    ([("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")], False),  # the first one is read
    ([], False),  # to the connection's end: read whole
    ([("Content-Type", "Text/Event-Stream; charset=utf-8")], True),
    ([("Content-Type", "text/event-stream"), ("Content-Length", "101")], True),  # cut at the cap
    ([("Content-Type", "text/event-stream"), ("Content-Length", "6x")], False),
    ([("Content-Type", "text/html"), ("Content-Type", "text/event-stream")], False),
])
def test_streamable_reads_the_framing_fields_as_the_body_reader_does(headers, streamed):
    from ego2web_replay.recorder.stream import streamable
    from ego2web_replay.recorder.upstream import UpstreamResponse

    assert streamable(UpstreamResponse(200, "OK", "HTTP/1.1", headers), cap=100) is streamed


def test_a_stream_the_recorder_had_not_begun_yet_begins_when_closed_and_is_archived_truncated():
    """The recorder begins a streamed body (spool, timer, reading) only once the client's head is out
    (``RecordedStream.begin``); one closed before that, as an HTTP/2 stream the client reset meanwhile,
    still ends as any closed stream does: archived as far as it came, ``WARC-Truncated: disconnect``."""
    import asyncio

    from ego2web_replay.recorder.stream import RecordedStream
    from ego2web_replay.recorder.upstream import UpstreamPool, UpstreamResponse

    archived: list[tuple[bytes, list[tuple[str, str]]]] = []

    async def archive(payload, warc_headers) -> bool:
        archived.append((payload.read(), warc_headers))
        payload.close()
        return True

    async def main() -> None:
        resp = UpstreamResponse(200, "OK", "HTTP/1.1", [("Content-Type", "text/event-stream")])
        stream = RecordedStream(UpstreamPool(), resp, archive, open_ended=True, begin=False)
        assert not hasattr(stream, "ended")  # nothing set up yet
        stream.close("stopped")
        await asyncio.wait_for(stream.ended, 10)
        assert [piece async for piece in stream] == []  # the client's side is over too

    run_coro(main(), timeout_s=30)
    assert archived == [(b"", [("WARC-Truncated", "disconnect"), (LEFT_HEADER, "stopped")])]
