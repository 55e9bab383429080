"""Rubric trees: critical gates, averaging, sequential skips (and their skipped LLM calls), leaves."""

from __future__ import annotations

import json

import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.client import LLMClient, LLMConfig
from ego2web_replay.judge.pages import DictPages
from ego2web_replay.judge.prompts import load_prompts
from ego2web_replay.judge.registry import make_judge
from ego2web_replay.judge.rubric import RubricContext, cited_urls, evaluate_rubric, load_rubric
from ego2web_replay.judge.run import judge_run
from ego2web_replay.tasks import Task
from ego2web_replay.testing.episodes import make_episode
from ego2web_replay.testing.openai_server import FakeOpenAIServer

ANSWER = "The cheapest is the Acme X1 at $199, see https://shop.test/x1. Reviews: https://rev.test/x1."
PAGES = DictPages({"https://shop.test/x1": "<h1>Acme X1</h1><p>Price: $199</p>",
                   "https://shop.test/": "<p>Welcome</p>"})


def leaf(id, ok=True, critical=False, **check):
    check = check or {"type": "answer_contains", "text": "Acme X1" if ok else "Zeta 9"}
    return {"id": id, "critical": critical, "check": check}


def claim(id, text="X1 costs $199"):
    return {"id": id, "check": {"type": "llm_claim", "claim": text}}


def ctx(client=None, visited=("https://shop.test/", "https://shop.test/x1"), votes=1):
    return RubricContext(ANSWER, list(visited), PAGES, client, load_prompts("rubric") if client else None,
                         votes=votes)


def test_failed_critical_child_zeroes_parent():
    r = load_rubric({"id": "root", "children": [leaf("a", critical=True), leaf("b", ok=False, critical=True),
                                                 leaf("c")]})
    res = evaluate_rubric(r, ctx())
    assert res.score == 0.0 and not res.success and "critical child failed: b" in res.root.detail
    assert [c.status for c in res.root.children] == ["passed", "failed", "passed"]


def test_non_critical_children_are_averaged_and_critical_pass_gates_only():
    r = load_rubric({"id": "root", "children": [
        leaf("a", critical=True),
        leaf("b"), leaf("c", ok=False),
        {"id": "sub", "children": [leaf("d"), leaf("e", ok=False), leaf("f", ok=False)]},
    ]})
    res = evaluate_rubric(r, ctx())
    # b=1, c=0, sub=1/3 -> (1 + 0 + 1/3) / 3
    assert res.score == pytest.approx(4 / 9, abs=1e-6) and res.root.status == "partial" and not res.success
    only_critical = load_rubric({"id": "root", "children": [leaf("a", critical=True)]})
    assert evaluate_rubric(only_critical, ctx()).success


def test_critical_node_with_non_critical_children_is_rejected_and_a_failed_critical_child_fails_it():
    # Mind2Web 2's verification tree: every child of a critical node is critical
    with pytest.raises(JudgeError, match=r"critical node 'sub' has non-critical children \(d\); mark them critical"):
        load_rubric({"id": "root", "children": [
            {"id": "sub", "critical": True, "children": [leaf("d"), leaf("e", ok=False, critical=True)]}]})
    r = load_rubric({"id": "root", "children": [
        {"id": "sub", "critical": True, "children": [leaf("d", critical=True), leaf("e", ok=False, critical=True)]},
        leaf("b")]})
    res = evaluate_rubric(r, ctx())
    assert res.root.children[0].status == "failed" and res.score == 0.0


def test_sequential_failure_skips_the_rest_and_their_llm_calls():
    r = load_rubric({"id": "root", "strategy": "sequential", "children": [
        leaf("s1"), leaf("s2", ok=False), claim("s3"),
        {"id": "s4", "children": [claim("s4a"), claim("s4b"), leaf("s4c")]},
    ]})
    with FakeOpenAIServer([]) as srv:
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url, backoff_s=0.01))
        res = evaluate_rubric(r, ctx(client))
        assert srv.requests == []
    assert [c.status for c in res.root.children] == ["passed", "failed", "skipped", "skipped"]
    assert [c.status for c in res.root.children[3].children] == ["skipped"] * 3
    assert res.skipped_llm_calls == 3 and res.llm_calls == 0 and res.skipped_nodes == 5
    assert res.score == 0.25


def test_llm_claims_use_archived_cited_pages_in_parallel():
    r = load_rubric({"id": "root", "children": [claim("price"), claim("rating", "X1 is rated 5 stars"),
                                                 leaf("cite", type="cited_url", pattern="shop\\.test",
                                                      text="$199")]})

    def answer(body):
        user = body["messages"][1]["content"]
        assert ("--- https://shop.test/x1 (archived: the agent opened it, but the episode kept no rendered text "
                "of it; part 1 of 1) ---\nAcme X1\nPrice: $199") in user
        assert "--- https://rev.test/x1 ---\n(neither rendered by the episode nor archived)" in user
        ok = "costs $199" in user
        return f"Reason: checked.\nVerdict: {'supported' if ok else 'unsupported'}"

    with FakeOpenAIServer(answer) as srv:
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url))
        res = evaluate_rubric(r, ctx(client))
        assert len(srv.requests) == 2
    assert [c.status for c in res.root.children] == ["passed", "failed", "passed"]
    assert res.llm_calls == 2 and res.score == pytest.approx(2 / 3, abs=1e-6)


def test_deterministic_leaves():
    checks = {
        "re": ({"type": "answer_regex", "pattern": r"\$\d+"}, True),
        "visited": ({"type": "url_visited", "pattern": "/x1$"}, True),
        "final": ({"type": "final_url", "pattern": "/cart$"}, False),
        "page": ({"type": "page_contains", "url": "https://shop.test/x1", "text": "price: $199"}, True),
        "page_any": ({"type": "page_contains", "text": "Acme X1"}, True),
        "page_missing": ({"type": "page_contains", "url": "https://rev.test/x1", "text": "x"}, False),
        "cite_missing": ({"type": "cited_url", "pattern": "rev\\.test"}, False),
    }
    for name, (check, expect) in checks.items():
        res = evaluate_rubric(load_rubric({"id": name, "check": check}), ctx())
        assert res.success is expect, (name, res.root.detail)
    res = evaluate_rubric(load_rubric({"id": "c", "check": {"type": "cited_url", "pattern": "rev"}}), ctx())
    assert "https://rev.test/x1 neither rendered nor archived" in res.root.detail
    assert cited_urls(ANSWER) == ["https://shop.test/x1", "https://rev.test/x1"]


def test_claim_without_endpoint_is_an_error():
    with pytest.raises(JudgeError, match="no judge endpoint is configured"):
        evaluate_rubric(load_rubric({"id": "root", "children": [claim("c")]}), ctx())


def test_rubric_files_and_bad_rubrics(tmp_path):
    y = tmp_path / "r.yaml"
    y.write_text("root:\n  id: root\n  children:\n    - id: a\n      check: {type: answer_contains, text: X1}\n")
    assert load_rubric(y).root.children[0].id == "a"
    assert load_rubric("r.yaml", base=tmp_path).root.id == "root"
    with pytest.raises(JudgeError, match="rubric file not found"):
        load_rubric(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(JudgeError, match="not valid JSON"):
        load_rubric(tmp_path / "bad.json")
    with pytest.raises(JudgeError, match="needs 'text'"):
        load_rubric({"id": "a", "check": {"type": "answer_contains"}})
    with pytest.raises(JudgeError, match="either 'check' or 'children'"):
        load_rubric({"id": "a"})
    with pytest.raises(JudgeError, match="used twice"):
        load_rubric({"id": "a", "children": [leaf("b"), leaf("b")]})


def test_rubric_judge_over_a_run(tmp_path):
    (tmp_path / "rubric.json").write_text(json.dumps({"id": "root", "children": [
        leaf("name", critical=True), leaf("price", type="answer_contains", text="$199"),
        leaf("cart", type="url_visited", pattern="/cart")]}))
    suite = tmp_path / "tasks.json"
    suite.write_text(json.dumps([{"id": "T1", "instruction": "x", "start_url": "http://shop.test/",
                                  "rubric": "rubric.json"}, {"id": "T2", "instruction": "y",
                                                             "start_url": "http://shop.test/"}]))
    run = tmp_path / "run"
    make_episode(run, "T1", "live", answer=ANSWER, urls=["https://shop.test/x1"])
    make_episode(run, "T2", "live", answer="x")
    v1, v2 = judge_run(run, "rubric", tasks=suite, progress=False)
    assert v1.score == 0.5 and not v1.success and v1.error is None
    summary = v1.checks[-1]
    assert summary["kind"] == "rubric_summary" and summary["skipped_llm_calls"] == 0
    assert "failed checks: cart" in v1.thoughts
    assert "has no rubric" in v2.error
    assert (run / "episodes/T1/live/verdicts/rubric.json").is_file()
    assert make_judge("rubric", pages=PAGES).judge(run / "episodes/T1/live", Task(
        id="T1", instruction="x", start_url="http://a/",
        rubric={"id": "p", "check": {"type": "page_contains", "url": "https://shop.test/x1", "text": "$199"}})).success


def test_claim_verifier_reads_the_whole_long_page_in_chunks():
    filler = "<p>" + "lorem ipsum " * 1000 + "</p>"  # ~12,000 characters before the fact
    pages = DictPages({"https://shop.test/long": filler + "<p>Warranty: 7 years</p>"})
    answer_text = "The warranty is 7 years, see https://shop.test/long."
    r = load_rubric({"id": "root", "children": [{"id": "w", "check": {"type": "llm_claim",
                                                                      "claim": "the warranty is 7 years"}}]})

    def answer(body):
        user = body["messages"][1]["content"]
        ok = "Warranty: 7 years" in user
        return f"Reason: read.\nVerdict: {'supported' if ok else 'unsupported'}"

    with FakeOpenAIServer(answer) as srv:
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url))
        res = evaluate_rubric(r, RubricContext(answer_text, [], pages, client, load_prompts("rubric"),
                                               page_chars=6000, votes=1))
        parts = [b["messages"][1]["content"] for b in srv.requests]
    assert res.root.children[0].status == "passed"
    assert len(parts) == 3 and "part 1 of 3)" in parts[0] and "part 3 of 3)" in parts[2]
    assert "Warranty: 7 years" not in parts[0]  # the first 6,000 characters alone would have missed it


def test_page_parts_overlap_so_no_passage_is_cut_in_two():
    from ego2web_replay.judge.claims import split_text

    words = [f"w{i}" for i in range(700)]
    text = " ".join(words[:350]) + "\nPrice: $12.99 for the Red Ceramic Mug, in stock.\n" + " ".join(words[350:])
    parts = split_text(text, 500, 100)
    assert len(parts) > 5 and all(len(p) <= 500 for p in parts)
    assert "".join(p for p in parts).count("Price: $12.99") >= 1
    # every passage of up to 100 characters lies whole inside some part
    for a in range(0, len(text) - 100):
        assert any(text[a:a + 100] in p for p in parts), a
    # without the overlap, a passage across a boundary would be cut
    plain = [text[i:i + 500] for i in range(0, len(text), 500)]
    assert not all(any(text[a:a + 100] in p for p in plain) for a in range(0, len(text) - 100))
    assert split_text("short", 500, 100) == ["short"]


def test_votes_take_the_majority_each_sample_its_own_seed_and_cache_entry(tmp_path):
    """Three votes by default (Mind2Web 2); the asking stops once one side has a majority."""
    r = load_rubric({"id": "root", "children": [claim("price"), claim("rating", "X1 is rated 5 stars")]})
    verdicts = {("price", 0): "supported", ("price", 1): "unsupported", ("price", 2): "supported",
                ("rating", 0): "unsupported", ("rating", 1): "unsupported"}

    def reply(body):
        user = body["messages"][1]["content"]
        which = "price" if "costs $199" in user else "rating"
        return f"Reason: sample {body['seed']}.\nVerdict: {verdicts[(which, body['seed'])]}"

    with FakeOpenAIServer(reply) as srv:
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url, cache_dir=tmp_path / "cache"))
        c = RubricContext(ANSWER, [], PAGES, client, load_prompts("rubric"))
        res = evaluate_rubric(r, c)
        seeds = sorted(b["seed"] for b in srv.requests)
        again = evaluate_rubric(r, RubricContext(ANSWER, [], PAGES, client, load_prompts("rubric")))
        assert len(srv.requests) == 5  # the second judgment read all five from the cache
    assert c.votes == 3 and seeds == [0, 0, 1, 1, 2]
    assert [n.status for n in res.root.children] == ["passed", "failed"]
    assert "(2 of 3 votes)" in res.root.children[0].detail and "(2 of 2 votes)" in res.root.children[1].detail
    assert res.verification_calls == 5 and res.llm_calls == 2
    assert [n.status for n in again.root.children] == ["passed", "failed"]
    assert len({x.cache_key for x in c.results["price"]}) == 3
    with pytest.raises(JudgeError, match="votes must be an odd number"):
        RubricContext(ANSWER, [], PAGES, client, load_prompts("rubric"), votes=2)
    with pytest.raises(JudgeError, match="votes must be an odd number"):
        make_judge("rubric", votes=4)


def test_claim_without_a_cited_url_fails_unless_it_needs_no_source():
    """Mind2Web 2: a sourced claim with no URL gets no credit (no call); a claim without sources is checked
    against the answer alone."""
    answer = "The Acme X1 costs $199 (I remember it)."
    r = load_rubric({"id": "root", "children": [
        claim("price"),
        {"id": "named", "check": {"type": "llm_claim", "claim": "the answer names the Acme X1", "source": "none"}}]})
    seen = []

    def reply(body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if "prepare a web agent's final answer" in system:  # the extractor: statements, no URL cited
            return json.dumps({"claims": [{"id": "price", "statement": "The Acme X1 costs $199", "urls": []},
                                          {"id": "named", "statement": "The Acme X1", "urls": []}]})
        seen.append(user)
        assert "needs no web page" in system and "Pages" not in user and "I remember it" in user
        return "Reason: named.\nVerdict: supported"

    with FakeOpenAIServer(reply) as srv:
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url))
        res = evaluate_rubric(r, RubricContext(answer, [], PAGES, client, load_prompts("rubric", "v3"), votes=1))
        assert len(srv.requests) == 2  # the extractor and the check of 'named'; none for 'price'

    price, named = res.root.children
    assert price.status == "failed" and "no URL is cited for this claim: missing attribution" in price.detail
    assert named.status == "passed" and "source none" in named.detail and len(seen) == 1
    with pytest.raises(JudgeError, match="no 'simple' stage"):  # v1 has no extractor and no 'simple' prompt
        evaluate_rubric(r, RubricContext(answer, [], PAGES, client, load_prompts("rubric", "v1"), votes=1))
    with pytest.raises(JudgeError, match="'source: none' is for an llm_claim without 'url'"):
        load_rubric({"id": "a", "check": {"type": "page_contains", "text": "x", "source": "none"}})


def test_episode_pages_read_the_rendered_text_and_say_when_they_fall_back_to_the_archive():
    from ego2web_replay.judge.pages import EpisodePages

    archive = DictPages({"https://shop.test/x1": "<p>Price: <span>…</span></p>", "https://shop.test/y": "<p>Y</p>",
                         "https://shop.test/z": "<p>Z</p>"})
    pages = EpisodePages([(1, "https://shop.test/x1/", "Price: loading"), (2, "https://shop.test/x1", "Price: $199")],
                         archive, opened=["https://shop.test/x1", "https://shop.test/z"])
    last = pages.read("https://shop.test/x1#top")
    assert last.text == "Price: $199" and last.origin == "rendered" and last.note == "rendered after step 2"
    assert [p.text for p in pages.read_all("https://shop.test/x1")] == ["Price: loading", "Price: $199"]
    assert pages.read("https://shop.test/y").note == "archived: the agent never opened it"
    assert "kept no rendered text" in pages.read("https://shop.test/z").note
    assert pages.read("https://shop.test/none") is None
    r = load_rubric({"id": "p", "check": {"type": "page_contains", "url": "https://shop.test/x1", "text": "$199"}})
    c = RubricContext(ANSWER, [], pages)
    assert evaluate_rubric(r, c).root.detail == "found on https://shop.test/x1 (rendered after step 2)"
    assert [p["note"] for p in c.page_reads] == ["rendered after step 1", "rendered after step 2"]
