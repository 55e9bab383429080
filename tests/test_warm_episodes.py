"""Warm episodes: one Chromium and one replay front per worker, and nothing of one episode reaches the next.

A site on 127.0.0.1 whose page reports, then leaves behind, a cookie, a localStorage entry, a
registered service worker and an HTTP-cached script is recorded and stopped; frozen episodes of
the scripted agent then replay it through one warm worker (the same Chromium, the same front):
each sees a clean browser on its first visit and its own state on its second, and each episode's
replay stats are exactly its own. A Chromium killed mid-episode is that episode's
``browser_error``; the next episode launches a new one and passes.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ego2web_replay.actions import Action
from ego2web_replay.agents.scripted import ScriptedAgent
from ego2web_replay.httpd import LoopbackHTTPServer
from ego2web_replay.models import load_trajectory
from ego2web_replay.runner.episode import EpisodeRequest, run_episode
from ego2web_replay.runner.run import RunSettings, run_suite
from ego2web_replay.runner.warm import warm_worker
from ego2web_replay.tasks import Task, load_tasks

pytestmark = pytest.mark.slow

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>State</title>
<link rel="icon" href="data:,"><script src="/cached.js"></script></head><body><p id="state">reading</p><script>
(async () => {
  const regs = await navigator.serviceWorker.getRegistrations();
  const seen = `cookie=${document.cookie || "none"} storage=${localStorage.getItem("k") || "none"} ` +
               `sw=${regs.length} cached=${window.cachedRuns || 0}`;
  document.cookie = "k=1; max-age=3600; path=/";
  localStorage.setItem("k", "1");
  await navigator.serviceWorker.register("/sw.js");
  await navigator.serviceWorker.ready;
  document.getElementById("state").textContent = seen + " ready";
})();
</script></body></html>"""


class StateSite(LoopbackHTTPServer):
    """``/`` (the page above), ``/cached.js`` (cacheable for an hour), ``/sw.js`` (a service worker)."""

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                files = {"/": ("text/html; charset=utf-8", PAGE, "no-store"),
                         "/cached.js": ("application/javascript", "window.cachedRuns = 1;", "max-age=3600"),
                         "/sw.js": ("application/javascript", "self.addEventListener('install', () => "
                                    "self.skipWaiting());", "no-cache")}
                path = self.path.split("?")[0]
                if path not in files:
                    self.send_error(404)
                    return
                ctype, text, cache = files[path]
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Cache-Control", cache)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def _actions(url: str) -> list[dict[str, object]]:
    wait = {"kind": "wait", "text": "ready"}
    return [{"kind": "goto", "url": url}, wait, {"kind": "goto", "url": url}, wait,
            {"kind": "answer", "answer": "done"}]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, ca):
    """A suite of one task on the state site, recorded, with the site stopped afterwards."""
    from ego2web_replay.recorder.session import RecordOptions, record_task

    root = tmp_path_factory.mktemp("warm")
    with StateSite() as site:
        task = {"id": "state-page", "instruction": "Open the page.", "start_url": site.url + "/",
                "reference_actions": _actions(site.url + "/")}
        suite_file = root / "tasks.jsonl"
        suite_file.write_text(json.dumps(task) + "\n", "utf-8")
        suite = load_tasks(suite_file)
        result = record_task(suite.tasks[0], root / "snapshots", RecordOptions(guard="loopback", screenshots=False))
        assert result.ok, result.error
    return suite, root


def _request(suite, root: Path, run: str, agent: str = "scripted", repeat: int = 0,
             task: Task | None = None) -> EpisodeRequest:
    return EpisodeRequest(run_dir=root / "runs" / run, task=task or suite.tasks[0], suite_dir=suite.base_dir,
                          mode="frozen", agent_name=agent, snapshots_root=root / "snapshots", max_steps=8,
                          timeout_s=120, repeat=repeat)


def _page_text(folder: Path, step: int) -> str:
    return json.loads((folder / "pages" / f"step-{step:03d}.json").read_text("utf-8"))["text"]


def _log_urls(folder: Path) -> Counter[str]:
    stats = json.loads((folder / "replay_stats.json").read_text("utf-8"))
    return Counter(e["url"].split("/", 3)[-1] for e in stats["log"])


def test_no_state_crosses_episodes_of_one_warm_browser(recorded):
    suite, root = recorded
    with warm_worker() as worker:
        first = run_episode(_request(suite, root, "iso", repeat=0), worker)
        second = run_episode(_request(suite, root, "iso", repeat=1), worker)
        assert (worker.launches, worker.opens) == (1, 1)  # one Chromium, one opened snapshot, for both
    for summary in (first, second):
        assert summary.ok, summary.error
        assert summary.misses == 0
        # first visit: a clean browser; second visit: this episode's own cookie, storage, worker, cache
        assert "cookie=none storage=none sw=0 cached=1 ready" in _page_text(summary.path, 1)
        assert "cookie=k=1 storage=1 sw=1 cached=1 ready" in _page_text(summary.path, 3)
        urls = _log_urls(summary.path)
        assert urls[""] == 2  # the page, once per visit
        assert urls["cached.js"] == 1  # fetched on the first visit, from the HTTP cache on the second
        # registered in this episode, not inherited (the second visit may check it for an update)
        assert urls.pop("sw.js") in (1, 2)
        stats = json.loads((summary.path / "replay_stats.json").read_text("utf-8"))
        assert stats["total"] == len(stats["log"]) == sum(_log_urls(summary.path).values())
    assert urls == {"": 2, "cached.js": 1}  # the second's counts are its own, not the sum of both


def _kill_our_chromium() -> int:
    """SIGKILL every Chromium process descended from this one (the warm browser); how many."""
    me, parents, names = os.getpid(), {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
                names[int(entry.name)] = (entry / "comm").read_text().strip()
            except (OSError, IndexError, ValueError):
                continue
    killed = 0
    for pid, name in names.items():
        p, chain = pid, 0
        while p in parents and p != me and chain < 50:
            p, chain = parents[p], chain + 1
        if p == me and "chrom" in name:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


class KillerAgent(ScriptedAgent):
    """The scripted agent, killing its browser after the first page loaded."""

    def act(self, obs):  # noqa: ANN001, ANN201
        if obs.step == 1:
            assert _kill_our_chromium() > 0
            return Action(kind="wait", seconds=0.5)
        return super().act(obs)


def killer_agent() -> KillerAgent:
    return KillerAgent()


def test_a_killed_warm_browser_fails_one_episode_and_the_next_relaunches(recorded):
    suite, root = recorded
    with warm_worker() as worker:
        before = run_episode(_request(suite, root, "crash", repeat=0), worker)
        killed = run_episode(_request(suite, root, "crash", agent="test_warm_episodes:killer_agent", repeat=1),
                             worker)
        after = run_episode(_request(suite, root, "crash", repeat=2), worker)
        assert worker.launches == 2  # the next episode launched a new Chromium
    assert before.ok and after.ok, (before.error, after.error)
    assert killed.end_reason == "browser_error", (killed.end_reason, killed.error)
    assert "cookie=none storage=none sw=0" in _page_text(after.path, 1)
    assert load_trajectory(after.path / "trajectory.json").replay.miss == 0


def test_a_warm_run_with_two_workers_and_resume(recorded):
    """run_suite with 2 workers: every repeat passes with its own stats; --resume after a lost episode
    redoes only it; --cold runs the same episodes cold."""
    suite, root = recorded
    settings = RunSettings(mode="frozen", workers=2, repeats=4, max_steps=8, snapshots_root=str(root / "snapshots"))
    run_dir, summaries = run_suite(suite, agent_name="scripted", out=root / "runs", settings=settings, run_id="pool")
    assert len(summaries) == 4 and all(s.ok for s in summaries), [s.error for s in summaries]
    for s in summaries:
        assert _log_urls(s.path)["cached.js"] == 1
        assert "cookie=none storage=none sw=0" in _page_text(s.path, 1)
    lost = summaries[0].path
    (lost / "trajectory.json").unlink()
    cold = settings.model_copy(update={"workers": 1, "warm": False})
    _d, redone = run_suite(suite, agent_name="scripted", out=root / "runs", settings=cold, resume=run_dir)
    assert [(s.repeat, s.ok) for s in redone] == [(summaries[0].repeat, True)]
    redone_urls, other = _log_urls(redone[0].path), _log_urls(summaries[1].path)
    assert redone_urls.pop("sw.js") and other.pop("sw.js")  # (Chromium may check it for an update)
    assert redone_urls == other


def test_a_ray_worker_process_keeps_its_browser_and_caches_across_episodes(recorded, ca, monkeypatch):
    """What a Ray task runs on its worker (``remote_episode``), twice in one process: both in the process's
    data folder, through its one warm Chromium and the snapshot it opened once, each with its own stats;
    the CA and the scratch run folder leave with each episode."""
    from ego2web_replay.runner import warm
    from ego2web_replay.runner.ray_executor import _CA_FILES, _unpack, remote_episode, worker_home

    suite, root = recorded
    monkeypatch.setattr(warm, "_current", None)
    files = {n: (ca.confdir / n).read_bytes() for n in _CA_FILES if (ca.confdir / n).exists()}
    try:
        jobs = [_request(suite, root, "ray", repeat=r) for r in (0, 1)]
        results = [remote_episode(job, files, None) for job in jobs]
        worker = warm.current_worker()
        assert worker is not None and worker.launches == 1
        assert worker.opens == 1  # the second episode replayed the snapshot the first opened
    finally:
        if warm.current_worker() is not None:
            warm.current_worker().close()
    assert not Path(results[0][2]).exists()  # each episode's scratch run folder went with it
    assert not (worker_home() / "ca").exists()  # and its CA's key
    for job, (got, packed, remote) in zip(jobs, results, strict=True):
        summary = _unpack(job, got, packed, remote)  # as the driver writes it into the run folder
        assert summary.ok and summary.misses == 0, summary.error
        assert "cookie=none storage=none sw=0" in _page_text(summary.path, 1)
        assert _log_urls(summary.path)["cached.js"] == 1
