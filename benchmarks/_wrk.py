"""``wrk`` as a load client that adds no tail of its own: C, one event loop per thread, latencies in
an HDR histogram.

Requests go to a proxy in absolute form (``GET http://host/path HTTP/1.1`` with that host's
``Host``), cycling over a list of URLs; the Lua script builds every request once, up front, and
prints the percentiles in one parseable line when the run ends.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

_SCRIPT = """local urls = {
%s
}
local requests = {}
for k, u in ipairs(urls) do
  local host = string.match(u, "^https?://([^/]+)")
  requests[k] = "GET " .. u .. " HTTP/1.1\\r\\nHost: " .. host .. "\\r\\nAccept: */*\\r\\n\\r\\n"
end
local i = 0
request = function()
  i = i %% #requests + 1
  return requests[i]
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk-result %%.0f %%.0f %%.1f %%.1f %%.1f %%.1f %%.0f\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max,
    e.connect + e.read + e.write + e.timeout + e.status))
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def version() -> str:
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout + out.stderr).split("Copyright")[0].strip() or "unknown"


def write_script(urls: Sequence[str], path: Path, delay_ms: float = 0.0) -> Path:
    """A Lua script for :func:`run` that cycles over ``urls`` (absolute, sent through the proxy).

    ``delay_ms``: each connection waits this long after an answer before it sends its next request
    (wrk's ``delay`` hook; the wait is not counted in the latency), so the load is paced below what
    the server can take instead of saturating it.
    """
    text = _SCRIPT % ",\n".join(json.dumps(u) for u in urls)
    if delay_ms > 0:
        text += f"delay = function()\n  return {delay_ms:g}\nend\n"
    path.write_text(text)
    return path


def cpu_wait(pid: int) -> float:
    """Seconds every thread of ``pid`` has spent so far runnable but waiting for a CPU (schedstat)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(task.read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return total


def run(port: int, script: Path, duration: float, conns: int, threads: int = 1) -> dict[str, float]:
    """One wrk run against 127.0.0.1:``port``: requests/s, p50/p99/p99.9/max latency (ms), errors
    (socket errors and statuses other than 2xx/3xx), and how long wrk itself waited for a CPU
    (ms per second of the run, sampled until its last tenth of a second)."""
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{max(1, round(duration))}s", "--timeout", "5s", "-s", str(script),
            f"http://127.0.0.1:{port}"]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waited = 0.0
    while proc.poll() is None and time.monotonic() - t0 < duration + 60:
        waited = max(waited, cpu_wait(proc.pid))
        time.sleep(0.1)
    stdout, stderr = proc.communicate(timeout=60)
    m = re.search(r"^wrk-result (.+)$", stdout, re.M)
    if m is None:
        raise RuntimeError(f"wrk gave no result: {(stderr or stdout).strip()[-300:]}")
    count, micros, p50, p99, p999, top, errors = map(float, m.group(1).split())
    return {"rps": count / (micros / 1e6), "p50": p50 / 1000, "p99": p99 / 1000, "p999": p999 / 1000,
            "max": top / 1000, "count": count, "errors": errors, "client_waited": waited / (micros / 1e6) * 1000}
