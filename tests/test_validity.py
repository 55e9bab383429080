"""Episode validity end to end: a frozen episode that follows the recording is complete, one that searches
for something else is off-snapshot; runs show, the database, compare and the report all say so."""

from __future__ import annotations

import json
import shutil

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import ReplayLogEntry, load_trajectory
from ego2web_replay.testing.thirdparty import available
from ego2web_replay.validity import again_note, classify, request_kind, set_aside

MUG = "shop-mug-price"
ELSEWHERE = "shop-mug-elsewhere"


def test_request_kinds_and_classes():
    assert request_kind("document", None, "https://e.com/login") == "document"
    assert request_kind("empty", None, "https://e.com/api/price?id=1", "cors") == "content"
    assert request_kind("empty", None, "https://e.com/api/event", "no-cors") == "subresource"  # sendBeacon
    assert request_kind("image", None, "https://e.com/p.png") == "subresource"
    assert request_kind("script", None, "https://www.googletagmanager.com/gtag/js?id=G-1") == "subresource"
    assert request_kind(None, "text/html,application/xhtml+xml", "https://e.com/a") == "document"
    assert request_kind(None, "*/*", "https://e.com/font.woff2") == "subresource"
    assert request_kind(None, "*/*", "https://e.com/api/items") == "content"
    assert request_kind("websocket", None, "https://e.com/_stcore/stream", "websocket") == "content"
    assert request_kind("websocket", None, "https://e.com/telemetry", "websocket") == "subresource"

    def log(*entries: tuple[str, str, str | None]) -> list[ReplayLogEntry]:
        return [ReplayLogEntry(method="GET", url=u, outcome=o, kind=k) for o, u, k in entries]  # type: ignore[arg-type]

    assert classify(log(("exact", "https://e.com/", "document"))) == "complete"
    assert classify(log(("exact", "https://e.com/", "document"), ("miss", "https://e.com/a.png", "subresource"))) \
        == "degraded"
    assert classify(log(("miss", "https://e.com/api/x", "content"))) == "off-snapshot"
    assert classify(log(("fuzzy", "https://e.com/s?q=b", "document"))) == "off-snapshot"  # a substitution
    assert classify(log(("miss", "https://e.com/old", None))) == "off-snapshot"  # no kind: judged by the URL
    assert classify(log(("exact", "https://e.com/", "document")), truncated=1) == "degraded"  # a cut capture
    assert classify(log(("miss", "https://e.com/api/x", "content")), truncated=1) == "off-snapshot"
    assert classify(log(("websocket", "https://e.com/stream", "content"))) == "off-snapshot"  # refused
    assert classify(log(("websocket", "https://e.com/telemetry", "subresource"))) == "degraded"
    # an answer from another task's snapshot is a recorded response: complete (counted apart as shared)
    assert classify(log(("exact", "https://e.com/", "document"), ("shared", "https://e.com/b", "document"))) \
        == "complete"
    assert classify(log(("shared", "https://e.com/b", "document"), ("miss", "https://e.com/c.png", "subresource"))) \
        == "degraded"
    # a poll asked past its recorded, changing series: a recorded answer, not the live one of now
    polled = ReplayLogEntry(method="GET", url="https://e.com/api/status", outcome="exact", kind="content",
                            volatile=again_note(3))
    assert classify([polled]) == "degraded" and set_aside([polled]) == {"again: past 3 recorded, answers differ": 1}
    assert classify([polled, *log(("miss", "https://e.com/api/x", "content"))]) == "off-snapshot"


def test_an_episode_served_from_a_truncated_capture_is_degraded_in_compare(tmp_path):
    """Its stats as a replay wrote them before validity was kept: classified again, truncation counted."""
    from ego2web_replay.models import AgentSpec
    from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_suite
    from ego2web_replay.tracking.compare import compare
    from ego2web_replay.tracking.ingest import ingest

    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    eps = [EpisodeSpec("t1", "frozen", {"rule": True}, truncated=1), EpisodeSpec("t2", "frozen", {"rule": True})]
    make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), eps, suite=suite)
    db = tmp_path / "v.duckdb"
    ingest(db, [tmp_path / "runs"])
    v = compare(db).groups[0].frozen_validity
    assert v is not None and v.shares["degraded"] == v.shares["complete"] == 0.5  # t1 degraded, t2 complete


@pytest.mark.slow
def test_following_is_complete_and_searching_elsewhere_is_off_snapshot(tmp_path, ca, capsys):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.judge.run import judge_run
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks
    from ego2web_replay.tracking.compare import compare
    from ego2web_replay.tracking.ingest import ingest
    from ego2web_replay.tracking.report import build_report

    with DemoSite() as site:
        suite_path = write_demo_suite(tmp_path / "suite", site.url, [MUG])
        suite = load_tasks(suite_path)
        snapshots = tmp_path / "snapshots"
        recorded = record_task(suite.get(MUG), snapshots, RecordOptions(guard="loopback"), ca=ca)
        assert recorded.ok, recorded.error
    # a second task replays the same snapshot, but its agent searches for something that was never recorded
    line = json.loads(suite_path.read_text("utf-8").splitlines()[0])
    line["id"] = ELSEWHERE
    line["reference_actions"] = [{"kind": "goto", "url": f"{site.url}/shop/search?q=teapot"},
                                 {"kind": "answer", "answer": "$12.99"}]
    with suite_path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    shutil.copytree(recorded.snapshot, snapshots / ELSEWHERE / recorded.snapshot.name)
    settings = RunSettings(mode="frozen", snapshots_root=str(snapshots), timeout_s=60, action_timeout_s=10)
    run_dir, results = run_suite(load_tasks(suite_path), agent_name="scripted", out=tmp_path / "runs",
                                 settings=settings)
    assert all(r.end_reason == "answered" for r in results), results
    ok = load_trajectory(run_dir / "episodes" / MUG / "frozen")
    off = load_trajectory(run_dir / "episodes" / ELSEWHERE / "frozen")
    assert ok.replay.validity == "complete" and ok.replay.config["miss"] == "404"
    assert off.replay.validity == "off-snapshot"
    stats = json.loads((run_dir / "episodes" / ELSEWHERE / "frozen" / "replay_stats.json").read_text("utf-8"))
    assert stats["validity"] == "off-snapshot" and stats["config"]["fuzzy"] is False
    run_json = json.loads((run_dir / "run.json").read_text("utf-8"))
    assert run_json["settings"]["replay"]["sequence"] == "sequence"

    capsys.readouterr()
    assert main(["runs", "show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "off-snapshot" in shown and "complete" in shown and "frozen episodes: 2" in shown

    judge_run(run_dir, "rule", tasks=suite_path, progress=False)  # the off-path page lacks the cues
    db = tmp_path / "track.duckdb"
    ingest(db, [run_dir])
    comp = compare(db)
    v = comp.groups[0].frozen_validity
    assert (v.episodes, v.successes, v.complete, v.complete_successes) == (2, 1, 1, 1)
    assert (v.success_rate, v.complete_success_rate) == (0.5, 1.0)
    assert v.shares["complete"] == v.shares["off-snapshot"] == 0.5
    assert main(["compare", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "frozen success and coverage" in out and "off-snapshot %" in out
    build_report(db, tmp_path / "report")
    index = (tmp_path / "report" / "index.html").read_text("utf-8")
    assert "(off-snapshot)" in index and "success (complete)" in index


def test_judge_errors_are_left_out_of_the_frozen_coverage_rates(tmp_path, capsys):
    """Issue 11 part 6 in the coverage table: an errored verdict is no failure, it is its own count."""
    from ego2web_replay.models import AgentSpec
    from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_suite
    from ego2web_replay.tracking.compare import compare
    from ego2web_replay.tracking.ingest import ingest
    from ego2web_replay.tracking.report import build_report

    suite = make_suite(tmp_path / "suite.json", {t: "shopping" for t in ("t1", "t2", "t3", "t4")})
    eps = [EpisodeSpec("t1", "frozen", {"rule": True}, validity="complete"),
           EpisodeSpec("t2", "frozen", verdict_errors={"rule": "judge endpoint unreachable"}, validity="complete"),
           EpisodeSpec("t3", "frozen", {"rule": False}, validity="off-snapshot"),
           EpisodeSpec("t4", "frozen", verdict_errors={"rule": "no reply"}, validity="off-snapshot")]
    make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), eps, suite=suite)
    db = tmp_path / "v.duckdb"
    ingest(db, [tmp_path / "runs"])
    v = compare(db).groups[0].frozen_validity
    assert v is not None
    assert (v.episodes, v.complete, v.judge_errors, v.complete_judge_errors) == (4, 2, 2, 1)
    assert (v.successes, v.success_rate) == (1, 0.5)  # t1 of t1, t3: the two errors count nowhere
    assert (v.complete_successes, v.complete_success_rate) == (1, 1.0)  # t1 only, not 1/2
    assert v.shares["complete"] == v.shares["off-snapshot"] == 0.5  # coverage still counts every episode
    capsys.readouterr()
    assert main(["compare", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "judge errors" in out
    build_report(db, tmp_path / "report")
    index = (tmp_path / "report" / "index.html").read_text("utf-8")
    assert "left out of both rates" in index


def test_answers_that_set_volatile_values_aside_show_with_the_validity(tmp_path, capsys):
    """Issue 23 part 5: answers by learned names or fresh ids keep an episode complete and are shown,
    with their parameters, in runs show, the database and compare."""
    from ego2web_replay.models import AgentSpec
    from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_suite
    from ego2web_replay.tracking.compare import compare
    from ego2web_replay.tracking.ingest import ingest
    from ego2web_replay.validity import set_aside

    log = [ReplayLogEntry(method="GET", url="https://e.com/", outcome="exact", kind="document"),
           ReplayLogEntry(method="GET", url="https://e.com/api/items?q=hat&rid=2", outcome="canonical", kind="content",
                          volatile="fresh-id: rid"),
           ReplayLogEntry(method="POST", url="https://e.com/api/event", outcome="canonical", kind="content",
                          volatile="fresh-id: body:messageId"),
           ReplayLogEntry(method="GET", url="https://e.com/api/items?q=hat&rid=3", outcome="canonical", kind="content",
                          volatile="fresh-id: rid"),
           ReplayLogEntry(method="GET", url="https://e.com/api/stock?tok=9", outcome="canonical", kind="content",
                          volatile="learned: tok")]
    assert classify(log) == "complete"
    assert set_aside(log) == {"fresh-id: body:messageId": 1, "fresh-id: rid": 2, "learned: tok": 1}
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    eps = [EpisodeSpec("t1", "live", {"rule": True}), EpisodeSpec("t2", "live", {"rule": True}),
           EpisodeSpec("t1", "frozen", {"rule": True}, validity="complete", replay_log=log),
           EpisodeSpec("t2", "frozen", {"rule": True}, validity="complete")]
    run = make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), eps, suite=suite)
    capsys.readouterr()
    assert main(["runs", "show", str(run)]) == 0
    shown = capsys.readouterr().out
    assert "t1 (complete): answers that set volatile values aside: fresh-id: body:messageId ×1; fresh-id: rid ×2; " \
           "learned: tok ×1" in shown and "t2 (complete)" not in shown
    db = tmp_path / "v.duckdb"
    ingest(db, [tmp_path / "runs"])
    frozen = {e.task_id: e for e in compare(db).groups[0].frozen_episodes}
    assert (frozen["t1"].set_aside, frozen["t1"].set_aside_params["fresh-id: rid"]) == (4, 2)
    assert (frozen["t2"].set_aside, frozen["t2"].set_aside_params) == (0, {})
    assert main(["compare", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "set volatile values aside" in out and "fresh-id: rid ×2" in out


@pytest.mark.slow
@pytest.mark.skipif(not available("streamlit"), reason="streamlit is in the dev extra")
def test_a_streamlit_episode_is_complete_only_when_its_websocket_replays(tmp_path, ca, capsys):
    """Streamlit draws its page over a websocket: frozen through the fast engine, which plays it back, the
    episode is complete; through the mitmproxy engine, which refuses websockets, it is a blank page, and
    the episode is off-snapshot, not complete, in its trajectory and in ``runs show``."""
    from ego2web_replay.models import ReplayConfig
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import Task, TaskSuite
    from ego2web_replay.testing.streamlit_site import StreamlitSite

    snapshots = tmp_path / "snapshots"
    with StreamlitSite(tmp_path / "app") as app:
        task = Task(id="ledger", instruction="What does walnut coffee cost?", start_url=app.url + "/",
                    reference_actions=[{"kind": "goto", "url": app.url + "/"},
                                       {"kind": "wait", "text": "oak table"},
                                       {"kind": "answer", "answer": "12.50"}])
        recorded = record_task(task, snapshots, RecordOptions(guard="loopback"), ca=ca)
        assert recorded.ok, recorded.error
    suite = TaskSuite(tasks=[task])
    episodes = {}
    for engine in ("fast", "mitmproxy"):
        settings = RunSettings(mode="frozen", snapshots_root=str(snapshots), timeout_s=60, action_timeout_s=8,
                               replay=ReplayConfig(engine=engine))
        run_dir, _ = run_suite(suite, agent_name="scripted", out=tmp_path / f"runs-{engine}", settings=settings)
        episodes[engine] = (run_dir, load_trajectory(run_dir / "episodes" / "ledger" / "frozen"))
    fast, refused = episodes["fast"][1], episodes["mitmproxy"][1]
    assert fast.answer == "12.50" and fast.replay.validity == "complete" and fast.replay.websocket == 0
    assert refused.replay.websocket >= 1 and refused.replay.validity == "off-snapshot"
    capsys.readouterr()
    assert main(["runs", "show", str(episodes["mitmproxy"][0])]) == 0
    assert "off-snapshot" in capsys.readouterr().out
