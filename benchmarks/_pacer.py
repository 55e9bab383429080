"""``pacer.c`` as a load client: requests at a set rate, evenly spaced, latency counted from when
each request was due (see the C file's comment). Compiled here on first use (``cc``)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "pacer.c"
BINARY = HERE / "out" / "pacer"


def available() -> bool:
    return BINARY.exists() or shutil.which("cc") is not None


def build() -> Path:
    """The compiled client, rebuilt when the source is newer."""
    if BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["cc", "-O2", "-Wall", "-o", str(BINARY), str(SOURCE)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"cannot compile {SOURCE.name}: {out.stderr.strip()[-300:]}")
    return BINARY


def write_urls(urls: Sequence[str], path: Path) -> Path:
    path.write_text("\n".join(urls) + "\n")
    return path


def run(port: int, urls: Path, duration: float, conns: int, rate: float, warmup: float = 1.0) -> dict[str, float]:
    """One run against the proxy on 127.0.0.1:``port``: latencies in ms (p50, p90, p99, p99.9, max),
    errors, and how many requests left over 1 ms late (the client could not keep the schedule:
    an answer came late, or the client itself got no CPU)."""
    argv = [str(build()), str(port), str(urls), str(conns), f"{rate:g}", f"{duration:g}", f"{warmup:g}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + warmup + 60)
    line = next((x for x in out.stdout.splitlines() if x.startswith("pacer-result ")), None)
    if line is None:
        raise RuntimeError(f"pacer gave no result: {(out.stderr or out.stdout).strip()[-300:]}")
    count, secs, p50, p90, p99, p999, top, errors, late = map(float, line.split()[1:])
    return {"rps": count / secs, "p50": p50 / 1000, "p90": p90 / 1000, "p99": p99 / 1000, "p999": p999 / 1000,
            "max": top / 1000, "count": count, "errors": errors, "late": late, "client_waited": float("nan")}
