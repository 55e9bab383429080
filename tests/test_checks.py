"""Checks before costly work: a dead --base-url is named at once (exit 2, nothing written), and
`record --interactive` without a display says so."""

from __future__ import annotations

import json
import socket

import pytest

from ego2web_replay.cli import main
from ego2web_replay.commands._checks import PreflightError, check_endpoint
from ego2web_replay.testing.episodes import make_episode, make_run_manifest
from ego2web_replay.testing.openai_server import FakeOpenAIServer


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EGO2WEB_JUDGE_MODEL", "EGO2WEB_CAPTION_MODEL"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def dead_url():
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "T1", "instruction": "Price of the kettle?", "start_url": "http://s.test/",
                                "expected_answer": "$20"}) + "\n")
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def test_check_endpoint_live_missing_route_and_dead(dead_url):
    with FakeOpenAIServer([]) as srv:
        check_endpoint(srv.base_url, "test")
        assert srv.model_lists == 1 and srv.requests == []  # one GET /models, no model call
    with FakeOpenAIServer([], list_models=False) as srv:  # an HTTP error from /models is an answer, not death
        check_endpoint(srv.base_url, "test")
        assert srv.model_lists == 1
    with pytest.raises(PreflightError, match="connection refused") as e:
        check_endpoint(dead_url, "the test")
    assert dead_url in str(e.value) and e.value.exit_code == 2
    with pytest.raises(PreflightError, match="does not resolve"):
        check_endpoint("http://no-such-host.invalid/v1", "the test")
    with socket.socket() as silent:  # accepts the connection (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(PreflightError, match="did not answer GET /models") as e:
            check_endpoint(url, "the test", timeout_s=0.5)
        assert url in str(e.value)
    with pytest.raises(PreflightError, match="not an http"):
        check_endpoint("ftp://127.0.0.1/v1", "the test")


def test_run_with_a_dead_endpoint_writes_no_run_folder(suite, tmp_path, dead_url, capsys):
    out = tmp_path / "runs"
    for agent in ("openai", "browser-use"):
        code = main(["run", str(suite), "--agent", agent, "--model", "m", "--base-url", dead_url,
                     "--out", str(out), "--snapshots", str(tmp_path / "snaps"), "--no-db", "--no-progress"])
        err = _one_line(capsys)
        assert code == 2 and err.startswith("error: ") and dead_url in err and agent in err, err
        assert not out.exists()


def test_run_with_a_live_endpoint_gets_past_the_check(suite, tmp_path, capsys):
    out = tmp_path / "runs"
    with FakeOpenAIServer([], list_models=False) as srv:  # no /models route: still alive
        code = main(["run", str(suite), "--agent", "openai", "--model", "m", "--base-url", srv.base_url,
                     "--out", str(out), "--snapshots", str(tmp_path / "snaps"), "--no-db", "--no-progress"])
        assert srv.model_lists == 1
    err = capsys.readouterr().err
    assert "unreachable" not in err
    assert code == 1 and "every episode errored" in err  # no snapshot was recorded: the episode could not run
    assert len(list(out.iterdir())) == 1  # the run folder was made


@pytest.fixture
def judged_run(tmp_path, suite):
    run = tmp_path / "runs" / "r1"
    make_episode(run, "T1", "frozen", answer="It costs $20", urls=["http://s.test/k"])
    make_run_manifest(run, suite)
    return run


def test_judge_with_a_dead_endpoint_writes_no_verdict(judged_run, dead_url, capsys, monkeypatch):
    for args in (["--base-url", dead_url], []):
        if not args:
            monkeypatch.setenv("OPENAI_BASE_URL", dead_url)  # the environment's endpoint is checked too
        code = main(["judge", str(judged_run), "--judge", "webvoyager", "--model", "m", *args, "--no-progress"])
        err = _one_line(capsys)
        assert code == 2 and dead_url in err and "webvoyager judge" in err, err
        assert not (judged_run / "episodes/T1/frozen/verdicts").exists()
        assert not (judged_run / "judge-cache").exists()
    assert main(["judge", str(judged_run), "--judge", "rule", "--no-progress"]) == 0  # offline: nothing checked


def test_judge_from_the_call_cache_needs_no_endpoint(judged_run, capsys):
    with FakeOpenAIServer(["Thoughts: fine.\nStatus: success"]) as srv:
        url = srv.base_url
        assert main(["judge", str(judged_run), "--judge", "webvoyager", "--model", "m", "--base-url", url,
                     "--no-progress"]) == 0
        assert srv.model_lists == 1 and len(srv.requests) == 1
    verdict = judged_run / "episodes/T1/frozen/verdicts/webvoyager.json"
    first = json.loads(verdict.read_text())
    capsys.readouterr()
    # the same endpoint now dead: the cache answers, with a warning naming the endpoint
    code = main(["judge", str(judged_run), "--judge", "webvoyager", "--model", "m", "--base-url", url,
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0 and "warning:" in err and url in err and "call cache" in err and "(1 calls made there)" in err
    assert json.loads(verdict.read_text())["success"] is first["success"] is True
    # at another (dead) endpoint the cache holds nothing, its calls being keyed by where they were made: said
    # at once, with where they were made, never a warning and then every call failing
    other = url.replace("/v1", "/other/v1")
    code = main(["judge", str(judged_run), "--judge", "webvoyager", "--model", "m", "--base-url", other,
                 "--no-progress"])
    err = _one_line(capsys)
    assert code == 2 and "holds no call made at this endpoint" in err and f"{url} (1)" in err, err
    assert json.loads(verdict.read_text())["judge"]["base_url"] == url  # nothing written over


def test_captions_with_a_dead_endpoint(suite, dead_url, capsys):
    code = main(["captions", str(suite), "--model", "c", "--base-url", dead_url])
    err = _one_line(capsys)
    assert code == 2 and dead_url in err and "captions" in err


def test_record_interactive_without_a_display(suite, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    snaps = tmp_path / "snaps"
    code = main(["record", str(suite), "--interactive", "--snapshots", str(snaps), "--no-db", "--no-progress"])
    err = _one_line(capsys)
    assert code == 2 and "DISPLAY" in err and "--interactive" in err
    assert not snaps.exists()
