"""warcprox, the standard recording proxy, as a peer of our recorder in ``bench_record.py``.

Installed from PyPI into ``benchmarks/.venvs/warcprox`` (git-ignored) on first use and started as its
own process on 127.0.0.1, writing gzip WARCs with its default deduplication (every payload, sqlite
dedup database) into a fresh folder, so that it deduplicates within the one recording, as ours does.

warcprox refuses to fetch from loopback unless its handler's ``allow_localhost`` is set (its own
tests set it), and it would fetch any other host Chromium asks for (Chromium's background calls to
Google): the launcher below sets ``allow_localhost`` and refuses every upstream but loopback, the way
our recorder's guard does in loopback mode. Nothing else of warcprox is changed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from _common import wait_port
from _peers import ensure_venv, tool_version

_LAUNCHER = """
import sys
import warcprox.main
import warcprox.warcproxy as wp

wp.WarcProxyHandler.allow_localhost = True
_connect = wp.WarcProxyHandler._connect_to_remote_server

def _loopback_only(self):
    if self.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ConnectionRefusedError("benchmark: no upstream but loopback")
    return _connect(self)

wp.WarcProxyHandler._connect_to_remote_server = _loopback_only
sys.exit(warcprox.main.main(["warcprox", *sys.argv[1:]]))
"""


class Warcprox:
    """One warcprox process recording into ``folder``; ``url``, ``archive_bytes``, ``exchanges``."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = Path(folder), port
        self.bin = ensure_venv("warcprox", "warcprox", "warcprox")
        self.version = tool_version(self.bin, "warcprox")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Warcprox:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log = open(self.folder / "warcprox.log", "wb")  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(
            [str(self.bin / "python"), "-c", _LAUNCHER, "-b", "127.0.0.1", "-p", str(self.port), "-d", str(self.folder / "warcs"),
             "-z", "-j", str(self.folder / "dedup.sqlite"), "--stats-db-file", "", "-c", str(self.folder / "ca.pem"),
             "--certs-dir", str(self.folder / "certs"), "-q"],
            cwd=self.folder, stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.port, timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()  # warcprox finishes its queue and closes the WARC on SIGTERM
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def _warcs(self) -> list[Path]:
        return sorted((self.folder / "warcs").glob("*.warc.gz*"))

    @property
    def archive_bytes(self) -> int:
        return sum(p.stat().st_size for p in self._warcs())

    def records(self) -> dict[str, int]:
        """Record counts by WARC-Type over its WARCs (read with our reader)."""
        from ego2web_replay.snapshots.reader import iter_records

        counts: dict[str, int] = {}
        for path in self._warcs():
            for record in iter_records(path, tolerate_truncation=True):
                counts[record.rec_type] = counts.get(record.rec_type, 0) + 1
        return counts
