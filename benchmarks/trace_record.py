"""Where a first byte goes through the fast recorder: one request's steps, stamped, by response size.

The origin and the client of ``bench_record.py --stream`` (``_recordstream.py``), and the recorder in
a process of its own with ``time.perf_counter`` stamps (one clock for every process on Linux) taken
at each step of the first request it gets after the client asks: connection accepted, request bytes
read, ``RecordFront.reply``, a connection opened upstream (and done), the request sent upstream,
the origin's head read, the head handed to the client's connection; and when a garbage collection
first ran in the fetch, if one did (in the head's window, or later, in the body's). The client notes when it has the first byte. With ``--fine`` the
steps in between are stamped too (the request head parsed, the answer asked for, the upstream fetch
begun, the wait for the origin's head begun, the origin's bytes received, its head parsed, the stream
made) and the loop thread's CPU between each two is printed a step per line: where the head path's
CPU goes, step by step (each stamp adds a few microseconds of its own). Sizes are fetched in the same rounds
(their order alternating), each followed by a direct fetch, every process idle before each fetch.
Prints the median of each stamp (ms from the client's ``connect``) per size; writes nothing. Figures
for BENCHMARKS.md are taken through the lock (``flock /work/notes/bench.lock``), like any benchmark's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from _common import free_port, wait_port  # noqa: E402
from _recordstream import _ORIGIN, _settle, fetch  # noqa: E402

_RECORDER = """
import gc, json, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[2], str(Path(sys.argv[2]).parent)]
from _common import RecordingProxy
from ego2web_replay.recorder import front, upstream
from ego2web_replay.wire import conn, h1
stamps = {}
cpu = {}  # the front thread's CPU time at each step (every step but gc runs on the proxy's loop thread)
def stamp(cls, name, key, after=False):
    inner = getattr(cls, name)
    if after:
        async def wrapped(*a, **k):
            out = await inner(*a, **k)
            stamps.setdefault(key, time.perf_counter())
            cpu.setdefault(key, time.thread_time())
            return out
    else:
        def wrapped(*a, **k):
            stamps.setdefault(key, time.perf_counter())
            cpu.setdefault(key, time.thread_time())
            return inner(*a, **k)
    setattr(cls, name, wrapped)
stamp(conn._Conn, "connection_made", "accepted")
stamp(conn._Conn, "data_received", "read")
stamp(front.RecordFront, "reply", "reply")
stamp(upstream.UpstreamPool, "_open", "open")  # (never after the first round: the connection is kept)
stamp(upstream.UpstreamPool, "_open", "opened", after=True)
import asyncio
stamp(asyncio.StreamWriter, "write", "sent")  # the request's bytes to the origin (only upstream links use streams)
stamp(front.RecordFront, "_answer", "origin head")  # the origin's head read and parsed
stamp(h1.H1Handler, "_stream", "head out")
if sys.argv[3:] == ["fine"]:  # --fine: the steps in between too (each stamp costs a few us of its own)
    stamp(h1.H1Handler, "feed", "feed")
    stamp(h1, "_parse_head", "parse")
    stamp(conn._Conn, "_answer_h1", "answer")
    stamp(upstream.UpstreamPool, "fetch_now", "fetch")
    stamp(upstream._LinkProtocol, "data_received", "origin bytes")
    stamp(upstream, "parse_response_head", "parse head")
    stamp(front.RecordFront, "_streamed", "streamed")
gc.callbacks.append(lambda phase, info: stamps.setdefault("gc", time.perf_counter()) if phase == "start" else None)
with RecordingProxy(Path(sys.argv[1]), "trace", "zst") as rec:
    print(rec.proxy.port, flush=True)
    for line in sys.stdin:
        if line.strip() != "get":
            break
        print(json.dumps({"wall": stamps, "cpu": cpu}), flush=True)
        stamps.clear()
        cpu.clear()
"""

STEPS = ["accepted", "read", "reply", "open", "opened", "sent", "origin head", "head out", "gc"]
CPU_STEPS = ["read", "reply", "sent", "origin head", "head out"]  # the front thread's CPU between these
FINE_STEPS = ["read", "feed", "parse", "answer", "reply", "fetch", "sent", "origin bytes", "parse head",
              "origin head", "streamed", "head out"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,100", help="response sizes in MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=12, help="rounds (after one warm-up round)")
    ap.add_argument("--fine", action="store_true",
                    help="stamp the steps in between too (parse, fetch, await, the origin's bytes, the stream) and "
                         "print the loop thread's CPU between each two, a step per line")
    args = ap.parse_args()
    sizes = [int(float(s) * 2**20) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="ego2web-trace-"))
    origin_port = free_port()
    origin = subprocess.Popen([sys.executable, "-c", _ORIGIN, str(origin_port)])
    rec = subprocess.Popen([sys.executable, "-c", _RECORDER, str(tmp / "rec"), str(Path(__file__).resolve().parent),
                            *(["fine"] if args.fine else [])],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rows: dict[int, list[dict[str, float]]] = {s: [] for s in sizes}
    cpus: dict[int, list[dict[str, float]]] = {s: [] for s in sizes}
    try:
        wait_port(origin_port)
        assert rec.stdin is not None and rec.stdout is not None
        port = int(rec.stdout.readline())

        def stamps() -> dict[str, dict[str, float]]:
            assert rec.stdin is not None and rec.stdout is not None
            rec.stdin.write("get\n")
            rec.stdin.flush()
            return json.loads(rec.stdout.readline())

        host = f"127.0.0.1:{origin_port}"
        for rnd in range(args.reps + 1):
            for size in sizes if rnd % 2 == 0 else sizes[::-1]:
                _settle([rec.pid, origin.pid])
                stamps()  # what came before this fetch (the previous record's write) is dropped
                t0 = time.perf_counter()
                first, *_ = fetch(port, f"http://{host}/big/{size}?r={rnd}", host, size)
                got = stamps()
                row = {k: (v - t0) * 1000 for k, v in got["wall"].items()}
                row["client has it"] = first
                _settle([rec.pid, origin.pid])
                row["direct"], *_ = fetch(origin_port, f"/big/{size}?d={rnd}", host, size)
                if rnd:
                    rows[size].append(row)
                    cpus[size].append(got["cpu"])
        rec.stdin.write("stop\n")
        rec.stdin.flush()
        rec.wait(timeout=300)
    finally:
        if rec.poll() is None:
            rec.kill()
        origin.kill()
        origin.wait()
    keys = [*STEPS, "client has it", "direct"]
    print("ms from the client's connect, medians (-: the step never ran)")
    print(f"{'response':>9} " + " ".join(f"{k:>13}" for k in keys))
    for size in sizes:
        cells = []
        for k in keys:
            got = [r[k] for r in rows[size] if k in r]
            cells.append(f"{statistics.median(got):13.2f}" if got else f"{'-':>13}")
        print(f"{size / 2**20:>5g} MiB " + " ".join(cells))
        direct = [r["direct"] for r in rows[size]]
        print(f"{'':>9} direct first byte: {min(direct):.2f}-{max(direct):.2f} ms; gc in "
              f"{sum('gc' in r for r in rows[size])} of {len(rows[size])} rounds")
    print("the proxy's loop thread, CPU us between steps, medians (load-independent, unlike the wall times)")
    if args.fine:
        print_fine(sizes, cpus)
        return
    pairs = list(itertools.pairwise(CPU_STEPS)) + [(CPU_STEPS[0], CPU_STEPS[-1])]
    print(f"{'response':>9} " + " ".join(f"{a + ' > ' + b:>24}" for a, b in pairs))
    for size in sizes:
        cells = []
        for a, b in pairs:
            got = [(c[b] - c[a]) * 1e6 for c in cpus[size] if a in c and b in c]
            cells.append(f"{statistics.median(got):24.0f}" if got else f"{'-':>24}")
        print(f"{size / 2**20:>5g} MiB " + " ".join(cells))


def print_fine(sizes: list[int], cpus: dict[int, list[dict[str, float]]]) -> None:
    """The loop thread's CPU between each two fine steps (medians, us), a line per step, a column per size."""
    print(f"{'step':>32} " + " ".join(f"{s / 2**20:>10g} MiB" for s in sizes))
    for a, b in [*itertools.pairwise(FINE_STEPS), (FINE_STEPS[0], FINE_STEPS[-1])]:
        cells = []
        for size in sizes:
            got = [(c[b] - c[a]) * 1e6 for c in cpus[size] if a in c and b in c]
            cells.append(f"{statistics.median(got):14.0f}" if got else f"{'-':>14}")
        print(f"{a + ' > ' + b:>32} " + " ".join(cells))


if __name__ == "__main__":
    main()
