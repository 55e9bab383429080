"""The recorder's WARC writes on the writer thread (recorder/writes.py), through the real fast recorder
and a loopback origin: the records are the bytes a direct write of the same exchanges gives, a slow
write holds no other exchange, a failed write fails the recording loudly, and finishing a recording
waits for the writes still queued.

The origin serves ``/bytes/<n>`` (a body with a length) and ``/chunked/<n>`` (chunked), each body
a fixed function of its path, on kept-alive connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import itertools
import logging
import random
import socketserver
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ego2web_replay.guard import GuardPolicy
from ego2web_replay.recorder.addon import ExchangeArchive
from ego2web_replay.recorder.front import RecordFront
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.recorder.spool import SpoolFile
from ego2web_replay.recorder.writes import INLINE_BYTES, WriteQueue
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.warc import ArchiveWriter
from ego2web_replay.tasks import Task
from ego2web_replay.testing.aio import run_coro


def body_of(path: str) -> bytes:
    """What the origin answers for ``path`` (``/same/...``: one 4 KiB payload for every such URL)."""
    if path.startswith("/same/"):
        return random.Random("same").randbytes(4096)
    return random.Random(path).randbytes(int(path.rsplit("/", 1)[1].split("?")[0]))


class _Origin(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(OSError):
            while line := self.rfile.readline():
                path = line.split(b" ")[1].decode()
                while self.rfile.readline() not in (b"\r\n", b""):
                    pass  # the request's header fields: not needed
                body = body_of(path)
                if path.startswith("/chunked/"):
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                     b"Transfer-Encoding: chunked\r\n\r\n")
                    for i in range(0, len(body), 65536):
                        piece = body[i:i + 65536]
                        self.wfile.write(b"%x\r\n%b\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                     b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
                self.wfile.flush()


@pytest.fixture(scope="module")
def origin():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Origin)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def ask(proxy_port: int, url: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """GET ``url`` through the proxy on a connection of its own; the answer once its head has come."""
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
    conn.request("GET", url, headers={"Host": urlsplit(url).netloc})
    return conn, conn.getresponse()


def fetch(proxy_port: int, url: str) -> bytes:
    """The body of a 200 answer to GET ``url`` through the proxy."""
    conn, resp = ask(proxy_port, url)
    try:
        assert resp.status == 200, resp.status
        return resp.read()
    finally:
        conn.close()


def _writer(path: Path) -> ArchiveWriter:
    """A WARC writer giving the same bytes for the same writes: fixed clock, counted record ids."""
    ids = itertools.count()
    return ArchiveWriter(path, compression="zst", clock=lambda: datetime(2026, 1, 2, 3, 4, 5),
                         id_factory=lambda: f"<urn:uuid:00000000-0000-0000-0000-{next(ids):012d}>",
                         dedup_min_size=256)


class _Capturing(ExchangeArchive):
    """Keeps each write as handed over (bodies read out), and the thread that made it."""

    def __init__(self, writer: Any) -> None:
        super().__init__(writer)
        self.calls: list[dict[str, Any]] = []
        self.threads: dict[str, str] = {}  # URL: the thread that wrote it

    def archive(self, **fields: Any) -> bool:
        kept = dict(fields)
        body = fields["response_body"]
        if isinstance(body, SpoolFile):
            body.seek(0)
            kept["response_body"] = body.read()
            body.seek(0)
        self.calls.append(kept)
        self.threads[fields["url"]] = threading.current_thread().name
        return super().archive(**fields)


def test_records_from_the_writer_thread_are_the_bytes_of_direct_writes(origin, ca, tmp_path):
    """Concurrent large bodies (spooled to disk, and in memory), chunked and small ones, and repeated
    payloads (revisits): the archive the recorder wrote is, byte for byte, the archive written
    directly, in the same order, from the same exchanges (as the recorder wrote them on its loop)."""
    paths = [f"/bytes/{6 << 20}?{i}" for i in range(3)] + [f"/bytes/{2 << 20}?{i}" for i in range(2)] + \
        [f"/chunked/{5 << 20}", f"/chunked/{3000}"] + [f"/bytes/{n}" for n in (0, 1, 200, 5000, 70000)] + \
        [f"/same/{i}" for i in range(4)]
    archive = _Capturing(_writer(tmp_path / "thread" / "a.warc.zst"))
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback"))
    front.start()
    try:
        with ThreadPoolExecutor(len(paths)) as pool:
            got = dict(zip(paths, pool.map(lambda p: fetch(front.port, origin + p), paths), strict=True))
    finally:
        front.stop()
    archive.drain()
    archive.writer.close()
    for path in paths:
        assert got[path] == body_of(path), path
    assert archive.errors == [] and archive.exchanges == len(paths)
    for path in paths:  # the large ones on the one writer thread (small ones may go inline)
        if len(body_of(path)) >= INLINE_BYTES:
            assert archive.threads[origin + path] == "ego2web-warc-writer", path

    direct = _writer(tmp_path / "direct" / "a.warc.zst")
    on_loop = ExchangeArchive(direct)  # what the recorder did before: archive() itself, the spool a file at its start
    for call in archive.calls:
        assert on_loop.archive(**{**call, "response_body": io.BytesIO(call["response_body"])})
    direct.close()
    assert (tmp_path / "thread" / "a.warc.zst").read_bytes() == (tmp_path / "direct" / "a.warc.zst").read_bytes()

    records = list(iter_records(tmp_path / "thread" / "a.warc.zst"))
    responses = {urlsplit(r.url).path + (f"?{urlsplit(r.url).query}" if urlsplit(r.url).query else ""): r
                 for r in records if r.rec_type in ("response", "revisit")}
    assert sorted(responses) == sorted(paths)
    assert sum(r.rec_type == "revisit" for r in records) == 3  # /same/: the first stored, three revisits
    for path in paths:
        if responses[path].rec_type == "response":
            assert responses[path].payload == body_of(path), path
    for response, request in itertools.pairwise(records[1:]):  # each response followed by its request
        if response.rec_type in ("response", "revisit"):
            assert request.rec_type == "request"
            assert request.headers.get("WARC-Concurrent-To") == response.headers.get("WARC-Record-ID")


class _Gated:
    """A WARC writer whose writes of URLs containing ``slow`` wait for ``gate`` (a disk that stalls)."""

    def __init__(self, inner: Any, fail: str | None = None) -> None:
        self.inner, self.fail = inner, fail
        self.gate, self.entered = threading.Event(), threading.Event()

    def write_exchange(self, **fields: Any) -> Any:
        if self.fail and self.fail in fields["url"]:
            raise OSError(28, "No space left on device")
        if "slow" in fields["url"]:
            self.entered.set()
            assert self.gate.wait(30)
        return self.inner.write_exchange(**fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_slow_write_holds_no_other_exchange(origin, ca, tmp_path):
    """While one record's write is stalled, the recorder answers another request (its head reaches the
    client); that body's end waits for its own record, written after the stalled one."""
    writer = _Gated(_writer(tmp_path / "a.warc.zst"))
    archive = ExchangeArchive(writer)
    front = RecordFront(archive, ca=ca, guard=GuardPolicy(mode="loopback"))
    front.start()
    try:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(fetch, front.port, f"{origin}/bytes/{3 << 20}?slow")
            assert writer.entered.wait(30)
            conn, resp = ask(front.port, f"{origin}/bytes/100")  # returns once the head has come
            assert resp.status == 200 and not writer.gate.is_set() and not slow.done()
            writer.gate.set()
            assert resp.read() == body_of("/bytes/100")
            conn.close()
            assert slow.result() == body_of(f"/bytes/{3 << 20}?slow")
    finally:
        writer.gate.set()
        front.stop()
    archive.drain()
    writer.inner.close()
    urls = [r.url for r in iter_records(writer.inner.path) if r.rec_type == "response"]
    assert urls == [f"{origin}/bytes/{3 << 20}?slow", f"{origin}/bytes/100"]  # in the order handed over


def _live(tmp_path: Path, ca: Any, origin: str) -> LiveRecording:
    live = LiveRecording(Task(id="writes", instruction="x", start_url=origin + "/bytes/10"), tmp_path / "snaps",
                         RecordOptions(guard="loopback", source="record"), ca=ca)
    live.open()
    return live


def test_a_failed_write_fails_the_recording_and_nothing_is_finalised(origin, ca, tmp_path):
    live = _live(tmp_path, ca, origin)
    assert live.recorder is not None
    live.recorder.writer = _Gated(live.recorder.writer, fail="/bytes/300")
    live.start()
    port = urlsplit(live.proxy_url).port
    assert fetch(port, origin + "/bytes/200") == body_of("/bytes/200")
    with pytest.raises(http.client.IncompleteRead):  # the body's end is never sent for a record not written
        fetch(port, origin + "/bytes/300")
    conn, resp = ask(port, origin + "/bytes/400")
    assert resp.status == 502  # the recording has stopped
    conn.close()
    live.finish()
    assert not live.ok and live.error and "No space left" in live.error
    assert live.snapshot_path is not None and not (live.snapshot_path / "manifest.json").exists()
    assert live.recorder.exchanges == 1 and any("No space left" in e for e in live.recorder.errors)


def test_finishing_a_recording_waits_for_the_writes_still_queued(origin, ca, tmp_path):
    """A record still being written when the proxy stops (its write stalls past the 2 s the proxy gives
    a body to end) is in the finalised snapshot."""
    live = _live(tmp_path, ca, origin)
    assert live.recorder is not None
    writer = live.recorder.writer = _Gated(live.recorder.writer)
    live.start()
    port = urlsplit(live.proxy_url).port
    with ThreadPoolExecutor(1) as pool:
        pool.submit(fetch, port, origin + f"/bytes/{2 << 20}?slow")  # cut when the proxy stops: not looked at
        assert writer.entered.wait(30)
        threading.Timer(3.0, writer.gate.set).start()
        live.finish()
    assert live.ok, live.error
    assert live.recorder.writes.pending_bytes == 0
    assert live.snapshot_path is not None and (live.snapshot_path / "manifest.json").exists()
    (warc,) = live.snapshot_path.glob("*.warc.zst")
    responses = [r for r in iter_records(warc) if r.rec_type == "response"]
    assert [r.url for r in responses] == [origin + f"/bytes/{2 << 20}?slow"]
    assert responses[0].payload == body_of(f"/bytes/{2 << 20}?slow")


def test_the_queue_bounds_what_it_holds_and_surfaces_errors(caplog):
    """Writes run in order on one thread; past ``limit`` pending bytes the next waits for room (one is
    always let through); a write that raises is counted, logged and raised to its awaiter."""
    queue = WriteQueue(limit=10)
    gate, order = threading.Event(), []

    def job(name: str, wait: bool = False) -> str:
        if wait:
            assert gate.wait(10)
        order.append(name)
        return name

    def boom() -> None:
        raise RuntimeError("disk on fire")

    async def main() -> None:
        big = asyncio.ensure_future(queue.run(lambda: job("big", wait=True), 100))  # over the limit, alone: let in
        await asyncio.sleep(0.05)
        assert queue.pending_bytes == 100
        small = asyncio.ensure_future(queue.run(lambda: job("small"), 1))
        await asyncio.sleep(0.05)
        assert queue.pending_bytes == 100 and not small.done()  # waits for room, not handed over
        gate.set()
        assert await big == "big" and await small == "small"
        with pytest.raises(RuntimeError, match="disk on fire"):
            await queue.run(boom)
        assert await queue.run(lambda: job("after")) == "after"
        await queue.drained()

    with caplog.at_level(logging.ERROR):
        run_coro(main())
    assert order == ["big", "small", "after"] and queue.errors == 1 and queue.pending_bytes == 0
    assert "disk on fire" in caplog.text
    queue.drain()  # the thread stops; a later write starts another
    assert run_coro(queue.run(lambda: job("again"))) == "again"
    queue.drain()


def test_a_small_write_goes_inline_only_when_nothing_is_queued():
    queue, gate = WriteQueue(), threading.Event()

    def where() -> str:
        return threading.current_thread().name

    async def main() -> tuple[str, str, str, str]:
        alone = await queue.run(where, inline=True)
        held = asyncio.ensure_future(queue.run(lambda: gate.wait(10) and where()))
        await asyncio.sleep(0.05)
        behind = asyncio.ensure_future(queue.run(where, inline=True))  # queued: after the one before it
        await asyncio.sleep(0.05)
        assert not behind.done()
        gate.set()
        return where(), alone, await held, await behind

    loop_thread, alone, held, behind = run_coro(main())
    assert alone == loop_thread
    assert held == behind == "ego2web-warc-writer"
    queue.drain()


def test_an_error_in_the_writer_thread_stops_the_recording(ca, tmp_path):
    """A write that raises outside the WARC writer (here the redaction) stops the recording too."""

    class _Broken:
        def header_list(self, headers: Any) -> Any:
            raise ValueError("bad redaction rule")

    writer = _writer(tmp_path / "a.warc.zst")
    archive = ExchangeArchive(writer, redactor=_Broken())  # type: ignore[arg-type]
    ok = run_coro(archive.archive_async(
        url="http://127.0.0.1/x", method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
        response_headers=[], response_body=b"x", http_version="HTTP/1.1", ip=None, started=0.0))
    archive.drain()
    writer.close()
    assert not ok and archive.failed and "bad redaction rule" in archive.failed
    assert archive.writes.errors == 1 and archive.exchanges == 0
