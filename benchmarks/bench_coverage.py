"""Coverage that grows: off-snapshot rate of a fresh exploring agent after merging 0, 1, 2, 4 live runs.

    .venv/bin/python benchmarks/bench_coverage.py [--agents 6] [--steps 6] [--no-write]

On the demo site, the shop task is recorded once by its reference actions (the base snapshot). Four
exploring agents (``explorer_agent.py``: random clicks and searches with varied words, seeded) run it
live; each live run is archived. For k = 0, 1, 2, 4 the base is extended with the first k live-run
archives (``snapshot extend``, window 1 h), and ``--agents`` fresh explorers (seeds never used live)
run it frozen against that snapshot. Reported: the share of their episodes that are off-snapshot,
degraded and complete, the share of their documents and content fetches that missed, and the
captures the snapshot holds. Rewrites the ``coverage`` section of
BENCHMARKS.md. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from _common import machine_info, machine_lines, markdown_table, text_table, update_section  # noqa: E402

TASK = "shop-mug-price"
AGENT = "explorer"
LIVE_SEEDS = [101, 102, 103, 104]
MERGES = [0, 1, 2, 4]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=6, help="Fresh explorers run frozen per snapshot.")
    ap.add_argument("--steps", type=int, default=4, help="Actions per explorer episode.")
    ap.add_argument("--no-write", action="store_true", help="Print only; do not touch BENCHMARKS.md.")
    args = ap.parse_args()

    from ego2web_replay.demo.run import write_demo_suite
    from ego2web_replay.demo.site import DemoSite
    from ego2web_replay.models import load_trajectory
    from ego2web_replay.recorder.session import RecordOptions, record_task
    from ego2web_replay.replay.canonical import canonicalize
    from ego2web_replay.replay.rules import default_rules
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.snapshots.extend import extend_snapshot
    from ego2web_replay.snapshots.snapshot import Snapshot
    from ego2web_replay.tasks import load_tasks
    from ego2web_replay.validity import is_content

    info = machine_info()
    t0 = time.perf_counter()
    rules = default_rules()
    work = Path(tempfile.mkdtemp(prefix="bench-coverage-"))
    snapshots, runs = work / "snapshots", work / "runs"
    common = {"snapshots_root": str(snapshots), "timeout_s": 120, "action_timeout_s": 10, "guard": "loopback",
              "max_steps": args.steps + 2}
    rows = []
    with DemoSite() as site:
        suite = load_tasks(write_demo_suite(work / "suite", site.url, [TASK]))
        base = record_task(suite.get(TASK), snapshots, RecordOptions(guard="loopback"))
        assert base.ok and base.snapshot is not None, base.error
        live_runs = []
        for seed in LIVE_SEEDS:
            run_dir, _ = run_suite(suite, agent_name=AGENT, agent_settings={"seed": seed, "steps": args.steps},
                                   out=runs, settings=RunSettings(mode="live", **common), run_id=f"live-{seed}")
            live_runs.append(run_dir)
        for k in MERGES:
            if k:
                ext = extend_snapshot(base.snapshot, live_runs[:k], window=timedelta(hours=1),
                                      request_key=lambda e: canonicalize(e.method, e.url, e.request_body_query,
                                                                         rules).key)
                snap_id, merged = ext.snapshot_id, ext.merged
            else:
                snap_id, merged = base.snapshot.name, 0
            captures = len(Snapshot.open(snapshots / TASK / snap_id).entries())
            classes, missed, content = [], 0, 0
            for n in range(args.agents):
                run_dir, _ = run_suite(suite, agent_name=AGENT, agent_settings={"seed": n + 1, "steps": args.steps},
                                       out=runs, settings=RunSettings(mode="frozen", snapshot_id=snap_id, **common),
                                       run_id=f"frozen-k{k}-{n}")
                traj = load_trajectory(run_dir / "episodes" / TASK / "frozen")
                classes.append(traj.replay.validity if traj.replay else "unknown")
                for e in traj.replay.log if traj.replay else []:
                    if is_content(e.kind, e.url):
                        content += 1
                        missed += e.outcome in ("miss", "fuzzy", "live")
            share = {c: sum(x == c for x in classes) / len(classes) for c in ("off-snapshot", "degraded", "complete")}
            rows.append([k, captures, merged, len(classes), f"{100 * share['off-snapshot']:.0f}%",
                         f"{100 * share['degraded']:.0f}%", f"{100 * share['complete']:.0f}%",
                         f"{missed}/{content} ({100 * missed / max(1, content):.0f}%)"])
            print(f"k={k}: {rows[-1]}", flush=True)
    header = ["live runs merged", "captures", "merged captures", "fresh explorers", "off-snapshot", "degraded",
              "complete", "content requests missed"]
    elapsed = time.perf_counter() - t0
    print(text_table(header, rows))
    print(f"{elapsed:.0f} s; work folder {work}")
    if args.no_write:
        return
    body = f"""## Coverage that grows (`benchmarks/bench_coverage.py`)

The demo shop task recorded once (its reference actions), then {len(LIVE_SEEDS)} exploring agents
(random clicks and searches with varied words, seeded) run it live, each live run archived. For each
k the base snapshot is extended with the first k live-run archives (`snapshot extend`, window 1 h)
and {args.agents} fresh explorers (seeds never used live, {args.steps} actions each) run it frozen.
Off-snapshot: a page or content fetch the snapshot did not hold (one is enough); the last column
counts the documents and content fetches of all fresh explorers that missed.

{markdown_table(header, rows)}

{machine_lines(info)}; {elapsed:.0f} s in all.
"""
    update_section("coverage", body)


if __name__ == "__main__":
    main()
