"""Sealed on every channel: a frozen page's WebRTC sends no UDP and Chromium resolves no name itself."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from ego2web_replay.browser import CHROMIUM_FLAGS, chromium_executable, sealed_chromium_args
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter
from ego2web_replay.testing.canary import UdpCanary
from ego2web_replay.testing.netlog import netlog_args, resolved_names

pytestmark = pytest.mark.slow

UNKNOWN = "canary-unknown.test"


def _webrtc_page(port: int) -> bytes:
    servers = (f"{{urls: 'stun:127.0.0.1:{port}'}}, "
               f"{{urls: 'turn:127.0.0.1:{port}?transport=udp', username: 'u', credential: 'p'}}, "
               f"{{urls: 'stun:stun.{UNKNOWN}:{port}'}}, {{urls: 'turn:turn.{UNKNOWN}:{port}', "
               "username: 'u', credential: 'p'}")
    return f"""<!doctype html><html><head>
<link rel="dns-prefetch" href="//prefetch.{UNKNOWN}">
<link rel="preconnect" href="https://preconnect.{UNKNOWN}">
</head><body><h1>rtc</h1><script>
window.cands = []; window.gathered = false;
const pc = new RTCPeerConnection({{iceServers: [{servers}]}});
pc.createDataChannel('x');
pc.onicecandidate = e => {{ if (e.candidate) window.cands.push(e.candidate.candidate); else window.gathered = true; }};
pc.createOffer().then(o => pc.setLocalDescription(o));
</script></body></html>""".encode()


@pytest.fixture(scope="module")
def rtc_snapshot(tmp_path_factory):
    canary = UdpCanary()
    sw = SnapshotWriter(tmp_path_factory.mktemp("sealing"), "sealing")
    sw.writer.write_exchange(url="https://rtc.example/", method="GET", request_headers=[("Accept", "*/*")],
                             request_body=b"", status=200, reason="OK",
                             response_headers=[("Content-Type", "text/html")],
                             response_body=_webrtc_page(canary.port), date=datetime(2026, 1, 2, 3, 4, 5))
    sw.add_page("https://rtc.example/")
    sw.finalize()
    yield sw.path, canary
    canary.close()


def _visit(ctx) -> list[str]:
    """Load the WebRTC page, wait for ICE gathering to end, return the candidates it saw."""
    page = ctx.new_page()
    page.goto("https://rtc.example/", wait_until="load")
    assert page.inner_text("h1") == "rtc"
    deadline = time.monotonic() + 30  # ends as soon as gathering has
    while time.monotonic() < deadline and not page.evaluate("window.gathered"):
        time.sleep(0.1)
    time.sleep(0.5)
    cands = page.evaluate("window.cands")
    ctx.close()
    return list(cands)


def test_unsealed_chromium_leaks_udp_and_resolves_names(rtc_snapshot, playwright, ca, tmp_path):
    """The control: without the sealing flags the same page reaches the canary (so the test below can fail)."""
    snap, canary = rtc_snapshot
    before = canary.datagrams
    log = tmp_path / "netlog.json"
    with Replay([snap], ca=ca) as replay:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), proxy={"server": "http://per-context"},
            args=[*CHROMIUM_FLAGS, f"--ignore-certificate-errors-spki-list={ca.spki}", *netlog_args(log)])
        try:
            _visit(browser.new_context(proxy={"server": replay.proxy_url}))
        finally:
            browser.close()
    assert canary.datagrams > before
    assert f"stun.{UNKNOWN}" in resolved_names(log)


def test_sealed_frozen_page_sends_no_udp_and_resolves_no_name(rtc_snapshot, ca, tmp_path):
    snap, canary = rtc_snapshot
    before = canary.datagrams
    log = tmp_path / "netlog.json"
    with Replay([snap], ca=ca) as replay:
        with replay.browser(extra_args=netlog_args(log)) as session:
            assert _visit(session.new_context()) == []  # no host, srflx or relay candidate at all
    assert canary.datagrams == before, f"UDP reached the canary from {canary.senders[before:]}"
    assert resolved_names(log) == set()
    assert replay.stats().exact >= 1


def test_sealed_args_map_every_name_but_loopback_and_the_proxy():
    args = sealed_chromium_args("http://proxy.internal:8080")
    rules = next(a for a in args if a.startswith("--host-resolver-rules="))
    assert "MAP * ~NOTFOUND" in rules and "EXCLUDE proxy.internal" in rules and "EXCLUDE 127.0.0.1" in rules
    assert "--webrtc-ip-handling-policy=disable_non_proxied_udp" in args
    assert not any(a.startswith("--host-resolver-rules") for a in sealed_chromium_args(None))
