"""Runs on a real Ray cluster on this machine (a head and a worker node on 127.0.0.1).

One demo site, two recorded tasks and one cluster serve the module. A Ray run
must equal a local run (episodes, rule-judge verdicts, database rows); a
worker node killed mid-episode is retried elsewhere; a node without Chromium
gives an ``infra_error`` naming the node, which a local ``--resume`` redoes; a worker process keeps its
object cache and the snapshot it opened across episodes (the episodes' store counts, and the S3 server's).
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

from ego2web_replay.cli import main  # noqa: E402
from ego2web_replay.judge.run import judge_run  # noqa: E402
from ego2web_replay.models import load_trajectory  # noqa: E402
from ego2web_replay.runner.ray_executor import RayExecutor, RaySettings, _private_home  # noqa: E402
from ego2web_replay.runner.run import RunSettings, load_run, run_suite  # noqa: E402
from ego2web_replay.tasks import load_tasks  # noqa: E402
from ego2web_replay.tracking.db import read_connection  # noqa: E402
from ego2web_replay.tracking.sink import TrackingSink  # noqa: E402

TASKS = ["shop-mug-price", "wiki-lighthouse-built"]

# A program agent: fetches the start page through the proxy and answers its <title>; on the node started
# with EGO2WEB_TEST_NODE=worker it first leaves a marker and hangs (so the test can kill that node).
AGENT = r'''
import json, os, re, sys, time, urllib.request
marker = sys.argv[1]
if os.environ.get("EGO2WEB_TEST_NODE") == "worker":
    open(marker, "w").write("started")
    time.sleep(300)
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
out = os.environ["EGO2WEB_OUT"]
os.makedirs(out, exist_ok=True)
page = urllib.request.urlopen(task["start_url"], timeout=20).read().decode()
title = re.search(r"<title>(.*?)</title>", page).group(1)
json.dump({"steps": [{"index": 0, "action": {"kind": "answer", "answer": title}}], "answer": title,
           "end_reason": "answered"}, open(os.path.join(out, "trajectory.json"), "w"))
'''


@pytest.fixture(scope="module")
def demo(tmp_path_factory, ca):
    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task

    root = tmp_path_factory.mktemp("ray")
    site = DemoSite().start()
    suite_path = write_demo_suite(root / "suite", site.url, TASKS)
    suite = load_tasks(suite_path)
    for task_id in TASKS:
        r = record_task(suite.get(task_id), root / "snapshots", RecordOptions(guard="loopback"), ca=ca)
        assert r.ok, r.error
    (root / "agent.py").write_text(AGENT, "utf-8")
    yield {"suite": suite, "suite_path": suite_path, "snapshots": root / "snapshots", "root": root}
    site.stop()


@pytest.fixture(scope="module")
def cluster():
    from ego2web_replay.testing.ray_cluster import RayCluster

    c = RayCluster(head_cpus=1).start()
    try:
        c.add_node(cpus=1, env={"EGO2WEB_TEST_NODE": "worker"})
        yield c
    finally:
        c.stop()


def _settings(demo, **kw) -> RunSettings:
    base = {"mode": "frozen", "snapshots_root": str(demo["snapshots"]), "guard": "loopback", "timeout_s": 120,
            "action_timeout_s": 10}
    return RunSettings(**{**base, **kw})


def _run(demo, out: Path, db: Path, agent: str = "scripted", executor=None) -> tuple[Path, list]:  # noqa: ANN001
    sink = TrackingSink(db)
    run_dir, results = run_suite(demo["suite"], agent_name=agent, out=out, settings=_settings(demo),
                                 on_start=lambda d, total, done: sink.run_started(d),
                                 on_episode=lambda s: sink.episode_finished(s.path.parents[2], s.path),
                                 executor=executor)
    assert sink.error is None
    return run_dir, results


def _episodes(run_dir: Path) -> dict:
    out = {}
    for f in sorted(run_dir.glob("episodes/*/*/trajectory.json")):
        t = load_trajectory(f)
        files = sorted(p.relative_to(f.parent).as_posix() for p in f.parent.rglob("*") if p.is_file())
        out[(t.task_id, t.mode)] = (t.end_reason, t.answer, [s.url for s in t.steps], t.snapshot_id,
                                    t.replay.miss if t.replay else None, files)
    return out


def _db_rows(db: Path) -> list[tuple]:
    with read_connection(db) as con:
        return con.execute("SELECT task_id, mode, end_reason, steps, answer FROM episodes "
                           "ORDER BY task_id, mode").fetchall()


def test_worker_keeps_the_ca_private(tmp_path, ca):
    files = {"mitmproxy-ca.pem": (ca.confdir / "mitmproxy-ca.pem").read_bytes()}
    home = _private_home(files)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "ca").stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "ca" / "mitmproxy-ca.pem").stat().st_mode) == 0o600
    assert (home / "ca" / "mitmproxy-ca.pem").read_bytes() == files["mitmproxy-ca.pem"]
    shutil.rmtree(home / "ca")


def test_episodes_of_one_worker_share_its_data_folder_but_not_the_key(ca):
    """Each episode's CA is written into the worker process's data folder and taken out when it ends;
    the object, index and remote-snapshot caches there stay for the next episode."""
    from ego2web_replay.runner.ray_executor import _clear_episode, worker_home

    files = {"mitmproxy-ca.pem": (ca.confdir / "mitmproxy-ca.pem").read_bytes()}
    first = _private_home(files)
    (first / "object-cache").mkdir(exist_ok=True)
    (first / "object-cache" / "block").write_bytes(b"downloaded once")
    (first / "episode").mkdir()
    _clear_episode(first)
    assert not (first / "ca").exists() and not (first / "episode").exists()  # no key between episodes
    second = _private_home(files)
    try:
        assert second == first == worker_home()
        assert (second / "object-cache" / "block").read_bytes() == b"downloaded once"
        assert stat.S_IMODE(worker_home().stat().st_mode) == 0o700
        assert (second / "ca" / "mitmproxy-ca.pem").read_bytes() == files["mitmproxy-ca.pem"]
    finally:
        _clear_episode(second)


def test_a_node_that_does_not_start_is_stopped_and_started_again_then_named(tmp_path):
    """Cluster start-up under load: each failed attempt is stopped whole (no process of its session
    left) and tried again, a bounded number of times; the final error names every attempt and its log."""
    from ego2web_replay.testing import ray_cluster
    from ego2web_replay.testing.ray_cluster import RayCluster

    c = RayCluster(attempts=2)
    c.address = f"127.0.0.1:{ray_cluster._free_port()}"  # no head there: this worker cannot register
    sessions: list[int] = []
    spawn = c._spawn

    def spawned(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        log = spawn(*args, **kw)
        sessions.append(c.nodes[-1].pid)
        return log

    c._spawn = spawned  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError) as e:
            c.add_node(timeout=5)
        message = str(e.value)
        assert message.startswith(f"Ray node 0 of {c.address} did not start in 2 attempts: attempt 1: ")
        assert "; attempt 2: not running after 5s" in message
        assert str(c.temp_dir / "node-0-1.log") in message and str(c.temp_dir / "node-0-2.log") in message
        assert len(sessions) == 2 and len(c.nodes) == 1 and c.nodes[0].pid == sessions[1]
        deadline = time.monotonic() + 60  # SIGKILLed processes die when next scheduled
        while any(ray_cluster._session(sid) for sid in sessions) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(ray_cluster._session(sid) for sid in sessions), "a failed attempt left processes"
    finally:
        c.stop()


def test_ray_run_equals_local_run(demo, cluster, tmp_path):
    local, _ = _run(demo, tmp_path / "local", tmp_path / "local.duckdb")
    infos: list[str] = []
    remote, results = _run(demo, tmp_path / "ray", tmp_path / "ray.duckdb",
                           executor=RayExecutor(RaySettings(address=cluster.address), on_info=infos.append))
    assert "2 node(s)" in infos[0]
    assert sorted((r.task_id, r.end_reason) for r in results) == [(t, "answered") for t in sorted(TASKS)]
    assert all(r.path.parents[2] == remote for r in results)
    assert _episodes(remote) == _episodes(local) and len(_episodes(local)) == 2
    assert load_run(remote).episodes == load_run(local).episodes == {"answered": 2}
    assert _db_rows(tmp_path / "ray.duckdb") == _db_rows(tmp_path / "local.duckdb")
    verdicts = [[(v.task_id, v.mode, v.success, v.score) for v in judge_run(d, "rule", tasks=demo["suite_path"],
                                                                           progress=False)]
                for d in (local, remote)]
    assert verdicts[0] == verdicts[1] and all(v[2] for v in verdicts[0])
    assert not list(remote.glob("episodes/*/*.partial"))


def test_ray_workers_read_snapshots_from_object_storage(demo, cluster, s3, tmp_path):
    """No shared folder: the workers open the snapshots on s3:// (moto on 127.0.0.1) with the driver's
    AWS variables, which the nodes were not started with."""
    from ego2web_replay.snapshots.location import upload_snapshot

    for folder in demo["snapshots"].glob("*/*"):
        upload_snapshot(folder, f"{s3}/snaps/{folder.parent.name}/{folder.name}")
    settings = _settings(demo, snapshots_root=f"{s3}/snaps")
    run_dir, results = run_suite(demo["suite"], agent_name="scripted", out=tmp_path / "ray", settings=settings,
                                 executor=RayExecutor(RaySettings(address=cluster.address)))
    assert sorted((r.task_id, r.end_reason, r.misses) for r in results) == [(t, "answered", 0) for t in sorted(TASKS)]
    for t in map(load_trajectory, run_dir.glob("episodes/*/*")):
        assert t.snapshot_path and t.snapshot_path.startswith(f"{s3}/snaps/{t.task_id}/")


def test_a_ray_worker_keeps_its_object_cache_and_opened_snapshot_across_episodes(demo, cluster, s3, s3_server,
                                                                                  tmp_path):
    """One task, 4 repeats, on 2 one-CPU nodes: an episode fetches its snapshot (GETs) only when its worker
    process has not had it yet; every later episode on a worker asks the store nothing: the run pinned
    the task's snapshot when it started (the driver's lookups), and the worker does not open it again.
    The episodes' own counts agree with the GETs the S3 server saw."""
    from ego2web_replay.snapshots.location import upload_snapshot

    task = demo["suite"].get(TASKS[0])
    for folder in (demo["snapshots"] / task.id).glob("*"):
        upload_snapshot(folder, f"{s3}/snaps/{task.id}/{folder.name}")
    settings = _settings(demo, snapshots_root=f"{s3}/snaps", repeats=4)
    run_dir, results = run_suite(demo["suite"], agent_name="scripted", out=tmp_path / "ray", settings=settings,
                                 task_ids=[task.id], executor=RayExecutor(RaySettings(address=cluster.address)),
                                 on_start=lambda *_: s3_server.record_requests())  # the episodes', not the pinning's
    assert sorted((r.repeat, r.end_reason, r.misses) for r in results) == [(k, "answered", 0) for k in range(4)]
    stores = [load_trajectory(f).replay.store for f in run_dir.glob("episodes/*/*/trajectory.json")]
    assert len(stores) == 4 and all(s is not None for s in stores)
    fetched = [s for s in stores if s.gets]
    later = [s for s in stores if not s.gets]
    assert 1 <= len(fetched) <= 2, stores  # the first episode on each of the (at most 2) worker processes
    assert all(s.bytes > 0 for s in fetched)
    assert len(later) >= 2 and all(s.bytes == 0 and s.lookups == 0 and s.listings == 0 for s in later), stores
    assert all(s.listings == 0 for s in fetched), stores  # no episode looks for the newest snapshot
    assert sum(s.gets for s in stores) == len(s3_server.object_gets())


def _verdicts(run_dir: Path, judge: str) -> dict:
    out = {}
    for f in sorted(run_dir.glob(f"episodes/*/*/verdicts/{judge}.json")):
        data = json.loads(f.read_text("utf-8"))
        data.pop("judged_at")
        out[f.relative_to(run_dir).as_posix()] = data
    return out


def _db_verdicts(db: Path) -> list[tuple]:
    with read_connection(db) as con:
        return con.execute("SELECT task_id, mode, judge, success, score, error FROM verdicts "
                           "ORDER BY task_id, mode, judge").fetchall()


def test_judge_on_ray_equals_a_local_judge(demo, cluster, tmp_path, capsys):
    """Rule and ego2web (a real OpenAI-compatible server on 127.0.0.1) verdicts computed as Ray tasks: the
    verdict files, the call cache and the database equal a local judge's; a re-judge calls nothing."""
    from ego2web_replay.testing.openai_server import FakeOpenAIServer

    local, _ = _run(demo, tmp_path / "local", tmp_path / "run.duckdb")
    remote = tmp_path / "ray-copy"
    shutil.copytree(local, remote)

    def answer(body):  # noqa: ANN001, ANN202 - the server's reply function
        system = body["messages"][0]["content"]
        if "key points" in system and "Key Points:" in system:
            return "Key Points:\n1. the answer on the page"
        if "Score:" in system:
            return "Summary: the page.\nScore: 4"
        return "Thoughts: fine.\nStatus: success"

    with FakeOpenAIServer(answer) as srv:
        for run_dir, extra in ((local, []), (remote, ["--executor", "ray", "--ray-address", cluster.address])):
            db = tmp_path / ("ray.duckdb" if extra else "local.duckdb")
            for judge in (["rule"], ["ego2web", "--model", "m", "--base-url", srv.base_url]):
                assert main(["judge", str(run_dir), "--judge", *judge, "--tasks", str(demo["suite_path"]),
                             "--db", str(db), "--no-progress", *extra]) == 0, capsys.readouterr().err
        calls = len(srv.requests)
        assert calls > 0 and calls % 2 == 0  # the same calls, once for each judge run
        judged = {judge: _verdicts(remote, judge) for judge in ("rule", "ego2web")}
        assert main(["judge", str(remote), "--judge", "ego2web", "--model", "m", "--base-url", srv.base_url,
                     "--tasks", str(demo["suite_path"]), "--no-db", "--no-progress", *extra]) == 0
        assert len(srv.requests) == calls  # the run's call cache reached the workers
    for judge in ("rule", "ego2web"):
        mine, theirs = _verdicts(local, judge), judged[judge]
        for name, verdict in mine.items():
            assert verdict == theirs[name], [k for k in verdict if verdict[k] != theirs[name].get(k)]
        assert len(mine) == 2
        assert all(v["error"] is None for v in mine.values())
    assert all(v["success"] for v in _verdicts(local, "rule").values())
    assert sorted(p.name for p in (remote / "judge-cache").iterdir()) == \
        sorted(p.name for p in (local / "judge-cache").iterdir())
    assert _db_verdicts(tmp_path / "ray.duckdb") == _db_verdicts(tmp_path / "local.duckdb")
    assert len(_db_verdicts(tmp_path / "local.duckdb")) == 4


def test_killed_worker_node_is_retried_and_every_episode_accounted_for(demo, cluster, tmp_path):
    marker = tmp_path / "on-worker"
    agent = f"command:{sys.executable} {demo['root'] / 'agent.py'} {marker}"
    box: dict = {}

    def go() -> None:
        box["result"] = _run(demo, tmp_path / "runs", tmp_path / "t.duckdb", agent=agent,
                             executor=RayExecutor(RaySettings(address=cluster.address, max_retries=1)))

    thread = threading.Thread(target=go)
    thread.start()
    deadline = time.monotonic() + 180
    while not marker.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "no episode started on the worker node"
    cluster.kill_node(1)
    thread.join(timeout=300)
    assert not thread.is_alive()
    run_dir, results = box["result"]
    assert sorted((r.task_id, r.end_reason) for r in results) == [(t, "answered") for t in sorted(TASKS)]
    assert load_run(run_dir).episodes == {"answered": 2}
    assert [r[:3] for r in _db_rows(tmp_path / "t.duckdb")] == [(t, "frozen", "answered") for t in sorted(TASKS)]


def test_node_without_chromium_is_an_infra_error_that_resume_redoes(demo, cluster, tmp_path, capsys):
    if cluster.nodes[1].poll() is None:  # the hanging-agent node is gone after the test above; alone, stop it
        cluster.kill_node(1)
    cluster.add_node(cpus=1, env={"EGO2WEB_CHROMIUM": str(tmp_path / "no-chromium")})
    agent = f"command:{sys.executable} {demo['root'] / 'agent.py'} {tmp_path / 'unused'}"
    args = ["run", str(demo["suite_path"]), "--agent", agent, "--snapshots", str(demo["snapshots"]),
            "--out", str(tmp_path / "runs"), "--guard", "loopback", "--run-id", "r1", "--db",
            str(tmp_path / "t.duckdb"), "--no-progress"]
    assert main([*args, "--executor", "ray", "--ray-address", cluster.address]) == 0
    err = capsys.readouterr().err
    run_dir = tmp_path / "runs" / "r1"
    reasons = {t.task_id: (t.end_reason, t.error) for t in map(load_trajectory, run_dir.glob("episodes/*/*"))}
    lost = [(tid, e) for tid, (r, e) in reasons.items() if r == "infra_error"]
    assert len(lost) == 1 and [r for r, _ in reasons.values()].count("answered") == 1, reasons
    assert lost[0][1].startswith("node ") and "Chromium not found" in lost[0][1], lost
    assert "infra_error" in err and "ray: " in err, err
    # resumed with the local executor: only the lost episode runs again
    assert main([*args, "--resume"]) == 0
    assert "1 of 2 episodes already done" in capsys.readouterr().err
    assert load_run(run_dir).episodes == {"answered": 2}
    assert [r[:3] for r in _db_rows(tmp_path / "t.duckdb")] == [(t, "frozen", "answered") for t in sorted(TASKS)]
