from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from ego2web_replay.guard import UpstreamGuard, host_matches, is_loopback_host
from ego2web_replay.proxy import ProxyServer
from ego2web_replay.testing.canary import Canary


@pytest.fixture()
def canary():
    c = Canary()
    yield c
    c.close()


def _get(proxy_url, url):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_url}))
    try:
        r = opener.open(url, timeout=10)
        return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_helpers():
    assert is_loopback_host("127.0.0.1") and is_loopback_host("127.9.9.9") and is_loopback_host("[::1]")
    assert is_loopback_host("localhost") and not is_loopback_host("example.com")
    assert not is_loopback_host("10.0.0.1")
    assert host_matches("a.b.example.com", ["example.com"]) and host_matches("x.gvt1.com", ["*.gvt1.com"])
    assert not host_matches("badexample.com", ["example.com"])


def test_loopback_mode_allows_loopback_and_answers_the_rest(ca, canary):
    guard = UpstreamGuard()
    with ProxyServer([guard], ca=ca, options={"guard_mode": "loopback"}) as proxy:
        assert _get(proxy.url, canary.url + "/x")[0] == 200
        assert canary.connections == 1
        status, headers, body = _get(proxy.url, "http://www.example.com/")
        assert status == 403 and headers["X-Ego2Web-Replay"].startswith("blocked")
        status, headers, _ = _get(proxy.url, "http://update.googleapis.com/service/update2")
        assert status == 403 and "background" in headers["X-Ego2Web-Replay"]
    assert guard.counts["not-allowed"] == 1 and guard.counts["background"] == 1
    assert canary.connections == 1


def test_deny_list_wins_even_for_loopback(ca, canary):
    with ProxyServer([UpstreamGuard()], ca=ca, options={"guard_mode": "open", "guard_deny": ["127.0.0.1"]}) as proxy:
        status, headers, _ = _get(proxy.url, canary.url + "/")
    assert status == 403 and "denied" in headers["X-Ego2Web-Replay"]
    assert canary.connections == 0


def test_allowlist_mode(ca):
    guard = UpstreamGuard()
    with ProxyServer([guard], ca=ca, options={"guard_mode": "allowlist", "guard_allow": ["shop.example"]}):
        assert guard.allowed("img.shop.example") == (True, "")
        assert guard.allowed("other.example") == (False, "not-allowed")
        assert guard.allowed("localhost") == (True, "")
