"""Fidelity on real pages in Chromium: learned volatility, and two third-party apps (Datasette, MkDocs)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.volatility import read_volatile
from ego2web_replay.tasks import Task
from ego2web_replay.testing.site import TestSite
from ego2web_replay.testing.thirdparty import DatasetteSite, MkDocsSite, available

pytestmark = pytest.mark.slow
FREEZE = re.compile(r"<script>\s*// ego2web-replay determinism freeze.*?</script>", re.S)

TOKEN_PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>Stock</title></head><body>
<p>Stock: <span id="stock">loading</span></p>
<script>
const tok = Math.random().toString(36).slice(2) + Date.now().toString(36).slice(-3);
fetch('/api/stock?id=4&tok=' + tok).then(r => r.json()).then(j => {
  document.getElementById('stock').textContent = j.stock; document.body.dataset.ready = '1'; });
</script></body></html>"""


def _record(chromium, ca, root: Path, task_id: str, urls: list[str], ready: str | None) -> tuple[Path, list[str]]:
    task = Task(id=task_id, instruction="x", start_url=urls[0])
    with LiveRecording(task, root, RecordOptions(guard="loopback"), ca=ca) as live:
        ctx = chromium.new_context(proxy_url=live.proxy_url)
        doms = _visit(ctx, urls, ready)
        ctx.close()
    assert live.ok, live.error
    assert live.snapshot_path is not None
    return live.snapshot_path, doms


def _visit(ctx, urls: list[str], ready: str | None) -> list[str]:
    page = ctx.new_page()
    doms = []
    for url in urls:
        page.goto(url, wait_until="load", timeout=20_000)
        if ready:
            page.wait_for_selector(ready, timeout=20_000, state="attached")
        page.wait_for_load_state("networkidle", timeout=20_000)
        doms.append(FREEZE.sub("", page.content()))
    page.close()
    return doms


def _replay(chromium, ca, snap: Path, urls: list[str], ready: str | None):
    with Replay([snap], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        doms = _visit(ctx, urls, ready)
        ctx.close()
    return doms, replay.stats()


def test_per_request_token_is_learned_and_replayed_without_misses(chromium, ca, tmp_path):
    site = TestSite(tmp_path / "site", https=False)
    site.extra["/stock"] = (200, "text/html; charset=utf-8", TOKEN_PAGE)
    site.extra["/api/stock"] = (200, "application/json", b'{"stock": 17}')
    site.extra["/favicon.ico"] = (204, "image/x-icon", b"")
    with site:
        url = site.http_url + "/stock"
        snap, live_doms = _record(chromium, ca, tmp_path / "snaps", "token", [url, url], "body[data-ready='1']")
    learned = read_volatile(snap)
    assert learned.get(f"GET {site.http_url}/api/stock") == ["tok"]  # no rule names `tok`
    doms, stats = _replay(chromium, ca, snap, [url], "body[data-ready='1']")
    assert stats.miss == 0 and stats.fuzzy == 0, stats.missed_urls
    assert stats.canonical >= 1
    assert "Stock: <span id=\"stock\">17</span>" in doms[0]


@pytest.mark.skipif(not available("datasette"), reason="datasette is in the dev extra")
def test_datasette_search_and_pagination_replay_faithfully(chromium, ca, tmp_path):
    with DatasetteSite(tmp_path / "app") as app:
        urls = [app.url + "/shop/products?_search=walnut", app.url + "/shop/products?_next=5",
                app.url + "/shop/products?_facet=category&category=Kitchen"]
        snap, live_doms = _record(chromium, ca, tmp_path / "snaps", "datasette", urls, None)
    d1, s1 = _replay(chromium, ca, snap, urls, None)
    d2, s2 = _replay(chromium, ca, snap, urls, None)
    assert s1.miss == 0 and s1.fuzzy == 0, s1.missed_urls
    assert d1 == d2
    assert "walnut coffee" in d1[0] and "walnut shelf" in d1[0]
    off, s3 = _replay(chromium, ca, snap, [urls[0].replace("walnut", "lamp")], None)
    assert s3.miss >= 1 and "walnut coffee" not in off[0] and "Not in snapshot" in off[0]


@pytest.mark.skipif(not available("mkdocs"), reason="mkdocs is in the dev extra")
def test_mkdocs_site_with_search_replays_faithfully(chromium, ca, tmp_path):
    with MkDocsSite(tmp_path / "docs") as docs:
        urls = [docs.url + "/", docs.url + "/recording/", docs.url + "/matching/"]
        snap, live_doms = _record(chromium, ca, tmp_path / "snaps", "docs", urls, None)
    d1, s1 = _replay(chromium, ca, snap, urls, None)
    assert s1.miss == 0 and s1.fuzzy == 0, s1.missed_urls
    assert [re.sub(r"\s+", " ", d) for d in d1] == [re.sub(r"\s+", " ", d) for d in live_doms]
    _, s2 = _replay(chromium, ca, snap, [docs.url + "/coverage/"], None)  # never visited
    assert s2.miss >= 1


def _streamlit_text(ctx, url: str, wait_for: str | None, increments: int = 0) -> str:
    """The page's text once drawn; with ``increments``, after raising "Bags" that often and ordering."""
    page = ctx.new_page()
    page.goto(url, wait_until="load", timeout=30_000)
    if wait_for:
        page.get_by_text(wait_for).first.wait_for(timeout=30_000)
        page.wait_for_load_state("networkidle", timeout=20_000)
    else:
        page.wait_for_load_state("networkidle", timeout=20_000)
        page.wait_for_timeout(1500)  # what would have come over the websocket by now
    if increments:
        for _ in range(increments):
            page.get_by_role("button", name="Increment").first.click()
            page.wait_for_timeout(500)  # the rerun it asks for comes back
        page.get_by_role("button", name="Order").click()
        with contextlib.suppress(PlaywrightTimeout):
            page.get_by_text("Ordered").wait_for(timeout=5_000)
        page.wait_for_load_state("networkidle", timeout=20_000)
    text = page.inner_text("body")
    page.close()
    return text


@pytest.mark.skipif(not available("streamlit"), reason="streamlit is in the dev extra")
def test_streamlit_draws_from_its_replayed_websocket_and_a_refused_one_is_not_complete(chromium, ca, tmp_path):
    from ego2web_replay.testing.streamlit_site import APP_TEXT, CLICKED_TEXT, StreamlitSite

    with StreamlitSite(tmp_path / "app") as app:
        url = app.url + "/"
        task = Task(id="streamlit", instruction="x", start_url=url)
        with LiveRecording(task, tmp_path / "snaps", RecordOptions(guard="loopback"), ca=ca) as live:
            ctx = chromium.new_context(proxy_url=live.proxy_url)
            live_text = _streamlit_text(ctx, url, "oak table", increments=1)
            ctx.close()
        assert live.ok, live.error
    assert APP_TEXT[1] in live_text and "oak table" in live_text and CLICKED_TEXT in live_text
    snap = live.snapshot_path

    def frozen(increments: int, **config: str) -> tuple[str, Any]:
        with Replay([snap], ca=ca, guard_mode="loopback", **config) as replay:
            ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
            text = _streamlit_text(ctx, url, "oak table" if not config else None, increments)
            ctx.close()
        return text, replay.stats()

    # the Streamlit server is gone: everything the page shows comes from the snapshot, clicks answered too
    text, stats = frozen(1)
    for shown in (*APP_TEXT, "oak table", "240", CLICKED_TEXT):
        assert shown in text
    handshake = [e for e in stats.log if e.status == 101]
    assert len(handshake) == 1 and handshake[0].url.endswith("/_stcore/stream") and handshake[0].kind == "content"
    sent = [e.outcome for e in stats.log if e.method == "WS"]
    assert len(sent) >= 3 and set(sent) == {"exact"}  # the first run, the increment, the order
    assert stats.miss == 0 and stats.websocket == 0 and stats.validity == "complete", stats.missed_urls
    # two bags were never ordered live: that rerun has no recorded answer, a counted miss
    text, stats = frozen(2)
    assert APP_TEXT[1] in text and "Ordered" not in text
    assert "miss" in [e.outcome for e in stats.log if e.method == "WS"] and stats.validity == "off-snapshot"
    # the mitmproxy engine does not carry replayed websockets: refused, counted, the page blank, not complete
    text, stats = frozen(0, engine="mitmproxy")
    assert APP_TEXT[1] not in text
    assert stats.websocket >= 1 and stats.validity == "off-snapshot"
