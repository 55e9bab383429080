"""Packaged prompt files render with the placeholders the judges fill; reply parsers."""

from __future__ import annotations

import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.client import ReplyFormatError
from ego2web_replay.judge.prompts import (
    PROMPTS_DIR,
    load_prompts,
    parse_claim,
    parse_final,
    parse_key_points,
    parse_screenshot_score,
)

VALUES = {"instruction": "I", "key_points": "1. k", "actions": "1. goto", "step": 1, "url": "u",
          "answer": "a", "count": 2, "claim": "c", "pages": "p"}
STAGES = {"ego2web": ["keypoints", "screenshot", "final"], "webjudge": ["keypoints", "screenshot", "final"],
          "webvoyager": ["final"], "rubric": ["claim"]}


@pytest.mark.parametrize("judge", list(STAGES))
def test_packaged_prompts_render(judge):
    prompts = load_prompts(judge)
    assert prompts.version == f"{judge}-v1"
    for stage in STAGES[judge]:
        system, user = prompts.render(stage, **VALUES)
        assert system and user and "$" not in system.replace("$instruction", "")
    assert sorted(p.stem for p in (PROMPTS_DIR / f"{judge}-v1").glob("*.txt")) == sorted(STAGES[judge])


def test_custom_prompt_folder_is_versioned_by_content(tmp_path):
    (tmp_path / "final.txt").write_text("sys\n=== user ===\nTask: $instruction")
    a = load_prompts("ego2web", directory=tmp_path).version
    (tmp_path / "final.txt").write_text("sys!\n=== user ===\nTask: $instruction")
    assert load_prompts("ego2web", directory=tmp_path).version != a
    with pytest.raises(JudgeError, match="bad placeholder"):
        load_prompts("ego2web", directory=tmp_path).render("final")
    with pytest.raises(JudgeError, match="prompt file missing"):
        load_prompts("ego2web", directory=tmp_path).render("keypoints", instruction="x")


def test_parsers():
    assert parse_key_points("Sure.\n**Key Points:**\n1. red mug\n2) buy it\n- extra").points == \
        ["red mug", "buy it", "extra"]
    s = parse_screenshot_score("**Summary:** shows the cart\nwith 2 items.\n**Score:** 4")
    assert (s.summary, s.score) == ("shows the cart with 2 items.", 4)
    f = parse_final("Thoughts: colour differs.\nStatus: success?\nWait.\n**Status:** NOT SUCCESS")
    assert f.status == "failure" and f.thoughts == "colour differs."
    assert parse_final("Thoughts: ok\nStatus: Success").status == "success"
    assert parse_claim("Reason: page says so.\nVerdict: supported").supported
    assert not parse_claim("Verdict: not supported").supported
    for bad, parser in (("nothing", parse_key_points), ("Score: 7", parse_screenshot_score),
                        ("Summary: x", parse_screenshot_score), ("Status: maybe", parse_final),
                        ("Verdict: perhaps", parse_claim)):
        with pytest.raises(ReplyFormatError):
            parser(bad)


def test_ego2web_prompt_v3_is_the_default_and_older_sets_stay(tmp_path, monkeypatch):
    from ego2web_replay.judge.prompts import load_prompts
    from ego2web_replay.judge.registry import make_judge

    monkeypatch.setenv("OPENAI_API_KEY", "x")
    judge = make_judge("ego2web", model="m", base_url="http://127.0.0.1:9/v1")
    assert judge.spec.prompt_version == "ego2web-v3" and judge.spec.settings["max_screenshots"] is None
    webjudge = make_judge("webjudge", model="m", base_url="http://127.0.0.1:9/v1")
    assert webjudge.spec.prompt_version == "webjudge-v1" and webjudge.spec.settings["max_screenshots"] == 8
    v3 = load_prompts("ego2web", "v3")
    for stage in ("keypoints", "screenshot", "final"):
        system, user = v3.render(stage, **VALUES)
        assert system and user and "$" not in system + user
    assert sorted(p.stem for p in v3.directory.glob("*.txt")) == ["final", "keypoints", "screenshot"]
    v2 = (load_prompts("ego2web", "v2").directory / "final.txt").read_text()  # old verdicts still name their prompt
    assert len([line for line in v2.splitlines() if line[:2].rstrip(".").isdigit()]) == 9
    assert (load_prompts("ego2web", "v1").directory / "final.txt").exists()
