"""Runs on the demo site: scripted and command agents, live and frozen, budgets, workers, resume, bad inputs.

One demo site, one suite and one recorded snapshot per task are shared by the
whole module; every proxy runs its upstream guard in ``loopback`` mode.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ego2web_replay.actions import Action
from ego2web_replay.cli import main
from ego2web_replay.models import AgentSpec, episode_dir, load_trajectory
from ego2web_replay.runner.episode import EpisodeRequest, run_episode
from ego2web_replay.runner.executor import Executor
from ego2web_replay.runner.run import RunSettings, load_run, run_suite
from ego2web_replay.tasks import load_tasks
from ego2web_replay.tracking.db import read_connection
from ego2web_replay.tracking.sink import TrackingSink

pytestmark = pytest.mark.slow

TASKS = ["shop-mug-price", "wiki-lighthouse-built"]
MUG, WIKI = TASKS  # only MUG is recorded; WIKI has no snapshot

# A program agent using only an HTTP client: urllib picks the proxy up from
# HTTP(S)_PROXY. It fetches the start page and answers the page's <title>.
# argv[1]: "ours" (trajectory.json), "history" (browser-use history.json),
# "slow" (ours, after a pause), "fail" (exits 3), "garbage" (unreadable JSON).
AGENT_PROGRAM = r'''
import json, os, re, sys, time, urllib.request
mode = sys.argv[1]
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
out = os.environ["EGO2WEB_OUT"]
os.makedirs(out, exist_ok=True)
if mode == "fail":
    sys.stderr.write("agent: cannot cope\n")
    sys.exit(3)
if mode == "garbage":
    open(os.path.join(out, "trajectory.json"), "w").write("{not json")
    sys.exit(0)
if mode == "slow":
    time.sleep(1.5)
url = task["start_url"]
with urllib.request.urlopen(url, timeout=20) as r:
    page = r.read().decode()
title = re.search(r"<title>(.*?)</title>", page).group(1)
if mode == "history":
    hist = {"history": [
        {"model_output": {"current_state": {"next_goal": "open the start page"},
                          "action": [{"go_to_url": {"url": url}}]},
         "result": [{"is_done": False}], "state": {"url": url, "title": title}},
        {"model_output": {"current_state": {"next_goal": "report"}, "action": [{"done": {"text": title}}]},
         "result": [{"is_done": True, "extracted_content": title}], "state": {"url": url, "title": title}}]}
    json.dump(hist, open(os.path.join(out, "history.json"), "w"))
else:
    steps = [{"index": 0, "action": {"kind": "goto", "url": url}, "url": url, "title": title},
             {"index": 1, "action": {"kind": "answer", "answer": title}, "url": url, "title": title}]
    json.dump({"steps": steps, "answer": title, "end_reason": "answered"},
              open(os.path.join(out, "trajectory.json"), "w"))
'''


@pytest.fixture(scope="module")
def demo(tmp_path_factory, ca):
    """The demo site, its suite (two tasks with clips) and a recorded snapshot of the first task."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task

    root = tmp_path_factory.mktemp("runner")
    site = DemoSite().start()
    suite_path = write_demo_suite(root / "suite", site.url, TASKS)
    suite = load_tasks(suite_path)
    snapshots = root / "snapshots"
    r = record_task(suite.get(MUG), snapshots, RecordOptions(guard="loopback"), ca=ca)
    assert r.ok, r.error
    program = root / "agent.py"
    program.write_text(AGENT_PROGRAM, "utf-8")
    yield {"site": site, "suite": suite, "suite_path": suite_path, "snapshots": snapshots, "root": root,
           "program": program}
    site.stop()


def _settings(demo, **kw) -> RunSettings:
    base = {"mode": "both", "snapshots_root": str(demo["snapshots"]), "guard": "loopback", "timeout_s": 60,
            "action_timeout_s": 10}
    base.update(kw)
    return RunSettings(**base)


def _command(demo, behaviour: str) -> str:
    return f"command:{sys.executable} {demo['program']} {behaviour}"


def _outcomes(run_dir: Path) -> dict[tuple[str, str], tuple[str, str | None, list[str | None]]]:
    out = {}
    for f in sorted(run_dir.glob("episodes/*/*/trajectory.json")):
        t = load_trajectory(f)
        out[(t.task_id, t.mode)] = (t.end_reason, t.answer, [s.url for s in t.steps])
    return out


@pytest.fixture(scope="module")
def scripted_run(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs-scripted")
    run_dir, results = run_suite(demo["suite"], agent_name="scripted", out=out, task_ids=[MUG],
                                 settings=_settings(demo))
    return run_dir, results


def test_scripted_live_and_frozen_agree(demo, scripted_run):
    run_dir, results = scripted_run
    assert [(r.task_id, r.mode) for r in results] == [(MUG, "live"), (MUG, "frozen")]
    for task_id in [MUG]:
        live = load_trajectory(episode_dir(run_dir, task_id, "live"))
        frozen = load_trajectory(episode_dir(run_dir, task_id, "frozen"))
        assert live.end_reason == frozen.end_reason == "answered", (live.error, frozen.error)
        assert [s.url for s in live.steps] == [s.url for s in frozen.steps]
        assert live.steps[-1].url.startswith(demo["site"].url)
        assert live.answer == frozen.answer == demo["suite"].get(task_id).expected_answer
        assert frozen.replay is not None and frozen.replay.miss == 0 and frozen.replay.exact > 0
        assert live.replay is None
        # the live episode is archived too; the frozen one replays the recorded snapshot
        assert live.snapshot_path and (Path(live.snapshot_path) / "manifest.json").exists()
        assert Path(frozen.snapshot_path).parent == demo["snapshots"] / task_id
        assert (episode_dir(run_dir, task_id, "frozen") / "screenshots" / "step-000.png").exists()
    m = load_run(run_dir)
    assert m.episodes == {"answered": 2} and m.finished_at is not None
    assert m.task_ids == [MUG] and m.modes == ["live", "frozen"] and m.suite_sha256 == demo["suite"].sha256
    assert not list(run_dir.glob("episodes/*/*.partial"))


def test_two_workers_give_the_same_results(demo, scripted_run, tmp_path, caplog):
    one, _ = scripted_run
    sink = TrackingSink(tmp_path / "t.duckdb")
    caplog.set_level("INFO", logger="ego2web_replay.runner")
    two, results = run_suite(demo["suite"], agent_name="scripted", out=tmp_path / "runs", task_ids=[MUG],
                             settings=_settings(demo, workers=2),
                             on_start=lambda run_dir, total, done: sink.run_started(run_dir),
                             on_episode=lambda s: sink.episode_finished(s.path.parents[2], s.path))
    assert len(results) == 2
    assert _outcomes(two) == _outcomes(one)
    # the workers returned summaries; the parent wrote them to the database
    with read_connection(tmp_path / "t.duckdb") as con:
        rows = con.execute("SELECT run_id, mode, end_reason FROM episodes ORDER BY mode").fetchall()
    assert sink.error is None and rows == [(two.name, "frozen", "answered"), (two.name, "live", "answered")]
    # -v: each episode's start and end are logged in the parent, though they ran in workers
    logged = [r.getMessage() for r in caplog.records]
    for mode in ("live", "frozen"):
        assert f"episode start: {MUG} {mode} (agent scripted)" in logged
        assert any(m.startswith(f"episode end: {MUG} {mode}: answered in ") for m in logged), logged


def test_step_budget_ends_the_episode(demo, tmp_path):
    run_dir, results = run_suite(demo["suite"], agent_name="scripted", out=tmp_path, task_ids=["shop-mug-price"],
                                 settings=_settings(demo, mode="frozen", max_steps=2))
    (r,) = results
    t = load_trajectory(r.path)
    assert t.end_reason == r.end_reason == "step_budget"
    assert len(t.steps) == 2 and t.answer is None
    assert "step budget of 2" in t.error


class SlowAgent:
    """A step agent that thinks for 0.4 s per step and never answers."""

    def __init__(self) -> None:
        self.spec = AgentSpec(name="slow", input_modality="none")

    def start(self, task) -> None:  # noqa: ANN001
        self.task = task

    def act(self, obs) -> Action:  # noqa: ANN001
        time.sleep(0.4)
        if obs.step == 0:
            return Action(kind="goto", url=self.task.start_url)
        return Action(kind="wait", seconds=0.05)


def test_timeout_ends_the_episode(demo, tmp_path):
    run_dir, results = run_suite(demo["suite"], agent_name=f"{__name__}:SlowAgent", out=tmp_path,
                                 task_ids=[MUG],
                                 settings=_settings(demo, mode="frozen", timeout_s=1.5, max_steps=30))
    (r,) = results
    t = load_trajectory(r.path)
    assert t.end_reason == "timeout", t.error
    assert "timeout (1.5 s)" in t.error
    assert 1 <= len(t.steps) < 6
    assert t.agent.name == "slow"


def test_command_agent_times_out(demo, tmp_path):
    slow = f"command:{sys.executable} -c 'import time; time.sleep(30)'"
    _, results = run_suite(demo["suite"], agent_name=slow, out=tmp_path, task_ids=["shop-mug-price"],
                           settings=_settings(demo, mode="frozen", timeout_s=1))
    (r,) = results
    t = load_trajectory(r.path)
    assert t.end_reason == "timeout" and "timeout (1 s)" in t.error
    assert t.extra["exit_code"] is None


def test_command_agent_live_and_frozen(demo, tmp_path):
    run_dir, results = run_suite(demo["suite"], agent_name=_command(demo, "ours"), out=tmp_path, task_ids=[MUG],
                                 settings=_settings(demo))
    assert len(results) == 2
    for task_id in [MUG]:
        live = load_trajectory(episode_dir(run_dir, task_id, "live"))
        frozen = load_trajectory(episode_dir(run_dir, task_id, "frozen"))
        assert live.end_reason == frozen.end_reason == "answered", (live.error, frozen.error, live.extra)
        assert live.answer == frozen.answer == "Shop"
        assert [s.url for s in live.steps] == [s.url for s in frozen.steps] == [demo["suite"].get(task_id).start_url] * 2
        # the program's traffic went through the proxies: archived live, served from the snapshot frozen
        assert frozen.replay.exact >= 1 and frozen.replay.miss == 0
        assert live.snapshot_path and (Path(live.snapshot_path) / "manifest.json").exists()
        assert live.extra["exit_code"] == 0 and live.agent.name == "command"
        assert live.task_id == task_id and frozen.mode == "frozen"


def test_both_proxies_of_a_run_hold_the_wire_limits_it_was_given(demo, tmp_path):
    from ego2web_replay.wire.budget import WireLimits

    # an agent that connects to its proxy and says nothing; it answers what the proxy told it
    silent = (f"command:{sys.executable} -c 'import os, socket, urllib.parse as u; "
              "p = u.urlsplit(os.environ[\"EGO2WEB_PROXY\"]); s = socket.create_connection((p.hostname, p.port)); "
              "data = b\"\".join(iter(lambda: s.recv(65536), b\"\")); "
              "open(os.path.join(os.environ[\"EGO2WEB_OUT\"], \"answer.txt\"), \"wb\").write(data.split(b\"\\r\\n\")[0])'")
    run_dir, results = run_suite(demo["suite"], agent_name=silent, out=tmp_path, task_ids=[MUG],
                                 settings=_settings(demo), wire=WireLimits(head_timeout_s=0.3))
    assert len(results) == 2
    for mode in ("live", "frozen"):
        t = load_trajectory(episode_dir(run_dir, MUG, mode))
        assert t.answer == "HTTP/1.1 408 Request Timeout", (mode, t.error, t.answer)
        # and the episode says so: not an answer of the snapshot's, nor of the site's
        refused = t.extra["proxy_refused"] if mode == "live" else t.replay.refused
        assert refused == {"timeout-head": 1}


def test_command_agent_browser_use_history(demo, tmp_path):
    run_dir, results = run_suite(demo["suite"], agent_name=_command(demo, "history"), out=tmp_path,
                                 task_ids=["shop-mug-price"], settings=_settings(demo, mode="frozen"))
    (r,) = results
    t = load_trajectory(r.path)
    start = demo["suite"].get("shop-mug-price").start_url
    assert t.end_reason == "answered" and t.answer == "Shop"
    assert [s.action.kind for s in t.steps] == ["goto", "answer"]
    assert t.steps[0].action.url == start and t.steps[0].url == start and t.steps[0].title == "Shop"
    assert t.steps[0].thought == "open the start page"
    assert t.extra["format"] == "browser-use"
    assert t.replay.exact >= 1 and t.replay.miss == 0


class _LastFirst:
    """Another executor: the jobs in reverse order, in this process, handed back as they finish."""

    def __init__(self) -> None:
        self.jobs: list[EpisodeRequest] = []

    def run(self, jobs):
        self.jobs = list(jobs)
        for job in reversed(self.jobs):
            yield run_episode(job)


def test_the_runner_takes_any_executor(demo, tmp_path):
    executor = _LastFirst()
    assert isinstance(executor, Executor)
    run_dir, results = run_suite(demo["suite"], agent_name=_command(demo, "ours"), out=tmp_path, task_ids=[MUG],
                                 settings=_settings(demo), executor=executor)
    assert [(j.task.id, j.mode) for j in executor.jobs] == [(MUG, "live"), (MUG, "frozen")]
    assert [(r.mode, r.end_reason) for r in results] == [("frozen", "answered"), ("live", "answered")]
    assert load_run(run_dir).episodes == {"answered": 2}


def test_bad_command_agents_fail_alone(demo, tmp_path):
    """A program that exits 3, one that writes garbage and a good one in one run: each episode on its own."""
    program = tmp_path / "dispatch.sh"
    py, agent = sys.executable, demo["program"]
    program.write_text(
        "#!/bin/sh\n"
        'case "$EGO2WEB_MODE $(cat "$EGO2WEB_TASK_FILE")" in\n'
        f'  live*{MUG}*) exec {py} {agent} fail ;;\n'
        f'  live*) exec {py} {agent} garbage ;;\n'
        f'  *) exec {py} {agent} ours ;;\n'
        "esac\n")
    program.chmod(0o755)
    run_dir, results = run_suite(demo["suite"], agent_name=f"command:{program}", out=tmp_path / "runs",
                                 task_ids=[MUG, WIKI], settings=_settings(demo, mode="both"))
    by = {(r.task_id, r.mode): r for r in results}
    assert len(by) == 4
    failed = load_trajectory(by[(MUG, "live")].path)
    assert failed.end_reason == "agent_error"
    assert failed.error.startswith("the program exited with code 3 (agent: cannot cope)")
    assert "\n" not in failed.error
    assert failed.extra["exit_code"] == 3 and "agent: cannot cope" in failed.extra["stderr"]
    garbage = load_trajectory(by[(WIKI, "live")].path)
    assert garbage.end_reason == "agent_error"
    assert garbage.error.startswith("the program wrote an unreadable trajectory:")
    assert garbage.extra["exit_code"] == 0
    good = by[(MUG, "frozen")]
    assert good.ok and good.end_reason == "answered" and good.answer == "Shop"
    assert by[(WIKI, "frozen")].end_reason == "setup_error"
    assert load_run(run_dir).episodes == {"agent_error": 2, "answered": 1, "setup_error": 1}


def test_missing_snapshot_is_a_setup_error_for_that_episode_only(demo, tmp_path):
    run_dir, results = run_suite(demo["suite"], agent_name=_command(demo, "ours"), out=tmp_path,
                                 settings=_settings(demo, mode="frozen"))
    by = {r.task_id: r for r in results}
    missing = load_trajectory(by[WIKI].path)
    assert missing.end_reason == "setup_error"
    assert f"no snapshot of task '{WIKI}'" in missing.error
    assert "record one with `ego2web-replay record`" in missing.error
    assert missing.steps == [] and missing.answer is None
    assert by[MUG].ok and by[MUG].answer == "Shop"
    assert load_run(run_dir).episodes == {"answered": 1, "setup_error": 1}


def test_the_agent_sandbox_is_a_command_agents_option(demo, tmp_path, capsys):
    code = main(["run", str(demo["suite_path"]), "--agent", "scripted", "--agent-sandbox", "on", "--out",
                 str(tmp_path), "--snapshots", str(demo["snapshots"])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--agent-sandbox are for command agents, not 'scripted'" in err
    assert not any(tmp_path.iterdir())
    # off: the program runs as before, and its trajectory says so
    _, results = run_suite(demo["suite"], agent_name=_command(demo, "ours"), out=tmp_path, task_ids=[MUG],
                           agent_settings={"sandbox": "off"}, settings=_settings(demo, mode="frozen"))
    (r,) = results
    assert load_trajectory(r.path).extra["sandbox"] == {"sealed": False, "why": "--agent-sandbox off"}


def test_unknown_agent_is_a_one_line_error(demo, tmp_path, capsys):
    code = main(["run", str(demo["suite_path"]), "--agent", "nosuch", "--out", str(tmp_path),
                 "--snapshots", str(demo["snapshots"])])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err.startswith("error: unknown agent 'nosuch'") and "scripted" in err and "\n" not in err
    assert not any(tmp_path.iterdir())


def test_resume_after_kill_finishes_without_redoing(demo, tmp_path, data_home):
    exe = Path(sys.executable).with_name("ego2web-replay")
    out = tmp_path / "runs"
    args = [str(exe), "run", str(demo["suite_path"]), "--agent", _command(demo, "slow"), "--mode", "both",
            "--task", MUG, "--snapshots", str(demo["snapshots"]), "--out", str(out), "--run-id", "r1",
            "--guard", "loopback", "--db", str(tmp_path / "t.duckdb")]
    env = dict(os.environ, EGO2WEB_REPLAY_HOME=str(data_home))
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    run_dir = out / "r1"
    live, frozen = (episode_dir(run_dir, MUG, m) / "trajectory.json" for m in ("live", "frozen"))
    deadline = time.monotonic() + 60
    try:
        while not live.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no episode finished in 60 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and the agent program it started
        proc.wait()
    assert not frozen.exists(), "killed too late: both episodes finished"
    before = (live.stat().st_mtime_ns, live.read_bytes())
    assert load_run(run_dir).finished_at is None

    r = subprocess.run(args + ["--resume"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "1 of 2 episodes already done" in r.stderr  # progress goes to stderr
    assert (live.stat().st_mtime_ns, live.read_bytes()) == before
    for f in (live, frozen):
        t = load_trajectory(f)
        assert t.end_reason == "answered" and t.answer == "Shop", t.error
    assert not list(run_dir.glob("episodes/*/*.partial"))
    m = load_run(run_dir)
    assert m.episodes == {"answered": 2} and m.finished_at is not None
    # the killed run's finished episode and the resumed one both reach the database
    with read_connection(tmp_path / "t.duckdb") as con:
        assert con.execute("SELECT mode, answer FROM episodes WHERE run_id = 'r1' ORDER BY mode").fetchall() == [
            ("frozen", "Shop"), ("live", "Shop")]


def test_resume_refuses_another_agent_or_nothing(demo, scripted_run, tmp_path):
    from ego2web_replay.errors import Ego2WebError

    run_dir, _ = scripted_run
    with pytest.raises(Ego2WebError, match="was run with agent 'scripted', not 'command:"):
        run_suite(demo["suite"], agent_name=_command(demo, "ours"), out=run_dir.parent, resume=run_dir,
                  settings=_settings(demo))
    with pytest.raises(Ego2WebError, match="nothing to resume under"):
        run_suite(demo["suite"], agent_name="scripted", out=tmp_path, resume=True, settings=_settings(demo))
    # resuming a finished run redoes nothing
    again, results = run_suite(demo["suite"], agent_name="scripted", out=run_dir.parent, resume=True,
                               settings=_settings(demo, workers=2))
    assert again == run_dir and results == []


def test_cli_run_with_no_snapshots_at_all_fails(demo, tmp_path, capsys):
    code = main(["run", str(demo["suite_path"]), "--agent", _command(demo, "ours"), "--mode", "frozen",
                 "--snapshots", str(tmp_path / "none"), "--out", str(tmp_path / "runs"), "--run-id", "r"])
    captured = capsys.readouterr()
    assert code == 1
    last = captured.err.strip().splitlines()[-1]  # after the per-episode progress lines
    assert last.startswith("error: every episode errored (2: setup_error); first error: no snapshot of task")
    assert "run folder:" in captured.out
    assert load_run(tmp_path / "runs" / "r").episodes == {"setup_error": 2}


def test_cli_run_exits_non_zero_when_every_episode_errored(demo, tmp_path, capsys):
    args = ["run", str(demo["suite_path"]), "--mode", "frozen", "--task", MUG, "--snapshots", str(demo["snapshots"]),
            "--out", str(tmp_path / "runs"), "--no-db"]
    assert main([*args, "--agent", _command(demo, "fail"), "--run-id", "bad"]) == 1
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1]  # after the per-episode progress lines
    assert last.startswith("error: every episode errored (1: agent_error); first error: the program exited "
                           "with code 3 (agent: cannot cope)")
    assert main([*args, "--agent", _command(demo, "ours"), "--run-id", "good"]) == 0


LLM_PROGRAM = r'''
import json, os, sys, urllib.request
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
out = os.environ["EGO2WEB_OUT"]
os.makedirs(out, exist_ok=True)
llm = os.environ["OPENAI_BASE_URL"]  # --base-url: on 127.0.0.1 like the site, another port
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": task["instruction"]}]}).encode()
req = urllib.request.Request(llm + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=20) as r:  # NO_PROXY names its host:port: straight to it
    reply = json.load(r)["choices"][0]["message"]["content"]
with urllib.request.urlopen(task["start_url"], timeout=20) as r:  # through the replay
    r.read()
json.dump({"steps": [{"index": 0, "action": {"kind": "answer", "answer": reply}, "url": task["start_url"]}],
           "answer": reply, "end_reason": "answered", "extra": {"no_proxy": os.environ["NO_PROXY"]}},
          open(os.path.join(out, "trajectory.json"), "w"))
'''


def test_command_agent_own_loopback_llm_bypasses_the_replay(demo, tmp_path):
    from ego2web_replay.testing.openai_server import FakeOpenAIServer

    program = tmp_path / "llm_agent.py"
    program.write_text(LLM_PROGRAM, "utf-8")
    with FakeOpenAIServer(["$12.99"]) as srv:
        _, results = run_suite(demo["suite"], agent_name=f"command:{sys.executable} {program}",
                               out=tmp_path / "runs", task_ids=[MUG], settings=_settings(demo, mode="frozen"),
                               agent_settings={"base_url": srv.base_url})
        assert len(srv.requests) == 1  # the model call reached the endpoint, not the replay
        model_at = srv.base_url.split("/")[2]
    (r,) = results
    assert r.ok and r.answer == "$12.99", r.error
    traj = load_trajectory(r.path / "trajectory.json")
    assert traj.replay.miss == 0 and traj.replay.exact >= 1  # the page came from the snapshot
    assert traj.extra["no_proxy"] == model_at  # that exact host:port, nothing host-wide


_STOP: list = []  # the replay proxies of the running episode (filled by the test that stops one)


class ProxyStopper:
    """Opens the start page, then the episode's replay proxy stops (a crash of the harness), then it goes on."""

    def __init__(self) -> None:
        self.spec = AgentSpec(name="proxy-stopper", input_modality="none")

    def start(self, task) -> None:  # noqa: ANN001
        self.task = task

    def act(self, obs) -> Action:  # noqa: ANN001
        if obs.step == 1:
            for server in _STOP:
                server.stop()
        if obs.step < 3:
            return Action(kind="goto", url=self.task.start_url)
        return Action(kind="answer", answer="could not find it")


class TabCrasher(ProxyStopper):
    """Opens the start page, then its tab's renderer crashes (``chrome://crash``), then it answers."""

    def act(self, obs) -> Action:  # noqa: ANN001
        if obs.step == 0:
            return Action(kind="goto", url=self.task.start_url)
        if obs.step == 1:
            return Action(kind="goto", url="chrome://crash")
        return Action(kind="answer", answer="could not find it")


class EndpointDown(ProxyStopper):
    """Its model service stops answering after the first step."""

    def act(self, obs) -> Action:  # noqa: ANN001
        from ego2web_replay.errors import ModelEndpointError

        if obs.step == 0:
            return Action(kind="goto", url=self.task.start_url)
        raise ModelEndpointError("the model endpoint failed after 4 attempts: InternalServerError: 500")


@pytest.mark.parametrize(("agent", "end_reason", "error"), [
    ("ProxyStopper", "infra_error", "the episode's proxy stopped answering before step 2 (Error: Page.goto: net::ERR_PROXY_"),
    ("TabCrasher", "browser_error", "the tab (renderer) closed or crashed before step 2"),
    ("EndpointDown", "infra_error", "the agent's model endpoint failed at step 1: the model endpoint failed"),
])
def test_an_episode_that_could_not_run_is_not_the_agents_failure(demo, tmp_path, monkeypatch, agent, end_reason,
                                                                 error):
    """The episode's proxy stopping, its tab crashing, its model service down: each ends the episode as one
    that could not run (left out of the rates, re-run by --resume), never as an answer to judge."""
    from ego2web_replay.replay.session import Replay

    made = Replay._server

    def kept(self, responder):  # noqa: ANN001, ANN202
        server = made(self, responder)
        _STOP.append(server)
        return server

    monkeypatch.setattr(Replay, "_server", kept)
    _STOP.clear()
    _, results = run_suite(demo["suite"], agent_name=f"{__name__}:{agent}", out=tmp_path, task_ids=[MUG],
                           settings=_settings(demo, mode="frozen", warm=False, max_steps=6))
    (r,) = results
    t = load_trajectory(r.path)
    assert (t.end_reason, t.answer) == (end_reason, None), t.error
    assert t.error.startswith(error) and t.episode_error


class Sleeper(ProxyStopper):
    """Opens the start page, then never acts again (a model call with no timeout of its own)."""

    def act(self, obs) -> Action:  # noqa: ANN001
        if obs.step == 0:
            return Action(kind="goto", url=self.task.start_url)
        time.sleep(600)
        raise AssertionError("left behind, never waited for")


class Spinner(ProxyStopper):
    """Opens a page whose script never yields: every read of the page waits for ever."""

    def act(self, obs) -> Action:  # noqa: ANN001
        if obs.step == 0:
            return Action(kind="goto", url="data:text/html,<title>spin</title><script>for(;;){}</script>")
        return Action(kind="answer", answer="never reached")


@pytest.mark.parametrize(("agent", "error"), [
    ("Sleeper", "episode timeout (2 s) passed at step 1: the agent did not act within"),
    ("Spinner", "episode timeout (2 s) passed by 10 s inside step "),
])
def test_the_timeout_holds_when_a_page_or_the_agent_never_answers(demo, tmp_path, agent, error):
    """``--timeout`` is checked between steps, and held inside one too: an agent that never returns is left
    behind, a page whose script never yields has its browser stopped; either way the episode is a timeout."""
    started = time.monotonic()
    _, results = run_suite(demo["suite"], agent_name=f"{__name__}:{agent}", out=tmp_path, task_ids=[MUG],
                           settings=_settings(demo, mode="frozen", warm=False, timeout_s=2, action_timeout_s=1))
    took = time.monotonic() - started
    (r,) = results
    t = load_trajectory(r.path)
    assert t.end_reason == "timeout" and t.error.startswith(error), t.error
    assert agent == "Sleeper" or t.error.endswith("the page did not answer, so its browser was stopped")
    assert took < 60, f"the episode took {took:.0f} s"  # it would take 600 s (Sleeper) or for ever (Spinner)


class SpinOnce(ProxyStopper):
    """Its first episode opens a page that never yields; its next ones answer from the start page."""

    episodes = 0

    def start(self, task) -> None:  # noqa: ANN001
        self.task = task
        SpinOnce.episodes += 1
        self.spin = SpinOnce.episodes == 1

    def act(self, obs) -> Action:  # noqa: ANN001
        if obs.step == 0:
            return Action(kind="goto", url="data:text/html,<script>for(;;){}</script>" if self.spin
                          else self.task.start_url)
        return Action(kind="answer", answer="done")


def test_a_warm_worker_goes_on_after_its_browser_was_stopped_for_a_hung_page(demo, tmp_path):
    SpinOnce.episodes = 0
    _, results = run_suite(demo["suite"], agent_name=f"{__name__}:SpinOnce", out=tmp_path, task_ids=[MUG],
                           settings=_settings(demo, mode="frozen", warm=True, repeats=2, timeout_s=2,
                                              action_timeout_s=1))
    assert [r.end_reason for r in sorted(results, key=lambda r: r.repeat)] == ["timeout", "answered"]


PROBE_PROGRAM = r'''
import json, os, socket, sys, urllib.request
site, suite_file, runs = json.load(open(__file__ + ".json"))  # (not on its command line: what that names it keeps)
out = os.environ["EGO2WEB_OUT"]
seen = {}
with urllib.request.urlopen(site + "/shop", timeout=10) as r:  # through the proxy, as handed
    seen["proxied"] = r.status
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    direct.open(site + "/shop", timeout=5)
    seen["direct"] = "reached"
except OSError as e:
    seen["direct"] = type(e).__name__
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53))
    seen["udp"] = "sent"
except OSError as e:
    seen["udp"] = e.errno
seen["suite"] = open(suite_file).read() if os.path.exists(suite_file) else None
seen["runs"] = os.listdir(runs)
seen["home"] = os.environ.get("EGO2WEB_REPLAY_HOME")
seen["first"] = open("/proc/1/cmdline", "rb").read().split(b"\0")[:3]
seen["first"] = [x.decode() for x in seen["first"]]
json.dump(seen, open(os.path.join(out, "probe.json"), "w"))
open(os.path.join(out, "answer.txt"), "w").write("probed")
'''


def test_a_program_agent_is_sealed_in_namespaces_of_its_own(demo, tmp_path):
    """Frozen, a ``command:`` program reaches the replay proxy (and its own services) and nothing else: no
    site directly, no UDP; the suite, the run folders and the data home are empty in its view, and it sees
    its own processes only."""
    from ego2web_replay.agents.sandbox import sandbox_unavailable

    if sandbox_unavailable():  # (user namespaces not allowed on this machine: the agent runs unsealed, said so)
        pytest.skip(sandbox_unavailable())
    program = tmp_path / "probe.py"
    program.write_text(PROBE_PROGRAM, "utf-8")
    runs = tmp_path / "runs"
    (tmp_path / "probe.py.json").write_text(json.dumps([demo["site"].url, str(demo["suite_path"]), str(runs)]))
    agent = f"command:{sys.executable} {program}"
    _, results = run_suite(demo["suite"], agent_name=agent, out=runs, task_ids=[MUG],
                           settings=_settings(demo, mode="frozen"))
    (r,) = results
    t = load_trajectory(r.path)
    assert (t.end_reason, t.answer) == ("answered", "probed"), t.error
    seen = json.loads((r.path / "agent" / "probe.json").read_text())
    assert seen["proxied"] == 200 and seen["direct"] == "URLError" and seen["udp"] == errno.ENETUNREACH
    assert seen["suite"] is None and seen["runs"] == [] and seen["home"] is None
    assert seen["first"][1:3] == ["-m", "ego2web_replay.agents.sandbox"]  # its namespace's first process
    sealed = t.extra["sandbox"]
    assert sealed["sealed"] is True and str(runs.resolve()) in sealed["covered"]
    assert str(demo["suite_path"].parent.resolve()) in sealed["covered"]
    # a place holding a file its command line names (its script here) is left to it, and said so
    _, results = run_suite(demo["suite"], agent_name=f"command:{sys.executable} {program} {demo['suite_path']}",
                           out=runs, task_ids=[MUG], settings=_settings(demo, mode="frozen"))
    named = load_trajectory(results[0].path).extra["sandbox"]
    assert str(demo["suite_path"].resolve()) in named["uncovered"]
    assert t.replay is not None and t.replay.miss == 0 and t.replay.exact >= 1


SHOTS_PROGRAM = r'''
import base64, json, os, sys
out = os.environ["EGO2WEB_OUT"]
os.makedirs(os.path.join(out, "shots"), exist_ok=True)
png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
open(os.path.join(out, "shots", "mine.png"), "wb").write(png)
steps = [{"index": 0, "action": {"kind": "goto", "url": "http://x/"}, "screenshot": "shots/mine.png"},
         {"index": 1, "action": {"kind": "wait", "seconds": 0}, "screenshot": sys.argv[1]},
         {"index": 2, "action": {"kind": "wait", "seconds": 0}, "screenshot": "../../../../etc/hostname"},
         {"index": 3, "action": {"kind": "answer", "answer": "x"}, "screenshot": "shots/never-written.png"}]
json.dump({"steps": steps, "answer": "x", "end_reason": "answered"}, open(os.path.join(out, "trajectory.json"), "w"))
'''


def test_a_program_can_show_the_judge_only_screenshots_it_took(demo, tmp_path):
    """A screenshot a program's trajectory names elsewhere (the suite's files, the machine's) or never wrote
    is refused, the step saying why: judges read what the program saw, from the episode's own files."""
    program = tmp_path / "shots.py"
    program.write_text(SHOTS_PROGRAM, "utf-8")
    elsewhere = demo["suite_path"]  # a file of the suite, say
    _, results = run_suite(demo["suite"], agent_name=f"command:{sys.executable} {program} {elsewhere}",
                           out=tmp_path / "runs", task_ids=[MUG], settings=_settings(demo, mode="frozen"))
    (r,) = results
    t = load_trajectory(r.path)
    assert [s.screenshot for s in t.steps] == ["agent/shots/mine.png", None, None, None]
    assert all("refused: not a file the program wrote in $EGO2WEB_OUT" in s.error for s in t.steps[1:])
    from ego2web_replay.judge.episode import load_episode

    assert [s.rel for s in load_episode(r.path).screenshots] == ["agent/shots/mine.png"]


def test_a_judge_reads_no_screenshot_outside_the_episode(tmp_path):
    from ego2web_replay.errors import JudgeError
    from ego2web_replay.judge.episode import load_episode
    from ego2web_replay.models import Step, Trajectory, save_model

    (tmp_path / "outside.png").write_bytes(b"\x89PNG")
    episode = tmp_path / "ep"
    episode.mkdir()
    traj = Trajectory(task_id="t", instruction="x", mode="frozen", agent=AgentSpec(name="x"),
                      steps=[Step(index=0, action=Action(kind="stop"), screenshot="../outside.png")])
    save_model(episode / "trajectory.json", traj)
    with pytest.raises(JudgeError, match="outside the episode folder"):
        load_episode(episode)


BROWSER_PROBE = r'''
import json, os, socket, sys
from playwright.sync_api import sync_playwright
suite_file, other_socket = json.load(open(__file__ + ".json"))
seen = {}
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect(other_socket)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    seen["socket"] = s.recv(100).decode("latin-1")
except OSError as e:
    seen["socket"] = type(e).__name__
with sync_playwright() as pw:
    page = pw.chromium.connect_over_cdp(os.environ["EGO2WEB_CDP_URL"]).contexts[0].pages[0]
    try:
        page.goto("file://" + suite_file, timeout=10000)
        seen["file"] = page.inner_text("body")
    except Exception as e:
        seen["file"] = type(e).__name__
json.dump(seen, open(os.path.join(os.environ["EGO2WEB_OUT"], "probe.json"), "w"))
open(os.path.join(os.environ["EGO2WEB_OUT"], "answer.txt"), "w").write("probed")
'''


def test_a_sealed_program_reads_no_file_through_its_browser_and_no_other_socket(demo, tmp_path):
    """The browser a sealed program is given (``--agent-browser``) is covered as the program is: a ``file://``
    page of the suite is not there; another episode's bridge socket in the temporary folder is covered."""
    import socketserver
    import tempfile

    from ego2web_replay.agents.sandbox import sandbox_unavailable

    if sandbox_unavailable():
        pytest.skip(sandbox_unavailable())

    class _Answer(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(b"HTTP/1.0 200 OK\r\n\r\nreached through another bridge")

    other = Path(tempfile.mkdtemp(prefix="e2w-", dir="/tmp"))  # as another episode's bridges are made
    server = socketserver.UnixStreamServer(str(other / "b0.sock"), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        program = tmp_path / "probe.py"
        program.write_text(BROWSER_PROBE, "utf-8")
        (tmp_path / "probe.py.json").write_text(json.dumps([str(demo["suite_path"]), str(other / "b0.sock")]))
        _, results = run_suite(demo["suite"], agent_name=f"command:{sys.executable} {program}", out=tmp_path / "runs",
                               task_ids=[MUG], agent_settings={"browser": True}, settings=_settings(demo, mode="frozen"))
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(other, ignore_errors=True)
    (r,) = results
    t = load_trajectory(r.path)
    assert t.answer == "probed", t.error
    seen = json.loads((r.path / "agent" / "probe.json").read_text())
    assert seen["socket"] in ("ConnectionRefusedError", "FileNotFoundError")  # (a plain file is over it)
    assert "shop-mug-price" not in seen["file"]  # Chromium's "not found" page, never the suite's text
