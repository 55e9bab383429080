"""The rubric's extractor step and screenshot-aware claim verification, against the real local
OpenAI-compatible server (it records every request it receives)."""

from __future__ import annotations

import base64
import json

import pytest

from ego2web_replay.judge.client import LLMClient, LLMConfig, ReplyFormatError
from ego2web_replay.judge.extract import parse_extraction
from ego2web_replay.judge.pages import DictPages
from ego2web_replay.judge.prompts import load_prompts
from ego2web_replay.judge.registry import make_judge
from ego2web_replay.judge.rubric import RubricContext, evaluate_rubric, load_rubric, url_key
from ego2web_replay.tasks import Task
from ego2web_replay.testing.episodes import make_episode
from ego2web_replay.testing.openai_server import FakeOpenAIServer

ANSWER = ("The cheapest is the Acme X1 at $199 (https://shop.test/x1). It has free shipping, "
          "see https://shop.test/shipping.")
PAGES = DictPages({"https://shop.test/x1": "<h1>Acme X1</h1><p>Price: $199</p>",
                   "https://shop.test/shipping": "<p>Shipping: $5 on every order</p>",
                   "https://shop.test/": "<p>Welcome</p>"})
RUBRIC = {"id": "root", "children": [
    {"id": "price", "check": {"type": "llm_claim", "claim": "the cheapest product costs $199"}},
    {"id": "rating", "check": {"type": "llm_claim", "claim": "the product is rated 5 stars"}},
    {"id": "shipping", "check": {"type": "llm_claim", "claim": "shipping is free"}},
]}
EXTRACTED = {"claims": [
    {"id": "price", "statement": "The Acme X1 costs $199", "urls": ["https://shop.test/x1"]},
    {"id": "rating", "statement": None, "urls": []},
    # a URL the answer does not cite is dropped
    {"id": "shipping", "statement": "It has free shipping",
     "urls": ["https://shop.test/shipping", "https://elsewhere.test/"]},
]}


def _text(msg: dict) -> str:
    c = msg["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)


def _images(msg: dict) -> list[bytes]:
    c = msg["content"]
    if isinstance(c, str):
        return []
    return [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in c if p["type"] == "image_url"]


def test_extractor_claims_and_page_screenshots_reach_the_verifier(tmp_path):
    run = tmp_path / "run"
    ep = make_episode(run, "T1", "live", answer=ANSWER,
                      urls=["https://shop.test/", "https://shop.test/x1", "https://shop.test/shipping/"])
    shot = {u: (ep / f"screenshots/step-{i:03d}.png").read_bytes()
            for i, u in enumerate(["https://shop.test/", "https://shop.test/x1", "https://shop.test/shipping"], 1)}

    def reply(body):
        system, user = _text(body["messages"][0]), _text(body["messages"][1])
        if "prepare a web agent's final answer" in system:
            assert "- price: the cheapest product costs $199" in user and "https://shop.test/shipping" in user
            return "```json\n" + json.dumps(EXTRACTED) + "\n```"
        ok = "Price: $199" in user and "costs $199" in user  # the shipping page says $5: unsupported
        return f"Reason: compared.\nVerdict: {'supported' if ok else 'unsupported'}"

    task = Task(id="T1", instruction="x", start_url="https://shop.test/", rubric=RUBRIC)
    with FakeOpenAIServer(reply) as srv:
        judge = make_judge("rubric", pages=PAGES, base_url=srv.base_url, model="m", votes=1)
        verdict = judge.judge(ep, task)
        reqs = list(srv.requests)
    # one extractor call, then one verification per claim the answer makes (not for 'rating')
    assert len(reqs) == 3 and "prepare a web agent's final answer" in _text(reqs[0]["messages"][0])
    verify = {_text(r["messages"][1]).split("\n", 1)[0]: r["messages"][1] for r in reqs[1:]}
    price = verify["Claim: the cheapest product costs $199"]
    shipping = verify["Claim: shipping is free"]
    # the extracted statement and only the URLs it was attributed to are used
    assert "What the answer states for this claim:\nThe Acme X1 costs $199" in _text(price)
    assert "--- https://shop.test/x1 (archived: the agent opened it, but the episode kept no rendered text of it; " \
           "part 1 of 1)" in _text(price) and "--- https://shop.test/shipping" not in _text(price)
    assert "It has free shipping" in _text(shipping) and "Shipping: $5" in _text(shipping)
    assert "elsewhere.test" not in _text(shipping)
    # each cited page's screenshot, as the episode took it, is sent as an image
    assert _images(price) == [shot["https://shop.test/x1"]]
    assert _images(shipping) == [shot["https://shop.test/shipping"]]  # matched despite the trailing slash
    status = {c["id"]: c["status"] for c in verdict.checks if c["kind"] == "rubric_node"}
    assert status == {"root": "partial", "price": "passed", "rating": "failed", "shipping": "failed"}
    detail = next(c["detail"] for c in verdict.checks if c.get("id") == "rating")
    assert "states nothing for this claim" in detail
    assert [c["stage"] for c in verdict.calls][0] == "extract" and len(verdict.calls) == 3
    extraction = next(c for c in verdict.checks if c["kind"] == "rubric_extraction")
    assert extraction["claims"][2]["urls"] == ["https://shop.test/shipping"]
    assert verdict.score == pytest.approx(1 / 3, abs=1e-6) and verdict.judge.prompt_version == "rubric-v3"


def test_prompt_set_without_extract_stage_verifies_the_whole_answer(tmp_path):
    seen = []

    def reply(body):
        seen.append(_text(body["messages"][1]))
        return "Reason: ok.\nVerdict: supported"

    with FakeOpenAIServer(reply) as srv:
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url))
        ctx = RubricContext(ANSWER, [], PAGES, client, load_prompts("rubric", "v1"), votes=1)
        res = evaluate_rubric(load_rubric({"id": "p", "check": RUBRIC["children"][0]["check"]}), ctx)
    assert res.success and res.extractor_calls == 0 and len(seen) == 1
    # every page the answer cites is a candidate (the first part already supports the claim)
    assert "--- https://shop.test/x1 (archived: the agent never opened it; part 1 of 1)" in seen[0] and "What the answer states" not in seen[0]


def test_bad_extractions_are_format_errors():
    for bad in ("no json here", '{"claims": "x"}', '{"claims": [{"statement": "no id"}]}'):
        with pytest.raises(ReplyFormatError):
            parse_extraction(bad)
    assert url_key("HTTPS://Shop.Test/a/#top") == "https://shop.test/a"


def test_max_screenshots_reaches_the_rubric_judge(tmp_path):
    """`judge --max-screenshots` caps the screenshots sent with each claim (default 3), through the CLI."""
    from ego2web_replay.cli import main

    run = tmp_path / "run"
    urls = [f"https://shop.test/p{i}" for i in range(5)]
    ep = make_episode(run, "T1", "live", answer="See " + " ".join(urls), urls=urls)
    rubric = {"id": "c", "check": {"type": "llm_claim", "claim": "the pages agree"}}
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps({"id": "T1", "instruction": "x", "start_url": urls[0], "rubric": rubric}) + "\n")
    pages = DictPages({u: f"<p>page {i}</p>" for i, u in enumerate(urls)})
    sent: list[int] = []
    temperatures: list[float] = []

    def reply(body):
        sent.append(len(_images(body["messages"][1])))
        temperatures.append(body["temperature"])
        return "Reason: ok.\nVerdict: supported"

    with FakeOpenAIServer(reply) as srv:
        make_judge("rubric", pages=pages, base_url=srv.base_url, model="m", prompt_version="v1", votes=1).judge(
            ep, Task(id="T1", instruction="x", start_url=urls[0], rubric=rubric))
        assert sent == [3]  # the default
        sent.clear()
        judge = make_judge("rubric", pages=pages, base_url=srv.base_url, model="m", prompt_version="v1",
                           max_screenshots=5, votes=1)
        assert judge.spec.settings["max_screenshots"] == 5
        judge.judge(ep, Task(id="T1", instruction="x", start_url=urls[0], rubric=rubric))
        assert sent == [5]
        sent.clear()
        args = ["judge", "run", str(run), "--judge", "rubric", "--tasks", str(suite), "--base-url", srv.base_url,
                "--model", "m", "--prompt-version", "v1", "--votes", "1", "--no-db", "--cache-dir", str(tmp_path / "c")]
        assert main([*args, "--max-screenshots", "1", "--temperature", "0.5"]) == 0
        assert sent == [1] and temperatures[-1] == 0.5 and temperatures[0] == 0.0
    verdict = json.loads((ep / "verdicts" / "rubric.json").read_text("utf-8"))
    assert verdict["judge"]["settings"]["max_screenshots"] == 1
