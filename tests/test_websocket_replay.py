"""Websockets recorded and replayed: a real ``websockets`` server recorded through either recording engine, its
conversation archived (text, binary, permessage-deflate undone), the server stopped, then the replay
playing the server's messages to a real ``websockets`` client: exact and canonical matches, a miss
counted, an unrecorded websocket refused and counted, the episode's validity never ``complete``."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.asyncio.server import serve
from websockets.sync.client import connect

from ego2web_replay.models import ReplayLogEntry
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.export import export_snapshot
from ego2web_replay.snapshots.extend import extend_snapshot
from ego2web_replay.snapshots.location import open_snapshot
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.snapshots.verify import integrity_problems, verify_snapshot
from ego2web_replay.snapshots.wsrecords import CONTENT_TYPE, decode_messages
from ego2web_replay.tasks import Task
from ego2web_replay.testing.tls import make_test_ca
from ego2web_replay.validity import classify

BLOB = bytes(range(256)) * 40


async def _handler(ws) -> None:
    await ws.send("welcome")  # before the client says anything
    async for message in ws:
        if isinstance(message, bytes):
            await ws.send(message[::-1])
            continue
        try:
            item = json.loads(message)
        except ValueError:
            await ws.send(f"echo:{message}")
            continue
        # the answer does not depend on the volatile fields, as the rules assume of them
        await ws.send(json.dumps({"answer": item["q"].upper()}))
        await ws.send(json.dumps({"done": item["q"]}))


class _Server:
    """A real ``websockets`` server on 127.0.0.1 in a thread of its own (TLS when given ``ssl``)."""

    def __init__(self, ssl: Any = None, handler: Any = _handler) -> None:
        self.ssl = ssl
        self.handler = handler
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def _run(self) -> None:
        async def main() -> None:
            async with serve(self.handler, "127.0.0.1", 0, ssl=self.ssl) as server:
                self.port = server.sockets[0].getsockname()[1]
                self.stop = self.loop.create_future()
                self.ready.set()
                await self.stop
        self.loop.run_until_complete(main())

    def __enter__(self) -> _Server:
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set_result, None)
        self.thread.join(10)


def _talk(url: str, proxy: str, messages: list[str | bytes], ssl: Any = None) -> list[list[str | bytes]]:
    """Send each message, collecting what the server sends back until it goes quiet (0.5 s)."""
    answers = []
    with connect(url, proxy=proxy, open_timeout=10, ssl=ssl) as ws:
        answers.append(_drain(ws))
        for m in messages:
            ws.send(m)
            answers.append(_drain(ws))
    return answers


def _drain(ws) -> list[str | bytes]:
    got: list[str | bytes] = []
    while True:
        try:
            got.append(ws.recv(timeout=0.5))
        except TimeoutError:
            return got


@pytest.fixture(scope="module", params=["fast", "mitmproxy"])
def recorded(request, ca, tmp_path_factory):
    """The conversation recorded by either recording engine (the server stopped after)."""
    folder = tmp_path_factory.mktemp("ws")
    opts = RecordOptions(guard="loopback", engine=request.param)
    with _Server() as server:
        url = f"ws://127.0.0.1:{server.port}/live?room=7"
        task = Task(id="ws", instruction="x", start_url=url.replace("ws://", "http://"))
        with LiveRecording(task, folder / "snapshots", opts, ca=ca) as live:
            live_answers = _talk(url, live.proxy_url, ["plain", '{"q": "abc", "_": 1, "ts": 1767225600, "token": "s3cret"}', BLOB])
            deadline = time.monotonic() + 5
            while getattr(live.guard, "_pipes", None) and time.monotonic() < deadline:  # closed: archived
                time.sleep(0.05)
        assert live.ok, live.error
    return live.snapshot_path, url, live_answers


def test_the_conversation_is_archived_in_a_layout_warcio_checks(recorded, tmp_path):
    snap_path, url, live = recorded
    assert live == [["welcome"], ["echo:plain"], ['{"answer": "ABC"}', '{"done": "abc"}'], [BLOB[::-1]]]
    snap = open_snapshot(snap_path)
    assert integrity_problems(snap) == []
    report = verify_snapshot(snap_path)
    assert report.ok and report.warnings == []
    [talk] = [r for r in snap.records() if r.rec_type == "metadata" and r.content_type == CONTENT_TYPE]
    [handshake] = [e for e in snap.entries() if e.status == 101]
    assert talk.url == url.replace("ws://", "http://") == handshake.url
    messages = decode_messages(talk.payload)
    assert [(m.side, m.kind) for m in messages][:4] == [
        ("server", "text"), ("client", "text"), ("server", "text"), ("client", "text")]
    assert ("client", "binary", BLOB) in [(m.side, m.kind, m.data) for m in messages]  # inflated as sent
    [asked] = [json.loads(m.data) for m in messages if m.side == "client" and m.kind == "text" and b"abc" in m.data]
    assert b"s3cret" not in talk.payload and asked["q"] == "abc" and asked["token"] != "s3cret"  # as in bodies
    out = tmp_path / "ws.warc.gz"
    export_snapshot(snap_path, out, "warc.gz")  # every record copied, a gzip member each: warcio reads it
    done = subprocess.run([Path(sys.executable).parent / "warcio", "check", "-v", str(out)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "metadata" in done.stdout
    wacz = tmp_path / "ws.wacz"
    export_snapshot(snap_path, wacz, "wacz")
    done = subprocess.run([Path(sys.executable).parent / "wacz", "validate", "-f", str(wacz)], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "is valid" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("index", ["memory", "mapped", "extended", "workers"])
def test_replay_plays_the_servers_messages_to_the_clients(recorded, ca, index, tmp_path):
    snap_path, url, live = recorded
    processes = 2 if index == "workers" else 1  # `serve --processes 2`: the stats come from the workers
    if index == "extended":  # a snapshot grown by `snapshot extend` keeps the conversation with its handshake
        snap_path = extend_snapshot(snap_path, [], root=tmp_path).path
    index = index if index in ("memory", "mapped") else "memory"
    with Replay([snap_path], ca=ca, guard_mode="loopback", index=index, processes=processes) as replay:
        again = _talk(url, replay.proxy_url, ["plain", '{"ts": 1767312000, "_": 99, "q": "abc", "token": "other"}', BLOB])
        stats = replay.stats()
    assert again == live  # the JSON message matched with its volatile fields dropped, its credential redacted
    outcomes = [(e.method, e.outcome) for e in stats.log]
    assert outcomes == [("GET", "exact"), ("WS", "exact"), ("WS", "canonical"), ("WS", "exact")]
    assert stats.validity == "complete" and stats.miss == 0 and stats.websocket == 0


def test_an_unrecorded_message_is_a_miss_and_the_episode_off_snapshot(recorded, ca):
    snap_path, url, _ = recorded
    with Replay([snap_path], ca=ca, guard_mode="loopback") as replay:
        answers = _talk(url, replay.proxy_url, ["never said", "plain", '{"q": "xyz"}'])
        stats = replay.stats()
    assert answers == [["welcome"], [], ["echo:plain"], []]  # nothing sent for what was not recorded
    assert [e.outcome for e in stats.log if e.method == "WS"] == ["miss", "exact", "miss"]
    assert stats.miss == 2 and stats.validity == "off-snapshot"
    assert stats.missed_urls == [f"WS {url.replace('ws://', 'http://')}"] * 2


async def _ticker(ws) -> None:
    ticks = 0
    async for message in ws:
        if message == "tick":  # an answer that changes each time it is asked
            ticks += 1
            await ws.send(f"tick {ticks}")
        else:
            await ws.send(f"echo:{message}")


def test_a_message_sent_more_often_than_recorded_is_answered_again_but_never_silently(ca, tmp_path):
    with _Server(handler=_ticker) as server:
        url = f"ws://127.0.0.1:{server.port}/ticks"
        task = Task(id="ticks", instruction="x", start_url=url.replace("ws://", "http://"))
        with LiveRecording(task, tmp_path / "snapshots", RecordOptions(guard="loopback"), ca=ca) as live:
            assert _talk(url, live.proxy_url, ["tick", "tick", "ping", "ping"]) == \
                [[], ["tick 1"], ["tick 2"], ["echo:ping"], ["echo:ping"]]
            deadline = time.monotonic() + 5
            while getattr(live.guard, "_pipes", None) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert live.ok, live.error
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        answers = _talk(url, replay.proxy_url, ["tick", "tick", "tick", "ping", "ping", "ping"])
        stats = replay.stats()
    assert answers == [[], ["tick 1"], ["tick 2"], ["tick 2"], ["echo:ping"], ["echo:ping"], ["echo:ping"]]
    notes = [e.volatile for e in stats.log if e.method == "WS"]
    # the third tick's live answer is not known (the recorded ones changed); a third ping's is
    assert notes == [None, None, "again: past 2 recorded, answers differ", None, None, None]
    assert stats.again == 1 and stats.miss == 0 and stats.validity == "degraded"


async def _pusher(ws) -> None:
    for n in range(1, 5):  # a ticker: pushes on its own clock, the client says nothing
        await ws.send(f"price {n}")
        await asyncio.sleep(0.4)
    await ws.wait_closed()


def test_the_servers_pushes_keep_their_recorded_pace_and_a_second_connection_is_counted(ca, tmp_path):
    with _Server(handler=_pusher) as server:
        url = f"ws://127.0.0.1:{server.port}/prices"
        task = Task(id="prices", instruction="x", start_url=url.replace("ws://", "http://"))
        with LiveRecording(task, tmp_path / "snapshots", RecordOptions(guard="loopback"), ca=ca) as live:
            with connect(url, proxy=live.proxy_url, open_timeout=10) as ws:
                assert [ws.recv(timeout=5) for _ in range(4)] == [f"price {n}" for n in range(1, 5)]
            deadline = time.monotonic() + 5
            while getattr(live.guard, "_pipes", None) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert live.ok, live.error
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        with connect(url, proxy=replay.proxy_url, open_timeout=10) as ws:
            got = []
            for _ in range(4):
                got.append((ws.recv(timeout=5), time.monotonic()))
        first = replay.stats()
        # the page's client reconnects (a heartbeat it missed, a reload of its script): the one recorded
        # conversation is played again, which is not what the live server says to a new connection
        with connect(url, proxy=replay.proxy_url, open_timeout=10) as ws:
            assert ws.recv(timeout=5) == "price 1"
        second = replay.stats()
    assert [m for m, _ in got] == [f"price {n}" for n in range(1, 5)]
    gaps = [b - a for (_, a), (_, b) in zip(got, got[1:], strict=False)]
    assert all(gap > 0.25 for gap in gaps), gaps  # (0.4 s apart live; at once before pacing)
    assert first.validity == "complete" and first.again == 0
    assert second.again == 1 and second.validity == "degraded"
    assert second.log[-1].volatile == "again: conversation played again"


def test_a_fast_ticker_keeps_its_recorded_pace_as_a_whole():
    """Pushes a millisecond or two apart: each is due at the play's start plus its recorded time, so neither the
    tiny gaps (sent together) nor the timers' own delays change how long the whole takes."""
    from ego2web_replay.replay.websocket import ReplayTunnel, Turns
    from ego2web_replay.snapshots.wsrecords import WsMessage

    async def play(step: float) -> tuple[float, list[bytes]]:
        messages = [WsMessage(step * (i + 1), "server", "text", b"p%d" % i) for i in range(400)]
        sent: list[tuple[float, bytes]] = []
        tunnel = ReplayTunnel(Turns(messages, lambda m: None), lambda *a: None)
        t0 = time.monotonic()
        tunnel.start(lambda data: sent.append((time.monotonic(), data)), lambda: None)
        while len(sent) < 400 and time.monotonic() - t0 < 10:
            await asyncio.sleep(0.01)
        return sent[-1][0] - t0, [data for _, data in sent]

    for step in (0.0015, 0.0025):  # 0.6 s and 1 s recorded
        done: list[tuple[float, list[bytes]]] = []
        # (a loop of its own, in a thread: the session's Playwright may hold this thread's)
        runner = threading.Thread(target=lambda d=done, s=step: d.append(asyncio.run(play(s))))
        runner.start()
        runner.join(30)
        took, frames = done[0]
        assert len(frames) == 400 and frames[0].endswith(b"p0") and frames[-1].endswith(b"p399")
        assert 0.8 * 400 * step <= took <= 400 * step + 0.5, (step, took)


def test_an_unrecorded_websocket_is_refused_and_never_complete(recorded, ca):
    snap_path, url, _ = recorded
    with Replay([snap_path], ca=ca, guard_mode="loopback") as replay:
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            connect(url.replace("/live", "/other"), proxy=replay.proxy_url, open_timeout=10)
        stats = replay.stats()
    assert refused.value.response.status_code == 403
    assert stats.websocket == 1 and stats.validity == "off-snapshot"
    # a refused analytics websocket takes nothing the page renders: degraded, not complete
    beacon = ReplayLogEntry(method="GET", url="https://x.example/telemetry", outcome="websocket", status=403,
                            kind="subresource")
    assert classify([beacon]) == "degraded"
    page = ReplayLogEntry(method="GET", url="https://x.example/_stcore/stream", outcome="websocket", status=403,
                          kind="content")
    assert classify([page]) == "off-snapshot"


def test_a_handshake_without_its_conversation_is_a_verify_warning_and_refused(ca, tmp_path):
    """A WARC holding a 101 but no conversation (written by another tool, say): verify warns, replay refuses."""
    sw = SnapshotWriter(tmp_path, "bare")
    sw.writer.write_exchange(url="http://ws.example/feed", method="GET", status=101, reason="Switching Protocols",
                             request_headers=[("Upgrade", "websocket"), ("Connection", "Upgrade")], request_body=b"",
                             response_headers=[("Upgrade", "websocket"), ("Connection", "Upgrade")],
                             response_body=b"")
    sw.writer.write_exchange(url="http://ws.example/", method="GET", status=200, reason="OK", request_headers=[],
                             request_body=b"", response_headers=[("Content-Type", "text/html")], response_body=b"hi")
    sw.finalize()
    report = verify_snapshot(sw.path)
    assert report.ok and len(report.warnings) == 1 and "http://ws.example/feed" in report.warnings[0]
    with Replay([sw.path], ca=ca) as replay:
        for url in ("ws://ws.example/feed", "ws://ws.example/"):  # the second's capture is a page, not a 101
            with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
                connect(url, proxy=replay.proxy_url, open_timeout=10)
            assert refused.value.response.status_code == 403  # never the page's answer
        stats = replay.stats()
    assert stats.websocket == 2 and stats.validity == "off-snapshot"


def test_a_wss_websocket_is_recorded_and_replayed_through_tls(ca, tmp_path):
    """wss://: TLS to the origin (its own CA) when recording, TLS from the project CA when replaying."""
    site_ca = make_test_ca(tmp_path / "tls")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(site_ca.server_cert, site_ca.server_key)
    client_tls = ssl.create_default_context(cafile=str(ca.cert_path))  # the proxy's leaf certificates
    with _Server(ssl=server_tls) as server:
        url = f"wss://127.0.0.1:{server.port}/secure"
        task = Task(id="wss", instruction="x", start_url=url.replace("wss://", "https://"))
        opts = RecordOptions(guard="loopback", upstream_ca=site_ca.ca_cert)
        with LiveRecording(task, tmp_path / "snapshots", opts, ca=ca) as live:
            live_answers = _talk(url, live.proxy_url, ["over tls", b"\x00\x01"], ssl=client_tls)
            deadline = time.monotonic() + 5
            while getattr(live.guard, "_pipes", None) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert live.ok, live.error
    assert live_answers == [["welcome"], ["echo:over tls"], [b"\x01\x00"]]
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        again = _talk(url, replay.proxy_url, ["over tls", b"\x00\x01"], ssl=client_tls)
        stats = replay.stats()
    assert again == live_answers and stats.validity == "complete"
    assert stats.log[0].url == url.replace("wss://", "https://") and stats.log[0].status == 101


def test_a_conversation_cut_short_is_replayed_as_far_as_kept_and_counted(ca, tmp_path):
    """A conversation the recorder stopped keeping at its bound (``WARC-Truncated: length``): the page got
    more live than the archive holds, so its replay is counted ``truncated``, listed in the manifest, and
    the episode is never ``complete``."""
    from datetime import UTC, datetime

    from ego2web_replay.snapshots.wsrecords import WsMessage, write_conversation

    sw = SnapshotWriter(tmp_path, "cut")
    sw.writer.write_exchange(url="http://ws.example/", method="GET", status=200, reason="OK", request_headers=[],
                             request_body=b"", response_headers=[("Content-Type", "text/html")], response_body=b"hi")
    kept = [WsMessage(0.0, "client", "text", b"go")] + [WsMessage(0.1, "server", "text", b"part%d" % i)
                                                          for i in range(3)]
    write_conversation(sw.writer, url="http://ws.example/feed", request_headers=[("Upgrade", "websocket")], status=101,
                       reason="Switching Protocols", response_headers=[("Upgrade", "websocket")], messages=kept,
                       truncated=True, ip=None, date=datetime.now(UTC))
    manifest = sw.finalize()
    assert manifest.truncated == ["http://ws.example/feed (websocket conversation, length)"]
    with Replay([sw.path], ca=ca) as replay:
        answers = _talk("ws://ws.example/feed", replay.proxy_url, ["go"])
        stats = replay.stats()
    assert answers == [[], ["part0", "part1", "part2"]]  # what was kept, and nothing made up after it
    assert stats.truncated == 1 and stats.truncated_urls == ["GET http://ws.example/feed (websocket conversation length)"]
    assert stats.validity != "complete"
