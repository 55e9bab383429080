"""Suite-wide shared captures: a frozen episode answered, for what its own snapshot lacks, from the other
tasks' snapshots of the same root recorded within the share window (docs/matching.md, "Shared captures").

The replay tests here go through the real replay proxy with a real HTTP client; the end-to-end test
records two tasks of the local test site with Chromium and runs a frozen episode through ``run``,
``judge``, ``compare`` and ``runs show``.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import ssl
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import ReplayConfig
from ego2web_replay.replay.session import Replay
from ego2web_replay.replay.shared import suite_sources
from ego2web_replay.snapshots.snapshot import SnapshotWriter

T0 = datetime(2026, 1, 2, 10, 0, 0)
DAY = 86400.0


def _snapshot(root: Path, task: str, at: datetime, pages: list[tuple[str, bytes]]) -> Path:
    """A snapshot of ``task`` recorded at ``at``: each (url, body) a 200 capture, in order (repeats allowed)."""
    sw = SnapshotWriter(root, task, clock=lambda: at)
    for n, (url, body) in enumerate(pages):
        sw.writer.write_exchange(url=url, method="GET", request_headers=[("Accept", "*/*")], request_body=b"",
                                 status=200, reason="OK", response_headers=[("Content-Type", "text/plain")],
                                 response_body=body, date=at + timedelta(seconds=n))
    sw.finalize()
    return sw.path


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> dict[str, Path]:
    """Four tasks of one site under one root: A (the episode's), B 5 min later, C 10 min later, D 5 days before."""
    root = tmp_path_factory.mktemp("shared") / "snapshots"
    site = "http://shop.example"
    return {
        "root": root,
        "A": _snapshot(root, "A", T0, [(f"{site}/", b"home by A"), (f"{site}/a", b"page a")]),
        "B": _snapshot(root, "B", T0 + timedelta(minutes=5), [
            (f"{site}/", b"home by B"), (f"{site}/b", b"page b"), (f"{site}/both", b"both by B"),
            *[(f"{site}/poll", f"state {i}".encode()) for i in range(3)],
            # two loads with the same answer: 'tok' is learned volatile for /api/stock in B only
            (f"{site}/api/stock?id=4&tok=a81f", b"stock 4"), (f"{site}/api/stock?id=4&tok=77c0", b"stock 4")]),
        "C": _snapshot(root, "C", T0 + timedelta(minutes=10), [
            (f"{site}/both", b"both by C"), (f"{site}/c", b"page c"), (f"{site}/api/stock?id=5&tok=c0ff", b"stock 5")]),
        "D": _snapshot(root, "D", T0 - timedelta(days=5), [(f"{site}/d", b"page d")]),
    }


def _get(replay: Replay, url: str) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(replay.ca_file))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": replay.proxy_url,
                                                                      "https": replay.proxy_url}),
                                         urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_sources_are_the_other_tasks_latest_within_the_window(suite, tmp_path):
    assert [s.id for s in suite_sources(suite["A"], DAY)] == [_id(suite["B"]), _id(suite["C"])]  # nearest first
    assert [s.id for s in suite_sources(suite["A"], 7 * DAY)] == [_id(suite["B"]), _id(suite["C"]), _id(suite["D"])]
    assert suite_sources(suite["A"], 60) == []  # B came 5 minutes later
    # a snapshot outside the <root>/<task>/<id> layout has no sources
    assert suite_sources(Path(str(suite["A"])).parent, DAY) == []


def test_a_page_only_another_task_recorded_is_served_and_marked_shared(suite, ca):
    with Replay([suite["A"]], ReplayConfig(share_window_s=DAY), ca=ca) as replay:
        assert _get(replay, "http://shop.example/b") == (200, b"page b")
        assert _get(replay, "http://shop.example/") == (200, b"home by A")  # the own capture wins
        assert _get(replay, "http://shop.example/both") == (200, b"both by B")  # the nearest source first
        assert _get(replay, "http://shop.example/c") == (200, b"page c")
        assert _get(replay, "http://shop.example/d")[0] == 404  # D is 5 days older: outside the window
    stats = replay.stats()
    assert (stats.shared, stats.exact, stats.miss) == (3, 1, 1)
    assert stats.shared_from == {_id(suite["B"]): 2, _id(suite["C"]): 1}
    by_url = {e.url.rsplit("/", 1)[-1]: e for e in stats.log}
    assert (by_url["b"].outcome, by_url["b"].shared_from, by_url["b"].shared_stage) == ("shared", _id(suite["B"]),
                                                                                        "exact")
    assert by_url[""].outcome == "exact" and by_url[""].shared_from is None
    assert stats.validity == "off-snapshot"  # the miss of /d (content) decides
    assert stats.total == 5


def test_no_share_and_a_window_that_excludes_the_others_miss(suite, ca):
    for config in (ReplayConfig(), ReplayConfig(share_window_s=60)):
        with Replay([suite["A"]], config, ca=ca) as replay:
            assert _get(replay, "http://shop.example/b")[0] == 404
        stats = replay.stats()
        assert (stats.shared, stats.miss, stats.shared_from) == (0, 1, {})
    with Replay([suite["A"]], ReplayConfig(share_window_s=7 * DAY), ca=ca) as replay:
        assert _get(replay, "http://shop.example/d") == (200, b"page d")  # inside a week's window
        assert _get(replay, "http://shop.example/a") == (200, b"page a")
    stats = replay.stats()
    # recorded responses of the same requests, from the suite's recording: complete, counted apart
    assert (stats.validity, stats.shared, stats.exact, stats.miss) == ("complete", 1, 1, 0)


def test_sequencing_and_learned_names_apply_per_source(suite, ca):
    with Replay([suite["A"]], ReplayConfig(share_window_s=DAY), ca=ca) as replay:
        polls = [_get(replay, "http://shop.example/poll")[1] for _ in range(4)]
        learned = _get(replay, "http://shop.example/api/stock?id=4&tok=0000")  # 'tok' learned in B
        not_learned = _get(replay, "http://shop.example/api/stock?id=5&tok=0000")  # C never learned it
    assert polls == [b"state 0", b"state 1", b"state 2", b"state 2"]  # B's recorded order, then its last
    assert learned == (200, b"stock 4") and not_learned[0] == 404
    entry = next(e for e in replay.stats().log if "id=4" in e.url)
    assert (entry.outcome, entry.shared_stage, entry.volatile) == ("shared", "canonical", "learned: tok")
    assert replay.stats().learned == 0  # counts the own snapshot's learned answers only


def test_the_suite_index_is_built_once_and_kept_while_unchanged(suite, ca, tmp_path):
    from ego2web_replay.replay import shared

    root = tmp_path / "snapshots"
    shutil.copytree(suite["root"], root)  # a root of its own: a task is added below
    suite = {k: root / v.relative_to(suite["root"]) for k, v in suite.items() if k != "root"}
    config = ReplayConfig(share_window_s=DAY)
    with Replay([suite["A"]], config, ca=ca) as first:
        assert first.shared is not None and first.shared.paths is not None
    builds = shared.BUILDS[0]
    with Replay([suite["A"]], config, ca=ca) as second:  # a second episode: nothing built or opened again
        assert second.shared is not None and _get(second, "http://shop.example/b") == (200, b"page b")
    assert shared.BUILDS[0] == builds and second.shared.paths is first.shared.paths
    assert all(a is b for a, b in zip(first.shared.suite.indexes, second.shared.suite.indexes, strict=True))
    assert second.shared.sessions[0] is not first.shared.sessions[0]  # its own sequencing state
    # the suite index names which sources hold a path: a path none holds asks no source
    paths = second.shared.paths
    assert paths.holders("GET", "http://shop.example/both", None) == {_id(suite["B"]), _id(suite["C"])}
    assert paths.holders("HEAD", "http://shop.example/d", None) == {_id(suite["D"])}
    assert paths.holders("GET", "http://shop.example/nowhere", None) == set()
    # another task of the root recorded since: the suite index is built again, once
    _snapshot(root, "E", T0 + timedelta(minutes=1), [("http://shop.example/e", b"page e")])
    for _ in range(2):
        with Replay([suite["A"]], config, ca=ca) as third:
            assert _get(third, "http://shop.example/e") == (200, b"page e")
    assert shared.BUILDS[0] == builds + 1


def test_cli_options(capsys, tmp_path):
    assert main(["run", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--share-window DURATION" in text and "--no-share" in text and "24h" in text
    assert main(["serve", "--help"]) == 0
    assert "--share-window" in capsys.readouterr().out
    code = main(["serve", str(tmp_path), "--share-window", "soon"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and err[0].startswith("error: invalid --share-window 'soon'")
    code = main(["serve", str(tmp_path), "--share-window", "0s"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "positive length of time" in err[0]


def test_compare_counts_the_episodes_that_used_shared_captures(tmp_path, capsys):
    from ego2web_replay.models import AgentSpec, ReplayLogEntry
    from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_suite
    from ego2web_replay.tracking.ingest import ingest

    suite_file = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    shared = [ReplayLogEntry(method="GET", url="https://t1.example/b", outcome="shared", status=200,
                             shared_from="t2/s9", shared_stage="exact")] * 2
    episodes = [EpisodeSpec(t, m, {"rule": True}) for t in ("t1", "t2") for m in ("live", "frozen")]
    episodes[1] = EpisodeSpec("t1", "frozen", {"rule": True}, validity="complete", replay_log=shared)
    make_run(tmp_path / "runs", "r", AgentSpec(name="scripted"), episodes, suite=suite_file)
    db = tmp_path / "c.duckdb"
    ingest(db, [tmp_path / "runs"])
    out_json, out_csv = tmp_path / "c.json", tmp_path / "c.csv"
    capsys.readouterr()
    assert main(["compare", "--db", str(db), "--json", str(out_json), "--csv", str(out_csv), "--iterations", "20"]) == 0
    text = capsys.readouterr().out
    assert "live 0, frozen 1" in text and "answered from other tasks' snapshots (shared)" in text
    assert "t2/s9 ×2" in text
    group = json.loads(out_json.read_text())["groups"][0]
    assert group["shared_episodes"] == {"live": 0, "frozen": 1}
    t1 = next(e for e in group["frozen_episodes"] if e["task_id"] == "t1")
    assert (t1["shared"], t1["shared_from"], t1["validity"]) == (2, {"t2/s9": 2}, "complete")
    overall = list(csv.DictReader(io.StringIO(out_csv.read_text())))[-1]
    assert (overall["live_shared_episodes"], overall["frozen_shared_episodes"]) == ("0", "1")


@pytest.mark.slow
def test_frozen_run_uses_another_tasks_recording(site, ca, tmp_path, capsys):
    """Two tasks recorded with Chromium into one root; a frozen episode of the first visits a page only the
    second recorded: served through the real proxy and Chromium, marked shared in the log, the stats,
    ``runs show`` and ``compare``; with ``--no-share`` it is a miss."""
    from ego2web_replay.models import load_trajectory
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import Task

    snapshots = tmp_path / "snapshots"
    opts = RecordOptions(guard="loopback", upstream_ca=site.tls.ca_cert)
    home, clock = site.https_url + "/", site.https_url + "/clock"
    for task_id, url in (("home", home), ("clock", clock)):
        task = Task(id=task_id, instruction="x", start_url=url,
                    reference_actions=[{"kind": "goto", "url": url}, {"kind": "answer", "answer": "ok"}])
        result = record_task(task, snapshots, opts, ca=ca)
        assert result.ok, result.error
    suite = tmp_path / "explore.jsonl"  # the home task, done by an agent that also opens the clock page
    suite.write_text(json.dumps({"id": "home", "instruction": "x", "start_url": home, "expected_answer": "ok",
                                 "reference_actions": [{"kind": "goto", "url": home}, {"kind": "goto", "url": clock},
                                                       {"kind": "answer", "answer": "ok"}]}) + "\n", "utf-8")
    db = tmp_path / "t.duckdb"
    common = ["--agent", "scripted", "--mode", "frozen", "--snapshots", str(snapshots), "--out", str(tmp_path / "runs"),
              "--guard", "loopback", "--db", str(db), "--no-progress"]
    assert main(["run", str(suite), *common, "--run-id", "own", "--no-share"]) == 0
    assert main(["run", str(suite), *common, "--run-id", "shared"]) == 0
    shared = load_trajectory(tmp_path / "runs" / "shared" / "episodes" / "home" / "frozen").replay
    own = load_trajectory(tmp_path / "runs" / "own" / "episodes" / "home" / "frozen").replay
    clock_id = f"clock/{next((snapshots / 'clock').iterdir()).name}"
    entry = next(e for e in shared.log if e.url == clock)
    assert (entry.outcome, entry.shared_from, entry.status) == ("shared", clock_id, 200)
    assert shared.shared >= 1 and set(shared.shared_from) == {clock_id} and shared.validity == "complete"
    assert shared.config["share_window_s"] == 86400
    assert next(e for e in shared.log if e.url == home).outcome == "exact"  # the own capture of the home page
    assert own.shared == 0 and f"GET {clock}" in own.missed_urls and own.validity == "off-snapshot"
    assert own.config["share_window_s"] is None

    capsys.readouterr()
    assert main(["runs", "show", str(tmp_path / "runs" / "shared")]) == 0
    assert f"answers from other tasks' snapshots (shared): {clock_id}" in capsys.readouterr().out
    for run in ("shared", "own"):
        assert main(["judge", str(tmp_path / "runs" / run), "--judge", "rule", "--db", str(db), "--no-progress"]) == 0
    out_json, out_csv = tmp_path / "c.json", tmp_path / "c.csv"
    assert main(["compare", "--db", str(db), "--json", str(out_json), "--csv", str(out_csv),
                 "--iterations", "20"]) == 0
    assert "shared eps" in capsys.readouterr().out
    group = json.loads(out_json.read_text())["groups"][0]  # the most recent frozen run: the shared one
    assert group["shared_episodes"] == {"frozen": 1}
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert rows[-1]["frozen_shared_episodes"] == "1"
