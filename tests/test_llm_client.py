"""The OpenAI-compatible client, its cache and the fake server, over real loopback HTTP."""

from __future__ import annotations

import socket

import openai
import pytest

from ego2web_replay.errors import JudgeError
from ego2web_replay.judge.cache import CallCache
from ego2web_replay.judge.client import (
    EndpointError,
    Image,
    LLMClient,
    LLMConfig,
    Message,
    ReplyFormatError,
    resolve_config,
)
from ego2web_replay.testing.openai_server import FakeOpenAIServer, Reply


def _cfg(srv: FakeOpenAIServer, tmp_path=None, **kw) -> LLMConfig:
    return LLMConfig(model="m1", base_url=srv.base_url, backoff_s=0.01, timeout_s=5,
                     cache_dir=tmp_path / "cache" if tmp_path else None, **kw)


def _status(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("Status:"):
            return line.split(":", 1)[1].strip()
    raise ReplyFormatError("no 'Status:' line")


def test_fake_server_with_openai_package():
    with FakeOpenAIServer(["hello", Reply(tool_calls=[{"id": "c1", "type": "function",
                                                       "function": {"name": "f", "arguments": "{}"}}])],
                          models=["a", "b"]) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        r = c.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi there"}])
        assert r.choices[0].message.content == "hello"
        assert r.usage.prompt_tokens == 2 and r.usage.completion_tokens == 1
        r2 = c.chat.completions.create(model="a", messages=[{"role": "user", "content": "x"}])
        assert r2.choices[0].message.tool_calls[0].function.name == "f"
        assert [m.id for m in c.models.list()] == ["a", "b"]
        assert srv.requests[0]["messages"][0]["content"] == "hi there"
        with pytest.raises(openai.InternalServerError, match="no scripted reply left"):
            c.chat.completions.create(model="a", messages=[{"role": "user", "content": "x"}])


def test_fake_server_callable_and_status():
    seen = []

    def answer(body):
        seen.append(body["model"])
        return Reply(status=429) if len(seen) == 1 else f"echo {body['messages'][-1]['content']}"

    with FakeOpenAIServer(answer) as srv:
        c = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(model="q", messages=[{"role": "user", "content": "a"}])
        r = c.chat.completions.create(model="q", messages=[{"role": "user", "content": "b"}])
        assert r.choices[0].message.content == "echo b"
    assert seen == ["q", "q"]


def test_retries_on_429_and_500_then_parses(tmp_path):
    with FakeOpenAIServer([Reply(status=429), Reply(status=500), "Thoughts: ok\nStatus: success"]) as srv:
        client = LLMClient(_cfg(srv, tmp_path))
        res = client.chat([Message("user", ["judge this"])], _status, stage="final")
        assert res.parsed == "success" and not res.cached
        assert len(srv.requests) == 3 and client.calls == 3
        assert res.prompt_tokens == 2 and res.completion_tokens == 4


def test_malformed_reply_is_asked_again_with_the_problem(tmp_path):
    with FakeOpenAIServer(["I think it worked", "Status: failure"]) as srv:
        client = LLMClient(_cfg(srv, tmp_path))
        res = client.chat([Message("user", ["q"])], _status, stage="final")
        assert res.parsed == "failure" and res.attempts == 2
        retry = srv.requests[1]["messages"]
        assert retry[1] == {"role": "assistant", "content": "I think it worked"}
        assert "no 'Status:' line" in retry[2]["content"]


def test_malformed_forever_is_one_line_judge_error(tmp_path):
    with FakeOpenAIServer(["nope", "still nope", "never"]) as srv:
        client = LLMClient(_cfg(srv, tmp_path))
        with pytest.raises(JudgeError) as e:
            client.chat([Message("user", ["q"])], _status, stage="final")
        assert "could not be read after 3 tries" in str(e.value) and "\n" not in str(e.value)
        assert len(CallCache(tmp_path / "cache")) == 0


def test_cache_hit_makes_no_call_and_model_or_prompt_or_image_change_misses(tmp_path, caplog):
    img = Image(b"\x89PNG-fake-bytes", label="screenshots/step-001.png")
    msgs = [Message("system", ["rules"]), Message("user", ["look", img])]
    with FakeOpenAIServer(["Status: success"] * 4) as srv:
        client = LLMClient(_cfg(srv, tmp_path))
        with caplog.at_level("INFO", logger="ego2web_replay.judge.client"):
            first = client.chat(msgs, _status, stage="final")
            again = client.chat(msgs, _status, stage="final")
        assert len(srv.requests) == 1 and again.cached and again.cache_key == first.cache_key
        logged = [r.getMessage() for r in caplog.records]  # -v shows each judge call, made or cached
        assert logged[0].startswith("judge final: called ") and logged[1].startswith("judge final: cached reply ")
        assert first.cache_key[:12] in logged[0] and first.cache_key[:12] in logged[1]
        assert again.reply == first.reply and again.prompt_tokens == first.prompt_tokens
        sent = srv.requests[0]["messages"][1]["content"]
        assert sent[1]["image_url"]["url"].startswith("data:image/png;base64,")
        assert first.record()["messages"][1]["content"][1]["label"] == "screenshots/step-001.png"
        # a changed prompt, image or model misses
        client.chat([Message("system", ["rules v2"]), Message("user", ["look", img])], _status, stage="final")
        client.chat([msgs[0], Message("user", ["look", Image(b"other", label="x")])], _status, stage="final")
        other = LLMClient(_cfg(srv, tmp_path).model_copy(update={"model": "m2"}))
        other.chat(msgs, _status, stage="final")
        assert len(srv.requests) == 4
        assert srv.requests[3]["model"] == "m2"
        cfg = _cfg(srv, tmp_path)
    # the image's label (path) does not change the key, its bytes do; no server needed now
    relabeled = [msgs[0], Message("user", ["look", Image(img.data, label="elsewhere.png")])]
    assert LLMClient(cfg).chat(relabeled, _status, stage="final").cached


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_is_endpoint_error():
    cfg = LLMConfig(model="m", base_url=f"http://127.0.0.1:{_free_port()}/v1", max_retries=1, backoff_s=0.01)
    with pytest.raises(EndpointError) as e:
        LLMClient(cfg).chat([Message("user", ["q"])], _status, stage="final")
    msg = str(e.value)
    assert "unreachable" in msg and "127.0.0.1" in msg and "\n" not in msg


def test_persistent_429_and_timeouts_give_up(tmp_path):
    with FakeOpenAIServer([Reply(status=429)] * 3) as srv:
        with pytest.raises(EndpointError, match="HTTP 429"):
            LLMClient(_cfg(srv, max_retries=2)).chat([Message("user", ["q"])], _status, stage="s")
        assert len(srv.requests) == 3
    # the first answer comes long after the timeout; the retry's answer comes at once (the margin
    # leaves room for a loaded machine: the retry itself must not time out)
    with FakeOpenAIServer([Reply(delay=4.0, content="Status: success"), "Status: success"]) as srv:
        cfg = _cfg(srv).model_copy(update={"timeout_s": 1.0})
        assert LLMClient(cfg).chat([Message("user", ["q"])], _status, stage="s").parsed == "success"


def test_auth_error_is_endpoint_error():
    with FakeOpenAIServer([Reply(status=401, error="bad key")]) as srv:
        with pytest.raises(EndpointError, match="HTTP 401: bad key"):
            LLMClient(_cfg(srv)).chat([Message("user", ["q"])], _status, stage="s")


def test_resolve_config_from_environment(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EGO2WEB_JUDGE_MODEL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(JudgeError, match="no judge endpoint configured.*--judge rule"):
        resolve_config(model="gpt-4o")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(JudgeError, match="no judge model"):
        resolve_config()
    monkeypatch.setenv("EGO2WEB_JUDGE_MODEL", "qwen")
    cfg = resolve_config(backoff_s=0.5)
    assert (cfg.model, cfg.base_url, cfg.backoff_s) == ("qwen", "http://127.0.0.1:9/v1", 0.5)
    assert resolve_config(model="x", base_url="http://127.0.0.1:1/v1").model == "x"


def test_cache_key_holds_the_endpoint_and_identical_calls_in_flight_are_made_once(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    msgs = [Message("system", ["rules"]), Message("user", ["same question"])]
    with FakeOpenAIServer([Reply("Status: success", delay=0.5)]) as srv:
        client = LLMClient(_cfg(srv, tmp_path))
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: client.chat(msgs, _status, stage="final"), range(4)))
        assert len(srv.requests) == 1 and client.calls == 1
        assert sum(not r.cached for r in results) == 1 and {r.parsed for r in results} == {"success"}
    # the same model name behind another endpoint is another call, not a cache hit
    with FakeOpenAIServer(["Status: failure"]) as other:
        elsewhere = LLMClient(_cfg(other, tmp_path))
        got = elsewhere.chat(msgs, _status, stage="final")
        assert not got.cached and got.parsed == "failure" and len(other.requests) == 1
        assert got.cache_key != results[0].cache_key
