"""``bench_record.py --stream``: time to first byte and memory of the recorder against the size of one
response, beside a direct fetch and warcprox.

An origin in its own process on 127.0.0.1 answers ``/big/<bytes>`` with that many random bytes (a
Content-Length, written in 64 KiB pieces, never held whole; random, as the media files this large are
incompressible). Our recorder (the fast engine, writing a
real zst snapshot, guard in loopback mode) runs in a process of its own, so its memory is its own:
the peak resident set (``VmHWM``, reset through ``/proc/<pid>/clear_refs`` before each fetch) less
the resident set before the fetch is what one response cost it. warcprox runs as in the page-load
test (``_warcprox.py``), measured the same way. The client (this process) sends one GET with a raw
socket, notes when the first byte of the answer arrives and when the body is complete, and drops
the bytes as they come (every response is read whole, so each proxy records it complete). Before
each fetch the client waits until both proxies have been idle (no CPU time) for 50 ms, so a first
byte is not timed against the writing of the previous record.
Fetches interleaved per size and round, the order rotating from round to round (direct, ours,
warcprox; then ours, warcprox, direct; ...) so that the load of other processes drifts onto every
mode alike. A first byte arrives in a few ms, about a scheduler slice on a loaded machine, so one
fetch says little: the TTFB ratios are the median of the per-round ratios (ours over direct, ours
over warcprox, from fetches made moments apart) with a 95% bootstrap interval of that median.
"""

from __future__ import annotations

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


def fetch(port: int, target: str, host: str, size: int) -> tuple[float, float]:
    """GET ``target`` from 127.0.0.1:``port``; (ms to the first byte of the answer, ms to its last byte)."""
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
        return (t1 - t0) * 1000, (time.perf_counter() - t0) * 1000


def measure(tmp: Path, sizes: list[int], reps: int) -> dict[Any, Any]:
    """Per size: TTFB and total (ms, medians) direct, ours, warcprox; ours' TTFB ratios to direct and to
    warcprox (median of the per-round ratios, 95% interval); peak RSS growth (MiB) of ours and warcprox."""
    from _common import free_port, median, ratio_ci, wait_port
    from _warcprox import Warcprox

    bench_dir = str(Path(__file__).resolve().parent)
    origin_port = free_port()
    origin = subprocess.Popen([sys.executable, "-c", _ORIGIN, str(origin_port)])
    rec = subprocess.Popen([sys.executable, "-c", _RECORDER, str(tmp / "ours"), bench_dir], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    out: dict[Any, Any] = {}  # sizes (int) and "warcprox_version"
    try:
        wait_port(origin_port)
        assert rec.stdout is not None and rec.stdin is not None
        ours_port = int(rec.stdout.readline())
        with Warcprox(tmp / "warcprox", free_port()) as peer:
            out["warcprox_version"] = peer.version
            assert peer.proc is not None
            pids = {"ours": rec.pid, "warcprox": peer.proc.pid}
            ports = {"direct": origin_port, "ours": ours_port, "warcprox": peer.port}
            modes = list(ports)
            for size in sizes:
                times: dict[str, list[tuple[float, float]]] = {m: [] for m in ports}
                grown: dict[str, list[float]] = {m: [] for m in pids}
                for rep in range(reps + 1):  # the first round warms up (connections, caches): not counted
                    for mode in modes[rep % 3:] + modes[:rep % 3]:
                        url = f"http://127.0.0.1:{origin_port}/big/{size}?r={rep}"  # a new URL each time
                        target = url if mode != "direct" else url.split(str(origin_port), 1)[1]
                        _settle(list(pids.values()))
                        pid = pids.get(mode)
                        if pid is not None:
                            _reset_peak(pid)
                            before = _status(pid, "VmRSS")
                        got = fetch(ports[mode], target, f"127.0.0.1:{origin_port}", size)
                        if pid is not None:
                            _settle([pid])  # the record written: its cost is in the peak
                        if rep == 0:
                            continue
                        times[mode].append(got)
                        if pid is not None:
                            grown[mode].append((_status(pid, "VmHWM") - before) / 1024)
                ttfb = {m: [t[0] for t in v] for m, v in times.items()}
                out[size] = {"ttfb": {m: median(v) for m, v in ttfb.items()},
                             "ratio": {m: ratio_ci(ttfb["ours"], ttfb[m]) for m in ("direct", "warcprox")},
                             "total": {m: median([t[1] for t in v]) for m, v in times.items()},
                             "rss": {m: max(v) for m, v in grown.items()}}
                print(f"  {size / 2**20:.0f} MiB: {out[size]}", flush=True)
        rec.stdin.write("stop\n")
        rec.stdin.flush()
        rec.wait(timeout=300)
    finally:
        if rec.poll() is None:
            rec.kill()
        origin.kill()
        origin.wait()
    return out


def ratio_text(r: tuple[float, float, float]) -> str:
    """(median, low, high) as ``1.05x [0.98-1.12]``."""
    return f"{r[0]:.2f}x [{r[1]:.2f}-{r[2]:.2f}]"


def rows(res: dict[Any, Any], sizes: list[int]) -> tuple[list[str], list[list[Any]]]:
    header = ["response", "TTFB direct / ours / warcprox (medians)", "TTFB ours / direct (95% interval)",
              "TTFB ours / warcprox (95% interval)", "whole body: direct / ours / warcprox",
              "peak RSS growth: ours", "peak RSS growth: warcprox"]
    out = []
    for size in sizes:
        r = res[size]
        t, w, m = r["ttfb"], r["total"], r["rss"]
        out.append([f"{size / 2**20:.0f} MiB", f"{t['direct']:.2f} / {t['ours']:.2f} / {t['warcprox']:.2f} ms",
                    ratio_text(r["ratio"]["direct"]), ratio_text(r["ratio"]["warcprox"]),
                    f"{w['direct']:.0f} / {w['ours']:.0f} / {w['warcprox']:.0f} ms",
                    f"{m['ours']:.1f} MiB", f"{m['warcprox']:.1f} MiB"])
    return header, out
