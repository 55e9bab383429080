"""A real Ray cluster on this machine for tests and benchmarks: a head node and worker nodes on 127.0.0.1.

Every node is a ``ray start --block`` process started here in its own session,
so it can be stopped (or killed, to test a lost node) by its own process ids
without touching any other Ray on the machine. Usage statistics are off and
the dashboard is not started.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .procs import descendants

__all__ = ["RayCluster"]


def _die_with_parent() -> None:
    """In the node's process: get SIGTERM when the process that started it dies (a killed test run)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill(pids: list[tuple[int, str | None]]) -> None:
    """SIGKILL each (pid, start time) still alive as the same process (never a reused pid)."""
    for pid, started in pids:
        if started is not None and _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _tree(pid: int) -> list[tuple[int, str | None]]:
    return [(p, _start_time(p)) for p in [pid, *descendants(pid)]]


class RayCluster:
    """``start()`` a head; ``add_node()`` workers; ``kill_node(i)``; ``stop()`` everything started here."""

    def __init__(self, head_cpus: float = 1, object_store_mb: int = 100) -> None:
        self.head_cpus = head_cpus
        self.object_store_mb = object_store_mb
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # socket paths must stay short
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.ray_bin = str(Path(sys.executable).with_name("ray"))

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        env.pop("RAY_ADDRESS", None)
        env.update(extra or {})
        return env

    def _spawn(self, args: list[str], env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        cmd = [self.ray_bin, "start", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats",
               f"--object-store-memory={self.object_store_mb * 1024 * 1024}", *args]
        index = len(self.nodes)
        log = open(self.temp_dir / f"node-{index}.log", "wb")  # noqa: SIM115 - kept with the node
        scratch = self.temp_dir / f"tmp-{index}"  # what the node's processes leave (a killed node too) goes at stop()
        scratch.mkdir(mode=0o700)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**self._env(env), "TMPDIR": str(scratch)},
                                start_new_session=True, preexec_fn=_die_with_parent)
        self.nodes.append(proc)
        return proc

    def start(self, timeout: float = 120) -> RayCluster:
        self._spawn(["--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}", "--include-dashboard=false",
                     f"--temp-dir={self.temp_dir}"], None)
        self._wait_started(0, timeout)
        return self

    def add_node(self, cpus: float = 1, env: dict[str, str] | None = None, timeout: float = 120) -> int:
        """Join a worker node (its processes get ``env`` too); returns its index."""
        self._spawn([f"--address={self.address}", f"--num-cpus={cpus}"], env)
        self._wait_started(len(self.nodes) - 1, timeout)
        return len(self.nodes) - 1

    def _wait_started(self, index: int, timeout: float) -> None:
        """Until ``ray start`` says the node runs (it prints that once the node has registered)."""
        log = self.temp_dir / f"node-{index}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"Ray runtime started" in log.read_bytes():
                return
            if self.nodes[index].poll() is not None:
                raise RuntimeError(f"Ray node {index} exited early: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
        raise TimeoutError(f"Ray node {index} of {self.address} not started after {timeout:.0f}s; see {log}")

    def kill_node(self, index: int) -> None:
        """SIGKILL one node: its ``ray start`` process and every process below it (raylet, workers)."""
        proc = self.nodes[index]
        _kill(_tree(proc.pid))
        proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop the workers, then the head (SIGTERM lets ``ray start --block`` stop its own processes)."""
        for proc in reversed(self.nodes):
            tree = _tree(proc.pid)  # taken first: once the node exits its processes belong to init
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            _kill(tree)
            if proc.poll() is None:
                proc.wait(timeout=30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

