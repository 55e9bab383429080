"""No orphans: SIGKILL of a multi-worker run's parent leaves no process behind; one writer per run folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ego2web_replay.errors import Ego2WebError
from ego2web_replay.runner.locking import RunFolderLock
from ego2web_replay.testing.procs import descendants, process_table


def _alive(pids) -> list[int]:
    procs = process_table()
    return [p for p in pids if p in procs and procs[p][1] != "Z"]


@pytest.mark.slow
def test_sigkill_of_the_parent_of_a_two_worker_run_leaves_no_process(site, tmp_path, data_home):
    actions = [{"kind": "goto", "url": site.http_url + "/"}, {"kind": "wait", "seconds": 60},
               {"kind": "answer", "answer": "x"}]
    suite = tmp_path / "tasks.json"
    suite.write_text(json.dumps([{"id": f"slow-{n}", "instruction": "wait", "start_url": site.http_url + "/",
                                  "reference_actions": actions} for n in (1, 2)]))
    exe = Path(sys.executable).with_name("ego2web-replay")
    args = [str(exe), "run", str(suite), "--agent", "scripted", "--mode", "live", "--workers", "2",
            "--guard", "loopback", "--out", str(tmp_path / "runs"), "--no-db"]
    proc = subprocess.Popen(args, env=dict(os.environ, EGO2WEB_REPLAY_HOME=str(data_home)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 90
        while sum(name.startswith("chrom") for name in tree.values()) < 2:  # both workers' browsers are up
            assert proc.poll() is None, "the run ended before its browsers started"
            assert time.monotonic() < deadline, f"no two browsers after 90 s: {tree}"
            time.sleep(0.2)
            tree = descendants(proc.pid)
        time.sleep(1)
        tree = descendants(proc.pid)
        workers = [p for p, name in tree.items() if process_table().get(p, (0,))[0] == proc.pid]
        assert len(workers) >= 2, tree
        os.kill(proc.pid, signal.SIGKILL)  # the parent only, as an OOM killer or a lost terminal would
        proc.wait()
        deadline = time.monotonic() + 10
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {p: tree[p] for p in _alive(tree)}
        assert not left, f"left behind: {left}"
    finally:
        for pid in _alive(tree) + ([proc.pid] if proc.poll() is None else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_run_folder_has_one_writer(tmp_path):
    with RunFolderLock(tmp_path):
        with pytest.raises(Ego2WebError, match=rf"in use by another run or resume \(pid {os.getpid()}\)"):
            RunFolderLock(tmp_path).acquire()
    with RunFolderLock(tmp_path):  # released: free again
        pass


def test_resume_of_a_folder_in_use_is_refused(tmp_path):
    from ego2web_replay.models import (
        AgentSpec,
        RunManifest,
        RunSettings,
        Task,
        TaskSuite,
        save_model,
    )
    from ego2web_replay.runner.run import run_suite

    task = Task(id="t", instruction="x", start_url="http://127.0.0.1:9/")
    suite = TaskSuite(tasks=[task])
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    save_model(run_dir / "run.json", RunManifest(run_id="r1", started_at="2026-01-01T00:00:00Z",
                                                 agent=AgentSpec(name="scripted"), agent_name="scripted",
                                                 modes=["frozen"], settings=RunSettings()))
    with RunFolderLock(run_dir):
        with pytest.raises(Ego2WebError, match="in use"):
            run_suite(suite, agent_name="scripted", out=tmp_path, settings=RunSettings(), resume=run_dir)
        with pytest.raises(Ego2WebError, match="in use|exists already"):
            run_suite(suite, agent_name="scripted", out=tmp_path, settings=RunSettings(), run_id="r1")
