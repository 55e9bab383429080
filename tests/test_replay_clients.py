"""Real HTTP clients through the replay proxy, and through the recording proxy: curl, wget,
python-requests, httpx (HTTP/1.1 and HTTP/2) and aiohttp, as program agents use them.

Each asks, through the proxy as it is configured to use one (absolute form for ``http://``, a CONNECT
tunnel for ``https://``, trusting the replay's CA), for a page, a JSON answer recorded gzip-coded
(``Vary: Accept-Encoding``), a redirect to follow and a chunked body; each must end with the recorded
content in the form it asked for (a client that takes no gzip gets it decoded), with nothing missed.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from datetime import datetime

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.tasks import Task
from ego2web_replay.testing.aio import run_coro
from ego2web_replay.testing.servers import BIG, PIECES, ServerSite, installed
from ego2web_replay.testing.servers import PAGE as SERVED_PAGE
from ego2web_replay.testing.tls import make_test_ca

PAGE_URL, JSON_URL = "http://shop.example/", "https://shop.example/api/items.json"
OLD_URL, NEW_URL, FEED_URL = "https://shop.example/old", "https://shop.example/new", "http://shop.example/feed"
PAGE = b"<!doctype html><title>shop</title><p>four snacks, each with its calories</p>"
ITEMS = b'{"items": [' + b", ".join(b'{"snack": %d, "kcal": %d}' % (i, 90 + i) for i in range(80)) + b"]}"
NEW = b"<!doctype html><p>the page it moved to</p>"
FEED = b"first line\nsecond line\n" * 50
WANT = {PAGE_URL: PAGE, JSON_URL: ITEMS, OLD_URL: NEW, FEED_URL: FEED}


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    sw = SnapshotWriter(tmp_path_factory.mktemp("clients"), "clients")
    html = ("Content-Type", "text/html; charset=utf-8")
    answers = [
        (PAGE_URL, 200, [html], PAGE),
        (JSON_URL, 200, [("Content-Type", "application/json"), ("Content-Encoding", "gzip"),
                         ("Vary", "Accept-Encoding")], gzip.compress(ITEMS, mtime=0)),
        (OLD_URL, 301, [("Location", "/new"), ("Content-Length", "0")], b""),
        (NEW_URL, 200, [html], NEW),
        (FEED_URL, 200, [("Content-Type", "text/plain"), ("Transfer-Encoding", "chunked")], FEED),
    ]
    for i, (url, status, head, body) in enumerate(answers):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Accept-Encoding", "gzip, br")],
                                 request_body=b"", status=status, reason="", response_headers=head,
                                 response_body=body, date=datetime(2026, 12, 1, 10, 0, i))
    sw.finalize()
    return sw.path


def _env() -> dict[str, str]:
    """The environment without proxy settings of its own (each client is given the proxy explicitly)."""
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy",
                                                                   "all_proxy")}


def _curl(proxy: str, ca: str, url: str) -> bytes:
    return subprocess.run(["curl", "-sS", "-L", "--fail", "--noproxy", "", "-x", proxy, "--cacert", ca, url],
                          capture_output=True, timeout=30, check=True, env=_env()).stdout


def _wget(proxy: str, ca: str, url: str) -> bytes:
    return subprocess.run(["wget", "-q", "-O", "-", "-e", "use_proxy=yes", "-e", f"http_proxy={proxy}",
                           "-e", f"https_proxy={proxy}", f"--ca-certificate={ca}", url],
                          capture_output=True, timeout=30, check=True, env=_env()).stdout


def _requests(proxy: str, ca: str, url: str) -> bytes:
    import requests

    with requests.Session() as s:
        s.trust_env = False
        r = s.get(url, proxies={"http": proxy, "https": proxy}, verify=ca, timeout=20)
        r.raise_for_status()
        return r.content


def _httpx(http2: bool):
    def get(proxy: str, ca: str, url: str) -> bytes:
        import ssl

        import httpx

        with httpx.Client(proxy=proxy, verify=ssl.create_default_context(cafile=ca), http2=http2,
                          follow_redirects=True, trust_env=False, timeout=20) as c:
            r = c.get(url)
            r.raise_for_status()
            if http2 and url.startswith("https://"):
                assert r.http_version == "HTTP/2", url
            return r.content
    return get


def _aiohttp(proxy: str, ca: str, url: str) -> bytes:
    import ssl

    import aiohttp

    async def get() -> bytes:
        async with aiohttp.ClientSession(trust_env=False) as s, \
                s.get(url, proxy=proxy, ssl=ssl.create_default_context(cafile=ca)) as r:
            r.raise_for_status()
            return await r.read()
    return run_coro(get(), timeout_s=60)


CLIENTS = {"curl": _curl, "wget": _wget, "requests": _requests, "httpx": _httpx(False), "httpx-h2": _httpx(True),
           "aiohttp": _aiohttp}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_real_client_gets_the_recorded_content_through_the_replay_proxy(shop, ca, client):
    if client in ("curl", "wget") and shutil.which(client) is None:
        pytest.skip(f"{client} is not installed (scripts/setup.sh installs it)")
    with Replay([shop], ca=ca, freeze=False) as replay:
        got = {url: CLIENTS[client](replay.proxy_url, str(replay.ca_file), url) for url in WANT}
    assert got == WANT
    stats = replay.stats()
    assert stats.miss == 0 and stats.refused == {}, stats.missed_urls
    assert sorted({e.url for e in stats.log}) == sorted([*WANT, NEW_URL])


@pytest.fixture(scope="module")
def live_origin(tmp_path_factory):
    """A real server (uvicorn, HTTPS with a test CA's certificate) as the origin to record from."""
    tls = make_test_ca(tmp_path_factory.mktemp("clients-ca"))
    if not installed("uvicorn-h11"):
        pytest.skip("uvicorn is not installed (the dev extra installs it)")
    with ServerSite("uvicorn-h11", tls=tls) as server:
        yield server, tls


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_real_client_is_recorded_through_the_recorder(live_origin, ca, tmp_path, client):
    """The same clients through the recording proxy (CONNECT to an HTTPS origin, the project CA trusted):
    each gets what the server sends, a redirect followed, and every exchange is archived, no error."""
    if client in ("curl", "wget") and shutil.which(client) is None:
        pytest.skip(f"{client} is not installed (scripts/setup.sh installs it)")
    server, tls = live_origin
    want = {server.url + "/page": SERVED_PAGE, server.url + "/stream": b"".join(PIECES),
            server.url + "/moved": SERVED_PAGE, server.url + "/big": BIG}
    task = Task(id=f"client-{client}", instruction="x", start_url=server.url + "/page")
    with LiveRecording(task, tmp_path, RecordOptions(guard="loopback", upstream_ca=tls.ca_cert), ca=ca) as live:
        got = {url: CLIENTS[client](live.proxy_url, str(ca.cert_path), url) for url in want}
    assert got == want
    assert live.ok and live.recorder.errors == [], (live.error, live.recorder.errors)
    archive = next(live.snapshot_path.glob("archive.warc*"))
    urls = [r.url for r in iter_records(archive) if r.rec_type in ("response", "revisit")]  # (a page again: revisit)
    assert sorted(urls) == sorted([*want, server.url + "/page"])  # /moved, then the /page it names


@pytest.mark.parametrize("engine", ["fast", "mitmproxy"])
def test_an_http10_client_never_gets_a_chunked_body(shop, ca, engine):
    """A body recorded chunked goes to an HTTP/1.0 client (ApacheBench, old tools) without the chunked
    coding it cannot read (RFC 9112 6.1): with its length, or ended by closing the connection."""
    import socket

    with Replay([shop], ca=ca, freeze=False, engine=engine) as replay:
        host, port = replay.proxy_url.split("//")[1].rstrip("/").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"GET {FEED_URL} HTTP/1.0\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    fields = {line.split(b":", 1)[0].strip().lower() for line in head.split(b"\r\n")[1:]}
    assert b"transfer-encoding" not in fields and body == FEED, head


@pytest.mark.parametrize("engine", ["fast", "mitmproxy"])
def test_curl_http2_on_plain_http_is_recorded_not_tunnelled(ca, tmp_path, engine):
    """``curl --http2`` on an ``http://`` URL asks to upgrade to h2c, and Hypercorn says yes: passed on,
    the exchange would become a tunnel of HTTP/2 frames that nothing archives (the client served, the
    snapshot empty, no error). The upgrade stays on the client's hop; the origin answers in HTTP/1.1,
    and the exchange is archived and replayed."""
    if shutil.which("curl") is None or not installed("hypercorn"):
        pytest.skip("needs curl and hypercorn (scripts/setup.sh and the dev extra)")
    with ServerSite("hypercorn") as server:
        direct = subprocess.run(["curl", "-sS", "-i", "--http2", "--noproxy", "*", server.url + "/page"],
                                capture_output=True, timeout=30, check=True).stdout
        assert direct.startswith(b"HTTP/1.1 101")  # the server does upgrade when asked
        task = Task(id=f"h2c-{engine}", instruction="x", start_url=server.url + "/page")
        with LiveRecording(task, tmp_path, RecordOptions(guard="loopback", engine=engine), ca=ca) as live:
            got = subprocess.run(["curl", "-sS", "--http2", "--noproxy", "", "-x", live.proxy_url,
                                  server.url + "/page"], capture_output=True, timeout=30, check=True).stdout
    assert got == SERVED_PAGE and live.ok and live.recorder.errors == []
    archive = next(live.snapshot_path.glob("archive.warc*"))
    assert [r.url for r in iter_records(archive) if r.rec_type == "response"] == [server.url + "/page"]
    with Replay([live.snapshot_path], ca=ca, freeze=False) as replay:
        assert _curl(replay.proxy_url, str(ca.cert_path), server.url + "/page") == SERVED_PAGE
