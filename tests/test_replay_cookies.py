"""Cookies set with an ``Expires`` date live in replay as long as they lived live.

A page recorded in June 2025 set a session cookie for half an hour and a consent choice for a year.
Replayed later with the archived dates, both would be expired on arrival and dropped by the browser,
so the page would meet the agent as a new visitor (the consent banner back over the page) and nothing
would say why. Replay moves each ``Set-Cookie``'s ``Expires`` by the same amount as ``Date`` (as it
moves ``Expires`` and ``Last-Modified``), so Chromium keeps both; a deletion stays a deletion.
"""

from __future__ import annotations

import time
from datetime import datetime

from ego2web_replay.replay.session import Replay
from ego2web_replay.snapshots.snapshot import SnapshotWriter

PAGE = b"""<!doctype html><title>shop</title><body><script>
window.addEventListener('load', () => { document.body.dataset.cookies = document.cookie.split('; ').sort().join(' '); });
</script>a shop</body>"""


def test_cookies_recorded_with_an_expiry_are_kept_by_chromium_in_replay(chromium, ca, tmp_path):
    sw = SnapshotWriter(tmp_path, "cookies")
    sw.writer.write_exchange(
        url="https://shop.example/", method="GET", request_headers=[], request_body=b"", status=200, reason="OK",
        response_headers=[("Date", "Sun, 01 Jun 2025 10:00:00 GMT"), ("Content-Type", "text/html"),
                          ("Set-Cookie", "sid=abc; Expires=Sun, 01 Jun 2025 10:30:00 GMT; Path=/; Secure"),
                          ("Set-Cookie", "consent=yes; path=/; expires=Mon, 01-Jun-2026 10:00:00 GMT"),
                          ("Set-Cookie", "old=1; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/"),
                          ("Set-Cookie", "visit=1; Path=/")],
        response_body=PAGE, date=datetime(2025, 6, 1, 10, 0, 0))
    sw.finalize()
    with Replay([sw.path], ca=ca) as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url)
        page = ctx.new_page()
        page.goto("https://shop.example/")
        page.wait_for_selector("body[data-cookies]", state="attached", timeout=20_000)
        seen = page.evaluate("() => document.body.dataset.cookies")
        stored = {c["name"]: c["expires"] for c in ctx.cookies()}
        ctx.close()
    assert seen == "consent=yes sid=abc visit=1"  # the deleted one stays deleted
    now = time.time()
    assert stored["visit"] == -1  # a session cookie, as recorded
    assert abs(stored["sid"] - (now + 1800)) < 600 and abs(stored["consent"] - (now + 365 * 86400)) < 86400


SCRIPTED = b"""<!doctype html><title>consent</title><body><script>
const day = 864e5;
document.cookie = "consent=yes; path=/; expires=" + new Date(Date.now() + 365 * day).toUTCString();
document.cookie = "cart=3; path=/; expires=" + new Date(Date.now() + 30 * 60e3).toUTCString();
document.cookie = "gone=1; path=/";
document.cookie = "gone=; path=/; expires=" + new Date(Date.now() - day).toUTCString();
document.cookie = "own=1; path=/; max-age=120";
window.addEventListener('load', () => { document.body.dataset.cookies = document.cookie.split('; ').sort().join(' '); });
</script>a shop</body>"""


def test_cookies_a_script_sets_from_the_frozen_clock_are_kept_by_chromium(chromium, ca, tmp_path):
    """Page scripts read the frozen clock (the capture time, June 2025): an ``expires`` they compute
    from it lies in the past of the browser's cookie jar. The determinism script gives the same
    lifetime as ``max-age``, so the consent choice and the cart live a year and half an hour from now,
    and a deletion still deletes."""
    sw = SnapshotWriter(tmp_path, "scripted-cookies", source="import")  # dated by its capture, June 2025
    sw.writer.write_exchange(
        url="https://shop.example/consent", method="GET", request_headers=[], request_body=b"", status=200,
        reason="OK", response_headers=[("Date", "Sun, 01 Jun 2025 10:00:00 GMT"), ("Content-Type", "text/html")],
        response_body=SCRIPTED, date=datetime(2025, 6, 1, 10, 0, 0))
    sw.finalize()
    with Replay([sw.path], ca=ca) as replay:  # the determinism script is on (the default)
        ctx = chromium.new_context(proxy_url=replay.proxy_url)
        page = ctx.new_page()
        page.goto("https://shop.example/consent")
        page.wait_for_selector("body[data-cookies]", state="attached", timeout=20_000)
        seen = page.evaluate("() => document.body.dataset.cookies")
        frozen_year = page.evaluate("() => new Date().getUTCFullYear()")
        stored = {c["name"]: c["expires"] for c in ctx.cookies()}
        ctx.close()
    assert frozen_year == 2025  # the page's clock is the capture's
    assert seen == "cart=3 consent=yes own=1"
    now = time.time()
    assert abs(stored["consent"] - (now + 365 * 86400)) < 86400 and abs(stored["cart"] - (now + 1800)) < 600
    assert abs(stored["own"] - (now + 120)) < 60
