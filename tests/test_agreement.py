"""Agreement statistics against hand-computed values; labels files; majority votes."""

from __future__ import annotations

import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.agreement import agreement, agreement_table, compute_stats, load_labels
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
        "T9,frozen,success,ann1,scripted\n"          # no episode
    )
    r = agreement([a, b], labels, bootstrap=200)
    assert set(r.per_agent) == {"scripted", "openai"}
    s = r.per_agent["scripted"]
    assert (s.tp, s.fp, s.fn, s.tn) == (1, 1, 1, 1) and s.agreement == 0.5
    o = r.per_agent["openai"]
    assert (o.tp, o.tn, o.n) == (1, 1, 2) and o.agreement == 1.0
    assert r.overall.n == 6 and r.overall.agreement == pytest.approx(4 / 6, abs=1e-6)
    assert (r.ties, r.judge_errors, r.unmatched_labels, r.missing_verdicts) == (1, 1, 1, 0)
    t1 = next(e for e in r.episodes if e["task_id"] == "T1" and e["agent"] == "scripted")
    assert t1["human"] is True and t1["annotators"] == 3
    assert agreement_table(r).row_count == 3
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
    assert (r.overall.tp, r.overall.fn, r.overall.fp) == (1, 1, 1)
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
