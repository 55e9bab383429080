"""Ray executor: episodes per minute locally (1, 2 workers) and on a Ray cluster on this machine.

    .venv/bin/python benchmarks/bench_ray.py [--copies 1] [--no-write]

The demo tasks are recorded once (as ``bench_runner.py`` does); the scripted agent then replays the
suite in frozen mode with the local executor (1 and 2 workers) and with ``RayExecutor`` on a real
cluster started here (``testing.ray_cluster.RayCluster``): a head node alone (1 CPU), then the head
plus a worker node (1 CPU each). The per-episode overhead Ray adds is the wall-time difference
between the one-node Ray run and the one-worker local run (both run one episode at a time),
divided by the episodes. One round only (the machine is shared). Prints a table and rewrites the
``ray`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import machine_info, machine_lines, markdown_table, text_table, update_section  # noqa: E402
from bench_runner import prepare  # noqa: E402


def _noise_note(overhead: float) -> str:
    if overhead >= 0:
        return ""
    return ("\n  Negative here: the overhead is below the noise of this loaded, shared machine (load average below)\n"
            "  in one round; the local one-worker run also runs its episodes in the driver process itself.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1, help="copies of the 6 demo tasks in the suite")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    info = machine_info()
    t_start = time.monotonic()

    from ego2web_replay.runner.ray_executor import RayExecutor, RaySettings
    from ego2web_replay.runner.run import RunSettings, run_suite
    from ego2web_replay.tasks import load_tasks
    from ego2web_replay.testing.ray_cluster import RayCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    rows: list[list[object]] = []
    timings: dict[str, float] = {}
    try:
        suite_file, snapshots, n_tasks = prepare(tmp, args.copies)
        suite = load_tasks(suite_file)

        def one(label: str, workers: int = 1, executor: object = None) -> None:
            settings = RunSettings(mode="frozen", workers=workers, snapshots_root=str(snapshots), guard="loopback")
            t0 = time.monotonic()
            _d, summaries = run_suite(suite, agent_name="scripted", out=tmp / "runs", settings=settings,
                                      run_id=re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-"),
                                      executor=executor)  # type: ignore[arg-type]
            took = time.monotonic() - t0
            ok = sum(1 for s in summaries if s.ok)
            timings[label] = took
            rows.append([label, len(summaries), f"{ok}/{len(summaries)}", f"{took:.1f} s",
                         f"{len(summaries) / took * 60:.1f}"])
            print(f"  {label}: {len(summaries)} episodes ({ok} ok) in {took:.1f} s")

        one("local, 1 worker", 1)
        one("local, 2 workers", 2)
        t0 = time.monotonic()
        cluster = RayCluster(head_cpus=1).start()
        try:
            t_head = time.monotonic() - t0
            one("ray, head only (1 CPU)", executor=RayExecutor(RaySettings(address=cluster.address)))
            t0 = time.monotonic()
            cluster.add_node(cpus=1)
            t_node = time.monotonic() - t0
            one("ray, head + worker node (1+1 CPU)", executor=RayExecutor(RaySettings(address=cluster.address)))
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    overhead = (timings["ray, head only (1 CPU)"] - timings["local, 1 worker"]) / n_tasks
    header = ["executor", "episodes", "ok", "wall time", "episodes/min"]
    print()
    print(text_table(header, rows))
    print(f"\nRay overhead per episode: {overhead:+.2f} s; head start {t_head:.1f} s, worker join {t_node:.1f} s")
    print(f"took {time.monotonic() - t_start:.0f} s")
    body = f"""## Ray executor (`benchmarks/bench_ray.py`)

The scripted agent on the demo suite in frozen mode ({n_tasks} episodes per run), recorded once from
the demo site on 127.0.0.1: the local executor with 1 and 2 workers, then `--executor ray` on a real
cluster on this machine (`ray start` bound to 127.0.0.1): the head node alone with 1 CPU, then the head
plus a worker node with 1 CPU each (each episode asks for 1 CPU). One round only, on a shared
{os.cpu_count()}-core machine: read the ratios, not the absolute figures.

{markdown_table(header, rows)}

- Per-episode overhead of Ray (one-node Ray run minus one-worker local run, per episode, both one
  episode at a time): **{overhead:+.2f} s** (task dispatch, the CA and the episode folder through the
  object store, packing and unpacking the episode on the driver; a worker process also imports the
  package on its first task).{_noise_note(overhead)}
- Starting the cluster: head {t_head:.1f} s, a worker node joining {t_node:.1f} s (not in the figures above).
- Snapshot open from object storage (cold / warm): see the `objstore` section (`bench_objstore.py`).

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("ray", body)
        print("BENCHMARKS.md: section 'ray' updated")


if __name__ == "__main__":
    main()
