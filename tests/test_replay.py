"""Hermetic, deterministic replay: fidelity, hermeticity, determinism, HTTP details, bad inputs."""

from __future__ import annotations

import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ego2web_replay.actions import Action
from ego2web_replay.browser import perform_action
from ego2web_replay.errors import SnapshotError
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.tasks import Task
from ego2web_replay.testing.canary import Canary
from ego2web_replay.testing.site import TestSite

pytestmark = pytest.mark.slow
FREEZE = re.compile(r"<script>\s*// ego2web-replay determinism freeze.*?</script>", re.S)


def _actions(site: TestSite) -> list[Action]:
    return [
        Action(kind="goto", url=site.https_url + "/"),
        Action(kind="wait", selector="body[data-ready='1']"),
        Action(kind="click", selector="#product-link"),
        Action(kind="goto", url=site.http_url + "/"),
        Action(kind="wait", selector="body[data-ready='1']"),
        Action(kind="goto", url=site.https_url + "/clock"),
        Action(kind="wait", selector="body[data-ready='1']"),
    ]


def _drive(context, actions) -> tuple[list[str], list[bytes], list[str]]:
    page = context.new_page()
    doms, shots, urls = [], [], []
    for a in actions:
        perform_action(page, a, timeout_s=20)
        if a.kind == "wait":
            doms.append(FREEZE.sub("", page.content()))
            shots.append(page.screenshot(animations="disabled", caret="hide"))
            urls.append(page.url)
    page.close()
    return doms, shots, urls


@pytest.fixture(scope="module")
def recorded(chromium, ca, tmp_path_factory):
    """Record the local site (HTTP and HTTPS) live, then stop the site for good."""
    folder = tmp_path_factory.mktemp("replay-site")
    site = TestSite(folder).start()
    task = Task(id="fidelity", instruction="x", start_url=site.https_url + "/")
    opts = RecordOptions(guard="loopback", upstream_ca=site.tls.ca_cert)
    actions = _actions(site)
    with LiveRecording(task, folder / "snapshots", opts, ca=ca) as live:
        ctx = chromium.new_context(proxy_url=live.proxy_url)
        doms, shots, urls = _drive(ctx, actions)
        ctx.close()
    assert live.ok, live.error
    site.stop()
    return live.snapshot_path, actions, doms, urls


def _replay_once(chromium, ca, snap, actions):
    with Replay([snap], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        doms, shots, urls = _drive(ctx, actions)
        ctx.close()
    return doms, shots, urls, replay.stats(), replay


def test_fidelity_zero_misses_same_dom_identical_screenshots(recorded, chromium, ca):
    snap, actions, live_doms, live_urls = recorded
    d1, s1, u1, stats1, _ = _replay_once(chromium, ca, snap, actions)
    d2, s2, u2, stats2, _ = _replay_once(chromium, ca, snap, actions)
    assert stats1.miss == 0, stats1.missed_urls
    assert stats1.exact + stats1.canonical + stats1.fuzzy >= 20
    assert stats1.canonical >= 2  # the cache-busted XHR and the JSON POST with its timestamp
    assert u1 == live_urls == u2
    # the shop pages render the same DOM as live (the clock page is frozen, so it differs from live)
    assert d1[:2] == live_doms[:2]
    assert d1 == d2
    assert s1 == s2  # byte-identical screenshots between two replays
    assert stats1.model_dump(exclude={"log"}) == stats2.model_dump(exclude={"log"})


def test_determinism_clock_and_randomness(recorded, chromium, ca):
    snap, actions, _, _ = recorded
    d1, _, _, _, replay = _replay_once(chromium, ca, snap, actions)
    d2, _, _, _, _ = _replay_once(chromium, ca, snap, actions)
    clock1, clock2 = d1[2], d2[2]
    assert clock1 == clock2
    text = re.search(r'<pre id="out">(.*?)</pre>', clock1, re.S).group(1).split("\n")
    now_ms, iso, rnd, values = int(text[0]), text[1], float(text[2]), text[3]
    captured = replay.capture_time.astimezone(UTC)
    assert abs(now_ms / 1000 - captured.timestamp()) < 5
    assert iso.startswith(captured.strftime("%Y-%m-%dT%H:%M"))
    assert 0 <= rnd < 1 and len(values.split(",")) == 4


def _crafted_snapshot(root: Path, pages: dict[str, tuple[int, str, bytes]]) -> Path:
    sw = SnapshotWriter(root, "crafted")
    for url, (status, ctype, body) in pages.items():
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Accept", "*/*")], request_body=b"",
                                 status=status, reason="", response_headers=[("Content-Type", ctype)],
                                 response_body=body, date=datetime(2026, 1, 2, 3, 4, 5))
        sw.add_page(url)
    sw.finalize()
    return sw.path


ENGINES = pytest.mark.parametrize("engine", ["fast", "mitmproxy"])  # both carry the same responder


@ENGINES
def test_hermetic_no_connection_to_canary_and_misses_counted(chromium, ca, tmp_path, engine):
    canary = Canary()
    html = (f'<html><body><h1>shop</h1><img src="http://127.0.0.1:{canary.port}/pixel.png">'
            '<script src="https://unknown-host.invalid/x.js"></script>'
            '<img src="https://shop.example/logo.png"></body></html>').encode()
    snap = _crafted_snapshot(tmp_path, {"https://shop.example/": (200, "text/html", html),
                                        "https://shop.example/logo.png": (200, "image/png", b"\x89PNG fake")})
    with Replay([snap], ca=ca, engine=engine) as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url)
        page = ctx.new_page()
        page.goto("https://shop.example/", wait_until="load")
        page.wait_for_load_state("networkidle")
        assert page.inner_text("h1") == "shop"
        ctx.close()
    stats = replay.stats()
    canary.close()
    assert canary.connections == 0
    missed = " ".join(stats.missed_urls)
    assert f"127.0.0.1:{canary.port}/pixel.png" in missed and "unknown-host.invalid/x.js" in missed
    assert stats.miss >= 2 and stats.live == 0 and stats.exact >= 2


def _opener(replay: Replay) -> urllib.request.OpenerDirector:
    ctx = ssl.create_default_context(cafile=str(replay.ca_file))
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url,
                                                                    "https": replay.proxy_url}),
                                       urllib.request.HTTPSHandler(context=ctx))


def _fetch(opener, url, headers=None, method="GET", data=None):
    req = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@ENGINES
def test_http_details(ca, tmp_path, engine):
    body = bytes(range(256)) * 4
    snap = _crafted_snapshot(tmp_path, {"http://files.example/blob.bin": (200, "application/octet-stream", body),
                                        "http://files.example/page": (200, "text/html", b"<html><head></head>hi</html>")})
    with Replay([snap], ca=ca, miss="410", engine=engine) as replay:
        op = _opener(replay)
        status, headers, got = _fetch(op, "http://files.example/blob.bin", {"Range": "bytes=10-19"})
        assert status == 206 and got == body[10:20] and headers["Content-Range"] == "bytes 10-19/1024"
        status, headers, got = _fetch(op, "http://files.example/blob.bin", method="HEAD")
        assert status == 200 and got == b"" and headers["Content-Length"] == "1024"
        status, headers, got = _fetch(op, "http://files.example/missing")
        assert status == 410 and headers["X-Ego2Web-Replay"] == "miss" and b"files.example/missing" in got
        status, headers, _ = _fetch(op, "http://files.example/blob.bin",
                                    {"Upgrade": "websocket", "Connection": "Upgrade"})
        assert status == 403 and headers["X-Ego2Web-Replay"] == "websocket-refused"
        status, headers, _ = _fetch(op, "http://files.example/blob.bin", method="OPTIONS",
                                    headers={"Origin": "http://a.example", "Access-Control-Request-Method": "PUT"})
        assert status == 204 and headers["Access-Control-Allow-Origin"] == "http://a.example"
        status, headers, got = _fetch(op, "http://files.example/page")
        assert b"determinism freeze" in got and int(headers["Content-Length"]) == len(got)
    # the archive on disk is untouched by the injection
    assert b"determinism" not in (snap / "archive.warc.zst").read_bytes()
    s = replay.stats()
    assert s.websocket == 1 and s.miss == 1


@ENGINES
def test_repeated_captures_served_in_order_then_last(ca, tmp_path, engine):
    sw = SnapshotWriter(tmp_path, "poll")
    for i in range(3):
        sw.writer.write_exchange(url="http://api.example/poll", method="GET", request_headers=[], request_body=b"",
                                 status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                                 response_body=f"state {i}".encode(), date=datetime(2026, 1, 1, 0, 0, i))
    for i in range(2):  # a series whose answers never changed
        sw.writer.write_exchange(url="http://api.example/static", method="GET", request_headers=[],
                                 request_body=b"", status=200, reason="OK",
                                 response_headers=[("Content-Type", "text/plain")], response_body=b"same",
                                 date=datetime(2026, 1, 1, 0, 0, 5 + i))
    sw.finalize()
    with Replay([sw.path], ca=ca, engine=engine) as replay:
        op = _opener(replay)
        got = [_fetch(op, "http://api.example/poll")[2] for _ in range(3)]
        t0 = time.monotonic()
        got += [_fetch(op, "http://api.example/poll")[2] for _ in range(2)]
        past = time.monotonic() - t0
        time.sleep(1.1)  # asked again later than the rhythm: nothing to wait for
        t1 = time.monotonic()
        assert _fetch(op, "http://api.example/poll")[2] == b"state 2"
        later = time.monotonic() - t1
        assert [_fetch(op, "http://api.example/static")[2] for _ in range(3)] == [b"same"] * 3
        s = replay.stats()
    if engine == "fast":  # past its series, a poll asked again at once waits for the series' rhythm (1 s)
        assert past >= 0.8 and later < 0.5, (past, later)
    assert got == [b"state 0", b"state 1", b"state 2", b"state 2", b"state 2"]
    # asked past the recorded, changing answers: the last is served again, but never silently
    notes = [(e.url.rsplit("/", 1)[1], e.volatile) for e in s.log]
    assert notes == [("poll", None)] * 3 + [("poll", "again: past 3 recorded, answers differ")] * 3 \
        + [("static", None)] * 3
    assert s.again == 3 and s.exact == 9 and s.validity == "degraded" and s.learned == 0


def test_a_revalidated_poll_that_never_changed_is_not_again(ca, tmp_path):
    """A page polling with its cached ETag (200 once, then 304: "still the same") asked past the recorded
    polls: the live answer is known (304 again), so nothing is noted."""
    sw = SnapshotWriter(tmp_path / "snapshots", "etag")
    etag = [("Content-Type", "application/json"), ("ETag", '"v1"'), ("Cache-Control", "no-cache")]
    sw.writer.write_exchange(url="http://api.example/state", method="GET", request_headers=[], request_body=b"",
                             status=200, reason="OK", response_headers=etag, response_body=b'{"n": 1}',
                             date=datetime(2026, 1, 1, 0, 0, 0))
    for i in range(2):
        sw.writer.write_exchange(url="http://api.example/state", method="GET",
                                 request_headers=[("If-None-Match", '"v1"')], request_body=b"",
                                 status=304, reason="Not Modified", response_headers=[("ETag", '"v1"')],
                                 response_body=b"", date=datetime(2026, 1, 1, 0, 0, 1 + i))
    sw.finalize()
    with Replay([sw.path], ca=ca) as replay:
        op = _opener(replay)
        got = [_fetch(op, "http://api.example/state")[0]]
        got += [_fetch(op, "http://api.example/state", headers={"If-None-Match": '"v1"'})[0] for _ in range(3)]
        s = replay.stats()
    assert got == [200, 304, 304, 304]
    assert [e.volatile for e in s.log] == [None] * 4 and s.again == 0 and s.validity == "complete"


def test_a_write_asked_again_is_noted_even_once_recorded(ca, tmp_path):
    """A mutation (a GraphQL one here, a PUT, a DELETE) sent more often than recorded: the live site would
    have done it again (a new id), so the one recorded answer served again is noted; a GraphQL query or a
    plain GET asked again is a page visited again."""
    sw = SnapshotWriter(tmp_path / "snapshots", "writes")
    mutation = b'{"query": "mutation AddReview($t: String) { addReview(text: $t) { id } }", "variables": {"t": "ok"}}'
    query = b'{"query": "query Reviews { reviews { id } }"}'
    for body, answer in ((mutation, b'{"data": {"addReview": {"id": 1}}}'), (query, b'{"data": {"reviews": []}}')):
        sw.writer.write_exchange(url="http://api.example/graphql", method="POST",
                                 request_headers=[("Content-Type", "application/json")], request_body=body,
                                 status=200, reason="OK", response_headers=[("Content-Type", "application/json")],
                                 response_body=answer, date=datetime(2026, 1, 1, 0, 0, 0))
    sw.writer.write_exchange(url="http://api.example/cart/7", method="DELETE", request_headers=[], request_body=b"",
                             status=204, reason="No Content", response_headers=[], response_body=b"",
                             date=datetime(2026, 1, 1, 0, 0, 1))
    sw.finalize()
    json_type = {"Content-Type": "application/json"}
    with Replay([sw.path], ca=ca) as replay:
        op = _opener(replay)
        for _ in range(2):
            assert _fetch(op, "http://api.example/graphql", json_type, "POST", mutation)[2].endswith(b'"id": 1}}}')
            _fetch(op, "http://api.example/graphql", json_type, "POST", query)
            assert _fetch(op, "http://api.example/cart/7", method="DELETE")[0] == 204
        s = replay.stats()
    notes = [e.volatile for e in s.log]
    assert notes == [None] * 3 + ["again: past 1 recorded, a write", None, "again: past 1 recorded, a write"]
    assert s.again == 2 and s.validity == "degraded"


def test_bad_inputs(ca, tmp_path):
    with pytest.raises(SnapshotError, match="not found"):
        Replay([tmp_path / "nope"], ca=ca).start()
    empty = tmp_path / "empty"
    sw = SnapshotWriter(empty, "e")
    sw.finalize()
    with pytest.raises(SnapshotError, match="nothing to replay"):
        Replay([sw.path], ca=ca).start()
    snap = _crafted_snapshot(tmp_path / "c", {"http://x.example/a": (200, "text/plain", b"a" * 2000),
                                              "http://x.example/b": (200, "text/plain", b"b" * 2000)})
    bad_index = tmp_path / "badindex"
    import shutil

    shutil.copytree(snap, bad_index)
    (bad_index / "index.cdxj").write_text("garbage line\n")
    with pytest.raises(SnapshotError):
        Replay([bad_index], ca=ca).start()
    # a corrupt record fails only its own request; the proxy keeps serving the others
    from ego2web_replay.snapshots.snapshot import Snapshot

    s = Snapshot.open(snap)
    entry_a = next(e for e in s.entries() if e.url.endswith("/a"))
    data = bytearray((snap / "archive.warc.zst").read_bytes())
    mid = entry_a.offset + entry_a.length // 2
    data[mid:mid + 8] = b"\x00" * 8
    (snap / "archive.warc.zst").write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="corrupt snapshot"):  # checked against the manifest first
        Replay([snap], ca=ca).open()
    with Replay([snap], ca=ca, check=False) as replay:  # asked to serve what it can
        op = _opener(replay)
        assert _fetch(op, "http://x.example/a")[0] == 502
        assert _fetch(op, "http://x.example/b")[2] == b"b" * 2000
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        from ego2web_replay.errors import ProxyError

        with pytest.raises(ProxyError, match="in use"):
            Replay([snap], ca=ca, port=sock.getsockname()[1], check=False).start()


def test_archive_hashed_beside_the_build_index_checked_before_it(tmp_path, ca, monkeypatch):
    """The open hashes each archive on a thread while the index is read: a changed archive is still
    refused before anything is served, and a changed index is refused before anything is built from it."""
    import shutil
    import threading

    from ego2web_replay.replay import mapped
    from ego2web_replay.snapshots import verify
    from ego2web_replay.snapshots.index_map import map_file

    snap = _crafted_snapshot(tmp_path / "c", {"http://x.example/a": (200, "text/plain", b"a" * 2000)})
    threads = []
    real = verify.integrity_problems

    def spy(s, **kw):
        threads.append((threading.current_thread() is threading.main_thread(), kw))
        return real(s, **kw)

    monkeypatch.setattr(verify, "integrity_problems", spy)
    with Replay([snap], ca=ca, index="mapped") as replay:
        assert replay.captures == 1
    assert threads == [(True, {"archive": False}), (False, {"index": False})]

    bad_archive = tmp_path / "bad-archive"
    shutil.copytree(snap, bad_archive)
    data = bytearray((bad_archive / "archive.warc.zst").read_bytes())
    data[-3] ^= 0xFF
    (bad_archive / "archive.warc.zst").write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="corrupt snapshot: archive.warc.zst: sha256 differs"):
        Replay([bad_archive], ca=ca, index="mapped").open()

    bad_index = tmp_path / "bad-index"
    shutil.copytree(snap, bad_index)
    (bad_index / "index.cdxj").write_bytes((bad_index / "index.cdxj").read_bytes().replace(b"x.example", b"y.example"))
    builds = mapped.BUILDS[0]
    with pytest.raises(SnapshotError, match="corrupt snapshot: index.cdxj: sha256 differs"):
        Replay([bad_index], ca=ca, index="mapped").open()
    assert mapped.BUILDS[0] == builds and not map_file(bad_index / "index.cdxj").exists()
