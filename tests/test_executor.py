"""The local process executor: a worker process killed mid-episode is an ``infra_error`` that resume redoes."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ego2web_replay.models import load_trajectory
from ego2web_replay.runner.executor import ProcessExecutor
from ego2web_replay.runner.run import RunSettings, load_run, run_suite
from ego2web_replay.tasks import load_tasks
from ego2web_replay.testing.procs import process_table

# A program agent that answers at once, except for the task "doomed" on its first try: it writes its pid
# into the marker file and hangs, so the test can kill the worker process running that episode.
AGENT = r'''
import json, os, sys, time
marker = sys.argv[1]
task = json.load(open(os.environ["EGO2WEB_TASK_FILE"]))
if task["id"] == "doomed" and not os.path.exists(marker):
    open(marker + ".tmp", "w").write(str(os.getpid()))
    os.rename(marker + ".tmp", marker)
    time.sleep(120)
out = os.environ["EGO2WEB_OUT"]
os.makedirs(out, exist_ok=True)
json.dump({"steps": [{"index": 0, "action": {"kind": "answer", "answer": "done"}}], "answer": "done",
           "end_reason": "answered"}, open(os.path.join(out, "trajectory.json"), "w"))
'''


def _worker_of(pid: int) -> int:
    """The pool worker (a direct child of this test process) that ``pid`` runs under."""
    table = process_table()
    while pid in table and table[pid][0] != os.getpid():
        pid = table[pid][0]
    assert pid in table, "the agent's worker process is not below this process"
    return pid


def test_a_killed_worker_is_an_infra_error_and_resume_redoes_it(tmp_path):
    (tmp_path / "agent.py").write_text(AGENT, "utf-8")
    (tmp_path / "tasks.jsonl").write_text("".join(
        json.dumps({"id": t, "instruction": "answer", "start_url": "http://127.0.0.1:9/"}) + "\n"
        for t in ("doomed", "fine")), "utf-8")
    suite = load_tasks(tmp_path / "tasks.jsonl")
    marker = tmp_path / "doomed.pid"
    agent = f"command:{sys.executable} {tmp_path / 'agent.py'} {marker}"
    settings = RunSettings(mode="live", guard="loopback", timeout_s=60)
    killed: list[int] = []

    def kill_the_worker() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if marker.exists():
            worker = _worker_of(int(marker.read_text()))
            os.kill(worker, signal.SIGKILL)
            killed.append(worker)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    # one worker: "fine" is still queued when the pool breaks, and must run in a fresh pool
    # (unsealed: the test finds the worker from the pid the program writes, one of the machine's pid namespace)
    unsealed = {"sandbox": "off"}
    run_dir, results = run_suite(suite, agent_name=agent, out=tmp_path / "runs", settings=settings,
                                 run_id="r1", executor=ProcessExecutor(1), agent_settings=unsealed)
    killer.join(timeout=130)
    assert killed, "the doomed episode never started"
    by_task = {r.task_id: r for r in results}
    assert by_task["doomed"].end_reason == "infra_error" and not by_task["doomed"].ok
    assert by_task["doomed"].error.startswith("worker crashed:"), by_task["doomed"].error
    assert by_task["fine"].end_reason == "answered"
    # written like any episode, so the run counts it, and never the agent's or the browser's failure
    lost = load_trajectory(run_dir / "episodes" / "doomed" / "live" / "trajectory.json")
    assert lost.end_reason == "infra_error" and lost.error == by_task["doomed"].error
    assert load_run(run_dir).episodes == {"answered": 1, "infra_error": 1}

    _, again = run_suite(suite, agent_name=agent, out=tmp_path / "runs", settings=settings, run_id="r1",
                         resume=True, executor=ProcessExecutor(1), agent_settings=unsealed)
    assert [(r.task_id, r.end_reason) for r in again] == [("doomed", "answered")]  # only the lost one reran
    assert load_run(run_dir).episodes == {"answered": 2}
    assert not list(Path(run_dir).glob("episodes/*/*.partial"))
