"""``--agent browser-use`` without a browser: how its process, Chromium and model input are wired.

The end-to-end episodes (real browser-use, Chromium, live and frozen) are in test_browser_use.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ego2web_replay.agents import EpisodeEnv, make_agent
from ego2web_replay.agents.browser_use_main import (
    PROXY_VARS,
    QUIET_ENV,
    chromium_args,
    start_blank_profile,
    task_text,
)
from ego2web_replay.errors import AgentError
from ego2web_replay.testing.browser_use_llm import current_url, element_index
from ego2web_replay.testing.openai_server import FakeOpenAIServer

pytest.importorskip("browser_use")

TASK = {"id": "t1", "instruction": "Find the mug from the video.", "start_url": "http://127.0.0.1:9/shop",
        "allowed_domains": ["127.0.0.1"]}


def _env(tmp_path: Path, inputs: dict | None = None) -> EpisodeEnv:
    task_file = tmp_path / "task.json"
    task_file.write_text(json.dumps(TASK), "utf-8")
    inputs_file = None
    if inputs is not None:
        inputs_file = tmp_path / "inputs.json"
        inputs_file.write_text(json.dumps(inputs), "utf-8")
    return EpisodeEnv(proxy_url="http://127.0.0.1:8899", ca_file=tmp_path / "ca.pem", spki="PIN=", task_file=task_file,
                      out_dir=tmp_path / "agent", mode="frozen", max_steps=7, timeout_s=30, inputs=inputs_file)


def test_make_agent_builds_browser_use_and_records_its_settings():
    agent = make_agent("browser-use", model="m", base_url="http://localhost:1/v1", temperature=0.5, seed=3)
    assert agent.spec.name == "browser-use" and agent.spec.model == "m"
    assert agent.spec.input_modality == "keyframes"
    assert agent.spec.settings["seed"] == 3 and agent.spec.settings["temperature"] == 0.5
    assert agent.spec.settings["browser_use_version"].startswith("0.13.")


@pytest.mark.parametrize("settings, message", [
    ({"base_url": "http://localhost:1/v1"}, "needs --model"),
    ({"model": "m"}, "needs --base-url"),
])
def test_browser_use_needs_a_model_and_an_endpoint(settings, message, monkeypatch):
    monkeypatch.delenv("EGO2WEB_AGENT_MODEL", raising=False)
    with pytest.raises(AgentError, match=message):
        make_agent("browser-use", **settings)


def test_only_chromium_is_given_the_proxy(tmp_path, monkeypatch):
    """browser-use's CDP socket and model calls must not reach the replay: no proxy variable in its
    environment (whatever the runner's own environment holds), no CA bundle override for its HTTPS."""
    monkeypatch.setenv("HTTPS_PROXY", "http://corporate-proxy:3128")
    agent = make_agent("browser-use", model="m", base_url="https://api.example/v1", api_key="sk-test")
    env = agent.environment(_env(tmp_path))
    assert not set(PROXY_VARS) & set(env)
    assert "NO_PROXY" not in env and "SSL_CERT_FILE" not in env
    assert env["EGO2WEB_PROXY"] == "http://127.0.0.1:8899" and env["EGO2WEB_SPKI"] == "PIN="
    assert {k: env[k] for k in QUIET_ENV} == QUIET_ENV
    assert env["ANONYMIZED_TELEMETRY"] == "false" and env["BROWSER_USE_VERSION_CHECK"] == "false"
    assert env["EGO2WEB_AGENT_API_KEY"] == "sk-test" and env["EGO2WEB_MODALITY"] == "keyframes"


def test_chromium_is_sealed_and_pins_the_project_ca():
    args = chromium_args("http://127.0.0.1:8899", "PIN=")
    assert "--ignore-certificate-errors-spki-list=PIN=" in args
    assert any(a.startswith("--host-resolver-rules=MAP * ~NOTFOUND") for a in args)
    assert "--webrtc-ip-handling-policy=disable_non_proxied_udp" in args
    assert "--disable-background-networking" in args and "--disable-component-update" in args


def test_browser_use_profile_keeps_the_loopback_bypass_removed(tmp_path):
    """What browser-use's launcher makes of our profile: the proxy with <-loopback>, no extensions, no blank-page
    animation source, and a profile that starts on about:blank."""
    from browser_use import BrowserProfile
    from browser_use.browser.profile import ProxySettings

    profile_dir = start_blank_profile(tmp_path / "p")
    prefs = json.loads((profile_dir / "Default" / "Preferences").read_text("utf-8"))
    assert prefs["session"] == {"restore_on_startup": 4, "startup_urls": ["about:blank"]}
    profile = BrowserProfile(headless=True, user_data_dir=profile_dir, enable_default_extensions=False,
                             downloads_path=tmp_path / "downloads",
                             proxy=ProxySettings(server="http://127.0.0.1:8899", bypass="<-loopback>"),
                             args=chromium_args("http://127.0.0.1:8899", "PIN="))
    launch = profile.get_args()
    assert "--proxy-server=http://127.0.0.1:8899" in launch and "--proxy-bypass-list=<-loopback>" in launch
    assert "--ignore-certificate-errors-spki-list=PIN=" in launch
    assert not any(a.startswith("--load-extension") for a in launch)
    assert f"--user-data-dir={profile_dir}" in launch


@pytest.mark.parametrize("inputs, present, absent", [
    ({"modality": "keyframes", "frames": [{"t": 1.0, "path": "a.png"}, {"t": 5.0, "path": "b.png"}]},
     ["first 2 images", "keyframes sampled over the whole video", "t=1.0s, t=5.0s"], ["captions"]),
    ({"modality": "captions", "captions": ["[00:00-00:05] a red mug on a desk"]},
     ["its captions", "[00:00-00:05] a red mug on a desk"], ["images"]),
    ({"modality": "none"}, ["Find the mug"], ["video"]),
])
def test_task_text_carries_start_url_sites_and_the_modality(inputs, present, absent):
    text = task_text(TASK, inputs)
    assert "Find the mug from the video." in text
    assert "http://127.0.0.1:9/shop is already open" in text and "allowed sites: 127.0.0.1" in text
    for p in present:
        assert p in text
    for a in absent:
        assert a not in text.split("\n", 1)[1]


def test_video_sent_as_video_url_reaches_browser_use_as_frames(tmp_path):
    """browser-use takes images only: the whole video becomes frames at --video-fps, and the episode says so."""
    from ego2web_replay.models import InputSettings
    from ego2web_replay.runner.inputs import apply_inputs
    from ego2web_replay.testing.episodes import make_video

    video = make_video(tmp_path / "v.mp4", seconds=4)
    agent = make_agent("browser-use", model="m", base_url="http://localhost:1/v1")
    apply_inputs(agent.spec, InputSettings(modality="video", video_fps=1.0, video_transport="video_url"))
    env = _env(tmp_path, {"modality": "video", "video": str(video), "frames": [], "captions": []})
    note = agent._frames_for_video(env)
    data = json.loads(env.inputs.read_text("utf-8"))
    assert len(data["frames"]) == 4 and data["frames"][0]["t"] < 1.0 < 3.0 <= data["frames"][-1]["t"]
    assert all(Path(f["path"]).is_file() for f in data["frames"])
    assert note and "4 frames" in note


def test_scripted_model_reads_browser_use_state():
    state = ("Current tab: 6D1E\nAvailable tabs:\nTab 6D1E: http://127.0.0.1:9/shop - Shop\n"
             "[13]<a />\n\tDemo Web\n|SHADOW(open)|[2]<input id=q name=q />\n[39]<a />\n\tCrunchy Corn Snack\n")
    assert current_url(state) == "http://127.0.0.1:9/shop"
    assert element_index(state, "id=q") == 2 and element_index(state, "Crunchy Corn Snack") == 39
    with pytest.raises(LookupError):
        element_index(state, "Checkout")


def test_a_killed_episode_keeps_the_steps_its_history_holds(tmp_path):
    """browser-use saves its history after every step; at the episode timeout the steps so far are kept."""
    from ego2web_replay.agents.browser_use_agent import BrowserUseAgent
    from ego2web_replay.models import AgentSpec, Trajectory

    shot = tmp_path / "step_1.png"
    shot.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 32)
    history = {"history": [
        {"model_output": {"next_goal": "Initial navigation", "action": [{"navigate": {"url": "http://127.0.0.1:9/shop"}}]},
         "result": [{"is_done": False}], "state": {"url": "", "title": "Initial Actions", "interacted_element": [None]},
         "metadata": {"step_start_time": 1796124105.0, "step_end_time": 1796124106.0, "step_number": 0}},
        {"model_output": {"thinking": "search", "next_goal": "type", "action": [{"input": {"index": 2, "text": "mug"}}]},
         "result": [{"is_done": False}], "state": {"url": "http://127.0.0.1:9/shop", "title": "Shop",
                                                   "screenshot_path": str(shot),
                                                   "interacted_element": [{"x_path": "html/body/form/input"}]},
         "metadata": {"step_start_time": 1796124107.0, "step_end_time": 1796124109.0, "step_number": 1}}]}
    out = tmp_path / "agent"
    out.mkdir()
    (out / "history.json").write_text(json.dumps(history), "utf-8")
    (out / "usage.json").write_text(json.dumps({"calls": 1, "prompt_tokens": 10, "completion_tokens": 5}), "utf-8")
    traj = Trajectory(task_id="t1", mode="frozen", agent=AgentSpec(name="browser-use"), end_reason="timeout",
                      error="killed")
    BrowserUseAgent._read_extras(traj, out)
    assert traj.end_reason == "timeout" and [s.action.kind for s in traj.steps] == ["goto", "type"]
    assert traj.steps[1].action.value == "mug" and traj.steps[1].action.selector == "xpath=/html/body/form/input"
    assert traj.steps[0].url == "http://127.0.0.1:9/shop" and traj.steps[0].screenshot == "screenshots/step-000.png"
    assert (out / "screenshots" / "step-000.png").read_bytes() == shot.read_bytes()
    assert traj.steps[1].duration_s == 2.0 and traj.steps[1].started_at.timestamp() == 1796124107.0
    assert traj.extra["usage"] == {"calls": 1, "prompt_tokens": 10, "completion_tokens": 5}


def test_running_out_of_steps_is_a_step_budget_end(tmp_path):
    """browser-use appends a model-less item when it runs out of steps; that is our step_budget."""
    from ego2web_replay.agents.browser_use import final_error

    items = [{"model_output": {"action": [{"navigate": {"url": "http://127.0.0.1:9/"}}]}, "result": [{}],
              "state": {"url": "http://127.0.0.1:9/"}},
             {"model_output": None, "result": [{"error": "Failed to complete task in maximum steps"}],
              "state": {"url": ""}, "metadata": None}]
    assert final_error({"history": items}) == "Failed to complete task in maximum steps"
    assert final_error({"history": items[:1]}) is None


def test_cli_passes_model_settings_and_refuses_a_missing_model(tmp_path, capsys, monkeypatch):
    """`run --agent browser-use` without a model is one error line and writes nothing; with one, the
    CLI's model options reach the agent spec recorded in run.json (no episode gets as far as a browser)."""
    from ego2web_replay.cli import main

    monkeypatch.delenv("EGO2WEB_AGENT_MODEL", raising=False)
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps({"id": "t1", "instruction": "x", "start_url": "http://127.0.0.1:9/"}) + "\n", "utf-8")
    out = tmp_path / "runs"
    with FakeOpenAIServer([]) as srv:  # the endpoint must answer the check before the run; it gets no model call
        url = srv.base_url
        code = main(["run", str(suite), "--agent", "browser-use", "--base-url", url,
                     "--out", str(out), "--snapshots", str(tmp_path)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and err[-1].startswith("error: the browser-use agent needs --model")
        assert not out.exists() or not any(out.iterdir())
        # with a model: the task has no snapshot, so its episode is a setup error before any browser starts
        code = main(["run", str(suite), "--agent", "browser-use", "--model", "m", "--base-url", url,
                     "--temperature", "0.3", "--seed", "7", "--agent-timeout", "9", "--modality", "captions",
                     "--out", str(out), "--snapshots", str(tmp_path)])
        assert srv.requests == []
    assert code == 1
    (run_json,) = out.glob("*/run.json")
    spec = json.loads(run_json.read_text("utf-8"))["agent"]
    assert spec["name"] == "browser-use" and spec["model"] == "m" and spec["input_modality"] == "captions"
    assert {k: spec["settings"][k] for k in ("base_url", "temperature", "seed", "timeout_s")} == {
        "base_url": url, "temperature": 0.3, "seed": 7, "timeout_s": 9.0}


def test_without_the_package_the_error_says_how_to_install_it(monkeypatch):
    from importlib import metadata

    real = metadata.version

    def version(name: str) -> str:
        if name == "browser-use":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(AgentError, match=r"pip install 'ego2web-replay\[browser-use\]'"):
        make_agent("browser-use", model="m", base_url="http://localhost:1/v1")


def test_a_page_that_cannot_be_read_is_a_capture_saying_why_and_judges_skip_it(tmp_path):
    """browser-use's session with no browser behind it: the capture records the failure, the episode goes on."""
    import asyncio

    from browser_use import BrowserSession

    from ego2web_replay.agents.browser_use import convert_browser_use_history
    from ego2web_replay.agents.browser_use_main import capture_last_item
    from ego2web_replay.judge.episode import Episode
    from ego2web_replay.models import PageCapture, Trajectory, read_model

    history = {"history": [
        {"model_output": {"action": [{"navigate": {"url": "http://127.0.0.1:9/shop"}}]}, "result": [{}],
         "state": {"url": "about:blank"}},
        {"model_output": {"action": [{"input": {"index": 3, "text": "mug"}}, {"send_keys": {"keys": "Enter"}}]},
         "result": [{}, {}], "state": {"url": "http://127.0.0.1:9/shop"}}]}
    (tmp_path / "history.json").write_text(json.dumps(history), "utf-8")
    captured: set[int] = set()
    asyncio.run(capture_last_item(BrowserSession(), tmp_path, captured, timeout_s=5))
    capture = read_model(tmp_path / "pages/step-002.json", PageCapture, "page capture")
    assert captured == {1} and capture.step == 2 and capture.text == ""
    assert capture.error and capture.error.startswith("page not read: ")
    assert not (tmp_path / "pages/step-000.json").exists()  # the initial item's page was never current here
    steps, _ = convert_browser_use_history(history, tmp_path)
    assert [s.page for s in steps] == [None, None, "pages/step-002.json"]
    traj = Trajectory(task_id="t1", agent={"name": "browser-use"}, mode="frozen", steps=steps)
    assert Episode(tmp_path, traj, []).renders() == []  # no text offered as the page the agent saw
