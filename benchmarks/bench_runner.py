"""Runner: episodes per minute of the scripted agent in frozen mode with 1, 2 and 4 workers.

    /work/main/.venv/bin/python benchmarks/bench_runner.py [--copies 2] [--rounds 2]

The demo site (127.0.0.1) and its demo tasks are recorded once (``record_task``, guard in
loopback mode); the site is then stopped and ``run_suite(mode="frozen")`` replays the suite with
each worker count, interleaved over several rounds (median). ``--copies`` repeats every task
under a new id (its snapshot copied) so that the suite is long enough to keep 4 workers busy.
Prints a table and rewrites the ``runner`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import machine_info, machine_lines, markdown_table, median, text_table, update_section  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    ap.add_argument("--copies", type=int, default=2, help="copies of the 6 demo tasks in the suite")
    ap.add_argument("--rounds", type=int, default=2, help="runs per worker count, interleaved (median reported)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    workers = [int(w) for w in args.workers.split(",")]
    t_start = time.monotonic()

    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks

    tmp = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    try:
        t0 = time.monotonic()
        suite_file, snapshots, n_tasks = prepare(tmp, args.copies)
        t_record = time.monotonic() - t0
        print(f"recorded the demo suite in {t_record:.1f} s; suite of {n_tasks} tasks")
        suite = load_tasks(suite_file)
        res: dict[int, list[dict[str, float]]] = {w: [] for w in workers}
        for rnd in range(args.rounds):
            for w in workers:
                settings = RunSettings(mode="frozen", workers=w, snapshots_root=str(snapshots), guard="loopback")
                t0 = time.monotonic()
                _run_dir, summaries = run_suite(suite, agent_name="scripted", out=tmp / "runs", settings=settings,
                                                run_id=f"w{w}-r{rnd}")
                took = time.monotonic() - t0
                ok = sum(1 for s in summaries if s.ok)
                res[w].append({"s": took, "episodes": len(summaries), "ok": ok,
                               "epm": len(summaries) / took * 60})
                print(f"  workers {w}, round {rnd + 1}: {len(summaries)} episodes ({ok} ok) in {took:.1f} s "
                      f"= {len(summaries) / took * 60:.1f} episodes/min")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = median([r["epm"] for r in res[workers[0]]])
    header = ["workers", "episodes per run", "ok", "wall time (median)", "episodes/min (median)",
              f"speed-up vs {workers[0]}"]
    rows = []
    for w in workers:
        epm = median([r["epm"] for r in res[w]])
        rows.append([w, int(median([r["episodes"] for r in res[w]])), f"{sum(r['ok'] for r in res[w])}/"
                     f"{sum(r['episodes'] for r in res[w])}", f"{median([r['s'] for r in res[w]]):.1f} s",
                     f"{epm:.1f}", f"{epm / base:.2f}x"])
    print()
    print(text_table(header, rows))
    print(f"\ntook {time.monotonic() - t_start:.0f} s")

    body = f"""## Runner (`benchmarks/bench_runner.py`)

The scripted agent on the demo suite in frozen mode: the 6 demo tasks (×{args.copies} copies =
{n_tasks} episodes per run) recorded once from the demo site on 127.0.0.1, which is then stopped;
`run_suite(mode="frozen", workers=W)` (one process per worker, each with its own replay proxy and
Chromium), {args.rounds} rounds interleaved across worker counts, median. Each episode includes
starting its proxy and Chromium. On a {os.cpu_count()}-core machine, more than
{os.cpu_count()} workers cannot be expected to scale.

{markdown_table(header, rows)}

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("runner", body)
        print("BENCHMARKS.md: section 'runner' updated")


if __name__ == "__main__":
    main()
