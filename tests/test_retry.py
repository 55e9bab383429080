"""The one retry helper: transient errors are tried again with a doubling, capped wait; others are not."""

from __future__ import annotations

import socket

import openai
import pytest

from ego2web_replay.retry import RetriesExhausted, is_transient_http, retry_call
from ego2web_replay.testing.openai_server import FakeOpenAIServer, Reply


def _error_of(client: openai.OpenAI) -> Exception:
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    except Exception as e:  # noqa: BLE001 - the error is what the test looks at
        return e
    raise AssertionError("the call succeeded")


def test_transient_errors_are_the_ones_worth_another_try() -> None:
    codes = [408, 429, 500, 503, 400, 401, 404]
    with FakeOpenAIServer([Reply(status=c) for c in codes]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        transient = [is_transient_http(_error_of(client)) for _ in codes]
    assert transient == [True, True, True, True, False, False, False]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    assert is_transient_http(_error_of(refused))
    assert not is_transient_http(ValueError("not HTTP"))


class Flaky(Exception):
    pass


def _is_flaky(e: Exception) -> bool:
    return isinstance(e, Flaky)


def test_waits_double_up_to_the_cap_and_the_last_error_is_kept() -> None:
    waits: list[float] = []
    errors = iter([Flaky(1), Flaky(2), Flaky(3), Flaky(4)])

    def call() -> str:
        raise next(errors)

    with pytest.raises(RetriesExhausted) as e:
        retry_call(call, retries=3, backoff_s=1.0, backoff_max_s=3.0, transient=_is_flaky, sleep=waits.append)
    assert waits == [1.0, 2.0, 3.0]
    assert e.value.attempts == 4 and e.value.last.args == (4,)


def test_success_after_a_failure_and_no_retry_of_other_errors() -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise Flaky()
        return "ok"

    assert retry_call(flaky, retries=2, backoff_s=0.5, transient=_is_flaky, sleep=lambda s: None) == "ok"
    assert len(tries) == 2
    tries.clear()

    def broken() -> str:
        tries.append(1)
        raise KeyError("not transient")

    with pytest.raises(KeyError):
        retry_call(broken, retries=5, backoff_s=0.5, transient=_is_flaky, sleep=lambda s: None)
    assert len(tries) == 1


def test_a_deadline_instead_of_a_count() -> None:
    now = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        now[0] += s

    def call() -> str:
        raise Flaky()

    with pytest.raises(RetriesExhausted) as e:
        retry_call(call, timeout_s=1.0, backoff_s=0.1, backoff_max_s=0.4, transient=_is_flaky, sleep=sleep,
                   clock=lambda: now[0])
    assert waits == [0.1, 0.2, 0.4, 0.4] and e.value.attempts == 5
    with pytest.raises(ValueError, match="needs retries, timeout_s or both"):
        retry_call(call, backoff_s=0.1, transient=_is_flaky)
