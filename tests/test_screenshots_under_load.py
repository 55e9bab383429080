"""Screenshots stable under load: two frozen replays of an animated page give identical screenshots while
other processes keep the CPU busy (page time is settled before each screenshot)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ego2web_replay.browser import take_screenshot
from ego2web_replay.recorder.session import LiveRecording, RecordOptions
from ego2web_replay.replay.session import Replay
from ego2web_replay.tasks import Task
from ego2web_replay.testing.site import TestSite

pytestmark = pytest.mark.slow

ANIMATED = b"""<!doctype html><html><head><meta charset="utf-8"><title>Animated</title><style>
body { margin: 0; height: 4000px; background: linear-gradient(#fff, #036); }
#box { position: fixed; top: 40px; left: 0; width: 60px; height: 60px; background: #c30; }
#grow { position: fixed; top: 120px; left: 10px; height: 30px; width: 10px; background: #093;
        transition: width 2s linear; }
#grow.wide { width: 400px; }
#count { position: fixed; top: 170px; left: 10px; font: 20px monospace; }
</style></head><body>
<div id="box"></div><div id="grow"></div><div id="count">0</div>
<script>
// a smooth-scroll loop of short timeouts
let y = 0;
function scrollStep() { y += 25; window.scrollTo(0, y); if (y < 1500) setTimeout(scrollStep, 16); }
setTimeout(scrollStep, 16);
// a requestAnimationFrame animation of 150 frames
let frames = 0;
function move() { frames += 1; document.getElementById('box').style.left = (frames * 3) + 'px';
  document.getElementById('count').textContent = String(frames); if (frames < 150) requestAnimationFrame(move); }
requestAnimationFrame(move);
// a CSS transition
requestAnimationFrame(() => document.getElementById('grow').classList.add('wide'));
</script></body></html>"""

HOG = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"


@pytest.fixture()
def cpu_hogs():
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(max(2, os.cpu_count() or 2))]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _shot(chromium, ca, snap, url: str, out) -> bytes:
    with Replay([snap], ca=ca, guard_mode="loopback") as replay:
        ctx = chromium.new_context(proxy_url=replay.proxy_url, init_scripts=[replay.init_script])
        page = ctx.new_page()
        page.goto(url, wait_until="load", timeout=30_000)
        take_screenshot(page, out)  # at once: the animations are still running in real time
        state = page.evaluate("() => [window.scrollY, document.getElementById('count').textContent]")
        ctx.close()
    assert state == [1500, "150"]  # the scroll loop and the animation have run to their end
    return out.read_bytes()


def test_animated_page_screenshots_identical_under_load(chromium, ca, tmp_path, cpu_hogs):
    site = TestSite(tmp_path / "site", https=False)
    site.extra["/animated"] = (200, "text/html; charset=utf-8", ANIMATED)
    site.extra["/favicon.ico"] = (204, "image/x-icon", b"")
    url = ""
    with site:
        url = site.http_url + "/animated"
        task = Task(id="animated", instruction="x", start_url=url)
        with LiveRecording(task, tmp_path / "snaps", RecordOptions(guard="loopback"), ca=ca) as live:
            ctx = chromium.new_context(proxy_url=live.proxy_url)
            ctx.new_page().goto(url, wait_until="load")
            ctx.close()
    assert live.ok and live.snapshot_path is not None
    first = _shot(chromium, ca, live.snapshot_path, url, tmp_path / "a.png")
    second = _shot(chromium, ca, live.snapshot_path, url, tmp_path / "b.png")
    assert first == second
