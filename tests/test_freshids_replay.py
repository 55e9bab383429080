"""End to end in real Chromium: a page that sends fresh ids on every load replays from one recording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ego2web_replay.models import ReplayConfig
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import Snapshot
from ego2web_replay.tasks import Task
from ego2web_replay.testing.freshids_site import FreshIdSite, npm_file

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
    sent = json.loads(next(body for method, _, body in site.requests if method == "POST"))
    assert {"messageId", "anonymousId", "sentAt"} <= set(sent)
    assert live_items == "Red hat\nBlue hat" and live_ack == "view recorded"

    def replayed(config: ReplayConfig | None = None):  # noqa: ANN202
        with Replay([live.snapshot_path], config, ca=ca, guard_mode="loopback") as replay:
            ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
            items, ack = _load(ctx, site.url + "/")
            ctx.close()
        stats = replay.stats()
        assert (items, ack) == (live_items, live_ack)  # the fetched content, served frozen
        assert stats.miss == 0 and stats.fuzzy == 0 and stats.fresh_id == 2, stats.missed_urls
        return stats, {e.url.partition("?")[0].rpartition("/")[2]: e for e in stats.log if "/api/" in e.url}

    # `trace` and `span` hold UUIDs under names no fresh-id rule lists: they may name things, so they are
    # set aside but marked, and the episode is at best degraded
    stats, api = replayed()
    assert api["items"].outcome == "canonical" and api["items"].volatile == "fresh-id: cid, rid, trace?"
    assert api["event"].outcome == "canonical"
    assert api["event"].volatile == "fresh-id: body:anonymousId, body:messageId, body:sentAt, body:span?"
    assert stats.validity == "degraded"
    # the site's own rules say they are fresh ids: complete
    rules = tmp_path / "fresh.yaml"
    rules.write_text("defaults:\n  fresh_id_params: [trace, span]\n")
    stats, api = replayed(ReplayConfig(rules_files=(str(rules),)))
    assert api["items"].volatile == "fresh-id: cid, rid, trace" and stats.validity == "complete"


def test_second_load_learns_what_changes_between_two_loads(chromium, ca, tmp_path):
    """The record-time second load, in a throw-away context, is not archived: it only teaches
    volatile.json which names changed while the response stayed the same; replay with the
    shape-based stage off then matches by those learned names."""
    site = FreshIdSite().start()
    task = Task(id="fresh-ids-reload", instruction="x", start_url=site.url + "/")
    with LiveRecording(task, tmp_path / "snapshots", RecordOptions(guard="loopback"), ca=ca) as live:
        ctx = chromium.new_context(proxy_url=live.proxy_url)
        _load(ctx, site.url + "/")
        ctx.close()
        live.writer.add_page(site.url + "/")
        archived = live.recorder.exchanges
        noted = live.second_load(lambda: chromium.new_context(proxy_url=live.proxy_url))
        assert live.recorder.exchanges == archived  # the second load added no capture
    assert live.ok, live.error
    site.stop()
    assert noted >= 3 and len([r for r in site.requests if r[1].startswith("/api/items")]) == 2
    snap = Snapshot.open(live.snapshot_path)
    assert len([e for e in snap.entries() if "/api/" in e.url]) == 2
    data = json.loads((live.snapshot_path / "volatile.json").read_text())
    base = f"http://127.0.0.1:{site.port}"
    assert {"cid", "rid", "trace"} <= set(data["paths"][f"GET {base}/api/items"])
    assert "q" not in data["paths"][f"GET {base}/api/items"]
    assert {"messageId", "anonymousId", "span"} <= set(data["paths"][f"POST {base}/api/event"])
    assert "event" not in data["paths"][f"POST {base}/api/event"]
    assert len(data["reloads"]) == noted
    page_digest = next(e.digest for e in snap.entries() if e.url == base + "/")
    assert [r[3] for r in data["reloads"] if r[1] == base + "/"] == [page_digest]  # digests as the index writes them

    off = tmp_path / "off.yaml"
    off.write_text("defaults:\n  fresh_ids: false\n")
    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback", rules_files=[str(off)]) as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        items, ack = _load(ctx, site.url + "/")
        ctx.close()
    stats = replay.stats()
    assert (items, ack) == ("Red hat\nBlue hat", "view recorded") and stats.miss == 0, stats.missed_urls
    api = {e.url.partition("?")[0].rpartition("/")[2]: e for e in stats.log if "/api/" in e.url}
    assert api["items"].volatile == "learned: cid, rid, trace"
    assert api["event"].volatile == "learned: body:anonymousId, body:messageId, body:sentAt, body:span"
    assert stats.learned == 2 and stats.fresh_id == 0


AMPLITUDE = "@amplitude/analytics-browser@2.48.1"  # scripts/setup.sh packs the same version
NPM_ASSETS = Path(__file__).resolve().parents[1] / ".venv" / "test-assets" / "npm"


def test_a_real_analytics_client_replays_from_one_recording(chromium, ca, tmp_path):
    """Amplitude's browser SDK (npm ``@amplitude/analytics-browser``, served by the local site) makes up
    its device id, insert id and session id on every load; its event POST replays from one recording."""
    js = npm_file(AMPLITUDE, "lib/scripts/amplitude-min.js", NPM_ASSETS)
    if js is None:
        pytest.skip(f"{AMPLITUDE} is not in {NPM_ASSETS}: scripts/setup.sh fetches it with npm")
    site = FreshIdSite(amplitude_js=js).start()
    task = Task(id="amplitude", instruction="x", start_url=site.url + "/amplitude")
    with LiveRecording(task, tmp_path / "snapshots", RecordOptions(guard="loopback"), ca=ca) as live:
        ctx = chromium.new_context(proxy_url=live.proxy_url)
        page = ctx.new_page()
        page.goto(site.url + "/amplitude")
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        live_ack = page.inner_text("#ack")
        ctx.close()
    assert live.ok, live.error
    site.stop()
    sent = [json.loads(body) for method, target, body in site.requests if method == "POST"]
    assert len(sent) == 1 and sent[0]["events"][0]["event_type"] == "viewed hats"
    event = sent[0]["events"][0]
    assert {"device_id", "insert_id", "session_id"} <= set(event) and live_ack == "200 Event tracked successfully"

    with Replay([live.snapshot_path], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        page = ctx.new_page()
        page.goto(site.url + "/amplitude")
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        ack = page.inner_text("#ack")
        ctx.close()
    stats = replay.stats()
    assert ack == live_ack and stats.miss == 0 and stats.validity == "complete", stats.missed_urls
    post = next(e for e in stats.log if e.method == "POST")
    assert post.outcome == "canonical" and post.volatile is not None and post.volatile.startswith("fresh-id: ")
    assert {"body:device_id", "body:insert_id"} <= set(post.volatile.removeprefix("fresh-id: ").split(", "))
