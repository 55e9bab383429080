"""HAR 1.2: import of Playwright's and DevTools' HARs, export that ``route_from_har`` replays, clear errors."""

from __future__ import annotations

import base64
import json

import pytest
from test_export import BASE, build_snapshot, capture_key

from ego2web_replay.cli import main
from ego2web_replay.png import png_bytes
from ego2web_replay.redaction import MARK
from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots import Snapshot, import_warc, verify_snapshot
from ego2web_replay.snapshots.export import export_snapshot
from ego2web_replay.testing.site import TestSite

ORIGIN = "https://shop.example.test"


def _served(snap: Snapshot) -> dict[tuple[str, str], tuple[int | None, dict[str, str], bytes]]:
    out = {}
    for e in snap.entries():
        r = snap.resolve(e)
        out[(e.method, e.url)] = (r.http_status, {k.lower(): v for k, v in r.http_headers or ()}, r.payload)
    return out


def _requests(snap: Snapshot) -> dict[str, bytes]:
    return {r.url or "": r.payload for r in snap.records() if r.rec_type == "request"}


@pytest.mark.parametrize("content", ["embed", "attach"])  # attach: bodies in files next to the HAR
def test_playwright_recorded_har_imports_and_replays_frozen(chromium, ca, tmp_path, capsys, content):
    har = tmp_path / "har" / "shop.har"
    site = TestSite(tmp_path / "site", https=False)
    with site:
        ctx = chromium.browser.new_context(record_har_path=str(har), record_har_content=content)
        page = ctx.new_page()
        page.goto(site.http_url + "/old-product", wait_until="load")  # a redirect, a cookie, a stylesheet
        page.goto(site.http_url + "/", wait_until="networkidle")
        live = page.inner_text("h1")
        ctx.close()  # writes the HAR
        url = site.http_url
    # the site is stopped: from here on nothing can come from it
    assert (len(list(har.parent.iterdir())) > 1) == (content == "attach")
    snaps = tmp_path / "snaps"
    assert main(["snapshot", "import", str(har), "--task", "T", "--snapshots", str(snaps), "--id", "h"]) == 0
    assert "imported" in capsys.readouterr().out
    snap = Snapshot.open(snaps / "T" / "h")
    assert verify_snapshot(snap.path).ok
    served = _served(snap)
    assert served[("GET", url + "/old-product")][0] == 302
    assert served[("GET", url + "/product/42")][1]["set-cookie"].startswith(f"session={MARK}")  # redacted
    assert snap.manifest.settings["redaction"] is not None
    assert url + "/product/42" in snap.manifest.pages and url + "/" in snap.manifest.pages
    with Replay([snap.path], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        page = ctx.new_page()
        page.goto(url + "/old-product", wait_until="load")
        assert page.url == url + "/product/42" and page.inner_text("#name") == "Crunchy Snack 42"
        page.goto(url + "/", wait_until="load")
        assert page.inner_text("h1") == live == "Test Shop"
        ctx.close()
    stats = replay.stats()
    assert stats.exact >= 3, stats


def _entry(method: str, url: str, status: int, content: dict, *, headers=(), post=None, rtype="fetch",
           redirect: str = "") -> dict:
    request = {"method": method, "url": url, "httpVersion": "HTTP/2.0", "cookies": [], "queryString": [],
               "headers": [{"name": ":authority", "value": "shop.example.test"},
                           {"name": "cookie", "value": "sid=secret-cookie-value"}],
               "headersSize": -1, "bodySize": 0}
    if post is not None:
        request["postData"] = post
    return {
        "_resourceType": rtype, "startedDateTime": "2026-11-30T07:15:02.123Z", "time": 12.5,
        "serverIPAddress": "[::1]", "request": request,
        "response": {"status": status, "statusText": "", "httpVersion": "HTTP/2.0", "cookies": [],
                     "headers": [{"name": k, "value": v} for k, v in headers], "content": content,
                     "redirectURL": redirect, "headersSize": -1, "bodySize": -1, "_transferSize": 100},
        "cache": {}, "timings": {"send": 0, "wait": 10, "receive": 2.5},
    }


def test_devtools_har_bodies_statuses_post_redirect_and_empty(tmp_path, capsys):
    logo = png_bytes(8, 8, (10, 20, 30))
    html = "<html><h1>Caf\u00e9 shop</h1></html>"
    entries = [
        _entry("GET", ORIGIN + "/start", 301, {"size": 0, "mimeType": "x-unknown"},
               headers=[("location", "/")], rtype="document", redirect=ORIGIN + "/"),
        _entry("GET", ORIGIN + "/", 200, {"size": len(html), "mimeType": "text/html", "text": html},
               headers=[("content-type", "text/html; charset=utf-8"), ("content-encoding", "br"),
                        ("content-length", "17")], rtype="document"),
        _entry("GET", ORIGIN + "/logo.png", 200, {"size": len(logo), "mimeType": "image/png", "encoding": "base64",
                                                  "text": base64.b64encode(logo).decode()},
               headers=[("content-type", "image/png")], rtype="image"),
        _entry("POST", ORIGIN + "/api/login", 200, {"size": 9, "mimeType": "application/json", "text": '{"ok": 1}'},
               headers=[("content-type", "application/json")],
               post={"mimeType": "application/x-www-form-urlencoded", "text": "user=ann&password=hunter2"}),
        _entry("POST", ORIGIN + "/beacon", 204, {"size": 0, "mimeType": "x-unknown"}, rtype="ping"),
        _entry("GET", ORIGIN + "/blocked.js", 0, {"size": 0, "mimeType": "x-unknown"}, rtype="script"),
        _entry("GET", ORIGIN + "/not-kept.css", 200, {"size": 500, "mimeType": "text/css"},
               headers=[("content-type", "text/css")], rtype="stylesheet"),
        _entry("GET", "data:image/png;base64,AAAA", 200, {"size": 3, "mimeType": "image/png"}, rtype="image"),
        _entry("GET", "wss://shop.example.test/live", 101, {"size": 0, "mimeType": "x-unknown"}, rtype="websocket"),
    ]
    har = tmp_path / "devtools.har"
    har.write_text(json.dumps({"log": {"version": "1.2", "creator": {"name": "WebInspector", "version": "537.36"},
                                       "pages": [], "entries": entries}}))
    assert main(["snapshot", "import", str(har), "--task", "T", "--snapshots", str(tmp_path / "snaps"),
                 "--id", "d"]) == 0
    assert "1 websocket" in capsys.readouterr().out  # what was left out is shown
    snap = Snapshot.open(tmp_path / "snaps" / "T" / "d")
    served = _served(snap)
    assert set(served) == {("GET", ORIGIN + "/start"), ("GET", ORIGIN + "/"), ("GET", ORIGIN + "/logo.png"),
                           ("POST", ORIGIN + "/api/login"), ("POST", ORIGIN + "/beacon")}
    status, heads, body = served[("GET", ORIGIN + "/start")]
    assert (status, heads["location"], body) == (301, "/", b"")
    status, heads, body = served[("GET", ORIGIN + "/")]
    assert (status, body) == (200, html.encode("utf-8"))
    assert "content-encoding" not in heads and heads["content-length"] == str(len(html.encode("utf-8")))
    assert served[("GET", ORIGIN + "/logo.png")][::2] == (200, logo)
    assert served[("POST", ORIGIN + "/api/login")][::2] == (200, b'{"ok": 1}')
    assert served[("POST", ORIGIN + "/beacon")][::2] == (204, b"")
    bodies = _requests(snap)
    assert bodies[ORIGIN + "/api/login"] == f"user=ann&password={MARK}".encode()  # redacted as the recorder does
    raw = b"".join(r.block for r in snap.records())
    assert b"secret-cookie-value" not in raw and b"hunter2" not in raw
    assert snap.manifest.pages == [ORIGIN + "/"] and snap.manifest.start_url == ORIGIN + "/"
    assert any("1 without a response" in n and "1 whose body the HAR left out" in n and "1 not http(s)" in n
               and "1 websocket" in n for n in snap.manifest.notes)
    assert snap.record(next(e for e in snap.entries() if e.url == ORIGIN + "/logo.png")).ip == "::1"
    kept = import_warc(har, "T", tmp_path / "snaps", keep_credentials=True)
    assert _requests(kept)[ORIGIN + "/api/login"] == b"user=ann&password=hunter2"
    assert "redaction" not in kept.manifest.settings


def test_har_export_replays_in_playwright_route_from_har(chromium, tmp_path):
    snap_path = build_snapshot(tmp_path / "snaps")
    har = tmp_path / "shop.har"
    assert main(["snapshot", "export", str(snap_path), "--format", "har", "--out", str(har)]) == 0
    doc = json.loads(har.read_text())
    assert doc["log"]["version"] == "1.2" and len(doc["log"]["entries"]) == 7
    ctx = chromium.browser.new_context()  # no proxy: only the HAR can answer (nothing listens on BASE)
    ctx.route_from_har(str(har), not_found="abort")
    page = ctx.new_page()
    page.goto(f"{BASE}/start", wait_until="load")  # 302 -> /
    assert page.url == f"{BASE}/" and page.inner_text("h1") == "home"
    got = page.evaluate("""async () => {
        const js = await (await fetch('/app.js')).text();
        const feed = await (await fetch('/feed')).text();
        const logo = new Uint8Array(await (await fetch('/logo.png')).arrayBuffer());
        const post = await (await fetch('/search', {method: 'POST', body: 'q=red+shoes',
            headers: {'Content-Type': 'application/x-www-form-urlencoded'}})).text();
        let missing = 'served';
        try { await fetch('/not-recorded'); } catch (e) { missing = 'aborted'; }
        return {js: js.length, feed: [feed.length, feed.slice(0, 20)], logo: [logo.length, logo[255]], post, missing};
    }""")
    ctx.close()
    assert got == {"js": len("console.log('hi');") * 50, "feed": [20 * 40, '{"items": [1, 2, 3]}'], "logo": [2048, 255],
                   "post": "<p>3 results</p>", "missing": "aborted"}


def test_har_round_trip_gives_equal_captures(tmp_path):
    snap_path = build_snapshot(tmp_path / "snaps")
    har = tmp_path / "shop.har"
    export_snapshot(snap_path, har, "har")
    back = import_warc(har, "shop", tmp_path / "back")
    orig = Snapshot.open(snap_path)
    revisits = {e.offset for e in orig.entries() if e.record_type == "revisit"}
    assert len(revisits) == 1
    # every capture: url, time, method, status, HTTP head and payload served (the revisit comes back whole)
    served = sorted(((k[2], k[1], k[6], k[8], k[9], k[10]) for k in capture_key(orig)), key=repr)
    assert sorted(((k[2], k[1], k[6], k[8], k[9], k[10]) for k in capture_key(back)), key=repr) == served
    not_revisit = [k for k in capture_key(orig) if k[7] != "revisit"]
    assert [k for k in not_revisit if k not in capture_key(back)] == []  # the responses: every field equal
    assert back.manifest.pages == orig.manifest.pages and back.manifest.start_url == orig.manifest.start_url
    assert _requests(back)[f"{BASE}/search"] == b"q=red+shoes"
    assert verify_snapshot(back.path).ok


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("name,content,message", [
    ("x.foo", b"PK?not really anything", "x.foo: not a WARC, WACZ or HAR file (starts with b'PK?not really an')"),
    ("bad.har", b'{"log": {"entries": [', "bad.har: not a HAR file: not valid JSON"),
    ("nolog.har", b'{"log": {"version": "1.2"}}', "nolog.har: not a HAR file: no log.entries list"),
    ("list.json", b"[1, 2]", "list.json: not a WARC, WACZ or HAR file (starts with b'[1, 2]')"),
    ("list.har", b"[1, 2]", "list.har: not a HAR file: no log.entries list"),
    ("deep.har", b'{"log": ' + b"[" * 300 + b"]" * 300 + b"}", "deep.har: JSON nested more than 200 levels"),
    ("entry.har", b'{"log": {"entries": [{"request": {"method": "GET"}, "response": {}}]}}',
     "entry.har: not a valid HAR: entry 0 has no request.url"),
    ("b64.har", b'{"log": {"entries": [{"request": {"url": "http://a/"}, "response": {"status": 200, '
     b'"content": {"text": "@@", "encoding": "base64"}}}]}}', "b64.har: not a valid HAR: entry 0 response.content"),
])
def test_unknown_and_malformed_files_get_one_line_errors(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    snaps = tmp_path / "snaps"
    assert main(["snapshot", "import", str(path), "--task", "T", "--snapshots", str(snaps)]) == 1
    err = _err(capsys)
    assert err.startswith("error: ") and message in err, err
    assert not list((snaps / "T").glob("*")) if (snaps / "T").exists() else True


def test_har_size_limit_and_no_mixing(tmp_path, capsys, monkeypatch):
    snap_path = build_snapshot(tmp_path / "snaps")
    har, warc = tmp_path / "shop.har", tmp_path / "shop.warc.gz"
    export_snapshot(snap_path, har, "har")
    export_snapshot(snap_path, warc, "warc.gz")
    assert main(["snapshot", "import", str(har), str(warc), "--task", "T", "--snapshots", str(tmp_path / "o")]) == 1
    assert "a HAR file is imported on its own" in _err(capsys)
    monkeypatch.setenv("EGO2WEB_MAX_JSON_BYTES", "1024")
    assert main(["snapshot", "import", str(har), "--task", "T", "--snapshots", str(tmp_path / "o")]) == 1
    assert "over the limit of 1 KiB (EGO2WEB_MAX_JSON_BYTES)" in _err(capsys)
    assert not (tmp_path / "o" / "T").exists() or not list((tmp_path / "o" / "T").iterdir())



def test_har_export_counts_what_it_cannot_hold(tmp_path, capsys):
    from ego2web_replay.snapshots import SnapshotWriter

    w = SnapshotWriter(tmp_path / "snaps", "r", snapshot_id="s", start_url=f"{BASE}/")
    w.writer.write_exchange(url=f"{BASE}/", method="GET", request_headers=[], request_body=b"", status=200,
                            reason="OK", response_headers=[("Content-Type", "text/html")], response_body=b"<p>hi</p>")
    w.writer.write_record("resource", f"{BASE}/notes.txt", payload=b"a note", content_type="text/plain")
    w.finalize()
    har = tmp_path / "r.har"
    assert main(["snapshot", "export", str(w.path), "--format", "har", "--out", str(har)]) == 0
    assert "exported 1 entries" in (out := capsys.readouterr().out) and "1 captures with no HTTP response left out" in out
    assert [e["request"]["url"] for e in json.loads(har.read_text())["log"]["entries"]] == [f"{BASE}/"]
