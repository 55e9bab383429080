"""Ray beside local workers, in one run: the demo suite frozen, its snapshots served from object storage.

    .venv/bin/python benchmarks/bench_ray.py [--workers 2] [--repeats 4] [--rounds 2] [--no-write]

The demo tasks are recorded once (``bench_runner.prepare``) and uploaded to a real S3-compatible server
on 127.0.0.1 (moto's, ``testing.s3server.S3Server``); every run replays them from ``s3://`` through the
content-addressed object cache, so what a worker keeps across episodes shows. A Ray cluster with
``--workers`` CPUs is started once on this machine (``testing.ray_cluster.RayCluster``, one head node).
Then, ``--rounds`` times, in alternating order: the demo suite ×``--repeats`` (task after task, each
repeated) with the local executor and ``--workers`` workers, and the same with ``RayExecutor`` and the
same number of workers (each episode asks for 1 CPU). Both start cold: a Ray run is a new Ray job
(new worker processes, each with its own cache), and the local run's data folder caches are emptied
before it.

Per run: wall time, episodes per minute, CPU per core (``/proc/stat``); per episode, from its
``trajectory.json``: the time it ran, and what it asked of the store (``replay.store``: GETs and
bytes, lookups, listings). Ray's overhead per episode is (Ray wall time - local wall time) / episodes,
within each round. Prints a table and rewrites the ``ray`` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import (  # noqa: E402
    CORES,
    CpuMeter,
    exit_on_sigterm,
    machine_info,
    machine_lines,
    markdown_table,
    text_table,
    update_section,
)
from bench_runner import prepare  # noqa: E402

CACHES = ("object-cache", "index-cache", "remote-snapshots")  # the data folder's, emptied before a local run


def upload(snapshots: Path, url: str) -> int:
    """Every snapshot under ``snapshots`` (``<task>/<id>``) to ``url/<task>/<id>``; returns how many."""
    from ego2web_replay.snapshots.location import upload_snapshot

    folders = sorted(p for p in snapshots.glob("*/*") if (p / "manifest.json").is_file())
    for folder in folders:
        upload_snapshot(folder, f"{url}/{folder.parent.name}/{folder.name}")
    return len(folders)


def episodes(run_dir: Path) -> list[dict[str, Any]]:
    """Each episode of the run folder, in the order they started: its task, how long it ran, whether it
    answered with no miss, and what it asked of the store."""
    from ego2web_replay.models.base import read_model
    from ego2web_replay.models.trajectory import Trajectory

    out = []
    for f in run_dir.glob("episodes/*/*/trajectory.json"):
        t = read_model(f, Trajectory, "trajectory")
        store = t.replay.store if t.replay is not None else None
        ran = (t.finished_at - t.started_at).total_seconds() if t.started_at and t.finished_at else float("nan")
        out.append({"task": t.task_id, "start": t.started_at, "s": ran,
                    "clean": t.answer is not None and not t.error and t.replay is not None and t.replay.miss == 0,
                    "store": store.model_dump() if store is not None else None})
    return sorted(out, key=lambda e: e["start"])


def one_run(label: str, suite: Any, url: str, out: Path, workers: int, repeats: int, executor: Any,
            home: Path) -> dict[str, Any]:
    from ego2web_replay.runner.run import RunSettings, run_suite

    if executor is None:
        for name in CACHES:
            shutil.rmtree(home / name, ignore_errors=True)
    settings = RunSettings(mode="frozen", workers=workers, snapshots_root=url, guard="loopback", repeats=repeats)
    with CpuMeter() as cpu:
        run_dir, summaries = run_suite(suite, agent_name="scripted", out=out, settings=settings,
                                       run_id=label, executor=executor)
    eps = episodes(run_dir)
    r = {"episodes": len(summaries), "ok": sum(1 for s in summaries if s.ok), "s": cpu.wall, "cores": cpu.cores,
         "machine": cpu.machine, "eps": eps, "expected": len(suite) * repeats}
    print(f"  {label}: {r['episodes']} episodes ({r['ok']} ok, {sum(e['clean'] for e in eps)} clean) in "
          f"{r['s']:.1f} s, CPU per core {' / '.join(f'{c * 100:.0f}%' for c in r['cores'])}")
    return r


def _noise_note(per_round: list[float]) -> str:
    """A word on the overhead when the rounds do not agree on its sign: it is then within the noise."""
    if min(per_round) >= 0:
        return ""
    return ("\n  The rounds do not all agree that Ray costs more: the overhead is within what this loaded, shared machine\n"
            "  lets one run resolve (load average below); a local run also spawns its worker processes, which import\n"
            "  the package and launch their Chromium.")


def kept_note(fetch: dict[str, dict[str, Any]]) -> str:
    """Whether a Ray worker kept its snapshots open as a local one does: a reopen asks for the ETag again."""
    ray, local = fetch["ray"]["warm_lookups"], fetch["local"]["warm_lookups"]
    if ray == local:
        return (f"Ray's later episodes ask exactly what local ones do ({ray:.0f} lookups): the worker process also "
                "kept the snapshot open (no second open, no second ETag check).")
    return (f"Ray's later episodes make {ray:.0f} lookups against local ones' {local:.0f}: "
            "the worker opened the snapshot again.")


def asks_note(fetch: dict[str, dict[str, Any]]) -> str:
    """What a later episode still asked of the store, from the counts: the run pins each task's snapshot
    when it starts, so no episode lists the store to find the newest one."""
    listings = max(f["max_listings"] for f in fetch.values())
    lookups = max(f["warm_max_requests"] for f in fetch.values())
    if listings:
        return (f"Some episodes listed the store ({listings} listings at most): **an episode still looks for "
                "its task's newest snapshot**.")
    text = ("No episode listed the store: the run chose each task's snapshot once when it started (the "
            "driver's lookups and listings, outside these counts) and handed it to every episode.")
    if lookups == 0:
        return text + " No later episode asked the store anything (0 lookups)."
    return (text + f" A later episode that asked anything (up to {lookups} lookups) was a worker's first open "
            "of a snapshot already in the cache (its manifest's ETag, whether its archive is there).")


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def fetch_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the runs of one executor: the episodes that fetched (GETs > 0: the first of their snapshot in
    a cold cache) and the later ones, with what each asked of the store."""
    eps = [e for r in runs for e in r["eps"]]
    stored = [e["store"] for e in eps if e["store"] is not None]
    cold = [s for s in stored if s["gets"] > 0]
    warm = [s for s in stored if s["gets"] == 0]
    per_run = [sum(1 for e in r["eps"] if e["store"] and e["store"]["gets"] > 0) for r in runs]
    return {"episodes": len(eps), "with_counts": len(stored), "cold": len(cold), "cold_per_run": per_run,
            "cold_gets": _med([s["gets"] for s in cold]), "cold_kb": _med([s["bytes"] / 1024 for s in cold]),
            "warm": len(warm), "warm_gets": sum(s["gets"] for s in warm),
            "warm_lookups": _med([s["lookups"] for s in warm]), "warm_listings": _med([s["listings"] for s in warm]),
            "warm_max_requests": max((s["lookups"] + s["listings"] for s in warm), default=0),
            "max_listings": max((s["listings"] for s in stored), default=0)}


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="workers of each executor (Ray: the cluster's CPUs)")
    ap.add_argument("--repeats", type=int, default=4, help="repeats of each of the 6 demo tasks per run")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (local, Ray), alternating which goes first")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = ap.parse_args()
    if args.workers < 1 or args.repeats < 1 or args.rounds < 1:
        raise SystemExit("bench_ray.py: --workers, --repeats and --rounds must be at least 1")
    info = machine_info()
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    home = tmp / "home"
    os.environ["EGO2WEB_REPLAY_HOME"] = str(home)  # this run's CA and caches; local workers inherit it

    from ego2web_replay.runner.ray_executor import RayExecutor, RaySettings
    from ego2web_replay.tasks import load_tasks
    from ego2web_replay.testing.ray_cluster import RayCluster
    from ego2web_replay.testing.s3server import S3Server

    results: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
    order: list[str] = []
    try:
        suite_file, snapshots, n_tasks = prepare(tmp, 1)
        suite = load_tasks(suite_file)
        with S3Server() as server:
            os.environ.update(server.env())  # the driver's AWS variables: local workers inherit them, Ray tasks get them
            url = f"{server.create_bucket('bench')}/snaps"
            uploaded = upload(snapshots, url)
            print(f"{uploaded} snapshots uploaded to {url} ({server.url})")
            t0 = time.monotonic()
            cluster = RayCluster(head_cpus=args.workers).start()
            t_cluster = time.monotonic() - t0
            try:
                for k in range(args.rounds):
                    for name in (("local", "ray") if k % 2 == 0 else ("ray", "local")):
                        executor = RayExecutor(RaySettings(address=cluster.address)) if name == "ray" else None
                        results[name].append(one_run(f"{name}-r{k}", suite, url, tmp / "runs", args.workers,
                                                     args.repeats, executor, home))
                        order.append(name)
            finally:
                cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    w = args.workers
    per_round = [(ray["s"] - loc["s"]) / max(1, ray["episodes"]) for loc, ray in zip(results["local"], results["ray"],
                                                                                      strict=True)]
    ratios = [ray["s"] / loc["s"] for loc, ray in zip(results["local"], results["ray"], strict=True)]
    header = ["run", "episodes", "ok", "clean", "wall time", "per episode (wall / episodes)", "episode ran (median)",
              "episodes/min", "CPU per core"]
    rows = []
    for name in ("local", "ray"):
        for k, r in enumerate(results[name]):
            rows.append([f"{name} executor, {w} worker{'s' if w > 1 else ''}, round {k + 1}",
                         r["episodes"], f"{r['ok']}/{r['expected']}", f"{sum(e['clean'] for e in r['eps'])}",
                         f"{r['s']:.1f} s", f"{r['s'] / max(1, r['episodes']) * 1000:.0f} ms",
                         f"{_med([e['s'] for e in r['eps']]) * 1000:.0f} ms",
                         f"{r['episodes'] / r['s'] * 60:.1f}", " / ".join(f"{c * 100:.0f}%" for c in r["cores"])])
    fetch = {name: fetch_summary(results[name]) for name in ("local", "ray")}
    fheader = ["executor", "episodes with store counts", "fetching episodes (GETs > 0), per run",
               "their GETs (median)", "their download (median)", "later episodes", "their GETs (total)",
               "their lookups / listings (median)"]
    frows = [[name, f"{f['with_counts']}/{f['episodes']}", " + ".join(map(str, f["cold_per_run"])),
              f"{f['cold_gets']:.0f}", f"{f['cold_kb']:.0f} KB", f["warm"], f["warm_gets"],
              f"{f['warm_lookups']:.0f} / {f['warm_listings']:.0f}"] for name, f in fetch.items()]
    print()
    print(text_table(header, rows))
    print()
    print(text_table(fheader, frows))
    overhead = _med(per_round)
    print(f"\nRay overhead per episode: {overhead * 1000:+.0f} ms (rounds: "
          f"{', '.join(f'{x * 1000:+.0f}' for x in per_round)}); Ray / local wall time {_med(ratios):.2f}x; "
          f"cluster start {t_cluster:.1f} s")
    took = time.monotonic() - t_start
    print(f"took {took:.0f} s")
    bound = n_tasks * w
    warm_ok = all(f["with_counts"] == f["episodes"] and f["warm_gets"] == 0 for f in fetch.values())
    ray_cold = fetch["ray"]["cold_per_run"]
    body = f"""## Ray executor beside local workers (`benchmarks/bench_ray.py`)

The scripted agent on the demo suite in frozen mode: the 6 demo tasks ×{args.repeats} repeats
({n_tasks * args.repeats} episodes per run, task after task), recorded once from the demo site on 127.0.0.1
and uploaded to an S3-compatible server on 127.0.0.1 (moto's); every episode replays its snapshot from
`s3://` through the content-addressed object cache. A Ray cluster with {w} CPUs (one head node, `ray
start` on 127.0.0.1) is started once ({t_cluster:.1f} s, not in the figures). Then {args.rounds} rounds, the
order alternating ({", ".join(order)}): the local executor with {w} workers, and `--executor ray` with {w}
workers (1 CPU an episode). Each run starts cold: a Ray run is a new Ray job (new worker processes, each
with its own object cache), and the local run's data-folder caches are emptied before it.

*per episode* is the run's wall time over its episodes; *episode ran* the median of each episode's own
start-to-end time (its `trajectory.json`); *clean*: answered, no error, 0 replay misses; CPU per core is
each core's busy share over the run (`/proc/stat`, the whole machine's: other programs count too).

{markdown_table(header, rows)}

- Ray's overhead against local workers, within each round: **{overhead * 1000:+.0f} ms per episode** (median
  over the rounds, which gave {", ".join(f"{x * 1000:+.0f} ms" for x in per_round)}), Ray's wall time **{_med(ratios):.2f}×** the
  local run's. It holds a Ray job's start (worker processes importing the package, each launching its
  Chromium), task dispatch, the CA through the object store, and packing each episode folder on the worker
  and unpacking it on the driver.{_noise_note(per_round)}

What each episode asked of the object store (`replay_stats.json`'s `store`: this process's requests while
the episode ran), over all rounds:

{markdown_table(fheader, frows)}

- An episode fetches (GETs: the manifest, the index and learned volatility whole, the archive blocks it
  reads) only when its snapshot is not yet in its worker's cache: at most 6 snapshots × {w} workers =
  {bound} per Ray run (each worker process has its own cache), 6 (or a few more, when two workers open the
  same snapshot at once) per local run, whose workers share the data folder. Ray runs fetched in
  {" + ".join(map(str, ray_cold))} episodes of {n_tasks * args.repeats}.
- {"Every later episode fetched nothing: **the cache stays warm across episodes** on both executors." if warm_ok
   else "**Some later episodes fetched again, or lack store counts**: see the table."} {asks_note(fetch)}
  {kept_note(fetch)}

On a {CORES}-core machine shared with other work (load average below): read the ratios within the
run, not the absolute figures.

Machine and versions:
{machine_lines(info, {"run took": f"{took:.0f} s"})}
"""
    if not args.no_write:
        update_section("ray", body)
        print("BENCHMARKS.md: section 'ray' updated")


if __name__ == "__main__":
    main()
