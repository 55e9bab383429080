"""``runs list`` and ``runs show`` on real run folders (a command agent on the demo site, live then frozen)."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from ego2web_replay.cli import cli, main
from ego2web_replay.models import episode_dir, load_trajectory
from ego2web_replay.runner.run import RunSettings, run_suite

MUG, WIKI = "shop-mug-price", "wiki-lighthouse-built"

# fetches the start page through the proxy (urllib reads HTTP_PROXY) and answers its <title>
PROGRAM = r'''
import json, os, re, urllib.request
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
page = urllib.request.urlopen(task["start_url"], timeout=20).read().decode()
title = re.search(r"<title>(.*?)</title>", page).group(1)
url = task["start_url"]
json.dump({"steps": [{"index": 0, "action": {"kind": "goto", "url": url}, "url": url, "title": title},
                     {"index": 1, "action": {"kind": "answer", "answer": title}, "url": url}],
           "answer": title, "end_reason": "answered"}, open(os.path.join(os.environ["EGO2WEB_OUT"], "trajectory.json"), "w"))
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ca):
    """Run "before" (live, both tasks), then "after" (frozen, replaying the live run's own archive of MUG only)."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.tasks import load_tasks

    root = tmp_path_factory.mktemp("runs-cli")
    program = root / "agent.py"
    program.write_text(PROGRAM, "utf-8")
    agent = f"command:{sys.executable} {program}"
    out = root / "runs"
    with DemoSite() as site:
        suite = load_tasks(write_demo_suite(root / "suite", site.url, [MUG, WIKI]))
        before, _ = run_suite(suite, agent_name=agent, out=out, run_id="before",
                              settings=RunSettings(mode="live", guard="loopback", timeout_s=60))
        live_snapshots = episode_dir(before, MUG, "live") / "snapshots"
        assert (live_snapshots / MUG).is_dir()
        after, _ = run_suite(suite, agent_name=agent, out=out, run_id="after",
                             settings=RunSettings(mode="frozen", guard="loopback", timeout_s=60,
                                                  snapshots_root=str(live_snapshots)))
    return out, before, after


def _invoke(*args: str):
    r = CliRunner().invoke(cli, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def _rows(text: str) -> list[list[str]]:
    """The body rows of a rich table, as lists of cell texts."""
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in text.splitlines()
            if line.strip().startswith("│")]


def test_runs_list(runs):
    out, before, after = runs
    text = _invoke("runs", "list", "--out", str(out))
    lines = [line for line in text.splitlines() if "before" in line or "after" in line]
    assert len(lines) == 2
    assert "after" in lines[0] and "before" in lines[1]  # newest first
    assert "frozen" in lines[0] and "answered=1, setup_error=1" in lines[0]
    assert "live" in lines[1] and "answered=2" in lines[1]
    assert "command:" in lines[0]


def test_runs_list_empty(tmp_path, capsys):
    assert _invoke("runs", "list", "--out", str(tmp_path)).strip() == f"no runs under {tmp_path}"
    assert main(["runs", "list", "--out", str(tmp_path / "nope")]) == 1  # a mistyped --out: no "no runs"
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path / 'nope'}: no such folder (give the folder "
                                               "the runs were written to with --out)")


def test_runs_show_table(runs):
    _, before, after = runs
    text = _invoke("runs", "show", str(after))
    assert "run after" in text and "agent=command:" in text
    rows = {cells[0]: cells for cells in _rows(text)}
    assert set(rows) == {MUG, WIKI}
    assert rows[MUG] == [MUG, "frozen", "2", "answered", "", "Shop", "0", "complete", ""]
    assert rows[WIKI][:8] == [WIKI, "frozen", "0", "setup_error", "yes", "", "", ""]  # could not run: no validity
    assert rows[WIKI][8].startswith(f"no snapshot of task '{WIKI}'")
    # piped, the error is whole (cut only for a terminal)
    assert len(rows[WIKI][8]) > 60 and rows[WIKI][8] == load_trajectory(episode_dir(after, WIKI, "frozen")).error
    assert "episode errors: 1 of 2 (setup_error 1): these could not run" in text
    live = _invoke("runs", "show", str(before))
    assert "Shop" in live and "Encyclopedia" in live and live.count("live") >= 2


def test_runs_show_json(runs):
    _, before, after = runs
    data = json.loads(_invoke("runs", "show", str(after), "--json"))
    assert data["run"]["run_id"] == "after" and data["run"]["modes"] == ["frozen"]
    assert data["run"]["episodes"] == {"answered": 1, "setup_error": 1}
    eps = {e["task"]: e for e in data["episodes"]}
    assert eps[MUG] == {"task": MUG, "mode": "frozen", "repeat": 0, "steps": 2, "end_reason": "answered", "answer": "Shop",
                        "misses": 0, "missed_urls": [], "validity": "complete", "set_aside": {}, "shared_from": {}, "error": None,
                        "episode_error": False}
    assert eps[WIKI]["end_reason"] == "setup_error" and eps[WIKI]["misses"] is None and eps[WIKI]["episode_error"]
    assert data["episode_errors"] == 1
    # the frozen run replayed the live run's own archive
    t = load_trajectory(episode_dir(after, MUG, "frozen"))
    assert t.snapshot_path.startswith(str(episode_dir(before, MUG, "live")))


def test_runs_show_not_a_run(tmp_path, capsys):
    assert main(["runs", "show", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tmp_path}: not a run folder (no run.json)"
