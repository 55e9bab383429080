"""``serve --processes N``: N worker processes answer on one port, their stats added up.

Each worker is a fresh interpreter (``python -m ego2web_replay.replay.workers``)
that opens the same snapshots, builds its own index and serves the fast engine
(:class:`~.front.FrontServer`) on its own socket bound to the same address with
``SO_REUSEPORT``, so the kernel spreads new connections over the workers. The
parent keeps the port reserved (bound, not listening, so it takes no connection),
talks to each worker over its stdin/stdout (one JSON line of settings in; then
``stats`` asks for its counts, ``stop`` or end of input stops it) and adds the
counts up (:func:`~.responder.merge_stats`). Workers die with the parent
(:mod:`ego2web_replay.lifeline`).

Repeated captures of one request are served in recorded order per worker: a
client whose requests land on different workers sees each worker's own sequence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import ProxyError
from ..models import ReplayConfig, ReplayStats
from ..proxy import ProjectCA
from ..wire.budget import WireLimits
from .front import bind_socket
from .responder import merge_stats

__all__ = ["WorkerPool"]

_START_TIMEOUT = 120.0


class WorkerPool:
    """``processes`` workers serving ``paths`` on ``host:port`` (0: any free port)."""

    def __init__(self, paths: Sequence[Path | str], config: ReplayConfig, *, ca: ProjectCA, host: str, port: int,
                 guard_mode: str, processes: int, index: str | None = None, wire: WireLimits | None = None) -> None:
        self.paths, self.config, self.ca, self.index = [str(p) for p in paths], config, ca, index
        self.wire = wire  # each worker holds these bounds itself (its own cap, budget, timeouts)
        self.host, self.requested_port, self.guard_mode, self.processes = host, port, guard_mode, processes
        self.port: int | None = None
        self._reserve: Any = None
        self._procs: list[subprocess.Popen[str]] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        if self.port is None:
            raise ProxyError("the proxy is not running")
        return f"http://{self.host}:{self.port}"

    def start(self) -> WorkerPool:
        self._reserve = bind_socket(self.host, self.requested_port, reuse_port=True, listen=False)
        self.port = int(self._reserve.getsockname()[1])
        settings = json.dumps({"paths": self.paths, "config": self.config.model_dump(mode="json"),
                               "host": self.host, "port": self.port, "guard_mode": self.guard_mode,
                               "index": self.index, "wire": self.wire.as_dict() if self.wire else None,
                               "ca": [str(self.ca.confdir), str(self.ca.cert_path), self.ca.spki],
                               "parent": os.getpid()})
        try:
            for _ in range(self.processes):
                proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)
                self._procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(settings + "\n")
                proc.stdin.flush()
            for proc in self._procs:
                line = _read_line(proc, _START_TIMEOUT)
                if not line.startswith("ready"):
                    raise ProxyError(f"a replay worker could not start: {line.strip() or 'it exited'}")
        except BaseException:
            self.stop()
            raise
        return self

    def worker_stats(self) -> list[ReplayStats]:
        """Each worker's counts so far."""
        out = []
        with self._lock:
            for proc in self._procs:
                assert proc.stdin is not None
                try:
                    proc.stdin.write("stats\n")
                    proc.stdin.flush()
                    line = _read_line(proc, 30)
                except (OSError, ProxyError):
                    continue  # a worker that died has no counts to add
                if line.strip():
                    out.append(ReplayStats.model_validate_json(line))
        return out

    def stats(self) -> ReplayStats:
        parts = self.worker_stats()
        return merge_stats(parts) if parts else ReplayStats(snapshots=self.paths)

    def stop(self) -> None:
        """Stop every worker and give the port back; safe to call twice."""
        for proc in self._procs:
            try:
                if proc.stdin is not None:
                    proc.stdin.write("stop\n")
                    proc.stdin.close()
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self._procs = []
        if self._reserve is not None:
            self._reserve.close()
            self._reserve = None
        self.port = None


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line of a worker's output, or a ProxyError when it says nothing in time."""
    box: list[str] = []
    stdout = proc.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box:
        raise ProxyError(f"a replay worker (pid {proc.pid}) did not answer within {timeout:.0f} s")
    return box[0]


def _worker(stdin: IO[str], stdout: IO[str]) -> None:
    """A worker's life: open the snapshots, serve until told to stop, answer stats requests."""
    import asyncio

    from ..guard import GuardPolicy
    from ..lifeline import die_with_parent
    from .front import FrontServer, settle_future
    from .session import Replay

    settings = json.loads(stdin.readline())
    die_with_parent(settings["parent"])
    config = ReplayConfig.model_validate(settings["config"])
    confdir, cert, spki = settings["ca"]
    ca = ProjectCA(confdir=Path(confdir), cert_path=Path(cert), spki=spki)
    replay = Replay(settings["paths"], config, ca=ca, check=False,  # the parent has verified them
                    index=settings["index"])
    try:
        replay.open()
        sock = bind_socket(settings["host"], settings["port"], reuse_port=True)
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        stdout.write(f"error {e}\n")
        stdout.flush()
        raise SystemExit(1) from None
    assert replay.responder is not None
    front = FrontServer(replay.responder, ca=ca, host=settings["host"], port=settings["port"],
                        guard=GuardPolicy(mode=settings["guard_mode"]),
                        limits=WireLimits(**settings["wire"]) if settings.get("wire") else None)

    def control(stopping: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()

        def listen() -> None:
            for line in stdin:
                if line.strip() == "stats":
                    assert replay.responder is not None
                    stats = replay.responder.snapshot_stats()
                    stats.refused = dict(front.refused)
                    stdout.write(stats.model_dump_json() + "\n")
                    stdout.flush()
                elif line.strip() == "stop":
                    break
            loop.call_soon_threadsafe(settle_future, stopping)

        threading.Thread(target=listen, daemon=True).start()

    def ready() -> None:
        stdout.write(f"ready {os.getpid()}\n")
        stdout.flush()

    front.serve_forever(sock, on_ready=ready, until=control)
    replay.stop()


if __name__ == "__main__":
    _worker(sys.stdin, sys.stdout)
