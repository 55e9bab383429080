"""Coverage that grows: an off-snapshot episode becomes complete once the live run that visited the page
is merged into the snapshot (`snapshot extend`), and the time window refuses captures outside it."""

from __future__ import annotations

import json

import pytest

from ego2web_replay.cli import main
from ego2web_replay.errors import SnapshotError
from ego2web_replay.models import load_trajectory
from ego2web_replay.snapshots.extend import parse_window

MUG = "shop-mug-price"


def test_window_parsing():
    assert parse_window("90s").total_seconds() == 90
    assert parse_window("2h").total_seconds() == 7200
    assert parse_window("1.5d").total_seconds() == 129600
    assert parse_window("30").total_seconds() == 30
    with pytest.raises(SnapshotError, match="invalid --window 'soon'"):
        parse_window("soon")


@pytest.mark.slow
def test_merging_the_live_run_makes_the_episode_complete(tmp_path, ca, capsys):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.snapshots.snapshot import Snapshot
    from ego2web_replay.tasks import load_tasks

    snapshots = tmp_path / "snapshots"
    with DemoSite() as site:
        suite_path = write_demo_suite(tmp_path / "suite", site.url, [MUG])
        base = record_task(load_tasks(suite_path).get(MUG), snapshots, RecordOptions(guard="loopback"), ca=ca)
        assert base.ok, base.error
        # the same task, done by an agent that searches instead of following the recording
        task = json.loads(suite_path.read_text("utf-8").splitlines()[0])
        task["reference_actions"] = [{"kind": "goto", "url": f"{site.url}/shop/search?q=mug"},
                                     {"kind": "answer", "answer": "$12.99"}]
        explorer = tmp_path / "explorer.jsonl"
        explorer.write_text(json.dumps(task) + "\n", "utf-8")
        common = {"snapshots_root": str(snapshots), "timeout_s": 60, "action_timeout_s": 10, "guard": "loopback"}
        live_run, _ = run_suite(load_tasks(explorer), agent_name="scripted", out=tmp_path / "runs",
                                settings=RunSettings(mode="live", **common), run_id="live")
    frozen_run, _ = run_suite(load_tasks(explorer), agent_name="scripted", out=tmp_path / "runs",
                              settings=RunSettings(mode="frozen", **common), run_id="frozen-before")
    assert load_trajectory(frozen_run / "episodes" / MUG / "frozen").replay.validity == "off-snapshot"

    capsys.readouterr()
    assert main(["runs", "coverage", str(frozen_run)]) == 0
    listing = capsys.readouterr().out
    assert "/shop/search?q=mug" in listing and str(live_run) in listing  # the live run holds the missed page

    # a window that ends before the live run refuses its captures
    assert main(["snapshot", "extend", str(base.snapshot), str(live_run), "--window", "0s"]) == 0
    out = capsys.readouterr().out
    assert "+ 0 merged" in out and "outside the window" in out and "outside the window 0" not in out

    assert main(["snapshot", "extend", str(base.snapshot), str(live_run), "--window", "1h"]) == 0
    extended = Snapshot.open(snapshots / MUG / out_path(capsys.readouterr().out).name)
    assert extended.manifest.source == "extend" and extended.manifest.created_at == base.manifest.created_at
    provenance = json.loads((extended.path / "provenance.json").read_text("utf-8"))
    froms = {c["from"] for c in provenance["captures"]}
    assert froms == {"base", provenance["sources"][0]["snapshot_id"]}
    assert any(c["url"].endswith("/shop/search?q=mug") and c["from"] != "base" for c in provenance["captures"])
    from ego2web_replay.replay.canonical import canonicalize
    from ego2web_replay.replay.rules import default_rules

    rules = default_rules()

    def keys(snap: Snapshot) -> list[str]:
        return [canonicalize(e.method, e.url, e.request_body_query, rules).key for e in snap.entries()
                if e.record_type != "request"]

    base_keys = keys(Snapshot.open(base.snapshot))
    # requests the base holds (the cache-busted price XHR too) come from the base only
    assert sorted(k for k in keys(extended) if k in set(base_keys)) == sorted(base_keys)

    after, _ = run_suite(load_tasks(explorer), agent_name="scripted", out=tmp_path / "runs",
                         settings=RunSettings(mode="frozen", **common), run_id="frozen-after")
    traj = load_trajectory(after / "episodes" / MUG / "frozen")
    assert traj.snapshot_id == extended.manifest.snapshot_id
    assert traj.replay.validity == "complete", traj.replay.missed_urls


def out_path(text: str):
    from pathlib import Path

    return Path(text.split("extended snapshot ", 1)[1].split(":", 1)[0])


def test_coverage_lists_every_repeat_and_finds_live_repeat_archives(tmp_path, capsys):
    """With `run --repeats`, each repeat's frozen episode is covered, and a page only a later live repeat
    visited is found in that repeat's archive (episodes/<task>/live-r1/snapshots/)."""
    from ego2web_replay.models import ReplayLogEntry, ReplayStats, save_model
    from ego2web_replay.snapshots.snapshot import SnapshotWriter
    from ego2web_replay.testing.episodes import make_episode

    runs = tmp_path / "runs"
    for repeat, page in ((0, "a"), (1, "b")):
        ep = make_episode(runs / "frozen", "T1", "frozen", answer="x", urls=["http://s.test/"], repeat=repeat)
        traj = load_trajectory(ep)
        traj.replay = ReplayStats(miss=1, missed_urls=[f"http://s.test/{page}"], validity="off-snapshot",
                                  log=[ReplayLogEntry(method="GET", url=f"http://s.test/{page}", outcome="miss",
                                                      status=404, kind="document")])
        save_model(ep / "trajectory.json", traj)
    for repeat, page in ((0, "c"), (1, "b")):
        live = make_episode(runs / "live", "T1", "live", answer="x", repeat=repeat)
        sw = SnapshotWriter(live / "snapshots", "T1")
        sw.writer.write_exchange(url=f"http://s.test/{page}", method="GET", request_headers=[], request_body=b"",
                                 status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
                                 response_body=b"<p>page</p>")
        sw.finalize()
    capsys.readouterr()
    assert main(["runs", "coverage", str(runs / "frozen"), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(t["repeat"], [m["url"] for m in t["missed"]]) for t in report] == [
        (0, ["http://s.test/a"]), (1, ["http://s.test/b"])]
    assert report[0]["missed"][0]["held_by"] == []
    (holder,) = report[1]["missed"][0]["held_by"]
    assert "/episodes/T1/live-r1/snapshots/T1/" in holder
    assert main(["runs", "coverage", str(runs / "frozen")]) == 0
    assert "T1 (repeat 1): off-snapshot, 1 missed" in capsys.readouterr().out
