"""Ego2WebJudge end to end against a real local OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from ego2web_replay.judge.prompts import PROMPTS_DIR
from ego2web_replay.judge.registry import make_judge
from ego2web_replay.judge.run import judge_run
from ego2web_replay.judge.verdicts import read_verdict
from ego2web_replay.models import Verdict
from ego2web_replay.tasks import load_tasks
from ego2web_replay.testing.episodes import make_episode, make_run_manifest, make_video
from ego2web_replay.testing.openai_server import FakeOpenAIServer, Reply

SCORES = {1: 2, 2: 4, 3: 3, 4: 5}


def _text(body) -> str:
    out = []
    for m in body["messages"]:
        c = m["content"]
        out.extend([c] if isinstance(c, str) else [p["text"] for p in c if p["type"] == "text"])
    return "\n".join(out)


def _images(body) -> int:
    return sum(1 for m in body["messages"] if isinstance(m["content"], list)
               for p in m["content"] if p["type"] == "image_url")


def scripted(final="Thoughts: the red mug matches the video.\nStatus: success", bad_final=0):
    """A server brain: answers each stage by what the request contains."""
    state = {"bad": bad_final}

    def answer(body):
        system = body["messages"][0]["content"]
        text = _text(body)
        if "list the key points" in system:
            return "Key Points:\n1. a red mug\n2. add it to the cart"
        if "rate how relevant" in system:
            step = int(re.search(r"Screenshot of step (\d+)", text).group(1))
            return f"Summary: step {step} page.\nScore: {SCORES[step]}"
        if state["bad"]:
            state["bad"] -= 1
            return "I cannot decide."
        return final

    return answer


@pytest.fixture
def run(tmp_path):
    make_video(tmp_path / "clip.mp4")
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps({"id": "T1", "instruction": "Buy the mug I held", "start_url": "http://shop.test/",
                                 "video": "clip.mp4", "timestamps": "00:01-00:03"}) + "\n"
                     + json.dumps({"id": "T2", "instruction": "Find the red mug", "start_url": "http://shop.test/"})
                     + "\n")
    run = tmp_path / "runs" / "r1"
    make_episode(run, "T1", "frozen", answer="added", urls=[f"http://shop.test/p{i}" for i in range(1, 5)])
    make_run_manifest(run, suite)
    return run


def test_three_stages_send_the_expected_inputs(run, tmp_path):
    with FakeOpenAIServer(scripted()) as srv:
        judge = make_judge("ego2web", model="judge-m", base_url=srv.base_url, max_screenshots=2,
                           cache_dir=tmp_path / "cache", backoff_s=0.01)
        suite = load_tasks(tmp_path / "tasks.jsonl")
        task = suite.get("T1").model_copy(update={"video": str(tmp_path / "clip.mp4")})
        v = judge.judge(run / "episodes/T1/frozen", task)
        reqs = list(srv.requests)
    assert len(reqs) == 1 + 4 + 1
    assert "Buy the mug I held" in _text(reqs[0]) and _images(reqs[0]) == 0
    for r in reqs[1:5]:
        assert "1. a red mug\n2. add it to the cart" in _text(r) and _images(r) == 1
    final = reqs[5]
    text = _text(final)
    # threshold 3, cap 2: steps 4 (score 5) and 2 (score 4), in step order; step 3 (score 3) is over the cap
    assert _images(final) == 2 + 3
    assert text.index("step 2 (URL: http://shop.test/p2). Summary: step 2 page.") < text.index("step 4 (URL")
    assert "step 1 (URL" not in text.split("Action history")[1].split("most relevant")[1]
    assert "Keyframe at 00:01.00" in text and "Keyframe at 00:03.00" in text
    assert "Final answer of the agent: added" in text and "1. goto url='http://shop.test/p1'" in text
    assert "strict evaluator" in final["messages"][0]["content"]
    assert v.success and v.score == 1.0 and v.thoughts == "the red mug matches the video."
    assert v.key_points == ["a red mug", "add it to the cart"]
    assert v.kept_screenshots == ["screenshots/step-002.png", "screenshots/step-004.png"]
    assert v.judge.name == "ego2web" and v.judge.prompt_version == "ego2web-v2" and v.judge.model == "judge-m"
    assert v.judge.settings["threshold"] == 3 and v.judge.settings["max_screenshots"] == 2
    assert len(v.calls) == 6 and len(v.cache_keys) == 6 and v.prompt_tokens > 0 and v.completion_tokens > 0
    assert v.calls[-1]["reply"].endswith("Status: success") and v.calls[-1]["parsed"]["status"] == "success"
    assert "strict evaluator" in v.calls[-1]["messages"][0]["content"][0]["text"]
    kept = [c for c in v.checks if c["kind"] == "screenshot_relevance" and c["kept"]]
    assert [c["step"] for c in kept] == [2, 4]
    assert [c["timestamp"] for c in v.checks if c["kind"] == "keyframe"] == [1.0, 2.0, 3.0]


def test_threshold_keeps_only_screenshots_at_or_above(run, tmp_path):
    with FakeOpenAIServer(scripted()) as srv:
        judge = make_judge("ego2web", model="m", base_url=srv.base_url, threshold=4)
        task = load_tasks(tmp_path / "tasks.jsonl").get("T1").model_copy(update={"video": None})
        v = judge.judge(run / "episodes/T1/frozen", task)
        assert _images(srv.requests[-1]) == 2  # steps 2 and 4, no video -> no keyframes
    assert v.kept_screenshots == ["screenshots/step-002.png", "screenshots/step-004.png"]
    assert not [c for c in v.checks if c["kind"] == "keyframe"]


def test_judge_run_end_to_end_with_cache_and_failures(run, tmp_path):
    make_episode(run, "T2", "live", answer="none", urls=["http://shop.test/x"])
    with FakeOpenAIServer(scripted(final="Thoughts: wrong colour.\nStatus: failure")) as srv:
        first = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False,
                          settings={"backoff_s": 0.01})
        n = len(srv.requests)
        assert n == (1 + 4 + 1) + (1 + 1 + 1)
        second = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False)
        assert len(srv.requests) == n  # zero calls: all from <run>/judge-cache
    assert [(v.task_id, v.mode, v.success) for v in first] == [("T1", "frozen", False), ("T2", "live", False)]
    strip = {"judged_at", "calls"}
    assert [v.model_dump(exclude=strip) for v in first] == [v.model_dump(exclude=strip) for v in second]
    assert all(c["cached"] for v in second for c in v.calls)
    assert any((run / "judge-cache").glob("*.json"))
    stored = read_verdict(run / "episodes/T1/frozen", "ego2web")
    assert isinstance(stored, Verdict) and stored.thoughts == "wrong colour."
    # a changed model or prompt misses the cache
    with FakeOpenAIServer(scripted()) as srv:
        judge_run(run, "ego2web", model="other", base_url=srv.base_url, progress=False, task_ids=["T2"])
        assert len(srv.requests) == 3
        custom = tmp_path / "prompts"
        shutil.copytree(PROMPTS_DIR / "ego2web-v2", custom)
        f = custom / "final.txt"
        f.write_text(f.read_text().replace("strict evaluator", "very strict evaluator"))
        vs = judge_run(run, "ego2web", model="other", base_url=srv.base_url, progress=False, task_ids=["T2"],
                       settings={"prompts_dir": str(custom)})
        assert len(srv.requests) == 4  # key points and screenshot were cached; only the final stage changed
        assert vs[0].judge.prompt_version.startswith("custom-")


def test_malformed_429_and_500_are_survived(run, tmp_path):
    brain = scripted(bad_final=1)
    flaky = iter([Reply(status=429), Reply(status=500)])

    def answer(body):
        nxt = next(flaky, None)
        return nxt if nxt is not None else brain(body)

    with FakeOpenAIServer(answer) as srv:
        vs = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False,
                       settings={"backoff_s": 0.01})
        assert len(srv.requests) == 2 + 6 + 1
    assert vs[0].success and vs[0].error is None


def test_unparseable_final_and_corrupt_video_are_per_episode_errors(run, tmp_path):
    make_episode(run, "T2", "live", answer="none", urls=["http://shop.test/x"])
    (tmp_path / "clip.mp4").write_bytes(b"not a video at all" * 100)
    with FakeOpenAIServer(scripted(bad_final=99)) as srv:
        vs = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False,
                       settings={"backoff_s": 0.01, "format_retries": 1})
    t1, t2 = vs
    assert "clip.mp4: cannot read video" in t1.error and not t1.success and t1.score == 0
    assert "could not be read after 2 tries" in t2.error
    assert read_verdict(run / "episodes/T1/frozen", "ego2web").error == t1.error


def _sides(body) -> list[int]:
    """The longest side of each image the request carries."""
    import base64
    import io

    from PIL import Image

    sides = []
    for m in body["messages"]:
        for p in m["content"] if isinstance(m["content"], list) else []:
            if p["type"] == "image_url":
                data = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                sides.append(max(Image.open(io.BytesIO(data)).size))
    return sides


def test_keyframe_size_is_a_judge_option(run, tmp_path):
    """`judge --keyframe-size N` scales the video keyframes the verdict call sends (the clip is 64 px)."""
    from ego2web_replay.cli import main

    finals = {}
    for size in (None, 32):
        with FakeOpenAIServer(scripted()) as srv:
            extra = [] if size is None else ["--keyframe-size", str(size)]
            assert main(["judge", str(run), "--judge", "ego2web", "--model", "m", "--base-url", srv.base_url,
                         "--no-db", "--no-progress", "--cache-dir", str(tmp_path / f"cache-{size}"), *extra]) == 0
            finals[size] = srv.requests[-1]
    assert "Keyframe at" in _text(finals[32])
    keyframes = {size: sorted(_sides(body))[-3:] for size, body in finals.items()}  # screenshots are smaller
    assert keyframes == {None: [64, 64, 64], 32: [32, 32, 32]}
    verdict = read_verdict(run / "episodes/T1/frozen", "ego2web")
    assert verdict is not None and verdict.judge.settings["keyframe_max_side"] == 32
