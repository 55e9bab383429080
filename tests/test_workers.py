"""``serve --processes N``: N workers answer on one port (SO_REUSEPORT) and their stats add up."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from datetime import datetime
from urllib.parse import urlsplit

import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import ReplayError
from ego2web_replay.models import ReplayStats
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter

pytestmark = pytest.mark.slow  # starts worker interpreters


@pytest.fixture()
def snap(tmp_path):
    sw = SnapshotWriter(tmp_path / "snapshots", "w")
    for i in range(5):
        sw.writer.write_exchange(url=f"http://shop.example/{i}", method="GET", request_headers=[], request_body=b"",
                                 status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                                 response_body=f"page {i}".encode(), date=datetime(2026, 1, 2, 3, 4, 5))
    sw.finalize()
    return sw.path


def _get(proxy_url: str, url: str) -> tuple[int, bytes]:
    proxy = urlsplit(proxy_url)
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)  # a new connection each time
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_two_processes_both_serve_and_their_stats_add_up(snap, ca):
    with Replay([snap], ca=ca, processes=2, engine="fast") as replay:
        answers = [_get(replay.proxy_url, f"http://shop.example/{n % 5}") for n in range(60)]
        answers.append(_get(replay.proxy_url, "http://shop.example/missing"))
        parts = replay.proxy.worker_stats()
        running = replay.stats()
    assert answers[:60] == [(200, f"page {n % 5}".encode()) for n in range(60)]
    assert answers[60][0] == 404
    assert len(parts) == 2 and all(p.total > 0 for p in parts), [p.total for p in parts]  # both served
    assert sum(p.total for p in parts) == 61 == running.total
    assert running.exact == 60 and running.miss == 1 and running.missed_urls == ["GET http://shop.example/missing"]
    final = replay.stats()  # kept after the workers stopped
    assert final.total == 61 and len(final.log) == 61


def test_processes_need_the_fast_engine(snap, ca):
    with pytest.raises(ReplayError, match="fast engine"):
        Replay([snap], ca=ca, processes=2, engine="mitmproxy")
    with pytest.raises(ReplayError, match="fast engine"):
        Replay([snap], ca=ca, processes=2, miss="live")


def test_serve_processes_prints_and_counts(snap, tmp_path, capsys, ca):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served: list[int] = []

    def client() -> None:  # while `serve` runs in the main thread (it owns the signal handlers)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(served) < 10:
            try:
                served.append(_get(f"http://127.0.0.1:{port}", "http://shop.example/1")[0])
            except OSError:
                time.sleep(0.2)

    thread = threading.Thread(target=client)
    thread.start()
    stats = tmp_path / "stats.json"
    code = main(["serve", str(snap), "--port", str(port), "--processes", "2", "--duration", "3",
                 "--stats", str(stats)])
    thread.join(30)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert served == [200] * 10 and "engine         fast, 2 processes" in out
    assert "replay stats: 10 requests: exact 10," in out
    assert ReplayStats.model_validate_json(stats.read_text()).exact == 10


def test_each_worker_holds_the_wire_limits_it_was_given(snap, ca):
    from ego2web_replay.wire.budget import WireLimits

    with Replay([snap], ca=ca, processes=2, engine="fast", wire=WireLimits(head_timeout_s=0.3)) as replay:
        port = urlsplit(replay.proxy_url).port
        for _ in range(4):  # whichever worker takes it, a connection that says nothing is timed out
            with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                out = b""
                while chunk := s.recv(65536):
                    out += chunk
            assert out.startswith(b"HTTP/1.1 408 ") and b"within 0.3 s" in out
        assert replay.stats().refused == {"timeout-head": 4}  # each worker's own counts, added up
    assert replay.stats().refused == {"timeout-head": 4}  # and kept when they stop
