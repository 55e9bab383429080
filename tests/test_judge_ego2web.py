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


def _stage(body) -> str:
    """Which stage a request is, from the inputs the pipeline sends (whatever the prompt version says)."""
    user = body["messages"][1]["content"]  # the first user message (a format retry appends more)
    text = user if isinstance(user, str) else "\n".join(p["text"] for p in user if p["type"] == "text")
    return "final" if "Action history:" in text else "screenshot" if "Screenshot of step" in text else "keypoints"


def scripted(final="Thoughts: the red mug matches the video.\nStatus: success", bad_final=0, scores=None):
    """A server brain: answers each stage by what the request contains."""
    state = {"bad": bad_final}
    scores = scores or SCORES

    def answer(body):
        text = _text(body)
        if _stage(body) == "keypoints":
            return "Key Points:\n1. a red mug\n2. add it to the cart"
        if _stage(body) == "screenshot":
            step = int(re.search(r"Screenshot of step (\d+)", text).group(1))
            return f"Summary: step {step} page.\nScore: {scores[step]}"
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
    assert "false positive" in final["messages"][0]["content"]
    assert v.success and v.score == 1.0 and v.thoughts == "the red mug matches the video."
    assert v.key_points == ["a red mug", "add it to the cart"]
    assert v.kept_screenshots == ["screenshots/step-002.png", "screenshots/step-004.png"]
    assert v.judge.name == "ego2web" and v.judge.prompt_version == "ego2web-v3" and v.judge.model == "judge-m"
    assert v.judge.settings["threshold"] == 3 and v.judge.settings["max_screenshots"] == 2
    assert len(v.calls) == 6 and len(v.cache_keys) == 6 and v.prompt_tokens > 0 and v.completion_tokens > 0
    assert v.calls[-1]["reply"].endswith("Status: success") and v.calls[-1]["parsed"]["status"] == "success"
    assert "false positive" in v.calls[-1]["messages"][0]["content"][0]["text"]
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
        shutil.copytree(PROMPTS_DIR / "ego2web-v3", custom)
        f = custom / "final.txt"
        f.write_text(f.read_text().replace("Be strict", "Be very strict"))
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


# -- the paper's judge, point by point (docs/judging.md has the table) ---------------------------------------

def _lines_matching(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line, re.I)]


def _bullets(text: str, heading: str) -> list[str]:
    """The '- ' items of the block that follows ``heading``."""
    block = text[text.index(heading):].split("\n\n")[0]
    return [line[2:] for line in block.splitlines() if line.startswith("- ")]


#: What the paper's verdict prompt asks for, as concepts (any wording), each in the one rule that states it.
GROUNDING = {  # strict grounding in the ego video
    "identity": r"identity", "category": r"categor", "brand": r"brand", "colour": r"colou?r",
    "quantity": r"quantit|how many", "state": r"\bstate\b", "action": r"\baction",
}
FINE_GRAINED = {
    "identity": r"identity", "brand": r"brand", "colour": r"colou?r", "material": r"material",
    "shape": r"shape", "text": r"\btext\b", "number of items": r"number of items|count",
    "spatial relations": r"spatial", "actions": r"\baction",
}
CHECKLIST = {  # each must be its own item of the failure checklist
    "product mismatch (brand, colour, type)": [r"mismatch|differ", r"brand", r"colou?r", r"type"],
    "similar-looking objects": [r"similar[- ]looking"],
    "related but different events": [r"related but different", r"event|action"],
    "titles vs screenshots": [r"title", r"screenshot", r"contradict"],
    "insufficient evidence": [r"too little|insufficient|not enough", r"evidence"],
    "unsupported claims about the video and the page": [r"claim", r"video", r"page", r"not support|unsupported"],
    "partial matches": [r"partial match"],
}


def test_verdict_prompt_sent_holds_every_point_of_the_papers_judge(run, tmp_path):
    """The prompts as the local server receives them carry each rule, attribute and checklist item."""
    with FakeOpenAIServer(scripted()) as srv:
        judge = make_judge("ego2web", model="m", base_url=srv.base_url, backoff_s=0.01)
        task = load_tasks(tmp_path / "tasks.jsonl").get("T1").model_copy(update={"video": str(tmp_path / "clip.mp4")})
        judge.judge(run / "episodes/T1/frozen", task)
        by_stage = {_stage(b): b["messages"][0]["content"] for b in srv.requests}
    final = by_stage["final"]
    # the asymmetry: a false positive is worse than a false negative, so doubt of any kind is failure
    [why] = [p for p in final.split("\n\n") if re.search(r"false positive", p, re.I)]
    assert re.search(r"false positive.{0,80}worse.{0,80}false negative", why, re.I | re.S)
    for doubt in (r"uncertain", r"ambigu", r"mismatch", r"missing|lack", r"visual evidence", r"failure"):
        assert re.search(doubt, why, re.I), doubt
    # strict grounding and fine-grained details: every attribute, in its own rule
    [strict] = _lines_matching(final, r"strict(ly)? ground")
    [fine] = _lines_matching(final, r"fine-grained")
    assert strict != fine
    for rule, attributes in ((strict, GROUNDING), (fine, FINE_GRAINED)):
        missing = [name for name, pattern in attributes.items() if not re.search(pattern, rule, re.I)]
        assert not missing, f"{missing} not in: {rule}"
    [retrieval] = _lines_matching(final, r"object retrieval")
    assert re.search(r"same object", retrieval, re.I) and re.search(r"correct categor", retrieval, re.I)
    assert re.search(r"video", retrieval, re.I)
    [apparent] = _lines_matching(final, r"apparent success")
    assert re.search(r"not (be )?enough|not sufficient|insufficient", apparent, re.I)
    assert re.search(r"fail", apparent, re.I) and re.search(r"ego video", apparent, re.I)
    [conflict] = _lines_matching(final, r"conflict")
    assert re.search(r"seen|visual", conflict, re.I) and re.search(r"written|text", conflict, re.I)
    [near] = _lines_matching(final, r"near or partial|partial match.*precise|precise.*partial")
    assert re.search(r"precise", near, re.I) and re.search(r"fail", near, re.I)
    # the checklist, item by item
    items = _bullets(final, "Failure checklist")
    for name, patterns in CHECKLIST.items():
        assert any(all(re.search(p, item, re.I) for p in patterns) for item in items), name
    # the two-line reply: reasoning from key points, webpage evidence and the ego video, then the status
    [thoughts] = _lines_matching(final, r"^Thoughts:")
    assert re.search(r"key point", thoughts, re.I) and re.search(r"webpage", thoughts, re.I)
    assert re.search(r"video", thoughts, re.I) and re.search(r"two lines", final, re.I)
    assert re.search(r"^Status: success or failure$", final, re.M)
    # stage 1: key points tied to what the video shows; stage 2: a summary and a 1-5 relevance score
    assert re.search(r"video", by_stage["keypoints"], re.I) and re.search(r"atomic", by_stage["keypoints"], re.I)
    assert re.search(r"summary", by_stage["screenshot"], re.I) and re.search(r"1 = .*5 = ", by_stage["screenshot"],
                                                                               re.I | re.S)


LONG = {1: 5, 2: 3, 3: 4, 4: 3, 5: 2, 6: 3, 7: 4, 8: 3, 9: 3, 10: 4}  # 9 of 10 at or above δ = 3


@pytest.fixture
def long_run(tmp_path):
    suite = tmp_path / "long.jsonl"
    suite.write_text(json.dumps({"id": "L1", "instruction": "Find the mug", "start_url": "http://shop.test/"}) + "\n")
    run = tmp_path / "runs" / "long"
    make_episode(run, "L1", "frozen", answer="found", urls=[f"http://shop.test/p{i}" for i in LONG])
    make_run_manifest(run, suite)
    return run, load_tasks(suite).get("L1")


def _kept_steps(body) -> list[int]:
    text = _text(body).split("with summaries:")[1] if "with summaries:" in _text(body) else ""
    return [int(n) for n in re.findall(r"Screenshot of step (\d+) \(URL", text)]


def test_every_screenshot_at_or_above_delta_is_kept_without_a_cap(long_run):
    run, task = long_run
    with FakeOpenAIServer(scripted(scores=LONG)) as srv:
        v = make_judge("ego2web", model="m", base_url=srv.base_url).judge(run / "episodes/L1/frozen", task)
        final = srv.requests[-1]
    assert _kept_steps(final) == [1, 2, 3, 4, 6, 7, 8, 9, 10]  # all but step 5 (score 2), in step order
    assert _images(final) == 9 and v.judge.settings["max_screenshots"] is None
    assert v.kept_screenshots == [f"screenshots/step-{i:03d}.png" for i in (1, 2, 3, 4, 6, 7, 8, 9, 10)]
    assert not [c for c in v.checks if c.get("capped")]


def test_a_cap_keeps_the_highest_scored_ties_by_order_not_the_last(long_run):
    """Cap 3: step 1 (5) and the first two of the 4s (steps 3, 7); step 10, the last and also a 4, is cut."""
    run, task = long_run
    with FakeOpenAIServer(scripted(scores=LONG)) as srv:
        v = make_judge("ego2web", model="m", base_url=srv.base_url, max_screenshots=3).judge(
            run / "episodes/L1/frozen", task)
        final = srv.requests[-1]
    assert _kept_steps(final) == [1, 3, 7] and _images(final) == 3
    scored = {c["step"]: c for c in v.checks if c["kind"] == "screenshot_relevance"}
    assert [s for s, c in scored.items() if c["kept"]] == [1, 3, 7]
    assert [s for s, c in scored.items() if c.get("capped")] == [2, 4, 6, 8, 9, 10]  # passed δ, cut: shown
    assert not scored[5].get("capped") and not scored[5]["kept"]


def test_select_screenshots_edges(monkeypatch):
    from ego2web_replay.errors import JudgeError
    from ego2web_replay.judge.ego2web import select_screenshots

    scored = [{"step": i, "score": s} for i, s in enumerate((5, 5, 1, 5, 4), 1)]
    steps = lambda kept: [s["step"] for s in kept]  # noqa: E731
    assert steps(select_screenshots(scored, 3)) == [1, 2, 4, 5]
    assert steps(select_screenshots(scored, 3, 2)) == [1, 2]  # three tied at 5: the earliest two
    assert steps(select_screenshots(scored, 5, 10)) == [1, 2, 4]
    assert steps(select_screenshots(scored, 3, 0)) == []
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with pytest.raises(JudgeError, match="threshold must be between 1 and 5"):
        make_judge("ego2web", model="m", base_url="http://127.0.0.1:9/v1", threshold=0)
    with pytest.raises(JudgeError, match="max_screenshots must be 0 or more"):
        make_judge("ego2web", model="m", base_url="http://127.0.0.1:9/v1", max_screenshots=-1)


def test_new_prompt_version_does_not_reuse_the_old_ones_calls(run, tmp_path):
    """v3 is a new version: judging a run judged with v2 asks every stage again; v2 again is all cache."""
    cache = tmp_path / "cache"
    with FakeOpenAIServer(scripted()) as srv:
        old = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False, cache_dir=cache,
                        settings={"prompt_version": "v2", "max_screenshots": 8})
        n = len(srv.requests)
        new = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False, cache_dir=cache)
        assert len(srv.requests) == 2 * n  # key points, each screenshot and the verdict: none from v2's cache
        again = judge_run(run, "ego2web", model="m", base_url=srv.base_url, progress=False, cache_dir=cache,
                          settings={"prompt_version": "v2", "max_screenshots": 8})
        assert len(srv.requests) == 2 * n
    assert [v.judge.prompt_version for v in old + new + again] == ["ego2web-v2", "ego2web-v3", "ego2web-v2"]
    assert not set(old[0].cache_keys) & set(new[0].cache_keys) and again[0].cache_keys == old[0].cache_keys
