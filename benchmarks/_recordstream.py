"""``bench_record.py --stream``: time to first byte and memory of the recorder against the size of one
response, beside a direct fetch, warcprox, and two floors of a proxy hop: nginx and the thinnest
Python forwarder.

An origin in its own process on 127.0.0.1 answers ``/big/<bytes>`` with that many random bytes (a
Content-Length, written in 64 KiB pieces, never held whole; random, as the media files this large are
incompressible). Our recorder (the fast engine, writing a
real zst snapshot, guard in loopback mode) runs in a process of its own, so its memory is its own:
the peak resident set (``VmHWM``, reset through ``/proc/<pid>/clear_refs`` before each fetch) less
the resident set before the fetch is what one response cost it. warcprox runs as in the page-load
test (``_warcprox.py``), measured the same way. The floors record nothing: nginx (``NginxForward``:
one process, a plain-HTTP forward proxy with ``proxy_pass`` to the origin through a keepalive
upstream pool, ``proxy_buffering off``) is what a proxy hop costs in C; ``_pyfloor.py`` (asyncio
protocols on the loop our proxies use, a kept upstream connection, bytes relayed both ways,
``TCP_NODELAY``) is the least any Python proxy can do. The client (this process) sends one GET
with a raw socket (absolute-form to every proxy), notes when the first byte of the answer arrives
and when the body is complete, and drops the bytes as they come (every response is read whole, so
each proxy records it complete). Before each fetch the client waits until every proxy has been idle
(no CPU time) for 50 ms, so a first byte is not timed against the writing of the previous record.
Every round fetches every size in every mode, the order of those (size, mode) fetches rotating by
one from round to round (``round_order``), so that the load of other processes drifts onto every
size and mode alike. A first byte arrives in about a millisecond, less than a scheduler slice on a
loaded machine, so one fetch says little: the ratios are the median of the per-round ratios (two
modes' fetches of one size in one round, made seconds apart at most) with a 95% bootstrap interval
of that median (``_common.ratio_ci``). The first byte is also timed from before the client's
``connect()`` (``TTFB from connect()``): a proxy on the client's CPU accepts the connection either
before the client sends (when the scheduler lets it preempt the client in ``connect``) or after, and
only the second puts the accept's work between the send and the first byte; timed from the connect,
the accept is always inside, for every mode (BENCHMARKS.md, "Less before the head").
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_ORIGIN = """
import sys, http.server, socketserver, random
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = int(self.path.split("?")[0].rsplit("/", 1)[1])
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        left = n
        while left > 0:
            piece = random.randbytes(min(left, 65536))  # incompressible, like the media that is this large
            self.wfile.write(piece)
            left -= len(piece)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

_RECORDER = """
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[2]]
from _common import RecordingProxy
with RecordingProxy(Path(sys.argv[1]), "stream", "zst") as rec:
    print(rec.proxy.port, flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
"""


def _status(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _cpu_ticks(pid: int) -> int:
    """User + system CPU time of ``pid`` so far, in clock ticks (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _settle(pids: list[int], timeout: float = 60.0) -> None:
    """Wait until none of ``pids`` used CPU for 50 ms: the proxies have written the last record and
    idle, so a fetch's first byte is not timed against the previous fetch's writing."""
    end = time.monotonic() + timeout
    ticks = [_cpu_ticks(p) for p in pids]
    while time.monotonic() < end:
        time.sleep(0.05)
        now = [_cpu_ticks(p) for p in pids]
        if now == ticks:
            return
        ticks = now


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM back to the current resident set


def fetch(port: int, target: str, host: str, size: int) -> tuple[float, float, float]:
    """GET ``target`` from 127.0.0.1:``port``; (ms from the request's send to the first byte of the answer,
    ms from the send to its last byte, ms from before ``connect()`` to the first byte)."""
    tc = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        t0 = time.perf_counter()
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        first = s.recv(65536)
        t1 = time.perf_counter()
        head, _, rest = first.partition(b"\r\n\r\n")
        while b"\r\n\r\n" not in first:
            more = s.recv(65536)
            if not more:
                raise RuntimeError(f"no complete head from port {port}")
            first += more
            head, _, rest = first.partition(b"\r\n\r\n")
        got = len(rest)
        while got < size:
            more = s.recv(1 << 20)
            if not more:
                raise RuntimeError(f"port {port}: the body stopped at {got} of {size} bytes")
            got += len(more)
        return (t1 - t0) * 1000, (time.perf_counter() - t0) * 1000, (t1 - tc) * 1000


class NginxForward:
    """nginx as a plain-HTTP forward proxy to the origin: the floor of a proxy hop in C.

    One process (``master_process off``, one worker, ``daemon off``), run as the invoking user with its
    own prefix, conf, pid, logs and temp paths in ``folder``, so nothing of the system's nginx is used.
    The client sends it the absolute-form request it sends our recorder; ``proxy_pass`` to an
    ``upstream`` of the origin's IP literal with a keepalive pool (HTTP/1.1, ``Connection`` cleared
    upstream), ``proxy_buffering off`` so each piece of the body goes on as it comes. An IP literal
    needs no resolver and the conf has none (a name would fail at start); a request for another host
    is answered 403 by nginx, never forwarded.
    """

    def __init__(self, folder: Path, origin_port: int) -> None:
        from _common import free_port

        self.dir, self.port = folder, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True)
        temps = "\n".join(f"  {k}_temp_path {folder}/{k}_temp;" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (folder / "nginx.conf").write_text(f"""daemon off;
master_process off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
{temps}
  upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 8; }}
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      if ($host != "127.0.0.1") {{ return 403; }}
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
    }}
  }}
}}
""")

    def __enter__(self) -> NginxForward:
        from _common import wait_port

        with open(self.dir / "stderr.log", "wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")],
                                         stdout=subprocess.DEVNULL, stderr=log)
        wait_port(self.port, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)

    def errors(self) -> str:
        """What nginx logged at ``error`` level or worse (nothing, in a clean run)."""
        log = self.dir / "error.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return "\n".join(x for x in lines if any(f"[{lvl}]" in x for lvl in ("error", "crit", "alert", "emerg")))

    @staticmethod
    def version() -> str:
        out = subprocess.run([NGINX, "-v"], capture_output=True, text=True)
        return (out.stderr or out.stdout).strip().replace("nginx version: ", "")


class PyFloor:
    """``_pyfloor.py`` in a process of its own: the thinnest Python forwarder, no recording."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "_pyfloor.py")],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        port, self.loop = self.proc.stdout.readline().split(" ", 1)
        self.port, self.loop = int(port), self.loop.strip()

    def __enter__(self) -> PyFloor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
MODES = ("direct", "ours", "warcprox", "nginx", "pyfloor")
RATIOS = (("ours", "direct"), ("nginx", "direct"), ("pyfloor", "direct"), ("ours", "nginx"), ("ours", "pyfloor"),
          ("ours", "warcprox"))


def round_order(sizes: list[int], rnd: int) -> list[tuple[int, str]]:
    """Round ``rnd``'s fetches: every size in every mode, the whole list rotated by one per round, so
    over ``len(sizes) * len(MODES)`` rounds each (size, mode) takes every place in the order."""
    pairs = [(size, mode) for size in sizes for mode in MODES]
    k = rnd % len(pairs)
    return pairs[k:] + pairs[:k]


def pin_tree(pid: int, cpus: set[int]) -> int:
    """Pin every thread of ``pid`` and of its descendants to ``cpus`` (threads and processes made later
    inherit it from their maker); how many threads were pinned."""
    pinned = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            pinned += 1
        except (ProcessLookupError, FileNotFoundError):
            continue  # a thread that ended meanwhile
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:
            children = []
        for child in children:
            pinned += pin_tree(int(child), cpus)
    return pinned


def measure(tmp: Path, sizes: list[int], reps: int, pin: bool = False) -> dict[Any, Any]:
    """Per size: TTFB and total (ms, medians) of every mode; the TTFB ratios of ``RATIOS`` (median of the
    per-round ratios, 95% interval) and whole-body ratios; peak RSS growth (MiB) of ours and warcprox.
    Every round fetches every size in every mode (``round_order``). ``pin``: the origin on CPU 1, every
    proxy and this client on CPU 0 (the origin's work never shares a core with a proxy's, as a remote
    origin's would not); restored for this process at the end."""
    from _common import free_port, median, ratio_ci, wait_port
    from _warcprox import Warcprox

    bench_dir = str(Path(__file__).resolve().parent)
    origin_port = free_port()
    origin = subprocess.Popen([sys.executable, "-c", _ORIGIN, str(origin_port)])
    rec = subprocess.Popen([sys.executable, "-c", _RECORDER, str(tmp / "ours"), bench_dir], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    out: dict[Any, Any] = {}  # sizes (int) and "versions"
    try:
        wait_port(origin_port)
        assert rec.stdin is not None and rec.stdout is not None
        ours_port = int(rec.stdout.readline())
        with Warcprox(tmp / "warcprox", free_port()) as peer, NginxForward(tmp / "nginx", origin_port) as ngx, \
                PyFloor() as floor:
            out["versions"] = {"warcprox": peer.version, "nginx": NginxForward.version(), "pyfloor": floor.loop}
            assert peer.proc is not None and ngx.proc is not None
            pids = {"ours": rec.pid, "warcprox": peer.proc.pid, "nginx": ngx.proc.pid, "pyfloor": floor.proc.pid}
            measured = {"ours", "warcprox"}  # whose memory is reported
            if pin:
                if (os.cpu_count() or 1) < 2:
                    raise SystemExit("--stream-pin needs two CPUs (the origin gets one of its own)")
                pin_tree(origin.pid, {1})
                for p in pids.values():
                    pin_tree(p, {0})
                os.sched_setaffinity(0, {0})
            ports = {"direct": origin_port, "ours": ours_port, "warcprox": peer.port, "nginx": ngx.port,
                     "pyfloor": floor.port}
            times: dict[int, dict[str, list[tuple[float, float, float]]]] = {s: {m: [] for m in MODES} for s in sizes}
            grown: dict[int, dict[str, list[float]]] = {s: {m: [] for m in measured} for s in sizes}
            for rnd in range(reps + 1):  # the first round warms up (connections, caches): not counted
                for size, mode in round_order(sizes, rnd):
                    url = f"http://127.0.0.1:{origin_port}/big/{size}?r={rnd}"  # a new URL each time
                    target = url if mode != "direct" else url.split(str(origin_port), 1)[1]
                    _settle(list(pids.values()))
                    pid = pids[mode] if mode in measured else None
                    if pid is not None:
                        _reset_peak(pid)
                        before = _status(pid, "VmRSS")
                    got = fetch(ports[mode], target, f"127.0.0.1:{origin_port}", size)
                    if pid is not None:
                        _settle([pid])  # the record written: its cost is in the peak
                    if rnd == 0:
                        continue
                    times[size][mode].append(got)
                    if pid is not None:
                        grown[size][mode].append((_status(pid, "VmHWM") - before) / 1024)
                if rnd:
                    print(f"  round {rnd}/{reps}: " + ", ".join(
                        f"{s / 2**20:.4g} MiB {' '.join(f'{m} {times[s][m][-1][0]:.2f}' for m in MODES)}" for s in sizes),
                        flush=True)
            bad = ngx.errors()
            if bad:
                raise RuntimeError(f"nginx logged errors:\n{bad}")
        for size in sizes:
            ttfb = {m: [t[0] for t in v] for m, v in times[size].items()}
            body = {m: [t[1] for t in v] for m, v in times[size].items()}
            connect = {m: [t[2] for t in v] for m, v in times[size].items()}
            out[size] = {"ttfb": {m: median(v) for m, v in ttfb.items()},
                         "ratio": {f"{a}/{b}": ratio_ci(ttfb[a], ttfb[b]) for a, b in RATIOS},
                         "connect_ratio": {f"{a}/{b}": ratio_ci(connect[a], connect[b]) for a, b in RATIOS},
                         "total": {m: median(v) for m, v in body.items()},
                         "total_ratio": {f"{a}/{b}": ratio_ci(body[a], body[b]) for a, b in RATIOS},
                         "rss": {m: max(v) for m, v in grown[size].items()}}
        rec.stdin.write("stop\n")
        rec.stdin.flush()
        rec.wait(timeout=300)
    finally:
        if pin:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        if rec.poll() is None:
            rec.kill()
        origin.kill()
        origin.wait()
    return out


def ratio_text(r: tuple[float, float, float]) -> str:
    """(median, low, high) as ``1.05x [0.98-1.12]``."""
    return f"{r[0]:.2f}x [{r[1]:.2f}-{r[2]:.2f}]"


def rows(res: dict[Any, Any], sizes: list[int]) -> tuple[list[str], list[list[Any]], list[str], list[list[Any]]]:
    """Two tables: the medians per mode (TTFB, whole body, memory), and the per-round ratios."""
    names = " / ".join(MODES)
    header = ["response", f"TTFB {names} (medians)", f"whole body {names}", "peak RSS growth: ours",
              "peak RSS growth: warcprox"]
    ratio_header = ["response", "measure", *(f"{a} / {b}" for a, b in RATIOS)]
    out, ratios = [], []
    for size in sizes:
        r = res[size]
        t, w, m = r["ttfb"], r["total"], r["rss"]
        label = f"{size / 2**20:.4g} MiB"
        out.append([label, " / ".join(f"{t[x]:.2f}" for x in MODES) + " ms",
                    " / ".join(f"{w[x]:.0f}" for x in MODES) + " ms", f"{m['ours']:.1f} MiB", f"{m['warcprox']:.1f} MiB"])
        ratios.append([label, "TTFB", *(ratio_text(r["ratio"][f"{a}/{b}"]) for a, b in RATIOS)])
        ratios.append([label, "TTFB from connect()", *(ratio_text(r["connect_ratio"][f"{a}/{b}"]) for a, b in RATIOS)])
        ratios.append([label, "whole body", *(ratio_text(r["total_ratio"][f"{a}/{b}"]) for a, b in RATIOS)])
    return header, out, ratio_header, ratios
