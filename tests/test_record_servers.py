"""Real HTTP servers from PyPI as origins: recorded through both engines, replayed with the server gone.

The recorder reads each origin's response head strictly (``recorder.upstream.parse_response_head``,
and the mitmproxy engine the same grammar through ``read_back_head``); a rule too strict for what
real servers send would turn their pages into 502s. Each server of ``testing.servers`` (WSGI on
gunicorn, waitress, cheroot, Werkzeug, Twisted; ASGI on uvicorn with h11 and with httptools,
Hypercorn, Granian; Tornado, aiohttp), over HTTP and (all but waitress) HTTPS with a test CA's
certificate, answers the same requests, first directly, then through each
engine on one kept client connection (a new one where the server closed it): every answer must reach
the client as the server gave it, with no error noted and every exchange archived; then the fast
engine's snapshot is replayed with the server stopped: each answer is the recorded one, and a second
client asking the same with nothing cached gets whole bodies (never the 304 recorded for a revalidation).
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.reader import iter_records
from ego2web_replay.tasks import Task
from ego2web_replay.testing.servers import (
    BIG,
    ETAG,
    PAGE,
    PIECES,
    SERVERS,
    ServerSite,
    client_context,
    installed,
    serves_tls,
)
from ego2web_replay.testing.tls import TestCA as OriginCA
from ego2web_replay.testing.tls import make_test_ca

ASKS: list[tuple[str, str, dict[str, str], bytes | None]] = [
    ("GET", "/page", {}, None),
    ("GET", "/page", {"If-None-Match": ETAG}, None),
    ("HEAD", "/page", {}, None),
    ("GET", "/stream", {}, None),
    ("GET", "/empty", {}, None),
    ("GET", "/moved", {}, None),
    ("POST", "/echo", {"Content-Type": "text/plain"}, b"a posted body"),
    ("GET", "/big", {}, None),
]
EXPECTED = [(200, PAGE), (304, b""), (200, b""), (200, b"".join(PIECES)), (204, b""), (302, b""),
            (200, b"a posted body"), (200, BIG)]
_HOP = {"connection", "keep-alive", "date", "transfer-encoding", "proxy-connection"}

Answer = tuple[int, list[tuple[str, str]], bytes]


def _connector(proxy: str | None, origin: str, cafile: Path | None) -> Callable[[], http.client.HTTPConnection]:
    """New connections to ``origin`` (``http://`` or ``https://``), through ``proxy`` if given (absolute
    form for http, a CONNECT tunnel for https), trusting ``cafile``."""
    parts = urlsplit(origin)
    ctx = client_context(cafile) if cafile else None
    host, port = urlsplit(proxy).hostname if proxy else parts.hostname, urlsplit(proxy).port if proxy else parts.port

    def connect() -> http.client.HTTPConnection:
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(host or "", port, timeout=20, context=ctx)
            if proxy:
                conn.set_tunnel(parts.hostname or "", parts.port)
            return conn
        return http.client.HTTPConnection(host or "", port, timeout=20)
    return connect


def _ask(connect: Callable[[], http.client.HTTPConnection], base: str, asks=ASKS) -> list[Answer]:
    """Each request in turn on one connection (a fresh one after the server closed it): status,
    headers less those of the hop (and Date), body. ``base``: prefixed to each path (absolute form)."""
    conn = connect()
    out: list[Answer] = []
    try:
        for method, path, headers, body in asks:
            conn.request(method, base + path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out.append((resp.status, [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP], data))
            if resp.will_close:
                conn.close()
                conn = connect()
    finally:
        conn.close()
    return out


def _framing_free(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The fields a proxy may frame its own way left out: the recorder gives a chunked body on, a
    body that ran to the connection's end gets a length."""
    return [(k, v) for k, v in headers if k.lower() != "content-length"]


@pytest.fixture(scope="module")
def origin_tls(tmp_path_factory) -> OriginCA:
    return make_test_ca(tmp_path_factory.mktemp("servers-ca"))


@pytest.mark.parametrize(("name", "scheme"), [(n, s) for n in SERVERS for s in ("http", "https")
                                              if s == "http" or serves_tls(n)])  # waitress has no TLS
def test_a_real_server_is_recorded_by_both_engines_as_it_answers_and_replayed_without_it(name, scheme, ca, origin_tls,
                                                                                       tmp_path):
    if not installed(name):
        pytest.skip(f"{name} is not installed (the dev extra installs it)")
    tls = origin_tls if scheme == "https" else None
    recorded: dict[str, list[Answer]] = {}
    lives = {}
    with ServerSite(name, tls=tls) as server:
        base = server.url
        https = scheme == "https"
        direct = _ask(_connector(None, base, tls.ca_cert if tls else None), "")
        assert [(s, b) for s, _, b in direct] == EXPECTED, name  # the app, as this server serves it
        for engine in ("fast", "mitmproxy"):
            task = Task(id=f"{name}-{engine}", instruction="x", start_url=base + "/page")
            opts = RecordOptions(guard="loopback", engine=engine, upstream_ca=tls.ca_cert if tls else None)  # type: ignore[arg-type]
            with LiveRecording(task, tmp_path / engine, opts, ca=ca) as live:
                recorded[engine] = _ask(_connector(live.proxy_url, base, ca.cert_path), "" if https else base)
            assert live.ok, live.error
            assert live.recorder.errors == [], (engine, live.recorder.errors)
            lives[engine] = live
    for engine, got in recorded.items():
        assert [(s, b) for s, _, b in got] == EXPECTED, engine
        for (_, want, _), (_, have, _) in zip(direct, got, strict=True):
            assert _framing_free(have) == _framing_free(want), engine  # every field as the server sent it
        archive = next(lives[engine].snapshot_path.glob("archive.warc*"))
        responses = [r for r in iter_records(archive) if r.rec_type == "response"]
        assert len(responses) == len(ASKS), engine
        assert [r.http_status for r in responses] == [s for s, _ in EXPECTED], engine
        assert all(r.url.startswith(base + "/") for r in responses), engine
    unconditional = [ask for ask in ASKS if "If-None-Match" not in ask[2]]
    with Replay([lives["fast"].snapshot_path], ca=ca, guard_mode="loopback", freeze=False) as replay:
        connect = _connector(replay.proxy_url, base, replay.ca_file)
        again = _ask(connect, "" if https else base)
        # a second client with nothing cached: the recorded 304 of /page is no answer for it
        fresh = _ask(connect, "" if https else base, unconditional)
    assert [(s, b) for s, _, b in again] == EXPECTED
    assert [(s, b) for s, _, b in fresh] == [(s, b) for (s, b), ask in zip(EXPECTED, ASKS, strict=True)
                                             if ask in unconditional]
    assert replay.stats().miss == 0
