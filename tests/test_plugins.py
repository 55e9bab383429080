"""Agents and judges from outside the package: entry points and module:factory, recorded in their specs.

The plugins live in a real distribution on ``sys.path`` (a module and its
``.dist-info`` with ``entry_points.txt``), found by ``importlib.metadata``
exactly as an installed package would be.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ego2web_replay.agents import StepAgent, make_agent
from ego2web_replay.errors import AgentError, JudgeError
from ego2web_replay.judge.registry import make_judge
from ego2web_replay.judge.run import judge_run
from ego2web_replay.models import AgentSpec
from ego2web_replay.plugins import AGENT_GROUP, JUDGE_GROUP, plugin_names
from ego2web_replay.testing.tracking import EpisodeSpec, make_run, make_suite

MODULE = textwrap.dedent('''
    from datetime import UTC, datetime

    from ego2web_replay.actions import Action
    from ego2web_replay.models import AgentSpec, JudgeSpec, Verdict, load_trajectory


    class AnswerIs:
        """Success when the episode's answer is the expected one."""

        def __init__(self, expected):
            self.expected = expected
            self.spec = JudgeSpec(name="answer-is", prompt_version="none")

        def judge(self, episode_dir, task):
            traj = load_trajectory(episode_dir)
            ok = traj.answer == self.expected
            return Verdict(task_id=traj.task_id, mode=traj.mode, judge=self.spec, success=ok, score=float(ok),
                           thoughts=f"answer {traj.answer!r}", judged_at=datetime.now(UTC))


    def answer_is(expected="42", cache_dir=None, concurrency=1):
        return AnswerIs(expected)


    class Echo:
        def __init__(self, answer):
            self.spec = AgentSpec(name="echo")
            self.answer = answer

        def start(self, task):
            pass

        def act(self, obs):
            return Action(kind="answer", answer=self.answer)


    def echo(answer="hi"):
        return Echo(answer)


    def no_spec():
        return object()


    NOT_CALLABLE = 3
''')

ENTRY_POINTS = textwrap.dedent('''
    [ego2web_replay.judges]
    answer-is = e2w_toy_plugins:answer_is
    broken = e2w_toy_missing_module:factory

    [ego2web_replay.agents]
    echo = e2w_toy_plugins:echo
''')


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    (site / "e2w_toy_plugins-1.0.dist-info").mkdir(parents=True)
    (site / "e2w_toy_plugins-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: e2w-toy-plugins\nVersion: 1.0\n")
    (site / "e2w_toy_plugins-1.0.dist-info" / "entry_points.txt").write_text(ENTRY_POINTS)
    (site / "e2w_toy_plugins.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_entry_points_are_listed(plugins: Path) -> None:
    assert plugin_names(JUDGE_GROUP) == ["answer-is", "broken"]
    assert plugin_names(AGENT_GROUP) == ["echo"]


@pytest.mark.parametrize("name", ["answer-is", "e2w_toy_plugins:answer_is"])
def test_a_judge_plugin_judges_a_run_and_its_spec_says_so(plugins: Path, tmp_path: Path, name: str) -> None:
    suite = make_suite(tmp_path / "suite.json", {"t1": "shopping", "t2": "shopping"})
    run = make_run(tmp_path / "runs", "r1", AgentSpec(name="scripted"),
                   [EpisodeSpec("t1", "live", answer="42"), EpisodeSpec("t2", "frozen", answer="7")], suite=suite)
    verdicts = judge_run(run, name, tasks=suite, progress=False, settings={"expected": "42"})
    assert [(v.task_id, v.success) for v in verdicts] == [("t1", True), ("t2", False)]
    spec = verdicts[0].judge
    assert spec.name == "answer-is" and spec.plugin == name and spec.settings["expected"] == "42"
    assert spec.settings["cache_dir"] == str(run / "judge-cache") and spec.settings["concurrency"] == 4
    stored = json.loads((run / "episodes" / "t1" / "live" / "verdicts" / "answer-is.json").read_text())
    assert stored["judge"]["plugin"] == name and stored["judge"]["settings"]["expected"] == "42"


@pytest.mark.parametrize("name", ["echo", "e2w_toy_plugins:echo"])
def test_an_agent_plugin_is_built_with_its_settings_recorded(plugins: Path, name: str) -> None:
    agent = make_agent(name, answer="yes")
    assert isinstance(agent, StepAgent) and agent.answer == "yes"  # type: ignore[union-attr]
    assert agent.spec.plugin == name and agent.spec.settings == {"answer": "yes"}
    assert make_agent("scripted").spec.plugin is None


@pytest.mark.parametrize(("make", "name", "settings", "message"), [
    (make_judge, "broken", {}, "cannot load plugin 'broken' (e2w_toy_missing_module:factory) of "
                               "ego2web_replay.judges: ModuleNotFoundError"),
    (make_judge, "e2w_toy_plugins:answer_is", {"colour": "red"}, "judge 'e2w_toy_plugins:answer_is' does not "
                                                                 "take these settings (colour)"),
    (make_judge, "e2w_toy_plugins:echo", {}, "has no judge(episode_dir, task)"),
    (make_judge, "e2w_toy_plugins:NOT_CALLABLE", {}, "is not callable"),
    (make_judge, "nosuch", {}, "installed plugins: answer-is, broken"),
    (make_agent, "e2w_toy_plugins:no_spec", {}, "without a spec"),
    (make_agent, "e2w_toy_plugins:answer_is", {}, "neither act()"),
    (make_agent, "nosuch", {}, "installed plugins: echo"),
])
def test_plugin_errors_are_one_line(plugins: Path, make, name: str, settings: dict, message: str) -> None:
    with pytest.raises((AgentError, JudgeError)) as e:
        make(name, **settings)
    assert message in str(e.value) and "\n" not in str(e.value)
