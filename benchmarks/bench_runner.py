"""Runner: frozen episodes of the scripted agent, warm and cold, against a bare Playwright script through `serve`.

    .venv/bin/python benchmarks/bench_runner.py [--copies 2] [--repeats 2] [--suite-repeats 50] [--no-write]

The demo site (127.0.0.1) and its demo tasks are recorded once (``record_task``, guard in
loopback mode); the site is then stopped. In one run, each on the same episodes:

* **baseline**: ``ego2web-replay serve`` (a process of its own) serving every snapshot of the
  suite, and one long-lived Chromium driven by a bare Playwright script: per episode a new
  context, the task's reference actions (``perform_action``), the context closed;
* **warm**: ``run_suite(mode="frozen", workers=W)`` with warm episodes (one Chromium and one
  replay front per worker, a fresh context per episode), W = 1 and 2;
* **cold**: the same with ``warm=False`` (a replay proxy and a Chromium started per episode), W = 1 and 2;
* **demo suite ×N**: the 6 demo tasks with ``repeats=N`` (N = 50: 300 episodes), warm, 1 and 2 workers
  (``--suite-repeats 0`` leaves it out); finished episodes and replay misses are read back from the
  run folder's ``trajectory.json`` files.

Per run: wall time per episode, episodes per minute, and CPU utilisation: the machine's
(``/proc/stat``, all cores and each core, so other programs on a shared machine count too) and this benchmark's
own process tree (user + system time of this process and its reaped children, over wall time × cores).
Prints a table and rewrites the ``runner`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    CORES,
    CpuMeter,
    exit_on_sigterm,
    free_port,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
    wait_port,
)

DEMO_TASKS = Path(__file__).resolve().parent.parent / "ego2web_replay" / "demo" / "tasks.jsonl"


def prepare(tmp: Path, copies: int) -> tuple[Path, Path, int]:
    """Record the demo tasks; write the suite (with copies) and return (suite file, snapshots root, tasks)."""
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.tasks import load_tasks

    snapshots = tmp / "snapshots"
    suite_file = tmp / "tasks.jsonl"
    with DemoSite() as site:
        lines = DEMO_TASKS.read_text("utf-8").replace("{site}", site.url).splitlines()
        suite_file.write_text("\n".join(lines) + "\n", "utf-8")
        suite = load_tasks(suite_file)
        for task in suite:
            r = record_task(task, snapshots, RecordOptions(guard="loopback", screenshots=False))
            if not r.ok:
                raise SystemExit(f"recording {task.id} failed: {r.error}")
    out = []
    for k in range(copies):
        for line in lines:
            t = json.loads(line)
            if k:
                src = snapshots / t["id"]
                t["id"] = f"{t['id']}-copy{k}"
                shutil.copytree(src, snapshots / t["id"])
            out.append(json.dumps(t))
    suite_file.write_text("\n".join(out) + "\n", "utf-8")
    return suite_file, snapshots, len(out)


def baseline(suite_file: Path, snapshots: Path, repeats: int) -> dict[str, Any]:
    """`serve` with every snapshot, one Chromium, a bare script per episode; the run's figures."""
    from ego2web_replay.browser import BrowserSession, perform_action
    from ego2web_replay.proxy import project_ca
    from ego2web_replay.tasks import load_tasks

    suite = load_tasks(suite_file)
    snaps = [str(next((snapshots / t.id).iterdir())) for t in suite]
    port = free_port()
    ca = project_ca()
    ok = episodes = 0
    with CpuMeter() as cpu:
        serve = subprocess.Popen([sys.executable, "-m", "ego2web_replay.cli", "-q", "serve", *snaps, "--port",
                                  str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, 60)
            with BrowserSession(proxy_url=f"http://127.0.0.1:{port}", spki=ca.spki) as browser:
                for _ in range(repeats):
                    for task in suite:
                        ctx = browser.new_context()
                        page = ctx.new_page()
                        try:
                            for action in task.reference_actions:
                                if action.kind not in ("answer", "stop"):
                                    perform_action(page, action, timeout_s=20)
                            ok += 1
                        except Exception as e:  # noqa: BLE001 - counted, shown in the table
                            print(f"  baseline {task.id}: {type(e).__name__}: {str(e).splitlines()[0]}")
                        finally:
                            ctx.close()
                        episodes += 1
        finally:
            serve.terminate()
            serve.wait(30)
    return {"episodes": episodes, "ok": ok, "s": cpu.wall, "machine": cpu.machine, "own": cpu.own,
            "cores": cpu.cores}


def read_run(run_dir: Path) -> dict[str, int]:
    """What the run folder holds: finished episodes (a ``trajectory.json``), those that ended with an
    answer and no error, and the replay misses summed over them (read from disk, not from the summaries)."""
    from ego2web_replay.models.base import read_model
    from ego2web_replay.models.trajectory import Trajectory

    done = answered = misses = missing_stats = 0
    for f in sorted((run_dir / "episodes").glob("*/*/trajectory.json")):
        t = read_model(f, Trajectory, "trajectory")
        done += 1
        answered += t.answer is not None and not t.error
        if t.replay is None:
            missing_stats += 1
        else:
            misses += t.replay.miss
    return {"done": done, "answered": answered, "misses": misses, "no_stats": missing_stats}


def runner(suite_file: Path, snapshots: Path, out: Path, run_id: str, workers: int, warm: bool,
           repeats: int) -> dict[str, Any]:
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks

    suite = load_tasks(suite_file)
    settings = RunSettings(mode="frozen", workers=workers, snapshots_root=str(snapshots), guard="loopback",
                           repeats=repeats, warm=warm)
    with CpuMeter() as cpu:
        run_dir, summaries = run_suite(suite, agent_name="scripted", out=out, settings=settings, run_id=run_id)
    ok = sum(1 for s in summaries if s.ok)
    return {"episodes": len(summaries), "ok": ok, "s": cpu.wall, "machine": cpu.machine, "own": cpu.own,
            "cores": cpu.cores, "expected": len(suite) * repeats, **read_run(run_dir)}


def _row(label: str, r: dict[str, Any], base: dict[str, Any] | None) -> list[Any]:
    per = r["s"] / max(1, r["episodes"])
    ratio = f"{per / (base['s'] / base['episodes']):.2f}x" if base else "1.00x"
    return [label, r["episodes"], f"{r['ok']}/{r['episodes']}", f"{r['s']:.1f} s", f"{per:.2f} s", ratio,
            f"{r['episodes'] / r['s'] * 60:.1f}", f"{r['machine'] * 100:.0f}%", f"{r['own'] * 100:.0f}%"]


def _suite_row(label: str, r: dict[str, Any]) -> list[Any]:
    """A whole-suite row: finished episodes and misses as the run folder has them, CPU of each core."""
    cores = " / ".join(f"{c * 100:.0f}%" for c in r["cores"])
    misses = f"{r['misses']}" + (f" ({r['no_stats']} without replay counts)" if r["no_stats"] else "")
    return [label, f"{r['done']}/{r['expected']}", f"{r['answered']}/{r['expected']}", misses, f"{r['s']:.1f} s",
            f"{r['s'] / max(1, r['episodes']):.2f} s", f"{r['episodes'] / r['s'] * 60:.1f}",
            f"{r['machine'] * 100:.0f}%", cores, f"{r['own'] * 100:.0f}%"]


def _suite_verdict(suite_rows: list[tuple[str, dict[str, Any]]], repeats: int) -> str:
    """The whole-suite rows in words, from what each run folder holds."""
    clean = all(r["done"] == r["expected"] == r["answered"] and r["misses"] == 0 and not r["no_stats"]
                for _label, r in suite_rows)
    per_min = ", ".join(f"{r['episodes'] / r['s'] * 60:.1f} episodes/min with {w} worker{'s' if w > 1 else ''}"
                        for w, (_label, r) in enumerate(suite_rows, 1))
    head = ("Every run finished all its episodes (a `trajectory.json` each in the run folder, an answer and "
            "no error) with 0 replay misses." if clean else
            "**Not every episode finished cleanly**: see the finished / ok / misses columns (read from the run "
            "folders' `trajectory.json` files).")
    return (f"{head} Demo suite ×{repeats}: {per_min}. \"finished\" and \"misses\" are read back from the run "
            "folder (each episode's `trajectory.json` and its replay counts), not taken from the summaries "
            "`run_suite` returns; CPU per core is each core's busy share over the run from `/proc/stat` "
            "(the whole machine's, other programs included).")


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=2, help="copies of the 6 demo tasks in the compared suite")
    ap.add_argument("--repeats", type=int, default=2, help="repeats of each task in the compared runs")
    ap.add_argument("--suite-repeats", type=int, default=50,
                    help="repeats of the 6 demo tasks in the whole-suite runs (50: 300 episodes; 0: skip them)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    results: list[tuple[str, dict[str, Any]]] = []
    try:
        t0 = time.monotonic()
        suite_file, snapshots, n_tasks = prepare(tmp, args.copies)
        print(f"recorded the demo suite in {time.monotonic() - t0:.1f} s; {n_tasks} tasks × {args.repeats} repeats")

        def note(label: str, fn: Callable[[], dict[str, Any]]) -> None:
            r = fn()
            results.append((label, r))
            print(f"  {label}: {r['episodes']} episodes ({r['ok']} ok) in {r['s']:.1f} s, "
                  f"CPU machine {r['machine'] * 100:.0f}% / own {r['own'] * 100:.0f}%")

        runs = tmp / "runs"
        note("baseline: bare Playwright through serve", lambda: baseline(suite_file, snapshots, args.repeats))
        for w in (1, 2):
            note(f"runner, warm, {w} worker{'s' if w > 1 else ''}",
                 lambda w=w: runner(suite_file, snapshots, runs, f"warm-w{w}", w, True, args.repeats))
        for w in (1, 2):
            note(f"runner, cold, {w} worker{'s' if w > 1 else ''}",
                 lambda w=w: runner(suite_file, snapshots, runs, f"cold-w{w}", w, False, args.repeats))
        suite_rows: list[tuple[str, dict[str, Any]]] = []
        if args.suite_repeats:
            demo = tmp / "demo.jsonl"  # the 6 demo tasks once each (their snapshots recorded above)
            demo.write_text("\n".join(suite_file.read_text("utf-8").splitlines()[:6]) + "\n", "utf-8")
            for w in (1, 2):
                label = f"demo suite ×{args.suite_repeats}, warm, {w} worker{'s' if w > 1 else ''}"
                r = runner(demo, snapshots, runs, f"suite-w{w}", w, True, args.suite_repeats)
                suite_rows.append((label, r))
                print(f"  {label}: {r['episodes']} episodes ({r['ok']} ok; run folder: {r['done']}/{r['expected']} "
                      f"finished, {r['misses']} misses) in {r['s']:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = results[0][1]
    header = ["run", "episodes", "ok", "wall time", "per episode", "vs baseline", "episodes/min",
              "CPU (machine)", "CPU (own tree)"]
    rows = [_row(label, r, base) for label, r in results]
    srows = [_suite_row(label, r) for label, r in suite_rows]
    sheader = ["run", "finished", "ok", "misses", "wall time", "per episode", "episodes/min", "CPU (machine)",
               "CPU per core", "CPU (own tree)"]
    print()
    print(text_table(header, rows))
    if srows:
        print()
        print(text_table(sheader, srows))
    print(f"\ntook {time.monotonic() - t_start:.0f} s")
    warm1 = dict(results)["runner, warm, 1 worker"]
    ratio = (warm1["s"] / warm1["episodes"]) / (base["s"] / base["episodes"])
    suite_text = (f"\nThe whole demo suite ×{args.suite_repeats} ({suite_rows[0][1]['episodes']} episodes), warm:\n\n"
                  f"{markdown_table(sheader, srows)}\n\n{_suite_verdict(suite_rows, args.suite_repeats)}\n") if srows else ""
    if srows and args.suite_repeats < 50:
        suite_text += (f"\nScaled down from ×50 (300 episodes) with `--suite-repeats {args.suite_repeats}`; "
                       "the default runs the full suite.\n")
    body = f"""## Runner (`benchmarks/bench_runner.py`)

The scripted agent on the demo suite in frozen mode: the 6 demo tasks (×{args.copies} copies =
{n_tasks} tasks, ×{args.repeats} repeats = {n_tasks * args.repeats} episodes per run) recorded once from the demo site on
127.0.0.1, which is then stopped. All rows come from one run of the script, on the same episodes:

- **baseline**: `ego2web-replay serve` (its own process) with every snapshot, and a bare Playwright
  script with one long-lived Chromium: per episode a new context, the task's reference actions, the
  context closed (no screenshots, page captures or trajectory);
- **warm** (the default): one Chromium and one replay front per worker for the whole run, a fresh
  browser context and replay counts per episode, each snapshot opened once per worker
  ([scale.md](docs/scale.md#warm-episodes));
- **cold** (`run --cold`, what every episode did before): a replay proxy and a Chromium started per episode.

CPU (machine) is all cores of the machine from `/proc/stat` (other programs count too); CPU (own
tree) is this benchmark's process and its children, over wall time × {CORES} cores.

{markdown_table(header, rows)}

Warm, one worker, against the baseline: **{ratio:.2f}×** the wall time per episode (target ≤ 1.2×:
{"met" if ratio <= 1.2 else "not met"}). The
runner does per step what the baseline does not: a screenshot and the page's title, text and DOM
kept (one round trip), and per episode the determinism script in the context and the trajectory and
replay stats written ([scale.md](docs/scale.md#what-a-step-costs)); the scripted agent reads no
element list, so none is built for it.
{suite_text}
On a {CORES}-core machine shared with other engineers' builds and tests (load average below): read
the ratios within the run, not the absolute figures.

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("runner", body)
        print("BENCHMARKS.md: section 'runner' updated")


if __name__ == "__main__":
    main()
