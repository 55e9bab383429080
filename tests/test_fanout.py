"""``record --fanout``: the recorded pages' uncaptured same-site links fetched through the recorder and merged."""

from __future__ import annotations

import json

import pytest

from ego2web_replay.cli import main
from ego2web_replay.runner.fanout import page_links
from ego2web_replay.snapshots.snapshot import Snapshot, latest_snapshot


def test_page_links_resolve_links_frames_and_get_forms_default_submission():
    html = """<base href="/shop/"><a href="items?page=2#top">next</a><a href="/about">a</a><a href="#x">self</a>
    <iframe src="frame.html"></iframe><a href="items?page=2">again</a>
    <form action="/search"><input name="q" value="mug"><input type="checkbox" name="new" checked>
    <input type="checkbox" name="old"><input type="submit" name="go" value="Go"></form>
    <form method="post" action="/cart"><input name="qty" value="1"></form>
    <form action="/f"><select name="col"><option value="">-</option><option>name</option></select>
    <select name="op"><option value="eq">=</option><option selected>like</option></select>
    <input type="search" name="v"><input type="hidden" name="_sort" value="id"></form>"""
    assert page_links(html, "https://shop.example/start") == [
        "https://shop.example/shop/items?page=2", "https://shop.example/about", "https://shop.example/shop/",
        "https://shop.example/shop/frame.html", "https://shop.example/search?q=mug&new=on",  # no POST form
        "https://shop.example/f?col=&op=like&v=&_sort=id"]  # a select: its selected option, else its first
    words = page_links(html, "https://shop.example/", words=["tea"])
    assert words[-3:] == ["https://shop.example/search?q=tea&new=on", "https://shop.example/f?col=&op=like&v=&_sort=id",
                          "https://shop.example/f?col=&op=like&v=tea&_sort=id"]


@pytest.mark.slow
def test_a_link_no_recorded_path_took_is_served_frozen_after_fanout(site, ca, tmp_path):
    """The home task is recorded by its reference path only (the home page); its /clock link, one click
    away, is fetched by the fan-out through the real recorder and merged with provenance; a frozen
    episode that opens it through the replay proxy and Chromium gets the own capture, and misses it in
    a snapshot recorded without fan-out."""
    from ego2web_replay.models import load_trajectory

    home, clock = site.https_url + "/", site.https_url + "/clock"
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "home", "instruction": "x", "start_url": home, "expected_answer": "ok",
                                 "reference_actions": [{"kind": "goto", "url": home},
                                                       {"kind": "answer", "answer": "ok"}]}) + "\n", "utf-8")
    record = ["record", str(suite), "--guard", "loopback", "--upstream-ca", str(site.tls.ca_cert), "--no-second-load",
              "--explore-runs", str(tmp_path / "runs")]
    assert main([*record, "--snapshots", str(tmp_path / "plain")]) == 0
    assert main([*record, "--snapshots", str(tmp_path / "fanned"), "--fanout", "50",
                 "--json", str(tmp_path / "rec.json")]) == 0
    (row,) = json.loads((tmp_path / "rec.json").read_text("utf-8"))["tasks"]
    fan = row["fanout"]
    grown = Snapshot.open(latest_snapshot(tmp_path / "fanned", "home"))
    assert row["snapshot"] == fan["snapshot"] == str(grown.path) and fan["error"] is None
    assert fan["fetched"] >= 2 and fan["failed"] == 0 and fan["merged"] >= 2  # /old-product, /clock
    assert clock in {e.url for e in grown.entries()}
    assert clock not in {e.url for e in Snapshot.open(latest_snapshot(tmp_path / "plain", "home")).entries()}
    prov = json.loads((grown.path / "provenance.json").read_text("utf-8"))
    assert {"url": clock, "by": f"fanout from {home}"}.items() <= next(
        c for c in prov["captures"] if c["url"] == clock).items()
    assert "fanout snapshot" in " ".join(grown.manifest.notes)
    # a frozen episode that clicks one link further than the recorded path, own snapshot only
    agent = tmp_path / "agent.jsonl"
    agent.write_text(json.dumps({"id": "home", "instruction": "x", "start_url": home, "expected_answer": "ok",
                                 "reference_actions": [{"kind": "goto", "url": home}, {"kind": "goto", "url": clock},
                                                       {"kind": "answer", "answer": "ok"}]}) + "\n", "utf-8")
    for root in ("plain", "fanned"):
        assert main(["run", str(agent), "--agent", "scripted", "--mode", "frozen", "--snapshots", str(tmp_path / root),
                     "--out", str(tmp_path / "runs"), "--run-id", root, "--guard", "loopback", "--no-share",
                     "--no-progress"]) == 0
    fanned = load_trajectory(tmp_path / "runs" / "fanned" / "episodes" / "home" / "frozen").replay
    plain = load_trajectory(tmp_path / "runs" / "plain" / "episodes" / "home" / "frozen").replay
    assert next(e for e in fanned.log if e.url == clock).outcome == "exact"
    assert f"GET {clock}" not in fanned.missed_urls and fanned.validity != "off-snapshot"
    assert f"GET {clock}" in plain.missed_urls and plain.validity == "off-snapshot"
