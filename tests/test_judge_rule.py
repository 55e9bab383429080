"""The offline rule judge on passing and failing hand-made episodes."""

from __future__ import annotations

import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.pages import DictPages
from ego2web_replay.judge.registry import make_judge
from ego2web_replay.judge.rule import answer_matches
from ego2web_replay.tasks import Task
from ego2web_replay.testing.episodes import make_episode

TASK = Task(id="T1", instruction="How many calories in the red Lays bag?", start_url="http://shop.test/",
            expected_answer="150 kcal", answer_patterns=[r"\b150\b"], must_match=["Lays", "red"],
            url_patterns=[r"/item/\d+$"])
PAGES = DictPages({"http://shop.test/item/7": "<html><title>Lays Classic</title><script>red()</script>"
                                             "<p>Colour: Red bag</p></html>"})


def test_passing_episode(tmp_path):
    ep = make_episode(tmp_path, "T1", answer="It has 150 kcal.", urls=["http://shop.test/", "http://shop.test/item/7"],
                      titles=["Shop", "Lays Classic"])
    v = make_judge("rule", pages=PAGES).judge(ep, TASK)
    assert v.success and v.score == 1.0 and v.error is None
    assert [c["kind"] for c in v.checks] == ["expected_answer", "answer_pattern", "must_match", "must_match",
                                             "url_pattern"]
    assert v.thoughts == "all 5 checks passed" and v.judge.name == "rule"


def test_failing_episode_says_which_check_failed(tmp_path):
    ep = make_episode(tmp_path, "T1", answer="It has 140 kcal.", urls=["http://shop.test/search"],
                      titles=["Search results"])
    v = make_judge("rule", pages=DictPages({})).judge(ep, TASK)
    assert not v.success and v.score == 0.0
    failed = {c["kind"] for c in v.checks if not c["passed"]}
    assert failed == {"expected_answer", "answer_pattern", "must_match", "url_pattern"}
    assert "expected_answer '150 kcal'" in v.thoughts and "must_match 'red'" in v.thoughts
    assert "final page not archived" in v.thoughts
    assert "url_pattern" in v.thoughts and "http://shop.test/search" in v.thoughts


def test_cue_found_only_on_the_archived_final_page(tmp_path):
    task = Task(id="T1", instruction="x", start_url="http://shop.test/", must_match=["red bag"])
    ep = make_episode(tmp_path, "T1", answer="done", urls=["http://shop.test/item/7"])
    assert make_judge("rule", pages=PAGES).judge(ep, task).success
    assert not make_judge("rule", pages=DictPages({})).judge(ep, task).success


def test_cue_on_a_program_agents_own_rendered_capture(tmp_path):
    """A program agent that keeps pages/step-NNN.json: the rule judge reads its last capture of the final URL."""
    from ego2web_replay.models import PageCapture, load_trajectory, save_model

    task = Task(id="T1", instruction="x", start_url="http://shop.test/", must_match=["$12.99"])
    ep = make_episode(tmp_path, "T1", answer="done", urls=["http://shop.test/item/7"])
    traj = load_trajectory(ep)
    assert not make_judge("rule", pages=DictPages({})).judge(ep, task).success
    traj.steps[0].page = "agent/pages/step-001.json"
    save_model(ep / traj.steps[0].page, PageCapture(step=1, url="http://shop.test/item/7", text="Price: $12.99"))
    save_model(ep / "trajectory.json", traj)
    assert make_judge("rule", pages=DictPages({})).judge(ep, task).success


def test_no_answer_and_nothing_to_check(tmp_path):
    ep = make_episode(tmp_path, "T1", answer=None)
    v = make_judge("rule", pages=PAGES).judge(ep, TASK)
    assert not v.success and "no final answer" in v.thoughts
    with pytest.raises(JudgeError, match="nothing to check"):
        make_judge("rule").judge(ep, Task(id="T1", instruction="x", start_url="http://a/"))


def test_missing_episode_files(tmp_path):
    with pytest.raises(JudgeError, match="trajectory.json missing"):
        (tmp_path / "e").mkdir()
        make_judge("rule").judge(tmp_path / "e", TASK)
    ep = make_episode(tmp_path, "T1", answer="150 kcal", urls=["http://shop.test/item/7"])
    (ep / "screenshots" / "step-001.png").unlink()
    with pytest.raises(JudgeError, match="screenshot of step 1 missing"):
        make_judge("rule").judge(ep, TASK)


@pytest.mark.parametrize("expected, answer, ok", [
    ("150 kcal", "it has 150 KCAL per bag", True),
    ("$12.99", "12.99 dollars", True),
    ("1,299", "costs 1299", True),
    ("150 kcal", "1500 kcal", False),
    ("Blue", "the red one", False),
])
def test_answer_matching(expected, answer, ok):
    assert answer_matches(expected, answer) is ok
