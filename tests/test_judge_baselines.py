"""The WebVoyager-style and WebJudge-style baselines, and the judge registry."""

from __future__ import annotations

import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.registry import JUDGES, Judge, make_judge
from ego2web_replay.tasks import Task
from ego2web_replay.testing.episodes import make_episode, make_video
from ego2web_replay.testing.openai_server import FakeOpenAIServer

TASK = Task(id="T1", instruction="Find the blue kettle", start_url="http://shop.test/", video="clip.mp4",
            evidence=[{"start": 0, "end": 1}])


def _images(body) -> int:
    return sum(1 for m in body["messages"] if isinstance(m["content"], list)
               for p in m["content"] if p["type"] == "image_url")


def test_webvoyager_sends_answer_and_last_k_screenshots_only(tmp_path):
    ep = make_episode(tmp_path, "T1", answer="Blue kettle, $20", urls=[f"http://shop.test/{i}" for i in range(5)])
    with FakeOpenAIServer(["Thoughts: shown.\nStatus: success"]) as srv:
        v = make_judge("webvoyager", model="m", base_url=srv.base_url, last_k=2).judge(ep, TASK)
        (req,) = srv.requests
    user = req["messages"][1]["content"]
    texts = " ".join(p["text"] for p in user if p["type"] == "text")
    assert "Result response: Blue kettle, $20" in texts and "Key points" not in texts
    assert "step 4 (URL" in texts and "step 5 (URL" in texts and "step 3 (URL" not in texts
    assert _images(req) == 2
    assert v.success and v.kept_screenshots == ["screenshots/step-004.png", "screenshots/step-005.png"]
    assert v.judge.settings == {"last_k": 2} and v.judge.prompt_version == "webvoyager-v1"


def test_webjudge_filters_screenshots_but_sends_no_video(tmp_path):
    make_video(tmp_path / "clip.mp4", seconds=1)
    ep = make_episode(tmp_path, "T1", answer="ok", urls=["http://shop.test/a", "http://shop.test/b"])

    def replies(body):  # screenshot calls run in parallel: answer by content, not by order
        system, user = body["messages"][0]["content"], str(body["messages"][1]["content"])
        if "Key Points:" in system:
            return "Key Points:\n1. blue kettle"
        if "Score:" in system:
            return "Summary: a.\nScore: 1" if "step 1 " in user else "Summary: b.\nScore: 5"
        return "Thoughts: fine.\nStatus: failure"

    task = TASK.model_copy(update={"video": str(tmp_path / "clip.mp4")})
    with FakeOpenAIServer(replies) as srv:
        v = make_judge("webjudge", model="m", base_url=srv.base_url).judge(ep, task)
        assert _images(srv.requests[-1]) == 1  # only the kept screenshot, no keyframes
        assert "Keyframe" not in str(srv.requests[-1])
    assert not v.success and v.kept_screenshots == ["screenshots/step-002.png"]
    assert "use_video" in v.judge.settings and v.judge.settings["use_video"] is False
    assert not (tmp_path / "clip.mp4.keyframes").exists()


def test_registry_and_bad_settings(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EGO2WEB_JUDGE_MODEL"):
        monkeypatch.delenv(var, raising=False)
    assert set(JUDGES) == {"ego2web", "webjudge", "webvoyager", "rule", "rubric"}
    with pytest.raises(JudgeError, match="unknown judge 'gpt'; known judges: ego2web, webjudge"):
        make_judge("gpt")
    for name in ("ego2web", "webjudge", "webvoyager"):
        with pytest.raises(JudgeError, match="no judge endpoint configured.*--judge rule"):
            make_judge(name, model="m")
    with pytest.raises(JudgeError, match="unknown setting last_k for judge 'ego2web'"):
        make_judge("ego2web", model="m", base_url="http://127.0.0.1:9/v1", last_k=3)
    with pytest.raises(JudgeError, match="no prompt set 'ego2web-v9'"):
        make_judge("ego2web", model="m", base_url="http://127.0.0.1:9/v1", prompt_version="v9")
    assert isinstance(make_judge("rule"), Judge)
    assert make_judge("rubric").spec.model is None  # deterministic rubrics need no endpoint
