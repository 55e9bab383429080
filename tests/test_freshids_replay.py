"""End to end in real Chromium: a page that sends fresh ids on every load replays from one recording."""

from __future__ import annotations

import json

import pytest

from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.tasks import Task
from ego2web_replay.testing.freshids_site import FreshIdSite

pytestmark = pytest.mark.slow


def _load(context, url: str) -> tuple[str, str]:
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    items, ack = page.inner_text("#items"), page.inner_text("#ack")
    page.close()
    return items, ack


def test_fresh_ids_replay_from_one_recording(chromium, ca, tmp_path):
    site = FreshIdSite().start()
    task = Task(id="fresh-ids", instruction="x", start_url=site.url + "/")
    with LiveRecording(task, tmp_path / "snapshots", RecordOptions(guard="loopback"), ca=ca) as live:
        ctx = chromium.new_context(proxy_url=live.proxy_url)
        live_items, live_ack = _load(ctx, site.url + "/")
        ctx.close()
    assert live.ok, live.error
    site.stop()  # replay runs against the recording alone
    recorded = [(m, t) for m, t, _ in site.requests if t.startswith("/api/")]
    assert len(recorded) == 2 and "cid=" in recorded[0][1] and "rid=" in recorded[0][1]
    sent = json.loads(site.requests[-1][2]) if site.requests[-1][0] == "POST" else {}
    assert {"messageId", "anonymousId", "sentAt"} <= set(sent)
    assert live_items == "Red hat\nBlue hat" and live_ack == "view recorded"

    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        items, ack = _load(ctx, site.url + "/")
        ctx.close()
    stats = replay.stats()
    assert (items, ack) == (live_items, live_ack)  # the fetched content, served frozen
    assert stats.miss == 0 and stats.fuzzy == 0, stats.missed_urls
    assert stats.validity == "complete"
    api = {e.url.partition("?")[0].rpartition("/")[2]: e for e in stats.log if "/api/" in e.url}
    assert api["items"].outcome == "canonical" and api["items"].volatile == "fresh-id: cid, rid, trace"
    assert api["event"].outcome == "canonical"
    assert api["event"].volatile == "fresh-id: body:anonymousId, body:messageId, body:span"
    assert stats.fresh_id == 2
