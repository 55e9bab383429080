"""The freeze script (virtual clock, seeded randomness) and its HTML injection.

The browser tests use real Chromium on a local http.server; Chromium is
started once per module and can reach nothing but 127.0.0.1.
"""

from __future__ import annotations

import gzip
import http.server
import json
import threading
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import brotli
import pytest
import zstandard

from ego2web_replay.replay.freeze import (
    freeze_script,
    inject_into_html,
    parse_warc_timestamp,
    script_hash,
)

CHROMIUM = Path("/usr/lib/chromium/chromium")
CAPTURE = datetime(2024, 4, 5, 10, 0, 0, tzinfo=UTC)
CAPTURE_MS = 1712311200000
SCRIPT = "window.__frozen = 1;"

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>clock</title></head>
<body><pre id="out">waiting</pre>
<script nonce="abc">
var first = {now: Date.now(), iso: new Date().toISOString(), perf: performance.now(), rnd: [Math.random(), Math.random()],
             grv: Array.from(crypto.getRandomValues(new Uint32Array(4))), uuid: crypto.randomUUID()};
setTimeout(function () {
  var later = {now: Date.now(), iso: new Date().toISOString(), perf: performance.now(), rnd: Math.random(),
               grv: Array.from(crypto.getRandomValues(new Uint8Array(6)))};
  document.getElementById("out").textContent = JSON.stringify({first: first, later: later});
}, 100);
</script></body></html>
"""


# ---- pure functions ------------------------------------------------------------


def test_freeze_script_carries_time_and_seed():
    script = freeze_script(CAPTURE, seed=42)
    assert f'"timeMs": {CAPTURE_MS}' in script and '"seed": 42' in script
    assert "</script" not in script.lower()
    assert freeze_script(CAPTURE.replace(tzinfo=None)) == freeze_script(CAPTURE)  # naive = UTC
    assert freeze_script(CAPTURE, 1) != freeze_script(CAPTURE, 2)
    assert parse_warc_timestamp("20240405100000") == CAPTURE


def test_inject_plain_html_after_meta_charset_and_fix_length():
    body = b"<!DOCTYPE html><html><head><meta charset=utf-8><title>x</title></head><body>hi</body></html>"
    headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body))), ("Set-Cookie", "a=1")]
    out, out_headers = inject_into_html(body, headers, SCRIPT)
    assert out == body.replace(b"<meta charset=utf-8>", b"<meta charset=utf-8><script>" + SCRIPT.encode() + b"</script>")
    assert ("Content-Length", str(len(out))) in out_headers
    assert [h for h in out_headers if h[0] == "Content-Length"] == [("Content-Length", str(len(out)))]
    assert ("Set-Cookie", "a=1") in out_headers


@pytest.mark.parametrize(
    ("html", "before"),
    [
        (b"<html><HEAD lang=en><title>x</title></head></html>", b"<title>"),  # after <head>
        (b"<html><head><script>a()</script><meta charset=utf-8></head></html>", b"<script>a()"),  # charset after a script: use <head>
        (b"<!doctype html><html lang=en><body>x</body></html>", b"<body>"),  # no head: after <html>
        (b"<!doctype html>\n<p>bare", b"\n<p>bare"),  # no html: after the doctype
        (b"<header>no head here</header>", b"<header>"),  # <header> is not <head>
    ],
)
def test_insertion_points(html: bytes, before: bytes):
    out, _ = inject_into_html(html, [("Content-Type", "text/html")], SCRIPT)
    tag = b"<script>" + SCRIPT.encode() + b"</script>"
    assert out.count(tag) == 1
    assert out.index(tag) + len(tag) == out.index(before)


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),
        ("br", brotli.compress),
        ("zstd", lambda b: zstandard.ZstdCompressor().compress(b)),
        ("gzip, br", lambda b: brotli.compress(gzip.compress(b))),
    ],
)
def test_encoded_bodies_are_decoded_and_served_identity(coding: str, encode):
    body = encode(PAGE)
    out, headers = inject_into_html(body, [("Content-Type", "text/html"), ("Content-Encoding", coding),
                                           ("Transfer-Encoding", "chunked")], SCRIPT)
    assert out.startswith(b"<!doctype html>\n<html><head><meta charset=\"utf-8\"><script>window.__frozen")
    assert out.replace(b"<script>" + SCRIPT.encode() + b"</script>", b"") == PAGE
    names = [n.lower() for n, _ in headers]
    assert "content-encoding" not in names and "transfer-encoding" not in names
    assert ("Content-Length", str(len(out))) in headers


def test_untouched_cases():
    js = [("Content-Type", "application/javascript")]
    assert inject_into_html(b"var x;", js, SCRIPT) == (b"var x;", js)
    unknown = [("Content-Type", "text/html"), ("Content-Encoding", "compress")]
    assert inject_into_html(b"\x1f\x9d...", unknown, SCRIPT) == (b"\x1f\x9d...", unknown)
    corrupt = [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
    assert inject_into_html(b"not gzip", corrupt, SCRIPT) == (b"not gzip", corrupt)
    html = [("Content-Type", "text/html")]
    assert inject_into_html(b"", html, SCRIPT) == (b"", html)
    # no Content-Type: sniff
    out, _ = inject_into_html(b"<!DOCTYPE html><p>x", [], SCRIPT)
    assert b"<script>" in out
    assert inject_into_html(b"{\"a\": 1}", [], SCRIPT)[0] == b"{\"a\": 1}"
    with pytest.raises(ValueError):
        inject_into_html(b"<html>", html, "a('</script>')")


def test_utf16_pages_are_transcoded_around_the_script():
    body = "<html><head><title>é</title></head></html>".encode("utf-16")
    out, _ = inject_into_html(body, [("Content-Type", "text/html; charset=utf-16")], SCRIPT)
    assert out.decode("utf-16") == f"<html><head><script>{SCRIPT}</script><title>é</title></head></html>"


def test_csp_gets_the_script_hash():
    source = script_hash(SCRIPT)

    def csp(policy: str) -> str:
        _, headers = inject_into_html(b"<html><head></head></html>",
                                      [("Content-Type", "text/html"), ("Content-Security-Policy", policy)], SCRIPT)
        return dict(headers)["Content-Security-Policy"]

    assert csp("script-src 'self' 'nonce-abc'") == f"script-src 'self' 'nonce-abc' {source}"
    assert csp("default-src 'self'; img-src *") == f"default-src 'self'; img-src *; script-src 'self' {source}"
    assert csp("script-src 'none'") == f"script-src {source}"
    assert csp("script-src 'self' 'unsafe-inline'") == "script-src 'self' 'unsafe-inline'"  # already allowed
    assert csp("img-src *") == "img-src *"  # scripts unrestricted
    assert csp("script-src-elem 'self'; script-src 'self'") == f"script-src-elem 'self' {source}; script-src 'self' {source}"


def test_meta_csp_gets_the_script_hash():
    source = script_hash(SCRIPT)
    page = (b"<html><head><meta http-equiv='Content-Security-Policy' content='script-src &#39;self&#39;'>"
            b"<meta charset=utf-8></head></html>")
    out, _ = inject_into_html(page, [("Content-Type", "text/html")], SCRIPT)
    expected_meta = f'<meta http-equiv=\'Content-Security-Policy\' content="script-src &#x27;self&#x27; {source.replace(chr(39), "&#x27;")}">'
    assert out.startswith(b"<html><head>" + expected_meta.encode())
    unrelated = b"<html><head><meta name=description content='security-first'></head></html>"
    assert inject_into_html(unrelated, [("Content-Type", "text/html")], SCRIPT)[0].startswith(unrelated[:12] + b"<script>")


# ---- real Chromium ------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True
    pages: dict[str, tuple[bytes, list[tuple[str, str]]]] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path not in self.pages:
            self.send_error(404)
            return
        body, headers = self.pages[self.path]
        self.send_response(200)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    csp = [("Content-Security-Policy", "script-src 'nonce-abc'")]
    archived = gzip.compress(PAGE)
    archived_headers = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip"),
                        ("Content-Length", str(len(archived))), *csp]
    injected, injected_headers = inject_into_html(archived, archived_headers, freeze_script(CAPTURE, seed=7))
    meta_page = PAGE.replace(b"<head>", b"<head><meta http-equiv=\"Content-Security-Policy\" content=\"script-src 'nonce-abc'\">")
    meta_injected, meta_headers = inject_into_html(meta_page, [("Content-Type", "text/html")], freeze_script(CAPTURE, seed=7))
    _Handler.pages = {
        "/meta-csp": (meta_injected, meta_headers),
        "/plain": (PAGE, [("Content-Type", "text/html"), ("Content-Length", str(len(PAGE)))]),
        "/injected": (injected, injected_headers),
        # the same bytes with the archived CSP left as it was: the browser must block the script
        "/csp-unpatched": (injected, [h for h in injected_headers if h[0] != "Content-Security-Policy"] + csp),
    }
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(playwright) -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed at /usr/lib/chromium/chromium")
    p = playwright
    if True:  # one Playwright per test session (conftest): a second would clash with its event loop
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--no-first-run", "--disable-sync",
                  # nothing but loopback: other hosts go to a closed port and never resolve
                  "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"],
        )
        yield browser
        browser.close()


def _render(browser, url: str, init_script: str | None = None) -> dict:
    context = browser.new_context()
    try:
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        page.goto(url)
        # a locator, not wait_for_function: that evaluates a string, which a strict CSP forbids
        page.locator("#out", has_not_text="waiting").wait_for(timeout=10_000)
        return json.loads(page.inner_text("#out"))
    finally:
        context.close()


def _check_frozen(result: dict) -> None:
    assert result["first"]["now"] == CAPTURE_MS
    assert result["first"]["iso"] == "2024-04-05T10:00:00.000Z"
    assert result["later"]["now"] == CAPTURE_MS + 100  # the timer's due time, not the real delay
    assert result["later"]["iso"] == "2024-04-05T10:00:00.100Z"
    assert 0 <= result["first"]["perf"] < 1 and 100 <= result["later"]["perf"] < 101
    assert len(result["first"]["grv"]) == 4 and len(result["later"]["grv"]) == 6
    assert all(0 <= v < 256 for v in result["later"]["grv"])
    uuid = result["first"]["uuid"]
    assert len(uuid) == 36 and uuid[14] == "4" and uuid[19] in "89ab"


@pytest.mark.slow
def test_chromium_injected_html_renders_identically(browser, site):
    one = _render(browser, site + "/injected")
    two = _render(browser, site + "/injected")
    assert one == two
    _check_frozen(one)
    # a <meta> CSP ahead of the injected script lets it run too (its hash was added)
    assert _render(browser, site + "/meta-csp") == one


@pytest.mark.slow
def test_chromium_init_script_renders_identically_and_matches_injection(browser, site):
    script = freeze_script(CAPTURE, seed=7)
    one = _render(browser, site + "/plain", script)
    two = _render(browser, site + "/plain", script)
    assert one == two
    _check_frozen(one)
    # the same seed gives the same numbers whichever way the script was installed
    assert one == _render(browser, site + "/injected")
    # both at once: the second copy does nothing
    assert _render(browser, site + "/injected", script) == one
    other_seed = _render(browser, site + "/plain", freeze_script(CAPTURE, seed=8))
    assert other_seed["first"]["rnd"] != one["first"]["rnd"]


@pytest.mark.slow
def test_chromium_without_freeze_differs(browser, site):
    # the control: without the script two loads differ, so the tests above can fail
    one = _render(browser, site + "/plain")
    two = _render(browser, site + "/plain")
    assert one["first"]["rnd"] != two["first"]["rnd"]
    assert one["first"]["now"] != CAPTURE_MS
    # and without the CSP hash the injected script is blocked
    assert _render(browser, site + "/csp-unpatched")["first"]["now"] != CAPTURE_MS
