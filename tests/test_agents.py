"""Agents: make_agent, the browser-use history converter, and the openai agent against a local server."""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from pathlib import Path

import pytest

from ego2web_replay.actions import Action
from ego2web_replay.agents import CommandAgent, OpenAIAgent, ScriptedAgent, make_agent
from ego2web_replay.agents.base import EpisodeEnv, Observation
from ego2web_replay.agents.browser_use import convert_browser_use_history
from ego2web_replay.agents.openai_agent import MalformedReply, parse_action_reply
from ego2web_replay.errors import AgentError, ModelEndpointError
from ego2web_replay.models import episode_dir, load_trajectory
from ego2web_replay.png import png_bytes
from ego2web_replay.tasks import Task
from ego2web_replay.testing.openai_server import FakeOpenAIServer, Reply

PNG = png_bytes(4, 4, (10, 200, 30))


# -- make_agent ------------------------------------------------------------------------------------------
def test_make_agent_builds_each_kind():
    assert isinstance(make_agent("scripted"), ScriptedAgent)
    cmd = make_agent("command:python agent.py --fast")
    assert isinstance(cmd, CommandAgent) and cmd.spec.settings["program"] == "python agent.py --fast"
    oa = make_agent("openai", model="m1", base_url="http://127.0.0.1:9/v1", backoff_s=0.01, http_retries=1,
                    max_retries=0, input_modality="none", api_key=None)
    assert isinstance(oa, OpenAIAgent)
    assert (oa.model, oa.base_url, oa.backoff_s, oa.http_retries, oa.max_retries) == \
        ("m1", "http://127.0.0.1:9/v1", 0.01, 1, 0)
    assert oa.spec.input_modality == "none" and oa.spec.model == "m1" and oa.api_key == "EMPTY"


@pytest.mark.parametrize(("name", "settings", "message"), [
    ("nosuch", {}, "unknown agent 'nosuch'; known: scripted, command:<program>, openai"),
    ("command:  ", {}, "command agent needs a program"),
    ("openai", {"base_url": "http://127.0.0.1:9/v1"}, "the openai agent needs --model"),
    ("openai", {"model": "m"}, "needs --base-url"),
    ("no_such_module_xyz:factory", {}, "cannot load agent factory 'no_such_module_xyz:factory'"),
    ("ego2web_replay.agents:no_such_factory", {}, "cannot load agent factory"),
])
def test_make_agent_rejects_bad_names(name, settings, message):
    with pytest.raises(AgentError) as e:
        make_agent(name, **settings)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_scripted_agent_starts_at_the_start_url_then_stops():
    task = Task(id="t1", instruction="x", start_url="http://127.0.0.1:1/a",
                reference_actions=[Action(kind="click", text="Go"), Action(kind="answer", answer="42")])
    agent = make_agent("scripted")
    agent.start(task)
    got = [agent.act(Observation(task=task, step=i, url="", title="", screenshot=None)).kind for i in range(5)]
    assert got == ["goto", "click", "answer", "stop", "stop"]


# -- browser-use history ------------------------------------------------------------------------------------
def _browser_use_history(shot_b64: str, shot_file: str) -> dict:
    """An AgentHistoryList as browser-use 0.13's ``save_to_file`` writes it (the third item in the older
    ``current_state``/``xpath`` form, which is read too)."""
    return {"history": [
        {"model_output": {"thinking": "The task needs the mug's price.", "evaluation_previous_goal": "Start",
                          "memory": "Need the mug's price.", "next_goal": "Open the shop",
                          "action": [{"navigate": {"url": "https://shop.example/", "new_tab": False}}]},
         "result": [{"is_done": False, "extracted_content": "🔗 Navigated to https://shop.example/"}],
         "state": {"tabs": [{"url": "about:blank", "title": "", "target_id": "AB12"}], "screenshot_path": None,
                   "interacted_element": [None], "url": "about:blank", "title": ""},
         "metadata": {"step_start_time": 1.0, "step_end_time": 2.5, "step_number": 1}},
        {"model_output": {"evaluation_previous_goal": "Success", "memory": "", "next_goal": "Search for the mug",
                          "action": [{"input": {"index": 3, "text": "red mug", "clear": True}},
                                     {"send_keys": {"keys": "Enter"}}]},
         "result": [{"is_done": False, "extracted_content": "Typed 'red mug'"},
                    {"is_done": False, "extracted_content": "Sent keys: Enter"}],
         "state": {"url": "https://shop.example/", "title": "Shop", "screenshot_path": shot_file,
                   "interacted_element": [
                       {"node_id": 5, "backend_node_id": 9, "frame_id": None, "node_type": 1, "node_value": "",
                        "node_name": "INPUT", "attributes": {"id": "q", "name": "q"},
                        "x_path": "html/body/main/form/input", "element_hash": 1, "stable_hash": 1},
                       None]},
         "metadata": {"step_start_time": 2.5, "step_end_time": 4.5, "step_number": 2}},
        {"model_output": {"current_state": {"next_goal": "Open the red mug"},
                          "action": [{"click_element_by_index": {"index": 7}}, {"scroll": {"down": True, "pages": 0.5}},
                                     {"extract": {"query": "price"}}]},
         "result": [{"is_done": False, "extracted_content": "Clicked button with index 7"},
                    {"is_done": False, "error": "scroll failed: page is not scrollable"},
                    {"is_done": False, "extracted_content": "price: $12.99"}],
         "state": {"url": "https://shop.example/search?q=red+mug", "title": "Search", "screenshot": shot_b64,
                   "interacted_element": [{"tag_name": "a", "xpath": "/html/body/main/div[2]/a",
                                           "highlight_index": 7}, None, None]}},
        {"model_output": None,
         "result": [{"is_done": False, "error": "Rate limit error; retrying"}],
         "state": {"url": "https://shop.example/item/7", "title": "Red Ceramic Mug", "interacted_element": []}},
        {"model_output": {"next_goal": "Report",
                          "action": [{"go_back": {}}, {"done": {"text": "The mug costs $12.99", "success": True}}]},
         "result": [{"is_done": False}, {"is_done": True, "success": True, "extracted_content": "The mug costs $12.99"}],
         "state": {"url": "https://shop.example/item/7", "title": "Red Ceramic Mug",
                   "interacted_element": [None, None]}},
    ]}


def test_browser_use_history_becomes_our_steps(tmp_path):
    shot_file = tmp_path / "bu-tmp" / "step_2.png"
    shot_file.parent.mkdir()
    shot_file.write_bytes(PNG)
    data = _browser_use_history(base64.b64encode(PNG).decode(), str(shot_file))
    out = tmp_path / "agent"
    steps, answer = convert_browser_use_history(data, out)
    assert answer == "The mug costs $12.99"
    assert [s.index for s in steps] == list(range(len(steps)))
    assert [s.action.describe() for s in steps] == [
        "goto url='https://shop.example/'",
        "type selector='xpath=/html/body/main/form/input' value='red mug'",
        "press key='Enter'",
        "click selector='xpath=/html/body/main/div[2]/a'",
        "scroll dy=400",
        "wait seconds=0.0",
        "back",
        "answer answer='The mug costs $12.99'",
    ]
    # the URL after each item's actions is the next item's page
    assert [s.url for s in steps] == ["https://shop.example/", "https://shop.example/search?q=red+mug",
                                      "https://shop.example/search?q=red+mug"] + ["https://shop.example/item/7"] * 5
    assert steps[0].title == "Shop"
    assert steps[0].thought == "The task needs the mug's price. | Open the shop"
    assert steps[1].thought == "Search for the mug" and steps[3].thought == "Open the red mug"
    assert [s.duration_s for s in steps[:3]] == [1.5, 1.0, 1.0]
    assert steps[4].error == "scroll failed: page is not scrollable"
    assert "'extract' has no counterpart" in steps[5].thought
    # screenshots after each item, copied into the episode (a file in browser-use's temp folder, or base64)
    assert steps[0].screenshot == "screenshots/step-000.png" and (out / steps[0].screenshot).read_bytes() == PNG
    assert steps[2].screenshot == "screenshots/step-002.png" and (out / steps[2].screenshot).read_bytes() == PNG
    assert steps[1].screenshot is None and steps[5].screenshot is None
    shot_file.unlink()  # browser-use's temp folder goes away; the episode keeps its copy
    assert (out / "screenshots/step-000.png").exists()


def test_browser_use_history_answer_from_is_done_and_bare_lists(tmp_path):
    items = [{"model_output": {"action": [{"go_to_url": {"url": "http://127.0.0.1:1/"}}]},
              "result": [{"is_done": True, "extracted_content": "42"}], "state": {"url": "http://127.0.0.1:1/"}}]
    steps, answer = convert_browser_use_history(items, tmp_path)
    assert answer == "42" and len(steps) == 1 and steps[0].action.kind == "goto"


@pytest.mark.parametrize("bad", [{"steps": []}, "history", {"history": ["not an item"]}])
def test_browser_use_history_rejects_other_shapes(bad, tmp_path):
    with pytest.raises(ValueError):
        convert_browser_use_history(bad, tmp_path)


# -- the openai agent, one step at a time ----------------------------------------------------------------------
def test_parse_action_reply_forms():
    action, thought = parse_action_reply('Sure!\n```json\n{"thought": "open it", "action": {"kind": "click", '
                                         '"element": 5}}\n```')
    assert action.selector == '[data-e2w-id="5"]' and thought == "open it"
    action, thought = parse_action_reply('{"type": "answer", "answer": "$12.99"}')
    assert action.kind == "answer" and action.answer == "$12.99" and thought is None
    for bad, why in [("no json here", "no JSON object"), ("{oops}", "invalid JSON"),
                     ('{"action": {"kind": "goto"}}', "needs 'url'"), ('{"action": {"kind": "fly"}}', "invalid action"),
                     ('{"action": {"kind": "click", "element": "x"}}', "element number")]:
        with pytest.raises(MalformedReply, match=why):
            parse_action_reply(bad)


def _obs(tmp_path) -> Observation:
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    task = Task(id="t1", instruction="Find the mug", start_url="http://127.0.0.1:1/")
    return Observation(task=task, step=3, url="http://127.0.0.1:1/shop", title="Shop", screenshot=shot,
                       elements=[{"id": 1, "tag": "a", "text": "Red Ceramic Mug", "href": "/shop/item/7"},
                                 {"id": 2, "tag": "input", "type": "text", "text": "Search the shop"}],
                       last_error="TimeoutError: element not found")


def _agent(srv: FakeOpenAIServer, **kw) -> OpenAIAgent:
    settings = {"model": "fake-model", "base_url": srv.base_url, "backoff_s": 0.01, "input_modality": "none"}
    settings.update(kw)
    agent = make_agent("openai", **settings)
    assert isinstance(agent, OpenAIAgent)
    return agent


def test_openai_agent_retries_malformed_replies(tmp_path):
    good = '{"thought": "the mug", "action": {"kind": "click", "element": 1}}'
    with FakeOpenAIServer(["I would click the mug.", good]) as srv:
        agent = _agent(srv)
        action = agent.act(_obs(tmp_path))
    assert action.selector == '[data-e2w-id="1"]' and agent.last_thought == "the mug"
    assert len(srv.requests) == 2
    first, second = srv.requests
    assert first["model"] == "fake-model" and first["temperature"] == 0.0
    parts = first["messages"][1]["content"]
    text = "\n".join(p["text"] for p in parts if p["type"] == "text")
    assert "Task: Find the mug" in text and "URL: http://127.0.0.1:1/shop" in text
    assert "[1] a 'Red Ceramic Mug' -> /shop/item/7" in text and "[2] input(text) 'Search the shop'" in text
    assert "Your last action failed: TimeoutError: element not found" in text
    images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert images == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert "no JSON object in the reply" in second["messages"][-1]["content"]
    assert agent.usage["calls"] == 2 and agent.usage["completion_tokens"] > 0


def test_openai_agent_gives_up_on_replies_that_stay_malformed(tmp_path):
    with FakeOpenAIServer(["nope", "{bad json}", '{"action": {"kind": "goto"}}']) as srv:
        agent = _agent(srv, max_retries=2)
        with pytest.raises(MalformedReply, match="stayed malformed after 3 tries: invalid action"):
            agent.act(_obs(tmp_path))
    assert len(srv.requests) == 3 and srv.remaining == 0


def test_openai_agent_backs_off_on_server_errors(tmp_path):
    ok = '{"action": {"kind": "stop"}}'
    with FakeOpenAIServer([Reply(status=500), Reply(status=429), ok]) as srv:
        agent = _agent(srv, http_retries=3)
        assert agent.act(_obs(tmp_path)).kind == "stop"
    assert len(srv.requests) == 3
    with FakeOpenAIServer([Reply(status=500)] * 3) as srv:
        agent = _agent(srv, http_retries=2)
        with pytest.raises(ModelEndpointError, match="failed after 3 attempts: InternalServerError"):
            agent.act(_obs(tmp_path))  # the service did not answer: the episode could not run (infra_error)
    assert len(srv.requests) == 3
    with FakeOpenAIServer([Reply(status=400, error="bad model")]) as srv:
        with pytest.raises(AgentError, match="answered HTTP 400") as refused:
            _agent(srv).act(_obs(tmp_path))
        assert not isinstance(refused.value, ModelEndpointError)  # a request it refused: the agent's own
    assert len(srv.requests) == 1


def test_openai_agent_honours_retry_after_and_scales_screenshots(tmp_path, monkeypatch):
    import ego2web_replay.agents.openai_agent as oa

    waits: list[float] = []
    monkeypatch.setattr(oa.time, "sleep", waits.append)
    ok = '{"action": {"kind": "stop"}}'
    obs = _obs(tmp_path)
    obs.screenshot.write_bytes(png_bytes(64, 40, (10, 200, 30)))
    with FakeOpenAIServer([Reply(status=429, headers={"Retry-After": "7"}), Reply(status=503), ok]) as srv:
        agent = _agent(srv, http_retries=3, backoff_s=0.5, image_max_side=16, temperature=0.3, timeout_s=5)
        assert agent.act(obs).kind == "stop"
    assert waits == [7.0, 1.0]  # the server's Retry-After, then the doubled backoff
    body = srv.requests[-1]
    assert body["temperature"] == 0.3 and "seed" not in body and "max_completion_tokens" not in body
    url = next(p["image_url"]["url"] for p in body["messages"][1]["content"] if p["type"] == "image_url")
    import io

    import av

    with av.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])), "r") as c:
        frame = next(c.decode(video=0))
    assert (frame.width, frame.height) == (16, 10)
    assert agent.spec.settings["image_max_side"] == 16 and agent.spec.settings["timeout_s"] == 5


def test_openai_agent_opens_the_start_url_first(tmp_path):
    obs = _obs(tmp_path)
    obs.step, obs.url = 0, "about:blank"
    with FakeOpenAIServer([]) as srv:
        action = _agent(srv).act(obs)
    assert action.kind == "goto" and action.url == "http://127.0.0.1:1/" and srv.requests == []


# -- the openai agent in real episodes ----------------------------------------------------------------------------
MUG, WIKI = "shop-mug-price", "wiki-lighthouse-built"


def _texts(body: dict) -> str:
    return "\n".join(p["text"] for m in body["messages"] if isinstance(m["content"], list)
                     for p in m["content"] if p["type"] == "text")


@pytest.mark.slow
def test_openai_agent_episodes(tmp_path, ca):
    """Live episodes on the demo site: one task completed (through a 500), one whose replies stay malformed."""
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks

    failed_once: list[bool] = []

    def reply(body: dict):
        text = _texts(body)
        if "Task: Find the mug" not in text:
            return "The lighthouse was built in 1874."  # never JSON
        step = int(re.search(r"Step (\d+)\.", text).group(1))
        if step == 1:  # step 0 opened the start URL (the shop) without a model call
            if not failed_once:
                failed_once.append(True)
                return Reply(status=500, error="overloaded")
            return json.dumps({"thought": "look again", "action": {"kind": "scroll", "dy": 100}})
        if step == 2:
            n = re.search(r"\[(\d+)\] a 'Red Ceramic Mug'", text).group(1)
            return json.dumps({"thought": "the red mug", "action": {"kind": "click", "element": int(n)}})
        return '{"thought": "price is shown", "action": {"kind": "answer", "answer": "$12.99"}}'

    with DemoSite() as site, FakeOpenAIServer(reply) as srv:
        suite = load_tasks(write_demo_suite(tmp_path / "suite", site.url, [MUG, WIKI]))
        settings = RunSettings(mode="live", guard="loopback", timeout_s=60, max_steps=6)
        agent_settings = {"model": "fake-model", "base_url": srv.base_url, "backoff_s": 0.01,
                          "input_modality": "keyframes", "seed": 7, "max_output_tokens": 300}
        run_dir, results = run_suite(suite, agent_name="openai", agent_settings=agent_settings,
                                     out=tmp_path / "runs", settings=settings)
    by = {r.task_id: r for r in results}
    good = load_trajectory(episode_dir(run_dir, MUG, "live"))
    assert good.end_reason == "answered" and good.answer == "$12.99", good.error
    assert [s.action.kind for s in good.steps] == ["goto", "scroll", "click", "answer"]
    assert [s.url for s in good.steps] == [f"{site.url}/shop"] * 2 + [f"{site.url}/shop/item/7"] * 2
    assert [s.thought for s in good.steps] == ["open the task's start URL", "look again", "the red mug",
                                               "price is shown"]
    assert good.agent.name == "openai" and good.agent.model == "fake-model"
    assert good.agent.input_modality == "keyframes"
    assert "$12.99" in good.final_page_text
    assert good.extra["usage"]["calls"] == 3

    mug_requests = [b for b in srv.requests if "Task: Find the mug" in _texts(b)]
    assert len(mug_requests) == 4  # step 1 twice (a 500 first), then steps 2 and 3
    for body in mug_requests:
        assert body["seed"] == 7 and body["max_completion_tokens"] == 300 and "max_tokens" not in body
        parts = body["messages"][1]["content"]
        assert any(p["type"] == "text" and p["text"].startswith("Keyframes sampled over the whole video")
                   for p in parts)
        stamps = [p["text"] for p in parts if p["type"] == "text" and re.fullmatch(r"t=\d+\.\ds", p["text"])]
        # the whole 5-second video, not only the evidence range 00:02-00:04
        assert len(stamps) >= 6 and float(stamps[0][2:-1]) < 1.0 and float(stamps[-1][2:-1]) > 4.0
        images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert all(u.startswith("data:image/png;base64,") for u in images)
        assert len(images) == len(stamps) + 1  # a keyframe per timestamp, then the screenshot
    assert "a 'Red Ceramic Mug' -> /shop/item/7" in _texts(mug_requests[2])
    assert "Start URL: " + f"{site.url}/shop" in _texts(mug_requests[0])

    bad = load_trajectory(episode_dir(run_dir, WIKI, "live"))
    assert bad.end_reason == "agent_error"
    assert [s.action.kind for s in bad.steps] == ["goto"] and bad.answer is None
    assert "agent failed at step 1: MalformedReply" in bad.error and "after 3 tries" in bad.error
    assert by[MUG].ok and not by[WIKI].ok
    wiki_requests = [b for b in srv.requests if "Task: Find the mug" not in _texts(b)]
    assert len(wiki_requests) == 3
    assert "Your reply could not be used (no JSON object in the reply)" in wiki_requests[1]["messages"][-1]["content"]


# -- the command agent's process handling --------------------------------------------------------------------------
def _env(tmp_path, timeout_s: float) -> EpisodeEnv:
    task_file = tmp_path / "task.json"
    task_file.write_text('{"id": "t1"}', "utf-8")
    return EpisodeEnv(proxy_url="http://127.0.0.1:9", ca_file=tmp_path / "ca.pem", spki="x", task_file=task_file,
                      out_dir=tmp_path / "agent", mode="frozen", max_steps=5, timeout_s=timeout_s)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _gone(pid: int, within: float = 30) -> bool:
    """Whether ``pid`` is dead within ``within`` seconds: a SIGKILLed process dies when next scheduled."""
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _wait_pid(pidfile: Path) -> int:
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return int(pidfile.read_text())


def _running(marker: str) -> list[int]:
    """The processes (of this machine's pid namespace: a sealed program's too) whose command line holds
    ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode("utf-8", "replace"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _none_left(marker: str, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(marker)


@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_command_agent_timeout_kills_the_whole_program(tmp_path, sandbox):
    pidfile = tmp_path / "pid"
    # "; true" keeps the shell from exec-ing python, so python is a grandchild of the runner
    script = tmp_path / "sleepy.py"
    script.write_text(f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    program = f"{sys.executable} {script}; true"
    task = Task(id="t1", instruction="x", start_url="http://127.0.0.1:9/")
    t0 = time.monotonic()
    traj = CommandAgent(program, sandbox=sandbox).run_episode(task, _env(tmp_path, 5))  # time to write its pid
    assert time.monotonic() - t0 < 45  # the program sleeps 60 s: the runner did not wait for it
    assert traj.end_reason == "timeout" and traj.extra["exit_code"] is None, (traj.error, traj.extra)
    _wait_pid(pidfile)  # (a pid of its own namespace, when sealed)
    assert _none_left(str(script)), "the agent program outlived its episode"


@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_command_agent_background_children_do_not_hang_the_runner(tmp_path, sandbox):
    pidfile = tmp_path / "pid"
    program = (f"sleep 61.{len(sandbox)} & echo $! > {pidfile}; echo 'half done' >&2; "
               'echo "  1874 " > "$EGO2WEB_OUT/answer.txt"')
    task = Task(id="t1", instruction="x", start_url="http://127.0.0.1:9/")
    t0 = time.monotonic()
    traj = CommandAgent(program, sandbox=sandbox).run_episode(task, _env(tmp_path, 45))
    took = time.monotonic() - t0
    assert took < 40, f"the runner waited {took:.1f} s for the program's background child"  # it sleeps 60 s
    assert traj.end_reason == "answered", (traj.error, traj.extra)
    assert traj.answer == "1874" and traj.extra["exit_code"] == 0
    assert "half done" in traj.extra["stderr"]
    assert [s.action.kind for s in traj.steps] == ["answer"]
    _wait_pid(pidfile)
    assert _none_left(f"sleep 61.{len(sandbox)}")


@pytest.mark.parametrize(("writes", "error"), [
    ('{"steps": [{"index": 0, "action": {"kind": "goto"}}]}',
     "the program wrote an invalid trajectory: steps.0.action: Value error, a goto action needs 'url'"),
    ('[1, 2]', "the program wrote an unreadable trajectory: trajectory.json is not a JSON object"),
    ('{"answer": ', "the program wrote an unreadable trajectory: Expecting value"),
])
def test_command_agent_bad_trajectories_are_clear_errors(tmp_path, writes, error):
    (tmp_path / "traj.json").write_text(writes, "utf-8")
    program = f'cp {tmp_path / "traj.json"} "$EGO2WEB_OUT/trajectory.json"'
    task = Task(id="t1", instruction="x", start_url="http://127.0.0.1:9/")
    traj = CommandAgent(program).run_episode(task, _env(tmp_path, 30))
    assert traj.end_reason == "agent_error" and traj.extra["exit_code"] == 0
    assert traj.error.startswith(error) and "\n" not in traj.error


@pytest.mark.parametrize("claimed", ["infra_error", "browser_error", "setup_error"])
def test_a_program_cannot_say_its_episode_could_not_run(tmp_path, claimed):
    """An episode that could not run is left out of the rates and re-run by --resume: only the runner
    says so. A program that claims it has its claim taken for an agent error."""
    (tmp_path / "traj.json").write_text(json.dumps({"answer": "I do not know", "end_reason": claimed}), "utf-8")
    program = f'cp {tmp_path / "traj.json"} "$EGO2WEB_OUT/trajectory.json"'
    task = Task(id="t1", instruction="x", start_url="http://127.0.0.1:9/")
    traj = CommandAgent(program).run_episode(task, _env(tmp_path, 30))
    assert traj.end_reason == "agent_error" and not traj.episode_error and traj.answer == "I do not know"
    assert traj.error == f"the program's trajectory.json said end_reason {claimed!r}, which only the runner sets"


def test_run_cli_passes_the_openai_agent_settings(tmp_path, capsys, monkeypatch):
    """`run --agent openai` with --temperature/--seed/--max-output-tokens/--agent-timeout/--image-size:
    the settings reach the agent and are recorded in run.json's agent spec (the task has no snapshot, so
    its episode is a setup error before any browser starts)."""
    from ego2web_replay.cli import main

    monkeypatch.delenv("EGO2WEB_AGENT_MODEL", raising=False)
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps({"id": "t1", "instruction": "x", "start_url": "http://127.0.0.1:9/"}) + "\n", "utf-8")
    out = tmp_path / "runs"
    with FakeOpenAIServer([]) as srv:  # the endpoint must answer the check before the run; it gets no model call
        code = main(["run", str(suite), "--agent", "openai", "--model", "m", "--base-url", srv.base_url,
                     "--temperature", "0.4", "--seed", "11", "--max-output-tokens", "256", "--agent-timeout", "7.5",
                     "--image-size", "320", "--modality", "none", "--out", str(out), "--snapshots", str(tmp_path),
                     "--no-db"])
        assert srv.requests == []
    assert code == 1 and "no snapshot" in capsys.readouterr().err
    (run_json,) = out.glob("*/run.json")
    spec = json.loads(run_json.read_text("utf-8"))["agent"]
    assert (spec["name"], spec["model"], spec["input_modality"]) == ("openai", "m", "none")
    wanted = {"temperature": 0.4, "seed": 11, "max_output_tokens": 256, "timeout_s": 7.5, "image_max_side": 320}
    assert {k: spec["settings"][k] for k in wanted} == wanted


def test_bridges_serve_one_address_once_and_refuse_a_socket_path_too_long(tmp_path):
    from ego2web_replay.agents.sandbox import Bridges

    bridges = Bridges(tmp_path / "b", [("localhost", 8123), ("127.0.0.1", 8123), ("127.0.0.1", 8124)])
    assert [(d.host, d.address, d.port) for d in bridges.destinations] == [
        ("localhost", "127.0.0.1", 8123), ("127.0.0.1", "127.0.0.1", 8124)]  # one listener for both names
    with pytest.raises(OSError, match="too long for a Unix socket"):
        Bridges(tmp_path / ("x" * 120), [("127.0.0.1", 8123)])
    with pytest.raises(OSError):  # a name that does not resolve: the program is then not sealed, and says why
        Bridges(tmp_path / "c", [("no-such-host.invalid", 80)])
