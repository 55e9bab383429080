"""Page checks read the page as rendered: real Chromium, the demo site on 127.0.0.1, live and frozen episodes.

The demo shop's product page is served with ``Price: …``; a script fetches the
price and writes it into the page. The archive holds the page as served, so
only the rendered text, kept after every step, shows the price the agent saw.
The rubric judge reads the rendered text for pages the agent opened and falls
back to the archive only for a cited page it never opened, saying so; the
claim verifier runs against the local OpenAI-compatible server with its
default three votes.
"""

from __future__ import annotations

import json
import re

import pytest

from ego2web_replay.cli import main
from ego2web_replay.judge.episode import load_episode
from ego2web_replay.judge.pages import SnapshotPages
from ego2web_replay.models import PageCapture, episode_dir, load_trajectory, read_model
from ego2web_replay.testing.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.slow

MUG = "shop-mug-price"


@pytest.fixture(scope="module")
def episodes(tmp_path_factory, ca):
    """MUG recorded with a detour to the bottle's page (in the snapshot, never opened by the agent), then run
    live and frozen by the scripted agent, whose answer cites both product pages."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.models import Action
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks

    root = tmp_path_factory.mktemp("rendered")
    site = DemoSite().start()
    suite_path = write_demo_suite(root / "suite", site.url, [MUG])
    task = json.loads(suite_path.read_text("utf-8").splitlines()[0])
    mug, bottle = f"{site.url}/shop/item/7", f"{site.url}/shop/item/3"
    answer = f"The Red Ceramic Mug costs $12.99 (see {mug}). The Blue Water Bottle costs $9.50 ({bottle})."
    task["reference_actions"][-1] = {"kind": "answer", "answer": answer}
    task["rubric"] = {"id": "root", "children": [
        {"id": "mug-page", "check": {"type": "page_contains", "url": mug, "text": "Price: $12.99"}},
        {"id": "bottle-cited", "check": {"type": "cited_url", "pattern": "/item/3", "text": "Blue Water Bottle"}},
        {"id": "mug-price", "check": {"type": "llm_claim", "claim": "The Red Ceramic Mug costs $12.99"}},
        {"id": "bottle-price", "check": {"type": "llm_claim", "claim": "The Blue Water Bottle costs $9.50"}}]}
    suite_path.write_text(json.dumps(task) + "\n", "utf-8")
    suite = load_tasks(suite_path)
    snapshots = root / "snapshots"
    reference = suite.get(MUG).reference_actions
    detour = [*reference[:-1], Action(kind="goto", url=bottle), Action(kind="wait", seconds=0.5)]
    rec = record_task(suite.get(MUG), snapshots, RecordOptions(guard="loopback"), ca=ca, actions=detour)
    assert rec.ok, rec.error
    settings = RunSettings(mode="both", snapshots_root=str(snapshots), guard="loopback", timeout_s=60,
                           action_timeout_s=10)
    run_dir, results = run_suite(suite, agent_name="scripted", out=root / "runs", settings=settings)
    assert [r.end_reason for r in results] == ["answered", "answered"], [r.error for r in results]
    yield {"run": run_dir, "suite": suite_path, "mug": mug, "bottle": bottle, "root": root}
    site.stop()


@pytest.mark.parametrize("mode", ["live", "frozen"])
def test_every_step_keeps_the_page_as_rendered(episodes, mode):
    ep = episode_dir(episodes["run"], MUG, mode)
    traj = load_trajectory(ep)
    assert [s.action.kind for s in traj.steps] == ["goto", "click", "wait", "answer"]
    assert all(s.page == f"pages/step-{s.index:03d}.json" for s in traj.steps)
    captures = [read_model(ep / s.page, PageCapture, "page capture") for s in traj.steps]
    assert [c.url for c in captures] == [s.url for s in traj.steps]
    assert captures[0].title == "Shop" and "Red Ceramic Mug" in captures[0].text
    after_wait = captures[2]
    assert after_wait.url == episodes["mug"] and "Price: $12.99" in after_wait.text  # written by the page's script
    dom = (ep / after_wait.dom).read_text("utf-8")
    assert re.search(r'<span id="price" data-item="7">\$12\.99</span>', dom)
    # the archive has the page as served: the price is not in it
    archived = SnapshotPages(load_episode(ep).snapshot_dirs()).get_text(episodes["mug"])
    assert archived is not None and "Price: …" in archived and "$12.99" not in archived


def test_rubric_judge_reads_rendered_pages_and_says_when_it_falls_back_to_the_archive(episodes):
    mug, bottle = episodes["mug"], episodes["bottle"]

    def reply(body):
        system = body["messages"][0]["content"]
        user = body["messages"][1]["content"]
        user = user if isinstance(user, str) else "".join(p.get("text", "") for p in user)
        if "prepare a web agent's final answer" in system:
            return json.dumps({"claims": [
                {"id": "mug-price", "statement": "The Red Ceramic Mug costs $12.99", "urls": [mug]},
                {"id": "bottle-price", "statement": "The Blue Water Bottle costs $9.50", "urls": [bottle]}]})
        claimed = re.search(r"Claim: .* costs (\$[\d.]+)", user).group(1)
        pages = user.split("Pages (text):", 1)[1]
        ok = f"Price: {claimed}" in pages
        return f"Reason: the page {'shows' if ok else 'does not show'} {claimed}.\n" \
               f"Verdict: {'supported' if ok else 'unsupported'}"

    with FakeOpenAIServer(reply) as srv:
        args = ["judge", "run", str(episodes["run"]), "--judge", "rubric", "--base-url", srv.base_url,
                "--model", "m", "--no-db", "--cache-dir", str(episodes["root"] / "cache")]
        assert main(args) == 0
        requests = list(srv.requests)
    assert requests
    verdicts = {m: json.loads((episode_dir(episodes["run"], MUG, m) / "verdicts/rubric.json").read_text("utf-8"))
                for m in ("live", "frozen")}
    for mode, v in verdicts.items():
        nodes = {c["id"]: c for c in v["checks"] if c["kind"] == "rubric_node"}
        assert v["judge"]["settings"]["votes"] == 3 and v["judge"]["prompt_version"] == "rubric-v3"
        # the price the script wrote is on the rendered page (the archived HTML says "Price: …")
        assert nodes["mug-page"]["status"] == "passed"
        assert re.fullmatch(rf"found on {re.escape(mug)} \(rendered after step \d\)", nodes["mug-page"]["detail"])
        assert nodes["mug-price"]["status"] == "passed" and "(2 of 2 votes)" in nodes["mug-price"]["detail"]
        reads = {(p["url"], p["origin"], p["note"]) for p in next(c for c in v["checks"]
                                                                    if c["kind"] == "rubric_pages")["pages"]}
        assert any(u == mug and o == "rendered" for u, o, _ in reads)
        assert not any(u == mug and o == "archived" for u, o, _ in reads)
        summary = next(c for c in v["checks"] if c["kind"] == "rubric_summary")
        assert summary["pages_rendered"] >= 2
        if mode == "frozen":  # the snapshot holds the bottle's page, which the agent never opened
            assert (bottle, "archived", "archived: the agent never opened it") in reads
            assert "archived: the agent never opened it" in nodes["bottle-cited"]["detail"]
            assert nodes["bottle-cited"]["status"] == "passed"
            # the archive shows the bottle's page as served: its script-written price is not there
            assert nodes["bottle-price"]["status"] == "failed" and "(2 of 2 votes)" in nodes["bottle-price"]["detail"]
            assert summary["verification_calls"] == 4 and summary["pages_archived"] == 2
        else:  # the live run's own archive has only what the agent fetched
            assert "neither rendered nor archived" in nodes["bottle-cited"]["detail"]
            assert "no cited page could be read" in nodes["bottle-price"]["detail"]
            assert summary["verification_calls"] == 2 and summary["pages_archived"] == 0
        calls = [c["stage"] for c in v["calls"]]  # cached calls included: live and frozen often ask alike
        assert calls[0] == "extract" and len(calls) == 1 + summary["verification_calls"]
    verify = [r for r in requests if "prepare a web agent" not in r["messages"][0]["content"]]
    assert {r["seed"] for r in verify} == {0, 1}  # each vote is its own sample (seed + k), not a cache hit
    mug_parts = [str(r["messages"][1]) for r in verify if "Claim: The Red Ceramic Mug costs" in str(r["messages"][1])]
    assert mug_parts and all(f"--- {mug} (rendered after step" in p for p in mug_parts)


def test_capture_keeps_text_within_its_limit_and_leaves_out_a_large_dom(chromium, tmp_path, monkeypatch):
    import ego2web_replay.browser as browser

    monkeypatch.setattr(browser, "PAGE_TEXT_MAX_CHARS", 3000)
    monkeypatch.setattr(browser, "DOM_MAX_CHARS", 5000)
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.set_content("<title>Big</title><p id=x>served</p><script>document.getElementById('x').textContent = "
                         "'written ' + 'word '.repeat(2000)</script>")
        rel = browser.capture_page(page, tmp_path, 4, redact_url=lambda u: u + "#redacted")
    finally:
        context.close()
    capture = read_model(tmp_path / rel, PageCapture, "page capture")
    assert rel == "pages/step-004.json" and capture.step == 4 and capture.title == "Big"
    assert capture.text.startswith("written word") and len(capture.text) == 3000 and capture.truncated
    assert capture.dom is None and "not kept (limit 5,000)" in capture.dom_note
    assert capture.url.endswith("#redacted") and not (tmp_path / "pages/step-004.html").exists()


def test_one_round_trip_reads_what_playwrights_own_calls_read(chromium, tmp_path):
    """``read_page``'s single evaluate gives the title, innerText and DOM that ``page.title()``,
    ``inner_text("body")`` and ``page.content()`` give, on a page a script changed (doctype, marks)."""
    import ego2web_replay.browser as browser
    from ego2web_replay.agents.elements import list_elements

    context = chromium.new_context()
    try:
        page = context.new_page()
        page.set_content("<!DOCTYPE html><html lang=en><head><title>Shop &amp; more</title></head><body>"
                         "<p id=x>served</p><a href='/a'>One</a> <button>Two</button><div hidden>gone</div>"
                         "<script>document.getElementById('x').textContent = 'Price: 12.50 €'; "
                         "document.title += ' (2)'</script></body></html>")
        assert len(list_elements(page)) == 2  # the data-e2w-id marks are part of the DOM both read
        got = browser.read_page(page)
        assert got["title"] == page.title() == "Shop & more (2)"
        assert got["text"] == page.inner_text("body") and "Price: 12.50 €" in got["text"] and not got["truncated"]
        assert got["dom"] == page.content() and got["dom"].startswith("<!DOCTYPE html>")
        assert 'data-e2w-id="2"' in got["dom"] and got["domLength"] == len(got["dom"]) and got["domError"] is None
        capture = browser.keep_page(page, tmp_path, 0)
        assert capture.title == got["title"] and capture.text == got["text"]
        assert (tmp_path / "pages/step-000.html").read_text("utf-8") == got["dom"]
    finally:
        context.close()


def test_the_scripted_agent_gets_no_element_list_and_its_pages_no_marks(episodes):
    """The scripted agent never reads the element list, so the runner lists none for it: the captured DOM
    carries no ``data-e2w-id`` marks, and every step still has its title, screenshot and page capture."""
    from ego2web_replay.agents.scripted import ScriptedAgent

    assert ScriptedAgent.wants_elements is False
    for mode in ("live", "frozen"):
        folder = episode_dir(episodes["run"], MUG, mode)
        traj = load_trajectory(folder)
        assert traj.steps and all(s.title and s.page for s in traj.steps)
        doms = [folder / read_model(folder / s.page, PageCapture, "page capture").dom for s in traj.steps]
        assert doms and all(p.is_file() and "data-e2w-id" not in p.read_text("utf-8") for p in doms)
