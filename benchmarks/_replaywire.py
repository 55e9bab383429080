"""``bench_replay.py --wire``: CPU per replayed request through the whole fast engine, against the
static server, on the wire and without it.

Two measures on one recorded snapshot (``bench_replay.record_snapshot``):

* **On the wire**: each server in its own process on 127.0.0.1, ``wrk`` sending absolute-form GETs
  over the snapshot's 200 URLs; CPU time (user + system) of the server's process tree over the
  requests it answered, rounds interleaved across servers (each round starting with another),
  medians. Servers: our ``serve`` on uvloop (the default when uvloop is installed), the same on
  asyncio's loop (``EGO2WEB_REPLAY_UVLOOP=0``), ``serve --processes 2``, and the static asyncio server
  of ``_peers.py`` (the same response bytes from a dict: the limit). wrk's own CPU per request, and
  the cores the server and wrk each kept busy over the run (CPU seconds over wall seconds), say who
  had the machine's cores: wrk shares them with the server.
* **In process, no sockets**: the same requests handed straight to a connection's
  ``data_received`` (ours: the fast engine's ``_Conn`` with the replay's ``FrontServer``; static:
  its protocol), the written bytes dropped; ``time.process_time`` per request. This is the Python
  each request costs, apart from the kernel's share (the same two system calls per request, a
  ``recv`` and a ``send``, for both: ``strace -c``), which on a loaded machine moves the first
  measure more than the code does.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _peers
from _common import free_port, machine_lines, markdown_table, median, text_table, update_section

OURS = "ego2web-replay serve (uvloop)"
OURS_ASYNCIO = "ego2web-replay serve (asyncio loop, EGO2WEB_REPLAY_UVLOOP=0)"
OURS2 = "ego2web-replay serve --processes 2 (uvloop)"
STATIC = "static server (limit, asyncio)"


class _Sink:
    """A transport that drops what is written (the in-process measure)."""

    def __init__(self) -> None:
        self.sent = 0

    def write(self, data: bytes) -> None:
        self.sent += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def is_reading(self) -> bool:
        return True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def in_process(snap: Path, urls: list[str], requests: int, rounds: int) -> dict[str, list[float]]:
    """µs of CPU per request handed to ``data_received``, ours and static, ``rounds`` each, interleaved."""
    from ego2web_replay.guard import GuardPolicy
    from ego2web_replay.proxy import project_ca
    from ego2web_replay.replay.front import FrontServer
    from ego2web_replay.replay.session import Replay
    from ego2web_replay.wire.conn import _Conn

    records = _peers.snapshot_responses(snap)
    heads = [f"GET {u} HTTP/1.1\r\nHost: {u.split('/')[2]}\r\nAccept: */*\r\n\r\n".encode() for u in urls]
    out: dict[str, list[float]] = {"ours": [], "static": []}

    async def run() -> None:
        replay = Replay([snap])
        replay.open()
        assert replay.responder is not None
        front = FrontServer(replay.responder, ca=project_ca(), guard=GuardPolicy(mode="loopback"))
        _peers._Static.table = {r.url.encode(): _peers._wire(r) for r in records}
        for _ in range(rounds):
            for name in ("ours", "static"):
                conn: Any = _Conn(front) if name == "ours" else _peers._Static()
                sink = _Sink()
                conn.connection_made(sink)
                for h in heads:  # warm: every capture read and cached
                    conn.data_received(h)
                await asyncio.sleep(0)
                t0 = time.process_time()
                for i in range(requests):
                    conn.data_received(heads[i % len(heads)])
                    if i % 10 == 9:
                        await asyncio.sleep(0)  # the loop's turn (our pacing's end of burst)
                out[name].append((time.process_time() - t0) / requests * 1e6)
                if name == "ours":
                    conn.connection_lost(None)
        replay.stop()

    asyncio.run(run())
    return out


def report(args: Any, info: dict[str, str]) -> None:
    import bench_replay

    from ego2web_replay.wire.loop import loop_name

    tmp = Path(tempfile.mkdtemp(prefix="bench-wire-"))
    snap, _pages = bench_replay.record_snapshot(tmp / "snapshots", args.pages)
    records = _peers.snapshot_responses(snap)
    urls = sorted({r.url for r in records if r.status == 200})
    script = tmp / "urls.lua"
    bench_replay.wrk_script(urls, script)
    loop = loop_name()
    peers = [_peers.ours(snap, free_port(), 3600, tmp / "s1.json", name=OURS),
             _peers.ours(snap, free_port(), 3600, tmp / "s2.json", name=OURS_ASYNCIO),
             _peers.ours(snap, free_port(), 3600, tmp / "s3.json", ["--processes", "2"], name=OURS2),
             _peers.static(snap, free_port())]
    peers[1].env = {"EGO2WEB_REPLAY_UVLOOP": "0"}
    peers[3].name = STATIC
    res: dict[str, list[dict[str, float]]] = {p.name: [] for p in peers}
    try:
        for p in peers:
            p.log = tmp / f"{p.port}.log"
            p.start()
        for p in peers:
            bench_replay.run_wrk(p.port, script, 1, args.threads, args.conns)
        for r in range(args.rounds):
            for p in bench_replay.rotated(peers, r):
                got = bench_replay.run_wrk(p.port, script, args.duration, args.threads, args.conns, pid=p.proc.pid)
                res[p.name].append(got)
                print(f"  wrk {p.name}: {got['rps']:.0f} req/s, {got['cpu_us']:.0f} us CPU/request, "
                      f"non-2xx {got['non2xx']}, socket errors {got['sock_errors']}", flush=True)
    finally:
        for p in peers:
            p.stop()
    loads = _load_average()
    inproc = in_process(snap, urls, args.wire_requests, max(3, args.rounds))
    subprocess.run(["rm", "-rf", str(tmp)], check=False)

    cpu = {n: median([x["cpu_us"] for x in v]) for n, v in res.items()}
    rps = {n: median([x["rps"] for x in v]) for n, v in res.items()}
    errors = {n: sum(x["non2xx"] + x["sock_errors"] for x in v) for n, v in res.items()}
    wrk_cpu = {n: median([x["wrk_cpu_us"] for x in v]) for n, v in res.items()}
    cores = {n: (median([x["server_cores"] for x in v]), median([x["wrk_cores"] for x in v])) for n, v in res.items()}
    header = ["server", "req/s", "CPU µs/request", "per-round CPU µs/request", "CPU / static's", "wrk's CPU µs/request",
              "cores used: server + wrk", "non-2xx + errors"]
    rows = [[n, f"{rps[n]:.0f}", f"{cpu[n]:.1f}", ", ".join(f"{x['cpu_us']:.0f}" for x in res[n]),
             f"{cpu[n] / cpu[STATIC]:.2f}x", f"{wrk_cpu[n]:.1f}", f"{cores[n][0]:.2f} + {cores[n][1]:.2f}", errors[n]]
            for n in res]
    ours_in, static_in = median(inproc["ours"]), median(inproc["static"])
    in_rows = [["ours: `_Conn.data_received` (a head seen before: answered again and logged; `Reply.again`)",
                f"{ours_in:.1f}",
                ", ".join(f"{x:.1f}" for x in inproc["ours"])],
               ["static: `_Static.data_received`", f"{static_in:.1f}", ", ".join(f"{x:.1f}" for x in inproc["static"])]]
    ratio = cpu[OURS] / cpu[STATIC]
    target = [["CPU per request <= 2x the static server's (wire, uvloop)", f"{ratio:.2f}x",
               "met" if ratio <= 2 else "NOT met"],
              ["the same on asyncio's loop", f"{cpu[OURS_ASYNCIO] / cpu[STATIC]:.2f}x", "-"],
              ["uvloop vs asyncio's loop (our CPU per request)", f"{cpu[OURS] / cpu[OURS_ASYNCIO]:.2f}x", "-"],
              ["--processes 2 vs one process (throughput)", f"{rps[OURS2] / rps[OURS]:.2f}x", "-"],
              ["in process, no sockets: ours / static", f"{ours_in / static_in:.1f}x", "-"]]
    print(text_table(header, rows))
    print(text_table(["in process", "CPU µs/request (median)", "rounds"], in_rows))
    print(text_table(["target", "measured", ""], target))
    body = f"""## Replay CPU per request on the wire (`benchmarks/bench_replay.py --wire`)

{(__doc__ or "").strip()}

One snapshot of the local {args.pages}-page site ({len(urls)} distinct 200 URLs). `wrk -t{args.threads}
-c{args.conns} -d{args.duration:.0f}s`, {args.rounds} rounds; in process: {args.wire_requests} requests per round,
{max(3, args.rounds)} rounds. Our loop when uvloop is on: {loop}.

{markdown_table(header, rows)}

In process (no sockets, no kernel):

{markdown_table(["in process", "CPU µs/request (median)", "rounds"], in_rows)}

{markdown_table(["target", "measured", ""], target)}

Machine and versions:
{machine_lines(info, {"load average after the wrk rounds (1/5/15 min)": loads})}
"""
    if not args.no_write:
        update_section("replay-wire", body)
        print("BENCHMARKS.md: section 'replay-wire' updated")
    json.dump({"cpu": cpu, "rps": rps, "in_process": inproc}, sys.stdout)
    print()


def _load_average() -> str:
    with open("/proc/loadavg") as f:
        a, b, c = f.read().split()[:3]
    return f"{a} / {b} / {c}"
