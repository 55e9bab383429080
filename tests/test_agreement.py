"""Agreement statistics against hand-computed values; labels files; majority votes."""

from __future__ import annotations

import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.agreement import (
    agreement,
    agreement_table,
    average_stats,
    compute_stats,
    load_labels,
)
from ego2web_replay.judge.verdicts import error_verdict, write_verdict
from ego2web_replay.models import JudgeSpec, Verdict
from ego2web_replay.testing.episodes import make_episode

# (human, judge): TP=4, FP=1, FN=2, TN=3
PAIRS = [(True, True)] * 4 + [(False, True)] + [(True, False)] * 2 + [(False, False)] * 3


def test_statistics_match_hand_computed_values():
    s = compute_stats(PAIRS, bootstrap=500, seed=1)
    assert (s.n, s.tp, s.fp, s.fn, s.tn) == (10, 4, 1, 2, 3)
    assert s.agreement == 0.7
    # po = 0.7; pe = (5*6 + 5*4) / 100 = 0.5; kappa = 0.2 / 0.5
    assert s.kappa == pytest.approx(0.4)
    assert s.fpr == 0.25 and s.fnr == pytest.approx(1 / 3, abs=1e-6)
    lo, hi = s.ci["agreement"]
    assert 0.3 <= lo < 0.7 < hi <= 1.0
    assert s.ci["kappa"][0] < 0.4 < s.ci["kappa"][1]
    assert compute_stats(PAIRS, bootstrap=500, seed=1) == s  # seeded: reproducible


def test_perfect_and_degenerate_cases():
    s = compute_stats([(True, True), (False, False)], bootstrap=0)
    assert s.agreement == 1.0 and s.kappa == 1.0 and s.fpr == 0.0 and s.fnr == 0.0 and s.ci == {}
    one_class = compute_stats([(True, True)] * 3, bootstrap=50)
    assert one_class.kappa is None and one_class.fpr is None and one_class.fnr == 0.0
    assert one_class.ci["kappa"] is None
    assert compute_stats([]).n == 0


def test_average_over_agents_is_the_mean_of_per_agent_figures():
    """The paper's agreement rate is per agent, then averaged: every agent weighs the same."""
    big, small = PAIRS, [(True, True), (True, True)]  # 10 episodes at 0.7; 2 at 1.0, humans never say failure
    a = average_stats({"big": big, "small": small}, bootstrap=400, seed=3)
    assert (a.agents, a.n) == (2, 12)
    assert a.agreement == pytest.approx((0.7 + 1.0) / 2)  # pooled would be 9/12 = 0.75
    assert compute_stats(big + small, bootstrap=0).agreement == 0.75
    assert a.fnr == pytest.approx((1 / 3 + 0.0) / 2, abs=1e-6)
    # undefined for "small" (one class: no kappa; no human failure: no FPR): the mean is over "big" only, and says so
    assert a.kappa == pytest.approx(0.4) and a.fpr == 0.25 and a.left_out == {"kappa": 1, "fpr": 1}
    lo, hi = a.ci["agreement"]
    assert 0.5 <= lo < a.agreement < hi <= 1.0  # "small" agrees in every resample, so no round is under 0.5
    assert average_stats({"big": big, "small": small}, bootstrap=400, seed=3) == a  # seeded: reproducible
    assert average_stats({}).agents == 0 and average_stats({}).agreement is None


def test_agreement_command_reports_agents_then_their_average_then_pooled(tmp_path, capsys):
    import json

    from ego2web_replay.cli import main

    a, b = tmp_path / "run-a", tmp_path / "run-b"
    for task, success in (("T1", True), ("T2", True), ("T3", False), ("T4", False)):
        _verdict(make_episode(a, task, "frozen", answer="x", agent="alpha"), success)
    _verdict(make_episode(b, "T1", "frozen", answer="x", agent="beta"), False)
    labels = tmp_path / "labels.csv"
    labels.write_text("task_id,mode,label,agent\nT1,frozen,success,alpha\nT2,frozen,failure,alpha\n"
                      "T3,frozen,failure,alpha\nT4,frozen,failure,alpha\nT1,frozen,failure,beta\n")
    assert main(["judge", "agreement", str(a), str(b), "--human", str(labels), "--iterations", "50"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    names = [r.split("│")[1].strip() for r in rows if r.split("│")[1].strip() not in ("", "agent")]
    assert names == ["alpha", "beta", "average over 2 agent(s)", "pooled (all episodes)"]
    average = next(r for r in rows if "average over" in r)
    assert "0.875" in average  # (0.75 + 1.0) / 2; the pooled row has 4/5 = 0.800
    assert "0.800" in next(r for r in rows if "pooled" in r)
    report = json.loads((a / "agreement-ego2web.json").read_text())
    assert report["version"] == 2 and report["average"]["agreement"] == 0.875 and report["pooled"]["agreement"] == 0.8
    assert {k: v["agreement"] for k, v in report["per_agent"].items()} == {"alpha": 0.75, "beta": 1.0}


def _verdict(ep, success, judge="ego2web"):
    write_verdict(ep, Verdict(task_id=ep.parent.name, mode=ep.name, judge=JudgeSpec(name=judge),
                              success=success, score=float(success)))


def test_agreement_over_runs_with_majority_votes_and_agents(tmp_path):
    a, b = tmp_path / "run-a", tmp_path / "run-b"
    judged = {("T1", True), ("T2", False), ("T3", True), ("T4", False)}
    for run, agent in ((a, "scripted"), (b, "openai")):
        for task, success in judged:
            _verdict(make_episode(run, task, "frozen", answer="x", agent=agent), success)
    write_verdict(make_episode(a, "T5", "frozen", answer="x"),
                  error_verdict(JudgeSpec(name="ego2web"), "T5", "frozen", "boom"))
    write_verdict(make_episode(a, "T6", "frozen", answer="x"),
                  error_verdict(JudgeSpec(name="ego2web"), "T6", "frozen", "not judged: could not run",
                                episode_error="setup_error"))
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "task_id,mode,label,annotator,agent\n"
        "T1,frozen,success,ann1,scripted\nT1,frozen,failure,ann2,scripted\nT1,frozen,1,ann3,scripted\n"  # 2:1 success
        "T2,frozen,success,ann1,scripted\n"          # judge failure -> FN
        "T3,frozen,failure,ann1,scripted\n"          # judge success -> FP
        "T4,frozen,0,ann1,scripted\n"                # TN
        "T1,frozen,yes,ann1,run-b\nT2,frozen,no,ann1,run-b\n"  # by run folder name: TP, TN
        "T3,frozen,success,ann1,openai\nT3,frozen,failure,ann2,openai\n"  # tie
        "T5,frozen,success,ann1,scripted\n"          # verdict error
        "T6,frozen,failure,ann1,scripted\n"          # the episode could not run: no judge error
        "T9,frozen,success,ann1,scripted\n"          # no episode
    )
    r = agreement([a, b], labels, bootstrap=200)
    assert set(r.per_agent) == {"scripted", "openai"}
    s = r.per_agent["scripted"]
    assert (s.tp, s.fp, s.fn, s.tn) == (1, 1, 1, 1) and s.agreement == 0.5
    o = r.per_agent["openai"]
    assert (o.tp, o.tn, o.n) == (1, 1, 2) and o.agreement == 1.0
    # as the paper: per agent, then the mean over agents (0.5 and 1.0); the pooled 4/6 is kept apart
    assert r.average.agents == 2 and r.average.agreement == 0.75 and r.average.n == 6
    assert r.pooled.n == 6 and r.pooled.agreement == pytest.approx(4 / 6, abs=1e-6)
    assert (r.ties, r.judge_errors, r.unmatched_labels, r.missing_verdicts) == (1, 1, 1, 0)
    assert r.episode_errors == 1
    t1 = next(e for e in r.episodes if e["task_id"] == "T1" and e["agent"] == "scripted")
    assert t1["human"] is True and t1["annotators"] == 3
    assert agreement_table(r).row_count == 4  # 2 agents, average, pooled
    ambiguous = tmp_path / "amb.csv"
    ambiguous.write_text("task_id,mode,label\nT1,frozen,success\n")
    with pytest.raises(JudgeError, match="several runs; add an 'agent' column"):
        agreement([a, b], ambiguous)
    with pytest.raises(JudgeError, match="no labelled episode has a 'rule' verdict"):
        agreement([a], labels, judge="rule")


@pytest.mark.parametrize("content, message", [
    ("task,mode,label\nT1,frozen,success\n", "missing column(s) task_id"),
    ("task_id,mode,label\nT1,frozen,maybe\n", "line 2: label 'maybe' is not success/failure"),
    ("task_id,mode,label\nT1,replay,success\n", "line 2: mode 'replay' is not live or frozen"),
    ("task_id,mode,label\n", "no labels in file"),
    ("", "missing column(s)"),
])
def test_malformed_labels_files(tmp_path, content, message):
    f = tmp_path / "labels.csv"
    f.write_text(content)
    with pytest.raises(JudgeError) as e:
        load_labels(f)
    assert message in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)


def test_missing_labels_file(tmp_path):
    with pytest.raises(JudgeError, match="labels file not found"):
        load_labels(tmp_path / "none.csv")


def test_labels_pick_a_repeat(tmp_path):
    """With `run --repeats K` one task and mode has K episodes: the optional repeat column (default 0) picks one."""
    run = tmp_path / "run"
    for repeat, success in enumerate((True, False, True)):
        ep = make_episode(run, "T1", "frozen", answer="x", repeat=repeat)
        write_verdict(ep, Verdict(task_id="T1", mode="frozen", repeat=repeat, judge=JudgeSpec(name="ego2web"),
                                  success=success, score=float(success)))
    labels = tmp_path / "labels.csv"
    labels.write_text("task_id,mode,label,repeat\nT1,frozen,success,\nT1,frozen,success,1\nT1,frozen,failure,2\n")
    r = agreement([run], labels, bootstrap=0)
    got = {e["repeat"]: (e["human"], e["judge"]) for e in r.episodes}
    assert got == {0: (True, True), 1: (True, False), 2: (False, True)}  # empty repeat is 0
    assert (r.pooled.tp, r.pooled.fn, r.pooled.fp) == (1, 1, 1)
    no_column = tmp_path / "plain.csv"
    no_column.write_text("task_id,mode,label\nT1,frozen,success\n")  # no column: repeat 0, not an ambiguity
    assert [e["repeat"] for e in agreement([run], no_column, bootstrap=0).episodes] == [0]
    labels.write_text("task_id,mode,label,repeat\nT1,frozen,success,7\n")
    with pytest.raises(JudgeError, match="1 unmatched"):  # no such repeat in the run
        agreement([run], labels, bootstrap=0)
    for bad in ("-1", "one", "1.5"):
        labels.write_text(f"task_id,mode,label,repeat\nT1,frozen,success,{bad}\n")
        with pytest.raises(JudgeError) as e:
            load_labels(labels)
        assert f"line 2: repeat '{bad}' is not a whole number" in str(e.value) and "\n" not in str(e.value)
