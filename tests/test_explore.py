"""Recording with agents: `record --explore N` runs exploring agents live after the reference path and merges
their archives into the task's snapshot with provenance; `snapshot coverage` measures frozen runs against it."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from ego2web_replay.agents import make_agent
from ego2web_replay.agents.base import Observation
from ego2web_replay.cli import main
from ego2web_replay.errors import AgentError
from ego2web_replay.models import Task, load_trajectory
from ego2web_replay.snapshots.snapshot import Snapshot, latest_snapshot

MUG = "shop-mug-price"


def _obs(task, step, elements):
    return Observation(task=task, step=step, url=task.start_url, title="", screenshot=None, elements=elements)


def test_explorer_is_seeded_and_uses_links_and_fields():
    task = Task(id="t", instruction="look around", start_url="http://127.0.0.1:9/shop")
    page = [{"id": 1, "tag": "a", "href": "/shop/item/1"}, {"id": 2, "tag": "a", "href": "http://elsewhere.test/x"},
            {"id": 3, "tag": "a", "href": "/export.csv"}, {"id": 4, "tag": "input", "type": "search"},
            {"id": 5, "tag": "a", "href": "#top"}]

    def walk(seed):
        agent = make_agent("explorer", seed=seed, steps=12)
        agent.start(task)
        return [agent.act(_obs(task, i, page)).describe() for i in range(30)]

    first = walk(4)
    assert first == walk(4) and first != walk(5)
    assert first[0] == "goto url='http://127.0.0.1:9/shop'" and first[-1] == "stop"
    # only the same-site page link and the search field are ever used; every word typed is followed by Enter
    used = {a for a in first[1:] if a != "stop"}
    assert any(a.startswith("click") for a in used) and any(a.startswith("type") for a in used)
    for a in used:
        assert a.startswith(("click selector='[data-e2w-id=\"1\"]'", "type selector='[data-e2w-id=\"4\"]'",
                             "press selector='[data-e2w-id=\"4\"]' key='Enter'")), a
    agent = make_agent("explorer", seed=1, steps=2)
    agent.start(task)
    assert agent.act(_obs(task, 0, [])).kind == "goto" and agent.act(_obs(task, 1, [])).url == task.start_url
    with pytest.raises(AgentError, match="unknown setting"):
        make_agent("explorer", speed=3)
    with pytest.raises(AgentError, match="steps must be at least 1"):
        make_agent("explorer", steps=0)


def test_bad_explore_input_is_one_line_and_records_nothing(tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "instruction": "x", "start_url": "http://127.0.0.1:9/"}) + "\n", "utf-8")
    snaps = tmp_path / "snaps"
    assert main(["record", str(tasks), "--snapshots", str(snaps), "--explore", "-1"]) == 2
    assert "-1 is not in the range" in capsys.readouterr().err
    assert main(["record", str(tasks), "--snapshots", str(snaps), "--explore", "2", "--explore-agent", "nosuch"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown agent 'nosuch'") and "\n" not in err
    assert main(["record", str(tasks), "--snapshots", str(snaps), "--explore", "1", "--explore-window", "soon"]) == 1
    assert "invalid --window 'soon'" in capsys.readouterr().err
    assert not (snaps / "t").exists()  # refused before anything was recorded
    assert main(["snapshot", "coverage", str(tmp_path / "nope")]) == 1
    assert "not a run folder" in capsys.readouterr().err


@pytest.mark.slow
def test_record_explore_merges_explorers_with_provenance_and_coverage_measures_a_fresh_one(tmp_path, ca, capsys):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite

    snaps, runs = tmp_path / "snaps", tmp_path / "runs"
    with DemoSite() as site:
        suite = write_demo_suite(tmp_path / "suite", site.url, [MUG])
        assert main(["record", str(suite), "--snapshots", str(snaps), "--guard", "loopback", "--no-second-load",
                     "--explore", "2", "--explore-steps", "4", "--explore-runs", str(runs),
                     "--json", str(tmp_path / "rec.json")]) == 0
        (row,) = json.loads((tmp_path / "rec.json").read_text("utf-8"))["tasks"]
        explored = row["explored"]
        base = Snapshot.open(snaps / MUG / sorted(p.name for p in (snaps / MUG).iterdir())[0])
        grown = Snapshot.open(latest_snapshot(snaps, MUG))
        assert row["snapshot"] == str(grown.path) == explored["snapshot"] and grown.path != base.path
        assert len(explored["archives"]) == 2 and explored["merged"] > 0
        assert len(grown.entries()) > len(base.entries())  # the snapshot grew by what the explorers saw
        prov = json.loads((grown.path / "provenance.json").read_text("utf-8"))
        origins = [s["origin"] for s in prov["sources"]]
        assert [(o["agent"], o["agent_settings"]["seed"], o["episode"]) for o in origins] == \
            [("explorer", 1, "live"), ("explorer", 2, "live")]
        assert all((runs / o["run_id"] / "run.json").is_file() for o in origins)
        merged = [c for c in prov["captures"] if c["from"] != "base"]
        assert len(merged) == explored["merged"] and all(c["by"].startswith("explorer seed=") for c in merged)
        notes = " ".join(grown.manifest.notes)
        assert "explorer seed=1, run explore-" in notes and "explorer seed=2, run explore-" in notes
        # a fresh explorer (a seed never used to record) runs frozen against the grown snapshot
        assert main(["run", str(suite), "--agent", "explorer", "--seed", "77", "--snapshots", str(snaps),
                     "--out", str(runs), "--run-id", "fresh", "--max-steps", "12", "--timeout", "120"]) == 0
    traj = load_trajectory(runs / "fresh" / "episodes" / MUG / "frozen")
    assert traj.snapshot_id == grown.path.name and traj.agent.settings["seed"] == 77
    capsys.readouterr()
    assert main(["snapshot", "coverage", str(runs / "fresh"), str(runs / "fresh" / "."), "--json"]) == 0
    (task,) = json.loads(capsys.readouterr().out)["tasks"]
    validity = traj.replay.validity
    assert task["episodes"] == 1 and task[validity.replace("-", "_")] == 1
    missed = [e for e in traj.replay.log if e.outcome in ("miss", "fuzzy", "live") and e.kind in ("document", "content")]
    assert task["content_misses"] == len(missed) and task["content_requests"] >= len(missed) + 1
    assert task["shares"][validity] == 1.0
    assert main(["snapshot", "coverage", str(runs / "fresh")]) == 0
    assert f"{int(validity == 'complete')} of 1 frozen episode(s) complete" in capsys.readouterr().out
    # explorer runs are live only: coverage says there is nothing frozen to measure, in one line
    assert main(["snapshot", "coverage", origins[0]["run_dir"]]) == 1
    assert "no frozen episode" in capsys.readouterr().err


# a program agent that reads two pages the reference path never opens, through the proxy it is handed
PROGRAM = textwrap.dedent("""
    import json, os, urllib.request
    task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
    base = task["start_url"].rsplit("/shop", 1)[0]
    steps = []
    for i, url in enumerate([base + "/shop/item/5", base + "/videos"]):
        urllib.request.urlopen(url, timeout=20).read()
        steps.append({"index": i, "action": {"kind": "goto", "url": url}, "url": url})
    json.dump({"steps": steps, "answer": "looked"}, open(os.path.join(os.environ["EGO2WEB_OUT"], "trajectory.json"), "w"))
""")


@pytest.mark.slow
def test_explore_agent_may_be_any_agent_the_runner_runs(tmp_path, ca):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite

    program = tmp_path / "agent.py"
    program.write_text(PROGRAM, "utf-8")
    snaps, runs = tmp_path / "snaps", tmp_path / "runs"
    agent = f"command:{sys.executable} {program}"
    with DemoSite() as site:
        suite = write_demo_suite(tmp_path / "suite", site.url, [MUG])
        assert main(["record", str(suite), "--snapshots", str(snaps), "--guard", "loopback", "--no-second-load",
                     "--explore", "1", "--explore-agent", agent, "--explore-runs", str(runs)]) == 0
        grown = latest_snapshot(snaps, MUG)
        prov = json.loads((grown / "provenance.json").read_text("utf-8"))
        (source,) = prov["sources"]
        assert source["origin"]["agent"] == agent and source["origin"]["run_id"].startswith("explore-")
        by_url = {c["url"]: c for c in prov["captures"]}
        for path in ("/shop/item/5", "/videos"):
            assert by_url[f"{site.url}{path}"]["by"].startswith(f"{agent}, run explore-")


@pytest.mark.slow
def test_explore_agent_may_be_an_llm_agent_over_a_local_endpoint(tmp_path, ca, monkeypatch):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.testing.openai_server import FakeOpenAIServer

    snaps, runs = tmp_path / "snaps", tmp_path / "runs"
    with DemoSite() as site:
        calls = []

        def reply(body):  # the model opens a page the reference path never opens, then stops
            calls.append(body)
            step = {"kind": "goto", "url": f"{site.url}/shop/item/5"} if len(calls) == 1 else {"kind": "stop"}
            return json.dumps({"thought": "look around", "action": step})

        with FakeOpenAIServer(reply) as srv:
            monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
            monkeypatch.setenv("EGO2WEB_AGENT_MODEL", "fake-model")
            suite = write_demo_suite(tmp_path / "suite", site.url, [MUG])
            assert main(["record", str(suite), "--snapshots", str(snaps), "--guard", "loopback", "--no-second-load",
                         "--explore", "1", "--explore-agent", "openai", "--explore-runs", str(runs)]) == 0
        assert calls and calls[0]["model"] == "fake-model"
        prov = json.loads((latest_snapshot(snaps, MUG) / "provenance.json").read_text("utf-8"))
        (source,) = prov["sources"]
        assert source["origin"]["agent"] == "openai" and source["origin"]["run_id"].startswith("explore-")
        assert any(c["url"] == f"{site.url}/shop/item/5" and c["by"].startswith("openai, run explore-")
                   for c in prov["captures"])
