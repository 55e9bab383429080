"""``ego2web_replay.browsergym``: ego2web tasks as BrowserGym environments, live and frozen.

The real ``browsergym-core`` package and Debian's Chromium. A scripted BrowserGym
agent (BrowserGym's observation and its high-level action set, no model) runs a demo
task live against the demo site through the recording proxy; then the site is
stopped, a stand-in "live" server takes its port, and the same agent runs the task
frozen from the live episode's own archive: no miss, not one request to the
stand-in. Both episodes land in one run folder that ``judge --judge rule``,
``track`` and ``compare`` read as any run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ego2web_replay.browser import chromium_executable, chromium_version
from ego2web_replay.browsergym import gym_id, register
from ego2web_replay.browsergym.actions import to_action
from ego2web_replay.cli import main
from ego2web_replay.errors import BrowserError, Ego2WebError, SnapshotError
from ego2web_replay.models import (
    Action,
    ReplayStats,
    episode_dir,
    load_run,
    load_trajectory,
    read_model,
)
from ego2web_replay.testing.browsergym_agent import LinkThenAnswerAgent, run_agent
from ego2web_replay.tracking.compare import compare

pytest.importorskip("browsergym.core")
gym = pytest.importorskip("gymnasium")
pytestmark = pytest.mark.slow  # Chromium, the demo site

TASK = "shop-mug-price"
RUN = "bgym"


def _agent() -> LinkThenAnswerAgent:
    return LinkThenAnswerAgent("Red Ceramic Mug", r"\$\d+\.\d\d")


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: Any, ca: Any) -> dict[str, Any]:
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.testing.standin import StandIn

    root = tmp_path_factory.mktemp("browsergym")
    site = DemoSite().start()
    suite = write_demo_suite(root / "suite", site.url, [TASK])
    runs = root / "runs"
    try:
        (live_id,) = register(suite, mode="live", out=runs, run_id=RUN, guard="loopback", keyframes=2, max_side=64)
        live_env = gym.make(live_id)
        live_agent = _agent()
        live_actions = run_agent(live_env, live_agent)
    finally:
        site.stop()
    snapshots = episode_dir(runs / RUN, TASK, "live") / "snapshots"
    stand_in = StandIn().start(port=site.port)
    try:
        (frozen_id,) = register(suite, snapshots=snapshots, mode="frozen", out=runs, run_id=RUN, keyframes=2,
                                max_side=64)
        frozen_env = gym.make(frozen_id)
        frozen_actions = run_agent(frozen_env, _agent())
    finally:
        stand_in.stop()
    return {"root": root, "suite": suite, "runs": runs, "site": site, "stand_in": stand_in.requests,
            "live_actions": live_actions, "frozen_actions": frozen_actions, "live_agent": live_agent,
            "live_env": live_env.unwrapped, "frozen_env": frozen_env.unwrapped, "frozen_id": frozen_id}


def test_frozen_episode_is_hermetic_with_no_miss(episodes):
    folder = episode_dir(episodes["runs"] / RUN, TASK, "frozen")
    stats = read_model(folder / "replay_stats.json", ReplayStats, "replay stats")
    assert stats.miss == 0 and stats.exact > 0
    assert episodes["stand_in"] == []  # the site's port answered again, and nothing asked it
    traj = load_trajectory(folder)
    assert traj.replay is not None and traj.replay.miss == 0
    assert traj.end_reason == "answered" and traj.answer == "$12.99"
    assert [s.action.kind for s in traj.steps] == ["click", "answer"]
    assert traj.steps[0].action.selector and traj.steps[0].action.selector.startswith('[bid="')
    assert traj.steps[0].url.endswith("/shop/item/7") and traj.steps[0].screenshot
    assert (folder / traj.steps[0].screenshot).is_file()
    page = json.loads((folder / traj.steps[1].page).read_text("utf-8"))
    assert "Price: $12.99" in page["text"]
    assert traj.extra["browsergym_actions"] == episodes["frozen_actions"]
    assert traj.snapshot_id and traj.snapshot_path


def test_every_browser_is_debian_chromium_sealed_behind_the_proxy(episodes):
    folder = episode_dir(episodes["runs"] / RUN, TASK, "frozen")
    traj = load_trajectory(folder)
    browser = traj.extra["browser"]
    assert browser["ignore_https_errors"] is False
    launches = browser["launches"]
    assert len(launches) == 2  # the task's browser and BrowserGym's chat window
    for launch in launches:
        assert launch["executable_path"] == chromium_executable()
        assert launch["proxy"].startswith("http://127.0.0.1:")
        args = launch["args"]
        assert any(a.startswith("--ignore-certificate-errors-spki-list=") for a in args)
        assert any(a.startswith("--host-resolver-rules=MAP * ~NOTFOUND") for a in args)
        assert "--webrtc-ip-handling-policy=disable_non_proxied_udp" in args
    assert chromium_version().split()[-1].startswith(browser["version"].split(".")[0])


def test_live_episode_goes_through_the_recorder(episodes):
    folder = episode_dir(episodes["runs"] / RUN, TASK, "live")
    traj = load_trajectory(folder)
    assert traj.replay is None and traj.end_reason == "answered" and traj.answer == "$12.99"
    snap = folder / "snapshots" / TASK / traj.snapshot_id
    manifest = json.loads((snap / "manifest.json").read_text("utf-8"))
    assert manifest["source"] == "live-run"
    index = (snap / "index.cdxj").read_text("utf-8")
    assert "/shop/item/7" in index  # the page the agent opened, archived by the recorder
    assert [a.split("(")[0] for a in episodes["live_actions"]] == ["click", "send_msg_to_user"]
    assert episodes["live_actions"][-1] == episodes["frozen_actions"][-1]


def test_goal_has_the_instruction_and_frames_never_the_evidence(episodes):
    texts = episodes["live_agent"].seen
    suite_task = json.loads(episodes["suite"].read_text("utf-8").splitlines()[0])
    assert texts[0] == suite_task["instruction"]
    joined = "\n".join(texts)
    assert suite_task["why_video_dependent"] not in joined and "12.99" not in joined
    traj = load_trajectory(episode_dir(episodes["runs"] / RUN, TASK, "live"))
    assert traj.extra["inputs"]["modality"] == "keyframes" and len(traj.extra["inputs"]["frames"]) == 2


def test_judge_and_compare_read_the_browsergym_run(episodes, tmp_path, capsys):
    run_dir = episodes["runs"] / RUN
    manifest = load_run(run_dir)
    assert manifest.modes == ["live", "frozen"] and manifest.task_ids == [TASK]
    assert manifest.versions["browsergym-core"] == "0.14.3" and manifest.episodes == {"answered": 2}
    assert main(["judge", str(run_dir), "--judge", "rule", "--no-progress"]) == 0
    for mode in ("live", "frozen"):
        verdict = json.loads((episode_dir(run_dir, TASK, mode) / "verdicts" / "rule.json").read_text("utf-8"))
        assert verdict["success"] is True, verdict
    db = tmp_path / "track.duckdb"
    assert main(["ingest", str(run_dir), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["compare", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "browsergym" in out and "rule" in out
    comparison = compare(db)
    (group,) = comparison.groups
    assert (group.agent, group.judge, group.paired) == ("browsergym", "rule", 1)


def test_each_reset_is_the_next_repeat(episodes, tmp_path):
    snapshots = episode_dir(episodes["runs"] / RUN, TASK, "live") / "snapshots"
    (env_id,) = register(episodes["suite"], snapshots=snapshots, out=tmp_path / "runs", run_id="again",
                         modality="none")
    from browsergym.core.action.highlevel import HighLevelActionSet

    # the arguments AgentLab's EnvArgs.make_env passes
    env = gym.make(env_id, disable_env_checker=True, max_episode_steps=1, headless=True,
                   wait_for_user_message=False, action_mapping=HighLevelActionSet().to_python_code,
                   use_raw_page_output=True, slow_mo=0, task_kwargs={"timeout": 10000})
    try:
        env.reset()
        *_, truncated, _ = env.step("noop(10)")
        assert truncated  # AgentLab's max_steps
        env.reset()  # the first episode is written, the second starts
    finally:
        env.close()
    run_dir = tmp_path / "runs" / "again"
    first, second = load_trajectory(episode_dir(run_dir, TASK, "frozen")), load_trajectory(
        episode_dir(run_dir, TASK, "frozen", 1))
    assert (first.repeat, second.repeat) == (0, 1)
    assert first.end_reason == "step_budget" and "without an answer" in (first.error or "")
    assert [s.action.kind for s in first.steps] == ["wait"] and first.replay.miss == 0
    assert second.end_reason == "no_actions" and second.extra["inputs"]["modality"] == "none"
    assert load_run(run_dir).episodes == {"step_budget": 1, "no_actions": 1}


def test_a_missing_snapshot_is_a_setup_error(episodes, tmp_path):
    (env_id,) = register(episodes["suite"], snapshots=tmp_path / "none", mode="frozen", out=tmp_path / "runs",
                         run_id="missing")
    env = gym.make(env_id)
    with pytest.raises(SnapshotError):
        env.reset()
    env.close()
    traj = load_trajectory(episode_dir(tmp_path / "runs" / "missing", TASK, "frozen"))
    assert traj.end_reason == "setup_error" and "snapshot" in (traj.error or "")


def test_unsealing_options_are_refused(episodes):
    with pytest.raises(BrowserError, match="ignore_https_errors"):
        gym.make(episodes["frozen_id"], pw_context_kwargs={"ignore_https_errors": True})
    with pytest.raises(BrowserError, match="executable_path"):
        gym.make(episodes["frozen_id"], pw_chromium_kwargs={"executable_path": "/bin/true"})
    with pytest.raises(Ego2WebError, match="task_kwargs spec"):
        gym.make(episodes["frozen_id"], task_kwargs={"spec": None})


def test_ids_and_bad_arguments(tmp_path):
    assert gym_id("t1") == "browsergym/ego2web.t1"
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps({"id": "t1", "instruction": "x", "start_url": "http://127.0.0.1:9/"}) + "\n")
    with pytest.raises(Ego2WebError, match="snapshots="):
        register(suite, mode="frozen")
    with pytest.raises(Ego2WebError, match="unknown mode"):
        register(suite, snapshots=tmp_path, mode="both")
    with pytest.raises(Ego2WebError, match="unknown miss policy"):
        register(suite, snapshots=tmp_path, miss="nonsense")


@pytest.mark.parametrize(("raw", "expected"), [
    ("click('12')", Action(kind="click", selector='[bid="12"]')),
    ("fill('5', 'crunchy')", Action(kind="type", selector='[bid="5"]', value="crunchy")),
    ("press('5', 'Enter')", Action(kind="press", selector='[bid="5"]', key="Enter")),
    ("keyboard_press('Enter')", Action(kind="press", key="Enter")),
    ("goto('http://127.0.0.1:8/shop')", Action(kind="goto", url="http://127.0.0.1:8/shop")),
    ("go_back()", Action(kind="back")),
    ("scroll(0, 200)", Action(kind="scroll", dx=0, dy=200)),
    ("mouse_click(10, 20)", Action(kind="click", x=10, y=20)),
    ("noop(500)", Action(kind="wait", seconds=0.5)),
    ("click('3')\nsend_msg_to_user('150 kcal')", Action(kind="answer", answer="150 kcal")),
    ("report_infeasible('gone')", Action(kind="stop")),
    ("hover('3')", Action(kind="wait", seconds=0)),
    ("page.mouse.click(1, 2); x = 1", Action(kind="wait", seconds=0)),
])
def test_browsergym_actions_as_ours(raw, expected):
    assert to_action(raw) == expected
