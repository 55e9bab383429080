"""Attribution of flips on the real demo: the demo site recorded through the real proxy and Chromium,
run live and frozen, judged by the rule judge, compared from a real DuckDB file.

The drifted tasks are attributed from each live episode's own archive, with no drift probe at all; an
agent-caused flip (the site unchanged at the time of the run) is attributed to no change and stays so
after later probes of the drifted site."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from ego2web_replay.demo.run import write_demo_suite
from ego2web_replay.demo.site import DemoSite
from ego2web_replay.judge.run import judge_run
from ego2web_replay.recorder.session import RecordOptions, record_task
from ego2web_replay.runner.run import RunSettings, run_suite
from ego2web_replay.tasks import load_tasks
from ego2web_replay.tracking.compare import compare
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.drift import drift_timeseries
from ego2web_replay.tracking.probe import probe_snapshots
from ego2web_replay.tracking.sink import TrackingSink

pytestmark = pytest.mark.slow

TASKS = ["shop-mug-price", "shop-snack-calories", "video-uploader"]

# an agent that reads the right pages in both modes but, live, reports the wrong price: its own mistake
AGENT = textwrap.dedent("""
    import json, os, re, urllib.request
    task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
    base = task["start_url"].rsplit("/shop", 1)[0]
    steps, text = [], ""
    for i, url in enumerate([base + "/shop", base + "/shop/item/7", base + "/api/price/7?_=1764500000000"]):
        with urllib.request.urlopen(url, timeout=20) as r:
            body = r.read().decode()
        steps.append({"index": i, "action": {"kind": "goto", "url": url}, "url": url})
        text += " " + re.sub("<[^>]+>", " ", body)
    price = json.loads(body)["price"]
    answer = "$9.50" if os.environ["EGO2WEB_MODE"] == "live" else price
    out = {"steps": steps, "answer": answer, "final_page_text": "Red Ceramic Mug Price: " + answer}
    json.dump(out, open(os.path.join(os.environ["EGO2WEB_OUT"], "trajectory.json"), "w"))
""")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, data_home):
    out = tmp_path_factory.mktemp("attribution")
    agent = out / "agent.py"
    agent.write_text(AGENT, "utf-8")
    db, snapshots = out / "ego2web.duckdb", out / "snapshots"
    sink = TrackingSink(db)
    hooks = {"on_start": lambda run_dir, total, done: sink.run_started(run_dir),
             "on_episode": lambda s: sink.episode_finished(s.path.parents[2], s.path)}
    with DemoSite() as site:
        suite = load_tasks(write_demo_suite(out, site.url, TASKS))
        for task in suite:
            r = record_task(task, snapshots, RecordOptions(guard="loopback"))
            assert r.ok and r.snapshot is not None, r.error
            sink.snapshot_recorded(r.snapshot)
        settings = RunSettings(mode="both", workers=2, snapshots_root=str(snapshots), guard="loopback", timeout_s=120)
        # before the drift, a fallible agent flips the mug task by itself
        own, _ = run_suite(suite, agent_name=f"command:{sys.executable} {agent}", out=out / "runs", settings=settings,
                           run_id="0-agent", task_ids=["shop-mug-price"], **hooks)
        site.drift()
        drifted, _ = run_suite(suite, agent_name="scripted", out=out / "runs", settings=settings,
                               run_id="1-drifted", **hooks)
        for run_dir in (own, drifted):
            judge_run(run_dir, "rule", progress=False, on_verdict=lambda ep, v: sink.verdict_made(ep, v, judge="rule"))
        assert sink.error is None
        yield {"out": out, "db": db, "snapshots": snapshots, "site": site}


def _flips(db, agent_prefix: str):
    result = compare(db, iterations=50)
    (group,) = [g for g in result.groups if g.agent.startswith(agent_prefix)]
    return {f.task_id: f for f in group.flips}


def test_drifted_tasks_attributed_from_the_live_archive_without_any_probe(demo):
    with read_connection(demo["db"]) as con:
        assert con.execute("SELECT count(*) FROM probes").fetchone()[0] == 0
    flips = _flips(demo["db"], "scripted")
    assert set(flips) == set(TASKS) and all(f.direction == "frozen only" for f in flips.values())
    for f in flips.values():
        assert f.attribution is not None and f.attribution.source == "live-archive", f
    base = demo["site"].url
    price = flips["shop-mug-price"].attribution
    cause = price.resources[0]
    assert cause.url.startswith(f"{base}/api/price/7") and cause.status == "changed" and cause.final_page
    assert [(x.path, x.old, x.new) for x in cause.fields] == [("price", "$12.99", "$14.49")]
    # the listing lost the delisted snack: an unrelated change, listed after the cause
    assert any(r.url == f"{base}/shop" and r.status == "changed" for r in price.resources[1:])
    assert flips["shop-mug-price"].drift_status == "changed"
    delisted = flips["shop-snack-calories"].attribution.resources[0]
    assert (delisted.url, delisted.status, delisted.status_now) == (f"{base}/shop/item/4", "gone", 404)
    assert flips["shop-snack-calories"].drift_status == "gone"
    wall = flips["video-uploader"].attribution.resources[0]
    assert wall.url == f"{base}/videos/watch?v=pasta42" and wall.status == "blocked" and "challenge" in wall.detail
    assert flips["video-uploader"].drift_status == "blocked"


def test_agent_caused_flip_is_no_change_and_stays_so_after_probes(demo):
    (flip,) = _flips(demo["db"], "command").values()
    assert (flip.task_id, flip.direction) == ("shop-mug-price", "frozen only")
    assert flip.attribution.source == "live-archive"
    assert flip.drift_status == "unchanged" and flip.attribution.resources == []
    # the site has drifted since; probes now see the task's pages changed
    probe_id, rows = probe_snapshots(sorted(p.parent for p in demo["snapshots"].glob("*/*/manifest.json")),
                                     archive_root=demo["out"] / "probes", guard="loopback")
    TrackingSink(demo["db"]).probed(rows)
    assert {r.task_status for r in rows if r.task_id == "shop-mug-price"} == {"changed"}
    again = _flips(demo["db"], "command")["shop-mug-price"]
    assert again.drift_status == "unchanged" and again.attribution.source == "live-archive"
    scripted = _flips(demo["db"], "scripted")
    assert scripted["video-uploader"].attribution.source == "live-archive"
    # the drift report keeps the probe in its time series
    series = drift_timeseries(demo["db"])
    assert [p.probe_id for p in series.series("overall")["all"]] == [probe_id]
    data = json.loads(compare(demo["db"], iterations=50).model_dump_json())
    listed = [f["attribution"]["resources"][0] for g in data["groups"] for f in g["flips"]
              if f["attribution"]["resources"]]
    assert listed and all({"url", "status", "detail"} <= set(r) for r in listed)


def test_report_flip_page_shows_screenshots_side_by_side_and_the_changes(demo, tmp_path):
    import re

    from ego2web_replay.tracking.report import build_report
    from ego2web_replay.tracking.report_flips import flip_page_path

    build_report(demo["db"], tmp_path / "report", iterations=50)
    index = (tmp_path / "report" / "index.html").read_text()
    rel = flip_page_path("scripted", "rule", "shop-mug-price", "1-drifted")
    assert rel in index
    page = (tmp_path / "report" / rel).read_text()
    # frozen and live screenshots, side by side, each copied next to the page
    imgs = re.findall(r'<img src="([^"]+)" alt="(frozen|live) screenshot', page)
    assert {m for _, m in imgs} == {"frozen", "live"}
    assert all(((tmp_path / "report" / rel).parent / src).is_file() for src, _ in imgs)
    assert "/api/price/7" in page and "live-archive" in page
    assert '<span class="removed">&quot;$12.99&quot;</span>' in page
    assert '<span class="added">&quot;$14.49&quot;</span>' in page
    assert '<span class="removed">− Crunchy Corn Snack</span>' in page  # the listing's text difference
    wall = (tmp_path / "report" / flip_page_path("scripted", "rule", "video-uploader", "1-drifted")).read_text()
    assert "blocked" in wall and "Verify you are human" in wall
