"""A real Ray cluster on this machine for tests and benchmarks: a head node and worker nodes on 127.0.0.1.

Every node is a ``ray start --block`` process started here in its own session,
so it can be stopped (or killed, to test a lost node) by its own process ids
without touching any other Ray on the machine. Usage statistics are off and
the dashboard is not started.

``ray start`` gives a node a fixed 30 s to register with the cluster (Ray 2.60 has no setting for it);
on a busy machine it can give up ("the GCS has become overloaded"). A node that exits before it runs,
or does not run within ``timeout``, is stopped and started again, ``attempts`` times in all, and the
final error names every attempt's last words and its log.
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
from collections.abc import Callable
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


def _session(sid: int) -> list[int]:
    """Live processes of session ``sid``: a node's processes stay in it once ``ray start`` has exited."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else []
            if fields and fields[0] != "Z" and int(fields[3]) == sid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _tree(pid: int) -> list[tuple[int, str | None]]:
    pids = dict.fromkeys([pid, *descendants(pid), *_session(pid)])
    return [(p, _start_time(p)) for p in pids]


def _last_words(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(nothing written)"


class _NotStarted(Exception):
    """One attempt at starting a node failed; the message says how."""


class RayCluster:
    """``start()`` a head; ``add_node()`` workers; ``kill_node(i)``; ``stop()`` everything started here."""

    def __init__(self, head_cpus: float = 1, object_store_mb: int = 100, attempts: int = 3) -> None:
        self.head_cpus = head_cpus
        self.object_store_mb = object_store_mb
        self.attempts = attempts
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

    def _spawn(self, index: int, attempt: int, args: list[str], env: dict[str, str] | None) -> Path:
        """Start node ``index`` (a new one, or again in place of a failed attempt); returns its log."""
        cmd = [self.ray_bin, "start", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats",
               f"--object-store-memory={self.object_store_mb * 1024 * 1024}", *args]
        log_path = self.temp_dir / f"node-{index}-{attempt}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - kept with the node
        scratch = self.temp_dir / f"tmp-{index}-{attempt}"  # what the node's processes leave goes at stop()
        scratch.mkdir(mode=0o700)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**self._env(env), "TMPDIR": str(scratch)},
                                start_new_session=True, preexec_fn=_die_with_parent)
        if index == len(self.nodes):
            self.nodes.append(proc)
        else:
            self.nodes[index] = proc
        return log_path

    def start(self, timeout: float = 120) -> RayCluster:
        def head() -> list[str]:
            if self.nodes:  # a failed head may still hold its port
                self.port = _free_port()
                self.address = f"127.0.0.1:{self.port}"
            return ["--head", f"--port={self.port}", f"--num-cpus={self.head_cpus}", "--include-dashboard=false",
                    f"--temp-dir={self.temp_dir}"]

        self._start_node(head, None, timeout)
        return self

    def add_node(self, cpus: float = 1, env: dict[str, str] | None = None, timeout: float = 120) -> int:
        """Join a worker node (its processes get ``env`` too); returns its index."""
        return self._start_node(lambda: [f"--address={self.address}", f"--num-cpus={cpus}"], env, timeout)

    def _start_node(self, args: Callable[[], list[str]], env: dict[str, str] | None, timeout: float) -> int:
        index, failures = len(self.nodes), []
        for attempt in range(1, self.attempts + 1):
            log = self._spawn(index, attempt, args(), env)
            try:
                self._wait_started(index, log, timeout)
                return index
            except _NotStarted as e:
                failures.append(f"attempt {attempt}: {e} ({log})")
                self.kill_node(index)
        raise RuntimeError(f"Ray node {index} of {self.address} did not start in {self.attempts} attempts: "
                           + "; ".join(failures))

    def _wait_started(self, index: int, log: Path, timeout: float) -> None:
        """Until ``ray start`` says the node runs (it prints that once the node has registered)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"Ray runtime started" in log.read_bytes():
                return
            if self.nodes[index].poll() is not None:
                raise _NotStarted(f"exited early: {_last_words(log)}")
            time.sleep(0.5)
        raise _NotStarted(f"not running after {timeout:.0f}s: {_last_words(log)}")

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

