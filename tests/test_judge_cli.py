"""The `judge` command line: default subcommand, judges end to end, agreement, one-line errors."""

from __future__ import annotations

import json
import socket

import pytest

from ego2web_replay.cli import main
from ego2web_replay.testing.episodes import make_episode, make_run_manifest
from ego2web_replay.testing.openai_server import FakeOpenAIServer


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EGO2WEB_JUDGE_MODEL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def run(tmp_path):
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps({"id": "T1", "instruction": "Price of the kettle?", "start_url": "http://s.test/",
                                 "expected_answer": "$20"}) + "\n"
                     + json.dumps({"id": "T2", "instruction": "x", "start_url": "http://s.test/",
                                   "url_patterns": ["/cart$"]}) + "\n")
    run = tmp_path / "runs" / "r1"
    make_episode(run, "T1", "frozen", answer="It costs $20", urls=["http://s.test/k"])
    make_episode(run, "T2", "frozen", answer="done", urls=["http://s.test/k"])
    make_run_manifest(run, suite)
    return run


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def test_rule_judge_as_written_in_the_issue(run, capsys):
    assert main(["judge", str(run), "--judge", "rule", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "frozen: 1/2 success (50.0%), 0 error(s)" in out
    assert json.loads((run / "episodes/T1/frozen/verdicts/rule.json").read_text())["success"] is True


def test_frozen_score_is_printed_with_its_coverage(run, capsys):
    from ego2web_replay.models import ReplayStats, load_trajectory, save_model

    for task, validity in (("T1", "complete"), ("T2", "off-snapshot")):
        ep = run / "episodes" / task / "frozen"
        traj = load_trajectory(ep)
        traj.replay = ReplayStats(exact=3, validity=validity)
        save_model(ep / "trajectory.json", traj)
    assert main(["judge", str(run), "--judge", "rule", "--no-progress", "--no-db"]) == 0
    out = capsys.readouterr().out
    assert ("frozen: 1/2 success (50.0%), 0 error(s), 0 tokens; coverage: 1/2 complete, success over "
            "complete 1/1 (100.0%)") in out


def test_verdicts_table_names_the_repeat(run, capsys):
    make_episode(run, "T1", "frozen", answer="It is $20", urls=["http://s.test/k"], repeat=1)
    assert main(["judge", str(run), "--judge", "rule", "--no-progress", "--no-db"]) == 0
    out = capsys.readouterr().out
    assert "frozen r1" in out and "frozen: 2/3 success" in out
    assert json.loads((run / "episodes/T1/frozen-r1/verdicts/rule.json").read_text())["repeat"] == 1


def test_the_verdicts_table_never_shows_an_episode_that_could_not_run_as_a_failure(run, capsys):
    from ego2web_replay.models import load_trajectory, save_model

    ep = make_episode(run, "T2", "frozen", urls=["http://s.test/k"])
    traj = load_trajectory(ep)
    traj.end_reason, traj.error = "setup_error", "no snapshot of task T2"
    save_model(ep / "trajectory.json", traj)
    assert main(["judge", str(run), "--judge", "rule", "--no-progress", "--no-db"]) == 0
    out = capsys.readouterr().out
    t2 = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("T2"))
    cells = [c.strip() for c in t2.strip("│ ").split("│")]
    assert cells[:4] == ["T2", "frozen", "not judged", "–"]
    assert "frozen: 1/1 success (100.0%), 0 error(s), 1 episode error(s) (could not run; not judged)" in out


def test_ego2web_over_loopback_then_agreement(run, tmp_path, capsys):
    def answer(body):
        system = body["messages"][0]["content"]
        if "key points" in system and "Key Points:" in system:
            return "Key Points:\n1. the kettle price"
        if "Score:" in system:
            return "Summary: kettle page.\nScore: 4"
        return "Thoughts: fine.\nStatus: success"

    with FakeOpenAIServer(answer) as srv:
        code = main(["judge", str(run), "--judge", "ego2web", "--model", "gpt-4o", "--base-url", srv.base_url,
                     "--threshold", "4", "--no-progress"])
        assert code == 0, capsys.readouterr().err
        assert len(srv.requests) == 6
    assert "frozen: 2/2 success" in capsys.readouterr().out
    v = json.loads((run / "episodes/T2/frozen/verdicts/ego2web.json").read_text())
    assert v["judge"]["settings"]["threshold"] == 4 and v["judge"]["model"] == "gpt-4o"
    labels = tmp_path / "labels.csv"
    labels.write_text("task_id,mode,label\nT1,frozen,success\nT2,frozen,failure\n")
    assert main(["judge", "agreement", str(run), "--human", str(labels), "--iterations", "100"]) == 0
    out = capsys.readouterr().out
    assert "average over 1 agent(s)" in out and "pooled (all episodes)" in out and "0.500" in out
    report = json.loads((run / "agreement-ego2web.json").read_text())
    assert report["pooled"]["fp"] == 1 and report["pooled"]["tp"] == 1 and report["average"]["agreement"] == 0.5
    assert main(["judge", "agreement", str(run), "--human", str(labels), "--iterations", "100", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == report  # only the JSON on stdout
    # the old names still work, hidden and deprecated
    old = tmp_path / "old.json"
    assert main(["judge", "agreement", str(run), "--human", str(labels), "--bootstrap", "100", "--out", str(old)]) == 0
    assert json.loads(old.read_text()) == report and "deprecated" in capsys.readouterr().err


def test_judging_again_with_another_model_keeps_the_old_verdicts_and_compare_names_the_models(run, tmp_path, capsys):
    from ego2web_replay.tracking.compare import compare

    for task in ("T1", "T2"):
        make_episode(run, task, "live", answer="It costs $20", urls=["http://s.test/k"])

    def answer(body):
        system = body["messages"][0]["content"]
        if "Key Points:" in system:
            return "Key Points:\n1. the kettle price"
        return "Summary: kettle page.\nScore: 4" if "Score:" in system else "Thoughts: fine.\nStatus: success"

    db = tmp_path / "e2w.duckdb"
    with FakeOpenAIServer(answer) as srv:
        judge = ["judge", str(run), "--judge", "ego2web", "--base-url", srv.base_url, "--no-progress", "--db", str(db)]
        assert main([*judge, "--model", "model-a"]) == 0
        assert "replacing" not in capsys.readouterr().err
        assert main([*judge, "--model", "model-a"]) == 0  # judged alike again: nothing to keep, nothing said
        assert "replacing" not in capsys.readouterr().err
        # the frozen verdicts judged again with another model: the old ones are kept, and it is said
        for task in ("T1", "T2"):
            (run / "episodes" / task / "live").rename(run / "episodes" / task / "live.away")
        assert main([*judge, "--model", "model-b"]) == 0
        for task in ("T1", "T2"):
            (run / "episodes" / task / "live.away").rename(run / "episodes" / task / "live")
    err = capsys.readouterr().err
    assert "warning: replacing 2 ego2web verdict(s) made with model model-a, prompts ego2web-v3 (now model model-b" in err
    kept = sorted((run / "episodes/T1/frozen/verdicts/replaced").glob("*.json"))
    assert len(kept) == 1 and kept[0].name.startswith("ego2web-model-a-")
    assert json.loads(kept[0].read_text())["judge"]["model"] == "model-a"
    assert json.loads((run / "episodes/T1/frozen/verdicts/ego2web.json").read_text())["judge"]["model"] == "model-b"
    # live judged with one model, frozen with another: never compared as if alike
    assert main(["ingest", str(run), "--db", str(db)]) == 0
    (g,) = compare(db).groups
    assert g.judge_models == {"frozen": ["model-b (prompts ego2web-v3)"], "live": ["model-a (prompts ego2web-v3)"]}
    assert g.judge_mixed
    assert main(["compare", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "MIXED" in out and "model-a" in out and "model-b" in out


def test_no_endpoint_suggests_the_rule_judge(run, capsys):
    assert main(["judge", str(run), "--judge", "ego2web", "--model", "gpt-4o"]) == 1
    err = _err(capsys)
    assert err.startswith("error: no judge endpoint configured") and "--judge rule" in err


def test_unreachable_endpoint(run, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["judge", str(run), "--judge", "webvoyager", "--model", "m", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--max-retries", "0", "--no-progress"]) == 2  # checked first
    err = _err(capsys)
    assert "unreachable" in err and f"127.0.0.1:{port}" in err
    assert not (run / "episodes/T1/frozen/verdicts/webvoyager.json").exists()


def test_unknown_judge_and_missing_run_and_missing_files(run, tmp_path, capsys):
    assert main(["judge", str(run), "--judge", "gpt"]) == 1
    assert "unknown judge 'gpt'; known judges: ego2web, webjudge, webvoyager, rule, rubric" in _err(capsys)
    assert main(["judge", str(tmp_path / "nope"), "--judge", "rule"]) == 1
    assert "run folder not found" in _err(capsys)
    (run / "run.json").unlink()
    assert main(["judge", str(run), "--judge", "rule"]) == 1
    assert "pass --tasks FILE" in _err(capsys)
    assert main(["judge", "run", str(run), "--judge", "rule", "--tasks", str(tmp_path / "tasks.jsonl"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    (run / "episodes/T2/frozen/trajectory.json").unlink()
    make_episode(run, "T9", "live", answer="x")
    assert main(["judge", str(run), "--judge", "rule", "--tasks", str(tmp_path / "tasks.jsonl"),
                 "--no-progress"]) == 0
    assert "frozen: 1/1 success (100.0%), 1 error(s)" in capsys.readouterr().out
    t2 = json.loads((run / "episodes/T2/frozen/verdicts/rule.json").read_text())
    assert "trajectory.json missing" in t2["error"] and t2["success"] is False
    t9 = json.loads((run / "episodes/T9/live/verdicts/rule.json").read_text())
    assert "no task with id 'T9'" in t9["error"]


def test_malformed_labels(run, tmp_path, capsys):
    labels = tmp_path / "labels.csv"
    labels.write_text("task_id,label\nT1,success\n")
    assert main(["judge", "agreement", str(run), "--human", str(labels)]) == 1
    assert "missing column(s) mode" in _err(capsys)


def test_help(capsys):
    for args in (["judge", "--help"], ["judge", "run", "--help"], ["judge", "agreement", "--help"]):
        assert main(args) == 0
    out = capsys.readouterr().out
    assert "task_id,mode,label" in out and "--base-url" in out


def test_judge_exits_non_zero_when_every_verdict_errored(run, tmp_path, capsys):
    for task in ("T1", "T2"):
        (run / f"episodes/{task}/frozen/trajectory.json").unlink()
    assert main(["judge", str(run), "--judge", "rule", "--no-progress", "--no-db"]) == 1
    captured = capsys.readouterr()
    assert "frozen: 0/0 success (n/a), 2 error(s)" in captured.out
    assert captured.err.startswith("error: every verdict errored (2); first error:") and captured.err.count("\n") == 1
    assert json.loads((run / "episodes/T1/frozen/verdicts/rule.json").read_text())["error"]  # still written
