"""``record --fanout``: the recorded pages' uncaptured same-site links fetched through the recorder and merged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.runner.fanout import page_links
from ego2web_replay.runner.fanout_assets import css_assets, page_assets
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


def test_page_assets_are_what_the_markup_loads_with_the_dest_a_browser_sends():
    html = """<base href="/shop/"><link rel="stylesheet" href="a.css"><link rel="icon" href="/fav.ico">
    <link rel="preload" as="font" href="/f.woff2"><link rel="preload" as="fetch" href="/api/x">
    <link rel="alternate" href="/feed"><script src="app.js#v"></script><script>inline()</script>
    <img src="p.png"><img srcset="s1.png 1x, s2.png 2x"><img src="data:image/png;base64,AA">
    <picture><source srcset="w.webp 1x"><img src="p.png"></picture><source srcset="stray.png">
    <video poster="/poster.jpg" src="/movie.mp4"></video><input type="image" src="/go.png">
    <a href="/page">not an asset</a>"""
    assert page_assets(html, "https://shop.example/start") == [
        ("https://shop.example/shop/a.css", "style"), ("https://shop.example/fav.ico", "image"),
        ("https://shop.example/f.woff2", "font"), ("https://shop.example/shop/app.js", "script"),
        ("https://shop.example/shop/p.png", "image"), ("https://shop.example/shop/s1.png", "image"),
        ("https://shop.example/shop/w.webp", "image"), ("https://shop.example/poster.jpg", "image"),
        ("https://shop.example/go.png", "image")]  # no media, no data: URL, a stray <source> ignored
    css = """@import "base.css"; @import url(print.css) print; body { background: url('img/bg.png') }
    @font-face { src: url(/fonts/x.woff2?v=2) format("woff2"), url(data:font/woff2;base64,AA) }"""
    assert css_assets(css, "https://cdn.example/css/site.css") == [
        ("https://cdn.example/css/base.css", "style"), ("https://cdn.example/css/print.css", "style"),
        ("https://cdn.example/css/img/bg.png", "image"), ("https://cdn.example/fonts/x.woff2?v=2", "font")]


def _frozen_replay(agent, tmp_path, root, task_id):
    """Run ``agent``'s scripted path frozen against the snapshots under ``tmp_path / root``; its replay."""
    from ego2web_replay.models import load_trajectory

    assert main(["run", str(agent), "--agent", "scripted", "--mode", "frozen", "--snapshots", str(tmp_path / root),
                 "--out", str(tmp_path / "runs"), "--run-id", root, "--guard", "loopback", "--no-share",
                 "--no-progress"]) == 0
    return load_trajectory(tmp_path / "runs" / root / "episodes" / task_id / "frozen").replay


@pytest.mark.slow
def test_a_link_no_recorded_path_took_is_served_frozen_after_fanout(site, ca, tmp_path):
    """The home task is recorded by its reference path only (the home page); its /clock link, one click
    away, is fetched by the fan-out through the real recorder and merged with provenance; a frozen
    episode that opens it through the replay proxy and Chromium gets the own capture, and misses it in
    a snapshot recorded without fan-out."""
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
    assert fan["fetched"] >= 3 and fan["failed"] == 0 and fan["merged"] >= 4  # /old-product, /product/42, /clock
    # the redirect was followed on the site, and the product page's own image fetched (its stylesheet is held)
    product, snack = site.https_url + "/product/42", site.https_url + "/static/snack.png"
    assert fan["assets"] == 1 and fan["assets_failed"] == 0 and fan["assets_left_out"] == 0
    assert {clock, product, snack} <= {e.url for e in grown.entries()}
    assert clock not in {e.url for e in Snapshot.open(latest_snapshot(tmp_path / "plain", "home")).entries()}
    prov = json.loads((grown.path / "provenance.json").read_text("utf-8"))
    for url, page in ((clock, home), (product, home), (snack, product)):
        assert {"url": url, "by": f"fanout from {page}"}.items() <= next(
            c for c in prov["captures"] if c["url"] == url).items()
    assert "fanout snapshot" in " ".join(grown.manifest.notes)
    # a frozen episode that clicks one link further than the recorded path, own snapshot only
    agent = tmp_path / "agent.jsonl"
    agent.write_text(json.dumps({"id": "home", "instruction": "x", "start_url": home, "expected_answer": "ok",
                                 "reference_actions": [{"kind": "goto", "url": home}, {"kind": "goto", "url": clock},
                                                       {"kind": "goto", "url": home},
                                                       {"kind": "click", "selector": "#product-link"},
                                                       {"kind": "wait", "selector": "#calories"},
                                                       {"kind": "answer", "answer": "ok"}]}) + "\n", "utf-8")
    fanned, plain = (_frozen_replay(agent, tmp_path, root, "home") for root in ("fanned", "plain"))
    for url in (clock, site.https_url + "/old-product", product, snack):
        assert next(e for e in fanned.log if e.url == url).outcome == "exact", url
    # the fanned snapshot served the whole path; without it the clock page and the product link missed
    assert fanned.missed_urls == [] and fanned.validity == "complete"
    assert plain.missed_urls == [f"GET {clock}", f"GET {site.https_url}/old-product"]
    assert plain.validity == "off-snapshot"


def test_browser_fanout_narrowing_refuses_hosts_off_the_site_and_the_snapshot():
    from ego2web_replay.runner.fanout import allowed_host

    site, held = ("shop.example",), {"cdn.example"}
    assert allowed_host("https://shop.example/a", site, held) and allowed_host("http://img.shop.example/x", site, held)
    assert allowed_host("https://cdn.example/lib.js", site, held)  # a host the snapshot already holds
    assert not allowed_host("https://tracker.example/pixel", site, held)
    assert not allowed_host("https://cdn.example.evil/lib.js", site, held)
    assert not allowed_host("ftp://shop.example/file", site, held)


FAN_START = b"""<!doctype html><html><head><meta charset="utf-8"><title>Fan start</title></head>
<body><a id="list" href="/fan/list">The list</a></body></html>"""
FAN_LIST = b"""<!doctype html><html><head><meta charset="utf-8"><title>Fan list</title></head>
<body><ul id="items">loading</ul><script>
(async () => {
  fetch('https://tracker.example/pixel.gif', {mode: 'no-cors'}).catch(() => null);  // off every allowed host
  try {
    const r = await fetch('/fan/api/items?page=1');
    document.getElementById('items').textContent = r.ok ? (await r.json()).items.join(',') : 'status ' + r.status;
  } finally { document.body.setAttribute('data-ready', '1'); }
})();
</script></body></html>"""


@pytest.mark.slow
def test_browser_fanout_records_what_a_pages_script_requests(site, ca, tmp_path):
    """A page one link off the recorded path loads its items with fetch(): the plain fan-out records the
    page but not the request its script makes, so a frozen episode misses it; ``--fanout-browser`` opens
    the page in Chromium through the recorder, records the XHR (attributed to the page) and refuses the
    script's off-site request, and the frozen episode is served whole."""
    site.extra.update({"/fan/start": (200, "text/html; charset=utf-8", FAN_START),
                       "/fan/list": (200, "text/html; charset=utf-8", FAN_LIST),
                       "/fan/api/items": (200, "application/json", b'{"items": ["tea", "mug"]}')})
    start, page, api = (site.https_url + p for p in ("/fan/start", "/fan/list", "/fan/api/items?page=1"))
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "fan", "instruction": "x", "start_url": start, "expected_answer": "ok",
                                 "reference_actions": [{"kind": "goto", "url": start},
                                                       {"kind": "answer", "answer": "ok"}]}) + "\n", "utf-8")
    record = ["record", str(suite), "--guard", "loopback", "--upstream-ca", str(site.tls.ca_cert), "--no-second-load",
              "--explore-runs", str(tmp_path / "runs"), "--fanout", "10"]
    assert main([*record, "--snapshots", str(tmp_path / "plain"), "--json", str(tmp_path / "plain.json")]) == 0
    assert main([*record, "--snapshots", str(tmp_path / "browser"), "--fanout-browser", "--fanout-page-timeout", "10",
                 "--json", str(tmp_path / "browser.json")]) == 0
    (row,) = json.loads((tmp_path / "browser.json").read_text("utf-8"))["tasks"]
    fan = row["fanout"]
    assert fan["error"] is None and fan["opened"] == 1 and fan["fetched"] == 1 and fan["timed_out"] == 0
    assert fan["refused"] == 1 and fan["requests"] >= 2  # the page and its XHR (the favicon perhaps too)
    grown = Snapshot.open(latest_snapshot(tmp_path / "browser", "fan"))
    assert {page, api} <= {e.url for e in grown.entries()}
    assert not any("tracker.example" in e.url for e in grown.entries())
    fanout = json.loads((Path(fan["archive"]) / "fanout.json").read_text("utf-8"))
    assert fanout["browser"]["refused"] == {"https://tracker.example/pixel.gif": page}
    prov = json.loads((grown.path / "provenance.json").read_text("utf-8"))
    assert next(c for c in prov["captures"] if c["url"] == api)["by"] == f"fanout from {page}"
    plain_urls = {e.url for e in Snapshot.open(latest_snapshot(tmp_path / "plain", "fan")).entries()}
    assert page in plain_urls and api not in plain_urls  # the plain fan-out never ran the script
    agent = tmp_path / "agent.jsonl"
    agent.write_text(json.dumps({"id": "fan", "instruction": "x", "start_url": start, "expected_answer": "ok",
                                 "reference_actions": [{"kind": "goto", "url": start},
                                                       {"kind": "click", "selector": "#list"},
                                                       {"kind": "wait", "selector": "body[data-ready='1']"},
                                                       {"kind": "answer", "answer": "ok"}]}) + "\n", "utf-8")
    browsed, plain = (_frozen_replay(agent, tmp_path, root, "fan") for root in ("browser", "plain"))
    assert next(e for e in browsed.log if e.url == api).outcome == "exact"
    assert f"GET {api}" in plain.missed_urls and f"GET {api}" not in browsed.missed_urls


def test_fanout_browser_without_fanout_is_a_usage_error(tmp_path, capsys):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "a", "instruction": "x", "start_url": "http://127.0.0.1:9/"}) + "\n", "utf-8")
    assert main(["record", str(suite), "--snapshots", str(tmp_path / "s"), "--fanout-browser"]) == 2
    assert "--fanout-browser and --fanout-word need --fanout N" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
