"""The replay peers of ``bench_replay.py``: our ``serve``, pywb, mitmproxy ``--server-replay`` and a
plain static server, each started as its own process on 127.0.0.1, all serving one snapshot.

Peers are installed from PyPI into ``benchmarks/.venvs/<name>`` (git-ignored) on first use.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import ROOT, wait_port

VENVS = ROOT / "benchmarks" / ".venvs"
PYTHONS = ("/root/.pyenv/versions/3.12.1/bin/python", "/root/.pyenv/versions/3.11.7/bin/python")
HOP = {"transfer-encoding", "connection", "keep-alive", "content-length", "proxy-connection"}


@dataclass
class Recorded:
    url: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    payload: bytes


def snapshot_responses(path: Path) -> list[Recorded]:
    """Every GET response of a snapshot (revisits resolved), in index order."""
    from ego2web_replay.snapshots.snapshot import Snapshot

    snap = Snapshot.open(path)
    out = []
    for e in snap.entries():
        if e.method != "GET" or e.record_type not in ("response", "revisit"):
            continue
        r = snap.resolve(e)
        if r.http_status is None:
            continue
        out.append(Recorded(e.url, r.http_status, r.http_reason or "", list(r.http_headers or []), r.payload))
    return out


# -- the static limit ----------------------------------------------------------------------------

def _wire(r: Recorded) -> bytes:
    head = [f"HTTP/1.1 {r.status} {r.reason or 'OK'}"]
    head += [f"{k}: {v}" for k, v in r.headers if k.lower() not in HOP]
    head += [f"Content-Length: {len(r.payload)}", "", ""]
    return "\r\n".join(head).encode("latin-1") + r.payload


class _Static(asyncio.Protocol):
    table: dict[bytes, bytes] = {}
    missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    def connection_made(self, transport: Any) -> None:
        self.t = transport
        self.buf = b""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (i := self.buf.find(b"\r\n\r\n")) >= 0:
            head, self.buf = self.buf[:i], self.buf[i + 4:]
            line, _, rest = head.partition(b"\r\n")
            parts = line.split(b" ")
            if len(parts) < 3:
                self.t.close()
                return
            method, target = parts[0], parts[1]
            if method == b"CONNECT":  # browser background HTTPS: refuse, never go upstream
                self.t.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                self.t.close()
                return
            if not target.startswith(b"http"):
                m = re.search(rb"(?im)^host:\s*(\S+)", rest)
                target = b"http://" + (m.group(1) if m else b"") + target
            self.t.write(self.table.get(target, self.missing))


def serve_static_forever(snapshot: str, port: int) -> None:
    """Target of a child process: serve the snapshot's bytes from memory, as an HTTP proxy or origin."""
    _Static.table = {r.url.encode(): _wire(r) for r in snapshot_responses(Path(snapshot))}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Static, "127.0.0.1", port, backlog=512)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- peers installed from PyPI -------------------------------------------------------------------

def ensure_venv(name: str, requirement: str, probe: str) -> Path:
    """``benchmarks/.venvs/<name>`` with ``requirement`` installed; returns its bin folder."""
    venv = VENVS / name
    bin_dir = venv / "bin"
    if (bin_dir / probe).exists():
        return bin_dir
    last = ""
    for py in PYTHONS:
        if not Path(py).exists():
            continue
        subprocess.run([py, "-m", "venv", "--clear", str(venv)], check=True)
        r = subprocess.run([str(bin_dir / "pip"), "install", "-q", requirement], capture_output=True, text=True)
        if r.returncode == 0 and (bin_dir / probe).exists():
            return bin_dir
        last = (r.stderr or r.stdout).strip().splitlines()[-1:] and (r.stderr or r.stdout).strip().splitlines()[-1]
    raise RuntimeError(f"could not install {requirement} into {venv}: {last}")


def tool_version(bin_dir: Path, dist: str) -> str:
    r = subprocess.run([str(bin_dir / "python"), "-c", f"from importlib.metadata import version; print(version('{dist}'))"],
                       capture_output=True, text=True)
    py = subprocess.run([str(bin_dir / "python"), "--version"], capture_output=True, text=True).stdout.strip()
    return f"{r.stdout.strip()} ({py})"


def write_flows(records: Sequence[Recorded], path: Path) -> None:
    """A mitmproxy flows file holding the same exchanges (for ``--server-replay``)."""
    from urllib.parse import urlsplit

    from mitmproxy import connection, http, io

    t = time.time()
    with open(path, "wb") as fh:
        w = io.FlowWriter(fh)
        for r in records:
            u = urlsplit(r.url)
            port = u.port or (443 if u.scheme == "https" else 80)
            req = http.Request(u.hostname or "", port, b"GET", u.scheme.encode(), b"",
                               ((u.path or "/") + (f"?{u.query}" if u.query else "")).encode(), b"HTTP/1.1",
                               http.Headers([(b"Host", u.netloc.encode())]), b"", None, t, t)
            resp = http.Response(b"HTTP/1.1", r.status, r.reason.encode(),
                                 http.Headers([(k.encode(), v.encode("latin-1")) for k, v in r.headers]),
                                 r.payload, None, t, t)
            client = connection.Client(peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2), timestamp_start=t)
            flow = http.HTTPFlow(client, connection.Server(address=(u.hostname or "", port)))
            flow.request, flow.response = req, resp
            w.add(flow)


@dataclass
class Peer:
    """One replay server process on 127.0.0.1:``port``."""

    name: str
    port: int
    argv: list[str] = field(default_factory=list)
    cwd: Path | None = None
    proc: Any = None
    version: str = ""
    log: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # set in the process's environment, over ours

    def start(self) -> Peer:
        assert self.log is not None
        fh = open(self.log, "wb")  # noqa: SIM115 - closed with the process
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        wait_port(self.port, timeout=90)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def ours(snapshot: Path, port: int, duration: float, stats: Path, extra: Sequence[str] = (),
         name: str = "ego2web-replay serve") -> Peer:
    """Our ``serve`` with ``extra`` options (``--engine mitmproxy``, ``--processes 2`` ...)."""
    code = "import sys; from ego2web_replay.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "serve", str(snapshot), "--port", str(port), "--duration", str(duration),
            "--stats", str(stats), *extra]
    from importlib.metadata import version

    return Peer(name, port, argv, cwd=ROOT, version=version("ego2web-replay") + " (this checkout)")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by ``pid`` and every live process below it."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total = 0.0
    for p, t in times.items():
        q = p
        while q > 1 and q != pid:
            q = parents.get(q, 0)
        if q == pid:
            total += t
    return total


def pywb(warc_gz: Path, workdir: Path, port: int) -> Peer:
    bin_dir = ensure_venv("pywb", "pywb", "wayback")
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(bin_dir / "wb-manager"), "init", "bench"], cwd=workdir, check=True, capture_output=True)
    subprocess.run([str(bin_dir / "wb-manager"), "add", "bench", str(warc_gz)], cwd=workdir, check=True,
                   capture_output=True)
    # proxy mode on the archive collection only (never `wayback --proxy`, which adds a live collection);
    # no content rewriting, so it serves the archived bytes like the others.
    (workdir / "config.yaml").write_text("proxy:\n  coll: bench\n  enable_content_rewrite: false\n")
    argv = [str(bin_dir / "wayback"), "-b", "127.0.0.1", "-p", str(port)]
    return Peer("pywb (proxy mode)", port, argv, cwd=workdir, version=tool_version(bin_dir, "pywb"))


def mitmproxy_replay(flows: Path, port: int) -> Peer:
    bin_dir = ensure_venv("mitmproxy", "mitmproxy", "mitmdump")
    argv = [str(bin_dir / "mitmdump"), "-q", "--listen-host", "127.0.0.1", "-p", str(port), "--server-replay", str(flows),
            "--set", "server_replay_extra=kill", "--set", "server_replay_reuse=true",
            "--set", "server_replay_refresh=false", "--set", "connection_strategy=lazy"]
    return Peer("mitmproxy --server-replay", port, argv, version=tool_version(bin_dir, "mitmproxy"))


def static(snapshot: Path, port: int) -> Peer:
    code = ("import sys; sys.path.insert(0, 'benchmarks'); from _peers import serve_static_forever; "
            f"serve_static_forever({str(snapshot)!r}, {port})")
    return Peer("static server (limit)", port, [sys.executable, "-c", code], cwd=ROOT,
                version=f"asyncio, Python {sys.version.split()[0]}")
