"""``run --repeats``: a real agent run K times per task, live and frozen, on the demo site, judged by
the rule judge, tracked in a real DuckDB file and compared with per-task rates and pass@k.

The agent is a ``command:`` program that reads its start page through the
proxy and answers right or wrong by a schedule keyed by task, mode and
``$EGO2WEB_REPEAT``, so the repeats differ the way a stochastic agent's do,
and every figure below is worked out by hand.
"""

from __future__ import annotations

import json
import sys
from math import sqrt

import pytest

from ego2web_replay.cli import main
from ego2web_replay.models import episode_dir, load_run, load_trajectory
from ego2web_replay.tracking.db import read_connection

pytestmark = pytest.mark.slow

MUG, WIKI = "shop-mug-price", "wiki-lighthouse-built"
RIGHT = {MUG: "Red Ceramic Mug, $12.99", WIKI: "Old Harbour Lighthouse, built in 1874"}
# (task, mode) -> right answer at repeats 0, 1, 2
SCHEDULE = {(MUG, "live"): [1, 1, 0], (MUG, "frozen"): [1, 0, 0],
            (WIKI, "live"): [0, 0, 0], (WIKI, "frozen"): [1, 1, 1]}

PROGRAM = r'''
import json, os, sys, urllib.request
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
plan = json.load(open(sys.argv[1]))
key = f'{task["id"]}/{os.environ["EGO2WEB_MODE"]}/{os.environ["EGO2WEB_REPEAT"]}'
with urllib.request.urlopen(task["start_url"], timeout=20) as r:  # through the proxy (live) or replay (frozen)
    r.read()
answer = plan["right"][task["id"]] if plan["schedule"][key] else "I could not find it"
out = os.environ["EGO2WEB_OUT"]
os.makedirs(out, exist_ok=True)
steps = [{"index": 0, "action": {"kind": "goto", "url": task["start_url"]}, "url": task["start_url"]},
         {"index": 1, "action": {"kind": "answer", "answer": answer}, "url": task["start_url"]}]
json.dump({"steps": steps, "answer": answer, "end_reason": "answered"}, open(os.path.join(out, "trajectory.json"), "w"))
'''


@pytest.fixture(scope="module")
def demo(tmp_path_factory, ca):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import load_tasks

    root = tmp_path_factory.mktemp("repeats")
    with DemoSite() as site:
        suite_path = write_demo_suite(root / "suite", site.url, [MUG, WIKI])
        suite = load_tasks(suite_path)
        for t in (MUG, WIKI):
            r = record_task(suite.get(t), root / "snapshots", RecordOptions(guard="loopback"), ca=ca)
            assert r.ok, r.error
        plan = {"right": RIGHT, "schedule": {f"{t}/{m}/{i}": bool(ok) for (t, m), oks in SCHEDULE.items()
                                             for i, ok in enumerate(oks)}}
        (root / "plan.json").write_text(json.dumps(plan), "utf-8")
        (root / "agent.py").write_text(PROGRAM, "utf-8")
        yield {"root": root, "suite_path": suite_path}


def test_repeats_resume_judge_and_compare(demo, capsys):
    root = demo["root"]
    db, out = root / "t.duckdb", root / "runs"
    agent = f"command:{sys.executable} {root / 'agent.py'} {root / 'plan.json'}"
    args = ["run", str(demo["suite_path"]), "--agent", agent, "--mode", "both", "--snapshots", str(root / "snapshots"),
            "--out", str(out), "--run-id", "rep", "--guard", "loopback", "--db", str(db), "--timeout", "60"]
    assert main([*args, "--repeats", "2"]) == 0
    run_dir = out / "rep"
    assert sorted(p.name for p in (run_dir / "episodes" / MUG).iterdir()) == ["frozen", "frozen-r1", "live", "live-r1"]
    first = (run_dir / "episodes" / MUG / "live-r1" / "trajectory.json").read_bytes()
    # resume raises the repeats: only repeat 2 is run now
    assert main([*args, "--repeats", "3", "--resume"]) == 0
    assert "8 of 12 episodes already done" in capsys.readouterr().err
    assert (run_dir / "episodes" / MUG / "live-r1" / "trajectory.json").read_bytes() == first
    assert load_run(run_dir).settings.repeats == 3 and load_run(run_dir).episodes == {"answered": 12}
    for (task, mode), oks in SCHEDULE.items():
        for r, ok in enumerate(oks):
            t = load_trajectory(episode_dir(run_dir, task, mode, r))
            assert (t.repeat, t.answer == RIGHT[task]) == (r, bool(ok)), (task, mode, r, t.error)
            if mode == "frozen":
                assert t.replay.miss == 0 and t.replay.exact >= 1
    assert main(["judge", str(run_dir), "--judge", "rule", "--db", str(db)]) == 0
    capsys.readouterr()
    with read_connection(db) as con:
        assert con.execute("SELECT count(*), count(DISTINCT repeat_index) FROM episodes").fetchone() == (12, 3)
        assert con.execute("SELECT count(*) FROM verdicts WHERE error IS NULL").fetchone() == (12,)

    assert main(["compare", "--db", str(db), "--json", "-"]) == 0
    (g,) = json.loads(capsys.readouterr().out)["groups"]
    # per task: mug live 2/3 frozen 1/3; lighthouse live 0/3 frozen 3/3
    assert g["paired"] == 2 and g["max_repeats"] == 3 and g["judge_errors"] == 0
    assert g["live_rate"] == pytest.approx(1 / 3) and g["frozen_rate"] == pytest.approx(2 / 3)
    # paired by task rates: one task better live, one better frozen (not 1 vs 3 as six independent pairs)
    assert g["counts"] == {"both": 0, "live_only": 1, "frozen_only": 1, "neither": 0} and g["mcnemar_p"] == 1.0
    reps = {m["mode"]: m for m in g["repeats"]}
    # pass@k = mean over tasks of 1 - C(n-c,k)/C(n,k)
    assert reps["live"]["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 1 / 2, "3": 1 / 2})
    assert reps["frozen"]["pass_at_k"] == pytest.approx({"1": 2 / 3, "2": 5 / 6, "3": 1.0})
    # Bernoulli variance p(1-p): mug 2/9, lighthouse 0
    assert reps["live"]["mean_task_variance"] == pytest.approx(1 / 9)
    assert reps["frozen"]["mean_task_variance"] == pytest.approx(1 / 9)
    # suite rate per repeat: live 1/2, 1/2, 0; frozen 1, 1/2, 1/2 -> std sqrt(1/12) each
    assert reps["live"]["repeat_rates"] == pytest.approx([0.5, 0.5, 0.0])
    assert reps["frozen"]["repeat_rates"] == pytest.approx([1.0, 0.5, 0.5])
    assert reps["live"]["repeat_std"] == pytest.approx(sqrt(1 / 12))
    assert reps["frozen"]["repeat_std"] == pytest.approx(sqrt(1 / 12))
    assert {(t["task_id"], t["successes"], t["n"]) for t in reps["frozen"]["per_task"]} == {(MUG, 1, 3), (WIKI, 3, 3)}
