"""Where a cold first byte's wall time goes: the recorder and the thinnest Python forwarder, stamped.

    python benchmarks/trace_wall.py [--size BYTES] [--rounds N] [--pin] [--against DIR]

The origin of ``bench_record.py --stream`` (``_recordstream.py``), our recorder (the fast engine, a
real zst snapshot) and ``_pyfloor.py`` each in a process of its own, with ``time.perf_counter`` stamps
(one clock for every process on Linux) at: the proxy has the client's bytes (``a_in``), the request
is written upstream (``b_sent``), the origin's first bytes arrive (``c_back``), and, in the recorder,
the streamed answer is handed to the client's connection (``d_out``) and its head written
(``e_written``); ``client`` is when the client's first ``recv`` returns. Each fetch is a fresh client
connection after 50 ms of quiet, as in ``--stream``, both proxies in turn each round. Prints the
median of each stamp (microseconds from the client's send) per proxy: wall time, so what a CPU
profile misses shows, such as a client woken on the proxy's CPU and waiting there while the proxy
goes on working (``recorder/front.py``, ``_let_the_client_read``). A direct fetch from the origin
each round gives the scale (``direct``: its ``client`` only). ``--pin`` pins as ``bench_record.py
--stream-pin`` does. ``--against DIR`` stamps a second recorder, the package as it is in ``DIR`` (a
checkout of another commit: ``git worktree add /tmp/before <commit>``), in the same rounds
(``against``), the order of the proxies shuffled each round: a change's cost or saving step by step,
where a whole first byte varies by more than that from run to run (BENCHMARKS.md, "Less before the
head"). Writes nothing; loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

B = Path(__file__).resolve().parent
sys.path[:0] = [str(B), str(B.parent)]

from _common import free_port, wait_port  # noqa: E402
from _recordstream import _ORIGIN, pin_tree  # noqa: E402

#: the stamps both proxies' processes take (``st``: the first time of each step since the last ``get``)
STAMP = r'''
import time
st = {}
def stamp(cls, name, key, after=False):
    inner = getattr(cls, name)
    def w(*a, **k):
        if not after: st.setdefault(key, time.perf_counter())
        r = inner(*a, **k)
        if after: st.setdefault(key, time.perf_counter())
        return r
    setattr(cls, name, w)
'''

REC = r'''
import sys, time, json
from pathlib import Path
sys.path[:0] = [sys.argv[2], sys.argv[3]]  # the benchmarks, and the tree whose package is stamped
from _common import RecordingProxy
from ego2web_replay.recorder import upstream, front
from ego2web_replay.wire import conn, h1
import asyncio
stamp(conn._Conn, "data_received", "a_in")
stamp(asyncio.StreamWriter, "write", "b_sent", after=True)
stamp(upstream._LinkProtocol, "data_received", "c_back")
stamp(h1.H1Handler, "_stream", "d_out", after=False)
stamp(conn._Conn, "write", "e_written", after=True)
with RecordingProxy(Path(sys.argv[1]), "w", "zst") as rec:
    print(rec.proxy.port, flush=True)
    for line in sys.stdin:
        if line.strip() != "get": break
        print(json.dumps(st), flush=True); st.clear()
'''
FLOOR = r'''
import sys, time, json, threading
sys.path[:0] = [sys.argv[1], str(__import__("pathlib").Path(sys.argv[1]).parent)]
import _pyfloor as f
stamp(f.Client, "data_received", "a_in")
stamp(f.Client, "_send", "b_sent", after=True)
stamp(f.Upstream, "data_received", "c_back")
def reader():
    for line in sys.stdin:
        print(json.dumps(st), flush=True); st.clear()
threading.Thread(target=reader, daemon=True).start()
f.main()
'''


def fetch(port: int, target: str, host: str) -> tuple[float, float]:
    """One GET on a fresh connection: (when it was sent, when the first bytes came back), read whole."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        t0 = time.perf_counter()
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        s.recv(65536)
        t1 = time.perf_counter()
        while s.recv(65536):
            pass
    return t0, t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="response size in bytes (default 1024)")
    ap.add_argument("--rounds", type=int, default=80, help="fetches per proxy (after 3 warm-up rounds)")
    ap.add_argument("--pin", action="store_true",
                    help="the origin on CPU 1, the proxies and the client on CPU 0 (bench_record.py --stream-pin)")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="also stamp the recorder of the ego2web_replay package in DIR (a checkout of another "
                         "commit), in the same rounds")
    args = ap.parse_args()
    if args.against is not None and not (args.against / "ego2web_replay" / "recorder" / "front.py").is_file():
        raise SystemExit(f"trace_wall.py: no ego2web_replay package in {args.against}")
    tmp = Path(tempfile.mkdtemp(prefix="ego2web-wall-"))
    op = free_port()
    origin = subprocess.Popen([sys.executable, "-c", _ORIGIN, str(op)])

    def recorder(name: str, tree: Path) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", STAMP + REC, str(tmp / name), str(B), str(tree)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    procs = {"ours": recorder("ours", B.parent)}
    if args.against is not None:
        procs["against"] = recorder("against", args.against.resolve())
    procs["pyfloor"] = subprocess.Popen([sys.executable, "-c", STAMP + FLOOR, str(B)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
    try:
        wait_port(op)
        ports = {}
        for name, p in procs.items():
            assert p.stdout is not None
            ports[name] = int(p.stdout.readline().split()[0])
        if args.pin:
            pin_tree(origin.pid, {1})
            for p in procs.values():
                pin_tree(p.pid, {0})
            os.sched_setaffinity(0, {0})
        host = f"127.0.0.1:{op}"
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in [*procs, "direct"]}
        order = list(procs)
        shuffle = random.Random(0).shuffle

        def stamps(p: subprocess.Popen[str]) -> dict[str, float]:
            assert p.stdin and p.stdout
            p.stdin.write("get\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())

        for i in range(args.rounds + 3):
            shuffle(order)  # no proxy always first after the direct fetch
            for name in order:
                proc = procs[name]
                time.sleep(0.05)
                stamps(proc)  # what came before is dropped
                t0, t1 = fetch(ports[name], f"http://{host}/big/{args.size}?i={i}", host)
                time.sleep(0.05)
                got = stamps(proc)
                if i >= 3:
                    row = {k: (v - t0) * 1e6 for k, v in got.items()}
                    row["client"] = (t1 - t0) * 1e6
                    rows[name].append(row)
            time.sleep(0.05)
            t0, t1 = fetch(op, f"/big/{args.size}?d={i}", host)  # the origin itself, for scale
            if i >= 3:
                rows["direct"].append({"client": (t1 - t0) * 1e6})
        print(f"{args.size} bytes, {args.rounds} rounds; microseconds from the client's send, medians")
        for name, got_rows in rows.items():
            keys = sorted({k for r in got_rows for k in r},
                          key=lambda k: statistics.median([r[k] for r in got_rows if k in r]))
            print(f"{name:>8}  " + "  ".join(
                f"{k}={statistics.median([r[k] for r in got_rows if k in r]):.0f}" for k in keys))
        recorders = [p for name, p in procs.items() if name != "pyfloor"]
        for p in recorders:
            assert p.stdin is not None
            p.stdin.write("stop\n")
            p.stdin.flush()
        for p in recorders:
            p.wait(60)
    finally:
        for p in (*procs.values(), origin):
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
