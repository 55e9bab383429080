"""Tail latency against snapshot size: p50 and p99 of ``serve`` at 10 connections on synthetic
snapshots of 10k, 100k and 1M captures, with the mapped index (the default) and the in-memory index
(frozen out of the cyclic garbage collector, or not: ``--configs``); and the pause of one full
collection with such an index open, frozen or not.

    .venv/bin/python benchmarks/bench_tail.py [--sizes 10000 100000 1000000] [--duration 10] [--conns 10]

The snapshots are built once under ``benchmarks/out/`` (``_bigsnap.py``; the pauses use
``_synthetic.py``'s, shared with ``bench_replay.py``). Each
configuration runs ``ego2web-replay serve`` in its own process; the load client (threads, one
keep-alive connection each, absolute-form requests through the proxy) runs in another, over 2,000
URLs spread across the snapshot (exact matches). Prints a table and rewrites the ``tail``
and ``tail-gc`` sections of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

import _peers  # noqa: E402
from _bigsnap import big_snapshot  # noqa: E402
from _common import (  # noqa: E402
    free_port,
    loadavg,
    machine_info,
    machine_lines,
    markdown_table,
    run_load,
    text_table,
    update_section,
)
from _synthetic import synthetic_url  # noqa: E402

_SAMPLE = 2000


def measure(snapshot: Path, n: int, freeze: bool, duration: float, conns: int, tmp: Path,
            index: str = "auto") -> dict[str, float]:
    step = max(1, n // _SAMPLE)
    urls = [synthetic_url(i) for i in range(0, n, step)][:_SAMPLE]
    peer = _peers.ours(snapshot, free_port(), duration + 300, tmp / f"stats-{n}-{freeze}-{index}.json")
    peer.log = tmp / f"serve-{n}-{freeze}-{index}.log"
    saved = {k: os.environ.get(k) for k in ("EGO2WEB_REPLAY_GC_FREEZE", "EGO2WEB_REPLAY_INDEX")}
    os.environ["EGO2WEB_REPLAY_GC_FREEZE"] = "1" if freeze else "0"
    os.environ["EGO2WEB_REPLAY_INDEX"] = index
    try:
        peer.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    try:
        run_load(peer.port, urls[:50], concurrency=conns, duration=1.0)  # warm-up
        res = run_load(peer.port, urls, concurrency=conns, duration=duration)
    finally:
        peer.stop()
    res["load"] = loadavg()
    return res


def collection_pauses(snapshot: Path, n: int, reps: int = 5) -> dict[str, float]:
    """Milliseconds one full collection (``gc.collect()``) takes with ``n`` captures open, frozen or not.

    In this process, without load: the pause a full collection adds to every request in flight.
    """
    import gc
    import statistics

    from ego2web_replay.replay import gcfreeze
    from ego2web_replay.replay.session import Replay

    out: dict[str, float] = {}
    for freeze in (False, True):
        os.environ["EGO2WEB_REPLAY_GC_FREEZE"] = "1" if freeze else "0"
        replay = Replay([snapshot], miss="404")
        replay.open()
        replay.replayer.index.prepare()  # every host's canonical tables, as a replay builds them on demand
        gcfreeze.refreeze()
        gc.collect()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            gc.collect()
            times.append((time.perf_counter() - t0) * 1000)
        out["frozen" if freeze else "not frozen"] = statistics.median(times)
        replay.stop()
        del replay
        gc.collect()
    os.environ.pop("EGO2WEB_REPLAY_GC_FREEZE", None)
    return out


def pauses_section(sizes: list[int], info: dict[str, str], write: bool) -> None:
    rows = []
    for n in sizes:
        snap, _ = big_snapshot(n)
        p = collection_pauses(snap, n)
        rows.append([f"{n:,}", f"{p['not frozen']:.1f}", f"{p['frozen']:.1f}"])
        print(f"  {n:>9,}: full collection {p['not frozen']:.1f} ms not frozen, {p['frozen']:.1f} ms frozen")
    header = ["captures open", "full collection, index not frozen (ms)", "full collection, index frozen (ms)"]
    print(text_table(header, rows))
    body = f"""## Collector pauses against snapshot size (`benchmarks/bench_tail.py --only pauses`)

One `gc.collect()` (a full collection), median of 5, in a process holding an open `Replay` of a
synthetic snapshot with every host's canonical tables built, the index frozen (the default) or
not. No request load: this is the pause a full collection adds to every request in flight, which the
collector takes every so often while serving; freezing keeps it from growing with the snapshot.
A full collection walks every tracked object of the process (modules, mitmproxy, the index);
frozen, it walks only what was made since the freeze. Wall times, on a loaded machine.

{markdown_table(header, rows)}

Machine and versions:
{machine_lines(info)}
"""
    if write:
        update_section("tail-gc", body)
        print("BENCHMARKS.md: section 'tail-gc' updated")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="captures per snapshot")
    ap.add_argument("--configs", nargs="+", choices=["mapped", "memory", "memory-unfrozen"],
                    default=["mapped", "memory"], help="index forms (and collector setting) to load")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of load per configuration")
    ap.add_argument("--conns", type=int, default=10, help="connections of the load client")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--only", choices=["load", "pauses"], help="run one of the two measurements (default: both)")
    args = ap.parse_args()
    info = machine_info()
    if args.only != "load":
        pauses_section(args.sizes, info, not args.no_write)
    if args.only == "pauses":
        return
    t_start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-tail-"))
    rows = []
    configs = {"mapped": ("mapped", True, "mapped index (default), frozen"),
               "memory": ("memory", True, "in-memory index, frozen (EGO2WEB_REPLAY_INDEX=memory)"),
               "memory-unfrozen": ("memory", False, "in-memory index, not frozen (EGO2WEB_REPLAY_GC_FREEZE=0)")}
    for n in args.sizes:
        snap, built = big_snapshot(n)
        print(f"snapshot of {n:,} captures: {snap} (built {built['date']})")
        for name in args.configs:
            index, freeze, label = configs[name]
            r = measure(snap, n, freeze, args.duration, args.conns, tmp, index)
            ratio = r["p99"] / r["p50"] if r["p50"] else float("nan")
            print(f"  {n:>9,} {label}: {r['rps']:.0f} req/s, p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms "
                  f"({ratio:.1f}x), errors {r['errors']:.0f}, load {r['load']}")
            rows.append([f"{n:,}", label, f"{r['rps']:.0f}", f"{r['p50']:.1f}", f"{r['p99']:.1f}", f"{ratio:.1f}x",
                         f"{r['errors']:.0f}", r["load"]])
    header = ["captures", "index", "req/s", "p50 ms", "p99 ms", "p99 / p50", "errors",
              "load average after (1/5/15 min)"]
    print()
    print(text_table(header, rows))
    print(f"took {time.monotonic() - t_start:.0f} s")
    body = f"""## Tail latency against snapshot size (`benchmarks/bench_tail.py`)

`ego2web-replay serve` (default settings) on synthetic snapshots of small JSON exchanges
(`benchmarks/_bigsnap.py`), in its own process; a threaded keep-alive load client with {args.conns}
connections in another, sending absolute-form requests over {_SAMPLE:,} URLs spread across the
snapshot (all exact matches) for {args.duration:.0f} s after a 1 s warm-up; one run per configuration.
The mapped index (the default for large snapshots) searches sorted, memory-mapped files and builds
no per-capture Python objects; the in-memory index is the previous way. "Frozen" is the default:
once the match index is built, `gc.freeze()` moves it into the collector's permanent generation, so
full collections no longer walk it (`ego2web_replay/replay/gcfreeze.py`).
The target (issue 16): p99 within 2x of p50 at every size. The load client shares the machine's
two cores with the server, so its own scheduling adds to every figure; with the load average
above the core count, p99 measures the scheduler as much as the server: compare sizes within one run.

{markdown_table(header, rows)}

Machine and versions:
{machine_lines(info)}
"""
    if not args.no_write:
        update_section("tail", body)
        print("BENCHMARKS.md: section 'tail' updated")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
