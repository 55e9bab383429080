"""``--agent browser-use``: the real browser-use package, Debian's Chromium, a real local model server.

One demo task that types (search the shop), clicks and answers. The live
episode runs against the demo site through the recording proxy and archives
what it read; then the site is stopped, a stand-in "live" server takes its
port, and the frozen episode replays the live archive: no miss, and not one
request reaches the stand-in (browser-use's Chromium has no loopback bypass).
browser-use's model is a scripted OpenAI-compatible server on 127.0.0.1 that
answers browser-use's structured-output actions from the page state it is sent.
A third episode replays an HTTPS site on a real host name: Chromium trusts the
replay's certificates through the SPKI pin alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ego2web_replay.cli import main
from ego2web_replay.judge.episode import load_episode
from ego2web_replay.judge.pages import SnapshotPages
from ego2web_replay.models import PageCapture, episode_dir, load_trajectory, read_model
from ego2web_replay.runner.agent_folder import PREFIX
from ego2web_replay.runner.run import RunSettings, run_suite
from ego2web_replay.tasks import load_tasks
from ego2web_replay.testing.browser_use_llm import Act, BrowserUsePlan
from ego2web_replay.testing.openai_server import FakeOpenAIServer
from ego2web_replay.testing.standin import StandIn

pytest.importorskip("browser_use")
pytestmark = pytest.mark.slow  # Chromium, browser-use, the demo site

TASK = "shop-snack-calories"
PRICE = "Price: $3.49"  # written into the snack's page by its script; the page as served says "Price: …"
KEYFRAMES = 4


def _plan() -> BrowserUsePlan:
    return BrowserUsePlan({
        "/shop/search": [Act("click", element="Crunchy Corn Snack")],
        "/shop/item/": [Act("done", text="150 kcal", success=True)],
        "/shop": [Act("input", element="id=q", text="crunchy"), Act("send_keys", keys="Enter")],
    })


def _run(suite: Any, out: Path, srv: FakeOpenAIServer, agent: dict[str, Any] | None = None, **settings: Any) -> Any:
    base = {"guard": "loopback", "timeout_s": 180, "max_steps": 8,
            "inputs": {"modality": "keyframes", "keyframes": KEYFRAMES, "max_side": 64}}
    base.update(settings)
    run_dir, (summary,) = run_suite(suite, agent_name="browser-use", out=out, settings=RunSettings(**base),
                                    agent_settings={"model": "fake-browser-use-model", "base_url": srv.base_url,
                                                    **(agent or {})})
    return run_dir, summary


def _image_sizes(call: dict[str, Any]) -> list[tuple[int, int]]:
    """Width and height of every image in the last message of a model call."""
    import base64
    import io

    from PIL import Image

    out = []
    for part in call["messages"][-1]["content"]:
        if part.get("type") == "image_url":
            data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
            out.append(Image.open(io.BytesIO(data)).size)
    return out


@pytest.fixture(scope="module")
def episodes(tmp_path_factory, ca):
    """The live episode (site up), then the frozen one (site stopped, a stand-in on its port)."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite

    root = tmp_path_factory.mktemp("browser-use")
    site = DemoSite().start()
    suite_path = write_demo_suite(root / "suite", site.url, [TASK])
    task = json.loads(suite_path.read_text("utf-8").splitlines()[0])
    # the snack's price is written into its page by a script: only the rendered page holds it
    task["must_match"].append(PRICE)
    task["rubric"] = {"id": "root", "children": [
        {"id": "price-page", "check": {"type": "page_contains", "url": f"{site.url}/shop/item/4", "text": PRICE}}]}
    suite_path.write_text(json.dumps(task) + "\n", "utf-8")
    suite = load_tasks(suite_path)
    live_plan, frozen_plan = _plan(), _plan()
    try:
        with FakeOpenAIServer(live_plan) as srv:
            live_dir, live = _run(suite, root / "runs", srv, mode="live")
            live_calls = list(srv.requests)
    finally:
        site.stop()
    snapshots = episode_dir(live_dir, TASK, "live") / "snapshots"
    stand_in = StandIn().start(port=site.port)  # the "live" origin answers again, but not from the site
    try:
        with FakeOpenAIServer(frozen_plan) as srv:
            frozen_dir, frozen = _run(suite, root / "runs", srv, {"image_max_side": 640}, mode="frozen",
                                      snapshots_root=str(snapshots))
            frozen_calls = list(srv.requests)
    finally:
        stand_in.stop()
    return {"site": site, "live": live, "frozen": frozen, "stand_in": stand_in.requests,
            "live_plan": live_plan, "frozen_plan": frozen_plan, "live_calls": live_calls,
            "frozen_calls": frozen_calls, "live_dir": live_dir, "frozen_dir": frozen_dir, "root": root}


def test_live_episode_converts_typed_text_xpath_and_after_action_urls(episodes):
    s, site = episodes["live"], episodes["site"]
    assert s.ok and s.answer == "150 kcal", s.error
    assert not episodes["live_plan"].errors
    traj = load_trajectory(s.path / "trajectory.json")
    assert traj.agent.name == "browser-use" and traj.agent.settings["browser_use_version"].startswith("0.")
    kinds = [st.action.kind for st in traj.steps]
    assert kinds == ["goto", "type", "press", "click", "answer"], kinds
    goto, typed, press, click, answer = traj.steps
    assert goto.action.url == f"{site.url}/shop"
    assert typed.action.value == "crunchy" and typed.action.selector.startswith("xpath=/")
    assert "input" in typed.action.selector
    assert press.action.key == "Enter"
    assert click.action.selector.startswith("xpath=/") and "/a" in click.action.selector
    # the URL each step carries is the page AFTER its action
    assert goto.url == f"{site.url}/shop"
    assert press.url == f"{site.url}/shop/search?q=crunchy"
    assert click.url == f"{site.url}/shop/item/4"
    assert answer.action.answer == "150 kcal" and answer.url == f"{site.url}/shop/item/4"
    assert click.thought and "/shop/search" in click.thought
    assert all(st.duration_s is not None and st.started_at is not None for st in traj.steps)
    assert traj.extra["usage"]["calls"] == len(episodes["live_calls"]) == 3
    # screenshots were copied into the episode, not left in browser-use's temporary folder
    shots = [st.screenshot for st in traj.steps if st.screenshot]
    assert shots and all((s.path / shot).is_file() for shot in shots)
    assert all(not Path(shot).is_absolute() for shot in shots)
    # the live run's archive holds the pages browser-use read through the proxy
    index = (next((s.path / "snapshots" / TASK).iterdir()) / "index.cdxj").read_text("utf-8")
    assert "/shop/search?q=crunchy" in index and "/shop/item/4" in index


def test_frozen_episode_with_the_site_stopped_reads_only_the_snapshot(episodes):
    live, frozen = episodes["live"], episodes["frozen"]
    assert frozen.ok and frozen.answer == "150 kcal", frozen.error
    assert not episodes["frozen_plan"].errors
    traj = load_trajectory(frozen.path / "trajectory.json")
    assert traj.replay is not None and traj.replay.miss == 0 and traj.replay.exact > 0, traj.replay
    assert episodes["stand_in"] == []  # not one request went around the proxy to the "live" origin
    live_traj = load_trajectory(live.path / "trajectory.json")
    assert [st.url for st in traj.steps] == [st.url for st in live_traj.steps]
    assert [st.action.value for st in traj.steps] == [st.action.value for st in live_traj.steps]
    # the model saw the same pages live and frozen
    assert episodes["frozen_plan"].urls == episodes["live_plan"].urls


@pytest.mark.parametrize("mode", ["live", "frozen"])
def test_every_browser_use_step_keeps_the_page_as_rendered(episodes, mode):
    site, ep = episodes["site"], episodes[mode].path
    traj = load_trajectory(ep / "trajectory.json")
    # one capture per browser-use step, after its last action (input and Enter are one step: one page)
    assert [st.page for st in traj.steps] == [f"agent/pages/step-{i:03d}.json" if i != 1 else None for i in range(5)]
    captures = [read_model(ep / st.page, PageCapture, "page capture") for st in traj.steps if st.page]
    assert [c.step for c in captures] == [0, 2, 3, 4] and all(c.error is None for c in captures)
    assert [c.url for c in captures] == [st.url for st in traj.steps if st.page]
    assert captures[0].title and "Crunchy Corn Snack" in captures[0].text
    assert "Crunchy Corn Snack" in captures[1].text and "Salted Pretzel Bites" not in captures[1].text
    for after in captures[2:]:  # the snack's page, its price as the page's script wrote it
        assert after.url == f"{site.url}/shop/item/4" and PRICE in after.text and "150" in after.text
        assert after.dom.startswith("agent/pages/") and "$3.49</span>" in (ep / after.dom).read_text("utf-8")
    archived = SnapshotPages(load_episode(ep).snapshot_dirs()).get_text(f"{site.url}/shop/item/4")
    assert archived is not None and "Price: …" in archived and "$3.49" not in archived


@pytest.mark.parametrize("judge", ["rule", "rubric"])
def test_judges_read_the_browser_use_pages_as_rendered(episodes, judge):
    item = f"{episodes['site'].url}/shop/item/4"
    for mode, run in (("live", episodes["live_dir"]), ("frozen", episodes["frozen_dir"])):
        assert main(["judge", "run", str(run), "--judge", judge, "--no-db",
                     "--cache-dir", str(episodes["root"] / "cache")]) == 0
        verdict = json.loads((episode_dir(run, TASK, mode) / f"verdicts/{judge}.json").read_text("utf-8"))
        if judge == "rule":
            cue = next(c for c in verdict["checks"] if c["kind"] == "must_match" and c["cue"] == PRICE)
            assert cue["passed"] and cue["detail"] == "found", cue
        else:
            node = next(c for c in verdict["checks"] if c["kind"] == "rubric_node" and c["id"] == "price-page")
            assert node["status"] == "passed", node
            assert re.fullmatch(rf"found on {re.escape(item)} \(rendered after step [34]\)", node["detail"]), node
            reads = next(c for c in verdict["checks"] if c["kind"] == "rubric_pages")["pages"]
            assert reads and all(p["origin"] == "rendered" for p in reads), reads


def test_model_is_sent_keyframes_of_the_whole_video_and_the_start_url(episodes):
    calls = episodes["live_calls"]
    assert len(calls) == 3  # search, click, done: the start URL is opened without a model call
    first = calls[0]["messages"][-1]["content"]
    images = [p for p in first if p.get("type") == "image_url"]
    assert len(images) == KEYFRAMES + 1  # the video's keyframes and the page screenshot
    text = "\n".join(p.get("text", "") for p in first if p.get("type") == "text")
    assert f"{episodes['site'].url}/shop" in text and "keyframes sampled over the whole video" in text
    traj = load_trajectory(episodes["live"].path / "trajectory.json")
    stamps = traj.extra["inputs"]["frames"]
    assert len(stamps) == KEYFRAMES and stamps[-1] > stamps[0] and stamps[0] < 2.0
    assert calls[0]["response_format"]["json_schema"]["name"] == "agent_output"
    sent = json.dumps(calls)  # every request was plain JSON
    # the frames were read from the episode's private copies; no path to the suite or the run reaches the model
    assert str(episodes["live_dir"].parent.parent) not in sent and ".keyframes" not in sent
    handed = json.loads((episodes["live"].path / "inputs.json").read_text("utf-8"))
    assert len(handed["frames"]) == KEYFRAMES
    assert all(Path(f["path"]).parent.parent.name.startswith(PREFIX) for f in handed["frames"])


def test_frozen_https_site_through_the_ca_pin(tmp_path, ca):
    """An HTTPS site on a real host name, frozen: browser-use's Chromium trusts the replay's certificates
    through the SPKI pin alone, and every request is answered from the snapshot."""
    from datetime import datetime

    from ego2web_replay.png import png_bytes
    from ego2web_replay.snapshots.snapshot import SnapshotWriter

    html = "text/html"
    pages = {"https://shop.example/": (html, b"<title>Shop</title><h1>Shop</h1><a href='/item'>Blue Mug</a>"),
             "https://shop.example/item": (html, b"<title>Blue Mug</title><h1>Blue Mug</h1><p id=price>$7.00</p>"),
             "https://shop.example/favicon.ico": ("image/png", png_bytes(16, 16, (0, 0, 200)))}  # Chromium asks
    sw = SnapshotWriter(tmp_path / "snapshots", "https-shop")
    for url, (ctype, body) in pages.items():
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Accept", "*/*")], request_body=b"",
                                 status=200, reason="OK", response_headers=[("Content-Type", ctype)],
                                 response_body=body, date=datetime(2026, 1, 2, 3, 4, 5))
        if ctype == html:
            sw.add_page(url)
    sw.finalize()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "https-shop", "instruction": "What does the blue mug cost?",
                                 "start_url": "https://shop.example/", "allowed_domains": ["shop.example"]}) + "\n")
    plan = BrowserUsePlan({"/item": [Act("done", text="$7.00", success=True)],
                           "shop.example/": [Act("click", element="Blue Mug")]})
    with FakeOpenAIServer(plan) as srv:
        _, s = _run(load_tasks(tasks), tmp_path / "runs", srv, mode="frozen",
                    snapshots_root=str(tmp_path / "snapshots"), inputs={"modality": "none"})
    assert s.ok and s.answer == "$7.00", s.error
    traj = load_trajectory(s.path / "trajectory.json")
    assert traj.replay.miss == 0, traj.replay.missed_urls
    served = {(e.url, e.outcome) for e in traj.replay.log}
    assert {("https://shop.example/", "exact"), ("https://shop.example/item", "exact")} <= served
    assert [st.url for st in traj.steps] == ["https://shop.example/", "https://shop.example/item",
                                             "https://shop.example/item"]


def test_image_size_resizes_the_screenshots_browser_use_sends(episodes):
    # live: the whole 1280x800 viewport; frozen was run with --image-size 640: the same shape, halved
    live = [size for call in episodes["live_calls"] for size in _image_sizes(call) if max(size) > 64]
    frozen = [size for call in episodes["frozen_calls"] for size in _image_sizes(call) if max(size) > 64]
    assert live and set(live) == {(1280, 800)}
    assert frozen and set(frozen) == {(640, 400)}


def test_image_size_too_small_for_browser_use_is_one_clear_error():
    from ego2web_replay.agents.browser_use_agent import BrowserUseAgent
    from ego2web_replay.errors import AgentError

    with pytest.raises(AgentError, match="at least 100 pixels a side.*use 160 or more"):
        BrowserUseAgent(model="m", base_url="http://127.0.0.1:9/v1", image_max_side=150)
